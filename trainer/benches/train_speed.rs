//! Training speed on CPU: `vramfit train`'s loop beside PyTorch eager (nanoGPT's train.py loop on
//! tests/reference/gpt.py) for the same configs, threads and machine, in one run.
//!
//! ```sh
//! cargo bench -p vramfit --bench train_speed                         # 1 thread each
//! CANDLE_NUM_THREADS=2 RAYON_NUM_THREADS=2 cargo bench -p vramfit --bench train_speed
//! ```
//! PyTorch comes from `tests/reference/.venv` (`tests/reference/setup.sh`); without it only
//! vramfit's figures are printed. Both sides run a few warm-up iterations first, then time
//! whole iterations (micro-steps, clipping, AdamW), not evaluation or checkpoints. Random token
//! ids for PyTorch, the built-in corpus for vramfit: speed does not depend on the text.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use vramfit::data::{DataSource, Dataset};
use vramfit::progress::Progress;
use vramfit::train::{self, Run, TrainSettings};
use vramfit_core::{Attention, Config, Dtype};

struct Case {
    name: &'static str,
    cfg: Config,
    iters: u64,
}

fn case(name: &'static str, (n_layer, n_head, n_embd, block_size, batch_size): (u32, u32, u32, u32, u32), iters: u64) -> Case {
    let cfg = Config {
        n_layer,
        n_head,
        n_embd,
        block_size,
        vocab_size: 32,
        batch_size,
        gradient_accumulation_steps: 1,
        eval_iters: 1,
        eval_batch_size: Some(1),
        dtype: Dtype::Float32,
        attention: Attention::Manual,
        compile: false,
        ..Config::default()
    };
    Case { name, cfg, iters }
}

const WARMUP: u64 = 3;

/// vramfit's tokens/s: the real loop (`train::run`), warmed up by a first short run on the same model.
fn vramfit_speed(case: &Case, data: &Dataset, out_dir: &std::path::Path) -> f64 {
    let settings = TrainSettings { max_iters: WARMUP, eval_interval: u64::MAX, out_dir: out_dir.to_path_buf(), ..TrainSettings::default() };
    let device = candle_core::Device::Cpu;
    let (model, mut optimizer) = train::build(&case.cfg, &settings, &device, None).expect("model builds");
    let interrupt = AtomicBool::new(false);
    for max_iters in [WARMUP, case.iters] {
        let settings = TrainSettings { max_iters, ..settings.clone() };
        let run = Run {
            cfg: &case.cfg,
            settings: &settings,
            data,
            device: &device,
            model: &model,
            optimizer: &mut optimizer,
            interrupt: &interrupt,
        };
        let summary = train::run(run, None, &mut Progress::silent()).expect("training runs");
        if max_iters == case.iters {
            return summary.tokens_per_s;
        }
    }
    unreachable!()
}

/// PyTorch's tokens/s, or why there is none.
fn torch_speed(case: &Case, threads: usize, attention: &str) -> Result<(f64, String), String> {
    let reference = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/reference");
    let python = reference.join(".venv/bin/python");
    if !python.exists() {
        return Err(format!("no {} (run tests/reference/setup.sh)", python.display()));
    }
    let c = &case.cfg;
    let args = serde_json::json!({
        "n_layer": c.n_layer, "n_head": c.n_head, "n_embd": c.n_embd, "block_size": c.block_size,
        "vocab_size": c.vocab_size, "batch_size": c.batch_size,
        "gradient_accumulation_steps": c.gradient_accumulation_steps, "iters": case.iters, "warmup": WARMUP,
        "threads": threads, "attention": attention,
    });
    let out =
        Command::new(&python).arg("train_speed.py").arg(args.to_string()).current_dir(&reference).output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("failed").to_string());
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    Ok((v["tokens_per_s"].as_f64().unwrap_or(0.0), v["torch"].as_str().unwrap_or("?").to_string()))
}

/// The issue's target for `vramfit train` with no arguments: validation loss clearly below the
/// corpus's unigram entropy within 2 minutes on 2 CPU cores. Runs it whole (as the CLI would,
/// without the progress output) and prints the figures.
fn default_run(data: &Dataset, out_dir: &std::path::Path) {
    let (mut cfg, settings) = train::small_default();
    cfg.vocab_size = data.vocab.size() as u32;
    let settings = TrainSettings { out_dir: out_dir.to_path_buf(), ..settings };
    let device = candle_core::Device::Cpu;
    let started = std::time::Instant::now();
    let (model, mut optimizer) = train::build(&cfg, &settings, &device, None).expect("model builds");
    let interrupt = AtomicBool::new(false);
    let run =
        Run { cfg: &cfg, settings: &settings, data, device: &device, model: &model, optimizer: &mut optimizer, interrupt: &interrupt };
    let summary = train::run(run, None, &mut Progress::silent()).expect("training runs");
    let secs = started.elapsed().as_secs_f64();
    let val = summary.last_eval.map_or(f32::NAN, |(_, v)| v);
    println!(
        "default run: {} iterations in {secs:.1} s ({} thread(s)), val loss {val:.3} nats vs unigram entropy {:.3} (target: clearly below within 120 s)",
        summary.iter_num,
        candle_core::utils::get_num_threads(),
        data.unigram_entropy()
    );
}

fn main() {
    // As `vramfit train` does when the run needs at most half the free memory (all of these do):
    // freed tensor memory is reused instead of page-faulted in afresh every iteration.
    vramfit::mem::keep_freed_memory();
    // Both sides get the same thread count: the environment's, else one.
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() && std::env::var_os("RAYON_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
        std::env::set_var("RAYON_NUM_THREADS", "1");
    }
    let threads = candle_core::utils::get_num_threads();
    let cases = [
        case("default run (L2 C64 T64 B16)", (2, 4, 64, 64, 16), 40),
        case("L4 C128 T128 B8", (4, 4, 128, 128, 8), 15),
        case("L6 C384 T256 B4 (baby GPT)", (6, 6, 384, 256, 4), 4),
    ];
    let data = Dataset::load(&DataSource::Builtin { version: vramfit::corpus::CORPUS_VERSION }).expect("built-in corpus");
    let out_dir = std::env::temp_dir().join(format!("vramfit-train-speed-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).expect("scratch dir");
    println!("training tokens/s on CPU, {threads} thread(s) each, f32 (vramfit's attention skips the blocks above the");
    println!("diagonal; PyTorch eager with SDPA, nanoGPT's default, and with the manual masked softmax)");
    println!("{:<30} {:>9} {:>12} {:>7} {:>13} {:>7}", "config", "vramfit", "torch sdpa", "ratio", "torch manual", "ratio");
    let mut torch_version = None;
    for c in &cases {
        let ours = vramfit_speed(c, &data, &out_dir);
        let mut row = format!("{:<30} {:>9.0}", c.name, ours);
        for (attention, width) in [("flash", 12), ("manual", 13)] {
            match torch_speed(c, threads, attention) {
                Ok((theirs, version)) => {
                    torch_version = Some(version);
                    row.push_str(&format!(" {:>width$.0} {:>6.2}x", theirs, ours / theirs));
                }
                Err(why) => row.push_str(&format!(" {:>width$} ({why})", "-")),
            }
        }
        println!("{row}");
    }
    if let Some(v) = torch_version {
        println!("torch {v}; ratio = vramfit / pytorch (goal >= 1.0)");
    }
    default_run(&data, &out_dir);
    let _ = std::fs::remove_dir_all(&out_dir);
}
