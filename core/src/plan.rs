//! The answer every face shows: peaks, what they are made of, fit per card, the largest
//! micro-batch that fits, and ranked fixes.
//!
//! `plan` is the one function the page, `vramfit plan` and `vramfit train`'s pre-flight call.

use crate::config::{Config, ConfigError, Dtype};
use crate::device::{Gpu, Source};
use crate::params::{self, ParamCounts};
use crate::sim::{self, Breakdown, Peak, Phase, Simulation};
use serde::{Deserialize, Serialize};

/// Version of the JSON document `vramfit plan --json` prints; bumped on breaking changes.
pub const PLAN_SCHEMA_VERSION: u32 = 1;

/// What the user tells us besides the config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanRequest {
    pub config: Config,
    /// Cards to check; the first is the one fixes and the largest batch are computed for.
    pub gpus: Vec<Gpu>,
    /// Bytes other processes already hold on the card (a desktop takes hundreds of MiB).
    pub other_usage_bytes: u64,
    /// Whether to compute fixes (the slowest part: each fix is a full simulation or a search).
    pub with_fixes: bool,
}

/// One window of the loop, as reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowReport {
    /// Predicted `torch.cuda.max_memory_allocated()` over the window.
    pub peak_allocated_bytes: u64,
    /// Predicted `torch.cuda.max_memory_reserved()`: allocated plus the caching allocator's
    /// rounding and fragmentation.
    pub peak_reserved_bytes: u64,
    /// Predicted process line in nvidia-smi: reserved plus the CUDA context.
    pub nvidia_smi_bytes: u64,
    pub phase: Option<Phase>,
    pub op: String,
    pub micro_step: u32,
    pub breakdown: Breakdown,
}

/// Whether the run fits one card.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CardFit {
    pub gpu: String,
    pub gpu_name: String,
    /// What the process may use: the card's usable total less other programs' share.
    pub available_bytes: u64,
    /// The process's predicted need at its worst window (nvidia-smi bytes).
    pub needed_bytes: u64,
    pub fits: bool,
    /// available - needed (negative: the shortfall).
    pub headroom_bytes: i64,
    /// Which window needs the most: `train`, `eval`, `first_iter` or `eval_at_start`.
    pub worst_window: String,
    /// bf16 requested on a card without bf16 support (pre-Ampere).
    pub bf16_unsupported: bool,
}

/// A change to the config that makes it fit (or fit better), with what it costs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fix {
    pub title: String,
    /// What it costs in speed, quality or behaviour.
    pub cost: String,
    /// The config with the fix applied.
    pub config: Config,
    pub needed_bytes: u64,
    pub fits: bool,
    /// Whether train.py supports it as is (false: needs a code change, e.g. eval_batch_size).
    pub stock_nanogpt: bool,
}

/// Which numbers are estimates rather than validated against measurement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    pub figure: String,
    pub source: Source,
    pub detail: String,
}

/// The whole answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub schema_version: u32,
    pub config: Config,
    pub params: ParamCounts,
    pub tokens_per_iter: u64,
    pub train: WindowReport,
    pub eval: WindowReport,
    pub first_iter: WindowReport,
    pub eval_at_start: WindowReport,
    pub cards: Vec<CardFit>,
    /// Largest micro-batch that fits the first card with everything else unchanged.
    pub largest_micro_batch: Option<u32>,
    pub fixes: Vec<Fix>,
    pub notes: Vec<Note>,
}

const MIB: u64 = 1 << 20;

/// The caching allocator's reserve on top of allocated bytes: large tensors (>= 10 MiB) get
/// their own segments rounded to 2 MiB, smaller ones share 2 MiB / 20 MiB segments, and freed
/// blocks of one size are not always reusable for another. An estimate: 3% plus one 20 MiB
/// segment, or about 2 MiB per segment with `expandable_segments:True`.
pub fn reserved_estimate(allocated: u64, expandable_segments: bool) -> u64 {
    if expandable_segments {
        allocated.div_ceil(2 * MIB) * 2 * MIB + 2 * MIB
    } else {
        (allocated + allocated / 33 + 20 * MIB).div_ceil(2 * MIB) * 2 * MIB
    }
}

fn window(peak: &Peak, cfg: &Config, gpu: &Gpu) -> WindowReport {
    let reserved = reserved_estimate(peak.bytes, cfg.expandable_segments).max(peak.bytes);
    WindowReport {
        peak_allocated_bytes: peak.bytes,
        peak_reserved_bytes: reserved,
        nvidia_smi_bytes: reserved + gpu.context_bytes,
        phase: peak.phase,
        op: peak.op.clone(),
        micro_step: peak.micro_step,
        breakdown: peak.breakdown,
    }
}

/// The simulation for a config on a card (validated).
pub fn simulate_on(cfg: &Config, gpu: &Gpu) -> Simulation {
    sim::simulate(cfg, &gpu.target())
}

/// The worst window's nvidia-smi bytes and its name.
fn needed(sim: &Simulation, cfg: &Config, gpu: &Gpu) -> (u64, &'static str) {
    let windows = [
        ("train", &sim.train),
        ("eval", &sim.eval),
        ("first_iter", &sim.first_iter),
        ("eval_at_start", &sim.eval_at_start),
    ];
    let (name, peak) = windows
        .iter()
        .max_by_key(|(_, p)| p.bytes)
        .expect("four windows");
    (window(peak, cfg, gpu).nvidia_smi_bytes, name)
}

fn card_fit(sim: &Simulation, cfg: &Config, gpu: &Gpu, other_usage: u64) -> CardFit {
    let (need, worst) = needed(sim, cfg, gpu);
    let available = gpu.usable_bytes.saturating_sub(other_usage);
    let bf16_unsupported = cfg.dtype == Dtype::Bfloat16 && !gpu.supports_bf16();
    CardFit {
        gpu: gpu.id.clone(),
        gpu_name: gpu.name.clone(),
        available_bytes: available,
        needed_bytes: need,
        fits: need <= available && !bf16_unsupported,
        headroom_bytes: available as i64 - need as i64,
        worst_window: worst.to_string(),
        bf16_unsupported,
    }
}

/// Whether `cfg` fits `gpu` (all windows), by simulation.
pub fn fits(cfg: &Config, gpu: &Gpu, other_usage: u64) -> bool {
    cfg.validate().is_ok() && card_fit(&simulate_on(cfg, gpu), cfg, gpu, other_usage).fits
}

/// The largest micro-batch (everything else unchanged) whose every window fits, or `None`
/// if even batch 1 does not. Peaks grow with the batch, so a binary search suffices.
pub fn largest_micro_batch(cfg: &Config, gpu: &Gpu, other_usage: u64) -> Option<u32> {
    let with = |b: u32| Config {
        batch_size: b,
        eval_batch_size: cfg.eval_batch_size.map(|e| e.min(b.max(e))),
        ..cfg.clone()
    };
    let ok = |b: u32| {
        let c = with(b);
        c.validate().is_ok() && {
            let s = simulate_on(&c, gpu);
            needed(&s, &c, gpu).0 <= gpu.usable_bytes.saturating_sub(other_usage)
        }
    };
    if !ok(1) {
        return None;
    }
    // Exponential probe, then bisection between the last fit and the first miss.
    let (mut lo, mut hi) = (1u32, 2u32);
    while hi <= crate::config::MAX_BATCH && ok(hi) {
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    let hi_cap = hi.min(crate::config::MAX_BATCH + 1);
    let mut hi = hi_cap;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

/// Computes the whole answer.
pub fn plan(req: &PlanRequest) -> Result<Plan, ConfigError> {
    let cfg = &req.config;
    cfg.validate()?;
    let default_gpu;
    let gpus: &[Gpu] = if req.gpus.is_empty() {
        default_gpu = [crate::device::default_gpu()];
        &default_gpu
    } else {
        &req.gpus
    };
    let primary = &gpus[0];
    let sim = simulate_on(cfg, primary);
    let cards = gpus
        .iter()
        .map(|g| {
            let s = if g.cublas_workspace_bytes() == primary.cublas_workspace_bytes() {
                sim.clone()
            } else {
                simulate_on(cfg, g)
            };
            card_fit(&s, cfg, g, req.other_usage_bytes)
        })
        .collect();
    let fixes = if req.with_fixes {
        crate::plan::fixes(cfg, primary, req.other_usage_bytes)
    } else {
        Vec::new()
    };
    Ok(Plan {
        schema_version: PLAN_SCHEMA_VERSION,
        config: cfg.clone(),
        params: params::count(cfg),
        tokens_per_iter: cfg.tokens_per_iter(),
        train: window(&sim.train, cfg, primary),
        eval: window(&sim.eval, cfg, primary),
        first_iter: window(&sim.first_iter, cfg, primary),
        eval_at_start: window(&sim.eval_at_start, cfg, primary),
        cards,
        largest_micro_batch: largest_micro_batch(cfg, primary, req.other_usage_bytes),
        fixes,
        notes: notes(cfg, primary),
    })
}

/// Ranked fixes for a config on a card. (Filled in by the fix solver.)
pub fn fixes(_cfg: &Config, _gpu: &Gpu, _other_usage: u64) -> Vec<Fix> {
    Vec::new()
}

fn notes(cfg: &Config, gpu: &Gpu) -> Vec<Note> {
    let mut out = vec![
        Note {
            figure: "peak_reserved_bytes".into(),
            source: Source::Estimate,
            detail: "the caching allocator's reserve is estimated (3% + 20 MiB) until calibrated on a GPU".into(),
        },
        Note {
            figure: "nvidia_smi_bytes".into(),
            source: gpu.context_source,
            detail: format!("includes a CUDA context of {} MiB for {}", gpu.context_bytes / MIB, gpu.id),
        },
        Note {
            figure: "usable_bytes".into(),
            source: gpu.usable_source,
            detail: format!("{} offers {:.2} GiB to PyTorch", gpu.name, gpu.usable_bytes as f64 / (1u64 << 30) as f64),
        },
    ];
    if cfg.compile {
        out.push(Note {
            figure: "peak_allocated_bytes".into(),
            source: Source::Estimate,
            detail: "compile=True: modelled as eager; torch.compile fuses the loss and some activations (estimate)".into(),
        });
    }
    out
}
