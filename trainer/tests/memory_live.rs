//! One config measured in this process under the counting allocator: the trainer's heap
//! high-water mark over a training iteration is within 3% of core's prediction.

use candle_core::{Device, Tensor};
use vramfit::mem::{self, CountingAlloc};
use vramfit::model::{Gpt, HostRng, ModelOptions};
use vramfit::optim::{AdamW, AdamWSettings};
use vramfit_core::trainer_model::{simulate, TrainerOptions};
use vramfit_core::Config;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn iteration(model: &Gpt, cfg: &Config, optimizer: &mut AdamW, rng: &mut HostRng) {
    let (b, t) = (cfg.batch_size as usize, cfg.block_size as usize);
    let mut ids = || -> Vec<u32> { (0..b * t).map(|_| (rng.next_u64() % u64::from(cfg.vocab_size)) as u32).collect() };
    let x = Tensor::from_vec(ids(), (b, t), &Device::Cpu).unwrap();
    let y = Tensor::from_vec(ids(), (b, t), &Device::Cpu).unwrap();
    let (_, grads) = model.loss_and_grads(&x, &y, 5).unwrap();
    drop((x, y));
    optimizer.step(model.params(), &grads, 1e-3).unwrap();
}

#[test]
fn measured_training_peak_is_within_3_percent_of_core() {
    let cfg = Config {
        n_layer: 3,
        n_head: 4,
        n_embd: 128,
        block_size: 128,
        vocab_size: 2048,
        batch_size: 4,
        gradient_accumulation_steps: 1,
        dropout: 0.1,
        ..Config::default()
    };
    let settings = AdamWSettings { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 };
    // Before any candle op: gemm's per-thread buffers are part of what core predicts.
    let baseline = mem::live();
    let model = Gpt::new(&cfg, ModelOptions::default(), &Device::Cpu, 1).unwrap();
    let mut optimizer = AdamW::new(model.params(), settings);
    let mut rng = HostRng::new(2);
    iteration(&model, &cfg, &mut optimizer, &mut rng);
    mem::reset_peak();
    iteration(&model, &cfg, &mut optimizer, &mut rng);
    assert!(mem::installed());
    let measured = mem::peak() - baseline;
    let opts = TrainerOptions {
        cpu_threads: candle_core::utils::get_num_threads() as u32,
        gemm_kernel_rows: vramfit::preflight::gemm_kernel_rows(),
        cpu_caches: vramfit::preflight::cpu_caches(),
        ..TrainerOptions::default()
    };
    let predicted = simulate(&cfg, &opts).train.bytes;
    let err = (predicted as f64 - measured as f64) / measured as f64;
    eprintln!("live: predicted {predicted}, measured {measured} ({:+.3}%)", err * 100.0);
    assert!(err.abs() < 0.03, "predicted {predicted}, measured {measured} ({:+.2}%)", err * 100.0);
}
