//! The trainer computes what PyTorch computes. `tests/reference/probes/torch_training_steps.py`
//! ran train.py's arithmetic (micro-steps, gradient accumulation, clipping, AdamW with nanoGPT's
//! groups) in float64 on nanoGPT-architecture GPTs whose parameters and batches come from a hash
//! both sides compute; `tests/reference/data/torch-training-steps.json` holds what it got. Here
//! the trainer's own model and `train::optimizer_iteration` (what `vramfit train` runs per
//! iteration) go through the same iterations in float32 and must agree to float32's precision:
//! the losses, the gradient norms, the held-out loss and every parameter after the last step.
//! The finite-difference test in `model.rs` holds the backward to the trainer's own forward; this
//! holds the forward itself (GELU's form, layer norm's epsilon, the causal mask, weight tying, the
//! loss) and the optimizer to PyTorch's.

use candle_core::{Device, Tensor};
use serde_json::Value;
use vramfit::model::{Gpt, ModelOptions};
use vramfit::optim::{AdamW, AdamWSettings};
use vramfit::train::optimizer_iteration;
use vramfit_core::Config;

const DATA: &str = include_str!("../../tests/reference/data/torch-training-steps.json");

/// The script's `splitmix`: SplitMix64's output for counter `k` of stream `seed`.
fn splitmix(seed: u64, k: u64) -> u64 {
    let mut z = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add((k + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The script's `uniform`: in [-1, 1), exact in f64 on both sides.
fn uniform(seed: u64, k: u64) -> f64 {
    (splitmix(seed, k) >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// The script's `param_values`, rounded to f32 as it rounds them.
fn param_values(index: usize, name: &str, numel: usize) -> Vec<f32> {
    let layer_norm_weight = name.ends_with("weight") && (name.contains(".ln_") || name.contains("ln_f"));
    let (base, scale) = if layer_norm_weight { (1.0, 0.1) } else { (0.0, 0.25) };
    (0..numel as u64).map(|k| (base + scale * uniform(1000 + index as u64, k)) as f32).collect()
}

/// The script's `tokens`: a [b, t] batch of ids below `vocab`.
fn tokens(seed: u64, b: usize, t: usize, vocab: u64) -> Tensor {
    let ids: Vec<u32> = (0..(b * t) as u64).map(|k| (splitmix(seed, k) % vocab) as u32).collect();
    Tensor::from_vec(ids, (b, t), &Device::Cpu).unwrap()
}

fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} is a number in {v}"))
}

fn size(v: &Value, key: &str) -> usize {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} is a whole number in {v}")) as usize
}

/// |got - want| within `rel` of `scale`: the relative error, else a failure naming `what`.
fn close_on(got: f64, want: f64, scale: f64, rel: f64, what: &str) -> Result<f64, String> {
    let err = (got - want).abs() / scale;
    if err <= rel {
        Ok(err)
    } else {
        Err(format!("{what}: trainer {got}, PyTorch {want} (relative error {err:.2e} > {rel:.0e})"))
    }
}

/// [`close_on`] the scale of `want` (or 1 near zero).
fn close(got: f64, want: f64, rel: f64, what: &str) -> Result<f64, String> {
    close_on(got, want, want.abs().max(1.0), rel, what)
}

/// Runs one case through the trainer; returns the largest relative errors (losses and norms,
/// parameter sums of squares) or the first disagreement.
fn check_case(case: &Value, adamw: &Value) -> Result<(f64, f64), String> {
    let id = case["id"].as_str().unwrap();
    let cfg = Config {
        n_layer: size(case, "n_layer") as u32,
        n_head: size(case, "n_head") as u32,
        n_embd: size(case, "n_embd") as u32,
        block_size: size(case, "block_size") as u32,
        vocab_size: size(case, "vocab_size") as u32,
        bias: case["bias"].as_bool().unwrap(),
        dropout: 0.0,
        ..Config::default()
    };
    let trainer = &case["trainer"];
    let opts = ModelOptions {
        activation_checkpointing: trainer["activation_checkpointing"].as_bool().unwrap_or(false),
        chunked_loss: trainer["chunked_loss"].as_bool().unwrap_or(false),
        eval_chunk_rows: None,
    };
    let mut model = Gpt::new(&cfg, opts, &Device::Cpu, 0).map_err(|e| e.to_string())?;
    if let Some(rows) = trainer["loss_chunk_rows"].as_u64() {
        model.set_loss_chunk_rows(rows as usize);
    }
    // Same parameters, same names, same order (nanoGPT's named_parameters(), lm_head tied).
    let names: Vec<&str> = case["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    let ours: Vec<&str> = model.params().iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(ours, names, "{id}: parameter names and order");
    for (i, (name, var)) in model.params().iter().enumerate() {
        let values = Tensor::from_vec(param_values(i, name, var.elem_count()), var.shape(), &Device::Cpu).unwrap();
        var.set(&values).unwrap();
    }
    let betas = adamw["betas"].as_array().unwrap();
    let settings = AdamWSettings {
        beta1: betas[0].as_f64().unwrap(),
        beta2: betas[1].as_f64().unwrap(),
        eps: num(adamw, "eps"),
        weight_decay: num(adamw, "weight_decay"),
    };
    let mut optimizer = AdamW::new(model.params(), settings);
    let (b, t, micro_steps) = (size(case, "batch"), size(case, "seq"), size(case, "micro_steps"));
    let vocab = cfg.vocab_size as u64;
    let mut batch_seed = 1;
    let mut worst_step = 0f64;
    for (i, it) in case["iterations"].as_array().unwrap().iter().enumerate() {
        let next_batch = || {
            let (x, y) = (tokens(batch_seed, b, t, vocab), tokens(batch_seed + 1, b, t, vocab));
            batch_seed += 2;
            Ok((x, y, 0))
        };
        let step = optimizer_iteration(&model, &mut optimizer, None, micro_steps, num(it, "lr"), num(adamw, "grad_clip"), next_batch)
            .map_err(|e| format!("{id}: iteration {i}: {e:?}"))?;
        assert!(!step.skipped);
        worst_step = worst_step.max(close(step.loss as f64, num(it, "loss"), 2e-6, &format!("{id}: iteration {i}'s loss"))?);
        let norm = step.grad_norm.expect("clipping is on");
        worst_step = worst_step.max(close(norm, num(it, "grad_norm"), 2e-6, &format!("{id}: iteration {i}'s gradient norm"))?);
    }
    let held_out = model.eval_loss(&tokens(999, b, t, vocab), &tokens(1000, b, t, vocab)).unwrap();
    worst_step = worst_step.max(close(held_out as f64, num(case, "held_out_loss"), 2e-6, &format!("{id}: held-out loss"))?);
    let mut worst_param = 0f64;
    let c = cfg.n_embd as usize;
    for (name, var) in model.params() {
        let mut p = var.as_tensor().to_dtype(candle_core::DType::F64).unwrap();
        if name.ends_with("attn.c_attn.bias") {
            // Without the key third, as the script compares it (its `compared_parameters`: the
            // loss does not depend on the key bias, so its gradient is rounding noise).
            p = Tensor::cat(&[p.narrow(0, 0, c).unwrap(), p.narrow(0, 2 * c, c).unwrap()], 0).unwrap();
        }
        let want = &case["params"][name.as_str()];
        let sum_sq = p.sqr().unwrap().sum_all().unwrap().to_scalar::<f64>().unwrap();
        worst_param = worst_param.max(close(sum_sq, num(want, "sum_sq"), 2e-6, &format!("{id}: {name}'s sum of squares"))?);
        // Sums sit near zero for most tensors: compared per element, on the scale of one
        // parameter (its root mean square).
        let sum = p.sum_all().unwrap().to_scalar::<f64>().unwrap();
        let n = p.elem_count() as f64;
        let rms = (sum_sq / n).sqrt();
        worst_param = worst_param.max(close_on(sum / n, num(want, "sum") / n, rms, 2e-6, &format!("{id}: {name}'s mean"))?);
    }
    Ok((worst_step, worst_param))
}

#[test]
fn training_steps_match_pytorch() {
    let data: Value = serde_json::from_str(DATA).expect("the reference data is JSON");
    let adamw = &data["provenance"]["adamw"];
    let cases = data["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 4, "a case was dropped from the reference data");
    let mut failures = Vec::new();
    for case in cases {
        match check_case(case, adamw) {
            Ok((step, param)) => eprintln!("{}: worst relative error {step:.1e} (losses, norms), {param:.1e} (parameters)", case["id"]),
            Err(why) => failures.push(why),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
