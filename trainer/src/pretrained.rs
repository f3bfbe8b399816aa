//! GPT-2's weights as Hugging Face publishes them (the `model.safetensors` of `gpt2`,
//! `gpt2-medium`, `gpt2-large`, `gpt2-xl`), loaded into the trainer's model for fine-tuning, as
//! nanoGPT's `GPT.from_pretrained` loads them for `init_from = 'gpt2*'`:
//!
//! - the names are nanoGPT's without `transformer.` (a file saved from `GPT2LMHeadModel` has the
//!   prefix: read too; its `lm_head.weight` is `wte`, tied, and not read);
//! - the four projections are Conv1D weights, stored [in, out]: transposed into nn.Linear's [out, in];
//! - the attention mask buffers (`attn.bias`, `attn.masked_bias`) are not parameters: skipped;
//! - the 1024-position table is cropped to `block_size`, as `crop_block_size` does.
//!
//! vramfit downloads nothing: the file is the user's. It is memory-mapped, and each tensor is
//! copied into its parameter on its own, so loading adds one tensor to the run's memory, not the
//! whole file. (A map's cost: a file cut short by another program while it is read ends the
//! process with SIGBUS, as it would any program mapping it.)

use crate::model::Gpt;
use candle_core::{DType, Device, Tensor};
use safetensors::tensor::{Dtype as StDtype, SafeTensors};
use std::path::Path;
use vramfit_core::Config;

/// The Conv1D weights, stored transposed.
const CONV1D: [&str; 4] = ["attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"];

/// A weights file, mapped.
pub struct Weights {
    map: memmap2::Mmap,
    shown: String,
}

impl Weights {
    /// Opens and maps `path`; every problem is one line.
    pub fn open(path: &Path) -> Result<Weights, String> {
        let shown = path.display().to_string();
        // Before opening: opening a FIFO would wait for a writer.
        if !std::fs::metadata(path).map_err(|e| format!("cannot read weights {shown}: {e}"))?.is_file() {
            return Err(format!("cannot read weights {shown}: not a file"));
        }
        let file = std::fs::File::open(path).map_err(|e| format!("cannot read weights {shown}: {e}"))?;
        // SAFETY: the map is read-only and lives as long as `Weights`; safetensors checks every
        // offset against its length. Another program changing the file meanwhile changes what is
        // read, and cutting it short ends the process (see the module docs).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| format!("cannot read weights {shown}: {e}"))?;
        let weights = Weights { map, shown };
        weights.tensors()?;
        Ok(weights)
    }

    fn tensors(&self) -> Result<SafeTensors<'_>, String> {
        SafeTensors::deserialize(&self.map).map_err(|e| format!("weights {}: not a safetensors file ({e})", self.shown))
    }

    /// The file's name for a model parameter, if it has the tensor (with or without `transformer.`).
    fn name_in_file(&self, st: &SafeTensors<'_>, param: &str) -> Option<String> {
        let bare = param.strip_prefix("transformer.").unwrap_or(param);
        [bare.to_string(), format!("transformer.{bare}")].into_iter().find(|n| st.tensor(n).is_ok())
    }

    /// Which of GPT-2's four checkpoints the file holds, by its shape (`None` for any other
    /// GPT-2-style model, such as distilgpt2, whose shape the config must then give).
    pub fn gpt2_size(&self) -> Option<&'static str> {
        let st = self.tensors().ok()?;
        let wte = st.tensor(&self.name_in_file(&st, "wte.weight")?).ok()?.shape().to_vec();
        let (&[vocab, width], Ok(layers)) = (wte.as_slice(), u32::try_from(layer_count(&st))) else { return None };
        vramfit_core::nanogpt::pretrained_of_shape(layers, u32::try_from(width).ok()?, u32::try_from(vocab).ok()?)
    }

    /// Checks, before any model is built, that the file is GPT-2's of the config's shape: the
    /// vocabulary and width of `wte`, enough positions in `wpe` and the number of layers.
    pub fn check_shape(&self, cfg: &Config) -> Result<(), String> {
        let st = self.tensors()?;
        let bad = |why: String| format!("weights {}: {why}", self.shown);
        let dims = |param: &str| -> Result<Vec<usize>, String> {
            let name =
                self.name_in_file(&st, param).ok_or_else(|| bad(format!("no tensor {param} (not GPT-2's weights, or another size?)")))?;
            let view = st.tensor(&name).map_err(|e| bad(e.to_string()))?;
            float_dtype(view.dtype()).ok_or_else(|| bad(not_float(&name, view.dtype())))?;
            // Caught here, not as a NaN loss at the first evaluation blamed on the learning rate.
            if !all_finite(view.data(), view.dtype()) {
                return Err(bad(format!("{name} holds NaN or infinite values")));
            }
            Ok(view.shape().to_vec())
        };
        let (c, v, t) = (cfg.n_embd as usize, cfg.vocab_size as usize, cfg.block_size as usize);
        let wte = dims("wte.weight")?;
        if wte != [v, c] {
            return Err(bad(format!(
                "wte.weight is {wte:?} (vocabulary x width): the config must have the same (it has vocab_size {v}, n_embd {c})"
            )));
        }
        let wpe = dims("wpe.weight")?;
        if wpe.len() != 2 || wpe[1] != c || wpe[0] < t {
            return Err(bad(format!("wpe.weight is {wpe:?}: fewer than block_size {t} positions, or another width")));
        }
        let layers = layer_count(&st);
        if layers != cfg.n_layer as usize {
            return Err(bad(format!("{layers} layers, the config's n_layer is {}", cfg.n_layer)));
        }
        if !cfg.bias {
            return Err(bad("GPT-2's weights have biases: the config needs bias True".into()));
        }
        // Every other tensor, as the file stores it (Conv1D weights [in, out]).
        let per_layer = [
            ("ln_1.weight", vec![c]),
            ("ln_1.bias", vec![c]),
            ("attn.c_attn.weight", vec![c, 3 * c]),
            ("attn.c_attn.bias", vec![3 * c]),
            ("attn.c_proj.weight", vec![c, c]),
            ("attn.c_proj.bias", vec![c]),
            ("ln_2.weight", vec![c]),
            ("ln_2.bias", vec![c]),
            ("mlp.c_fc.weight", vec![c, 4 * c]),
            ("mlp.c_fc.bias", vec![4 * c]),
            ("mlp.c_proj.weight", vec![4 * c, c]),
            ("mlp.c_proj.bias", vec![c]),
        ];
        let layers = (0..layers).flat_map(|i| per_layer.iter().map(move |(n, shape)| (format!("h.{i}.{n}"), shape.clone())));
        for (name, shape) in layers.chain([("ln_f.weight".to_string(), vec![c]), ("ln_f.bias".to_string(), vec![c])]) {
            let stored = dims(&name)?;
            if stored != shape {
                return Err(bad(format!("{name} is {stored:?}, GPT-2's layout for n_embd {c} is {shape:?}")));
            }
        }
        Ok(())
    }

    /// Copies the file's tensors into the model's parameters (see the module docs); returns how
    /// many were loaded.
    pub fn load_into(&self, model: &Gpt) -> Result<usize, String> {
        let st = self.tensors()?;
        let bad = |why: String| format!("weights {}: {why}", self.shown);
        for (param, var) in model.params() {
            let name = self.name_in_file(&st, param).ok_or_else(|| bad(format!("no tensor for the model's {param}")))?;
            let view = st.tensor(&name).map_err(|e| bad(e.to_string()))?;
            let dtype = float_dtype(view.dtype()).ok_or_else(|| bad(not_float(&name, view.dtype())))?;
            let mut t = Tensor::from_raw_buffer(view.data(), dtype, view.shape(), &Device::Cpu)
                .and_then(|t| t.to_dtype(DType::F32))
                .map_err(|e| bad(format!("{name}: {e}")))?;
            let conv1d = CONV1D.iter().any(|s| param.ends_with(s));
            if conv1d && t.rank() == 2 {
                t = t.t().and_then(|t| t.contiguous()).map_err(|e| bad(format!("{name}: {e}")))?;
            }
            let want = var.dims();
            if param.ends_with("wpe.weight") && t.rank() == 2 && t.dims()[0] > want[0] {
                // train.py crops the checkpoint's positions to block_size.
                t = t.narrow(0, 0, want[0]).and_then(|t| t.contiguous()).map_err(|e| bad(format!("{name}: {e}")))?;
            }
            if t.dims() != want {
                let stored = view.shape();
                let how = if conv1d { " (a Conv1D weight, stored [in, out])" } else { "" };
                return Err(bad(format!("{name} is {stored:?}{how}; the model's {param} needs {want:?}")));
            }
            let t = t.to_dtype(var.dtype()).and_then(|t| t.to_device(var.device())).map_err(|e| bad(format!("{name}: {e}")))?;
            var.set(&t).map_err(|e| bad(format!("cannot load {name}: {e}")))?;
        }
        Ok(model.params().len())
    }
}

/// Whether every value of a little-endian float tensor's bytes is finite: an exponent of all
/// ones is an infinity or a NaN, in F32, F16 and BF16 alike (other dtypes are not read).
fn all_finite(bytes: &[u8], dtype: StDtype) -> bool {
    match dtype {
        StDtype::F32 => bytes.chunks_exact(4).all(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & 0x7f80_0000 != 0x7f80_0000),
        StDtype::F16 => bytes.chunks_exact(2).all(|b| u16::from_le_bytes([b[0], b[1]]) & 0x7c00 != 0x7c00),
        StDtype::BF16 => bytes.chunks_exact(2).all(|b| u16::from_le_bytes([b[0], b[1]]) & 0x7f80 != 0x7f80),
        _ => true,
    }
}

/// The candle dtype of a float tensor the loader reads.
fn float_dtype(dtype: StDtype) -> Option<DType> {
    match dtype {
        StDtype::F32 => Some(DType::F32),
        StDtype::F16 => Some(DType::F16),
        StDtype::BF16 => Some(DType::BF16),
        _ => None,
    }
}

fn not_float(name: &str, dtype: StDtype) -> String {
    format!("{name} is {dtype:?}; GPT-2's weights are F32 (F16 and BF16 are read too)")
}

/// How many layers the file's names count (`h.0` to `h.{n-1}`), saturating for absurd names.
fn layer_count(st: &SafeTensors<'_>) -> usize {
    st.names().iter().filter_map(|n| layer_of(n)).max().map_or(0, |l| l.saturating_add(1))
}

/// The layer a tensor name belongs to (`h.3.ln_1.weight`, `transformer.h.3.…` -> 3).
fn layer_of(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("transformer.").unwrap_or(name).strip_prefix("h.")?;
    rest.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_numbers_come_from_either_naming() {
        assert_eq!(layer_of("h.3.ln_1.weight"), Some(3));
        assert_eq!(layer_of("transformer.h.11.attn.c_attn.bias"), Some(11));
        assert_eq!(layer_of("wte.weight"), None);
        assert_eq!(layer_of("h.x.ln_1.weight"), None);
    }
}
