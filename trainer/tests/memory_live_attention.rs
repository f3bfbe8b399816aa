//! A measurement of its own process (the counting allocator's counters and gemm's per-thread
//! buffers are process-wide, so it cannot share one with `memory_live.rs`): attention's backward
//! as candle ops, against core's prediction.

use candle_core::{Device, Tensor};
use vramfit::mem::{self, CountingAlloc};
use vramfit::model::{Gpt, HostRng, ModelOptions};
use vramfit::optim::{AdamW, AdamWSettings};
use vramfit_core::trainer_model::{simulate, TrainerOptions};
use vramfit_core::Config;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Mixed precision runs attention as candle ops (`attention_plain` and its backward: the path CUDA
/// takes), here in f16 on the CPU with dropout and checkpointing, at a context long enough that
/// attention's [B, H, T, T] tensors set the backward's peak. Found on an H100: the backward kept
/// the unmasked score gradient alive beside the masked one, one such tensor over the model (on the
/// code before the fix this test measures 3.0% over the prediction and fails; after it, 0.2-0.3%).
#[test]
fn attention_backward_with_dropout_frees_what_core_frees() {
    let cfg = Config {
        n_layer: 2,
        n_head: 4,
        n_embd: 128,
        block_size: 256,
        vocab_size: 64,
        batch_size: 2,
        gradient_accumulation_steps: 1,
        dropout: 0.1,
        activation_checkpointing: true,
        ..Config::default()
    };
    let settings = AdamWSettings { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 };
    let scale = vramfit::optim::LossScaler::INIT_SCALE;
    let baseline = mem::live();
    let opts = ModelOptions { activation_checkpointing: true, ..ModelOptions::default() };
    let model = Gpt::new_mixed(&cfg, opts, &Device::Cpu, 1, candle_core::DType::F16).unwrap();
    let mut optimizer = AdamW::new(model.params(), settings);
    let mut rng = HostRng::new(3);
    // As train.rs runs an f16 iteration: scaled loss, gradients unscaled, the overflow check, AdamW.
    let mut f16_iteration = |optimizer: &mut AdamW| {
        let (b, t) = (cfg.batch_size as usize, cfg.block_size as usize);
        let mut ids = || -> Vec<u32> { (0..b * t).map(|_| (rng.next_u64() % u64::from(cfg.vocab_size)) as u32).collect() };
        let x = Tensor::from_vec(ids(), (b, t), &Device::Cpu).unwrap();
        let y = Tensor::from_vec(ids(), (b, t), &Device::Cpu).unwrap();
        let seed = rng.next_u64();
        let (_, mut acc) = model.loss_and_grads_scaled(&x, &y, seed, scale).unwrap();
        drop((x, y));
        acc = acc.iter().map(|g| g * (1.0 / scale)).collect::<candle_core::Result<Vec<_>>>().unwrap();
        vramfit::optim::grad_norm(&acc).unwrap();
        optimizer.step(model.params(), &acc, 1e-3).unwrap();
    };
    f16_iteration(&mut optimizer);
    mem::reset_peak();
    f16_iteration(&mut optimizer);
    let measured = mem::peak() - baseline;
    let trainer_opts = TrainerOptions {
        cpu_threads: candle_core::utils::get_num_threads() as u32,
        gemm_kernel_rows: vramfit::preflight::gemm_kernel_rows(),
        cpu_caches: vramfit::preflight::cpu_caches(),
        mixed_precision: Some(vramfit_core::Dtype::Float16),
        ..TrainerOptions::default()
    };
    let sim = simulate(&cfg, &trainer_opts);
    let (predicted, at) = (sim.train.bytes, format!("{:?} {}", sim.train.phase, sim.train.op));
    let err = (predicted as f64 - measured as f64) / measured as f64;
    eprintln!("f16 attention: predicted {predicted} at {at}, measured {measured} ({:+.3}%)", err * 100.0);
    assert!(err.abs() < 0.01, "predicted {predicted} at {at}, measured {measured} ({:+.2}%)", err * 100.0);
}
