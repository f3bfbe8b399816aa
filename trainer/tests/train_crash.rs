//! A crash or kill while a checkpoint is being written leaves the previous checkpoint whole and
//! loadable (temporary file, fsync, rename).

mod train_support;

use std::process::Stdio;
use std::time::{Duration, Instant};
use train_support::*;

/// The process dies (abort) at `moment` of its next checkpoint write; the old checkpoint survives
/// byte for byte, `sample` still reads it, and `--resume` carries on from it.
#[cfg(debug_assertions)] // the crash hook exists in debug builds only
fn crash_at(moment: &str) {
    let dir = scratch(&format!("crash-{moment}"));
    train_ok(&dir, &["--max-iters", "4", "--eval-interval", "4"]);
    let before = std::fs::read(dir.join("ckpt.safetensors")).unwrap();

    let mut cmd = vramfit();
    cmd.args(["train", "--out-dir", dir.to_str().unwrap(), "--resume", "--max-iters", "8"]);
    let out = cmd.env("VRAMFIT_TEST_CRASH_IN_CHECKPOINT", moment).output().unwrap();
    assert!(!out.status.success(), "the hook should have aborted the run: {}", text(&out.stdout));
    assert_eq!(out.status.code(), None, "killed by a signal (abort), not an exit");
    // The torn or complete-but-unrenamed temporary file is there; the checkpoint is the old one.
    let leftovers: Vec<_> =
        std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().contains(".tmp-")).collect();
    assert_eq!(leftovers.len(), 1, "one temporary file left by the crash");
    assert_eq!(std::fs::read(dir.join("ckpt.safetensors")).unwrap(), before);
    let (meta, _) = checkpoint_tensors(&dir);
    assert_eq!(meta.iter_num, 4);

    let sample = run(&["sample", "--out-dir", dir.to_str().unwrap(), "--num-samples", "1", "--max-new-tokens", "5"]);
    assert!(sample.status.success(), "{}", text(&sample.stderr));
    let resumed = train_ok(&dir, &["--resume", "--max-iters", "8"]);
    assert!(text(&resumed.stderr).contains("removed 1 temporary checkpoint file"), "{}", text(&resumed.stderr));
    assert_eq!(checkpoint_tensors(&dir).0.iter_num, 8);
    assert!(std::fs::read_dir(&dir).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().contains(".tmp-")));
}

#[test]
#[cfg(debug_assertions)]
fn crash_mid_write_keeps_the_previous_checkpoint() {
    crash_at("mid-write");
}

#[test]
#[cfg(debug_assertions)]
fn crash_before_rename_keeps_the_previous_checkpoint() {
    crash_at("before-rename");
}

/// SIGKILL at assorted moments of runs that checkpoint every iteration: the checkpoint always
/// loads afterwards (the two tests above pin down the exact moments; this one is the real thing).
/// Each run is killed once it has saved a checkpoint of its own, after a delay that differs from
/// run to run, so the kills land at different points of the iteration and of the next write.
#[test]
fn kill_at_any_moment_leaves_a_loadable_checkpoint() {
    let dir = scratch("kill-9");
    train_ok(&dir, &["--max-iters", "2", "--eval-interval", "1"]);
    let saves = || std::fs::read_to_string(dir.join("log.jsonl")).unwrap_or_default().matches("\"kind\":\"checkpoint\"").count();
    let mut iters = vec![checkpoint_tensors(&dir).0.iter_num];
    for delay_ms in [0u64, 3, 7, 12, 20, 35] {
        let saved_before = saves();
        let mut cmd = vramfit();
        cmd.args(["train", "--out-dir", dir.to_str().unwrap(), "--resume", "--max-iters", "100000", "--eval-interval", "1"]);
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while saves() == saved_before {
            assert!(Instant::now() < deadline, "the resumed run saved no checkpoint in 60 s");
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().unwrap(); // SIGKILL on Unix
        let _ = child.wait();
        let iter = checkpoint_tensors(&dir).0.iter_num;
        assert!(iter > *iters.last().unwrap(), "the checkpoint did not move past iteration {iter}: {iters:?}");
        iters.push(iter);
    }
}

/// A second Ctrl-C while the first one's save is being written quits at once, saying that the
/// save was abandoned and the previous checkpoint kept (it exited 130 without a word), and
/// removes the save's temporary file; the previous checkpoint stays byte for byte.
#[cfg(unix)]
#[test]
#[cfg(debug_assertions)] // the pause hook exists in debug builds only
fn a_second_ctrl_c_during_a_save_abandons_it() {
    let dir = scratch("ctrl-c-twice-in-save");
    train_ok(&dir, &["--max-iters", "2", "--eval-interval", "2"]);
    let before = std::fs::read(dir.join("ckpt.safetensors")).unwrap();
    let temp_files =
        || std::fs::read_dir(&dir).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains(".tmp-")).count();
    let interrupt = |pid: u32| assert!(std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap().success());
    let mut cmd = vramfit();
    cmd.args(["train", "--out-dir", dir.to_str().unwrap(), "--resume", "--max-iters", "100000", "--eval-interval", "100000"]);
    let child =
        cmd.env("VRAMFIT_TEST_CRASH_IN_CHECKPOINT", "pause-before-rename").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "{what} within 60 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_for("iterations logged", &|| {
        std::fs::read_to_string(dir.join("log.jsonl")).unwrap_or_default().matches("\"kind\":\"iter\"").count() >= 3
    });
    interrupt(child.id());
    // The first Ctrl-C's save, paused before its rename.
    wait_for("the save's temporary file", &|| temp_files() == 1);
    interrupt(child.id());
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let ckpt = dir.join("ckpt.safetensors");
    assert!(
        stderr.contains(&format!(
            "interrupt: quit at once: the save in progress was abandoned; {} is the previous one, kept",
            ckpt.display()
        )),
        "{stderr}"
    );
    assert_eq!(temp_files(), 0, "the abandoned save's temporary file was left");
    assert_eq!(std::fs::read(&ckpt).unwrap(), before, "the previous checkpoint was replaced");
}
