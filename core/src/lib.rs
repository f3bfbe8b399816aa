//! # vramfit-core: where a nanoGPT training run's GPU memory goes
//!
//! A guided tour, in the order the pieces depend on each other:
//!
//! 1. [`config`] — the run's settings under nanoGPT's names, and their validation.
//! 2. [`params`] — the parameter table and exact counts (what nanoGPT prints).
//! 3. [`sim`] — an event-level simulation of PyTorch eager running nanoGPT's `train.py`:
//!    every tensor allocated and freed, in order, for a training iteration and an
//!    `estimate_loss` batch. Peaks, the op and phase at each peak, a breakdown by
//!    category and a timeline come out of it.
//! 4. [`allocator`] — a block-level model of PyTorch's CUDA caching allocator (rounding,
//!    splitting, segments, where cudaMalloc places them): the blocks `max_memory_allocated`
//!    counts and the reserve nvidia-smi shows. [`sim`] runs its tensors through it for the
//!    figures `plan` shows.
//! 5. [`device`] — GPU presets and what sits outside PyTorch's tensor counters: the memory a
//!    card offers, the CUDA context and cuBLAS workspaces.
//! 6. [`plan`](mod@plan) — the answer every face shows: peaks, fit per card, the largest
//!    micro-batch that fits, and ranked fixes.
//! 7. [`link`] and [`nanogpt`] — the page's shareable-link codec and a reader for nanoGPT
//!    `config/*.py` files, so the page, `vramfit plan` and `vramfit train` read the same inputs.
//! 8. [`trainer_model`] — the same event-level accounting for vramfit's own candle trainer
//!    (`vramfit train`), whose tensors and lifetimes differ from PyTorch's.
//!
//! Nothing here does I/O, and no input panics: it compiles to wasm32 for the page.

pub mod allocator;
pub mod config;
pub mod device;
pub mod link;
pub mod nanogpt;
pub mod params;
pub mod plan;
pub mod sim;
pub mod trainer_model;

/// Whether a character of user input would change how a message shows rather than show itself:
/// control characters, the bidirectional overrides and isolates, with which a link once turned
/// the rest of its notice line backwards, and the invisible ones (zero-width spaces and joiners,
/// the word joiner, a byte-order mark), with which `n_layer\u{200b} = 2` read as a valid line in
/// its own error message. Messages quoting input escape these.
pub fn reshapes_text(ch: char) -> bool {
    // Also the line and paragraph separators, which would split a one-line message.
    ch.is_control()
        || matches!(
            ch,
            '\u{200b}'..='\u{200f}' | '\u{061c}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{feff}'
        )
}

/// User input as a message quotes it: at most `max_chars` characters (then `…`), and the
/// characters that would reshape the line ([`reshapes_text`]) shown escaped, as `\u{1b}`.
pub fn shown_input(s: &str, max_chars: usize) -> String {
    let mut out = String::new();
    for (n, ch) in s.chars().enumerate() {
        if n == max_chars {
            out.push('…');
            break;
        }
        if reshapes_text(ch) {
            out.extend(ch.escape_default());
        } else {
            out.push(ch);
        }
    }
    out
}

pub use config::{Attention, Config, ConfigError, Dtype, Optimizer};
pub use device::Gpu;
pub use params::ParamCounts;
pub use plan::{plan, Plan};
pub use sim::{Breakdown, Category, Peak, Phase, Simulation};
