//! The trainer's library half: what `vramfit train`/`sample`, the tests and the benches share.
//!
//! - [`model`] — nanoGPT's GPT on candle with a hand-written backward (explicit tensor lifetimes);
//!   [`fused`] — one-pass CPU kernels for its layer norms, GELU and softmaxes.
//! - [`preflight`] — predicts the run's memory with core before allocating; refuses or `--auto-fit`s.
//! - [`mem`] — a counting global allocator (live and peak heap bytes) for measured peaks;
//!   [`gpu_mem`] — the same two figures from the CUDA memory pool.
//! - [`data`] (with [`corpus`], the built-in text, and [`pickle`], for nanoGPT's `meta.pkl`) — tokens,
//!   vocabularies and nanoGPT's random batches.
//! - [`optim`] — AdamW with nanoGPT's parameter groups, gradient clipping, the learning-rate schedule.
//! - [`train`] — train.py's loop; [`checkpoint`] — atomic safetensors checkpoints for `--resume` and `sample`;
//!   [`pretrained`] — GPT-2's published weights, for fine-tuning (`train --weights`).
//! - [`progress`] and [`lossplot`] — the progress bar, `log.jsonl` and `loss.svg`.

pub mod attention;
pub mod checkpoint;
pub mod corpus;
pub mod cuda_kernels;
pub mod data;
pub mod dropout_cuda;
pub mod fused;
pub mod gpu_mem;
pub mod lossplot;
pub mod mem;
pub mod model;
pub mod optim;
pub mod pickle;
pub mod preflight;
pub mod pretrained;
pub mod progress;
pub mod train;
