//! core against every reference measurement in tests/reference/data/.
//!
//! Rows the harness labels (their trace is known to differ from CUDA, e.g. CPU autocast's
//! op lists) are not held to the target (`cargo bench -p vramfit-core` prints them); every other
//! row's training and eval peaks must be within 2% and their medians within 0.5%, and the other
//! windows within the limits their tests give.

mod reference_data;

use reference_data::{
    comparisons, cudalike_comparisons, data_dir, data_files, file_name, median, read_doc, target_for, ALLOCATED_KEYS,
    NOT_PYTORCH_MEASUREMENTS,
};
use serde_json::Value;

/// Every measured peak in every PyTorch data file becomes a comparison (a dropped file or row
/// would pass the accuracy test below without being checked), and the H100 files are there.
#[test]
fn every_measured_row_is_compared() {
    let files = data_files();
    assert!(!files.is_empty(), "no reference data in {:?}", reference_data::data_dir());
    let rows = comparisons();
    let emulated = cudalike_comparisons();
    let mut cuda_files = 0;
    for path in files {
        let file = file_name(&path);
        if NOT_PYTORCH_MEASUREMENTS.contains(&file.as_str()) {
            continue;
        }
        let doc = read_doc(&path);
        if reference_data::is_capped(&doc) {
            continue; // see capped_runs_end_where_the_model_says
        }
        cuda_files += usize::from(doc["provenance"]["method"] == "cuda");
        let measured = doc["rows"].as_array().cloned().unwrap_or_default();
        let ok: Vec<&Value> = measured.iter().filter(|r| r["status"] == "ok").collect();
        assert!(!ok.is_empty(), "{file}: no measured rows");
        // Comparisons skip rows that were not measured, so the only ones allowed are those that
        // cannot be: compile rows on the CPU (a re-run where some rows failed must fail here,
        // not shrink the check).
        // The emulation of CUDA's dispatch cannot run checkpointing with dropout, nor with the
        // padded heads of bf16/fp16 flash attention: its routing is not active in the
        // checkpoint's recompute, whose check then rejects the masks or unpadded shapes.
        let cudalike = reference_data::is_cudalike(&doc);
        for row in measured.iter().filter(|r| r["status"] != "ok") {
            let cpu_compile = row["status"] == "skipped" && row["config"]["compile"] == true && doc["provenance"]["method"] != "cuda";
            let c = &row["config"];
            let padded_heads = c["attention"] == "flash"
                && c["dtype"] != "float32"
                && c["n_embd"].as_u64().zip(c["n_head"].as_u64()).is_some_and(|(e, h)| h > 0 && (e / h) % 8 != 0);
            let emulated_ckpt_dropout = cudalike
                && row["status"] == "error"
                && c["activation_checkpointing"] == true
                && (c["dropout"].as_f64().is_some_and(|p| p > 0.0) || padded_heads)
                && row["error"].as_str().is_some_and(|e| e.starts_with("CheckpointError"));
            assert!(
                cpu_compile || emulated_ckpt_dropout,
                "{file} {}: status {} ({}): only compile rows on the CPU may go unmeasured",
                row["id"],
                row["status"],
                row["error"]
            );
        }
        let rows = if cudalike { &emulated } else { &rows };
        for row in ok {
            let id = row["id"].as_str().unwrap_or("?");
            for (window, key) in ALLOCATED_KEYS {
                let compared = rows.iter().filter(|c| c.file == file && c.id == id && c.window == window).count();
                let expected = usize::from(row.get(key).is_some());
                assert_eq!(compared, expected, "{file} {id} {window}: {compared} comparisons for {expected} measurement");
            }
            // The reserve, nvidia-smi and the later reserve too, on a GPU (the CPU trace has
            // no allocator to reserve).
            let on_gpu = doc["provenance"]["method"] == "cuda";
            let has = |key: &str| on_gpu && row.get(key).is_some();
            for (window, measured) in [
                ("reserved", has("max_reserved_bytes_overall") || has("later_points")),
                ("nvidia_smi", has("nvidia_smi_after_train_mib")),
                ("later_reserved", has("later_points")),
            ] {
                let compared = rows.iter().filter(|c| c.file == file && c.id == id && c.window == window).count();
                assert_eq!(
                    compared,
                    usize::from(measured),
                    "{file} {id} {window}: {compared} comparisons for {} measurement",
                    usize::from(measured)
                );
            }
        }
    }
    assert!(cuda_files >= 3, "only {cuda_files} CUDA data files");
    let unlabelled = rows.iter().filter(|c| !c.labelled() && c.window == "train").count();
    assert!(unlabelled >= 40, "only {unlabelled} unlabelled training-step comparisons");
}

/// The CPU trace counts tensors without an allocator or kernel workspaces, so the model has no
/// excuse there: every unlabelled row (hand-picked and random) is predicted to the byte in every
/// window. A difference of any size is a rule the model has wrong. Four such rules were found this
/// way: the tied weight's gradient waiting in the engine's buffer (12% in one random config),
/// a checkpointed block's bias gradients summed after its recomputed inputs are dropped (512 B
/// to 4 KiB), and manual attention's head views folding without copies at batch 1 (768 KiB) and
/// with one head (11 KiB).
#[test]
fn unlabelled_cpu_trace_rows_are_exact_to_the_byte() {
    let rows = comparisons();
    let cpu: Vec<_> = rows.iter().filter(|c| c.file.starts_with("cpu-fake") && !c.labelled()).collect();
    assert!(cpu.len() >= 1800, "only {} unlabelled CPU-trace comparisons", cpu.len());
    let off: Vec<String> = cpu
        .iter()
        .filter(|c| c.measured != c.predicted)
        .map(|c| format!("{} {} {}: measured {}, predicted {}", c.file, c.id, c.window, c.measured, c.predicted))
        .collect();
    assert!(off.is_empty(), "{}", off.join("\n"));
}

/// core's CUDA rules (autocast's casts, CUDA's fp32 softmax and dropout masks, flash attention's
/// outputs) against the harness's emulation of CUDA's dispatch on the CPU trace, both
/// predictions: the hand-picked configs and 150 drawn at random in bf16 and fp16 (some with
/// dropout). The random draw found a defect this way, since confirmed by an H100 row: in
/// `estimate_loss` the model freed att @ v's autocast cast and v's copy before the bmm's output
/// existed (up to 3.7% low). Measured agreement: the median exact, every window within 0.36%.
#[test]
fn cuda_rules_agree_with_the_harness_emulation_of_cuda() {
    let rows = cudalike_comparisons();
    assert!(rows.len() >= 700, "only {} comparisons with the emulation", rows.len());
    let off: Vec<String> = rows
        .iter()
        .filter(|c| c.rel_error().abs() > 0.005)
        .map(|c| {
            format!("{} {} {}: emulated {}, predicted {} ({:+.3}%)", c.file, c.id, c.window, c.measured, c.predicted, c.rel_error() * 100.0)
        })
        .collect();
    assert!(off.is_empty(), "{}", off.join("\n"));
    let errs: Vec<f64> = rows.iter().map(|c| c.rel_error().abs()).collect();
    assert_eq!(median(errs), 0.0, "the median comparison is no longer exact");
}

/// The reserve and nvidia-smi figures decide the fit verdict. They are reported in the README:
/// for the hand-picked rows medians under 1% and a worst of 14.7% and 12.5%, held under 20% and
/// 15%; for the 1,273 random rows measured on the H200 (1,080 configs, 193 of them again with
/// flash first) medians of 0.000% and 0.58%, 95% of rows within 3.7% and 2.2%, and a worst of
/// 26.3% and 17.7%, held at 1%, 5% and 30%. In both, a few rows are far off where the real
/// allocator reuses segments differently. (Before every micro-step and eval batch was simulated
/// to the allocator's repeat, the random rows' 95th percentile was 5.6% and their worst 29.3%.)
#[test]
fn reserved_and_nvidia_smi_stay_where_the_readme_puts_them() {
    let rows = comparisons();
    let random = |c: &&reference_data::Comparison| c.file.starts_with("cuda-") && c.file.contains("-random");
    for (window, hand_max, random_max) in [("reserved", 0.20, 0.30), ("nvidia_smi", 0.15, 0.30)] {
        let of_window: Vec<_> = rows.iter().filter(|c| c.window == window && !c.labelled()).collect();
        let (drawn, picked): (Vec<_>, Vec<_>) = of_window.into_iter().partition(random);
        for (what, group, max_allowed) in [("hand-picked", picked, hand_max), ("random", drawn, random_max)] {
            let mut errs: Vec<f64> = group.iter().map(|c| c.rel_error().abs()).collect();
            assert!(errs.len() >= 40, "only {} {what} {window} comparisons", errs.len());
            errs.sort_by(f64::total_cmp);
            let worst = errs[errs.len() - 1];
            let p95 = errs[errs.len() * 95 / 100];
            let med = median(errs);
            assert!(med <= 0.01, "{what} {window}: median |error| {:.3}% > 1%", med * 100.0);
            assert!(p95 <= 0.05, "{what} {window}: 95th percentile |error| {:.2}% > 5%", p95 * 100.0);
            assert!(worst <= max_allowed, "{what} {window}: worst |error| {:.1}% > {:.0}%", worst * 100.0, max_allowed * 100.0);
        }
    }
}

/// torch.compile is a coarse model (so it is labelled and shown as an estimate), first fitted to
/// the three H100 compile rows; it must keep matching them as the README says: within 2.1% of
/// every window's allocated peak and 5.1% of the reserve and nvidia-smi (held at 2.5% and 5.5%).
#[test]
fn compile_model_stays_close_to_its_three_rows() {
    let rows = comparisons();
    let compiled: Vec<_> = rows.iter().filter(|c| c.file == "cuda-h100-compile.json").collect();
    for (window, allowed) in
        [("train", 0.025), ("eval", 0.025), ("first_iter", 0.025), ("eval_at_start", 0.025), ("reserved", 0.055), ("nvidia_smi", 0.055)]
    {
        let of_window: Vec<_> = compiled.iter().filter(|c| c.window == window).collect();
        assert_eq!(of_window.len(), 3, "{window}: compile rows");
        for c in of_window {
            assert!(c.rel_error().abs() <= allowed, "{} {window}: {:+.2}% (allowed {:.1}%)", c.id, c.rel_error() * 100.0, allowed * 100.0);
        }
    }
}

/// The compile model against the 96 compiled configs drawn at random and measured on an H200
/// (README: Accuracy). Seeds 43 and 44 showed what the model now holds (the casts autocast
/// saves, an unaligned vocabulary's padded copy, fp32's own bytes per element); seed 45's 32
/// were measured before that refit and compared after it, seed 46's 24 after the model was
/// final. The training step: never more than 4% low (the worst is -3.6%), its over-estimates
/// within 30% (+25.6% and +13.5%: vocabularies inductor did not pad; +16.3%: a one-layer float32
/// model with manual attention), its median within 2% and 85% of rows within 5% (87.5%). The
/// eval: median within 0.5%, 85% within 5% (88.5%); the rest are under-estimates the README lists.
#[test]
fn compile_model_holds_on_every_randomly_drawn_compiled_config() {
    let rows = comparisons();
    let compiled: Vec<_> = rows.iter().filter(|c| c.file.starts_with("cuda-h200-compiled-seed")).collect();
    let of = |window: &str| -> Vec<f64> { compiled.iter().filter(|c| c.window == window).map(|c| c.rel_error()).collect() };
    let train = of("train");
    assert!(train.len() >= 96, "{} compiled training steps", train.len());
    for c in compiled.iter().filter(|c| c.window == "train") {
        let e = c.rel_error();
        assert!((-0.04..=0.30).contains(&e), "{} {}: {:+.2}%", c.file, c.id, e * 100.0);
    }
    let abs = |xs: Vec<f64>| xs.into_iter().map(f64::abs).collect::<Vec<f64>>();
    let within_5 = |xs: &[f64]| xs.iter().filter(|e| **e <= 0.05).count();
    let train = abs(train);
    assert!(within_5(&train) * 100 >= train.len() * 85, "{} of {} training steps within 5%", within_5(&train), train.len());
    assert!(median(train) <= 0.02);
    let eval = abs(of("eval"));
    assert!(within_5(&eval) * 100 >= eval.len() * 85, "{} of {} evals within 5%", within_5(&eval), eval.len());
    assert!(median(eval) <= 0.005);
}

/// The target is for the training step and the eval; the other two allocated windows
/// decide a verdict just as well (the GPT-2 batch-64 report runs out in the eval before the
/// first step), so they are held too, at their own limits just above the README's worst
/// figures (first iteration 1.65%; eval before the first step 2.40%, an over-prediction, in a
/// bf16 config with manual attention): every row within 2% and 2.5%, each median within 0.5%.
#[test]
fn first_iteration_and_first_eval_stay_where_the_readme_puts_them() {
    let rows = comparisons();
    let mut failures = Vec::new();
    for (window, max_allowed) in [("first_iter", 0.02), ("eval_at_start", 0.025)] {
        let of_window: Vec<_> = rows.iter().filter(|c| c.window == window && !c.labelled()).collect();
        let gpu = of_window.iter().filter(|c| c.file.starts_with("cuda")).count();
        assert!(gpu >= 100, "only {gpu} {window} comparisons with a GPU measurement");
        let med = median(of_window.iter().map(|c| c.rel_error().abs()).collect());
        if med > 0.005 {
            failures.push(format!("{window}: median |error| {:.3}% > 0.5%", med * 100.0));
        }
        for c in of_window.iter().filter(|c| c.rel_error().abs() > max_allowed) {
            failures.push(format!("{} {} {window}: {:+.2}% (allowed {:.1}%)", c.file, c.id, 100.0 * c.rel_error(), max_allowed * 100.0));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Rows run past iteration 2 (`cuda-h200-later.json`): the reserve the run reaches by
/// iteration 50 against the one `simulate_exact_and_later` says it reaches. The README reports
/// a median of 0.000% and a worst of 17.7% (one config whose real allocator reuses segments
/// differently, as in the reserve's worst rows); held at a median of 1% and a worst of 20%.
#[test]
fn the_later_reserve_stays_where_the_readme_puts_it() {
    let rows = comparisons();
    let errs: Vec<f64> = rows.iter().filter(|c| c.window == "later_reserved" && !c.labelled()).map(|c| c.rel_error().abs()).collect();
    assert!(errs.len() >= 16, "only {} later_reserved comparisons", errs.len());
    let worst = errs.iter().cloned().fold(0.0, f64::max);
    let med = median(errs);
    assert!(med <= 0.01, "later_reserved: median |error| {:.3}% > 1%", med * 100.0);
    assert!(worst <= 0.20, "later_reserved: worst |error| {:.1}% > 20%", worst * 100.0);
}

#[test]
fn every_unlabelled_row_within_two_percent_median_half_percent() {
    let rows = comparisons();
    let mut failures = Vec::new();
    for window in ["train", "eval"] {
        let errs: Vec<f64> = rows.iter().filter(|c| c.window == window && !c.labelled()).map(|c| c.rel_error().abs()).collect();
        assert!(!errs.is_empty());
        let med = median(errs);
        if med > 0.005 {
            failures.push(format!("{window}: median |error| {:.3}% > 0.5%", med * 100.0));
        }
    }
    for c in rows.iter().filter(|c| !c.labelled() && (c.window == "train" || c.window == "eval")) {
        if c.rel_error().abs() > 0.02 {
            failures.push(format!(
                "{} {} {}: measured {} predicted {} ({:+.2}%)",
                c.file,
                c.id,
                c.window,
                c.measured,
                c.predicted,
                100.0 * c.rel_error()
            ));
        }
    }
    assert!(failures.is_empty(), "{} rows off target:\n{}", failures.len(), failures.join("\n"));
}

/// A row run on past iteration 2 (measure.py --later-cycles; cuda-h200-later.json): its reserve
/// after iteration 2 is compared with the windows' reserve, and its last with the reserve
/// `simulate_exact_and_later` says the run reaches (window `later_reserved`). The row here is
/// a measured H100 row given made-up later points, to check where each point goes.
#[test]
fn later_points_are_compared_with_the_continued_simulation() {
    let h100 = data_dir().join("cuda-h100.json");
    let mut doc = read_doc(&h100);
    let rows = doc["rows"].as_array_mut().unwrap();
    let row = rows.iter().find(|r| r["status"] == "ok" && r["config"]["compile"] == false).unwrap().clone();
    let (after_two, last) = (1_000_000_007u64, 2_000_000_011u64);
    let mut later = row.clone();
    later["later_points"] = serde_json::json!([[2, false, after_two], [3, false, after_two], [18, true, last]]);
    *rows = vec![later];
    let dir = std::env::temp_dir().join(format!("vramfit-later-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cuda-h100-later.json");
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
    let got = reference_data::comparisons_in(&[path]);
    std::fs::remove_dir_all(&dir).unwrap();
    let window = |w: &str| got.iter().find(|c| c.window == w).unwrap_or_else(|| panic!("no {w} comparison"));
    assert_eq!(window("reserved").measured, after_two);
    assert_eq!(window("later_reserved").measured, last);
    let cfg: vramfit_core::Config = serde_json::from_value(row["config"].clone()).unwrap_or_else(|_| panic!("{}", row["config"]));
    let target = vramfit_core::Gpu::find("h100-80gb").unwrap().target();
    let (sim, continued) = vramfit_core::sim::simulate_exact_and_later(&cfg, &target, None);
    let windows = reference_data::windows_reserved(&sim);
    assert_eq!(window("reserved").predicted, windows);
    assert_eq!(window("later_reserved").predicted, continued.map_or(windows, |l| l.reserved_bytes));
}

/// Runs with PyTorch's reserve capped (`tests/reference/probes/capped.sh` on an H200: the cap
/// between the model's reserve through the measured windows and after its later growth, or
/// just above one that does not grow; and, where the model says a run runs out, the batch below
/// it that the model says keeps fitting) end where the model says in 8 of 10, as the README
/// reports: out of memory at the same iteration where the real reserve grows as the model's
/// does, going on where neither grows and at each lasting batch. Every capped row is compared.
#[test]
fn capped_runs_end_where_the_model_says() {
    let runs = reference_data::capped_runs();
    let rows: usize =
        data_files().iter().map(|p| read_doc(p)).filter(reference_data::is_capped).map(|d| d["rows"].as_array().map_or(0, Vec::len)).sum();
    assert_eq!(runs.len(), rows, "every capped row is compared");
    assert!(runs.len() >= 10, "only {} capped runs", runs.len());
    for r in &runs {
        println!("{} {} cap {} MiB: measured {}, model {}", r.file, r.id, r.cap_bytes >> 20, r.measured.describe(), r.predicted.describe());
        // A run-out the model puts past the measured loop could not be seen: more cycles needed.
        if let reference_data::CappedOutcome::OutOfMemory { iteration, .. } = r.predicted {
            assert!(
                iteration <= r.measured_through,
                "{} {}: the model's run-out at {iteration} is past the measured {}",
                r.file,
                r.id,
                r.measured_through
            );
        }
    }
    let agree = runs.iter().filter(|r| r.agrees()).count();
    assert!(agree >= 8, "{agree} of {} capped runs end where the model says (README: 8 of 10)", runs.len());
    // The out-of-memory claims the model makes a few steps in are the product's warning.
    let later_oom =
        |o: reference_data::CappedOutcome| matches!(o, reference_data::CappedOutcome::OutOfMemory { iteration, .. } if iteration > 2);
    let confirmed = runs.iter().filter(|r| later_oom(r.predicted) && r.measured == r.predicted).count();
    assert!(confirmed >= 3, "{confirmed} of the model's later out-of-memory predictions measured (README: 3 of 4)");
}

/// measure.py's phase names read as the point a run stopped.
#[test]
fn capped_phases_read_as_iterations() {
    use reference_data::CappedOutcome::{self, OutOfMemory};
    assert_eq!(CappedOutcome::from_phase("it3.bwd0"), Some(OutOfMemory { iteration: 3, in_eval: false }));
    assert_eq!(CappedOutcome::from_phase("eval.after18"), Some(OutOfMemory { iteration: 18, in_eval: true }));
    assert_eq!(CappedOutcome::from_phase("eval"), Some(OutOfMemory { iteration: 1, in_eval: true }));
    assert_eq!(CappedOutcome::from_phase("eval0"), Some(OutOfMemory { iteration: 0, in_eval: false }));
    assert_eq!(CappedOutcome::from_phase("zero_grad"), None);
}

/// Each GPU file is compared with the attention path its rows ran: where a bf16/fp16 flash
/// config with heads a multiple of 8 (the heads cuDNN takes) ran FlashAttention-2, as with
/// `probes/gpu_flash_first.sh` or the H100's flash-only rows, the file's target must not prefer
/// cuDNN; where such a row ran cuDNN's attention (sm_90's default), it must. The evidence is
/// the ops each row recorded (`attention_ops`), not the provenance the loader reads.
#[test]
fn every_gpu_file_is_compared_with_the_attention_its_rows_ran() {
    let (mut flash_rows, mut cudnn_rows) = (0, 0);
    for path in data_files() {
        let file = file_name(&path);
        if !file.starts_with("cuda-") || NOT_PYTORCH_MEASUREMENTS.contains(&file.as_str()) {
            continue;
        }
        let doc = read_doc(&path);
        let Some(target) = target_for(&doc["provenance"]) else { continue };
        for row in doc["rows"].as_array().unwrap().iter().filter(|r| r["status"] == "ok") {
            let c = &row["config"];
            let half = c["dtype"] == "bfloat16" || c["dtype"] == "float16";
            let heads_cudnn_takes = c["n_embd"].as_u64().unwrap_or(0) / c["n_head"].as_u64().unwrap_or(1) % 8 == 0;
            if !(half && heads_cudnn_takes && c["attention"] == "flash" && c["compile"] != true) {
                continue;
            }
            let Some(ops) = row["attention_ops"].as_array() else { continue };
            let ran = |op: &str| ops.iter().any(|o| o.as_str() == Some(op));
            if ran("aten._scaled_dot_product_flash_attention.default") {
                assert!(!target.sdpa_prefers_cudnn, "{file} {}: ran flash, compared as cuDNN", row["id"]);
                flash_rows += 1;
            } else if ran("aten._scaled_dot_product_cudnn_attention.default") {
                assert!(target.sdpa_prefers_cudnn, "{file} {}: ran cuDNN, compared as flash", row["id"]);
                cudnn_rows += 1;
            }
        }
    }
    assert!(flash_rows >= 240, "only {flash_rows} rows that ran flash on heads cuDNN takes");
    assert!(cudnn_rows >= 100, "only {cudnn_rows} rows that ran cuDNN's attention");
}

/// `plan`'s measured shapes (`MEASURED_MAX_*`, past which its reserve is marked an estimate)
/// are the largest of the committed GPU rows, eager ones: a constant above them would claim
/// shapes no row measured, one below them would mark measured shapes as estimates.
#[test]
fn the_measured_shapes_are_the_largest_measured_on_a_gpu() {
    use vramfit_core::plan::{
        MEASURED_MAX_ACTIVATIONS, MEASURED_MAX_ATTENTION, MEASURED_MAX_BLOCK, MEASURED_MAX_EMBD, MEASURED_MAX_LAYERS, MEASURED_MAX_LOGITS,
        MEASURED_MAX_VOCAB,
    };
    let mut max = [0u64; 7];
    for path in data_files() {
        let file = file_name(&path);
        if NOT_PYTORCH_MEASUREMENTS.contains(&file.as_str()) {
            continue;
        }
        let doc = read_doc(&path);
        if reference_data::is_cudalike(&doc) || !target_for(&doc["provenance"]).is_some_and(|t| t.cuda_kernels) {
            continue;
        }
        for row in doc["rows"].as_array().into_iter().flatten() {
            if row.get("status").and_then(Value::as_str) != Some("ok") {
                continue;
            }
            let cfg = reference_data::config_from_row(&row["config"]).expect("a readable config");
            if cfg.compile {
                continue;
            }
            let (l, c, v, h) = (cfg.n_layer as u64, cfg.n_embd as u64, cfg.vocab_size as u64, cfg.n_head as u64);
            for (b, t) in [(cfg.batch_size as u64, cfg.block_size as u64), (cfg.eval_batch() as u64, cfg.eval_block() as u64)] {
                let manual = cfg.attention == vramfit_core::Attention::Manual;
                let shape = [l, c, cfg.block_size as u64, v, b * t * v, b * t * c * l, if manual { b * t * t * h * l } else { 0 }];
                for (m, s) in max.iter_mut().zip(shape) {
                    *m = (*m).max(s);
                }
            }
        }
    }
    let constants = [
        MEASURED_MAX_LAYERS as u64,
        MEASURED_MAX_EMBD as u64,
        MEASURED_MAX_BLOCK as u64,
        MEASURED_MAX_VOCAB as u64,
        MEASURED_MAX_LOGITS,
        MEASURED_MAX_ACTIVATIONS,
        MEASURED_MAX_ATTENTION,
    ];
    assert_eq!(constants, max, "layers, n_embd, block, vocab, logits, activations, manual attention");
}
