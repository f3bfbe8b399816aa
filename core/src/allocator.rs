//! PyTorch's CUDA caching allocator, as far as its byte counts go.
//!
//! `torch.cuda.max_memory_allocated()` counts *blocks*, not requests: a request is rounded up
//! to 512 bytes, served from a cached free block (best fit) or a new segment, and the block is
//! split only when enough would be left over. A block handed out whole counts whole. And
//! `max_memory_reserved()` (most of nvidia-smi's per-process figure) counts the segments the
//! allocator got from `cudaMalloc` and keeps. Both follow from a small set of rules,
//! implemented here as in `c10/cuda/CUDACachingAllocator.cpp` (PyTorch 2.x, default settings,
//! one stream):
//!
//! * requests are rounded up to multiples of 512 B (`kMinBlockSize`);
//! * requests of at most 1 MiB (`kSmallSize`) use the small pool, whose segments are 2 MiB
//!   (`kSmallBuffer`); larger ones use the large pool, with 20 MiB segments (`kLargeBuffer`)
//!   below 10 MiB (`kMinLargeAlloc`) and their own segment rounded up to 2 MiB (`kRoundLarge`)
//!   above;
//! * a request takes the smallest free block of its pool that is large enough (ties: lowest
//!   address, which is where cudaMalloc put the segments: [`AddressSpace`]); without one, a new
//!   segment;
//! * the block is split if the rest is at least 512 B (small pool) or more than 1 MiB (large
//!   pool); otherwise the whole block is handed out and counted;
//! * a freed block merges with free neighbours of its segment; segments are never returned
//!   (no `empty_cache()` in a training loop that fits).

/// Free blocks of one pool: a request takes the smallest one at least as large (lowest
/// address among equals). Blocks are kept in size classes (four per power of two), with a bit
/// per non-empty class. A class is a short unordered list: at a lookup the request's class
/// holds 0.7 blocks on average for GPT-2 124M eager, 6.5 for the 48-layer 1.5B (whose largest
/// class reaches about 200), 14 for 1,024 layers. A lookup scans its class for the best key, and
/// each free block knows its place in its list (`Block::pos`), so inserting is a push and
/// removing a swap with the last. Sorted lists spent their time in binary searches (whose
/// branches the CPU cannot predict) and shifting on every insert and remove. Also tried, by
/// callgrind on the page's work per slider step: a `BTreeSet` per pool (twice the
/// instructions), classes sorted by key (GPT-2 +9%, the 1.5B -4%), and classes kept as heaps
/// searched from the root (GPT-2 +7%, the 1.5B -2%).
#[derive(Clone, Debug)]
struct FreeList {
    classes: Box<[Vec<Entry>; CLASSES]>,
    non_empty: [u64; CLASS_WORDS],
}

/// A free block as its list holds it: the (size, address) that orders blocks, and its index.
#[derive(Clone, Copy, Debug)]
struct Entry {
    size: u64,
    addr: u64,
    idx: u32,
}

impl Entry {
    /// Blocks order by size, then address; addresses are unique, so this is a total order.
    #[inline(always)]
    fn key(&self) -> u128 {
        (self.size as u128) << 64 | self.addr as u128
    }
}

const CLASS_WORDS: usize = 4;
const CLASSES: usize = CLASS_WORDS * 64;

/// The size class of a block: monotonic in `size`, so classes partition sizes in order.
#[inline(always)]
fn size_class(size: u64) -> usize {
    let log2 = 63 - size.max(4).leading_zeros() as usize;
    let quarter = ((size >> (log2 - 2)) & 3) as usize;
    (log2 * 4 + quarter).min(CLASSES - 1)
}

impl FreeList {
    fn new() -> FreeList {
        FreeList { classes: Box::new(std::array::from_fn(|_| Vec::new())), non_empty: [0; CLASS_WORDS] }
    }

    /// Adds free block `idx` (its size and address as `blocks` has them).
    #[inline(always)]
    fn insert(&mut self, blocks: &mut [Block], idx: u32) {
        let b = &mut blocks[idx as usize];
        let c = size_class(b.size);
        let class = &mut self.classes[c];
        b.pos = class.len() as u32;
        b.class = c as u8;
        class.push(Entry { size: b.size, addr: b.addr, idx });
        self.non_empty[c / 64] |= 1 << (c % 64);
    }

    /// Takes free block `idx` out of the list.
    #[inline(always)]
    fn remove(&mut self, blocks: &mut [Block], idx: u32) {
        let b = blocks[idx as usize];
        self.remove_at(blocks, b.class as usize, b.pos as usize);
    }

    /// Removes the `at`-th entry of class `c`: the last entry takes its place.
    #[inline(always)]
    fn remove_at(&mut self, blocks: &mut [Block], c: usize, at: usize) {
        let class = &mut self.classes[c];
        class.swap_remove(at);
        if let Some(moved) = class.get(at) {
            blocks[moved.idx as usize].pos = at as u32;
        } else if class.is_empty() {
            self.non_empty[c / 64] &= !(1 << (c % 64));
        }
    }

    /// The smallest free block of at least `size` bytes (lowest address among equals), taken
    /// out of the list.
    #[inline]
    fn take_best_fit(&mut self, blocks: &mut [Block], size: u64) -> Option<u32> {
        let (c, at) = self.find_best_fit(size)?;
        let idx = self.classes[c][at].idx;
        self.remove_at(blocks, c, at);
        Some(idx)
    }

    /// The best entry of class `c` among those of at least `size` bytes: its place.
    #[inline(always)]
    fn best_in(&self, c: usize, size: u64) -> Option<usize> {
        let mut best: Option<(usize, u128)> = None;
        for (at, e) in self.classes[c].iter().enumerate() {
            if e.size >= size && best.is_none_or(|(_, k)| e.key() < k) {
                best = Some((at, e.key()));
            }
        }
        best.map(|(at, _)| at)
    }

    /// Where the best fit for `size` is: its class and its place in it.
    #[inline]
    fn find_best_fit(&self, size: u64) -> Option<(usize, usize)> {
        let first = size_class(size);
        // In the request's own class some blocks may be smaller than it.
        if let Some(at) = self.best_in(first, size) {
            return Some((first, at));
        }
        // Any block of a higher class is large enough: the first non-empty class has the best.
        let mut c = first + 1;
        while c < CLASSES {
            let bits = self.non_empty[c / 64] >> (c % 64);
            if bits != 0 {
                let c = c + bits.trailing_zeros() as usize;
                return self.best_in(c, 0).map(|at| (c, at));
            }
            c = (c / 64 + 1) * 64;
        }
        None
    }
}

/// Where cudaMalloc puts new segments in the process's virtual address space, which decides
/// the best fit between equal free blocks of different segments (lowest address wins).
///
/// Fitted to the six CUDA memory snapshots in `tests/reference/snapshots/` (H100 and H200): the
/// driver reserves address space in chunks of the segment's size rounded up to 32 MiB, each new
/// chunk directly below the lowest one so far; a segment first goes into the unused top of an
/// existing chunk (the lowest such gap that is large enough, filled from its bottom up) and
/// takes a new chunk only when none is. So a newer large segment lies *below* the older ones,
/// and small segments fill the newest chunk's leftover upwards. In those snapshots (in-sample)
/// this orders every pair of equal segments of 96 MiB or more as measured (47 of 47; creation
/// order: 0), as each new segment simply below the last would too; the chunks add the order of
/// smaller equal segments (74% of equal pairs, against 66% and creation order's 34%; scores by
/// `tests/reference/probes/segment_order.py`). What it does not see (the driver's, cuBLAS' and
/// the kernels' own mappings) shifts exact addresses, not the order of large segments.
#[derive(Clone, Debug)]
struct AddressSpace {
    /// Unused tops of reserved chunks, `[start, end)`.
    gaps: Vec<(u64, u64)>,
    /// The lowest reserved address so far.
    low: u64,
}

/// Address-space chunks are multiples of this (see [`AddressSpace`]).
const VA_CHUNK: u64 = 32 << 20;

impl AddressSpace {
    fn new() -> AddressSpace {
        // Far from zero (chunks grow down) and below the expandable pool (`1 << 62`).
        AddressSpace { gaps: Vec::new(), low: 1 << 61 }
    }

    /// The address of a new segment of `size` bytes (a multiple of 2 MiB).
    fn place(&mut self, size: u64) -> u64 {
        let gap = self.gaps.iter_mut().filter(|(start, end)| end - start >= size).min_by_key(|(start, _)| *start);
        if let Some(gap) = gap {
            let addr = gap.0;
            gap.0 += size;
            self.gaps.retain(|(start, end)| start < end);
            return addr;
        }
        let chunk = size.div_ceil(VA_CHUNK) * VA_CHUNK;
        // Validated configs reserve far less than the 2^61 bytes below the start; saturating
        // keeps an absurd one from wrapping (its order would then be wrong, never a panic).
        self.low = self.low.saturating_sub(chunk);
        if chunk > size {
            self.gaps.push((self.low + size, self.low + chunk));
        }
        self.low
    }
}

const MIN_BLOCK: u64 = 512;
const SMALL_SIZE: u64 = 1 << 20;
const SMALL_BUFFER: u64 = 2 << 20;
const LARGE_BUFFER: u64 = 20 << 20;
const MIN_LARGE_ALLOC: u64 = 10 << 20;
const ROUND_LARGE: u64 = 2 << 20;

#[derive(Clone, Copy, Debug)]
struct Block {
    size: u64,
    /// Address: its segment's (see [`AddressSpace`]) plus its offset there.
    addr: u64,
    prev: u32,
    next: u32,
    /// Its place in its free list's class, while it is free.
    pos: u32,
    /// Its size class, while it is free.
    class: u8,
    free: bool,
    small: bool,
}

const NONE: u32 = u32::MAX;

/// Where the expandable large pool starts (above every segment), and the ordinal
/// [`CachingAllocator::place`] gives it.
const EXPANDABLE_BASE: u64 = 1 << 62;
const EXPANDABLE_SEGMENT: u64 = 1 << 22;

/// The allocator's state.
#[derive(Clone, Debug)]
pub struct CachingAllocator {
    blocks: Vec<Block>,
    /// Free blocks by (size, address, index), per pool.
    free_small: FreeList,
    free_large: FreeList,
    /// Indices of dead block records, for reuse.
    spare: Vec<u32>,
    pub allocated: u64,
    pub reserved: u64,
    /// Where new segments go, and where the segments are (base and size, in creation order).
    address_space: AddressSpace,
    segment_bases: Vec<(u64, u64)>,
    /// `expandable_segments:True`: the large pool is one segment that grows in 2 MiB steps (PyTorch
    /// maps 20 MiB pages for the large pool, `kLargeBuffer`; 20 MiB steps matched the 8 measured
    /// configs' reserve better at the median, 0.04% against 0.50%, but worse at the worst window,
    /// 13.5% against 6.6%, so the steps stay 2 MiB until that is understood),
    /// and its blocks are split whenever 512 bytes or more would be left over.
    expandable: bool,
    /// The large pool's last block (highest address) when expandable.
    tail: u32,
}

/// SplitMix64's finalizer: a 64-bit value to a well-mixed one, for [`CachingAllocator::layout_hash`].
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Rounds a request the way the allocator does.
pub fn round_size(bytes: u64) -> u64 {
    if bytes < MIN_BLOCK {
        MIN_BLOCK
    } else {
        bytes.div_ceil(MIN_BLOCK) * MIN_BLOCK
    }
}

fn segment_size(size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

impl Default for CachingAllocator {
    fn default() -> Self {
        Self::new()
    }
}

impl CachingAllocator {
    pub fn new() -> Self {
        CachingAllocator {
            blocks: Vec::new(),
            free_small: FreeList::new(),
            free_large: FreeList::new(),
            spare: Vec::new(),
            allocated: 0,
            reserved: 0,
            address_space: AddressSpace::new(),
            segment_bases: Vec::new(),
            expandable: false,
            tail: NONE,
        }
    }

    /// The allocator with or without `expandable_segments`, as the config asks.
    pub fn configured(expandable_segments: bool) -> Self {
        if expandable_segments {
            Self::expandable()
        } else {
            Self::new()
        }
    }

    /// The allocator under `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
    pub fn expandable() -> Self {
        CachingAllocator { expandable: true, ..Self::new() }
    }

    /// Grows the expandable large segment so that a block of `size` exists at its end.
    fn grow(&mut self, size: u64) -> u32 {
        let tail = self.tail;
        if tail != NONE && self.blocks[tail as usize].free {
            // The free block at the end grows by the pages it lacks.
            let t = self.blocks[tail as usize];
            self.free_large.remove(&mut self.blocks, tail);
            let grow = (size - t.size).div_ceil(ROUND_LARGE) * ROUND_LARGE;
            self.reserved += grow;
            self.blocks[tail as usize].size += grow;
            return tail;
        }
        let pages = size.div_ceil(ROUND_LARGE) * ROUND_LARGE;
        self.reserved += pages;
        let addr = if tail == NONE { EXPANDABLE_BASE } else { self.blocks[tail as usize].addr + self.blocks[tail as usize].size };
        let b = self.new_block(Block { size: pages, addr, prev: tail, next: NONE, pos: NONE, class: 0, free: true, small: false });
        if tail != NONE {
            self.blocks[tail as usize].next = b;
        }
        self.tail = b;
        b
    }

    /// The free list of a pool, and the blocks (which its entries point into).
    #[inline(always)]
    fn pool(&mut self, small: bool) -> (&mut FreeList, &mut Vec<Block>) {
        if small {
            (&mut self.free_small, &mut self.blocks)
        } else {
            (&mut self.free_large, &mut self.blocks)
        }
    }

    fn new_block(&mut self, b: Block) -> u32 {
        if let Some(i) = self.spare.pop() {
            self.blocks[i as usize] = b;
            i
        } else {
            self.blocks.push(b);
            (self.blocks.len() - 1) as u32
        }
    }

    /// Serves a request; returns the block's handle and its size (what `allocated` counts).
    // Inlined into the exact simulation's one call site (a call costs its hot path about 5%
    // under the page's size optimization); other callers take `malloc_block`.
    #[inline(always)]
    pub fn malloc(&mut self, bytes: u64) -> (u32, u64) {
        let size = round_size(bytes);
        let small = size <= SMALL_SIZE;
        let (list, blocks) = self.pool(small);
        let idx = match list.take_best_fit(blocks, size) {
            Some(idx) => idx,
            None if self.expandable && !small => self.grow(size),
            None => {
                let seg = segment_size(size);
                let addr = self.address_space.place(seg);
                self.segment_bases.push((addr, seg));
                self.reserved += seg;
                self.new_block(Block { size: seg, addr, prev: NONE, next: NONE, pos: NONE, class: 0, free: true, small })
            }
        };
        let Block { size: found, addr, next, .. } = self.blocks[idx as usize];
        let remaining = found - size;
        let split = if small || self.expandable { remaining >= MIN_BLOCK } else { remaining > SMALL_SIZE };
        let b = if split {
            // The request keeps the front; the rest becomes a free block after it.
            let rest = Block { size: remaining, addr: addr + size, prev: idx, next, pos: NONE, class: 0, free: true, small };
            let r = self.new_block(rest);
            if next != NONE {
                self.blocks[next as usize].prev = r;
            }
            if self.tail == idx {
                self.tail = r;
            }
            let (list, blocks) = self.pool(small);
            list.insert(blocks, r);
            let b = &mut self.blocks[idx as usize];
            b.size = size;
            b.next = r;
            b
        } else {
            &mut self.blocks[idx as usize]
        };
        b.free = false;
        let counted = b.size;
        self.allocated += counted;
        (idx, counted)
    }

    /// A hash of every block, live or free (address, size, whether free), in any order: two
    /// allocators with the same layout serve the same requests the same way. The sum of
    /// [`CachingAllocator::layout_hashes`].
    pub fn layout_hash(&self) -> u64 {
        // Dead records (merged away, waiting in `spare`) have size 0.
        self.blocks.iter().filter(|b| b.size > 0).map(|b| mix(mix(b.addr) ^ b.size ^ (b.free as u64) << 63)).fold(0, u64::wrapping_add)
    }

    /// A hash of every block of each pool, live or free (address, size, whether free), in any
    /// order: (small pool, large pool). Two pools with the same layout serve the same requests
    /// the same way, and the pools are independent while neither takes a new segment (only
    /// segments share the address space), so each pool's layout can be compared on its own.
    pub fn layout_hashes(&self) -> (u64, u64) {
        let (mut small, mut large) = (0u64, 0u64);
        for b in &self.blocks {
            // Dead records (merged away, waiting in `spare`) have size 0.
            if b.size > 0 {
                let h = mix(mix(b.addr) ^ b.size ^ (b.free as u64) << 63);
                if b.small {
                    small = small.wrapping_add(h);
                } else {
                    large = large.wrapping_add(h);
                }
            }
        }
        (small, large)
    }

    /// Whether block `idx` is in the small pool.
    pub fn is_small(&self, idx: u32) -> bool {
        self.blocks[idx as usize].small
    }

    /// Whether a request of `bytes` is served from the small pool.
    pub fn is_small_request(bytes: u64) -> bool {
        round_size(bytes) <= SMALL_SIZE
    }

    /// What PyTorch's `release_cached_blocks` could hand back to CUDA now: every segment that
    /// holds no live block (one free block, unsplit). The expandable pool unmaps free pages
    /// instead, which this does not model (none counted there).
    pub fn releasable_bytes(&self) -> u64 {
        let whole = |b: &Block| b.size > 0 && b.free && b.prev == NONE && b.next == NONE;
        self.blocks.iter().filter(|b| whole(b) && (b.small || !self.expandable)).map(|b| b.size).sum()
    }

    /// The address of block `idx`.
    pub fn addr(&self, idx: u32) -> u64 {
        self.blocks[idx as usize].addr
    }

    /// Where a live block lies: its segment's creation ordinal and its offset in the segment
    /// (the expandable pool is segment `1 << 22`).
    pub fn place(&self, idx: u32) -> (u64, u64) {
        let addr = self.blocks[idx as usize].addr;
        match self.segment_bases.iter().position(|&(base, size)| (base..base + size).contains(&addr)) {
            Some(ordinal) => (ordinal as u64, addr - self.segment_bases[ordinal].0),
            None => (EXPANDABLE_SEGMENT, addr - EXPANDABLE_BASE),
        }
    }

    /// [`CachingAllocator::malloc`] out of line: the block's handle.
    #[inline(never)]
    pub fn malloc_block(&mut self, bytes: u64) -> u32 {
        self.malloc(bytes).0
    }

    /// [`CachingAllocator::free`] out of line.
    #[inline(never)]
    pub fn free_block(&mut self, idx: u32) {
        self.free(idx)
    }

    /// Returns a block; it merges with free neighbours in its segment.
    // Inlined as `malloc` is; other callers take `free_block`.
    #[inline(always)]
    pub fn free(&mut self, idx: u32) {
        let Block { mut size, mut addr, mut prev, mut next, small, .. } = self.blocks[idx as usize];
        debug_assert!(!self.blocks[idx as usize].free);
        self.allocated -= size;
        let (list, blocks) = if small { (&mut self.free_small, &mut self.blocks) } else { (&mut self.free_large, &mut self.blocks) };
        // Merge with the previous block.
        if prev != NONE && blocks[prev as usize].free {
            let p = prev;
            list.remove(blocks, p);
            let pb = &mut blocks[p as usize];
            size += pb.size;
            addr = pb.addr;
            prev = pb.prev;
            pb.size = 0;
            if prev != NONE {
                blocks[prev as usize].next = idx;
            }
            self.spare.push(p);
        }
        // Merge with the next block.
        if next != NONE && blocks[next as usize].free {
            let n = next;
            list.remove(blocks, n);
            let nb = &mut blocks[n as usize];
            size += nb.size;
            next = nb.next;
            nb.size = 0;
            if next != NONE {
                blocks[next as usize].prev = idx;
            }
            if self.tail == n {
                self.tail = idx;
            }
            self.spare.push(n);
        }
        let b = &mut blocks[idx as usize];
        b.size = size;
        b.addr = addr;
        b.prev = prev;
        b.next = next;
        b.free = true;
        list.insert(blocks, idx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic stream of pseudo-random numbers (xorshift64) for the randomized tests.
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    #[test]
    fn free_list_best_fit_matches_a_plain_sorted_list() {
        // Random inserts, removes, queries and takes over sizes from 512 B to 4 GiB, against
        // the definition: the smallest (size, address) with size >= the request. Addresses
        // repeat in their high bits (the segment) so that equal sizes tie on them.
        let mut list = FreeList::new();
        let mut blocks: Vec<Block> = Vec::new();
        let mut plain: Vec<(u64, u64, u32)> = Vec::new();
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        for i in 0..20_000u32 {
            let size = 512 * (1 + next() % (1 << (next() % 23)));
            match next() % 4 {
                0 => {
                    let key = (size, (next() % 64) << 40 | i as u64, blocks.len() as u32);
                    blocks.push(Block { size, addr: key.1, prev: NONE, next: NONE, pos: NONE, class: 0, free: true, small: false });
                    list.insert(&mut blocks, key.2);
                    plain.push(key);
                }
                1 if !plain.is_empty() => {
                    let key = plain.swap_remove((next() % plain.len() as u64) as usize);
                    list.remove(&mut blocks, key.2);
                }
                2 => {
                    let best = plain.iter().enumerate().filter(|(_, k)| k.0 >= size).min_by_key(|(_, k)| (k.0, k.1));
                    let expected = best.map(|(at, k)| (at, k.2));
                    assert_eq!(list.take_best_fit(&mut blocks, size), expected.map(|e| e.1), "take {size}");
                    if let Some((at, _)) = expected {
                        plain.swap_remove(at);
                    }
                }
                _ => {
                    let expected = plain.iter().filter(|k| k.0 >= size).min().map(|k| k.2);
                    let found = list.find_best_fit(size).map(|(c, at)| list.classes[c][at].idx);
                    assert_eq!(found, expected, "request {size}");
                }
            }
        }
    }

    #[test]
    fn new_chunks_go_below_and_segments_fill_the_lowest_gap_upwards() {
        const MIB: u64 = 1 << 20;
        let mut va = AddressSpace::new();
        let a = va.place(394 * MIB);
        let b = va.place(394 * MIB);
        let c = va.place(786 * MIB);
        // Chunks are rounded up to 32 MiB, each directly below the last.
        assert_eq!((a - b, b - c), (416 * MIB, 800 * MIB));
        // 2 MiB fits the lowest gap (786's, 14 MiB left): at its bottom, then upwards.
        let d = va.place(2 * MIB);
        let e = va.place(2 * MIB);
        assert_eq!((d, e), (c + 786 * MIB, c + 788 * MIB));
        // 20 MiB no longer fits there (10 MiB left); the next gap up (b's 22 MiB) takes it.
        assert_eq!(va.place(20 * MIB), b + 394 * MIB);
        // 40 MiB fits no gap: a new 64 MiB chunk below everything.
        assert_eq!(va.place(40 * MIB), c - 64 * MIB);
    }

    #[test]
    fn of_two_equal_free_segments_the_newer_one_is_taken() {
        let mut a = CachingAllocator::new();
        let (x, _) = a.malloc(394 << 20);
        let (y, _) = a.malloc(394 << 20);
        let (old, new) = (a.addr(x), a.addr(y));
        assert!(new < old, "a newer segment lies below");
        a.free(x);
        a.free(y);
        let (z, _) = a.malloc(394 << 20);
        assert_eq!(a.addr(z), new);
        assert_eq!(a.place(z), (1, 0), "segment ordinals count in creation order");
        // A small request's 2 MiB segment goes into the gap above the newest 394 MiB segment
        // (its 416 MiB chunk's top): it is still its own segment, the third.
        let (s, _) = a.malloc(1000);
        assert_eq!(a.addr(s), new + (394 << 20));
        assert_eq!(a.place(s), (2, 0));
        let (t, _) = a.malloc(1000);
        assert_eq!(a.place(t), (2, 1024));
    }

    #[test]
    fn expandable_segments_grow_in_pages_and_split_exactly() {
        let mut a = CachingAllocator::expandable();
        let (x, s) = a.malloc(3 << 20);
        assert_eq!((s, a.reserved), (3 << 20, 4 << 20));
        // 1 MiB is left at the end; the next 2 MiB grows it by one page instead of a segment.
        let (_, s) = a.malloc(2 << 20);
        assert_eq!((s, a.reserved), (2 << 20, 6 << 20));
        a.free(x);
        // The freed 3 MiB at the front is reused for 2.5 MiB, split exactly.
        let (_, s) = a.malloc(5 << 19);
        assert_eq!((s, a.reserved), (5 << 19, 6 << 20));
    }

    #[test]
    fn small_requests_share_a_2_mib_segment() {
        let mut a = CachingAllocator::new();
        let (x, sx) = a.malloc(100);
        let (_, sy) = a.malloc(1000);
        assert_eq!((sx, sy), (512, 1024));
        assert_eq!(a.reserved, 2 << 20);
        a.free(x);
        assert_eq!(a.allocated, 1024);
    }

    #[test]
    fn large_blocks_are_not_split_when_less_than_1_mib_would_remain() {
        let mut a = CachingAllocator::new();
        // 11.5 MiB -> a 12 MiB segment, 0.5 MiB would remain: handed out (and counted) whole.
        let (_, s) = a.malloc(11 * (1 << 20) + (1 << 19));
        assert_eq!(s, 12 << 20);
        // 10.5 MiB -> 12 MiB segment, 1.5 MiB would remain: split.
        let (_, s) = a.malloc(10 * (1 << 20) + (1 << 19));
        assert_eq!(s, 10 * (1 << 20) + (1 << 19));
        assert_eq!(a.reserved, 24 << 20);
    }

    #[test]
    fn freed_blocks_merge_and_are_reused_best_fit() {
        let mut a = CachingAllocator::new();
        let (x, _) = a.malloc(3 << 20); // from a 20 MiB segment
        let (y, _) = a.malloc(3 << 20);
        a.free(x);
        a.free(y); // merges with x and the 14 MiB rest: one free 20 MiB block
        let (_, s) = a.malloc(19 << 20 | 1 << 19); // 19.5 MiB: fits the 20 MiB block, 0.5 left: whole
        assert_eq!(s, 20 << 20);
        assert_eq!(a.reserved, 20 << 20);
        assert_eq!(a.allocated, 20 << 20);
    }

    /// Every invariant the allocator's tables must keep, checked from scratch: each segment's
    /// blocks tile it in address order through prev/next, no two free blocks are neighbours (a
    /// free merges them), each free block is in its pool's list at the place and class it
    /// records, the lists hold nothing else, and `allocated` is the sum of the blocks in use.
    fn check_tables(a: &CachingAllocator, live: &[u32]) {
        let mut dead: Vec<u32> = a.spare.clone();
        dead.sort_unstable();
        let is_dead = |i: u32| dead.binary_search(&i).is_ok();
        let mut in_lists = 0;
        for (small, list) in [(true, &a.free_small), (false, &a.free_large)] {
            for (c, class) in list.classes.iter().enumerate() {
                assert_eq!(class.is_empty(), list.non_empty[c / 64] & (1 << (c % 64)) == 0, "class {c}'s bit");
                for (at, e) in class.iter().enumerate() {
                    let b = a.blocks[e.idx as usize];
                    assert!(b.free && b.small == small && !is_dead(e.idx), "entry {e:?} is a free block of its pool");
                    assert_eq!((b.size, b.addr, b.pos as usize, b.class as usize), (e.size, e.addr, at, c), "entry {e:?}");
                    assert_eq!(size_class(b.size), c);
                    in_lists += 1;
                }
            }
        }
        let mut free_blocks = 0;
        let mut used = 0;
        for (i, b) in a.blocks.iter().enumerate() {
            let i = i as u32;
            if is_dead(i) {
                continue;
            }
            if b.free {
                free_blocks += 1;
            } else {
                used += b.size;
            }
            if b.next != NONE {
                let n = a.blocks[b.next as usize];
                assert_eq!((n.prev, n.addr), (i, b.addr + b.size), "block {i} and the next");
                assert!(!(b.free && n.free), "free neighbours {i} and {} were not merged", b.next);
            }
            if b.prev != NONE {
                assert_eq!(a.blocks[b.prev as usize].next, i);
            }
        }
        assert_eq!(free_blocks, in_lists, "every free block is listed once");
        assert_eq!(used, a.allocated);
        assert!(live.iter().all(|&h| !a.blocks[h as usize].free));
    }

    #[test]
    fn random_requests_keep_every_table_consistent() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        for mut a in [CachingAllocator::new(), CachingAllocator::expandable()] {
            let mut live: Vec<u32> = Vec::new();
            for step in 0..6_000 {
                // Sizes from a few bytes to ~64 MiB, many repeated, as a training loop's are.
                let bytes = match next() % 4 {
                    0 => 1 + next() % 4096,
                    1 => (1 + next() % 8) << 18,
                    2 => (1 + next() % 6) * (3 << 20),
                    _ => 1 + next() % (64 << 20),
                };
                if live.is_empty() || next() % 5 < 3 {
                    let (h, counted) = a.malloc(bytes);
                    assert!(counted >= round_size(bytes));
                    live.push(h);
                } else {
                    let h = live.swap_remove((next() % live.len() as u64) as usize);
                    a.free(h);
                }
                if step % 97 == 0 {
                    check_tables(&a, &live);
                }
            }
            for h in live.drain(..) {
                a.free(h);
            }
            check_tables(&a, &live);
            assert_eq!(a.allocated, 0);
        }
    }
}
