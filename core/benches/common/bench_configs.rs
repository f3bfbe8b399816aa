//! The four configs core's speed figures are measured on, shared by `benches/plan.rs` (in a subfolder so that cargo does not take it for a bench of its own) and the
//! examples that count instructions on them (`fast_sim_loop`, `sim_digest`).
use vramfit_core::Config;

/// (short name, description, config): GPT-2 124M eager and compiled (nanoGPT's defaults),
/// nanoGPT's shakespeare-char, and GPT-2 1.5B.
pub fn bench_configs() -> [(&'static str, &'static str, Config); 4] {
    [
        ("eager", "GPT-2 124M, B12, GA40, eager", Config { compile: false, ..Config::default() }),
        ("compile", "GPT-2 124M, B12, GA40, compile (nanoGPT's defaults)", Config::default()),
        ("shakespeare", "shakespeare-char, eager", Config { compile: false, ..Config::shakespeare_char() }),
        (
            "xl",
            "GPT-2 1.5B (48 layers), eager",
            Config { n_layer: 48, n_head: 25, n_embd: 1600, batch_size: 1, compile: false, ..Config::default() },
        ),
    ]
}
