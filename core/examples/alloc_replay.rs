//! Replays the caching-allocator requests of one exact simulation (`sim::exact_events`)
//! against `CachingAllocator` alone, N times: what the allocator model costs without the ops
//! that generate its events. For instruction counts (no timer noise):
//!
//! ```text
//! cargo build -p vramfit-core --release --example alloc_replay
//! valgrind --tool=callgrind target/release/examples/alloc_replay eager 100
//! ```
//!
//! Run it once with N and once with 2N: the difference divided by N is one replay. Configs as
//! in `fast_sim_loop`: `eager`, `compile`, `shakespeare`, `xl`.
#[path = "../benches/common/bench_configs.rs"]
mod bench_configs;

use std::collections::HashMap;
use std::hint::black_box;
use vramfit_core::allocator::CachingAllocator;
use vramfit_core::device;

/// One allocator call: a request of `bytes`, or (`bytes` 0) freeing the block the `n`-th
/// request got.
#[derive(Clone, Copy)]
struct Call {
    bytes: u64,
    request: usize,
}

/// The exact simulation's allocator calls, frees pointing at the request they return (the log
/// names blocks by segment and offset, which a later request may reuse).
fn calls(cfg: &vramfit_core::Config) -> Vec<Call> {
    let events = vramfit_core::sim::exact_events(cfg, &device::default_gpu().target());
    let mut live: HashMap<(u64, u64), usize> = HashMap::new();
    let mut requests = 0;
    let mut out = Vec::with_capacity(events.len());
    for e in &events {
        if e.block >= 0 {
            live.insert((e.segment, e.offset), requests);
            out.push(Call { bytes: e.requested, request: requests });
            requests += 1;
        } else {
            let request = live.remove(&(e.segment, e.offset)).expect("a free names a live block");
            out.push(Call { bytes: 0, request });
        }
    }
    out
}

fn replay(calls: &[Call], handles: &mut Vec<u32>) -> u64 {
    let mut a = CachingAllocator::new();
    handles.clear();
    let mut peak = 0;
    for c in calls {
        if c.bytes > 0 {
            handles.push(a.malloc(c.bytes).0);
        } else {
            a.free(handles[c.request]);
        }
        peak = peak.max(a.reserved);
    }
    peak
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: alloc_replay eager|compile|shakespeare|xl CALLS";
    let found = args.first().and_then(|n| bench_configs::bench_configs().into_iter().find(|(short, _, _)| short == n));
    let (Some((_, _, cfg)), Some(n)) = (found, args.get(1).and_then(|n| n.parse::<u64>().ok())) else {
        eprintln!("error: {usage}");
        std::process::exit(2);
    };
    let calls = calls(&cfg);
    let mut handles = Vec::new();
    let start = std::time::Instant::now();
    let mut peak = 0;
    for _ in 0..n {
        peak = black_box(replay(black_box(&calls), &mut handles));
    }
    let per_us = start.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64;
    let frees = calls.iter().filter(|c| c.bytes == 0).count();
    println!("{} calls ({} frees), reserved peak {peak} B, {per_us:.2} us per replay", calls.len(), frees);
}
