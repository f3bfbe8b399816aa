//! Measured vs predicted memory of the trainer on CPU: for each config, real micro-steps,
//! gradient accumulation, clipping and AdamW steps (as `train.rs` does them) and eval batches run
//! under the counting allocator; each window's heap high-water mark (minus what was live before the
//! model existed) is printed next to `vramfit_core::trainer_model`'s prediction.
//!
//! Run: `CANDLE_NUM_THREADS=1 cargo bench -p vramfit --bench trainer_memory` (add `-- --json` for the
//! rows committed in tests/reference/data/trainer-cpu.json).

use candle_core::{Device, Tensor};
use vramfit::mem::{self, CountingAlloc};
use vramfit::model::{Gpt, HostRng, ModelOptions};
use vramfit::optim::{clip_grad_norm, AdamW, AdamWSettings};
use vramfit_core::trainer_model::{self, TrainerOptions};
use vramfit_core::Config;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

struct Case {
    name: &'static str,
    cfg: Config,
    opts: TrainerOptions,
}

fn cases() -> Vec<Case> {
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
    let o = TrainerOptions::default();
    let c = |name, cfg: Config, opts: TrainerOptions| Case { name, cfg, opts };
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
    ]
}

fn batch(cfg: &Config, b: usize, t: usize, rng: &mut HostRng) -> (Tensor, Tensor) {
    let mut ids = || -> Vec<u32> { (0..b * t).map(|_| (rng.next_u64() % u64::from(cfg.vocab_size)) as u32).collect() };
    let x = Tensor::from_vec(ids(), (b, t), &Device::Cpu).expect("batch");
    let y = Tensor::from_vec(ids(), (b, t), &Device::Cpu).expect("batch");
    (x, y)
}

/// One training iteration as train.rs runs it; returns nothing, the allocator measures.
fn iteration(model: &Gpt, cfg: &Config, opts: &TrainerOptions, optimizer: &mut AdamW, rng: &mut HostRng) {
    let (b, t) = (cfg.batch_size as usize, cfg.block_size as usize);
    let ga = cfg.gradient_accumulation_steps.max(1);
    let mut acc: Vec<Tensor> = Vec::new();
    for _ in 0..ga {
        let (x, y) = batch(cfg, b, t, rng);
        let (_, grads) = model.loss_and_grads(&x, &y, rng.next_u64()).expect("step");
        drop((x, y));
        acc = if acc.is_empty() {
            grads
        } else {
            acc.iter().zip(&grads).map(|(a, g)| a + g).collect::<candle_core::Result<Vec<_>>>().expect("acc")
        };
    }
    if ga > 1 {
        let inv = 1.0 / f64::from(ga);
        acc = acc.iter().map(|g| g * inv).collect::<candle_core::Result<Vec<_>>>().expect("mean");
    }
    if opts.grad_clip {
        clip_grad_norm(&mut acc, 1.0).expect("clip");
    }
    optimizer.step(model.params(), &acc, 1e-3).expect("adamw");
    drop(acc);
}

fn eval(model: &Gpt, cfg: &Config, rng: &mut HostRng) {
    let (x, y) = batch(cfg, cfg.eval_batch() as usize, cfg.eval_block() as usize, rng);
    model.eval_loss(&x, &y).expect("eval");
}

fn measure(window: impl FnOnce(), baseline: u64) -> u64 {
    mem::reset_peak();
    window();
    mem::peak().saturating_sub(baseline)
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
    let model = Gpt::new(&cfg, model_opts, &Device::Cpu, 1).expect("model");
    let mut optimizer = AdamW::new(model.params(), AdamWSettings { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 });
    let mut rng = HostRng::new(2);
    iteration(&model, &cfg, &opts, &mut optimizer, &mut rng);
    let min: i64 = std::env::var("TRACE_MIN").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    mem::trace_start(min as u64);
    iteration(&model, &cfg, &opts, &mut optimizer, &mut rng);
    let real = mem::trace_stop();
    let (_, timeline) = trainer_model::simulate_with_timeline(&cfg, &opts);
    let start = timeline
        .iter()
        .rposition(|p| matches!(p.phase, vramfit_core::Phase::EvalForward | vramfit_core::Phase::EvalLoss))
        .map_or(0, |i| i + 1);
    let mut predicted = Vec::new();
    for w in timeline[start.saturating_sub(1)..].windows(2) {
        let d = w[1].live_bytes as i64 - w[0].live_bytes as i64;
        if d.abs() >= min {
            predicted.push((d, w[1].op.clone()));
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

fn main() {
    if std::env::args().any(|a| a == "--probe-gemm") {
        return probe_gemm();
    }
    if let Some(i) = std::env::args().skip_while(|a| a != "--trace").nth(1).and_then(|v| v.parse().ok()) {
        return trace_case(i);
    }
    let json = std::env::args().any(|a| a == "--json");
    let mut rows = Vec::new();
    // Warm-up: one small run first, so one-time allocations of the process (thread pools, gemm's
    // thread-local buffers) are live before any baseline is taken.
    if let Some(first) = cases().into_iter().next() {
        let model = Gpt::new(&first.cfg, ModelOptions::default(), &Device::Cpu, 1).expect("model");
        let mut optimizer = AdamW::new(model.params(), AdamWSettings { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 });
        let mut rng = HostRng::new(1);
        iteration(&model, &first.cfg, &first.opts, &mut optimizer, &mut rng);
        eval(&model, &first.cfg, &mut rng);
    }
    for case in cases() {
        let Case { name, cfg, opts } = case;
        let baseline = mem::live();
        let model_opts = ModelOptions {
            activation_checkpointing: cfg.activation_checkpointing,
            chunked_loss: opts.chunked_loss,
            eval_chunk_rows: opts.eval_chunk_rows.map(|r| r as usize),
        };
        let model = Gpt::new(&cfg, model_opts, &Device::Cpu, 1).expect("model");
        let mut optimizer = AdamW::new(model.params(), AdamWSettings { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 });
        let mut rng = HostRng::new(2);
        let eval_at_start = measure(|| eval(&model, &cfg, &mut rng), baseline);
        let first_iter = measure(|| iteration(&model, &cfg, &opts, &mut optimizer, &mut rng), baseline);
        let eval_after = measure(|| eval(&model, &cfg, &mut rng), baseline);
        let train = measure(|| iteration(&model, &cfg, &opts, &mut optimizer, &mut rng), baseline);
        drop((model, optimizer));
        let sim = trainer_model::simulate(&cfg, &opts);
        let err = |m: u64, p: u64| (p as f64 - m as f64) / m as f64 * 100.0;
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        println!(
            "{:<40} {:>10.2} {:>10.2} {:>+7.2}%   {:>10.2} {:>10.2} {:>+7.2}%",
            name,
            mib(train),
            mib(sim.train.bytes),
            err(train, sim.train.bytes),
            mib(eval_after),
            mib(sim.eval.bytes),
            err(eval_after, sim.eval.bytes)
        );
        println!(
            "{:<40} first iteration {:.2} MiB vs {:.2} ({:+.2}%), eval at start {:.2} vs {:.2} ({:+.2}%)",
            "",
            mib(first_iter),
            mib(sim.first_iter.bytes),
            err(first_iter, sim.first_iter.bytes),
            mib(eval_at_start),
            mib(sim.eval_at_start.bytes),
            err(eval_at_start, sim.eval_at_start.bytes)
        );
        rows.push(serde_json::json!({
            "name": name, "config": cfg, "options": opts,
            "measured": {"train": train, "first_iter": first_iter, "eval": eval_after, "eval_at_start": eval_at_start},
            "predicted": {"train": sim.train.bytes, "first_iter": sim.first_iter.bytes, "eval": sim.eval.bytes, "eval_at_start": sim.eval_at_start.bytes},
        }));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows).unwrap_or_default());
    }
}
