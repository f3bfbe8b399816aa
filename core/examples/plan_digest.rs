//! Prints one JSON line per plan (without fixes) over a spread of configs whose batch sweeps
//! across the largest that fits, on three cards: the largest micro-batch, its needs and whether
//! it lasts come from the batch search, whose path depends on where the batch starts. Run it
//! before and after a change to the search and diff the outputs:
//! `cargo run -p vramfit-core --release --example plan_digest > before.jsonl`. With the argument
//! `fixes`, the plans carry their fixes, and a T4 is added (for a change to the fixes' code: 156
//! of the plans need some).
use std::io::Write;
use vramfit_core::config::Attention;
use vramfit_core::plan::{plan, PlanRequest};
use vramfit_core::{Config, Dtype, Gpu};

fn main() {
    let with_fixes = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("fixes") => true,
        Some(other) => {
            eprintln!("error: unknown argument {other:?} (usage: plan_digest [fixes])");
            std::process::exit(2);
        }
    };
    let gpt2 = |compile: bool, ga: u32| Config { compile, gradient_accumulation_steps: ga, ..Config::default() };
    let shakespeare = |attention: Attention| Config { compile: false, attention, ..Config::shakespeare_char() };
    let medium = Config { n_layer: 24, n_head: 16, n_embd: 1024, compile: false, gradient_accumulation_steps: 8, ..Config::default() };
    let fp32 = Config { dtype: Dtype::Float32, compile: false, gradient_accumulation_steps: 5, ..Config::default() };
    let bases: Vec<(Config, Vec<u32>)> = vec![
        (gpt2(false, 5), (1..=14).chain([20, 40]).collect()),
        (gpt2(false, 40), (4..=12).collect()),
        (gpt2(true, 40), (6..=16).chain([24, 64]).collect()),
        (fp32, (1..=8).chain([16]).collect()),
        (medium, (1..=6).chain([12]).collect()),
        (shakespeare(Attention::Flash), [64, 256, 400, 470, 480, 490, 500, 600, 2000].to_vec()),
        (shakespeare(Attention::Manual), [64, 200, 260, 266, 268, 269, 270, 271, 280, 400].to_vec()),
    ];
    // With fixes, a T4 too: a bf16 config's fixes there all take fp16 first.
    let cards: &[&str] = if with_fixes { &["rtx-3060", "rtx-4070", "rtx-4080", "t4"] } else { &["rtx-3060", "rtx-4070", "rtx-4080"] };
    let out = std::io::stdout();
    let mut out = out.lock();
    for (base, batches) in &bases {
        for &card in cards {
            let gpu = Gpu::find(card).expect("preset");
            for &batch_size in batches {
                let config = Config { batch_size, ..base.clone() };
                let req = PlanRequest { config, gpus: vec![gpu.clone()], other_usage_bytes: 0, with_fixes };
                let line = match plan(&req) {
                    Ok(p) => serde_json::to_string(&p).expect("a plan serializes"),
                    Err(e) => format!("{{\"error\":{:?}}}", e.to_string()),
                };
                writeln!(out, "{line}").expect("stdout");
            }
        }
    }
}
