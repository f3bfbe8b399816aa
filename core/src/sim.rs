//! The event-level simulation: nanoGPT's `train.py` under PyTorch eager, tensor by tensor.
//!
//! Every tensor the loop creates is an [`Mem::alloc`] with its size, its category and the op
//! that made it; every point where PyTorch drops the last reference is an [`Mem::free`]. The
//! order follows what PyTorch actually does:
//!
//! * forward: each op's output is allocated; what autograd saves for backward stays, the rest
//!   is freed as soon as no Python name or saved tensor holds it;
//! * autocast keeps a cache of low-precision weight copies until the `with ctx:` block ends,
//!   and the copies saved for backward then live until their layer's backward;
//! * backward runs node by node in reverse creation order: each node allocates its outputs
//!   while its inputs and saved tensors still live, then drops them;
//! * the Python names `logits`, `loss`, `X`, `Y` keep tensors alive across steps exactly as in
//!   train.py (the previous micro-step's logits live through the next forward, the training
//!   logits through `estimate_loss`, the previous eval batch's logits through the next one).
//!
//! Sizes are rounded up to the CUDA caching allocator's 512-byte blocks (a request of 10 MiB or
//! more to the whole segment it gets when the rest would be too small to split off), so the
//! live total is what `torch.cuda.memory_allocated()` reports and the peak what `max_memory_allocated()`
//! reports. The simulation only ever adds and subtracts: it is cheap enough to run thousands of
//! times per second for fit solving.
//!
//! The fast run ([`simulate`], what searches call) skips events that cannot change any peak,
//! each shortcut explained where it is taken: the middle blocks are applied as their net effect
//! ("layer folding"), `estimate_loss`'s batch 0 as what it leaves behind, the second
//! `estimate_loss` and the steady iteration are the first ones moved onto their own bases
//! ([`Run::replay_iteration`]). [`simulate_exact`] and [`timeline`] run every event, and
//! `tests::folding_is_exact` holds the fast run to the full one, byte for byte.

use crate::allocator::CachingAllocator;
use crate::config::{Attention, Config, Dtype, Optimizer};
use crate::params::param_tensors;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------------
// Categories, phases, peaks
// ---------------------------------------------------------------------------------------------

/// What a byte of GPU memory is for. Every allocation has exactly one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Parameters,
    Gradients,
    OptimizerState,
    SavedActivations,
    LogitsAndLoss,
    CastWeights,
    Temporaries,
    Batch,
    Workspace,
}

pub const CATEGORY_COUNT: usize = 9;

impl Category {
    pub const ALL: [Category; CATEGORY_COUNT] = [
        Category::Parameters,
        Category::Gradients,
        Category::OptimizerState,
        Category::SavedActivations,
        Category::LogitsAndLoss,
        Category::CastWeights,
        Category::Temporaries,
        Category::Batch,
        Category::Workspace,
    ];
    /// The key used in JSON and links.
    pub fn key(self) -> &'static str {
        match self {
            Category::Parameters => "parameters",
            Category::Gradients => "gradients",
            Category::OptimizerState => "optimizer_state",
            Category::SavedActivations => "saved_activations",
            Category::LogitsAndLoss => "logits_and_loss",
            Category::CastWeights => "cast_weights",
            Category::Temporaries => "temporaries",
            Category::Batch => "batch",
            Category::Workspace => "workspace",
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            Category::Parameters => "Parameters",
            Category::Gradients => "Gradients",
            Category::OptimizerState => "Optimizer state",
            Category::SavedActivations => "Saved activations",
            Category::LogitsAndLoss => "Logits and loss",
            Category::CastWeights => "Cast weights",
            Category::Temporaries => "Temporaries",
            Category::Batch => "Token batches",
            Category::Workspace => "cuBLAS workspace",
        }
    }
    /// One plain sentence: what it is, why it lives that long, what makes it grow.
    pub fn explanation(self) -> &'static str {
        match self {
            Category::Parameters => "The fp32 weights themselves (4 bytes each), resident for the whole run; they grow with n_layer*n_embd^2 and vocab_size*n_embd (with manual attention each layer's fp32 block_size^2 causal mask counts here too).",
            Category::Gradients => "One fp32 gradient per weight; they appear during the first micro-step's backward and stay until zero_grad after the optimizer step, so gradient accumulation keeps them all resident.",
            Category::OptimizerState => "AdamW's two fp32 moments per weight (4 bytes each, 8 per weight), created at the first optimizer step and kept forever; SGD without momentum has none.",
            Category::SavedActivations => "Tensors each layer keeps from the forward for its backward; they grow with batch_size*block_size*n_embd*n_layer (plus batch_size*n_head*block_size^2*n_layer where attention keeps its T×T matrices: manual attention or SDPA's math path) and are freed layer by layer as backward runs.",
            Category::LogitsAndLoss => "The batch_size*block_size*vocab_size logits and cross-entropy's log-probabilities (in 16-bit runs one in the compute dtype and an fp32 copy for the loss; compiled runs keep no fp32 copy); the Python name `logits` keeps the last ones alive into the next forward and through estimate_loss, so small models with a big vocabulary are dominated by this term.",
            Category::CastWeights => "Autocast's bf16/fp16 copies of the matmul weights, cached until the forward's `with ctx:` block ends and kept for backward until each layer's gradient is computed.",
            Category::Temporaries => "Short-lived intermediates of the op running at the peak (upcasts, gradient buffers in flight); they vanish when the op finishes.",
            Category::Batch => "The int64 token ids X and Y of the current and the prefetched batch.",
            Category::Workspace => "cuBLAS scratch memory allocated on the first matmul of the forward and of the backward thread and kept for the process's lifetime.",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Bytes per category, with named fields so the JSON is stable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breakdown {
    pub parameters: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    pub saved_activations: u64,
    pub logits_and_loss: u64,
    pub cast_weights: u64,
    pub temporaries: u64,
    pub batch: u64,
    pub workspace: u64,
}

impl Breakdown {
    fn from_array(a: &[u64; CATEGORY_COUNT]) -> Breakdown {
        Breakdown {
            parameters: a[0],
            gradients: a[1],
            optimizer_state: a[2],
            saved_activations: a[3],
            logits_and_loss: a[4],
            cast_weights: a[5],
            temporaries: a[6],
            batch: a[7],
            workspace: a[8],
        }
    }
    pub fn get(&self, c: Category) -> u64 {
        match c {
            Category::Parameters => self.parameters,
            Category::Gradients => self.gradients,
            Category::OptimizerState => self.optimizer_state,
            Category::SavedActivations => self.saved_activations,
            Category::LogitsAndLoss => self.logits_and_loss,
            Category::CastWeights => self.cast_weights,
            Category::Temporaries => self.temporaries,
            Category::Batch => self.batch,
            Category::Workspace => self.workspace,
        }
    }
    pub fn total(&self) -> u64 {
        Category::ALL.iter().map(|&c| self.get(c)).sum()
    }
}

/// Where in the loop an event happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Init,
    Forward,
    Loss,
    Backward,
    ClipGrad,
    OptimizerStep,
    ZeroGrad,
    EvalForward,
    EvalLoss,
}

impl Phase {
    pub fn label(self) -> &'static str {
        match self {
            Phase::Init => "init",
            Phase::Forward => "forward",
            Phase::Loss => "loss",
            Phase::Backward => "backward",
            Phase::ClipGrad => "clip_grad_norm_",
            Phase::OptimizerStep => "optimizer.step",
            Phase::ZeroGrad => "zero_grad",
            Phase::EvalForward => "estimate_loss forward",
            Phase::EvalLoss => "estimate_loss cross_entropy",
        }
    }
}

/// The highest live total inside one window of the loop, and what it was made of.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peak {
    /// Predicted `torch.cuda.max_memory_allocated()` for the window, in bytes.
    pub bytes: u64,
    pub phase: Option<Phase>,
    /// The op that allocated the byte that set the peak, e.g. `transformer.h.11.attn backward`.
    pub op: String,
    /// 1-based micro-step within the iteration (0 outside micro-steps).
    pub micro_step: u32,
    pub breakdown: Breakdown,
    /// Predicted `torch.cuda.max_memory_reserved()` over the window (exact simulations only;
    /// 0 when the allocator was not simulated).
    pub reserved_bytes: u64,
}

/// The peaks of the windows nanoGPT users care about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Simulation {
    /// A steady-state training iteration: after the first, with optimizer state.
    pub train: Peak,
    /// An `estimate_loss` after the first optimizer step (training logits alive, grads None).
    pub eval: Peak,
    /// The first training iteration, where AdamW creates its state.
    pub first_iter: Peak,
    /// The `estimate_loss` at iteration 0, before any step.
    pub eval_at_start: Peak,
    /// The config's `eval_only`: train.py runs `eval_at_start` alone and exits; the other
    /// windows are what training the same config would need.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub eval_only: bool,
}

impl Simulation {
    /// Each window's peak bytes under the name the measured data files give it.
    pub fn window_bytes(&self) -> [(&'static str, u64); 4] {
        [
            ("train", self.train.bytes),
            ("first_iter", self.first_iter.bytes),
            ("eval", self.eval.bytes),
            ("eval_at_start", self.eval_at_start.bytes),
        ]
    }
}

/// One allocator event of an exact simulation: a block handed out (`block` > 0) or returned
/// (`block` < 0), and the reserve after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocEvent {
    pub op: String,
    pub phase: Phase,
    pub requested: u64,
    pub block: i64,
    pub reserved: u64,
    /// Where the block lies: the segment's creation ordinal and the offset in it (to line the
    /// model up with a snapshot's addresses).
    pub segment: u64,
    pub offset: u64,
}

/// One point of the live-memory curve: after each event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TimelinePoint {
    pub phase: Phase,
    pub op: OpName,
    pub micro_step: u32,
    pub live_bytes: u64,
}

// ---------------------------------------------------------------------------------------------
// The target: which kernels and which allocator
// ---------------------------------------------------------------------------------------------

/// What runs the loop: the numbers that are not properties of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// Allocation granularity of the tensor counter (the caching allocator rounds to 512 B).
    pub granularity: u64,
    /// Bytes of the cuBLAS workspace PyTorch allocates per (handle, stream): one for the
    /// forward (main thread), one more for the autograd engine's device thread.
    pub cublas_workspace_bytes: u64,
    /// CUDA kernels (true) or PyTorch's CPU kernels (false, for CPU-traced references).
    pub cuda_kernels: bool,
    /// Counted under FakeTensorMode, as the reference harness's CPU traces are: tensors only
    /// (no allocator segments, no kernel-internal buffers such as cuBLASLt's workspace, flash
    /// attention's scratch or the embedding backward's sort), and the autograd engine sums
    /// gradients out of place (a tensor subclass).
    pub fake_tensors: bool,
    /// The card's multiprocessors and the threads one can hold: CUDA's reduction kernels size
    /// their global scratch by them (see [`sum_over_rows_scratch`]). Unused under fake tensors.
    pub multiprocessors: u32,
    pub threads_per_multiprocessor: u32,
    /// FlashAttention-2 runs here (sm_80 and newer): PyTorch's SDPA takes it for bf16/fp16
    /// unless cuDNN's attention comes first.
    #[serde(default)]
    pub flash_kernels: bool,
    /// SDPA tries cuDNN's attention before flash (PyTorch 2.11 with cuDNN 9.15 or newer, on
    /// sm_90 and sm_100: `check_prefer_cudnn_attention` in sdp_utils.cpp). cuDNN needs a head
    /// size that is a multiple of 8, so other heads still run flash.
    #[serde(default)]
    pub sdpa_prefers_cudnn: bool,
}

impl Target {
    /// PyTorch's CPU kernels as traced by the reference harness: no cuBLAS, same rounding.
    pub fn cpu_trace() -> Target {
        Target {
            granularity: 512,
            cublas_workspace_bytes: 0,
            cuda_kernels: false,
            fake_tensors: true,
            multiprocessors: 0,
            threads_per_multiprocessor: 0,
            flash_kernels: false,
            sdpa_prefers_cudnn: false,
        }
    }

    /// CUDA's kernels as the harness's emulation of their dispatch counts them on the CPU
    /// (`run_all.py --method cpu-fake-cudalike`, a prediction of CUDA, not a measurement):
    /// CUDA's autocast, dropout and softmax rules on FakeTensorMode's tensor counter.
    pub fn cudalike_trace() -> Target {
        // As on the H200 the emulation follows: cuDNN first, flash for heads it refuses.
        Target { cuda_kernels: true, flash_kernels: true, sdpa_prefers_cudnn: true, ..Target::cpu_trace() }
    }
}

/// The global scratch CUDA's sum kernel takes to add a contiguous (rows, cols) tensor over its
/// rows (a linear's bias gradient): `(buffer, semaphores)` in bytes, both freed when the kernel
/// returns, or `(0, 0)` where the rows are summed within one block of threads.
///
/// This follows `setReduceConfig` and `ReduceConfig::global_memory_size` in PyTorch's
/// aten/src/ATen/native/cuda/Reduce.cuh (2.11): with the reduced dimension not the fastest
/// moving one, each thread keeps `output_vec_size` outputs, a block is `block_width` outputs by
/// `block_height` row slices, and once a thread would sum 256 values or more, the rows are
/// split across `ctas_per_output` blocks that stage partial sums in global memory, one per
/// output, block column and vector lane: 4 bytes x cols x ctas x block_width x vec. On an H200
/// that is 96 MiB for a (8192, 1536) fp32 gradient, twice the gradient itself (seen in a
/// memory snapshot of L6 H6 C384 T256 B32 with biases, and behind the H200's random configs with
/// biases).
/// The accumulator is fp32 for fp32, bf16 and fp16 gradients alike.
pub fn sum_over_rows_scratch(rows: u64, cols: u64, target: &Target) -> (u64, u64) {
    const MAX_THREADS: u64 = 512; // mnt_wrapper<T>::MAX_NUM_THREADS for every real dtype
    const WARP: u64 = 32;
    const MIN_VALUES_PER_THREAD: u64 = 16;
    const MAX_VALUES_PER_THREAD: u64 = 256;
    let (sms, threads_per_sm) = (target.multiprocessors as u64, target.threads_per_multiprocessor as u64);
    if target.fake_tensors || rows <= 1 || cols == 0 || sms == 0 {
        return (0, 0);
    }
    let last_pow2 = |n: u64| if n == 0 { 1 } else { 1u64 << (63 - n.leading_zeros()) };
    let pow2_or_max = |n: u64, max: u64| if n < max { last_pow2(n) } else { max };
    let div_up = |a: u64, b: u64| a.div_ceil(b.max(1));
    if cols == 1 {
        // A column: one output, the rows along the fastest dimension, summed by one block's
        // lanes (and vectorised by 4 from 128 rows), then split across blocks.
        let dim0 = if rows >= 128 { rows / 4 } else { rows };
        let width = pow2_or_max(dim0, MAX_THREADS);
        let values = div_up(rows, width);
        if values < MAX_VALUES_PER_THREAD {
            return (0, 0);
        }
        let target_grid = sms * (threads_per_sm / width).max(1);
        let ctas = target_grid.min(div_up(values, MIN_VALUES_PER_THREAD)).max(div_up(values, MAX_VALUES_PER_THREAD));
        return if ctas > 1 { (4 * ctas, 4) } else { (0, 0) };
    }
    // Each thread keeps up to 4 neighbouring outputs: the largest of 4, 2, 1 dividing cols.
    let vec = [4, 2, 1].into_iter().find(|v| cols.is_multiple_of(*v)).unwrap_or(1);
    let max_threads = MAX_THREADS / vec;
    let dim0 = cols / vec;
    let (dim0_pow2, dim1_pow2) = (pow2_or_max(dim0, max_threads), pow2_or_max(rows, max_threads));
    let width = dim0_pow2.min(WARP);
    let height = dim1_pow2.min(max_threads / width);
    let width = dim0_pow2.min(max_threads / height);
    let threads = width * height;
    // Lanes split the outputs; the block's rows of threads split the inputs when each thread
    // would still sum at least min(16 x height, 256) of them.
    let split_rows = rows >= (height * 16).min(MAX_VALUES_PER_THREAD);
    let (step_input, step_output) = if split_rows { (height, width) } else { (1, width * height) };
    let values = div_up(rows, step_input);
    let grid = div_up(cols / vec, step_output);
    let target_grid = sms * (threads_per_sm / threads).max(1);
    if !split_rows || values < MAX_VALUES_PER_THREAD || grid > target_grid {
        return (0, 0);
    }
    let ctas = div_up(target_grid, grid).min(div_up(values, MIN_VALUES_PER_THREAD)).max(div_up(values, MAX_VALUES_PER_THREAD));
    if ctas <= 1 {
        return (0, 0);
    }
    (4 * cols * ctas * width * vec, 4 * grid)
}

/// FlashAttention-2's split-KV accumulators for one forward of `batch` x `heads` queries of
/// `seq` positions with heads of `head` (already a multiple of 8): `(lse_accum, out_accum)` in
/// bytes, both fp32 and freed when the kernel returns, or `(0, 0)` where it runs in one split.
///
/// Follows `num_splits_heuristic` and `set_params_splitkv` in PyTorch's
/// aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp (2.11), which `mha_fwd`
/// calls for every forward without dropout: when batch x heads x 64-row query blocks would
/// fill less than 80% of two blocks per multiprocessor, the keys are split so that the waves
/// fill the card, and each split keeps its own partial output (split, B, H, T, head rounded up
/// to 32, or to 64 over 128) and logsumexp (split, B, H, T). Measured on the H200 (132
/// multiprocessors): L5 H4 C48 with a 1536-token eval block (6 splits, 9.3 MB) and L4 H1 C100
/// with eval batch 24 (2 splits), both evals low by exactly these before.
pub fn flash_split_kv_scratch(batch: u64, heads: u64, seq: u64, head: u64, multiprocessors: u32) -> (u64, u64) {
    let sms2 = 2 * multiprocessors as u64;
    if sms2 == 0 || seq == 0 || head == 0 || head > 256 {
        return (0, 0);
    }
    let block_n = if head <= 64 {
        256
    } else if head <= 128 {
        128
    } else {
        64
    };
    let n_blocks = seq.div_ceil(block_n);
    let work = batch.saturating_mul(heads).saturating_mul(seq.div_ceil(64));
    // "Enough to almost fill the SMs": one split (in the kernel's float arithmetic).
    if work as f32 >= 0.8f32 * sms2 as f32 {
        return (0, 0);
    }
    let max_splits = 128.min(sms2).min(n_blocks);
    // A split count is only worth trying if it changes the blocks per split.
    let eligible = |s: u64| s == 1 || n_blocks.div_ceil(s) != n_blocks.div_ceil(s - 1);
    // The kernel's float arithmetic, in f32 as there.
    let efficiency = |s: u64| {
        let waves = (work * s) as f32 / sms2 as f32;
        waves / waves.ceil()
    };
    let best = (1..=max_splits).filter(|&s| eligible(s)).map(efficiency).fold(0.0f32, f32::max);
    let splits = (1..=max_splits).find(|&s| eligible(s) && efficiency(s) as f64 >= 0.85 * best as f64).unwrap_or(1);
    if splits <= 1 {
        return (0, 0);
    }
    let rounded = if head <= 128 { head.div_ceil(32) * 32 } else { head.div_ceil(64) * 64 };
    let rows = splits * batch * heads * seq;
    (4 * rows, 4 * rows * rounded)
}

/// Whether `cfg`'s attention runs SDPA's math path on `target`: flash attention with a head
/// size every fused kernel refuses there (see `Dims::sdpa_runs_math`).
pub fn sdpa_runs_math(cfg: &Config, target: &Target) -> bool {
    !cfg.compile && Dims::new(cfg, Mode::Train).sdpa_runs_math(target)
}

/// Whether a forward of the loop (training or eval) runs FlashAttention-2 with split-KV
/// accumulators on `target` (see [`flash_split_kv_scratch`]): their size follows the card's
/// multiprocessors.
pub fn flash_splits_kv(cfg: &Config, target: &Target) -> bool {
    [Mode::Train, Mode::Eval].into_iter().any(|mode| Dims::new(cfg, mode).flash_split_kv(target).0 > 0)
}

// ---------------------------------------------------------------------------------------------
// The memory tracker
// ---------------------------------------------------------------------------------------------

/// A handle to a simulated tensor. `Id::NONE` stands for "no tensor" (e.g. no bias) and is
/// ignored by `free`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Id(u32);

impl Id {
    const NONE: Id = Id(u32::MAX);
}

#[derive(Clone, Copy)]
struct At {
    phase: Phase,
    module: &'static str,
    layer: u32,
    what: &'static str,
    micro_step: u32,
}

const NO_LAYER: u32 = u32::MAX;

impl At {
    fn op(&self) -> OpName {
        OpName { module: self.module, layer: self.layer, what: self.what }
    }

    /// The op's name as users read it (see [`OpName`]).
    fn describe(&self) -> String {
        self.op().to_string()
    }
}

/// Where an event happens, unformatted: a timeline holds one per event (tens of thousands for
/// a 48-layer model) and formatting each into a `String` was most of the cost of computing
/// one (callgrind: 19 M instructions for the 1.5B's, 3 M without); the page names only the
/// peak's. It prints (and serializes) as users read it:
/// the module path with `{i}` replaced by the layer, then what the op does there (e.g.
/// `transformer.h.11.attn backward`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpName {
    module: &'static str,
    layer: u32,
    what: &'static str,
}

impl OpName {
    /// An op outside the layers (the trainer's model names its ops this way).
    pub fn new(name: &'static str) -> OpName {
        OpName { module: name, layer: NO_LAYER, what: "" }
    }
}

impl std::fmt::Display for OpName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.layer == NO_LAYER {
            f.write_str(self.module)?;
        } else {
            for (k, piece) in self.module.split("{i}").enumerate() {
                if k > 0 {
                    write!(f, "{}", self.layer)?;
                }
                f.write_str(piece)?;
            }
        }
        if !self.what.is_empty() {
            write!(f, " {}", self.what)?;
        }
        Ok(())
    }
}

impl Serialize for OpName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The highest live total over a stretch of events, what it was made of and where it was.
#[derive(Clone, Copy)]
struct High {
    bytes: u64,
    live: [u64; CATEGORY_COUNT],
    at: At,
}

impl High {
    /// The same point had every category started from `to` instead of `from` (the same events
    /// on another base).
    fn rebased(&self, from: &[u64; CATEGORY_COUNT], to: &[u64; CATEGORY_COUNT]) -> High {
        let live = std::array::from_fn(|c| self.live[c] + to[c] - from[c]);
        High { bytes: self.bytes + to.iter().sum::<u64>() - from.iter().sum::<u64>(), live, at: self.at }
    }
}

const MIB: u64 = 1 << 20;

/// cuBLASLt's workspace (PyTorch's default `TORCH_CUBLASLT_WORKSPACE_SIZE`, 1024 KiB).
const CUBLASLT_WORKSPACE_BYTES: u64 = MIB;

struct Mem<'t> {
    /// Whether large requests are counted as the caching allocator's whole segments (the
    /// fast approximation of `allocator` when that is off).
    whole_segments: bool,
    /// Whether an allocator or a timeline is attached: events then take the slower path.
    detailed: bool,
    /// The caching allocator, block by block (exact simulations).
    allocator: Option<CachingAllocator>,
    /// Allocator block handle per slot (exact simulations).
    handles: Vec<u32>,
    /// The slots of an exact run that were live at the last [`Mem::state_key`] or created
    /// since, in creation order: the key walks these instead of every slot the run created
    /// (which grows by thousands per micro-step, so walking them all made each key cost more
    /// than the micro-step before it).
    maybe_live: Vec<u32>,
    /// The key's hash over `maybe_live` up to each entry, as of the last key, and the lowest
    /// slot freed since: entries before it are still live in the same blocks, so their hashes
    /// stand (the parameters, the optimizer state and, within an iteration, the gradients).
    live_hashes: Vec<u64>,
    first_freed: u32,
    window_reserved: u64,
    /// Searches only ask whether a config fits: once the reserve passes this, the answer is
    /// no, the allocator is dropped and the rest of the run takes the fast path.
    reserve_limit: u64,
    /// The reserve when it passed `reserve_limit`, if it did (the run's reserve figures are
    /// then void).
    reserve_passed: Option<u64>,
    /// What the allocator could release (segments with no live block) when the reserve passed.
    releasable_when_passed: u64,
    /// What is being written down of the allocator's work, if anything (one field, so that
    /// the exact run's hot path tests one thing).
    trace: Option<Trace>,
    slots: Vec<(u64, Category)>,
    live: [u64; CATEGORY_COUNT],
    total: u64,
    granularity: u64,
    at: At,
    /// The highest point of the current window so far (or of the current stretch, see
    /// [`Mem::begin_stretch`]).
    window: High,
    timeline: Option<&'t mut Vec<TimelinePoint>>,
}

/// A state key from a layout hash and a hash chain over live tensors' addresses.
fn joint_key(layout: u64, chain: u64) -> u64 {
    use crate::allocator::mix;
    mix(layout ^ mix(chain))
}

/// What a small-pool tensor adds to [`Mem::large_pool_key`]'s chain (no address is this).
const SMALL_POOL_TENSOR: u64 = 0x9e37_79b9_7f4a_7c15;

impl<'t> Mem<'t> {
    fn new(granularity: u64, expected_tensors: usize, timeline: Option<&'t mut Vec<TimelinePoint>>) -> Self {
        let at = At { phase: Phase::Init, module: "model", layer: NO_LAYER, what: "", micro_step: 0 };
        Mem {
            whole_segments: false,
            detailed: timeline.is_some(),
            allocator: None,
            handles: Vec::new(),
            maybe_live: Vec::new(),
            live_hashes: Vec::new(),
            first_freed: u32::MAX,
            window_reserved: 0,
            reserve_limit: u64::MAX,
            reserve_passed: None,
            releasable_when_passed: 0,
            trace: None,
            slots: Vec::with_capacity(expected_tensors),
            live: [0; CATEGORY_COUNT],
            total: 0,
            granularity: granularity.max(1).next_power_of_two(),
            at,
            window: High { bytes: 0, live: [0; CATEGORY_COUNT], at },
            timeline,
        }
    }

    fn round(&self, bytes: u64) -> u64 {
        // The granularity is a power of two (512 B on CUDA).
        (bytes + self.granularity - 1) & !(self.granularity - 1)
    }

    /// What the caching allocator counts as allocated for a request: the request rounded up to
    /// 512 bytes, except that a request of 10 MiB or more gets a fresh segment rounded up to
    /// 2 MiB, which is not split when less than 1 MiB would be left over: the whole segment is
    /// then the block (and is reused whole for the same request in later iterations).
    fn block_bytes(&self, bytes: u64) -> u64 {
        let rounded = self.round(bytes);
        if self.whole_segments && rounded >= 10 * MIB {
            let segment = (rounded + 2 * MIB - 1) & !(2 * MIB - 1);
            if segment - rounded <= MIB {
                return segment;
            }
        }
        rounded
    }

    /// Where the next events happen.
    #[inline]
    fn at(&mut self, phase: Phase, module: &'static str, layer: u32, what: &'static str) {
        self.at.phase = phase;
        self.at.module = module;
        self.at.layer = layer;
        self.at.what = what;
    }

    /// Exact simulations: every tensor goes through the block-level caching allocator.
    /// `tensors` is about how many the run will create (one slot and one handle each), so
    /// that neither table is copied as it grows.
    fn attach_allocator(&mut self, allocator: CachingAllocator, tensors: usize) {
        self.allocator = Some(allocator);
        self.detailed = true;
        self.slots.reserve(tensors.saturating_sub(self.slots.len()));
        self.handles.reserve(tensors);
    }

    /// From now on, every event appends a point to `timeline`.
    fn attach_timeline(&mut self, timeline: &'t mut Vec<TimelinePoint>) {
        self.timeline = Some(timeline);
        self.detailed = true;
    }

    // The hot path. `alloc`, `push` and `free` run about a thousand times per fast simulation,
    // so they stay small enough to inline and test one flag for everything else: the exact
    // simulation's allocator bookkeeping and the timeline recorder live in separate,
    // never-inlined functions, so the fast path does not pay for their registers and stack.

    #[inline]
    fn alloc(&mut self, bytes: u64, cat: Category) -> Id {
        if bytes == 0 {
            return Id::NONE;
        }
        if self.detailed {
            return self.alloc_detailed(bytes, cat);
        }
        let bytes = self.block_bytes(bytes);
        self.push(bytes, cat)
    }

    /// [`Mem::alloc`] with an allocator (which picks the block) or a timeline attached.
    #[inline(never)]
    fn alloc_detailed(&mut self, bytes: u64, cat: Category) -> Id {
        let Some(a) = self.allocator.as_mut() else {
            let bytes = self.block_bytes(bytes);
            let id = self.push(bytes, cat);
            self.record();
            return id;
        };
        let (handle, block) = a.malloc(bytes);
        let reserved = a.reserved;
        self.handles.push(handle);
        self.maybe_live.push(self.slots.len() as u32);
        self.window_reserved = self.window_reserved.max(reserved);
        match self.trace.as_mut() {
            None => {}
            Some(Trace::Requests(requests)) => requests.push(Request::alloc(bytes)),
            Some(Trace::Events(log)) => {
                let (segment, offset) = a.place(handle);
                log.push(AllocEvent {
                    op: self.at.describe(),
                    phase: self.at.phase,
                    requested: bytes,
                    block: block as i64,
                    reserved,
                    segment,
                    offset,
                });
            }
        }
        let id = self.push(block, cat);
        self.record();
        if reserved > self.reserve_limit {
            self.give_up_allocator(reserved);
        }
        id
    }

    /// A hash of the allocator's layout and, for each live tensor in creation order, its
    /// block's address: equal keys at two iteration boundaries mean the iterations after them
    /// repeat (up to a 64-bit hash collision).
    fn state_key(&mut self) -> u64 {
        use crate::allocator::mix;
        let Some(a) = self.allocator.as_ref() else { return 0 };
        debug_assert_eq!(self.slots.len(), self.handles.len(), "every tensor of an exact run has a block");
        // `maybe_live` is in creation order: what precedes the first slot freed since the last
        // key is unchanged.
        let first_freed = self.first_freed;
        let keep = self.maybe_live.partition_point(|&id| id < first_freed).min(self.live_hashes.len());
        self.live_hashes.truncate(keep);
        let slots = &self.slots;
        let mut kept = keep;
        for at in keep..self.maybe_live.len() {
            let id = self.maybe_live[at];
            if slots[id as usize].0 > 0 {
                self.maybe_live[kept] = id;
                kept += 1;
            }
        }
        self.maybe_live.truncate(kept);
        let mut h = self.live_hashes.last().copied().unwrap_or(0);
        for &id in &self.maybe_live[keep..] {
            h = mix(h ^ a.addr(self.handles[id as usize]));
            self.live_hashes.push(h);
        }
        self.first_freed = u32::MAX;
        joint_key(a.layout_hash(), h)
    }

    /// The large pool's part of the state as of the last [`Mem::state_key`]: its blocks, and
    /// the addresses of the live tensors it holds, with where the small pool's live tensors
    /// fall among them. Equal at two iteration ends, the large pool repeats what it did after
    /// the first (while the iterations request the same: see [`SteadyIteration`]). With it,
    /// the large pool's layout hash.
    fn large_pool_key(&self) -> (u64, u64) {
        use crate::allocator::mix;
        let Some(a) = self.allocator.as_ref() else { return (0, 0) };
        let chain = self.maybe_live.iter().fold(0, |h, &id| {
            let handle = self.handles[id as usize];
            mix(h ^ if a.is_small(handle) { SMALL_POOL_TENSOR } else { a.addr(handle) })
        });
        let layout = a.layout_hashes().1;
        (joint_key(layout, chain), layout)
    }

    /// The block addresses of the live tensors from slot `first` on, in creation order, as of
    /// the last [`Mem::state_key`].
    fn live_addresses_from(&self, first: u32) -> Vec<u64> {
        let Some(a) = self.allocator.as_ref() else { return Vec::new() };
        let from = self.maybe_live.partition_point(|&id| id < first);
        self.maybe_live[from..].iter().map(|&id| a.addr(self.handles[id as usize])).collect()
    }

    /// The reserve passed the limit: the allocator's work is done (see `reserve_limit`).
    #[cold]
    fn give_up_allocator(&mut self, reserved: u64) {
        self.reserve_passed = Some(reserved);
        self.releasable_when_passed = self.allocator.as_ref().map_or(0, |a| a.releasable_bytes());
        self.allocator = None;
        self.detailed = self.timeline.is_some();
    }

    /// A bulk allocation of an exact byte count (already a sum of block sizes).
    fn alloc_exact(&mut self, bytes: u64, cat: Category) -> Id {
        if bytes == 0 {
            return Id::NONE;
        }
        debug_assert!(self.allocator.is_none(), "exact simulations allocate tensor by tensor");
        let id = self.push(bytes, cat);
        if self.detailed {
            self.record();
        }
        id
    }

    #[inline]
    fn push(&mut self, bytes: u64, cat: Category) -> Id {
        let id = Id(self.slots.len() as u32);
        self.slots.push((bytes, cat));
        self.live[cat.index()] += bytes;
        self.total += bytes;
        if self.total > self.window.bytes {
            self.window = self.here();
        }
        id
    }

    #[inline]
    fn free(&mut self, id: Id) {
        if id == Id::NONE {
            return;
        }
        let slot = &mut self.slots[id.0 as usize];
        let (bytes, cat) = *slot;
        slot.0 = 0;
        if bytes == 0 {
            return;
        }
        self.live[cat.index()] -= bytes;
        self.total -= bytes;
        if self.detailed {
            self.free_detailed(id, bytes);
        }
    }

    /// The rest of [`Mem::free`] with an allocator or a timeline attached.
    #[inline(never)]
    fn free_detailed(&mut self, id: Id, bytes: u64) {
        if self.allocator.is_some() {
            self.free_in_allocator(id, bytes);
        }
        self.record();
    }

    /// The allocator's side of [`Mem::free`] in an exact simulation.
    fn free_in_allocator(&mut self, id: Id, bytes: u64) {
        let Some(a) = self.allocator.as_mut() else { return };
        self.first_freed = self.first_freed.min(id.0);
        let handle = self.handles[id.0 as usize];
        let place = matches!(self.trace, Some(Trace::Events(_))).then(|| a.place(handle));
        a.free(handle);
        match (self.trace.as_mut(), place) {
            (Some(Trace::Requests(requests)), _) => requests.push(Request::free(id.0)),
            (Some(Trace::Events(log)), Some((segment, offset))) => log.push(AllocEvent {
                op: self.at.describe(),
                phase: self.at.phase,
                requested: 0,
                block: -(bytes as i64),
                reserved: a.reserved,
                segment,
                offset,
            }),
            _ => {}
        }
    }

    /// A tensor changes role without being copied (a gradient buffer becomes `param.grad`).
    #[inline]
    fn recategorize(&mut self, id: Id, cat: Category) {
        if id == Id::NONE {
            return;
        }
        let slot = &mut self.slots[id.0 as usize];
        self.live[slot.1.index()] -= slot.0;
        self.live[cat.index()] += slot.0;
        slot.1 = cat;
    }

    /// Appends the point after the event just applied to the timeline being recorded.
    #[inline]
    fn record(&mut self) {
        if self.timeline.is_some() {
            self.record_point();
        }
    }

    #[inline(never)]
    fn record_point(&mut self) {
        if let Some(tl) = self.timeline.as_deref_mut() {
            tl.push(TimelinePoint { phase: self.at.phase, op: self.at.op(), micro_step: self.at.micro_step, live_bytes: self.total });
        }
    }

    /// The live bytes and category of a tensor (nothing for `Id::NONE` or a freed one).
    fn slot(&self, id: Id) -> (u64, Category) {
        if id == Id::NONE {
            return (0, Category::Temporaries);
        }
        self.slots[id.0 as usize]
    }

    /// The current state as a candidate peak.
    #[inline]
    fn here(&self) -> High {
        High { bytes: self.total, live: self.live, at: self.at }
    }

    fn begin_window(&mut self) {
        self.window_reserved = self.allocator.as_ref().map_or(0, |a| a.reserved);
        self.window = self.here();
    }

    fn end_window(&self) -> Peak {
        Peak {
            bytes: self.window.bytes,
            phase: Some(self.window.at.phase),
            op: self.window.at.describe(),
            micro_step: self.window.at.micro_step,
            breakdown: Breakdown::from_array(&self.window.live),
            reserved_bytes: self.window_reserved,
        }
    }

    /// A point reached by events that were not simulated (see [`Run::replay_iteration`]):
    /// it becomes the window's peak if it is higher, as it would had the events run here.
    fn offer(&mut self, point: High) {
        if point.bytes > self.window.bytes {
            self.window = point;
        }
    }

    /// Starts a stretch inside the window: from here, `window` tracks the stretch's own highest
    /// point. Returns the window's so far, for [`Mem::end_stretch`].
    fn begin_stretch(&mut self) -> High {
        let here = self.here();
        std::mem::replace(&mut self.window, here)
    }

    /// Ends a stretch: returns its highest point and makes the window's peak the higher of it
    /// and the window's before the stretch (the earlier one on a tie, as if never split).
    fn end_stretch(&mut self, before: High) -> High {
        let stretch = self.window;
        if before.bytes >= stretch.bytes {
            self.window = before;
        }
        stretch
    }
}

// ---------------------------------------------------------------------------------------------
// Shapes
// ---------------------------------------------------------------------------------------------

/// The dimensions every size formula below uses, as u64 (validated: no product overflows).
#[derive(Clone, Copy)]
struct Dims {
    b: u64,
    t: u64,
    c: u64,
    h: u64,
    v: u64,
    /// Bytes per element of autocast's low-precision outputs (4 in pure fp32).
    cb: u64,
    autocast: bool,
    bias: bool,
    dropout: bool,
    manual: bool,
    /// SDPA falls back to its math path on this target (see [`Dims::sdpa_runs_math`]).
    math: bool,
    fp16: bool,
}

impl Dims {
    fn btc(&self) -> u64 {
        self.b * self.t * self.c
    }
    fn bt(&self) -> u64 {
        self.b * self.t
    }
    /// Elements of the logits: B*T*V.
    fn n(&self) -> u64 {
        self.b * self.t * self.v
    }
    /// Elements of one layer's attention matrix: B*H*T*T.
    fn bhtt(&self) -> u64 {
        self.b * self.h * self.t * self.t
    }

    // Manual attention's head views and the copies they cost. `matmul` merges (B, H) into
    // bmm's batch dimension with `reshape`, which is a view only where the strides allow it;
    // a dimension of size 1 imposes nothing. (Strides follow from nanoGPT's
    // `view(B, T, H, hs).transpose(1, 2)` of c_attn's (B, T, 3C) output.)

    /// The head size flash attention runs with where it pads q, k and v: PyTorch's SDPA picks
    /// cuDNN or flash for bf16/fp16 on CUDA, cuDNN needs a head size that is a multiple of 8,
    /// and the flash path then pads the last dimension to one (`pad_last_dim<8>` in
    /// aten/src/ATen/native/transformers/attention.cpp; flash takes head sizes up to 256).
    fn flash_padded_head(&self, cuda_kernels: bool) -> Option<u64> {
        let hs = self.c / self.h.max(1);
        (cuda_kernels && self.autocast && !self.manual && !hs.is_multiple_of(8) && hs <= 256).then(|| hs.div_ceil(8) * 8)
    }

    /// The head size FlashAttention-2 runs SDPA's forward with on `target`, if it does:
    /// bf16/fp16 on sm_80 and newer, where cuDNN does not come first or refuses the head size
    /// (padded heads, see [`Self::flash_padded_head`]).
    fn flash_forward_head(&self, target: &Target) -> Option<u64> {
        let hs = self.c / self.h.max(1);
        if !(target.cuda_kernels && target.flash_kernels && self.autocast && !self.manual && hs <= 256) {
            return None;
        }
        match self.flash_padded_head(true) {
            Some(hs8) => Some(hs8),
            None => (!target.sdpa_prefers_cudnn).then_some(hs),
        }
    }

    /// The split-KV accumulators of this mode's flash forward on `target` ([`flash_split_kv_scratch`]),
    /// `(0, 0)` where flash does not run the forward, with dropout (never split) or under fake
    /// tensors (inside the kernel, which a tensor counter does not see).
    fn flash_split_kv(&self, target: &Target) -> (u64, u64) {
        match self.flash_forward_head(target) {
            Some(hs) if !self.dropout && !target.fake_tensors => flash_split_kv_scratch(self.b, self.h, self.t, hs, target.multiprocessors),
            _ => (0, 0),
        }
    }

    /// q, k and v (strides T*3C, hs, 3C, 1) merge (B, H) without a copy only at B = 1 or H = 1.
    fn heads_fold_into_batch(&self) -> bool {
        self.b == 1 || self.h == 1
    }
    /// `y.transpose(1, 2).contiguous()` is already contiguous, so no copy, at H = 1 or T = 1.
    fn y_transposes_in_place(&self) -> bool {
        self.h == 1 || self.t == 1
    }
    /// y's gradient, a transposed view of c_proj's contiguous input gradient (strides T*C, hs,
    /// C, 1), merges (B, H) without a copy at B = 1, H = 1 or T = 1.
    fn grad_y_folds(&self) -> bool {
        self.b == 1 || self.h == 1 || self.t == 1
    }
    /// q's and v's gradients, (B, H, T, hs) contiguous, reshape back to (B, T, C) as views only
    /// at H = 1 or T = 1. k's transposed gradient (B, H, hs, T) always does.
    fn head_grads_unfold_in_place(&self) -> bool {
        self.h == 1 || self.t == 1
    }
    /// Where the math path's bmm saves a view of v itself (fp32, heads folding), which keeps
    /// c_attn's output alive until the backward.
    fn math_saves_v_view(&self) -> bool {
        !self.autocast && self.heads_fold_into_batch()
    }
}

/// Names of the matmul weights that autocast casts, per layer.
#[derive(Clone, Copy)]
enum Linear {
    Attn,
    AttnProj,
    Fc,
    MlpProj,
}

impl Linear {
    fn module(self) -> &'static str {
        match self {
            Linear::Attn => "transformer.h.{i}.attn.c_attn",
            Linear::AttnProj => "transformer.h.{i}.attn.c_proj",
            Linear::Fc => "transformer.h.{i}.mlp.c_fc",
            Linear::MlpProj => "transformer.h.{i}.mlp.c_proj",
        }
    }
    /// (out_features, in_features) in units of n_embd.
    fn shape(self) -> (u64, u64) {
        match self {
            Linear::Attn => (3, 1),
            Linear::AttnProj => (1, 1),
            Linear::Fc => (4, 1),
            Linear::MlpProj => (1, 4),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The loop
// ---------------------------------------------------------------------------------------------

/// Tensors one block keeps for its backward (or, with activation checkpointing, only `x_in`).
#[derive(Clone, Copy)]
struct BlockSaved {
    /// Block input (fp32 residual stream): saved by ln_1.
    x_in: Id,
    /// LayerNorm mean and rstd, (B,T) fp32 each: saved by ln_1.
    ln1_stats: [Id; 2],
    /// ln_1's output as c_attn sees it: the autocast copy (or the fp32 output itself).
    ln1_for_matmul: Id,
    /// Autocast's copies of each linear's weight and bias, cached then saved by the matmul.
    w_cast: [Id; 4],
    b_cast: [Id; 4],
    /// c_attn's output (B,T,3C): q, k, v are views of it, saved by attention.
    qkv: Id,
    /// Flash/efficient attention: its output (also c_proj's input) and logsumexp.
    attn_out: Id,
    attn_lse: Id,
    /// Flash attention with a head size not a multiple of 8: the zero-padded q, k, v and the
    /// padded output it saves (then `attn_out` is the contiguous copy c_proj reads).
    flash_padded: [Id; 4],
    /// FlashAttention-2's rng_state and its unused offset (16 and 8 bytes, a block each), which
    /// `mha_fwd` returns whether or not there is dropout and autograd saves as the philox seed
    /// and offset.
    flash_rng: [Id; 2],
    /// Manual attention: contiguous q and k^T copies, the mask, softmax output, its cast,
    /// contiguous v copy, dropout mask, and the re-laid-out output fed to c_proj.
    q_copy: Id,
    kt_copy: Id,
    mask: Id,
    softmax_out: Id,
    att_drop_mask: Id,
    att_for_matmul: Id,
    v_copy: Id,
    y_contig: Id,
    /// Dropout masks after attention and after the MLP.
    resid_mask: [Id; 2],
    /// Post-attention residual (fp32): saved by ln_2.
    x_mid: Id,
    ln2_stats: [Id; 2],
    ln2_for_matmul: Id,
    /// c_fc output (GELU's input) and GELU's output (c_proj's input).
    fc_out: Id,
    gelu_out: Id,
}

impl BlockSaved {
    fn empty() -> Self {
        BlockSaved {
            x_in: Id::NONE,
            ln1_stats: [Id::NONE; 2],
            ln1_for_matmul: Id::NONE,
            w_cast: [Id::NONE; 4],
            b_cast: [Id::NONE; 4],
            qkv: Id::NONE,
            attn_out: Id::NONE,
            attn_lse: Id::NONE,
            flash_padded: [Id::NONE; 4],
            flash_rng: [Id::NONE; 2],
            q_copy: Id::NONE,
            kt_copy: Id::NONE,
            mask: Id::NONE,
            softmax_out: Id::NONE,
            att_drop_mask: Id::NONE,
            att_for_matmul: Id::NONE,
            v_copy: Id::NONE,
            y_contig: Id::NONE,
            resid_mask: [Id::NONE; 2],
            x_mid: Id::NONE,
            ln2_stats: [Id::NONE; 2],
            ln2_for_matmul: Id::NONE,
            fc_out: Id::NONE,
            gelu_out: Id::NONE,
        }
    }
}

/// What the forward of one micro-step leaves for its backward, besides the blocks.
struct HeadSaved {
    /// GPT.forward's return values, for the caller to bind.
    logits: Id,
    loss: Id,
    pos: Id,
    emb_drop_mask: Id,
    lnf_in: Id,
    lnf_stats: [Id; 2],
    lnf_for_matmul: Id,
    wte_cast: Id,
    /// log_softmax's output (compute dtype), saved by its backward.
    log_probs: Id,
    /// Autocast's fp32 copy of it, saved by nll_loss (none in fp32).
    nll_input: Id,
    nll_total_weight: Id,
}

/// Whether the forward builds a graph (training) or runs under `torch.no_grad()` (eval).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Train,
    Eval,
}

/// How a block runs its forward.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BlockMode {
    /// Training: autograd saves what backward needs.
    Train,
    /// `torch.no_grad()` (estimate_loss): nothing is saved.
    NoGrad,
    /// Training under activation checkpointing: nothing is saved but the block input.
    Checkpointed,
}

struct Run<'c, 't> {
    cfg: &'c Config,
    target: Target,
    /// Whether SDPA runs its math path here ([`Dims::sdpa_runs_math`]), decided once.
    sdpa_math: bool,
    mem: Mem<'t>,
    /// One entry per parameter group that receives its gradient at once (a layer's linear
    /// weight, a LayerNorm's weight): rounded bytes, as PyTorch allocates each separately.
    grads: Vec<Id>,
    /// Whether `param.grad` buffers exist (micro-steps 2..GA): backward then adds in place.
    grads_resident: bool,
    opt_state: Vec<Id>,
    /// cuBLAS workspaces: created by the first matmul of each thread and never freed.
    workspace_fwd: bool,
    workspace_bwd: bool,
    /// A checkpointed block's recompute runs on the autograd engine's thread: its biased
    /// linears ask for that thread's own cuBLASLt workspace (created once, never freed).
    recomputing: bool,
    lt_workspace_bwd: bool,
    /// Python names that outlive a step.
    logits: Id,
    loss: Id,
    x_batch: Id,
    y_batch: Id,
    blocks: Vec<BlockSaved>,
    /// Weight copies held only by autocast's cache: freed when `with ctx:` ends.
    ctx_cache: Vec<Id>,
    /// Whether middle blocks are applied as net effects (see "layer folding").
    fold: bool,
    /// Parameter tensors, and their bytes as the allocator counts them (each rounded).
    param_tensors: u64,
    param_bytes: u64,
    /// The bulk allocations standing for the folded blocks' saved tensors, and their input.
    folded: [Id; CATEGORY_COUNT],
    folded_input: Id,
    /// While the first iteration of a folded run is being cut into stretches (see
    /// [`Run::replay_iteration`]).
    record: Option<IterationRecord>,
    /// How many micro-steps the last [`Run::iteration`] ran (fewer than it had where the
    /// allocator's state repeated), and the first slots of the one before it and of it.
    micro_steps_run: u32,
    iteration_bases: [u32; 2],
}

/// The first training iteration of a folded run, cut at the few events later iterations do
/// not share with it: the previous iteration's logits and loss that micro-step 1 drops (later
/// iterations only), the backward's cuBLAS workspace and AdamW's state (created in the first
/// iteration only). Between the cuts both run the same events on different bases.
#[derive(Default)]
struct IterationRecord {
    stretches: Vec<Stretch>,
    /// The stretch being recorded: the window's peak before it, and the live bytes at its start.
    open: Option<(High, [u64; CATEGORY_COUNT])>,
}

/// Events between two cuts: their highest point and the live bytes before and after them.
struct Stretch {
    high: High,
    start: [u64; CATEGORY_COUNT],
    end: [u64; CATEGORY_COUNT],
}

impl<'c, 't> Run<'c, 't> {
    fn new(cfg: &'c Config, target: Target, timeline: Option<&'t mut Vec<TimelinePoint>>) -> Self {
        // Room for every tensor a folded run creates, so the slot table never grows mid-run:
        // it simulates two blocks per pass (under 1,600 tensors in all for any eager config,
        // fewer compiled). Unfolded runs grow it as they go.
        let expected_tensors = 2048;
        let mut mem = Mem::new(target.granularity, expected_tensors, timeline);
        mem.whole_segments = !target.fake_tensors;
        let tensors = param_tensors(cfg);
        // Each parameter tensor is its own allocation (and so are its gradient and moments).
        let param_bytes = tensors.iter().map(|p| p.count * mem.block_bytes(p.elements() * 4)).sum();
        let param_tensors: u64 = tensors.iter().map(|p| p.count).sum();
        Run {
            cfg,
            target,
            sdpa_math: sdpa_runs_math(cfg, &target),
            fold: true,
            param_tensors,
            param_bytes,
            mem,
            // One gradient buffer per parameter tensor at most (folded blocks share one).
            grads: Vec::with_capacity(param_tensors as usize),
            grads_resident: false,
            opt_state: Vec::new(),
            workspace_fwd: false,
            workspace_bwd: false,
            recomputing: false,
            lt_workspace_bwd: false,
            logits: Id::NONE,
            loss: Id::NONE,
            x_batch: Id::NONE,
            y_batch: Id::NONE,
            blocks: vec![BlockSaved::empty(); cfg.n_layer as usize],
            ctx_cache: Vec::with_capacity(8 * cfg.n_layer as usize + 1),
            folded: [Id::NONE; CATEGORY_COUNT],
            folded_input: Id::NONE,
            record: None,
            micro_steps_run: 0,
            iteration_bases: [0; 2],
        }
    }

    #[inline]
    fn dims(&self, mode: Mode) -> Dims {
        Dims { math: self.sdpa_math, ..Dims::new(self.cfg, mode) }
    }
}

impl Dims {
    #[inline]
    fn new(cfg: &Config, mode: Mode) -> Dims {
        let (b, t) = match mode {
            Mode::Train => (cfg.batch_size as u64, cfg.block_size as u64),
            Mode::Eval => (cfg.eval_batch() as u64, cfg.eval_block() as u64),
        };
        Dims {
            b,
            t,
            c: cfg.n_embd as u64,
            h: cfg.n_head as u64,
            v: cfg.vocab_size as u64,
            cb: cfg.dtype.compute_bytes(),
            autocast: cfg.dtype.is_autocast(),
            bias: cfg.bias,
            dropout: cfg.dropout > 0.0 && mode == Mode::Train,
            manual: cfg.attention == Attention::Manual,
            math: false,
            fp16: cfg.dtype == Dtype::Float16,
        }
    }

    /// Whether SDPA refuses every fused kernel for this head size on `target` and runs its math
    /// path (`_scaled_dot_product_attention_math`). The rules are `sdp_utils.cpp`'s in PyTorch
    /// 2.11: FlashAttention-2 (sm_80+) takes bf16/fp16 heads up to 256 (padding them to a
    /// multiple of 8), cuDNN only multiples of 8, and the memory-efficient kernel heads that
    /// are a multiple of `minimum_gemm_alignment`: 4 in fp32 and 8 in bf16/fp16 on sm_80+
    /// (tensor cores), 8 in bf16/fp16 before. Measured on the H200: every fp32 head that is not
    /// a multiple of 4 and every bf16/fp16 head over 256 that is not a multiple of 8 ran the
    /// math path (`tests/reference/data/cuda-h200-odd-heads-*.json`, their `attention_ops`).
    fn sdpa_runs_math(&self, target: &Target) -> bool {
        let hs = self.c / self.h.max(1);
        if !target.cuda_kernels || self.manual {
            return false;
        }
        match (self.autocast, target.flash_kernels) {
            (false, true) => !hs.is_multiple_of(4),
            (false, false) => false,
            (true, true) => hs > 256 && !hs.is_multiple_of(8),
            // Before sm_80 the memory-efficient kernel takes float16 and float32 only (PyTorch's
            // sdp_utils: `less_than_sm80_mem_efficient_dtypes`), so bfloat16 runs the math path.
            (true, false) => !self.fp16 || !hs.is_multiple_of(8),
        }
    }
}

impl<'c, 't> Run<'c, 't> {
    // --- state that outlives iterations ----------------------------------------------------

    /// `model.to(device)`: every parameter tensor, plus the manual path's causal-mask buffers.
    fn init(&mut self) {
        self.mem.at(Phase::Init, "model", NO_LAYER, "to(device)");
        if self.mem.allocator.is_some() {
            // Tensor by tensor in module order, as `model.to(device)` moves them.
            for t in module_order(self.cfg) {
                let (ModuleTensor::Param(elems, _) | ModuleTensor::Buffer(elems)) = t;
                self.mem.alloc(elems * 4, Category::Parameters);
            }
        } else {
            // One allocation per tensor, as a sum of their block sizes (no window sees init).
            self.mem.alloc_exact(self.param_bytes, Category::Parameters);
        }
        if self.cfg.attention == Attention::Manual && self.mem.allocator.is_none() {
            // register_buffer("bias", tril(ones(block, block)).view(1,1,block,block)): fp32.
            let t = self.cfg.block_size as u64;
            for _ in 0..self.cfg.n_layer {
                self.mem.alloc(t * t * 4, Category::Parameters);
            }
        }
        // The first get_batch('train') before the loop.
        self.new_training_batch();
    }

    /// `X, Y = get_batch('train')`: two new (B,T) int64 tensors; the old ones die when the
    /// names move on, unless backward still holds them (X by the embedding, Y by the loss).
    fn new_training_batch(&mut self) -> (Id, Id) {
        let d = self.dims(Mode::Train);
        let x = self.mem.alloc(d.bt() * 8, Category::Batch);
        let y = self.mem.alloc(d.bt() * 8, Category::Batch);
        let old = (self.x_batch, self.y_batch);
        self.x_batch = x;
        self.y_batch = y;
        old
    }

    /// Called before every matmul: only the first one of each thread allocates.
    #[inline]
    fn ensure_workspace(&mut self, backward: bool) {
        let exists = if backward { self.workspace_bwd } else { self.workspace_fwd };
        if !exists {
            self.create_workspace(backward);
        }
        if self.recomputing && !self.lt_workspace_bwd {
            self.create_recompute_lt_workspace();
        }
    }

    /// The backward thread's cuBLASLt workspace, asked for by the first biased linear of the
    /// first recompute (PyTorch keys these workspaces by handle and stream, and each thread
    /// has its own handle). Measured on the H200: checkpointed configs with biases were
    /// 1.000 MiB above the model from the first backward on, those without were not.
    #[inline(never)]
    fn create_recompute_lt_workspace(&mut self) {
        self.lt_workspace_bwd = true;
        if self.cfg.bias && !self.target.fake_tensors {
            // Only the first iteration creates it: a cut in its record.
            self.end_stretch();
            self.mem.alloc(CUBLASLT_WORKSPACE_BYTES, Category::Workspace);
            self.begin_stretch();
        }
    }

    #[inline(never)]
    fn create_workspace(&mut self, backward: bool) {
        let ws = self.target.cublas_workspace_bytes;
        if backward {
            // Only the first iteration creates it: a cut in its record.
            self.end_stretch();
            self.workspace_bwd = true;
            self.mem.alloc(ws, Category::Workspace);
            self.begin_stretch();
        } else {
            self.workspace_fwd = true;
            self.mem.alloc(ws, Category::Workspace);
            // Linears with a bias run as addmm through cuBLASLt (bias epilogue), which gets a
            // workspace of its own on first use: 1 MiB, once (measured on an H100, torch 2.11:
            // every bias=True config is 1 MiB above its bias=False twin).
            if self.cfg.bias && !self.target.fake_tensors {
                self.mem.alloc(CUBLASLT_WORKSPACE_BYTES, Category::Workspace);
            }
        }
    }

    // --- forward ---------------------------------------------------------------------------

    /// nanoGPT's LayerNorm forward: a fp32 output, and the (B,T) fp32 mean and rstd that
    /// backward needs (dropped at once without a graph).
    #[inline]
    fn layer_norm(&mut self, d: &Dims, graph: bool) -> (Id, [Id; 2]) {
        let out = self.mem.alloc(d.btc() * 4, Category::Temporaries);
        if !graph {
            let m = self.mem.alloc(d.bt() * 4, Category::Temporaries);
            let r = self.mem.alloc(d.bt() * 4, Category::Temporaries);
            self.mem.free(m);
            self.mem.free(r);
            return (out, [Id::NONE; 2]);
        }
        let stats = [self.mem.alloc(d.bt() * 4, Category::SavedActivations), self.mem.alloc(d.bt() * 4, Category::SavedActivations)];
        (out, stats)
    }

    /// The input a matmul reads from a fp32 LayerNorm output: under autocast a low-precision
    /// copy (saved for backward), in fp32 the output itself (then saved as is). The caller
    /// frees the fp32 output when its Python name dies.
    #[inline]
    fn matmul_input(&mut self, d: &Dims, fp32: Id, graph: bool) -> Id {
        if d.autocast {
            let cat = if graph { Category::SavedActivations } else { Category::Temporaries };
            self.mem.alloc(d.bt() * d.c * d.cb, cat)
        } else {
            if graph {
                self.mem.recategorize(fp32, Category::SavedActivations);
            }
            fp32
        }
    }

    /// Autocast's cached low-precision copy of a linear's weight and bias (nothing in fp32).
    /// With a graph the matmul saves them until its backward; without one only the cache
    /// holds them, until `with ctx:` ends.
    #[inline]
    fn cast_weights(&mut self, d: &Dims, lin: Linear, graph: bool) -> (Id, Id) {
        if !d.autocast {
            return (Id::NONE, Id::NONE);
        }
        let (o, i) = lin.shape();
        let w = self.mem.alloc(o * i * d.c * d.c * d.cb, Category::CastWeights);
        let b = if d.bias { self.mem.alloc(o * d.c * d.cb, Category::CastWeights) } else { Id::NONE };
        if !graph {
            self.ctx_cache.push(w);
            if b != Id::NONE {
                self.ctx_cache.push(b);
            }
        }
        (w, b)
    }

    /// A dropout (p > 0, training): a new output and a 1-byte mask kept for backward (CUDA's
    /// fused kernel). CPU's kernel keeps an fp32 scaled noise tensor instead.
    #[inline]
    fn dropout(&mut self, d: &Dims, input: Id, elems: u64, elem_bytes: u64, cat: Category, graph: bool) -> (Id, Id) {
        if !d.dropout {
            return (input, Id::NONE);
        }
        let mask_bytes = if self.target.cuda_kernels { elems } else { elems * elem_bytes };
        let out = self.mem.alloc(elems * elem_bytes, cat);
        let mask = self.mem.alloc(mask_bytes, Category::SavedActivations);
        self.mem.free(input);
        if !graph {
            self.mem.free(mask);
            return (out, Id::NONE);
        }
        (out, mask)
    }

    // --- layer folding ---------------------------------------------------------------------
    //
    // Blocks are identical: the events of block i are those of block 0 shifted by what the
    // blocks before it left behind. So the live total inside any block is an affine function of
    // its index, and its maximum is reached in the first or the last block run. When no
    // timeline is recorded, the blocks in between are applied as their net effect (same bytes
    // per category, one bulk allocation each) instead of event by event, eager and compiled
    // alike. Peaks are unchanged (on a tie the earlier block, which is simulated, keeps it).

    /// Whether block `i` is applied as a net effect rather than simulated event by event.
    fn folds(&self, i: usize) -> bool {
        self.fold && i > 0 && i + 1 < self.cfg.n_layer as usize
    }

    /// Forward of the middle blocks 1..L-1 as `count` times block 0's net effect: the last
    /// one's output is a real tensor (block L-1's input, freed by its backward); the rest is one
    /// bulk allocation per category, kept for the backward (or, for weight copies held only by
    /// autocast's cache, released when `with ctx:` ends). The range's input (block 0's output)
    /// is kept for the range's backward.
    fn folded_blocks_forward(&mut self, x_in: Id, mode: BlockMode, per_layer: &[i64; CATEGORY_COUNT], count: usize) -> Id {
        let d = self.dims(if mode == BlockMode::NoGrad { Mode::Eval } else { Mode::Train });
        let out_cat = if mode == BlockMode::NoGrad { Category::Temporaries } else { Category::SavedActivations };
        let x_bytes = self.mem.round(d.btc() * 4);
        let mut bulk = [Id::NONE; CATEGORY_COUNT];
        for c in Category::ALL {
            let mut bytes = per_layer[c.index()] * count as i64;
            if c == out_cat && mode != BlockMode::NoGrad {
                bytes -= x_bytes as i64;
            }
            debug_assert!(bytes >= 0, "a block's forward never shrinks {c:?}");
            if bytes > 0 {
                let id = self.mem.alloc_exact(bytes as u64, c);
                if c == Category::CastWeights && mode != BlockMode::Train {
                    self.ctx_cache.push(id);
                } else {
                    bulk[c.index()] = id;
                }
            }
        }
        self.folded = bulk;
        if mode == BlockMode::NoGrad {
            return x_in;
        }
        self.folded_input = x_in;
        self.mem.alloc(d.btc() * 4, out_cat)
    }

    /// The blocks' backward, last layer first, by `block(run, layer)`. When the run folds, the
    /// last layer is simulated, the middle ones are applied as its net effect, and layer 0 is
    /// simulated again (eager and compiled runs alike).
    fn blocks_backward(&mut self, mut block: impl FnMut(&mut Self, usize)) {
        let layers = self.cfg.n_layer as usize;
        let mut per_layer = [0i64; CATEGORY_COUNT];
        let mut i = layers;
        while i > 0 {
            i -= 1;
            if self.folds(i) {
                self.folded_blocks_backward(&per_layer, layers - 2);
                i = 1;
                continue;
            }
            let before = self.mem.live;
            block(self, i);
            if i + 1 == layers {
                per_layer = delta(&before, &self.mem.live);
                // The recompute's cuBLASLt workspace comes once, in this block: not per layer.
                per_layer[Category::Workspace.index()] = 0;
            }
        }
    }

    /// Backward of the middle blocks as `count` times block L-1's net effect: their saved
    /// tensors go, their parameters' gradients arrive (one bulk allocation, or nothing when
    /// they are resident).
    fn folded_blocks_backward(&mut self, per_layer: &[i64; CATEGORY_COUNT], count: usize) {
        let target: [i64; CATEGORY_COUNT] = std::array::from_fn(|c| self.mem.live[c] as i64 + per_layer[c] * count as i64);
        for id in self.folded {
            self.mem.free(id);
        }
        self.folded = [Id::NONE; CATEGORY_COUNT];
        self.mem.free(self.folded_input);
        self.folded_input = Id::NONE;
        for c in Category::ALL {
            let missing = target[c.index()] - self.mem.live[c.index()] as i64;
            debug_assert!(missing >= 0, "folded backward overshoots {c:?} by {}", -missing);
            if missing > 0 {
                let id = self.mem.alloc_exact(missing as u64, c);
                if c == Category::Gradients {
                    self.grads.push(id);
                }
            }
        }
    }

    // --- a block, forward --------------------------------------------------------------------
    //
    // Python names matter as much as autograd here: an argument lives until the callee returns
    // (`self.attn(self.ln_1(x))` keeps ln_1's fp32 output alive through all of attention, and
    // `self.mlp(self.ln_2(x))` keeps ln_2's through the MLP), and CausalSelfAttention's locals
    // q, k, v (views of c_attn's output) live until it returns.

    /// One transformer block, forward. `x_in` is the block input (fp32, B,T,C); returns the
    /// block output. In training, `self.blocks[i]` receives what backward needs.
    fn block_forward(&mut self, i: usize, x_in: Id, mode: BlockMode) -> Id {
        let d = self.dims(if mode == BlockMode::NoGrad { Mode::Eval } else { Mode::Train });
        let layer = i as u32;
        let graph = mode == BlockMode::Train;
        let saved = if graph { Category::SavedActivations } else { Category::Temporaries };
        let phase = match mode {
            BlockMode::NoGrad => Phase::EvalForward,
            BlockMode::Train | BlockMode::Checkpointed => Phase::Forward,
        };
        let mut s = BlockSaved::empty();
        s.x_in = x_in;

        // ---- x + attn(ln_1(x)) ----
        self.mem.at(phase, "transformer.h.{i}.ln_1", layer, "");
        let (ln1, st1) = self.layer_norm(&d, graph);
        s.ln1_stats = st1;
        self.mem.at(phase, "transformer.h.{i}.attn.c_attn", layer, "");
        // The fp32 output stays alive (it is attn's argument) even when only its cast is saved.
        let ln1_mm = self.matmul_input(&d, ln1, graph);
        s.ln1_for_matmul = ln1_mm;
        (s.w_cast[0], s.b_cast[0]) = self.cast_weights(&d, Linear::Attn, graph);
        // The output is allocated before cuBLAS asks for its workspace (first matmul only).
        s.qkv = self.mem.alloc(3 * d.btc() * d.cb, saved);
        self.ensure_workspace(false);
        if !graph && ln1_mm != ln1 {
            self.mem.free(ln1_mm);
        }

        self.mem.at(phase, "transformer.h.{i}.attn", layer, "");
        let y = if d.manual {
            self.manual_attention(&d, &mut s, graph)
        } else if d.math {
            self.math_attention(&d, &mut s, graph)
        } else {
            self.sdpa(&d, &mut s, graph)
        };

        self.mem.at(phase, "transformer.h.{i}.attn.c_proj", layer, "");
        (s.w_cast[1], s.b_cast[1]) = self.cast_weights(&d, Linear::AttnProj, graph);
        let proj = self.mem.alloc(d.btc() * d.cb, Category::Temporaries);
        let (proj, m0) = self.dropout(&d, proj, d.btc(), d.cb, Category::Temporaries, graph);
        s.resid_mask[0] = m0;
        // attn.forward returns: its locals die (y unless saved; q, k, v; att). The manual path
        // saved copies of q, k and v, so c_attn's output goes now even in training (where the
        // heads fold without copies, the saved views keep it).
        let saved_elsewhere = if d.manual {
            !d.heads_fold_into_batch()
        } else if d.math {
            !d.math_saves_v_view()
        } else {
            s.flash_padded[0] != Id::NONE
        };
        if graph && saved_elsewhere {
            self.mem.free(s.qkv);
            s.qkv = Id::NONE;
        }
        if !graph {
            self.mem.free(y);
            self.mem.free(s.qkv);
            self.mem.free(s.softmax_out);
            self.mem.free(s.att_for_matmul);
        }
        // ... and so does its argument, ln_1's fp32 output, unless a matmul saved it (fp32).
        if !(graph && ln1_mm == ln1) {
            self.mem.free(ln1);
        }
        // fp32 + low precision promotes to fp32: a new residual tensor.
        self.mem.at(phase, "transformer.h.{i}", layer, "residual add");
        let x_mid = self.mem.alloc(d.btc() * 4, saved);
        self.mem.free(proj);
        s.x_mid = x_mid;

        // ---- x + mlp(ln_2(x)) ----
        self.mem.at(phase, "transformer.h.{i}.ln_2", layer, "");
        let (ln2, st2) = self.layer_norm(&d, graph);
        s.ln2_stats = st2;
        self.mem.at(phase, "transformer.h.{i}.mlp.c_fc", layer, "");
        let ln2_mm = self.matmul_input(&d, ln2, graph);
        s.ln2_for_matmul = ln2_mm;
        (s.w_cast[2], s.b_cast[2]) = self.cast_weights(&d, Linear::Fc, graph);
        s.fc_out = self.mem.alloc(4 * d.btc() * d.cb, saved);
        if !graph && ln2_mm != ln2 {
            self.mem.free(ln2_mm);
        }
        self.mem.at(phase, "transformer.h.{i}.mlp.gelu", layer, "");
        s.gelu_out = self.mem.alloc(4 * d.btc() * d.cb, saved);
        if !graph {
            self.mem.free(s.fc_out);
        }
        self.mem.at(phase, "transformer.h.{i}.mlp.c_proj", layer, "");
        (s.w_cast[3], s.b_cast[3]) = self.cast_weights(&d, Linear::MlpProj, graph);
        let mlp = self.mem.alloc(d.btc() * d.cb, Category::Temporaries);
        if !graph {
            self.mem.free(s.gelu_out);
        }
        let (mlp, m1) = self.dropout(&d, mlp, d.btc(), d.cb, Category::Temporaries, graph);
        s.resid_mask[1] = m1;
        if !(graph && ln2_mm == ln2) {
            self.mem.free(ln2);
        }
        self.mem.at(phase, "transformer.h.{i}", layer, "residual add");
        let out_cat = if mode == BlockMode::NoGrad { Category::Temporaries } else { Category::SavedActivations };
        let x_out = self.mem.alloc(d.btc() * 4, out_cat);
        self.mem.free(mlp);
        if !graph {
            // Block.forward's local x (x_mid) dies now; the caller's x (the block input) when
            // GPT.forward rebinds it, unless a checkpoint keeps it for the recompute.
            self.mem.free(x_mid);
            if mode == BlockMode::NoGrad {
                self.mem.free(x_in);
            }
            let mut kept = BlockSaved::empty();
            kept.x_in = x_in;
            self.blocks[i] = kept;
        } else {
            self.blocks[i] = s;
        }
        x_out
    }

    /// `F.scaled_dot_product_attention(..., is_causal=True)`: flash (bf16/fp16) or memory-
    /// efficient (fp32) kernels; both keep their output and a fp32 logsumexp for backward.
    /// Returns the (B,T,C) tensor c_proj reads: the output itself (its transpose back to
    /// (B,T,H,hs) is already contiguous).
    fn sdpa(&mut self, d: &Dims, s: &mut BlockSaved, graph: bool) -> Id {
        let saved = if graph { Category::SavedActivations } else { Category::Temporaries };
        if let Some(hs8) = d.flash_padded_head(self.target.cuda_kernels) {
            return self.padded_flash(d, s, graph, hs8);
        }
        s.attn_out = self.mem.alloc(d.btc() * d.cb, saved);
        // Flash keeps logsumexp as (B,H,T); the memory-efficient kernel pads T to 32 and only
        // computes it when a gradient is needed.
        let lse = if d.autocast || !self.target.cuda_kernels {
            self.mem.alloc(4 * d.b * d.h * d.t, saved)
        } else if graph {
            self.mem.alloc(4 * d.b * d.h * d.t.div_ceil(32) * 32, saved)
        } else {
            Id::NONE
        };
        if d.flash_forward_head(&self.target).is_some() {
            s.flash_rng = self.flash_forward_scratch(d, saved);
        }
        if graph {
            s.attn_lse = lse;
        } else {
            for id in [lse].into_iter().chain(s.flash_rng) {
                self.mem.free(id);
            }
        }
        s.attn_out
    }

    /// Flash attention on zero-padded heads: padded copies of q, k and v, a padded output
    /// (all four saved for backward, so c_attn's output is not), the fp32 logsumexp, and the
    /// output sliced back to the head size, which `y.transpose(1, 2).contiguous()` must copy.
    /// Measured on the H200: bf16/fp16 configs with 12, 20 or 100-dimensional heads were up to
    /// 5.5% above the unpadded model.
    fn padded_flash(&mut self, d: &Dims, s: &mut BlockSaved, graph: bool, hs8: u64) -> Id {
        let saved = if graph { Category::SavedActivations } else { Category::Temporaries };
        let padded = d.b * d.h * d.t * hs8 * d.cb;
        let [q, k, v] = [(); 3].map(|_| self.mem.alloc(padded, saved));
        let out = self.mem.alloc(padded, saved);
        let lse = self.mem.alloc(4 * d.b * d.h * d.t, saved);
        if d.flash_forward_head(&self.target).is_some() {
            s.flash_rng = self.flash_forward_scratch(d, saved);
        }
        if graph {
            s.flash_padded = [q, k, v, out];
            s.attn_lse = lse;
        } else {
            // The ATen function's locals go when it returns.
            for id in [lse, q, k, v].into_iter().chain(s.flash_rng) {
                self.mem.free(id);
            }
        }
        s.attn_out = self.mem.alloc(d.btc() * d.cb, saved);
        if !graph {
            // `y` is rebound to the copy: the sliced output goes.
            self.mem.free(out);
        }
        s.attn_out
    }

    /// The explicit attention: scores, mask, softmax (fp32 under autocast), dropout, `@ v`.
    /// Returns the contiguous (B,T,C) tensor c_proj reads.
    fn manual_attention(&mut self, d: &Dims, s: &mut BlockSaved, graph: bool) -> Id {
        let saved = if graph { Category::SavedActivations } else { Category::Temporaries };
        let tmp = Category::Temporaries;
        // q @ k^T: matmul folds (B,H) into one batch dim and must copy the strided views;
        // at B = 1 or H = 1 the views fold as they are, and the matmuls save views of c_attn's
        // output.
        if !d.heads_fold_into_batch() {
            s.q_copy = self.mem.alloc(d.btc() * d.cb, saved);
            s.kt_copy = self.mem.alloc(d.btc() * d.cb, saved);
        }
        let scores = self.mem.alloc(d.bhtt() * d.cb, tmp);
        if !graph {
            self.mem.free(s.q_copy);
            self.mem.free(s.kt_copy);
        }
        // * (1/sqrt(hs)): a new tensor; the product dies.
        let scaled = self.mem.alloc(d.bhtt() * d.cb, tmp);
        self.mem.free(scores);
        // masked_fill(bias[:,:,:T,:T] == 0, -inf): the bool mask is saved for backward.
        s.mask = self.mem.alloc(d.t * d.t, saved);
        let masked = self.mem.alloc(d.bhtt() * d.cb, tmp);
        self.mem.free(scaled);
        if !graph {
            self.mem.free(s.mask);
        }
        // softmax: autocast runs it in fp32. CUDA reads fp16 directly (half_to_float); bf16
        // (and any CPU input) is first copied to fp32.
        let upcast = if self.upcasts_before_fp32_softmax(d) { self.mem.alloc(d.bhtt() * 4, tmp) } else { Id::NONE };
        let soft_bytes = if d.autocast { 4 } else { d.cb };
        s.softmax_out = self.mem.alloc(d.bhtt() * soft_bytes, saved);
        self.mem.free(upcast);
        self.mem.free(masked);
        // attn_dropout: a new tensor and its mask; softmax's output stays (saved by softmax).
        let att = if d.dropout {
            let out = self.mem.alloc(d.bhtt() * soft_bytes, tmp);
            let mask_bytes = if self.target.cuda_kernels { d.bhtt() } else { d.bhtt() * soft_bytes };
            s.att_drop_mask = self.mem.alloc(mask_bytes, saved);
            if !graph {
                // No graph (a checkpointed block's first forward): nothing keeps the mask.
                self.mem.free(s.att_drop_mask);
                s.att_drop_mask = Id::NONE;
            }
            out
        } else {
            s.softmax_out
        };
        // att @ v: autocast casts att back to low precision; v's strided view is copied.
        if d.autocast {
            s.att_for_matmul = self.mem.alloc(d.bhtt() * d.cb, saved);
            if att != s.softmax_out {
                self.mem.free(att);
            }
        } else if att != s.softmax_out {
            // fp32 with dropout: the dropout output itself is bmm's saved input.
            self.mem.recategorize(att, saved);
            s.att_for_matmul = att;
        }
        if !graph && att != s.softmax_out {
            // `att` (the local) lives until attn returns.
            self.mem.free(s.softmax_out);
            s.softmax_out = att;
        }
        if !d.heads_fold_into_batch() {
            s.v_copy = self.mem.alloc(d.btc() * d.cb, saved);
        }
        let y = self.mem.alloc(d.btc() * d.cb, tmp);
        if !graph {
            // Without a graph the bmm's inputs made for it go when it returns, after its
            // output exists: v's copy and att's autocast cast.
            self.mem.free(s.v_copy);
            if d.autocast {
                self.mem.free(s.att_for_matmul);
                s.att_for_matmul = Id::NONE;
            }
        }
        self.heads_side_by_side(d, s, y, saved)
    }

    /// `y.transpose(1, 2).contiguous()` of attention's (B,H,T,hs) output `y`: a real copy
    /// (unless already contiguous), which c_proj keeps as its input.
    fn heads_side_by_side(&mut self, d: &Dims, s: &mut BlockSaved, y: Id, saved: Category) -> Id {
        if d.y_transposes_in_place() {
            self.mem.recategorize(y, saved);
            s.y_contig = y;
        } else {
            s.y_contig = self.mem.alloc(d.btc() * d.cb, saved);
            self.mem.free(y);
        }
        s.y_contig
    }

    /// SDPA's math fallback (`_scaled_dot_product_attention_math` in PyTorch 2.11's
    /// aten/src/ATen/native/transformers/attention.cpp), for head sizes every fused kernel
    /// refuses ([`Dims::sdpa_runs_math`]): a composite of ordinary ops, so the (B,H,T,T)
    /// matrices exist as in the manual path, but in fp32 always (under autocast it upcasts q, k
    /// and v first) and with its own transients. The order is the H200's memory history of
    /// `tests/reference/odd_head_configs.json`. Returns the contiguous (B,T,C) tensor c_proj
    /// reads.
    fn math_attention(&mut self, d: &Dims, s: &mut BlockSaved, graph: bool) -> Id {
        let saved = if graph { Category::SavedActivations } else { Category::Temporaries };
        let tmp = Category::Temporaries;
        // q and k scaled are new tensors laid out as their (B, T, H, hs) views (elementwise ops
        // keep the order of the strides; so does autocast's upcast, `_to_copy`'s
        // `infer_dense_strides`), so `matmul` copies them and v as the manual path does unless
        // the heads fold.
        let copies = !d.heads_fold_into_batch();
        // bmm saves q and k scaled (views) unless it needs copies of them.
        let scaled_cat = if copies { tmp } else { saved };
        // Under autocast: q, k, v upcast to fp32 (allow_fp16_bf16_reduction_math_sdp is off
        // by default); where the heads fold, v's upcast is bmm's saved operand.
        let [q32, k32, v32] = if d.autocast { [(); 3].map(|_| self.mem.alloc(d.btc() * 4, tmp)) } else { [Id::NONE; 3] };
        if v32 != Id::NONE && !copies {
            self.mem.recategorize(v32, saved);
        }
        // query * sqrt(scale), a new tensor.
        let q_scaled = self.mem.alloc(d.btc() * 4, scaled_cat);
        // is_causal: ones(T, T) as bool, tril (a new tensor), then the fp32 additive mask made
        // with two scalar tensors; the mask lives until the function returns.
        let ones = self.mem.alloc(d.t * d.t, tmp);
        let tril = self.mem.alloc(d.t * d.t, tmp);
        self.mem.free(ones);
        let scalars = [(); 2].map(|_| self.mem.alloc(4, tmp));
        let mask = self.mem.alloc(d.t * d.t * 4, tmp);
        self.mem.free(scalars[1]);
        self.mem.free(scalars[0]);
        self.mem.free(tril);
        // key * sqrt(scale), transposed into the matmul.
        let k_scaled = self.mem.alloc(d.btc() * 4, scaled_cat);
        if copies {
            s.q_copy = self.mem.alloc(d.btc() * 4, saved);
            s.kt_copy = self.mem.alloc(d.btc() * 4, saved);
        } else {
            (s.q_copy, s.kt_copy) = (q_scaled, k_scaled);
        }
        let scores = self.mem.alloc(d.bhtt() * 4, tmp);
        if copies {
            if !graph {
                self.mem.free(s.kt_copy);
                self.mem.free(s.q_copy);
            }
            self.mem.free(k_scaled);
        } else if !graph {
            self.mem.free(k_scaled);
        }
        // The mask is added in place; _safe_softmax's output (saved), then its check for fully
        // masked rows: an eq (bool), an all over the last dim, a zero scalar.
        s.softmax_out = self.mem.alloc(d.bhtt() * 4, saved);
        let eq = self.mem.alloc(d.bhtt(), tmp);
        let rows = self.mem.alloc(d.b * d.h * d.t, tmp);
        let zero = self.mem.alloc(4, tmp);
        for id in [zero, rows, eq, scores] {
            self.mem.free(id);
        }
        // Dropout (native_dropout): the bool mask, then the output, bmm's saved operand.
        let att = if d.dropout {
            let drop_mask = self.mem.alloc(d.bhtt(), saved);
            let out = self.mem.alloc(d.bhtt() * 4, saved);
            if graph {
                s.att_drop_mask = drop_mask;
                s.att_for_matmul = out;
            } else {
                // No graph: nothing keeps the mask, and `attn` rebound frees the softmax.
                self.mem.free(drop_mask);
                self.mem.free(s.softmax_out);
                s.softmax_out = Id::NONE;
            }
            out
        } else {
            s.softmax_out
        };
        // Under autocast the result is cast back: the attention weights (returned, unused:
        // GCC evaluates make_tuple's arguments right to left) before the output.
        let att_cast = if d.autocast { self.mem.alloc(d.bhtt() * d.cb, tmp) } else { Id::NONE };
        if copies {
            s.v_copy = self.mem.alloc(d.btc() * 4, saved);
        } else {
            s.v_copy = v32;
        }
        let mut y = self.mem.alloc(d.btc() * 4, tmp);
        if !graph && copies {
            self.mem.free(s.v_copy);
            s.v_copy = Id::NONE;
        }
        if d.autocast {
            let y_low = self.mem.alloc(d.btc() * d.cb, tmp);
            self.mem.free(y);
            y = y_low;
        }
        // Returning: the locals go (those autograd saved stay).
        if d.autocast {
            if !graph {
                self.mem.free(att);
            }
            if copies || !graph {
                self.mem.free(q_scaled);
            }
            self.mem.free(mask);
            if copies || !graph {
                self.mem.free(v32);
            }
            if !graph {
                s.v_copy = Id::NONE;
            }
            self.mem.free(k32);
            self.mem.free(q32);
            self.mem.free(att_cast);
        } else {
            if copies || !graph {
                self.mem.free(q_scaled);
            }
            self.mem.free(mask);
            if !graph {
                self.mem.free(att);
            }
        }
        if !graph {
            s.softmax_out = Id::NONE;
            s.att_for_matmul = Id::NONE;
            (s.q_copy, s.kt_copy) = (Id::NONE, Id::NONE);
        }
        self.heads_side_by_side(d, s, y, saved)
    }

    fn upcasts_before_fp32_softmax(&self, d: &Dims) -> bool {
        d.autocast && !(d.fp16 && self.target.cuda_kernels)
    }

    // --- GPT.forward -------------------------------------------------------------------------

    /// GPT.forward with targets, inside `with ctx:`, then `loss = loss / GA` in training.
    /// Afterwards `self.logits`/`self.loss` hold the new tensors (the old ones died at the
    /// assignment, as in Python).
    fn forward(&mut self, mode: Mode) -> HeadSaved {
        if self.cfg.compile {
            return self.compiled_forward(mode);
        }
        let d = self.dims(mode);
        let graph = mode == Mode::Train;
        let phase = if graph { Phase::Forward } else { Phase::EvalForward };
        let saved = if graph { Category::SavedActivations } else { Category::Temporaries };

        self.mem.at(phase, "transformer.wte+wpe", NO_LAYER, "");
        // pos = arange(t) (kept by wpe's backward); tok_emb and pos_emb are locals of
        // GPT.forward and live until it returns.
        let pos = self.mem.alloc(d.t * 8, Category::Batch);
        let tok_emb = self.mem.alloc(d.btc() * 4, Category::Temporaries);
        let pos_emb = self.mem.alloc(d.t * d.c * 4, Category::Temporaries);
        let x0 = self.mem.alloc(d.btc() * 4, saved);
        let (mut x, emb_mask) = self.dropout(&d, x0, d.btc(), 4, saved, graph);

        let block_mode = match (graph, self.cfg.activation_checkpointing) {
            (false, _) => BlockMode::NoGrad,
            (true, false) => BlockMode::Train,
            (true, true) => BlockMode::Checkpointed,
        };
        let layers = self.cfg.n_layer as usize;
        let mut per_layer = [0i64; CATEGORY_COUNT];
        let mut i = 0;
        while i < layers {
            if self.folds(i) {
                // Blocks 1..L-1 at once (see "layer folding").
                x = self.folded_blocks_forward(x, block_mode, &per_layer, layers - 2);
                i = layers - 1;
                continue;
            }
            let before = self.mem.live;
            x = self.block_forward(i, x, block_mode);
            if i == 0 {
                per_layer = delta(&before, &self.mem.live);
            }
            i += 1;
        }

        self.mem.at(phase, "transformer.ln_f", NO_LAYER, "");
        let (lnf, lnf_stats) = self.layer_norm(&d, graph);
        if !graph {
            self.mem.free(x);
        }
        self.mem.at(phase, "lm_head", NO_LAYER, "");
        let lnf_mm = self.matmul_input(&d, lnf, graph);
        let wte_cast = if d.autocast {
            let cat = Category::CastWeights;
            let id = self.mem.alloc(d.v * d.c * d.cb, cat);
            if !graph {
                self.ctx_cache.push(id);
            }
            id
        } else {
            Id::NONE
        };
        let logits = self.mem.alloc(d.n() * d.cb, Category::LogitsAndLoss);
        self.ensure_workspace(false);
        if !graph && lnf_mm != lnf {
            self.mem.free(lnf_mm);
        }

        // F.cross_entropy = log_softmax + nll_loss. cross_entropy passes the logits' own dtype to
        // log_softmax explicitly, so autocast leaves it in the compute dtype; nll_loss is on
        // autocast's fp32 list, so it copies the log-probabilities to fp32 and saves that copy.
        // (Measured on an H100 with torch 2.11: 6 bytes per logit beyond the bf16 logits after
        // the forward, 10 at the backward's peak; tests/reference/probes/cuda_facts.py.)
        let loss_phase = if graph { Phase::Loss } else { Phase::EvalLoss };
        self.mem.at(loss_phase, "cross_entropy", NO_LAYER, "log_softmax");
        let log_probs = self.mem.alloc(d.n() * d.cb, Category::LogitsAndLoss);
        self.mem.at(loss_phase, "cross_entropy", NO_LAYER, "nll_loss");
        let nll_input = if d.autocast { self.mem.alloc(d.n() * 4, Category::LogitsAndLoss) } else { Id::NONE };
        let loss = self.mem.alloc(4, Category::LogitsAndLoss);
        let total_weight = self.mem.alloc(4, Category::LogitsAndLoss);
        if !graph {
            self.mem.free(nll_input);
            self.mem.free(log_probs);
            self.mem.free(total_weight);
        }

        // GPT.forward returns: its locals die (tok_emb, pos_emb, ln_f's fp32 output unless a
        // matmul saved it, pos unless wpe's backward keeps it).
        self.mem.free(tok_emb);
        self.mem.free(pos_emb);
        if !(graph && lnf_mm == lnf) {
            self.mem.free(lnf);
        }
        if !graph {
            self.mem.free(pos);
        }
        // `with ctx:` ends: autocast's cache lets go of its weight copies.
        while let Some(id) = self.ctx_cache.pop() {
            self.mem.free(id);
        }

        HeadSaved {
            logits,
            loss,
            pos,
            emb_drop_mask: emb_mask,
            lnf_in: x,
            lnf_stats,
            lnf_for_matmul: lnf_mm,
            wte_cast,
            log_probs,
            nll_input,
            nll_total_weight: total_weight,
        }
    }

    // --- backward ------------------------------------------------------------------------------
    //
    // The autograd engine runs nodes in reverse creation order. A node allocates its outputs
    // while its incoming gradient and its saved tensors are alive, then both are dropped.
    // Gradients flowing into a tensor with two consumers (the residual stream) are added in
    // place into the first one to arrive. Weight gradients come out of the matmul in the
    // compute dtype and are cast to fp32 by the weight cast's own backward node.

    /// A parameter's gradient has been computed: it becomes `param.grad` (first micro-step)
    /// or is added in place into the existing one and dropped (later micro-steps).
    #[inline]
    fn grad_arrives(&mut self, id: Id, resident: bool) {
        if id == Id::NONE {
            return;
        }
        if resident {
            self.mem.free(id);
        } else {
            self.mem.recategorize(id, Category::Gradients);
            self.grads.push(id);
        }
    }

    /// Backward of a linear layer `y = x @ W^T (+ b)` whose incoming gradient is `g_out`
    /// (compute dtype, `out_cols` columns). Returns the gradient of its input (compute dtype).
    #[allow(clippy::too_many_arguments)]
    fn linear_backward(
        &mut self,
        d: &Dims,
        lin: Linear,
        layer: u32,
        g_out: Id,
        saved_input: Id,
        w_cast: Id,
        b_cast: Id,
        in_cols: u64,
    ) -> Id {
        let (o, i) = lin.shape();
        self.mem.at(Phase::Backward, lin.module(), layer, "backward");
        let g_in = self.mem.alloc(d.bt() * in_cols * d.cb, Category::Temporaries);
        self.ensure_workspace(true);
        let g_w = self.mem.alloc(o * i * d.c * d.c * d.cb, Category::Temporaries);
        // The bias gradient is the incoming one summed over the rows, which the engine does
        // after the matmul's node returns (`validate_outputs`), and the node drops what it
        // saved after that. A checkpointed block's saved tensors are the recompute's, which the
        // checkpoint hands out once and forgets, so they go when the node returns, before the
        // sum (a CPU trace of checkpointed configs with bias shows it).
        let checkpointed = self.cfg.activation_checkpointing;
        if checkpointed {
            self.mem.free(saved_input);
            self.mem.free(w_cast);
        }
        let g_b = if d.bias { self.mem.alloc(o * d.c * d.cb, Category::Temporaries) } else { Id::NONE };
        if d.bias {
            self.sum_scratch(d.bt(), o * d.c);
        }
        self.mem.free(g_out);
        if !checkpointed {
            self.mem.free(saved_input);
            self.mem.free(w_cast);
        }
        self.mem.free(b_cast);
        self.weight_grads_to_fp32(d, g_w, g_b, o * i * d.c * d.c, o * d.c);
        g_in
    }

    /// CUDA's sum over the rows of a (rows, cols) gradient, after its output exists: its global
    /// scratch, taken and given back inside the kernel (see [`sum_over_rows_scratch`]).
    #[inline]
    fn sum_scratch(&mut self, rows: u64, cols: u64) {
        let (buffer, semaphores) = sum_over_rows_scratch(rows, cols, &self.target);
        if buffer > 0 {
            let b = self.mem.alloc(buffer, Category::Temporaries);
            let s = self.mem.alloc(semaphores, Category::Temporaries);
            self.mem.free(s);
            self.mem.free(b);
        }
    }

    /// The weight cast's backward (autocast only) turns the low-precision weight gradient into
    /// fp32; then AccumulateGrad takes it.
    #[inline]
    fn weight_grads_to_fp32(&mut self, d: &Dims, g_w: Id, g_b: Id, w_elems: u64, b_elems: u64) {
        let resident = self.grads_resident;
        for (g, elems) in [(g_b, b_elems), (g_w, w_elems)] {
            if g == Id::NONE {
                continue;
            }
            if d.autocast {
                let g32 = self.mem.alloc(elems * 4, Category::Temporaries);
                self.mem.free(g);
                self.grad_arrives(g32, resident);
            } else {
                self.grad_arrives(g, resident);
            }
        }
    }

    /// A LayerNorm's backward, from the gradient of its output as the matmul produced it.
    /// Returns the fp32 gradient of its input.
    fn layer_norm_backward(&mut self, d: &Dims, module: &'static str, layer: u32, g_mm: Id, input: Id, stats: [Id; 2]) -> Id {
        self.mem.at(Phase::Backward, module, layer, "backward");
        // Autocast's cast of the LayerNorm output: its backward casts the gradient to fp32.
        let g = if d.autocast {
            let g32 = self.mem.alloc(d.btc() * 4, Category::Temporaries);
            self.mem.free(g_mm);
            g32
        } else {
            g_mm
        };
        let g_in = self.mem.alloc(d.btc() * 4, Category::Temporaries);
        let g_w = self.mem.alloc(d.c * 4, Category::Temporaries);
        let g_b = if d.bias { self.mem.alloc(d.c * 4, Category::Temporaries) } else { Id::NONE };
        self.mem.free(g);
        self.mem.free(input);
        self.mem.free(stats[0]);
        self.mem.free(stats[1]);
        let resident = self.grads_resident;
        self.grad_arrives(g_w, resident);
        self.grad_arrives(g_b, resident);
        g_in
    }

    /// The gradient a residual add hands its low-precision branch: the engine casts the fp32
    /// gradient to the branch's dtype (a new tensor) or, in fp32, passes the same tensor.
    #[inline]
    fn branch_grad(&mut self, d: &Dims, g: Id) -> Id {
        if d.autocast {
            self.mem.alloc(d.btc() * d.cb, Category::Temporaries)
        } else {
            g
        }
    }

    /// Frees a branch gradient unless it is the residual gradient itself.
    #[inline]
    fn free_branch(&mut self, g_branch: Id, g: Id) {
        if g_branch != g {
            self.mem.free(g_branch);
        }
    }

    #[inline]
    fn dropout_backward(&mut self, d: &Dims, g: Id, keep: Id, mask: Id, elem_bytes: u64) -> Id {
        if mask == Id::NONE {
            return g;
        }
        let out = self.mem.alloc(d.btc() * elem_bytes, Category::Temporaries);
        if g != keep {
            self.mem.free(g);
        }
        self.mem.free(mask);
        out
    }

    /// One block's backward. `g` is the fp32 gradient of the block output; it becomes the
    /// gradient of the block input (in place) and is returned.
    fn block_backward(&mut self, i: usize, g: Id) -> Id {
        let d = self.dims(Mode::Train);
        let layer = i as u32;
        if self.cfg.activation_checkpointing {
            // Recompute the block from its kept input, this time saving for backward; the
            // recomputed output itself is discarded.
            self.mem.at(Phase::Backward, "transformer.h.{i}", layer, "recompute");
            let x_in = self.blocks[i].x_in;
            self.recomputing = true;
            let out = self.block_forward(i, x_in, BlockMode::Train);
            self.recomputing = false;
            self.mem.free(out);
        }
        let s = self.blocks[i];

        // x_out = x_mid + mlp(ln_2(x_mid))
        self.mem.at(Phase::Backward, "transformer.h.{i}.mlp", layer, "backward");
        let g_mlp = self.branch_grad(&d, g);
        let g_mlp2 = self.dropout_backward(&d, g_mlp, g, s.resid_mask[1], d.cb);
        if g_mlp2 != g_mlp {
            self.free_branch(g_mlp, g);
        }
        let g_mlp = g_mlp2;
        let g_gelu = self.linear_backward(&d, Linear::MlpProj, layer, Id::NONE, s.gelu_out, s.w_cast[3], s.b_cast[3], 4 * d.c);
        self.free_branch(g_mlp, g);
        self.mem.at(Phase::Backward, "transformer.h.{i}.mlp.gelu", layer, "backward");
        let g_fc = self.mem.alloc(4 * d.btc() * d.cb, Category::Temporaries);
        self.mem.free(g_gelu);
        self.mem.free(s.fc_out);
        let g_ln2 = self.linear_backward(&d, Linear::Fc, layer, g_fc, s.ln2_for_matmul, s.w_cast[2], s.b_cast[2], d.c);
        let g_mid = self.layer_norm_backward(&d, "transformer.h.{i}.ln_2", layer, g_ln2, s.x_mid, s.ln2_stats);
        // Accumulated in place into the residual gradient.
        self.mem.free(g_mid);

        // x_mid = x_in + attn(ln_1(x_in))
        self.mem.at(Phase::Backward, "transformer.h.{i}.attn", layer, "backward");
        let g_att = self.branch_grad(&d, g);
        let g_att2 = self.dropout_backward(&d, g_att, g, s.resid_mask[0], d.cb);
        if g_att2 != g_att {
            self.free_branch(g_att, g);
        }
        let g_att = g_att2;
        // Flash saves its own output, which c_proj reads, unless the heads were padded.
        let proj_input = if d.manual || d.math {
            s.y_contig
        } else if s.flash_padded[0] != Id::NONE {
            s.attn_out
        } else {
            Id::NONE
        };
        let g_y = self.linear_backward(&d, Linear::AttnProj, layer, Id::NONE, proj_input, s.w_cast[1], s.b_cast[1], d.c);
        self.free_branch(g_att, g);
        let g_qkv = if d.manual {
            self.manual_attention_backward(&d, &s, layer, g_y)
        } else if d.math {
            self.math_attention_backward(&d, &s, layer, g_y)
        } else {
            self.sdpa_backward(&d, &s, layer, g_y)
        };
        let g_ln1 = self.linear_backward(&d, Linear::Attn, layer, g_qkv, s.ln1_for_matmul, s.w_cast[0], s.b_cast[0], d.c);
        let g_in = self.layer_norm_backward(&d, "transformer.h.{i}.ln_1", layer, g_ln1, s.x_in, s.ln1_stats);
        self.mem.free(g_in);
        g
    }

    /// Flash (or memory-efficient) attention backward: dq, dk, dv plus the kernel's fp32
    /// scratch, then SplitBackward concatenates them into the gradient of c_attn's output.
    fn sdpa_backward(&mut self, d: &Dims, s: &BlockSaved, layer: u32, g_y: Id) -> Id {
        self.mem.at(Phase::Backward, "transformer.h.{i}.attn.sdpa", layer, "backward");
        if s.flash_padded[0] != Id::NONE {
            return self.padded_flash_backward(d, s, layer, g_y);
        }
        let grads = [
            self.mem.alloc(d.btc() * d.cb, Category::Temporaries),
            self.mem.alloc(d.btc() * d.cb, Category::Temporaries),
            self.mem.alloc(d.btc() * d.cb, Category::Temporaries),
        ];
        // The kernel's own scratch (a tensor counter does not see it).
        if !self.target.fake_tensors && d.autocast {
            self.flash_backward_scratch(d, d.c / d.h);
        } else if !self.target.fake_tensors {
            // memory-efficient kernel: delta (B, H, T) fp32.
            let delta = self.mem.alloc(4 * d.b * d.h * d.t, Category::Temporaries);
            self.mem.free(delta);
        }
        self.mem.free(g_y);
        self.mem.free(s.qkv);
        self.mem.free(s.attn_out);
        for id in [s.attn_lse].into_iter().chain(s.flash_rng) {
            self.mem.free(id);
        }
        self.mem.at(Phase::Backward, "transformer.h.{i}.attn.c_attn", layer, "split backward");
        let g_qkv = self.mem.alloc(3 * d.btc() * d.cb, Category::Temporaries);
        for g in grads {
            self.mem.free(g);
        }
        g_qkv
    }

    /// flash-attn 2's forward after its output and logsumexp (`mha_fwd`): the split-KV
    /// accumulators ([`Dims::flash_split_kv`]), then the rng_state and unused offset it returns,
    /// as `saved`; the accumulators go when it returns. Nothing under fake tensors, whose
    /// counter does not see inside the kernel.
    fn flash_forward_scratch(&mut self, d: &Dims, saved: Category) -> [Id; 2] {
        if self.target.fake_tensors {
            return [Id::NONE; 2];
        }
        let (lse_accum, out_accum) = d.flash_split_kv(&self.target);
        let accumulators =
            [lse_accum, out_accum].map(|bytes| if bytes > 0 { self.mem.alloc(bytes, Category::Temporaries) } else { Id::NONE });
        let rng = [16, 8].map(|bytes| self.mem.alloc(bytes, saved));
        for id in accumulators {
            self.mem.free(id);
        }
        rng
    }

    /// flash-attn 2's backward scratch for heads of `hs`: dq_accum (B, T rounded to 128, H, hs
    /// rounded to 32) and softmax_d (B, H, T rounded to 128), both fp32, freed when the kernel
    /// returns.
    fn flash_backward_scratch(&mut self, d: &Dims, hs: u64) {
        let t128 = d.t.div_ceil(128) * 128;
        let acc = self.mem.alloc(4 * d.b * t128 * d.h * hs.div_ceil(32) * 32, Category::Temporaries);
        let sd = self.mem.alloc(4 * d.b * d.h * t128, Category::Temporaries);
        self.mem.free(acc);
        self.mem.free(sd);
    }

    /// [`Self::padded_flash`]'s backward: the slice's backward zero-pads y's gradient, flash
    /// returns padded dq, dk, dv (and takes the same fp32 scratch at the padded size); each
    /// goes back through its pad (a slice), transpose and view, where the sliced heads do not
    /// merge into (B, T, C): a copy each, v's first (the engine runs the newest node first),
    /// then q's and k's, and SplitBackward concatenates them.
    fn padded_flash_backward(&mut self, d: &Dims, s: &BlockSaved, layer: u32, g_y: Id) -> Id {
        let hs8 = d.flash_padded_head(self.target.cuda_kernels).expect("padded heads");
        let padded = d.b * d.h * d.t * hs8 * d.cb;
        let tmp = Category::Temporaries;
        let g_out = self.mem.alloc(padded, tmp);
        self.mem.free(g_y);
        let [dq, dk, dv] = [(); 3].map(|_| self.mem.alloc(padded, tmp));
        if !self.target.fake_tensors {
            self.flash_backward_scratch(d, hs8);
        }
        self.mem.free(g_out);
        for id in s.flash_padded {
            self.mem.free(id);
        }
        for id in [s.attn_lse].into_iter().chain(s.flash_rng) {
            self.mem.free(id);
        }
        let mut copies = [Id::NONE; 3];
        for (copy, grad) in copies.iter_mut().zip([dv, dq, dk]) {
            *copy = self.mem.alloc(d.btc() * d.cb, tmp);
            self.mem.free(grad);
        }
        self.mem.at(Phase::Backward, "transformer.h.{i}.attn.c_attn", layer, "split backward");
        let g_qkv = self.mem.alloc(3 * d.btc() * d.cb, tmp);
        for id in copies {
            self.mem.free(id);
        }
        g_qkv
    }

    /// The explicit attention's backward, node by node.
    fn manual_attention_backward(&mut self, d: &Dims, s: &BlockSaved, layer: u32, g_y: Id) -> Id {
        self.mem.at(Phase::Backward, "transformer.h.{i}.attn", layer, "att @ v backward");
        let tmp = Category::Temporaries;
        // y.transpose(1,2).contiguous() backward passes the gradient through as a strided
        // view; bmm's folding reshape needs it contiguous: a copy (unless it folds as it is).
        let g_y_c = if d.grad_y_folds() {
            g_y
        } else {
            let copy = self.mem.alloc(d.btc() * d.cb, tmp);
            self.mem.free(g_y);
            copy
        };
        // bmm(att, v): the gradient of v (bmm's second argument comes first), then of att.
        let g_v = self.mem.alloc(d.btc() * d.cb, tmp);
        let g_att = self.mem.alloc(d.bhtt() * d.cb, tmp);
        self.mem.free(g_y_c);
        self.mem.free(s.att_for_matmul);
        self.mem.free(s.v_copy);
        // att cast back to fp32 (autocast), dropout, softmax backward.
        self.mem.at(Phase::Backward, "transformer.h.{i}.attn", layer, "softmax backward");
        let soft_bytes = if d.autocast { 4 } else { d.cb };
        let mut g = g_att;
        if d.autocast {
            let g32 = self.mem.alloc(d.bhtt() * 4, tmp);
            self.mem.free(g);
            g = g32;
        }
        if s.att_drop_mask != Id::NONE {
            let gd = self.mem.alloc(d.bhtt() * soft_bytes, tmp);
            self.mem.free(g);
            self.mem.free(s.att_drop_mask);
            g = gd;
        }
        let half_to_float = d.fp16 && self.target.cuda_kernels;
        let g_in_bytes = if half_to_float { 2 } else { soft_bytes };
        let g_soft = self.mem.alloc(d.bhtt() * g_in_bytes, tmp);
        // CUDA's kernel (softmax_backward_cuda_out, aten/src/ATen/native/cuda/SoftMax.cu) first
        // multiplies the gradient by the output into a temporary of their dtype, after its
        // result exists, and frees it when it returns: one more (B,H,T,T) at the step's peak
        // where attention dominates (measured on the H200: 14.5% of L2 H12 C960 T1024 B24).
        if !self.target.fake_tensors {
            let grad_times_output = self.mem.alloc(d.bhtt() * soft_bytes, tmp);
            self.mem.free(grad_times_output);
        }
        self.mem.free(g);
        self.mem.free(s.softmax_out);
        let mut g = g_soft;
        if self.upcasts_before_fp32_softmax(d) {
            let gl = self.mem.alloc(d.bhtt() * d.cb, tmp);
            self.mem.free(g);
            g = gl;
        }
        // masked_fill backward, then the scale.
        let gm = self.mem.alloc(d.bhtt() * d.cb, tmp);
        self.mem.free(g);
        self.mem.free(s.mask);
        let gs = self.mem.alloc(d.bhtt() * d.cb, tmp);
        self.mem.free(gm);
        // bmm(q, k^T): the gradients of k^T and q, then each back through its view. The
        // engine reaches the views' backward (v's first, then q's) only after this node; q's
        // and v's gradients are copied back into (B,T,C) there unless the reshape is a view,
        // and k's transposed one is always read as it is.
        self.mem.at(Phase::Backward, "transformer.h.{i}.attn", layer, "q @ k^T backward");
        let g_kt = self.mem.alloc(d.btc() * d.cb, tmp);
        let g_q = self.mem.alloc(d.btc() * d.cb, tmp);
        self.mem.free(gs);
        self.mem.free(s.kt_copy);
        self.mem.free(s.q_copy);
        // Where the heads folded, the saved q and k were views of c_attn's output.
        if d.heads_fold_into_batch() {
            self.mem.free(s.qkv);
        }
        let (mut g_v_bt, mut g_q_bt) = (g_v, g_q);
        if !d.head_grads_unfold_in_place() {
            g_v_bt = self.mem.alloc(d.btc() * d.cb, tmp);
            self.mem.free(g_v);
            g_q_bt = self.mem.alloc(d.btc() * d.cb, tmp);
            self.mem.free(g_q);
        }
        self.mem.at(Phase::Backward, "transformer.h.{i}.attn.c_attn", layer, "split backward");
        let g_qkv = self.mem.alloc(3 * d.btc() * d.cb, tmp);
        self.mem.free(g_q_bt);
        self.mem.free(g_kt);
        self.mem.free(g_v_bt);
        g_qkv
    }

    /// [`Self::math_attention`]'s backward, node by node, as the H200's memory history shows
    /// it: the att @ v bmm, dropout, softmax, the q @ k^T bmm, each scaling's mul, then (under
    /// autocast) each upcast's cast back, v's first, and the copies that put q's and v's
    /// gradients back into (B,T,C) order.
    fn math_attention_backward(&mut self, d: &Dims, s: &BlockSaved, layer: u32, g_y: Id) -> Id {
        self.mem.at(Phase::Backward, "transformer.h.{i}.attn.sdpa", layer, "math backward");
        let tmp = Category::Temporaries;
        let mut g = g_y;
        if d.autocast {
            // The output's cast back: its gradient in fp32, laid out as y's transposed view.
            let g32 = self.mem.alloc(d.btc() * 4, tmp);
            self.mem.free(g);
            g = g32;
        }
        if !d.grad_y_folds() {
            let copy = self.mem.alloc(d.btc() * 4, tmp);
            self.mem.free(g);
            g = copy;
        }
        // bmm(att, v): v's gradient first, then att's.
        let g_v = self.mem.alloc(d.btc() * 4, tmp);
        let mut g_att = self.mem.alloc(d.bhtt() * 4, tmp);
        self.mem.free(g);
        self.mem.free(s.att_for_matmul);
        if d.math_saves_v_view() {
            self.mem.free(s.qkv);
        } else {
            self.mem.free(s.v_copy);
        }
        if s.att_drop_mask != Id::NONE {
            let gd = self.mem.alloc(d.bhtt() * 4, tmp);
            self.mem.free(g_att);
            self.mem.free(s.att_drop_mask);
            g_att = gd;
        }
        // Softmax backward, with CUDA's grad * output temporary (see manual_attention_backward).
        let g_soft = self.mem.alloc(d.bhtt() * 4, tmp);
        if !self.target.fake_tensors {
            let grad_times_output = self.mem.alloc(d.bhtt() * 4, tmp);
            self.mem.free(grad_times_output);
        }
        self.mem.free(g_att);
        self.mem.free(s.softmax_out);
        // bmm(q, k^T): k^T's gradient, then q's; each scaling's mul makes a new tensor.
        let g_kt = self.mem.alloc(d.btc() * 4, tmp);
        let g_q = self.mem.alloc(d.btc() * 4, tmp);
        self.mem.free(g_soft);
        self.mem.free(s.kt_copy);
        self.mem.free(s.q_copy);
        let g_k = self.mem.alloc(d.btc() * 4, tmp);
        self.mem.free(g_kt);
        let g_q2 = self.mem.alloc(d.btc() * 4, tmp);
        self.mem.free(g_q);
        let [mut gq, mut gk, mut gv] = [g_q2, g_k, g_v];
        if d.autocast {
            // Each upcast's backward casts its gradient back: v's (the newest node), k's, q's.
            for grad in [&mut gv, &mut gk, &mut gq] {
                let low = self.mem.alloc(d.btc() * d.cb, tmp);
                self.mem.free(*grad);
                *grad = low;
            }
        }
        if !d.head_grads_unfold_in_place() {
            for grad in [&mut gv, &mut gq] {
                let copy = self.mem.alloc(d.btc() * d.cb, tmp);
                self.mem.free(*grad);
                *grad = copy;
            }
        }
        self.mem.at(Phase::Backward, "transformer.h.{i}.attn.c_attn", layer, "split backward");
        let g_qkv = self.mem.alloc(3 * d.btc() * d.cb, tmp);
        for id in [gq, gk, gv] {
            self.mem.free(id);
        }
        g_qkv
    }

    /// `scaler.scale(loss).backward()` for one micro-step. `old_x`/`old_y` are the batch this
    /// forward read, which the graph keeps after `X, Y = get_batch()` rebinds the names.
    fn backward(&mut self, h: HeadSaved, old_x: Id, old_y: Id, root: Id) {
        if self.cfg.compile {
            return self.compiled_backward(h, old_x, old_y, root);
        }
        let d = self.dims(Mode::Train);
        let resident = self.grads_resident;
        self.mem.at(Phase::Backward, "loss", NO_LAYER, "backward");
        // The root's gradient (ones), and the quotient's backward.
        let g_root = self.mem.alloc(4, Category::LogitsAndLoss);
        let g_loss = self.mem.alloc(4, Category::LogitsAndLoss);
        self.mem.free(g_root);

        // nll_loss backward: a fp32 (B*T, V) gradient, zeros except at the targets; then the
        // fp32 copy's backward casts it to the compute dtype, and log_softmax's backward.
        self.mem.at(Phase::Backward, "cross_entropy", NO_LAYER, "nll_loss backward");
        let g_nll = self.mem.alloc(d.n() * 4, Category::LogitsAndLoss);
        self.mem.free(g_loss);
        self.mem.free(old_y);
        self.mem.free(h.nll_total_weight);
        self.mem.free(h.nll_input);
        self.mem.free(root);
        let g_lp = if d.autocast {
            let g = self.mem.alloc(d.n() * d.cb, Category::LogitsAndLoss);
            self.mem.free(g_nll);
            g
        } else {
            g_nll
        };
        self.mem.at(Phase::Backward, "cross_entropy", NO_LAYER, "log_softmax backward");
        let g_logits = self.mem.alloc(d.n() * d.cb, Category::LogitsAndLoss);
        self.mem.free(g_lp);
        self.mem.free(h.log_probs);

        // lm_head: the tied wte weight's gradient (V, C) and the gradient of ln_f's output.
        self.mem.at(Phase::Backward, "lm_head", NO_LAYER, "backward");
        let g_x = self.mem.alloc(d.btc() * d.cb, Category::Temporaries);
        self.ensure_workspace(true);
        let g_w = self.mem.alloc(d.v * d.c * d.cb, Category::Temporaries);
        self.mem.free(g_logits);
        self.mem.free(h.lnf_for_matmul);
        self.mem.free(h.wte_cast);
        // The weight is tied: wte's one AccumulateGrad node waits for both of its gradients,
        // so this one (fp32 after autocast's cast backward) stays in the engine's input buffer
        // through the whole backward, until the embedding's arrives. In a later micro-step it
        // is a second (V, C) beside `.grad` all that time.
        let g_head = if d.autocast {
            let g32 = self.mem.alloc(d.v * d.c * 4, Category::Temporaries);
            self.mem.free(g_w);
            g32
        } else {
            g_w
        };
        let mut g = self.layer_norm_backward(&d, "transformer.ln_f", NO_LAYER, g_x, h.lnf_in, h.lnf_stats);

        self.blocks_backward(|run, i| g = run.block_backward(i, g));

        // drop(tok_emb + pos_emb), then the two embeddings.
        self.mem.at(Phase::Backward, "transformer.wte+wpe", NO_LAYER, "backward");
        if h.emb_drop_mask != Id::NONE {
            let g2 = self.mem.alloc(d.btc() * 4, Category::Temporaries);
            self.mem.free(g);
            self.mem.free(h.emb_drop_mask);
            g = g2;
        }
        // pos_emb was broadcast over the batch: its gradient is summed to (T, C).
        let g_pos = self.mem.alloc(d.t * d.c * 4, Category::Temporaries);
        self.sum_scratch(d.b, d.t * d.c);
        // wpe: a dense (block_size, C) gradient.
        let g_wpe = self.mem.alloc(self.cfg.block_size as u64 * d.c * 4, Category::Temporaries);
        self.mem.free(g_pos);
        self.mem.free(h.pos);
        self.grad_arrives(g_wpe, resident);
        // wte: a dense (V, C) gradient (plus the kernel's sorted index copies), summed with the
        // one lm_head left in the input buffer. The engine adds in place only into a plain
        // tensor whose storage it alone holds (`can_accumulate_inplace` in
        // torch/csrc/autograd/input_buffer.cpp), else the sum is a third (V, C): so under
        // autocast on CUDA, where the buffer holds the cast backward's fresh fp32 tensor. In
        // fp32 the buffer holds mm's gradient as a transposed view (mm_mat2_backward's
        // column-major branch), whose base shares the storage, so the sum is out of place
        // (measured on the H200: fp32 configs whose step peaks here were one (V, C) less a
        // (B, T, C) low); under FakeTensorMode (the CPU trace) it always is, a tensor subclass.
        // Then AccumulateGrad takes the sum (first micro-step) or adds it into `.grad`.
        let sort = if !self.target.fake_tensors { self.mem.alloc(2 * d.bt() * 8, Category::Temporaries) } else { Id::NONE };
        let g_wte = self.mem.alloc(d.v * d.c * 4, Category::Temporaries);
        self.mem.free(sort);
        self.mem.free(g);
        self.mem.free(old_x);
        let sum = if !self.target.fake_tensors && d.autocast {
            g_head
        } else {
            let sum = self.mem.alloc(d.v * d.c * 4, Category::Temporaries);
            self.mem.free(g_head);
            sum
        };
        self.mem.free(g_wte);
        self.grad_arrives(sum, resident);
    }

    // --- torch.compile: a coarse model fitted to measurements ----------------------------------
    //
    // Inductor fuses the pointwise ops of a block and its min-cut partitioner decides what the
    // backward keeps, so eager's op-by-op lifetimes do not apply. What the measurements pin
    // down (tests/reference/data/cuda-h100-compile.json and cuda-h200-compiled-seed43/44/45,
    // torch 2.11; read off each run's phase peaks: what a steady forward leaves, what its
    // backward adds): per layer the graph keeps 37 bytes per element of B*T*C under bf16/fp16
    // autocast and 66 in float32, plus under autocast its casts of the layer's weights (and of
    // wte, saved for lm_head's backward); the loss keeps no fp32 copy of the logits, and the
    // backward's peak holds three B*T*V tensors in the compute dtype (the logits, their gradient
    // and one more) and a fourth where inductor pads an unaligned vocabulary. Seed 45's 32
    // configs were measured before these terms were fitted and held out, seed 46's 24 drawn
    // after. Everything here is an estimate, labelled as such wherever it is shown.

    /// The compiled forward: embeddings, blocks and loss as one graph.
    fn compiled_forward(&mut self, mode: Mode) -> HeadSaved {
        let d = self.dims(mode);
        let graph = mode == Mode::Train;
        let phase = if graph { Phase::Forward } else { Phase::EvalForward };
        self.mem.at(phase, "compiled GPT.forward", NO_LAYER, "embeddings");
        // The fp32 residual stream, reused from block to block inside the graph.
        let mut x = self.mem.alloc(d.btc() * 4, Category::Temporaries);
        let layers = self.cfg.n_layer as usize;
        let mut per_layer = [0i64; CATEGORY_COUNT];
        let mut i = 0;
        while i < layers {
            if self.folds(i) {
                // Blocks 1..L-1 at once (see "layer folding").
                self.folded_compiled_blocks_forward(&per_layer, layers - 2);
                i = layers - 1;
                continue;
            }
            let before = self.mem.live;
            x = self.compiled_block_forward(&d, i, x, phase, graph);
            if i == 0 {
                per_layer = delta(&before, &self.mem.live);
            }
            i += 1;
        }
        self.mem.at(phase, "lm_head (compiled)", NO_LAYER, "");
        // The tied weight's cast is made inside the graph: the training graph saves it for
        // lm_head's backward, an eval graph drops it.
        let wte_cast = if d.autocast { self.mem.alloc(d.v * d.c * d.cb, Category::CastWeights) } else { Id::NONE };
        let logits = self.mem.alloc(d.n() * d.cb, Category::LogitsAndLoss);
        let loss_phase = if graph { Phase::Loss } else { Phase::EvalLoss };
        self.mem.at(loss_phase, "cross_entropy (compiled)", NO_LAYER, "");
        // Training keeps the log-sum-exp per row for the backward.
        let lse = if graph { self.mem.alloc(d.bt() * 4, Category::LogitsAndLoss) } else { Id::NONE };
        let loss = self.mem.alloc(4, Category::LogitsAndLoss);
        let wte_cast = if graph {
            wte_cast
        } else {
            self.mem.free(wte_cast);
            Id::NONE
        };
        self.mem.free(x);
        HeadSaved {
            logits,
            loss,
            pos: Id::NONE,
            emb_drop_mask: Id::NONE,
            lnf_in: lse,
            lnf_stats: [Id::NONE; 2],
            lnf_for_matmul: Id::NONE,
            wte_cast,
            log_probs: Id::NONE,
            nll_input: Id::NONE,
            nll_total_weight: Id::NONE,
        }
    }

    /// One compiled block, forward: `x` is the residual stream coming in; returns the one
    /// going out.
    fn compiled_block_forward(&mut self, d: &Dims, i: usize, x: Id, phase: Phase, graph: bool) -> Id {
        self.mem.at(phase, "transformer.h.{i} (compiled)", i as u32, "");
        if graph {
            // What the partitioner saves (only the block input under checkpointing).
            let bytes = if self.cfg.activation_checkpointing { d.btc() * 4 } else { compiled_saved_bytes(d) };
            self.blocks[i].x_in = self.mem.alloc(bytes, Category::SavedActivations);
            // Under autocast the graph also saves its casts of the block's weights and biases
            // for the backward's matmuls (a checkpointed block makes them again: not measured).
            if d.autocast && !self.cfg.activation_checkpointing {
                // c_attn, attn.c_proj, c_fc and mlp.c_proj: 12 C^2 weights and 9 C biases.
                let linear = 12 * d.c * d.c + if d.bias { 9 * d.c } else { 0 };
                self.blocks[i].w_cast[0] = self.mem.alloc(linear * d.cb, Category::CastWeights);
            }
        }
        self.compiled_attention_matrices(d, graph && !self.cfg.activation_checkpointing);
        // The block's widest intermediate: the MLP's hidden activations.
        let hidden = self.mem.alloc(4 * d.btc() * d.cb, Category::Temporaries);
        self.ensure_workspace(false);
        let next = self.mem.alloc(d.btc() * 4, Category::Temporaries);
        self.mem.free(hidden);
        self.mem.free(x);
        next
    }

    /// Compiled forward of the middle blocks 1..L-1 as `count` times block 0's net effect:
    /// what the partitioner saves, one bulk allocation per category kept for the backward
    /// (the residual stream is a single tensor handed on, so nothing else accumulates).
    fn folded_compiled_blocks_forward(&mut self, per_layer: &[i64; CATEGORY_COUNT], count: usize) {
        let mut bulk = [Id::NONE; CATEGORY_COUNT];
        for c in Category::ALL {
            let bytes = per_layer[c.index()] * count as i64;
            debug_assert!(bytes >= 0, "a compiled block's forward never shrinks {c:?}");
            if bytes > 0 {
                bulk[c.index()] = self.mem.alloc_exact(bytes as u64, c);
            }
        }
        self.folded = bulk;
        self.folded_input = Id::NONE;
    }

    /// Compiled manual attention still materialises the (B,H,T,T) scores (a matmul's output)
    /// and the softmax's probabilities; `probs_saved`: the probabilities are among the block's
    /// saved bytes already. Checked only through the 19 compiled manual-attention runs' peaks
    /// (README: Accuracy): an estimate.
    fn compiled_attention_matrices(&mut self, d: &Dims, probs_saved: bool) {
        if !d.manual {
            return;
        }
        let scores = self.mem.alloc(d.bhtt() * d.cb, Category::Temporaries);
        let probs = if probs_saved { Id::NONE } else { self.mem.alloc(d.bhtt() * d.cb, Category::Temporaries) };
        self.mem.free(scores);
        self.mem.free(probs);
    }

    /// One compiled block, backward: its parameters' gradients arrive, its saved tensors go.
    fn compiled_block_backward(&mut self, d: &Dims, i: usize, resident: bool) {
        self.mem.at(Phase::Backward, "transformer.h.{i} (compiled)", i as u32, "backward");
        if self.cfg.activation_checkpointing {
            // The block's forward runs again for its backward.
            let again = self.mem.alloc(compiled_saved_bytes(d), Category::SavedActivations);
            self.compiled_attention_matrices(d, true);
            self.mem.free(again);
        }
        if d.manual {
            // The softmax's backward: the gradient of the probabilities and of the scores.
            let d_probs = self.mem.alloc(d.bhtt() * d.cb, Category::Temporaries);
            let d_scores = self.mem.alloc(d.bhtt() * d.cb, Category::Temporaries);
            self.mem.free(d_probs);
            self.mem.free(d_scores);
        }
        let saved = std::mem::replace(&mut self.blocks[i].x_in, Id::NONE);
        let casts = std::mem::replace(&mut self.blocks[i].w_cast[0], Id::NONE);
        for elems in layer_param_elems(d) {
            if elems > 0 {
                let g = self.mem.alloc(elems * 4, Category::Temporaries);
                self.grad_arrives(g, resident);
            }
        }
        self.mem.free(saved);
        self.mem.free(casts);
    }

    /// The compiled backward: the loss's three B*T*V tensors, then block by block the saved
    /// tensors go and fp32 gradients arrive.
    fn compiled_backward(&mut self, h: HeadSaved, old_x: Id, old_y: Id, root: Id) {
        let d = self.dims(Mode::Train);
        let resident = self.grads_resident;
        self.mem.at(Phase::Backward, "cross_entropy (compiled)", NO_LAYER, "backward");
        let g_logits = self.mem.alloc(d.n() * d.cb, Category::LogitsAndLoss);
        let scratch = self.mem.alloc(d.n() * d.cb, Category::LogitsAndLoss);
        // A vocabulary that is not a multiple of 8 (2-byte) or 4 (fp32) elements: inductor's
        // pad_mm pads lm_head's backward matmuls, a zero-padded copy of the logits' gradient
        // (torch/_inductor/fx_passes/pad_mm.py). It pads only a matmul it deems compute-bound,
        // and then only where its own timing of both says so. On the H200 it padded all but
        // three of the configs whose B*T*V shows (cuda-h200-compiled-seed43..46): n_embd 16 (too
        // skinny to be compute-bound), and one each of n_embd 160 and 192 (its timing). The
        // model pads from n_embd 33 up, erring high where the timing says no.
        let padded = if !d.v.is_multiple_of(compiled_alignment(&d)) && d.c > COMPILED_PAD_MIN_EMBD {
            self.mem.alloc(d.bt() * d.v.next_multiple_of(compiled_alignment(&d)) * d.cb, Category::LogitsAndLoss)
        } else {
            Id::NONE
        };
        self.mem.free(root);
        self.mem.free(old_y);
        self.mem.free(h.lnf_in);
        self.mem.at(Phase::Backward, "lm_head (compiled)", NO_LAYER, "backward");
        self.ensure_workspace(true);
        let g_x = self.mem.alloc(d.btc() * 4, Category::Temporaries);
        let g_wte = self.mem.alloc(d.v * d.c * 4, Category::Temporaries);
        self.mem.free(padded);
        self.mem.free(scratch);
        self.mem.free(g_logits);
        self.mem.free(h.wte_cast);
        self.grad_arrives(g_wte, resident);
        for elems in [d.c, if d.bias { d.c } else { 0 }] {
            // ln_f's weight and bias.
            if elems > 0 {
                let g = self.mem.alloc(elems * 4, Category::Temporaries);
                self.grad_arrives(g, resident);
            }
        }
        self.blocks_backward(|run, i| run.compiled_block_backward(&d, i, resident));
        self.mem.at(Phase::Backward, "transformer.wte+wpe (compiled)", NO_LAYER, "backward");
        let g_wpe = self.mem.alloc(self.cfg.block_size as u64 * d.c * 4, Category::Temporaries);
        self.grad_arrives(g_wpe, resident);
        self.mem.free(g_x);
        self.mem.free(old_x);
    }

    // --- the loop ------------------------------------------------------------------------------

    /// One training iteration: GA micro-steps, clip, optimizer step, zero_grad.
    /// Micro-steps 3..GA repeat micro-step 2's tensors exactly (gradients resident, the previous
    /// logits alive), so a tensor-level run simulates two. The caching allocator need not place
    /// them the same way: the live logits can take turns between two blocks, so which one the
    /// last micro-step leaves them in depends on GA's parity (measured: L6 H6 C240 T2048 B3
    /// GA5 ends with its training logits in the other block from where an even GA leaves them,
    /// out of the way of the next eval's logits). An exact run goes on until the allocator's
    /// state after a micro-step repeats one after an earlier micro-step at a distance that
    /// divides the micro-steps left, so its last state is the real one (at most
    /// [`MICRO_STEPS_EXACT`] micro-steps).
    fn iteration(&mut self) {
        let ga = self.cfg.gradient_accumulation_steps;
        let exact = self.mem.allocator.is_some();
        let last = if exact { ga.min(MICRO_STEPS_EXACT) } else { ga.min(2) };
        // The allocator's state after micro-steps 2, 3, ...
        let mut states: Vec<u64> = Vec::new();
        self.iteration_bases = [self.iteration_bases[1], self.mem.slots.len() as u32];
        for micro in 1..=last {
            self.mem.at.micro_step = micro;
            self.micro_steps_run = micro;
            let h = self.forward(Mode::Train);
            // `logits, loss = model(X, Y)`: the tensors previously under those names die now.
            let (old_logits, old_loss) = (self.logits, self.loss);
            self.logits = h.logits;
            self.loss = h.loss;
            self.mem.free(old_logits);
            self.mem.free(old_loss);
            if micro == 1 {
                // Later iterations drop the previous iteration's logits here; the first has none.
                self.end_stretch();
                self.begin_stretch();
            }
            // loss = loss / gradient_accumulation_steps.
            self.mem.at(Phase::Loss, "loss / gradient_accumulation_steps", NO_LAYER, "");
            let scaled = self.mem.alloc(4, Category::LogitsAndLoss);
            let raw = self.loss;
            self.loss = scaled;
            // X, Y = get_batch('train'): the graph still holds the batch it read.
            self.mem.at(Phase::Loss, "get_batch", NO_LAYER, "");
            let (old_x, old_y) = self.new_training_batch();
            // scaler.scale(loss): a new scalar under fp16 (GradScaler), the loss itself otherwise.
            let root = if self.cfg.dtype == Dtype::Float16 { self.mem.alloc(4, Category::LogitsAndLoss) } else { Id::NONE };
            self.backward(h, old_x, old_y, root);
            // The graph is gone: the undivided loss dies with it.
            self.mem.free(raw);
            self.grads_resident = true;
            if exact && micro >= 2 && micro < ga {
                let state = self.mem.state_key();
                let since = states.iter().rposition(|&k| k == state).map(|j| micro - (j as u32 + 2));
                if since.is_some_and(|period| (ga - micro).is_multiple_of(period)) {
                    break;
                }
                states.push(state);
            }
        }
        self.mem.at.micro_step = 0;

        // clip_grad_norm_: one norm per gradient, stacked, reduced; the scaling is in place.
        self.mem.at(Phase::ClipGrad, "clip_grad_norm_", NO_LAYER, "");
        // (Every parameter has a gradient now; each norm is a 0-d fp32 tensor.)
        let n = self.param_tensors;
        let scalar = self.mem.round(4);
        let scaler_tensors = if self.cfg.dtype == Dtype::Float16 { 2 } else { 0 }; // unscale_'s found_inf, inv_scale
        let norms = if self.mem.allocator.is_some() {
            // CUDA's _foreach_norm writes all norms into one buffer.
            self.mem.alloc(n * 4 + scaler_tensors * scalar, Category::Temporaries)
        } else {
            self.mem.alloc_exact((n + scaler_tensors) * scalar, Category::Temporaries)
        };
        let stacked = self.mem.alloc(n * 4, Category::Temporaries);
        let total =
            [self.mem.alloc(4, Category::Temporaries), self.mem.alloc(4, Category::Temporaries), self.mem.alloc(4, Category::Temporaries)];
        for id in [norms, stacked].into_iter().chain(total) {
            self.mem.free(id);
        }

        // optimizer.step(): fused AdamW creates step, exp_avg, exp_avg_sq per parameter the
        // first time, then updates in place. Plain SGD keeps nothing.
        self.mem.at(Phase::OptimizerStep, "optimizer.step", NO_LAYER, "");
        if self.cfg.optimizer == Optimizer::Adamw && self.opt_state.is_empty() {
            self.end_stretch();
            // Per parameter: a 0-d fp32 step and two moments shaped like it, group by group
            // (decayed tensors first).
            if self.mem.allocator.is_some() {
                let order = module_order(self.cfg);
                for decayed in [true, false] {
                    for elems in order.iter().filter_map(|t| match *t {
                        ModuleTensor::Param(e, d) if d == decayed => Some(e),
                        _ => None,
                    }) {
                        for bytes in [4, elems * 4, elems * 4] {
                            let id = self.mem.alloc(bytes, Category::OptimizerState);
                            self.opt_state.push(id);
                        }
                    }
                }
            } else {
                let step = self.mem.round(4) * self.param_tensors;
                let id = self.mem.alloc_exact(step + 2 * self.param_bytes, Category::OptimizerState);
                self.opt_state.push(id);
            }
            self.begin_stretch();
        }

        // zero_grad(set_to_none=True).
        self.mem.at(Phase::ZeroGrad, "zero_grad", NO_LAYER, "");
        while let Some(id) = self.grads.pop() {
            self.mem.free(id);
        }
        self.grads_resident = false;
    }

    // --- replaying an iteration -----------------------------------------------------------------
    //
    // A folded run simulates the first training iteration event by event, cut into stretches
    // (see `IterationRecord`), and replays the steady one from that record: each stretch's
    // highest point moved onto the steady iteration's base at that stretch. Within a stretch
    // both iterations run the same events (same sizes, same ops), so the live total differs by
    // a constant per category and the highest point is the same event; the bases differ by
    // what the first iteration had not created yet and by the logits it did not hold.

    fn begin_stretch(&mut self) {
        if let Some(record) = self.record.as_mut() {
            let before = self.mem.begin_stretch();
            record.open = Some((before, self.mem.live));
        }
    }

    fn end_stretch(&mut self) {
        if let Some(record) = self.record.as_mut() {
            if let Some((before, start)) = record.open.take() {
                let high = self.mem.end_stretch(before);
                record.stretches.push(Stretch { high, start, end: self.mem.live });
            }
        }
    }

    /// The first iteration, recorded.
    fn recorded_iteration(&mut self) -> IterationRecord {
        self.record = Some(IterationRecord::default());
        self.begin_stretch();
        self.iteration();
        self.end_stretch();
        self.record.take().unwrap_or_default()
    }

    /// The peak of a steady iteration, from the first one's record instead of its events. It
    /// is the last thing a run does, so the live state is left as it was.
    fn replay_iteration(&mut self, first: &IterationRecord) -> Peak {
        self.mem.begin_window();
        // The live bytes at the start of each stretch in this iteration.
        let mut base = self.mem.live;
        for (k, stretch) in first.stretches.iter().enumerate() {
            self.mem.offer(stretch.high.rebased(&stretch.start, &base));
            base = std::array::from_fn(|c| base[c] + stretch.end[c] - stretch.start[c]);
            if k == 0 {
                // The first stretch ends where micro-step 1 has bound its logits: this
                // iteration drops the previous iteration's logits and loss there.
                for id in [self.logits, self.loss] {
                    let (bytes, cat) = self.mem.slot(id);
                    base[cat.index()] -= bytes;
                }
            }
        }
        self.mem.end_window()
    }

    /// `estimate_loss()`: two splits, `eval_iters` batches each, under no_grad. Every batch after
    /// the call's first repeats exactly (the previous batch's logits alive, across the splits
    /// too), so two batches are simulated in all.
    fn estimate_loss(&mut self) {
        let d = self.dims(Mode::Eval);
        let (mut x, mut y, mut logits, mut loss) = (Id::NONE, Id::NONE, Id::NONE, Id::NONE);
        // Split 'train' batch 0 has no previous eval logits; every later batch (the rest of
        // 'train', all of 'val') has exactly the same live set: one forward stands for them all
        // in a tensor-level run. An exact run goes on, as `iteration` does over micro-steps,
        // until the allocator's state after a batch repeats at a distance that divides the
        // batches left (the last batch's logits can lie in either of two blocks).
        let batches = 2 * self.cfg.eval_iters.max(1);
        let last = if self.mem.allocator.is_some() { batches.min(MICRO_STEPS_EXACT) } else { 2 };
        let mut states: Vec<u64> = Vec::new();
        for batch in 0..last {
            {
                self.mem.at(Phase::EvalForward, "get_batch", NO_LAYER, "");
                let nx = self.mem.alloc(d.bt() * 8, Category::Batch);
                let ny = self.mem.alloc(d.bt() * 8, Category::Batch);
                self.mem.free(x);
                self.mem.free(y);
                (x, y) = (nx, ny);
                let (new_logits, new_loss) = if batch == 0 && self.fold {
                    self.eval_forward_net_effect(&d)
                } else {
                    let h = self.forward(Mode::Eval);
                    (h.logits, h.loss)
                };
                self.mem.free(logits);
                self.mem.free(loss);
                (logits, loss) = (new_logits, new_loss);
            }
            if last > 2 && batch >= 1 && batch + 1 < batches {
                let state = self.mem.state_key();
                let since = states.iter().rposition(|&k| k == state).map(|j| batch - (j as u32 + 1));
                if since.is_some_and(|period| (batches - 1 - batch).is_multiple_of(period)) {
                    break;
                }
                states.push(state);
            }
        }
        // estimate_loss returns: its locals die.
        for id in [x, y, logits, loss] {
            self.mem.free(id);
        }
    }

    /// What one `estimate_loss` forward leaves behind, without its events: its logits and
    /// loss, and the forward thread's cuBLAS workspaces if it ran the run's first matmul.
    /// Folded runs use it for batch 0, whose peak never matters: batch 1 repeats its events
    /// with batch 0's logits and loss (and any workspace it created) still alive, so it is
    /// higher at every step.
    fn eval_forward_net_effect(&mut self, d: &Dims) -> (Id, Id) {
        self.ensure_workspace(false);
        let logits = self.mem.alloc(d.n() * d.cb, Category::LogitsAndLoss);
        let loss = self.mem.alloc(4, Category::LogitsAndLoss);
        (logits, loss)
    }
}

/// Bytes one compiled block keeps for its backward besides autocast's weight casts: fitted bytes
/// per element of B*T*C (below), flash attention's log-sum-exp, or with manual attention the
/// softmax's fp32 (B,H,T,T) output (and with dropout its mask and the dropped probabilities).
/// Fitted to compiled runs on an H100 and an H200 (README: Accuracy): an estimate.
fn compiled_saved_bytes(d: &Dims) -> u64 {
    let per_element = if d.autocast { COMPILED_SAVED_BYTES_AUTOCAST } else { COMPILED_SAVED_BYTES_FP32 };
    let dropout = if d.dropout { COMPILED_SAVED_BYTES_DROPOUT } else { 0 };
    let attention = if d.manual {
        // The softmax's output, fp32 under autocast too (autocast runs softmax in fp32); with
        // dropout also its mask and the dropped probabilities in the compute dtype.
        d.bhtt() * (4 + if d.dropout { 1 + d.cb } else { 0 })
    } else {
        // Flash attention's log-sum-exp, (B,H,T) fp32.
        d.b * d.h * d.t * 4
    };
    d.btc() * (per_element + dropout) + attention
}

/// Bytes per element of B*T*C a compiled block saves besides attention's own tensors: medians
/// over the measured compiled rows without dropout (cuda-h100-compile, cuda-h200-compiled-
/// seed43/44: 36.5-38.1 under bf16/fp16 autocast, 64.9-67.4 in float32, beyond the few
/// smallest configs), and what dropout adds (its masks; 1.4-5.2, mean 3).
const COMPILED_SAVED_BYTES_AUTOCAST: u64 = 37;
const COMPILED_SAVED_BYTES_FP32: u64 = 66;
const COMPILED_SAVED_BYTES_DROPOUT: u64 = 3;

/// At or below this n_embd lm_head's matmuls are taken as too skinny for pad_mm to pad (16 was
/// not padded, 80 was; no unaligned vocabulary large enough to show came between).
const COMPILED_PAD_MIN_EMBD: u64 = 32;

/// pad_mm's alignment in elements: 8 for 2-byte types, 4 for float32.
fn compiled_alignment(d: &Dims) -> u64 {
    if d.cb == 2 {
        8
    } else {
        4
    }
}

/// Elements of one block's parameter tensors, in backward order (zeros where bias is off).
fn layer_param_elems(d: &Dims) -> [u64; 12] {
    let (c, b) = (d.c, if d.bias { 1 } else { 0 });
    [4 * c * c, c * b, 4 * c * c, 4 * c * b, c, c * b, c * c, c * b, 3 * c * c, 3 * c * b, c, c * b]
}

/// One tensor `model.to(device)` moves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ModuleTensor {
    /// A parameter: elements, and whether AdamW decays it (rank >= 2).
    Param(u64, bool),
    /// The manual path's fp32 causal-mask buffer: elements.
    Buffer(u64),
}

/// Parameters and buffers in module registration order (what `model.to(device)` and
/// `named_parameters()` walk; a module's children come before its own buffers).
fn module_order(cfg: &Config) -> Vec<ModuleTensor> {
    use ModuleTensor::*;
    let (c, v, t) = (cfg.n_embd as u64, cfg.vocab_size as u64, cfg.block_size as u64);
    let mut out = vec![Param(v * c, true), Param(t * c, true)];
    let linear_or_norm = |out: &mut Vec<ModuleTensor>, weight: u64, matrix: bool, bias: u64| {
        out.push(Param(weight, matrix));
        if cfg.bias {
            out.push(Param(bias, false));
        }
    };
    for _ in 0..cfg.n_layer {
        linear_or_norm(&mut out, c, false, c); // ln_1
        linear_or_norm(&mut out, 3 * c * c, true, 3 * c); // attn.c_attn
        linear_or_norm(&mut out, c * c, true, c); // attn.c_proj
        if cfg.attention == Attention::Manual {
            out.push(Buffer(t * t));
        }
        linear_or_norm(&mut out, c, false, c); // ln_2
        linear_or_norm(&mut out, 4 * c * c, true, 4 * c); // mlp.c_fc
        linear_or_norm(&mut out, 4 * c * c, true, c); // mlp.c_proj
    }
    linear_or_norm(&mut out, c, false, c); // ln_f
    out
}

/// Per-category change a block leaves behind, between two live snapshots. The cuBLAS
/// workspaces are created once per run (possibly inside the first block) and are not part of
/// what every block repeats.
fn delta(before: &[u64; CATEGORY_COUNT], after: &[u64; CATEGORY_COUNT]) -> [i64; CATEGORY_COUNT] {
    let mut d: [i64; CATEGORY_COUNT] = std::array::from_fn(|c| after[c] as i64 - before[c] as i64);
    d[Category::Workspace.index()] = 0;
    d
}

// ---------------------------------------------------------------------------------------------
// Public entry points
// ---------------------------------------------------------------------------------------------

/// Runs the loop in train.py's order and returns the peak of each window:
/// `estimate_loss` at iteration 0, the first iteration, `estimate_loss` after it, and a
/// steady-state iteration. The config must be valid (see [`Config::validate`]).
pub fn simulate(cfg: &Config, target: &Target) -> Simulation {
    let mut run = Run::new(cfg, *target, None);
    simulate_run(&mut run)
}

/// Like [`simulate`], but every tensor goes through a block-level model of PyTorch's CUDA
/// caching allocator: peaks are what `max_memory_allocated()` counts (blocks, not requests)
/// and each window also reports `max_memory_reserved()`. Slower (no layer folding); the plan
/// uses it for the figures it shows, searches use [`simulate`].
pub fn simulate_exact(cfg: &Config, target: &Target) -> Simulation {
    let mut run = exact_run(cfg, target);
    simulate_run(&mut run)
}

/// What the allocator model does after the two iterations the measurements ran: the largest
/// reserve of the run from then on, where it is first reached, and what happens if that passes
/// the card.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaterReserve {
    /// The training iteration (1-based) at whose end, or in whose following eval, the reserve
    /// last grew (or passed the limit).
    pub iteration: u32,
    /// Whether it grew in the `estimate_loss` after that iteration rather than in it.
    pub in_eval: bool,
    pub reserved_bytes: u64,
    /// `Some` if the reserve passed the limit there: what PyTorch could then release.
    pub past_limit: Option<PastLimit>,
}

/// A reserve past the card: PyTorch's allocator, refused a new segment, returns its cached
/// segments that hold no live block and tries again; out of memory if that is not enough.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PastLimit {
    /// Cached segments holding no live block at that moment.
    pub releasable_bytes: u64,
    /// Whether the reserve less those fits the limit: the run goes on (that step slower).
    pub recovers: bool,
}

/// Most micro-steps of one iteration, and eval batches of one `estimate_loss`, an exact run
/// simulates while the allocator's states after them do not repeat (see `Run::iteration`).
/// Most runs repeat after the 3rd to 7th with a period of 2; of the measured configs with 32
/// micro-steps one repeated at the 8th and one not within 16, and GPT-2 1.5B sometimes repeats
/// with a period of 6 or 8 or not within 16. Past the cap the 8th state stands for the last
/// (an approximation of the placement only: the tensors are the same). Each step costs about a
/// third of an exact simulation of two; 8 kept the measured rows as 16 did, or closer (the
/// hand-picked reserves' 95th percentile 1.1% against 1.8%).
const MICRO_STEPS_EXACT: u32 = 8;

/// Most training iterations in a row before an eval, and most eval cycles, that
/// [`simulate_exact_and_later`] runs looking for the allocator's fixed point (in 576 configs
/// the reserve last grew at iteration 3, 4, 6 or 7, or in a cycle after an eval).
const LATER_ITERATIONS: u32 = 16;
const LATER_CYCLES: u32 = 4;

/// [`simulate_exact`], and then the run train.py goes on with: iterations until the allocator
/// repeats a state (same blocks, and the same block for each live tensor, so what follows
/// repeats too), an eval (train.py's every `eval_interval`), and again, until a cycle ends in a
/// state a previous one ended in. The reserve never shrinks, so its last growth is the run's
/// largest. `Some` only if it grew past the simulated windows' reserve: the placement after two
/// iterations was never measured, so the figure is the model's, an estimate. With a `limit`
/// (the reserve the card allows) the continuation stops where the reserve passes it, and says
/// whether releasing the cached segments would make room; and a run whose simulated windows
/// already reserve more than `limit` is not continued at all (`None`): it does not fit, so
/// nothing later changes its verdict.
pub fn simulate_exact_and_later(cfg: &Config, target: &Target, limit: Option<u64>) -> (Simulation, Option<LaterReserve>) {
    let mut run = exact_run(cfg, target);
    let sim = simulate_run(&mut run);
    let reserved = run.mem.allocator.as_ref().map_or(0, |a| a.reserved);
    // An eval-only run exits after its first eval: nothing follows.
    if cfg.eval_only || limit.is_some_and(|l| reserved > l) {
        return (sim, None);
    }
    let later = continue_run(&mut run, limit);
    (sim, later)
}

/// [`simulate_exact_within`] and, for a config whose windows fit, its continuation as
/// [`simulate_exact_and_later`] runs it with `reserve_limit` as the limit: one simulation for
/// a search that asks whether a config fits and, if it does, whether it keeps fitting.
pub fn simulate_exact_within_and_later(
    cfg: &Config,
    target: &Target,
    reserve_limit: u64,
) -> Result<(Simulation, Option<LaterReserve>), u64> {
    let mut run = exact_run(cfg, target);
    run.mem.reserve_limit = reserve_limit;
    let sim = simulate_run(&mut run);
    if let Some(reserved) = run.mem.reserve_passed {
        return Err(reserved);
    }
    if cfg.eval_only {
        return Ok((sim, None));
    }
    let later = continue_run(&mut run, Some(reserve_limit));
    Ok((sim, later))
}

/// The continuation of [`simulate_exact_and_later`] for a run whose windows were simulated
/// (and, with a `limit`, fit it).
fn continue_run(run: &mut Run, limit: Option<u64>) -> Option<LaterReserve> {
    continue_run_replaying(run, limit, true).0
}

/// [`continue_run`], with or without replaying steady iterations (see [`SteadyIteration`]),
/// and the state key after each training iteration and how many were replayed: with and
/// without, the keys, the answer and the run left behind are the same (the tests hold them to
/// it).
fn continue_run_replaying(run: &mut Run, limit: Option<u64>, replay: bool) -> (Option<LaterReserve>, Vec<u64>, u32) {
    let reserved = |run: &Run| run.mem.allocator.as_ref().map_or(0, |a| a.reserved);
    let simulated = reserved(run);
    // The expandable pool is not limited: the model releases nothing from it.
    run.mem.reserve_limit = limit.filter(|_| !run.cfg.expandable_segments).unwrap_or(u64::MAX);
    let mut later: Option<LaterReserve> = None;
    let mut iteration = 2;
    // Checked after each iteration and eval: a new high, or the limit passed (which ends it).
    let mut check = |run: &Run, iteration: u32, in_eval: bool| -> bool {
        if let Some(passed) = run.mem.reserve_passed {
            let releasable_bytes = run.mem.releasable_when_passed;
            let recovers = passed.saturating_sub(releasable_bytes) <= run.mem.reserve_limit;
            later = Some(LaterReserve {
                iteration,
                in_eval,
                reserved_bytes: passed,
                past_limit: Some(PastLimit { releasable_bytes, recovers }),
            });
            return true;
        }
        if reserved(run) > later.map_or(simulated, |l| l.reserved_bytes) {
            later = Some(LaterReserve { iteration, in_eval, reserved_bytes: reserved(run), past_limit: None });
        }
        false
    };
    let mut iterations = Iterations { replay, recorded: Vec::new(), steady: None, replayed: 0 };
    // States at iteration ends: one seen before means the run from there repeats what followed
    // it then (the previous logits, alive into the next iteration, can alternate between two
    // blocks: a period of two). Within a cycle a repeat ends the iterations for an eval; a
    // state an earlier cycle went through ends it all, as does a cycle ending where an earlier
    // one ended.
    let mut earlier: Vec<u64> = Vec::new();
    let mut cycle_ends = Vec::new();
    let mut keys = Vec::new();
    let mut key = 0;
    'cycles: for _ in 0..LATER_CYCLES {
        key = run.mem.state_key();
        let mut seen = vec![key];
        for _ in 0..LATER_ITERATIONS {
            key = iterations.next(run);
            keys.push(key);
            iteration += 1;
            if check(run, iteration, false) {
                break 'cycles;
            }
            if earlier.contains(&key) {
                break 'cycles;
            }
            if seen.contains(&key) {
                break;
            }
            seen.push(key);
        }
        if cycle_ends.contains(&key) {
            break;
        }
        cycle_ends.push(key);
        earlier.extend(seen);
        iterations.leave(run, key);
        run.estimate_loss();
        if check(run, iteration, true) {
            break;
        }
    }
    let replayed = iterations.replayed;
    iterations.leave(run, key);
    (later, keys, replayed)
}

/// What [`Mem`] writes down of the allocator's work: every event with where its block lies
/// ([`exact_events`]), or the requests alone ([`SteadyIteration`]).
enum Trace {
    Events(Vec<AllocEvent>),
    Requests(Vec<Request>),
}

/// An allocator request of an exact run, as [`Mem`] records it for [`SteadyIteration`]: a
/// malloc of the requested bytes (for the next slot), or the free of a slot (the top bit set).
/// A [`Recorded`] iteration names the slots it frees relative to itself ([`Freed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Request(u64);

const FREE_REQUEST: u64 = 1 << 63;
/// Relative frees: of a tensor the iteration before allocated, or of an older one.
const FREE_PREVIOUS: u64 = 1 << 62;
const FREE_OLDER: u64 = 1 << 61;

impl Request {
    fn alloc(bytes: u64) -> Request {
        // A validated config's tensors are far below 2^61 bytes.
        Request(bytes & (FREE_OLDER - 1))
    }

    fn free(id: u32) -> Request {
        Request(FREE_REQUEST | id as u64)
    }

    /// The bytes requested, for a malloc.
    fn alloc_bytes(self) -> Option<u64> {
        (self.0 & FREE_REQUEST == 0).then_some(self.0)
    }

    /// The slot freed, for a free (as [`Mem`] records it).
    fn freed_slot(self) -> Option<u32> {
        (self.0 & FREE_REQUEST != 0).then_some(self.0 as u32)
    }

    /// The tensor freed, for a free named relative to its iteration.
    fn freed(self) -> Option<Freed> {
        match self.0 & (FREE_REQUEST | FREE_PREVIOUS | FREE_OLDER) {
            FREE_REQUEST => Some(Freed::Own(self.0 as u32)),
            x if x == FREE_REQUEST | FREE_PREVIOUS => Some(Freed::Previous(self.0 as u32)),
            _ => None,
        }
    }
}

/// Which tensor a request of a [`Recorded`] iteration frees: one it allocated, or one the
/// training iteration before it allocated, by its place among that iteration's allocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Freed {
    Own(u32),
    Previous(u32),
}

/// A training iteration that ran, as the allocator saw it.
struct Recorded {
    /// Its first slot, the first slot of the training iteration before it, and how many
    /// slots it created.
    base: u32,
    previous_base: u32,
    created: u32,
    /// Its requests, each free naming its tensor relative to the iteration; and whether one
    /// frees a tensor older than the iteration before.
    requests: Vec<Request>,
    frees_older: bool,
    /// Whether it ran all its micro-steps (none skipped as a repeat).
    all_micro_steps: bool,
    /// Whether it requested what the recorded iteration before it requested
    /// ([`Recorded::repeats`]).
    repeats_previous: bool,
    /// At its end: the large pool's key and layout hash, and the addresses of the tensors it
    /// allocated that are still live, in creation order.
    large_key: u64,
    large_layout: u64,
    survivor_addrs: Vec<u64>,
}

impl Recorded {
    /// Names each freed slot of `requests` (as [`Mem`] records them) relative to the iteration
    /// from slot `base` on, whose training iteration before started at `previous_base` (and
    /// allocated as many, `created`): `true` if one frees a tensor older than that.
    fn name_frees(requests: &mut [Request], base: u32, previous_base: u32, created: u32) -> bool {
        let mut older = false;
        for r in requests.iter_mut() {
            if let Some(id) = r.freed_slot() {
                *r = if id >= base {
                    Request(FREE_REQUEST | (id - base) as u64)
                } else if id >= previous_base && id - previous_base < created {
                    Request(FREE_REQUEST | FREE_PREVIOUS | (id - previous_base) as u64)
                } else {
                    older = true;
                    Request(FREE_REQUEST | FREE_OLDER)
                };
            }
        }
        older
    }

    /// Whether `self` requested what `prev`, the training iteration before it, requested: the
    /// same sizes in the same order, and frees of the same tensors one iteration on (so of its
    /// own tensors or `prev`'s, never older ones).
    fn repeats(&self, prev: &Recorded) -> bool {
        prev.all_micro_steps
            && self.all_micro_steps
            && !self.frees_older
            && !prev.frees_older
            && self.previous_base == prev.base
            && self.created == prev.created
            && self.requests == prev.requests
    }
}

/// The continuation's training iterations: run, or replayed as a [`SteadyIteration`].
struct Iterations {
    /// Whether steady iterations may be replayed.
    replay: bool,
    /// The last iterations that ran since the last eval (at most three).
    recorded: Vec<Recorded>,
    steady: Option<SteadyIteration>,
    /// How many were replayed.
    replayed: u32,
}

impl Iterations {
    /// One more training iteration; the allocator's state key after it.
    fn next(&mut self, run: &mut Run) -> u64 {
        if let Some(steady) = self.steady.as_mut() {
            self.replayed += 1;
            match steady.replay(&mut run.mem) {
                Some(key) => return key,
                None => {
                    // The reserve passed the limit: the allocator is gone, and so is the replay.
                    self.steady = None;
                    return 0;
                }
            }
        }
        if self.may_replay(run) {
            // A malloc and a free per tensor: about twice what the last iteration created.
            let capacity =
                self.recorded.last().map_or(2 * (run.mem.slots.len() - run.iteration_bases[1] as usize) + 64, |r| r.requests.len());
            let mut requests = if self.recorded.len() == 3 { self.recorded.remove(0).requests } else { Vec::with_capacity(capacity) };
            requests.clear();
            run.mem.trace = Some(Trace::Requests(requests));
        }
        run.iteration();
        let key = run.mem.state_key();
        if let Some(Trace::Requests(requests)) = run.mem.trace.take() {
            self.record(run, requests);
        }
        key
    }

    /// Whether iterations of this run can be replayed: exact (and still so), nothing
    /// recorded event by event, the plain pools, and every micro-step simulated (past
    /// [`MICRO_STEPS_EXACT`] a repeat within an iteration decides what it leaves).
    fn may_replay(&self, run: &Run) -> bool {
        self.replay
            && run.mem.allocator.is_some()
            && run.mem.timeline.is_none()
            && run.mem.trace.is_none()
            && !run.cfg.expandable_segments
            && run.cfg.gradient_accumulation_steps <= MICRO_STEPS_EXACT
    }

    /// Keeps the requests of the iteration that just ran, whose end's key was just taken,
    /// and starts replaying if it is steady.
    fn record(&mut self, run: &mut Run, mut requests: Vec<Request>) {
        if !self.may_replay(run) {
            return;
        }
        let [previous_base, base] = run.iteration_bases;
        let created = run.mem.slots.len() as u32 - base;
        let frees_older = Recorded::name_frees(&mut requests, base, previous_base, created);
        let (large_key, large_layout) = run.mem.large_pool_key();
        let mut recorded = Recorded {
            base,
            previous_base,
            created,
            requests,
            frees_older,
            all_micro_steps: run.micro_steps_run == run.cfg.gradient_accumulation_steps,
            repeats_previous: false,
            large_key,
            large_layout,
            survivor_addrs: run.mem.live_addresses_from(base),
        };
        recorded.repeats_previous = self.recorded.last().is_some_and(|previous| recorded.repeats(previous));
        self.recorded.push(recorded);
        if self.recorded.len() > 3 {
            self.recorded.remove(0);
        }
        self.steady = SteadyIteration::of(&self.recorded, &run.mem);
    }

    /// Back to the run as it is (before an eval): the replayed state becomes the run's.
    /// `key` is the state key the last iteration gave.
    fn leave(&mut self, run: &mut Run, key: u64) {
        if let Some(steady) = self.steady.take() {
            steady.leave(&mut run.mem);
            debug_assert_eq!(run.mem.state_key(), key, "a replay leaves the run as running would");
        }
        // The first iteration after an eval frees what the last one before it left: the
        // recording starts again.
        self.recorded.clear();
    }
}

/// One replayed request: its place in the iteration, and what it does. A free names
/// the tensor by the iteration that allocated it (this one or the one before) and the
/// tensor's place among that iteration's allocations.
#[derive(Clone, Copy, Debug)]
struct Step {
    at: u32,
    op: StepOp,
}

#[derive(Clone, Copy, Debug)]
enum StepOp {
    Alloc { local: u32, bytes: u64 },
    FreeOwn(u32),
    FreePrevious(u32),
}

/// A training iteration that requests what the one before it requested (an iteration of a
/// steady run), while the large pool cycles: from one iteration end to the next it comes back
/// to the same state after one iteration or two. Each further iteration is then replayed on
/// the small pool alone (its requests, without simulating the model), and the large pool is
/// left where it was: its state at any later iteration end is the one it cycles through
/// there, and the state keys combine the two. Leaving the replay (for an eval) brings the
/// large pool to its place in the cycle and gives each tensor that outlives the iteration its
/// replayed block.
///
/// The pools meet only where one takes a new segment (the address space is shared), which a
/// cycling large pool does not. In GPT-2 124M eager at batch 5 accumulating 5, the large pool
/// repeats every two iterations from the third on, while the whole state first repeats at the
/// seventeenth: the continuation ran fifteen iterations for the small pool's sake. Most
/// requests are large (77% of the mallocs of that config's plan, counted once with a temporary
/// counter in `malloc`), and a replayed iteration skips the model's events too: callgrind
/// counts 55.4 M instructions per page input for that config before and 40.1 M after
/// (`core/examples/page_input.rs`).
struct SteadyIteration {
    /// The first slot of the recorded iteration (the last that ran).
    base: u32,
    /// Its requests: the small pool's, and the large pool's (for leaving).
    small_steps: Vec<Step>,
    large_steps: Vec<Step>,
    /// Its allocations' pools, and those of its tensors that outlive it, in creation order.
    alloc_small: Vec<bool>,
    survivors: Vec<u32>,
    /// The state key's chain over the live tensors older than the iteration.
    older: u64,
    /// The large pool's layout hash and its survivors' addresses at the recorded iteration's
    /// end and one iteration before, and the period of its cycle (1 or 2).
    large_layouts: [u64; 2],
    survivor_addrs: [Vec<u64>; 2],
    period: u32,
    /// Iterations replayed.
    replayed: u32,
    /// The small pool's block per allocation of the last replayed iteration (or of the recorded
    /// one), and of the iteration being replayed.
    small_previous: Vec<u32>,
    small_own: Vec<u32>,
}

impl SteadyIteration {
    /// The replay of the last recorded iteration, if it repeats the one before and the large
    /// pool has come back to a state it had one or two iteration ends earlier.
    fn of(recorded: &[Recorded], mem: &Mem) -> Option<SteadyIteration> {
        let [.., previous, last] = recorded else { return None };
        if !last.repeats_previous {
            return None;
        }
        let period = if last.large_key == previous.large_key {
            1
        } else {
            match recorded {
                [.., before, _, _] if previous.repeats_previous && before.large_key == last.large_key => 2,
                _ => return None,
            }
        };
        let base = last.base;
        let alloc_small: Vec<bool> = last.requests.iter().filter_map(|r| r.alloc_bytes().map(CachingAllocator::is_small_request)).collect();
        if alloc_small.len() != last.created as usize {
            return None;
        }
        let mut freed = vec![false; alloc_small.len()];
        let (mut small_steps, mut large_steps) = (Vec::new(), Vec::new());
        let mut allocs = 0;
        for (at, request) in last.requests.iter().enumerate() {
            let (local, op) = match request.alloc_bytes() {
                Some(bytes) => {
                    allocs += 1;
                    (allocs - 1, StepOp::Alloc { local: allocs - 1, bytes })
                }
                None => match request.freed()? {
                    Freed::Own(local) => {
                        freed[local as usize] = true;
                        (local, StepOp::FreeOwn(local))
                    }
                    // The iteration before allocated the same: the tensor's pool is the same there.
                    Freed::Previous(local) => (local, StepOp::FreePrevious(local)),
                },
            };
            let step = Step { at: at as u32, op };
            if alloc_small[local as usize] {
                small_steps.push(step);
            } else {
                large_steps.push(step);
            }
        }
        let survivors: Vec<u32> = (0..last.created).filter(|&local| !freed[local as usize]).collect();
        // The live tensors are the older ones and the survivors (the key just taken walked them).
        let older_count = mem.maybe_live.partition_point(|&id| id < previous.base);
        let from_previous = mem.maybe_live.partition_point(|&id| id < base) - older_count;
        if from_previous != 0
            || mem.maybe_live.len() - older_count != survivors.len()
            || !mem.maybe_live[older_count..].iter().zip(&survivors).all(|(&id, &local)| id == base + local)
        {
            return None;
        }
        if previous.survivor_addrs.len() != survivors.len() {
            return None;
        }
        let older = if older_count == 0 { 0 } else { mem.live_hashes[older_count - 1] };
        let small_previous: Vec<u32> = mem.handles[base as usize..(base + last.created) as usize].to_vec();
        Some(SteadyIteration {
            base,
            small_steps,
            large_steps,
            small_own: vec![u32::MAX; alloc_small.len()],
            alloc_small,
            survivors,
            older,
            large_layouts: [last.large_layout, previous.large_layout],
            survivor_addrs: [last.survivor_addrs.clone(), previous.survivor_addrs.clone()],
            period,
            replayed: 0,
            small_previous,
        })
    }

    /// Replays one iteration on the small pool; the state key after it, or `None` if the
    /// reserve passed the run's limit (the allocator is then given up, as a run gives it up).
    fn replay(&mut self, mem: &mut Mem) -> Option<u64> {
        let a = mem.allocator.as_mut()?;
        for i in 0..self.small_steps.len() {
            let step = self.small_steps[i];
            match step.op {
                StepOp::Alloc { local, bytes } => {
                    self.small_own[local as usize] = a.malloc_block(bytes);
                    if a.reserved > mem.reserve_limit {
                        let reserved = a.reserved;
                        // The large pool where it is at this point, for what could be released.
                        let full = self.replayed % self.period;
                        let _ = self.large_pool_at(mem, full, Some(step.at));
                        mem.give_up_allocator(reserved);
                        return None;
                    }
                }
                StepOp::FreeOwn(local) => a.free_block(self.small_own[local as usize]),
                StepOp::FreePrevious(local) => a.free_block(self.small_previous[local as usize]),
            }
        }
        std::mem::swap(&mut self.small_previous, &mut self.small_own);
        self.replayed += 1;
        mem.window_reserved = mem.window_reserved.max(a.reserved);
        // The key a run would take here: the large pool and its tensors are where the cycle
        // has them at this iteration end.
        let phase = (self.replayed % self.period) as usize;
        let mut chain = self.older;
        for (j, &local) in self.survivors.iter().enumerate() {
            let small = self.alloc_small[local as usize];
            let addr = if small { a.addr(self.small_previous[local as usize]) } else { self.survivor_addrs[phase][j] };
            chain = crate::allocator::mix(chain ^ addr);
        }
        Some(joint_key(a.layout_hashes().0.wrapping_add(self.large_layouts[phase]), chain))
    }

    /// Replays the large pool's requests of `full` whole iterations from where it was left,
    /// then those of the next iteration before request `until`: its block per allocation of
    /// the last whole iteration.
    fn large_pool_at(&self, mem: &mut Mem, full: u32, until: Option<u32>) -> Vec<u32> {
        let base = self.base as usize;
        let mut previous: Vec<u32> = mem.handles[base..base + self.alloc_small.len()].to_vec();
        let mut own = vec![u32::MAX; previous.len()];
        let Some(a) = mem.allocator.as_mut() else { return previous };
        let whole = (0..full).map(|_| u32::MAX);
        for end in whole.chain(until) {
            for step in self.large_steps.iter().take_while(|s| s.at < end) {
                match step.op {
                    StepOp::Alloc { local, bytes } => own[local as usize] = a.malloc_block(bytes),
                    StepOp::FreeOwn(local) => a.free_block(own[local as usize]),
                    StepOp::FreePrevious(local) => a.free_block(previous[local as usize]),
                }
            }
            if end == u32::MAX {
                std::mem::swap(&mut previous, &mut own);
            }
        }
        previous
    }

    /// The run as it would be after the replayed iterations: the large pool moved to its
    /// place in the cycle, and each tensor that outlives the iteration in its replayed block.
    fn leave(self, mem: &mut Mem) {
        if mem.allocator.is_none() {
            return;
        }
        let large = self.large_pool_at(mem, self.replayed % self.period, None);
        for &local in &self.survivors {
            let small = self.alloc_small[local as usize];
            mem.handles[(self.base + local) as usize] = if small { self.small_previous[local as usize] } else { large[local as usize] };
        }
        // The key walks the survivors again; the older tensors kept their blocks.
        mem.first_freed = mem.first_freed.min(self.base);
    }
}

/// The unfolded run with the block-level allocator.
fn exact_run<'c, 't>(cfg: &'c Config, target: &Target) -> Run<'c, 't> {
    let mut run = Run::new(cfg, *target, None);
    run.fold = false;
    // An unfolded run creates about 300 tensors per layer over its eight forwards and four
    // backwards (3,818 for GPT-2 124M eager).
    let tensors = 1024 + 320 * cfg.n_layer as usize;
    run.mem.attach_allocator(CachingAllocator::configured(cfg.expandable_segments), tensors);
    run
}

fn simulate_run(run: &mut Run) -> Simulation {
    run.init();
    run.mem.begin_window();
    run.estimate_loss();
    let eval_at_start_high = run.mem.window;
    let eval_at_start = run.mem.end_window();
    let after_first_eval = run.mem.live;
    let eval_only = run.cfg.eval_only;
    if eval_only && run.mem.reserve_passed.is_none() {
        // An eval-only run ends here: a limit asks only whether this window fits, and the
        // windows after it are simulated unlimited, as what training would need.
        run.mem.reserve_limit = u64::MAX;
    }
    if !run.fold {
        run.mem.begin_window();
        run.iteration();
        let first_iter = run.mem.end_window();
        run.mem.begin_window();
        run.estimate_loss();
        let eval = run.mem.end_window();
        run.mem.begin_window();
        run.iteration();
        let train = run.mem.end_window();
        return Simulation { train, eval, first_iter, eval_at_start, eval_only };
    }
    // Folded: the same windows, the later two from what the earlier ones recorded.
    run.mem.begin_window();
    let first = run.recorded_iteration();
    let first_iter = run.mem.end_window();
    // Once the workspaces exist, estimate_loss leaves nothing behind and its events do not
    // depend on anything the iteration changed: the second one is the first one on a
    // different base. Its peak is the first one's (which is in batch 1, after the first one's
    // workspaces were created) moved by what the base gained or lost per category.
    run.mem.begin_window();
    run.mem.offer(eval_at_start_high.rebased(&after_first_eval, &run.mem.live));
    let eval = run.mem.end_window();
    let train = run.replay_iteration(&first);
    Simulation { train, eval, first_iter, eval_at_start, eval_only }
}

/// [`simulate_exact`] for a search that only asks whether the reserve stays within
/// `reserve_limit` bytes (the reserve never shrinks, so that is its final value): the whole
/// simulation if it does; if not, the reserve at the moment it passed the limit, where the run
/// stopped modelling the allocator (searches spend little on configs that do not fit).
pub fn simulate_exact_within(cfg: &Config, target: &Target, reserve_limit: u64) -> Result<Simulation, u64> {
    let mut run = exact_run(cfg, target);
    run.mem.reserve_limit = reserve_limit;
    let sim = simulate_run(&mut run);
    match run.mem.reserve_passed {
        None => Ok(sim),
        Some(reserved) => Err(reserved),
    }
}

/// Every allocator event of [`simulate_exact`], in order: what the caching allocator is asked
/// for and when it reserves more (for comparing with `torch.cuda.memory._snapshot()` traces).
pub fn exact_events(cfg: &Config, target: &Target) -> Vec<AllocEvent> {
    let mut run = exact_run(cfg, target);
    run.mem.trace = Some(Trace::Events(Vec::new()));
    simulate_run(&mut run);
    match run.mem.trace.take() {
        Some(Trace::Events(log)) => log,
        _ => Vec::new(),
    }
}

/// The live-memory curve of one steady-state training iteration followed by one
/// `estimate_loss`, one point per allocation or free (for charts); of an eval-only run, its one
/// `estimate_loss`, the eval at start.
pub fn timeline(cfg: &Config, target: &Target) -> Vec<TimelinePoint> {
    let mut points = Vec::new();
    {
        let mut run = Run::new(cfg, *target, None);
        run.fold = false;
        run.init();
        if cfg.eval_only {
            run.mem.attach_timeline(&mut points);
            run.estimate_loss();
            drop(run);
            return points;
        }
        run.estimate_loss();
        run.iteration();
        run.estimate_loss();
        // Attach the recorder for the steady iteration and the eval after it.
        run.mem.attach_timeline(&mut points);
        run.iteration();
        run.estimate_loss();
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unfolded(cfg: &Config, target: &Target) -> Simulation {
        let mut run = Run::new(cfg, *target, None);
        run.fold = false;
        simulate_run(&mut run)
    }

    /// Splitting a window into stretches must not move its peak: a stretch that only comes back
    /// to the height reached before it leaves the earlier point as the peak (a tie is not a new
    /// peak), and one that climbs higher takes over.
    #[test]
    fn stretches_keep_the_window_peak_of_the_whole() {
        let mut mem = Mem::new(512, 16, None);
        mem.begin_window();
        mem.at(Phase::Forward, "first", NO_LAYER, "");
        let a = mem.alloc(1024, Category::Temporaries);
        mem.at(Phase::Backward, "second", NO_LAYER, "");
        let before = mem.begin_stretch();
        mem.free(a);
        mem.alloc(1000, Category::Temporaries); // rounded to 1024: back to the same height
        let flat = mem.end_stretch(before);
        assert_eq!((flat.bytes, flat.at.module), (1024, "second"));
        assert_eq!(mem.end_window().op, "first");

        mem.at(Phase::Backward, "third", NO_LAYER, "");
        let before = mem.begin_stretch();
        mem.alloc(512, Category::Gradients);
        let climb = mem.end_stretch(before);
        assert_eq!(climb.bytes, 1536);
        let peak = mem.end_window();
        assert_eq!((peak.bytes, peak.op.as_str(), peak.breakdown.gradients), (1536, "third", 512));
    }

    /// The fast run's shortcuts (folding the middle blocks, batch 0 of estimate_loss as its
    /// net effect, the eval window rebased from the one at iteration 0, the steady iteration
    /// replayed from the first one's stretches) must not change any
    /// peak, byte for byte, nor where it is, nor what it is made of: compared with the run
    /// that simulates every event, for eager and compiled loops, CUDA and CPU kernels, and
    /// eval shapes that differ from the training ones.
    #[test]
    fn folding_is_exact() {
        let targets = [crate::device::default_gpu().target(), Target::cpu_trace()];
        let mut compared = 0;
        for target in &targets {
            for compile in [false, true] {
                for dtype in Dtype::ALL {
                    for attention in [Attention::Flash, Attention::Manual] {
                        for (ga, ckpt, dropout, bias, eval, optimizer) in [
                            (1, false, 0.0, false, (None, None), Optimizer::Adamw),
                            (3, true, 0.1, true, (Some(1), Some(64)), Optimizer::Adamw),
                            (2, false, 0.1, false, (Some(8), None), Optimizer::Sgd),
                            (1, true, 0.0, true, (None, Some(1)), Optimizer::Sgd),
                        ] {
                            for n_layer in [1, 2, 3, 7] {
                                let cfg = Config {
                                    n_layer,
                                    n_head: 4,
                                    n_embd: 256,
                                    block_size: 128,
                                    vocab_size: 1000,
                                    batch_size: 3,
                                    gradient_accumulation_steps: ga,
                                    eval_batch_size: eval.0,
                                    eval_block_size: eval.1,
                                    activation_checkpointing: ckpt,
                                    dropout,
                                    bias,
                                    dtype,
                                    attention,
                                    compile,
                                    optimizer,
                                    ..Config::default()
                                };
                                assert_eq!(simulate(&cfg, target), unfolded(&cfg, target), "{cfg:?} {target:?}");
                                compared += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(compared, 2 * 2 * 3 * 2 * 4 * 4);
    }

    /// Three layers of 128 wide, 64 tokens, a 500-token vocabulary: a model small enough to run
    /// every event of many loop variants in a test.
    fn three_small_layers() -> Config {
        Config { n_layer: 3, n_head: 4, n_embd: 128, block_size: 64, vocab_size: 500, ..Config::default() }
    }

    /// The allocator state key, kept incrementally (the hashes of the tensors that stayed live
    /// are reused), is the key walked afresh over every slot after each iteration and each
    /// `estimate_loss` of exact runs (whose micro-steps and eval batches take keys in between),
    /// with accumulation, an eval batch of their own, compiled and with the expandable pool.
    #[test]
    fn the_incremental_state_key_is_the_walked_one() {
        let target = crate::device::default_gpu().target();
        for (compile, expandable_segments) in [(false, false), (true, false), (false, true)] {
            let cfg = Config {
                batch_size: 3,
                eval_batch_size: Some(5),
                gradient_accumulation_steps: 5,
                compile,
                expandable_segments,
                ..three_small_layers()
            };
            let mut run = exact_run(&cfg, &target);
            run.init();
            let walked = |run: &Run| {
                let a = run.mem.allocator.as_ref().unwrap();
                let live = run.mem.slots.iter().zip(&run.mem.handles).filter(|((bytes, _), _)| *bytes > 0);
                let h = live.fold(0, |h, (_, &handle)| crate::allocator::mix(h ^ a.addr(handle)));
                let (small, large) = a.layout_hashes();
                assert_eq!(small.wrapping_add(large), a.layout_hash());
                crate::allocator::mix(a.layout_hash() ^ crate::allocator::mix(h))
            };
            for step in 0..4 {
                run.estimate_loss();
                assert_eq!(run.mem.state_key(), walked(&run), "after eval {step}");
                run.iteration();
                // Twice in a row: nothing freed in between.
                let key = run.mem.state_key();
                assert_eq!((key, run.mem.state_key()), (walked(&run), key), "after iteration {step}");
            }
        }
    }

    /// Nothing outlives its iteration: from the second iteration on (optimizer state created,
    /// gradients set to None), every iteration ends with the same bytes live, per category,
    /// and so does each `estimate_loss`. A tensor the loop never frees (as a checkpointed
    /// block's attention dropout mask once was) grows that by a mask per layer per micro-step.
    #[test]
    fn iterations_and_evals_leave_nothing_behind() {
        let target = crate::device::default_gpu().target();
        let mut checked = 0;
        for compile in [false, true] {
            for dtype in Dtype::ALL {
                for attention in [Attention::Flash, Attention::Manual] {
                    for ckpt in [false, true] {
                        for (dropout, ga) in [(0.0, 1), (0.2, 1), (0.2, 3)] {
                            let cfg = Config {
                                batch_size: 2,
                                gradient_accumulation_steps: ga,
                                activation_checkpointing: ckpt,
                                dropout,
                                dtype,
                                attention,
                                compile,
                                ..three_small_layers()
                            };
                            for fold in [true, false] {
                                let mut run = Run::new(&cfg, target, None);
                                run.fold = fold;
                                run.init();
                                run.iteration();
                                let mut ends = Vec::new();
                                for _ in 0..3 {
                                    run.iteration();
                                    ends.push(run.mem.live);
                                    run.estimate_loss();
                                    ends.push(run.mem.live);
                                }
                                assert_eq!(ends[0], ends[2], "iterations grow: {cfg:?}, fold {fold}");
                                assert_eq!(ends[2], ends[4], "iterations grow: {cfg:?}, fold {fold}");
                                assert_eq!(ends[1], ends[3], "evals grow: {cfg:?}, fold {fold}");
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 2 * 3 * 2 * 2 * 3 * 2);
    }

    /// 6 layers of 768 at block 256, batch 8, vocab 50304, bfloat16, eager: its reserve grows by
    /// 394 MiB at iteration 3, in the model and as measured on an H200
    /// (`tests/reference/data/cuda-h200-later.json`).
    fn grows_at_iteration_3() -> Config {
        Config {
            n_layer: 6,
            n_head: 6,
            n_embd: 768,
            block_size: 256,
            batch_size: 8,
            gradient_accumulation_steps: 1,
            compile: false,
            ..Config::default()
        }
    }

    /// The continuation stops at a repeated state: running on far longer (30 more iterations,
    /// an eval every 5) never reserves more than it reported, and it reported the growth that
    /// brute force finds. Configs: one that grows at iteration 3 (`grows_at_iteration_3`),
    /// and a grid of small ones, some of which grow.
    #[test]
    fn later_reserve_is_what_a_long_run_reaches() {
        let target = crate::device::default_gpu().target();
        // 12 layers of 384 at batch 4 grows too (by 198 MiB at iteration 3, measured alike).
        let mut configs = vec![grows_at_iteration_3(), Config { n_layer: 12, n_embd: 384, batch_size: 4, ..grows_at_iteration_3() }];
        // What the H200 measured for those two (cuda-h200-later.json): growth at iteration 3, MiB.
        let measured_growth = [394u64, 198];
        for (n_embd, batch, vocab, ga) in [(768, 12, 50304, 1), (384, 16, 50304, 5), (384, 8, 65, 1), (768, 4, 50304, 5)] {
            configs.push(Config {
                n_layer: 4,
                n_head: 6,
                n_embd,
                block_size: 256,
                vocab_size: vocab,
                batch_size: batch,
                gradient_accumulation_steps: ga,
                compile: false,
                ..Config::default()
            });
        }
        let mut grew = 0;
        for (k, cfg) in configs.iter().enumerate() {
            let (sim, later) = simulate_exact_and_later(cfg, &target, None);
            let mut run = exact_run(cfg, &target);
            let again = simulate_run(&mut run);
            assert_eq!(sim, again);
            let simulated = run.mem.allocator.as_ref().unwrap().reserved;
            let mut highest = simulated;
            for i in 0..30 {
                run.iteration();
                if i % 5 == 4 {
                    run.estimate_loss();
                }
                highest = highest.max(run.mem.allocator.as_ref().unwrap().reserved);
            }
            match later {
                Some(l) => {
                    grew += 1;
                    assert!(l.reserved_bytes > simulated && l.past_limit.is_none());
                    assert_eq!(l.reserved_bytes, highest, "{cfg:?}");
                }
                None => assert_eq!(highest, simulated, "{cfg:?}"),
            }
            if let Some(&mib) = measured_growth.get(k) {
                let l = later.expect("it grows, as measured");
                assert_eq!((l.iteration, l.in_eval, (l.reserved_bytes - simulated) >> 20), (3, false, mib), "{cfg:?}");
            }
        }
        assert!(grew >= 2, "the cases include growth");
    }

    /// With a limit between the simulated reserve and the later one, the continuation stops
    /// where it is passed and says what the allocator could release there; with the limit at the
    /// later reserve nothing is passed.
    #[test]
    fn later_reserve_past_a_limit() {
        let target = crate::device::default_gpu().target();
        let cfg = grows_at_iteration_3();
        let (_, later) = simulate_exact_and_later(&cfg, &target, None);
        let later = later.expect("it grows");
        let mut run = exact_run(&cfg, &target);
        simulate_run(&mut run);
        let simulated = run.mem.allocator.as_ref().unwrap().reserved;
        let limit = (simulated + later.reserved_bytes) / 2;
        let (_, passed) = simulate_exact_and_later(&cfg, &target, Some(limit));
        let passed = passed.expect("passed");
        let past = passed.past_limit.expect("past the limit");
        assert_eq!((passed.iteration, passed.in_eval), (later.iteration, later.in_eval));
        assert!(passed.reserved_bytes > limit);
        assert_eq!(past.recovers, passed.reserved_bytes - past.releasable_bytes <= limit);
        let (_, at_limit) = simulate_exact_and_later(&cfg, &target, Some(later.reserved_bytes));
        assert_eq!(at_limit, Some(later));
        // Below the simulated windows' own reserve the config does not fit: not continued
        // (at the reserve itself it is).
        assert_eq!(simulate_exact_and_later(&cfg, &target, Some(simulated - 1)).1, None);
        assert!(simulate_exact_and_later(&cfg, &target, Some(simulated)).1.is_some());
    }

    /// An iteration repeats the one before it only if it requests the same sizes in the same
    /// order and frees the same tensors one iteration on: not a different size, not a tensor
    /// older than the iteration before, not a request of another kind.
    #[test]
    fn an_iteration_repeats_only_the_same_requests() {
        let recorded = |base: u32, previous_base: u32, mut requests: Vec<Request>| {
            let frees_older = Recorded::name_frees(&mut requests, base, previous_base, 2);
            Recorded {
                base,
                previous_base,
                created: 2,
                requests,
                frees_older,
                all_micro_steps: true,
                repeats_previous: false,
                large_key: 0,
                large_layout: 0,
                survivor_addrs: Vec::new(),
            }
        };
        // Slots 10..12 and 12..14: each frees its first tensor and the previous one's second.
        let first = recorded(10, 8, vec![Request::alloc(512), Request::free(9), Request::alloc(4096), Request::free(10)]);
        let steady = |requests| recorded(12, 10, requests);
        assert!(steady(vec![Request::alloc(512), Request::free(11), Request::alloc(4096), Request::free(12)]).repeats(&first));
        assert!(!steady(vec![Request::alloc(1024), Request::free(11), Request::alloc(4096), Request::free(12)]).repeats(&first));
        // Slot 9 is two iterations old for the second.
        assert!(!steady(vec![Request::alloc(512), Request::free(9), Request::alloc(4096), Request::free(12)]).repeats(&first));
        assert!(!steady(vec![Request::alloc(512), Request::free(11), Request::free(12), Request::alloc(4096)]).repeats(&first));
        let mut skipped = steady(vec![Request::alloc(512), Request::free(11), Request::alloc(4096), Request::free(12)]);
        skipped.all_micro_steps = false;
        assert!(!skipped.repeats(&first));
        assert_eq!((Request::alloc(512).alloc_bytes(), Request::free(9).freed_slot()), (Some(512), Some(9)));
        let named: Vec<Option<Freed>> = first.requests.iter().map(|r| r.freed()).collect();
        assert_eq!(named, [None, Some(Freed::Previous(1)), None, Some(Freed::Own(0))]);
    }

    /// Replaying steady iterations on the small pool alone ([`SteadyIteration`]) continues a
    /// run as simulating them does: the same state key after every iteration, the same answer,
    /// and the same allocator state where the continuation ends (the replay left and every
    /// tensor in its block), with and without a limit the reserve passes. The configs replay
    /// many iterations, a few, or none.
    #[test]
    fn replayed_iterations_continue_as_simulated_ones() {
        let target = crate::device::default_gpu().target();
        let (mut runs, mut replaying_runs, mut replayed_iterations, mut limited) = (0, 0, 0, 0);
        let shape =
            |n_layer, n_embd, block_size| Config { n_layer, n_embd, block_size, vocab_size: 2000, compile: false, ..three_small_layers() };
        // (What each does with the plain limit, found by a search over small configs.)
        for (cfg, dropout, ckpt) in [
            // The small pool takes a segment at iteration 11, in the replay.
            (Config { batch_size: 3, gradient_accumulation_steps: 2, dtype: Dtype::Float16, ..shape(4, 256, 256) }, 0.0, false),
            // 49 iterations, 39 replayed.
            (Config { batch_size: 3, gradient_accumulation_steps: 3, dtype: Dtype::Bfloat16, ..shape(6, 256, 128) }, 0.0, false),
            // Growth at iteration 21.
            (Config { batch_size: 8, gradient_accumulation_steps: 8, dtype: Dtype::Float32, ..shape(2, 128, 128) }, 0.0, false),
            (Config { batch_size: 5, gradient_accumulation_steps: 5, dtype: Dtype::Float16, ..shape(4, 256, 256) }, 0.0, false),
            (Config { batch_size: 4, gradient_accumulation_steps: 3, dtype: Dtype::Float32, ..shape(4, 256, 256) }, 0.1, false),
            (Config { batch_size: 2, gradient_accumulation_steps: 2, ..shape(4, 256, 256) }, 0.0, true),
            // More micro-steps than an exact iteration runs: never replayed.
            (Config { batch_size: 2, gradient_accumulation_steps: 10, ..shape(4, 256, 256) }, 0.0, false),
        ] {
            let cfg = Config { dropout, activation_checkpointing: ckpt, ..cfg };
            let simulated = {
                let mut run = exact_run(&cfg, &target);
                simulate_run(&mut run);
                run.mem.allocator.as_ref().unwrap().reserved
            };
            for limit in [None, Some(simulated), Some(simulated + (2 << 20))] {
                let continued = |replay: bool| {
                    let mut run = exact_run(&cfg, &target);
                    simulate_run(&mut run);
                    let (later, keys, replayed) = continue_run_replaying(&mut run, limit, replay);
                    let end = (run.mem.state_key(), run.mem.allocator.as_ref().map(|a| (a.reserved, a.allocated)));
                    (later, keys, end, replayed)
                };
                let (later, keys, end, replayed) = continued(true);
                let (simulated_later, simulated_keys, simulated_end, none) = continued(false);
                assert_eq!(none, 0);
                assert_eq!((later, &keys, end), (simulated_later, &simulated_keys, simulated_end), "{cfg:?}, limit {limit:?}");
                eprintln!("limit {limit:?}: {} iterations, {replayed} replayed, later {later:?}", keys.len());
                runs += 1;
                replaying_runs += (replayed > 0) as u32;
                replayed_iterations += replayed;
                limited += later.is_some_and(|l| l.past_limit.is_some()) as u32;
            }
        }
        assert_eq!(runs, 21);
        assert!(replaying_runs >= 15 && replayed_iterations >= 100, "{replaying_runs} runs replayed {replayed_iterations} iterations");
        assert!(limited >= 1, "no continuation passed its limit");
    }
}

#[cfg(test)]
mod term_tests {
    //! Single terms of the model, from first principles (the formulas in
    //! ../shared/notes/pytorch-memory.md as corrected by the H100 measurements).
    use super::*;

    const R: u64 = 512;

    /// CUDA's sum over rows stages partial sums in global memory once a thread would add 256
    /// values or more. A memory snapshot on an H100 (tests/reference/snapshots/
    /// snap-L6H6C384-T256-B32-V65-fp32-flash-bias-ckpt.pickle) shows the bias gradients of
    /// c_proj (384 outputs) and c_fc (1536) over 8192 rows taking 24 MiB and 96 MiB beside
    /// them, each right after the bias gradient's output, with the kernel's semaphores (one int
    /// per block column: the snapshot's 12 bytes for c_proj) taken and freed inside it.
    #[test]
    fn bias_gradient_sums_take_the_reduction_scratch_seen_in_a_snapshot() {
        let h100 = crate::device::Gpu::find("h100-80gb").unwrap().target();
        assert_eq!(sum_over_rows_scratch(8192, 384, &h100), (24 * MIB, 4 * 3));
        assert_eq!(sum_over_rows_scratch(8192, 1536, &h100), (96 * MIB, 4 * 12));
        // Few rows: summed within a block, no scratch; and none on the CPU trace.
        assert_eq!(sum_over_rows_scratch(512, 1536, &h100), (0, 0));
        assert_eq!(sum_over_rows_scratch(8192, 1536, &Target::cpu_trace()), (0, 0));
        // A card with fewer multiprocessors splits the rows over fewer blocks.
        let rtx = crate::device::Gpu::find("rtx-4070").unwrap().target();
        let (small, _) = sum_over_rows_scratch(8192, 1536, &rtx);
        assert!(small > 0 && small < 96 * MIB, "{small}");
        // Every shape: no panic, and the scratch grows with neither too few rows nor zero cols.
        for rows in [0, 1, 2, 255, 256, 4096, 1 << 20] {
            for cols in [0, 1, 3, 7, 8, 1000, 50304] {
                let (b, sem) = sum_over_rows_scratch(rows, cols, &h100);
                assert_eq!(b == 0, sem == 0, "{rows} x {cols}");
            }
        }
    }

    /// Biased linears run through cuBLASLt, whose 1 MiB workspace each thread gets once: the
    /// forward's, and with activation checkpointing the recompute's on the autograd thread
    /// (measured on the H200: checkpointed configs with biases were 1.000 MiB above the model
    /// that had only the first).
    #[test]
    fn a_checkpointed_recompute_gets_its_own_cublaslt_workspace() {
        let lt_workspaces = |bias: bool, activation_checkpointing: bool| {
            let cfg = Config {
                n_layer: 2,
                n_head: 2,
                n_embd: 64,
                block_size: 64,
                batch_size: 2,
                vocab_size: 65,
                bias,
                activation_checkpointing,
                compile: false,
                ..Config::default()
            };
            let gpu = crate::device::Gpu::find("h200-141gb").unwrap().target();
            exact_events(&cfg, &gpu).iter().filter(|e| e.requested == CUBLASLT_WORKSPACE_BYTES).count()
        };
        assert_eq!(lt_workspaces(true, true), 2);
        assert_eq!(lt_workspaces(true, false), 1);
        assert_eq!(lt_workspaces(false, true), 0);
    }

    /// CUDA's softmax backward multiplies the gradient by the output into a (B,H,T,T)
    /// temporary before it computes the gradient of its input, and frees it when it returns;
    /// the harness's CPU trace (fake tensors) has no such buffer.
    #[test]
    fn cuda_softmax_backward_takes_a_grad_times_output_temporary() {
        let cfg = Config {
            n_layer: 1,
            n_head: 2,
            n_embd: 64,
            block_size: 128,
            batch_size: 2,
            vocab_size: 65,
            attention: Attention::Manual,
            dtype: Dtype::Float32,
            compile: false,
            gradient_accumulation_steps: 1,
            ..Config::default()
        };
        let bhtt4 = 2 * 2 * 128 * 128 * 4;
        let steps = |target: &Target| -> Vec<i64> {
            exact_events(&cfg, target)
                .into_iter()
                .filter(|e| {
                    e.phase == Phase::Backward && e.op == "transformer.h.0.attn softmax backward" && e.block.unsigned_abs() == bhtt4
                })
                .map(|e| e.block.signum())
                .take(3)
                .collect()
        };
        let gpu = crate::device::Gpu::find("h100-80gb").unwrap().target();
        // The gradient of the input, then the temporary, taken and given back.
        assert_eq!(steps(&gpu), [1, 1, -1]);
        assert_eq!(steps(&Target::cudalike_trace())[..2], [1, -1]);
    }

    /// bf16/fp16 flash attention pads heads to a multiple of 8 (cuDNN takes none of these):
    /// head size 20 runs as 24, 64 and fp32 (the memory-efficient kernel) are not padded.
    #[test]
    fn flash_pads_head_sizes_that_are_not_multiples_of_eight() {
        let cfg = |n_embd: u32, dtype: Dtype| Config { n_embd, n_head: 4, dtype, compile: false, ..Config::default() };
        let pad = |c: &Config| Dims::new(c, Mode::Train).flash_padded_head(true);
        assert_eq!(pad(&cfg(80, Dtype::Bfloat16)), Some(24));
        assert_eq!(pad(&cfg(256, Dtype::Float16)), None);
        assert_eq!(pad(&cfg(80, Dtype::Float32)), None);
        assert_eq!(Dims::new(&cfg(80, Dtype::Float16), Mode::Train).flash_padded_head(false), None);
        // In the forward, attention allocates q, k, v and the output at the padded size (B, H,
        // T, 24) bf16 and then the contiguous (B, T, C) copy c_proj reads; with 64-wide heads
        // neither.
        let gpu = crate::device::Gpu::find("h100-80gb").unwrap().target();
        let attention_sizes = |c: &Config| -> Vec<u64> {
            exact_events(c, &gpu)
                .into_iter()
                .filter(|e| e.phase == Phase::Forward && e.op == "transformer.h.0.attn" && e.block > 0)
                .map(|e| e.requested)
                .collect()
        };
        let c80 = cfg(80, Dtype::Bfloat16);
        let (b, t) = (c80.batch_size as u64, c80.block_size as u64);
        let padded = b * 4 * t * 24 * 2;
        let lse = 4 * b * 4 * t;
        // (The first forward's; each later forward repeats it.) After the logsumexp, flash's
        // rng_state and unused offset (16 and 8 bytes); no split-KV buffers at B*H*T this large.
        assert_eq!(attention_sizes(&c80)[..8], [padded, padded, padded, padded, lse, 16, 8, b * t * 80 * 2]);
        // Unpadded: the output (B, T, C), which c_proj reads as it is, and the logsumexp.
        assert_eq!(attention_sizes(&cfg(256, Dtype::Bfloat16))[..3], [b * t * 256 * 2, lse, b * t * 256 * 2]);
    }

    /// flash-attn 2's split-KV buffers, as the kernel sizes them: the two H200 evals that were
    /// low by exactly these, configs that fill the card or have one key block (none), and the
    /// limits.
    #[test]
    fn flash_split_kv_buffers_follow_the_kernels_heuristic() {
        // L5 H4 C48, eval block 1536, batch 2 (heads padded to 16): 2 x 4 x 24 = 192 query
        // blocks for 264 slots, 6 key blocks of 256. Splits 4 and 5 are not eligible (2 key
        // blocks per split, as with 3); 1, 2 and 3 fill 73% of the last wave, 6 fills 87%, the
        // best, and 73% is under 85% of it: 6 splits.
        let (lse, out) = flash_split_kv_scratch(2, 4, 1536, 16, 132);
        assert_eq!((lse, out), (6 * 2 * 4 * 1536 * 4, 6 * 2 * 4 * 1536 * 32 * 4));
        // L4 H1 C100, eval batch 24, T 256 (heads padded to 104, rounded to 128): 2 splits.
        assert_eq!(flash_split_kv_scratch(24, 1, 256, 104, 132), (2 * 24 * 256 * 4, 2 * 24 * 256 * 128 * 4));
        // GPT-2 124M's B12 H12 T1024 fills the card.
        assert_eq!(flash_split_kv_scratch(12, 12, 1024, 64, 132), (0, 0));
        // One key block (T <= 256 at heads up to 64) cannot be split.
        assert_eq!(flash_split_kv_scratch(1, 1, 256, 64, 132), (0, 0));
        // Below 80% of the slots but already filling most of its last wave: one split (the
        // early return and the efficiency rule agree there).
        assert_eq!(flash_split_kv_scratch(26, 1, 512, 64, 132), (0, 0));
        // No card, no heads, or heads flash does not take: nothing.
        assert_eq!(flash_split_kv_scratch(1, 1, 64, 64, 0), (0, 0));
        assert_eq!(flash_split_kv_scratch(1, 1, 64, 264, 132), (0, 0));
    }

    /// Where flash runs SDPA's forward, its split-KV buffers come after the logsumexp and go
    /// before attention returns: on an RTX 4070 (flash for every bf16 head), not on the H100
    /// (cuDNN for heads that are multiples of 8), not with dropout in training, and they raise
    /// an eval whose peak is in attention.
    #[test]
    fn flash_split_kv_buffers_appear_where_flash_runs() {
        let cfg = Config {
            n_layer: 2,
            n_head: 1,
            n_embd: 64,
            block_size: 1024,
            batch_size: 1,
            vocab_size: 65,
            dtype: Dtype::Bfloat16,
            compile: false,
            gradient_accumulation_steps: 1,
            ..Config::default()
        };
        let rtx = crate::device::Gpu::find("rtx-4070").unwrap().target();
        let h100 = crate::device::Gpu::find("h100-80gb").unwrap().target();
        // 1 x 1 x 16 query blocks = 16 of 92 slots on the 4070's 46 multiprocessors, 4 key
        // blocks: 4 splits (3 is not eligible, 1 and 2 fill a wave far less).
        let (lse_acc, out_acc) = flash_split_kv_scratch(1, 1, 1024, 64, 46);
        assert_eq!((lse_acc, out_acc), (4 * 1024 * 4, 4 * 1024 * 64 * 4));
        assert!(lse_acc > 0 && out_acc > lse_acc);
        let eval_attention = |c: &Config, t: &Target| -> Vec<i64> {
            exact_events(c, t)
                .into_iter()
                .filter(|e| e.phase == Phase::EvalForward && e.op == "transformer.h.0.attn")
                .map(|e| e.block)
                .take(8)
                .collect()
        };
        let (out, lse) = (1024 * 64 * 2, 1024 * 4);
        let r = |b: u64| crate::allocator::round_size(b) as i64;
        assert_eq!(eval_attention(&cfg, &rtx), [out, lse, r(lse_acc), r(out_acc), 512, 512, -r(lse_acc), -r(out_acc)]);
        assert_eq!(eval_attention(&cfg, &h100)[..3], [out, lse, -lse]);
        assert!(flash_splits_kv(&cfg, &rtx));
        assert!(!flash_splits_kv(&cfg, &h100));
        // Training with dropout never splits; its eval (no dropout there) still does.
        let dropout = Config { dropout: 0.1, ..cfg.clone() };
        let train_splits = |c: &Config| {
            exact_events(c, &rtx).into_iter().any(|e| e.phase == Phase::Forward && e.op == "transformer.h.0.attn" && e.block == r(out_acc))
        };
        assert!(train_splits(&cfg));
        assert!(!train_splits(&dropout));
        assert!(flash_splits_kv(&dropout, &rtx));
        // They move the eval's peak into attention (a card too small to split as the control).
        let without = Target { multiprocessors: 1, ..rtx };
        assert_eq!(flash_split_kv_scratch(1, 1, 1024, 64, 1), (0, 0));
        let (split, unsplit) = (simulate_exact(&cfg, &rtx).eval, simulate_exact(&cfg, &without).eval);
        assert!(split.op.contains(".attn") && !unsplit.op.contains(".attn"), "{} / {}", split.op, unsplit.op);
        assert!(split.bytes > unsplit.bytes);
    }

    /// Where the last micro-step leaves its logits depends on the accumulation's parity, and
    /// with it whether an eval needs one more logits-sized segment. Measured on the H200
    /// (`wide-032` in cuda-h200-random-wide-seed26.json: GA 5, reserve 26,556 MiB): simulating
    /// two micro-steps put it 7.5 GB (28%) high; simulated until the allocator's state repeats,
    /// it is exact (the reference test holds the figure). Odd accumulations end alike, even
    /// ones alike, and the two differ here.
    #[test]
    fn the_last_micro_step_follows_the_accumulations_parity() {
        let cfg = |ga: u32| Config {
            n_layer: 6,
            n_head: 6,
            n_embd: 240,
            block_size: 2048,
            batch_size: 3,
            vocab_size: 50257,
            bias: false,
            dtype: Dtype::Float32,
            attention: Attention::Manual,
            optimizer: Optimizer::Sgd,
            gradient_accumulation_steps: ga,
            eval_batch_size: Some(19),
            eval_iters: 2,
            compile: false,
            ..Config::default()
        };
        let h200 = crate::device::Gpu::find("h200-141gb").unwrap().target();
        let reserve = |ga: u32| {
            let s = simulate_exact(&cfg(ga), &h200);
            [s.train, s.eval, s.first_iter, s.eval_at_start].iter().map(|p| p.reserved_bytes).max().unwrap()
        };
        let (two, three, four, five) = (reserve(2), reserve(3), reserve(4), reserve(5));
        assert_eq!((three, four), (five, two));
        assert!(two > five + (7 << 30), "{two} {five}");
    }

    /// The tied weight's two gradients: lm_head's waits in the autograd engine's input buffer
    /// until the embedding's arrives at the end of the backward, so from the second micro-step
    /// on it is a (V, C) beside `.grad` all through the blocks, and with B*T small against
    /// n_embd the step peaks at the end of the backward with both (V, C) gradients live, and
    /// their out-of-place sum: on the CPU trace (FakeTensorMode) always, on CUDA in fp32, where
    /// the buffered gradient is a view sharing its storage. A CPU trace measured this
    /// (`random-39` in tests/reference/data/cpu-fake-random.json; the model once added the
    /// first into `.grad` at once and was 12% low there), and the H200 the fp32 sum (the
    /// same config in cuda-h200-random.json, 8.9% low while the model summed in place).
    #[test]
    fn the_tied_weights_first_gradient_waits_for_the_embeddings() {
        let cfg = Config {
            n_layer: 2,
            n_head: 2,
            n_embd: 256,
            block_size: 32,
            vocab_size: 50304,
            batch_size: 1,
            gradient_accumulation_steps: 2,
            dtype: Dtype::Float32,
            compile: false,
            ..Config::default()
        };
        let vc = 50304 * 256 * 4;
        let gpu = crate::device::Gpu::find("h100-80gb").unwrap().target();
        for (target, sums) in [(gpu, 1), (Target::cpu_trace(), 1)] {
            let s = simulate(&cfg, &target);
            let peak = &s.train;
            assert_eq!((peak.phase, peak.op.as_str(), peak.micro_step), (Some(Phase::Backward), "transformer.wte+wpe backward", 2));
            // Every parameter's `.grad`, lm_head's buffered gradient, the embedding's (and the sum).
            assert_eq!(peak.breakdown.gradients, peak.breakdown.parameters, "{target:?}");
            assert_eq!(peak.breakdown.temporaries / vc, 2 + sums, "{target:?}: {:?}", peak.breakdown);
            // In the first micro-step the buffered gradient becomes `.grad`: no second copy.
            let first = cfg.clone();
            let one = simulate(&Config { gradient_accumulation_steps: 1, ..first }, &target);
            assert!(one.train.bytes < peak.bytes - vc + vc / 8, "{target:?}: {} vs {}", one.train.bytes, peak.bytes);
        }
    }

    /// Manual attention with one head: `matmul` folds (B, 1) into bmm's batch dimension as a
    /// view, so q, k and v are not copied and the saved views keep all of c_attn's output
    /// (v's third too) until the q @ k^T backward. At the softmax backward, where an
    /// attention-bound step peaks, one head therefore holds a B*T*C more than two heads' saved
    /// q and k^T copies, against three (B,T,T) matrices fewer (softmax's output, its gradient
    /// and the gradient being made). A CPU trace measured the one-head rule (`wide-103` in
    /// tests/reference/data/cpu-fake-random-wide-seed26.json, and L1 H1 C64 T512 B3 V65, where
    /// the model once copied q, k and v as for two heads and was 2.6% low).
    /// One block of manual attention, B3 T512 C64 with a 64-token vocabulary: a step whose
    /// peak is in the attention, where these tests look.
    fn attention_bound(n_head: u32, dtype: Dtype) -> Config {
        Config {
            n_layer: 1,
            n_head,
            n_embd: 64,
            block_size: 512,
            vocab_size: 64,
            bias: false,
            batch_size: 3,
            gradient_accumulation_steps: 1,
            dtype,
            attention: Attention::Manual,
            compile: false,
            ..Config::default()
        }
    }

    #[test]
    fn one_head_keeps_c_attns_output_until_the_q_k_backward() {
        let (b, t, c) = (3u64, 512u64, 64u64);
        let (one, two) = (attention_bound(1, Dtype::Float32), attention_bound(2, Dtype::Float32));
        let (s1, s2) = (simulate(&one, &Target::cpu_trace()), simulate(&two, &Target::cpu_trace()));
        for s in [&s1, &s2] {
            assert_eq!((s.train.phase, s.train.op.as_str()), (Some(Phase::Backward), "transformer.h.0.attn softmax backward"));
        }
        let (btc, btt) = (4 * b * t * c, 4 * b * t * t);
        assert_eq!(s2.train.bytes + btc, s1.train.bytes + 3 * btt);
        let saved = |s: &Simulation| s.train.breakdown.saved_activations;
        assert_eq!(saved(&s2) + btc, saved(&s1) + btt);
    }

    /// In `estimate_loss` (no graph) manual attention's att @ v under autocast reads a cast of
    /// softmax's fp32 output and a copy of v made for it; both go when the bmm returns, after
    /// its output exists, so the three are live together. The model once freed them first,
    /// which put the eval peak at the softmax and 0.8% (eval) and 1.6% (eval before the first
    /// step) under an H100's measurement (L3 H4 C192 T128 B8 V256 fp16 manual in
    /// tests/reference/data/cuda-h100.json, now exact to 1 KiB); the harness's emulation of
    /// CUDA's dispatch (`cpu-fake-cudalike`) showed it at up to 3.7% in random configs.
    #[test]
    fn eval_att_v_keeps_its_cast_and_v_copy_until_its_output_exists() {
        let (b, h, t, c) = (3u64, 4u64, 512u64, 64u64);
        let cfg = attention_bound(h as u32, Dtype::Float16);
        let target = Target::cudalike_trace();
        let points = timeline(&cfg, &target);
        let steps: Vec<i64> = points
            .windows(2)
            .filter(|w| w[1].phase == Phase::EvalForward)
            .map(|w| w[1].live_bytes as i64 - w[0].live_bytes as i64)
            .collect();
        let (bhtt, btc) = ((b * h * t * t) as i64, (b * t * c) as i64);
        // CUDA's softmax of an fp16 input: an fp32 output, then the fp16 input goes.
        let at = steps.windows(2).position(|w| w == [4 * bhtt, -2 * bhtt]).expect("the eval's softmax");
        // att's fp16 cast and v's copy, att @ v's output, then the copy and the cast go.
        assert_eq!(steps[at + 2..at + 7], [2 * bhtt, 2 * btc, 2 * btc, -2 * btc, -2 * bhtt]);
        let s = simulate(&cfg, &target);
        assert_eq!(s.eval_at_start.phase, Some(Phase::EvalForward));
    }

    fn cfg() -> Config {
        // Sizes chosen so that every tensor is a multiple of 512 bytes: the terms are exact.
        Config {
            n_layer: 3,
            n_head: 4,
            n_embd: 256,
            block_size: 128,
            vocab_size: 1024,
            batch_size: 4,
            gradient_accumulation_steps: 1,
            compile: false,
            ..Config::default()
        }
    }

    /// Runs the loop up to the end of the first micro-step's forward of the steady iteration
    /// and returns the live breakdown there.
    fn after_forward(c: &Config) -> [u64; CATEGORY_COUNT] {
        after_forward_on(c, Target::cpu_trace())
    }

    /// [`after_forward`] on `target`.
    fn after_forward_on(c: &Config, target: Target) -> [u64; CATEGORY_COUNT] {
        let mut run = Run::new(c, target, None);
        run.fold = false;
        run.init();
        run.estimate_loss();
        run.iteration();
        let h = run.forward(Mode::Train);
        // `logits, loss = model(X, Y)`: the previous micro-step's tensors die.
        run.mem.free(run.logits);
        run.mem.free(run.loss);
        (run.logits, run.loss) = (h.logits, h.loss);
        run.mem.live
    }

    #[test]
    fn saved_activations_per_layer_bf16_flash() {
        // 36*BTC + 16*BT + 4*BHT bytes per layer, plus the embedding output saved by block 0
        // is block 0's input (counted in the 36), plus ln_f's input is the last block's output
        // (also counted: each block's 4*BTC input), plus ln_f stats, lm_head's bf16 input and
        // the wte embedding's int64 positions.
        let c = cfg();
        let (b, t, ch, h, l) = (4u64, 128u64, 256u64, 4u64, 3u64);
        let per_layer = 36 * b * t * ch + 16 * b * t + 4 * b * h * t;
        let head = 4 * b * t * ch + 8 * b * t + 2 * b * t * ch;
        let live = after_forward(&c);
        assert_eq!(live[Category::SavedActivations.index()], l * per_layer + head);
        assert_eq!(per_layer % R, 0);
    }

    #[test]
    fn saved_activations_per_layer_fp32() {
        let c = Config { dtype: Dtype::Float32, ..cfg() };
        let (b, t, ch, h, l) = (4u64, 128u64, 256u64, 4u64, 3u64);
        // 64*BTC + 16*BT + 4*BHT per layer; ln_f's fp32 output is saved by lm_head itself.
        let per_layer = 64 * b * t * ch + 16 * b * t + 4 * b * h * t;
        let head = 4 * b * t * ch + 8 * b * t + 4 * b * t * ch;
        assert_eq!(after_forward(&c)[Category::SavedActivations.index()], l * per_layer + head);
    }

    /// With a head size no fused SDPA kernel takes, the math path saves what the manual path
    /// does, in fp32 whatever the dtype: contiguous copies of q, k^T and v and the softmax's
    /// (B,H,T,T) output instead of c_attn's output, the kernel's output and its logsumexp.
    /// Measured on the H200 (`cuda-h200-odd-heads-*.json`): before this path, such configs
    /// were predicted up to 89% low.
    #[test]
    fn sdpa_math_fallback_saves_fp32_attention_matrices() {
        let h100 = crate::device::Gpu::find("h100-80gb").unwrap().target();
        let on_gpu = |c: &Config| after_forward_on(c, h100)[Category::SavedActivations.index()];
        let (b, t, l) = (4u64, 128u64, 3u64);
        // float32, 4 heads of 63: every fused kernel wants a multiple of 4.
        let fp32 = Config { dtype: Dtype::Float32, n_embd: 252, ..cfg() };
        let (ch, h) = (252u64, 4u64);
        let head = 4 * b * t * ch + 8 * b * t + 4 * b * t * ch;
        assert_eq!(on_gpu(&fp32), l * (64 * b * t * ch + 16 * b * t + 4 * b * h * t * t) + head);
        // Against the flash-attention formula at a head size of 64 (saved_activations_per_layer_fp32).
        let (ch, h) = (256u64, 4u64);
        let aligned = Config { dtype: Dtype::Float32, ..cfg() };
        let head = 4 * b * t * ch + 8 * b * t + 4 * b * t * ch;
        assert_eq!(on_gpu(&aligned), l * (64 * b * t * ch + 16 * b * t + 4 * b * h * t) + head);
        // bfloat16, 2 heads of 300 (over flash's 256, not a multiple of 8): q, k and v upcast.
        let bf16 = Config { n_head: 2, n_embd: 600, ..cfg() };
        let (ch, h) = (600u64, 2u64);
        let head = 4 * b * t * ch + 8 * b * t + 2 * b * t * ch;
        assert_eq!(on_gpu(&bf16), l * (42 * b * t * ch + 16 * b * t + 4 * b * h * t * t) + head);
    }

    #[test]
    fn loss_head_is_eight_n_after_the_forward_under_autocast() {
        // logits (2N) + log_softmax in bf16 (2N) + nll_loss's fp32 copy (4N), and the previous
        // micro-step's logits are gone once the new ones are bound: 8N, plus the loss and
        // nll_loss's total_weight (0-d tensors, one block each).
        let c = cfg();
        let n = 4u64 * 128 * 1024;
        let live = after_forward(&c);
        assert_eq!(live[Category::LogitsAndLoss.index()], 8 * n + 2 * R);
    }

    #[test]
    fn eval_peak_holds_three_sets_of_logits() {
        // During estimate_loss after a step: the training logits and loss (2N + a scalar), the
        // previous eval batch's logits and loss (2N + a scalar), and the current batch's logits
        // (2N), log-probs (2N), fp32 copy (4N), loss and total_weight.
        let c = cfg();
        let n = 4u64 * 128 * 1024;
        let s = simulate(&c, &Target::cpu_trace());
        assert_eq!(s.eval.phase, Some(Phase::EvalLoss));
        assert_eq!(s.eval.breakdown.logits_and_loss, 12 * n + 4 * R);
        // At iteration 0 there are no training logits yet.
        assert_eq!(s.eval_at_start.breakdown.logits_and_loss, 10 * n + 3 * R);
    }

    #[test]
    fn compiled_run_keeps_three_logits_at_the_backward_and_fitted_bytes_per_layer() {
        // bf16 under compile: at the steady step's peak (the start of the backward) the logits,
        // their gradient and one more B*T*V tensor in bf16 (6N) plus the loss and its scaled
        // copy are live (the per-row log-sum-exp is spent once the gradient exists); each block
        // keeps its fitted bytes per element of B*T*C (`COMPILED_SAVED_BYTES_AUTOCAST`, fitted
        // to the measured compile rows, which `core/tests/reference.rs` holds it to; this test
        // the structure: per layer, per element) and flash attention's fp32 log-sum-exp; no
        // fp32 copy of the logits exists. Its bf16 casts of every block's linear weights and of
        // wte are saved for the backward too. (A vocabulary large enough for the loss to
        // dominate the backward, a multiple of 8: nothing padded.)
        let c = Config { compile: true, vocab_size: 16384, ..cfg() };
        let (n, btc) = (4u64 * 128 * 16384, 4u64 * 128 * 256);
        let s = simulate(&c, &Target::cpu_trace());
        assert_eq!(s.train.phase, Some(Phase::Backward));
        assert_eq!(s.train.breakdown.logits_and_loss, 6 * n + 2 * R);
        let lse = 4u64 * 4 * 128 * 4;
        assert_eq!(s.train.breakdown.saved_activations, c.n_layer as u64 * (btc * COMPILED_SAVED_BYTES_AUTOCAST + lse));
        // The peak is where the backward starts, before any block's backward: every cast is live.
        let (c_, layers) = (c.n_embd as u64, c.n_layer as u64);
        assert_eq!(s.train.breakdown.cast_weights, layers * 12 * c_ * c_ * 2 + c.vocab_size as u64 * c_ * 2);
        // The eval batch after a step: the training logits, the previous and the current eval
        // batch's logits (2N each) and three losses; nothing is saved without a graph.
        assert_eq!(s.eval.breakdown.logits_and_loss, 6 * n + 3 * R);
        assert_eq!(s.eval.breakdown.saved_activations, 0);
    }

    /// A vocabulary that is not a multiple of pad_mm's alignment (8 elements in bf16, 4 in
    /// fp32) costs the compiled backward one more B*T*V tensor, the padded copy of the logits'
    /// gradient, at the alignment's next multiple; none for a model too narrow to be padded.
    #[test]
    fn compiled_backward_pads_an_unaligned_vocabulary() {
        let peak_logits = |c: &Config| simulate(c, &Target::cpu_trace()).train.breakdown.logits_and_loss;
        let aligned = Config { compile: true, vocab_size: 16384, ..cfg() };
        let bt = 4u64 * 128;
        for (dtype, cb, v, v_pad) in [(Dtype::Bfloat16, 2u64, 16380u32, 16384u32), (Dtype::Float32, 4, 16382, 16384)] {
            let odd = Config { vocab_size: v, dtype, ..aligned.clone() };
            let even = Config { vocab_size: v_pad, dtype, ..aligned.clone() };
            let v_pad = u64::from(v_pad);
            // The odd vocabulary's own tensors are smaller; the padded copy makes up the rest.
            let own = 3 * bt * (v_pad - u64::from(v)) * cb;
            assert_eq!(peak_logits(&odd) + own, peak_logits(&even) + bt * v_pad * cb, "{dtype:?}");
        }
        // A multiple of 4 is aligned in float32 (not in bf16).
        let fp32 = Config { vocab_size: 16388, dtype: Dtype::Float32, ..aligned.clone() };
        assert_eq!(peak_logits(&fp32), 3 * bt * 16388 * 4 + 2 * R);
        // n_embd 32: lm_head's matmuls are too skinny for pad_mm.
        let narrow = |v| Config { vocab_size: v, n_embd: 32, n_head: 4, ..aligned.clone() };
        assert_eq!(peak_logits(&narrow(16380)) + 3 * bt * 4 * 2, peak_logits(&narrow(16384)));
    }

    /// Compiled manual attention keeps what the fitted (flash) model has plus each layer's
    /// (B,H,T,T) probabilities, and a byte per element of mask with dropout: compile does not
    /// make the attention matrices go away (its fix once claimed a 27.8 GiB run fit 12 GB).
    #[test]
    fn compiled_manual_attention_keeps_its_attention_matrices() {
        let flash = Config { compile: true, vocab_size: 16384, ..cfg() };
        let (bhtt, layers) = (4u64 * 4 * 128 * 128, flash.n_layer as u64);
        let saved = |c: &Config| simulate(c, &Target::cpu_trace()).train.breakdown.saved_activations;
        // The softmax's output is fp32 under autocast; flash keeps its (B,H,T) log-sum-exp instead.
        let lse = 4u64 * 4 * 128 * 4;
        let manual = Config { attention: Attention::Manual, ..flash.clone() };
        assert_eq!(saved(&manual), saved(&flash) + layers * (bhtt * 4 - lse));
        // Dropout adds its mask and the dropped probabilities in bf16.
        let dropout = |c: &Config| Config { dropout: 0.1, ..c.clone() };
        assert_eq!(saved(&dropout(&manual)), saved(&dropout(&flash)) + layers * (bhtt * 7 - lse));
        // Checkpointing keeps only block inputs: the same for both.
        let ckpt = |c: &Config| Config { activation_checkpointing: true, ..c.clone() };
        assert_eq!(saved(&ckpt(&manual)), saved(&ckpt(&flash)));
    }

    #[test]
    fn optimizer_state_and_gradients_are_per_parameter_tensor() {
        // Gradient accumulation keeps every gradient resident through micro-step 2, where the
        // training peak is.
        let c = Config { gradient_accumulation_steps: 2, ..cfg() };
        let p = crate::params::count(&c);
        let s = simulate(&c, &Target::cpu_trace());
        // nanoGPT's parameter tensors: wte, wpe; per block ln_1, c_attn, c_proj, ln_2, c_fc,
        // mlp.c_proj (no biases); ln_f. Every one is a multiple of 512 bytes here, so the terms
        // are exact: fp32 weights and gradients (4 bytes a parameter), and AdamW's two fp32
        // moments plus its one-element `step` tensor (one 512-byte block) per tensor.
        let tensors = 2 + 6 * c.n_layer as u64 + 1;
        assert_eq!(s.train.breakdown.parameters, 4 * p.total);
        assert_eq!(s.train.breakdown.gradients, 4 * p.total);
        assert_eq!(s.train.breakdown.optimizer_state, tensors * R + 8 * p.total);
        // SGD keeps no state.
        let sgd = simulate(&Config { optimizer: Optimizer::Sgd, ..c }, &Target::cpu_trace());
        assert_eq!(sgd.train.breakdown.optimizer_state, 0);
    }

    #[test]
    fn cublas_workspaces_appear_once_per_thread() {
        let c = cfg();
        let t = crate::device::Gpu::find("h100-80gb").unwrap().target();
        let s = simulate(&c, &t);
        assert_eq!(s.eval_at_start.breakdown.workspace, 32 << 20);
        assert_eq!(s.train.breakdown.workspace, 64 << 20);
        let biased = simulate(&Config { bias: true, ..c }, &t);
        assert_eq!(biased.train.breakdown.workspace, (64 << 20) + (1 << 20));
    }
}
