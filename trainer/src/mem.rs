//! A counting global allocator: live bytes and their high-water mark, process-wide.
//!
//! `main.rs` installs [`CountingAlloc`] as the `#[global_allocator]`, and so do the memory bench and
//! tests, so "measured peak" means every heap byte the process asked for (candle's tensor storage,
//! gemm's packing buffers, Vecs) — the same quantity `vramfit_core::trainer_model` predicts.
//! Without the allocator installed, [`live`] and [`peak`] stay 0 and [`installed`] says so.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};

static LIVE: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting.
pub struct CountingAlloc;

fn grew(bytes: u64) {
    trace(bytes, 1);
    let now = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(bytes: u64) {
    trace(bytes, -1);
    LIVE.fetch_sub(bytes, Ordering::Relaxed);
}

// SAFETY: every call forwards to `System` with the caller's arguments unchanged; the counters are
// side bookkeeping that never touches the memory itself.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        INSTALLED.store(true, Ordering::Relaxed);
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size() as u64);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        INSTALLED.store(true, Ordering::Relaxed);
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size() as u64);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size() as u64);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if p == ptr {
                // Resized in place: only the difference comes or goes.
                if new_size >= layout.size() {
                    grew((new_size - layout.size()) as u64);
                } else {
                    shrank((layout.size() - new_size) as u64);
                }
            } else {
                // Moved: the new block was there before the old one left.
                grew(new_size as u64);
                shrank(layout.size() as u64);
            }
        }
        p
    }
}

/// Bytes currently allocated through the counting allocator.
pub fn live() -> u64 {
    LIVE.load(Ordering::Relaxed)
}

/// The most bytes live at once since the start or the last [`reset_peak`].
pub fn peak() -> u64 {
    PEAK.load(Ordering::Relaxed)
}

/// Starts a new high-water mark from what is live now.
pub fn reset_peak() {
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// Whether the counting allocator is the process's global allocator (it has seen an allocation).
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// An optional record of large allocations and frees (signed sizes, in order), for lining a run up
/// with core's event list. Off unless [`trace_start`] is called; it lives in a static array, so
/// recording never allocates.
const TRACE_LEN: usize = 1 << 18;
static TRACE: [AtomicI64; TRACE_LEN] = [const { AtomicI64::new(0) }; TRACE_LEN];
static TRACE_AT: AtomicUsize = AtomicUsize::new(0);
static TRACE_MIN: AtomicU64 = AtomicU64::new(u64::MAX);

fn trace(bytes: u64, sign: i64) {
    if bytes >= TRACE_MIN.load(Ordering::Relaxed) {
        let i = TRACE_AT.fetch_add(1, Ordering::Relaxed);
        if i < TRACE_LEN {
            TRACE[i].store(sign * bytes as i64, Ordering::Relaxed);
        }
    }
}

/// Starts recording allocations and frees of at least `min_bytes`.
pub fn trace_start(min_bytes: u64) {
    TRACE_AT.store(0, Ordering::Relaxed);
    TRACE_MIN.store(min_bytes, Ordering::Relaxed);
}

/// Stops recording and returns the events (+size for an allocation, -size for a free).
pub fn trace_stop() -> Vec<i64> {
    TRACE_MIN.store(u64::MAX, Ordering::Relaxed);
    let n = TRACE_AT.load(Ordering::Relaxed).min(TRACE_LEN);
    (0..n).map(|i| TRACE[i].load(Ordering::Relaxed)).collect()
}

/// Tells glibc's malloc to keep freed memory for reuse instead of returning it to the kernel.
///
/// By default glibc serves large blocks with fresh `mmap`s and trims the top of its heap as soon
/// as a few hundred KiB are free, so a training step that allocates and frees the same tensors
/// every iteration takes a page fault (and the kernel zeroes a page) for every 4 KiB of every
/// fresh tensor, each iteration: about a quarter of the default run's time. Serving blocks up to
/// 32 MiB (glibc's largest mmap threshold) from the heap and never trimming it makes later
/// iterations reuse the same memory. The counted bytes ([`live`], [`peak`]) do not change, but
/// resident memory does: the heap keeps its high-water extent, fragmentation included (measured:
/// 488 MiB resident for a 334 MiB counted peak, against 366 MiB with glibc's defaults). So
/// `train` calls this only when the predicted peak is at most half the memory available.
/// No-op off Linux/glibc.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn mallopt(param: i32, value: i32) -> i32;
        }
        // glibc's malloc.h.
        const M_TRIM_THRESHOLD: i32 = -1;
        const M_MMAP_THRESHOLD: i32 = -3;
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: mallopt only changes glibc malloc's tuning parameters; both values are in
            // the ranges glibc documents (mmap threshold at most 32 MiB on 64-bit).
            unsafe {
                mallopt(M_MMAP_THRESHOLD, 32 << 20);
                mallopt(M_TRIM_THRESHOLD, i32::MAX);
            }
        });
    }
}
