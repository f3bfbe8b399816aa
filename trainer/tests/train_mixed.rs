//! Mixed precision through the real loop (`train::run`): f32 master weights computing in f16 with
//! dynamic loss scaling, and in bf16. `vramfit train` uses these only with `--device cuda`; candle's
//! CPU backend runs the same ops in f16 and bf16, so the loop is exercised here on the CPU.

use candle_core::{DType, Device};
use std::sync::atomic::AtomicBool;
use vramfit::data::{DataSource, Dataset};
use vramfit::model::{Gpt, ModelOptions};
use vramfit::optim::{AdamW, LossScaler};
use vramfit::progress::Progress;
use vramfit::train::{self, Run, TrainSettings};
use vramfit_core::Config;

fn run_mixed(compute: DType, name: &str) -> (train::Summary, vramfit::checkpoint::Checkpoint, Vec<f64>) {
    let cfg = Config {
        n_layer: 1,
        n_head: 2,
        n_embd: 32,
        block_size: 32,
        vocab_size: 65,
        batch_size: 8,
        eval_iters: 2,
        eval_batch_size: Some(4),
        dropout: 0.1,
        ..Config::default()
    };
    let out_dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("train-tests").join(name);
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut settings = TrainSettings { max_iters: 40, eval_interval: 20, out_dir: out_dir.clone(), ..TrainSettings::default() };
    settings.lr.learning_rate = 3e-3;
    settings.lr.warmup_iters = 0;
    settings.lr.lr_decay_iters = 40;
    let data = Dataset::load(&DataSource::Builtin { version: vramfit::corpus::CORPUS_VERSION }).unwrap();
    let device = Device::Cpu;
    let model = Gpt::new_mixed(&cfg, ModelOptions::default(), &device, settings.seed, compute).unwrap();
    let mut optimizer = AdamW::new(model.params(), settings.adamw);
    let interrupt = AtomicBool::new(false);
    let run = Run {
        cfg: &cfg,
        settings: &settings,
        data: &data,
        device: &device,
        model: &model,
        optimizer: &mut optimizer,
        interrupt: &interrupt,
    };
    let mut progress = Progress::new(&out_dir, 0, settings.max_iters, 1000).unwrap();
    let summary = train::run(run, None, &mut progress).unwrap();
    progress.finish();
    let ckpt = vramfit::checkpoint::load(&out_dir.join(vramfit::checkpoint::FILE_NAME), &device).unwrap();
    let log = std::fs::read_to_string(out_dir.join("log.jsonl")).unwrap();
    let losses: Vec<f64> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "iter")
        .map(|v| v["loss"].as_f64().unwrap())
        .collect();
    (summary, ckpt, losses)
}

// One test per dtype, so that the two runs share the cores.
#[test]
fn f16_with_loss_scaling_trains() {
    trains_in(DType::F16, "mixed-f16");
}

#[test]
fn bf16_trains() {
    trains_in(DType::BF16, "mixed-bf16");
}

fn trains_in(compute: DType, name: &str) {
    let (summary, ckpt, losses) = run_mixed(compute, name);
    assert_eq!(summary.iter_num, 40);
    assert_eq!(losses.len(), 40);
    let (first, last) = (losses[..5].iter().sum::<f64>() / 5.0, losses[35..].iter().sum::<f64>() / 5.0);
    assert!(last < first - 0.3, "{compute:?}: loss {first:.3} -> {last:.3}");
    let (_, val) = summary.last_eval.unwrap();
    assert!(val.is_finite() && (val as f64) < first, "{compute:?}: val loss {val}");
    // Master weights and AdamW state stay f32; only f16 keeps a loss scale, and the checkpoint has it.
    assert!(ckpt.params.iter().chain(&ckpt.exp_avg).all(|t| t.dtype() == DType::F32));
    match compute {
        DType::F16 => {
            let scaler = ckpt.meta.loss_scaler.expect("f16 saves its loss scale");
            assert!(scaler.scale <= LossScaler::INIT_SCALE && scaler.scale >= 1.0, "{scaler:?}");
            // Every iteration that overflowed skipped its step, so steps + skips = iterations.
            let skipped = (LossScaler::INIT_SCALE / scaler.scale).log2().round() as u64;
            assert_eq!(ckpt.meta.optimizer_steps + skipped, 40, "{scaler:?}");
        }
        _ => {
            assert_eq!(ckpt.meta.loss_scaler, None);
            assert_eq!(ckpt.meta.optimizer_steps, 40);
        }
    }
}
