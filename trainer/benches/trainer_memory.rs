//! Measured vs predicted memory of the trainer on CPU: for each config, real micro-steps,
//! gradient accumulation, clipping and AdamW steps (as `train.rs` does them) and eval batches run
//! under the counting allocator; each window's heap high-water mark (minus what was live before the
//! model existed) is printed next to `vramfit_core::trainer_model`'s prediction.
//!
//! Run: `RAYON_NUM_THREADS=1 cargo test -p vramfit --bench trainer_memory` (add `-- --json` for the
//! rows committed in tests/reference/data/trainer-cpu.json; `RAYON_NUM_THREADS=2` for two threads).
//! Each config runs in a fresh child process, so one-time heap (gemm's per-thread buffers) counts.
//! `-- --mixed`: the f16 mixed-precision configs instead (trainer-cpu-f16.json).
//! `-- --random SEED N`: N small configs drawn at random instead (with `--mixed`, in f16), an
//! out-of-sample check of the model, which was built against the fixed configs.
//! `-- --cuda f32|bf16|f16` (a build with `--features cuda`, on a GPU): the f32 configs on CUDA
//! device 0, in f32 or mixed precision, measured by the CUDA memory pool's high-water mark
//! ([`vramfit::gpu_mem`]) instead of the heap (trainer-cuda-*.json).
//! Tools for keeping core in step with model.rs: `-- --trace I` lines up config I's allocations in
//! a steady iteration (with `TRACE_EVAL=1`, in the eval after it) with core's events;
//! `-- --probe-gemm` and `-- --probe-f16` print what one matmul allocates beyond its output.

use candle_core::{Device, Tensor};
use vramfit::gpu_mem;
use vramfit::mem::{self, CountingAlloc};
use vramfit::model::{Gpt, HostRng, ModelOptions};
use vramfit::optim::{clip_grad_norm, AdamW, AdamWSettings};
use vramfit_core::trainer_model::{self, TrainerOptions};
use vramfit_core::Config;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[derive(Clone)]
struct Case {
    name: String,
    cfg: Config,
    opts: TrainerOptions,
}

/// The configs measured: f32 ones (tests/reference/data/trainer-cpu.json), or with `--mixed` f16
/// mixed precision ones (trainer-cpu-f16.json).
fn cases() -> Vec<Case> {
    if let Some(dtype) = cuda_dtype() {
        return cuda_cases(dtype);
    }
    let mixed = std::env::args().any(|a| a == "--mixed");
    if let Some((seed, n)) = random_spec() {
        return random_cases(seed, n, mixed);
    }
    if mixed {
        mixed_cases()
    } else {
        f32_cases()
    }
}

/// `--random SEED N`; a malformed one is an error, not a silent run of the fixed configs.
fn random_spec() -> Option<(u64, usize)> {
    if !std::env::args().any(|a| a == "--random") {
        return None;
    }
    let mut after = std::env::args().skip_while(|a| a != "--random").skip(1);
    let seed = after.next().and_then(|v| v.parse().ok());
    let n = after.next().and_then(|v| v.parse().ok());
    match (seed, n) {
        (Some(seed), Some(n)) => Some((seed, n)),
        _ => {
            eprintln!("error: --random takes a seed and a count of configs (whole numbers), e.g. --random 2 30");
            std::process::exit(2)
        }
    }
}

/// N configs drawn from a seed (a 64-bit LCG, Knuth's MMIX constants: the same seed draws the
/// same configs on any machine), small enough to train in seconds on the CPU: 1-4 layers, 1-6
/// heads of 8-48 dimensions, blocks of 4-256, batches of 1-8, vocabularies of 2-8192, bias,
/// dropout, 1-3 micro-steps, checkpointing, an eval batch or block of its own, the chunked
/// loss, eval chunks and clipping, each some of the time.
fn random_cases(seed: u64, n: usize, mixed: bool) -> Vec<Case> {
    let mut state = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = move |below: u64| -> u64 {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % below
    };
    let defaults = f32_cases().remove(0).opts;
    (0..n)
        .map(|i| {
            let n_head = [1u32, 2, 3, 4, 6][next(5) as usize];
            let head_dim = [8u32, 16, 24, 32, 48][next(5) as usize];
            let block_size = 4 + next(253) as u32;
            let batch_size = 1 + next(8) as u32;
            let vocab_size = [65, 2 + next(8191) as u32, 8192][next(3) as usize];
            let eval_batch_size = (next(4) == 0).then(|| 1 + next(12) as u32);
            let eval_block_size = (next(4) == 0).then(|| 1 + next(u64::from(block_size)) as u32);
            let cfg = Config {
                n_layer: 1 + next(4) as u32,
                n_head,
                n_embd: n_head * head_dim,
                block_size,
                vocab_size,
                bias: next(2) == 0,
                dropout: if next(4) == 0 { 0.1 } else { 0.0 },
                batch_size,
                gradient_accumulation_steps: 1 + next(3) as u32,
                eval_batch_size,
                eval_block_size,
                activation_checkpointing: next(4) == 0,
                ..Config::default()
            };
            let opts = TrainerOptions {
                chunked_loss: next(4) == 0,
                // Rows of whole sequences: 1 to all of the eval batch's.
                eval_chunk_rows: (next(4) == 0).then(|| u64::from(cfg.eval_block()) * (1 + next(u64::from(cfg.eval_batch())))),
                grad_clip: next(2) == 0,
                mixed_precision: mixed.then_some(vramfit_core::Dtype::Float16),
                ..defaults
            };
            let name = format!(
                "r{seed}-{i:02} L{}H{}C{} T{} B{} V{}",
                cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size, cfg.batch_size, cfg.vocab_size
            );
            Case { name, cfg, opts }
        })
        .collect()
}

/// Mixed precision as `vramfit train --device cuda --dtype float16` runs it: candle's CPU backend
/// runs the same f16 ops, with the same tensors, so the allocations can be counted here. (bf16 is
/// not measured: candle widens CPU bf16 matmuls to f32 copies, which CUDA does not.)
fn mixed_cases() -> Vec<Case> {
    let f16 = |c: Case| Case { opts: TrainerOptions { mixed_precision: Some(vramfit_core::Dtype::Float16), ..c.opts }, ..c };
    let all = f32_cases();
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 11].into_iter().filter_map(|i| all.get(i).cloned()).map(f16).collect()
}

/// `--cuda f32|bf16|f16`: `Some(None)` for f32, `Some(Some(dtype))` for mixed precision.
fn cuda_dtype() -> Option<Option<vramfit_core::Dtype>> {
    let arg = std::env::args().skip_while(|a| a != "--cuda").nth(1)?;
    match arg.as_str() {
        "f32" => Some(None),
        "bf16" => Some(Some(vramfit_core::Dtype::Bfloat16)),
        "f16" => Some(Some(vramfit_core::Dtype::Float16)),
        other => {
            eprintln!("error: --cuda takes f32, bf16 or f16, not {other:?}");
            std::process::exit(2)
        }
    }
}

/// The f32 configs as `vramfit train --device cuda` runs them: candle's op-by-op compositions
/// (the fused kernels are CPU-only), cuBLAS, and mixed precision for bf16 and f16.
fn cuda_cases(dtype: Option<vramfit_core::Dtype>) -> Vec<Case> {
    let cuda =
        |c: Case| Case { opts: TrainerOptions { unfused_ops: true, cuda: true, mixed_precision: dtype, cpu_threads: 0, ..c.opts }, ..c };
    f32_cases().into_iter().map(cuda).collect()
}

/// The device the cases run on: CUDA device 0 with `--cuda`, else the CPU.
fn device() -> Device {
    if cuda_dtype().is_none() {
        return Device::Cpu;
    }
    match Device::new_cuda(0) {
        Ok(device) => device,
        Err(e) => {
            eprintln!("error: --cuda: {e}");
            std::process::exit(2)
        }
    }
}

fn f32_cases() -> Vec<Case> {
    let base = Config {
        n_layer: 4,
        n_head: 4,
        n_embd: 128,
        block_size: 128,
        vocab_size: 65,
        bias: false,
        dropout: 0.0,
        batch_size: 8,
        gradient_accumulation_steps: 1,
        eval_batch_size: None,
        eval_block_size: None,
        ..Config::default()
    };
    let o = TrainerOptions {
        gemm_kernel_rows: vramfit::preflight::gemm_kernel_rows(),
        cpu_caches: vramfit::preflight::cpu_caches(),
        ..TrainerOptions::default()
    };
    let c = |name: &str, cfg: Config, opts: TrainerOptions| Case { name: name.to_string(), cfg, opts };
    vec![
        c("char 4L C128 T128 B8", base.clone(), o),
        c("+ bias", Config { bias: true, ..base.clone() }, o),
        c("+ dropout 0.1", Config { dropout: 0.1, ..base.clone() }, o),
        c("GA 3", Config { gradient_accumulation_steps: 3, ..base.clone() }, o),
        c("checkpointing", Config { activation_checkpointing: true, ..base.clone() }, o),
        c("ckpt + dropout + bias", Config { activation_checkpointing: true, dropout: 0.2, bias: true, ..base.clone() }, o),
        c("T256 B4 H8", Config { block_size: 256, batch_size: 4, n_head: 8, ..base.clone() }, TrainerOptions { grad_clip: true, ..o }),
        c("BPE vocab 8192", Config { vocab_size: 8192, n_layer: 2, ..base.clone() }, o),
        c(
            "vocab 16384 B16, chunked loss (2 chunks)",
            Config { vocab_size: 16384, n_layer: 2, batch_size: 16, ..base.clone() },
            TrainerOptions { chunked_loss: true, ..o },
        ),
        c(
            "vocab 50304 C64, chunked + ckpt, GA 2",
            Config {
                vocab_size: 50304,
                n_embd: 64,
                n_layer: 2,
                activation_checkpointing: true,
                gradient_accumulation_steps: 2,
                ..base.clone()
            },
            TrainerOptions { chunked_loss: true, grad_clip: true, ..o },
        ),
        c(
            "eval B16 in chunks of 512 rows",
            Config { eval_batch_size: Some(16), ..base.clone() },
            TrainerOptions { eval_chunk_rows: Some(512), ..o },
        ),
        c(
            "6L C192 T192 B6 bias dropout GA 2",
            Config {
                n_layer: 6,
                n_embd: 192,
                n_head: 6,
                block_size: 192,
                batch_size: 6,
                bias: true,
                dropout: 0.1,
                gradient_accumulation_steps: 2,
                ..base.clone()
            },
            TrainerOptions { grad_clip: true, ..o },
        ),
        c(
            "vocab 50304 C256 T256 B8, whole loss",
            Config { vocab_size: 50304, n_embd: 256, block_size: 256, ..base.clone() },
            TrainerOptions { grad_clip: true, ..o },
        ),
        c(
            "vocab 50304 C384 T256 B8 GA 2, chunked loss",
            Config {
                vocab_size: 50304,
                n_embd: 384,
                n_head: 6,
                n_layer: 2,
                block_size: 256,
                gradient_accumulation_steps: 2,
                ..base.clone()
            },
            TrainerOptions { chunked_loss: true, grad_clip: true, ..o },
        ),
        c(
            "nanoGPT shakespeare_char (6L C384 T256 B64)",
            Config { n_layer: 6, n_head: 6, n_embd: 384, block_size: 256, batch_size: 64, dropout: 0.2, ..base.clone() },
            TrainerOptions { grad_clip: true, ..o },
        ),
    ]
}

fn batch(cfg: &Config, b: usize, t: usize, rng: &mut HostRng, device: &Device) -> (Tensor, Tensor) {
    let mut ids = || -> Vec<u32> { (0..b * t).map(|_| (rng.next_u64() % u64::from(cfg.vocab_size)) as u32).collect() };
    let x = Tensor::from_vec(ids(), (b, t), device).expect("batch");
    let y = Tensor::from_vec(ids(), (b, t), device).expect("batch");
    (x, y)
}

fn compute_dtype(opts: &TrainerOptions) -> candle_core::DType {
    match opts.mixed_precision {
        Some(vramfit_core::Dtype::Float16) => candle_core::DType::F16,
        Some(vramfit_core::Dtype::Bfloat16) => candle_core::DType::BF16,
        _ => candle_core::DType::F32,
    }
}

/// One training iteration as train.rs runs it; returns nothing, the allocator measures.
fn iteration(model: &Gpt, cfg: &Config, opts: &TrainerOptions, optimizer: &mut AdamW, rng: &mut HostRng) {
    let device = model.device();
    let (b, t) = (cfg.batch_size as usize, cfg.block_size as usize);
    let ga = cfg.gradient_accumulation_steps.max(1);
    let mut acc: Vec<Tensor> = Vec::new();
    // f16: train.rs's loss scaling (GradScaler's initial scale), its unscaling and overflow check.
    let loss_scale = if compute_dtype(opts) == candle_core::DType::F16 { vramfit::optim::LossScaler::INIT_SCALE } else { 1.0 };
    for _ in 0..ga {
        let (x, y) = batch(cfg, b, t, rng, &device);
        let (_, grads) = model.loss_and_grads_scaled(&x, &y, rng.next_u64(), loss_scale).expect("step");
        drop((x, y));
        acc = if acc.is_empty() {
            grads
        } else {
            acc.iter().zip(&grads).map(|(a, g)| a + g).collect::<candle_core::Result<Vec<_>>>().expect("acc")
        };
    }
    if ga > 1 || loss_scale != 1.0 {
        let inv = 1.0 / (f64::from(ga) * loss_scale);
        acc = acc.iter().map(|g| g * inv).collect::<candle_core::Result<Vec<_>>>().expect("mean");
    }
    if loss_scale != 1.0 {
        vramfit::optim::grad_norm(&acc).expect("overflow check");
    }
    if opts.grad_clip {
        clip_grad_norm(&mut acc, 1.0).expect("clip");
    }
    optimizer.step(model.params(), &acc, 1e-3).expect("adamw");
    drop(acc);
}

fn eval(model: &Gpt, cfg: &Config, rng: &mut HostRng) {
    let device = model.device();
    let (x, y) = batch(cfg, cfg.eval_batch() as usize, cfg.eval_block() as usize, rng, &device);
    model.eval_loss(&x, &y).expect("eval");
}

/// The high-water mark of `window` above `baseline`: heap bytes on the CPU, the CUDA pool's used
/// bytes on a GPU (after the queued kernels have finished).
fn measure(window: impl FnOnce(), baseline: u64, device: &Device) -> u64 {
    if device.is_cpu() {
        mem::reset_peak();
        window();
        return mem::peak().saturating_sub(baseline);
    }
    gpu_mem::reset_peak(device).expect("the CUDA pool's counters");
    window();
    gpu_mem::bytes(device).expect("the CUDA pool's counters").used_high.saturating_sub(baseline)
}

/// Extra bytes one matmul allocates beyond its output (gemm's packing buffers), by shape.
fn probe_gemm() {
    for (m, k, n, rhs_t) in [
        (1024, 128, 65, true),
        (1024, 128, 8192, true),
        (1024, 64, 50304, true),
        (1024, 128, 384, true),
        (1024, 128, 512, true),
        (1024, 512, 128, true),
        (128, 1024, 512, false),
        (512, 1024, 128, false),
        (1024, 128, 128, false),
        (1024, 32, 128, false),
        (128, 32, 128, false),
        (1024, 128, 1024, true),
    ] {
        let a = Tensor::ones((m, k), candle_core::DType::F32, &Device::Cpu).unwrap();
        let b = if rhs_t {
            Tensor::ones((n, k), candle_core::DType::F32, &Device::Cpu).unwrap()
        } else {
            Tensor::ones((k, n), candle_core::DType::F32, &Device::Cpu).unwrap()
        };
        let bb = if rhs_t { b.t().unwrap() } else { b.clone() };
        let before = mem::live();
        mem::reset_peak();
        let c = a.matmul(&bb).unwrap();
        let extra = mem::peak() - before - (m * n * 4) as u64;
        println!("gemm m{m} k{k} n{n} rhs_t {rhs_t}: extra {extra} bytes = k*n*4 x {:.3}", extra as f64 / (k * n * 4) as f64);
        drop(c);
    }
    // The loss head's wte gradient, dlogits^T @ h: a transposed (strided) left operand of V rows.
    for (rows, v, c) in [(2048, 65, 256), (2048, 8192, 256), (2048, 50304, 256), (2048, 50304, 128), (1024, 50304, 384)] {
        let dlogits = Tensor::ones((rows, v), candle_core::DType::F32, &Device::Cpu).unwrap();
        let h = Tensor::ones((rows, c), candle_core::DType::F32, &Device::Cpu).unwrap();
        let before = mem::live();
        mem::reset_peak();
        let part = dlogits.t().unwrap().matmul(&h).unwrap();
        let extra = mem::peak() - before - (v * c * 4) as u64;
        println!("dlogits^T @ h rows{rows} V{v} C{c}: extra {extra} bytes = rows*V*4 x {:.3}", extra as f64 / (rows * v * 4) as f64);
        drop(part);
    }
}

/// `--trace I`: lines up the allocations of case I's steady iteration with core's event list and
/// prints where they first differ (a tool for keeping core in step with model.rs).
fn trace_case(i: usize) {
    let Some(Case { cfg, opts, .. }) = cases().into_iter().nth(i) else { return };
    let model_opts = ModelOptions {
        activation_checkpointing: cfg.activation_checkpointing,
        chunked_loss: opts.chunked_loss,
        eval_chunk_rows: opts.eval_chunk_rows.map(|r| r as usize),
    };
    let model = Gpt::new_mixed(&cfg, model_opts, &Device::Cpu, 1, compute_dtype(&opts)).expect("model");
    let mut optimizer = AdamW::new(model.params(), AdamWSettings { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 });
    let mut rng = HostRng::new(2);
    let eval_only = std::env::var("TRACE_EVAL").is_ok();
    iteration(&model, &cfg, &opts, &mut optimizer, &mut rng);
    let min: i64 = std::env::var("TRACE_MIN").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    mem::trace_start(min as u64);
    if eval_only {
        eval(&model, &cfg, &mut rng);
    } else {
        iteration(&model, &cfg, &opts, &mut optimizer, &mut rng);
    }
    let real = mem::trace_stop();
    let (_, timeline) = trainer_model::simulate_with_timeline(&cfg, &opts);
    let is_eval =
        |p: &vramfit_core::sim::TimelinePoint| matches!(p.phase, vramfit_core::Phase::EvalForward | vramfit_core::Phase::EvalLoss);
    let (start, end) = if eval_only {
        // The eval window after the first iteration: the second run of eval phases.
        let first_end = timeline.iter().position(|p| !is_eval(p) && p.phase != vramfit_core::Phase::Init).unwrap_or(0);
        let start = timeline[first_end..].iter().position(is_eval).map_or(0, |i| i + first_end);
        let end = timeline[start..].iter().position(|p| !is_eval(p)).map_or(timeline.len(), |i| i + start);
        (start, end)
    } else {
        (timeline.iter().rposition(is_eval).map_or(0, |i| i + 1), timeline.len())
    };
    let mut predicted = Vec::new();
    for w in timeline[start.saturating_sub(1)..end].windows(2) {
        let d = w[1].live_bytes as i64 - w[0].live_bytes as i64;
        if d.abs() >= min {
            predicted.push((d, w[1].op.to_string()));
        }
    }
    // Transient pairs (an allocation freed right away, like gemm's packing buffers) say nothing
    // about the peak: drop them from both lists before lining them up.
    fn cancel_pairs<T: Clone>(events: &[(i64, T)]) -> Vec<(i64, T)> {
        let mut out: Vec<(i64, T)> = Vec::new();
        for e in events {
            if out.last().is_some_and(|l| l.0 > 0 && l.0 == -e.0) {
                out.pop();
            } else {
                out.push(e.clone());
            }
        }
        out
    }
    let cancel = std::env::var("TRACE_RAW").is_err();
    let real: Vec<i64> =
        if !cancel { real } else { cancel_pairs(&real.iter().map(|&v| (v, ())).collect::<Vec<_>>()).into_iter().map(|e| e.0).collect() };
    let predicted = if cancel { cancel_pairs(&predicted) } else { predicted };
    let first_diff = real.iter().zip(&predicted).position(|(r, (p, _))| r != p).unwrap_or(real.len().min(predicted.len()));
    println!("real events {}, predicted {}, first difference at {first_diff}", real.len(), predicted.len());
    let from = first_diff.saturating_sub(8);
    let span: usize = std::env::var("TRACE_SPAN").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    for k in from..(first_diff + span) {
        let r = real.get(k).map_or(String::new(), |v| v.to_string());
        let (p, op) = predicted.get(k).map_or((String::new(), String::new()), |(v, op)| (v.to_string(), op.clone()));
        println!("{k:>6} {r:>12} {p:>12} {op}");
    }
}

/// `--probe-once`: heap that stays allocated after a whole run is dropped (thread-local buffers,
/// pools): a one-time cost of the process, not of the model.
fn probe_once() {
    let default_run = Config {
        n_layer: 2,
        n_head: 4,
        n_embd: 64,
        block_size: 64,
        vocab_size: 65,
        batch_size: 16,
        gradient_accumulation_steps: 1,
        ..Config::default()
    };
    let cfg = match std::env::var("PROBE_CASE").ok().and_then(|v| v.parse::<usize>().ok()) {
        Some(i) => cases().into_iter().nth(i).map_or(default_run, |c| c.cfg),
        None => default_run,
    };
    for round in 0..3 {
        mem::trace_start(4096);
        let before = mem::live();
        mem::reset_peak();
        let model = Gpt::new(&cfg, ModelOptions::default(), &Device::Cpu, 1).expect("model");
        let mut optimizer = AdamW::new(model.params(), AdamWSettings { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 });
        let mut rng = HostRng::new(1);
        eval(&model, &cfg, &mut rng);
        iteration(&model, &cfg, &TrainerOptions::default(), &mut optimizer, &mut rng);
        iteration(&model, &cfg, &TrainerOptions::default(), &mut optimizer, &mut rng);
        drop((model, optimizer));
        let opts = TrainerOptions {
            gemm_kernel_rows: vramfit::preflight::gemm_kernel_rows(),
            cpu_caches: vramfit::preflight::cpu_caches(),
            cpu_threads: candle_core::utils::get_num_threads() as u32,
            ..TrainerOptions::default()
        };
        let predicted = trainer_model::peak_bytes(&trainer_model::simulate(&cfg, &opts));
        let events = mem::trace_stop();
        let mut open: Vec<i64> = Vec::new();
        for e in events {
            if e > 0 {
                open.push(e);
            } else if let Some(i) = open.iter().rposition(|&o| o == -e) {
                open.remove(i);
            }
        }
        println!("round {round}: unmatched allocations >= 4 KiB: {open:?}");
        println!(
            "round {round}: left allocated {} bytes; peak {} vs predicted {predicted}",
            mem::live() as i64 - before as i64,
            mem::peak() - before
        );
    }
}

fn probe_f16() {
    use candle_core::DType;
    for (dims_a, dims_b) in [
        (vec![8, 4, 128, 32], vec![8, 4, 32, 128]),
        (vec![1024, 128], vec![128, 384]),
        (vec![8, 4, 128, 128], vec![8, 4, 128, 32]),
        (vec![1024, 512], vec![512, 128]),
        (vec![1152, 768], vec![768, 192]),
        (vec![1152, 192], vec![192, 768]),
        (vec![4096, 192], vec![192, 768]),
        (vec![2048, 1024], vec![1024, 256]),
        (vec![192, 1152], vec![1152, 768]),
    ] {
        let a = Tensor::ones(dims_a.as_slice(), DType::F16, &Device::Cpu).unwrap();
        let b = Tensor::ones(dims_b.as_slice(), DType::F16, &Device::Cpu).unwrap();
        let before = mem::live();
        mem::reset_peak();
        let c = a.matmul(&b).unwrap();
        let out = c.elem_count() as u64 * 2;
        println!("f16 matmul {dims_a:?} x {dims_b:?}: extra {} bytes", mem::peak() - before - out);
        let before = mem::live();
        mem::reset_peak();
        let s = candle_nn::ops::softmax_last_dim(&c).unwrap();
        println!("  softmax extra {}", mem::peak() - before - out);
        drop(s);
    }
}

/// `--probe-dropout` (on a GPU): the masks CUDA draws ([`vramfit::dropout_cuda`]) against the
/// host's formula, element by element, for a few seeds, sizes and probabilities.
fn probe_dropout() {
    let device = match Device::new_cuda(0) {
        Ok(device) => device,
        Err(e) => return eprintln!("error: --probe-dropout needs a CUDA device: {e}"),
    };
    let anchor = Tensor::zeros(1, candle_core::DType::F32, &device).expect("anchor");
    let mut all_equal = true;
    for (seed, p, n) in [(1u64, 0.1, 1usize), (0xDEAD_BEEF, 0.2, 12_345), (u64::MAX - 7, 0.5, 1 << 20), (7, 0.9, 3 << 22)] {
        let scale = (1.0 / (1.0 - p)) as f32;
        let started = std::time::Instant::now();
        let mask = vramfit::dropout_cuda::mask(&anchor, seed, p, scale, &[n]).expect("on CUDA").expect("mask");
        let got: Vec<f32> = mask.to_vec1().expect("copy back");
        let secs = started.elapsed().as_secs_f64();
        let differ = got
            .iter()
            .enumerate()
            .filter(|&(i, &v)| v.to_bits() != vramfit::dropout_cuda::element(seed, i as u64, p, scale).to_bits())
            .count();
        let dropped = got.iter().filter(|&&v| v == 0.0).count() as f64 / n as f64;
        println!("dropout mask seed {seed:#x} p {p} n {n}: {differ} elements differ from the host's, {dropped:.4} dropped, {:.1} ms with the copy back", secs * 1e3);
        all_equal &= differ == 0;
    }
    println!("dropout masks: {}", if all_equal { "identical to the host's" } else { "DIFFERENT from the host's" });
}

/// `--probe-adamw` (on a GPU): one fused AdamW step on CUDA (`cuda_kernels`) against the same step
/// on the CPU, element by element, for a few sizes and both parameter groups.
fn probe_adamw() {
    let device = match Device::new_cuda(0) {
        Ok(device) => device,
        Err(e) => return eprintln!("error: --probe-adamw needs a CUDA device: {e}"),
    };
    let mut rng = HostRng::new(5);
    let mut all_equal = true;
    for (n, decay) in [(1usize, 1.0f32), (1000, 0.9999), (1 << 20, 0.9999), (38_633_472, 1.0)] {
        let mut draw = |scale: f64| -> Vec<f32> { (0..n).map(|_| (rng.normal() * scale) as f32).collect() };
        let (p, g, m) = (draw(0.02), draw(0.01), draw(0.001));
        let v: Vec<f32> = draw(0.001).iter().map(|x| x * x).collect();
        let k = vramfit::fused::AdamWStep {
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            decay,
            step_size: 6e-4 / 0.1,
            bias_correction2_sqrt: 0.05f32.sqrt(),
        };
        let mut results = Vec::new();
        for dev in [&Device::Cpu, &device] {
            let t = |x: &Vec<f32>| Tensor::from_vec(x.clone(), n, dev).expect("tensor");
            let (tp, tg, tm, tv) = (t(&p), t(&g), t(&m), t(&v));
            let started = std::time::Instant::now();
            vramfit::fused::adamw_step(&tp, &tg, &tm, &tv, k).expect("fused on this device").expect("step");
            dev.synchronize().expect("sync");
            let secs = started.elapsed().as_secs_f64();
            let back = |x: &Tensor| x.to_vec1::<f32>().expect("copy back");
            results.push(((back(&tp), back(&tm), back(&tv)), secs));
        }
        let ((cp, cm, cv), cpu_s) = &results[0];
        let ((gp, gm, gv), gpu_s) = &results[1];
        let differ = |a: &[f32], b: &[f32]| a.iter().zip(b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
        let (dp, dm, dv) = (differ(cp, gp), differ(cm, gm), differ(cv, gv));
        println!(
            "adamw n {n} decay {decay}: elements differing from the CPU's: p {dp}, m {dm}, v {dv}; CPU {:.2} ms, CUDA {:.3} ms",
            cpu_s * 1e3,
            gpu_s * 1e3
        );
        all_equal &= dp + dm + dv == 0;
    }
    println!("adamw on CUDA: {}", if all_equal { "identical to the CPU's" } else { "DIFFERENT from the CPU's" });
}

fn main() {
    if std::env::args().any(|a| a == "--probe-dropout") {
        return probe_dropout();
    }
    if std::env::args().any(|a| a == "--probe-adamw") {
        return probe_adamw();
    }
    if std::env::args().any(|a| a == "--probe-f16") {
        return probe_f16();
    }
    if std::env::args().any(|a| a == "--probe-once") {
        return probe_once();
    }
    if std::env::args().any(|a| a == "--probe-gemm") {
        return probe_gemm();
    }
    if let Some(i) = std::env::args().skip_while(|a| a != "--trace").nth(1).and_then(|v| v.parse().ok()) {
        return trace_case(i);
    }
    if let Some(i) = std::env::args().skip_while(|a| a != "--case").nth(1).and_then(|v| v.parse::<usize>().ok()) {
        return measure_case(i);
    }
    let json = std::env::args().any(|a| a == "--json");
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return eprintln!("error: cannot find this bench's executable: {e}"),
    };
    let mut rows = Vec::new();
    println!(
        "{:<40} {:>10} {:>10} {:>8}   {:>10} {:>10} {:>8}",
        "config", "train MiB", "predicted", "error", "eval MiB", "predicted", "error"
    );
    for (i, case) in cases().iter().enumerate() {
        // A fresh process per config: one-time heap (gemm's per-thread L2 slabs) counts as it
        // would in `vramfit train`, and no config inherits another's.
        let mut child_args = vec!["--case".to_string(), i.to_string()];
        child_args.push(if std::env::args().any(|a| a == "--mixed") { "--mixed" } else { "--f32" }.to_string());
        if let Some((seed, n)) = random_spec() {
            child_args.extend(["--random".to_string(), seed.to_string(), n.to_string()]);
        }
        if let Some(arg) = std::env::args().skip_while(|a| a != "--cuda").nth(1) {
            child_args.extend(["--cuda".to_string(), arg]);
        }
        let out = match std::process::Command::new(&exe).args(&child_args).output() {
            Ok(out) if out.status.success() => out,
            Ok(out) => return eprintln!("error: case {i} failed: {}", String::from_utf8_lossy(&out.stderr)),
            Err(e) => return eprintln!("error: cannot run case {i}: {e}"),
        };
        let row: serde_json::Value = match serde_json::from_slice(&out.stdout) {
            Ok(row) => row,
            Err(e) => return eprintln!("error: case {i} printed no row: {e}"),
        };
        let get = |k: &str, w: &str| row[k][w].as_u64().unwrap_or(0);
        let err = |m: u64, p: u64| (p as f64 - m as f64) / m as f64 * 100.0;
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let (mt, pt, me, pe) = (get("measured", "train"), get("predicted", "train"), get("measured", "eval"), get("predicted", "eval"));
        println!(
            "{:<40} {:>10.2} {:>10.2} {:>+7.2}%   {:>10.2} {:>10.2} {:>+7.2}%",
            case.name,
            mib(mt),
            mib(pt),
            err(mt, pt),
            mib(me),
            mib(pe),
            err(me, pe)
        );
        let (mf, pf, ms, ps) = (
            get("measured", "first_iter"),
            get("predicted", "first_iter"),
            get("measured", "eval_at_start"),
            get("predicted", "eval_at_start"),
        );
        println!(
            "{:<40} first iteration {:.2} MiB vs {:.2} ({:+.2}%), eval at start {:.2} vs {:.2} ({:+.2}%), one-time heap {:.2} MiB",
            "",
            mib(mf),
            mib(pf),
            err(mf, pf),
            mib(ms),
            mib(ps),
            err(ms, ps),
            mib(row["one_time_heap"].as_u64().unwrap_or(0))
        );
        rows.push(row);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows).unwrap_or_default());
    }
}

/// `--case I` (in a child process): measures config I and prints its JSON row.
fn measure_case(i: usize) {
    let Some(Case { name, cfg, mut opts }) = cases().into_iter().nth(i) else { return };
    let device = device();
    if device.is_cpu() {
        opts.cpu_threads = candle_core::utils::get_num_threads() as u32;
    }
    let baseline = if device.is_cpu() { mem::live() } else { gpu_mem::bytes(&device).expect("the CUDA pool's counters").used };
    let model_opts = ModelOptions {
        activation_checkpointing: cfg.activation_checkpointing,
        chunked_loss: opts.chunked_loss,
        eval_chunk_rows: opts.eval_chunk_rows.map(|r| r as usize),
    };
    let model = Gpt::new_mixed(&cfg, model_opts, &device, 1, compute_dtype(&opts)).expect("model");
    let mut optimizer = AdamW::new(model.params(), AdamWSettings { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 });
    let mut rng = HostRng::new(2);
    let eval_at_start = measure(|| eval(&model, &cfg, &mut rng), baseline, &device);
    let first_iter = measure(|| iteration(&model, &cfg, &opts, &mut optimizer, &mut rng), baseline, &device);
    let eval_after = measure(|| eval(&model, &cfg, &mut rng), baseline, &device);
    let train = measure(|| iteration(&model, &cfg, &opts, &mut optimizer, &mut rng), baseline, &device);
    drop((model, optimizer));
    let one_time_heap = if device.is_cpu() {
        mem::live().saturating_sub(baseline)
    } else {
        gpu_mem::bytes(&device).expect("the CUDA pool's counters").used.saturating_sub(baseline)
    };
    let sim = trainer_model::simulate(&cfg, &opts);
    let row = serde_json::json!({
        "name": name, "config": cfg, "options": opts, "one_time_heap": one_time_heap,
        "measured": {"train": train, "first_iter": first_iter, "eval": eval_after, "eval_at_start": eval_at_start},
        "predicted": {"train": sim.train.bytes, "first_iter": sim.first_iter.bytes, "eval": sim.eval.bytes, "eval_at_start": sim.eval_at_start.bytes},
    });
    println!("{row}");
}
