//! Bad input to `train` and `sample` (data files, checkpoints, flags): one `error:` line on
//! stderr, nothing on stdout, exit code 2 — never a panic.

mod train_support;

use std::path::Path;
use train_support::*;

fn train_err(out_dir: &Path, extra: &[&str]) -> String {
    let mut args = vec!["train", "--out-dir", out_dir.to_str().unwrap()];
    args.extend_from_slice(&TINY);
    args.extend_from_slice(extra);
    one_error_line(&run(&args))
}

fn assert_has(line: &str, parts: &[&str]) {
    for part in parts {
        assert!(line.contains(part), "{line:?} lacks {part:?}");
    }
}

#[test]
fn bad_data_files() {
    let dir = scratch("bad-data");
    let out = dir.join("out");
    let missing = dir.join("missing.txt");
    assert_has(&train_err(&out, &["--data", missing.to_str().unwrap()]), &["cannot read data file", "missing.txt"]);

    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    assert_has(&train_err(&out, &["--data", empty.to_str().unwrap()]), &["empty.txt", "is empty"]);

    // 40 characters: the val split (4) cannot hold block_size + 1 = 17 tokens.
    let short = dir.join("short.txt");
    std::fs::write(&short, "abcdefghij".repeat(4)).unwrap();
    assert_has(&train_err(&out, &["--data", short.to_str().unwrap()]), &["val split", "fewer than block_size + 1 = 17"]);

    let binary = dir.join("binary.txt");
    std::fs::write(&binary, [0xffu8, 0xfe, 0x00, 0x80].repeat(100)).unwrap();
    assert_has(&train_err(&out, &["--data", binary.to_str().unwrap()]), &["not UTF-8"]);

    // More distinct characters than an explicit vocab_size.
    let text = dir.join("text.txt");
    std::fs::write(&text, "the quick brown fox jumps over the lazy dog. ".repeat(20)).unwrap();
    assert_has(&train_err(&out, &["--data", text.to_str().unwrap(), "--vocab-size", "10"]), &["distinct characters", "vocab_size is 10"]);

    // nanoGPT .bin files: an id at or above vocab_size, an odd byte count, a missing val.bin.
    let bins = dir.join("bins");
    std::fs::create_dir_all(&bins).unwrap();
    let ids: Vec<u8> = (0..200u16).map(|i| i % 50).chain([60_000]).flat_map(|i| i.to_le_bytes()).collect();
    std::fs::write(bins.join("train.bin"), &ids).unwrap();
    std::fs::write(bins.join("val.bin"), &ids[..100]).unwrap();
    assert_has(
        &train_err(&out, &["--data", bins.to_str().unwrap()]),
        &["token id 60000 at position 200", "train split", "vocab_size 50304"],
    );
    assert_has(&train_err(&out, &["--data", bins.to_str().unwrap(), "--tokenizer", "gpt2"]), &["--tokenizer applies to text files"]);
    std::fs::write(bins.join("train.bin"), &ids[..41]).unwrap();
    assert_has(&train_err(&out, &["--data", bins.to_str().unwrap()]), &["odd number of bytes"]);
    std::fs::remove_file(bins.join("val.bin")).unwrap();
    std::fs::write(bins.join("train.bin"), &ids[..100]).unwrap();
    assert_has(&train_err(&out, &["--data", bins.to_str().unwrap()]), &["cannot read data file", "val.bin"]);
    assert!(!out.join("ckpt.safetensors").exists());
}

/// `sample` reads the thread count from the environment as `train` does (it decides it once,
/// before candle's pools start): one that is not a count is an error, not every core.
#[test]
fn sample_refuses_a_thread_count_that_is_not_one() {
    let dir = scratch("sample-threads");
    for (var, other) in [("CANDLE_NUM_THREADS", "RAYON_NUM_THREADS"), ("RAYON_NUM_THREADS", "CANDLE_NUM_THREADS")] {
        let out = vramfit().env(var, "abc").env_remove(other).args(["sample", "--out-dir", dir.to_str().unwrap()]).output().unwrap();
        assert_has(&one_error_line(&out), &[&format!("{var}=abc is not a thread count")]);
        // --threads decides over the environment, as for train (then the missing checkpoint).
        let out = vramfit()
            .env(var, "abc")
            .env_remove(other)
            .args(["sample", "--threads", "1", "--out-dir", dir.to_str().unwrap()])
            .output()
            .unwrap();
        assert_has(&one_error_line(&out), &["no checkpoint at"]);
    }
}

/// A checkpoint whose tensors hold the right counts in the wrong shapes (wte transposed, or an
/// optimizer moment) is refused before the run prints anything: it used to print its model and
/// data lines first, then fail loading the weights.
#[test]
fn a_checkpoint_with_a_reshaped_tensor_is_refused_before_anything_is_printed() {
    let dir = scratch("reshaped-ckpt");
    train_ok(&dir, &["--max-iters", "2", "--eval-interval", "2"]);
    let path = dir.join("ckpt.safetensors");
    let cpu = candle_core::Device::Cpu;
    let transpose = |t: &candle_core::Tensor| t.t().unwrap().contiguous().unwrap();
    for (tamper, expect) in [(0, "its transformer.wte.weight is [16, "), (1, "its optimizer exp_avg of transformer.wte.weight is [16, ")] {
        let mut ckpt = vramfit::checkpoint::load(&path, &cpu).unwrap();
        assert!(ckpt.meta.optimizer_steps > 0 && ckpt.meta.param_names[0] == "transformer.wte.weight");
        if tamper == 0 {
            ckpt.params[0] = transpose(&ckpt.params[0]);
        } else {
            ckpt.exp_avg[0] = transpose(&ckpt.exp_avg[0]);
        }
        let bad = scratch(&format!("reshaped-ckpt-{tamper}"));
        vramfit::checkpoint::save(&bad.join("ckpt.safetensors"), &ckpt).unwrap();
        let resumed = run(&["train", "--out-dir", bad.to_str().unwrap(), "--resume", "--max-iters", "4"]);
        assert!(resumed.stdout.is_empty(), "{}", String::from_utf8_lossy(&resumed.stdout));
        assert_has(&one_error_line(&resumed), &["not a usable vramfit checkpoint", expect]);
        if tamper == 0 {
            let sampled = run(&["sample", "--out-dir", bad.to_str().unwrap()]);
            assert!(sampled.stdout.is_empty());
            assert_has(&one_error_line(&sampled), &[expect]);
        }
    }
    // The untouched one still resumes.
    train_ok(&dir, &["--resume", "--max-iters", "4"]);
}

#[test]
fn bad_checkpoints() {
    let dir = scratch("bad-ckpt");
    // No checkpoint at all.
    assert_has(&train_err(&dir, &["--resume"]), &["--resume: no checkpoint"]);
    assert_has(&one_error_line(&run(&["sample", "--out-dir", dir.to_str().unwrap()])), &["no checkpoint at"]);

    // Not safetensors, a truncated one, and a safetensors file that is not vramfit's.
    let ckpt = dir.join("ckpt.safetensors");
    std::fs::write(&ckpt, "this is not a checkpoint").unwrap();
    assert_has(&train_err(&dir, &["--resume"]), &["not a usable vramfit checkpoint"]);
    assert_has(&one_error_line(&run(&["sample", "--out-dir", dir.to_str().unwrap()])), &["not a usable vramfit checkpoint"]);

    let good = scratch("bad-ckpt-good");
    train_ok(&good, &["--max-iters", "2", "--eval-interval", "2"]);
    let bytes = std::fs::read(good.join("ckpt.safetensors")).unwrap();
    std::fs::write(&ckpt, &bytes[..bytes.len() - 100]).unwrap();
    assert_has(&train_err(&dir, &["--resume"]), &["not a usable vramfit checkpoint"]);

    let foreign = candle_core::Tensor::zeros(4, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
    candle_core::safetensors::save(&std::collections::HashMap::from([("w".to_string(), foreign)]), &ckpt).unwrap();
    assert_has(&one_error_line(&run(&["sample", "--out-dir", dir.to_str().unwrap()])), &["no vramfit metadata"]);

    // A good checkpoint resumed with a different model shape, or with --config.
    let resume_wider = run(&["train", "--out-dir", good.to_str().unwrap(), "--resume", "--n-embd", "32"]);
    assert_has(&one_error_line(&resume_wider), &["n_embd = 16, not 32"]);
    let cfg = dir.join("cfg.py");
    std::fs::write(&cfg, "max_iters = 4\n").unwrap();
    assert_has(&train_err(&good, &["--resume", "--config", cfg.to_str().unwrap()]), &["--resume takes the settings from the checkpoint"]);
    // Resuming on other data with another vocabulary.
    let other = dir.join("other.txt");
    std::fs::write(&other, "0123456789".repeat(100)).unwrap();
    let other_data = ["--resume", "--max-iters", "4", "--data", other.to_str().unwrap()];
    assert_has(&train_err(&good, &other_data), &["vocabulary", "differs from the checkpoint's"]);
    // A checkpoint whose config was edited to a far larger model than its tensors: refused
    // before a model of that size is built.
    let mut doctored = vramfit::checkpoint::load(&good.join("ckpt.safetensors"), &candle_core::Device::Cpu).unwrap();
    doctored.meta.config.n_layer = 1000;
    vramfit::checkpoint::save(&ckpt, &doctored).unwrap();
    assert_has(&one_error_line(&run(&["sample", "--out-dir", dir.to_str().unwrap()])), &["tensors with", "its config needs"]);
    assert_has(&train_err(&dir, &["--resume"]), &["tensors with", "its config needs"]);
    // Non-finite weights (sampling printed only newlines), and a character vocabulary that is
    // not the model's (sampling printed U+FFFD): refused by both commands.
    let mut poisoned = vramfit::checkpoint::load(&good.join("ckpt.safetensors"), &candle_core::Device::Cpu).unwrap();
    poisoned.params[1] = (poisoned.params[1].clone() * f64::NAN).unwrap();
    vramfit::checkpoint::save(&ckpt, &poisoned).unwrap();
    let nan = ["holds NaN or infinite values"];
    assert_has(&one_error_line(&run(&["sample", "--out-dir", dir.to_str().unwrap()])), &nan);
    assert_has(&train_err(&dir, &["--resume"]), &nan);
    // An infinite second moment is AdamW's own state, not a broken model: sampling reads it.
    let mut inf_moment = vramfit::checkpoint::load(&good.join("ckpt.safetensors"), &candle_core::Device::Cpu).unwrap();
    inf_moment.exp_avg_sq[0] = inf_moment.exp_avg_sq[0].affine(0.0, f64::INFINITY).unwrap();
    vramfit::checkpoint::save(&ckpt, &inf_moment).unwrap();
    let out = run(&["sample", "--out-dir", dir.to_str().unwrap(), "--max-new-tokens", "5"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A NaN moment is not: resuming from it stopped at a "loss became NaN" that blamed the
    // learning rate. Refused at load, and the checkpoint is left as it was.
    let mut nan_moment = vramfit::checkpoint::load(&good.join("ckpt.safetensors"), &candle_core::Device::Cpu).unwrap();
    nan_moment.exp_avg[0] = (nan_moment.exp_avg[0].clone() * f64::NAN).unwrap();
    vramfit::checkpoint::save(&ckpt, &nan_moment).unwrap();
    let saved = std::fs::read(&ckpt).unwrap();
    assert_has(&train_err(&dir, &["--resume", "--max-iters", "4"]), &["optimizer.exp_avg.", "holds NaN values"]);
    assert_eq!(std::fs::read(&ckpt).unwrap(), saved);
    for (chars, why) in
        [("", "vocabulary is empty"), ("aab", "not distinct characters in order"), ("ba", "not distinct characters in order")]
    {
        let mut relabelled = vramfit::checkpoint::load(&good.join("ckpt.safetensors"), &candle_core::Device::Cpu).unwrap();
        relabelled.meta.vocab = vramfit::data::Vocabulary::Chars { chars: chars.into() };
        vramfit::checkpoint::save(&ckpt, &relabelled).unwrap();
        assert_has(&one_error_line(&run(&["sample", "--out-dir", dir.to_str().unwrap()])), &[why]);
    }
    let mut relabelled = vramfit::checkpoint::load(&good.join("ckpt.safetensors"), &candle_core::Device::Cpu).unwrap();
    let size = relabelled.meta.config.vocab_size as usize;
    relabelled.meta.vocab =
        vramfit::data::Vocabulary::Chars { chars: (0..=size).map(|i| char::from_u32(0x4e00 + i as u32).unwrap()).collect() };
    vramfit::checkpoint::save(&ckpt, &relabelled).unwrap();
    assert_has(&one_error_line(&run(&["sample", "--out-dir", dir.to_str().unwrap()])), &[&format!("more than its vocab_size {size}")]);
    // A prompt with a character the vocabulary lacks.
    assert_has(&one_error_line(&run(&["sample", "--out-dir", good.to_str().unwrap(), "--prompt", "ZZZ"])), &["--prompt", "'Z'"]);
}

/// A char model given a vocab_size past its characters (a link's V=64 over the built-in
/// corpus's 32) has ids no character decodes to: samples are drawn among its characters (they
/// printed U+FFFD), with a note.
#[test]
fn samples_from_a_padded_char_model_are_its_characters() {
    let dir = scratch("padded-chars");
    train_ok(&dir, &["--vocab-size", "64", "--max-iters", "1"]);
    let out = run(&["sample", "--out-dir", dir.to_str().unwrap(), "--temperature", "5", "--max-new-tokens", "300", "--num-samples", "2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let samples = text(&out.stdout);
    assert!(samples.chars().filter(|c| !c.is_whitespace() && *c != '-').count() > 100, "{samples}");
    assert!(!samples.contains('\u{FFFD}'), "{samples}");
    assert!(text(&out.stderr).contains("the model's vocab_size 64 is past its vocabulary's"), "{}", text(&out.stderr));
}

#[test]
fn bad_flags() {
    let dir = scratch("bad-flags");
    for (flags, expect) in [
        (vec!["--learning-rate=-1"], "expected a finite number >= 0"),
        (vec!["--learning-rate", "1e308"], "learning_rate must be at most 1e38 (got 1e308)"),
        (vec!["--beta2", "1.5"], "expected a number in [0, 1)"),
        (vec!["--device", "tpu"], "expected cpu or cuda"),
        (vec!["--tokenizer", "bpe"], "expected char or gpt2"),
        (vec!["--eval-interval", "0"], "--eval-interval"),
        (vec!["--max-iters", "lots"], "--max-iters"),
        (vec!["--dropout", "1.5"], "dropout must be in [0, 1)"),
        (vec!["--warmup-iters", "100", "--lr-decay-iters", "50"], "lr_decay_iters (50) must be at least warmup_iters (100)"),
        (vec!["--tokenizer", "gpt2"], "--tokenizer gpt2 needs --data"),
        (vec!["--eval-block-size", "32"], "eval_block_size (32) cannot exceed block_size (16)"),
        // clap's own parser said only "invalid digit found in string".
        (vec!["--max-iters", "-1"], "'-1' for '--max-iters <N>': expected a whole number >= 0"),
        (vec!["--seed", "-1"], "'-1' for '--seed <N>': expected a whole number >= 0"),
        (vec!["--eval-interval", "-1"], "expected a whole number >= 1"),
        (vec!["--warmup-iters", "1e3"], "expected a whole number >= 0"),
        (vec!["--seed", "18446744073709551616"], "expected a whole number <= 18446744073709551615"),
    ] {
        assert_has(&train_err(&dir, &flags), &[expect]);
    }
    // A config file that starts from GPT-2's checkpoint gives the model GPT-2's shape; shape
    // flags on top would train a model that is neither (a link saying both is refused too).
    let gpt2 = dir.join("gpt2.py");
    std::fs::write(&gpt2, "init_from = 'gpt2'\n").unwrap();
    assert_has(
        &train_err(&dir, &["--config", gpt2.to_str().unwrap()]),
        &["init_from = 'gpt2' is GPT-2's model, which has n_layer = 12, not 1"],
    );
    #[cfg(not(feature = "cuda"))]
    assert_has(&train_err(&dir, &["--device", "cuda"]), &["built without CUDA"]);
    for (flags, expect) in [
        (vec!["--temperature", "0"], "expected a finite number > 0"),
        (vec!["--top-k", "0"], "--top-k"),
        (vec!["--num-samples=0"], "--num-samples"),
        (vec!["--seed", "-1"], "expected a whole number >= 0"),
    ] {
        let mut args = vec!["sample", "--out-dir", dir.to_str().unwrap()];
        args.extend(flags);
        assert_has(&one_error_line(&run(&args)), &[expect]);
    }
    assert!(!dir.join("ckpt.safetensors").exists());
}

/// A config file's training setting that cannot be read stops `train` (it would otherwise run
/// on the default), and a string built up without bound is refused, not grown until abort.
#[test]
fn unreadable_config_file_settings() {
    let dir = scratch("bad-config");
    let file = dir.join("train_x.py");
    std::fs::write(&file, "n_layer = 2\nmax_iters = 5000 * n\n").unwrap();
    assert_has(&train_err(&dir, &["--config", file.to_str().unwrap()]), &["train_x.py", "cannot read the value of max_iters"]);
    // The same file given first without --config, as train.py takes it, is read the same way.
    assert_has(&train_err(&dir, &[file.to_str().unwrap()]), &["train_x.py", "cannot read the value of max_iters"]);
    let doubling: String = std::iter::once("a = 'xxxxxxxx'\n".to_string()).chain((0..40).map(|_| "a = a + a\n".to_string())).collect();
    std::fs::write(&file, doubling).unwrap();
    let out = run(&["plan", "--config", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_has(&text(&out.stderr), &["train_x.py", "ignored a", "too long"]);
    assert!(!dir.join("ckpt.safetensors").exists());
}

/// The pre-flight refuses a run predicted not to fit, before allocating or creating anything.
#[test]
fn preflight_refuses_what_does_not_fit() {
    let dir = scratch("preflight-refuses").join("out");
    // The small default model needs more than 1 MiB, and still does with any one memory saver
    // or a micro-batch of 1: none is offered as a fix (activation checkpointing was, for merely
    // lowering the peak), and the one that comes closest is named.
    let line = one_error_line(&run(&["train", "--out-dir", dir.to_str().unwrap(), "--max-memory-mib", "1"]));
    assert_has(
        &line,
        &[
            "this run needs",
            "1.0 MiB is available",
            "no single fix fits (the closest, --batch-size 1 --gradient-accumulation-steps 16, still needs",
        ],
    );
    assert!(!line.contains("fixes:"), "{line}");
    assert!(!dir.exists(), "a refused run created its out_dir");
}

/// Where evaluation is the peak (a large eval batch), the pre-flight offers the eval fixes
/// that fit (it said "use a smaller model"), and one of them, applied, passes it.
#[test]
fn preflight_offers_eval_fixes_when_eval_is_the_peak() {
    let dir = scratch("preflight-eval").join("out");
    let base = ["train", "--out-dir", dir.to_str().unwrap(), "--n-layer", "2", "--n-embd", "128", "--n-head", "4"];
    let rest =
        ["--block-size", "64", "--batch-size", "8", "--max-iters", "1", "--eval-iters", "1", "--threads", "1", "--max-memory-mib", "30"];
    let mut args = base.to_vec();
    args.extend(rest);
    args.extend(["--eval-batch-size", "64"]);
    let line = one_error_line(&run(&args));
    assert_has(&line, &["peak in estimate_loss", "fixes: --eval-batch-size ", "--eval-chunk-rows "]);
    let e: String = line.split("--eval-batch-size ").nth(1).unwrap().chars().take_while(char::is_ascii_digit).collect();
    let mut fixed = base.to_vec();
    fixed.extend(rest);
    fixed.extend(["--eval-batch-size", &e]);
    let out = run(&fixed);
    assert!(out.status.success(), "--eval-batch-size {e}: {}", text(&out.stderr));
}

/// An address-space limit (`ulimit -v`) bounds the pre-flight as free memory does: a run past
/// it is refused up front, not aborted at an allocation with a backtrace after it started.
#[cfg(target_os = "linux")]
#[test]
fn preflight_heeds_the_address_space_limit() {
    let dir = scratch("preflight-ulimit").join("out");
    // 400000 KiB: less than the heap the run needs. 550000 KiB: room for the heap but not for
    // glibc's arenas and the thread stacks, which the first fix accepted and which then aborted
    // at an allocation (`memory allocation of 8388608 bytes failed`, exit 134).
    for kib in ["400000", "550000"] {
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("ulimit -v {kib} && exec \"$0\" \"$@\""), env!("CARGO_BIN_EXE_vramfit"), "train", "--out-dir"])
            .arg(&dir)
            .args(["--n-layer", "2", "--n-embd", "256", "--n-head", "4", "--block-size", "256", "--batch-size", "32"])
            .args(["--max-iters", "2", "--eval-iters", "1", "--threads", "1"])
            .output()
            .unwrap();
        assert_has(&one_error_line(&out), &["this run needs", "MiB is available"]);
        assert!(!dir.exists(), "a refused run created its out_dir");
    }
}

/// Memory the system refuses after the pre-flight passed (another program took it, or a limit
/// the pre-flight did not see) ends the run with one `error: out of memory` line naming the
/// request, the process's heap and the plan, and exit code 1: not Rust's "memory allocation of
/// N bytes failed" and an abort (SIGABRT), which is what such a run showed before.
#[cfg(target_os = "linux")]
#[test]
fn memory_refused_mid_run_is_one_error_line() {
    let dir = scratch("refused-mid-run").join("out");
    let mut args = vec!["train", "--out-dir", dir.to_str().unwrap()];
    args.extend_from_slice(&TINY);
    // 2^50 bytes: more than any machine's address space gives a process, limit or not.
    let out = vramfit().args(&args).env("VRAMFIT_TEST_ALLOCATE_AFTER_PREFLIGHT", (1u64 << 50).to_string()).output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exited, not killed by a signal: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("note:")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert_has(
        lines[0],
        &[
            "error: out of memory: the system refused a block of 1048576.0 GiB",
            "MiB of this process's heap in use",
            "the pre-flight planned a peak of",
        ],
    );
    assert!(!stderr.contains("memory allocation of"), "{stderr}");
}

/// A named pipe nothing writes to, named as a data file or checkpoint, is refused with one line;
/// opening it would wait forever.
#[cfg(unix)]
#[test]
fn named_pipes_are_refused_not_waited_on() {
    let dir = scratch("named-pipes");
    let fifo = |path: &Path| {
        let made = std::process::Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
        assert!(made.success());
    };
    fifo(&dir.join("data.txt"));
    let out_dir = dir.join("out");
    let line = one_error_line(&run_within(
        &["train", "--out-dir", out_dir.to_str().unwrap(), "--data", dir.join("data.txt").to_str().unwrap()],
        60,
    ));
    assert_has(&line, &["cannot read data file", "data.txt", "a named pipe or socket, not a file"]);
    std::fs::create_dir_all(&out_dir).unwrap();
    fifo(&out_dir.join("ckpt.safetensors"));
    let line = one_error_line(&run_within(&["sample", "--out-dir", out_dir.to_str().unwrap()], 60));
    assert_has(&line, &["cannot read checkpoint", "a named pipe or socket, not a file"]);
    let line = one_error_line(&run_within(&["train", "--out-dir", out_dir.to_str().unwrap(), "--resume"], 60));
    assert_has(&line, &["cannot read checkpoint", "a named pipe or socket, not a file"]);
    // A fresh run does not replace it (nor write through a link to a device): refused before
    // training, as a directory there is, and the pipe and the link stay.
    let mut fresh = vec!["train", "--out-dir", out_dir.to_str().unwrap()];
    fresh.extend_from_slice(&TINY);
    let line = one_error_line(&run_within(&fresh, 60));
    assert_has(&line, &["ckpt.safetensors is not a regular file (a named pipe, socket or device)", "move it away"]);
    let linked = dir.join("linked");
    std::fs::create_dir_all(&linked).unwrap();
    std::os::unix::fs::symlink("/dev/null", linked.join("ckpt.safetensors")).unwrap();
    fresh[2] = linked.to_str().unwrap();
    let line = one_error_line(&run_within(&fresh, 60));
    assert_has(&line, &["ckpt.safetensors is not a regular file"]);
    assert!(std::fs::symlink_metadata(linked.join("ckpt.safetensors")).unwrap().file_type().is_symlink());
    assert!(!linked.join("log.jsonl").exists() && !out_dir.join("log.jsonl").exists(), "a refused run started");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(out_dir.join("ckpt.safetensors")).unwrap().file_type().is_fifo(), "the pipe stays");
}

/// The checkpoint records the out_dir and the data's path as text: a name that is not UTF-8 is
/// refused before training, not at the first save with the run lost.
#[cfg(unix)]
#[test]
fn paths_that_are_not_utf8_are_refused_before_training() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = scratch("not-utf8");
    let bad_out = dir.join(OsStr::from_bytes(b"out\xff"));
    let bad_data = dir.join(OsStr::from_bytes(b"data\xff.txt"));
    std::fs::write(&bad_data, "hello world, a little text to train on\n".repeat(40)).unwrap();
    let good_out = dir.join("out");
    let cases = [
        (vec![OsStr::new("--out-dir"), bad_out.as_os_str()], "--out-dir"),
        (vec![OsStr::new("--out-dir"), good_out.as_os_str(), OsStr::new("--data"), bad_data.as_os_str()], "--data"),
    ];
    for (paths, flag) in cases {
        let out = vramfit().arg("train").args(&paths).args(TINY).args(["--max-iters", "2"]).output().expect("the binary runs");
        assert_has(&one_error_line(&out), &[flag, "not valid UTF-8"]);
        assert!(!bad_out.exists() && !good_out.join("log.jsonl").exists(), "a refused run started");
    }
}

/// Config-file settings under which train.py would not train are refused, not noted and trained
/// over: an `init_from` that is none of train.py's (it stops), and `eval_only = True` (it
/// evaluates and writes nothing, where training would replace the checkpoint).
#[test]
fn config_settings_train_py_would_not_train_with_are_refused() {
    let dir = scratch("train-py-would-not-train");
    let shape = "n_layer = 1\nn_head = 2\nn_embd = 16\nblock_size = 16\nbatch_size = 4\neval_iters = 2\nmax_iters = 2\n";
    for (line, expected) in [
        ("init_from = 'gtp2'", &["init_from = 'gtp2' is none of train.py's"][..]),
        ("eval_only = True", &["eval_only = True", "no evaluate-only mode"][..]),
        // train.py's `if iter_num == 0 and eval_only` stops on any true value.
        ("eval_only = 1", &["eval_only = 1", "no evaluate-only mode"][..]),
    ] {
        let file = dir.join("config.py");
        std::fs::write(&file, format!("{line}\n{shape}")).unwrap();
        let out_dir = dir.join("out");
        let out = run_within(&["train", "--config", file.to_str().unwrap(), "--out-dir", out_dir.to_str().unwrap()], 60);
        assert_has(&one_error_line(&out), expected);
        // Nothing of plan's ("vramfit plans the model these settings give") either.
        assert!(!text(&out.stderr).contains("note:"), "{}", text(&out.stderr));
        assert!(!out_dir.exists(), "a refused run created its out_dir");
    }
    // A page link of an eval-only plan (`eo=1`) likewise.
    let out_dir = dir.join("out");
    let link = "v=1&L=1&H=2&C=16&T=16&B=4&GA=1&EI=2&eo=1";
    let out = run_within(&["train", "--link", link, "--max-iters", "2", "--out-dir", out_dir.to_str().unwrap()], 60);
    assert_has(&one_error_line(&out), &["eo=1 (eval_only)", "no evaluate-only mode"]);
    assert!(!out_dir.exists(), "a refused run created its out_dir");
}

/// A config file's vramfit-only settings are `train`'s own: plan's note that stock train.py does
/// not read them (review: `train --config` printed it) is not `train`'s to say.
#[test]
fn train_does_not_say_plans_note_on_vramfit_settings() {
    let dir = scratch("vramfit-settings");
    let file = dir.join("config.py");
    let shape = "n_layer = 1\nn_head = 2\nn_embd = 16\nblock_size = 16\nbatch_size = 4\neval_iters = 2\nmax_iters = 2\n";
    std::fs::write(&file, format!("{shape}eval_batch_size = 2\nactivation_checkpointing = True\n")).unwrap();
    let out_dir = dir.join("out");
    let out = run_within(&["train", "--config", file.to_str().unwrap(), "--out-dir", out_dir.to_str().unwrap()], 120);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("stock train.py does not read"), "{}", text(&out.stderr));
    let plan = run_within(&["plan", file.to_str().unwrap(), "--no-fixes"], 60);
    assert!(text(&plan.stderr).contains("stock train.py does not read"), "plan says it: {}", text(&plan.stderr));
}

/// Runs the binary, failing the test (instead of hanging it) if it is still running after `secs`.
fn run_within(args: &[&str], secs: u64) -> std::process::Output {
    use std::process::Stdio;
    let mut child = vramfit().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the binary runs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still running after {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// A device or an endless stream named as a config file, data file or checkpoint is refused with
/// one line, not read until memory runs out.
#[cfg(unix)]
#[test]
fn devices_and_endless_files_are_refused() {
    let dir = scratch("devices");
    let line = one_error_line(&run_within(&["plan", "--config", "/dev/zero"], 60));
    assert_has(&line, &["cannot read config file /dev/zero", "longer than 64 MiB"]);
    let line = one_error_line(&run_within(&["train", "--out-dir", dir.to_str().unwrap(), "--data", "/dev/zero"], 60));
    assert_has(&line, &["cannot read data file /dev/zero", "a device, not a file"]);
    std::os::unix::fs::symlink("/dev/zero", dir.join("ckpt.safetensors")).unwrap();
    let line = one_error_line(&run_within(&["sample", "--out-dir", dir.to_str().unwrap()], 60));
    assert_has(&line, &["cannot read checkpoint", "a device, not a file"]);
    let line = one_error_line(&run_within(&["train", "--out-dir", dir.to_str().unwrap(), "--resume"], 60));
    assert_has(&line, &["cannot read checkpoint", "a device, not a file"]);
    // An empty config stays fine, /dev/null included.
    let out = run_within(&["plan", "--config", "/dev/null", "--no-fixes"], 60);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Training settings read back from a checkpoint are checked as flags and config files are: a
/// doctored one is refused (and a flag can put the setting right), and an absurd iteration count
/// does not overflow.
#[test]
fn checkpoint_training_settings_are_checked() {
    let good = scratch("ckpt-settings-good");
    train_ok(&good, &["--max-iters", "2", "--eval-interval", "2"]);
    let load = || vramfit::checkpoint::load(&good.join("ckpt.safetensors"), &candle_core::Device::Cpu).unwrap();
    let dir = scratch("ckpt-settings");
    let ckpt = dir.join("ckpt.safetensors");

    let mut doctored = load();
    doctored.meta.settings.lr.learning_rate = -5.0;
    vramfit::checkpoint::save(&ckpt, &doctored).unwrap();
    let before = std::fs::read(&ckpt).unwrap();
    // Named as the checkpoint's, where a flag can put it right.
    assert_has(
        &train_err(&dir, &["--resume", "--max-iters", "4"]),
        &[&format!("checkpoint {}: learning_rate must be a finite number >= 0 (got -5)", ckpt.display())],
    );
    assert_eq!(std::fs::read(&ckpt).unwrap(), before, "a refused run wrote the checkpoint");
    let out = run(&["train", "--out-dir", dir.to_str().unwrap(), "--resume", "--max-iters", "4", "--learning-rate", "1e-3"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let mut doctored = load();
    doctored.meta.settings.adamw.eps = 0.0;
    vramfit::checkpoint::save(&ckpt, &doctored).unwrap();
    assert_has(&train_err(&dir, &["--resume", "--max-iters", "4"]), &["eps must be a finite number > 0 (got 0)"]);

    // More optimizer steps than iterations (u64::MAX overflowed AdamW's count): refused on load,
    // naming the file.
    let mut doctored = load();
    doctored.meta.optimizer_steps = u64::MAX;
    vramfit::checkpoint::save(&ckpt, &doctored).unwrap();
    let expected =
        format!("{} is not a usable vramfit checkpoint: optimizer_steps (18446744073709551615) exceeds iter_num (2)", ckpt.display());
    assert_has(&train_err(&dir, &["--resume", "--max-iters", "4"]), &[&expected]);
    assert_has(&one_error_line(&run(&["sample", "--out-dir", dir.to_str().unwrap()])), &[&expected]);

    // A warmup of u64::MAX iterations overflowed `warmup_iters + 1`; now it trains at a tiny,
    // finite learning rate. lr_decay_iters below it is refused as the checkpoint's.
    let mut doctored = load();
    doctored.meta.settings.lr.warmup_iters = u64::MAX;
    doctored.meta.settings.lr.lr_decay_iters = u64::MAX;
    vramfit::checkpoint::save(&ckpt, &doctored).unwrap();
    let out = run(&["train", "--out-dir", dir.to_str().unwrap(), "--resume", "--max-iters", "4"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The resumed run's iterations 2 and 3, after the earlier run's in this log.
    let lrs: Vec<f64> = log_records(&dir, "iter").iter().rev().take(2).map(|r| r["lr"].as_f64().expect("a finite lr")).collect();
    assert!(lrs.iter().all(|&lr| lr > 0.0 && lr < 1e-15), "{lrs:?}");
    doctored.meta.settings.lr.lr_decay_iters = 5;
    vramfit::checkpoint::save(&ckpt, &doctored).unwrap();
    assert_has(
        &train_err(&dir, &["--resume", "--max-iters", "4"]),
        &[&format!("checkpoint {}: lr_decay_iters (5) must be at least warmup_iters ({})", ckpt.display(), u64::MAX)],
    );

    let mut doctored = load();
    doctored.meta.iter_num = u64::MAX;
    doctored.meta.settings.max_iters = u64::MAX;
    vramfit::checkpoint::save(&ckpt, &doctored).unwrap();
    // Evaluated at max_iters already: nothing left to do, refused (no overflow on the way), and
    // not with advice no count can follow (a --max-iters past u64::MAX).
    let line = train_err(&dir, &["--resume"]);
    assert_has(&line, &[&format!("at iteration {}, the last there is: nothing is left to train", u64::MAX)]);
    assert!(!line.contains("larger than"), "{line}");
    // With the final evaluation still to do, that is what the run does.
    doctored.meta.evaluated = false;
    vramfit::checkpoint::save(&ckpt, &doctored).unwrap();
    let out = run(&["train", "--out-dir", dir.to_str().unwrap(), "--resume"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A config file's `out_dir = ''` would write into the working directory; it is refused.
#[test]
fn empty_out_dir_in_a_config_file() {
    let dir = scratch("empty-out-dir");
    let file = dir.join("train_x.py");
    std::fs::write(&file, "out_dir = ''\n").unwrap();
    let mut args = vec!["train", "--config", file.to_str().unwrap()];
    args.extend_from_slice(&TINY);
    let out = vramfit().args(&args).current_dir(&dir).output().unwrap();
    assert_has(&one_error_line(&out), &["out_dir is empty"]);
    assert!(!dir.join("ckpt.safetensors").exists() && !dir.join("log.jsonl").exists());
}

/// Resuming a checkpoint that is already at (or past) max_iters has nothing to do: one error
/// line saying so, instead of "done" after zero iterations; the checkpoint stays as it is.
#[test]
fn resume_without_iterations_left_is_refused() {
    let dir = scratch("resume-no-iterations-left");
    train_ok(&dir, &["--max-iters", "4", "--eval-interval", "2"]);
    let before = std::fs::read(dir.join("ckpt.safetensors")).unwrap();
    assert_has(
        &train_err(&dir, &["--resume", "--max-iters", "2"]),
        &["already at iteration 4", "max_iters is 2", "--max-iters larger than 4"],
    );
    // Without the flag, max_iters is the checkpoint's own: reached already.
    assert_has(&train_err(&dir, &["--resume"]), &["already at iteration 4", "max_iters is 4"]);
    assert_eq!(std::fs::read(dir.join("ckpt.safetensors")).unwrap(), before);
    train_ok(&dir, &["--resume", "--max-iters", "5"]);
    assert_eq!(checkpoint_tensors(&dir).0.iter_num, 5);
}

/// A fresh run with a warmup and decay of u64::MAX iterations: `warmup_iters + 1` overflowed
/// (a panic in debug builds, an infinite learning rate in release ones).
#[test]
fn endless_warmup_does_not_overflow() {
    let dir = scratch("endless-warmup");
    let max = u64::MAX.to_string();
    train_ok(&dir, &["--max-iters", "3", "--warmup-iters", &max, "--lr-decay-iters", &max]);
    let lrs: Vec<f64> = log_records(&dir, "iter").iter().map(|r| r["lr"].as_f64().expect("a finite lr")).collect();
    assert_eq!(lrs.len(), 3);
    assert!(lrs.iter().all(|&lr| lr > 0.0 && lr < 1e-15), "{lrs:?}");
    train_ok(&dir, &["--resume", "--max-iters", "5"]);
    assert_eq!(checkpoint_tensors(&dir).0.optimizer_steps, 5);
}

/// `--resume` continues the checkpoint's random state: a different `--seed` is refused (it was
/// recorded in the new checkpoint while not used), as shape flags are; the same one is fine.
/// `--tokenizer char` is what the built-in corpus is; `gpt2` differs, and says from what.
#[test]
fn resume_refuses_flags_that_contradict_the_checkpoint() {
    let dir = scratch("resume-seed");
    train_ok(&dir, &["--max-iters", "2", "--eval-interval", "2", "--seed", "7"]);
    let before = std::fs::read(dir.join("ckpt.safetensors")).unwrap();
    assert_has(&train_err(&dir, &["--resume", "--max-iters", "4", "--seed", "8"]), &["--resume", "seed = 7, not 8"]);
    assert_has(
        &train_err(&dir, &["--resume", "--max-iters", "4", "--tokenizer", "gpt2"]),
        &["--tokenizer gpt2 differs from the checkpoint's data, built-in corpus"],
    );
    assert_eq!(std::fs::read(dir.join("ckpt.safetensors")).unwrap(), before);
    train_ok(&dir, &["--resume", "--max-iters", "4", "--seed", "7", "--tokenizer", "char"]);
    assert_eq!(checkpoint_tensors(&dir).0.settings.seed, 7);
}

/// A config file's training setting out of range is named with the file it is in, as core names
/// it for the model settings; the same setting as a bad flag is the flag's.
#[test]
fn config_file_training_errors_name_the_file() {
    let dir = scratch("config-errors");
    let file = dir.join("train_x.py");
    for (contents, expected) in [
        ("learning_rate = -1\n", "learning_rate must be a number >= 0 (got -1)"),
        ("beta1 = 1.5\n", "beta1 must be in [0, 1) (got 1.5)"),
        ("eval_interval = 0\n", "eval_interval must be at least 1"),
        ("warmup_iters = 100\nlr_decay_iters = 50\n", "lr_decay_iters (50) must be at least warmup_iters (100)"),
    ] {
        std::fs::write(&file, contents).unwrap();
        let line = train_err(&dir, &["--config", file.to_str().unwrap()]);
        assert_has(&line, &[&format!("config file {}: {expected}", file.display())]);
    }
    // Both from flags: nothing to blame the file for.
    let line = train_err(&dir, &["--config", file.to_str().unwrap(), "--warmup-iters", "10", "--lr-decay-iters", "5"]);
    assert!(line.starts_with("error: lr_decay_iters (5) must be at least warmup_iters (10)"), "{line}");
    assert!(!dir.join("ckpt.safetensors").exists());
}

/// A config file's `init_from = 'resume'` would have train.py continue out_dir's run; a new run
/// there overwrote its checkpoint. It is an error before anything is touched (and with
/// `--weights`, which starts a new run on purpose, a note); a non-string init_from is an error.
#[test]
fn a_config_file_asking_to_resume_is_refused() {
    let dir = scratch("config-resume");
    let ckpt = dir.join("ckpt.safetensors");
    std::fs::write(&ckpt, "the previous run's").unwrap();
    let file = dir.join("train_r.py");
    std::fs::write(&file, format!("init_from = 'resume'\nout_dir = '{}'\n", dir.display())).unwrap();
    let mut args = vec!["train", "--config", file.to_str().unwrap()];
    args.extend_from_slice(&TINY);
    let out = run(&args);
    assert_has(&one_error_line(&out), &["init_from = 'resume' continues the run in out_dir: use `vramfit train --resume"]);
    // Not plan's note that the file's settings are used, before the error that they are not.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("uses this file's settings"), "{stderr}");
    assert_eq!(std::fs::read(&ckpt).unwrap(), b"the previous run's");
    std::fs::write(&file, "init_from = 5\n").unwrap();
    assert_has(&train_err(&dir, &["--config", file.to_str().unwrap()]), &["init_from must be a string"]);
}

/// out_dir is a file, or the checkpoint's or log's name is a directory: refused before any work
/// (the run trained, then failed at its first save, exit 1).
#[test]
fn out_dir_must_take_the_run() {
    let dir = scratch("out-dir-kinds");
    let file = dir.join("afile");
    std::fs::write(&file, "x").unwrap();
    assert_has(&train_err(&file, &[]), &[&format!("--out-dir {} is a file, not a directory", file.display())]);
    assert_has(&train_err(&file, &["--resume"]), &["is a file, not a directory"]);
    // A config file's out_dir is named as the setting.
    let cfg = dir.join("train_x.py");
    std::fs::write(&cfg, format!("out_dir = '{}'\n", file.display())).unwrap();
    let mut args = vec!["train", "--config", cfg.to_str().unwrap()];
    args.extend_from_slice(&TINY);
    assert_has(&one_error_line(&run(&args)), &[&format!("out_dir {} is a file, not a directory", file.display())]);
    assert_eq!(std::fs::read(&file).unwrap(), b"x");

    let out = dir.join("out");
    std::fs::create_dir_all(out.join("ckpt.safetensors")).unwrap();
    assert_has(&train_err(&out, &["--max-iters", "2"]), &["ckpt.safetensors is a directory, where this run writes its checkpoint"]);
    std::fs::remove_dir(out.join("ckpt.safetensors")).unwrap();
    std::fs::create_dir_all(out.join("log.jsonl")).unwrap();
    assert_has(&train_err(&out, &["--max-iters", "2"]), &["log.jsonl is a directory, where this run writes its log"]);
    let names: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["log.jsonl"], "a refused run wrote to its out_dir");
    // A new run moves an existing log to log.previous.jsonl: a directory there is refused too
    // (with no log to move, it is left alone).
    std::fs::remove_dir(out.join("log.jsonl")).unwrap();
    std::fs::write(out.join("log.jsonl"), "").unwrap();
    std::fs::create_dir_all(out.join("log.previous.jsonl")).unwrap();
    assert_has(
        &train_err(&out, &["--max-iters", "2"]),
        &["log.previous.jsonl is a directory, where this run writes the previous run's log"],
    );
    std::fs::remove_file(out.join("log.jsonl")).unwrap();
    let mut args = vec!["train", "--out-dir", out.to_str().unwrap(), "--max-iters", "1"];
    args.extend_from_slice(&TINY);
    let ran = run(&args);
    assert!(ran.status.success(), "{}", text(&ran.stderr));
}

/// A thread count in the environment past what --threads takes is a mistake to name, not a
/// reason to "use a smaller model" (gemm's buffers, one set per thread, filled any memory).
#[test]
fn too_many_threads_in_the_environment() {
    let dir = scratch("env-threads");
    for var in ["CANDLE_NUM_THREADS", "RAYON_NUM_THREADS"] {
        let mut args = vec!["train", "--out-dir", dir.to_str().unwrap()];
        args.extend_from_slice(&TINY[..TINY.len() - 2]); // without --threads
        let out = vramfit().args(&args).env(var, "99999999").output().unwrap();
        assert_has(&one_error_line(&out), &[&format!("{var}=99999999 is too many threads (at most 1024)")]);
    }
    // A value that is not a count is named: candle would ignore it and use every core.
    for (var, value) in [("CANDLE_NUM_THREADS", "abc"), ("RAYON_NUM_THREADS", "-1"), ("RAYON_NUM_THREADS", "2.5")] {
        let out = vramfit().args(["train", "--out-dir", dir.to_str().unwrap(), "--max-iters", "1"]).env(var, value).output().unwrap();
        assert_has(&one_error_line(&out), &[&format!("{var}={value} is not a thread count: set a number from 1 to 1024, or unset it")]);
    }
    // Without --threads: CANDLE_NUM_THREADS counts as the help says (candle's matmuls read only
    // RAYON_NUM_THREADS), 0 means the default as it does to rayon (the small default model keeps
    // its one thread), and `plan --runtime trainer` plans with the same count as `train`.
    // (3: not this machine's core count, which candle would fall back to.)
    for (var, value, expected) in [("CANDLE_NUM_THREADS", "3", "cpu (3 threads)"), ("RAYON_NUM_THREADS", "0", "cpu (1 thread)")] {
        let out = vramfit().args(["train", "--out-dir", dir.to_str().unwrap(), "--max-iters", "1"]).env(var, value).output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains(expected), "{var}={value}: {}", text(&out.stdout));
    }
    // A model sized by flags is no small default: it gets the cores a link's model gets.
    let device_of = |args: &[&str]| {
        let out = vramfit()
            .args(["train", "--out-dir", dir.to_str().unwrap(), "--max-iters", "1", "--eval-iters", "1"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        stdout.split(" on cpu (").nth(1).and_then(|s| s.split(')').next()).map(str::to_string).unwrap_or_else(|| panic!("{stdout}"))
    };
    let by_flags = device_of(&["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "4"]);
    assert_eq!(by_flags, device_of(&["--link", "?v=1&L=1&C=16&H=2&T=16&B=4"]));
    assert_eq!(device_of(&[]), "1 thread", "the small default model");
    let plan = |env: Option<&str>, flag: &[&str]| {
        let mut cmd = vramfit();
        cmd.args(["plan", "--runtime", "trainer", "--json", "--max-memory-mib", "1000", "--link", "?v=1&L=1&C=16&H=2&T=16&B=4&V=32"])
            .args(flag);
        if let Some(v) = env {
            cmd.env("CANDLE_NUM_THREADS", v);
        }
        cmd.output().unwrap()
    };
    assert_eq!(plan(Some("3"), &[]).stdout, plan(None, &["--threads", "3"]).stdout);
    assert_has(&one_error_line(&plan(Some("2000"), &[])), &["CANDLE_NUM_THREADS=2000 is too many threads"]);
    // --threads overrides both.
    let out = vramfit()
        .args(["train", "--out-dir", dir.to_str().unwrap(), "--max-iters", "1"])
        .args(TINY)
        .env("RAYON_NUM_THREADS", "99999999")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}
