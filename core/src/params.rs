//! Exact parameter counts, tensor by tensor, as nanoGPT's `GPT` builds them.
//!
//! `lm_head.weight` is tied to `transformer.wte.weight`, so it is counted once; `wpe` is
//! counted in the total but not in the "number of parameters" nanoGPT prints.

use crate::config::Config;
use serde::{Deserialize, Serialize};

/// One parameter tensor of the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamTensor {
    /// nanoGPT's name, with `{i}` for the layer index in per-layer entries.
    pub name: &'static str,
    pub shape: [u64; 2],
    /// Rank of the tensor: AdamW decays tensors of rank >= 2 only.
    pub rank: u8,
    /// How many copies of this entry the model has (n_layer for per-layer tensors).
    pub count: u64,
    /// Whether autocast casts it to the compute dtype for a matmul (linear weights, their biases).
    pub cast_by_autocast: bool,
}

impl ParamTensor {
    pub fn elements(&self) -> u64 {
        self.shape[0] * self.shape[1]
    }
}

/// The parameter table: one named entry per tensor, its shape, and how often it occurs.
pub fn param_tensors(cfg: &Config) -> Vec<ParamTensor> {
    let (l, c, v, t) = (cfg.n_layer as u64, cfg.n_embd as u64, cfg.vocab_size as u64, cfg.block_size as u64);
    let p = |name, shape: [u64; 2], rank, count, cast_by_autocast| ParamTensor { name, shape, rank, count, cast_by_autocast };
    let mut out = vec![
        // Token embedding, also the lm_head weight (tied): cast to the compute dtype by lm_head.
        p("transformer.wte.weight", [v, c], 2, 1, true),
        p("transformer.wpe.weight", [t, c], 2, 1, false),
        p("transformer.h.{i}.ln_1.weight", [c, 1], 1, l, false),
        p("transformer.h.{i}.attn.c_attn.weight", [3 * c, c], 2, l, true),
        p("transformer.h.{i}.attn.c_proj.weight", [c, c], 2, l, true),
        p("transformer.h.{i}.ln_2.weight", [c, 1], 1, l, false),
        p("transformer.h.{i}.mlp.c_fc.weight", [4 * c, c], 2, l, true),
        p("transformer.h.{i}.mlp.c_proj.weight", [c, 4 * c], 2, l, true),
        p("transformer.ln_f.weight", [c, 1], 1, 1, false),
    ];
    if cfg.bias {
        out.extend([
            p("transformer.h.{i}.ln_1.bias", [c, 1], 1, l, false),
            p("transformer.h.{i}.attn.c_attn.bias", [3 * c, 1], 1, l, true),
            p("transformer.h.{i}.attn.c_proj.bias", [c, 1], 1, l, true),
            p("transformer.h.{i}.ln_2.bias", [c, 1], 1, l, false),
            p("transformer.h.{i}.mlp.c_fc.bias", [4 * c, 1], 1, l, true),
            p("transformer.h.{i}.mlp.c_proj.bias", [c, 1], 1, l, true),
            p("transformer.ln_f.bias", [c, 1], 1, 1, false),
        ]);
    }
    out
}

/// Parameter counts as nanoGPT reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParamCounts {
    /// Every unique parameter (wpe included, tied wte/lm_head once).
    pub total: u64,
    /// What nanoGPT prints as "number of parameters": total without wpe.
    pub printed: u64,
    /// Weight-decayed group: tensors of rank >= 2.
    pub decayed_tensors: u64,
    pub decayed_params: u64,
    /// Non-decayed group: LayerNorm weights and all biases.
    pub no_decay_tensors: u64,
    pub no_decay_params: u64,
    /// Parameter tensors (each its own allocation).
    pub tensors: u64,
    /// Elements of the weights autocast casts for matmuls (linear weights and biases, wte).
    pub cast_params: u64,
    /// Elements in wpe (the only parameter outside `printed`).
    pub wpe: u64,
}

impl ParamCounts {
    /// nanoGPT's "number of parameters: 123.59M" line.
    pub fn printed_millions(&self) -> String {
        format!("{:.2}M", self.printed as f64 / 1e6)
    }
}

pub fn count(cfg: &Config) -> ParamCounts {
    let mut pc = ParamCounts::default();
    for t in param_tensors(cfg) {
        let elems = t.elements() * t.count;
        pc.total += elems;
        pc.tensors += t.count;
        if t.rank >= 2 {
            pc.decayed_tensors += t.count;
            pc.decayed_params += elems;
        } else {
            pc.no_decay_tensors += t.count;
            pc.no_decay_params += elems;
        }
        if t.cast_by_autocast {
            pc.cast_params += elems;
        }
        if t.name == "transformer.wpe.weight" {
            pc.wpe = elems;
        }
    }
    pc.printed = pc.total - pc.wpe;
    pc
}

/// Bytes as whole MiB, to the nearest (half up): the one rounding `vramfit plan` and the page
/// show MiB figures with, so that both say the same number.
pub fn nearest_mib(bytes: u64) -> u64 {
    let mib = 1u64 << 20;
    bytes / mib + u64::from(bytes % mib >= mib / 2)
}

/// Bytes as whole MiB with thousands separators ("4,464"), to the nearest ([`nearest_mib`]).
pub fn mib_text(bytes: u64) -> String {
    thousands(nearest_mib(bytes))
}

/// A count with its digits grouped by commas (`1234567` → `1,234,567`), as train.py prints
/// parameter counts; `vramfit plan` and the page print counts this way.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn mib_are_rounded_to_the_nearest() {
        use super::{mib_text, nearest_mib};
        let mib = 1u64 << 20;
        assert_eq!([nearest_mib(0), nearest_mib(mib / 2 - 1), nearest_mib(mib / 2), nearest_mib(2_348_810)], [0, 0, 1, 2]);
        assert_eq!(nearest_mib(u64::MAX), (u64::MAX >> 20) + 1, "no overflow");
        assert_eq!(mib_text(4_464 * mib + 3), "4,464");
    }

    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(124_373_760), "124,373,760");
    }

    fn gpt2(bias: bool) -> Config {
        Config { bias, ..Config::default() }
    }

    // Figures nanoGPT prints for GPT-2 124M (vocab 50304, bias=False): "num decayed parameter
    // tensors: 50, with 124,354,560 parameters", "num non-decayed parameter tensors: 25, with
    // 19,200 parameters", "number of parameters: 123.59M".
    #[test]
    fn gpt2_124m_matches_nanogpt_printout() {
        let pc = count(&gpt2(false));
        assert_eq!(pc.total, 124_373_760);
        assert_eq!(pc.printed_millions(), "123.59M");
        assert_eq!((pc.decayed_tensors, pc.decayed_params), (50, 124_354_560));
        assert_eq!((pc.no_decay_tensors, pc.no_decay_params), (25, 19_200));
    }

    #[test]
    fn shakespeare_char_and_oom_report_configs() {
        // config/train_shakespeare_char.py: 6 layers, 6 heads, 384 wide, block 256, vocab 65.
        let sc = Config::shakespeare_char();
        assert_eq!(count(&sc).printed_millions(), "10.65M");
        let oom = Config { n_layer: 6, n_head: 6, n_embd: 384, block_size: 512, ..Config::default() };
        assert_eq!(count(&oom).printed_millions(), "29.94M");
    }

    #[test]
    fn bias_adds_one_vector_per_linear_and_layernorm() {
        let (a, b) = (count(&gpt2(false)), count(&gpt2(true)));
        let (c, l) = (768u64, 12u64);
        // Per layer: ln_1, ln_2 (C each), c_attn (3C), attn.c_proj (C), c_fc (4C), mlp.c_proj (C); plus ln_f.
        assert_eq!(b.total - a.total, l * (c + c + 3 * c + c + 4 * c + c) + c);
        assert_eq!(b.no_decay_tensors, 25 + 6 * 12 + 1);
        assert_eq!(b.decayed_tensors, a.decayed_tensors);
    }
}
