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
//!   sample), held to the looser bound their measurement published;
//!   trainer-cpu-random-pool.json: those and 30 more at two threads, and 30 at four.

use serde_json::Value;
use vramfit_core::trainer_model::{gemm_slab_bytes, simulate, TrainerOptions};
use vramfit_core::Config;

/// The target is 3%; the measured tables' worst window is 0.29%, so this test holds the
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
        for (window, predicted) in sim.window_bytes() {
            let measured = row["measured"][window].as_u64().expect("measured bytes") as f64;
            let within = |predicted: f64| {
                ((predicted - measured) / measured).abs() <= tolerance || (predicted - measured).abs() <= slack_bytes as f64
            };
            // Within the tolerance once some of the slabs a run may not have made yet are set
            // aside (none, one, ...), and over only by those.
            let slabs_aside = |n: u64| predicted.saturating_sub(n * gemm_slab_bytes(&opts)) as f64;
            let err = (predicted as f64 - measured) / measured;
            assert!(
                within(predicted as f64)
                    || (predicted as f64 > measured && (1..=slabs_not_made_yet(&opts, window)).any(|n| within(slabs_aside(n)))),
                "{file}: {} {window}: predicted {predicted}, measured {measured} ({:+.2}%)",
                row["name"],
                err * 100.0
            );
        }
    }
}

/// How many of gemm's slabs the model may count that a run has not made yet (an over-estimate by
/// at most that many). On the fused f32 CPU path the model makes each slab at the first product
/// that packs into it, but a pool thread's exists only once rayon has handed it part of a
/// product, and with few products split one pool thread may run them all (measured,
/// trainer-cpu-random-pool.json: one to three slabs over on 31 of 360 windows at 2 and 4 threads,
/// most of them eval at start, none a training step): at most threads - 1. Elsewhere (candle's attention, CPU f16) every slab is counted
/// from the start, so the eval at start may be over by all of them: the pool threads' run only
/// matmuls large enough to split, the calling thread's only the first product gemm packs itself.
fn slabs_not_made_yet(opts: &TrainerOptions, window: &str) -> u64 {
    let threads = u64::from(opts.cpu_threads.max(1));
    match (opts.gemm_slabs_made_lazily(), window) {
        (true, _) => threads - 1,
        (false, "eval_at_start") => threads,
        (false, _) => 0,
    }
}

#[test]
fn predictions_match_measured_cpu_peaks() {
    check("trainer-cpu.json", include_str!("../../tests/reference/data/trainer-cpu.json"));
}

/// Out of sample: 30 configs drawn at random (`trainer_memory -- --random 2 30`), small enough to
/// train in seconds. Measured at one thread: every window predicted under its measurement, by
/// 7 KB to 98 KB, a median of 0.14-0.19% and at most 1.23% (models of 3-157 MiB). What the model
/// leaves out is candle's tensor metadata (shapes, strides, storage handles) and a few small
/// vectors per product. Held to 2%, and each window's median to 0.5%.
#[test]
fn random_configs_match_their_cpu_measurements() {
    let json = include_str!("../../tests/reference/data/trainer-cpu-random.json");
    check_within("trainer-cpu-random.json", json, 0.02, 0);
    let data: Value = serde_json::from_str(json).expect("json");
    let rows = data["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 30, "rows");
    check_medians("trainer-cpu-random.json", rows);
}

/// The same 30 configs and 30 more (seed 5, measured after the model's gemm slabs were fitted to
/// seed 2) at two threads. The rule before counted every pool thread's slab from the start and
/// the calling thread's whenever some product was small enough for it; at a head size that is
/// not a multiple of 16 attention's products prepack their operand and make no slab, and eval's
/// products before the first step often split over no pool: one to three slabs over on 9 of
/// seed 2's 30 steady steps and 17 of its 30 evals at start, up to +224% on small runs. Now, at
/// two threads, one slab of 1 MiB over on 4 of the 240 windows, where rayon ran every split
/// product on one pool thread; every other window under by at most 80 KB, within 0.9% but in the
/// two smallest runs (2.0 and 1.3 MiB: up to 2.3% and 4.5%, 12.5% of the latter's 0.1 MiB eval
/// at start) and four evals at start of 5-11 MiB runs (1.0-2.0%). Seed 5 again at four threads
/// (on two cores): up to three slabs over on 27 of its 120 windows, mostly evals at start, no
/// training step. Held to 5% or 128 KiB past those slabs, and at each thread count the medians,
/// with those slabs set aside, to 0.5%.
#[test]
fn random_configs_with_a_thread_pool_match_their_cpu_measurements() {
    let json = include_str!("../../tests/reference/data/trainer-cpu-random-pool.json");
    check_within("trainer-cpu-random-pool.json", json, 0.05, 128 << 10);
    let data: Value = serde_json::from_str(json).expect("json");
    let rows = data["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 90, "rows");
    for threads in [2, 4] {
        let at: Vec<Value> = rows.iter().filter(|row| row["options"]["cpu_threads"] == threads).cloned().collect();
        assert_eq!(at.len(), if threads == 2 { 60 } else { 30 }, "rows at {threads} threads");
        check_medians(&format!("trainer-cpu-random-pool.json at {threads} threads"), &at);
    }
}

/// Each window's median |error| over `rows` is at most 0.5%, an over-estimate counted once the
/// slabs a run may not have made yet are set aside (as many as bring it nearest).
fn check_medians(what: &str, rows: &[Value]) {
    let mut errors: [Vec<f64>; 4] = Default::default();
    for row in rows {
        let cfg: Config = serde_json::from_value(row["config"].clone()).expect("config");
        let opts: TrainerOptions = serde_json::from_value(row["options"].clone()).expect("options");
        for (i, (window, predicted)) in simulate(&cfg, &opts).window_bytes().into_iter().enumerate() {
            let measured = row["measured"][window].as_u64().expect("measured bytes") as f64;
            let error = (0..=slabs_not_made_yet(&opts, window))
                .map(|n| ((predicted.saturating_sub(n * gemm_slab_bytes(&opts)) as f64 - measured) / measured).abs())
                .fold(f64::MAX, f64::min);
            errors[i].push(error);
        }
    }
    for (window, mut errors) in ["train", "first_iter", "eval", "eval_at_start"].into_iter().zip(errors) {
        errors.sort_by(f64::total_cmp);
        let median = errors[errors.len() / 2];
        assert!(median <= 0.005, "{what} {window}: median |error| {:.2}%", median * 100.0);
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
