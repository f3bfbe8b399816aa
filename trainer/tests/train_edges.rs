//! Runs that go wrong part-way must not cost what was there before, and sampling settings at
//! their limits still mean what they say.

mod train_support;

use std::process::Stdio;
use std::time::{Duration, Instant};
use train_support::*;

/// Weights blown up by an absurd learning rate: the evaluation that sees the NaN loss ends the run
/// (exit 1, one `error:` line) and the previous checkpoint stays byte for byte, instead of being
/// replaced by a NaN model under always_save_checkpoint.
#[test]
fn nan_loss_at_an_evaluation_keeps_the_previous_checkpoint() {
    let dir = scratch("nan-eval");
    train_ok(&dir, &["--max-iters", "2", "--eval-interval", "2"]);
    let before = std::fs::read(dir.join("ckpt.safetensors")).unwrap();
    let args =
        ["train", "--out-dir", dir.to_str().unwrap(), "--resume", "--max-iters", "10", "--eval-interval", "2", "--learning-rate", "1e30"];
    let out = run(&args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("note:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].starts_with("error: the estimated train loss became NaN at iteration 4"), "{stderr}");
    assert!(!text(&out.stdout).contains("saved checkpoint"), "{}", text(&out.stdout));
    assert_eq!(std::fs::read(dir.join("ckpt.safetensors")).unwrap(), before, "the checkpoint was replaced");
}

/// loss.svg cannot be written (a directory holds its name): training still succeeds, says so,
/// and leaves no temporary file behind.
#[test]
fn unwritable_loss_plot_leaves_no_temporary_file() {
    let dir = scratch("svg-blocked");
    std::fs::create_dir_all(dir.join("loss.svg")).unwrap();
    let out = train_ok(&dir, &["--max-iters", "2", "--eval-interval", "2"]);
    assert!(text(&out.stderr).contains("note: cannot draw"), "{}", text(&out.stderr));
    let mut names: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["ckpt.safetensors", "log.jsonl", "loss.svg"]);
}

/// A temperature so small that logits / temperature overflows is greedy decoding (top-k 1), not
/// NaN weights that always pick token 0.
#[test]
fn tiny_temperature_samples_greedily() {
    let dir = scratch("tiny-temperature");
    train_ok(&dir, &["--max-iters", "2", "--eval-interval", "2"]);
    let sample = |extra: &[&str]| {
        let mut args =
            vec!["sample", "--out-dir", dir.to_str().unwrap(), "--prompt", "the ", "--max-new-tokens", "20", "--num-samples", "2"];
        args.extend_from_slice(extra);
        let out = run(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let greedy = sample(&["--top-k", "1"]);
    assert_eq!(sample(&["--temperature", "1e-320"]), greedy);
    assert_eq!(sample(&["--temperature", "1e-5"]), greedy);
}

/// A fresh run in a used out_dir keeps the previous run's log aside until it saves: runs that
/// fail before saving, one after another, never cost the checkpoint its log, and a resume
/// continues the checkpoint's own log.
#[test]
fn the_checkpoints_log_stays_with_it() {
    let dir = scratch("fresh-over-old");
    let d = dir.to_str().unwrap();
    train_ok(&dir, &["--max-iters", "2", "--eval-interval", "2"]);
    let first_log = std::fs::read(dir.join("log.jsonl")).unwrap();
    let first_ckpt = std::fs::read(dir.join("ckpt.safetensors")).unwrap();
    // Two fresh runs that fail at their first evaluation, before any save.
    for _ in 0..2 {
        let out = vramfit()
            .args(["train", "--out-dir", d])
            .args(TINY)
            .args(["--max-iters", "10", "--eval-interval", "2", "--learning-rate", "1e30"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert_eq!(std::fs::read(dir.join("log.previous.jsonl")).unwrap(), first_log);
        assert_eq!(std::fs::read(dir.join("ckpt.safetensors")).unwrap(), first_ckpt);
    }
    // Resuming the checkpoint continues its own log, not the failed runs'.
    let out = run(&["train", "--out-dir", d, "--resume", "--max-iters", "4", "--eval-interval", "2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!dir.join("log.previous.jsonl").exists());
    let log = std::fs::read(dir.join("log.jsonl")).unwrap();
    assert!(log.starts_with(&first_log) && log.len() > first_log.len(), "the resumed log does not continue the first one");
    // A fresh run that saves: the log kept aside goes with the checkpoint it belonged to.
    train_ok(&dir, &["--max-iters", "2", "--eval-interval", "2"]);
    assert!(!dir.join("log.previous.jsonl").exists());
}

/// Ctrl-C in a fresh run before its first save, in a directory holding a finished run: the
/// previous checkpoint and its log stay byte for byte (no "interrupted" checkpoint of a few
/// iterations replaces them), and `--resume` still continues the previous run.
#[test]
fn ctrl_c_before_the_first_save_keeps_the_previous_run() {
    let dir = scratch("ctrl-c-fresh-over-old");
    let d = dir.to_str().unwrap();
    train_ok(&dir, &["--max-iters", "2", "--eval-interval", "2"]);
    let old_ckpt = std::fs::read(dir.join("ckpt.safetensors")).unwrap();
    let old_log = std::fs::read(dir.join("log.jsonl")).unwrap();

    let mut cmd = vramfit();
    cmd.args(["train", "--out-dir", d]).args(TINY).args(["--max-iters", "100000", "--eval-interval", "100000"]);
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // The old log (2 iterations) is moved aside at the start; wait for the new run's iterations.
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(dir.join("log.jsonl")).unwrap_or_default().matches("\"kind\":\"iter\"").count() < 3 {
        assert!(Instant::now() < deadline, "no iterations logged");
        std::thread::sleep(Duration::from_millis(5));
    }
    let sent = std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("Ctrl-C before then keeps it"), "{stderr}");
    assert!(!stdout.contains("saved checkpoint"), "{stdout}");
    assert!(stdout.contains("is the previous run's, kept"), "{stdout}");
    assert_eq!(std::fs::read(dir.join("ckpt.safetensors")).unwrap(), old_ckpt, "the previous checkpoint was replaced");
    assert_eq!(std::fs::read(dir.join("log.previous.jsonl")).unwrap(), old_log, "the previous run's log was lost");

    // --resume continues the previous run, with its own log.
    train_ok(&dir, &["--resume", "--max-iters", "4", "--eval-interval", "2"]);
    assert_eq!(checkpoint_tensors(&dir).0.iter_num, 4);
    assert!(std::fs::read(dir.join("log.jsonl")).unwrap().starts_with(&old_log));
}

/// PyTorch-only settings (`--optimizer sgd` trained AdamW silently) are named once, not dropped.
#[test]
fn pytorch_only_settings_are_named() {
    let dir = scratch("pytorch-only");
    let out = train_ok(&dir, &["--max-iters", "1", "--optimizer", "sgd", "--compile", "true"]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("not applied: optimizer = sgd (it trains AdamW), compile = true"), "{stdout}");
    let plain = train_ok(&scratch("pytorch-only-plain"), &["--max-iters", "1"]);
    assert!(!text(&plain.stdout).contains("not applied"), "{}", text(&plain.stdout));
}
