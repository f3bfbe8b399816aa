//! Inputs and moments a fuzzing review found mishandled: a named pipe where a config file or
//! meta.pkl goes (the run waited forever), Ctrl-C during a long evaluation (ignored until it
//! ended), files in `--out-dir` no checkpoint accounts for (lost), and a checkpoint setting the
//! flags refuse (accepted).

mod train_support;

use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};
use train_support::*;

fn assert_has(line: &str, parts: &[&str]) {
    for part in parts {
        assert!(line.contains(part), "{line:?} lacks {part:?}");
    }
}

/// Waits for `child`, failing the test (instead of hanging it) if it is still running after `secs`.
fn wait_within(mut child: Child, secs: u64, what: &str) -> Output {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn run_within(args: &[&str], secs: u64) -> Output {
    let child = vramfit().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the binary runs");
    wait_within(child, secs, &format!("{args:?}"))
}

#[cfg(unix)]
fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status().expect("mkfifo (coreutils) runs");
    assert!(made.success(), "mkfifo {}", path.display());
}

/// A named pipe nothing writes to, as a config file or as the meta.pkl beside train.bin and
/// val.bin, is refused with one line, as it is as a data file or checkpoint; opening it waited
/// forever.
#[cfg(unix)]
#[test]
fn a_named_pipe_as_config_file_or_meta_pkl_is_refused() {
    let dir = scratch("robust-fifo");
    let config = dir.join("f.py");
    mkfifo(&config);
    let line = one_error_line(&run_within(&["plan", "--config", config.to_str().unwrap()], 30));
    assert_has(&line, &["cannot read config file", "f.py", "a named pipe or socket, not a file"]);
    let out_dir = dir.join("out");
    let line = one_error_line(&run_within(&["train", "--config", config.to_str().unwrap(), "--out-dir", out_dir.to_str().unwrap()], 30));
    assert_has(&line, &["cannot read config file", "a named pipe or socket, not a file"]);

    let bins = dir.join("bins");
    std::fs::create_dir_all(&bins).unwrap();
    let ids: Vec<u8> = (0..400u16).map(|i| i % 7).flat_map(|i| i.to_le_bytes()).collect();
    std::fs::write(bins.join("train.bin"), &ids).unwrap();
    std::fs::write(bins.join("val.bin"), &ids[..200]).unwrap();
    mkfifo(&bins.join("meta.pkl"));
    let mut args = vec!["train", "--out-dir", out_dir.to_str().unwrap(), "--data", bins.to_str().unwrap()];
    args.extend_from_slice(&TINY);
    let line = one_error_line(&run_within(&args, 30));
    assert_has(&line, &["meta.pkl", "a named pipe or socket, not a file"]);
    assert!(!out_dir.exists(), "a refused run created its out_dir");
    // A directory where a config file goes is named as one, not as an OS error.
    let line = one_error_line(&run_within(&["plan", "--config", dir.to_str().unwrap()], 30));
    assert_has(&line, &["cannot read config file", "it is a directory, not a file"]);
}

/// TINY with an evaluation of 2^20 batches per split (minutes, even for this model).
const TINY_LONG_EVAL: [&str; 14] = [
    "--n-layer",
    "1",
    "--n-head",
    "2",
    "--n-embd",
    "16",
    "--block-size",
    "16",
    "--batch-size",
    "4",
    "--eval-iters",
    "1048576",
    "--threads",
    "1",
];

/// Ctrl-C in the middle of a long evaluation stops the run within moments (it waited for the
/// whole evaluation). The evaluation cut short is no evaluation: nothing logged, no best val
/// loss, and the checkpoint says it is still to do, from the random state before it, so a resume
/// trains exactly as a run never interrupted.
#[cfg(unix)]
#[test]
fn ctrl_c_stops_a_long_evaluation_and_resume_repeats_it() {
    let split = scratch("robust-ctrl-c-eval");
    let straight = scratch("robust-ctrl-c-eval-straight");
    let mut cmd = vramfit();
    cmd.args(["train", "--out-dir", split.to_str().unwrap()]).args(TINY_LONG_EVAL).args(["--max-iters", "100", "--eval-interval", "50"]);
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // The log is opened just before the loop, whose first step is the evaluation at iteration 0.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !split.join("log.jsonl").exists() {
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    let sent = std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    let out = wait_within(child, 20, "a run interrupted mid-evaluation");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(log_records(&split, "eval").is_empty(), "an evaluation cut short was logged");
    let (meta, _) = checkpoint_tensors(&split);
    assert_eq!((meta.iter_num, meta.evaluated, meta.best_val_loss), (0, false, None));

    let common = ["--max-iters", "4", "--eval-interval", "2", "--eval-iters", "2"];
    train_ok(&straight, &common);
    let resumed = run(&[&["train", "--out-dir", split.to_str().unwrap(), "--resume"][..], &common].concat());
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    let (meta_a, a) = checkpoint_tensors(&straight);
    let (meta_b, b) = checkpoint_tensors(&split);
    assert_eq!((meta_b.iter_num, meta_b.best_val_loss, meta_b.rng_state), (4, meta_a.best_val_loss, meta_a.rng_state));
    assert_same_tensors(&a, &b, "straight run and run resumed after Ctrl-C mid-evaluation");
}

/// A fresh run in a directory holding a log and a loss curve but no checkpoint (the user's own
/// files, or a run that saved nothing) keeps them under names no run writes, and says so; they
/// were renamed, then removed at the first save, and overwritten.
#[test]
fn files_no_checkpoint_accounts_for_are_kept() {
    let dir = scratch("robust-unclaimed");
    std::fs::write(dir.join("log.jsonl"), "my own log\n").unwrap();
    std::fs::write(dir.join("loss.svg"), "<svg>my own plot</svg>").unwrap();
    let out = train_ok(&dir, &["--max-iters", "2", "--eval-interval", "2"]);
    let stderr = text(&out.stderr);
    assert_has(&stderr, &["no checkpoint in", "kept as", "log.old-1.jsonl", "loss.old-1.svg"]);
    assert_eq!(std::fs::read_to_string(dir.join("log.old-1.jsonl")).unwrap(), "my own log\n");
    assert_eq!(std::fs::read_to_string(dir.join("loss.old-1.svg")).unwrap(), "<svg>my own plot</svg>");
    assert!(!dir.join("log.previous.jsonl").exists());
    assert_eq!(log_records(&dir, "checkpoint").len(), 1, "this run's own log");
    // Without its checkpoint, that run's files are set aside in turn, beside the first ones.
    let first_log = std::fs::read(dir.join("log.jsonl")).unwrap();
    std::fs::remove_file(dir.join("ckpt.safetensors")).unwrap();
    train_ok(&dir, &["--max-iters", "2", "--eval-interval", "2"]);
    assert_eq!(std::fs::read(dir.join("log.old-2.jsonl")).unwrap(), first_log);
    assert!(dir.join("loss.old-2.svg").is_file());
    assert_eq!(std::fs::read_to_string(dir.join("log.old-1.jsonl")).unwrap(), "my own log\n");
}

/// `--max-iters 0` over a finished run keeps its checkpoint, and now its loss curve too (it drew
/// a curve of one evaluation over it).
#[test]
fn a_run_of_no_iterations_keeps_the_previous_loss_curve() {
    let dir = scratch("robust-zero-iters");
    train_ok(&dir, &["--max-iters", "2", "--eval-interval", "2"]);
    let svg = std::fs::read(dir.join("loss.svg")).unwrap();
    let ckpt = std::fs::read(dir.join("ckpt.safetensors")).unwrap();
    let out = train_ok(&dir, &["--max-iters", "0"]);
    let stdout = text(&out.stdout);
    assert_eq!(std::fs::read(dir.join("loss.svg")).unwrap(), svg, "the previous run's loss curve was redrawn");
    assert_eq!(std::fs::read(dir.join("ckpt.safetensors")).unwrap(), ckpt);
    assert_has(&stdout, &["is the previous run's, kept", "(this run drew no loss curve)"]);
    // In an empty directory a run of no iterations still draws its evaluation.
    let empty = scratch("robust-zero-iters-empty");
    train_ok(&empty, &["--max-iters", "0"]);
    assert!(empty.join("loss.svg").is_file());
}

/// A checkpoint whose eval_chunk_rows is 0, which `--eval-chunk-rows` refuses, is refused on
/// `--resume` as the checkpoint's (not trained on and saved again); the flag can put it right.
#[test]
fn a_checkpoint_with_zero_eval_chunk_rows_is_refused() {
    let dir = scratch("robust-eval-chunk-rows");
    train_ok(&dir, &["--max-iters", "2", "--eval-interval", "2"]);
    let path = dir.join("ckpt.safetensors");
    let mut doctored = vramfit::checkpoint::load(&path, &candle_core::Device::Cpu).unwrap();
    doctored.meta.settings.eval_chunk_rows = Some(0);
    vramfit::checkpoint::save(&path, &doctored).unwrap();
    let before = std::fs::read(&path).unwrap();
    let out = run(&["train", "--out-dir", dir.to_str().unwrap(), "--resume", "--max-iters", "4"]);
    assert_has(&one_error_line(&out), &[&format!("checkpoint {}: eval_chunk_rows must be at least 1 (got 0)", path.display())]);
    assert_eq!(std::fs::read(&path).unwrap(), before, "a refused run wrote the checkpoint");
    let out = run(&["train", "--out-dir", dir.to_str().unwrap(), "--resume", "--max-iters", "4", "--eval-chunk-rows", "8"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(checkpoint_tensors(&dir).0.settings.eval_chunk_rows, Some(8));
}
