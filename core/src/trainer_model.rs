//! The memory of vramfit's own trainer (`trainer/src/model.rs` on candle, the loop in
//! `trainer/src/train.rs` and `optim.rs`), allocation by allocation.
//!
//! The trainer differs from PyTorch eager in what it keeps: its backward is hand-written, each block's
//! saved tensors live until that block's backward returns, the loss head takes its gradient during the
//! forward (chunk by chunk with the chunked loss), gradient accumulation sums into fresh tensors, and
//! layer norms, GELU, softmaxes and AdamW are fused one-pass kernels (`trainer/src/fused.rs`), and
//! attention reads q, k and v in place from c_attn's output (`trainer/src/attention.rs`). Every
//! tensor below is one allocation the trainer makes, in the trainer's order, with its shape in a comment; the tracker adds and removes bytes and
//! keeps the high-water mark per window, as [`crate::sim`] does for PyTorch.
//!
//! Measured on CPU (f32, a counting allocator): see `trainer/benches/trainer_memory.rs` and
//! `tests/reference/data/trainer-cpu.json`. On CUDA the same tensors are allocated from CUDA's pool,
//! except that the fused kernels are CPU-only: there candle's op-by-op compositions run, with more
//! temporaries ([`TrainerOptions::unfused_ops`]), and gemm's CPU buffers do not exist
//! ([`TrainerOptions::cuda`]). Measured on an H100 by the pool's high-water mark in f32, bf16 and
//! f16 (`tests/reference/data/trainer-cuda-h100-*.json`): every window within 0.02%. What CUDA
//! itself holds beside the tensors (context, cuBLAS workspace, the pool's cached blocks) is not
//! modelled here.

use crate::config::Config;
use crate::params::param_tensors;
use crate::plan::largest_where;
use crate::sim::{Breakdown, Category, Peak, Phase, Simulation, TimelinePoint};

/// Rows of logits the trainer's chunked loss computes at once: about 16 Mi logits (64 MiB in f32)
/// per chunk, and never fewer than 256 rows, so the chunk's matmuls stay efficient.
pub fn loss_chunk_rows(vocab_size: u32) -> u64 {
    ((1u64 << 24) / u64::from(vocab_size.max(1))).max(256)
}

/// The trainer's settings that change memory beyond [`Config`] (whose `activation_checkpointing`
/// the trainer honours too).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TrainerOptions {
    /// Logits for [`loss_chunk_rows`] rows at a time instead of the whole micro-batch.
    pub chunked_loss: bool,
    /// Rows per eval forward (whole sequences); `None` = the whole eval batch.
    pub eval_chunk_rows: Option<u64>,
    /// Gradient clipping on (`grad_clip > 0`): one gradient-sized temporary at a time.
    pub grad_clip: bool,
    /// CPU threads candle's matmuls use (`RAYON_NUM_THREADS`); 0 counts as 1. Each thread that runs
    /// a gemm keeps a buffer of its own (see [`gemm_slab_bytes`]).
    pub cpu_threads: u32,
    /// Rows of the f32 microkernel gemm picks on the CPU that trains: 16 with AVX2/FMA, 64 with
    /// AVX-512 (gemm-common 0.19); 0 counts as 16. See [`packs_dlogits`].
    pub gemm_kernel_rows: u32,
    /// The CPU's caches as gemm reads them; they size its buffers (see [`CpuCaches`]).
    pub cpu_caches: CpuCaches,
    /// The trainer runs candle's op-by-op compositions instead of its fused CPU kernels
    /// (`trainer/src/fused.rs`, `trainer/src/attention.rs`): on CUDA, where those kernels do not
    /// exist. Layer norm, GELU's backward, attention (per-head copies of q, k, v, the masked
    /// softmax, its backward, the heads merged) and, on the CPU, AdamW then keep more
    /// temporaries (on CUDA AdamW runs in place: see [`Self::cuda`]).
    pub unfused_ops: bool,
    /// Mixed precision (`vramfit train --device cuda` with dtype bfloat16 or float16): f32 master
    /// weights, residual stream, layer norms and loss; linears, attention and GELU in 2-byte
    /// floats, each weight cast for the op that uses it; float16 adds loss scaling. `None` (or
    /// float32): everything in f32. Attention and GELU then run as candle ops even on the CPU.
    pub mixed_precision: Option<crate::config::Dtype>,
    /// The run is on CUDA (`vramfit train --device cuda`): cuBLAS multiplies, so none of gemm's
    /// CPU buffers exist (its per-thread slabs, the packed dlogits, the f32 copies of f16
    /// operands), and AdamW runs in place (`trainer/src/cuda_kernels.rs`). Set together with
    /// [`Self::unfused_ops`], as the trainer does.
    pub cuda: bool,
}

impl TrainerOptions {
    fn mixed(&self) -> bool {
        matches!(self.mixed_precision, Some(crate::config::Dtype::Float16 | crate::config::Dtype::Bfloat16))
    }

    /// Whether the model makes gemm's per-thread slabs at the first product that packs into them
    /// (the fused f32 CPU path, where every product is in the model), rather than counting them
    /// all from the start ([`gemm_slabs`]: candle's attention products, CPU f16). None on CUDA.
    pub fn gemm_slabs_made_lazily(&self) -> bool {
        !self.cuda && !self.unfused_ops && !self.mixed()
    }
}

/// The CPU's caches as gemm (gemm-common 0.19, `cache::CACHE_INFO`) reads them. Its per-thread
/// slab is the L2 size, and how it blocks a product (the k-block `kc`, the column panel `nc`),
/// which sizes the buffer a packed operand takes, follows from L1 and L3 (`cache::kernel_params`).
/// The default is the measuring machine's (tests/reference/data/trainer-cpu.json: 48 KiB 12-way
/// L1d with 64-byte lines, 2 MiB L2, 260 MiB 20-way L3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CpuCaches {
    pub l1_bytes: u64,
    pub l1_associativity: u64,
    pub l1_line_bytes: u64,
    pub l2_bytes: u64,
    /// L2 ways: with `l2_bytes` they size gemm's row block `mc`, which decides whether gemm packs
    /// a whole left-hand operand before it starts ([`CpuCaches::matmul_scratch_bytes`]). Rows
    /// measured before this field existed count as 16-way (the measuring machine's L2 as its
    /// vendor documents it; the QA machine's reads 16 too).
    pub l2_associativity: u64,
    pub l3_bytes: u64,
    pub l3_associativity: u64,
}

impl Default for CpuCaches {
    fn default() -> Self {
        CpuCaches {
            l1_bytes: 48 << 10,
            l1_associativity: 12,
            l1_line_bytes: 64,
            l2_bytes: 2 << 20,
            l2_associativity: 16,
            l3_bytes: 260 << 20,
            l3_associativity: 20,
        }
    }
}

/// Columns of gemm's f32 microkernels (6 with AVX2/FMA and AVX-512, gemm-f32 0.19).
const GEMM_KERNEL_COLS: u64 = 6;

impl CpuCaches {
    /// One thread's gemm slab: the L2 size as gemm reads it ([`gemm_slab_bytes`]).
    pub fn slab_bytes(&self) -> u64 {
        self.l2_bytes
    }

    /// gemm's (kc, nc) for an f32 product of depth `k` and `n` columns with an `mr`-row
    /// microkernel, as `kernel_params` computes them: a k-block from L1 (at least 512 unless
    /// `k` is smaller; `k` is then split into equal blocks no longer than it), and a column
    /// panel that fits (assoc - 1) / assoc of L3. Without an L3 (`kernel_params` then gives no
    /// panel), the whole width, as gemm takes it with several threads; [`Self::product_blocks`]
    /// adds gemm's other paths.
    pub fn gemm_blocks(&self, k: u64, n: u64, mr: u64) -> (u64, u64) {
        const SIZE: u64 = 4;
        let (k, n) = (k.max(1), n.max(1));
        let line = self.l1_line_bytes.max(64);
        let assoc = self.l1_associativity.max(2);
        let sets = (self.l1_bytes.max(32 << 10) / (line * assoc)).max(1);
        let set_bytes = line * sets;
        let gcd = gcd(mr.max(1) * SIZE, set_bytes);
        let kc_0 = set_bytes / gcd;
        let lhs_ways = mr.max(1) * SIZE / gcd;
        let rhs_ways = GEMM_KERNEL_COLS * kc_0 * SIZE / set_bytes;
        let multiplier = assoc / (lhs_ways + rhs_ways).max(1);
        let auto_kc = (kc_0 * multiplier.next_power_of_two()).max(512).min(k);
        let kc = k.div_ceil(k.div_ceil(auto_kc));
        let whole = n.div_ceil(GEMM_KERNEL_COLS) * GEMM_KERNEL_COLS;
        if self.l3_bytes == 0 {
            return (kc, whole);
        }
        let l3_assoc = self.l3_associativity.max(2);
        let panel_max = ((l3_assoc - 1) * self.l3_bytes / l3_assoc) / (SIZE * kc) / GEMM_KERNEL_COLS * GEMM_KERNEL_COLS;
        if panel_max == 0 {
            return (kc, whole);
        }
        let n_iter = n.div_ceil(panel_max);
        (kc, n.div_ceil(n_iter * GEMM_KERNEL_COLS) * GEMM_KERNEL_COLS)
    }

    /// gemm's (kc, nc) for an f32 product of `m` rows, depth `k` and `n` columns, as gemm-common
    /// 0.19's `gemm_basic_generic` picks them before packing: [`Self::gemm_blocks`], except
    ///
    /// * at most 64 x 64 (a small vocabulary and width): it skips `kernel_params`, one k-block of
    ///   `k.min(512)` (not split evenly) by the whole width;
    /// * without an L3 (as gemm reads macOS's caches) on one thread (candle then asks for no
    ///   parallelism): panels of 128 microkernel widths, 768 columns, whatever `n` is.
    pub fn product_blocks(&self, m: u64, k: u64, n: u64, mr: u64, one_thread: bool) -> (u64, u64) {
        let (k, n) = (k.max(1), n.max(1));
        if m <= 64 && n <= 64 {
            return (k.min(512), n.div_ceil(GEMM_KERNEL_COLS) * GEMM_KERNEL_COLS);
        }
        let (kc, nc) = self.gemm_blocks(k, n, mr);
        if self.l3_bytes == 0 && one_thread {
            return (kc, 128 * GEMM_KERNEL_COLS);
        }
        (kc, nc)
    }
}

impl CpuCaches {
    /// gemm's row block `mc` for an f32 product of `m` rows and k-block `kc` (gemm-common 0.19,
    /// `cache::kernel_params`): the rows whose packed k-block fills the L2 ways a right-hand
    /// micropanel leaves, split into equal blocks of whole microkernels, at most 8 of them.
    fn row_block(&self, m: u64, kc: u64, mr: u64) -> u64 {
        const SIZE: u64 = 4;
        let (mr, kc) = (mr.max(1), kc.max(1));
        let l2 = self.l2_bytes.max(1);
        let l2_assoc = self.l2_associativity.max(2);
        let rhs_micropanel = GEMM_KERNEL_COLS * kc * SIZE;
        let rhs_ways = rhs_micropanel.div_ceil((l2 / l2_assoc).max(1));
        let lhs_ways = l2_assoc.saturating_sub(1 + rhs_ways).max(1);
        let auto_mc = (lhs_ways * l2 / (l2_assoc * SIZE * kc) / mr * mr).max(mr);
        let m_iter = m.div_ceil(auto_mc);
        (m.div_ceil(m_iter * mr) * mr).min(8 * mr)
    }

    /// The buffer gemm-common 0.19's `gemm_basic_generic` allocates for one f32 product and frees
    /// when it returns (its `mem`: a packed right-hand operand, a prepacked left-hand one, each
    /// rounded to 128 bytes), in bytes, for candle's `lhs [m, k] · rhs [k, n]` into a contiguous
    /// [m, n] (the trainer's `fused::matmul`). `lhs_t`/`rhs_t`: the operand is a transposed view.
    ///
    /// gemm first swaps the operands for a row-major output (gemm 0.19, `gemm`: dst_cs < dst_rs),
    /// so it sees m' = n rows, n' = m columns, its left operand being rhsᵀ and its right one
    /// lhsᵀ. Then (gemm-common 0.19, gemm.rs, x86):
    /// * `do_pack_rhs = (rhs_rs != 1 && m' > 2·MR) || (rhs_rs == 1 && m' > 128·MR)`: kc × nc
    ///   elements (`packed_rhs_stride * (nc / NR)`); the right operand is strided when candle's
    ///   lhs is a transposed view (a weight gradient dyᵀ · x, the loss head's dlogitsᵀ · h);
    /// * `do_prepack_lhs = m' <= 2·mc && (m' % N != 0 || lhs_rs != 1)`: kc × m' rounded up to MR
    ///   (`packed_lhs_stride * (m'.next_multiple_of(MR) / MR)`); the left operand is strided
    ///   when candle's rhs is a transposed view (x · wᵀ), and N is the SIMD width (16 f32 lanes
    ///   with AVX-512, 8 with AVX2).
    ///
    /// (kc, mc, nc) come from [`Self::product_blocks`] and [`Self::row_block`] (at most 64 x 64:
    /// mc from the whole L2). Products of k <= 2, or of one row or column, take gemm's gevv/gemv
    /// paths, which allocate nothing.
    #[allow(clippy::too_many_arguments)] // a product's shape, its operands' layout and gemm's kernel
    pub fn matmul_scratch_bytes(&self, m: u64, k: u64, n: u64, lhs_t: bool, rhs_t: bool, mr: u64, one_thread: bool) -> u64 {
        self.gemm_plan(m, k, n, lhs_t, rhs_t, mr, one_thread).map_or(0, |p| p.scratch_bytes(mr))
    }

    /// Which threads' slabs ([`gemm_slab_bytes`]) one f32 product touches, as gemm-common 0.19's
    /// `gemm_basic_generic` runs it: (the calling thread's, the pool threads'); see
    /// [`GemmPlan::slab_use`].
    #[allow(clippy::too_many_arguments)] // as matmul_scratch_bytes, and the thread count
    pub fn slab_use(&self, m: u64, k: u64, n: u64, lhs_t: bool, rhs_t: bool, mr: u64, threads: u32) -> (bool, bool) {
        self.gemm_plan(m, k, n, lhs_t, rhs_t, mr, threads <= 1).map_or((false, false), |p| p.slab_use(threads))
    }

    /// How gemm runs an f32 product `lhs [m, k] · rhs [k, n]` into a contiguous [m, n]
    /// (`lhs_t`/`rhs_t`: the operand is a transposed view), after it swaps the operands; `None`
    /// for its horizontal, gevv and gemv paths, which neither pack nor allocate (small products
    /// of a row-major by a column-major operand, k <= 2, one row or column).
    #[allow(clippy::too_many_arguments)] // as matmul_scratch_bytes
    fn gemm_plan(&self, m: u64, k: u64, n: u64, lhs_t: bool, rhs_t: bool, mr: u64, one_thread: bool) -> Option<GemmPlan> {
        const SIZE: u64 = 4;
        if m == 0 || n == 0 || k == 0 {
            return None;
        }
        let mr = mr.max(1);
        let lanes = if mr >= 64 { 16 } else { 8 };
        // gemm's transpose (a single column stays as it is: dst_cs == dst_rs).
        let (gm, gn, lhs_rs_unit, rhs_rs_unit) = if n > 1 { (n, m, !rhs_t, !lhs_t) } else { (m, n, lhs_t, rhs_t) };
        // At most 16 x 16 with a row-major left operand and a column-major right one, gemm's
        // "horizontal" kernels (FMA, AVX-512) take the product whole, with no buffer.
        let horizontal = !lhs_rs_unit && rhs_rs_unit && gm * gn <= 16 * 16;
        if horizontal || k <= 2 || gm <= 1 || gn <= 1 {
            return None;
        }
        let (kc, nc) = self.product_blocks(gm, k, gn, mr, one_thread);
        let mc = if gm <= 64 && gn <= 64 { (self.l2_bytes / SIZE / kc.max(1)) / mr * mr } else { self.row_block(gm, kc, mr) };
        Some(GemmPlan {
            m: gm,
            n: gn,
            k,
            kc,
            nc,
            pack_rhs: if rhs_rs_unit { gm > 128 * mr } else { gm > 2 * mr },
            prepack_lhs: gm <= 2 * mc && (gm % lanes != 0 || !lhs_rs_unit),
        })
    }
}

/// One product as gemm sees it (see [`CpuCaches::gemm_plan`]): its shape after the swap, its
/// k-block and column panel, and which operands it packs into a buffer of the call's own.
struct GemmPlan {
    m: u64,
    n: u64,
    k: u64,
    kc: u64,
    nc: u64,
    pack_rhs: bool,
    prepack_lhs: bool,
}

impl GemmPlan {
    /// The buffer the call allocates and frees as it returns (see
    /// [`CpuCaches::matmul_scratch_bytes`]), with an `mr`-row microkernel.
    fn scratch_bytes(&self, mr: u64) -> u64 {
        const SIZE: u64 = 4;
        let mr = mr.max(1);
        let round = |bytes: u64| bytes.div_ceil(128) * 128;
        let rhs = if self.pack_rhs { round(self.kc * (self.nc / GEMM_KERNEL_COLS) * GEMM_KERNEL_COLS * SIZE) } else { 0 };
        let lhs = if self.prepack_lhs { round(self.kc * self.m.div_ceil(mr) * mr * SIZE) } else { 0 };
        rhs + lhs
    }

    /// Which threads' slabs the product touches: (the calling thread's, the pool threads'). It
    /// packs its left operand into the running thread's slab unless it prepacked that operand
    /// (the weight of x · wᵀ, attention's kᵀ, and any left operand whose rows are not a
    /// multiple of the SIMD width, such as p · v's at a head size that is not a multiple of 16
    /// with AVX-512). Each k-block of each column panel runs on the calling thread when its work
    /// m·n_chunk·k_chunk is below [`GEMM_THREADING_THRESHOLD`] (or with one thread: candle then
    /// asks for no parallelism), else on `threads` pool threads.
    fn slab_use(&self, threads: u32) -> (bool, bool) {
        if self.prepack_lhs {
            return (false, false);
        }
        if threads <= 1 {
            return (true, false);
        }
        // The k-blocks: whole ones of kc and what is left; the panels likewise of nc.
        let pieces = |total: u64, block: u64| {
            let block = block.clamp(1, total);
            [(total >= block).then_some(block), (!total.is_multiple_of(block)).then_some(total % block)]
        };
        let (mut calling, mut pool) = (false, false);
        for n_chunk in pieces(self.n, self.nc).into_iter().flatten() {
            for k_chunk in pieces(self.k, self.kc).into_iter().flatten() {
                if self.m.saturating_mul(n_chunk).saturating_mul(k_chunk) < GEMM_THREADING_THRESHOLD {
                    calling = true;
                } else {
                    pool = true;
                }
            }
        }
        (calling, pool)
    }
}

/// The caches gemm read on the QA machine (2026-11-27) and on the one that measured
/// trainer-cpu-random.json (2026-11-26): 32 KiB 8-way L1d, 1 MiB L2, 32 MiB L3. (The pool
/// file's machine read a 48 KiB 12-way L1d with the same L2 and L3.)
#[cfg(test)]
const QA_CACHES: CpuCaches = CpuCaches {
    l1_bytes: 32 << 10,
    l1_associativity: 8,
    l1_line_bytes: 64,
    l2_bytes: 1 << 20,
    l2_associativity: 16,
    l3_bytes: 32 << 20,
    l3_associativity: 16,
};

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Whether gemm copies the loss head's transposed dlogits (rows x V) into a packing buffer of its
/// own for the wte gradient dlogits^T @ h. gemm-common 0.19 packs a strided right-hand operand when
/// the product's m (here n_embd) exceeds twice its microkernel's rows, so with AVX2 nearly always
/// and with AVX-512 only above n_embd 128 (both measured: tests/reference/data/trainer-cpu.json
/// with AVX-512, trainer-cpu-unfused-avx2.json with AVX2).
pub fn packs_dlogits(n_embd: u32, opts: &TrainerOptions) -> bool {
    let rows = if opts.gemm_kernel_rows == 0 { 16 } else { opts.gemm_kernel_rows };
    u64::from(n_embd) > 2 * u64::from(rows)
}

/// gemm (candle's CPU matmul) keeps one thread-local packing buffer per thread that has run a
/// matmul, of the L2 cache's size as gemm reads it ([`CpuCaches::l2_bytes`]; gemm-common 0.19,
/// `L2_SLAB`). Allocated on the first matmuls and never freed.
pub fn gemm_slab_bytes(opts: &TrainerOptions) -> u64 {
    opts.cpu_caches.slab_bytes()
}

/// gemm runs a product on the calling thread alone when m·n·k is below this (gemm-common 0.19's
/// default threading threshold), else on the pool's threads.
pub const GEMM_THREADING_THRESHOLD: u64 = 48 * 48 * 256;

/// How many gemm slabs a run keeps: with one thread, the calling thread's; with more, each pool
/// thread's, plus the calling thread's when some product is small enough to run there.
/// `smallest_product` is the least m·n·k of the run's matmuls.
pub fn gemm_slabs(cpu_threads: u32, smallest_product: u64) -> u64 {
    if cpu_threads <= 1 {
        1
    } else {
        u64::from(cpu_threads) + u64::from(smallest_product < GEMM_THREADING_THRESHOLD)
    }
}

/// By how much a run's peaks may fall short of the model's with a thread pool: the pool threads'
/// gemm slabs but one, which the model makes at the first product split over the pool while
/// rayon may have handed every such product to one thread so far (measured: one to three slabs
/// over at 2 and 4 threads, tests/reference/data/trainer-cpu-random-pool.json). 0 on one
/// thread, on CUDA, and where every slab is counted from the start.
pub fn pool_slabs_not_made_bound(opts: &TrainerOptions) -> u64 {
    if opts.gemm_slabs_made_lazily() && opts.cpu_threads >= 2 {
        u64::from(opts.cpu_threads - 1) * gemm_slab_bytes(opts)
    } else {
        0
    }
}

/// A category's name in the trainer's reports. Its [`Category::Workspace`] is gemm's per-thread
/// packing buffers ([`gemm_slab_bytes`] each), not the cuBLAS workspace PyTorch's model means.
pub fn category_label(category: Category) -> &'static str {
    match category {
        Category::Workspace => "gemm buffers",
        other => other.label(),
    }
}

/// Rows (and columns) per block of the trainer's CPU attention products (`trainer/src/attention.rs`
/// skips the blocks above the diagonal).
pub const ATTENTION_BLOCK: u64 = 64;

/// The least m·n·k of one head's attention products at block length t: T·T·hs as candle ops; with
/// the blocked kernels, the last row block's L·L·hs (L = t's remainder after whole blocks, or a
/// whole block), which the gradient of v and k takes.
fn attention_smallest_product(t: u64, hs: u64, unfused: bool) -> u64 {
    if unfused || t == 0 {
        return t * t * hs;
    }
    let last = t - ATTENTION_BLOCK * ((t - 1) / ATTENTION_BLOCK);
    last * last * hs
}

/// The least m·n·k among the trainer's matmuls for `cfg`: per-head attention products (in
/// training and eval), the linears, and the loss head's last chunk of rows.
fn smallest_product(cfg: &Config, opts: &TrainerOptions) -> u64 {
    let (c, v, h) = (u64::from(cfg.n_embd), u64::from(cfg.vocab_size), u64::from(cfg.n_head.max(1)));
    let hs = c / h;
    let (t, te) = (u64::from(cfg.block_size), u64::from(cfg.eval_block()));
    let n = u64::from(cfg.batch_size) * t;
    let chunk = if opts.chunked_loss { loss_chunk_rows(cfg.vocab_size).min(n) } else { n };
    let last_rows = if chunk == 0 || n % chunk == 0 { chunk } else { n % chunk };
    let eval_seqs = opts.eval_chunk_rows.map(|r| (r / te.max(1)).max(1)).unwrap_or(u64::from(cfg.eval_batch()));
    let attention = |t| attention_smallest_product(t, hs, opts.unfused_ops || opts.mixed());
    [attention(t), attention(te), n * c * c, last_rows * c * v, eval_seqs.min(u64::from(cfg.eval_batch())) * te * c * c]
        .into_iter()
        .min()
        .unwrap_or(0)
}

/// Bytes of one f32 element (the trainer's CPU dtype; token ids are u32, also 4 bytes).
const F32: u64 = 4;

/// Live bytes by category, the high-water mark of the current window and the timeline.
struct Tracker {
    sizes: Vec<(Category, u64)>,
    live: [u64; 9],
    total: u64,
    phase: Phase,
    op: &'static str,
    micro_step: u32,
    peak: Peak,
    timeline: Vec<TimelinePoint>,
    record_timeline: bool,
    /// Bytes per element of what [`Tracker::alloc`] allocates: 4 (f32, the master dtype), or 2
    /// inside mixed precision's compute-dtype regions.
    elem: u64,
    /// Whether gemm's slabs exist yet: the calling thread's, the pool threads' ([`touch_slabs`]).
    slabs_made: [bool; 2],
}

/// A handle to one allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Id(usize);

fn cat_index(c: Category) -> usize {
    Category::ALL.iter().position(|&x| x == c).unwrap_or(0)
}

impl Tracker {
    fn new(record_timeline: bool) -> Tracker {
        Tracker {
            sizes: Vec::new(),
            live: [0; 9],
            total: 0,
            phase: Phase::Init,
            op: "init",
            micro_step: 0,
            peak: Peak::default(),
            timeline: Vec::new(),
            record_timeline,
            elem: F32,
            slabs_made: [false; 2],
        }
    }
    /// Whether repeated loss chunks and eval groups may be folded (the peaks stay exact; the
    /// timeline, which lines up with the trainer's allocations, would not).
    fn folds(&self) -> bool {
        !self.record_timeline
    }
    fn at(&mut self, phase: Phase, op: &'static str) {
        self.phase = phase;
        self.op = op;
    }
    fn alloc(&mut self, cat: Category, elems: u64) -> Id {
        self.alloc_bytes(cat, elems * self.elem)
    }
    /// An f32 tensor, whatever region the tracker is in.
    fn alloc_f32(&mut self, cat: Category, elems: u64) -> Id {
        self.alloc_bytes(cat, elems * F32)
    }
    /// A tensor in the compute dtype, whatever region the tracker is in.
    fn alloc_compute(&mut self, d: &Dims, cat: Category, elems: u64) -> Id {
        self.alloc_bytes(cat, elems * d.cb)
    }
    fn alloc_bytes(&mut self, cat: Category, bytes: u64) -> Id {
        self.sizes.push((cat, bytes));
        self.live[cat_index(cat)] += bytes;
        self.total += bytes;
        if self.total > self.peak.bytes {
            self.peak = Peak {
                bytes: self.total,
                phase: Some(self.phase),
                op: self.op.to_string(),
                micro_step: self.micro_step,
                breakdown: self.breakdown(),
                reserved_bytes: 0,
            };
        }
        self.point();
        Id(self.sizes.len() - 1)
    }
    fn free(&mut self, id: Id) {
        if let Some(entry) = self.sizes.get_mut(id.0) {
            let (cat, bytes) = *entry;
            entry.1 = 0;
            self.live[cat_index(cat)] -= bytes;
            self.total -= bytes;
            self.point();
        }
    }
    fn free_all(&mut self, ids: &[Id]) {
        for &id in ids {
            self.free(id);
        }
    }
    fn point(&mut self) {
        if self.record_timeline {
            self.timeline.push(TimelinePoint {
                phase: self.phase,
                op: crate::sim::OpName::new(self.op),
                micro_step: self.micro_step,
                live_bytes: self.total,
            });
        }
    }
    fn breakdown(&self) -> Breakdown {
        let l = &self.live;
        Breakdown {
            parameters: l[0],
            gradients: l[1],
            optimizer_state: l[2],
            saved_activations: l[3],
            logits_and_loss: l[4],
            cast_weights: l[5],
            temporaries: l[6],
            batch: l[7],
            workspace: l[8],
        }
    }
    /// Ends the current window and starts the next one at what is live now.
    fn new_window(&mut self) -> Peak {
        let start = Peak {
            bytes: self.total,
            phase: Some(self.phase),
            op: self.op.to_string(),
            micro_step: self.micro_step,
            breakdown: self.breakdown(),
            reserved_bytes: 0,
        };
        std::mem::replace(&mut self.peak, start)
    }
}

use Category::{Batch, Gradients, LogitsAndLoss, OptimizerState, Parameters, SavedActivations, Temporaries};

/// The model's sizes.
#[derive(Clone, Copy)]
struct Dims {
    l: u64,
    c: u64,
    h: u64,
    v: u64,
    block: u64,
    bias: bool,
    dropout: bool,
    /// gemm's microkernel rows and the caches, which block its products.
    gemm_rows: u64,
    caches: CpuCaches,
    /// See [`TrainerOptions::unfused_ops`].
    unfused: bool,
    /// See [`TrainerOptions::mixed_precision`].
    mixed: bool,
    /// Bytes per element of the compute dtype: 4, or 2 with mixed precision.
    cb: u64,
    /// See [`TrainerOptions::cuda`].
    cuda: bool,
    /// CPU threads gemm may use (`TrainerOptions::cpu_threads`, at least 1); with one, candle
    /// runs gemm without parallelism (see [`CpuCaches::product_blocks`]).
    threads: u32,
    /// gemm's slabs are made at the first product that touches them ([`touch_slabs`]): on the
    /// fused f32 CPU path, where every product is in the model. Otherwise (candle's attention
    /// products, CPU f16) they are counted from the start by [`gemm_slabs`]' rule.
    lazy_slabs: bool,
}

/// Mixed precision's cast of `id` (an f32 tensor of `elems`) to the compute dtype, or back
/// (`to_f32`): a new tensor of category `cat`, the old one freed. Without mixed precision the
/// cast is a no-op and `id` is returned.
fn cast(m: &mut Tracker, d: &Dims, id: Id, elems: u64, cat: Category, to_f32: bool) -> Id {
    if !d.mixed {
        return id;
    }
    let new = if to_f32 { m.alloc_f32(cat, elems) } else { m.alloc_compute(d, cat, elems) };
    m.free(id);
    new
}

/// candle's CPU f16 matmul (gemm's f16 path) works on f32 copies: of its left operand [rows, k],
/// and of its right operand [k, n] when that is a transposed view (`rhs_t_cols` = n; 0 for a
/// contiguous one), a block of at most 512 of the k columns at a time (k split into equal blocks).
/// They are freed when it returns. Measured with the counting allocator (`trainer_memory --
/// --probe-f16` and `--trace`); cuBLAS on CUDA makes no such copies. Mixed precision on the CPU only.
fn f16_lhs_copy(m: &mut Tracker, d: &Dims, rows: u64, k: u64, rhs_t_cols: u64) {
    if d.mixed && !d.unfused && !d.cuda {
        let kc = k.div_ceil(k.div_ceil(512).max(1));
        let copy = m.alloc_f32(Category::Workspace, (rows + rhs_t_cols) * kc);
        m.free(copy);
    }
}

/// gemm's buffer for one f32 product `lhs [rows, k] · rhs [k, cols]` (`lhs_t`/`rhs_t`: a
/// transposed view), allocated after the product's output and freed when gemm returns: see
/// [`CpuCaches::matmul_scratch_bytes`]. Measured (`trainer_memory -- --trace`): each weight
/// gradient dyᵀ · x packs dy when the layer's input width exceeds twice gemm's kernel rows, and
/// x · wᵀ prepacks the weight when its output rows fit two of gemm's row blocks. On CUDA cuBLAS
/// multiplies; mixed precision's f16 products are [`f16_lhs_copy`]'s.
fn gemm_scratch(m: &mut Tracker, d: &Dims, rows: u64, k: u64, cols: u64, lhs_t: bool, rhs_t: bool) {
    if d.cuda || d.mixed {
        return;
    }
    let Some(plan) = d.caches.gemm_plan(rows, k, cols, lhs_t, rhs_t, d.gemm_rows, d.threads <= 1) else {
        return;
    };
    let bytes = plan.scratch_bytes(d.gemm_rows);
    let scratch = (bytes > 0).then(|| m.alloc_f32(Category::Workspace, bytes / F32));
    touch_slabs(m, d, &plan);
    if let Some(id) = scratch {
        m.free(id);
    }
}

/// gemm's per-thread slabs ([`gemm_slab_bytes`] each, never freed), made by the first product
/// that packs into them ([`GemmPlan::slab_use`]): the calling thread's, or one per pool thread.
/// Measured (`trainer_memory -- --random 2 30` at two threads): without this, runs whose only
/// products small enough for the calling thread prepack their operand (head sizes not a
/// multiple of 16) were predicted one slab over, and every run's eval at the start one slab per
/// pool thread over when eval's products were too small to split.
fn touch_slabs(m: &mut Tracker, d: &Dims, plan: &GemmPlan) {
    if !d.lazy_slabs {
        return;
    }
    let (calling, pool) = plan.slab_use(d.threads);
    if calling && !m.slabs_made[0] {
        m.slabs_made[0] = true;
        m.alloc_f32(Category::Workspace, d.caches.slab_bytes() / F32);
    }
    if pool && !m.slabs_made[1] {
        m.slabs_made[1] = true;
        m.alloc_f32(Category::Workspace, u64::from(d.threads) * d.caches.slab_bytes() / F32);
    }
}

/// Mixed precision's per-op copy of a weight [out, in] (and, in the forward, its bias) in the
/// compute dtype, freed when the op returns.
fn cast_weight(m: &mut Tracker, d: &Dims, out: u64, inp: u64, with_bias: bool) -> Vec<Id> {
    if !d.mixed {
        return Vec::new();
    }
    let mut ids = vec![m.alloc_compute(d, Category::CastWeights, out * inp)];
    if with_bias && d.bias {
        ids.push(m.alloc_compute(d, Category::CastWeights, out));
    }
    ids
}

/// Tensors one block's forward leaves alive (`BlockSaved` in model.rs) plus its output.
struct BlockTensors {
    saved: Vec<Id>,
    out: Id,
}

/// `ln_forward` (one fused pass, `trainer/src/fused.rs`): returns (y, [xhat, rstd]); xhat and
/// rstd exist only with `keep` (otherwise the returned ids are unused).
fn ln_forward(m: &mut Tracker, d: &Dims, n: u64, keep: bool, cat: Category) -> (Id, [Id; 2]) {
    if d.unfused {
        return ln_forward_unfused(m, d, n, keep, cat);
    }
    let y = m.alloc(cat, n * d.c); // xhat * w (+ b)
    if !keep {
        return (y, [Id(usize::MAX); 2]);
    }
    let xhat = m.alloc(cat, n * d.c);
    let rstd = m.alloc(cat, n); // [N, 1]
    (y, [xhat, rstd])
}

/// `ln_forward` as candle ops (`unfused_ops`): returns (y, [xhat, rstd]).
fn ln_forward_unfused(m: &mut Tracker, d: &Dims, n: u64, keep: bool, cat: Category) -> (Id, [Id; 2]) {
    let mean_sum = m.alloc(Temporaries, n); // x.sum_keepdim [N,1]
    let mean = m.alloc(Temporaries, n); // * 1/C
    m.free(mean_sum);
    let centred = m.alloc(Temporaries, n * d.c); // x - mean
    m.free(mean);
    let sq = m.alloc(Temporaries, n * d.c); // centred.sqr()
    let var_sum = m.alloc(Temporaries, n);
    let var = m.alloc(Temporaries, n);
    m.free_all(&[sq, var_sum]);
    let plus_eps = m.alloc(Temporaries, n);
    let sqrt = m.alloc(Temporaries, n);
    let rstd = m.alloc(cat, n);
    m.free_all(&[plus_eps, sqrt, var]);
    let xhat = m.alloc(cat, n * d.c);
    m.free(centred);
    let mut y = m.alloc(cat, n * d.c); // xhat * w
    if d.bias {
        let yb = m.alloc(cat, n * d.c); // + b
        m.free(y);
        y = yb;
    }
    if !keep {
        m.free_all(&[xhat, rstd]);
    }
    (y, [xhat, rstd])
}

/// `linear`: x @ w^T (+ b): returns y [N, out].
fn linear(m: &mut Tracker, d: &Dims, n: u64, inp: u64, out: u64, cat: Category) -> Id {
    let w = cast_weight(m, d, out, inp, true);
    let y = m.alloc(cat, n * out);
    gemm_scratch(m, d, n, inp, out, false, true); // x · wᵀ
    f16_lhs_copy(m, d, n, inp, out); // x · wᵀ
    let y = if d.bias {
        let yb = m.alloc(cat, n * out);
        m.free(y);
        yb
    } else {
        y
    };
    m.free_all(&w);
    y
}

/// A dropout mask of `elems` (when dropout is on).
/// In a compute-dtype region (mixed precision) the mask is drawn in f32 and cast.
fn mask(m: &mut Tracker, d: &Dims, elems: u64, cat: Category) -> Option<Id> {
    d.dropout.then(|| {
        let drawn = (m.elem != F32).then(|| m.alloc_f32(Temporaries, elems));
        let id = m.alloc(cat, elems);
        if let Some(f) = drawn {
            m.free(f);
        }
        id
    })
}

/// Attention as candle ops (`unfused_ops`): per-head copies of q, k and v, the masked softmax,
/// p·v, the heads merged. Returns (what the backward keeps of q, k, v; att; its dropout mask; heads).
fn attention_unfused(m: &mut Tracker, d: &Dims, n: u64, att_elems: u64) -> (Vec<Id>, Id, Option<Id>, Id) {
    let s = SavedActivations;
    let c = d.c;
    let qkv = linear(m, d, n, c, 3 * c, Temporaries);
    let q = m.alloc(Temporaries, n * c); // contiguous copy of q
    let q_scaled = m.alloc(s, n * c);
    m.free(q);
    let k = m.alloc(s, n * c);
    let v = m.alloc(s, n * c);
    m.free(qkv);
    // Per (batch, head) products: q [T, hs] · kᵀ, then p [T, T] · v.
    let t = att_elems / (n * d.h).max(1);
    let hs = c / d.h.max(1);
    let scores = m.alloc(Temporaries, att_elems);
    f16_lhs_copy(m, d, t, hs, t); // q · kᵀ
    let masked = m.alloc(Temporaries, att_elems); // scores + the -inf mask
    m.free(scores);
    let att = m.alloc(s, att_elems);
    m.free(masked);
    let att_mask = mask(m, d, att_elems, s);
    let att_dropped = att_mask.map(|_| m.alloc(Temporaries, att_elems));
    let y = m.alloc(Temporaries, n * c);
    f16_lhs_copy(m, d, t, t, 0); // p · v
    if let Some(id) = att_dropped {
        m.free(id);
    }
    let heads = m.alloc(s, n * c);
    m.free(y);
    (vec![q_scaled, k, v], att, att_mask, heads)
}

/// `block_forward`: with `keep`, the saved tensors stay; without, only the output.
fn block_forward(m: &mut Tracker, d: &Dims, b: u64, t: u64, keep: bool) -> BlockTensors {
    let n = b * t;
    let c = d.c;
    let att_elems = b * d.h * t * t;
    let s = SavedActivations;
    let mut saved = Vec::new();
    let (ln1_out, ln1) = ln_forward(m, d, n, keep, s);
    // Mixed precision: c_attn reads (and its backward keeps) ln_1's output cast to the compute
    // dtype; from here to the residual add everything is in the compute dtype.
    let ln1_out = cast(m, d, ln1_out, n * c, s, false);
    m.elem = d.cb;
    let (qkv, att, att_mask, heads) = if d.unfused || d.mixed {
        attention_unfused(m, d, n, att_elems)
    } else {
        // trainer/src/attention.rs: q, k and v are read in place from c_attn's output, which is
        // therefore what the backward keeps (the same bytes as q·scale, k and v).
        let qkv = linear(m, d, n, c, 3 * c, s);
        let att = m.alloc(s, att_elems); // the blocked q·kᵀ, softmax in place
        attention_products(m, d, t, AttentionProducts::Scores);
        let att_mask = mask(m, d, att_elems, s);
        let att_dropped = att_mask.map(|_| m.alloc(Temporaries, att_elems));
        let heads = m.alloc(s, n * c); // p·v written into each head's columns
        attention_products(m, d, t, AttentionProducts::Values);
        if let Some(id) = att_dropped {
            m.free(id);
        }
        (vec![qkv], att, att_mask, heads)
    };
    let proj = linear(m, d, n, c, c, Temporaries);
    let r1 = mask(m, d, n * c, s);
    let proj_dropped = r1.map(|_| m.alloc(Temporaries, n * c));
    if proj_dropped.is_some() {
        m.free(proj);
    }
    m.elem = F32;
    let branch = cast(m, d, proj_dropped.unwrap_or(proj), n * c, Temporaries, true);
    let x1 = m.alloc(Temporaries, n * c); // the residual after attention: not saved (ln_2 keeps xhat)
    m.free(branch);
    let (ln2_out, ln2) = ln_forward(m, d, n, keep, s);
    let ln2_out = cast(m, d, ln2_out, n * c, s, false);
    m.elem = d.cb;
    let fc_out = linear(m, d, n, c, 4 * c, s);
    let gelu_out = m.alloc(s, n * 4 * c);
    let mlp = linear(m, d, n, 4 * c, c, Temporaries);
    let r2 = mask(m, d, n * c, s);
    let mlp_dropped = r2.map(|_| m.alloc(Temporaries, n * c));
    if mlp_dropped.is_some() {
        m.free(mlp);
    }
    m.elem = F32;
    let branch = cast(m, d, mlp_dropped.unwrap_or(mlp), n * c, Temporaries, true);
    let out = m.alloc(s, n * c);
    m.free(branch);
    m.free(x1);
    saved.push(ln1_out);
    saved.extend(qkv);
    saved.extend([att, heads, ln2_out, fc_out, gelu_out]);
    saved.extend(att_mask.into_iter().chain(r1).chain(r2));
    if keep {
        saved.extend(ln1.into_iter().chain(ln2));
    } else {
        m.free_all(&saved);
        saved.clear();
    }
    BlockTensors { saved, out }
}

/// `ln_backward` for dy [N, C] (one fused pass): returns dx; the weight (and bias) gradients go
/// to `grads`.
fn ln_backward(m: &mut Tracker, d: &Dims, n: u64, grads: &mut Vec<Id>) -> Id {
    if d.unfused {
        return ln_backward_unfused(m, d, n, grads);
    }
    let dx = m.alloc(Temporaries, n * d.c);
    grads.push(m.alloc(Gradients, d.c));
    if d.bias {
        grads.push(m.alloc(Gradients, d.c));
    }
    dx
}

/// `ln_backward` as candle ops (`unfused_ops`) for dy [N, C]: returns dx; the weight (and bias) gradients go to `grads`.
fn ln_backward_unfused(m: &mut Tracker, d: &Dims, n: u64, grads: &mut Vec<Id>) -> Id {
    let prod = m.alloc(Temporaries, n * d.c); // dy * xhat
    grads.push(m.alloc(Gradients, d.c)); // .sum(0)
    m.free(prod);
    if d.bias {
        grads.push(m.alloc(Gradients, d.c));
    }
    let dxhat = m.alloc(Temporaries, n * d.c);
    let s1 = m.alloc(Temporaries, n);
    let mean1 = m.alloc(Temporaries, n);
    m.free(s1);
    let prod2 = m.alloc(Temporaries, n * d.c);
    let s2 = m.alloc(Temporaries, n);
    let mean2 = m.alloc(Temporaries, n);
    m.free_all(&[prod2, s2]);
    let centred = m.alloc(Temporaries, n * d.c);
    m.free(dxhat);
    let xm = m.alloc(Temporaries, n * d.c); // xhat * mean2
    let unscaled = m.alloc(Temporaries, n * d.c);
    m.free_all(&[xm, centred]);
    let dx = m.alloc(Temporaries, n * d.c);
    m.free_all(&[unscaled, mean1, mean2]);
    dx
}

/// `linear_backward` for dy [N, out] and w [out, in]: returns dx [N, in].
fn linear_backward(m: &mut Tracker, d: &Dims, n: u64, out: u64, inp: u64, grads: &mut Vec<Id>) -> Id {
    let w = cast_weight(m, d, out, inp, false);
    let dw = m.alloc(Gradients, out * inp);
    gemm_scratch(m, d, out, n, inp, true, false); // dyᵀ · x
    f16_lhs_copy(m, d, out, n, 0); // dyᵀ · x
                                   // The bias gradient: mixed precision sums an f32 copy of dy, into f32.
    let db = d.bias.then(|| {
        let widened = d.mixed.then(|| m.alloc_f32(Temporaries, n * out));
        let db = m.alloc_f32(Gradients, out);
        m.free_all(widened.as_slice());
        db
    });
    let dx = m.alloc(Temporaries, n * inp);
    gemm_scratch(m, d, n, out, inp, false, false); // dy · w
    f16_lhs_copy(m, d, n, out, 0); // dy · w
    m.free_all(&w);
    // Mixed precision: the weight gradient goes back to f32.
    grads.push(cast(m, d, dw, out * inp, Gradients, true));
    grads.extend(db);
    dx
}

/// The backward of [`attention_unfused`] from d(heads): returns d(qkv) [N, 3C].
fn attention_backward_unfused(m: &mut Tracker, d: &Dims, n: u64, att_elems: u64, dheads: Id) -> Id {
    let c = d.c;
    let t = att_elems / (n * d.h).max(1);
    let hs = c / d.h.max(1);
    let dy = m.alloc(Temporaries, n * c);
    m.free(dheads);
    let att_dropped = d.dropout.then(|| m.alloc(Temporaries, att_elems));
    let dv = m.alloc(Temporaries, n * c);
    f16_lhs_copy(m, d, t, t, 0); // pᵀ · dy
    if let Some(id) = att_dropped {
        m.free(id);
    }
    let mut datt = m.alloc(Temporaries, att_elems); // dy @ v^T
    f16_lhs_copy(m, d, t, hs, t); // dy · vᵀ
    if d.dropout {
        let masked = m.alloc(Temporaries, att_elems);
        m.free(datt);
        datt = masked;
    }
    m.free(dy);
    // ds = att * (datt - sum(datt * att)) as candle ops.
    let prod = m.alloc(Temporaries, att_elems);
    let row_dot = m.alloc(Temporaries, n * d.h);
    m.free(prod);
    let centred = m.alloc(Temporaries, att_elems);
    m.free_all(&[datt, row_dot]);
    let ds = m.alloc(Temporaries, att_elems);
    m.free(centred);
    let dq_raw = m.alloc(Temporaries, n * c);
    f16_lhs_copy(m, d, t, t, 0); // ds · k
    let dq = m.alloc(Temporaries, n * c);
    m.free(dq_raw);
    let dk = m.alloc(Temporaries, n * c);
    f16_lhs_copy(m, d, t, t, 0); // dsᵀ · q
    m.free(ds);
    let mut merged = Vec::new();
    for g in [dq, dk, dv] {
        merged.push(m.alloc(Temporaries, n * c));
        m.free(g);
    }
    let dqkv = m.alloc(Temporaries, 3 * n * c);
    m.free_all(&merged);
    dqkv
}

/// A branch's incoming gradient for its backward: the residual gradient itself (no tensor), its
/// cast to the compute dtype (mixed precision), times the dropout mask if any. Returns the tensor
/// the branch's backward then frees, if one was made.
fn masked_cast(m: &mut Tracker, d: &Dims, elems: u64) -> Option<Id> {
    let cast = d.mixed.then(|| m.alloc(Temporaries, elems));
    let masked = d.dropout.then(|| m.alloc(Temporaries, elems));
    if let (Some(c), Some(_)) = (cast, masked) {
        m.free(c);
    }
    masked.or(cast)
}

/// `block_backward`: consumes `saved` and `dx2`; returns dx.
fn block_backward(m: &mut Tracker, d: &Dims, b: u64, t: u64, saved: Vec<Id>, dx2: Id, grads: &mut Vec<Id>) -> Id {
    let n = b * t;
    let c = d.c;
    let att_elems = b * d.h * t * t;
    // Mixed precision: the MLP branch's backward runs in the compute dtype, from a cast of dx2.
    m.elem = d.cb;
    let dmlp = masked_cast(m, d, n * c);
    let dgelu = linear_backward(m, d, n, c, 4 * c, grads);
    if let Some(id) = dmlp {
        m.free(id);
    }
    let dfc = if d.unfused || d.mixed {
        // gelu_backward as candle ops: the erf chain (3 alive at the statement's end), the pdf
        // chain (4), then the products.
        let a1 = m.alloc(Temporaries, n * 4 * c);
        let a2 = m.alloc(Temporaries, n * 4 * c);
        let cdf = m.alloc(Temporaries, n * 4 * c);
        m.free_all(&[a1, a2]);
        let p1 = m.alloc(Temporaries, n * 4 * c);
        let p2 = m.alloc(Temporaries, n * 4 * c);
        let p3 = m.alloc(Temporaries, n * 4 * c);
        let pdf = m.alloc(Temporaries, n * 4 * c);
        m.free_all(&[p1, p2, p3]);
        let u_pdf = m.alloc(Temporaries, n * 4 * c);
        m.free(pdf);
        let slope = m.alloc(Temporaries, n * 4 * c);
        m.free_all(&[u_pdf, cdf]);
        let dfc = m.alloc(Temporaries, n * 4 * c);
        m.free(slope);
        dfc
    } else {
        m.alloc(Temporaries, n * 4 * c) // gelu_backward: one fused pass
    };
    m.free(dgelu);
    let dx1 = branch_into_residual(m, d, n, 4 * c, dfc, dx2, grads);
    m.elem = d.cb;
    let dproj = masked_cast(m, d, n * c);
    let dheads = linear_backward(m, d, n, c, c, grads);
    if let Some(id) = dproj {
        m.free(id);
    }
    let dqkv = if d.unfused || d.mixed {
        attention_backward_unfused(m, d, n, att_elems, dheads)
    } else {
        // trainer/src/attention.rs::backward: d(qkv) written per head, one T×T scratch.
        let att_dropped = d.dropout.then(|| m.alloc(Temporaries, att_elems));
        let dqkv = m.alloc(Temporaries, 3 * n * c);
        let scratch = m.alloc(Temporaries, t * t);
        attention_products(m, d, t, AttentionProducts::Backward);
        m.free(scratch);
        if let Some(id) = att_dropped {
            m.free(id);
        }
        m.free(dheads);
        dqkv
    };
    let dx = branch_into_residual(m, d, n, 3 * c, dqkv, dx1, grads);
    m.free_all(&saved);
    dx
}

/// Which of `trainer/src/attention.rs`' loops of per-head products.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AttentionProducts {
    /// `probabilities`: q · kᵀ, a row block by the columns up to its end.
    Scores,
    /// `values`: p · v into each head's columns.
    Values,
    /// `backward`: pᵀ · dy, dy · vᵀ, then ds · k and dsᵀ · q.
    Backward,
}

/// gemm's buffers for one head's products of the blocked attention (block length `t`, rows and
/// columns in blocks of [`ATTENTION_BLOCK`]), as [`gemm_scratch`] counts any product. Every head
/// and batch row repeats the same shapes, so each row block's products are counted once.
fn attention_products(m: &mut Tracker, d: &Dims, t: u64, which: AttentionProducts) {
    let hs = d.c / d.h.max(1);
    for r0 in (0..t).step_by(ATTENTION_BLOCK as usize) {
        let r1 = (r0 + ATTENTION_BLOCK).min(t);
        let rows = r1 - r0;
        match which {
            AttentionProducts::Scores => gemm_scratch(m, d, rows, hs, r1, false, true),
            AttentionProducts::Values => gemm_scratch(m, d, rows, r1, hs, false, false),
            AttentionProducts::Backward => {
                gemm_scratch(m, d, rows, t - r0, hs, true, false); // dv = pᵀ · dy
                gemm_scratch(m, d, rows, hs, r1, false, true); // dy · vᵀ
            }
        }
    }
    if which == AttentionProducts::Backward {
        for r0 in (0..t).step_by(ATTENTION_BLOCK as usize) {
            let r1 = (r0 + ATTENTION_BLOCK).min(t);
            gemm_scratch(m, d, r1 - r0, r1, hs, false, false); // dq = ds · k
            gemm_scratch(m, d, r1 - r0, t - r0, hs, true, false); // dk = dsᵀ · q
        }
    }
}

/// A branch's backward from its first linear (c_fc or c_attn: `width` outputs, gradient `dout`)
/// through its layer norm, added to the residual stream's gradient `dresid`; consumes both and
/// returns the sum. Mixed precision returns from the compute dtype to f32 here.
fn branch_into_residual(m: &mut Tracker, d: &Dims, n: u64, width: u64, dout: Id, dresid: Id, grads: &mut Vec<Id>) -> Id {
    let dln = linear_backward(m, d, n, width, d.c, grads);
    m.free(dout);
    let dln = cast(m, d, dln, n * d.c, Temporaries, true);
    m.elem = F32;
    let dx_ln = ln_backward(m, d, n, grads);
    m.free(dln);
    let dx = m.alloc(Temporaries, n * d.c);
    m.free_all(&[dresid, dx_ln]);
    dx
}

/// A chunk's logits [rows, V] in f32 for the softmax: computed in f32, or (mixed precision) in the
/// compute dtype and cast up, as autocast runs the cross-entropy in f32.
fn logits_f32(m: &mut Tracker, d: &Dims, rows: u64) -> Id {
    if d.mixed {
        let computed = m.alloc_compute(d, LogitsAndLoss, rows * d.v);
        f16_lhs_copy(m, d, rows, d.c, d.v); // h · wteᵀ
        cast(m, d, computed, rows * d.v, LogitsAndLoss, true)
    } else {
        let logits = m.alloc(LogitsAndLoss, rows * d.v);
        gemm_scratch(m, d, rows, d.c, d.v, false, true); // h · wteᵀ
        logits
    }
}

/// The causal mask [T, T] in the compute dtype (mixed precision: built in f32, then cast).
fn causal_mask(m: &mut Tracker, d: &Dims, t: u64) -> Id {
    let built = m.alloc_f32(Temporaries, t * t);
    cast(m, d, built, t * t, Temporaries, false)
}

/// The loss head in training: ln_f, logits by chunks, the gradient taken as it goes.
/// Returns (dx, head gradients: dwte, ln_f weight (and bias)).
fn head_train(m: &mut Tracker, d: &Dims, n: u64, chunk_rows: u64) -> (Id, Vec<Id>) {
    m.at(Phase::Loss, "loss head: ln_f");
    // Mixed precision: wte's compute-dtype copy lives through the head; ln_f's output is cast.
    let wte = d.mixed.then(|| m.alloc_compute(d, Category::CastWeights, d.v * d.c));
    let (hf, ln) = ln_forward(m, d, n, true, SavedActivations);
    let hf = cast(m, d, hf, n * d.c, SavedActivations, false);
    let mut dh_chunks = Vec::new();
    let mut dwte: Option<Id> = None;
    let mut start = 0;
    while start < n {
        if m.folds() && dwte.is_some() {
            // Full chunks from the second on repeat one pattern, each on a base higher by its
            // dh (kept until the concatenation): the last two full ones reach the highest
            // peak, so the ones before them are their dh's alone, in one tensor. A chunk of
            // 256 rows at a time made a run of 10^9 rows millions of chunks.
            let left_full = (n - start) / chunk_rows;
            if left_full > 2 {
                let skipped = (left_full - 2) * chunk_rows;
                dh_chunks.push(m.alloc_compute(d, Temporaries, skipped * d.c));
                start += skipped;
            }
        }
        let rows = chunk_rows.min(n - start);
        m.at(Phase::Loss, "loss head: logits and softmax");
        let logits = logits_f32(m, d, rows);
        let probs = m.alloc(LogitsAndLoss, rows * d.v);
        m.free(logits);
        let small: Vec<Id> = (0..6).map(|_| m.alloc(Temporaries, rows)).collect(); // gather, clamp, log, -1s
        m.at(Phase::Loss, "loss head: gradient");
        // dlogits = probs - onehot, in place.
        let part = if d.mixed {
            // Scaled by loss scale / N in f32, cast to the compute dtype; both products read it.
            let scaled = m.alloc(LogitsAndLoss, rows * d.v);
            m.free(probs);
            let dlogits = cast(m, d, scaled, rows * d.v, LogitsAndLoss, false);
            dh_chunks.push(m.alloc_compute(d, Temporaries, rows * d.c)); // dlogits @ wte
            f16_lhs_copy(m, d, rows, d.v, 0); // dlogits · wte
            let part = m.alloc_compute(d, Gradients, d.v * d.c); // dlogitsᵀ @ h
            f16_lhs_copy(m, d, d.v, rows, 0); // dlogitsᵀ · h
            let part = cast(m, d, part, d.v * d.c, Gradients, true);
            m.free(dlogits);
            part
        } else {
            let dh_raw = m.alloc(Temporaries, rows * d.c);
            gemm_scratch(m, d, rows, d.v, d.c, false, false); // dlogits · wte
            let dh = m.alloc(Temporaries, rows * d.c);
            m.free(dh_raw);
            dh_chunks.push(dh);
            let h_scaled = m.alloc(Temporaries, rows * d.c);
            let part = m.alloc(Gradients, d.v * d.c); // dlogits^T @ h
                                                      // gemm's packed copy of the transposed dlogits (see `packs_dlogits`): one k-block of
                                                      // rows by one column panel of the vocabulary, as gemm sees the product (n_embd rows
                                                      // by vocabulary columns).
            gemm_scratch(m, d, d.v, rows, d.c, true, false);
            m.free_all(&[probs, h_scaled]);
            part
        };
        dwte = Some(match dwte {
            Some(sum) => {
                let new = m.alloc(Gradients, d.v * d.c);
                m.free_all(&[sum, part]);
                new
            }
            None => part,
        });
        m.free_all(&small);
        start += rows;
    }
    let dh = if dh_chunks.len() > 1 {
        let cat = m.alloc_compute(d, Temporaries, n * d.c);
        m.free_all(&dh_chunks);
        cat
    } else {
        dh_chunks.first().copied().unwrap_or(Id(usize::MAX))
    };
    let dh = cast(m, d, dh, n * d.c, Temporaries, true);
    let mut grads = Vec::new();
    grads.extend(dwte);
    let dx = ln_backward(m, d, n, &mut grads);
    m.free_all(&[dh, hf]);
    m.free_all(&ln);
    m.free_all(wte.as_slice());
    (dx, grads)
}

/// One micro-step (`Gpt::loss_and_grads`); returns the gradient tensors it hands back.
fn micro_step(m: &mut Tracker, d: &Dims, b: u64, t: u64, chunked: bool, ckpt: bool) -> Vec<Id> {
    let n = b * t;
    m.at(Phase::Forward, "batch");
    let batch = [m.alloc(Batch, n), m.alloc(Batch, n)]; // x, y (u32)
    m.at(Phase::Forward, "causal mask");
    let causal = causal_mask(m, d, t);
    m.at(Phase::Forward, "embedding");
    let tok = m.alloc(Temporaries, n * d.c);
    let mut x = m.alloc(SavedActivations, n * d.c);
    m.free(tok);
    if d.dropout {
        let mk = m.alloc(Temporaries, n * d.c);
        let xd = m.alloc(SavedActivations, n * d.c);
        m.free_all(&[mk, x]);
        x = xd;
    }
    let mut inputs = Vec::new();
    let mut saved = Vec::new();
    m.at(Phase::Forward, "transformer blocks forward");
    for _ in 0..d.l {
        let bt = block_forward(m, d, b, t, !ckpt);
        inputs.push(x);
        saved.push(bt.saved);
        x = bt.out;
    }
    let chunk = if chunked { loss_chunk_rows(d.v as u32).min(n) } else { n };
    let (mut dx, mut grads) = head_train(m, d, n, chunk);
    m.free(x);
    m.at(Phase::Backward, "transformer blocks backward");
    for _ in 0..d.l {
        let input = inputs.pop().unwrap_or(Id(usize::MAX));
        let mut s = saved.pop().unwrap_or_default();
        if ckpt {
            m.at(Phase::Backward, "block recompute");
            let bt = block_forward(m, d, b, t, true);
            m.free(bt.out);
            s = bt.saved;
            m.at(Phase::Backward, "transformer blocks backward");
        }
        dx = block_backward(m, d, b, t, s, dx, &mut grads);
        m.free(input);
    }
    m.free(causal);
    m.at(Phase::Backward, "embedding backward");
    if d.dropout {
        let mk = m.alloc(Temporaries, n * d.c);
        let demb = m.alloc(Temporaries, n * d.c);
        m.free_all(&[dx, mk]);
        dx = demb;
    }
    grads.push(m.alloc(Gradients, t * d.c)); // dpos
    if t < d.block {
        let zeros = m.alloc(Temporaries, (d.block - t) * d.c);
        grads.push(m.alloc(Gradients, d.block * d.c));
        m.free(zeros);
    }
    // wte: index_add copies the head's dwte (grads[0] of the head).
    let dwte = m.alloc(Gradients, d.v * d.c);
    let head_dwte = grads.remove(0);
    m.free_all(&[head_dwte, dx]);
    grads.push(dwte);
    m.free_all(&batch);
    grads
}

/// Eval forward of one batch (`Gpt::eval_loss`), in groups of whole sequences.
fn eval_batch(m: &mut Tracker, d: &Dims, b: u64, t: u64, chunk_rows: Option<u64>) {
    // Eval runs without dropout: no masks.
    let d = &Dims { dropout: false, ..*d };
    let batch = [m.alloc(Batch, b * t), m.alloc(Batch, b * t)];
    let seqs_per_group = chunk_rows.map(|r| (r / t).clamp(1, b)).unwrap_or(b);
    let mut start = 0;
    // gemm's slabs before the last group simulated: one made within a group (the first product
    // that packs into it, after the group's peak perhaps) raises the groups after it.
    let mut slabs_before = m.slabs_made;
    while start < b {
        if m.folds() && start > 0 && m.slabs_made == slabs_before {
            // Every group frees what it allocated: the full groups after one that made no slab
            // repeat it on the same base, so only a last, smaller group is left to simulate (one
            // row at a time made a batch of 65,536 sequences millions of forwards).
            start += (b - start) / seqs_per_group * seqs_per_group;
            if start == b {
                break;
            }
        }
        slabs_before = m.slabs_made;
        let seqs = seqs_per_group.min(b - start);
        let n = seqs * t;
        m.at(Phase::EvalForward, "eval forward");
        let causal = causal_mask(m, d, t);
        let tok = m.alloc(Temporaries, n * d.c);
        let mut x = m.alloc(SavedActivations, n * d.c);
        m.free(tok);
        for _ in 0..d.l {
            let bt = block_forward(m, d, seqs, t, false);
            m.free(x);
            x = bt.out;
        }
        m.free(causal);
        m.at(Phase::EvalLoss, "eval loss head");
        let wte = d.mixed.then(|| m.alloc_compute(d, Category::CastWeights, d.v * d.c));
        let (hf, _) = ln_forward(m, d, n, false, SavedActivations);
        let hf = cast(m, d, hf, n * d.c, SavedActivations, false);
        let logits = logits_f32(m, d, n);
        let probs = m.alloc(LogitsAndLoss, n * d.v);
        m.free(logits);
        let small: Vec<Id> = (0..5).map(|_| m.alloc(Temporaries, n)).collect();
        m.free_all(&small);
        m.free_all(&[probs, hf, x]);
        m.free_all(wte.as_slice());
        start += seqs;
    }
    m.free_all(&batch);
}

/// One optimizer iteration: micro-steps with accumulation, clipping, AdamW.
fn iteration(m: &mut Tracker, cfg: &Config, d: &Dims, opts: &TrainerOptions, sizes: &[u64], state: &mut Vec<Id>) {
    let (b, t) = (u64::from(cfg.batch_size), u64::from(cfg.block_size));
    let ga = cfg.gradient_accumulation_steps.max(1);
    let mut acc: Vec<Id> = Vec::new();
    // Micro-steps from the third on repeat the second exactly (same buffers alive), so a long
    // accumulation is simulated as three.
    for k in 1..=ga.min(3) {
        m.micro_step = k;
        let grads = micro_step(m, d, b, t, opts.chunked_loss, cfg.activation_checkpointing);
        if acc.is_empty() {
            acc = grads;
        } else {
            m.at(Phase::Backward, "gradient accumulation");
            let sums: Vec<Id> = sizes.iter().map(|&s| m.alloc(Gradients, s)).collect();
            m.free_all(&acc);
            m.free_all(&grads);
            acc = sums;
        }
    }
    m.micro_step = 0;
    let loss_scaling = opts.mixed_precision == Some(crate::config::Dtype::Float16);
    if ga > 1 || loss_scaling {
        m.at(Phase::Backward, "gradient accumulation: mean");
        let scaled: Vec<Id> = sizes.iter().map(|&s| m.alloc(Gradients, s)).collect();
        m.free_all(&acc);
        acc = scaled;
    }
    if loss_scaling {
        // The overflow check: the gradients' norm, one squared copy at a time.
        m.at(Phase::ClipGrad, "loss scaling: overflow check");
        for &s in sizes {
            let sq = m.alloc(Temporaries, s);
            m.free(sq);
        }
    }
    if opts.grad_clip {
        m.at(Phase::ClipGrad, "clip_grad_norm");
        for &s in sizes {
            let sq = m.alloc(Temporaries, s);
            m.free(sq);
        }
    }
    m.at(Phase::OptimizerStep, "AdamW");
    if state.is_empty() {
        for &s in sizes {
            state.push(m.alloc(OptimizerState, s));
            state.push(m.alloc(OptimizerState, s));
        }
    }
    // On CPU and on CUDA the step updates parameters and moments in place (`fused::adamw_step`,
    // three kernels on CUDA): no temporaries. As candle ops (optim.rs; the CPU's unfused path), per parameter: m*b1, g*(1-b1), new m; v*b2, g^2,
    // *(1-b2), new v; sqrt, denom; p*decay, m/denom, *lr, p'. An operand taken by value (`x *
    // f64`, `x + y`) is freed as the operator returns, after its result exists: g^2 and m/denom
    // are gone before the new v and p' are made (measured on CUDA, trainer-cuda-*.json, where
    // this step is the peak of a 50304-vocabulary model: one wte-sized temporary fewer).
    if d.unfused && !d.cuda {
        for (i, &s) in sizes.iter().enumerate() {
            let t1 = m.alloc(Temporaries, s);
            let t2 = m.alloc(Temporaries, s);
            let new_m = m.alloc(OptimizerState, s);
            m.free_all(&[t1, t2]);
            let t3 = m.alloc(Temporaries, s);
            let g_sq = m.alloc(Temporaries, s);
            let t5 = m.alloc(Temporaries, s);
            m.free(g_sq);
            let new_v = m.alloc(OptimizerState, s);
            m.free_all(&[t3, t5]);
            let sq = m.alloc(Temporaries, s);
            let denom = m.alloc(Temporaries, s);
            m.free(sq);
            let u1 = m.alloc(Temporaries, s);
            let ratio = m.alloc(Temporaries, s);
            let u3 = m.alloc(Temporaries, s);
            m.free(ratio);
            let u4 = m.alloc(Temporaries, s);
            m.free_all(&[u1, u3, u4, denom]);
            m.free_all(&[state[2 * i], state[2 * i + 1]]);
            state[2 * i] = new_m;
            state[2 * i + 1] = new_v;
        }
    }
    m.at(Phase::ZeroGrad, "gradients dropped");
    m.free_all(&acc);
}

/// Parameter tensor sizes in `Gpt::params` order (elements).
fn param_sizes(cfg: &Config) -> Vec<u64> {
    let table = param_tensors(cfg);
    let get = |name: &str| table.iter().find(|p| p.name == name).map(|p| p.elements()).unwrap_or(0);
    let mut out = vec![get("transformer.wte.weight"), get("transformer.wpe.weight")];
    let per_layer: &[&str] = if cfg.bias {
        &[
            "ln_1.weight",
            "ln_1.bias",
            "attn.c_attn.weight",
            "attn.c_attn.bias",
            "attn.c_proj.weight",
            "attn.c_proj.bias",
            "ln_2.weight",
            "ln_2.bias",
            "mlp.c_fc.weight",
            "mlp.c_fc.bias",
            "mlp.c_proj.weight",
            "mlp.c_proj.bias",
        ]
    } else {
        &["ln_1.weight", "attn.c_attn.weight", "attn.c_proj.weight", "ln_2.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"]
    };
    for _ in 0..cfg.n_layer {
        for name in per_layer {
            out.push(get(&format!("transformer.h.{{i}}.{name}")));
        }
    }
    out.push(get("transformer.ln_f.weight"));
    if cfg.bias {
        out.push(get("transformer.ln_f.bias"));
    }
    out
}

/// The trainer's memory for `cfg` (on the CPU in f32 unless `opts` says CUDA or mixed
/// precision): a steady training iteration, the first (AdamW creates its state), eval at the
/// start and after a step. Bytes are the trainer's heap, excluding
/// the process's baseline (code, data set, tokenizer tables).
pub fn simulate(cfg: &Config, opts: &TrainerOptions) -> Simulation {
    run(cfg, opts, false).0
}

/// [`simulate`] and its live-bytes curve, one point per allocation or free.
pub fn simulate_with_timeline(cfg: &Config, opts: &TrainerOptions) -> (Simulation, Vec<TimelinePoint>) {
    run(cfg, opts, true)
}

fn run(cfg: &Config, opts: &TrainerOptions, timeline: bool) -> (Simulation, Vec<TimelinePoint>) {
    // Sizes of zero would leave nothing to simulate (and `clamp(1, 0)` panics): count them as 1.
    // Callers validate configs first; this keeps an unvalidated one from panicking.
    let cfg = &Config {
        n_layer: cfg.n_layer,
        n_head: cfg.n_head.max(1),
        batch_size: cfg.batch_size.max(1),
        block_size: cfg.block_size.max(1),
        eval_batch_size: Some(cfg.eval_batch().max(1)),
        eval_block_size: Some(cfg.eval_block().max(1)),
        ..cfg.clone()
    };
    let d = Dims {
        l: u64::from(cfg.n_layer),
        c: u64::from(cfg.n_embd),
        h: u64::from(cfg.n_head),
        v: u64::from(cfg.vocab_size),
        block: u64::from(cfg.block_size),
        bias: cfg.bias,
        dropout: cfg.dropout > 0.0,
        gemm_rows: if opts.gemm_kernel_rows == 0 { 16 } else { u64::from(opts.gemm_kernel_rows) },
        caches: opts.cpu_caches,
        unfused: opts.unfused_ops,
        mixed: opts.mixed(),
        cb: if opts.mixed() { 2 } else { F32 },
        cuda: opts.cuda,
        threads: opts.cpu_threads.max(1),
        lazy_slabs: opts.gemm_slabs_made_lazily(),
    };
    let sizes = param_sizes(cfg);
    let mut m = Tracker::new(timeline);
    m.at(Phase::Init, "parameters");
    for &s in &sizes {
        m.alloc(Parameters, s);
    }
    if !opts.cuda && !d.lazy_slabs {
        m.at(Phase::Init, "gemm's per-thread packing buffers");
        m.alloc(Category::Workspace, gemm_slabs(opts.cpu_threads, smallest_product(cfg, opts)) * gemm_slab_bytes(opts) / F32);
    }
    let (eb, et) = (u64::from(cfg.eval_batch()), u64::from(cfg.eval_block()));
    m.new_window();
    eval_batch(&mut m, &d, eb, et, opts.eval_chunk_rows);
    let eval_at_start = m.new_window();
    let mut state = Vec::new();
    iteration(&mut m, cfg, &d, opts, &sizes, &mut state);
    let first_iter = m.new_window();
    eval_batch(&mut m, &d, eb, et, opts.eval_chunk_rows);
    let eval = m.new_window();
    iteration(&mut m, cfg, &d, opts, &sizes, &mut state);
    let train = m.new_window();
    // `vramfit train` has no evaluate-only mode (it refuses eval_only).
    (Simulation { train, eval, first_iter, eval_at_start, eval_only: false }, m.timeline)
}

/// The highest of the four windows: what a run of `cfg` needs.
pub fn peak_bytes(sim: &Simulation) -> u64 {
    [&sim.train, &sim.eval, &sim.first_iter, &sim.eval_at_start].iter().map(|p| p.bytes).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Config {
        Config {
            n_layer: 2,
            n_head: 2,
            n_embd: 64,
            block_size: 64,
            vocab_size: 100,
            batch_size: 4,
            gradient_accumulation_steps: 2,
            ..Config::default()
        }
    }

    #[test]
    fn parameters_and_adam_state_are_counted_exactly() {
        let cfg = small();
        let sim = simulate(&cfg, &TrainerOptions::default());
        let params = crate::params::count(&cfg).total * 4;
        assert_eq!(sim.train.breakdown.parameters, params);
        // In a steady iteration AdamW's two moments exist throughout.
        assert!(sim.train.breakdown.optimizer_state >= 2 * params);
        assert_eq!(sim.eval_at_start.breakdown.optimizer_state, 0);
        assert_eq!(sim.eval.breakdown.optimizer_state, 2 * params);
    }

    #[test]
    fn degenerate_configs_do_not_panic() {
        // Zero sizes (which validation refuses) must neither panic nor give an inconsistent
        // answer: each window's breakdown still sums to its peak, and the weights are there.
        let cfg = Config { batch_size: 0, block_size: 0, n_head: 0, eval_batch_size: Some(0), ..small() };
        let sim = simulate(
            &cfg,
            &TrainerOptions {
                chunked_loss: true,
                eval_chunk_rows: Some(0),
                grad_clip: true,
                cpu_threads: 0,
                gemm_kernel_rows: 0,
                cpu_caches: CpuCaches::default(),
                unfused_ops: true,
                mixed_precision: Some(crate::config::Dtype::Float16),
                cuda: true,
            },
        );
        for w in [&sim.train, &sim.eval, &sim.first_iter, &sim.eval_at_start] {
            assert_eq!(w.breakdown.total(), w.bytes);
            assert!(w.breakdown.parameters > 0);
        }
    }

    /// Folding repeated loss chunks and eval groups (what `simulate` does) leaves every window
    /// as the full replay has it (what `simulate_with_timeline` does): bytes, phase, op,
    /// micro-step and breakdown. Chunk and group counts around the folding's edges, whole and
    /// with a smaller last one, in f32 and mixed precision.
    #[test]
    fn folded_chunks_and_groups_are_exact() {
        let mut checked = 0;
        for batch in [1, 3, 4, 5, 7, 16] {
            for (block, vocab) in [(64, 50304), (256, 50304), (100, 9000)] {
                for eval_seqs in [None, Some(1), Some(2), Some(3)] {
                    for mixed_precision in [None, Some(crate::config::Dtype::Bfloat16)] {
                        let cfg =
                            Config { batch_size: batch, block_size: block, vocab_size: vocab, eval_batch_size: Some(batch + 2), ..small() };
                        let opts = TrainerOptions {
                            chunked_loss: true,
                            eval_chunk_rows: eval_seqs.map(|s| s * u64::from(block)),
                            mixed_precision,
                            ..TrainerOptions::default()
                        };
                        let (full, _) = simulate_with_timeline(&cfg, &opts);
                        assert_eq!(simulate(&cfg, &opts), full, "B{batch} T{block} V{vocab} eval {eval_seqs:?} {mixed_precision:?}");
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, 144);
        // A first eval group that makes a slab only after its peak (review): attention at a long
        // block peaks before the loss head, the first product that packs (head size 24 prepacks),
        // so the second group, with the slab alive, is higher.
        let cfg = Config {
            n_layer: 2,
            n_head: 4,
            n_embd: 96,
            block_size: 1024,
            vocab_size: 1500,
            batch_size: 2,
            eval_batch_size: Some(2),
            ..small()
        };
        for threads in [1, 2, 8] {
            let opts = TrainerOptions {
                chunked_loss: true,
                eval_chunk_rows: Some(1024),
                gemm_kernel_rows: 64,
                cpu_caches: QA_CACHES,
                cpu_threads: threads,
                ..TrainerOptions::default()
            };
            let (full, _) = simulate_with_timeline(&cfg, &opts);
            assert_eq!(simulate(&cfg, &opts), full, "{threads} threads");
        }
        // Where it matters: 10^9 rows by chunks of 256, 65,536 eval sequences one at a time, in
        // a model of 1,023 layers.
        let cfg = Config { n_layer: 1023, batch_size: 65536, eval_batch_size: Some(65536), block_size: 16384, ..small() };
        let opts = TrainerOptions { chunked_loss: true, eval_chunk_rows: Some(1), ..TrainerOptions::default() };
        let started = std::time::Instant::now();
        let sim = simulate(&cfg, &opts);
        assert!(sim.train.bytes > sim.eval.bytes);
        assert!(started.elapsed().as_secs() < 60, "{:?}", started.elapsed());
    }

    #[test]
    fn timeline_peaks_where_the_simulation_does() {
        let (sim, points) = simulate_with_timeline(&small(), &TrainerOptions::default());
        assert!(!points.is_empty());
        let max = points.iter().map(|p| p.live_bytes).max().unwrap_or(0);
        assert_eq!(max, peak_bytes(&sim));
    }
}

/// `--auto-fit`: a micro-batch (at most `cfg.batch_size`) whose predicted peak fits in
/// `budget_bytes`, with gradient accumulation raised to keep the tokens per iteration
/// (`batch_size * gradient_accumulation_steps`). That takes a micro-batch dividing them: the
/// largest that does, unless it is under half the largest that fits (13 sequences and room for
/// 7 would mean micro-batches of 1); then the largest that fits, and an iteration sees a few
/// more tokens. `None` when even a micro-batch of 1 does not fit. The eval batch follows the
/// micro-batch when it was not set separately.
pub fn auto_fit(cfg: &Config, opts: &TrainerOptions, budget_bytes: u64) -> Option<Config> {
    let sequences = u64::from(cfg.batch_size.max(1)) * u64::from(cfg.gradient_accumulation_steps.max(1));
    // Each candidate with the accumulation it would run at: accumulation buffers cost memory too.
    let with_batch = |b: u32| {
        let mut c = cfg.clone();
        c.batch_size = b;
        c.gradient_accumulation_steps = u32::try_from(sequences.div_ceil(u64::from(b.max(1)))).unwrap_or(u32::MAX);
        c
    };
    let largest = largest_where(1, cfg.batch_size.max(1), |b| peak_bytes(&simulate(&with_batch(b), opts)) <= budget_bytes)?;
    let divisor = (1..=largest).rev().find(|b| sequences.is_multiple_of(u64::from(*b))).unwrap_or(1);
    Some(with_batch(if divisor * 2 >= largest { divisor } else { largest }))
}

/// A setting's value with which the run fits, and the peak it then needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fitting<T> {
    pub value: T,
    pub needed_bytes: u64,
}

/// The evaluation's fixes for a run that does not fit `budget_bytes`: the largest eval batch
/// below the config's, and (when eval is not chunked yet) the most rows per eval forward, in
/// whole eval sequences, with which the whole run fits; each with its need. Where evaluation
/// is the peak (a large eval batch) these are what fits, and no micro-batch does.
pub fn eval_fixes(cfg: &Config, opts: &TrainerOptions, budget_bytes: u64) -> (Option<Fitting<u32>>, Option<Fitting<u64>>) {
    let (eb, te) = (cfg.eval_batch(), u64::from(cfg.eval_block()));
    if eb <= 1 {
        return (None, None);
    }
    let with_batch = |e: u32| peak_bytes(&simulate(&Config { eval_batch_size: Some(e), ..cfg.clone() }, opts));
    let with_rows = |rows: u64| peak_bytes(&simulate(cfg, &TrainerOptions { eval_chunk_rows: Some(rows), ..*opts }));
    let batch = largest_where(1, eb - 1, |e| with_batch(e) <= budget_bytes).map(|e| Fitting { value: e, needed_bytes: with_batch(e) });
    let rows = match opts.eval_chunk_rows {
        Some(_) => None,
        None => largest_where(1, eb - 1, |s| with_rows(u64::from(s) * te) <= budget_bytes)
            .map(|s| u64::from(s) * te)
            .map(|r| Fitting { value: r, needed_bytes: with_rows(r) }),
    };
    (batch, rows)
}

#[cfg(test)]
mod auto_fit_tests {
    use super::*;

    /// A run whose eval batch is the peak: no micro-batch fits, and the eval fixes are each the
    /// boundary (it fits, one more does not) and leave the training step as it was.
    #[test]
    fn eval_fixes_fit_where_no_micro_batch_does() {
        let cfg = Config {
            n_layer: 2,
            n_head: 4,
            n_embd: 128,
            block_size: 64,
            vocab_size: 32,
            batch_size: 8,
            gradient_accumulation_steps: 1,
            eval_batch_size: Some(64),
            ..Config::default()
        };
        let opts = TrainerOptions { cpu_threads: 1, ..TrainerOptions::default() };
        let sim = simulate(&cfg, &opts);
        assert!(sim.eval.bytes > sim.train.bytes);
        let budget = (sim.train.bytes + sim.eval.bytes) / 2;
        assert_eq!(auto_fit(&cfg, &opts, budget), None);
        let need = |c: &Config, o: &TrainerOptions| peak_bytes(&simulate(c, o));
        let (batch, rows) = eval_fixes(&cfg, &opts, budget);
        let batch = batch.expect("a smaller eval batch fits");
        let e = batch.value;
        assert_eq!(need(&Config { eval_batch_size: Some(e), ..cfg.clone() }, &opts), batch.needed_bytes);
        assert!(batch.needed_bytes <= budget);
        assert!(need(&Config { eval_batch_size: Some(e + 1), ..cfg.clone() }, &opts) > budget);
        let rows = rows.expect("eval in pieces fits");
        let r = rows.value;
        assert_eq!(r % 64, 0, "whole sequences");
        assert_eq!(need(&cfg, &TrainerOptions { eval_chunk_rows: Some(r), ..opts }), rows.needed_bytes);
        assert!(rows.needed_bytes <= budget);
        assert!(need(&cfg, &TrainerOptions { eval_chunk_rows: Some(r + 64), ..opts }) > budget);
        // Chunked already, or an eval batch of 1: nothing more to offer there.
        assert_eq!(eval_fixes(&cfg, &TrainerOptions { eval_chunk_rows: Some(64), ..opts }, budget).1, None);
        assert_eq!(eval_fixes(&Config { eval_batch_size: Some(1), ..cfg.clone() }, &opts, 1), (None, None));
    }

    #[test]
    fn attention_products_make_a_slab_only_at_head_sizes_gemm_packs() {
        // AVX-512's 64-row kernels.
        let caches = QA_CACHES;
        // p · v for a row block of 64 at T = 128: gemm packs vᵀ (rows: the head size) into the
        // calling thread's slab when the head size is a multiple of the 16 SIMD lanes, and
        // prepacks it into the call's own buffer otherwise.
        assert_eq!(caches.slab_use(64, 128, 32, false, false, 64, 2), (true, false));
        assert_eq!(caches.slab_use(64, 128, 24, false, false, 64, 2), (false, false));
        // q · kᵀ: kᵀ is strided, so prepacked, whatever the head size.
        assert_eq!(caches.slab_use(64, 32, 128, false, true, 64, 2), (false, false));
        // The loss head h · wteᵀ at 1,024 rows and GPT-2's vocabulary: too many rows to prepack,
        // enough work to split over the pool.
        assert_eq!(caches.slab_use(1024, 384, 50304, false, true, 64, 2), (false, true));
        // On one thread whatever gemm packs into a slab runs on the calling thread.
        assert_eq!(caches.slab_use(1024, 384, 50304, false, true, 64, 1), (true, false));
        // gemv and k <= 2 paths pack nothing.
        assert_eq!(caches.slab_use(1024, 2, 50304, false, true, 64, 2), (false, false));
    }

    #[test]
    fn gemm_scratch_is_what_gemm_allocated_in_the_trace() {
        // `trainer_memory -- --trace` of L2 H4 C160 T64 B4 V21 on one thread, AVX-512, on the
        // QA machine's caches as gemm read them: each transient gemm buffer to the byte.
        let qa = QA_CACHES;
        let s = |m, k, n, lhs_t, rhs_t| qa.matmul_scratch_bytes(m, k, n, lhs_t, rhs_t, 64, true);
        assert_eq!(s(480, 256, 160, true, false), 256 * 480 * 4); // c_attn's dyᵀ · x: packed dy
        assert_eq!(s(640, 256, 160, true, false), 256 * 642 * 4); // c_fc's
        assert_eq!(s(160, 256, 640, true, false), 256 * 162 * 4); // mlp c_proj's
        assert_eq!(s(256, 160, 480, false, true), 160 * 512 * 4); // x · c_attnᵀ: prepacked weight
        assert_eq!(s(256, 640, 160, false, true), 320 * 192 * 4); // x · mlp c_projᵀ: k in two blocks
        assert_eq!(s(256, 160, 21, false, true), 160 * 64 * 4); // h · wteᵀ
        assert_eq!(s(21, 256, 160, true, false), 256 * 24 * 4); // dlogitsᵀ · h
        assert_eq!(s(256, 480, 160, false, false), 0); // dy · w: contiguous, 160 rows of whole SIMD widths
                                                       // At n_embd 128 (twice the kernel's rows) gemm reads dy in place.
        assert_eq!(s(384, 256, 128, true, false), 0);
    }

    #[test]
    fn the_packed_dlogits_are_one_block_of_gemm() {
        let measuring = CpuCaches::default();
        // 2048 rows by the GPT-2 vocabulary on the measuring machine: four k-blocks of 512, the
        // whole vocabulary in one panel (the probe measured 512 x 50304 x 4 bytes and 268 more:
        // `trainer_memory -- --probe-gemm`).
        assert_eq!(measuring.gemm_blocks(2048, 50304, 64), (512, 50304));
        // Fewer rows than a block (a loss chunk of 333): one block of all of them.
        assert_eq!(measuring.gemm_blocks(333, 50304, 64).0, 333);
        // A desktop's 32 MiB L3 holds a panel of at most 15/16 of it: a part of the vocabulary.
        let desktop = CpuCaches { l3_bytes: 32 << 20, l3_associativity: 16, ..measuring };
        let (kc, nc) = desktop.gemm_blocks(2048, 50304, 64);
        assert!(kc == 512 && nc < 50304 && kc * nc * 4 <= 15 * (32 << 20) / 16, "{kc} x {nc}");
        // gemm's own paths (gemm-common 0.19, gemm_basic_generic): a product of at most 64 x 64
        // takes one k-block of up to 512 rows, unsplit (1000 rows: 512, not 500), by the whole
        // width rounded up to microkernels of 6 columns (64 columns: 11 of them, 66); one more
        // column and it is kernel_params' product again.
        assert_eq!(measuring.product_blocks(64, 1000, 64, 64, true), (512, 66));
        assert_eq!(measuring.product_blocks(64, 1000, 65, 64, true), measuring.gemm_blocks(1000, 65, 64));
        // Without an L3 the panel is the whole width with threads, 128 microkernels without.
        let no_l3 = CpuCaches { l3_bytes: 0, ..measuring };
        assert_eq!(no_l3.product_blocks(256, 2048, 50304, 64, false), (512, 50304));
        assert_eq!(no_l3.product_blocks(256, 2048, 50304, 64, true), (512, 768));
        // Otherwise the threads change nothing.
        assert_eq!(measuring.product_blocks(256, 2048, 50304, 64, true), measuring.gemm_blocks(2048, 50304, 64));
        // What this changes in a run's peak is held to measurement by the GPT-2-vocabulary rows of
        // tests/reference/data/trainer-cpu.json (core/tests/trainer_reference.rs).
    }

    #[test]
    fn auto_fit_picks_the_largest_fitting_micro_batch_and_keeps_tokens() {
        let cfg = Config {
            n_layer: 2,
            n_head: 2,
            n_embd: 64,
            block_size: 128,
            vocab_size: 500,
            batch_size: 32,
            gradient_accumulation_steps: 2,
            ..Config::default()
        };
        let opts = TrainerOptions::default();
        let with = |b: u32| peak_bytes(&simulate(&Config { batch_size: b, ..cfg.clone() }, &opts));
        // A budget between the needs of micro-batches 7 and 8 must give 7.
        let budget = (with(7) + with(8)) / 2;
        assert!(with(7) <= budget && with(8) > budget);
        // 7 fits; 64 sequences per iteration are kept in micro-batches of 4, the largest divisor
        // of 64 up to 7 (at least half of 7).
        let fitted = auto_fit(&cfg, &opts, budget).expect("fits");
        assert_eq!((fitted.batch_size, fitted.gradient_accumulation_steps), (4, 16));
        // 13 sequences (a prime) with room for 7: micro-batches of 1 would be 13 steps, so 7,
        // and two of them (14 sequences).
        let prime = Config { batch_size: 13, gradient_accumulation_steps: 1, ..cfg.clone() };
        let fitted = auto_fit(&prime, &opts, budget).expect("fits");
        assert_eq!((fitted.batch_size, fitted.gradient_accumulation_steps), (7, 2));
        // Enough memory: unchanged.
        assert_eq!(auto_fit(&cfg, &opts, u64::MAX), Some(cfg.clone()));
        // Too little for one sequence.
        assert_eq!(auto_fit(&cfg, &opts, with(1) - 1), None);
    }
}

/// One window of a [`TrainerPlan`]: the trainer's heap high-water mark and what made it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TrainerWindow {
    pub peak_bytes: u64,
    pub phase: Option<Phase>,
    pub op: String,
    pub micro_step: u32,
    pub breakdown: Breakdown,
}

fn trainer_window(p: &Peak) -> TrainerWindow {
    TrainerWindow { peak_bytes: p.bytes, phase: p.phase, op: p.op.clone(), micro_step: p.micro_step, breakdown: p.breakdown }
}

/// `vramfit plan --runtime trainer`: what vramfit's own trainer will hold for `config`, on this
/// CPU or on a CUDA card (`device`). The same JSON schema version as [`crate::plan::Plan`]
/// ([`crate::plan::PLAN_SCHEMA_VERSION`]), with `runtime: "trainer"`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrainerPlan {
    pub schema_version: u32,
    pub runtime: String,
    /// `cpu`: the figures are the trainer's f32 heap on CPU; `cuda`: its tensors in CUDA's memory pool.
    pub device: String,
    /// `validated`: checked against the counting allocator (tests/reference/data/trainer-cpu.json).
    pub source: crate::device::Source,
    pub config: Config,
    pub options: TrainerOptions,
    pub params: crate::params::ParamCounts,
    pub tokens_per_iter: u64,
    /// The highest of the four windows: what the run needs.
    pub peak_bytes: u64,
    pub train: TrainerWindow,
    pub eval: TrainerWindow,
    pub first_iter: TrainerWindow,
    pub eval_at_start: TrainerWindow,
    /// Memory the run may use (given by the caller: free RAM, or a cap), and whether the peak fits.
    pub available_bytes: Option<u64>,
    pub fits: Option<bool>,
    /// With `available_bytes`: the largest micro-batch that fits, everything else unchanged.
    pub largest_micro_batch: Option<u32>,
    /// With `available_bytes` and no fit: `--auto-fit`'s choice (micro-batch and accumulation).
    pub auto_fit: Option<Config>,
    /// With `available_bytes` and no fit: the largest eval batch (below the config's) that fits.
    pub fitting_eval_batch: Option<Fitting<u32>>,
    /// With `available_bytes` and no fit, and eval not chunked: the most rows per eval forward
    /// (whole sequences) that fit.
    pub fitting_eval_chunk_rows: Option<Fitting<u64>>,
    pub notes: Vec<String>,
    /// A CUDA plan for a card ([`plan_on_card`]): the card and how `available_bytes` was made.
    /// Null for a plan of the CPU trainer.
    #[serde(default)]
    pub card: Option<TrainerCard>,
}

/// CUDA memory a `vramfit train --device cuda` process holds before its first tensor (the
/// context with candle's cuBLAS and cuRAND handles): the H100's 81,079 MiB total less the
/// 80,484.2 MiB its pre-flight found free, in every run of
/// tests/reference/data/trainer-cuda-h100-runs.txt (CUDA 13). PyTorch's is 758 MiB there; other
/// cards and drivers take the H100's figure as an estimate.
pub const CUDA_CONTEXT_BYTES: u64 = 5948 * (1 << 20) / 10;

/// The card a CUDA trainer plan is for: its usable memory, less the trainer's CUDA context and
/// what other programs hold, is the plan's `available_bytes`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrainerCard {
    pub gpu: String,
    pub name: String,
    pub usable_bytes: u64,
    pub usable_source: crate::device::Source,
    pub context_bytes: u64,
    pub context_source: crate::device::Source,
    pub other_usage_bytes: u64,
    /// The pool's cached blocks as a share of the tensors' peak ([`POOL_CACHE_SHARE`], an
    /// estimate), and whether the peak fits with them on top.
    pub pool_cache_share: f64,
    pub fits_with_pool_cache: bool,
    /// The largest micro-batch that fits with the pool's cache on top.
    pub largest_micro_batch_with_pool_cache: Option<u32>,
}

/// CUDA's memory pool keeps freed blocks cached for reuse, so what the trainer holds on a card
/// is more than its tensors: GPT-2 124M (bfloat16, batch 8, block 1024) on an H100 reserved
/// 11,710,496,768 B at a tensor peak of 10,368,254,976 B (trainer-cuda-h100-runs.txt), 12.9%
/// more. One run on one card: an estimate, applied to every config.
pub const POOL_CACHE_SHARE: f64 = 0.129;

/// `bytes` with the pool's cache on top.
pub fn with_pool_cache(bytes: u64) -> u64 {
    (bytes as f64 * (1.0 + POOL_CACHE_SHARE)).ceil() as u64
}

/// [`plan`] for `vramfit train --device cuda` on a card (options as [`TrainerOptions::cuda`]
/// runs set them), with `other_usage` bytes held by other programs.
pub fn plan_on_card(
    cfg: &Config,
    opts: &TrainerOptions,
    gpu: &crate::device::Gpu,
    other_usage: u64,
) -> Result<TrainerPlan, crate::ConfigError> {
    use crate::device::Source;
    // Measured on the H100 only (the preset whose usable size is measured too).
    let context_source = if gpu.id == "h100-80gb" { Source::Measured } else { Source::Estimate };
    let available = gpu.usable_bytes.saturating_sub(CUDA_CONTEXT_BYTES).saturating_sub(other_usage);
    let mut plan = plan(cfg, opts, Some(available))?;
    let fits_cached = |c: &Config| with_pool_cache(peak_bytes(&simulate(c, opts))) <= available;
    let fits_with_pool_cache = with_pool_cache(plan.peak_bytes) <= available;
    let largest_micro_batch_with_pool_cache =
        largest_where(1, crate::config::MAX_BATCH, |b| fits_cached(&Config { batch_size: b, ..cfg.clone() }));
    if cfg.dtype == crate::Dtype::Bfloat16 && !gpu.supports_bf16() {
        let (major, minor) = gpu.compute_capability;
        plan.notes.push(format!(
            "The {} (compute capability {major}.{minor}) has no native bfloat16, which needs 8.0 (Ampere) or newer: \
             use --dtype float16 or float32.",
            gpu.name
        ));
    }
    plan.card = Some(TrainerCard {
        gpu: gpu.id.clone(),
        name: gpu.name.clone(),
        usable_bytes: gpu.usable_bytes,
        usable_source: gpu.usable_source,
        context_bytes: CUDA_CONTEXT_BYTES,
        context_source,
        other_usage_bytes: other_usage,
        pool_cache_share: POOL_CACHE_SHARE,
        fits_with_pool_cache,
        largest_micro_batch_with_pool_cache,
    });
    Ok(plan)
}

/// The trainer's plan for `cfg` (validated first); `available_bytes` adds the fit, the largest
/// micro-batch and the auto-fit choice.
pub fn plan(cfg: &Config, opts: &TrainerOptions, available_bytes: Option<u64>) -> Result<TrainerPlan, crate::ConfigError> {
    cfg.validate()?;
    let sim = simulate(cfg, opts);
    let peak = peak_bytes(&sim);
    let fits = available_bytes.map(|a| peak <= a);
    let largest_micro_batch = available_bytes.and_then(|a| {
        // Up to the largest batch a config may have: a bisection, 17 simulations at most.
        largest_where(1, crate::config::MAX_BATCH, |b| peak_bytes(&simulate(&Config { batch_size: b, ..cfg.clone() }, opts)) <= a)
    });
    let auto = match (available_bytes, fits) {
        (Some(a), Some(false)) => auto_fit(cfg, opts, a),
        _ => None,
    };
    let notes = if opts.cuda { cuda_notes(cfg, opts) } else { cpu_notes(cfg, opts) };
    let (fitting_eval_batch, fitting_eval_chunk_rows) = match (available_bytes, fits) {
        (Some(a), Some(false)) => eval_fixes(cfg, opts, a),
        _ => (None, None),
    };
    Ok(TrainerPlan {
        schema_version: crate::plan::PLAN_SCHEMA_VERSION,
        runtime: "trainer".to_string(),
        device: if opts.cuda { "cuda" } else { "cpu" }.to_string(),
        source: crate::device::Source::Validated,
        config: cfg.clone(),
        options: *opts,
        params: crate::params::count(cfg),
        tokens_per_iter: cfg.tokens_per_iter(),
        peak_bytes: peak,
        train: trainer_window(&sim.train),
        eval: trainer_window(&sim.eval),
        first_iter: trainer_window(&sim.first_iter),
        eval_at_start: trainer_window(&sim.eval_at_start),
        available_bytes,
        fits,
        largest_micro_batch,
        auto_fit: auto,
        fitting_eval_batch,
        fitting_eval_chunk_rows,
        notes,
        card: None,
    })
}

/// The notes of a CPU plan: what was validated, the estimates, the settings that do not apply.
fn cpu_notes(cfg: &Config, opts: &TrainerOptions) -> Vec<String> {
    // The figures below are tests/reference/data/trainer-cpu.json's, against today's model.
    let mut notes = vec!["Figures are vramfit's own trainer (candle, hand-written backward) on CPU in f32: every tensor it allocates, \
         validated against a counting allocator on 30 runs (peaks 29 MiB to 4.1 GiB, 15 at 1 thread and 15 at 2): every window \
         within 0.29% (under) (tests/reference/data/trainer-cpu.json). Smaller runs are under by up to about 120 KB (candle's \
         tensor bookkeeping): a 1.3 MiB run's training step by 5.4% (trainer-cpu-random*.json). They exclude the data set and tokenizer."
        .to_string()];
    if pool_slabs_not_made_bound(opts) > 0 {
        notes.push(format!(
            "~ with 2 or more threads: every window may over-count, by up to one gemm buffer per pool thread but one \
             ({:.1} MiB each). A pool thread makes its buffer when rayon first hands it part of a product: early in a run, and \
             in a small run on a busy CPU even at its second step, one pool thread may have run them all. The model counts \
             every pool thread's from the first product split. Measured on 90 random runs at 2 and 4 threads: one to three \
             buffers over on 31 of their 360 windows, none a training step there \
             (tests/reference/data/trainer-cpu-random-pool.json); with another process busy, training steps too.",
            gemm_slab_bytes(opts) as f64 / (1u64 << 20) as f64
        ));
    }
    notes.push(format!(
        "~ gemm buffers: {:.1} MiB per thread that runs a matmul (the L2 size as gemm reads it) and the loss head's packed \
         operand (blocked by L1 and L3 as gemm blocks it), sized from this CPU's caches; measured only on one CPU's.",
        gemm_slab_bytes(opts) as f64 / (1u64 << 20) as f64
    ));
    notes.push(
        "On CUDA (`vramfit train --device cuda`) the trainer's tensors differ (no gemm buffers, candle's op-by-op kernels, \
         mixed precision for bfloat16 and float16): `vramfit plan --runtime trainer --device=cuda` plans that run."
            .to_string(),
    );
    if cfg.dtype != crate::Dtype::Float32 {
        notes.push(format!("dtype = {}: the trainer computes in float32 on CPU, which these figures show.", cfg.dtype.name()));
    }
    notes.extend(not_applying(cfg));
    notes
}

/// The notes of a CUDA plan (`vramfit train --device cuda`).
fn cuda_notes(cfg: &Config, opts: &TrainerOptions) -> Vec<String> {
    let precision = if opts.mixed() {
        format!("{} mixed precision (f32 master weights, layer norms and loss)", cfg.dtype.name())
    } else {
        "float32".to_string()
    };
    // The figures below are tests/reference/data/trainer-cuda-h100-*.json's and the whole runs of
    // trainer-cuda-h100-runs.txt.
    let mut notes = vec![
        format!(
            "Figures are vramfit's own trainer (candle, hand-written backward) on CUDA in {precision}: every tensor in CUDA's \
             memory pool, validated against the pool's high-water mark on an H100 (15 configs in float32, bfloat16 and \
             float16, every window within 0.02%; whole GPT-2 124M and 350M runs within 0.2 MiB)."
        ),
        "~ CUDA's own memory comes on top and is not modelled: the context, cuBLAS's workspace and the pool's cached \
         blocks (GPT-2 124M in bfloat16: the pool held 1.3 GiB beyond its 9.7 GiB of tensors on an H100). Compare with the \
         memory nvidia-smi shows free after a CUDA program started, with room to spare."
            .to_string(),
    ];
    notes.extend(not_applying(cfg));
    notes
}

/// Notes on the config's settings that the trainer does not have.
fn not_applying(cfg: &Config) -> Vec<String> {
    let mut notes = Vec::new();
    if cfg.attention == crate::Attention::Flash || cfg.compile {
        notes.push("attention and compile do not apply: the trainer always runs explicit causal attention, uncompiled.".to_string());
    }
    if cfg.optimizer == crate::Optimizer::Sgd {
        notes.push("optimizer = sgd does not apply: the trainer trains with AdamW, whose state these figures include.".to_string());
    }
    if cfg.expandable_segments {
        notes.push("expandable_segments does not apply: it is a setting of PyTorch's CUDA allocator.".to_string());
    }
    notes
}

#[cfg(test)]
mod plan_tests {
    use super::*;

    #[test]
    fn trainer_plan_reports_peaks_fit_and_auto_fit() {
        let cfg = Config {
            n_layer: 2,
            n_head: 2,
            n_embd: 64,
            block_size: 128,
            vocab_size: 500,
            batch_size: 16,
            gradient_accumulation_steps: 1,
            ..Config::default()
        };
        let opts = TrainerOptions::default();
        let p = plan(&cfg, &opts, None).expect("valid");
        assert_eq!(p.runtime, "trainer");
        // The plan's peak is its highest window.
        let windows = [&p.train, &p.eval, &p.first_iter, &p.eval_at_start];
        assert_eq!(p.peak_bytes, windows.iter().map(|w| w.peak_bytes).max().unwrap());
        assert!(windows.iter().all(|w| w.breakdown.total() == w.peak_bytes));
        assert!(p.fits.is_none() && p.largest_micro_batch.is_none() && p.auto_fit.is_none());
        let tight = plan(&cfg, &opts, Some(p.peak_bytes / 2)).expect("valid");
        assert_eq!(tight.fits, Some(false));
        let fitted = tight.auto_fit.expect("a smaller batch fits");
        assert!(fitted.batch_size < 16);
        // The largest micro-batch fits and one more does not; auto-fit takes it or a divisor of
        // the 16 sequences per iteration below it, keeping them.
        let largest = tight.largest_micro_batch.expect("some batch fits");
        let need = |b: u32| peak_bytes(&simulate(&Config { batch_size: b, ..cfg.clone() }, &opts));
        assert!(need(largest) <= p.peak_bytes / 2 && need(largest + 1) > p.peak_bytes / 2);
        assert!(fitted.batch_size <= largest && fitted.batch_size * 2 >= largest, "{} of {largest}", fitted.batch_size);
        assert_eq!(fitted.batch_size * fitted.gradient_accumulation_steps, 16);
        let roomy = plan(&cfg, &opts, Some(p.peak_bytes * 4)).expect("valid");
        assert_eq!(roomy.fits, Some(true));
        assert!(roomy.largest_micro_batch.is_some_and(|b| b > 16));
        assert!(plan(&Config { n_embd: 65, ..cfg }, &opts, None).is_err());
    }

    /// The validation note's figures are the measured file's, recomputed from its rows against
    /// today's model: run count, largest peak, and the worst window away from eval at start at 2+
    /// threads (which has a note of its own, only when it applies).
    #[test]
    fn the_validation_notes_state_the_measured_figures() {
        let data: serde_json::Value = serde_json::from_str(include_str!("../../tests/reference/data/trainer-cpu.json")).expect("json");
        let rows = data["rows"].as_array().expect("rows");
        let (mut smallest, mut largest, mut worst, mut threads) = (u64::MAX, 0u64, 0f64, [0usize; 2]);
        // Windows predicted over their measurement (the note says "under").
        let mut over = Vec::new();
        for row in rows {
            let run_peak = ["train", "first_iter", "eval", "eval_at_start"].map(|w| row["measured"][w].as_u64().expect("bytes"));
            smallest = smallest.min(run_peak.into_iter().max().unwrap_or(0));
            let cfg: Config = serde_json::from_value(row["config"].clone()).expect("config");
            let opts: TrainerOptions = serde_json::from_value(row["options"].clone()).expect("options");
            threads[usize::from(opts.cpu_threads >= 2)] += 1;
            let sim = simulate(&cfg, &opts);
            for (window, predicted) in sim.window_bytes() {
                let measured = row["measured"][window].as_u64().expect("measured bytes");
                largest = largest.max(measured);
                worst = worst.max((predicted as f64 - measured as f64).abs() / measured as f64);
                if predicted > measured {
                    over.push(format!("{} {window}: {predicted} > {measured}", row["id"]));
                }
            }
        }
        let cfg = Config { n_layer: 2, n_head: 2, n_embd: 64, block_size: 128, vocab_size: 500, ..Config::default() };
        let one = plan(&cfg, &TrainerOptions { cpu_threads: 1, ..Default::default() }, None).expect("valid").notes;
        let expected = [
            format!("on {} runs", rows.len()),
            format!("peaks {:.0} MiB to {:.1} GiB", smallest as f64 / (1u64 << 20) as f64, largest as f64 / (1u64 << 30) as f64),
            format!("{} at 1 thread and {} at 2", threads[0], threads[1]),
            format!("within {:.2}% (under)", worst * 100.0),
        ];
        for part in &expected {
            assert!(one[0].contains(part.as_str()), "{part:?} not in {:?}", one[0]);
        }
        assert!(over.is_empty(), "the note says every window is under its measurement: {over:?}");
        assert!(one.iter().any(|n| n.starts_with("~ gemm buffers: 2.0 MiB per thread")), "{one:?}");
        assert!(!one.iter().any(|n| n.starts_with("~ with 2 or more threads")), "{one:?}");
        // The small runs' shortfall: the most any window of the random runs is under, and the
        // worst training step's share with its run's size.
        let (mut most_under, mut worst_step) = (0u64, (0f64, 0u64));
        for json in [
            include_str!("../../tests/reference/data/trainer-cpu-random.json"),
            include_str!("../../tests/reference/data/trainer-cpu-random-pool.json"),
        ] {
            let data: serde_json::Value = serde_json::from_str(json).expect("json");
            for row in data["rows"].as_array().expect("rows") {
                let cfg: Config = serde_json::from_value(row["config"].clone()).expect("config");
                let opts: TrainerOptions = serde_json::from_value(row["options"].clone()).expect("options");
                let run_peak = ["train", "first_iter", "eval", "eval_at_start"].map(|w| row["measured"][w].as_u64().expect("bytes"));
                for (window, predicted) in simulate(&cfg, &opts).window_bytes() {
                    let measured = row["measured"][window].as_u64().expect("measured bytes");
                    let under = measured.saturating_sub(predicted);
                    most_under = most_under.max(under);
                    let share = under as f64 / measured as f64;
                    if window == "train" && share > worst_step.0 {
                        worst_step = (share, run_peak.into_iter().max().unwrap_or(0));
                    }
                }
            }
        }
        let kb_tens = (most_under as f64 / 10_000.0).ceil() * 10.0;
        let part = format!(
            "under by up to about {kb_tens:.0} KB (candle's tensor bookkeeping): a {1:.1} MiB run's training step by {0:.1}%",
            worst_step.0 * 100.0,
            worst_step.1 as f64 / (1u64 << 20) as f64
        );
        assert!(one[0].contains(part.as_str()), "{part:?} not in {:?}", one[0]);
        // The pool note's figures: the windows over by pool slabs in the random runs.
        let two = plan(&cfg, &TrainerOptions { cpu_threads: 2, ..Default::default() }, None).expect("valid").notes;
        let note = two.iter().find(|n| n.starts_with("~ with 2 or more threads")).unwrap_or_else(|| panic!("{two:?}"));
        let random: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/reference/data/trainer-cpu-random-pool.json")).expect("json");
        let random = random["rows"].as_array().expect("rows");
        let (mut windows, mut over, mut threads_seen, mut most_slabs) = (0, 0, Vec::new(), 0f64);
        for row in random {
            let cfg: Config = serde_json::from_value(row["config"].clone()).expect("config");
            let opts: TrainerOptions = serde_json::from_value(row["options"].clone()).expect("options");
            if !threads_seen.contains(&opts.cpu_threads) {
                threads_seen.push(opts.cpu_threads);
            }
            for (window, predicted) in simulate(&cfg, &opts).window_bytes() {
                windows += 1;
                let measured = row["measured"][window].as_u64().expect("measured bytes");
                if predicted > measured {
                    // Whole slabs, less what the model misses elsewhere (tens of KB); never more
                    // than the pool threads but one, never in the training step.
                    let slabs = (predicted - measured) as f64 / gemm_slab_bytes(&opts) as f64;
                    assert!(slabs.fract() > 0.9 && slabs < f64::from(opts.cpu_threads), "{} {window}: {slabs} slabs", row["name"]);
                    assert_ne!(window, "train", "{}", row["name"]);
                    most_slabs = most_slabs.max(slabs.ceil());
                    over += 1;
                }
            }
        }
        threads_seen.sort();
        assert_eq!(threads_seen, [2, 4]);
        let words = ["none", "one", "two", "three"];
        let part = format!(
            "{} random runs at 2 and 4 threads: one to {} buffers over on {over} of their {windows} windows, none a training step there",
            random.len(),
            words[most_slabs as usize]
        );
        assert!(note.contains("(2.0 MiB each)"), "{note}");
        assert!(note.contains(part.as_str()), "{part:?} not in {note:?}");
    }

    #[test]
    fn the_workspace_is_named_for_gemm() {
        assert_eq!(category_label(Category::Workspace), "gemm buffers");
    }
}
