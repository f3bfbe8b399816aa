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
//!   address); without one, a new segment;
//! * the block is split if the rest is at least 512 B (small pool) or more than 1 MiB (large
//!   pool); otherwise the whole block is handed out and counted;
//! * a freed block merges with free neighbours of its segment; segments are never returned
//!   (no `empty_cache()` in a training loop that fits).

/// Free blocks of one pool: a request takes the smallest one at least as large (lowest
/// address among equals). Blocks are kept in size classes (four per power of two), each a
/// vector sorted by (size, address, index), with a bit per non-empty class: a pool of a
/// 48-layer model holds hundreds of free blocks, and one sorted vector spent most of the
/// simulation moving them on every insert and remove.
#[derive(Clone, Debug, Default)]
struct FreeList {
    classes: Vec<Vec<(u64, u64, u32)>>,
    non_empty: [u64; CLASS_WORDS],
}

const CLASS_WORDS: usize = 4;

/// The size class of a block: monotonic in `size`, so classes partition sizes in order.
fn size_class(size: u64) -> usize {
    let log2 = 63 - size.max(4).leading_zeros() as usize;
    let quarter = ((size >> (log2 - 2)) & 3) as usize;
    (log2 * 4 + quarter).min(CLASS_WORDS * 64 - 1)
}

impl FreeList {
    #[inline(always)]
    fn insert(&mut self, key: (u64, u64, u32)) {
        let c = size_class(key.0);
        if self.classes.len() <= c {
            self.classes.resize_with(c + 1, Vec::new);
        }
        let class = &mut self.classes[c];
        let at = class.partition_point(|k| *k < key);
        class.insert(at, key);
        self.non_empty[c / 64] |= 1 << (c % 64);
    }
    #[inline(always)]
    fn remove(&mut self, key: &(u64, u64, u32)) {
        let c = size_class(key.0);
        let Some(class) = self.classes.get_mut(c) else { return };
        if let Ok(at) = class.binary_search(key) {
            self.remove_at(c, at);
        }
    }

    /// Removes the `at`-th block of class `c`.
    #[inline]
    fn remove_at(&mut self, c: usize, at: usize) {
        let class = &mut self.classes[c];
        if at + 1 == class.len() {
            // The last one (often the only one): no shifting.
            class.pop();
        } else {
            class.remove(at);
        }
        if class.is_empty() {
            self.non_empty[c / 64] &= !(1 << (c % 64));
        }
    }

    /// [`FreeList::best_fit`], taken out of the list.
    fn take_best_fit(&mut self, size: u64) -> Option<(u64, u64, u32)> {
        let (c, at) = self.find_best_fit(size)?;
        let key = self.classes[c][at];
        self.remove_at(c, at);
        Some(key)
    }
    /// The smallest free block of at least `size` bytes (lowest address among equals).
    #[cfg(test)]
    fn best_fit(&self, size: u64) -> Option<(u64, u64, u32)> {
        self.find_best_fit(size).map(|(c, at)| self.classes[c][at])
    }

    /// Where [`FreeList::best_fit`]'s block is: its class and its place in it.
    #[inline]
    fn find_best_fit(&self, size: u64) -> Option<(usize, usize)> {
        let first = size_class(size);
        // In the request's own class some blocks may be smaller than it.
        if let Some(class) = self.classes.get(first) {
            let at = class.partition_point(|k| k.0 < size);
            if at < class.len() {
                return Some((first, at));
            }
        }
        // Any block of a higher class is large enough: the first non-empty class has the best.
        let mut c = first + 1;
        while c < CLASS_WORDS * 64 {
            let bits = self.non_empty[c / 64] >> (c % 64);
            if bits != 0 {
                return Some((c + bits.trailing_zeros() as usize, 0));
            }
            c = (c / 64 + 1) * 64;
        }
        None
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
    /// Address: segment index in the high bits, offset in the low (segments are ordered by
    /// creation, as cudaMalloc tends to hand out increasing addresses).
    addr: u64,
    prev: u32,
    next: u32,
    free: bool,
    small: bool,
}

const NONE: u32 = u32::MAX;

/// The allocator's state.
#[derive(Clone, Debug, Default)]
pub struct CachingAllocator {
    blocks: Vec<Block>,
    /// Free blocks by (size, address, index), per pool.
    free_small: FreeList,
    free_large: FreeList,
    /// Indices of dead block records, for reuse.
    spare: Vec<u32>,
    segments: u64,
    pub allocated: u64,
    pub reserved: u64,
    /// `expandable_segments:True`: the large pool is one segment that grows in 2 MiB pages,
    /// and its blocks are split whenever 512 bytes or more would be left over.
    expandable: bool,
    /// The large pool's last block (highest address) when expandable.
    tail: u32,
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

impl CachingAllocator {
    pub fn new() -> Self {
        CachingAllocator { tail: NONE, ..Self::default() }
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
        CachingAllocator { expandable: true, tail: NONE, ..Self::default() }
    }

    /// Grows the expandable large segment so that a block of `size` exists at its end.
    fn grow(&mut self, size: u64) -> u32 {
        let tail = self.tail;
        if tail != NONE && self.blocks[tail as usize].free {
            // The free block at the end grows by the pages it lacks.
            let t = self.blocks[tail as usize];
            self.free_large.remove(&(t.size, t.addr, tail));
            let grow = (size - t.size).div_ceil(ROUND_LARGE) * ROUND_LARGE;
            self.reserved += grow;
            self.blocks[tail as usize].size += grow;
            return tail;
        }
        let pages = size.div_ceil(ROUND_LARGE) * ROUND_LARGE;
        self.reserved += pages;
        let addr = if tail == NONE { 1 << 62 } else { self.blocks[tail as usize].addr + self.blocks[tail as usize].size };
        let b = self.new_block(Block { size: pages, addr, prev: tail, next: NONE, free: true, small: false });
        if tail != NONE {
            self.blocks[tail as usize].next = b;
        }
        self.tail = b;
        b
    }

    fn pool(&mut self, small: bool) -> &mut FreeList {
        if small {
            &mut self.free_small
        } else {
            &mut self.free_large
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
    pub fn malloc(&mut self, bytes: u64) -> (u32, u64) {
        let size = round_size(bytes);
        let small = size <= SMALL_SIZE;
        let found = self.pool(small).take_best_fit(size);
        let idx = match found {
            Some(key) => key.2,
            None if self.expandable && !small => self.grow(size),
            None => {
                let seg = segment_size(size);
                let addr = self.segments << 40;
                self.segments += 1;
                self.reserved += seg;
                self.new_block(Block { size: seg, addr, prev: NONE, next: NONE, free: true, small })
            }
        };
        let block = self.blocks[idx as usize];
        let remaining = block.size - size;
        let split = if small || self.expandable { remaining >= MIN_BLOCK } else { remaining > SMALL_SIZE };
        if split {
            // The request keeps the front; the rest becomes a free block after it.
            let rest = Block { size: remaining, addr: block.addr + size, prev: idx, next: block.next, free: true, small };
            let r = self.new_block(rest);
            if block.next != NONE {
                self.blocks[block.next as usize].prev = r;
            }
            if self.tail == idx {
                self.tail = r;
            }
            let b = &mut self.blocks[idx as usize];
            b.size = size;
            b.next = r;
            self.pool(small).insert((remaining, rest.addr, r));
        }
        let b = &mut self.blocks[idx as usize];
        b.free = false;
        let counted = b.size;
        self.allocated += counted;
        (idx, counted)
    }

    /// Where a live block lies: its segment's creation ordinal and its offset in the segment
    /// (the expandable pool is segment `1 << 22`).
    pub fn place(&self, idx: u32) -> (u64, u64) {
        let addr = self.blocks[idx as usize].addr;
        (addr >> 40, addr & ((1 << 40) - 1))
    }

    /// Returns a block; it merges with free neighbours in its segment.
    pub fn free(&mut self, idx: u32) {
        let mut b = self.blocks[idx as usize];
        debug_assert!(!b.free);
        self.allocated -= b.size;
        let small = b.small;
        // Merge with the previous block.
        if b.prev != NONE && self.blocks[b.prev as usize].free {
            let p = b.prev;
            let pb = self.blocks[p as usize];
            self.pool(small).remove(&(pb.size, pb.addr, p));
            b.size += pb.size;
            b.addr = pb.addr;
            b.prev = pb.prev;
            if pb.prev != NONE {
                self.blocks[pb.prev as usize].next = idx;
            }
            self.spare.push(p);
        }
        // Merge with the next block.
        if b.next != NONE && self.blocks[b.next as usize].free {
            let n = b.next;
            let nb = self.blocks[n as usize];
            self.pool(small).remove(&(nb.size, nb.addr, n));
            b.size += nb.size;
            b.next = nb.next;
            if nb.next != NONE {
                self.blocks[nb.next as usize].prev = idx;
            }
            if self.tail == n {
                self.tail = idx;
            }
            self.spare.push(n);
        }
        b.free = true;
        self.blocks[idx as usize] = b;
        self.pool(small).insert((b.size, b.addr, idx));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_list_best_fit_matches_a_plain_sorted_list() {
        // Random inserts, removes and queries over sizes from 512 B to 4 GiB, against the
        // definition: the smallest (size, address, index) with size >= the request.
        let mut list = FreeList::default();
        let mut plain: Vec<(u64, u64, u32)> = Vec::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..20_000u32 {
            let size = 512 * (1 + next() % (1 << (next() % 23)));
            match next() % 3 {
                0 => {
                    let key = (size, next() % 64, i);
                    list.insert(key);
                    plain.push(key);
                }
                1 if !plain.is_empty() => {
                    let key = plain.swap_remove((next() % plain.len() as u64) as usize);
                    list.remove(&key);
                }
                _ => {
                    let expected = plain.iter().filter(|k| k.0 >= size).min().copied();
                    assert_eq!(list.best_fit(size), expected, "request {size}");
                }
            }
        }
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
}
