//! The trainer's library half: what `vramfit train`/`sample`, the tests and the benches share.
//!
//! - [`model`] — nanoGPT's GPT on candle with a hand-written backward (explicit tensor lifetimes).
//! - [`mem`] — a counting global allocator (live and peak heap bytes) for measured peaks.

pub mod mem;
pub mod model;
