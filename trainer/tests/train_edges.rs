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

/// loss.svg cannot be written (a directory holds its name): training still succeeds, says so
/// once (not at every save), and leaves no temporary file behind.
#[test]
fn unwritable_loss_plot_leaves_no_temporary_file() {
    let dir = scratch("svg-blocked");
    std::fs::create_dir_all(dir.join("loss.svg")).unwrap();
    let out = train_ok(&dir, &["--max-iters", "4", "--eval-interval", "1"]);
    assert_eq!(text(&out.stderr).matches("note: cannot draw").count(), 1, "{}", text(&out.stderr));
    // The summary does not point at a curve it could not draw.
    let stdout = text(&out.stdout);
    assert!(stdout.contains("(this run drew no loss curve)") && !stdout.contains("loss curve: "), "{stdout}");
    let mut names: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, [".vramfit-train.lock", "ckpt.safetensors", "log.jsonl", "loss.svg"]);
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

/// Output that cannot be written is an error (exit 1, one line), as for `plan`; only a closed
/// pipe (`| head`) ends the output quietly.
#[cfg(target_os = "linux")]
#[test]
fn sample_output_that_cannot_be_written_is_an_error() {
    let dir = scratch("sample-dev-full");
    train_ok(&dir, &["--max-iters", "1"]);
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let out = vramfit()
        .args(["sample", "--out-dir", dir.to_str().unwrap(), "--num-samples", "1", "--max-new-tokens", "5"])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "error: cannot write output: No space left on device (os error 28)\n");
    // A closed pipe: exit 0, nothing said.
    let mut child = vramfit()
        .args(["sample", "--out-dir", dir.to_str().unwrap(), "--num-samples", "10000", "--max-new-tokens", "5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

/// `train`'s report that cannot be written (stdout on a full disk) does not stop training, but
/// is said once on stderr: the run finishes, saves, and logs as usual.
#[cfg(target_os = "linux")]
#[test]
fn a_train_report_that_cannot_be_written_is_said_once() {
    let dir = scratch("train-dev-full");
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let mut args = vec!["train", "--out-dir", dir.to_str().unwrap(), "--max-iters", "2", "--eval-interval", "1"];
    args.extend_from_slice(&TINY);
    let out = vramfit().args(&args).stdout(full).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains("cannot write the report to standard output")).collect();
    assert_eq!(said, ["note: cannot write the report to standard output: No space left on device (os error 28); training goes on, with its records in log.jsonl"], "{stderr}");
    assert!(dir.join("ckpt.safetensors").is_file());
    assert_eq!(log_records(&dir, "iter").len(), 2);
}

/// Without --prompt, samples start from a newline; a vocabulary without one (a text with no
/// line break, or GPT-2 ids in a model too small for id 198) starts from its first token, with a
/// note, instead of an error blaming a --prompt that was not given.
#[test]
fn samples_without_a_newline_start_from_the_first_token() {
    let dir = scratch("no-newline");
    let data = dir.join("one_line.txt");
    std::fs::write(&data, "abcabd cab dbca ".repeat(40)).unwrap();
    let chars = dir.join("chars");
    train_ok(&chars, &["--max-iters", "1", "--data", data.to_str().unwrap()]);
    // nanoGPT .bin data (GPT-2 ids) in a model of 100 tokens.
    let bins = dir.join("bins");
    std::fs::create_dir_all(&bins).unwrap();
    let ids: Vec<u8> = (0..400u16).map(|i| i % 90).flat_map(|i| i.to_le_bytes()).collect();
    std::fs::write(bins.join("train.bin"), &ids).unwrap();
    std::fs::write(bins.join("val.bin"), &ids[..200]).unwrap();
    let gpt2 = dir.join("gpt2");
    train_ok(&gpt2, &["--max-iters", "1", "--data", bins.to_str().unwrap(), "--vocab-size", "100"]);
    for (out_dir, why, first) in [
        (&chars, "the checkpoint's vocabulary has no newline", "\" \""),
        (&gpt2, "the newline's token 198 is not below the model's vocab_size 100", "\"!\""),
    ] {
        let out = run(&["sample", "--out-dir", out_dir.to_str().unwrap(), "--num-samples", "1", "--max-new-tokens", "5"]);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains(&format!("note: {why}: the samples start from token 0, {first}")), "{stderr}");
        assert!(!stderr.contains("--prompt:"), "{stderr}");
        assert!(!out.stdout.is_empty());
    }
    // A --prompt the vocabulary lacks is still the prompt's error.
    let line = one_error_line(&run(&["sample", "--out-dir", chars.to_str().unwrap(), "--prompt", "\n"]));
    assert!(line.contains("--prompt: the character '\\n' is not in the checkpoint's vocabulary"), "{line}");
}

/// Two runs on one out_dir at once: the second is refused (one line naming the first's pid,
/// exit 2) before it writes anything, and the first finishes undisturbed. A lock left by a killed
/// run (the OS released it) does not block the next run; `sample` reads while a run trains.
#[test]
fn one_run_at_a_time_per_out_dir() {
    let dir = scratch("locked");
    let d = dir.to_str().unwrap();
    let lock = dir.join(".vramfit-train.lock");
    let start_slow = |extra: &[&str]| {
        let mut cmd = vramfit();
        cmd.args(["train", "--out-dir", d]).args(TINY).args(extra).env("VRAMFIT_TEST_ITERATION_PAUSE_MS", "50");
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
    };
    let wait_for_iters = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::fs::read_to_string(dir.join("log.jsonl")).unwrap_or_default().matches("\"kind\":\"iter\"").count() < n {
            assert!(Instant::now() < deadline, "no iterations logged");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let first = start_slow(&["--max-iters", "40", "--eval-interval", "2"]);
    wait_for_iters(3);
    let line = one_error_line(&run(&["train", "--out-dir", d, "--max-iters", "2"]));
    assert!(line.contains(&format!("--out-dir {d} is in use by another vramfit train (pid {})", first.id())), "{line}");
    let resumed = one_error_line(&run(&["train", "--out-dir", d, "--resume", "--max-iters", "50"]));
    assert!(resumed.contains("is in use by another vramfit train"), "{resumed}");
    let sample = run(&["sample", "--out-dir", d, "--num-samples", "1", "--max-new-tokens", "5"]);
    assert!(sample.status.success(), "{}", text(&sample.stderr));
    let out = first.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (meta, _) = checkpoint_tensors(&dir);
    assert_eq!((meta.iter_num, meta.settings.max_iters), (40, 40), "the checkpoint is not the first run's");
    assert_eq!(log_records(&dir, "iter").len(), 40, "another run wrote to the log");
    // The file stays (as Cargo's do); its lock went with the run, so the next run goes ahead.
    assert!(lock.exists());

    // SIGKILL: the lock goes with the process too.
    let mut killed = start_slow(&["--resume", "--max-iters", "1000"]);
    wait_for_iters(43);
    killed.kill().unwrap();
    killed.wait().unwrap();
    train_ok(&dir, &["--resume", "--max-iters", "60", "--eval-interval", "2"]);
}

/// What a run's end says is what happened. A run of no training step: its memory is set beside
/// the evaluation at start, the one window that ran (it was set beside a training step's
/// prediction, +158%). One iteration is singular. A run whose val loss never went below its
/// first value with always_save_checkpoint off says so (it blamed iteration 0).
#[test]
fn the_end_of_a_run_says_what_ran() {
    let out = train_ok(&scratch("end-no-steps"), &["--max-iters", "0"]);
    let stdout = text(&out.stdout);
    let memory = stdout.lines().find(|l| l.starts_with("memory: measured peak of the run")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(memory.contains(" for the evaluation at start, all that ran: no training step did ("), "{memory}");
    assert!(stdout.contains("done: 0 iterations,") && stdout.contains("no checkpoint written (none is saved at iteration 0)"), "{stdout}");

    let out = train_ok(&scratch("end-one-step"), &["--max-iters", "1"]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("x 1 micro-step = ") && stdout.contains(" tokens per iteration, 1 iteration, lr "), "{stdout}");
    assert!(stdout.contains("done: 1 iteration,"), "{stdout}");
    let memory = stdout.lines().find(|l| l.starts_with("memory: measured peak of the run")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(memory.contains(", predicted ") && !memory.contains("evaluation at start"), "{memory}");

    // A val split of one window and a learning rate of 0: every evaluation scores the same
    // model on the same sequence, so none goes below the first.
    let dir = scratch("end-never-improved");
    let data = dir.join("text.txt");
    std::fs::write(&data, "abcdefghij".repeat(17)).unwrap();
    let out = train_ok(
        &dir.join("out"),
        &["--data", data.to_str().unwrap(), "--max-iters", "2", "--learning-rate", "0", "--always-save-checkpoint", "false"],
    );
    let stdout = text(&out.stdout);
    let vals: Vec<&str> = stdout.lines().filter(|l| l.starts_with("step ")).filter_map(|l| l.split("val loss ").nth(1)).collect();
    assert!(vals.len() == 2 && vals[0] == vals[1], "{stdout}");
    assert!(
        stdout.contains(&format!(
            "no checkpoint written: val loss never went below its first value, {} at iteration 0 (which is never saved), and \
             always_save_checkpoint is off",
            vals[0]
        )),
        "{stdout}"
    );
}

/// A save says why it was made: "best val loss so far" only below every val loss measured;
/// with always_save_checkpoint, below the last save's (train.py's best_val_loss) is not that
/// (it was labelled "best val loss").
#[test]
fn a_save_says_truthfully_why_it_was_made() {
    let dir = scratch("save-reason");
    let last_reason = || log_records(&dir, "checkpoint").last().map(|r| r["why"].as_str().unwrap().to_string()).unwrap();
    train_ok(&dir, &["--max-iters", "2", "--eval-interval", "2"]);
    assert_eq!(last_reason(), "best val loss so far");
    // The last save's val loss far above anything, the lowest measured far below.
    let doctor = || {
        let path = dir.join("ckpt.safetensors");
        let mut doctored = vramfit::checkpoint::load(&path, &candle_core::Device::Cpu).unwrap();
        (doctored.meta.best_val_loss, doctored.meta.lowest_val_loss) = (Some(100.0), Some(0.001));
        vramfit::checkpoint::save(&path, &doctored).unwrap();
    };
    doctor();
    let out = train_ok(&dir, &["--resume", "--max-iters", "4", "--eval-interval", "2"]);
    assert_eq!(last_reason(), "always_save_checkpoint");
    assert!(text(&out.stdout).contains("(always_save_checkpoint)"), "{}", text(&out.stdout));
    doctor();
    train_ok(&dir, &["--resume", "--max-iters", "6", "--eval-interval", "2", "--always-save-checkpoint", "false"]);
    assert_eq!(last_reason(), "val loss below the last save's");
    // A checkpoint of no evaluation yet (Ctrl-C in the first one) resumes saying so (it read
    // "lowest val loss so far none yet"), and its first save is the best so far.
    let path = dir.join("ckpt.safetensors");
    let mut doctored = vramfit::checkpoint::load(&path, &candle_core::Device::Cpu).unwrap();
    (doctored.meta.best_val_loss, doctored.meta.lowest_val_loss) = (None, None);
    vramfit::checkpoint::save(&path, &doctored).unwrap();
    let out = train_ok(&dir, &["--resume", "--max-iters", "8", "--eval-interval", "2"]);
    assert!(text(&out.stdout).contains("resuming from iteration 6 (no val loss measured yet)"), "{}", text(&out.stdout));
    assert_eq!(last_reason(), "best val loss so far");
}
