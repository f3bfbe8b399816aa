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
/// Whether a refused allocation ends the process with one clear line ([`exit_when_memory_runs_out`]).
static EXIT_WHEN_REFUSED: AtomicBool = AtomicBool::new(false);
/// Whether a CPU training run's pre-flight has run (the line then speaks of the run), and its
/// figures: the predicted peak and the memory available (`u64::MAX`: no limit known).
static TRAINING: AtomicBool = AtomicBool::new(false);
static PLANNED_PEAK: AtomicU64 = AtomicU64::new(0);
static PLANNED_AVAILABLE: AtomicU64 = AtomicU64::new(u64::MAX);
/// Set by the first thread to report a refusal; any other stops and waits for the exit.
static REPORTED: AtomicBool = AtomicBool::new(false);

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
        if p.is_null() {
            refused(layout.size());
        } else {
            grew(layout.size() as u64);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        INSTALLED.store(true, Ordering::Relaxed);
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            refused(layout.size());
        } else {
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
        if p.is_null() {
            refused(new_size);
        } else {
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

/// From now on, an allocation the system refuses ends the process with one line on stderr,
/// `error: out of memory: ...` (what was asked, what the process held, what the pre-flight
/// planned), and exit code 1. Without it Rust prints "memory allocation of N bytes failed" and
/// aborts (SIGABRT, perhaps a core dump), which is all a user saw when a run met a `ulimit -v`
/// or another program's memory after its pre-flight. Nothing in this binary or the crates it
/// trains with asks for memory it can do without (no `try_reserve`), so a refusal would abort
/// anyway: ending here loses nothing, and a checkpoint already written is whole (checkpoints
/// are written to a temporary file and renamed).
pub fn exit_when_memory_runs_out() {
    EXIT_WHEN_REFUSED.store(true, Ordering::Relaxed);
}

/// What a CPU training run's pre-flight planned (the predicted peak and the memory available,
/// in bytes, `None` where no limit is known), for the out-of-memory line: it then speaks of the
/// run (its plan, its checkpoint, its flags).
pub fn note_planned(peak: u64, available: Option<u64>) {
    PLANNED_PEAK.store(peak, Ordering::Relaxed);
    PLANNED_AVAILABLE.store(available.unwrap_or(u64::MAX), Ordering::Relaxed);
    TRAINING.store(true, Ordering::Relaxed);
}

/// What the out-of-memory line says of the process: a CPU training run with its plan (the
/// predicted peak, and the memory available if known), or anything else.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Refused {
    Training { peak: u64, available: Option<u64> },
    Other,
}

/// The system refused `bytes`: returns (the caller hands Rust the null pointer) unless
/// [`exit_when_memory_runs_out`] was called, in which case it reports and exits.
#[cold]
#[inline(never)]
fn refused(bytes: usize) {
    if EXIT_WHEN_REFUSED.load(Ordering::Relaxed) {
        report_refusal_and_exit(bytes);
    }
}

/// A line built on the stack: formatting it must not ask for the memory that just ran out.
struct StackLine {
    bytes: [u8; 512],
    len: usize,
}

impl std::fmt::Write for StackLine {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        // Cut at the end of the buffer rather than fail: the start says what happened.
        let n = s.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// The text of the out-of-memory line (without `error: ` and the line break). `bytes` is the
/// block asked for (for a grown one, its whole new size).
fn refusal_line(out: &mut impl std::fmt::Write, bytes: usize, live: u64, what: Refused) -> std::fmt::Result {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let request = bytes as u64;
    let (amount, unit) = match request {
        r if r >> 30 > 0 => (r as f64 / (1u64 << 30) as f64, "GiB"),
        r if r >> 20 > 0 => (mib(r), "MiB"),
        r => (r as f64 / 1024.0, "KiB"),
    };
    write!(
        out,
        "out of memory: the system refused a block of {amount:.1} {unit}, with {:.1} MiB of this process's heap in use",
        mib(live)
    )?;
    match what {
        Refused::Training { peak, available } => {
            write!(out, " (the pre-flight planned a peak of {:.1} MiB", mib(peak))?;
            if let Some(available) = available {
                write!(out, " of {:.1} MiB available", mib(available))?;
            }
            out.write_str(
                ": other programs took memory since, or the run needed more than planned); a checkpoint already written is \
                 whole: free memory, or lower --batch-size (or set --max-memory-mib), and resume",
            )
        }
        Refused::Other => out.write_str("; free memory and run it again"),
    }
}

fn report_refusal_and_exit(bytes: usize) -> ! {
    #[cfg(unix)]
    {
        extern "C" {
            fn write(fd: i32, buf: *const u8, count: usize) -> isize;
            fn _exit(status: i32) -> !;
            fn pause() -> i32;
        }
        if REPORTED.swap(true, Ordering::SeqCst) {
            // Another thread is reporting and will end the process.
            loop {
                // SAFETY: pause only suspends this thread until a signal arrives.
                unsafe { pause() };
            }
        }
        let mut line = StackLine { bytes: [0; 512], len: 0 };
        let what = if TRAINING.load(Ordering::Relaxed) {
            let available = PLANNED_AVAILABLE.load(Ordering::Relaxed);
            Refused::Training { peak: PLANNED_PEAK.load(Ordering::Relaxed), available: (available != u64::MAX).then_some(available) }
        } else {
            Refused::Other
        };
        let _ = std::fmt::Write::write_str(&mut line, "error: ");
        let _ = refusal_line(&mut line, bytes, live(), what);
        line.len = line.len.min(line.bytes.len() - 1);
        line.bytes[line.len] = b'\n';
        line.len += 1;
        // SAFETY: fd 2 is stderr; the buffer is valid for `len` bytes. `_exit` ends the process
        // without running destructors or atexit handlers (which could allocate).
        unsafe {
            let _ = write(2, line.bytes.as_ptr(), line.len);
            _exit(1)
        }
    }
    #[cfg(not(unix))]
    {
        let _ = bytes;
        std::process::abort()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The longest out-of-memory line (the largest figures, a plan) fits the stack buffer
    /// whole, so its advice is never cut off; and a line that did not fit would be cut, not
    /// overflow.
    #[test]
    fn the_out_of_memory_line_fits_its_buffer() {
        let mut line = StackLine { bytes: [0; 512], len: 0 };
        let _ = std::fmt::Write::write_str(&mut line, "error: ");
        let longest = Refused::Training { peak: u64::MAX, available: Some(u64::MAX - 1) };
        refusal_line(&mut line, usize::MAX, u64::MAX, longest).unwrap();
        let mut whole = String::from("error: ");
        refusal_line(&mut whole, usize::MAX, u64::MAX, longest).unwrap();
        assert!(whole.len() < 512, "{} bytes: {whole}", whole.len());
        assert_eq!(&line.bytes[..line.len], whole.as_bytes());
        for _ in 0..3 {
            refusal_line(&mut line, 1, 1, Refused::Other).unwrap();
        }
        assert_eq!(line.len, 512);
    }

    /// The line speaks of a training run's plan and flags only for a training run, says so
    /// where no limit is known, and gives small blocks in KiB (not "0.0 MiB").
    #[test]
    fn the_out_of_memory_line_fits_what_ran_out() {
        let text = |bytes: usize, what: Refused| {
            let mut s = String::new();
            refusal_line(&mut s, bytes, 3 << 20, what).unwrap();
            s
        };
        let other = text(4096, Refused::Other);
        assert_eq!(other, "out of memory: the system refused a block of 4.0 KiB, with 3.0 MiB of this process's heap in use; free memory and run it again");
        let unknown = text(3 << 29, Refused::Training { peak: 2 << 20, available: None });
        assert!(unknown.contains("a block of 1.5 GiB") && unknown.contains("planned a peak of 2.0 MiB:"), "{unknown}");
        assert!(unknown.ends_with("lower --batch-size (or set --max-memory-mib), and resume"), "{unknown}");
        let known = text(5 << 20, Refused::Training { peak: 2 << 20, available: Some(8 << 20) });
        assert!(known.contains("a block of 5.0 MiB") && known.contains("planned a peak of 2.0 MiB of 8.0 MiB available:"), "{known}");
    }
}
