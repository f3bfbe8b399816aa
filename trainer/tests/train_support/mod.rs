//! Helpers shared by the `train_*` integration tests: run the binary, tiny models, scratch dirs.

#![allow(dead_code)] // each test file uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A model small enough that an iteration takes milliseconds in a debug build.
pub const TINY: [&str; 14] =
    ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "4", "--eval-iters", "2", "--threads", "1"];

pub fn vramfit() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vramfit"));
    cmd.env_remove("VRAMFIT_TEST_CRASH_IN_CHECKPOINT")
        .env_remove("VRAMFIT_TEST_ITERATION_PAUSE_MS")
        .env_remove("VRAMFIT_TEST_ALLOCATE_AFTER_PREFLIGHT");
    cmd
}

pub fn run(args: &[&str]) -> Output {
    vramfit().args(args).output().expect("the binary runs")
}

/// Runs `vramfit train` with the tiny model, `out_dir` and `extra`; asserts success.
pub fn train_ok(out_dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["train", "--out-dir", out_dir.to_str().unwrap()];
    args.extend_from_slice(&TINY);
    args.extend_from_slice(extra);
    let out = run(&args);
    assert!(out.status.success(), "{args:?}\nstdout: {}\nstderr: {}", text(&out.stdout), text(&out.stderr));
    out
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A fresh, empty directory under Cargo's scratch space.
pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("train-tests").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Asserts the bad-input contract: exit 2, nothing on stdout, exactly one `error:` line; returns it.
pub fn one_error_line(out: &Output) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}\nstdout: {}", text(&out.stdout));
    assert!(out.stdout.is_empty(), "stdout: {}", text(&out.stdout));
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("note:")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    lines[0].to_string()
}

/// The log's records of one kind, in file order.
pub fn log_records(out_dir: &Path, kind: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(out_dir.join("log.jsonl")).expect("log.jsonl");
    text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line")).filter(|v| v["kind"] == kind).collect()
}

/// Asserts two checkpoints' tensors (from [`checkpoint_tensors`]) are the same, bit for bit:
/// as many tensors, each as long, each value the same (`what` says which runs differ).
pub fn assert_same_tensors(a: &[Vec<f32>], b: &[Vec<f32>], what: &str) {
    assert!(!a.is_empty(), "{what}: a checkpoint without tensors");
    assert_eq!(a.len(), b.len(), "{what}: the checkpoints hold different numbers of tensors");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.len(), y.len(), "{what}: tensor {i} has a different length");
        assert!(x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()), "{what}: tensor {i} differs");
    }
}

/// Every tensor of a checkpoint as raw f32 values, by name (params and optimizer state).
pub fn checkpoint_tensors(out_dir: &Path) -> (vramfit::checkpoint::CheckpointMeta, Vec<Vec<f32>>) {
    let ckpt = vramfit::checkpoint::load(&out_dir.join("ckpt.safetensors"), &candle_core::Device::Cpu).expect("checkpoint loads");
    let all = ckpt.params.iter().chain(&ckpt.exp_avg).chain(&ckpt.exp_avg_sq);
    let values = all.map(|t| t.flatten_all().unwrap().to_vec1::<f32>().unwrap()).collect();
    (ckpt.meta, values)
}
