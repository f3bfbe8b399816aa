//! The settings of one nanoGPT training run, with nanoGPT's names and defaults.
//!
//! Everything the memory model needs is here and nothing else: learning rates and
//! the like live in the trainer. `Config::validate` is the single gate every face
//! (page, `plan`, `train`) passes a config through before simulating it; after it
//! succeeds, no size product in the simulation can overflow a `u64`.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Compute precision, as nanoGPT's `dtype` setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// Pure fp32: no autocast, no casts.
    Float32,
    /// `torch.autocast(dtype=float16)` with fp32 parameters and a GradScaler.
    Float16,
    /// `torch.autocast(dtype=bfloat16)` with fp32 parameters.
    Bfloat16,
}

impl Dtype {
    pub const ALL: [Dtype; 3] = [Dtype::Float32, Dtype::Float16, Dtype::Bfloat16];
    /// nanoGPT's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Float32 => "float32",
            Dtype::Float16 => "float16",
            Dtype::Bfloat16 => "bfloat16",
        }
    }
    pub fn parse(s: &str) -> Option<Dtype> {
        match s.trim().to_ascii_lowercase().as_str() {
            "float32" | "fp32" | "f32" => Some(Dtype::Float32),
            "float16" | "fp16" | "f16" | "half" => Some(Dtype::Float16),
            "bfloat16" | "bf16" => Some(Dtype::Bfloat16),
            _ => None,
        }
    }
    /// Bytes per element of activations produced by autocast's lower-precision ops.
    pub fn compute_bytes(self) -> u64 {
        match self {
            Dtype::Float32 => 4,
            Dtype::Float16 | Dtype::Bfloat16 => 2,
        }
    }
    pub fn is_autocast(self) -> bool {
        self != Dtype::Float32
    }
}

/// Which attention path `CausalSelfAttention` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Attention {
    /// `F.scaled_dot_product_attention(..., is_causal=True)`: no T×T tensor is kept.
    Flash,
    /// The explicit `q @ k^T`, masked_fill with the `bias` buffer, softmax, `@ v`.
    Manual,
}

impl Attention {
    pub fn name(self) -> &'static str {
        match self {
            Attention::Flash => "flash",
            Attention::Manual => "manual",
        }
    }
    pub fn parse(s: &str) -> Option<Attention> {
        match s.trim().to_ascii_lowercase().as_str() {
            "flash" | "sdpa" => Some(Attention::Flash),
            "manual" | "naive" | "math" => Some(Attention::Manual),
            _ => None,
        }
    }
}

/// The optimizer whose state lives on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    /// nanoGPT's fused AdamW: exp_avg and exp_avg_sq, fp32, one of each per parameter.
    Adamw,
    /// Plain SGD without momentum: no state at all.
    Sgd,
}

impl Optimizer {
    pub fn name(self) -> &'static str {
        match self {
            Optimizer::Adamw => "adamw",
            Optimizer::Sgd => "sgd",
        }
    }
    pub fn parse(s: &str) -> Option<Optimizer> {
        match s.trim().to_ascii_lowercase().as_str() {
            "adamw" | "adam" => Some(Optimizer::Adamw),
            "sgd" => Some(Optimizer::Sgd),
            _ => None,
        }
    }
}

/// One training run's memory-relevant settings. Field names are nanoGPT's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub n_layer: u32,
    pub n_head: u32,
    pub n_embd: u32,
    pub block_size: u32,
    pub vocab_size: u32,
    pub bias: bool,
    pub dropout: f64,
    /// Micro-batch size: sequences per forward/backward.
    pub batch_size: u32,
    pub gradient_accumulation_steps: u32,
    pub eval_iters: u32,
    /// Sequences per `estimate_loss` forward. `None` = `batch_size`, as nanoGPT does.
    pub eval_batch_size: Option<u32>,
    /// Context length used by `estimate_loss`. `None` = `block_size`, as nanoGPT does.
    pub eval_block_size: Option<u32>,
    pub dtype: Dtype,
    pub attention: Attention,
    pub compile: bool,
    /// Recompute each block in backward from its input instead of keeping its activations.
    pub activation_checkpointing: bool,
    pub optimizer: Optimizer,
    /// `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`: reserved memory tracks allocated.
    pub expandable_segments: bool,
    /// train.py's `eval_only`: one `estimate_loss` at iteration 0, then exit (nanoGPT's
    /// `config/eval_gpt2*.py`). Only the eval at start runs, so only it decides the fit; the
    /// other windows are still simulated, as what training the same config would need.
    // Left out when false: a config (a checkpoint's, a plan's JSON) reads as before it existed,
    // also to an older vramfit, whose reader refuses unknown fields.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub eval_only: bool,
}

impl Default for Config {
    /// nanoGPT's `train.py` defaults (GPT-2 124M, block 1024, micro-batch 12, GA 40, bf16,
    /// compile on), except `gradient_accumulation_steps`, which train.py sets to 5*8 for eight
    /// GPUs: a single GPU runs 40 micro-steps per iteration too.
    fn default() -> Self {
        Config {
            n_layer: 12,
            n_head: 12,
            n_embd: 768,
            block_size: 1024,
            vocab_size: 50304,
            bias: false,
            dropout: 0.0,
            batch_size: 12,
            gradient_accumulation_steps: 40,
            eval_iters: 200,
            eval_batch_size: None,
            eval_block_size: None,
            dtype: Dtype::Bfloat16,
            attention: Attention::Flash,
            compile: true,
            activation_checkpointing: false,
            optimizer: Optimizer::Adamw,
            expandable_segments: false,
            eval_only: false,
        }
    }
}

impl Config {
    /// nanoGPT's `config/train_shakespeare_char.py` (the character-level Shakespeare model most
    /// people train first): 6 layers of 384 with 6 heads, context 256, micro-batch 64 without
    /// accumulation, dropout 0.2, vocab_size 65 from its data's meta.pkl; train.py's defaults
    /// otherwise.
    pub fn shakespeare_char() -> Config {
        Config {
            n_layer: 6,
            n_head: 6,
            n_embd: 384,
            block_size: 256,
            vocab_size: 65,
            dropout: 0.2,
            batch_size: 64,
            gradient_accumulation_steps: 1,
            ..Config::default()
        }
    }
}

/// Why a config cannot be simulated. Each message is one line a user can act on.
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum ConfigError {
    #[error("{field} must be at least {min} (got {value})")]
    TooSmall { field: String, value: u64, min: u64 },
    #[error("{field} = {value} is larger than vramfit models (at most {max})")]
    TooLarge { field: String, value: u64, max: u64 },
    #[error("n_embd ({n_embd}) must be divisible by n_head ({n_head})")]
    HeadsDoNotDivide { n_embd: u32, n_head: u32 },
    #[error("dropout must be in [0, 1) (got {0})")]
    Dropout(String),
    #[error("eval_block_size ({eval}) cannot exceed block_size ({block})")]
    EvalBlockTooLong { eval: u32, block: u32 },
    #[error("this config's tensors are too large to count in 64 bits ({0})")]
    Overflow(String),
}

impl ConfigError {
    /// The settings (nanoGPT's names) whose values `cfg` failed on, for naming the line or the
    /// source that set them. An unset eval batch or eval context is the training one's.
    pub fn settings(&self, cfg: &Config) -> Vec<&'static str> {
        const SIZES: [&str; 7] = ["n_layer", "n_head", "n_embd", "block_size", "vocab_size", "batch_size", "eval_batch_size"];
        const RANGED: [&str; 10] = [
            "n_layer",
            "n_head",
            "n_embd",
            "block_size",
            "vocab_size",
            "batch_size",
            "gradient_accumulation_steps",
            "eval_iters",
            "eval_batch_size",
            "eval_block_size",
        ];
        match self {
            ConfigError::TooSmall { field, .. } | ConfigError::TooLarge { field, .. } => {
                match RANGED.iter().copied().find(|n| n == field) {
                    Some("eval_batch_size") if cfg.eval_batch_size.is_none() => vec!["batch_size"],
                    Some("eval_block_size") if cfg.eval_block_size.is_none() => vec!["block_size"],
                    Some(n) => vec![n],
                    None => Vec::new(),
                }
            }
            ConfigError::HeadsDoNotDivide { .. } => vec!["n_head", "n_embd"],
            ConfigError::EvalBlockTooLong { .. } if cfg.eval_block_size.is_some() => vec!["eval_block_size", "block_size"],
            ConfigError::EvalBlockTooLong { .. } => vec!["block_size"],
            ConfigError::Dropout(_) => vec!["dropout"],
            ConfigError::Overflow(_) => SIZES.to_vec(),
        }
    }
}

/// Upper bounds that keep every product in the simulation inside `u64` with room to spare,
/// while covering anything a GPU of this decade could train.
pub const MAX_LAYERS: u32 = 1024;
pub const MAX_EMBD: u32 = 65_536;
pub const MAX_HEADS: u32 = 4096;
pub const MAX_BLOCK: u32 = 1 << 20;
pub const MAX_VOCAB: u32 = 1 << 22;
pub const MAX_BATCH: u32 = 1 << 16;
pub const MAX_ACCUM: u32 = 1 << 20;
pub const MAX_EVAL_ITERS: u32 = 1 << 20;

/// The largest byte count any single phase may reach: 2^58 bytes (256 PiB). Bounding the
/// inputs by this keeps every sum of terms in the simulation far below `u64::MAX`.
const MAX_TOTAL_BYTES: u64 = 1 << 58;

impl Config {
    pub fn eval_batch(&self) -> u32 {
        self.eval_batch_size.unwrap_or(self.batch_size)
    }
    pub fn eval_block(&self) -> u32 {
        self.eval_block_size.unwrap_or(self.block_size)
    }
    /// Tokens that contribute to one optimizer step, as train.py prints it.
    pub fn tokens_per_iter(&self) -> u64 {
        self.gradient_accumulation_steps as u64 * self.batch_size as u64 * self.block_size as u64
    }
    pub fn head_size(&self) -> u32 {
        self.n_embd / self.n_head.max(1)
    }

    /// Checks every field; the first problem found is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let ranges: [(&str, u32, u32, u32); 9] = [
            ("n_layer", self.n_layer, 1, MAX_LAYERS),
            ("n_head", self.n_head, 1, MAX_HEADS),
            ("n_embd", self.n_embd, 1, MAX_EMBD),
            ("block_size", self.block_size, 1, MAX_BLOCK),
            ("vocab_size", self.vocab_size, 1, MAX_VOCAB),
            ("batch_size", self.batch_size, 1, MAX_BATCH),
            ("gradient_accumulation_steps", self.gradient_accumulation_steps, 1, MAX_ACCUM),
            ("eval_iters", self.eval_iters, 1, MAX_EVAL_ITERS),
            ("eval_batch_size", self.eval_batch(), 1, MAX_BATCH),
        ];
        for (field, value, min, max) in ranges {
            if value < min {
                return Err(ConfigError::TooSmall { field: field.into(), value: value as u64, min: min as u64 });
            }
            if value > max {
                return Err(ConfigError::TooLarge { field: field.into(), value: value as u64, max: max as u64 });
            }
        }
        if self.eval_block() < 1 {
            return Err(ConfigError::TooSmall { field: "eval_block_size".into(), value: 0, min: 1 });
        }
        if self.eval_block() > self.block_size {
            return Err(ConfigError::EvalBlockTooLong { eval: self.eval_block(), block: self.block_size });
        }
        if !self.n_embd.is_multiple_of(self.n_head) {
            return Err(ConfigError::HeadsDoNotDivide { n_embd: self.n_embd, n_head: self.n_head });
        }
        if !(self.dropout.is_finite() && (0.0..1.0).contains(&self.dropout)) {
            // Python's spelling for the far ones (1e308 printed 309 digits).
            let far = self.dropout.is_finite() && (self.dropout.abs() >= 1e6 || (self.dropout != 0.0 && self.dropout.abs() < 1e-6));
            let shown = if far { format!("{:e}", self.dropout) } else { format!("{}", self.dropout) };
            return Err(ConfigError::Dropout(shown));
        }
        self.check_magnitudes()
    }

    /// Bounds the largest tensors (logits, attention matrices, activations, weights) so that
    /// the simulation's plain `u64` arithmetic cannot overflow.
    fn check_magnitudes(&self) -> Result<(), ConfigError> {
        let (l, h, c, v) = (self.n_layer as u64, self.n_head as u64, self.n_embd as u64, self.vocab_size as u64);
        let b = self.batch_size.max(self.eval_batch()) as u64;
        let t = self.block_size as u64;
        let big = |what: &str, parts: &[u64]| -> Result<u64, ConfigError> {
            let mut acc: u64 = 1;
            for &p in parts {
                acc = acc.checked_mul(p).filter(|&x| x <= MAX_TOTAL_BYTES).ok_or_else(|| ConfigError::Overflow(what.to_string()))?;
            }
            Ok(acc)
        };
        // Elements times the most bytes any tensor family reaches per element (and per layer).
        big("logits B*T*vocab_size", &[b, t, v, 16])?;
        big("activations B*T*n_embd*n_layer", &[b, t, c, l, 64])?;
        big("attention matrices B*n_head*T*T*n_layer", &[b, h, t, t, l, 16])?;
        big("mask buffers T*T*n_layer", &[t, t, l, 4])?;
        big("weights n_embd^2*n_layer", &[c, c, l, 16 * 16])?;
        big("embedding vocab_size*n_embd", &[v, c, 16 * 16])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error names the settings whose values failed; an unset eval batch or context is the
    /// training one's, so that is the setting named.
    #[test]
    fn an_error_names_the_settings_it_failed_on() {
        let failing = |cfg: Config| {
            let err = cfg.validate().expect_err("the config is invalid");
            err.settings(&cfg)
        };
        assert_eq!(failing(Config { n_head: 5, ..Config::default() }), ["n_head", "n_embd"]);
        assert_eq!(failing(Config { batch_size: MAX_BATCH + 1, ..Config::default() }), ["batch_size"]);
        assert_eq!(failing(Config { eval_batch_size: Some(MAX_BATCH + 1), ..Config::default() }), ["eval_batch_size"]);
        assert_eq!(failing(Config { eval_block_size: Some(2048), ..Config::default() }), ["eval_block_size", "block_size"]);
        assert_eq!(failing(Config { dropout: 1.5, ..Config::default() }), ["dropout"]);
    }
}
