//! The memory of vramfit's own trainer (`trainer/src/model.rs` on candle), allocation by allocation.

/// Rows of logits the trainer's chunked loss computes at once: about 16 Mi logits (64 MiB in f32)
/// per chunk, and never fewer than 256 rows, so the chunk's matmuls stay efficient.
pub fn loss_chunk_rows(vocab_size: u32) -> u64 {
    ((1u64 << 24) / u64::from(vocab_size.max(1))).max(256)
}
