//! Loading the reference measurements (tests/reference/data/*.json) and comparing `core`'s
//! predictions with them. Shared by the reference test and the accuracy benchmark.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use vramfit_core::sim::{simulate, simulate_exact, Target};
use vramfit_core::{Attention, Config, Dtype, Gpu, Optimizer};

/// One measured row and what core predicts for it.
#[derive(Debug, Clone)]
pub struct Comparison {
    pub file: String,
    pub id: String,
    pub labels: Vec<String>,
    pub window: &'static str,
    pub measured: u64,
    pub predicted: u64,
}

impl Comparison {
    pub fn rel_error(&self) -> f64 {
        (self.predicted as f64 - self.measured as f64) / self.measured as f64
    }
    /// Rows whose trace is known to differ from CUDA are reported, not held to the target.
    pub fn labelled(&self) -> bool {
        !self.labels.is_empty()
    }
}

pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/reference/data")
}

/// Every `*.json` data file, sorted by name.
pub fn data_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(data_dir())
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "json")).collect())
        .unwrap_or_default();
    files.sort();
    files
}

/// Data files that are not PyTorch measurements core's PyTorch model is held to: the harness's
/// own prediction of CUDA behaviour, `vramfit train`'s measured peaks (compared with
/// `trainer_model` in trainer's tests), and PyTorch's losses and parameters after a few steps
/// (no memory: `trainer/tests/torch_equivalence.rs` holds the trainer's arithmetic to them).
/// Any other file must yield comparisons.
pub const NOT_PYTORCH_MEASUREMENTS: &[&str] = &[
    "trainer-cpu.json",
    "trainer-cpu-f16.json",
    "trainer-cpu-random.json",
    "trainer-cpu-random-pool.json",
    "trainer-cpu-unfused-avx2.json",
    "trainer-cuda-h100-f32.json",
    "trainer-cuda-h100-bf16.json",
    "trainer-cuda-h100-f16.json",
    "torch-training-steps.json",
];

/// The measured allocated-peak keys of a row, by the window they measure.
pub const ALLOCATED_KEYS: [(&str, &str); 4] = [
    ("train", "train_peak_allocated_bytes"),
    ("eval", "eval_peak_allocated_bytes"),
    ("first_iter", "first_iter_peak_allocated_bytes"),
    ("eval_at_start", "eval0_peak_allocated_bytes"),
];

/// A data file's JSON.
pub fn read_doc(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("readable data file");
    serde_json::from_str(&text).expect("data file is JSON")
}

pub fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().to_string()
}

pub fn config_from_row(c: &Value) -> Option<Config> {
    let u = |k: &str| c.get(k).and_then(Value::as_u64).map(|x| x as u32);
    let b = |k: &str| c.get(k).and_then(Value::as_bool);
    let s = |k: &str| c.get(k).and_then(Value::as_str);
    let cfg = Config {
        n_layer: u("n_layer")?,
        n_head: u("n_head")?,
        n_embd: u("n_embd")?,
        block_size: u("block_size")?,
        vocab_size: u("vocab_size")?,
        bias: b("bias")?,
        dropout: c.get("dropout").and_then(Value::as_f64)?,
        batch_size: u("batch_size")?,
        gradient_accumulation_steps: u("gradient_accumulation_steps")?,
        eval_iters: u("eval_iters").unwrap_or(2),
        eval_batch_size: u("eval_batch_size"),
        eval_block_size: u("eval_block_size"),
        dtype: Dtype::parse(s("dtype")?)?,
        attention: Attention::parse(s("attention")?)?,
        compile: b("compile").unwrap_or(false),
        activation_checkpointing: b("activation_checkpointing").unwrap_or(false),
        optimizer: Optimizer::parse(s("optimizer").unwrap_or("adamw"))?,
        expandable_segments: b("expandable_segments").unwrap_or(false),
        eval_only: false,
    };
    cfg.validate().ok()?;
    Some(cfg)
}

/// The GPU preset a data file was measured on.
fn gpu_for(provenance: &Value) -> Option<Gpu> {
    let device = provenance.get("device_name").and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
    if device.contains("h100") {
        return Gpu::find("h100-80gb");
    }
    if device.contains("h200") {
        return Gpu::find("h200-141gb");
    }
    None
}

/// The simulation target a data file was measured on.
pub fn target_for(provenance: &Value) -> Option<Target> {
    let method = provenance.get("method").and_then(Value::as_str).unwrap_or("");
    if method.starts_with("cpu") {
        return Some(Target::cpu_trace());
    }
    gpu_for(provenance).map(|g| {
        let target = g.target();
        Target { sdpa_prefers_cudnn: target.sdpa_prefers_cudnn && !flash_first(provenance), ..target }
    })
}

/// Whether SDPA tried flash before cuDNN in a GPU run, as it does off sm_90 and sm_100:
/// `probes/gpu_flash_first.sh` (TORCH_CUDNN_SDPA_DEPRIORITIZED=1), or cuDNN's attention
/// switched off (`probes/python-flash-only`).
fn flash_first(provenance: &Value) -> bool {
    provenance.get("TORCH_CUDNN_SDPA_DEPRIORITIZED").and_then(Value::as_str) == Some("1") || provenance["sdpa_defaults"]["cudnn"] == false
}

/// All comparisons in all data files (rows that failed to measure are skipped). A file core
/// cannot place on a target, or a measured row whose config it cannot read, is an error: a
/// silently dropped file or row would leave the accuracy test checking less than it says.
pub fn comparisons() -> Vec<Comparison> {
    comparisons_in(&data_files())
}

/// [`comparisons`] for the given data files.
pub fn comparisons_in(files: &[PathBuf]) -> Vec<Comparison> {
    let mut out = Vec::new();
    for path in files {
        let file = file_name(path);
        if NOT_PYTORCH_MEASUREMENTS.contains(&file.as_str()) {
            continue;
        }
        let doc = read_doc(path);
        if is_capped(&doc) {
            continue; // compared by `capped_runs`
        }
        if is_cudalike(&doc) {
            continue; // a prediction, compared by `cudalike_comparisons`
        }
        let Some(target) = target_for(&doc["provenance"]) else {
            panic!("{file}: no simulation target for its provenance {}", doc["provenance"]);
        };
        let rows = doc["rows"].as_array().cloned().unwrap_or_default();
        for row in rows {
            if row.get("status").and_then(Value::as_str) != Some("ok") {
                continue;
            }
            let Some(cfg) = config_from_row(&row["config"]) else {
                panic!("{file} {}: a measured row whose config core cannot read or rejects: {}", row["id"], row["config"]);
            };
            let mut labels: Vec<String> = row
                .get("labels")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
                .unwrap_or_default();
            if cfg.compile {
                labels.push("compile (coarse model fitted to these rows: in-sample, an estimate)".into());
            }
            let sim = if target.cuda_kernels { simulate_exact(&cfg, &target) } else { simulate(&cfg, &target) };
            let id = row["id"].as_str().unwrap_or("?").to_string();
            let mut push = |window: &'static str, measured: u64, predicted: u64| {
                out.push(Comparison { file: file.clone(), id: id.clone(), labels: labels.clone(), window, measured, predicted });
            };
            let predicted_by_window = [sim.train.bytes, sim.eval.bytes, sim.first_iter.bytes, sim.eval_at_start.bytes];
            for ((window, key), predicted) in ALLOCATED_KEYS.into_iter().zip(predicted_by_window) {
                if let Some(measured) = row.get(key).and_then(Value::as_u64) {
                    push(window, measured, predicted);
                }
            }
            // The caching allocator's reserve (never released during the loop) and the
            // process's line in nvidia-smi after the steady iteration, where measured.
            let reserved = windows_reserved(&sim);
            // A row run on past iteration 2 (measure.py --later-cycles) has the reserve after each
            // later iteration and eval: the first point, after iteration 2, is what the windows
            // model (the reserve never shrinks), the last what `simulate_exact_and_later` says
            // the run reaches (`later_reserved`).
            let later_points: Vec<u64> = row
                .get("later_points")
                .and_then(Value::as_array)
                .map(|ps| ps.iter().filter_map(|p| p[2].as_u64()).collect())
                .unwrap_or_default();
            let measured_reserved = match later_points.first() {
                Some(&after_two) => Some(after_two),
                None => row.get("max_reserved_bytes_overall").and_then(Value::as_u64),
            };
            if let (Some(&measured_final), true) = (later_points.last(), target.cuda_kernels) {
                let (_, later) = vramfit_core::sim::simulate_exact_and_later(&cfg, &target, None);
                push("later_reserved", measured_final, later.map_or(reserved, |l| l.reserved_bytes));
            }
            // Keyed on the target, not on the prediction: a CUDA prediction that lost its
            // reserve must fail its comparison, not drop it.
            if let (Some(measured), true) = (measured_reserved, target.cuda_kernels) {
                push("reserved", measured, reserved);
                if let (Some(smi_mib), Some(gpu)) =
                    (row.get("nvidia_smi_after_train_mib").and_then(Value::as_u64), gpu_for(&doc["provenance"]))
                {
                    push("nvidia_smi", smi_mib << 20, reserved + gpu.context_bytes);
                }
            }
        }
    }
    out
}

/// Whether a data file is the harness's emulation of CUDA's dispatch on the CPU trace
/// (`run_all.py --method cpu-fake-cudalike`): a prediction of CUDA, not a measurement.
pub fn is_cudalike(doc: &Value) -> bool {
    doc["provenance"]["method"] == "cpu-fake-cudalike"
}

/// core's CUDA rules on the harness's tensor counter (`Target::cudalike_trace`) against every
/// row of the emulation's data files, window by window: two predictions of CUDA, each built
/// from PyTorch's sources, checked against each other.
pub fn cudalike_comparisons() -> Vec<Comparison> {
    let mut out = Vec::new();
    for path in data_files() {
        let doc = read_doc(&path);
        if !is_cudalike(&doc) {
            continue;
        }
        let file = file_name(&path);
        for row in doc["rows"].as_array().cloned().unwrap_or_default() {
            if row.get("status").and_then(Value::as_str) != Some("ok") {
                continue;
            }
            let Some(cfg) = config_from_row(&row["config"]) else {
                panic!("{file} {}: a row whose config core cannot read or rejects: {}", row["id"], row["config"]);
            };
            let sim = simulate(&cfg, &Target::cudalike_trace());
            let id = row["id"].as_str().unwrap_or("?").to_string();
            let predicted_by_window = [sim.train.bytes, sim.eval.bytes, sim.first_iter.bytes, sim.eval_at_start.bytes];
            for ((window, key), predicted) in ALLOCATED_KEYS.into_iter().zip(predicted_by_window) {
                if let Some(measured) = row.get(key).and_then(Value::as_u64) {
                    out.push(Comparison { file: file.clone(), id: id.clone(), labels: Vec::new(), window, measured, predicted });
                }
            }
        }
    }
    out
}

/// The reserve through the simulated windows (it never shrinks: the largest is the last).
pub fn windows_reserved(sim: &vramfit_core::sim::Simulation) -> u64 {
    [&sim.train, &sim.eval, &sim.first_iter, &sim.eval_at_start].iter().map(|p| p.reserved_bytes).max().unwrap_or(0)
}

/// Whether a data file holds runs with PyTorch's reserve capped (`probes/capped.sh`): no peaks
/// to compare, an outcome each (see [`capped_runs`]).
pub fn is_capped(doc: &Value) -> bool {
    doc["provenance"]["method"] == "cuda-capped"
}

/// How a run with the reserve capped ended, measured or by the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CappedOutcome {
    /// Went on to the end of the measured loop (or, in the model, kept fitting: its reserve
    /// stayed under the cap, or releasing cached segments made room).
    Ran,
    /// Out of memory in `iteration` (1-based; 0 before the first), or in the estimate_loss
    /// after it when `in_eval`.
    OutOfMemory { iteration: u32, in_eval: bool },
}

impl CappedOutcome {
    /// The measured phase an out-of-memory error left (measure.py's names: `eval0`, `it3.bwd0`,
    /// `eval`, `eval.after18`).
    pub fn from_phase(phase: &str) -> Option<CappedOutcome> {
        let oom = |iteration, in_eval| Some(CappedOutcome::OutOfMemory { iteration, in_eval });
        match phase {
            "init" | "eval0" => oom(0, false),
            "eval" => oom(1, true),
            _ => match phase.strip_prefix("eval.after") {
                Some(k) => oom(k.parse().ok()?, true),
                None => oom(phase.strip_prefix("it")?.split('.').next()?.parse().ok()?, false),
            },
        }
    }

    pub fn describe(&self) -> String {
        match self {
            CappedOutcome::Ran => "ran".into(),
            CappedOutcome::OutOfMemory { iteration, in_eval: false } => format!("out of memory in iteration {iteration}"),
            CappedOutcome::OutOfMemory { iteration, in_eval: true } => format!("out of memory in the eval after iteration {iteration}"),
        }
    }
}

/// One capped run and what the model says of the same config and cap.
#[derive(Debug, Clone)]
pub struct CappedRun {
    pub file: String,
    pub id: String,
    pub cap_bytes: u64,
    /// The last iteration the measured loop runs to (iteration 2, then 16 per later cycle).
    pub measured_through: u32,
    pub measured: CappedOutcome,
    pub predicted: CappedOutcome,
}

impl CappedRun {
    /// The same outcome, out of memory at the same point; within the two iterations the
    /// windows simulate (which the model does not place finer than "within them"), any point.
    pub fn agrees(&self) -> bool {
        match (self.measured, self.predicted) {
            (CappedOutcome::OutOfMemory { iteration: a, .. }, CappedOutcome::OutOfMemory { iteration: b, .. }) if a <= 2 && b <= 2 => true,
            (m, p) => m == p,
        }
    }
}

/// Every row of every capped data file, with the model's outcome: its windows' reserve past the
/// cap is out of memory within them; else `simulate_exact_and_later` with the cap as limit,
/// out of memory where the reserve passes it and releasing cached segments leaves too little
/// (a pass it recovers from counts as running on: the model stops there, as `plan` does).
/// A row that did not run, or whose config core cannot read, is an error (a dropped row would
/// shrink the check).
pub fn capped_runs() -> Vec<CappedRun> {
    let mut out = Vec::new();
    for path in data_files() {
        let doc = read_doc(&path);
        if !is_capped(&doc) {
            continue;
        }
        let file = file_name(&path);
        let target = target_for(&doc["provenance"]).unwrap_or_else(|| panic!("{file}: no simulation target"));
        for row in doc["rows"].as_array().cloned().unwrap_or_default() {
            let id = row["id"].as_str().unwrap_or("?").to_string();
            let cfg = config_from_row(&row["config"]).unwrap_or_else(|| panic!("{file} {id}: config core cannot read"));
            let cap_bytes = row["reserve_cap_bytes"].as_u64().unwrap_or_else(|| panic!("{file} {id}: no reserve_cap_bytes"));
            let cycles = row["later_cycles"].as_u64().unwrap_or_else(|| panic!("{file} {id}: no later_cycles")) as u32;
            let measured_through = 2 + 16 * cycles;
            let measured = match row["outcome"].as_str() {
                Some("ran") => CappedOutcome::Ran,
                Some("out_of_memory") => row["oom_phase"]
                    .as_str()
                    .and_then(CappedOutcome::from_phase)
                    .unwrap_or_else(|| panic!("{file} {id}: unreadable oom_phase {}", row["oom_phase"])),
                other => panic!("{file} {id}: outcome {other:?} ({})", row["error"]),
            };
            let sim = simulate_exact(&cfg, &target);
            let predicted = if windows_reserved(&sim) > cap_bytes {
                CappedOutcome::OutOfMemory { iteration: 2, in_eval: false }
            } else {
                match vramfit_core::sim::simulate_exact_and_later(&cfg, &target, Some(cap_bytes)).1 {
                    Some(l) if l.past_limit.is_some_and(|p| !p.recovers) => {
                        CappedOutcome::OutOfMemory { iteration: l.iteration, in_eval: l.in_eval }
                    }
                    _ => CappedOutcome::Ran,
                }
            };
            out.push(CappedRun { file: file.clone(), id, cap_bytes, measured_through, measured, predicted });
        }
    }
    out
}

pub fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}
