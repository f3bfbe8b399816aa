//! The trainer's memory model against the peaks measured on CPU, written by
//! `trainer/benches/trainer_memory.rs`: every window of every config within the tolerance.
//! - tests/reference/data/trainer-cpu.json: today's trainer (fused CPU kernels, gemm AVX-512).
//! - tests/reference/data/trainer-cpu-unfused-avx2.json: the trainer before its fused kernels,
//!   when every op was candle's composition (as it still is on CUDA: `unfused_ops`), with gemm's
//!   AVX2 kernels (`gemm_kernel_rows` 16).
//! - tests/reference/data/trainer-cpu-f16.json: mixed precision (f16 compute, f32 master weights,
//!   loss scaling) run on the CPU, where candle runs the f16 ops CUDA would.
//! - tests/reference/data/trainer-cuda-h100-{f32,bf16,f16}.json: the trainer on an H100, measured
//!   by the CUDA memory pool's high-water mark (`trainer/src/gpu_mem.rs`).
//! - tests/reference/data/trainer-cpu-random.json: 30 small configs drawn at random (out of
//!   sample), held to the looser bound their measurement published.

use serde_json::Value;
use vramfit_core::trainer_model::{gemm_slab_bytes, simulate, TrainerOptions};
use vramfit_core::Config;

/// The target is 3%; the measured tables' worst window is 0.27%, so this test holds the
/// model to 1% to catch drift between model.rs and core early.
const TOLERANCE: f64 = 0.01;

fn check(file: &str, json: &str) {
    check_within(file, json, TOLERANCE, 0);
}

/// Every window within `tolerance` of its measurement, or within `slack_bytes`.
fn check_within(file: &str, json: &str, tolerance: f64, slack_bytes: u64) {
    let data: Value = serde_json::from_str(json).expect("json");
    let rows = data["rows"].as_array().expect("rows");
    assert!(rows.len() >= 10, "{file}: at least 10 measured configs");
    for row in rows {
        let cfg: Config = serde_json::from_value(row["config"].clone()).expect("config");
        let opts: TrainerOptions = serde_json::from_value(row["options"].clone()).expect("options");
        let sim = simulate(&cfg, &opts);
        for (window, predicted) in [
            ("train", sim.train.bytes),
            ("first_iter", sim.first_iter.bytes),
            ("eval", sim.eval.bytes),
            ("eval_at_start", sim.eval_at_start.bytes),
        ] {
            let measured = row["measured"][window].as_u64().expect("measured bytes") as f64;
            // Before the first training step, gemm's pool threads have run a product only if eval's
            // matmuls were large enough to split (gemm decides by shape and kernel size), so their
            // slabs may not exist yet; the model counts them from the start. Measured with AVX-512
            // kernels at 2 threads: over by exactly those slabs, never under. On one thread the
            // calling thread's slab waits the same way for the first product gemm packs itself
            // (small evals, trainer-cpu-random.json).
            let not_yet = if window == "eval_at_start" { u64::from(opts.cpu_threads.max(1)) * gemm_slab_bytes(&opts) } else { 0 };
            let within = |predicted: f64| {
                ((predicted - measured) / measured).abs() <= tolerance || (predicted - measured).abs() <= slack_bytes as f64
            };
            let err = (predicted as f64 - measured) / measured;
            assert!(
                within(predicted as f64) || (predicted as f64 > measured && within(predicted.saturating_sub(not_yet) as f64)),
                "{file}: {} {window}: predicted {predicted}, measured {measured} ({:+.2}%)",
                row["name"],
                err * 100.0
            );
        }
    }
}

#[test]
fn predictions_match_measured_cpu_peaks() {
    check("trainer-cpu.json", include_str!("../../tests/reference/data/trainer-cpu.json"));
}

/// Out of sample: 30 configs drawn at random (`trainer_memory -- --random 2 30`), small enough to
/// train in seconds. Measured: every window under its prediction by 27 KB to 476 KB, a median of
/// 0.2-0.3% and at most 4.0% (models of 2-40 MiB). What the model leaves out shows there: gemm's
/// per-call packing buffers for products other than the loss head's (a transient B*T x 3C copy at
/// c_attn's weight gradient was the 476 KB) and candle's tensor metadata (shapes, strides, graph
/// nodes). Held to 5% (or 256 KiB: an eval of 1.3 MiB is 8.5% under once gemm's slab is set
/// aside), and each window's median to 0.5%.
#[test]
fn random_configs_match_their_cpu_measurements() {
    let json = include_str!("../../tests/reference/data/trainer-cpu-random.json");
    check_within("trainer-cpu-random.json", json, 0.05, 256 << 10);
    let data: Value = serde_json::from_str(json).expect("json");
    let rows = data["rows"].as_array().expect("rows");
    assert!(rows.len() >= 30, "30 random configs");
    for window in ["train", "first_iter", "eval", "eval_at_start"] {
        let mut errors: Vec<f64> = rows
            .iter()
            .map(|row| {
                let cfg: Config = serde_json::from_value(row["config"].clone()).expect("config");
                let opts: TrainerOptions = serde_json::from_value(row["options"].clone()).expect("options");
                let sim = simulate(&cfg, &opts);
                let predicted = match window {
                    "train" => sim.train.bytes,
                    "first_iter" => sim.first_iter.bytes,
                    "eval" => sim.eval.bytes,
                    _ => sim.eval_at_start.bytes,
                } as f64;
                let measured = row["measured"][window].as_u64().expect("measured bytes") as f64;
                ((predicted - measured) / measured).abs()
            })
            .collect();
        errors.sort_by(f64::total_cmp);
        let median = errors[errors.len() / 2];
        assert!(median <= 0.005, "{window}: median |error| {:.2}%", median * 100.0);
    }
}

#[test]
fn the_unfused_path_and_avx2_packing_match_their_measurements() {
    let json = include_str!("../../tests/reference/data/trainer-cpu-unfused-avx2.json");
    check("trainer-cpu-unfused-avx2.json", json);
    // The file's rows are the unfused path: the same rows as the fused path predict less.
    let data: Value = serde_json::from_str(json).expect("json");
    let row = &data["rows"][0];
    let cfg: Config = serde_json::from_value(row["config"].clone()).expect("config");
    let unfused: TrainerOptions = serde_json::from_value(row["options"].clone()).expect("options");
    assert!(unfused.unfused_ops);
    let fused = TrainerOptions { unfused_ops: false, ..unfused };
    assert!(simulate(&cfg, &fused).train.bytes < simulate(&cfg, &unfused).train.bytes);
}

/// Mixed precision's model (2-byte activations, per-op weight casts, f32 logits for the loss,
/// f32 gradients, loss scaling) against f16 runs on the CPU, held to the same 1% (measured: within
/// 0.32%), including the f32 working copies candle's CPU f16 matmul makes (`f16_lhs_copy`).
#[test]
fn mixed_precision_matches_its_cpu_measurements() {
    let json = include_str!("../../tests/reference/data/trainer-cpu-f16.json");
    check("trainer-cpu-f16.json", json);
    // The same configs in f32 need more: activations and the weights' casts are half the bytes.
    let data: Value = serde_json::from_str(json).expect("json");
    for row in data["rows"].as_array().expect("rows") {
        let cfg: Config = serde_json::from_value(row["config"].clone()).expect("config");
        let mixed: TrainerOptions = serde_json::from_value(row["options"].clone()).expect("options");
        assert_eq!(mixed.mixed_precision, Some(vramfit_core::Dtype::Float16));
        let f32_opts = TrainerOptions { mixed_precision: None, ..mixed };
        assert!(simulate(&cfg, &mixed).train.bytes < simulate(&cfg, &f32_opts).train.bytes, "{}", row["name"]);
    }
}

/// On CUDA (an H100, the memory pool's high-water marks): f32, bf16 and f16 mixed precision, every
/// window of every config within the same 1% (measured: within 0.02%, most to the byte).
#[test]
fn cuda_runs_match_their_measurements() {
    for (file, json, dtype) in [
        ("trainer-cuda-h100-f32.json", include_str!("../../tests/reference/data/trainer-cuda-h100-f32.json"), None),
        (
            "trainer-cuda-h100-bf16.json",
            include_str!("../../tests/reference/data/trainer-cuda-h100-bf16.json"),
            Some(vramfit_core::Dtype::Bfloat16),
        ),
        (
            "trainer-cuda-h100-f16.json",
            include_str!("../../tests/reference/data/trainer-cuda-h100-f16.json"),
            Some(vramfit_core::Dtype::Float16),
        ),
    ] {
        check(file, json);
        let data: Value = serde_json::from_str(json).expect("json");
        for row in data["rows"].as_array().expect("rows") {
            let opts: TrainerOptions = serde_json::from_value(row["options"].clone()).expect("options");
            assert!(opts.cuda && opts.unfused_ops, "{file}: {} was measured on CUDA", row["name"]);
            assert_eq!(opts.mixed_precision, dtype, "{file}: {}", row["name"]);
            // No gemm buffers on CUDA: the same row with the CPU's would predict more.
            let cfg: Config = serde_json::from_value(row["config"].clone()).expect("config");
            let on_cpu = TrainerOptions { cuda: false, cpu_threads: 1, ..opts };
            assert!(simulate(&cfg, &on_cpu).train.bytes > simulate(&cfg, &opts).train.bytes, "{file}: {}", row["name"]);
        }
    }
}

#[test]
fn the_savers_lower_what_they_target() {
    let base = Config {
        n_layer: 6,
        n_head: 6,
        n_embd: 384,
        block_size: 256,
        vocab_size: 50304,
        batch_size: 16,
        gradient_accumulation_steps: 1,
        ..Config::default()
    };
    let plain = simulate(&base, &TrainerOptions::default());
    let ckpt = simulate(&Config { activation_checkpointing: true, ..base.clone() }, &TrainerOptions::default());
    assert!(ckpt.train.bytes < plain.train.bytes);
    assert!(ckpt.train.breakdown.saved_activations < plain.train.breakdown.saved_activations);
    let chunked = simulate(&base, &TrainerOptions { chunked_loss: true, ..Default::default() });
    assert!(chunked.train.breakdown.logits_and_loss <= plain.train.breakdown.logits_and_loss);
    assert!(chunked.train.bytes < plain.train.bytes);
    let eval_chunks = simulate(
        &Config { eval_batch_size: Some(64), ..base.clone() },
        &TrainerOptions { eval_chunk_rows: Some(1024), ..Default::default() },
    );
    let eval_whole = simulate(&Config { eval_batch_size: Some(64), ..base }, &TrainerOptions::default());
    assert!(eval_chunks.eval.bytes < eval_whole.eval.bytes / 2);
}
