//! How often the allocator model's reserve grows after the two iterations the measurements ran,
//! over a grid of 576 eager configs (the README's "After the two iterations" figures):
//!
//! ```text
//! cargo run --release -p vramfit-core --example later_growth
//! ```
//!
//! For each config: `sim::simulate_exact_and_later` without a limit (does the reserve grow, at
//! which iteration, by how much), and, where the measured windows fit the default 12 GB card but
//! the growth passes it, again with the card's limit (can PyTorch's release-and-retry recover).
//!
//! Then, for the same grid without its batch sizes (the batch is what is searched), the plan's
//! largest micro-batch that fits the card, and how often the model says that batch itself runs
//! out of memory a few steps later (`Plan::largest_lasting_micro_batch`), and how far below it
//! the largest that keeps fitting lies. Last, each shape (bf16 and fp32) at one and a half
//! times its largest batch, which does not fit: how many of its fixes that fit run out of memory
//! later (`Fix::runs_out_later`).
//!
//! With the argument `configs`, it prints instead the configs for measuring this on a GPU
//! (`tests/reference/later_configs.json`, run by `tests/reference/probes/later_growth.sh`): the
//! grid's configs whose reserve the model grows most on an H100, those that grow latest, the
//! GPT-2 124M at batch 8 accumulating 5 (eager, the README's 12 GB case), and a few that do not
//! grow, in configs.json's format.
//!
//! With `capped`, it prints six of those configs with a cap on PyTorch's reserve
//! (`tests/reference/capped_configs.json`, run by `tests/reference/probes/capped.sh`, which
//! sets `torch.cuda.set_per_process_memory_fraction` so that the allocator meets the cap as it
//! meets a smaller card's end: release cached segments, retry, else out of memory): between the
//! model's reserve through the measured windows and after its later growth, where the model
//! says whether the run recovers or runs out; and just above the windows where it does not grow.
//! Where the model says a run runs out, the same config at the largest batch below that it says
//! keeps fitting under that cap follows.
#[path = "../tests/reference_data.rs"]
mod reference_data;

use std::collections::BTreeMap;
use vramfit_core::{device, plan, sim, Config, Dtype, Gpu};

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("configs") => return print_measurement_configs(),
        Some("capped") => return print_capped_configs(),
        _ => {}
    }
    let gpu = device::default_gpu();
    let target = gpu.target();
    let room = gpu.usable_bytes - gpu.context_bytes;
    let (mut total, mut grew, mut past, mut out_of_memory) = (0, 0, 0, 0);
    let mut worst = 0f64;
    let mut when: BTreeMap<(u32, bool), u32> = BTreeMap::new();
    for shape in shapes() {
        for batch_size in [4u32, 8, 12, 16] {
            let cfg = Config { batch_size, ..shape.clone() };
            if cfg.validate().is_err() {
                continue;
            }
            total += 1;
            let (windows, later) = sim::simulate_exact_and_later(&cfg, &target, None);
            let Some(later) = later else { continue };
            grew += 1;
            *when.entry((later.iteration, later.in_eval)).or_default() += 1;
            // The reserve never shrinks: the last window's is the run's so far.
            let simulated = windows.train.reserved_bytes.max(windows.eval.reserved_bytes);
            worst = worst.max(later.reserved_bytes as f64 / simulated as f64 - 1.0);
            if simulated <= room && later.reserved_bytes > room {
                past += 1;
                let (_, limited) = sim::simulate_exact_and_later(&cfg, &target, Some(room));
                if limited.and_then(|l| l.past_limit).is_some_and(|p| !p.recovers) {
                    out_of_memory += 1;
                }
            }
        }
    }
    println!("{grew} of {total} eager configs: the model's reserve grows after the two measured iterations");
    for ((iteration, in_eval), n) in &when {
        println!("  {n} last grow at iteration {iteration}{}", if *in_eval { " (in the eval after it)" } else { "" });
    }
    println!("  by up to {:.1}%", worst * 100.0);
    println!(
        "{past} fit the {} through the measured windows and pass it later; {out_of_memory} of them with too little to release (out of memory)",
        gpu.id
    );

    let (mut searched, mut runs_out, mut none_below) = (0, 0, 0);
    let mut lowest = 1f64;
    let (mut too_big, mut fixes_fit, mut fixes_out) = (0, 0, 0);
    let mut out_titles: Vec<String> = Vec::new();
    let mut run_out_shapes: Vec<String> = Vec::new();
    for cfg in shapes() {
        let request = plan::PlanRequest { config: cfg.clone(), gpus: vec![gpu.clone()], other_usage_bytes: 0, with_fixes: false };
        let Ok(p) = plan::plan(&request) else { continue };
        let Some(largest) = p.largest_micro_batch else { continue };
        searched += 1;
        if cfg.dtype != Dtype::Float16 {
            let over = Config { batch_size: largest * 3 / 2 + 1, ..cfg.clone() };
            let fixes = plan::fixes(&over, &gpu, 0);
            too_big += 1;
            for f in fixes.iter().filter(|f| f.fits) {
                fixes_fit += 1;
                if f.runs_out_later.is_some() {
                    fixes_out += 1;
                    out_titles.push(f.title.clone());
                }
            }
        }
        let Some(lasting) = p.largest_lasting_micro_batch else { continue };
        runs_out += 1;
        let kept = lasting.batch_size.map_or("none".to_string(), |b| b.to_string());
        run_out_shapes.push(format!(
            "n_layer {} n_embd {} block {} vocab {} {} accumulating {}: largest {largest}, runs out at iteration {}; keeps fitting: {kept}",
            cfg.n_layer,
            cfg.n_embd,
            cfg.block_size,
            cfg.vocab_size,
            cfg.dtype.name(),
            cfg.gradient_accumulation_steps,
            lasting.runs_out_at_iteration
        ));
        match lasting.batch_size {
            Some(b) => lowest = lowest.min(b as f64 / largest as f64),
            None => none_below += 1,
        }
    }
    println!(
        "{runs_out} of {searched} shapes: the largest micro-batch that fits the {} runs out of memory a few steps later in the model",
        gpu.id
    );
    println!("  the largest that keeps fitting is at least {:.1}% of it; none keeps fitting in {none_below}", lowest * 100.0);
    for s in run_out_shapes {
        println!("  {s}");
    }
    println!("{too_big} shapes at 1.5x their largest batch: {fixes_out} of their {fixes_fit} fitting fixes run out of memory later:");
    for t in out_titles {
        println!("  {t}");
    }
}

/// The grid's model shapes, each at batch 4: n_layer 4-12, n_embd 384/768, block 256/1024,
/// vocab 65/50304, three dtypes, accumulation 1 and 5, eager.
fn shapes() -> Vec<Config> {
    let mut out = Vec::new();
    for n_layer in [4u32, 6, 12] {
        for n_embd in [384u32, 768] {
            for block_size in [256u32, 1024] {
                for vocab_size in [65u32, 50304] {
                    for dtype in [Dtype::Bfloat16, Dtype::Float16, Dtype::Float32] {
                        for gradient_accumulation_steps in [1u32, 5] {
                            out.push(Config {
                                n_layer,
                                n_head: 6,
                                n_embd,
                                block_size,
                                vocab_size,
                                batch_size: 4,
                                gradient_accumulation_steps,
                                dtype,
                                compile: false,
                                ..Config::default()
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// The configs for a GPU run of `measure.py --later-cycles` (see the module's comment).
fn print_measurement_configs() {
    let h100 = Gpu::find("h100-80gb").expect("the H100 preset").target();
    // (config, growth as a fraction of the windows' reserve, iteration it last grows at).
    let mut grown: Vec<(Config, f64, u32)> = Vec::new();
    let mut steady: Vec<Config> = Vec::new();
    for shape in shapes() {
        for batch_size in [4u32, 8, 12, 16] {
            let cfg = Config { batch_size, ..shape.clone() };
            if cfg.validate().is_err() {
                continue;
            }
            let (windows, later) = sim::simulate_exact_and_later(&cfg, &h100, None);
            let simulated = windows.train.reserved_bytes.max(windows.eval.reserved_bytes);
            match later {
                Some(l) => grown.push((cfg, l.reserved_bytes as f64 / simulated as f64 - 1.0, l.iteration)),
                None => steady.push(cfg),
            }
        }
    }
    grown.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut chosen: Vec<(Config, String)> = Vec::new();
    let mut take = |cfg: &Config, why: String| {
        if !chosen.iter().any(|(c, _)| c == cfg) {
            chosen.push((cfg.clone(), why));
        }
    };
    for (cfg, growth, at) in grown.iter().take(8) {
        take(cfg, format!("the model grows its reserve {:.1}% by iteration {at}", growth * 100.0));
    }
    let mut latest = grown.clone();
    latest.sort_by_key(|g| std::cmp::Reverse(g.2));
    for (cfg, growth, at) in latest.iter().take(3) {
        take(cfg, format!("the model grows its reserve {:.1}%, last at iteration {at}", growth * 100.0));
    }
    let example = Config { n_head: 12, batch_size: 8, gradient_accumulation_steps: 5, compile: false, ..Config::default() };
    let (_, later) = sim::simulate_exact_and_later(&example, &h100, None);
    take(
        &example,
        format!(
            "GPT-2 124M at batch 8 accumulating 5 (README); on the H100 the model {}",
            if later.is_some() { "grows" } else { "does not grow" }
        ),
    );
    for cfg in steady.iter().step_by(steady.len().div_ceil(4).max(1)).take(4) {
        take(cfg, "a control: the model's reserve does not grow".into());
    }
    let configs: Vec<serde_json::Value> = chosen
        .iter()
        .map(|(c, why)| {
            serde_json::json!({
                "id": format!(
                    "later-L{}H{}C{}-T{}-B{}-V{}-{}-ga{}",
                    c.n_layer, c.n_head, c.n_embd, c.block_size, c.batch_size, c.vocab_size, c.dtype.name(), c.gradient_accumulation_steps
                ),
                "n_layer": c.n_layer, "n_head": c.n_head, "n_embd": c.n_embd, "block_size": c.block_size,
                "batch_size": c.batch_size, "vocab_size": c.vocab_size, "dtype": c.dtype.name(), "attention": "flash",
                "bias": c.bias, "gradient_accumulation_steps": c.gradient_accumulation_steps, "dropout": c.dropout,
                "activation_checkpointing": false, "optimizer": "adamw", "eval_batch_size": null, "eval_iters": 2,
                "compile": false, "note": why,
            })
        })
        .collect();
    let doc = serde_json::json!({
        "description": "Configs for measuring the CUDA allocator's reserve past iteration 2 (measure.py --later-cycles; \
            tests/reference/probes/later_growth.sh), chosen by core/examples/later_growth.rs configs from its grid, \
            with the H100 preset's allocator model.",
        "configs": configs,
    });
    println!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
}

/// The capped runs (see the module's doc): ids from `later_configs.json`, each with a cap on the
/// reserve, on the H200 preset's target (where the caps were measured).
fn print_capped_configs() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/reference/later_configs.json");
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).expect("later_configs.json")).expect("JSON");
    let target = Gpu::find("h200-141gb").expect("preset").target();
    const MIB: u64 = 1 << 20;
    let mut configs = Vec::new();
    for id in [
        "later-L6H6C768-T256-B8-V50304-bfloat16-ga1",
        "later-L12H6C384-T256-B4-V50304-bfloat16-ga1",
        "later-L4H6C384-T1024-B12-V65-float32-ga1",
        "later-L6H6C384-T256-B8-V50304-bfloat16-ga5",
        "later-L4H6C768-T256-B8-V50304-float32-ga5",
        "later-L12H12C768-T1024-B8-V50304-bfloat16-ga5",
    ] {
        let entry = doc["configs"].as_array().expect("configs").iter().find(|c| c["id"] == id).expect("id in later_configs.json");
        let cfg = reference_data::config_from_row(entry).expect("a config core reads");
        let (windows, later) = sim::simulate_exact_and_later(&cfg, &target, None);
        let simulated = reference_data::windows_reserved(&windows);
        // Halfway into the later growth, or 32 MiB above a reserve that does not grow.
        let cap = match later {
            Some(l) => (simulated + (l.reserved_bytes - simulated) / 2) / (2 * MIB) * (2 * MIB),
            None => simulated + 32 * MIB,
        };
        let (_, capped) = sim::simulate_exact_and_later(&cfg, &target, Some(cap));
        let model = match capped {
            None => "keeps fitting".to_string(),
            Some(l) => match l.past_limit {
                Some(p) if p.recovers => format!(
                    "passes the cap at iteration {}{}; releasing cached segments makes room",
                    l.iteration,
                    if l.in_eval { " (eval)" } else { "" }
                ),
                Some(_) => format!("out of memory at iteration {}{}", l.iteration, if l.in_eval { " (eval)" } else { "" }),
                None => format!("grows to {} MiB at iteration {}, under the cap", l.reserved_bytes / MIB, l.iteration),
            },
        };
        let mut c = entry.clone();
        c["reserve_cap_bytes"] = cap.into();
        c["note"] = format!("windows' reserve {} MiB, cap {} MiB: the model says {model}", simulated / MIB, cap / MIB).into();
        configs.push(c);
        // Where the model says the run runs out later, the batch below that it says keeps
        // fitting under the same cap (what `plan` offers as the largest lasting micro-batch).
        if capped.is_some_and(|l| l.past_limit.is_some_and(|p| !p.recovers)) {
            let keeps = (1..cfg.batch_size).rev().find(|&b| {
                let smaller = Config { batch_size: b, ..cfg.clone() };
                let (w, later) = sim::simulate_exact_and_later(&smaller, &target, Some(cap));
                reference_data::windows_reserved(&w) <= cap && later.is_none_or(|l| l.past_limit.is_none_or(|p| p.recovers))
            });
            if let Some(b) = keeps {
                let mut c = entry.clone();
                c["id"] = format!("{id}-B{b}-lasting").into();
                c["batch_size"] = b.into();
                c["reserve_cap_bytes"] = cap.into();
                c["note"] = format!(
                    "batch {b}, the largest below {} that the model says keeps fitting under the cap of {} MiB",
                    cfg.batch_size,
                    cap / MIB
                )
                .into();
                configs.push(c);
            }
        }
    }
    let doc = serde_json::json!({
        "description": "later_configs.json rows with a cap on PyTorch's reserve (tests/reference/probes/capped.sh), \
            chosen by core/examples/later_growth.rs capped with the H200 preset's allocator model.",
        "configs": configs,
    });
    println!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
}
