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
    /// Which runtime the figures model: `pytorch` (nanoGPT's train.py on PyTorch eager) here;
    /// `trainer` is [`crate::trainer_model::TrainerPlan`]. Added within schema 1: absent = pytorch.
    #[serde(default = "pytorch_runtime")]
    pub runtime: String,
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

fn pytorch_runtime() -> String {
    "pytorch".to_string()
}

fn window(peak: &Peak, gpu: &Gpu) -> WindowReport {
    // The exact simulation's block-level allocator model gives the reserve.
    let reserved = peak.reserved_bytes.max(peak.bytes);
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

/// The simulation whose figures are shown: every tensor through the block-level caching
/// allocator model (config validated).
pub fn simulate_on(cfg: &Config, gpu: &Gpu) -> Simulation {
    sim::simulate_exact(cfg, &gpu.target())
}

/// The fast tensor-level simulation used to narrow searches (config validated).
pub fn simulate_fast_on(cfg: &Config, gpu: &Gpu) -> Simulation {
    sim::simulate(cfg, &gpu.target())
}

fn windows(sim: &Simulation) -> [(&'static str, &Peak); 4] {
    [("train", &sim.train), ("eval", &sim.eval), ("first_iter", &sim.first_iter), ("eval_at_start", &sim.eval_at_start)]
}

/// What the process needs at its worst (nvidia-smi bytes; the reserve never shrinks, so the
/// largest over the windows), and the window with the highest allocated peak.
fn needed(sim: &Simulation, gpu: &Gpu) -> (u64, &'static str) {
    let w = windows(sim);
    let need = w.iter().map(|(_, p)| window(p, gpu).nvidia_smi_bytes).max().unwrap_or(0);
    let worst = w.iter().max_by_key(|(_, p)| p.bytes).map(|(n, _)| *n).unwrap_or("train");
    (need, worst)
}

fn card_fit(sim: &Simulation, cfg: &Config, gpu: &Gpu, other_usage: u64) -> CardFit {
    let (need, worst) = needed(sim, gpu);
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

/// Whether `cfg` fits `gpu` (all windows), by the exact simulation.
pub fn fits(cfg: &Config, gpu: &Gpu, other_usage: u64) -> bool {
    cfg.validate().is_ok() && card_fit(&simulate_on(cfg, gpu), cfg, gpu, other_usage).fits
}

/// What the exact simulation says a config needs (nvidia-smi bytes), if it is valid.
fn need_exact(cfg: &Config, gpu: &Gpu) -> Option<u64> {
    cfg.validate().ok()?;
    Some(needed(&simulate_on(cfg, gpu), gpu).0)
}

/// Searches run on the fast simulation, scaled by how much the exact one reserves per
/// allocated byte at the starting config, then check their answer with the exact simulation
/// and step to the exact boundary.
#[derive(Clone, Copy)]
struct Search<'g> {
    gpu: &'g Gpu,
    available: u64,
    /// Exact nvidia-smi need minus context, per byte of fast peak allocated, at the start.
    reserve_per_byte: f64,
}

impl<'g> Search<'g> {
    /// `need` is the exact need of `cfg` itself (the caller has it already).
    fn calibrated(cfg: &Config, gpu: &'g Gpu, other_usage: u64, need: u64) -> Search<'g> {
        let available = gpu.usable_bytes.saturating_sub(other_usage);
        let fast = fast_peak(cfg, gpu).max(1);
        let exact = need.saturating_sub(gpu.context_bytes);
        Search { gpu, available, reserve_per_byte: (exact as f64 / fast as f64).max(1.0) }
    }

    fn fast_ok(&self, cfg: &Config, reserve_per_byte: f64) -> bool {
        cfg.validate().is_ok() && (fast_peak(cfg, self.gpu) as f64 * reserve_per_byte) as u64 + self.gpu.context_bytes <= self.available
    }

    /// The largest `v` in `lo..=hi` for which `make(v)` fits by the exact simulation.
    ///
    /// The fast simulation finds a candidate; the exact one measures its need there, which
    /// recalibrates the reserve per allocated byte for a second fast search (the ratio drifts
    /// with the batch size as the allocator's rounding and segments change). The answer is
    /// then confirmed by stepping with the exact simulation, or bisected on it if the proxy
    /// was far off.
    fn largest(&self, lo: u32, hi: u32, make: impl Fn(u32) -> Config) -> Option<u32> {
        if lo > hi {
            return None;
        }
        let fast_search = |ratio: f64| largest_where(lo, hi, |v| self.fast_ok(&make(v), ratio)).unwrap_or(lo);
        let exact_need = |v: u32| need_exact(&make(v), self.gpu);
        let mut v = fast_search(self.reserve_per_byte);
        let mut known: Option<(u32, Option<u64>)> = None;
        for _ in 0..2 {
            let need = exact_need(v);
            known = Some((v, need));
            let Some(need) = need else { break };
            let ratio = (need.saturating_sub(self.gpu.context_bytes) as f64 / fast_peak(&make(v), self.gpu).max(1) as f64).max(1.0);
            let next = fast_search(ratio);
            if next == v {
                break;
            }
            v = next;
            known = None;
        }
        let exact_ok = |x: u32| {
            let need = match known {
                Some((k, need)) if k == x => need,
                _ => exact_need(x),
            };
            need.is_some_and(|n| n <= self.available)
        };
        let mut steps = 0;
        while !exact_ok(v) {
            if v == lo {
                return None;
            }
            if steps == 4 {
                // The proxy was far off: bisect on the exact simulation below v.
                return largest_where(lo, v - 1, exact_ok);
            }
            v -= 1;
            steps += 1;
        }
        steps = 0;
        while v < hi && exact_ok(v + 1) {
            v += 1;
            steps += 1;
            if steps == 4 {
                return largest_where(v, hi, exact_ok);
            }
        }
        Some(v)
    }
}

/// The fast simulation's highest allocated peak over the windows.
fn fast_peak(cfg: &Config, gpu: &Gpu) -> u64 {
    let s = simulate_fast_on(cfg, gpu);
    windows(&s).iter().map(|(_, p)| p.bytes).max().unwrap_or(0)
}

/// The largest micro-batch (everything else unchanged) whose every window fits, or `None`
/// if even batch 1 does not.
pub fn largest_micro_batch(cfg: &Config, gpu: &Gpu, other_usage: u64) -> Option<u32> {
    largest_micro_batch_given(cfg, gpu, other_usage, need_exact(cfg, gpu)?)
}

/// [`largest_micro_batch`] when the config's exact need is known.
fn largest_micro_batch_given(cfg: &Config, gpu: &Gpu, other_usage: u64, need: u64) -> Option<u32> {
    let search = Search::calibrated(cfg, gpu, other_usage, need);
    search.largest(1, crate::config::MAX_BATCH, |b| Config { batch_size: b, ..cfg.clone() })
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
            let s = if g.cublas_workspace_bytes() == primary.cublas_workspace_bytes() { sim.clone() } else { simulate_on(cfg, g) };
            card_fit(&s, cfg, g, req.other_usage_bytes)
        })
        .collect();
    // The request's own exact need, computed once for the fixes and the batch search.
    let need = needed(&sim, primary).0;
    let fixes = if req.with_fixes { fixes_given(cfg, primary, req.other_usage_bytes, need) } else { Vec::new() };
    Ok(Plan {
        schema_version: PLAN_SCHEMA_VERSION,
        runtime: pytorch_runtime(),
        config: cfg.clone(),
        params: params::count(cfg),
        tokens_per_iter: cfg.tokens_per_iter(),
        train: window(&sim.train, primary),
        eval: window(&sim.eval, primary),
        first_iter: window(&sim.first_iter, primary),
        eval_at_start: window(&sim.eval_at_start, primary),
        cards,
        largest_micro_batch: largest_micro_batch_given(cfg, primary, req.other_usage_bytes, need),
        fixes,
        notes: notes(cfg, primary),
    })
}

/// The largest value in `lo..=hi` for which `ok` holds, assuming `ok` is monotone (true up to
/// some point, false after); `None` if `ok(lo)` is false.
fn largest_where(lo: u32, hi: u32, ok: impl Fn(u32) -> bool) -> Option<u32> {
    if lo > hi || !ok(lo) {
        return None;
    }
    let (mut good, mut bad) = (lo, hi.saturating_add(1));
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if ok(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Some(good)
}

/// Ranked fixes for a config on a card: the cheapest change first. Each carries the changed
/// config, what it needs and whether that fits. Fixes that change nothing are left out; for a
/// config that already fits the list is empty.
pub fn fixes(cfg: &Config, gpu: &Gpu, other_usage: u64) -> Vec<Fix> {
    match need_exact(cfg, gpu) {
        Some(current) => fixes_given(cfg, gpu, other_usage, current),
        None => Vec::new(),
    }
}

/// [`fixes`] when the config's exact need (`current`) is known.
fn fixes_given(cfg: &Config, gpu: &Gpu, other_usage: u64, current: u64) -> Vec<Fix> {
    let available = gpu.usable_bytes.saturating_sub(other_usage);
    if cfg.dtype == Dtype::Bfloat16 && !gpu.supports_bf16() {
        // bf16 cannot run on this card at all: fp16 autocast (same memory) comes first, and any
        // further fixes are for the fp16 config, since a fix that keeps bf16 fixes nothing.
        let fp16 = Config { dtype: Dtype::Float16, ..cfg.clone() };
        let need = need_exact(&fp16, gpu).unwrap_or(current);
        let mut out = vec![Fix {
            title: format!("dtype = 'float16' ({} has no bf16)", gpu.name),
            cost: "fp16 needs loss scaling (nanoGPT's GradScaler does it); same memory as bf16".into(),
            needed_bytes: need,
            fits: need <= available,
            config: fp16.clone(),
            stock_nanogpt: true,
        }];
        if need > available {
            out.extend(fixes_given(&fp16, gpu, other_usage, need));
        }
        return out;
    }
    if current <= available {
        return Vec::new();
    }
    let fits_cfg = |c: &Config| need_exact(c, gpu).is_some_and(|n| n <= available);
    let search = Search::calibrated(cfg, gpu, other_usage, current);
    let mut out: Vec<Fix> = Vec::new();
    let mut push = |title: String, cost: String, config: Config, stock: bool| {
        if config == *cfg {
            return;
        }
        if let Some(n) = need_exact(&config, gpu) {
            if n < current {
                out.push(Fix { title, cost, needed_bytes: n, fits: n <= available, config, stock_nanogpt: stock });
            }
        }
    };

    // 1. Same tokens per iteration in smaller micro-batches: B' divides B*GA.
    let tokens = cfg.batch_size as u64 * cfg.gradient_accumulation_steps as u64;
    let divisors = (1..cfg.batch_size).rev().filter(|b| tokens.is_multiple_of(*b as u64));
    for b in divisors {
        let ga = tokens / b as u64;
        if ga > crate::config::MAX_ACCUM as u64 {
            break;
        }
        let c = Config { batch_size: b, gradient_accumulation_steps: ga as u32, eval_batch_size: cfg.eval_batch_size, ..cfg.clone() };
        if fits_cfg(&c) {
            push(
                format!("batch_size = {b}, gradient_accumulation_steps = {ga}"),
                format!("same {} sequences per iteration in smaller micro-batches: more, smaller matmuls (slower per token)", tokens),
                c,
                true,
            );
            break;
        }
    }

    // 2. A smaller eval batch (when evaluation is what does not fit).
    if let Some(eb) = search.largest(1, cfg.eval_batch().saturating_sub(1), |e| Config { eval_batch_size: Some(e), ..cfg.clone() }) {
        push(
            format!("eval_batch_size = {eb}"),
            "estimate_loss runs more, smaller batches; train.py needs an eval_batch_size option (vramfit train has one)".into(),
            Config { eval_batch_size: Some(eb), ..cfg.clone() },
            false,
        );
    }

    // 3. expandable_segments: the allocator keeps reserved close to allocated.
    if !cfg.expandable_segments {
        push(
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True".into(),
            "none: an environment variable; the allocator maps pages instead of keeping whole segments".into(),
            Config { expandable_segments: true, ..cfg.clone() },
            true,
        );
    }

    // 4. Activation checkpointing: keep only each block's input, recompute in backward.
    if !cfg.activation_checkpointing {
        push(
            "activation checkpointing per block".into(),
            "about one extra forward per iteration (~30% more compute); train.py needs torch.utils.checkpoint around each block (vramfit train has it)".into(),
            Config { activation_checkpointing: true, ..cfg.clone() },
            false,
        );
    }

    // 5. Mixed precision when running pure fp32.
    if cfg.dtype == Dtype::Float32 {
        let dtype = if gpu.supports_bf16() { Dtype::Bfloat16 } else { Dtype::Float16 };
        push(
            format!("dtype = '{}'", dtype.name()),
            "mixed precision: activations and logits in 16 bits, fp32 master weights".into(),
            Config { dtype, ..cfg.clone() },
            true,
        );
    }

    // 5b. torch.compile: fused blocks save less and the loss keeps no fp32 copy of the logits.
    if !cfg.compile {
        push(
            "compile = True".into(),
            "a minute or so of compilation at start; needs Triton (Linux or WSL). The new figure is an estimate: the compile model \
             is fitted to three H100 runs"
                .into(),
            Config { compile: true, ..cfg.clone() },
            true,
        );
    }

    // 6. A shorter eval context.
    if let Some(et) = search.largest(1, cfg.eval_block().saturating_sub(1), |t| Config { eval_block_size: Some(t), ..cfg.clone() }) {
        push(
            format!("eval_block_size = {et}"),
            "the loss is measured on shorter contexts than training uses (not comparable with other runs)".into(),
            Config { eval_block_size: Some(et), ..cfg.clone() },
            false,
        );
    }

    // 7. A shorter block for training too.
    if let Some(t) = search.largest(1, cfg.block_size.saturating_sub(1), |t| Config {
        block_size: t,
        eval_block_size: cfg.eval_block_size.map(|e| e.min(t)),
        ..cfg.clone()
    }) {
        push(
            format!("block_size = {t}"),
            format!("the model sees {t} tokens of context instead of {}", cfg.block_size),
            Config { block_size: t, eval_block_size: cfg.eval_block_size.map(|e| e.min(t)), ..cfg.clone() },
            true,
        );
    }

    // 8. Last resort: fewer layers.
    if let Some(l) = search.largest(1, cfg.n_layer.saturating_sub(1), |l| Config { n_layer: l, ..cfg.clone() }) {
        let smaller = Config { n_layer: l, ..cfg.clone() };
        push(
            format!("n_layer = {l}"),
            format!(
                "a smaller model: {} instead of {} parameters",
                params::count(&smaller).printed_millions(),
                params::count(cfg).printed_millions()
            ),
            smaller,
            true,
        );
    }

    // Fixes that fit first, in the order above (cheapest first); then partial improvements.
    out.sort_by_key(|f| !f.fits);
    out
}

fn notes(cfg: &Config, gpu: &Gpu) -> Vec<Note> {
    let mut out = vec![Note {
        figure: "peak_allocated_bytes".into(),
        source: Source::Measured,
        detail: "event-level model of PyTorch eager with a block-level caching-allocator model, validated against \
                 torch.cuda.max_memory_allocated() on an H100 (torch 2.11; README: Accuracy)"
            .into(),
    }];
    if gpu.compute_capability != (9, 0) {
        out.push(Note {
            figure: "workspace".into(),
            source: Source::Estimate,
            detail: format!(
                "cuBLAS workspace of {:.1} MiB per thread on {} is PyTorch's documented default, not measured here",
                gpu.cublas_workspace_bytes() as f64 / MIB as f64,
                gpu.id
            ),
        });
    }
    out.push(Note {
        figure: "peak_reserved_bytes".into(),
        source: Source::Measured,
        detail: if cfg.expandable_segments {
            "expandable_segments:True: one large segment growing in 2 MiB pages, simulated block by block and validated against \
             max_memory_reserved() on an H100"
        } else {
            "the caching allocator's segments, simulated block by block and validated against max_memory_reserved() on an H100"
        }
        .into(),
    });
    out.push(Note {
        figure: "nvidia_smi_bytes".into(),
        source: gpu.context_source,
        detail: format!("reserved plus a CUDA context of {} MiB for {}", gpu.context_bytes / MIB, gpu.id),
    });
    out.push(Note {
        figure: "usable_bytes".into(),
        source: gpu.usable_source,
        detail: format!(
            "{} offers {:.2} GiB to PyTorch ({})",
            gpu.name,
            gpu.usable_bytes as f64 / (1u64 << 30) as f64,
            match gpu.usable_source {
                Source::Measured if gpu.id == "h100-80gb" => "measured: torch.cuda.mem_get_info()",
                Source::Measured => "as PyTorch reported it in a public out-of-memory message",
                Source::Estimate => "estimated from the card's size",
            }
        ),
    });
    if cfg.compile {
        out.push(Note {
            figure: "peak_allocated_bytes".into(),
            source: Source::Estimate,
            detail: "compile=True uses a coarse model (saved bytes per layer, three B*T*V tensors at the loss) fitted to the three \
                     compiled configs measured on an H100, which it matches within 2.1% allocated and 5% reserved \
                     (tests/reference/data/cuda-h100-compile.json; in-sample, so an estimate)"
                .into(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::default_gpu;

    fn req(config: Config) -> PlanRequest {
        PlanRequest { config, gpus: vec![], other_usage_bytes: 0, with_fixes: true }
    }

    #[test]
    fn a_config_that_does_not_fit_gets_fixes_that_do() {
        // GPT-2 124M at micro-batch 64 on a 12 GB card (an OOM report): far too big.
        let cfg = Config { batch_size: 64, gradient_accumulation_steps: 8, ..Config::default() };
        let p = plan(&req(cfg.clone())).unwrap();
        assert!(!p.cards[0].fits);
        assert!(p.cards[0].headroom_bytes < 0);
        assert!(!p.fixes.is_empty());
        let first = &p.fixes[0];
        assert!(first.fits, "{first:?}");
        // The cheapest fix keeps tokens per iteration.
        assert_eq!(first.config.tokens_per_iter(), cfg.tokens_per_iter());
        assert!(first.config.batch_size < 64);
        // Every fix really is what it claims: re-planning its config agrees.
        for f in &p.fixes {
            let again = plan(&PlanRequest { with_fixes: false, ..req(f.config.clone()) }).unwrap();
            assert_eq!(again.cards[0].needed_bytes, f.needed_bytes);
            assert_eq!(again.cards[0].fits, f.fits);
        }
    }

    #[test]
    fn a_config_that_fits_needs_no_fixes_and_largest_batch_is_tight() {
        let cfg = Config { batch_size: 2, ..Config::default() };
        let p = plan(&req(cfg.clone())).unwrap();
        assert!(p.cards[0].fits);
        assert!(p.fixes.is_empty());
        let b = p.largest_micro_batch.expect("batch 2 fits, so some batch does");
        let gpu = default_gpu();
        assert!(fits(&Config { batch_size: b, ..cfg.clone() }, &gpu, 0));
        assert!(!fits(&Config { batch_size: b + 1, ..cfg }, &gpu, 0));
    }

    #[test]
    fn other_programs_reduce_the_room() {
        let cfg = Config { batch_size: 4, ..Config::default() };
        let gpu = default_gpu();
        let free = largest_micro_batch(&cfg, &gpu, 0).unwrap();
        let busy = largest_micro_batch(&cfg, &gpu, 2 << 30).unwrap();
        assert!(busy < free);
    }

    #[test]
    fn bf16_on_a_pre_ampere_card_is_flagged_with_an_fp16_fix() {
        let t4 = Gpu::find("t4").unwrap();
        let cfg = Config { batch_size: 1, ..Config::default() };
        let p = plan(&PlanRequest { gpus: vec![t4], ..req(cfg) }).unwrap();
        assert!(p.cards[0].bf16_unsupported);
        assert!(!p.cards[0].fits);
        assert!(p.fixes.iter().any(|f| f.config.dtype == Dtype::Float16 && f.fits));
    }

    #[test]
    fn invalid_configs_are_errors_not_panics() {
        assert!(plan(&req(Config { n_head: 7, ..Config::default() })).is_err());
    }
}
