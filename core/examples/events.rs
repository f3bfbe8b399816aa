//! Prints every allocator event of the exact simulation as JSON lines (request, block, reserve,
//! segment ordinal and offset), for `tests/reference/probes/snapshot_diff.py`, which lines
//! them up with a `torch.cuda.memory._snapshot()` trace. Config as `key=value` pairs in
//! nanoGPT's names (JSON values), e.g. `n_layer=6 dtype='"float16"'`.
use vramfit_core::{Config, Gpu};

fn main() {
    let mut json = serde_json::to_value(Config::default()).expect("config serializes");
    for arg in std::env::args().skip(1) {
        let Some((k, v)) = arg.split_once('=') else {
            eprintln!("error: expected key=value, got {arg:?}");
            std::process::exit(2);
        };
        json[k] = serde_json::from_str(v).unwrap_or(serde_json::Value::String(v.into()));
    }
    let cfg: Config = match serde_json::from_value(json) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = cfg.validate() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    let target = Gpu::find("h100-80gb").expect("h100 preset").target();
    for e in vramfit_core::sim::exact_events(&cfg, &target) {
        println!("{}", serde_json::to_string(&e).expect("event serializes"));
    }
}
