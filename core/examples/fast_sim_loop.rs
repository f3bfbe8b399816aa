//! Calls the fast simulation (`plan::simulate_fast_on`, what searches run) N times for one of
//! the bench's four configs, for counting instructions per call without timer noise:
//!
//! ```text
//! cargo build -p vramfit-core --release --example fast_sim_loop
//! valgrind --tool=callgrind target/release/examples/fast_sim_loop eager 1000
//! ```
//!
//! Run it once with N and once with 2N: the difference in instructions divided by N is the
//! cost of one call, free of start-up costs. Configs: `eager`, `compile`, `shakespeare`, `xl`.
//! A third argument, `exact`, `search` or `given`, calls the exact simulation
//! (`plan::simulate_on`), the largest-batch search (`plan::largest_micro_batch`) or the search
//! as a plan runs it, with the config's need known (`plan::largest_micro_batch_given`) instead;
//! `fixes` computes the config's fixes (`plan::fixes`; none for a config that fits); `plan`
//! computes a whole plan without fixes (`plan::plan`, what the page runs on each input).
#[path = "../benches/common/bench_configs.rs"]
mod bench_configs;

use std::hint::black_box;
use vramfit_core::{device, Config};

fn config(name: &str) -> Option<Config> {
    bench_configs::bench_configs().into_iter().find(|(short, _, _)| *short == name).map(|(_, _, cfg)| cfg)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: fast_sim_loop eager|compile|shakespeare|xl CALLS [fast|exact|search|given|fixes|plan]";
    let (Some(cfg), Some(calls)) = (args.first().and_then(|n| config(n)), args.get(1).and_then(|n| n.parse::<u64>().ok())) else {
        eprintln!("error: {usage}");
        std::process::exit(2);
    };
    let gpu = device::default_gpu();
    let mut peak = 0;
    // The config's own exact need, as a plan has it before its search ("given").
    let request = vramfit_core::plan::PlanRequest { config: cfg.clone(), gpus: vec![gpu.clone()], other_usage_bytes: 0, with_fixes: false };
    let need = vramfit_core::plan::plan(&request).map_or(0, |p| p.cards[0].needed_bytes);
    let start = std::time::Instant::now();
    for _ in 0..calls {
        peak = match args.get(2).map(String::as_str) {
            None | Some("fast") => black_box(vramfit_core::plan::simulate_fast_on(black_box(&cfg), &gpu)).train.bytes,
            Some("exact") => black_box(vramfit_core::plan::simulate_on(black_box(&cfg), &gpu)).train.bytes,
            Some("search") => black_box(vramfit_core::plan::largest_micro_batch(black_box(&cfg), &gpu, 0)).unwrap_or(0) as u64,
            Some("fixes") => black_box(vramfit_core::plan::fixes(black_box(&cfg), &gpu, 0)).len() as u64,
            Some("plan") => black_box(vramfit_core::plan::plan(black_box(&request))).map_or(0, |p| p.cards[0].needed_bytes),
            Some("given") => black_box(vramfit_core::plan::largest_micro_batch_given(black_box(&cfg), &gpu, 0, need)).unwrap_or(0) as u64,
            Some(other) => {
                eprintln!("error: unknown mode {other:?}; {usage}");
                std::process::exit(2);
            }
        };
    }
    // Wall time is only indicative (use the bench for timings); instruction counts are the measure.
    let per_call_us = start.elapsed().as_secs_f64() * 1e6 / calls.max(1) as f64;
    println!("{calls} calls, train peak {peak} B, {per_call_us:.2} us per call");
}
