//! Prints the simulated peaks of a config given as `key=value` pairs in nanoGPT's names,
//! e.g. `cargo run -p vramfit-core --example simulate -- n_layer=2 batch_size=4 dtype=float32`.
//! Add `target=cpu` for the CPU-trace target, `target=cudalike` for CUDA's kernels on the same
//! tensor counter (what `run_all.py --method cpu-fake-cudalike` emulates: see
//! `Target::cudalike_trace`), and `timeline=1` to print every event.
use vramfit_core::sim::{simulate, timeline, Target};
use vramfit_core::{Config, Gpu};

fn main() {
    let mut json = serde_json::to_value(Config::default()).unwrap();
    let mut target = Gpu::find("h100-80gb").unwrap().target();
    let mut show_timeline = false;
    let mut show_segments = false;
    for arg in std::env::args().skip(1) {
        let (k, v) = arg.split_once('=').expect("key=value");
        match k {
            "target" if v == "cpu" => target = Target::cpu_trace(),
            "target" if v == "cudalike" => target = Target::cudalike_trace(),
            "timeline" => show_timeline = v == "1",
            "segments" => show_segments = v == "1",
            _ => {
                let val: serde_json::Value = serde_json::from_str(v).unwrap_or(serde_json::Value::String(v.into()));
                json[k] = val;
            }
        }
    }
    let cfg: Config = serde_json::from_value(json).expect("config");
    cfg.validate().expect("valid config");
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let sim = simulate(&cfg, &target);
    for (name, p) in [("eval_at_start", &sim.eval_at_start), ("first_iter", &sim.first_iter), ("eval", &sim.eval), ("train", &sim.train)] {
        println!("{name:>14}: {:>12} B = {:>10.2} MiB  at {:?} {} (micro {})", p.bytes, mib(p.bytes), p.phase, p.op, p.micro_step);
        println!("{:>16}{}", "", serde_json::to_string(&p.breakdown).unwrap());
    }
    if show_segments {
        // Where the allocator reserves more: compare with segment_alloc events of a snapshot.
        let mut last = 0;
        for e in vramfit_core::sim::exact_events(&cfg, &target) {
            if e.reserved > last {
                println!(
                    "segment {:>6} MiB total {:>6} MiB  {:?} {} (request {} B)",
                    (e.reserved - last) >> 20,
                    e.reserved >> 20,
                    e.phase,
                    e.op,
                    e.requested
                );
                last = e.reserved;
            }
        }
    }
    if show_timeline {
        for p in timeline(&cfg, &target) {
            println!("{:>12} {:?} {} {}", p.live_bytes, p.phase, p.op, p.micro_step);
        }
    }
}
