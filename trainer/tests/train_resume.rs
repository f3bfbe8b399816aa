//! `--resume` continues exactly where the run stopped: a run split in two (by an early stop, or
//! by Ctrl-C at whatever iteration it lands) ends with the same weights, optimizer state and
//! losses, bit for bit, as the run done in one go.

mod train_support;

use std::process::Stdio;
use std::time::{Duration, Instant};
use train_support::*;

/// Dropout and gradient accumulation on, so the batch RNG, the dropout seeds and the accumulated
/// gradients all have to come back exactly; decay over the whole 8 iterations.
const SETTINGS: [&str; 10] =
    ["--dropout", "0.1", "--gradient-accumulation-steps", "2", "--eval-interval", "4", "--lr-decay-iters", "8", "--warmup-iters", "2"];

fn losses(out_dir: &std::path::Path, kind: &str, field: &str) -> Vec<(u64, f64)> {
    let mut by_iter = std::collections::BTreeMap::new();
    for r in log_records(out_dir, kind) {
        by_iter.insert(r["iter"].as_u64().unwrap(), r[field].as_f64().unwrap());
    }
    by_iter.into_iter().collect()
}

/// The 8-iteration run done in one go, and its first 4 iterations in another directory (to be
/// resumed): the two directories.
fn straight_and_first_half(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let straight = scratch(&format!("{name}-straight"));
    let split = scratch(&format!("{name}-split"));
    let mut args = SETTINGS.to_vec();
    args.extend(["--max-iters", "8"]);
    train_ok(&straight, &args);
    let mut first = SETTINGS.to_vec();
    first.extend(["--max-iters", "4"]);
    train_ok(&split, &first);
    (straight, split)
}

#[test]
fn resume_is_bit_identical_to_an_uninterrupted_run() {
    let (straight, split) = straight_and_first_half("resume");
    let (meta, _) = checkpoint_tensors(&split);
    assert_eq!((meta.iter_num, meta.optimizer_steps), (4, 4));
    let out = train_ok(&split, &["--resume", "--max-iters", "8"]);
    assert!(text(&out.stdout).contains("resuming from iteration 4"), "{}", text(&out.stdout));

    let (meta_a, tensors_a) = checkpoint_tensors(&straight);
    let (meta_b, tensors_b) = checkpoint_tensors(&split);
    assert_eq!(meta_a.iter_num, 8);
    assert_eq!((meta_a.iter_num, meta_a.rng_state, meta_a.best_val_loss), (meta_b.iter_num, meta_b.rng_state, meta_b.best_val_loss));
    assert_same_tensors(&tensors_a, &tensors_b, "straight run and resumed run");
    assert_eq!(losses(&straight, "iter", "loss"), losses(&split, "iter", "loss"));
    assert_eq!(losses(&straight, "eval", "val_loss"), losses(&split, "eval", "val_loss"));
    // Training did something: the loss moved and the weights are not the initial ones.
    let train = losses(&straight, "iter", "loss");
    assert_eq!(train.len(), 8);
    assert_ne!(train[0].1, train[7].1);
}

#[test]
fn ctrl_c_saves_and_resume_finishes_identically() {
    let straight = scratch("ctrlc-straight");
    let split = scratch("ctrlc-split");
    let common = ["--eval-interval", "1000", "--lr-decay-iters", "200", "--dropout", "0.1"];
    let mut args = common.to_vec();
    args.extend(["--max-iters", "200"]);
    train_ok(&straight, &args);

    let mut cmd = vramfit();
    cmd.args(["train", "--out-dir", split.to_str().unwrap()]).args(TINY).args(common).args(["--max-iters", "200"]);
    // 50 ms between iterations (debug builds' hook): the run would take 10 s, so the signal
    // lands before its end even on a loaded machine; the results do not depend on the pause.
    cmd.env("VRAMFIT_TEST_ITERATION_PAUSE_MS", "50");
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // Interrupt once a few iterations are logged.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let logged = std::fs::read_to_string(split.join("log.jsonl")).unwrap_or_default();
        if logged.matches("\"kind\":\"iter\"").count() >= 3 {
            break;
        }
        assert!(Instant::now() < deadline, "no iterations logged");
        std::thread::sleep(Duration::from_millis(5));
    }
    let sent = std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    // 130: stopped by Ctrl-C with a checkpoint (0 would mean the run ended before the signal).
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let (meta, _) = checkpoint_tensors(&split);
    assert!(meta.iter_num >= 3 && meta.iter_num < 200, "interrupted at {}", meta.iter_num);
    // Its only evaluation was at iteration 0 (eval_interval 1000): the summary says so.
    let stdout = text(&out.stdout);
    assert!(stdout.contains(&format!("interrupted at iteration {}", meta.iter_num)), "{stdout}");
    assert!(stdout.contains(" nats at iteration 0, its last evaluation (lowest "), "{stdout}");

    train_ok(&split, &["--resume"]);
    let (_, a) = checkpoint_tensors(&straight);
    let (meta_b, b) = checkpoint_tensors(&split);
    assert_eq!(meta_b.iter_num, 200);
    assert_same_tensors(&a, &b, "straight run and run resumed after Ctrl-C");
}

/// A resumed run that failed after the checkpoint's save (killed, or stopped at a NaN loss)
/// left records of iterations the next resume runs again: that resume cuts the log back to the
/// checkpoint's save, so each iteration and evaluation is logged once, as in one straight run.
#[test]
fn resume_cuts_the_log_back_to_the_checkpoint() {
    let (straight, split) = straight_and_first_half("log-cut");
    // What a lost run after the save would have written: iteration 4's step and the eval
    // after it, then nothing saved.
    let log = split.join("log.jsonl");
    let mut logged = std::fs::read_to_string(&log).unwrap();
    let saved_log = logged.clone();
    logged.push_str(
        "{\"iter\":4,\"kind\":\"iter\",\"loss\":9.0,\"lr\":null}\n{\"iter\":5,\"kind\":\"eval\",\"train_loss\":null,\"val_loss\":null}\n",
    );
    std::fs::write(&log, logged).unwrap();
    let out = train_ok(&split, &["--resume", "--max-iters", "8"]);
    assert!(text(&out.stderr).contains("removed 2 record(s) written after the checkpoint's save"), "{}", text(&out.stderr));
    let after = std::fs::read_to_string(&log).unwrap();
    assert!(after.starts_with(&saved_log), "the checkpoint's own records stay");
    let count = |dir: &std::path::Path, kind: &str| log_records(dir, kind).len();
    for kind in ["iter", "eval", "checkpoint"] {
        assert_eq!(count(&split, kind), count(&straight, kind), "{kind} records");
    }
    assert_eq!(losses(&straight, "iter", "loss"), losses(&split, "iter", "loss"));
    // A resume with nothing after the save changes nothing: no note.
    let out = train_ok(&split, &["--resume", "--max-iters", "9"]);
    assert!(!text(&out.stderr).contains("removed"), "{}", text(&out.stderr));
}

/// A run directory moved to `./out` resumes there with a bare `--resume` (not in the directory
/// the checkpoint was first written to).
#[test]
fn a_moved_run_directory_resumes_in_place() {
    let parent = scratch("moved");
    let first = parent.join("first");
    train_ok(&first, &["--max-iters", "2", "--eval-interval", "2"]);
    std::fs::rename(&first, parent.join("out")).unwrap();
    let out = vramfit().current_dir(&parent).args(["train", "--resume", "--max-iters", "4"]).args(TINY).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(checkpoint_tensors(&parent.join("out")).0.iter_num, 4);
    assert!(!first.exists(), "the resumed run wrote to the old directory");
}

/// A checkpoint names its data as the run was given it; resumed from another directory, a
/// relative path is not found there, and the error says where it was relative to.
#[test]
fn resuming_elsewhere_names_where_the_data_path_is_relative_to() {
    let parent = scratch("resume-elsewhere");
    let run = parent.join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("tiny.txt"), "a small text to learn from, repeated. ".repeat(40)).unwrap();
    let out = vramfit()
        .current_dir(&run)
        .args(["train", "--data", "tiny.txt", "--out-dir", "o", "--max-iters", "2"])
        .args(TINY)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let elsewhere =
        vramfit().current_dir(&parent).args(["train", "--resume", "--out-dir", "run/o", "--max-iters", "4"]).args(TINY).output().unwrap();
    let err = one_error_line(&elsewhere);
    assert!(err.contains("cannot read data file tiny.txt") && err.contains("relative to the directory its run started in"), "{err}");
    // From where it started, it resumes.
    let there = vramfit().current_dir(&run).args(["train", "--resume", "--out-dir", "o", "--max-iters", "4"]).args(TINY).output().unwrap();
    assert!(there.status.success(), "{}", text(&there.stderr));
}

/// The memory savers change what is kept, not what is computed: the same run with activation
/// checkpointing, chunked loss and chunked eval logs the same losses (up to float summation order).
#[test]
fn memory_savers_train_the_same_model() {
    let plain = scratch("savers-off");
    let saving = scratch("savers-on");
    let common = ["--max-iters", "4", "--eval-interval", "2", "--dropout", "0.1"];
    train_ok(&plain, &common);
    let mut args = common.to_vec();
    args.extend(["--activation-checkpointing", "true", "--chunked-loss", "true", "--eval-chunk-rows", "16"]);
    train_ok(&saving, &args);
    for (kind, field) in [("iter", "loss"), ("eval", "val_loss")] {
        let a = losses(&plain, kind, field);
        let b = losses(&saving, kind, field);
        // Four iterations; evaluations at 0, 2 and 4.
        let expected = if kind == "iter" { 4 } else { 3 };
        assert_eq!((a.len(), b.len()), (expected, expected), "{kind} records");
        for ((i, x), (j, y)) in a.iter().zip(&b) {
            assert_eq!(i, j);
            assert!((x - y).abs() <= 1e-5 * x.abs(), "{kind} {i}: {x} vs {y}");
        }
    }
    let (meta, _) = checkpoint_tensors(&saving);
    assert!(meta.config.activation_checkpointing && meta.settings.chunked_loss);
    assert_eq!(meta.settings.eval_chunk_rows, Some(16));
}

/// A checkpoint records its data's fingerprint; resumed on data that changed since (an edited
/// text file, new `.bin`s), the run goes on and says which split changed, and for the val split
/// that the best val loss was measured on the old one. Unchanged data says nothing; other data
/// (`--data` elsewhere) is said to be not the checkpoint's.
#[test]
fn resume_says_when_the_data_changed() {
    let dir = scratch("resume-data-changed");
    let bins = dir.join("bins");
    std::fs::create_dir_all(&bins).unwrap();
    let ids = |n: u16, salt: u16| -> Vec<u8> { (0..n).map(|i| (i * 7 + salt) % 97).flat_map(|i| i.to_le_bytes()).collect() };
    std::fs::write(bins.join("train.bin"), ids(400, 0)).unwrap();
    std::fs::write(bins.join("val.bin"), ids(200, 0)).unwrap();
    let out = dir.join("out");
    let data = ["--data", bins.to_str().unwrap(), "--vocab-size", "97", "--eval-interval", "1"];
    let mut first = data.to_vec();
    first.extend(["--max-iters", "1"]);
    train_ok(&out, &first);
    let fingerprint = checkpoint_tensors(&out).0.data_fingerprint.expect("a new checkpoint has its data's fingerprint");
    assert_eq!((fingerprint.train.tokens, fingerprint.val.tokens), (400, 200));
    assert_ne!(fingerprint.train.hash, fingerprint.val.hash);

    // The same data: no note.
    let same = train_ok(&out, &["--resume", "--max-iters", "2"]);
    assert!(!text(&same.stderr).contains("changed since"), "{}", text(&same.stderr));

    // One id of the train split changed, lengths kept.
    let mut train = ids(400, 0);
    train[2 * 123] = (train[2 * 123] + 1) % 97;
    std::fs::write(bins.join("train.bin"), &train).unwrap();
    let edited = train_ok(&out, &["--resume", "--max-iters", "3"]);
    let stderr = text(&edited.stderr);
    assert!(stderr.contains("changed since this checkpoint was written: the train split has other ids in its 400 tokens."), "{stderr}");
    assert!(!stderr.contains("val split"), "{stderr}");

    // A longer val split: its length, and the best val loss's caveat.
    std::fs::write(bins.join("val.bin"), ids(300, 5)).unwrap();
    let longer = train_ok(&out, &["--resume", "--max-iters", "4"]);
    let stderr = text(&longer.stderr);
    assert!(stderr.contains("the val split has 300 tokens where it had 200"), "{stderr}");
    assert!(stderr.contains("was measured on the old val split"), "{stderr}");
    assert!(!stderr.contains("train split"), "the previous resume's checkpoint records the edited train split: {stderr}");
    assert_eq!(checkpoint_tensors(&out).0.iter_num, 4);

    // Other data named with --data: not "changed", but not the checkpoint's.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("train.bin"), ids(400, 3)).unwrap();
    std::fs::write(other.join("val.bin"), ids(300, 5)).unwrap();
    let moved = train_ok(&out, &["--resume", "--max-iters", "5", "--data", other.to_str().unwrap()]);
    let stderr = text(&moved.stderr);
    assert!(stderr.contains("is not the data this checkpoint was trained on"), "{stderr}");
    assert!(stderr.contains("the train split has other ids in its 400 tokens") && !stderr.contains("changed since"), "{stderr}");
}

/// With always_save_checkpoint (train.py's default and train's) every evaluation saves and
/// becomes train.py's `best_val_loss`, whether or not it improved: the summary and a resume
/// report the lowest val loss measured instead, across the resume. A learning rate far too
/// high makes the val loss rise between evaluations (asserted, so the case cannot go stale).
#[test]
fn the_lowest_val_loss_is_reported_even_when_every_evaluation_saves() {
    let dir = scratch("lowest-val-loss");
    let first = ["--eval-interval", "2", "--learning-rate", "1.0", "--warmup-iters", "0", "--lr-decay-iters", "12"];
    let out = train_ok(&dir, &[&first[..], &["--max-iters", "6"]].concat());
    let val = losses(&dir, "eval", "val_loss");
    let lowest = val.iter().map(|&(_, l)| l).fold(f64::INFINITY, f64::min);
    let last = val.last().unwrap().1;
    let (meta, _) = checkpoint_tensors(&dir);
    assert!(last > lowest, "the case needs a val loss that rose by the last evaluation: {val:?}");
    assert_eq!(meta.best_val_loss.map(f64::from), Some(last), "train.py's best_val_loss: the last save's");
    assert_eq!(meta.lowest_val_loss.map(f64::from), Some(lowest));
    let stdout = text(&out.stdout);
    assert!(stdout.contains(&format!("(lowest {lowest:.4})")), "{stdout}");

    let out = train_ok(&dir, &["--resume", "--max-iters", "8"]);
    assert!(text(&out.stdout).contains(&format!("lowest val loss so far {lowest:.4}")), "{}", text(&out.stdout));
    let all = losses(&dir, "eval", "val_loss");
    let lowest_now = all.iter().map(|&(_, l)| l).fold(f64::INFINITY, f64::min);
    assert_eq!(checkpoint_tensors(&dir).0.lowest_val_loss.map(f64::from), Some(lowest_now));
}

/// SIGTERM (`kill`, a job scheduler's stop) saves a checkpoint as Ctrl-C does: the run stops
/// after its current iteration with code 130, and `--resume` goes on from there.
#[cfg(unix)]
#[test]
fn sigterm_saves_a_checkpoint_like_ctrl_c() {
    let dir = scratch("sigterm");
    let mut cmd = vramfit();
    cmd.args(["train", "--out-dir", dir.to_str().unwrap()]).args(TINY).args(["--eval-interval", "1000", "--max-iters", "200"]);
    cmd.env("VRAMFIT_TEST_ITERATION_PAUSE_MS", "50");
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(dir.join("log.jsonl")).unwrap_or_default().matches("\"kind\":\"iter\"").count() < 3 {
        assert!(Instant::now() < deadline, "no iterations logged");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    let (meta, _) = checkpoint_tensors(&dir);
    assert!(meta.iter_num >= 3 && meta.iter_num < 200, "stopped at {}", meta.iter_num);
    assert!(text(&out.stdout).contains(&format!("interrupted at iteration {}", meta.iter_num)), "{}", text(&out.stdout));
    let out = train_ok(&dir, &["--resume", "--max-iters", &(meta.iter_num + 2).to_string()]);
    assert!(text(&out.stdout).contains(&format!("resuming from iteration {}", meta.iter_num)), "{}", text(&out.stdout));
}

/// A resumed run's memory line counts the run's own memory: the model and AdamW's moments it
/// took from the checkpoint included, the checkpoint's own copies not (they are dropped once
/// the model and optimizer hold the values). It once left the moments out, reading a third
/// below the same run done in one go.
#[test]
fn a_resumed_runs_measured_peak_is_the_runs_own() {
    let dir = scratch("resume-memory");
    let out_dir = dir.to_str().unwrap();
    let model = ["--n-layer", "2", "--n-head", "2", "--n-embd", "64", "--block-size", "32", "--batch-size", "4", "--eval-iters", "2"];
    let ok = |args: &[&str]| {
        let out = run(&[&["train", "--out-dir", out_dir, "--threads", "1", "--eval-interval", "4"][..], args].concat());
        assert!(out.status.success(), "{}", text(&out.stderr));
        out
    };
    let measured = |out: &std::process::Output| -> f64 {
        let stdout = text(&out.stdout);
        let line = stdout.lines().find(|l| l.starts_with("memory: measured peak of the run")).unwrap_or_else(|| panic!("{stdout}"));
        line.split(") ").nth(1).and_then(|s| s.split(' ').next()?.parse().ok()).unwrap_or_else(|| panic!("{line}"))
    };
    let fresh = measured(&ok(&[&model[..], &["--max-iters", "4"]].concat()));
    let resumed = measured(&ok(&["--resume", "--max-iters", "8"]));
    assert!((resumed - fresh).abs() <= 0.05 * fresh, "fresh {fresh} MiB, resumed {resumed} MiB");
}

/// A resumed run gets the threads its model gets in a fresh run: one for the small default
/// model, every core for another (a resume names no model flags, so it always counted as the
/// small default and dropped to one thread), and so does a link naming the small default's shape.
#[test]
fn a_resumed_run_gets_the_threads_of_its_model() {
    let threads_of = |out_dir: &std::path::Path, args: &[&str]| {
        let out = vramfit()
            .args(["train", "--out-dir", out_dir.to_str().unwrap(), "--eval-iters", "1"])
            .args(args)
            .env_remove("CANDLE_NUM_THREADS")
            .env_remove("RAYON_NUM_THREADS")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        stdout.split(" on cpu (").nth(1).and_then(|s| s.split(')').next()).map(str::to_string).unwrap_or_else(|| panic!("{stdout}"))
    };
    let sized = scratch("resume-threads-sized");
    let fresh = threads_of(&sized, &["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--max-iters", "1"]);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(fresh, format!("{cores} thread{}", if cores == 1 { "" } else { "s" }), "a model sized by flags");
    assert_eq!(threads_of(&sized, &["--resume", "--max-iters", "2"]), fresh, "its resumed run");
    let small = scratch("resume-threads-small");
    assert_eq!(threads_of(&small, &["--max-iters", "1"]), "1 thread", "the small default model");
    assert_eq!(threads_of(&small, &["--resume", "--max-iters", "2"]), "1 thread", "its resumed run");
    let linked = scratch("resume-threads-link");
    assert_eq!(threads_of(&linked, &["--link", "?v=1&L=2&C=64&H=4&T=64&B=16", "--max-iters", "1"]), "1 thread", "the same model by a link");
}
