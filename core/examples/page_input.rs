//! What the page computes on each slider input, natively and without drawing: a plan without
//! fixes (its largest-batch search remembered across inputs, as the page keeps it) and the
//! timeline, for one of the page bench's eager configs, the batch moving one step back and forth
//! as `tests/e2e/bench.mjs` moves it. For counting instructions per input
//! (the batch series' fast simulations, about 40 of a few microseconds each, are left out):
//!
//! ```text
//! cargo build -p vramfit-core --release --example page_input
//! valgrind --tool=callgrind target/release/examples/page_input eager-b5 2 both
//! ```
//!
//! Run it with N and 2N inputs: the difference divided by N is the cost of one. Configs:
//! `eager-b8` (GPT-2 124M eager, batch 8 accumulating 5: does not fit the default card),
//! `eager-b5` (the same at batch 5, which fits), `xl` (GPT-2 1.5B eager). Parts: `plan`,
//! `timeline` or `both`.
use std::hint::black_box;
use vramfit_core::{device, plan, sim, Config};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: page_input eager-b8|eager-b5|xl INPUTS [plan|timeline|both]";
    let eager = Config { compile: false, gradient_accumulation_steps: 5, ..Config::default() };
    let cfg = match args.first().map(String::as_str) {
        Some("eager-b8") => Some(Config { batch_size: 8, ..eager }),
        Some("eager-b5") => Some(Config { batch_size: 5, ..eager }),
        Some("xl") => Some(Config { n_layer: 48, n_head: 25, n_embd: 1600, compile: false, ..Config::default() }),
        _ => None,
    };
    let part = args.get(2).map_or("both", String::as_str);
    let (Some(cfg), Some(inputs), true) =
        (cfg, args.get(1).and_then(|n| n.parse::<u32>().ok()), ["plan", "timeline", "both"].contains(&part))
    else {
        eprintln!("error: {usage}");
        std::process::exit(2);
    };
    let gpu = device::default_gpu();
    // The page keeps one across inputs: the batch's steps reuse the largest-batch search.
    let mut memo = plan::SearchMemo::default();
    for i in 0..inputs {
        let c = Config { batch_size: cfg.batch_size + i % 2, ..cfg.clone() };
        if part != "timeline" {
            let request = plan::PlanRequest { config: c.clone(), gpus: vec![gpu.clone()], other_usage_bytes: 0, with_fixes: false };
            black_box(plan::plan_remembering(black_box(&request), &mut memo).map(|p| p.cards[0].needed_bytes).unwrap_or(0));
        }
        if part != "plan" {
            black_box(sim::timeline(black_box(&c), &gpu.target()).len());
        }
    }
}
