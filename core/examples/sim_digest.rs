//! Prints, one JSON line per config, everything the simulation returns for a fixed spread of
//! configs: `simulate` (the fast, folded run), `simulate_exact`, `timeline` and
//! `exact_events`. Run it before and after a change to the simulation and diff the outputs:
//! `cargo run -p vramfit-core --release --example sim_digest > before.jsonl`.
//! Any difference in any peak, op, phase, breakdown or timeline point shows up as a changed line.
//! An optional argument sets how many configs (default 64; the first four are the bench's).
#[path = "../benches/common/bench_configs.rs"]
mod bench_configs;

use std::io::Write;
use vramfit_core::config::{Attention, Dtype, Optimizer};
use vramfit_core::sim::{exact_events, simulate, simulate_exact, timeline, Target};
use vramfit_core::{device, Config};

/// A small deterministic generator (64-bit LCG, Knuth's MMIX constants) so the spread of
/// configs is the same on every run without a dependency.
struct Lcg(u64);

impl Lcg {
    fn pick<T: Copy>(&mut self, options: &[T]) -> T {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        options[((self.0 >> 33) % options.len() as u64) as usize]
    }
}

/// The bench's four configs, then a pseudo-random spread over every switch the loop has.
fn configs(count: usize) -> Vec<Config> {
    let mut out: Vec<Config> = bench_configs::bench_configs().into_iter().map(|(_, _, cfg)| cfg).collect();
    let mut rng = Lcg(0x5eed);
    while out.len() < count {
        let n_head = rng.pick(&[1u32, 2, 3, 4, 6]);
        let block_size = rng.pick(&[16u32, 64, 100, 128, 257]);
        let cfg = Config {
            n_layer: rng.pick(&[1u32, 2, 3, 4, 7, 12]),
            n_head,
            n_embd: n_head * rng.pick(&[8u32, 32, 64, 100]),
            block_size,
            vocab_size: rng.pick(&[65u32, 1000, 50304]),
            bias: rng.pick(&[false, true]),
            dropout: rng.pick(&[0.0, 0.1]),
            batch_size: rng.pick(&[1u32, 3, 8]),
            gradient_accumulation_steps: rng.pick(&[1u32, 2, 5]),
            eval_batch_size: rng.pick(&[None, Some(2), Some(16)]),
            eval_block_size: rng.pick(&[None, Some(block_size / 2), Some(1)]),
            dtype: rng.pick(&Dtype::ALL),
            attention: rng.pick(&[Attention::Flash, Attention::Manual]),
            compile: rng.pick(&[false, false, true]),
            activation_checkpointing: rng.pick(&[false, true]),
            optimizer: rng.pick(&[Optimizer::Adamw, Optimizer::Adamw, Optimizer::Sgd]),
            expandable_segments: rng.pick(&[false, true]),
            ..Config::default()
        };
        if cfg.validate().is_ok() {
            out.push(cfg);
        }
    }
    out
}

fn main() {
    let count = match std::env::args().nth(1).map(|n| n.parse::<usize>()) {
        None => 64,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            eprintln!("error: usage: sim_digest [CONFIGS]");
            std::process::exit(2);
        }
    };
    let mut out = std::io::stdout().lock();
    let gpu_targets = [("h100", device::Gpu::find("h100-80gb").expect("preset").target()), ("cpu", Target::cpu_trace())];
    for (i, cfg) in configs(count).iter().enumerate() {
        // Alternate the target so both kernel families are covered; the bench configs get both.
        let targets: &[(&str, Target)] = if i < 4 { &gpu_targets } else { std::slice::from_ref(&gpu_targets[i % 2]) };
        for (name, target) in targets {
            let line = serde_json::json!({
                "config": cfg,
                "target": name,
                "simulate": simulate(cfg, target),
                "simulate_exact": simulate_exact(cfg, target),
                "timeline": timeline(cfg, target),
                "exact_events": exact_events(cfg, target),
            });
            // A closed pipe (e.g. `| head`) ends the listing quietly.
            if writeln!(out, "{line}").is_err() {
                return;
            }
        }
    }
}
