//! The answer every face shows: peaks, what they are made of, fit per card, the largest
//! micro-batch that fits, and ranked fixes.
//!
//! `plan` is the one function the page and `vramfit plan` call for a PyTorch run. `vramfit train`'s
//! pre-flight plans vramfit's own trainer instead, whose tensors differ: [`crate::trainer_model`].

use crate::config::{Config, ConfigError, Dtype};
use crate::device::{Gpu, Source};
use crate::params::{self, ParamCounts};
use crate::sim::{self, Breakdown, Peak, Phase, Simulation};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;

/// Version of the JSON document `vramfit plan --json` prints; bumped on breaking changes.
// 2: `fixes` is null when not computed (it was an empty list, read as "none needed"); a
// model's figures are `validated` (they were `measured`, as a card's constants are).
pub const PLAN_SCHEMA_VERSION: u32 = 2;

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
    /// The window where the process first needs `needed_bytes` (`train`, `eval`, `first_iter` or
    /// `eval_at_start`): the reserve never shrinks, so it is the first window, in the order a
    /// run meets them, whose nvidia-smi figure is the need.
    pub worst_window: String,
    /// bf16 requested on a card without bf16 support (pre-Ampere).
    pub bf16_unsupported: bool,
    /// What this card's figures rest on, measured or estimated (its context, workspace and
    /// usable size differ from card to card; the plan's own `notes` are the first card's).
    #[serde(default)]
    pub notes: Vec<Note>,
    /// The first window, in the order the simulation runs them (`eval_at_start`, `first_iter`,
    /// `eval`, `train`), whose need passes the available bytes: where the run first asks for
    /// more than the card has (the reserve only grows, so every later window does too). train.py
    /// runs more steady steps before its second eval than the simulation does, so an `eval`
    /// here means that eval or the steady steps before it (whose tensors the simulated `train`
    /// window, after the eval, repeats). Null when every window fits. Added within schema 2.
    #[serde(default)]
    pub first_short_window: Option<String>,
    /// Whether the headroom or shortfall is within what the model's own error could cover
    /// (see [`close_call`]): the verdict could go either way. Added within schema 2.
    #[serde(default)]
    pub close_call: bool,
    /// Where this card leaves no room for any run whatever the config (`taken_by_others`: other
    /// programs hold all it offers; `below_context`: what is left is no more than the CUDA
    /// context): no fix is offered then. Null otherwise. Added within schema 2.
    #[serde(default)]
    pub no_room: Option<crate::device::NoRoom>,
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
    /// Where a fix that fits the two simulated iterations runs out of memory later, by the
    /// allocator model (an estimate); such fixes rank after those that keep fitting. Null
    /// otherwise. Added within schema 2.
    #[serde(default)]
    pub runs_out_later: Option<RunsOut>,
    /// Whether `needed_bytes` rests on a term not measured for the fixed config on this card
    /// (compile, an unmeasured card's context): the fix's own notes, not the plan's, decide.
    /// Added within schema 2.
    #[serde(default)]
    pub needed_is_estimate: bool,
    /// Whether it fits or misses by less than the model's error (see [`close_call`]). Added
    /// within schema 2.
    #[serde(default)]
    pub close_call: bool,
}

/// Out of memory a few steps in, by the allocator model's continued simulation: at a training
/// iteration (1-based), or in the eval after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunsOut {
    pub iteration: u32,
    pub in_eval: bool,
    pub source: Source,
}

impl RunsOut {
    /// In words, as [`LaterGrowth::when`].
    pub fn when(&self) -> String {
        when(self.iteration, self.in_eval)
    }
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
    /// Whether that batch's need rests on an estimate, by its own config's notes (a batch past
    /// the shapes measured can be one where the config's own is not). Added within schema 2.
    #[serde(default)]
    pub largest_micro_batch_is_estimate: bool,
    /// That batch's own needs by the exact simulation that found it (the page draws its curves
    /// through them); null where no batch fits. Added within schema 2.
    #[serde(default)]
    pub largest_micro_batch_needs: Option<BatchNeeds>,
    /// Ranked fixes for the first card (empty when it fits); `None` when not asked for
    /// (`with_fixes: false`), so that "none needed" and "not computed" read differently.
    pub fixes: Option<Vec<Fix>>,
    pub notes: Vec<Note>,
    /// Where the allocator model's reserve grows after the two iterations the measurements ran
    /// (an estimate, see [`sim::simulate_exact_and_later`]), for the first card; null when it
    /// does not grow, and when the simulated windows already reserve more than that card
    /// leaves room for (the config does not fit, so what follows cannot change that). Added
    /// within schema 2.
    #[serde(default)]
    pub later: Option<LaterGrowth>,
    /// Where the allocator model says the largest micro-batch itself runs out of memory after
    /// the two simulated iterations: the largest below it that keeps fitting (an estimate).
    /// Null when the largest micro-batch keeps fitting, or none fits. Added within schema 2.
    #[serde(default)]
    pub largest_lasting_micro_batch: Option<LastingMicroBatch>,
}

impl Plan {
    /// The later growth where the windows fit the first card but the grown reserve does not:
    /// what turns a plain "fits" into "fits the first two steps".
    pub fn later_past_card(&self) -> Option<&LaterGrowth> {
        self.later.as_ref().filter(|l| !l.fits && self.cards.first().is_some_and(|c| c.fits))
    }

    /// Where the config's own batch is the largest that fits and runs out later: the batch
    /// below it that keeps fitting (what to use instead).
    pub fn own_lasting_batch(&self) -> Option<u32> {
        let own = self.largest_micro_batch == Some(self.config.batch_size);
        self.largest_lasting_micro_batch.as_ref().filter(|_| own).and_then(|l| l.batch_size)
    }

    /// For a run that fits the simulated steps and whose reserve the allocator model sees pass
    /// the card later ([`Plan::later_past_card`]), what the plan found keeps it fitting, as
    /// fixes to apply: expandable_segments, and the batch that keeps fitting below the largest
    /// that fits ([`LastingMicroBatch`]; near the card the need is not monotone, so it can be
    /// above the config's own). Both rest on the model's continuation, an estimate. Empty
    /// otherwise (the fixes of [`fixes_of`] are for a run that does not fit).
    pub fn later_fixes(&self) -> Vec<Fix> {
        let (Some(later), Some(card)) = (self.later_past_card(), self.cards.first()) else { return Vec::new() };
        let cfg = &self.config;
        let fix = |title: String, cost: String, config: Config, needed_bytes: u64| Fix {
            title,
            cost,
            config,
            needed_bytes,
            fits: needed_bytes <= card.available_bytes,
            stock_nanogpt: true,
            runs_out_later: None,
            needed_is_estimate: true,
            close_call: close_call(card.available_bytes as i64 - needed_bytes as i64, needed_bytes, true),
        };
        let mut fixes = Vec::new();
        if let Some(need) = later.expandable_fix_bytes {
            fixes.push(fix(EXPANDABLE_TITLE.into(), EXPANDABLE_COST.into(), Config { expandable_segments: true, ..cfg.clone() }, need));
        }
        // The batch below the largest that keeps fitting; where the largest itself keeps
        // fitting (no such entry), the largest, at its simulated need.
        let lasting = match &self.largest_lasting_micro_batch {
            Some(l) => l.batch_size.zip(l.needed_bytes),
            None => self.largest_micro_batch.zip(self.largest_micro_batch_needs.map(|n| n.training_bytes.max(n.eval_bytes))),
        };
        if let Some((b, need)) = lasting.filter(|(b, _)| *b != cfg.batch_size) {
            let above = if b > cfg.batch_size { " (near the card the need rises and falls with the batch)" } else { "" };
            let cost = format!(
                "micro-batches of {b} instead of {}: {} sequences per iteration instead of {}{above}",
                cfg.batch_size,
                params::thousands(b as u64 * cfg.gradient_accumulation_steps as u64),
                params::thousands(cfg.batch_size as u64 * cfg.gradient_accumulation_steps as u64)
            );
            fixes.push(fix(format!("batch_size = {b}"), cost, Config { batch_size: b, ..cfg.clone() }, need));
        }
        fixes
    }
}

/// The fix that changes nothing but the allocator's configuration.
const EXPANDABLE_TITLE: &str = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True";
const EXPANDABLE_COST: &str = "none: an environment variable; the allocator maps pages instead of keeping whole segments";

/// The largest micro-batch that fits sits at the card's edge, where a reserve that grows a few
/// steps later (see [`LaterGrowth`]) is most likely to pass it. Where the allocator model says
/// it does, and PyTorch could not release enough: the largest micro-batch below it that keeps
/// fitting the first card, by the same continued simulation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastingMicroBatch {
    /// Where the largest micro-batch that fits runs out of memory: the training iteration
    /// (1-based) in which, or in whose following eval, its reserve passes the card.
    pub runs_out_at_iteration: u32,
    pub runs_out_in_eval: bool,
    /// A micro-batch below it whose windows fit and whose continued reserve stays within the
    /// card (or passes it but recovers by PyTorch's release of cached segments), and whose next
    /// one up does not: the largest such where the need grows with the batch (near the card it
    /// need not, and a larger one may keep fitting too); `None` if no smaller batch does.
    pub batch_size: Option<u32>,
    /// Its need (nvidia-smi bytes) at its worst, the later growth included (where that passes
    /// the card and PyTorch's release of cached segments makes room, the need after it).
    pub needed_bytes: Option<u64>,
    /// Whether it keeps running only because PyTorch, refused a new segment past the card,
    /// returns its cached segments that hold no tensor and retries (that step slower): its own
    /// plan then says its reserve passes the card there and goes on. Added within schema 2.
    #[serde(default)]
    pub frees_cached_blocks: bool,
    pub source: Source,
}

impl LastingMicroBatch {
    /// Where the largest micro-batch runs out, in words (as [`LaterGrowth::when`]).
    pub fn when(&self) -> String {
        when(self.runs_out_at_iteration, self.runs_out_in_eval)
    }
}

/// The allocator model's reserve after the simulated windows, on the plan's first card.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaterGrowth {
    /// The training iteration (1-based) in which, or in whose following eval, it last grows.
    pub iteration: u32,
    pub in_eval: bool,
    pub reserved_bytes: u64,
    pub nvidia_smi_bytes: u64,
    /// Whether that still fits the first card's available memory.
    pub fits: bool,
    /// Where it passes the card: what PyTorch's allocator could release there (its cached
    /// segments that hold no live block), and whether the run then goes on. The figures above
    /// are then where it passed (later iterations are not simulated).
    pub past_card: Option<sim::PastLimit>,
    /// Where it passes the card and the release makes room: the need from then on (nvidia-smi
    /// bytes: the reserve less the released segments, and the CUDA context). Added within
    /// schema 2.
    #[serde(default)]
    pub after_release_bytes: Option<u64>,
    /// Where it does not fit: the need with `expandable_segments` (PyTorch's allocator grows
    /// one segment page by page, so blocks do not strand), if that config fits the card in the
    /// simulated windows and its reserve does not grow later.
    pub expandable_fix_bytes: Option<u64>,
    pub source: Source,
}

impl LaterGrowth {
    /// Where it grows, in words: "iteration 3" or "the eval after iteration 12".
    pub fn when(&self) -> String {
        when(self.iteration, self.in_eval)
    }
}

fn when(iteration: u32, in_eval: bool) -> String {
    if in_eval {
        format!("the eval after iteration {iteration}")
    } else {
        format!("iteration {iteration}")
    }
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

/// A window's name (as the JSON and the data files give it) and its peak in a simulation.
type NamedWindow = (&'static str, fn(&Simulation) -> &Peak);

/// The windows the run goes through, the steady step first: all four, or for an eval-only run
/// the eval at start alone (train.py exits after it).
fn windows(sim: &Simulation) -> &'static [NamedWindow] {
    const ALL: [NamedWindow; 4] =
        [("train", |s| &s.train), ("eval", |s| &s.eval), ("first_iter", |s| &s.first_iter), ("eval_at_start", |s| &s.eval_at_start)];
    if sim.eval_only {
        &ALL[3..]
    } else {
        &ALL
    }
}

/// What the process needs at its worst (nvidia-smi bytes; the reserve never shrinks, so the
/// largest over the windows that run), and the window where it first needs that much: the
/// first, in the order a run meets them, whose figure is the need (the one that made the
/// reserve what it is; later windows reuse it).
fn needed(sim: &Simulation, gpu: &Gpu) -> (u64, &'static str) {
    let smi = |peak: fn(&Simulation) -> &Peak| window(peak(sim), gpu).nvidia_smi_bytes;
    let need = windows(sim).iter().map(|&(_, p)| smi(p)).max().unwrap_or(0);
    // `windows` lists the steady step first; the run meets them in the reverse order.
    let worst = windows(sim).iter().rev().find(|&&(_, p)| smi(p) == need).map_or("train", |&(name, _)| name);
    (need, worst)
}

fn card_fit(sim: &Simulation, cfg: &Config, gpu: &Gpu, other_usage: u64) -> CardFit {
    let (need, worst) = needed(sim, gpu);
    let available = gpu.usable_bytes.saturating_sub(other_usage);
    let bf16_unsupported = cfg.dtype == Dtype::Bfloat16 && !gpu.supports_bf16();
    let notes = notes(cfg, gpu);
    // `windows` lists the steady step first; the run meets them in the reverse order.
    let first_short_window =
        windows(sim).iter().rev().find(|&&(_, p)| window(p(sim), gpu).nvidia_smi_bytes > available).map(|(name, _)| name.to_string());
    CardFit {
        gpu: gpu.id.clone(),
        gpu_name: gpu.name.clone(),
        available_bytes: available,
        needed_bytes: need,
        fits: need <= available && !bf16_unsupported,
        headroom_bytes: available as i64 - need as i64,
        worst_window: worst.to_string(),
        bf16_unsupported,
        close_call: close_call(available as i64 - need as i64, need, need_is_estimate(&notes)),
        notes,
        first_short_window,
        no_room: gpu.no_room(other_usage),
    }
}

/// The plan figures (`Note::figure`) a need (nvidia-smi bytes) is built from: the context on
/// top of the reserve, the reserve from the allocated blocks, which hold the cuBLAS workspace
/// and the temporaries (among them the bias gradients' reduction scratch).
pub const NEED_FIGURES: &[&str] = &["nvidia_smi_bytes", "peak_reserved_bytes", "peak_allocated_bytes", "workspace", "temporaries"];

/// Why the notes call any of `figures` an estimate (their details joined), or `None` where
/// every one of them was measured or validated.
pub fn estimate_detail(notes: &[Note], figures: &[&str]) -> Option<String> {
    let details: Vec<&str> =
        notes.iter().filter(|n| n.source == Source::Estimate && figures.contains(&n.figure.as_str())).map(|n| n.detail.as_str()).collect();
    (!details.is_empty()).then(|| details.join("; "))
}

/// Whether a need (nvidia-smi bytes) rests on an estimate, by its notes.
pub fn need_is_estimate(notes: &[Note]) -> bool {
    notes.iter().any(|n| n.source == Source::Estimate && NEED_FIGURES.contains(&n.figure.as_str()))
}

/// How far off a need may be, as a share of it: 3.0% is the largest error of the nvidia-smi
/// figure on the H100's FlashAttention-2 rows (what RTX 30xx/40xx cards run; README:
/// Accuracy), 5% compile's error on the reserve, which stands for every estimate.
pub fn need_error(estimate: bool) -> f64 {
    if estimate {
        0.05
    } else {
        0.03
    }
}

/// Whether a headroom (negative: a shortfall) is small enough that the model's own error on
/// `need` could turn the verdict.
pub fn close_call(headroom: i64, need: u64, estimate: bool) -> bool {
    (headroom.unsigned_abs() as f64) < need_error(estimate) * need as f64
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

/// What [`check_exact`] found.
type ExactCheck = Option<Result<u64, u64>>;

/// A config's needs (nvidia-smi bytes) in training (the steady step or the first, whichever
/// is higher) and in eval (either `estimate_loss`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchNeeds {
    pub training_bytes: u64,
    pub eval_bytes: u64,
}

/// A config's [`BatchNeeds`] by the exact simulation (a batch the page draws its curves
/// through), if it is valid.
pub fn batch_needs(cfg: &Config, gpu: &Gpu) -> Option<BatchNeeds> {
    cfg.validate().ok()?;
    Some(BatchNeeds::of(&simulate_on(cfg, gpu), gpu))
}

impl BatchNeeds {
    fn of(sim: &Simulation, gpu: &Gpu) -> BatchNeeds {
        let smi = |p: &Peak| window(p, gpu).nvidia_smi_bytes;
        if sim.eval_only {
            // No training runs: both are the one eval's, so curves through them show the run.
            let eval = smi(&sim.eval_at_start);
            return BatchNeeds { training_bytes: eval, eval_bytes: eval };
        }
        BatchNeeds { training_bytes: smi(&sim.train).max(smi(&sim.first_iter)), eval_bytes: smi(&sim.eval).max(smi(&sim.eval_at_start)) }
    }
}

/// The exact simulation asked whether `cfg` fits in `available` bytes; it stops modelling the
/// allocator as soon as the reserve says no (cheaper than [`need_exact`] for misses).
/// `Ok(need)` if it fits; `Err(need so far)`, a lower bound of the need, if not; `None` if the
/// config is invalid.
fn check_exact(cfg: &Config, gpu: &Gpu, available: u64) -> ExactCheck {
    check_exact_needs(cfg, gpu, available, false).check
}

/// What [`check_exact_needs`] found.
#[derive(Clone, Copy, Debug)]
struct ExactFound {
    check: ExactCheck,
    /// The config's needs, when it fits.
    needs: Option<BatchNeeds>,
    /// Whether it keeps fitting, when it fits and that was asked.
    lasting: Option<Lasting>,
}

/// [`check_exact`], with the config's [`BatchNeeds`] when it fits, and its [`Lasting`] if
/// `with_later` (the continuation goes on from the same simulation).
fn check_exact_needs(cfg: &Config, gpu: &Gpu, available: u64, with_later: bool) -> ExactFound {
    let not_found = |check| ExactFound { check, needs: None, lasting: None };
    if cfg.validate().is_err() {
        return not_found(None);
    }
    let limit = available.saturating_sub(gpu.context_bytes);
    let target = gpu.target();
    let run = if with_later {
        sim::simulate_exact_within_and_later(cfg, &target, limit).map(|(sim, later)| (sim, Some(later)))
    } else {
        sim::simulate_exact_within(cfg, &target, limit).map(|sim| (sim, None))
    };
    match run {
        Ok((sim, later)) => {
            let need = needed(&sim, gpu).0;
            if need <= available {
                let lasting = later.map(|later| lasting(&sim, later, gpu, available));
                ExactFound { check: Some(Ok(need)), needs: Some(BatchNeeds::of(&sim, gpu)), lasting }
            } else {
                not_found(Some(Err(need)))
            }
        }
        Err(reserved) => not_found(Some(Err(reserved + gpu.context_bytes))),
    }
}

/// Whether `cfg` fits in `available` bytes by the exact simulation (see [`check_exact`]).
#[cfg(test)]
fn fits_exact(cfg: &Config, gpu: &Gpu, available: u64) -> bool {
    matches!(check_exact(cfg, gpu, available), Some(Ok(_)))
}

/// Searches run on the fast simulation, scaled by how much the exact one reserves per
/// allocated byte near the answer, then check their answer with the exact simulation and step
/// to the exact boundary.
///
/// The exact need is not monotone near a card's capacity: whether the allocator splits a
/// block depends on its size, so batch 270 can fit where 269 does not (shakespeare-char with
/// manual attention on an RTX 3060, eager). The answer is a boundary (it fits and one more does not) found the same way
/// from every starting config that does not fit or sits below it, so the page's marker does
/// not jump as a slider moves; a starting config that fits above it gets the boundary above
/// itself.
#[derive(Clone, Copy)]
struct Search<'g> {
    gpu: &'g Gpu,
    available: u64,
    /// The starting config's fast peak and exact need (reused when a search lands on it).
    start_fast: u64,
    start_need: u64,
    /// Whether each config found to fit is also continued past the two simulated iterations
    /// (its [`Lasting`]): the plan asks that of its largest batch anyway, and the search's own
    /// simulation of it is then the start of that continuation.
    with_later: bool,
    /// Exact checks of this config at other batches, from earlier plans (see [`SearchMemo`]).
    memo: Option<&'g RefCell<Vec<(u32, ExactFound)>>>,
}

impl<'g> Search<'g> {
    /// `need` is the exact need of `cfg` itself (the caller has it already).
    fn calibrated(cfg: &Config, gpu: &'g Gpu, other_usage: u64, need: u64) -> Search<'g> {
        let available = gpu.usable_bytes.saturating_sub(other_usage);
        Search { gpu, available, start_fast: fast_peak(cfg, gpu), start_need: need, with_later: false, memo: None }
    }

    /// The largest `v` in `lo..=hi` for which `make(v)` fits by the exact simulation and
    /// `make(v + 1)` does not (or `v` is `hi`). `start` is the value of the searched setting
    /// in the starting config, if `make(start)` simulates the same as it (its figures are
    /// known); it saves work, and changes the answer only where the need is not monotone and
    /// the start fits above the boundary found from elsewhere: then the answer is the boundary
    /// above the start.
    ///
    /// The fast simulation finds a candidate assuming no reserve beyond the allocated bytes,
    /// the most hopeful guess. The exact simulation checks it: if it fits, the answer is it or
    /// above; if not, the need it reached before stopping calibrates the reserve per allocated
    /// byte for a second fast search below it. The answer is then confirmed by stepping with
    /// the exact simulation (usually one more run), or bisected on it if the proxy was far
    /// off. Every simulation is run once per search at most.
    /// Returns the answer with its exact need (nvidia-smi bytes), simulated on the way.
    // `make` is a trait object: each caller's closure would otherwise instantiate this whole
    // search again (kilobytes of the page's wasm apiece).
    fn largest(&self, lo: u32, hi: u32, start: Option<u32>, make: &dyn Fn(u32) -> Config) -> Option<(u32, u64)> {
        self.largest_found(lo, hi, start, make).and_then(|(v, found)| found.check.and_then(Result::ok).map(|need| (v, need)))
    }

    /// [`Search::largest`], with what the exact simulation found for the answer: its need, and
    /// its [`BatchNeeds`] and [`Lasting`] (`None` when the answer is `start`, whose simulation
    /// the caller has).
    fn largest_found(&self, lo: u32, hi: u32, start: Option<u32>, make: &dyn Fn(u32) -> Config) -> Option<(u32, ExactFound)> {
        if lo > hi {
            return None;
        }
        let start = start.filter(|s| (lo..=hi).contains(s));
        let fast_seen: RefCell<Vec<(u32, Option<u64>)>> = RefCell::new(start.map(|s| (s, Some(self.start_fast))).into_iter().collect());
        let fast = |v: u32| {
            if let Some(&(_, y)) = fast_seen.borrow().iter().find(|(x, _)| *x == v) {
                return y;
            }
            let c = make(v);
            let y = c.validate().is_ok().then(|| fast_peak(&c, self.gpu));
            fast_seen.borrow_mut().push((v, y));
            y
        };
        // Exact checks by value. A start that fits is known. One that does not is known only at
        // `lo` (where a miss ends the search whatever it needs): elsewhere `check_exact` would
        // report the need where it stopped, not the full need the plan has, and the answer must
        // not depend on which one calibrated the search.
        let known_start = start.and_then(|s| match self.start_need <= self.available {
            true => Some((s, Some(Ok(self.start_need)))),
            false if s == lo => Some((s, Some(Err(self.start_need)))),
            false => None,
        });
        let exact_seen: RefCell<Vec<(u32, ExactFound)>> =
            RefCell::new(known_start.map(|(s, check)| (s, ExactFound { check, needs: None, lasting: None })).into_iter().collect());
        let exact = |v: u32| {
            if let Some(&(_, found)) = exact_seen.borrow().iter().find(|(x, _)| *x == v) {
                return found.check;
            }
            let remembered = self.memo.and_then(|m| m.borrow().iter().find(|(x, _)| *x == v).map(|(_, f)| *f));
            let found = remembered.unwrap_or_else(|| {
                let found = check_exact_needs(&make(v), self.gpu, self.available, self.with_later);
                if let Some(m) = self.memo {
                    m.borrow_mut().push((v, found));
                }
                found
            });
            exact_seen.borrow_mut().push((v, found));
            found.check
        };
        // Whether a batch fits. A start that does not fit is a known miss: a simulation that
        // stops early misses wherever the full one (the plan's) does. It is simulated again only
        // as the first guess, whose need calibrates the next guess (below).
        let start_misses = start.filter(|_| self.start_need > self.available);
        let exact_ok = |v: u32| start_misses != Some(v) && matches!(exact(v), Some(Ok(_)));
        let room = self.available.saturating_sub(self.gpu.context_bytes);
        let fast_search = |ratio: f64| {
            let ok = |y: u64| (y as f64 * ratio) as u64 + self.gpu.context_bytes <= self.available;
            largest_by_interpolation(lo, hi, room as f64 / ratio, fast, ok).unwrap_or(lo)
        };
        let start_fits = start.filter(|_| self.start_need <= self.available);
        // A batch needs at least its fast peak (the allocated bytes as requested) and the
        // context: the exact simulation adds the allocator's rounding and reserve to the same
        // tensors. Where that passes the room at `lo`, no exact simulation can find a batch
        // that fits (GPT-2 1.5B on a 12 GB card: its batch 1 would cost a nearly full one).
        if start_fits.is_none() && fast(lo).is_none_or(|y| y.saturating_add(self.gpu.context_bytes) > self.available) {
            return None;
        }
        let mut v = fast_search(1.0);
        if let (Some(Err(need)), Some(peak)) = (exact(v), fast(v)) {
            // Too big: below it, by the reserve per byte it had reached.
            let ratio = reserve_per_byte(need.saturating_sub(self.gpu.context_bytes), peak);
            v = fast_search(ratio).min(v.saturating_sub(1)).max(lo);
        }
        let mut steps = 0;
        // The boundary below the first guess, if any batch there fits.
        let mut below = Some(v);
        while !exact_ok(v) {
            if v == lo {
                below = None;
                break;
            }
            if steps == 4 {
                // The proxy was far off: bisect on the exact simulation below v (its answer's
                // next value is known not to fit, so the climb below stops at once).
                below = largest_where(lo, v - 1, exact_ok);
                break;
            }
            v -= 1;
            steps += 1;
            below = Some(v);
        }
        v = match (below, start_fits) {
            // The starting config fits above the boundary found (the need is not monotone):
            // "the largest that fits" must not be smaller than what the user has, so the
            // answer is the boundary above it.
            (Some(b), Some(s)) if s > b => s,
            (None, Some(s)) => s,
            (Some(b), _) => b,
            (None, None) => return None,
        };
        steps = 0;
        while v < hi && exact_ok(v + 1) {
            v += 1;
            steps += 1;
            if steps == 4 {
                v = largest_where(v, hi, exact_ok)?;
                break;
            }
        }
        // Every answer was checked and fits, so its need is known (`exact` finds it seen).
        let found = exact_seen.borrow().iter().find(|(x, _)| *x == v).map(|(_, f)| *f);
        found.filter(|f| matches!(f.check, Some(Ok(_)))).map(|f| (v, f))
    }
}

/// Exact reserve per byte of fast peak allocated (at least 1).
fn reserve_per_byte(reserve: u64, fast_peak: u64) -> f64 {
    (reserve as f64 / fast_peak.max(1) as f64).max(1.0)
}

/// The largest `v` in `lo..=hi` whose `value(v)` is valid and `ok`, for a `value` that grows
/// with `v` (`ok` true up to some point, false after, `None` counting as not ok); `None` if
/// `lo` is not ok. `target` is roughly where `ok` turns: probes go where the line through
/// the nearest known values crosses it (peaks grow about linearly in batch size, so two or
/// three probes usually do), and to the middle of the bracket whenever two probes in a row
/// fell on the same side, which bounds the probes by about twice a bisection's.
fn largest_by_interpolation(lo: u32, hi: u32, target: f64, value: impl Fn(u32) -> Option<u64>, ok: impl Fn(u64) -> bool) -> Option<u32> {
    if lo > hi {
        return None;
    }
    let is_ok = |y: Option<u64>| y.is_some_and(&ok);
    let y = value(lo);
    if !is_ok(y) {
        return None;
    }
    // Positions as u64: `bad` starts one past `hi`.
    let (mut good, mut good_y) = (lo as u64, y.unwrap_or(0) as f64);
    let mut below: Option<(u64, f64)> = None; // the good point before `good`, for extrapolating
    let (mut bad, mut bad_y) = (hi as u64 + 1, None::<f64>);
    let mut last_side = None;
    let mut same_side = false;
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        let line = |(x0, y0): (u64, f64), (x1, y1): (u64, f64)| {
            let slope = (y1 - y0) / (x1 as f64 - x0 as f64);
            (slope > 0.0).then(|| x0 as f64 + (target - y0) / slope)
        };
        let guess = if same_side {
            None
        } else {
            match bad_y {
                Some(by) => line((good, good_y), (bad, by)),
                // No value above: extend the line through the last two good points, or, with
                // one, assume the value is proportional to the setting.
                None => below.map_or_else(|| (good_y > 0.0).then(|| good as f64 * target / good_y), |b| line(b, (good, good_y))),
            }
        };
        let probe = match guess {
            Some(g) if g.is_finite() => (g.max(0.0) as u64).clamp(good + 1, bad - 1),
            _ => mid,
        };
        let y = value(probe as u32);
        let side = is_ok(y);
        same_side = last_side == Some(side);
        last_side = Some(side);
        if side {
            below = Some((good, good_y));
            (good, good_y) = (probe, y.unwrap_or(0) as f64);
        } else {
            (bad, bad_y) = (probe, y.map(|y| y as f64));
        }
    }
    Some(good as u32)
}

/// The fast simulation's highest allocated peak over the windows.
fn fast_peak(cfg: &Config, gpu: &Gpu) -> u64 {
    let s = simulate_fast_on(cfg, gpu);
    windows(&s).iter().map(|&(_, p)| p(&s).bytes).max().unwrap_or(0)
}

/// The largest micro-batch (everything else unchanged) whose every window fits, or `None`
/// if even batch 1 does not.
pub fn largest_micro_batch(cfg: &Config, gpu: &Gpu, other_usage: u64) -> Option<u32> {
    largest_micro_batch_given(cfg, gpu, other_usage, need_exact(cfg, gpu)?)
}

/// [`largest_micro_batch`] when the config's exact need (nvidia-smi bytes, as [`plan`]
/// reports it) is known, as it is in a plan.
pub fn largest_micro_batch_given(cfg: &Config, gpu: &Gpu, other_usage: u64, need: u64) -> Option<u32> {
    largest_micro_batch_with_need(cfg, gpu, other_usage, need).map(|(b, _)| b)
}

/// [`largest_micro_batch_given`] with that batch's exact need (nvidia-smi bytes).
fn largest_micro_batch_with_need(cfg: &Config, gpu: &Gpu, other_usage: u64, need: u64) -> Option<(u32, u64)> {
    let search = Search::calibrated(cfg, gpu, other_usage, need);
    search.largest(1, crate::config::MAX_BATCH, Some(cfg.batch_size), &|b| Config { batch_size: b, ..cfg.clone() })
}

/// What a plan's largest-batch search simulated, kept for the next plan of the same config at
/// another batch size: dragging the batch slider changes the config but not its largest batch,
/// whose search is most of a plan's work (the page keeps one of these across inputs). Every
/// entry is a pure function of the config less its batch size, the card, the room and the batch,
/// so a plan that finds its checks here is the plan a fresh search gives. It holds one config at
/// a time: a plan of any other setting starts it afresh.
#[derive(Clone, Debug, Default)]
pub struct SearchMemo {
    /// The config with `batch_size` 0, the card and the room the entries belong to.
    key: Option<(Config, Gpu, u64)>,
    /// The search's exact checks by batch, each continued (the plan's search asks that).
    checks: Vec<(u32, ExactFound)>,
    /// Whether a batch keeps fitting past the two simulated iterations ([`largest_lasting`]).
    lasting: Vec<(u32, Lasting)>,
}

impl SearchMemo {
    /// Empties the memo unless it belongs to this config (at any batch), card and room.
    fn keep_for(&mut self, cfg: &Config, gpu: &Gpu, available: u64) {
        let key = (Config { batch_size: 0, ..cfg.clone() }, gpu.clone(), available);
        if self.key.as_ref() != Some(&key) {
            *self = SearchMemo { key: Some(key), ..SearchMemo::default() };
        }
    }
}

/// Computes the whole answer.
pub fn plan(req: &PlanRequest) -> Result<Plan, ConfigError> {
    plan_remembering(req, &mut SearchMemo::default())
}

/// [`plan`], reusing and extending what earlier plans of the same config at other batch sizes
/// simulated in their largest-batch searches. The answer is [`plan`]'s.
pub fn plan_remembering(req: &PlanRequest, memo: &mut SearchMemo) -> Result<Plan, ConfigError> {
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
    let available = primary.usable_bytes.saturating_sub(req.other_usage_bytes);
    // The reserve the card leaves room for, besides the CUDA context.
    let reserve_room = available.saturating_sub(primary.context_bytes);
    let (sim, later_reserve) = sim::simulate_exact_and_later(cfg, &primary.target(), Some(reserve_room));
    let cards = gpus
        .iter()
        .map(|g| {
            let s = if g.cublas_workspace_bytes() == primary.cublas_workspace_bytes() { sim.clone() } else { simulate_on(cfg, g) };
            card_fit(&s, cfg, g, req.other_usage_bytes)
        })
        .collect();
    // The request's own exact need and largest micro-batch, computed once for the fixes too.
    let need = needed(&sim, primary).0;
    // The search continues the batches it finds to fit: the largest one's continuation is
    // asked for below, and goes on from the search's simulation of it.
    memo.keep_for(cfg, primary, available);
    let (checks, lasting_seen) = (RefCell::new(std::mem::take(&mut memo.checks)), RefCell::new(std::mem::take(&mut memo.lasting)));
    let search = Search { with_later: true, memo: Some(&checks), ..Search::calibrated(cfg, primary, req.other_usage_bytes, need) };
    let largest_found =
        search.largest_found(1, crate::config::MAX_BATCH, Some(cfg.batch_size), &|b| Config { batch_size: b, ..cfg.clone() });
    let largest = largest_found.and_then(|(b, found)| found.check.and_then(Result::ok).map(|need| (b, need)));
    // What the search did not simulate is the config's own batch, whose simulation is `sim`.
    let largest_micro_batch_needs = largest_found.map(|(b, found)| {
        debug_assert!(found.needs.is_some() || b == cfg.batch_size, "the search simulated its answer");
        found.needs.unwrap_or_else(|| BatchNeeds::of(&sim, primary))
    });
    let fixes = req.with_fixes.then(|| fixes_given(cfg, primary, req.other_usage_bytes, need, Largest::Known(largest)));
    let largest_lasting_micro_batch = largest_found.and_then(|(b, found)| {
        let known = found.lasting.or_else(|| (b == cfg.batch_size).then(|| lasting(&sim, later_reserve, primary, available)));
        largest_lasting(cfg, primary, available, b, known, &lasting_seen)
    });
    (memo.checks, memo.lasting) = (checks.into_inner(), lasting_seen.into_inner());
    let later = later_reserve.map(|l| {
        let nvidia_smi_bytes = l.reserved_bytes + primary.context_bytes;
        let fits = nvidia_smi_bytes <= available;
        let expandable_fix_bytes = (!fits && !cfg.expandable_segments && need <= available)
            .then(|| {
                let expandable = Config { expandable_segments: true, ..cfg.clone() };
                let (s, later) = sim::simulate_exact_and_later(&expandable, &primary.target(), None);
                let need = needed(&s, primary).0;
                (later.is_none() && need <= available).then_some(need)
            })
            .flatten();
        LaterGrowth {
            expandable_fix_bytes,
            after_release_bytes: l.past_limit.filter(|p| p.recovers).map(|p| after_release(&l, p, primary)),
            iteration: l.iteration,
            in_eval: l.in_eval,
            reserved_bytes: l.reserved_bytes,
            nvidia_smi_bytes,
            fits,
            past_card: l.past_limit,
            source: Source::Estimate,
        }
    });
    let mut notes = notes(cfg, primary);
    if let Some(l) = &later {
        notes.push(later_note(l, primary, available, need, cfg.expandable_segments));
    }
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
        largest_micro_batch: largest.map(|(b, _)| b),
        largest_micro_batch_is_estimate: largest.is_some_and(|(b, _)| need_is_estimate(&notes_of_batch(cfg, primary, b, &notes))),
        largest_micro_batch_needs,
        fixes,
        notes,
        later,
        largest_lasting_micro_batch,
    })
}

/// How a config fares past the two simulated iterations, by [`sim::simulate_exact_and_later`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lasting {
    /// Its windows fit, and so does its reserve from then on (or PyTorch's release of cached
    /// segments makes room where it passes the card: `true`): its need at the worst, in
    /// nvidia-smi bytes.
    Keeps(u64, bool),
    /// Its windows fit, but the reserve passes the card at this iteration (in the eval after
    /// it if `true`) with too little to release: out of memory there.
    RunsOut(u32, bool),
    /// Its windows do not fit, or it is not a valid config.
    DoesNotFit,
}

/// [`Lasting`] from a config's exact simulation and its continuation with the card's limit.
fn lasting(sim: &Simulation, later: Option<sim::LaterReserve>, gpu: &Gpu, available: u64) -> Lasting {
    let need = needed(sim, gpu).0;
    if need > available {
        return Lasting::DoesNotFit;
    }
    let Some(l) = later else { return Lasting::Keeps(need, false) };
    match l.past_limit {
        Some(p) if p.recovers => Lasting::Keeps(need.max(after_release(&l, p, gpu)), true),
        Some(_) => Lasting::RunsOut(l.iteration, l.in_eval),
        // Without a limit (expandable segments: the model releases nothing there).
        None if l.reserved_bytes + gpu.context_bytes <= available => Lasting::Keeps(need.max(l.reserved_bytes + gpu.context_bytes), false),
        None => Lasting::RunsOut(l.iteration, l.in_eval),
    }
}

/// The need (nvidia-smi bytes) once PyTorch has released the cached segments that hold no
/// tensor, where the reserve passed the card and that made room.
fn after_release(l: &sim::LaterReserve, p: sim::PastLimit, gpu: &Gpu) -> u64 {
    l.reserved_bytes.saturating_sub(p.releasable_bytes) + gpu.context_bytes
}

/// [`lasting`] for `cfg` simulated afresh.
fn lasting_of(cfg: &Config, gpu: &Gpu, available: u64) -> Lasting {
    if cfg.validate().is_err() {
        return Lasting::DoesNotFit;
    }
    let room = available.saturating_sub(gpu.context_bytes);
    let (sim, later) = sim::simulate_exact_and_later(cfg, &gpu.target(), Some(room));
    lasting(&sim, later, gpu, available)
}

/// How many splits that fit but run out later a split fix passes before it settles for the
/// largest of them (each further one costs a continued exact simulation).
const SPLITS_RUNNING_OUT_TRIED: usize = 4;

/// A fix's value `found` by a search (the largest from `lo` whose simulated iterations fit),
/// or, where that one runs out of memory later by the allocator model, the largest below it
/// that keeps fitting: galloping down, then bisecting, as [`largest_lasting`] does for the
/// micro-batch. `found` where it keeps fitting or where nothing from `lo` up does (the fix is
/// then marked as running out). The need is the fix's simulated windows' where it is `found`'s,
/// `None` (to be simulated) for a value below it.
fn keeping_fit(
    lo: u32,
    found: (u32, u64),
    make: &dyn Fn(u32) -> Config,
    gpu: &Gpu,
    available: u64,
    seen: &LastingSeen,
) -> (u32, Option<u64>) {
    let (value, need) = found;
    let keeps = |v: u32| matches!(lasting_seen(seen, &make(v), gpu, available), Lasting::Keeps(..));
    if value <= lo || keeps(value) {
        return (value, Some(need));
    }
    match largest_below_keeping(value, lo, keeps) {
        Some(v) => (v, None),
        None => (value, Some(need)),
    }
}

/// The largest value from `lo` up to below `from` (which does not keep fitting) that `keeps`:
/// down from `from` in doubling steps until one keeps (the answer is usually a few percent
/// below), then bisecting between it and the last that did not. The need is not monotone near
/// the card, so the answer keeps fitting but a larger one might too. `None` where none does.
fn largest_below_keeping(from: u32, lo: u32, keeps: impl Fn(u32) -> bool) -> Option<u32> {
    let (mut bad, mut step) = (from, 1u32);
    let good = loop {
        let probe = from.saturating_sub(step).max(lo);
        if keeps(probe) {
            break probe;
        }
        if probe <= lo {
            return None;
        }
        bad = probe;
        step = step.saturating_mul(2);
    };
    largest_where(good, bad - 1, keeps)
}

/// Where the largest micro-batch `largest` runs out of memory after the simulated iterations
/// (`known`: its [`Lasting`], if known), the largest micro-batch below it that keeps fitting:
/// galloping down, then bisecting (the need is not monotone near the card, so the answer keeps
/// fitting but a larger one might too). `None` where `largest` keeps fitting.
/// `seen`: what is known of batches of this config (earlier plans', see [`SearchMemo`]); what
/// this simulates is added to it.
fn largest_lasting(
    cfg: &Config,
    gpu: &Gpu,
    available: u64,
    largest: u32,
    known: Option<Lasting>,
    seen: &RefCell<Vec<(u32, Lasting)>>,
) -> Option<LastingMicroBatch> {
    let lasting_at = |b: u32| {
        let found = seen.borrow().iter().find(|(x, _)| *x == b).map(|(_, l)| *l);
        found.unwrap_or_else(|| {
            let l = lasting_of(&Config { batch_size: b, ..cfg.clone() }, gpu, available);
            seen.borrow_mut().push((b, l));
            l
        })
    };
    let Lasting::RunsOut(iteration, in_eval) = known.unwrap_or_else(|| lasting_at(largest)) else {
        return None;
    };
    let batch = largest_below_keeping(largest, 1, |b| matches!(lasting_at(b), Lasting::Keeps(..)));
    let kept = batch.and_then(|b| match seen.borrow().iter().find(|(x, _)| *x == b) {
        Some((_, Lasting::Keeps(need, frees))) => Some((*need, *frees)),
        _ => None,
    });
    Some(LastingMicroBatch {
        runs_out_at_iteration: iteration,
        runs_out_in_eval: in_eval,
        batch_size: batch,
        needed_bytes: kept.map(|(need, _)| need),
        frees_cached_blocks: kept.is_some_and(|(_, frees)| frees),
        source: Source::Estimate,
    })
}

/// The note on [`LaterGrowth`]: what the model says happens after the measured iterations, and
/// what PyTorch does when that passes the card.
fn later_note(l: &LaterGrowth, gpu: &Gpu, available: u64, need: u64, expandable: bool) -> Note {
    let mib = params::mib_text;
    let when = l.when();
    let outcome = match l.past_card {
        _ if l.fits => format!("That is still within the {} MiB available on the {}.", mib(available), gpu.id),
        Some(sim::PastLimit { releasable_bytes, recovers: true }) => format!(
            "That is past the {} MiB available on the {}: PyTorch then returns the {} MiB of cached segments that hold no \
             tensor and retries, so the run goes on, that step slower, needing ~{} MiB from then on (later steps not \
             simulated).",
            mib(available),
            gpu.id,
            mib(releasable_bytes),
            mib(l.after_release_bytes.unwrap_or(l.nvidia_smi_bytes.saturating_sub(releasable_bytes)))
        ),
        Some(sim::PastLimit { releasable_bytes, recovers: false }) => format!(
            "That is past the {} MiB available on the {}, and the {} MiB of cached segments that hold no tensor, which \
             PyTorch returns before it gives up, are not enough: out of memory at that step.",
            mib(available),
            gpu.id,
            mib(releasable_bytes)
        ),
        None if need > available => format!("The need already does not fit the {}.", gpu.id),
        None => format!("That is past the {} MiB available on the {}.", mib(available), gpu.id),
    };
    let fix = l.expandable_fix_bytes.map_or(String::new(), |b| {
        format!(
            " With expandable_segments:True (PYTORCH_CUDA_ALLOC_CONF) the model needs {} MiB, which fits, and its reserve \
             does not grow.",
            mib(b)
        )
    });
    // The checks past the two iterations ran with the default segments only.
    let (why, checked) = if expandable {
        (
            "a large request finds no free range of that size in the mapped segment, the blocks having shifted since",
            "An estimate: runs past the two iterations were checked only without expandable_segments (README: Accuracy).",
        )
    } else {
        (
            "a large request finds no cached block, the blocks having shifted since",
            "An estimate: on an H200 with PyTorch's reserve capped, runs ran out of memory where the model said in 3 of 4 and \
             the batches it said keep fitting all did, but it also predicts growth in 2 of 16 configs run to iteration 50 whose \
             reserve never grew, both by 394 MiB (README: Accuracy).",
        )
    };
    Note {
        figure: "later_reserve".into(),
        source: Source::Estimate,
        detail: format!(
            "after the two iterations simulated above, the allocator model's reserve grows at {when} to {} MiB (nvidia-smi \
             ~{} MiB): {why}. {outcome}{fix} {checked}",
            mib(l.reserved_bytes),
            mib(l.nvidia_smi_bytes)
        ),
    }
}

/// The largest value in `lo..=hi` for which `ok` holds, assuming `ok` is monotone (true up to
/// some point, false after); `None` if `ok(lo)` is false.
pub(crate) fn largest_where(lo: u32, hi: u32, ok: impl Fn(u32) -> bool) -> Option<u32> {
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
        Some(current) => fixes_given(cfg, gpu, other_usage, current, Largest::Search),
        None => Vec::new(),
    }
}

/// The fixes a run that starts from GPT-2's weights (`init_from = 'gpt2*'`) can take: the
/// checkpoint sets n_layer, n_head, n_embd, vocab_size and bias, so fixes changing those are
/// dropped (a shorter block stays: train.py crops the checkpoint's 1024 positions).
pub fn keeping_pretrained_shape(fixes: Vec<Fix>, cfg: &Config) -> Vec<Fix> {
    let shape = |c: &Config| (c.n_layer, c.n_head, c.n_embd, c.vocab_size, c.bias);
    fixes.into_iter().filter(|f| shape(&f.config) == shape(cfg)).collect()
}

/// [`fixes`] for a plan's config on its first card, reusing what the plan computed (its need
/// and largest micro-batch) instead of simulating them again.
pub fn fixes_of(plan: &Plan, gpu: &Gpu, other_usage: u64) -> Vec<Fix> {
    FixesInSteps::of(plan, gpu, other_usage).finish()
}

/// What a fixes computation knows of the config's largest micro-batch.
enum Largest {
    /// Nothing yet: search for it.
    Search,
    /// The batch, from a plan (its need is simulated again if it is offered as a fix).
    Batch(Option<u32>),
    /// The batch and its exact need.
    Known(Option<(u32, u64)>),
}

/// How many eval batches below the current one the eval-batch fix tries one by one when its
/// search finds nothing (each a simulation that stops early if the batch does not fit).
const EVAL_BATCH_SCAN: u32 = 24;

/// Where a fix that fits is listed: the cheapest kind of change first. Fixes that do not fit
/// follow, the lowest need first.
mod rank {
    /// An environment variable: nothing else changes.
    pub const FREE: u8 = 0;
    /// Mixed precision: faster, and nanoGPT's default.
    pub const FASTER: u8 = 1;
    /// The same work (or within a tenth of its sequences) in micro-batches still large enough
    /// to keep the GPU busy.
    pub const SPLIT: u8 = 2;
    /// Only `estimate_loss` gets slower.
    pub const EVAL_SLOWER: u8 = 3;
    /// A split that also lowers the eval batch: training and `estimate_loss` slower.
    pub const SPLIT_EVAL: u8 = 4;
    /// A compile step at start; the figure is an estimate.
    pub const COMPILE: u8 = 5;
    /// About a third more compute.
    pub const RECOMPUTE: u8 = 6;
    /// Busy micro-batches, but more than a tenth fewer or more sequences per iteration.
    pub const RESIZED: u8 = 7;
    /// Micro-batches so small that each matmul is small (much slower per token).
    pub const TINY_SPLIT: u8 = 8;
    /// Fits by the allocator's packing of one batch size: worth checking on the card.
    pub const PACKING: u8 = 9;
    /// Another split of the same width into heads (or a width a few units off): the model
    /// learns with other heads, but SDPA's fused kernel replaces its math path.
    pub const ALIGNED_HEADS: u8 = 10;
    /// Changes what is measured or learned.
    pub const SHORTER_EVAL: u8 = 11;
    pub const SHORTER_CONTEXT: u8 = 12;
    pub const SMALLER_MODEL: u8 = 13;
}

/// For flash attention that runs SDPA's math path on `gpu` (a head size no fused kernel
/// takes), the nearest config whose heads one does: the same n_embd split into the nearest
/// number of heads that works (the more heads of two as near), else the nearest head size
/// below (above only where none below works) in as many heads. Both searches ask
/// `sim::sdpa_runs_math`, so the kernels' rule lives there alone. None where no math path runs.
fn aligned_heads(cfg: &Config, gpu: &Gpu) -> Option<Config> {
    let target = gpu.target();
    if !sim::sdpa_runs_math(cfg, &target) {
        return None;
    }
    let works = |c: &Config| c.validate().is_ok() && !sim::sdpa_runs_math(c, &target);
    let by_heads = (1..=cfg.n_embd.min(256))
        .filter(|&h| cfg.n_embd.is_multiple_of(h))
        .map(|n_head| Config { n_head, ..cfg.clone() })
        .filter(&works)
        .min_by_key(|c| (c.n_head.abs_diff(cfg.n_head), std::cmp::Reverse(c.n_head)));
    by_heads.or_else(|| {
        let head = cfg.n_embd / cfg.n_head.max(1);
        (1..head).rev().chain(head + 1..=head + 8).map(|hs| Config { n_embd: hs * cfg.n_head, ..cfg.clone() }).find(&works)
    })
}

/// What a smaller eval batch costs: estimate_loss averages `eval_iters` batches of it per
/// split, as many as before (nanoGPT's loop runs `eval_iters` batches whatever their size), so
/// fewer sequences: a noisier estimate, unless eval_iters is raised.
fn smaller_eval_batches(eval_iters: u32, old: u32, new: u32) -> String {
    let as_many = (eval_iters as u64 * old as u64).div_ceil(new.max(1) as u64);
    format!(
        "estimate_loss averages {eval_iters} batches of {new} sequences instead of {old} per split: a noisier estimate \
         (eval_iters = {as_many} averages as many)"
    )
}

/// Fixes that fit in rank order (stable), then those that do not, the lowest need first (sorted
/// inserts: a general sort costs the page kilobytes).
fn ranked(fixes: Vec<(u8, Fix)>) -> Vec<Fix> {
    let mut fit: Vec<(u8, Fix)> = Vec::with_capacity(fixes.len());
    let mut short: Vec<Fix> = Vec::new();
    for (rank, f) in fixes {
        if f.fits {
            let at = fit.partition_point(|(r, _)| *r <= rank);
            fit.insert(at, (rank, f));
        } else {
            let at = short.partition_point(|g| g.needed_bytes <= f.needed_bytes);
            short.insert(at, f);
        }
    }
    fit.into_iter().map(|(_, f)| f).chain(short).collect()
}

/// Which features stock train.py lacks a config uses: an eval batch or eval context other than
/// the training one, activation checkpointing.
fn train_py_changes(c: &Config) -> [bool; 3] {
    [c.eval_batch_size.is_some_and(|e| e != c.batch_size), c.eval_block_size.is_some_and(|t| t != c.block_size), c.activation_checkpointing]
}

/// Fewer tokens than this per micro-batch make each matmul small enough to leave a GPU idle
/// (a rough line: 4096 rows fill the largest cards' SMs several times over).
const BUSY_MICRO_BATCH_TOKENS: u64 = 4096;

/// [`fixes`] when the config's exact need (`current`) is known: [`fixes_by_rank`], each fix
/// that fits continued past the two simulated iterations (see [`RunsOut`]).
fn fixes_given(cfg: &Config, gpu: &Gpu, other_usage: u64, current: u64, largest: Largest) -> Vec<Fix> {
    FixesInSteps::new(Some(FixWork::new(cfg, gpu, other_usage, current, largest)), gpu, other_usage).finish()
}

/// A fixes computation its caller runs a step at a time ([`FixesInSteps::step`]), free to do
/// other work between steps: each is a search, a few exact simulations, or the continuation of
/// one fix that fits, where a whole list can take tens of them. The page runs about 12 ms of
/// steps per task of the browser's event loop, so input and paint never wait for a whole list.
/// The list is [`fixes_of`]'s.
pub struct FixesInSteps {
    /// The kinds of fix still being looked for; `None` once they are ranked into `listed`.
    work: Option<FixWork>,
    gpu: Gpu,
    available: u64,
    listed: Vec<Fix>,
    /// How far into `listed` the fixes that fit have been continued.
    continued: usize,
    /// What the fix searches found of configs past the simulated iterations (see [`FixWork`]).
    lasting: Vec<(Config, Lasting)>,
}

impl FixesInSteps {
    /// [`fixes_of`] in steps.
    pub fn of(plan: &Plan, gpu: &Gpu, other_usage: u64) -> FixesInSteps {
        let work = plan
            .cards
            .first()
            .map(|card| FixWork::new(&plan.config, gpu, other_usage, card.needed_bytes, Largest::Batch(plan.largest_micro_batch)));
        FixesInSteps::new(work, gpu, other_usage)
    }

    fn new(work: Option<FixWork>, gpu: &Gpu, other_usage: u64) -> FixesInSteps {
        let available = gpu.usable_bytes.saturating_sub(other_usage);
        FixesInSteps { work, gpu: gpu.clone(), available, listed: Vec::new(), continued: 0, lasting: Vec::new() }
    }

    /// Runs the next step: the list once the last has run (empty if asked again).
    pub fn step(&mut self) -> Option<Vec<Fix>> {
        let (gpu, available) = (&self.gpu, self.available);
        if let Some(work) = &mut self.work {
            if work.step() {
                if let Some(work) = self.work.take() {
                    self.lasting = work.lasting.take();
                    self.listed = work.ranked();
                }
                for f in self.listed.iter_mut() {
                    f.needed_is_estimate = need_is_estimate(&notes(&f.config, gpu));
                    f.close_call = close_call(available as i64 - f.needed_bytes as i64, f.needed_bytes, f.needed_is_estimate);
                }
            }
            return None;
        }
        let next = self.listed.iter().skip(self.continued).position(|f| f.fits).map(|i| i + self.continued);
        if let Some(i) = next {
            let f = &mut self.listed[i];
            let known = self.lasting.iter().find(|(c, _)| *c == f.config).map(|(_, l)| *l);
            if let Lasting::RunsOut(iteration, in_eval) = known.unwrap_or_else(|| lasting_of(&f.config, gpu, available)) {
                f.runs_out_later = Some(RunsOut { iteration, in_eval, source: Source::Estimate });
            }
            self.continued = i + 1;
            return None;
        }
        // Those that keep fitting first, then those that run out later, then those that do not
        // fit (a stable sort: each group keeps its order). A close call keeps its rank: a fix
        // found by a search (the longest block that fits) is one by design, and "a smaller model
        // as the last resort" must not move above it.
        let mut fixes = std::mem::take(&mut self.listed);
        self.continued = 0;
        fixes.sort_by_key(|f| (!f.fits, f.runs_out_later.is_some()));
        Some(fixes)
    }

    /// Runs every step left: the list.
    pub fn finish(mut self) -> Vec<Fix> {
        loop {
            if let Some(fixes) = self.step() {
                return fixes;
            }
        }
    }
}

/// The kinds of fix [`FixWork::step`] looks for, one per step, cheapest first: 1. expandable
/// segments, 2. a split of the same sequences, the largest micro-batch (for 2b and 5c), 2b. a
/// split close to them, 3. a smaller eval batch, 4. checkpointing, 5. mixed precision, 5b.
/// compile, 5c. a larger micro-batch, 6. a shorter eval context, 7. a shorter block, 7b. heads a
/// fused kernel takes, 8. fewer layers.
const FIX_STEPS: u8 = 13;

/// A fixes computation between its steps: the config and card, what the steps found so far,
/// and what one kind found that a later one uses. Each step is a search or a few exact
/// simulations, so a caller that yields between them (the page) never holds input and paint for
/// a whole list.
struct FixWork {
    cfg: Config,
    gpu: Gpu,
    other_usage: u64,
    /// The config's exact need.
    current: u64,
    largest_known: Largest,
    /// The next step.
    next: u8,
    /// Fixes found, with their rank.
    out: Vec<(u8, Fix)>,
    /// The micro-batch of the split found by step 2, if any (2b offers another only if it is tiny).
    split_batch: Option<u32>,
    /// The largest micro-batch that fits, with its need where a search found it.
    largest: Option<(u32, Option<u64>)>,
    /// Configs continued past the simulated iterations while looking for fixes that keep
    /// fitting, and how they fared: the ranked list's continuation reuses them.
    lasting: LastingSeen,
}

/// Configs with their [`Lasting`], as far as they have been simulated.
type LastingSeen = RefCell<Vec<(Config, Lasting)>>;

/// Whether `cfg`'s simulated iterations fit (its need) and whether it keeps fitting after them,
/// from one exact simulation continued past them; what it found is remembered in `seen`.
fn fits_and_lasts(cfg: &Config, gpu: &Gpu, available: u64, seen: &LastingSeen) -> Option<(u64, bool)> {
    let found = check_exact_needs(cfg, gpu, available, true);
    let Some(Ok(need)) = found.check else { return None };
    if let Some(l) = found.lasting {
        seen.borrow_mut().push((cfg.clone(), l));
    }
    Some((need, !matches!(found.lasting, Some(Lasting::RunsOut(..)))))
}

/// [`lasting_of`], remembered in `seen`.
fn lasting_seen(seen: &LastingSeen, cfg: &Config, gpu: &Gpu, available: u64) -> Lasting {
    let known = seen.borrow().iter().find(|(c, _)| c == cfg).map(|(_, l)| *l);
    known.unwrap_or_else(|| {
        let l = lasting_of(cfg, gpu, available);
        seen.borrow_mut().push((cfg.clone(), l));
        l
    })
}

impl FixWork {
    fn new(cfg: &Config, gpu: &Gpu, other_usage: u64, current: u64, largest_known: Largest) -> FixWork {
        let cfg = cfg.clone();
        let gpu = gpu.clone();
        FixWork {
            cfg,
            gpu,
            other_usage,
            current,
            largest_known,
            next: 0,
            out: Vec::new(),
            split_batch: None,
            largest: None,
            lasting: RefCell::new(Vec::new()),
        }
    }

    /// Runs the next step; `true` once every step has run ([`FixWork::ranked`] is then the list).
    fn step(&mut self) -> bool {
        let step = self.next;
        self.next = self.next.saturating_add(1);
        if step == 0 && self.gpu.no_room(self.other_usage).is_some() {
            // Nothing fits what the card leaves, whatever the config: no fix to offer.
            self.next = FIX_STEPS;
        } else if step == 0 && self.cfg.dtype == Dtype::Bfloat16 && !self.gpu.supports_bf16() {
            // Every fix of such a config takes fp16 first: listed in one step.
            self.out = fixes_bf16_unsupported(&self.cfg, &self.gpu, self.other_usage, self.current);
            self.next = FIX_STEPS;
        } else if step == 0 && self.current <= self.gpu.usable_bytes.saturating_sub(self.other_usage) {
            self.next = FIX_STEPS;
        } else if step < FIX_STEPS {
            fix_step(self, step);
        }
        self.next >= FIX_STEPS
    }

    /// The fixes found, ranked: those that fit by kind, cheapest first, then those that do not
    /// by need.
    fn ranked(self) -> Vec<Fix> {
        ranked(self.out)
    }
}

/// The fixes by rank: those that fit by kind, cheapest first, then those that do not by need.
fn fixes_by_rank(cfg: &Config, gpu: &Gpu, other_usage: u64, current: u64, largest: Largest) -> Vec<Fix> {
    let mut work = FixWork::new(cfg, gpu, other_usage, current, largest);
    while !work.step() {}
    work.ranked()
}

/// The fixes of a bf16 config on a card without bf16: fp16 autocast (same memory) is part of
/// every fix, since a fix that keeps bf16 fixes nothing; each title says so. All of rank 0, the
/// fp16 list's own order kept among those that fit.
fn fixes_bf16_unsupported(cfg: &Config, gpu: &Gpu, other_usage: u64, current: u64) -> Vec<(u8, Fix)> {
    let available = gpu.usable_bytes.saturating_sub(other_usage);

    // No bf16 hardware on this card (PyTorch emulates it, slowly, with kernels not modelled):
    // fp16 autocast (same memory) is part of every fix, since a fix that keeps bf16 is not
    // planned either; each title says so.
    let fp16 = Config { dtype: Dtype::Float16, ..cfg.clone() };
    let need = need_exact(&fp16, gpu).unwrap_or(current);
    let dtype_fix = Fix {
        title: format!("dtype = 'float16' ({} has no bf16)", gpu.name),
        // The tensors are bf16's sizes; the need is fp16's own simulation, whose reserve can
        // differ (where the allocator places them).
        cost: if cfg.eval_only {
            "fp16 in place of bf16 (an evaluation needs no loss scaling); its tensors take what bf16's would".into()
        } else {
            "fp16 needs loss scaling (nanoGPT's GradScaler does it); its tensors take what bf16's would".into()
        },
        needed_bytes: need,
        fits: need <= available,
        config: fp16.clone(),
        stock_nanogpt: true,
        runs_out_later: None,
        needed_is_estimate: false,
        close_call: false,
    };
    let mut all = vec![(0, dtype_fix)];
    if need > available {
        // Already ranked: keep their order among those that fit.
        for f in fixes_by_rank(&fp16, gpu, other_usage, need, Largest::Search) {
            let title = format!("dtype = 'float16', {}", f.title);
            all.push((0, Fix { title, ..f }));
        }
    }
    all
}

/// Step `step` of a fixes computation (see [`FIX_STEPS`] for the kinds, in order).
fn fix_step(work: &mut FixWork, step: u8) {
    let FixWork { cfg, gpu, other_usage, current, largest_known, out, split_batch, largest, lasting, .. } = work;
    let lasting = &*lasting;
    let (cfg, gpu, other_usage, current) = (&*cfg, &*gpu, *other_usage, *current);
    let available = gpu.usable_bytes.saturating_sub(other_usage);
    let search = Search::calibrated(cfg, gpu, other_usage, current);
    // `need`: the fix's exact need where a search has simulated it already.
    let mut push = |rank: u8, title: String, cost: String, config: Config, need: Option<u64>| {
        if config == *cfg {
            return;
        }
        // train.py as is runs a fix unless it uses a feature stock train.py lacks and the config
        // does not use already (whoever runs that has the change).
        let stock = train_py_changes(&config).into_iter().zip(train_py_changes(cfg)).all(|(fix, base)| !fix || base);
        if let Some(n) = need.or_else(|| need_exact(&config, gpu)) {
            if n < current {
                out.push((
                    rank,
                    Fix {
                        title,
                        cost,
                        needed_bytes: n,
                        fits: n <= available,
                        config,
                        stock_nanogpt: stock,
                        runs_out_later: None,
                        needed_is_estimate: false,
                        close_call: false,
                    },
                ));
            }
        }
    };
    // Shared by the splits (2 and 2b) and the costs of others.
    let tokens = cfg.batch_size as u64 * cfg.gradient_accumulation_steps as u64;
    // Whether a micro-batch still keeps a GPU busy (or is not much smaller than the config's).
    let busy = |b: u32| b as u64 * cfg.block_size as u64 >= BUSY_MICRO_BATCH_TOKENS || b * 4 >= cfg.batch_size;
    let split_title = |c: &Config| {
        let eval = match c.eval_batch_size {
            Some(e) if c.eval_batch_size != cfg.eval_batch_size => format!(", eval_batch_size = {e}"),
            _ => String::new(),
        };
        let accumulation = match c.gradient_accumulation_steps {
            ga if ga != cfg.gradient_accumulation_steps => format!(", gradient_accumulation_steps = {ga}"),
            _ => String::new(),
        };
        format!("batch_size = {}{accumulation}{eval}", c.batch_size)
    };
    let split_cost = |c: &Config| {
        let b = c.batch_size;
        let steps_kept = c.gradient_accumulation_steps == cfg.gradient_accumulation_steps;
        let sequences = c.batch_size as u64 * c.gradient_accumulation_steps as u64;
        let same = if sequences == tokens {
            format!("same {} sequences per iteration", params::thousands(tokens))
        } else {
            // Offered when no split keeping the number fits and keeps a GPU busy (491 only
            // splits into 1 x 491).
            format!(
                "{} sequences per iteration instead of {} (the optimizer's batch changes)",
                params::thousands(sequences),
                params::thousands(tokens)
            )
        };
        let idle = "matmuls this small leave much of a GPU idle (not measured here: an iteration may take several times longer)";
        let training = if steps_kept && busy(b) {
            format!("{same}, in micro-batches of {b} instead of {}, as many micro-steps", cfg.batch_size)
        } else if steps_kept {
            format!(
                "{same}, in micro-batches of {b} instead of {} ({} tokens each), as many micro-steps: {idle}",
                cfg.batch_size,
                params::thousands(b as u64 * cfg.block_size as u64)
            )
        } else if busy(b) {
            format!("{same}, in micro-batches of {b}: more, smaller matmuls (slower per token)")
        } else {
            format!(
                "{same}, {} micro-steps of {} tokens each: {idle}",
                c.gradient_accumulation_steps,
                params::thousands(b as u64 * cfg.block_size as u64)
            )
        };
        // The eval batch lowered with it (set above the new micro-batch): estimate_loss slows too.
        match (c.eval_batch_size, cfg.eval_batch_size) {
            (Some(new), Some(old)) if new != old => {
                format!("{training}; {}", smaller_eval_batches(cfg.eval_iters, old, new))
            }
            _ => training,
        }
    };
    match step {
        0 if !cfg.expandable_segments => {
            // 1. expandable_segments, free: the allocator keeps reserved close to allocated.
            push(rank::FREE, EXPANDABLE_TITLE.into(), EXPANDABLE_COST.into(), Config { expandable_segments: true, ..cfg.clone() }, None);
        }
        // An eval-only run takes no step: no split keeps anything (its fix is step 3's batch).
        1 if !cfg.eval_only => {
            // 2. Same tokens per iteration in smaller micro-batches: B' divides B*GA. An eval batch set
            // above B' is lowered with it when that is what it takes (the eval batch is then the worst).
            let split = |b: u32, eval_batch: Option<u32>| {
                let ga = tokens / b as u64;
                (ga <= crate::config::MAX_ACCUM as u64).then(|| Config {
                    batch_size: b,
                    gradient_accumulation_steps: ga as u32,
                    eval_batch_size: eval_batch,
                    ..cfg.clone()
                })
            };
            let divisors: Vec<u32> = (1..cfg.batch_size).rev().filter(|b| tokens.is_multiple_of(*b as u64)).collect();
            // The largest split that fits and keeps fitting past the simulated iterations; where
            // the first few that fit all run out later, the largest of them (marked so).
            let first_fitting = |divisors: &mut dyn Iterator<Item = &u32>, eval_of: &dyn Fn(u32) -> Option<u32>| {
                let (mut running_out, mut passed) = (None, 0);
                for c in divisors.map_while(|&b| split(b, eval_of(b))) {
                    if let Some((need, keeps)) = fits_and_lasts(&c, gpu, available, lasting) {
                        if keeps {
                            return Some((c, need));
                        }
                        running_out.get_or_insert((c, need));
                        passed += 1;
                        if passed >= SPLITS_RUNNING_OUT_TRIED {
                            break;
                        }
                    }
                }
                running_out
            };
            let split_fix = first_fitting(&mut divisors.iter(), &|_| cfg.eval_batch_size).or_else(|| {
                // Micro-batches at or above the eval batch gave the same configs as above.
                let e = cfg.eval_batch_size?;
                first_fitting(&mut divisors.iter().filter(|&&b| b < e), &|b| Some(e.min(b)))
            });
            *split_batch = split_fix.as_ref().map(|(c, _)| c.batch_size);
            if let Some((c, need)) = split_fix {
                let rank = match (busy(c.batch_size), c.eval_batch_size != cfg.eval_batch_size) {
                    // Training and estimate_loss both slower: after a fix that slows only the latter.
                    (true, true) => rank::SPLIT_EVAL,
                    (true, false) => rank::SPLIT,
                    (false, _) => rank::TINY_SPLIT,
                };
                push(rank, split_title(&c), split_cost(&c), c, Some(need));
            }
        }
        2 => {
            // The largest micro-batch that fits (searched once, for 2b and 5c).
            *largest = match *largest_known {
                Largest::Search => largest_micro_batch_with_need(cfg, gpu, other_usage, current).map(|(b, n)| (b, Some(n))),
                Largest::Batch(b) => b.map(|b| (b, None)),
                Largest::Known(known) => known.map(|(b, n)| (b, Some(n))),
            };
        }
        3 if cfg.eval_only => {
            // An eval-only run evaluates in batches of batch_size (unless it sets an eval batch,
            // step 4's): the largest that fits, and the eval_iters that average as many.
            if let Some((b, need)) = largest.filter(|(b, _)| *b < cfg.batch_size && cfg.eval_batch_size.is_none()) {
                push(
                    rank::EVAL_SLOWER,
                    format!("batch_size = {b}"),
                    smaller_eval_batches(cfg.eval_iters, cfg.batch_size, b),
                    Config { batch_size: b, ..cfg.clone() },
                    need,
                );
            }
        }
        3 => {
            let (split_batch, largest) = (*split_batch, *largest);
            // 2b. When no divisor of B*GA fits and keeps the GPU busy (B*GA = 491 divides only into
            // 1 x 491), the split that fits closest to B*GA sequences per iteration.
            let near = largest
                .map(|(b, _)| b)
                .filter(|&b| b < cfg.batch_size && split_batch.is_none_or(|s| !busy(s) && b >= 2 * s))
                .and_then(|b_kept| {
                    // Candidates (micro-batch, accumulation): the largest micro-batch at the config's
                    // accumulation when that is 1; with accumulation, gradients stay resident between
                    // micro-steps, so micro-batches up to the largest that fits with two (the tensors are
                    // the same for any accumulation from 2 on, their placement nearly so; where the search
                    // finds none, the need is not monotone there, and up to `b_kept`, each checked
                    // below). Every accumulation
                    // from the one that largest batch falls just short at, each with B*GA rounded to
                    // its nearest multiple, while the micro-batches stay busy.
                    let mut candidates: Vec<(u32, u64)> = Vec::new();
                    let b_max = if cfg.gradient_accumulation_steps == 1 {
                        candidates.push((b_kept, 1));
                        let with_accumulation = |b: u32| Config { batch_size: b, gradient_accumulation_steps: 2, ..cfg.clone() };
                        search.largest(1, b_kept, None, &with_accumulation).map_or(b_kept, |(b, _)| b)
                    } else {
                        b_kept
                    };
                    let first = (tokens / b_max as u64).max(2);
                    for ga in (first..=crate::config::MAX_ACCUM as u64).take(4096) {
                        let b = ((tokens as f64 / ga as f64).round() as u64).clamp(1, b_max as u64) as u32;
                        if !busy(b) {
                            break;
                        }
                        candidates.push((b, ga));
                        // The allocator can place an odd number of micro-steps' logits differently from
                        // two (see `sim::Run::iteration`), so `b_max`, found at two, may not fit at
                        // `ga`: the micro-batch below it too.
                        if b > 1 && busy(b - 1) {
                            candidates.push((b - 1, ga));
                        }
                    }
                    // The fewest sequences off (counted in whole percent: 3 of 3,027 off in 36 micro-steps
                    // beats 1 off in 89), then the largest micro-batch; the first that fits, of the best
                    // few (picked one by one: a sort costs the page size).
                    let key = |&(b, ga): &(u32, u64)| ((b as u64 * ga).abs_diff(tokens) * 100 / tokens, u32::MAX - b);
                    // One that keeps fitting past the simulated iterations first; where all of
                    // them that fit run out later, the first of those (marked so).
                    let mut running_out = None;
                    for _ in 0..8 {
                        let Some(at) = (0..candidates.len()).min_by_key(|&i| key(&candidates[i])) else { break };
                        let (b, ga) = candidates.swap_remove(at);
                        let c = Config { batch_size: b, gradient_accumulation_steps: ga as u32, ..cfg.clone() };
                        if let Some((need, keeps)) = fits_and_lasts(&c, gpu, available, lasting) {
                            if keeps {
                                return Some((c, need));
                            }
                            running_out.get_or_insert((c, need));
                        }
                    }
                    running_out
                });
            if let Some((c, need)) = near {
                let (b, ga) = (c.batch_size, c.gradient_accumulation_steps);
                let sequences = b as u64 * ga as u64;
                // Within a tenth of the sequences the optimizer's batch hardly changes.
                let close = sequences.abs_diff(tokens) * 10 <= tokens;
                let rank = match (close, busy(b)) {
                    (true, true) => rank::SPLIT,
                    (false, true) => rank::RESIZED,
                    (_, false) => rank::TINY_SPLIT,
                };
                push(rank, split_title(&c), split_cost(&c), c, Some(need));
            }
        }
        // An eval-only run's eval batch is its batch_size (step 3), which stock train.py takes,
        // unless it sets one of its own.
        4 if !cfg.eval_only || cfg.eval_batch_size.is_some() => {
            // 3. A smaller eval batch (when evaluation is what does not fit).
            // The need is far from monotone in the eval batch: an eval batch near the training one
            // reuses the blocks training left cached, a smaller one needs blocks of new sizes, so
            // batch 8 with eval batch 7-9 fits a 12 GB card where eval batches 1-6 do not. When the
            // search finds nothing (eval batch 1 does not fit), the batches just below are tried.
            let with_eval_batch = |e: u32| Config { eval_batch_size: Some(e), ..cfg.clone() };
            let below = cfg.eval_batch().saturating_sub(1);
            let fits_at = |e: u32| check_exact(&with_eval_batch(e), gpu, available).and_then(Result::ok).map(|need| (e, need));
            let mut eval_fix = search
                .largest(1, below, None, &with_eval_batch)
                .or_else(|| (below.saturating_sub(EVAL_BATCH_SCAN - 1).max(1)..=below).rev().find_map(fits_at));
            // The training micro-batch and its neighbours, where eval reuses training's blocks, when
            // above what was found (eval batch 64 with batch 8: the scan below 64 finds nothing).
            let b = cfg.batch_size;
            let near: Vec<u32> = [b.saturating_add(1), b, b.saturating_sub(1)].into_iter().filter(|e| (1..=below).contains(e)).collect();
            if let Some(better) = near.into_iter().filter(|e| eval_fix.is_none_or(|(f, _)| *e > f)).find_map(fits_at) {
                eval_fix = Some(better);
            }
            if let Some((eb, need)) = eval_fix.map(|found| keeping_fit(1, found, &with_eval_batch, gpu, available, lasting)) {
                push(
                    rank::EVAL_SLOWER,
                    format!("eval_batch_size = {eb}"),
                    if eb == cfg.batch_size {
                        format!(
                            "{}: the training batch, as stock train.py does",
                            smaller_eval_batches(cfg.eval_iters, cfg.eval_batch(), eb)
                        )
                    } else {
                        format!(
                            "{}; train.py needs an eval_batch_size option (vramfit train has one)",
                            smaller_eval_batches(cfg.eval_iters, cfg.eval_batch(), eb)
                        )
                    },
                    with_eval_batch(eb),
                    need,
                );
            }
        }
        5 if !cfg.activation_checkpointing => {
            // 4. Activation checkpointing: keep only each block's input, recompute in backward.
            push(
                rank::RECOMPUTE,
                "activation checkpointing per block".into(),
                "one extra forward of every block per micro-step (~30% more compute); train.py needs torch.utils.checkpoint around each \
                 block (vramfit train has it)"
                    .into(),
                Config { activation_checkpointing: true, ..cfg.clone() },
                None,
            );
        }
        6 if cfg.dtype == Dtype::Float32 => {
            // 5. Mixed precision when running pure fp32.
            let dtype = if gpu.supports_bf16() { Dtype::Bfloat16 } else { Dtype::Float16 };
            push(
                rank::FASTER,
                format!("dtype = '{}'", dtype.name()),
                "mixed precision: matmul outputs and logits in 16 bits (the residual stream and layer norms stay fp32), fp32 weights kept; float16 adds GradScaler's loss scaling".into(),
                Config { dtype, ..cfg.clone() },
                None,
            );
        }
        7 if !cfg.compile => {
            // 5b. torch.compile: fused blocks save less and the loss keeps no fp32 copy of the logits.
            push(
                rank::COMPILE,
                "compile = True".into(),
                match cfg.attention {
                    crate::Attention::Flash => "a minute or so of compilation at start; needs Triton (Linux or WSL). The new figure is an \
                                            estimate: the compile model's training steps were 2.8% under to 25.6% over 80 compiled \
                                            flash-attention runs measured on an H100 and an H200"
                        .into(),
                    // Manual attention's (B,H,T,T) tensors are modelled too: 19 compiled configs
                    // measured on an H200.
                    crate::Attention::Manual => {
                        "a minute or so of compilation at start; needs Triton (Linux or WSL). The new figure is an \
                                             estimate: the compile model's training steps were 3.6% under to 16.3% over 19 compiled \
                                             manual-attention runs measured on an H200"
                            .into()
                    }
                },
                Config { compile: true, ..cfg.clone() },
                None,
            );
        }
        8 => {
            let largest = *largest;
            // 5c. A larger micro-batch that fits where this one does not: the need is not monotone in
            // the batch size (whether the allocator splits a block depends on its size), so the search's
            // boundary can lie above the current batch.
            if let Some((b, need)) = largest.filter(|(b, _)| *b > cfg.batch_size) {
                push(
                    rank::PACKING,
                    format!("batch_size = {b}"),
                    format!(
                        "{} sequences per iteration instead of {} (no slower per token); it fits only because the caching allocator \
                     packs batch {b}'s blocks into fewer segments than batch {}'s, which the real allocator may not repeat exactly: \
                     check the measured peak",
                        params::thousands(b as u64 * cfg.gradient_accumulation_steps as u64),
                        params::thousands(tokens),
                        cfg.batch_size
                    ),
                    Config { batch_size: b, ..cfg.clone() },
                    need,
                );
            }
        }
        9 => {
            // 6. A shorter eval context (not 1 token: no language model is measured on that).
            let shorter_eval = |t: u32| Config { eval_block_size: Some(t), ..cfg.clone() };
            if let Some((et, need)) = search
                .largest(2, cfg.eval_block().saturating_sub(1), None, &shorter_eval)
                .map(|found| keeping_fit(2, found, &shorter_eval, gpu, available, lasting))
            {
                push(
                    rank::SHORTER_EVAL,
                    format!("eval_block_size = {et}"),
                    "the loss is measured on shorter contexts than training uses (not comparable with other runs)".into(),
                    shorter_eval(et),
                    need,
                );
            }
        }
        10 => {
            // 7. A shorter block for training too (a set eval context above it comes down with it). A
            // block of 1 is no language model: not offered.
            let shorter = |t: u32| Config { block_size: t, eval_block_size: cfg.eval_block_size.map(|e| e.min(t)), ..cfg.clone() };
            if let Some((t, need)) = search
                .largest(2, cfg.block_size.saturating_sub(1), None, &shorter)
                .map(|found| keeping_fit(2, found, &shorter, gpu, available, lasting))
            {
                let eval = match cfg.eval_block_size {
                    Some(e) if e > t => format!(", eval_block_size = {t}"),
                    _ => String::new(),
                };
                // An eval-only run trains nothing: what changes is the context its loss is measured on.
                let cost = if cfg.eval_only {
                    format!(
                        "the loss is measured on {t} tokens of context instead of {} (not comparable with the full context's)",
                        cfg.block_size
                    )
                } else {
                    format!(
                        "the model sees {t} tokens of context instead of {}, and an iteration trains on {} tokens instead of {}",
                        cfg.block_size,
                        params::thousands(tokens * t as u64),
                        params::thousands(cfg.tokens_per_iter())
                    )
                };
                push(rank::SHORTER_CONTEXT, format!("block_size = {t}{eval}"), cost, shorter(t), need);
            }
        }
        11 => {
            // 7b. Heads SDPA's fused kernels take, where its math path keeps (B,H,T,T) matrices.
            if let Some(aligned) = aligned_heads(cfg, gpu) {
                let head = aligned.n_embd / aligned.n_head;
                let (title, what) = if aligned.n_embd == cfg.n_embd {
                    (format!("n_head = {}", aligned.n_head), "the same parameters in other heads".to_string())
                } else {
                    (
                        format!("n_embd = {}", aligned.n_embd),
                        format!(
                            "a model {} wide: {} instead of {} parameters",
                            aligned.n_embd,
                            params::count(&aligned).printed_millions(),
                            params::count(cfg).printed_millions()
                        ),
                    )
                };
                push(
                    rank::ALIGNED_HEADS,
                    title,
                    format!(
                        "{what}; heads of {head}, which scaled_dot_product_attention's fused kernels take, instead of {} (its math path \
                     keeps float32 (B,H,T,T) matrices)",
                        cfg.n_embd / cfg.n_head.max(1)
                    ),
                    aligned,
                    None,
                );
            }
        }
        12 => {
            // 8. Last resort: fewer layers.
            let fewer = |l: u32| Config { n_layer: l, ..cfg.clone() };
            if let Some((l, need)) = search
                .largest(1, cfg.n_layer.saturating_sub(1), None, &fewer)
                .map(|found| keeping_fit(1, found, &fewer, gpu, available, lasting))
            {
                let smaller = fewer(l);
                push(
                    rank::SMALLER_MODEL,
                    format!("n_layer = {l}"),
                    format!(
                        "a smaller model: {} instead of {} parameters",
                        params::count(&smaller).printed_millions(),
                        params::count(cfg).printed_millions()
                    ),
                    smaller,
                    need,
                );
            }
        }
        _ => {}
    }
}

/// What a config's figures on `gpu` rest on: each figure validated, measured or estimated,
/// and why.
pub fn notes(cfg: &Config, gpu: &Gpu) -> Vec<Note> {
    let mut out = vec![Note {
        figure: "peak_allocated_bytes".into(),
        source: Source::Validated,
        detail: "event-level model of PyTorch eager with a block-level caching-allocator model, validated against \
                 torch.cuda.max_memory_allocated() on an H100 and an H200 (torch 2.11; README: Accuracy)"
            .into(),
    }];
    if cfg.attention == crate::Attention::Flash && gpu.compute_capability < (8, 0) {
        // The measured kernels (cuDNN attention, FlashAttention-2) need sm_80 or newer.
        let detail = if sim::sdpa_runs_math(cfg, &gpu.target()) {
            let why = if cfg.dtype == Dtype::Bfloat16 {
                "in bfloat16 (the memory-efficient kernel takes float16 and float32 there, and FlashAttention needs sm_80)".to_string()
            } else {
                format!(
                    "for a head size of {} (the memory-efficient kernel needs a multiple of 8 in float16 there)",
                    cfg.n_embd / cfg.n_head.max(1)
                )
            };
            format!(
                "scaled_dot_product_attention on {} (sm_{}{}) runs its math path {why}, keeping float32 (B,H,T,T) matrices per layer, \
                 modelled as measured on an H200; the kernels' choice on this card was not measured",
                gpu.id, gpu.compute_capability.0, gpu.compute_capability.1
            )
        } else {
            format!(
                "scaled_dot_product_attention on {} (sm_{}{}) runs the memory-efficient kernel, whose saved tensors are taken \
                 to be the measured kernels'; not measured",
                gpu.id, gpu.compute_capability.0, gpu.compute_capability.1
            )
        };
        out.push(Note { figure: "peak_allocated_bytes".into(), source: Source::Estimate, detail });
    }
    let head = cfg.n_embd / cfg.n_head.max(1);
    if cfg.attention == crate::Attention::Flash && !cfg.compile && gpu.compute_capability >= (8, 0) {
        // SDPA's kernels refuse some head sizes (sdp_utils.cpp); measured on the H200
        // (tests/reference/data/cuda-h200-odd-heads-*.json, README: Accuracy).
        if sim::sdpa_runs_math(cfg, &gpu.target()) {
            let rule = if cfg.dtype == crate::Dtype::Float32 {
                "a float32 head size that is not a multiple of 4"
            } else {
                "a bfloat16/float16 head size over 256 that is not a multiple of 8"
            };
            out.push(Note {
                figure: "peak_allocated_bytes".into(),
                source: Source::Validated,
                detail: format!(
                    "no fused attention kernel takes {rule} ({head}), so scaled_dot_product_attention runs its math path: \
                     each layer keeps float32 (B,H,T,T) attention matrices, as manual attention does; modelled op by op and \
                     validated on an H200"
                ),
            });
        } else if cfg.dtype != crate::Dtype::Float32 && head > 256 {
            out.push(Note {
                figure: "peak_allocated_bytes".into(),
                source: Source::Validated,
                detail: format!(
                    "a head size of {head} is over flash attention's 256, so the memory-efficient kernel runs; its tensors are \
                     taken to be flash's, validated within 1% on an H200"
                ),
            });
        }
    }
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
    if cfg.bias && !cfg.compile && gpu.compute_capability != (9, 0) {
        // Measured on the H100 and H200 only (README: Accuracy, the random configs).
        let sms = if gpu.id.starts_with("custom") {
            format!("{} multiprocessors (an RTX 4070's: a custom card's are unknown)", gpu.multiprocessors())
        } else {
            format!("its {} multiprocessors", gpu.multiprocessors())
        };
        out.push(Note {
            figure: "temporaries".into(),
            source: Source::Estimate,
            detail: format!(
                "CUDA's scratch for summing each bias gradient is sized by the card; on {} it is computed from {sms}, measured only on an H100 and an H200",
                gpu.id
            ),
        });
    }
    if gpu.compute_capability != (9, 0) && !cfg.compile && sim::flash_splits_kv(cfg, &gpu.target()) {
        // Measured on the H200 only, where cuDNN runs most heads (README: Accuracy).
        out.push(Note {
            figure: "temporaries".into(),
            source: Source::Estimate,
            detail: format!(
                "flash attention's split-KV buffers, taken while it runs, are sized by the card; on {} they are computed from \
                 {} multiprocessors{}, measured only on an H200",
                gpu.id,
                gpu.multiprocessors(),
                if gpu.id.starts_with("custom") { " (an RTX 4070's: a custom card's are unknown)" } else { "" }
            ),
        });
    }
    out.push(Note {
        figure: "peak_reserved_bytes".into(),
        source: Source::Validated,
        detail: if cfg.expandable_segments {
            "expandable_segments:True: one large segment grown as it is needed (modelled in 2 MiB steps; PyTorch maps 20 MiB \
             pages for the large pool), simulated block by block and validated against max_memory_reserved() on an H100 \
             (8 configs: windows within 6.6%, median 0.5%)"
        } else {
            "the caching allocator's segments, simulated block by block and validated against max_memory_reserved() on an H100 \
             and an H200"
        }
        .into(),
    });
    out.push(Note {
        figure: "nvidia_smi_bytes".into(),
        source: gpu.context_source,
        detail: match gpu.context_source {
            Source::Measured | Source::Validated => {
                format!("reserved plus a CUDA context of {} MiB, measured on this card", gpu.context_bytes / MIB)
            }
            Source::Estimate => format!(
                "reserved plus a CUDA context of {} MiB, as measured on an H100 (torch 2.11, CUDA 13); not measured on {}",
                gpu.context_bytes / MIB,
                gpu.id
            ),
        },
    });
    out.push(Note {
        figure: "usable_bytes".into(),
        source: gpu.usable_source,
        detail: format!(
            "{} offers {:.2} GiB to PyTorch ({})",
            gpu.name,
            gpu.usable_bytes as f64 / (1u64 << 30) as f64,
            match gpu.usable_source {
                Source::Measured if matches!(gpu.id.as_str(), "h100-80gb" | "h200-141gb") => "measured: torch.cuda.mem_get_info()",
                Source::Measured | Source::Validated => "as PyTorch reported it in a public out-of-memory message",
                Source::Estimate => "estimated from the card's size",
            }
        ),
    });
    if cfg.compile {
        out.push(Note {
            figure: "peak_allocated_bytes".into(),
            source: Source::Estimate,
            detail: "compile=True uses a coarse model (bytes saved per element of B*T*C fitted per dtype, autocast's saved weight \
                     casts, three B*T*V tensors at the loss and a fourth where inductor pads an unaligned vocabulary), checked \
                     against 99 compiled configs measured on an H100 and an H200, 56 of them held out: training steps 3.6% under \
                     to 25.6% over, 7 in 8 within 5%; evals within 5% in 7 in 8, but up to 34% under in small-vocabulary \
                     ones; the first compiled call of each graph (the first iteration, the first eval) needs up \
                     to 65% more in small models, where compilation allocates while it runs (README: Accuracy; an estimate)"
                .into(),
        });
        if cfg.attention == crate::Attention::Manual {
            out.push(Note {
                figure: "peak_allocated_bytes".into(),
                source: Source::Estimate,
                detail: "compile=True with manual attention: to the flash-attention model each layer adds the softmax's \
                         (B,H,T,T) output kept for backward in fp32 (with dropout also its mask and the dropped probabilities), \
                         the scores while they are computed and two such matrices in backward (19 compiled manual-attention \
                         configs measured on an H200: training steps 3.6% under to 16.3% over)"
                    .into(),
            });
        }
    }
    if let Some(past) = past_measured_shapes(cfg) {
        out.push(Note {
            figure: "peak_reserved_bytes".into(),
            source: Source::Estimate,
            detail: format!(
                "{past} is past the configs measured on a GPU (up to {MEASURED_MAX_LAYERS} layers, {MEASURED_MAX_EMBD} wide, \
                 block {MEASURED_MAX_BLOCK}, vocab {MEASURED_MAX_VOCAB}, logits of {}, activations of {} (batch x block x \
                 n_embd x n_layer)): the tensors follow the same per-tensor formulas, but where the allocator's segments \
                 fall is extrapolated",
                params::thousands(MEASURED_MAX_LOGITS),
                params::thousands(MEASURED_MAX_ACTIVATIONS)
            ),
        });
    }
    // A figure is listed once: where an estimate note covers it (compile, an unmeasured
    // attention kernel, shapes past the measured ones), its validation does not apply to it.
    let estimated = |out: &[Note], figure: &str| out.iter().any(|n| n.figure == figure && n.source == Source::Estimate);
    // The reserve is the allocated blocks laid out, and nvidia-smi the reserve plus the
    // context: built on an estimate, each is one too (the text report and the page mark them so).
    if estimated(&out, "peak_allocated_bytes") && !estimated(&out, "peak_reserved_bytes") {
        out.push(Note {
            figure: "peak_reserved_bytes".into(),
            source: Source::Estimate,
            detail: "the allocator model laid out over the allocated blocks, which are an estimate here (see their note)".into(),
        });
    }
    if estimated(&out, "peak_reserved_bytes") && !estimated(&out, "nvidia_smi_bytes") {
        if let Some(n) = out.iter_mut().find(|n| n.figure == "nvidia_smi_bytes") {
            n.source = Source::Estimate;
            n.detail = format!("{}; the reserve under it is an estimate here (see its note)", n.detail);
        }
    }
    for figure in ["peak_allocated_bytes", "peak_reserved_bytes"] {
        if estimated(&out, figure) {
            out.retain(|n| !(n.figure == figure && n.source == Source::Validated));
        }
    }
    out
}

/// [`notes`] of `cfg` at micro-batch `batch` (`own` where that is `cfg`'s own).
fn notes_of_batch(cfg: &Config, gpu: &Gpu, batch: u32, own: &[Note]) -> Vec<Note> {
    if batch == cfg.batch_size {
        own.to_vec()
    } else {
        notes(&Config { batch_size: batch, ..cfg.clone() }, gpu)
    }
}

/// The largest shapes, and products of shapes that size the largest terms, among the configs
/// measured eager on a GPU (tests/reference/data/cuda-*.json, compile rows aside; the reference
/// test `the_measured_shapes_are_the_largest_measured_on_a_gpu` holds them to the data): 48
/// layers (GPT-2 1.5B, cuda-h200-big), 2048 wide (wide-100 L3H16C2048, random-wide-mixed-seed27),
/// block 2048 (the wide draws), GPT-2's padded vocabulary; the logits, tokens x vocab (eval
/// batches of 31 x 2048 x 50304, wide-142 of random-wide-seed28), the saved activations, tokens
/// x n_embd x n_layer (GPT-2 350M at 32 sequences of 1024, cuda-h200-big), and manual
/// attention's probabilities, batch x block^2 x n_head x n_layer (eval batches of 8 x 2048 of
/// L12H16C640, wide-034 of random-wide-seed26). Each is checked for the training step and for
/// the eval's batch and block.
pub const MEASURED_MAX_LAYERS: u32 = 48;
pub const MEASURED_MAX_EMBD: u32 = 2048;
pub const MEASURED_MAX_BLOCK: u32 = 2048;
pub const MEASURED_MAX_VOCAB: u32 = 50304;
pub const MEASURED_MAX_LOGITS: u64 = 31 * 2048 * 50304;
pub const MEASURED_MAX_ACTIVATIONS: u64 = 32 * 1024 * 1024 * 24;
pub const MEASURED_MAX_ATTENTION: u64 = 8 * 2048 * 2048 * 16 * 12;

/// What takes `cfg` past the shapes measured on a GPU (the first such setting or product), if
/// anything.
fn past_measured_shapes(cfg: &Config) -> Option<String> {
    let (layers, embd, vocab, heads) = (cfg.n_layer as u64, cfg.n_embd as u64, cfg.vocab_size as u64, cfg.n_head as u64);
    // The larger of the training step's and the eval's (batch, block).
    let shapes = [(cfg.batch_size as u64, cfg.block_size as u64), (cfg.eval_batch() as u64, cfg.eval_block() as u64)];
    let largest = |f: &dyn Fn(u64, u64) -> u64| shapes.iter().map(|&(b, t)| f(b, t)).max().unwrap_or(0);
    let logits = largest(&|b, t| b.saturating_mul(t).saturating_mul(vocab));
    let activations = largest(&|b, t| b.saturating_mul(t).saturating_mul(embd).saturating_mul(layers));
    let attention = match cfg.attention {
        crate::Attention::Manual => largest(&|b, t| b.saturating_mul(t).saturating_mul(t).saturating_mul(heads).saturating_mul(layers)),
        crate::Attention::Flash => 0,
    };
    if cfg.n_layer > MEASURED_MAX_LAYERS {
        Some(format!("n_layer {}", cfg.n_layer))
    } else if cfg.n_embd > MEASURED_MAX_EMBD {
        Some(format!("n_embd {}", cfg.n_embd))
    } else if cfg.block_size > MEASURED_MAX_BLOCK {
        Some(format!("block_size {}", cfg.block_size))
    } else if cfg.vocab_size > MEASURED_MAX_VOCAB {
        Some(format!("vocab_size {}", cfg.vocab_size))
    } else if logits > MEASURED_MAX_LOGITS {
        Some(format!("logits of {} elements (batch x block x vocab)", params::thousands(logits)))
    } else if activations > MEASURED_MAX_ACTIVATIONS {
        Some(format!("activations of {} (batch x block x n_embd x n_layer)", params::thousands(activations)))
    } else if attention > MEASURED_MAX_ATTENTION {
        Some(format!("attention matrices of {} elements (batch x block^2 x n_head x n_layer)", params::thousands(attention)))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::default_gpu;

    fn req(config: Config) -> PlanRequest {
        PlanRequest { config, gpus: vec![], other_usage_bytes: 0, with_fixes: true }
    }

    /// train.py's `eval_only` runs the eval at start and exits: that window alone decides the
    /// fit, the largest batch and the fixes, and nothing follows it (nanoGPT's eval_gpt2*.py).
    #[test]
    fn an_eval_only_run_fits_by_its_eval_at_start() {
        let gpu = Gpu::find("rtx-3060").unwrap();
        let training = Config { batch_size: 16, compile: false, ..Config::default() };
        let evaluating = Config { eval_only: true, ..training.clone() };
        let request = |config: Config| PlanRequest { gpus: vec![gpu.clone()], ..req(config) };
        let trains = plan(&request(training.clone())).unwrap();
        assert!(!trains.cards[0].fits, "training GPT-2 at batch 16 on 12 GB: {:?}", trains.cards[0]);
        let evals = plan(&request(evaluating.clone())).unwrap();
        let card = &evals.cards[0];
        assert!(card.fits && card.worst_window == "eval_at_start", "{card:?}");
        assert_eq!(card.needed_bytes, evals.eval_at_start.nvidia_smi_bytes);
        assert!(card.needed_bytes < evals.train.nvidia_smi_bytes, "the training windows are still simulated and shown");
        assert!(evals.later.is_none() && evals.largest_lasting_micro_batch.is_none());
        assert_eq!(evals.fixes.as_deref(), Some(&[][..]));
        // The largest batch is the eval's: past the training one, and it fits by the same rule.
        let largest = evals.largest_micro_batch.unwrap();
        assert!(largest > 16, "{largest}");
        assert!(fits(&Config { batch_size: largest, ..evaluating.clone() }, &gpu, 0));
        assert!(!fits(&Config { batch_size: largest + 1, ..evaluating.clone() }, &gpu, 0));

        // Too large a batch even to evaluate: the fix is that batch, stock train.py's; no split
        // into micro-steps (no step is taken) and no eval_batch_size (batch_size is the eval's).
        let too_big = Config { batch_size: largest * 2, ..evaluating };
        let fixes = plan(&request(too_big.clone())).unwrap().fixes.unwrap();
        assert_eq!(fixes[0].title, format!("batch_size = {largest}"), "{fixes:#?}");
        assert!(fixes[0].fits && fixes[0].stock_nanogpt && fixes[0].config == Config { batch_size: largest, ..too_big.clone() });
        // With an eval batch of its own (vramfit's setting), that is what evaluates: its fix.
        let own_eval = Config { batch_size: 16, eval_batch_size: Some(largest * 2), ..too_big.clone() };
        let fixes_own = plan(&request(own_eval)).unwrap().fixes.unwrap();
        assert!(fixes_own.iter().any(|f| f.title.starts_with("eval_batch_size = ") && f.fits), "{fixes_own:#?}");
        assert!(!fixes_own.iter().any(|f| f.title.starts_with("batch_size = ")), "{fixes_own:#?}");
        // Its batch chart's needs are the eval's, not training's.
        let needs = evals.largest_micro_batch_needs.unwrap();
        assert_eq!((needs.training_bytes, needs.eval_bytes), (needs.eval_bytes, needs.eval_bytes));
        assert!(needs.eval_bytes <= card.available_bytes);
        assert!(
            fixes.iter().all(|f| f.config.gradient_accumulation_steps == too_big.gradient_accumulation_steps
                && f.config.eval_batch_size.is_none()
                && f.config.eval_only),
            "{fixes:#?}"
        );
    }

    /// A run that fits the two simulated steps and runs out later by the allocator model gets
    /// what keeps it fitting as fixes to apply (the page had only words for them), each of
    /// which plans as fitting without the later growth past the card.
    #[test]
    fn a_run_out_later_gets_fixes_that_keep_it_fitting() {
        let cfg =
            Config { n_head: 6, block_size: 256, batch_size: 33, gradient_accumulation_steps: 4, compile: false, ..Config::default() };
        let p = plan(&req(cfg.clone())).unwrap();
        assert!(p.later_past_card().is_some() && p.fixes.as_deref() == Some(&[][..]), "the case: {:?}", p.later);
        let fixes = p.later_fixes();
        assert!(!fixes.is_empty());
        for f in &fixes {
            assert!(f.fits && f.needed_is_estimate && f.stock_nanogpt, "{f:?}");
            let fixed = plan(&PlanRequest { with_fixes: false, ..req(f.config.clone()) }).unwrap();
            assert!(fixed.cards[0].fits && fixed.later_past_card().is_none(), "{}: {:?}", f.title, fixed.later);
        }
        let batch = fixes.iter().find(|f| f.title.starts_with("batch_size = ")).expect("the batch that keeps fitting");
        assert_eq!(Some(batch.config.batch_size), p.own_lasting_batch());
        // Below the largest that fits, the batch that keeps fitting can be above the config's
        // own, which runs out too (QA: batch 33 and 34 run out, 35 keeps fitting, 36 runs out).
        let not_monotone = Config {
            n_layer: 3,
            n_head: 12,
            n_embd: 1152,
            block_size: 256,
            batch_size: 33,
            gradient_accumulation_steps: 14,
            attention: crate::config::Attention::Manual,
            compile: false,
            ..Config::default()
        };
        let p = plan(&PlanRequest { other_usage_bytes: 1000 << 20, ..req(not_monotone.clone()) }).unwrap();
        let lasting = p.largest_lasting_micro_batch.as_ref().and_then(|l| l.batch_size).expect("the case");
        assert!(p.later_past_card().is_some() && lasting > 33 && p.own_lasting_batch().is_none(), "{:?}", p.largest_lasting_micro_batch);
        let fixes = p.later_fixes();
        let batch = fixes.iter().find(|f| f.title == format!("batch_size = {lasting}")).expect("offered");
        assert!(batch.cost.ends_with("(near the card the need rises and falls with the batch)"), "{}", batch.cost);
        let fixed = plan(&PlanRequest { with_fixes: false, other_usage_bytes: 1000 << 20, ..req(batch.config.clone()) }).unwrap();
        assert!(fixed.cards[0].fits && fixed.later_past_card().is_none(), "{:?}", fixed.later);
        // Where the largest that fits keeps fitting itself (no batch below it is named), it is
        // the fix (review: 1,200 MiB held, batch 33 runs out, 35 keeps fitting).
        let p = plan(&PlanRequest { other_usage_bytes: 1200 << 20, ..req(not_monotone) }).unwrap();
        assert!(p.later_past_card().is_some() && p.largest_lasting_micro_batch.is_none(), "the case: {:?}", p.largest_lasting_micro_batch);
        let largest = p.largest_micro_batch.unwrap();
        let batch = p.later_fixes().into_iter().find(|f| f.title.starts_with("batch_size = ")).expect("the largest offered");
        assert_eq!(batch.config.batch_size, largest);
        let fixed = plan(&PlanRequest { with_fixes: false, other_usage_bytes: 1200 << 20, ..req(batch.config.clone()) }).unwrap();
        assert!(fixed.cards[0].fits && fixed.later_past_card().is_none(), "{:?}", fixed.later);
        assert!(plan(&req(Config { batch_size: 8, ..cfg })).unwrap().later_fixes().is_empty(), "nothing to keep");
    }

    /// A search's simulation that stops at the card's limit asks only the eval at start of an
    /// eval-only run: the windows after it run unlimited, as the plan shows them.
    #[test]
    fn a_limit_stops_an_eval_only_run_only_at_its_eval() {
        let gpu = Gpu::find("rtx-3060").unwrap();
        let cfg = Config { batch_size: 16, compile: false, eval_only: true, ..Config::default() };
        let full = simulate_on(&cfg, &gpu);
        let limit = full.eval_at_start.reserved_bytes;
        assert!(full.train.reserved_bytes > limit);
        assert_eq!(sim::simulate_exact_within(&cfg, &gpu.target(), limit), Ok(full.clone()));
        assert!(sim::simulate_exact_within(&cfg, &gpu.target(), limit - 1).is_err());
        let training = Config { eval_only: false, ..cfg };
        assert!(sim::simulate_exact_within(&training, &gpu.target(), limit).is_err());
    }

    /// What is marked as an estimate follows what was measured: on the H100 (eager) nothing;
    /// elsewhere the card's context and workspace, on a pre-Ampere card also flash attention's
    /// kernel, and with compile the allocated peak.
    #[test]
    fn estimates_are_noted_where_nothing_was_measured() {
        let estimated = |gpu: &str, cfg: Config| {
            let p = plan(&PlanRequest { gpus: vec![Gpu::find(gpu).unwrap()], ..req(cfg) }).unwrap();
            // The later reserve's note is the model's continuation (an estimate everywhere).
            let mut figures: Vec<String> =
                p.notes.into_iter().filter(|n| n.source == Source::Estimate && n.figure != "later_reserve").map(|n| n.figure).collect();
            figures.sort();
            figures.dedup();
            figures
        };
        let eager = Config { compile: false, dtype: crate::Dtype::Float16, ..Config::default() };
        assert!(estimated("h100-80gb", eager.clone()).is_empty());
        // Each figure is either measured or estimated, never listed as both.
        for (gpu, cfg) in [("h100-80gb", Config::default()), ("t4", eager.clone()), ("rtx-4070", eager.clone())] {
            let notes = plan(&PlanRequest { gpus: vec![Gpu::find(gpu).unwrap()], ..req(cfg) }).unwrap().notes;
            for n in notes.iter().filter(|n| n.source != Source::Estimate) {
                assert!(!notes.iter().any(|m| m.figure == n.figure && m.source == Source::Estimate), "{gpu}: {} both", n.figure);
            }
        }
        // An estimated allocated peak makes the reserve laid out over it and nvidia-smi on top
        // of that estimates too.
        let on_allocated = ["nvidia_smi_bytes", "peak_allocated_bytes", "peak_reserved_bytes"];
        assert_eq!(estimated("h100-80gb", Config { compile: true, ..eager.clone() }), on_allocated);
        assert_eq!(estimated("rtx-3060", eager.clone()), ["nvidia_smi_bytes", "usable_bytes", "workspace"]);
        assert_eq!(
            estimated("t4", eager.clone()),
            ["nvidia_smi_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "usable_bytes", "workspace"]
        );
        // Head sizes every fused SDPA kernel refuses run its math path, measured on the H200:
        // no estimate on sm_80 and newer, and a note that says which path runs.
        let odd = Config { n_embd: 390, n_head: 6, dtype: crate::Dtype::Float32, ..eager.clone() };
        let wide_heads = Config { n_embd: 1200, n_head: 4, ..eager.clone() };
        for (cfg, path) in
            [(&odd, "math path"), (&wide_heads, "math path"), (&Config { n_embd: 1280, n_head: 4, ..eager.clone() }, "memory-efficient")]
        {
            assert!(estimated("h100-80gb", cfg.clone()).is_empty(), "{cfg:?}");
            let notes = plan(&PlanRequest { gpus: vec![Gpu::find("rtx-4070").unwrap()], ..req(cfg.clone()) }).unwrap().notes;
            assert!(notes.iter().any(|n| n.source == Source::Validated && n.detail.contains(path)), "{notes:?}");
        }
        assert!(estimated("t4", odd).contains(&"peak_allocated_bytes".to_string()));
        let t4_math = plan(&PlanRequest { gpus: vec![Gpu::find("t4").unwrap()], ..req(Config { n_embd: 780, ..eager.clone() }) }).unwrap();
        assert!(t4_math.notes.iter().any(|n| n.source == Source::Estimate && n.detail.contains("math path")), "{:?}", t4_math.notes);
        // Before sm_80 the memory-efficient kernel takes no bfloat16 (PyTorch's sdp_utils): a
        // bfloat16 run's head of 64 runs the math path there, a float16 one's that kernel (review).
        let on_t4 = |cfg: Config| plan(&PlanRequest { gpus: vec![Gpu::find("t4").unwrap()], ..req(cfg) }).unwrap().notes;
        let bf16 = on_t4(Config { dtype: crate::Dtype::Bfloat16, ..eager.clone() });
        assert!(bf16.iter().any(|n| n.detail.contains("runs its math path in bfloat16")), "{bf16:?}");
        let fp16 = on_t4(Config { dtype: crate::Dtype::Float16, ..eager.clone() });
        assert!(fp16.iter().any(|n| n.detail.contains("runs the memory-efficient kernel")), "{fp16:?}");
        let t4 = Gpu::find("t4").unwrap().target();
        assert!(sim::sdpa_runs_math(&Config { dtype: crate::Dtype::Bfloat16, ..eager.clone() }, &t4));
        assert!(!sim::sdpa_runs_math(&Config { dtype: crate::Dtype::Float16, ..eager.clone() }, &t4));
        // The bias gradients' reduction scratch depends on the card: measured on sm_90 only.
        let biased = Config { bias: true, ..eager.clone() };
        assert!(estimated("h100-80gb", biased.clone()).is_empty());
        assert_eq!(estimated("rtx-3060", biased.clone()), ["nvidia_smi_bytes", "temporaries", "usable_bytes", "workspace"]);
        assert!(!estimated("rtx-3060", Config { compile: true, ..biased }).contains(&"temporaries".to_string()));
        // Checkpointing was measured on the H200 with flash and manual attention, with and
        // without dropout (167 of the random draws' rows have it with dropout or manual).
        let ckpt = Config { activation_checkpointing: true, ..eager.clone() };
        for c in [ckpt.clone(), Config { dropout: 0.1, ..ckpt.clone() }, Config { attention: crate::Attention::Manual, ..ckpt }] {
            assert!(estimated("h100-80gb", c.clone()).is_empty(), "{c:?}");
        }
        // Shapes past the measured ones: the reserve (and so nvidia-smi) is extrapolated. GPT-2
        // 350M at 32 sequences of 1024 has the largest activations measured, GPT-2 1.5B at 8 is
        // within them, 8 sequences of 2048 through 12 layers of 16 heads the largest manual
        // attention matrices, shakespeare-char with an eval batch of 256 many tokens; one more
        // sequence, a deeper or wider model, a longer block, a larger vocabulary or more logits
        // is past them.
        let gpt2_350m = Config { n_layer: 24, n_head: 16, n_embd: 1024, batch_size: 32, ..eager.clone() };
        let gpt2_1_5b = Config { n_layer: 48, n_head: 25, n_embd: 1600, batch_size: 8, ..eager.clone() };
        let manual = Config {
            n_layer: 12,
            n_head: 16,
            n_embd: 640,
            block_size: 2048,
            batch_size: 8,
            attention: crate::Attention::Manual,
            bias: true,
            ..eager.clone()
        };
        let char_eval = Config { dropout: 0.0, eval_batch_size: Some(256), compile: false, ..Config::shakespeare_char() };
        for c in [&gpt2_350m, &gpt2_1_5b, &manual, &char_eval] {
            assert!(estimated("h100-80gb", c.clone()).is_empty(), "{c:?}");
        }
        let small = Config { n_layer: 1, n_head: 1, n_embd: 64, block_size: 2048, batch_size: 1, ..eager.clone() };
        for c in [
            Config { batch_size: 33, ..gpt2_350m.clone() },
            Config { eval_batch_size: Some(33), ..gpt2_350m.clone() },
            Config { n_layer: 49, batch_size: 1, ..gpt2_1_5b.clone() },
            Config { n_embd: 2064, batch_size: 1, ..eager.clone() },
            Config { block_size: 4096, ..small.clone() },
            Config { vocab_size: 50305, ..small.clone() },
            Config { batch_size: 32, ..small.clone() },
            Config { batch_size: 9, ..manual.clone() },
            Config { n_head: 32, ..manual.clone() },
        ] {
            assert_eq!(estimated("h100-80gb", c.clone()), ["nvidia_smi_bytes", "peak_reserved_bytes"], "{c:?}");
        }
        // Manual attention runs on a T4 (no kernel to estimate), but GPT-2 124M's attention
        // matrices at 12 sequences of 2048 are past those measured.
        let t4_manual = Config { attention: crate::Attention::Manual, block_size: 2048, ..eager.clone() };
        assert_eq!(
            estimated("t4", Config { batch_size: 12, ..t4_manual.clone() }),
            ["nvidia_smi_bytes", "peak_reserved_bytes", "usable_bytes", "workspace"]
        );
        assert_eq!(estimated("t4", Config { batch_size: 2, ..t4_manual }), ["nvidia_smi_bytes", "usable_bytes", "workspace"]);
    }

    /// Where SDPA runs its math path, a fix splits the width into heads a fused kernel takes:
    /// other heads of the same width where some exist (bf16, 2 heads of 300: 3 of 200), else
    /// the nearest width below (fp32, 6 heads of 65: 6 of 64); its need drops by the (B,H,T,T)
    /// matrices. Aligned heads get no such fix.
    #[test]
    fn the_math_path_gets_a_fix_with_heads_a_fused_kernel_takes() {
        let base = Config { n_layer: 6, block_size: 1024, vocab_size: 65, compile: false, ..Config::default() };
        let cases = [
            (Config { n_head: 6, n_embd: 390, batch_size: 48, dtype: crate::Dtype::Float32, ..base.clone() }, "n_embd = 384", (6, 384)),
            (Config { n_head: 2, n_embd: 600, batch_size: 64, ..base.clone() }, "n_head = 3", (3, 600)),
        ];
        let gpu = Gpu::find("rtx-4070").unwrap();
        for (cfg, title, (n_head, n_embd)) in cases {
            assert!(sim::sdpa_runs_math(&cfg, &gpu.target()), "{cfg:?}");
            let p = plan(&req(cfg.clone())).unwrap();
            assert!(!p.cards[0].fits, "{cfg:?}");
            let fix = p.fixes.as_deref().unwrap().iter().find(|f| f.title == title).unwrap_or_else(|| panic!("{title}: {:?}", p.fixes));
            assert_eq!((fix.config.n_head, fix.config.n_embd), (n_head, n_embd));
            assert!(!sim::sdpa_runs_math(&fix.config, &gpu.target()));
            // Most of the attention matrices' bytes go: at least one fp32 (B,H,T,T) per layer.
            let bhtt = cfg.batch_size as u64 * cfg.n_head as u64 * 1024 * 1024 * 4;
            assert!(fix.needed_bytes + 6 * bhtt < p.cards[0].needed_bytes, "{fix:?}");
        }
        let aligned = Config { n_head: 6, n_embd: 384, batch_size: 128, dtype: crate::Dtype::Float32, ..base };
        let p = plan(&req(aligned)).unwrap();
        assert!(!p.cards[0].fits);
        assert!(!p.fixes.as_deref().unwrap().iter().any(|f| f.title.starts_with("n_head") || f.title.starts_with("n_embd")));
    }

    #[test]
    fn a_config_that_does_not_fit_gets_fixes_that_do() {
        // GPT-2 124M at micro-batch 64 on a 12 GB card (an OOM report): far too big.
        let cfg = Config { batch_size: 64, gradient_accumulation_steps: 8, ..Config::default() };
        let p = plan(&req(cfg.clone())).unwrap();
        assert!(!p.cards[0].fits);
        assert!(p.cards[0].headroom_bytes < 0);
        assert!(!p.fixes.as_deref().unwrap().is_empty());
        let first = &p.fixes.as_deref().unwrap()[0];
        assert!(first.fits, "{first:?}");
        // The cheapest fix keeps tokens per iteration.
        assert_eq!(first.config.tokens_per_iter(), cfg.tokens_per_iter());
        assert!(first.config.batch_size < 64);
        // Every fix really is what it claims: re-planning its config agrees.
        for f in p.fixes.as_deref().unwrap() {
            let again = plan(&PlanRequest { with_fixes: false, ..req(f.config.clone()) }).unwrap();
            assert_eq!(again.cards[0].needed_bytes, f.needed_bytes);
            assert_eq!(again.cards[0].fits, f.fits);
        }
        // Those that fit come first; those still short follow, the lowest need first.
        let short: Vec<u64> = p.fixes.as_deref().unwrap().iter().skip_while(|f| f.fits).map(|f| f.needed_bytes).collect();
        assert!(p.fixes.as_deref().unwrap().iter().skip_while(|f| f.fits).all(|f| !f.fits));
        assert!(short.windows(2).all(|w| w[0] <= w[1]), "{short:?}");
    }

    /// GPT-2 124M at batch 10 without accumulation on an RTX 4070 with 1,960 MiB taken by other
    /// programs: 10 does not fit but the allocator packs 11 into less. The largest batch is
    /// above the current one, and it is offered as a fix that re-plans as it says.
    #[test]
    fn a_larger_batch_that_fits_is_offered_as_a_fix() {
        let gpu = Gpu::find("rtx-4070").unwrap();
        let cfg = Config { batch_size: 10, gradient_accumulation_steps: 1, ..Config::default() };
        let p = plan(&PlanRequest { gpus: vec![gpu], other_usage_bytes: 1960 << 20, ..req(cfg.clone()) }).unwrap();
        let largest = p.largest_micro_batch.expect("some batch fits");
        assert!(!p.cards[0].fits && largest > 10, "the case this test is about: {largest}, fits {}", p.cards[0].fits);
        let fix = p.fixes.as_deref().unwrap().iter().find(|f| f.config.batch_size == largest).expect("offered");
        assert!(fix.fits && fix.config == Config { batch_size: largest, ..cfg });
    }

    /// Eval batch 16 on a 12 GB card with training batch 8: eval is the worst window, and eval
    /// batches 7 to 9 fit while 1 to 6 do not (smaller blocks than training cached), so a
    /// search from eval batch 1 found nothing and the cheap fix was missing.
    #[test]
    fn an_eval_batch_that_fits_is_found_though_eval_batch_1_does_not() {
        let cfg = Config { batch_size: 8, eval_batch_size: Some(16), compile: false, ..Config::default() };
        let gpu = default_gpu();
        let p = plan(&req(cfg.clone())).unwrap();
        assert!(!p.cards[0].fits && p.cards[0].worst_window == "eval", "the case: {:?}", p.cards[0]);
        assert!(!fits(&Config { eval_batch_size: Some(1), ..cfg.clone() }, &gpu, 0), "the case: eval batch 1 does not fit");
        let fix = p.fixes.as_deref().unwrap().iter().find(|f| f.title.starts_with("eval_batch_size")).expect("an eval batch fix");
        let eb = fix.config.eval_batch_size.unwrap();
        assert!(fix.fits && eb < 16 && fits(&fix.config, &gpu, 0), "{fix:?}");
        assert_eq!(fix.config, Config { eval_batch_size: Some(eb), ..cfg.clone() });
        // Eval batch 64: nothing fits in the 24 below it, but the training batch's neighbourhood does.
        let far = Config { eval_batch_size: Some(64), ..cfg };
        let fixes = plan(&req(far.clone())).unwrap().fixes.unwrap();
        let fix = fixes.iter().find(|f| f.title.starts_with("eval_batch_size")).expect("an eval batch fix from 64");
        assert!(fix.fits && fits(&fix.config, &gpu, 0), "{fix:?}");
    }

    /// The three ways to get fixes (inside a plan, from scratch, and from a plan made without
    /// them, as the page does) reuse different figures and must give the same list, each fix's
    /// need being what re-planning its config says. Cases: a config far too big, the
    /// larger-batch case above, and bf16 on a card without it.
    #[test]
    fn fixes_are_the_same_however_they_are_asked_for() {
        let cases = [
            (Config { batch_size: 64, gradient_accumulation_steps: 8, ..Config::default() }, "rtx-4070", 0),
            (Config::default(), "rtx-3060", 300 << 20),
            (Config { dtype: crate::Dtype::Bfloat16, batch_size: 16, block_size: 512, ..Config::default() }, "t4", 0),
        ];
        for (cfg, card, other) in cases {
            let gpu = Gpu::find(card).unwrap();
            let request = PlanRequest { gpus: vec![gpu.clone()], other_usage_bytes: other, ..req(cfg.clone()) };
            let with = plan(&request).unwrap();
            let without = plan(&PlanRequest { with_fixes: false, ..request }).unwrap();
            assert!(!with.fixes.as_deref().unwrap().is_empty(), "{card}: the case needs fixes");
            assert_eq!(with.fixes.as_deref().unwrap(), fixes(&cfg, &gpu, other), "{card}: plan vs fixes");
            assert_eq!(with.fixes.as_deref().unwrap(), fixes_of(&without, &gpu, other), "{card}: plan vs fixes_of");
            for f in with.fixes.as_deref().unwrap() {
                let again =
                    plan(&PlanRequest { gpus: vec![gpu.clone()], other_usage_bytes: other, with_fixes: false, config: f.config.clone() });
                assert_eq!(again.unwrap().cards[0].needed_bytes, f.needed_bytes, "{card}: {}", f.title);
            }
        }
    }

    #[test]
    fn a_config_that_fits_needs_no_fixes_and_largest_batch_is_tight() {
        let cfg = Config { batch_size: 2, ..Config::default() };
        let p = plan(&req(cfg.clone())).unwrap();
        assert!(p.cards[0].fits);
        assert!(p.fixes.as_deref().unwrap().is_empty());
        let b = p.largest_micro_batch.expect("batch 2 fits, so some batch does");
        let gpu = default_gpu();
        assert!(fits(&Config { batch_size: b, ..cfg.clone() }, &gpu, 0));
        assert!(!fits(&Config { batch_size: b + 1, ..cfg }, &gpu, 0));
    }

    /// The largest batch's needs the plan carries are that batch's own exact figures, whether
    /// the search simulated it (a start above or below it) or it is the config's own batch.
    #[test]
    fn the_largest_batch_carries_its_own_needs() {
        let gpu = default_gpu();
        let base = Config { compile: false, gradient_accumulation_steps: 4, ..Config::default() };
        let largest = plan(&req(base.clone())).unwrap().largest_micro_batch.expect("some batch fits");
        for b in [1, largest - 1, largest, largest + 3] {
            let p = plan(&req(Config { batch_size: b, ..base.clone() })).unwrap();
            assert_eq!(p.largest_micro_batch, Some(largest), "from batch {b}");
            let own = simulate_on(&Config { batch_size: largest, ..base.clone() }, &gpu);
            let needs = p.largest_micro_batch_needs.expect("a largest batch has its needs");
            assert_eq!(needs, BatchNeeds::of(&own, &gpu), "from batch {b}");
            assert_eq!(needs.training_bytes.max(needs.eval_bytes), needed(&own, &gpu).0);
        }
        let none = plan(&req(Config { n_layer: 48, n_head: 25, n_embd: 1600, ..base })).unwrap();
        assert_eq!((none.largest_micro_batch, none.largest_micro_batch_needs), (None, None));
    }

    #[test]
    fn interpolated_search_finds_what_bisection_finds() {
        // Values that grow linearly, quadratically, in steps and with an invalid tail, against
        // thresholds anywhere: the answer is always bisection's, in a bounded number of probes.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for case in 0..3000 {
            let (a, b, c) = (next(1 << 34), 1 + next(1 << 30), next(1 << 12));
            let step = 1 + next(64);
            let invalid_from = if case % 4 == 0 { 1 + next(70_000) } else { u64::MAX };
            let hi = [1, 2, 7, 100, 1024, crate::config::MAX_BATCH][case % 6];
            let probes = std::cell::Cell::new(0u32);
            let value = |v: u32| {
                probes.set(probes.get() + 1);
                let v = v as u64;
                (v < invalid_from).then(|| a + b * (v / step * step) + c * v * v)
            };
            let limit = next(1 << 45);
            let ok = |y: u64| y <= limit;
            // The guess is only a hint: a wrong one costs probes, never the answer.
            let target = if case % 3 == 0 { next(1 << 45) as f64 } else { limit as f64 };
            let expected = largest_where(1, hi, |v| value(v).is_some_and(ok));
            probes.set(0);
            let got = largest_by_interpolation(1, hi, target, value, ok);
            assert_eq!(got, expected, "case {case}: a {a} b {b} c {c} step {step} limit {limit} hi {hi}");
            assert!(probes.get() <= 2 * 17 + 2, "case {case}: {} probes", probes.get());
        }
    }

    #[test]
    fn largest_batch_is_an_exact_boundary_whatever_the_start() {
        // The answer fits and one more does not, by the full exact simulation, and it is the
        // same from any starting batch, on cards and configs where the reserve's share of the
        // need differs (shakespeare-char's need is not monotone near 12 GB: see `Search`).
        let cards = ["rtx-3060", "rtx-4090", "a100-80gb"];
        let configs = [
            Config { batch_size: 4, gradient_accumulation_steps: 1, ..Config::default() },
            // Without dropout, at the default accumulation, as this test has always run it.
            Config { dropout: 0.0, gradient_accumulation_steps: 40, compile: false, ..Config::shakespeare_char() },
            Config {
                dtype: Dtype::Float32,
                attention: crate::config::Attention::Manual,
                compile: false,
                batch_size: 1,
                ..Config::default()
            },
        ];
        for card in cards {
            let gpu = Gpu::find(card).unwrap();
            for other in [0, 3 << 30] {
                let available = gpu.usable_bytes - other;
                for cfg in &configs {
                    let with = |b: u32| Config { batch_size: b, ..cfg.clone() };
                    let b = largest_micro_batch(cfg, &gpu, other).expect("batch 1 fits all of these");
                    let fits_full = |b: u32| need_exact(&with(b), &gpu).is_some_and(|n| n <= available);
                    assert!(fits_full(b), "{card}, {other} B used: {b} does not fit, {cfg:?}");
                    assert!(!fits_full(b + 1), "{card}, {other} B used: {} fits too, {cfg:?}", b + 1);
                    // The early-stopping check agrees with the full need on both sides.
                    assert!(fits_exact(&with(b), &gpu, available) && !fits_exact(&with(b + 1), &gpu, available));
                    for start in [1, b / 2 + 1, b, b + 1, 2 * b + 3] {
                        assert_eq!(largest_micro_batch(&with(start), &gpu, other), Some(b), "{card}, {other} B used, from batch {start}");
                        // The search takes a start that does not fit as a miss without checking
                        // it again: the early-stopping check misses it too.
                        if !fits_full(start) {
                            assert!(!fits_exact(&with(start), &gpu, available), "{card}, {other} B used, {start}");
                        }
                    }
                    // Above the boundary, a start that fits gets the boundary above itself.
                    for start in (b + 2..b + 40).filter(|&s| fits_full(s)).take(2) {
                        let above = largest_micro_batch(&with(start), &gpu, other).unwrap();
                        assert!(
                            above >= start && fits_full(above) && !fits_full(above + 1),
                            "{card}, {other} B used, from {start}: {above}"
                        );
                    }
                }
            }
        }
    }

    /// Shakespeare-char with manual attention and dropout on a T4 fits at batch 330 but not at
    /// 329 or 331 (the allocator's segments make the need non-monotone). From such a batch,
    /// which fits, the search's first guess can lie above and the steps down all miss, so it
    /// bisects below; it once answered a batch smaller than the one the user has and that
    /// fits (found on an RTX 3060 at 270, before the model's CUDA reduction scratch moved it).
    #[test]
    fn a_fitting_start_is_kept_when_the_search_falls_back_to_bisection() {
        let gpu = Gpu::find("t4").unwrap();
        let cfg = Config { attention: crate::config::Attention::Manual, compile: false, ..Config::shakespeare_char() };
        let with = |b: u32| Config { batch_size: b, ..cfg.clone() };
        let fits_full = |b: u32| need_exact(&with(b), &gpu).is_some_and(|n| n <= gpu.usable_bytes);
        assert!(fits_full(330) && !fits_full(329) && !fits_full(331), "the case this test is about");
        assert_eq!(largest_micro_batch(&with(330), &gpu, 0), Some(330));
        // From a batch that does not fit, the boundary below, as from anywhere else.
        let b = largest_micro_batch(&with(331), &gpu, 0).unwrap();
        assert!(b < 329 && fits_full(b) && !fits_full(b + 1), "{b}");
        assert_eq!(largest_micro_batch(&with(1), &gpu, 0), Some(b));
    }

    #[test]
    fn fixes_in_steps_are_the_fixes_a_step_at_a_time() {
        // The page runs these steps a slice of time per task of the browser's event loop: the list must be
        // `fixes_of`'s, in one step per kind of fix and per fix that fits (bf16 on a card
        // without it: its fp16 list in one).
        let eager = Config { compile: false, gradient_accumulation_steps: 5, batch_size: 8, ..Config::default() };
        let cases = [(eager.clone(), "rtx-4070", 0), (Config { batch_size: 16, ..eager.clone() }, "t4", 0), (eager, "rtx-3060", 2 << 30)];
        for (cfg, card, other) in cases {
            let gpu = Gpu::find(card).unwrap();
            let p =
                plan(&PlanRequest { config: cfg.clone(), gpus: vec![gpu.clone()], other_usage_bytes: other, with_fixes: false }).unwrap();
            let all_at_once = fixes_of(&p, &gpu, other);
            assert!(all_at_once.iter().filter(|f| f.fits).count() >= 2, "{card}: a case with fixes that fit");
            let mut steps = FixesInSteps::of(&p, &gpu, other);
            let mut taken = 1;
            let list = loop {
                if let Some(list) = steps.step() {
                    break list;
                }
                taken += 1;
                assert!(taken <= 100, "{card}: no end");
            };
            assert_eq!(list, all_at_once, "{card}");
            let fitting = list.iter().filter(|f| f.fits).count();
            let kinds = if gpu.supports_bf16() { FIX_STEPS as usize } else { 1 };
            assert_eq!(taken, kinds + fitting + 1, "{card}: a step per kind, per fix that fits, and the sort");
            assert_eq!(steps.step(), Some(Vec::new()), "{card}: asked again");
        }
    }

    #[test]
    fn a_remembered_search_answers_as_a_fresh_one() {
        // One memo across plans as the page makes them: the batch moving up and down (starts
        // that fit below the answer, at it, above it where the need is not monotone, and that do
        // not fit), another card, another setting and back. Each plan must be the fresh one.
        let eager_bf16 = |n_layer, n_embd, block_size, vocab_size, ga| Config {
            n_layer,
            n_head: 8,
            n_embd,
            block_size,
            vocab_size,
            gradient_accumulation_steps: ga,
            dtype: Dtype::Bfloat16,
            compile: false,
            ..Config::default()
        };
        let manual_char = Config { attention: crate::config::Attention::Manual, compile: false, ..Config::shakespeare_char() };
        let cases = [
            (Config { compile: false, gradient_accumulation_steps: 5, ..Config::default() }, "rtx-4070", vec![5, 6, 9, 8, 7, 1, 12]),
            // Not monotone on a T4: 330 fits, 329 and 331 do not, and the answer from 330 is 330
            // (`a_fitting_start_is_kept_when_the_search_falls_back_to_bisection`).
            (manual_char, "t4", vec![331, 330, 329, 1, 330, 331]),
            // Its largest batch (120) runs out of memory a few steps later: the search for the
            // largest that keeps fitting is remembered too.
            (eager_bf16(6, 768, 512, 65, 2), "rtx-4070", vec![4, 130, 121, 5, 4]),
            // Nothing fits.
            (Config { n_layer: 48, n_head: 25, n_embd: 1600, compile: false, ..Config::default() }, "rtx-4070", vec![12, 13, 1]),
        ];
        let mut memo = SearchMemo::default();
        for (cfg, card, batches) in &cases {
            let gpu = Gpu::find(card).unwrap();
            // The same room on a Hopper card (a larger cuBLAS workspace), that card with other
            // programs holding 1.5 GB, and a larger card.
            let hopper = Gpu { id: format!("{card}-as-sm90"), compute_capability: (9, 0), ..gpu.clone() };
            for (gpu, other_usage_bytes) in [(gpu, 0), (hopper.clone(), 0), (hopper, 1500 << 20), (Gpu::find("rtx-4090").unwrap(), 0)] {
                for (i, &b) in batches.iter().enumerate() {
                    let request = PlanRequest {
                        config: Config { batch_size: b, ..cfg.clone() },
                        gpus: vec![gpu.clone()],
                        other_usage_bytes,
                        with_fixes: false,
                    };
                    let (checks_before, lasting_before) = (memo.checks.len(), memo.lasting.len());
                    let remembered = plan_remembering(&request, &mut memo).unwrap();
                    assert_eq!(remembered, plan(&request).unwrap(), "{}, {other_usage_bytes} B used, batch {b}, {cfg:?}", gpu.id);
                    // A start that does not fit repeats the earlier searches, but for at most one
                    // batch: an earlier start that did not fit, which its search took as a miss
                    // without simulating it.
                    if i > 0 && remembered.cards[0].needed_bytes > remembered.cards[0].available_bytes {
                        assert!(memo.checks.len() <= checks_before + 1, "{}, batch {b}: simulated again", gpu.id);
                        assert_eq!(memo.lasting.len(), lasting_before, "{}, batch {b}: continued again", gpu.id);
                    }
                    // Where no batch fits, batch 1's fast peak says so: no exact check ran.
                    if remembered.largest_micro_batch.is_none() {
                        assert!(memo.checks.is_empty(), "{}, batch {b}", gpu.id);
                    }
                }
            }
        }
        // Another setting empties it; the answer is still the fresh one.
        let request = PlanRequest { config: Config { n_layer: 11, batch_size: 6, ..cases[0].0.clone() }, ..req(cases[0].0.clone()) };
        let request = PlanRequest { with_fixes: false, ..request };
        assert_eq!(plan_remembering(&request, &mut memo).unwrap(), plan(&request).unwrap());
        assert!(memo.key.as_ref().is_some_and(|k| k.0.n_layer == 11));
    }

    #[test]
    fn a_batch_needs_at_least_its_fast_peak_and_the_context() {
        // The search rules out every batch when batch 1's fast peak and the context pass the
        // room: that needs the exact need to be at least those, whatever the config and card.
        let shapes = [(2, 2, 128, 64, 65), (6, 6, 384, 256, 65), (12, 12, 768, 1024, 50304), (4, 5, 320, 512, 50304)];
        for (n_layer, n_head, n_embd, block_size, vocab_size) in shapes {
            for dtype in [Dtype::Float32, Dtype::Float16, Dtype::Bfloat16] {
                for (attention, compile, checkpoint) in [
                    (crate::config::Attention::Flash, false, false),
                    (crate::config::Attention::Manual, false, true),
                    (crate::config::Attention::Flash, true, false),
                ] {
                    for (card, batch) in [("rtx-3060", 1), ("t4", 3), ("h100-80gb", 8)] {
                        let gpu = Gpu::find(card).unwrap();
                        let cfg = Config {
                            n_layer,
                            n_head,
                            n_embd,
                            block_size,
                            vocab_size,
                            batch_size: batch,
                            dtype,
                            attention,
                            compile,
                            activation_checkpointing: checkpoint,
                            dropout: 0.1,
                            gradient_accumulation_steps: 2,
                            ..Config::default()
                        };
                        let need = need_exact(&cfg, &gpu).unwrap();
                        assert!(need >= fast_peak(&cfg, &gpu) + gpu.context_bytes, "{card}: {need}, {cfg:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn no_batch_fits_from_any_start() {
        // GPT-2 1.5B on a 12 GB card: not even batch 1, whatever batch the config asks for.
        let gpu = Gpu::find("rtx-3060").unwrap();
        let xl = Config { n_layer: 48, n_head: 25, n_embd: 1600, compile: false, ..Config::default() };
        assert!(need_exact(&Config { batch_size: 1, ..xl.clone() }, &gpu).unwrap() > gpu.usable_bytes);
        for start in [1, 2, 12] {
            assert_eq!(largest_micro_batch(&Config { batch_size: start, ..xl.clone() }, &gpu, 0), None, "from batch {start}");
        }
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
        assert!(p.fixes.as_deref().unwrap().iter().any(|f| f.config.dtype == Dtype::Float16 && f.fits));
    }

    /// bf16 on a card without it: every fix includes the switch to fp16 and says so (the
    /// titles once named only the other change, which applied as written still did not run),
    /// and those that fit come first.
    #[test]
    fn fixes_on_a_card_without_bf16_all_name_the_switch_to_fp16() {
        let t4 = Gpu::find("t4").unwrap();
        let cfg = Config { dtype: Dtype::Bfloat16, batch_size: 32, compile: false, ..Config::default() };
        let fixes = fixes(&cfg, &t4, 0);
        assert!(fixes.len() > 2 && fixes[0].fits, "{fixes:#?}");
        assert!(fixes.iter().skip_while(|f| f.fits).all(|f| !f.fits), "{fixes:#?}");
        for f in &fixes {
            assert!(f.title.starts_with("dtype = 'float16'") && f.config.dtype == Dtype::Float16, "{f:?}");
        }
    }

    /// Shakespeare-char at batch 491: 491 is prime, so the only split keeping the sequences is
    /// 491 micro-steps of one sequence. It is offered, but after cheaper fixes, and the largest
    /// micro-batch that fits is offered too, with the sequences it changes.
    #[test]
    fn a_split_into_tiny_micro_batches_ranks_low_and_a_near_one_is_offered() {
        let cfg = Config { batch_size: 491, ..Config::shakespeare_char() };
        let gpu = default_gpu();
        let fixes = fixes(&cfg, &gpu, 0);
        let at = |pred: &dyn Fn(&Fix) -> bool| fixes.iter().position(pred);
        let tiny = at(&|f| f.config.batch_size == 1).expect("the 1 x 491 split");
        let ckpt = at(&|f| f.config.activation_checkpointing).expect("checkpointing");
        assert!(fixes[tiny].fits && ckpt < tiny, "{fixes:#?}");
        assert!(fixes[tiny].cost.contains("491 micro-steps"), "{}", fixes[tiny].cost);
        let largest = largest_micro_batch(&cfg, &gpu, 0).unwrap();
        assert!(largest > 2 && largest < 491, "the case: {largest}");
        // The split that fits closest to 491 sequences with busy micro-batches (246 x 2 = 492
        // here, nearer than the largest batch alone) comes before checkpointing and says what
        // it changes.
        let sequences = |f: &Fix| f.config.batch_size as u64 * f.config.gradient_accumulation_steps as u64;
        let near = at(&|f| {
            f.config.batch_size > 1
                && f.config.batch_size < 491
                && !f.config.activation_checkpointing
                && f.config.block_size == cfg.block_size
                && f.config.n_layer == cfg.n_layer
        })
        .expect("a near split");
        assert!(near < ckpt && fixes[near].fits, "{fixes:#?}");
        assert!(sequences(&fixes[near]).abs_diff(491) <= 491 - largest as u64, "{:?}", fixes[near]);
        assert!(
            fixes[near].cost.contains(&format!("{} sequences per iteration instead of 491", sequences(&fixes[near]))),
            "{}",
            fixes[near].cost
        );
        // On a 6 GiB card the largest batch at this accumulation (1) is under two thirds of 491,
        // so the near fix accumulates, which keeps gradients resident: it is searched with that
        // and fits (it was offered at the batch found without, and did not), and it is the split
        // closest to 491 sequences, not the largest batch (199 x 2 = 398 once; 164 x 3 = 492).
        let small = Gpu::find("custom-6").unwrap();
        let fixes = super::fixes(&cfg, &small, 0);
        let near = fixes.iter().position(|f| f.config.batch_size > 1 && f.config.gradient_accumulation_steps >= 2).expect("a near fix");
        let sequences = |f: &Fix| f.config.batch_size as u64 * f.config.gradient_accumulation_steps as u64;
        assert!(fixes[near].fits && sequences(&fixes[near]).abs_diff(491) <= 2, "{:?}", fixes[near]);
        let ckpt = fixes.iter().position(|f| f.config.activation_checkpointing).expect("checkpointing");
        assert!(near < ckpt, "{fixes:#?}");
        // Kept at one micro-step (on a 12.8 GiB card 488 sequences are within a percent of
        // 491), the cost says no more matmuls are run, and the title names only the batch.
        let kept_card = Gpu::find("custom-12.8").unwrap();
        let kept_fixes = super::fixes(&cfg, &kept_card, 0);
        let kept = kept_fixes.iter().find(|f| f.config.gradient_accumulation_steps == 1 && f.config.batch_size > 1).expect("488 x 1");
        assert!(kept.cost.contains("as many micro-steps") && !kept.cost.contains("slower"), "{}", kept.cost);
        assert_eq!(kept.title, format!("batch_size = {}", kept.config.batch_size));
        // The accumulation just below where the largest batch falls short counts too: 41
        // sequences on a small card were offered as 15 x 1 (15 sequences) where 13 x 3 fitted;
        // since three micro-steps are simulated as three, 13 x 3 does not fit and 12 x 3 (a
        // micro-batch below the largest found at two) is offered, not 15 x 1.
        let wide = Config {
            n_layer: 12,
            n_head: 12,
            n_embd: 768,
            block_size: 256,
            vocab_size: 50257,
            bias: true,
            batch_size: 41,
            gradient_accumulation_steps: 1,
            eval_block_size: Some(32),
            ..Config::default()
        };
        let fixes = super::fixes(&wide, &small, 300 << 20);
        let near = fixes.iter().find(|f| f.config.batch_size > 1 && f.config.batch_size < 41).expect("a near split");
        let largest_alone = largest_micro_batch(&wide, &small, 300 << 20).expect("a batch fits");
        assert!(near.fits && near.config.gradient_accumulation_steps >= 2, "{near:?}");
        assert!(sequences(near).abs_diff(41) * 8 <= 41 && sequences(near) > largest_alone as u64 * 2, "{near:?}, largest {largest_alone}");
        // Beside a split that keeps the sequences and the GPU busy, none is offered.
        let cfg = Config { batch_size: 33, gradient_accumulation_steps: 1, compile: false, ..Config::default() };
        let fixes = super::fixes(&cfg, &Gpu::find("a100-40gb").unwrap(), 0);
        assert!(fixes.iter().any(|f| f.config.tokens_per_iter() == cfg.tokens_per_iter() && f.config.batch_size < 33), "{fixes:#?}");
        assert!(fixes.iter().all(|f| f.config.batch_size * f.config.gradient_accumulation_steps == 33), "{fixes:#?}");
    }

    /// An eval batch set above the training one: a smaller micro-batch alone does not fit,
    /// since eval is then the worst; with the eval batch lowered to it, it does.
    #[test]
    fn a_split_lowers_a_larger_eval_batch_when_that_is_what_it_takes() {
        let cfg = Config { eval_batch_size: Some(48), compile: false, ..Config::default() };
        let fixes = fixes(&cfg, &default_gpu(), 0);
        let split = fixes.iter().find(|f| f.config.batch_size < 12).expect("a split");
        assert!(split.fits && split.config.eval_batch_size == Some(split.config.batch_size), "{split:?}");
        assert_eq!(split.config.tokens_per_iter(), cfg.tokens_per_iter());
        assert!(split.title.ends_with(&format!("eval_batch_size = {}", split.config.batch_size)), "{}", split.title);
        let b = split.config.batch_size;
        let said = format!(
            "; estimate_loss averages 200 batches of {b} sequences instead of 48 per split: a noisier estimate (eval_iters = {} averages as many)",
            (200 * 48u32).div_ceil(b)
        );
        assert!(split.cost.ends_with(&said), "{}", split.cost);
        // The eval batch was set already, so lowering it needs no further change to train.py.
        assert!(split.stock_nanogpt, "{split:?}");
        // An eval batch fix that comes down to the training batch is what stock train.py runs.
        let fixes = super::fixes(&Config { eval_batch_size: Some(48), batch_size: 12, ..Config::default() }, &default_gpu(), 0);
        let to_batch = fixes.iter().find(|f| f.title == "eval_batch_size = 12").expect("eval batch 12");
        assert!(to_batch.stock_nanogpt && to_batch.cost.contains("as stock train.py does"), "{to_batch:?}");
        // With compile, an eval batch alone fits too: it slows only estimate_loss, so it comes
        // before the split that slows training as well.
        let compiled = Config { compile: true, ..cfg.clone() };
        let fixes = super::fixes(&compiled, &default_gpu(), 0);
        let eval_only = fixes.iter().position(|f| f.title.starts_with("eval_batch_size")).expect("an eval batch fix");
        let split = fixes.iter().position(|f| f.config.batch_size < 12).expect("a split");
        assert!(fixes[eval_only].fits && eval_only < split, "{fixes:#?}");
        assert!(fixes[eval_only].stock_nanogpt, "the config sets an eval batch already: {:?}", fixes[eval_only]);
        // The same with eval batch 16 over batch 8; checkpointing, which no config here uses,
        // needs train.py changed.
        let fixes =
            super::fixes(&Config { batch_size: 8, eval_batch_size: Some(16), compile: false, ..Config::default() }, &default_gpu(), 0);
        assert!(fixes.iter().all(|f| f.stock_nanogpt || f.config.activation_checkpointing), "{fixes:#?}");
        let fixes = super::fixes(&Config { batch_size: 32, ..Config::default() }, &default_gpu(), 0);
        let ckpt = fixes.iter().find(|f| f.config.activation_checkpointing).expect("checkpointing");
        assert!(!ckpt.stock_nanogpt);
        // A shorter block that lowers a set eval context says so.
        let cfg = Config { batch_size: 4, eval_block_size: Some(1024), eval_batch_size: Some(128), ..Config::default() };
        let fixes = super::fixes(&cfg, &default_gpu(), 0);
        let block = fixes.iter().find(|f| f.config.block_size < 1024).expect("a block fix");
        let t = block.config.block_size;
        assert!(t >= 2 && block.config.eval_block_size == Some(t) && block.title == format!("block_size = {t}, eval_block_size = {t}"));
    }

    #[test]
    fn fixes_for_a_pretrained_model_keep_its_shape() {
        let cfg = Config { n_layer: 48, n_head: 25, n_embd: 1600, vocab_size: 50257, bias: true, batch_size: 1, ..Config::default() };
        let gpu = Gpu::find("custom-6").unwrap();
        let all = fixes(&cfg, &gpu, 0);
        assert!(all.iter().any(|f| f.config.n_layer < 48), "the case: fewer layers is offered from scratch");
        let kept = keeping_pretrained_shape(all.clone(), &cfg);
        assert!(!kept.is_empty() && kept.iter().all(|f| f.config.n_layer == 48));
        assert_eq!(kept.len(), all.iter().filter(|f| f.config.n_layer == 48).count());
    }

    #[test]
    fn invalid_configs_are_errors_not_panics() {
        assert!(plan(&req(Config { n_head: 7, ..Config::default() })).is_err());
    }
    /// The largest micro-batch sits at the card's edge. Where the allocator model's continued
    /// reserve says it runs out of memory a few steps in, the plan names a batch below it that
    /// keeps fitting and whose next one does not (a boundary, by the same continuation run
    /// here afresh); where the largest keeps fitting, nothing. The configs are GPT-2 124M at
    /// nanoGPT's sizes (keeps fitting), a 6-layer char model accumulating 2 that lands its
    /// answer by bisection (120 runs out, 117 lasts), 12 layers of 768 at block 256
    /// accumulating 4 (runs out; accumulating 5, its logits end each iteration elsewhere and
    /// it does not), and two small ones whose reserve does not run out.
    #[test]
    fn the_largest_batch_that_keeps_fitting_a_few_steps_later() {
        let gpu = default_gpu();
        let available = gpu.usable_bytes;
        let room = available - gpu.context_bytes;
        // (windows fit, runs out later, the later growth) at batch `b`.
        let at = |cfg: &Config, b: u32| {
            let c = Config { batch_size: b, ..cfg.clone() };
            let (s, later) = sim::simulate_exact_and_later(&c, &gpu.target(), Some(room));
            let runs_out = later.and_then(|l| l.past_limit).is_some_and(|p| !p.recovers);
            (needed(&s, &gpu).0 <= available, runs_out, later)
        };
        let eager = |n_layer, n_embd, block_size, vocab_size, gradient_accumulation_steps| Config {
            n_layer,
            n_head: 8,
            n_embd,
            block_size,
            vocab_size,
            gradient_accumulation_steps,
            batch_size: 4,
            dtype: crate::Dtype::Bfloat16,
            compile: false,
            ..Config::default()
        };
        // Each config, and whether its largest batch runs out later (the case it stands for).
        for (cfg, largest_runs_out) in [
            (Config { n_head: 12, ..eager(12, 768, 1024, 50304, 5) }, false),
            (eager(6, 768, 512, 65, 2), true),
            (Config { n_head: 6, ..eager(12, 768, 256, 50304, 4) }, true),
            (eager(4, 384, 256, 65, 1), false),
            (eager(6, 384, 256, 50304, 5), false),
        ] {
            let p = plan(&PlanRequest { with_fixes: false, ..req(cfg.clone()) }).unwrap();
            assert_eq!(p.largest_lasting_micro_batch.is_some(), largest_runs_out, "{cfg:?}");
            let b = p.largest_micro_batch.expect("some batch fits");
            let (fits, runs_out, later) = at(&cfg, b);
            assert!(fits);
            match &p.largest_lasting_micro_batch {
                None => assert!(!runs_out, "{cfg:?}"),
                Some(l) => {
                    assert!(runs_out, "{cfg:?}");
                    let later = later.unwrap();
                    assert_eq!((l.runs_out_at_iteration, l.runs_out_in_eval), (later.iteration, later.in_eval));
                    assert_eq!(l.source, Source::Estimate);
                    let k = l.batch_size.expect("a smaller batch keeps fitting");
                    assert!(k < b);
                    let (fits_k, runs_out_k, later_k) = at(&cfg, k);
                    assert!(fits_k && !runs_out_k, "{cfg:?} at {k}");
                    let (fits_next, runs_out_next, _) = at(&cfg, k + 1);
                    assert!(!fits_next || runs_out_next, "{cfg:?}: {} keeps fitting too", k + 1);
                    let need = l.needed_bytes.unwrap();
                    // Where it passes the card but PyTorch's release of cached segments makes
                    // room, it needs what is left after the release.
                    let released = |l: &sim::LaterReserve| l.past_limit.map_or(0, |p| p.releasable_bytes);
                    let grown = later_k.map_or(0, |l| l.reserved_bytes - released(&l) + gpu.context_bytes);
                    assert!(need <= available && need >= grown, "{need} {grown}");
                }
            }
        }
    }

    /// The batch named as keeping on says what its own plan says: where it passes the card a few
    /// steps in and keeps running only because PyTorch frees its cached blocks, it is marked so,
    /// and its need is its own plan's need after that release (QA found "~175 keeps fitting
    /// (needs 11,862 MiB)" beside batch 175's own "past this card" at 13,176 MiB). A one-layer
    /// model of block 2048 on an RTX 3060, accumulating 2: 178 runs out at iteration 3, 175
    /// passes the card there and recovers.
    #[test]
    fn the_batch_that_keeps_on_is_what_its_own_plan_says() {
        let gpu = Gpu::find("rtx-3060").unwrap();
        let cfg = Config {
            n_layer: 1,
            n_head: 5,
            n_embd: 320,
            block_size: 2048,
            vocab_size: 1000,
            gradient_accumulation_steps: 2,
            batch_size: 2,
            compile: false,
            ..Config::default()
        };
        let plan_at = |b: u32| {
            plan(&PlanRequest {
                config: Config { batch_size: b, ..cfg.clone() },
                gpus: vec![gpu.clone()],
                other_usage_bytes: 0,
                with_fixes: false,
            })
            .unwrap()
        };
        let l = plan_at(2).largest_lasting_micro_batch.expect("the largest runs out later");
        let k = l.batch_size.expect("a smaller batch keeps on");
        assert!(l.frees_cached_blocks, "the case: {k} keeps running by the release");
        let own = plan_at(k);
        let later = own.later.as_ref().expect("its reserve grows");
        assert!(later.past_card.is_some_and(|p| p.recovers), "{later:?}");
        let after = later.after_release_bytes.expect("the need after the release");
        assert_eq!(l.needed_bytes, Some(own.cards[0].needed_bytes.max(after)));
        assert!(after <= gpu.usable_bytes && later.nvidia_smi_bytes > gpu.usable_bytes);
        // Another config's: marked as its own plan says, with its need.
        let plain = plan(&PlanRequest { with_fixes: false, ..req(six_layer_char_model()) }).unwrap();
        let l = plain.largest_lasting_micro_batch.expect("its largest runs out later");
        let own =
            plan(&PlanRequest { with_fixes: false, ..req(Config { batch_size: l.batch_size.unwrap(), ..plain.config.clone() }) }).unwrap();
        let recovers = own.later.as_ref().and_then(|g| g.past_card).is_some_and(|p| p.recovers);
        assert_eq!(l.frees_cached_blocks, recovers, "{l:?}");
        // Its need at its worst: its windows', or its reserve's later (after the release).
        let later = own.later.map_or(0, |g| g.after_release_bytes.unwrap_or(g.nvidia_smi_bytes));
        assert_eq!(l.needed_bytes, Some(own.cards[0].needed_bytes.max(later)));
    }

    /// A 6-layer character model at block 512 accumulating 2, eager: on the default card its
    /// largest batch runs out a few steps in and a smaller one keeps fitting.
    fn six_layer_char_model() -> Config {
        Config {
            n_layer: 6,
            n_head: 8,
            n_embd: 768,
            block_size: 512,
            vocab_size: 65,
            gradient_accumulation_steps: 2,
            compile: false,
            ..Config::default()
        }
    }

    /// The search's check that continues a batch it finds to fit says what continuing that
    /// batch afresh says (it runs out later, keeps fitting, or does not fit: nothing then).
    #[test]
    fn a_search_check_continues_a_batch_as_a_fresh_continuation_does() {
        let gpu = default_gpu();
        let available = gpu.usable_bytes;
        let (mut keeps, mut runs_out, mut does_not_fit) = (0, 0, 0);
        for cfg in [
            six_layer_char_model(),
            Config {
                n_layer: 12,
                n_head: 6,
                n_embd: 768,
                block_size: 256,
                gradient_accumulation_steps: 4,
                compile: false,
                ..Config::default()
            },
            Config { expandable_segments: true, compile: false, gradient_accumulation_steps: 4, ..Config::default() },
        ] {
            let largest = largest_micro_batch(&cfg, &gpu, 0).expect("some batch fits");
            for batch in [largest - 1, largest, largest + 1] {
                let c = Config { batch_size: batch, ..cfg.clone() };
                let found = check_exact_needs(&c, &gpu, available, true);
                let fresh = lasting_of(&c, &gpu, available);
                match found.check {
                    Some(Ok(need)) => {
                        assert_eq!(found.lasting, Some(fresh), "{c:?}");
                        assert!(matches!(fresh, Lasting::Keeps(n, _) if n >= need) || matches!(fresh, Lasting::RunsOut(..)), "{c:?}");
                    }
                    _ => assert_eq!((found.lasting, fresh), (None, Lasting::DoesNotFit), "{c:?}"),
                }
                match fresh {
                    Lasting::Keeps(..) => keeps += 1,
                    Lasting::RunsOut(..) => runs_out += 1,
                    Lasting::DoesNotFit => does_not_fit += 1,
                }
            }
        }
        assert!(
            keeps > 0 && runs_out > 0 && does_not_fit > 0,
            "the cases: {keeps} keep fitting, {runs_out} run out, {does_not_fit} do not fit"
        );
    }

    /// A fix that fits the two simulated iterations can still run out of memory later, by the
    /// allocator model, where nothing of its kind keeps fitting (here the eval batch of 28 for a
    /// 4-layer model at batch 33 on an RTX 4070 with 1,000 MiB taken: it reuses the blocks
    /// training left cached, and no smaller eval batch fits at all): each fix that fits is
    /// marked exactly where its own continued simulation runs out, and ranks after the fixes
    /// that keep fitting, before those that do not fit.
    #[test]
    fn fixes_that_run_out_a_few_steps_later_are_marked_and_ranked_after_the_rest() {
        let gpu = Gpu::find("rtx-4070").unwrap();
        let other_usage_bytes = 1000 << 20;
        let room = gpu.usable_bytes - other_usage_bytes - gpu.context_bytes;
        let cfg = Config {
            n_layer: 4,
            n_head: 12,
            n_embd: 1152,
            block_size: 256,
            batch_size: 33,
            gradient_accumulation_steps: 14,
            attention: crate::Attention::Manual,
            compile: false,
            ..Config::default()
        };
        let request = PlanRequest { config: cfg, gpus: vec![gpu.clone()], other_usage_bytes, with_fixes: true };
        let fixes = plan(&request).unwrap().fixes.unwrap();
        let mut marked = 0;
        for f in &fixes {
            let (_, later) = sim::simulate_exact_and_later(&f.config, &gpu.target(), Some(room));
            let runs_out = later.filter(|l| l.past_limit.is_some_and(|p| !p.recovers));
            let want =
                runs_out.filter(|_| f.fits).map(|l| RunsOut { iteration: l.iteration, in_eval: l.in_eval, source: Source::Estimate });
            assert_eq!(f.runs_out_later, want, "{}", f.title);
            marked += usize::from(want.is_some());
        }
        assert!(marked >= 1, "{fixes:?}");
        assert!(fixes.iter().any(|f| f.title == "eval_batch_size = 28" && f.runs_out_later.is_some()), "the case: {fixes:?}");
        let groups: Vec<(bool, bool)> = fixes.iter().map(|f| (!f.fits, f.runs_out_later.is_some())).collect();
        assert!(groups.is_sorted(), "{groups:?}");
        assert!(groups.contains(&(false, false)), "a fix that keeps fitting comes first: {groups:?}");
    }

    /// Where the value a fix's search finds runs out of memory a few iterations in, the fix
    /// offers the largest below it that keeps fitting instead (a QA report: GPT-2 medium's shape
    /// with a 2,048 block in float32 on an RTX 3060, whose only fitting fix was block_size 134,
    /// out of memory at iteration 3). Likewise a split of B*GA into smaller micro-batches passes
    /// the divisor that runs out (171 sequences on a V100: 9 x 19 runs out, 3 x 57 keeps).
    #[test]
    fn a_fix_whose_value_runs_out_later_gives_way_to_one_that_keeps_fitting() {
        let gpu = Gpu::find("rtx-3060").unwrap();
        let available = gpu.usable_bytes;
        let cfg = Config {
            n_layer: 24,
            n_head: 16,
            n_embd: 1024,
            block_size: 2048,
            batch_size: 16,
            dtype: crate::Dtype::Float32,
            attention: crate::Attention::Manual,
            compile: false,
            ..Config::default()
        };
        let request = PlanRequest { config: cfg.clone(), gpus: vec![gpu.clone()], other_usage_bytes: 0, with_fixes: true };
        let fixes = plan(&request).unwrap().fixes.unwrap();
        let block = fixes.iter().find(|f| f.title.starts_with("block_size = ")).expect("a shorter block");
        let t = block.config.block_size;
        assert!(block.fits && block.runs_out_later.is_none(), "{block:?}");
        assert!(matches!(lasting_of(&block.config, &gpu, available), Lasting::Keeps(..)));
        // What the search alone finds (the longest block whose two iterations fit) runs out.
        let shorter = |t: u32| Config { block_size: t, ..cfg.clone() };
        let search = Search::calibrated(&cfg, &gpu, 0, needed(&simulate_on(&cfg, &gpu), &gpu).0);
        let (windows, _) = search.largest(2, cfg.block_size - 1, None, &shorter).expect("a block that fits");
        assert!(windows > t, "the case: {windows} against {t}");
        assert!(matches!(lasting_of(&shorter(windows), &gpu, available), Lasting::RunsOut(..)), "the case");
        // Each block from the fix's up to that one: the one above the fix runs out too.
        assert!(!matches!(lasting_of(&shorter(t + 1), &gpu, available), Lasting::Keeps(..)));

        let v100 = Gpu::find("v100-16gb").unwrap();
        let other_usage_bytes = 300 << 20;
        let cfg = Config {
            n_layer: 12,
            n_head: 6,
            n_embd: 192,
            block_size: 2048,
            batch_size: 19,
            gradient_accumulation_steps: 9,
            dtype: crate::Dtype::Float16,
            optimizer: crate::Optimizer::Sgd,
            compile: false,
            ..Config::default()
        };
        let request = PlanRequest { config: cfg.clone(), gpus: vec![v100.clone()], other_usage_bytes, with_fixes: true };
        let fixes = plan(&request).unwrap().fixes.unwrap();
        let split = fixes.iter().find(|f| f.title.starts_with("batch_size = ")).expect("a split");
        assert!(split.fits && split.runs_out_later.is_none(), "{split:?}");
        let nine = Config { batch_size: 9, gradient_accumulation_steps: 19, ..cfg };
        let available = v100.usable_bytes - other_usage_bytes;
        assert!(matches!(lasting_of(&nine, &v100, available), Lasting::RunsOut(..)), "the case");
        assert_eq!((split.config.batch_size, split.config.gradient_accumulation_steps), (3, 57));
    }

    /// The largest batch's estimate mark follows its own config: shakespeare-char's model at
    /// 64 sequences of 256 is within the shapes measured on an H100, its largest batch there
    /// (hundreds of sequences) is not; with most of the card taken, its largest batch is within
    /// them too.
    #[test]
    fn the_largest_batch_is_an_estimate_by_its_own_shape() {
        let gpu = Gpu::find("h100-80gb").unwrap();
        let cfg = Config { compile: false, ..Config::shakespeare_char() };
        let at = |other_usage_bytes: u64| {
            let p = plan(&PlanRequest { config: cfg.clone(), gpus: vec![gpu.clone()], other_usage_bytes, with_fixes: false }).unwrap();
            let largest = p.largest_micro_batch.expect("fits");
            assert!(!need_is_estimate(&p.cards[0].notes), "the case");
            let past = past_measured_shapes(&Config { batch_size: largest, ..cfg.clone() }).is_some();
            (largest, past, p.largest_micro_batch_is_estimate)
        };
        let (largest, past, marked) = at(0);
        assert!(past && marked, "batch {largest}");
        // 77,000 MiB taken leaves about 2 GiB: a few dozen sequences.
        let (largest, past, marked) = at(77_000 << 20);
        assert!(!past && !marked && largest > cfg.batch_size, "batch {largest}");
    }

    /// The window a plan names for its need is where the run first needs that much: its
    /// nvidia-smi figure is the need and every window met before it needs less (the page's
    /// verdict and `vramfit plan` both name it). An eval batch of 32 against a training batch of
    /// 4 reaches almost all of it in the eval before the first step.
    #[test]
    fn the_need_is_named_where_the_run_first_reaches_it() {
        let gpu = Gpu::find("rtx-4070").unwrap();
        let eager = Config { compile: false, ..Config::default() };
        let mut named = Vec::new();
        for cfg in [
            eager.clone(),
            Config { batch_size: 4, gradient_accumulation_steps: 8, eval_batch_size: Some(32), ..eager.clone() },
            Config { batch_size: 4, eval_batch_size: Some(64), ..eager.clone() },
            Config { compile: false, ..Config::shakespeare_char() },
            Config::default(),
        ] {
            let p = plan(&PlanRequest { config: cfg, gpus: vec![gpu.clone()], other_usage_bytes: 0, with_fixes: false }).unwrap();
            let card = &p.cards[0];
            let order = [("eval_at_start", &p.eval_at_start), ("first_iter", &p.first_iter), ("eval", &p.eval), ("train", &p.train)];
            let at = order.iter().position(|(name, _)| *name == card.worst_window).expect("a window");
            assert_eq!(order[at].1.nvidia_smi_bytes, card.needed_bytes, "{}", card.worst_window);
            assert!(order[..at].iter().all(|(_, w)| w.nvidia_smi_bytes < card.needed_bytes), "{}", card.worst_window);
            named.push(card.worst_window.clone());
        }
        // Not always the steady step.
        assert!(named.iter().any(|w| w != "train"), "{named:?}");
    }

    /// The run stops at the first window past the card in the order it meets them, which is
    /// not the largest one: GPT-2 124M at batch 64 (compiled, as nanoGPT's defaults) passes a
    /// 12 GB card already in the eval at iteration 0, before a training step needs three times
    /// as much. A run that fits names none.
    #[test]
    fn the_first_window_past_the_card_is_where_the_run_meets_it() {
        let gpu = Gpu::find("rtx-4070").unwrap();
        let at = |cfg: Config| {
            let p = plan(&PlanRequest { config: cfg, gpus: vec![gpu.clone()], other_usage_bytes: 0, with_fixes: false }).unwrap();
            let card = p.cards[0].clone();
            // Every window from the first short one on needs more than the card: the reserve
            // only grows.
            let order = [&p.eval_at_start, &p.first_iter, &p.eval, &p.train];
            let names = ["eval_at_start", "first_iter", "eval", "train"];
            let first_over = order.iter().position(|w| w.nvidia_smi_bytes > card.available_bytes);
            assert_eq!(card.first_short_window.as_deref(), first_over.map(|i| names[i]));
            (card.first_short_window, card.worst_window)
        };
        let (first, worst) = at(Config { batch_size: 64, ..Config::default() });
        assert_eq!((first.as_deref(), worst.as_str()), (Some("eval_at_start"), "train"));
        assert_eq!(at(Config { batch_size: 4, ..Config::default() }).0, None);
        // Eager at batch 8: only the steady step passes the card (the first iteration needs
        // 1.5 GiB less); with manual attention the first iteration already does.
        let eager = Config { batch_size: 8, compile: false, ..Config::default() };
        assert_eq!(at(eager.clone()).0.as_deref(), Some("train"));
        assert_eq!(at(Config { attention: crate::Attention::Manual, ..eager }).0.as_deref(), Some("first_iter"));
    }

    /// A margin within the model's own error is a close call: 3% of the need where it is
    /// validated, 5% where it rests on an estimate; either side of the card.
    #[test]
    fn close_calls_are_margins_within_the_models_error() {
        assert!(close_call(299, 10_000, false) && !close_call(300, 10_000, false));
        assert!(close_call(-299, 10_000, false) && !close_call(-300, 10_000, false));
        assert!(close_call(499, 10_000, true) && !close_call(500, 10_000, true));
        // Each card judges its own: the same run is one on an RTX 3060 (estimated context,
        // 2.3% headroom) and not on an H100.
        let gpus = vec![Gpu::find("rtx-3060").unwrap(), Gpu::find("h100-80gb").unwrap()];
        let p = plan(&PlanRequest { config: Config::default(), gpus, other_usage_bytes: 0, with_fixes: false }).unwrap();
        for card in &p.cards {
            let estimate = need_is_estimate(&card.notes);
            assert_eq!(card.close_call, close_call(card.headroom_bytes, card.needed_bytes, estimate), "{}", card.gpu);
        }
        assert!(need_is_estimate(&p.cards[0].notes) && p.cards[0].close_call && p.cards[0].fits);
        assert!(!p.cards[1].close_call);
    }

    /// A fix's need is marked an estimate by its own config's notes: on an H100 (eager, all
    /// measured) only adding compile makes one, and its close call is judged with that error.
    #[test]
    fn a_fix_is_an_estimate_by_its_own_terms() {
        let gpu = Gpu::find("h100-80gb").unwrap();
        // GPT-2 124M at 32 sequences (measured shapes) with 60,000 MiB taken by others.
        let cfg = Config { batch_size: 32, compile: false, ..Config::default() };
        let other = 60_000 << 20;
        let available = gpu.usable_bytes - other;
        let fixes = fixes(&cfg, &gpu, other);
        assert!(!fixes.is_empty() && !fits(&cfg, &gpu, other), "the case does not fit");
        assert!(fixes.iter().any(|f| f.config.compile), "a compile fix is offered");
        for f in &fixes {
            assert_eq!(f.needed_is_estimate, f.config.compile, "{}", f.title);
            assert_eq!(f.needed_is_estimate, need_is_estimate(&notes(&f.config, &gpu)));
            assert_eq!(f.close_call, close_call(available as i64 - f.needed_bytes as i64, f.needed_bytes, f.needed_is_estimate));
        }
    }

    /// Every split into micro-batches too small to keep a GPU busy says so, the shortened
    /// micro-batch offered beside a tiny split included (44 sequences of 300 tokens on a 4 GiB
    /// card: 4 x 11 and 9 x 1).
    #[test]
    fn every_micro_batch_too_small_for_a_gpu_says_so() {
        let cfg = Config {
            n_layer: 42,
            n_head: 6,
            n_embd: 288,
            block_size: 300,
            batch_size: 44,
            gradient_accumulation_steps: 1,
            vocab_size: 50257,
            ..Config::default()
        };
        let fixes = fixes(&cfg, &Gpu::find("custom-4").unwrap(), 0);
        let smaller: Vec<&Fix> = fixes.iter().filter(|f| f.config.batch_size < cfg.batch_size).collect();
        assert!(smaller.len() >= 2, "{fixes:#?}");
        for f in smaller {
            let tiny = (f.config.batch_size * cfg.block_size) < 4096 && f.config.batch_size * 4 < cfg.batch_size;
            assert_eq!(f.cost.contains("leave much of a GPU idle"), tiny, "{}: {}", f.title, f.cost);
        }
        assert!(fixes.iter().any(|f| f.config.gradient_accumulation_steps == 1 && f.cost.contains("leave much of a GPU idle")));
    }
}
