//! End-to-end tests of the `vramfit` binary: good input gives the expected plan, bad input
//! gives exactly one `error:` line and exit code 2.
//!
//! Peak byte values are being calibrated, so these tests check relationships (bigger batch,
//! bigger peak; flags and links agree), not particular numbers. Parameter counts are exact.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};
use vramfit_core::link::{self, LinkState};
use vramfit_core::{device, Attention, Config, Dtype, Optimizer};

fn vramfit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramfit")).args(args).output().expect("the binary runs")
}

/// Runs `vramfit plan --json --no-fixes <args>`, expecting success; returns stdout.
fn plan_json_text(args: &[&str]) -> String {
    let mut all = vec!["plan", "--json", "--no-fixes"];
    all.extend_from_slice(args);
    let out = vramfit(&all);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn plan_json(args: &[&str]) -> Value {
    serde_json::from_str(&plan_json_text(args)).expect("stdout is JSON")
}

/// A file under Cargo's scratch directory for integration tests.
fn temp_file(name: &str, contents: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, contents).expect("scratch file written");
    path
}

/// Asserts the bad-input contract: exit code 2, nothing on stdout, one `error:` line on stderr.
fn assert_one_error_line(args: &[&str]) -> String {
    let out = vramfit(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    stderr
}

#[test]
fn default_plan_has_gpt2_parameter_counts() {
    let plan = plan_json(&["--bias", "false"]);
    assert_eq!(plan["params"]["total"], 124_373_760);
    assert_eq!(plan["params"]["printed"], 123_587_328);
    assert_eq!(plan["tokens_per_iter"], 491_520);
    assert_eq!(plan["cards"][0]["gpu"], "rtx-4070");
    for window in ["train", "eval", "first_iter", "eval_at_start"] {
        let w = &plan[window];
        let allocated = w["peak_allocated_bytes"].as_u64().expect("a byte count");
        assert!(allocated > 0, "{window}");
        assert!(w["peak_reserved_bytes"].as_u64().unwrap() >= allocated, "{window}");
        assert!(w["nvidia_smi_bytes"].as_u64().unwrap() >= w["peak_reserved_bytes"].as_u64().unwrap(), "{window}");
        assert!(w["breakdown"].is_object(), "{window}");
    }
    // Eager, the model's figures are validated (compiled, they are estimates), the card's usable
    // size measured (from an OOM report), its context an estimate (measured only on the H100):
    // the same words as the text report.
    let eager = plan_json(&["--compile", "false"]);
    let source = |figure: &str| {
        let notes = eager["notes"].as_array().expect("notes");
        notes.iter().find(|n| n["figure"] == figure).map(|n| n["source"].as_str().unwrap().to_string()).expect(figure)
    };
    assert_eq!(source("peak_allocated_bytes"), "validated");
    assert_eq!(source("usable_bytes"), "measured");
    assert_eq!(source("nvidia_smi_bytes"), "estimate");
}

#[test]
fn text_report_shows_nanogpt_figures_and_sections() {
    let out = vramfit(&["plan"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for expected in [
        "number of parameters: 123.59M",
        "num decayed parameter tensors: 50, with 124,354,560 parameters",
        "num non-decayed parameter tensors: 25, with 19,200 parameters",
        "tokens per iteration will be: 491,520",
        "training step",
        "first iteration",
        "eval at start",
        "Saved activations",
        "rtx-4070",
        "largest micro-batch",
        "Fixes for rtx-4070",
        "Notes",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[test]
fn snake_and_kebab_flags_give_identical_json() {
    let kebab = plan_json_text(&[
        "--n-layer",
        "6",
        "--n-head",
        "6",
        "--n-embd",
        "384",
        "--block-size",
        "256",
        "--vocab-size",
        "65",
        "--batch-size",
        "64",
        "--gradient-accumulation-steps",
        "1",
        "--eval-iters",
        "20",
        "--eval-batch-size",
        "16",
        "--eval-block-size",
        "128",
        "--activation-checkpointing",
        "true",
        "--expandable-segments",
        "true",
        "--other-usage-mib",
        "300",
    ]);
    let snake = plan_json_text(&[
        "--n_layer=6",
        "--n_head=6",
        "--n_embd=384",
        "--block_size=256",
        "--vocab_size=65",
        "--batch_size=64",
        "--gradient_accumulation_steps=1",
        "--eval_iters=20",
        "--eval_batch_size=16",
        "--eval_block_size=128",
        "--activation_checkpointing=True",
        "--expandable_segments=True",
        "--other_usage_mib=300",
    ]);
    assert_eq!(kebab, snake);
    let plan: Value = serde_json::from_str(&kebab).unwrap();
    assert_eq!(plan["config"]["n_layer"], 6);
    assert_eq!(plan["config"]["eval_block_size"], 128);
}

#[test]
fn larger_batch_gives_larger_training_peak() {
    let peak = |b: &str| plan_json(&["--batch-size", b])["train"]["peak_allocated_bytes"].as_u64().unwrap();
    assert!(peak("8") > peak("4"));
    assert!(peak("16") > peak("8"));
}

#[test]
fn flags_override_link_which_overrides_config_file() {
    let file = temp_file(
        "precedence.py",
        "out_dir = 'out'\nn_layer = 6\nn_head = 6\nn_embd = 384\nbatch_size = 8\ndropout = 0.1\nlearning_rate = 1e-3\n",
    );
    let file = file.to_str().unwrap();
    let plan = plan_json(&["--config", file, "--link", "?L=4&B=4", "--n-layer", "3"]);
    let c = &plan["config"];
    assert_eq!(c["n_layer"], 3, "flag beats link and file");
    assert_eq!(c["batch_size"], 4, "link beats file");
    assert_eq!(c["n_embd"], 384, "file beats defaults");
    assert_eq!(c["dropout"], 0.1, "file beats defaults");
    assert_eq!(c["block_size"], 1024, "defaults fill the rest");

    // The same without the flag or the link.
    assert_eq!(plan_json(&["--config", file, "--link", "?L=4&B=4"])["config"]["n_layer"], 4);
    assert_eq!(plan_json(&["--config", file])["config"]["n_layer"], 6);
}

#[test]
fn encoded_link_equals_equivalent_flags() {
    let state = LinkState {
        config: Config {
            n_layer: 6,
            n_head: 6,
            n_embd: 384,
            block_size: 512,
            batch_size: 16,
            gradient_accumulation_steps: 4,
            dropout: 0.2,
            eval_batch_size: Some(8),
            dtype: Dtype::Float16,
            attention: Attention::Manual,
            compile: false,
            optimizer: Optimizer::Sgd,
            ..Config::default()
        },
        gpu: "rtx-3090".into(),
        other_usage_mib: 512,
        init_from: None,
    };
    let query = link::encode(&state);
    let from_link = plan_json_text(&["--link", &query]);
    let from_url = plan_json_text(&["--link", &format!("http://localhost:8080/?{query}#fit")]);
    let from_flags = plan_json_text(&[
        "--n-layer",
        "6",
        "--n-head",
        "6",
        "--n-embd",
        "384",
        "--block-size",
        "512",
        "--batch-size",
        "16",
        "--gradient-accumulation-steps",
        "4",
        "--dropout",
        "0.2",
        "--eval-batch-size",
        "8",
        "--dtype",
        "float16",
        "--attention",
        "manual",
        "--compile",
        "false",
        "--optimizer",
        "sgd",
        "--gpu",
        "rtx-3090",
        "--other-usage-mib",
        "512",
    ]);
    assert_eq!(from_link, from_flags);
    assert_eq!(from_url, from_flags);
}

#[test]
fn several_gpus_are_all_checked() {
    let plan = plan_json(&["--gpu", "rtx-4070", "--gpu", "a100-80gb,custom-6"]);
    let ids: Vec<&str> = plan["cards"].as_array().unwrap().iter().map(|c| c["gpu"].as_str().unwrap()).collect();
    assert_eq!(ids, ["rtx-4070", "a100-80gb", "custom-6"]);
    // A card named twice, in any spelling, is planned once.
    let plan = plan_json(&["--gpu", "rtx-4070,4070", "--gpu", "rtx4070,custom-6,6gb"]);
    let ids: Vec<&str> = plan["cards"].as_array().unwrap().iter().map(|c| c["gpu"].as_str().unwrap()).collect();
    assert_eq!(ids, ["rtx-4070", "custom-6"]);
}

/// Fixes are the first card's: a later card that does not fit is named under them, so a fitting
/// first card's "none needed" does not read as covering it; where every card fits, nothing is.
#[test]
fn fixes_name_the_later_cards_that_do_not_fit() {
    let text = |gpus: &str| {
        let out = vramfit(&["plan", "--batch-size", "64", "--gpu", gpus]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let fixes = |t: &str| t.split("Fixes for ").nth(1).expect("a fixes section").to_string();
    let both = fixes(&text("h100,12gb,8gb"));
    assert!(both.starts_with("h100-80gb\n"), "{both}");
    assert!(both.contains("(custom-12, custom-8 do not fit: give one first in --gpu for its fixes and largest micro-batch)"), "{both}");
    assert!(both.contains("none needed: it fits"), "{both}");
    let one = fixes(&text("h100,12gb"));
    assert!(one.contains("(custom-12 does not fit: give it first in --gpu"), "{one}");
    // The first card that does not fit gets the fixes; a later one that fits is not named.
    let first = fixes(&text("12gb,h100"));
    assert!(first.starts_with("custom-12\n") && !first.contains("does not fit: give"), "{first}");
}

/// Each card is marked by its own terms: on the measured H100 an eager fp16 plan rests on no
/// estimate; an RTX 4070's context and workspace, and a T4's attention kernel, are estimates,
/// and the notes say so for every card, in the text and in the JSON.
#[test]
fn every_card_is_marked_by_its_own_estimates() {
    let args = ["--gpu", "h100-80gb,rtx-4070,t4", "--compile", "false", "--dtype", "float16", "--batch-size", "4"];
    let plan = plan_json(&args);
    let estimated = |card: &Value| -> Vec<String> {
        card["notes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["source"] == "estimate")
            .map(|n| n["figure"].as_str().unwrap().to_string())
            .collect()
    };
    let cards = plan["cards"].as_array().unwrap();
    assert!(estimated(&cards[0]).is_empty(), "{:?}", estimated(&cards[0]));
    assert!(estimated(&cards[1]).contains(&"workspace".to_string()));
    assert!(estimated(&cards[2]).contains(&"peak_allocated_bytes".to_string()));
    let text = String::from_utf8(vramfit(&[&["plan"][..], &args[..]].concat()).stdout).unwrap();
    let need_line = |card: &str| {
        let at = text.find(&format!("  {card} (")).unwrap_or_else(|| panic!("{card} missing in:\n{text}"));
        text[at..].lines().nth(1).unwrap().to_string()
    };
    assert!(!need_line("h100-80gb").contains('~'), "{}", need_line("h100-80gb"));
    assert!(need_line("rtx-4070").contains("needs ~"), "{}", need_line("rtx-4070"));
    assert!(need_line("t4").contains("needs ~"), "{}", need_line("t4"));
    assert!(text.contains("  for t4:") && text.contains("sm_75"), "{text}");
}

/// The bias gradients' reduction scratch is sized by the card's multiprocessors, measured only
/// on the H100 and H200: elsewhere the breakdown's temporaries and the notes say estimate.
#[test]
fn the_bias_gradient_scratch_is_an_estimate_off_hopper() {
    let args = |gpu: &str| ["plan", "--gpu", gpu, "--compile", "false", "--bias", "true", "--batch-size", "4"].map(str::to_string);
    let temporaries_row = |gpu: &str| {
        let text = String::from_utf8(vramfit(&args(gpu).iter().map(String::as_str).collect::<Vec<_>>()).stdout).unwrap();
        text.lines()
            .find(|l| l.trim_start().starts_with("Temporaries"))
            .unwrap_or_else(|| panic!("no Temporaries row:\n{text}"))
            .to_string()
    };
    assert!(temporaries_row("rtx-4070").contains('~'), "{}", temporaries_row("rtx-4070"));
    assert!(!temporaries_row("h100-80gb").contains('~'), "{}", temporaries_row("h100-80gb"));
    let plan = plan_json(&["--gpu", "rtx-4070", "--compile", "false", "--bias", "true", "--batch-size", "4"]);
    let notes = plan["cards"][0]["notes"].as_array().unwrap();
    let scratch = notes.iter().find(|n| n["figure"] == "temporaries").expect("a note on the temporaries");
    assert_eq!(scratch["source"], "estimate");
    assert!(scratch["detail"].as_str().unwrap().contains("46 multiprocessors"), "{scratch}");
}

/// Flash attention's split-KV buffers are measured on the H200 only (with padded heads); on
/// an RTX 4070, where flash runs every bf16 head, a config small enough to split says they
/// are an estimate, and the H100 (cuDNN for these heads) has no such note.
#[test]
fn flash_split_kv_buffers_are_an_estimate_off_hopper() {
    let split_note = |gpu: &str| -> Option<Value> {
        let plan = plan_json(&[
            "--gpu",
            gpu,
            "--compile",
            "false",
            "--bias",
            "false",
            "--dtype",
            "bfloat16",
            "--n-layer",
            "2",
            "--n-head",
            "1",
            "--n-embd",
            "64",
            "--block-size",
            "1024",
            "--batch-size",
            "1",
        ]);
        plan["cards"][0]["notes"].as_array().unwrap().iter().find(|n| n["detail"].as_str().unwrap_or("").contains("split-KV")).cloned()
    };
    let note = split_note("rtx-4070").expect("a note on flash's split-KV buffers");
    assert_eq!(note["figure"], "temporaries");
    assert_eq!(note["source"], "estimate");
    assert!(note["detail"].as_str().unwrap().contains("46 multiprocessors"), "{note}");
    assert_eq!(split_note("h100-80gb"), None);
}

#[test]
fn config_file_notices_go_to_stderr_and_do_not_fail() {
    let file = temp_file("notices.py", "import time\nn_layer = 4\nfoo = 1\n");
    let out = vramfit(&["plan", "--json", "--no-fixes", "--config", file.to_str().unwrap()]);
    assert!(out.status.success());
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["config"]["n_layer"], 4);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 2, "{stderr}");
    assert!(stderr.lines().all(|l| l.starts_with("note: ")), "{stderr}");
}

#[test]
fn a_flood_of_config_file_notices_is_counted_not_printed() {
    let many: String = (0..5000).map(|i| format!("unknown_{i} = {i}\n")).collect();
    let file = temp_file("flood.py", &format!("{many}n_layer = 4\n"));
    let out = vramfit(&["plan", "--json", "--no-fixes", "--config", file.to_str().unwrap()]);
    assert!(out.status.success());
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["config"]["n_layer"], 4);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 21, "{stderr}");
    assert!(lines[0].contains("line 1: ignored unknown_0"), "{stderr}");
    assert_eq!(lines[20], "note: 4980 more like these not shown");
}

#[test]
fn settings_inside_blocks_are_one_error_line() {
    let file = temp_file("indented.py", "if big:\n    n_layer = 24\n");
    let err = assert_one_error_line(&["plan", "--config", file.to_str().unwrap()]);
    assert!(err.contains("line 2: n_layer: set inside a block"), "{err}");
}

#[test]
fn list_gpus_prints_the_presets() {
    let out = vramfit(&["plan", "--list-gpus"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for g in device::presets() {
        assert!(text.contains(&g.id), "{} missing", g.id);
    }
    let out = vramfit(&["plan", "--list-gpus", "--json"]);
    assert!(out.status.success());
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list.as_array().map(Vec::len), Some(device::presets().len()));
}

#[test]
fn help_and_version_exit_zero() {
    for args in [&["--help"][..], &["plan", "--help"], &["--version"]] {
        let out = vramfit(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stdout.is_empty(), "{args:?}");
    }
}

/// Help that cannot be written is an error, as `plan`'s output is (it exited 0).
#[cfg(target_os = "linux")]
#[test]
fn help_that_cannot_be_written_is_an_error() {
    for args in [&["--help"][..], &["train", "--help"], &["--version"]] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_vramfit")).args(args).stdout(full).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "error: cannot write output: No space left on device (os error 28)\n", "{args:?}");
    }
}

#[test]
fn bad_command_line_is_one_error_line() {
    for args in [
        &[][..],
        &["bogus"],
        &["plan", "--no-such-flag"],
        &["plan", "--n-layer", "abc"],
        &["plan", "--n-layer"],
        &["plan", "--dropout", "lots"],
        &["plan", "--dtype", "float8"],
        &["plan", "--attention", "fast"],
        &["plan", "--bias", "maybe"],
        &["plan", "--optimizer", "lion"],
        &["plan", "--gpu", "gtx-9999"],
        &["plan", "--other-usage-mib", "many"],
    ] {
        assert_one_error_line(args);
    }
    assert!(assert_one_error_line(&["plan", "--n-layr", "3"]).contains("--n-layer"));
    // Far values and long names are quoted short: 1e308 printed 309 digits, a long --gpu value
    // came back whole in vramfit's part of the message too, and in clap's.
    assert!(assert_one_error_line(&["plan", "--dropout", "1e308"]).trim_end().ends_with("dropout must be in [0, 1) (got 1e308)"));
    let long = "x".repeat(300);
    let line = assert_one_error_line(&["plan", "--gpu", &long]);
    assert_eq!(line.matches(&long).count(), 0, "{line}");
    assert!(line.contains("'xxxxxxxxxx") && line.contains("…[300 characters]'"), "{line}");
    assert!(line.contains("unknown GPU \"xxxxxxxxxx") && line.contains("…\""), "{line}");
    // A memory budget past what vramfit models was shown capped, not refused.
    let line = assert_one_error_line(&["plan", "--runtime", "trainer", "--max-memory-mib", "18446744073709551615"]);
    assert!(line.contains("at most 4194304"), "{line}");
    // One past u64's range is too large, as the number below it is, not "not a whole number".
    for flag in ["--max-memory-mib", "--other-usage-mib"] {
        let line = assert_one_error_line(&["plan", "--runtime", "trainer", flag, "18446744073709551616"]);
        assert!(line.contains("at most 4194304") && !line.contains("expected a whole number"), "{line}");
    }
    // A train.py setting without its value: named as such, not "unexpected, did you mean --eval_iters".
    let line = assert_one_error_line(&["plan", "--max_iters"]);
    assert!(line.contains("--max_iters needs a value") && !line.contains("eval_iters"), "{line}");
    // A negative number is checked as a value, not taken for an unknown flag.
    for (flag, value) in [("--n-layer", "-1"), ("--dropout", "-0.1"), ("--batch-size", "-4")] {
        let line = assert_one_error_line(&["plan", flag, value]);
        assert!(line.contains(value) && !line.contains("unexpected argument"), "{line}");
    }
    assert!(assert_one_error_line(&["plan", "--gpu", "a100"]).contains("a100-40gb, a100-80gb"));
    // --list-gpus reads the rest of the command line too: a config file it cannot read is an
    // error, not skipped.
    let line = assert_one_error_line(&["plan", "--list-gpus", "--config", "/nonexistent/train_x.py"]);
    assert!(line.contains("train_x.py"), "{line}");
    assert!(assert_one_error_line(&["plan", "--list-gpus", "--link", "?zz=1"]).contains("zz"));
    // A model number vramfit has no preset for is not a size (an 8 GB RTX 4060 was once planned
    // as a 4,060 GiB card, and fitted).
    let line = assert_one_error_line(&["plan", "--gpu", "4060"]);
    assert!(line.contains("--list-gpus") && line.contains("custom-4060"), "{line}");
}

/// Cards are found by the words users type: `--gpu 4070` is the RTX 4070, not a 4,070 GiB card.
#[test]
fn a_model_number_names_its_card() {
    let card = |gpu: &str| plan_json(&["--gpu", gpu])["cards"][0]["gpu"].as_str().map(String::from);
    assert_eq!(card("4070"), card("rtx-4070"));
    assert_eq!(card("NVIDIA GeForce RTX 3090 24GB"), card("rtx-3090"));
    assert_ne!(card("4070"), card("custom-4070"));
}

/// Spaces around a number are taken by every flag, as they were already by --other-usage-mib
/// and --learning-rate (the config's sizes and dropout refused " 12" with clap's "invalid digit
/// found in string").
#[test]
fn numbers_with_spaces_around_them_are_taken_by_every_flag() {
    let spaced =
        plan_json_text(&["--batch-size", " 9", "--n-layer", "6 ", "--dropout", " 0.1 ", "--eval-batch-size", "\t4", "--threads", " 2"]);
    assert_eq!(
        spaced,
        plan_json_text(&["--batch-size", "9", "--n-layer", "6", "--dropout", "0.1", "--eval-batch-size", "4", "--threads", "2"])
    );
    // Out-of-range values are still refused: by core's validation, naming the setting, or by
    // the flag's own range.
    assert!(assert_one_error_line(&["plan", "--n-layer", " 0"]).contains("n_layer must be at least 1 (got 0)"));
    assert!(assert_one_error_line(&["plan", "--threads", "0"]).contains("expected a whole number from 1 to"));
    assert!(assert_one_error_line(&["plan", "--n-layer", "4294967296"]).contains("expected a whole number <= 4294967295"));
}

/// A flag given twice takes its last value, so a printed fix can be appended to the command.
#[test]
fn a_fix_appended_to_the_command_wins() {
    let appended = plan_json_text(&["--compile", "false", "--batch-size", "9", "--compile", "true"]);
    assert_eq!(appended, plan_json_text(&["--batch-size", "9", "--compile", "true"]));
}

#[test]
fn bad_config_file_is_one_error_line() {
    assert_one_error_line(&["plan", "--config", "/no/such/dir/train_gpt2.py"]);
    // A directory cannot be read as a file.
    assert_one_error_line(&["plan", "--config", env!("CARGO_TARGET_TMPDIR")]);
    let bad_value = temp_file("bad_value.py", "# comment\nn_layer = 'x'\n");
    let err = assert_one_error_line(&["plan", "--config", bad_value.to_str().unwrap()]);
    assert!(err.contains("line 2"), "{err}");
    let bad_dtype = temp_file("bad_dtype.py", "dtype = 'float8'\n");
    assert_one_error_line(&["plan", "--config", bad_dtype.to_str().unwrap()]);
    let bad_combo = temp_file("bad_combo.py", "n_embd = 100\nn_head = 12\n");
    assert_one_error_line(&["plan", "--config", bad_combo.to_str().unwrap()]);
    let not_utf8 = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("not_utf8.py");
    std::fs::write(&not_utf8, [0xff, 0xfe, 0x00, 0x80]).unwrap();
    assert_one_error_line(&["plan", "--config", not_utf8.to_str().unwrap()]);
}

#[test]
fn bad_link_is_one_error_line() {
    for link in [
        "L=abc",
        "?C=770&H=12",
        "gpu=gtx-9999",
        "L=4&L=5",
        "unknown=1",
        "v=2&L=4",
        "drop=1.5&d=fp8",
        "L=%0A%0Aerror",
        // No settings at all, or settings where a link has none: not the defaults in silence.
        "",
        "https://example.com/some/page",
        "http://127.0.0.1:8080/#v=1&L=3",
    ] {
        let err = assert_one_error_line(&["plan", "--link", link]);
        assert!(err.starts_with("error: --link: "), "{err}");
    }
}

#[test]
fn invalid_config_is_one_error_line() {
    for args in [
        &["plan", "--n-head", "7"][..],
        &["plan", "--n-layer", "0"],
        &["plan", "--dropout", "1.5"],
        &["plan", "--dropout", "NaN"],
        &["plan", "--block-size", "128", "--eval-block-size", "256"],
        &["plan", "--batch-size", "65536", "--block-size", "1048576"],
        &["plan", "--n-layer", "99999999999"],
    ] {
        assert_one_error_line(args);
    }
}

/// Figures of 100 GiB and more keep a space between the report's columns.
#[test]
fn large_figures_keep_their_columns_apart() {
    let out = vramfit(&[
        "plan",
        "--n-layer",
        "48",
        "--n-embd",
        "1600",
        "--n-head",
        "25",
        "--batch-size",
        "64",
        "--compile",
        "false",
        "--gpu",
        "h100-80gb",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().filter(|l| l.matches(" GiB (").count() == 3).collect();
    assert!(rows.len() >= 4, "{text}");
    let gib: Vec<f64> =
        rows.iter().flat_map(|r| r.split_whitespace().filter_map(|t| t.trim_start_matches('~').parse::<f64>().ok())).collect();
    assert!(gib.iter().any(|g| *g >= 100.0), "some figure of 100 GiB or more: {rows:?}");
    for row in rows {
        assert!(!row.contains(")~") && !row.chars().zip(row.chars().skip(1)).any(|(a, b)| a == ')' && b.is_ascii_digit()), "{row}");
    }
}

/// `plan --grad-clip` takes train's spelling too (a norm, 0 off), so a train command plans as it is.
#[test]
fn grad_clip_takes_trains_norm() {
    let small = [
        "--runtime",
        "trainer",
        "--threads",
        "1",
        "--max-memory-mib",
        "100000",
        "--n-layer",
        "2",
        "--n-head",
        "2",
        "--n-embd",
        "32",
        "--block-size",
        "32",
        "--vocab-size",
        "65",
    ];
    let with = |clip: &str| {
        let mut args = small.to_vec();
        args.extend(["--grad-clip", clip]);
        plan_json_text(&args)
    };
    assert_eq!(with("1.0"), with("true"));
    assert_eq!(with("0"), with("false"));
    assert_ne!(with("true"), with("false"), "clipping changes the trainer's plan");
    assert!(assert_one_error_line(&["plan", "--grad-clip", "lots"]).contains("norm"));
}

/// Flags the chosen runtime does not use say so on stderr instead of passing silently.
#[test]
fn flags_of_the_other_runtime_are_noted() {
    let out = vramfit(&["plan", "--chunked-loss", "true", "--threads", "3", "--no-fixes"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success());
    assert!(stderr.contains("note: --chunked-loss, --threads only apply to --runtime trainer"), "{stderr}");
    let out = vramfit(&["plan", "--runtime", "trainer", "--max-memory-mib", "100000", "--other-usage-mib", "500", "--n-layer", "2"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("note: --other-usage-mib does not apply"));
    let out = vramfit(&["plan", "--threads", "2", "--no-fixes"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("note: --threads only applies to --runtime trainer"));
    // PyTorch settings the trainer lacks that would change the memory: noted, not planned silently.
    let out = vramfit(&["plan", "--runtime", "trainer", "--max-memory-mib", "100000", "--n-layer", "2", "--optimizer", "sgd"]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("optimizer = sgd does not apply: the trainer trains with AdamW"), "{stdout}");
    let adamw = vramfit(&["plan", "--runtime", "trainer", "--max-memory-mib", "100000", "--n-layer", "2"]);
    assert!(!String::from_utf8_lossy(&adamw.stdout).contains("optimizer = sgd"));
    let quiet = vramfit(&["plan", "--no-fixes"]);
    assert!(quiet.stderr.is_empty(), "{}", String::from_utf8_lossy(&quiet.stderr));
}

/// A config file that changes nothing (empty, or other names only) is noted, not silently
/// planned; a file that is not a config file at all is an error, for plan and train alike.
#[test]
fn a_config_file_that_changes_nothing_is_noted() {
    for (name, text) in [("empty.py", ""), ("comments.py", "# nothing yet\n"), ("other.py", "import os\nfoo = 3\n")] {
        let file = temp_file(name, text);
        let out = vramfit(&["plan", "--no-fixes", "--config", file.to_str().unwrap()]);
        assert!(out.status.success(), "{name}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("sets none of the settings"), "{name}");
    }
    let prose = temp_file("prose.py", "# notes\njust some words\nmore words\n");
    for cmd in ["plan", "train"] {
        let out = vramfit(&[cmd, prose.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{cmd}: {stderr}");
        assert!(stderr.contains("not a nanoGPT config file") && stderr.contains("line 2, `just some words`"), "{cmd}: {stderr}");
    }
    // A file of the defaults' own values is a config, which changes nothing.
    let file = temp_file("twelve.py", "n_layer = 12\n");
    let out = vramfit(&["plan", "--no-fixes", "--config", file.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("changes none of the settings"));
    let file = temp_file("four.py", "n_layer = 4\n");
    let out = vramfit(&["plan", "--no-fixes", "--config", file.to_str().unwrap()]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains(" none of the settings"));
}

/// `fixes` in JSON: a list when computed (empty when the run fits), null under --no-fixes, so
/// "none needed" and "not asked for" read differently.
#[test]
fn json_fixes_are_null_only_when_not_computed() {
    let json = |args: &[&str]| -> Value {
        let out = vramfit(args);
        assert!(out.status.success(), "{args:?}");
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let short = ["plan", "--json", "--batch-size", "32", "--gpu", "rtx-3060"];
    let fixes = json(&short)["fixes"].as_array().expect("a list").len();
    assert!(fixes > 0);
    let fits = ["plan", "--json", "--n-layer", "2", "--batch-size", "1", "--block-size", "64"];
    assert_eq!(json(&fits)["fixes"].as_array().map(Vec::len), Some(0));
    assert!(json(&[&short[..], &["--no-fixes"]].concat())["fixes"].is_null());
}

/// nanoGPT's README trains shakespeare-char on a CPU with
/// `python train.py config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20
/// --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128
/// --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0`; the same words after `vramfit plan`
/// plan that run, the settings plan does not use noted.
#[test]
fn a_pasted_nanogpt_command_line_plans_as_it_is() {
    let file = temp_file("train_char.py", "dataset = 'shakespeare_char'\nbatch_size = 64\nblock_size = 256\nn_layer = 6\nn_head = 6\nn_embd = 384\ndropout = 0.2\nmax_iters = 5000\n");
    let file = file.to_str().unwrap();
    let tail = [
        "--device=cpu",
        "--compile=False",
        "--eval_iters=20",
        "--log_interval=1",
        "--block_size=64",
        "--batch_size=12",
        "--n_layer=4",
        "--n_head=4",
        "--n_embd=128",
        "--max_iters=2000",
        "--lr_decay_iters=2000",
        "--dropout=0.0",
    ];
    let mut pasted = vec!["plan", "--json", "--no-fixes", file];
    pasted.extend(tail);
    let out = vramfit(&pasted);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--log_interval=1 --max_iters=2000 --lr_decay_iters=2000: training settings that do not change memory"),
        "{stderr}"
    );
    assert!(stderr.contains("--device=cpu: plan predicts a CUDA GPU's memory"), "{stderr}");
    // The same plan as the model flags alone, on top of --config.
    let flags: Vec<&str> = tail
        .iter()
        .copied()
        .filter(|f| !["--device", "--log_interval", "--max_iters", "--lr_decay_iters"].iter().any(|p| f.starts_with(p)))
        .collect();
    let mut explicit = vec!["--config", file];
    explicit.extend(flags);
    assert_eq!(String::from_utf8_lossy(&out.stdout), plan_json_text(&explicit));
    let c = &plan_json(&explicit)["config"];
    assert_eq!((c["n_layer"].as_u64(), c["block_size"].as_u64(), c["vocab_size"].as_u64()), (Some(4), Some(64), Some(65)));

    // --dataset and --init_from decide the model as the file's would, and override the file's.
    assert_eq!(plan_json(&["--dataset=shakespeare_char"])["config"]["vocab_size"], 65);
    assert_eq!(plan_json(&[file, "--dataset=openwebtext"])["config"]["vocab_size"], 50304);
    assert_eq!(plan_json(&["--init_from=gpt2-medium"])["config"]["n_layer"], 24);
    // Shape flags after it do not change what train.py loads (from_pretrained), and a note says so.
    let out = vramfit(&["plan", "--init_from=gpt2", "--n_layer=4", "--block-size", "256", "--json"]);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((json["config"]["n_layer"].as_u64(), json["config"]["block_size"].as_u64()), (Some(12), Some(256)));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("init_from = 'gpt2': n_layer 4 not used"), "{stderr}");

    // A config file both ways is one error line; a misspelt setting is still an error.
    assert_one_error_line(&["plan", file, "--config", file]);
    assert_one_error_line(&["plan", file, "--max_itres=5"]);
    // A page link where the file goes is not taken for a file name silently.
    let err = assert_one_error_line(&["plan", "http://127.0.0.1:8080/?v=1&L=4"]);
    assert!(err.contains("a page link goes after --link"), "{err}");
}

/// When no micro-batch fits because the separately set eval batch does not, the report says so.
#[test]
fn an_eval_batch_that_blocks_every_micro_batch_is_named() {
    let out = vramfit(&["plan", "--batch-size", "8", "--eval-batch-size", "64", "--compile", "false"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("none, even batch_size 1 does not fit (eval_batch_size 64 stays, and eval is what does not fit)"), "{text}");
    assert!(text.contains("eval_batch_size = "), "an eval batch fix is offered: {text}");
}

/// Other programs holding all a card offers (or all but less than the CUDA context) leave no
/// config a chance: the plan still runs, with a note naming the card, as the page warns.
#[test]
fn a_card_left_without_room_is_noted() {
    let out = vramfit(&["plan", "--no-fixes", "--gpu", "rtx-4070,a100-80gb", "--other-usage-mib", "20000"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let notes: Vec<&str> = stderr.lines().filter(|l| l.contains("nothing is left")).collect();
    assert_eq!(notes.len(), 1, "{stderr}");
    assert!(notes[0].starts_with("note: other programs hold 20,000 MiB") && notes[0].contains("rtx-4070"), "{stderr}");
    let gpu = device::Gpu::find("rtx-4070").unwrap();
    let left_mib = (gpu.context_bytes >> 20) / 2;
    let other = ((gpu.usable_bytes >> 20) - left_mib).to_string();
    let out = vramfit(&["plan", "--no-fixes", "--gpu", "rtx-4070", "--other-usage-mib", &other]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("less than the CUDA context alone"), "{stderr}");
    let out = vramfit(&["plan", "--no-fixes", "--gpu", "rtx-4070", "--other-usage-mib", "500"]);
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A run that loads GPT-2's weights cannot change their shape: no fix may (a smaller n_layer
/// was offered, and planning it said the flag is not used).
#[test]
fn fixes_for_a_pretrained_model_keep_its_shape() {
    let file = temp_file("finetune_xl.py", "init_from = 'gpt2-xl'\nbatch_size = 1\ngradient_accumulation_steps = 1\n");
    let out = vramfit(&["plan", "--json", "--gpu", "custom-6", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["cards"][0]["fits"], false, "the case: GPT-2 XL does not fit 6 GiB");
    let fixes = plan["fixes"].as_array().unwrap();
    assert!(!fixes.is_empty());
    for f in fixes {
        for key in ["n_layer", "n_head", "n_embd", "vocab_size", "bias"] {
            assert_eq!(f["config"][key], plan["config"][key], "{}: {key}", f["title"]);
        }
    }
    // The same shape from scratch may be offered fewer layers.
    let scratch = plan_json_fixes(&[
        "--n-layer",
        "48",
        "--n-head",
        "25",
        "--n-embd",
        "1600",
        "--vocab-size",
        "50257",
        "--bias",
        "true",
        "--batch-size",
        "1",
        "--gradient-accumulation-steps",
        "1",
        "--gpu",
        "custom-6",
    ]);
    assert!(scratch["fixes"].as_array().unwrap().iter().any(|f| f["config"]["n_layer"] != 48), "{}", scratch["fixes"]);
}

/// The page's link carries the checkpoint (`init=`): the same plan and fixes as the file that
/// names it, `init=scratch` over that file plans the same shape from scratch, and a link whose
/// shape differs from the checkpoint's is one error line.
#[test]
fn a_link_from_a_checkpoint_plans_as_the_file_naming_it() {
    let file = temp_file("finetune_xl_link.py", "init_from = 'gpt2-xl'\nbatch_size = 1\ngradient_accumulation_steps = 1\n");
    let file = file.to_str().unwrap();
    let from_file = plan_json_fixes(&["--gpu", "custom-6", file]);
    assert!(from_file["fixes"].as_array().is_some_and(|f| !f.is_empty()), "the case has fixes");
    let state = link::decode_strict("?v=1&init=gpt2-xl&B=1&GA=1").unwrap();
    assert_eq!(state.init_from.as_deref(), Some("gpt2-xl"));
    let query = link::encode(&state);
    assert_eq!(plan_json_fixes(&["--gpu", "custom-6", "--link", &query]), from_file);
    // A link without `init` over the file keeps the checkpoint.
    assert_eq!(plan_json_fixes(&["--gpu", "custom-6", file, "--link", "?B=1"]), from_file);
    // `init=scratch` over it: the same shape, free to shrink, and a note that the file's
    // checkpoint is not used.
    let scratch = plan_json_fixes(&["--gpu", "custom-6", file, "--link", "?init=scratch"]);
    assert_eq!(scratch["config"]["n_layer"], 48);
    let out = vramfit(&["plan", "--no-fixes", file, "--link", "?init=gpt2"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stderr.contains("--link: init_from = 'gpt2' replaces the file's init_from = 'gpt2-xl'"), "{stderr}");
    assert!(stdout.contains("n_layer 12,") && stdout.contains("init_from 'gpt2'") && !stdout.contains("init_from = 'gpt2-xl'"), "{stdout}");
    // A link without `init` over the file's checkpoint says how to plan its own shape.
    let err = assert_one_error_line(&["plan", file, "--link", "?L=4"]);
    assert!(err.contains("add init=scratch to the link"), "{err}");
    assert!(scratch["fixes"].as_array().unwrap().iter().any(|f| f["config"]["n_layer"] != 48), "{}", scratch["fixes"]);
    let err = assert_one_error_line(&["plan", "--link", "?v=1&init=gpt2&L=4"]);
    assert!(err.contains("L=4 (n_layer): init_from = 'gpt2' loads GPT-2's n_layer (12)"), "{err}");
    let err = assert_one_error_line(&["plan", "--link", "?v=1&init=resume"]);
    assert!(err.contains("init=resume (init_from): expected scratch, gpt2"), "{err}");
    // The text report says where the run starts.
    let out = vramfit(&["plan", "--no-fixes", "--link", &query]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("init_from 'gpt2-xl': GPT-2's weights and shape"));

    // `train` trains the shape from scratch and says so (here its pre-flight then stops it).
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("init-link-train");
    let out =
        vramfit(&["train", "--link", "?v=1&init=gpt2&B=1&T=8&GA=1", "--out-dir", out_dir.to_str().unwrap(), "--max-memory-mib", "64"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("note: --link: init_from = 'gpt2': vramfit downloads no weights; without --weights"), "{stderr}");
    assert!(stderr.contains("this run needs") && !out.status.success(), "{stderr}");
}

fn plan_json_fixes(args: &[&str]) -> Value {
    let mut all = vec!["plan", "--json"];
    all.extend_from_slice(args);
    let out = vramfit(&all);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A block past GPT-2's 1024 positions under a checkpoint is one error line whichever way it
/// comes: a flag (for both runtimes: `train` takes the checkpoint's shape too) or a file under a
/// link that names the checkpoint. A link's checkpoint over a file of another shape says which
/// of the file's settings it replaces.
#[test]
fn a_checkpoint_refuses_a_longer_block_and_names_what_it_replaces() {
    for runtime in ["pytorch", "trainer"] {
        let err = assert_one_error_line(&["plan", "--runtime", runtime, "--init_from=gpt2", "--block-size", "2048"]);
        assert!(err.contains("block_size 2048: init_from = 'gpt2' loads GPT-2's 1024 positions"), "{err}");
    }
    let long = temp_file("long_block.py", "n_layer = 4\nblock_size = 2048\n");
    let err = assert_one_error_line(&["plan", "--config", long.to_str().unwrap(), "--link", "?v=1&init=gpt2"]);
    assert!(err.contains("block_size 2048: init_from = 'gpt2' loads GPT-2's 1024 positions"), "{err}");
    let small = temp_file("small_model.py", "n_layer = 4\nblock_size = 256\n");
    let out = vramfit(&["plan", "--no-fixes", "--config", small.to_str().unwrap(), "--link", "?v=1&init=gpt2"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    // vocab_size and bias are nanoGPT's defaults here, which the file does not set: not named.
    assert!(stderr.contains("--link: init_from = 'gpt2': n_layer 4 not used"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("n_layer 12,"));
    // A file's block past the positions is no error once a flag or the link replaces it with
    // one within them (train.py applies its command line on top), and still one on its own.
    let gpt2_long = temp_file("gpt2_long_block.py", "block_size = 4096\ninit_from = 'gpt2'\n");
    let gpt2_long = gpt2_long.to_str().unwrap();
    for replaced in [&["--block-size", "512"][..], &["--block_size=512"], &["--link", "?v=1&T=512"]] {
        let out = vramfit(&[&["plan", "--no-fixes", "--config", gpt2_long][..], replaced].concat());
        assert!(out.status.success(), "{replaced:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("block_size 512,"), "{replaced:?}");
    }
    let err = assert_one_error_line(&["plan", "--config", gpt2_long]);
    assert!(err.contains("block_size 4096 is past GPT-2's 1024 positions"), "{err}");
    let err = assert_one_error_line(&["plan", "--config", gpt2_long, "--block-size", "2048"]);
    assert!(err.contains("block_size 2048: init_from = 'gpt2' loads GPT-2's 1024 positions"), "{err}");
}

/// `plan --runtime trainer` for a run whose eval batch is the peak offers the eval fixes, and
/// the eval batch it names fits when planned.
#[test]
fn the_trainer_plan_offers_eval_fixes_that_fit() {
    let base = [
        "plan",
        "--runtime",
        "trainer",
        "--n-layer",
        "2",
        "--n-embd",
        "128",
        "--n-head",
        "4",
        "--block-size",
        "64",
        "--batch-size",
        "8",
        "--threads",
        "1",
        "--max-memory-mib",
        "30",
        "--vocab-size",
        "32",
        "--gradient-accumulation-steps",
        "1",
    ];
    let mut args = base.to_vec();
    args.extend(["--eval-batch-size", "64"]);
    let text = String::from_utf8_lossy(&vramfit(&args).stdout).to_string();
    assert!(text.contains("Does not fit") && text.contains("fix: --eval-chunk-rows "), "{text}");
    assert!(!text.contains("not even a micro-batch"), "{text}");
    let e: String =
        text.split("fix: --eval-batch-size ").nth(1).unwrap_or_else(|| panic!("{text}")).chars().take_while(char::is_ascii_digit).collect();
    let mut fixed = base.to_vec();
    fixed.extend(["--eval-batch-size", &e]);
    assert!(String::from_utf8_lossy(&vramfit(&fixed).stdout).contains("Fits: needs"), "--eval-batch-size {e}");
}

/// Where the allocator model's reserve grows past the card after the two simulated iterations
/// (12 layers of 768 at block 256, vocab 50304, batch 33 accumulating 5, bfloat16, eager, on the
/// 12 GB default card), `plan` says so beside the validated verdict: JSON `later` with core's
/// own figures, and a line and a note in the text. Batch 4 has no such growth past the card.
#[test]
fn plan_warns_where_the_reserve_grows_past_the_card_later() {
    let args = [
        "--n-layer",
        "12",
        "--n-head",
        "6",
        "--n-embd",
        "768",
        "--block-size",
        "256",
        "--vocab-size",
        "50304",
        // Accumulating 4: with 5 the last micro-step leaves its logits elsewhere and this
        // config's reserve does not run out (core's `Run::iteration`).
        "--gradient-accumulation-steps",
        "4",
        "--dtype",
        "bfloat16",
        "--compile",
        "false",
    ];
    let mut with_batch = args.to_vec();
    with_batch.extend(["--batch-size", "33"]);
    let plan = plan_json(&with_batch);
    let gpu = device::default_gpu();
    let cfg: Config = serde_json::from_value(plan["config"].clone()).unwrap();
    let reserve_room = gpu.usable_bytes - gpu.context_bytes;
    let (_, later) = vramfit_core::sim::simulate_exact_and_later(&cfg, &gpu.target(), Some(reserve_room));
    let later = later.expect("core's model grows past the card");
    let json = &plan["later"];
    assert_eq!(json["iteration"].as_u64(), Some(later.iteration as u64));
    assert_eq!(json["reserved_bytes"].as_u64(), Some(later.reserved_bytes));
    assert_eq!(json["nvidia_smi_bytes"].as_u64(), Some(later.reserved_bytes + gpu.context_bytes));
    assert_eq!(json["fits"], false);
    assert_eq!(json["source"], "estimate");
    assert_eq!(json["past_card"]["recovers"].as_bool(), later.past_limit.map(|p| p.recovers));
    assert_eq!(plan["cards"][0]["fits"], true, "the validated windows fit");
    let mut text_args = vec!["plan"];
    text_args.extend_from_slice(&with_batch);
    let text = String::from_utf8_lossy(&vramfit(&text_args).stdout).into_owned();
    assert!(
        text.contains(&format!("rtx-4070 after a few steps (the allocator model at iteration {}, an estimate)", later.iteration)),
        "{text}"
    );
    assert!(text.contains("- later_reserve (estimate): after the two iterations simulated above"), "{text}");
    assert!(text.contains("  none needed for the two simulated steps; for the growth after them"), "{text}");
    // Batch 33 is the largest that fits, and it is the batch that runs out: core's plan names
    // the one below that keeps fitting, and `plan` prints it, as JSON and in words.
    let core_plan = vramfit_core::plan::plan(&vramfit_core::plan::PlanRequest {
        config: cfg.clone(),
        gpus: vec![gpu.clone()],
        other_usage_bytes: 0,
        with_fixes: true,
    })
    .unwrap();
    let lasting = core_plan.largest_lasting_micro_batch.clone().expect("the largest runs out later");
    assert_eq!(plan["largest_lasting_micro_batch"], serde_json::to_value(&lasting).unwrap());
    assert_eq!(plan["largest_micro_batch"], 33);
    // Its own needs, as core has them (the search's simulation of batch 33).
    let needs = core_plan.largest_micro_batch_needs.expect("the largest batch's needs");
    assert_eq!(plan["largest_micro_batch_needs"], serde_json::to_value(needs).unwrap());
    assert!(needs.training_bytes.max(needs.eval_bytes) <= plan["cards"][0]["available_bytes"].as_u64().unwrap());
    let keeps = lasting.batch_size.expect("a smaller batch keeps fitting");
    assert!(
        text.contains(&format!(
            "  after a few steps (the allocator model, an estimate): batch_size 33 runs out of memory at {}; ~{keeps} keeps fitting",
            lasting.when()
        )),
        "{text}"
    );
    // Expandable segments do not fit here either, so the smaller batch is the one way offered.
    assert!(plan["later"]["expandable_fix_bytes"].is_null(), "{}", plan["later"]);
    assert!(text.contains(&format!("for the growth after them, --batch-size {keeps} (see the notes)")), "{text}");
    let mut small = args.to_vec();
    small.extend(["--batch-size", "4"]);
    let small = plan_json(&small);
    assert!(small["later"].is_null() || small["later"]["fits"] == true, "{}", small["later"]);
    // Its largest is the same batch 33, which still runs out.
    assert_eq!(small["largest_lasting_micro_batch"], plan["largest_lasting_micro_batch"]);
}

/// A fix that fits the two simulated iterations but runs out of memory later in the allocator
/// model (a 4-layer model at batch 33 on an RTX 4070 with 1,000 MiB taken, core's own fixes) says so
/// in `plan`'s list, in JSON and in words, and comes after the fixes that keep fitting.
#[test]
fn plan_marks_a_fix_that_runs_out_of_memory_later() {
    // An eval batch of 28 fits the simulated steps and runs out later, and no smaller one fits
    // at all (core's test of the ranking has the same case).
    let args = [
        "--n-layer",
        "4",
        "--n-head",
        "12",
        "--n-embd",
        "1152",
        "--block-size",
        "256",
        "--batch-size",
        "33",
        "--gradient-accumulation-steps",
        "14",
        "--attention",
        "manual",
        "--compile",
        "false",
        "--gpu",
        "rtx-4070",
        "--other-usage-mib",
        "1000",
    ];
    let plan = plan_json_fixes(&args);
    let cfg: Config = serde_json::from_value(plan["config"].clone()).unwrap();
    let gpu = device::Gpu::find("rtx-4070").unwrap();
    let request = vramfit_core::plan::PlanRequest { config: cfg, gpus: vec![gpu], other_usage_bytes: 1000 << 20, with_fixes: true };
    let fixes = vramfit_core::plan::plan(&request).unwrap().fixes.unwrap();
    assert_eq!(plan["fixes"], serde_json::to_value(&fixes).unwrap());
    let mut text_args = vec!["plan"];
    text_args.extend_from_slice(&args);
    let text = String::from_utf8_lossy(&vramfit(&text_args).stdout).into_owned();
    let marked: Vec<(usize, &vramfit_core::plan::Fix)> = fixes.iter().enumerate().filter(|(_, f)| f.runs_out_later.is_some()).collect();
    assert!(!marked.is_empty(), "{fixes:?}");
    for (i, f) in marked {
        let when = f.runs_out_later.unwrap().when();
        let line = format!("  {}. {}: needs ", i + 1, f.title);
        let shown = text.lines().find(|l| l.starts_with(&line)).unwrap_or_else(|| panic!("{line} in {text}"));
        let close = if f.close_call { " (a close call)" } else { "" };
        assert!(
            shown.ends_with(&format!("fits the two simulated steps{close}, out of memory at {when} by the allocator model (estimate)")),
            "{shown}"
        );
        assert!(fixes[..i].iter().all(|g| g.fits), "only fixes that fit come before it");
    }
}

/// Settings combine before they are checked, as train.py only sees the final values: a link
/// whose settings conflict only until a flag after it settles them plans the final config; a
/// final config that still conflicts is one error line naming where the settings came from;
/// a link value bad on its own is refused, naming the key, whatever the flags.
#[test]
fn a_link_is_checked_with_the_flags_that_follow_it() {
    let plan = plan_json(&["--link", "?v=1&H=5", "--n-embd", "100"]);
    assert_eq!((plan["config"]["n_head"].as_u64(), plan["config"]["n_embd"].as_u64()), (Some(5), Some(100)));
    assert_eq!(plan, plan_json(&["--link", "?v=1&H=5&C=100"]));
    let plan = plan_json(&["--link", "H=5", "--n-embd", "100"]);
    assert_eq!(plan["config"]["n_head"], 5);
    let plan = plan_json(&["--link", "?v=1&T=256&ET=512", "--block-size", "512"]);
    assert_eq!((plan["config"]["block_size"].as_u64(), plan["config"]["eval_block_size"].as_u64()), (Some(512), Some(512)));
    // A block past a checkpoint's positions, shortened by a flag.
    let plan = plan_json(&["--link", "?v=1&init=gpt2&T=2048", "--block-size", "512"]);
    assert_eq!((plan["config"]["block_size"].as_u64(), plan["config"]["n_layer"].as_u64()), (Some(512), Some(12)));

    // Still invalid at the end: one line, naming the link's key and the flag.
    let err = assert_one_error_line(&["plan", "--link", "?v=1&H=5", "--n-embd", "102"]);
    assert!(err.contains("n_embd (102) must be divisible by n_head (5)"), "{err}");
    assert!(err.contains("n_head from --link H=5") && err.contains("n_embd from --n-embd"), "{err}");
    // The link's own settings conflicting, with no flag involved: named as a bad key is.
    let err = assert_one_error_line(&["plan", "--link", "?v=1&H=5"]);
    assert_eq!(err.trim_end(), "error: --link: H=5 (n_head): n_embd (768) must be divisible by n_head (5)");
    let err = assert_one_error_line(&["plan", "--link", "?v=1&H=12&C=770", "--n-layer", "4"]);
    assert!(err.starts_with("error: --link: H=12 (n_head), C=770 (n_embd): n_embd (770)"), "{err}");
    let err = assert_one_error_line(&["plan", "--link", "?v=1&init=gpt2&T=2048", "--n-layer", "4"]);
    assert!(err.contains("--link: T=2048 (block_size): GPT-2's checkpoint has 1024 positions"), "{err}");
    // A flag that overrides the link's value takes the blame alone.
    let err = assert_one_error_line(&["plan", "--link", "?v=1&H=5", "--n-embd", "100", "--n-head", "7"]);
    assert!(err.contains("n_embd (100) must be divisible by n_head (7)") && !err.contains("--link"), "{err}");

    // Bad on its own: refused, naming the key, whatever the flags say.
    for (link, key) in [("?v=1&H=0", "H=0 (n_head)"), ("?v=1&H=abc", "H=abc (n_head)"), ("?v=1&C=-5", "C=-5 (n_embd)")] {
        let err = assert_one_error_line(&["plan", "--link", link, "--n-embd", "100", "--n-head", "5"]);
        assert!(err.starts_with("error: --link: ") && err.contains(key), "{err}");
    }
    // `train` reads its settings the same way.
    let err = assert_one_error_line(&["train", "--link", "?v=1&H=5", "--n-embd", "102"]);
    assert!(err.contains("n_head from --link H=5"), "{err}");
}

/// A link the page wrote for a run from GPT-2's checkpoint carries the checkpoint's own shape
/// (V=50257, bias=1): no note says those, or nanoGPT's defaults it never set, are not used.
#[test]
fn a_checkpoint_link_names_only_settings_the_user_gave() {
    let link = "?v=1&init=gpt2&L=12&H=12&C=768&V=50257&bias=1&T=1024";
    for args in [&["plan", "--no-fixes", "--link", link][..], &["plan", "--no-fixes", "--link", "?v=1&init=gpt2"]] {
        let out = vramfit(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(!stderr.contains("not used") && !stderr.contains("vocab_size") && !stderr.contains("bias"), "{args:?}: {stderr}");
    }
    // The file's own shape settings are named, unless the link wrote them itself.
    let file = temp_file("char_model.py", "n_layer = 6\nn_head = 6\nn_embd = 384\nvocab_size = 65\n");
    let file = file.to_str().unwrap();
    let out = vramfit(&["plan", "--no-fixes", "--config", file, "--link", "?v=1&init=gpt2&V=50257"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("--link: init_from = 'gpt2': n_layer 6, n_head 6, n_embd 384 not used"), "{stderr}");
    assert!(!stderr.contains("vocab_size") && !stderr.contains("bias"), "{stderr}");
}

/// A config file's values count only as the run's final ones, as in train.py: a value out of
/// range that a later line, the link or a flag replaces is no error, and neither is a
/// combination a flag settles; one that stays is refused, naming the file's line.
#[test]
fn a_config_file_is_checked_with_what_comes_after_it() {
    let no_div = temp_file("no_div.py", "n_embd = 100\nn_head = 7\n");
    let no_div = no_div.to_str().unwrap();
    let plan = plan_json(&["--config", no_div, "--n_head=5"]);
    assert_eq!((plan["config"]["n_head"].as_u64(), plan["config"]["n_embd"].as_u64()), (Some(5), Some(100)));
    let plan = plan_json(&["--config", no_div, "--link", "?v=1&H=4"]);
    assert_eq!(plan["config"]["n_head"], 4);
    for other in [&[][..], &["--n-layer", "3"]] {
        let mut args = vec!["plan", "--config", no_div];
        args.extend_from_slice(other);
        let err = assert_one_error_line(&args);
        assert!(err.trim_end().ends_with("no_div.py: line 2: n_embd (100) must be divisible by n_head (7)"), "{err}");
    }

    let replaced = temp_file("replaced.py", "n_layer = 2000\nn_layer = 2\n");
    assert_eq!(plan_json(&["--config", replaced.to_str().unwrap()])["config"]["n_layer"], 2);
    let too_deep = temp_file("too_deep.py", "n_layer = 2000\n");
    let too_deep = too_deep.to_str().unwrap();
    assert_eq!(plan_json(&["--config", too_deep, "--n-layer", "3"])["config"]["n_layer"], 3);
    assert_eq!(plan_json(&["--config", too_deep, "--link", "?v=1&L=4"])["config"]["n_layer"], 4);
    let out = vramfit(&["plan", "--no-fixes", "--config", too_deep, "--n-layer", "3"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("changes none of the settings"), "the file did set n_layer");
    let err = assert_one_error_line(&["plan", "--config", too_deep, "--n-head", "4"]);
    assert!(err.trim_end().ends_with("too_deep.py: line 1: n_layer: 2000 is larger than vramfit models (at most 1024)"), "{err}");
    // Replacing one bad value does not pass over another.
    let two_bad = temp_file("two_bad.py", "n_layer = 2000\nn_head = 0\n");
    let err = assert_one_error_line(&["plan", "--config", two_bad.to_str().unwrap(), "--n-layer", "4"]);
    assert!(err.contains("two_bad.py: line 2: n_head: "), "{err}");
}

/// A nanoGPT command line runs its arguments in order (train.py's configurator): a config file
/// given as train.py takes it replaces the flags before it that it sets, with a note, and reads
/// over them; flags after it, and any flag with `--config FILE`, win (QA: `--n_layer=3 n5.py`
/// planned 3 layers where train.py builds 5).
#[test]
fn flags_before_a_config_file_given_as_train_py_takes_it_are_run_before_it() {
    let file = temp_file("order_n5.py", "n_layer = 5\nbatch_size = 8\nn_embd = n_embd * 2\n");
    let file = file.to_str().unwrap();
    let config = |args: &[&str]| plan_json(args)["config"].clone();
    let c = config(&["--n_layer=3", "--n-embd", "64", "--n_head=4", file]);
    assert_eq!(
        (c["n_layer"].as_u64(), c["n_embd"].as_u64(), c["n_head"].as_u64(), c["batch_size"].as_u64()),
        (Some(5), Some(128), Some(4), Some(8))
    );
    let c = config(&[file, "--n_layer=3", "--n-embd", "96"]);
    assert_eq!((c["n_layer"].as_u64(), c["n_embd"].as_u64()), (Some(3), Some(96)));
    // Given before and after: the last one is after the file.
    assert_eq!(config(&["--n_layer=3", file, "--n_layer=2"])["n_layer"], 2);
    assert_eq!(config(&["--n_layer=3", "--config", file])["n_layer"], 3);
    // With a link: a flag before the file that the file does not set stands over the link, as
    // any flag; one the file sets is the file's, which the link then replaces (review).
    let link = "v=1&L=6&C=384&H=6&T=256&B=16";
    let c = config(&["--n_head=4", "--batch_size=4", file, "--link", link]);
    assert_eq!((c["n_head"].as_u64(), c["batch_size"].as_u64()), (Some(4), Some(16)));
    let out = vramfit(&["plan", "--no-fixes", "--n_layer=3", "--n_head=4", "--dtype=float16", file]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("order_n5.py: n_layer = 5 replaces --n_layer=3, given before the file (train.py runs its arguments in order)"),
        "{stderr}"
    );
    // The file does not set n_head or dtype: nothing replaced them.
    assert!(!stderr.contains("--n_head") && !stderr.contains("--dtype"), "{stderr}");
    // A bad value before the file that the file replaces is not the run's, and one the file
    // sets after a good flag is.
    assert_eq!(config(&["--batch_size=0", file])["batch_size"], 8);
    let bad = temp_file("order_bad.py", "n_layer = 2000\n");
    let err = assert_one_error_line(&["plan", "--n_layer=3", bad.to_str().unwrap()]);
    assert!(err.contains("order_bad.py: line 1: n_layer: 2000 is larger"), "{err}");
}

/// A training setting the file sets to a value that cannot be read stops `train` with the reason.
#[test]
fn an_unreadable_training_setting_is_refused_with_its_reason() {
    let file = temp_file("huge_min_lr.py", "n_layer = 1\nn_head = 1\nn_embd = 16\nblock_size = 8\nmin_lr = 1e400\n");
    let err = assert_one_error_line(&["train", "--config", file.to_str().unwrap()]);
    assert!(err.contains("cannot read the value of min_lr (line 5: cannot read `1e400`: 1e400 is too large)"), "{err}");
}

/// Input quoted in an error or a note (a config file's value, a path) never reaches the terminal
/// raw: an escape sequence could retitle the window or recolour the line, a right-to-left
/// override reverse it. They are shown escaped.
#[test]
fn messages_show_control_characters_escaped() {
    let file = temp_file("escape_sequence.py", "n_layer = \"\u{1b}]0;pwn\u{7}\"\nlearning_rate = \"\u{202e}x\"\n");
    let file = file.to_str().unwrap();
    let err = assert_one_error_line(&["plan", "--config", file]);
    assert!(err.contains("\\u{1b}]0;pwn\\u{7}"), "{err}");
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("data\u{1b}[31mred\u{202e}.txt");
    let err = assert_one_error_line(&["train", "--data", path.to_str().unwrap(), "--max-iters", "1"]);
    assert!(err.contains("data\\u{1b}[31mred\\u{202e}.txt"), "{err}");
    for out in [vramfit(&["plan", "--config", file]), vramfit(&["train", "--data", path.to_str().unwrap()])] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.chars().any(|c| c != '\n' && vramfit_core::reshapes_text(c)), "{stderr:?}");
    }
}

/// The fit section says where a run that does not fit first passes the card when that is not
/// the window its need is given for, flags a margin within the model's error, and marks each
/// fix's need by its own terms: adding compile makes an estimate of a need measured on an H100.
#[test]
fn the_report_says_where_it_first_runs_out_what_is_close_and_which_fix_is_an_estimate() {
    let text = |args: &[&str]| {
        let out = vramfit(&[&["plan"][..], args].concat());
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let b64 = ["--batch-size", "64", "--gpu", "rtx-4070"];
    let report = text(&b64);
    assert!(report.contains("passes the card first at the eval at start (iteration 0's estimate_loss"), "{report}");
    let json = plan_json(&b64);
    assert_eq!(json["cards"][0]["first_short_window"], "eval_at_start");
    assert_eq!(json["cards"][0]["worst_window"], "train");
    // Where the first short window is the one the need is given for, no second line.
    let eager = text(&["--batch-size", "8", "--compile", "false", "--gpu", "rtx-4070", "--no-fixes"]);
    assert!(eager.contains("does NOT fit") && !eager.contains("passes the card first"), "{eager}");

    let close = text(&["--batch-size", "12", "--gpu", "rtx-3060", "--no-fixes"]);
    assert!(close.contains("fits (a close call: the margin is under 5% of the need"), "{close}");
    assert_eq!(plan_json(&["--batch-size", "12", "--gpu", "rtx-3060"])["cards"][0]["close_call"], true);
    assert_eq!(plan_json(&["--batch-size", "4", "--gpu", "rtx-3060"])["cards"][0]["close_call"], false);
    // A close call is said wherever the JSON flags one: under a card's dtype verdict (memory
    // alone), and on a fix that fits the simulated steps but runs out later.
    let no_bf16 = [
        "--n-layer=24",
        "--n-embd=768",
        "--block-size=300",
        "--vocab-size=1000",
        "--batch-size=64",
        "--compile=false",
        "--gradient-accumulation-steps=1",
    ];
    let no_bf16 = [&no_bf16[..], &["--expandable-segments=true", "--gpu", "rtx-4070,t4", "--no-fixes"]].concat();
    assert_eq!(plan_json(&no_bf16)["cards"][1]["close_call"], true, "the case");
    let report = text(&no_bf16);
    let t4 = report.lines().find(|l| l.trim_start().starts_with("t4 (")).unwrap();
    assert!(t4.contains("no bf16 hardware before Ampere") && t4.contains("(memory alone is a close call: the margin is under"), "{t4}");
    let later_fix =
        ["--n-layer=6", "--n-head=2", "--n-embd=192", "--vocab-size=50257", "--batch-size=128", "--gradient-accumulation-steps=1"];
    let later_fix =
        [&later_fix[..], &["--compile=false", "--eval-batch-size=4", "--expandable-segments=true", "--gpu", "custom-4"]].concat();
    let fixes = plan_json_fixes(&later_fix)["fixes"].as_array().unwrap().clone();
    let report = text(&later_fix);
    let fix_lines: Vec<&str> = report.lines().filter(|l| l.starts_with("  ") && l.contains(". ") && l.contains(": needs ")).collect();
    assert_eq!(fixes.len(), fix_lines.len(), "{report}");
    assert!(fixes.iter().any(|f| f["close_call"] == true && !f["runs_out_later"].is_null()), "the case: {fixes:?}");
    for (fix, line) in fixes.iter().zip(&fix_lines) {
        assert_eq!(fix["close_call"] == true, line.contains("a close call"), "{line}");
    }

    // Under compile every tensor term is the compile model's, except the fp32 weights (exact).
    let compiled = text(&["--gpu", "h100", "--no-fixes"]);
    let row = |name: &str| {
        compiled.lines().find(|l| l.trim_start().starts_with(name)).unwrap_or_else(|| panic!("{name}: {compiled}")).to_string()
    };
    assert!(!row("Parameters").contains('~') && row("Gradients").contains('~'), "{compiled}");
    // GPT-2 124M at 32 sequences (shapes measured on the H100) with 60,000 MiB taken by others.
    let taken = ["--batch-size", "32", "--compile", "false", "--gpu", "h100", "--other-usage-mib", "60000"];
    let report = text(&taken);
    let fix_lines: Vec<&str> = report.lines().filter(|l| l.starts_with("  ") && l.contains(". ") && l.contains(": needs ")).collect();
    assert!(fix_lines.len() >= 3, "{report}");
    for line in &fix_lines {
        assert_eq!(line.contains("needs ~"), line.contains("compile = True"), "{line}");
    }
    let fixes = plan_json_fixes(&taken)["fixes"].as_array().unwrap().clone();
    assert_eq!(fixes.len(), fix_lines.len(), "the JSON and the text list the same fixes");
    for fix in &fixes {
        assert_eq!(fix["needed_is_estimate"], fix["config"]["compile"], "{fix}");
        assert!(fix["close_call"].is_boolean(), "{fix}");
    }
}

/// The batch a plan names as keeping on after a few steps is what that batch's own plan says:
/// where it passes the card then and goes on only because PyTorch frees its cached blocks, it
/// "keeps running" and needs what its own plan gives after that release, not "keeps fitting".
#[test]
fn the_batch_that_keeps_on_reads_as_its_own_plan() {
    let cfg = ["--n-layer=1", "--n-head=5", "--n-embd=320", "--block-size=2048", "--vocab-size=1000"];
    let cfg = [&cfg[..], &["--gradient-accumulation-steps=2", "--compile=false", "--gpu", "rtx-3060", "--no-fixes"]].concat();
    let json = plan_json(&[&cfg[..], &["--batch-size", "2"]].concat());
    let lasting = &json["largest_lasting_micro_batch"];
    assert_eq!(lasting["frees_cached_blocks"], true, "the case: {lasting}");
    let k = lasting["batch_size"].as_u64().unwrap().to_string();
    let own = plan_json(&[&cfg[..], &["--batch-size", &k]].concat());
    assert_eq!(own["later"]["past_card"]["recovers"], true);
    let after = own["later"]["after_release_bytes"].as_u64().unwrap();
    assert_eq!(lasting["needed_bytes"].as_u64().unwrap(), after.max(own["cards"][0]["needed_bytes"].as_u64().unwrap()));
    let out = vramfit(&[&["plan"][..], &cfg[..], &["--batch-size", "2"]].concat());
    let report = String::from_utf8(out.stdout).unwrap();
    assert!(report.contains(&format!("~{k} keeps running (needs ")) && !report.contains("keeps fitting"), "{report}");
    let out = vramfit(&[&["plan"][..], &cfg[..], &["--batch-size", &k]].concat());
    let report = String::from_utf8(out.stdout).unwrap();
    assert!(report.contains("PyTorch frees its cached blocks and goes on, slower, needing ~"), "{report}");
}

/// nanoGPT's `config/eval_gpt2*.py` (`eval_only = True`): train.py runs the eval at start and
/// exits, so that window alone decides the fit, in the text, the JSON and the link; the command
/// line's `--eval_only=False` trains again, as train.py's configurator applies it last.
#[test]
fn an_eval_only_file_plans_its_eval_at_start() {
    let file =
        temp_file("eval_gpt2_xl.py", "batch_size = 8\neval_iters = 500\neval_only = True\nwandb_log = False\ninit_from = 'gpt2-xl'\n");
    let path = file.to_str().unwrap();
    let evals = plan_json(&[path, "--gpu", "rtx-4090"]);
    assert_eq!(evals["config"]["eval_only"], true);
    assert_eq!(evals["cards"][0]["fits"], true, "{}", evals["cards"][0]);
    assert_eq!(evals["cards"][0]["worst_window"], "eval_at_start");
    assert_eq!(evals["cards"][0]["needed_bytes"], evals["eval_at_start"]["nvidia_smi_bytes"]);
    let trains = plan_json(&[path, "--gpu", "rtx-4090", "--eval_only=False"]);
    // Left out when false: a training run's JSON (and checkpoint) reads as it did before.
    assert!(trains["config"].get("eval_only").is_none(), "{}", trains["config"]);
    assert_eq!(trains["cards"][0]["fits"], false, "GPT-2 XL does not train on 24 GB");

    let out = vramfit(&["plan", "--no-fixes", path, "--gpu", "rtx-4090"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("eval_only True: train.py runs the eval at start and exits"), "{stdout}");
    assert!(stdout.contains("needs ~") && stdout.contains("at eval at start of"), "{stdout}");
    // What changes the plan is said where it applies, not listed as having no effect.
    let unused = stdout.lines().find(|l| l.contains("no effect on memory")).unwrap_or_default();
    assert!(unused.contains("wandb_log") && !unused.contains("eval_only") && !unused.contains("init_from"), "{unused}");
    assert!(stderr.contains("the plan's fit is the eval at start's"), "{stderr}");
    let overridden = vramfit(&["plan", "--no-fixes", path, "--gpu", "rtx-4090", "--eval_only=False", "--wandb_log=True"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&overridden.stdout), String::from_utf8_lossy(&overridden.stderr));
    assert!(!stderr.contains("the plan's fit is the eval at start's") && !stdout.contains("eval_only True"), "{stderr}{stdout}");
    assert!(!stdout.contains("wandb_log = False"), "the file's value, which the command line replaced: {stdout}");

    // The link carries it, and plans the same.
    let state =
        LinkState { config: Config { eval_only: true, batch_size: 64, compile: false, ..Config::default() }, ..LinkState::default() };
    let query = link::encode(&state);
    assert!(query.ends_with("&eo=1"), "{query}");
    let by_link = plan_json(&["--link", &query]);
    assert_eq!(by_link["config"]["eval_only"], true);
    assert_eq!(by_link["cards"][0]["worst_window"], "eval_at_start");
}

/// What train.py itself would stop on is an error of `plan` too, as it is of `train`: a
/// command-line value its configurator refuses, a setting that decides the model and cannot
/// be read, a checkpoint name it does not know, a block past GPT-2's positions in a file. A
/// setting after a list continued over lines is read (it was once dropped, planning 12 layers
/// for a file of 3).
#[test]
fn what_train_py_stops_on_is_an_error() {
    for (args, says) in [
        (vec!["--max_iters=abc"], "--max_iters=abc: train.py wants an integer"),
        (vec!["--learning_rate=NaN"], "--learning_rate=NaN: train.py wants a number"),
        (vec!["--max_iters=20.5"], "wants an integer"),
        (vec!["--decay_lr=maybe"], "wants True or False"),
        (vec!["--init_from=gpt3"], "init_from = 'gpt3' is none of train.py's"),
    ] {
        let err = assert_one_error_line(&[&["plan"][..], &args].concat());
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // What either command line spells validly plans.
    for args in [["--learning_rate=1"], ["--decay-lr=false"], ["--eval_only=True"], ["--out_dir=123"]] {
        let out = vramfit(&[&["plan", "--no-fixes"][..], &args].concat());
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    for (name, text, says) in [
        ("stop_cond.py", "n_layer = 1\ninit_from = 'gpt2' if big else 'scratch'\n", "cannot read the value of init_from"),
        ("stop_fstr.py", "dataset = f'shakespeare_char'\n", "cannot read the value of dataset"),
        ("stop_gpt3.py", "init_from = 'gpt3'\n", "train.py would stop"),
        ("stop_block.py", "init_from = 'gpt2'\nblock_size = 2048\n", "its first forward would stop"),
        ("stop_bracket.py", "n_layer = 4\nx = (\n", "line 2: a bracket opens here and is never closed"),
        ("stop_escape.py", "out_dir = 'run\\x4'\n", "line 1: cannot read `'run\\x4'`: truncated \\x escape"),
    ] {
        let file = temp_file(name, text);
        let err = assert_one_error_line(&["plan", file.to_str().unwrap()]);
        assert!(err.contains(says), "{name}: {err}");
    }
    // The user's own words in a notice are not train.py's: a skipped line that says "would stop".
    let file = temp_file("says_stop.py", "n_layer = 6\nprint(\"the run would stop here; train.py would stop\")\n");
    assert_eq!(plan_json(&["--config", file.to_str().unwrap()])["config"]["n_layer"], 6);
    let file = temp_file("continued_list.py", "n_embd = 256\nn_head = 4\nwandb_tags = [\"baseline\",\n    \"small\"]; n_layer = 3\n");
    assert_eq!(plan_json(&["--config", file.to_str().unwrap()])["config"]["n_layer"], 3);
}

/// A config file that names its own dataset takes vocab_size from `data/<dataset>/meta.pkl`
/// where `plan` runs, as train.py does where it runs; a flag or the link that sets vocab_size
/// wins, and then no note speaks of the dataset's vocabulary; without the file, the assumed
/// 50304 stands and is noted; a file that is not a meta.pkl is one error line.
#[test]
fn a_datasets_meta_pkl_sets_the_vocabulary_where_plan_runs() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plan-dataset-meta");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data/mych")).unwrap();
    std::fs::create_dir_all(dir.join("data/broken")).unwrap();
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/meta_large.pkl");
    std::fs::copy(&fixture, dir.join("data/mych/meta.pkl")).unwrap();
    std::fs::write(dir.join("data/broken/meta.pkl"), "no pickle").unwrap();
    for (name, dataset) in [("mych.py", "mych"), ("other.py", "other"), ("broken.py", "broken")] {
        std::fs::write(dir.join(name), format!("dataset = '{dataset}'\nn_layer = 2\nn_head = 2\nn_embd = 64\nblock_size = 64\n")).unwrap();
    }
    let run = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_vramfit")).current_dir(&dir).args(args).output().unwrap();
    let vocab_and_notes = |args: &[&str]| {
        let out = run(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
        (plan["config"]["vocab_size"].as_u64().unwrap(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    // meta_large.pkl holds 1,500 characters (tests/data/make_meta.py).
    let (vocab, notes) = vocab_and_notes(&["plan", "mych.py", "--json", "--no-fixes"]);
    assert_eq!(vocab, 1500, "{notes}");
    assert!(notes.contains("vocab_size 1500, from data/mych/meta.pkl as train.py reads it"), "{notes}");
    assert!(!notes.contains("assumes"), "{notes}");
    // Also for train.py's command line, dataset given there.
    let (vocab, _) = vocab_and_notes(&["plan", "other.py", "--dataset=mych", "--json", "--no-fixes"]);
    assert_eq!(vocab, 1500);
    // A flag or the link decides over the file, and the dataset goes unmentioned.
    for over in [&["--vocab-size", "77"][..], &["--link", "?v=1&V=77"][..]] {
        let mut args = vec!["plan", "mych.py", "--json", "--no-fixes"];
        args.extend_from_slice(over);
        let (vocab, notes) = vocab_and_notes(&args);
        assert_eq!(vocab, 77, "{over:?}");
        assert!(!notes.contains("dataset = '"), "{over:?}: {notes}");
    }
    // No meta.pkl for this dataset here: train.py's 50304, said as what it is.
    let (vocab, notes) = vocab_and_notes(&["plan", "other.py", "--json", "--no-fixes"]);
    assert_eq!(vocab, 50304);
    assert!(notes.contains("no data/other/meta.pkl under this directory; planned with vocab_size 50304"), "{notes}");
    assert!(!notes.contains("cannot read"), "{notes}");
    // shakespeare_char without its data here: nanoGPT's 65 characters, not "from its meta.pkl".
    std::fs::write(dir.join("char.py"), "dataset = 'shakespeare_char'\n").unwrap();
    let (vocab, notes) = vocab_and_notes(&["plan", "char.py", "--json", "--no-fixes"]);
    assert_eq!(vocab, 65);
    assert!(notes.contains("no data/shakespeare_char/meta.pkl under this directory; planned with vocab_size 65"), "{notes}");
    // A config file's own vocab_size is planned, and a meta.pkl here that says otherwise is noted.
    std::fs::write(dir.join("own.py"), "dataset = 'mych'\nvocab_size = 100\nn_layer = 2\nn_head = 2\nn_embd = 64\n").unwrap();
    let (vocab, notes) = vocab_and_notes(&["plan", "own.py", "--json", "--no-fixes"]);
    assert_eq!(vocab, 100);
    assert!(notes.contains("data/mych/meta.pkl says vocab_size 1500, which is what train.py builds"), "{notes}");
    // The trainer's plan is for `vramfit train`, whose vocabulary comes from --data.
    let (vocab, _) = vocab_and_notes(&["plan", "mych.py", "--runtime", "trainer", "--json"]);
    assert_eq!(vocab, 50304);
    // A file there that is not a pickle: one error line naming it.
    let out = run(&["plan", "broken.py"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!((out.status.code(), err.lines().count()), (Some(2), 1), "{err}");
    assert!(err.starts_with("error: data/broken/meta.pkl is not a pickle vramfit can read"), "{err}");
}

/// The JSON document has the same keys whatever the plan says: a setting that does not apply
/// is null, not missing (a plan that fits with room to spare, one that runs out later, one that
/// does not fit, one on a card that leaves no room). A card with no room says why and offers no
/// fix, as the page does.
#[test]
fn the_json_has_the_same_keys_in_every_plan() {
    let keys = |v: &Value| -> Vec<String> { v.as_object().expect("an object").keys().cloned().collect() };
    let plans = [
        plan_json_fixes(&["--n-layer", "4"]),
        plan_json_fixes(&["--link", "?v=1&L=6&H=6&C=768&T=1024&V=65&B=60&GA=1&cmp=0&gpu=rtx-4070"]),
        plan_json_fixes(&["--batch-size", "64", "--compile", "false"]),
        plan_json_fixes(&["--gpu", "custom-0.25", "--other-usage-mib", "100"]),
        plan_json_fixes(&["--gpu", "rtx-4070", "--other-usage-mib", "12282"]),
    ];
    let (top, card) = (keys(&plans[0]), keys(&plans[0]["cards"][0]));
    let mut fix_keys: Vec<Vec<String>> = Vec::new();
    for p in &plans {
        assert_eq!(keys(p), top);
        assert_eq!(keys(&p["cards"][0]), card);
        fix_keys.extend(p["fixes"].as_array().expect("fixes computed").iter().map(keys));
    }
    assert!(plans[1]["later"].is_object() && plans[0]["later"].is_null(), "the cases");
    assert!(fix_keys.len() > 2 && fix_keys.windows(2).all(|w| w[0] == w[1]), "{fix_keys:?}");
    assert_eq!(plans[0]["cards"][0]["no_room"], Value::Null);
    assert_eq!(plans[3]["cards"][0]["no_room"], "below_context");
    assert_eq!(plans[4]["cards"][0]["no_room"], "taken_by_others");
    for p in &plans[3..] {
        assert_eq!(p["fixes"], Value::Array(Vec::new()), "no fix on a card with no room");
    }
    let out = vramfit(&["plan", "--gpu", "custom-0.25", "--other-usage-mib", "100"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no config fits: what is left is less than the CUDA context alone"), "{text}");
    assert!(text.contains("none can help: the card leaves no room for any run"), "{text}");
}

/// The report's tables stay aligned however large the figures (a 1,024-layer model of 8,192 on
/// a 4 TiB card: its breakdown cells are 13 wide): each breakdown row as long as the header,
/// each peak figure starting in its column, thousands grouped in GiB and MiB alike.
#[test]
fn the_report_tables_stay_aligned_for_large_figures() {
    for args in [
        &["plan", "--no-fixes"][..],
        &["plan", "--no-fixes", "--n-layer", "1024", "--n-embd", "8192", "--n-head", "64", "--batch-size", "64", "--gpu", "custom-4096"],
    ] {
        let out = vramfit(args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let section = |title: &str| -> Vec<String> {
            text.lines().skip_while(|l| !l.starts_with(title)).skip(1).take_while(|l| !l.is_empty()).map(str::to_string).collect()
        };
        let breakdown = section("What each peak is made of");
        assert!(breakdown.len() > 5, "{text}");
        let width = breakdown[0].chars().count();
        for row in &breakdown {
            assert_eq!(row.chars().count(), width, "{row:?} in\n{}", breakdown.join("\n"));
            // A cell never runs into the one before it (`71.1%~19415040.0`).
            assert!(!row.contains("%~") && !row.split('%').skip(1).any(|rest| rest.starts_with(|c: char| c.is_ascii_digit())), "{row:?}");
        }
        let peaks: Vec<String> = section("Peaks on").into_iter().skip(1).step_by(2).collect();
        let column = |row: &str, n: usize| row.match_indices(" GiB (").nth(n).map(|(i, _)| row[..i].rfind(' ').unwrap_or(0));
        let starts: Vec<Option<usize>> = peaks.iter().map(|r| column(r, 1)).collect();
        assert!(starts.windows(2).all(|w| w[0] == w[1]) && starts[0].is_some(), "{}", peaks.join("\n"));
        if args.len() > 2 {
            assert!(text.contains("~32,813.26 GiB (33,600,779 MiB)") && text.contains("~19,415,040.0"), "{text}");
        }
    }
}

/// A train.py setting `plan` takes off the command line with a value that is not UTF-8 is said
/// to be so, as a model flag's is, not called an unknown flag with a suggestion of another.
#[cfg(unix)]
#[test]
fn a_train_py_setting_not_in_utf8_is_said_to_be_so() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    for args in [vec![&b"--max_iters=\xff"[..]], vec![&b"--dataset"[..], &b"\xff"[..]], vec![&b"--out-dir=\xff"[..]]] {
        let args: Vec<&OsStr> = args.into_iter().map(OsStr::from_bytes).collect();
        let out = Command::new(env!("CARGO_BIN_EXE_vramfit")).arg("plan").args(&args).output().expect("the binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!((out.status.code(), stderr.lines().count()), (Some(2), 1), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: the value of --") && stderr.contains("is not valid UTF-8"), "{args:?}: {stderr}");
    }
}

/// What a config file holds is quoted with the characters that would reshape a terminal's line
/// escaped (an escape sequence could clear the screen or fake a verdict), as notes quote it.
#[test]
fn a_config_files_strings_reach_the_report_escaped() {
    let file = temp_file("escapes.py", "wandb_run_name = 'x\\x1b[2J\\x1b[31mFITS\\x07'\nbatch_size = 4\n");
    let out = vramfit(&["plan", "--no-fixes", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && !stdout.contains('\u{1b}') && !stdout.contains('\u{7}'), "{stdout:?}");
    let line = stdout.lines().find(|l| l.contains("no effect on memory")).expect("the file's other settings are listed");
    assert!(line.contains(r"wandb_run_name = 'x\u{1b}[2J\u{1b}[31mFITS\u{7}'"), "{line}");
}

/// Where the search reaches the largest batch vramfit plans, the report says that is its limit,
/// not the card's.
#[test]
fn the_largest_batch_at_vramfits_limit_says_so() {
    let args = ["plan", "--no-fixes", "--n-layer", "2", "--n-embd", "64", "--n-head", "2", "--block-size", "8", "--vocab-size", "65"];
    let out = vramfit(&[&args[..], &["--batch-size", "65536", "--gpu", "h200"]].concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().find(|l| l.contains("largest micro-batch that fits")).unwrap_or_default();
    assert!(line.contains(": ~65536 (") || line.contains(": 65536 ("), "{line}");
    assert!(line.ends_with("; the most vramfit plans, and more may fit"), "{line}");
    let small = vramfit(
        &[
            &args[..],
            &[
                "--batch-size",
                "4",
                "--gpu",
                "rtx-3060",
                "--n-layer",
                "48",
                "--n-embd",
                "1024",
                "--block-size",
                "1024",
                "--n-head",
                "16",
                "--vocab-size",
                "50304",
            ],
        ]
        .concat(),
    );
    assert!(!String::from_utf8_lossy(&small.stdout).contains("the most vramfit plans"));
}

/// A value thousands of characters long is quoted by its start, in an error and in a note: the
/// line stays one a terminal shows.
#[test]
fn a_very_long_value_is_quoted_by_its_start() {
    let long = "a".repeat(5000);
    for flag in ["--gpu", "--batch-size"] {
        let err = assert_one_error_line(&["plan", flag, &long]);
        assert!(err.len() < 600 && err.contains("…[5000 characters]"), "{flag}: {} bytes: {}", err.len(), &err[..200]);
    }
    let out = vramfit(&["plan", "--no-fixes", &format!("--out_dir={long}")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.len() < 600 && stderr.contains("characters]"), "{} bytes", stderr.len());
}

/// A run whose own batch runs out a few steps in, where the largest that fits keeps fitting:
/// the report says that batch keeps fitting, and its Fixes line offers it (QA: it was offered
/// without a word on why).
#[test]
fn the_largest_that_keeps_fitting_is_said_and_offered() {
    let args = [
        "plan",
        "--n-layer",
        "3",
        "--n-head",
        "12",
        "--n-embd",
        "1152",
        "--block-size",
        "256",
        "--batch-size",
        "33",
        "--gradient-accumulation-steps",
        "14",
        "--attention",
        "manual",
        "--compile",
        "false",
        "--other-usage-mib",
        "1200",
    ];
    let json = plan_json(&args[1..]);
    let largest = json["largest_micro_batch"].as_u64().expect("a batch fits");
    assert!(json["largest_lasting_micro_batch"].is_null() && largest != 33, "the case: {json}");
    let out = vramfit(&args);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains(&format!("after a few steps (the allocator model, an estimate): batch_size {largest} keeps fitting")),
        "{report}"
    );
    assert!(report.contains(&format!("--batch-size {largest} (see the notes)")), "{report}");
}
