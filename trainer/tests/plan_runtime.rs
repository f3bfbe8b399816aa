//! `vramfit plan --runtime trainer|pytorch`: the trainer's own memory model through the CLI, in
//! text and JSON; `runtime` in the JSON of both (schema 1, a field added).

use serde_json::Value;
use std::process::{Command, Output};
use vramfit_core::trainer_model::{self, TrainerOptions};
use vramfit_core::Config;

fn vramfit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramfit")).args(args).output().expect("the binary runs")
}

fn json(args: &[&str]) -> Value {
    let out = vramfit(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

const SMALL: [&str; 12] =
    ["--n-layer", "2", "--n-head", "2", "--n-embd", "64", "--block-size", "128", "--vocab-size", "500", "--batch-size", "8"];

#[test]
fn trainer_json_matches_core_for_the_same_settings() {
    let mut args = vec!["plan", "--json", "--runtime", "trainer", "--threads", "1", "--max-memory-mib", "100000", "--chunked-loss", "true"];
    args.extend_from_slice(&SMALL);
    args.extend_from_slice(&["--gradient-accumulation-steps", "3"]);
    let plan = json(&args);
    assert_eq!(plan["runtime"], "trainer");
    assert_eq!(plan["schema_version"], 2);
    assert_eq!(plan["device"], "cpu");
    let cfg = Config {
        n_layer: 2,
        n_head: 2,
        n_embd: 64,
        block_size: 128,
        vocab_size: 500,
        batch_size: 8,
        gradient_accumulation_steps: 3,
        ..Config::default()
    };
    let opts = TrainerOptions {
        chunked_loss: true,
        grad_clip: true,
        cpu_threads: 1,
        eval_chunk_rows: None,
        gemm_kernel_rows: vramfit::preflight::gemm_kernel_rows(),
        cpu_caches: vramfit::preflight::cpu_caches(),
        unfused_ops: false,
        mixed_precision: None,
        cuda: false,
    };
    let sim = trainer_model::simulate(&cfg, &opts);
    assert_eq!(plan["train"]["peak_bytes"].as_u64(), Some(sim.train.bytes));
    assert_eq!(plan["eval"]["peak_bytes"].as_u64(), Some(sim.eval.bytes));
    assert_eq!(plan["peak_bytes"].as_u64(), Some(trainer_model::peak_bytes(&sim)));
    assert_eq!(plan["fits"], true);
    assert_eq!(plan["available_bytes"].as_u64(), Some(100_000 << 20));
    assert_eq!(plan["options"]["chunked_loss"], true);
}

#[test]
fn trainer_text_report_and_a_run_that_does_not_fit() {
    let mut args = vec!["plan", "--runtime", "trainer", "--threads", "1", "--max-memory-mib", "2"];
    args.extend_from_slice(&SMALL);
    let out = vramfit(&args);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Runtime: vramfit's trainer"), "{text}");
    assert!(text.contains("training step") && text.contains("Saved activations"), "{text}");
    assert!(text.contains("Does not fit"), "{text}");
    // The gemm buffers (sized from this CPU's caches) are an estimate in every window; on one
    // thread eval at start is not (it is an upper bound only with a pool).
    let row = |start: &str| text.lines().find(|l| l.trim_start().starts_with(start)).unwrap_or_default().to_string();
    assert_eq!(row("gemm buffers").matches('~').count(), 4, "{text}");
    assert!(!row("eval at start").is_empty() && !row("eval at start").contains('~'), "{text}");
    // A budget between the peaks of micro-batches 3 and 4: 3 is the largest that fits, and the
    // auto-fit keeps the 8 x 40 = 320 sequences per iteration with a micro-batch dividing them
    // (2: 3 does not divide 320).
    let need = |b: u32| {
        let cfg = Config { n_layer: 2, n_head: 2, n_embd: 64, block_size: 128, vocab_size: 500, batch_size: b, ..Config::default() };
        trainer_model::peak_bytes(&trainer_model::simulate(
            &cfg,
            &TrainerOptions {
                grad_clip: true,
                cpu_threads: 1,
                gemm_kernel_rows: vramfit::preflight::gemm_kernel_rows(),
                cpu_caches: vramfit::preflight::cpu_caches(),
                ..Default::default()
            },
        ))
    };
    let mib = ((need(3) + need(4)) / 2) >> 20;
    assert!(need(3) <= (mib << 20) && need(4) > (mib << 20), "a whole MiB between the two peaks");
    let mib = mib.to_string();
    let mut args = vec!["plan", "--json", "--runtime", "trainer", "--threads", "1", "--max-memory-mib", &mib];
    args.extend_from_slice(&SMALL);
    let plan = json(&args);
    assert_eq!(plan["fits"], false);
    assert_eq!(plan["largest_micro_batch"], 3);
    let (b, ga) = (plan["auto_fit"]["batch_size"].as_u64().unwrap(), plan["auto_fit"]["gradient_accumulation_steps"].as_u64().unwrap());
    assert_eq!(b * ga, 8 * 40, "tokens per iteration kept");
    assert!(b <= 3 && b * 2 >= 3, "{b}");
}

#[test]
fn pytorch_is_the_default_runtime_and_says_so() {
    let mut args = vec!["plan", "--json", "--no-fixes"];
    args.extend_from_slice(&SMALL);
    let plan = json(&args);
    assert_eq!(plan["runtime"], "pytorch");
    let mut explicit = vec!["plan", "--json", "--no-fixes", "--runtime", "pytorch"];
    explicit.extend_from_slice(&SMALL);
    assert_eq!(json(&explicit), plan);
}

#[test]
fn a_bad_runtime_is_one_error_line() {
    let out = vramfit(&["plan", "--runtime", "tensorflow"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error:") && stderr.contains("pytorch or trainer"), "{stderr}");
}

/// `--device=cuda` (train.py's setting) plans `vramfit train --device cuda`: CUDA's options
/// (candle's op-by-op kernels, no gemm buffers, mixed precision for bfloat16 and float16), the
/// same figures core gives for them, and a report that says the figures are tensors only.
#[test]
fn trainer_on_cuda_plans_what_train_runs_there() {
    for (dtype, mixed) in
        [("float32", None), ("bfloat16", Some(vramfit_core::Dtype::Bfloat16)), ("float16", Some(vramfit_core::Dtype::Float16))]
    {
        let mut args = vec!["plan", "--json", "--runtime", "trainer", "--device=cuda", "--dtype", dtype, "--max-memory-mib", "64"];
        args.extend_from_slice(&SMALL);
        let plan = json(&args);
        assert_eq!(plan["device"], "cuda", "{dtype}");
        let opts: TrainerOptions = serde_json::from_value(plan["options"].clone()).expect("options");
        assert!(opts.cuda && opts.unfused_ops, "{dtype}");
        assert_eq!(opts.mixed_precision, mixed, "{dtype}");
        let cfg: Config = serde_json::from_value(plan["config"].clone()).expect("config");
        let sim = trainer_model::simulate(&cfg, &opts);
        assert_eq!(plan["peak_bytes"].as_u64(), Some(trainer_model::peak_bytes(&sim)), "{dtype}");
        // Without --device=cuda the same settings plan the CPU run: f32, the fused kernels, gemm.
        let mut cpu_args = vec!["plan", "--json", "--runtime", "trainer", "--threads", "1", "--dtype", dtype];
        cpu_args.extend_from_slice(&SMALL);
        let cpu = json(&cpu_args);
        assert_eq!(cpu["device"], "cpu");
        let cpu_opts: TrainerOptions = serde_json::from_value(cpu["options"].clone()).expect("options");
        assert!(!cpu_opts.cuda && !cpu_opts.unfused_ops && cpu_opts.mixed_precision.is_none(), "{dtype}");
        assert_ne!(cpu["peak_bytes"], plan["peak_bytes"], "{dtype}");
    }
    let mut args = vec!["plan", "--runtime", "trainer", "--device", "cuda", "--max-memory-mib", "64", "--gpu", "RTX 3060"];
    args.extend_from_slice(&SMALL);
    let out = vramfit(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("on CUDA, bfloat16 mixed precision"), "{text}");
    assert!(text.contains("tensors only") && text.contains("CUDA's own memory"), "{text}");
    assert!(!text.contains("matmul thread"), "{text}");
    let notes = String::from_utf8_lossy(&out.stderr);
    assert!(notes.contains("--gpu and --other-usage-mib are not used: --max-memory-mib sets the memory"), "{notes}");
}

/// Without --max-memory-mib a CUDA plan is for a card: its usable memory less the trainer's CUDA
/// context and what other programs hold, with the pool's cache (as measured once) as a second,
/// marked verdict. Expected figures come from core's presets and model, not from this test.
#[test]
fn trainer_on_cuda_plans_for_a_card() {
    use vramfit_core::device;
    let gpt2 = ["--n-layer", "12", "--n-head", "12", "--n-embd", "768", "--block-size", "1024", "--vocab-size", "50304"];
    let preset = |id: &str| device::presets().into_iter().find(|g| g.id == id).expect("a preset");
    for (gpu, other_mib, batch) in [("rtx-4070", 0u64, "8"), ("rtx-3060", 300, "4"), ("h100-80gb", 0, "8")] {
        let other = other_mib.to_string();
        let mut args = vec!["plan", "--json", "--runtime", "trainer", "--device=cuda", "--dtype", "bfloat16", "--batch-size", batch];
        args.extend_from_slice(&gpt2);
        args.extend_from_slice(&["--gpu", gpu, "--other-usage-mib", &other]);
        let plan = json(&args);
        let card = &plan["card"];
        assert_eq!(card["gpu"], gpu);
        let g = preset(gpu);
        let available = g.usable_bytes - trainer_model::CUDA_CONTEXT_BYTES - (other_mib << 20);
        assert_eq!(plan["available_bytes"].as_u64(), Some(available), "{gpu}");
        assert_eq!(card["other_usage_bytes"].as_u64(), Some(other_mib << 20));
        assert_eq!(card["context_source"], if gpu == "h100-80gb" { "measured" } else { "estimate" }, "{gpu}");
        let peak = plan["peak_bytes"].as_u64().expect("peak");
        let cached = (peak as f64 * (1.0 + trainer_model::POOL_CACHE_SHARE)).ceil() as u64;
        assert_eq!(plan["fits"].as_bool(), Some(peak <= available), "{gpu}");
        assert_eq!(card["fits_with_pool_cache"].as_bool(), Some(cached <= available), "{gpu}");
        let largest = plan["largest_micro_batch"].as_u64().expect("a batch fits");
        let with_cache = card["largest_micro_batch_with_pool_cache"].as_u64().expect("a batch fits with the cache");
        assert!(with_cache < largest, "{gpu}: {with_cache} vs {largest}");
    }
    // GPT-2 124M, batch 8, bfloat16 on a 12 GB card: the tensors fit, the measured cache would not.
    let mut args = vec!["plan", "--runtime", "trainer", "--device=cuda", "--dtype", "bfloat16", "--batch-size", "8"];
    args.extend_from_slice(&gpt2);
    let out = vramfit(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    // Figures as the report writes them: MiB rounded, with thousands separators.
    let mib = |bytes: u64| bytes as f64 / (1u64 << 20) as f64;
    let separated = |n: u64| {
        let digits = n.to_string();
        let mut out = String::new();
        for (i, d) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(d);
        }
        out
    };
    let context_mib = mib(trainer_model::CUDA_CONTEXT_BYTES).round() as u64;
    let rtx_4070 = preset("rtx-4070");
    let line =
        format!("Card: {}: {} MiB usable, less ~{context_mib} MiB", rtx_4070.name, separated(mib(rtx_4070.usable_bytes).round() as u64));
    assert!(text.contains(&line), "{line:?} not in {text}");
    assert!(text.contains("\nTight: needs") && text.contains(": may not fit"), "{text}");
    // The same on an H100 fits with room for the cache, and figures measured there carry no ~.
    args.extend_from_slice(&["--gpu", "h100-80gb"]);
    let text = String::from_utf8_lossy(&vramfit(&args).stdout).into_owned();
    assert!(text.contains("\nFits: needs") && text.contains(": fits with it"), "{text}");
    let h100_tensors = preset("h100-80gb").usable_bytes - trainer_model::CUDA_CONTEXT_BYTES;
    let line = format!(
        "less {context_mib} MiB for the trainer's CUDA context: {:.2} GiB ({} MiB) for tensors",
        h100_tensors as f64 / (1u64 << 30) as f64,
        separated(mib(h100_tensors).round() as u64)
    );
    assert!(text.contains(&line), "{line:?} not in {text}");
    // A card without bfloat16 says so.
    let mut args = vec!["plan", "--runtime", "trainer", "--device=cuda", "--dtype", "bfloat16", "--gpu", "t4"];
    args.extend_from_slice(&SMALL);
    let text = String::from_utf8_lossy(&vramfit(&args).stdout).into_owned();
    assert!(text.contains("(compute capability 7.5) has no native bfloat16"), "{text}");
}

/// A device `vramfit train` does not take is an error for the trainer's plan, not a plan of the
/// CPU with a note that the setting does not change memory.
#[test]
fn the_trainers_plan_refuses_a_device_train_refuses() {
    for device in ["--device=tpu", "--device=mps"] {
        let mut args = vec!["plan", "--runtime", "trainer", device];
        args.extend_from_slice(&SMALL);
        let out = vramfit(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{device}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with(&format!("error: {device}: expected cpu or cuda")), "{err}");
    }
    // cpu and cuda plan.
    for device in ["--device=cpu", "--device=cuda"] {
        let mut args = vec!["plan", "--runtime", "trainer", device, "--max-memory-mib", "64"];
        args.extend_from_slice(&SMALL);
        assert!(vramfit(&args).status.success(), "{device}");
    }
}

/// A dataset's meta.pkl decides train.py's vocabulary, not `vramfit train`'s (which takes it from
/// --data): the trainer's plan says so, not that vramfit cannot read the file (it can, for the
/// PyTorch plan), and keeps where the setting came from.
#[test]
fn the_trainer_plan_says_meta_pkl_is_not_its_vocabulary() {
    for (dataset, vocab) in [("good", "50304"), ("shakespeare_char", "65")] {
        let out = vramfit(&["plan", "--runtime", "trainer", &format!("--dataset={dataset}")]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let expected = format!(
            "note: command line: dataset = '{dataset}': --runtime trainer plans vramfit train, which takes its vocabulary from \
             --data, not from a dataset's meta.pkl; planned with vocab_size {vocab}"
        );
        assert!(stderr.contains(&expected) && !stderr.contains("cannot read"), "{stderr}");
    }
}

/// `plan --runtime trainer` takes the threads as `train` does, its one thread for the small
/// default model's shape included however it is given (review: it planned every core for the
/// shape `train` runs on one, so their gemm buffers differed); eval_only, which `train` refuses,
/// is refused here too.
#[test]
fn the_trainer_plan_takes_trains_threads_and_refuses_eval_only() {
    let small_default = ["--n-layer", "2", "--n-head", "4", "--n-embd", "64", "--block-size", "64", "--batch-size", "16"];
    let run = |extra: &[&str]| {
        let args = [&["plan", "--runtime", "trainer", "--max-memory-mib", "100000"][..], &small_default, extra].concat();
        Command::new(env!("CARGO_BIN_EXE_vramfit"))
            .args(&args)
            .env_remove("CANDLE_NUM_THREADS")
            .env_remove("RAYON_NUM_THREADS")
            .output()
            .expect("the binary runs")
    };
    let out = run(&[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(", 1 matmul thread(s)"), "{}", String::from_utf8_lossy(&out.stdout));
    let out = run(&["--threads", "2"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(", 2 matmul thread(s)"), "{}", String::from_utf8_lossy(&out.stdout));
    let out = run(&["--eval_only=True"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!((out.status.code(), stderr.lines().count()), (Some(2), 1), "{stderr}");
    assert!(stderr.contains("no evaluate-only mode"), "{stderr}");
}
