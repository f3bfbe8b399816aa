//! `train --weights`: fine-tuning from GPT-2's weights as Hugging Face publishes them. The real
//! files are 0.5 to 6 GB and vramfit downloads nothing, so the tests write a tiny model in the
//! same layout (names without `transformer.`, Conv1D weights stored [in, out], mask buffers).

mod train_support;

use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use train_support::*;

const LAYERS: usize = 2;
const WIDTH: usize = 16;
const VOCAB: usize = 50257;
const POSITIONS: usize = 32;
const BLOCK: usize = 16;

/// A distinct value for every element of every tensor, so a misplaced or untransposed tensor shows.
fn values(seed: usize, n: usize) -> Vec<f32> {
    (0..n).map(|i| (((seed * 7919 + i * 104_729) % 20_011) as f32 / 20_011.0 - 0.5) * 0.1).collect()
}

/// The tensors of a Hugging Face GPT-2 file (layers, width, vocabulary, positions), by name and
/// shape as stored there, mask buffers included.
fn hf_layout(l: usize, c: usize, v: usize, p: usize) -> Vec<(String, Vec<usize>)> {
    let mut shapes: Vec<(String, Vec<usize>)> = vec![("wte.weight".into(), vec![v, c]), ("wpe.weight".into(), vec![p, c])];
    for i in 0..l {
        for (name, shape) in [
            ("ln_1.weight", vec![c]),
            ("ln_1.bias", vec![c]),
            ("attn.bias", vec![1, 1, p, p]),
            ("attn.masked_bias", vec![1]),
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
        ] {
            shapes.push((format!("h.{i}.{name}"), shape));
        }
    }
    shapes.push(("ln_f.weight".into(), vec![c]));
    shapes.push(("ln_f.bias".into(), vec![c]));
    shapes
}

/// The tiny model's file, with a distinct value in every element.
fn hf_tensors(with_prefix: bool) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let prefix = if with_prefix { "transformer." } else { "" };
    hf_layout(LAYERS, WIDTH, VOCAB, POSITIONS)
        .into_iter()
        .enumerate()
        .map(|(seed, (name, shape))| {
            let n = shape.iter().product();
            (format!("{prefix}{name}"), shape, values(seed + 1, n))
        })
        .collect()
}

fn write_weights(path: &Path, tensors: &[(String, Vec<usize>, Vec<f32>)]) {
    write_weights_as(path, tensors, DType::F32);
}

fn write_weights_as(path: &Path, tensors: &[(String, Vec<usize>, Vec<f32>)], dtype: DType) {
    let tensor = |shape: &[usize], v: &[f32]| Tensor::from_vec(v.to_vec(), shape, &Device::Cpu).unwrap().to_dtype(dtype).unwrap();
    let map: HashMap<String, Tensor> = tensors.iter().map(|(n, shape, v)| (n.clone(), tensor(shape, v))).collect();
    candle_core::safetensors::save(&map, path).unwrap();
}

/// The values a file of `dtype` holds for `v`.
fn rounded(v: Vec<f32>, dtype: DType) -> Vec<f32> {
    let n = v.len();
    Tensor::from_vec(v, n, &Device::Cpu).unwrap().to_dtype(dtype).unwrap().to_dtype(DType::F32).unwrap().to_vec1().unwrap()
}

/// What nanoGPT's from_pretrained makes of them: [out, in] linears, positions cropped to the block.
fn expected(tensors: &[(String, Vec<usize>, Vec<f32>)], name: &str) -> Vec<f32> {
    let bare = name.strip_prefix("transformer.").unwrap();
    let (_, shape, v) = tensors.iter().find(|(n, _, _)| n.trim_start_matches("transformer.") == bare).unwrap();
    let conv1d = ["attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"].iter().any(|s| bare.ends_with(s));
    if conv1d {
        let (rows, cols) = (shape[0], shape[1]);
        (0..cols).flat_map(|o| (0..rows).map(move |i| (i, o))).map(|(i, o)| v[i * cols + o]).collect()
    } else if bare == "wpe.weight" {
        v[..BLOCK * WIDTH].to_vec()
    } else {
        v.clone()
    }
}

fn story(dir: &Path) -> PathBuf {
    let path = dir.join("story.txt");
    std::fs::write(&path, "Once upon a time there was a small model that wanted to learn. ".repeat(40)).unwrap();
    path
}

const SHAPE: [&str; 12] =
    ["--n-layer", "2", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--vocab-size", "50257", "--bias", "true"];

fn train_args<'a>(out: &'a str, weights: &'a str, data: &'a str) -> Vec<&'a str> {
    let mut args = vec!["train", "--out-dir", out, "--weights", weights, "--data", data, "--tokenizer", "gpt2"];
    args.extend_from_slice(&SHAPE);
    args.extend_from_slice(&["--batch-size", "2", "--eval-iters", "2", "--threads", "1"]);
    args
}

/// With a zero learning rate the run's checkpoint holds exactly what was loaded: every tensor in
/// its place, the Conv1D weights transposed, the positions cropped, the mask buffers skipped.
#[test]
fn the_weights_are_loaded_as_from_pretrained_loads_them() {
    // As published (F32, no prefix), saved from GPT2LMHeadModel (`transformer.`), and in half precision.
    for (with_prefix, dtype) in [(false, DType::F32), (true, DType::F32), (false, DType::F16), (false, DType::BF16)] {
        let dir = scratch(&format!("pretrained-{with_prefix}-{dtype:?}"));
        let tensors = hf_tensors(with_prefix);
        let file = dir.join("model.safetensors");
        write_weights_as(&file, &tensors, dtype);
        let data = story(&dir);
        let out_dir = dir.join("out");
        let mut args = train_args(out_dir.to_str().unwrap(), file.to_str().unwrap(), data.to_str().unwrap());
        args.extend_from_slice(&["--learning-rate", "0", "--decay-lr", "false", "--max-iters", "2", "--eval-interval", "2"]);
        let out = run(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.contains(&format!("starting from GPT-2's weights: {} tensors from", 2 + LAYERS * 12 + 2)), "{stdout}");
        let (meta, stored) = checkpoint_tensors(&out_dir);
        assert_eq!(meta.vocab, vramfit::data::Vocabulary::Gpt2);
        // wte, wpe, 12 per block, ln_f's weight and bias; the stored tensors start with them.
        assert_eq!(meta.param_names.len(), 2 + LAYERS * 12 + 2, "{:?}", meta.param_names);
        assert!(stored.len() >= meta.param_names.len(), "{} tensors stored", stored.len());
        for (name, got) in meta.param_names.iter().zip(&stored) {
            assert_eq!(got, &rounded(expected(&tensors, name), dtype), "{name} (prefix {with_prefix}, {dtype:?})");
        }
    }
}

/// Bad weights or settings that cannot go with them: one error line, before training.
#[test]
fn weights_that_do_not_fit_the_run_are_one_error_line() {
    let dir = scratch("pretrained-bad");
    let tensors = hf_tensors(false);
    let file = dir.join("model.safetensors");
    write_weights(&file, &tensors);
    let data = story(&dir);
    let out_dir = dir.join("out");
    let (o, f, d) = (out_dir.to_str().unwrap(), file.to_str().unwrap(), data.to_str().unwrap());
    let error = |extra: &[&str], base: Vec<&str>| {
        let mut args = base;
        args.extend_from_slice(extra);
        one_error_line(&run(&args))
    };
    // Another shape than the weights'.
    let err = error(&["--n-layer", "3"], train_args(o, f, d));
    assert!(err.contains("2 layers, the config's n_layer is 3"), "{err}");
    let err = error(&["--n-embd", "32", "--n-head", "2"], train_args(o, f, d));
    assert!(err.contains("wte.weight is [50257, 16] (vocabulary x width): the config must have the same"), "{err}");
    let err = error(&["--block-size", "64"], train_args(o, f, d));
    assert!(err.contains("fewer than block_size 64 positions"), "{err}");
    let err = error(&["--bias", "false"], train_args(o, f, d));
    assert!(err.contains("bias True"), "{err}");
    // Character-level data: not GPT-2's tokens.
    let mut chars = vec!["train", "--out-dir", o, "--weights", f, "--data", d];
    chars.extend_from_slice(&SHAPE);
    let err = one_error_line(&run(&chars));
    assert!(err.contains("GPT-2's weights read GPT-2's tokens"), "{err}");
    // Not a weights file; a file missing a tensor; a directory.
    let garbage = dir.join("garbage.safetensors");
    std::fs::write(&garbage, b"not safetensors at all").unwrap();
    let err = error(&[], train_args(o, garbage.to_str().unwrap(), d));
    assert!(err.contains("not a safetensors file"), "{err}");
    let partial = dir.join("partial.safetensors");
    let missing: Vec<_> = tensors.iter().filter(|(n, _, _)| n != "h.1.mlp.c_fc.bias").cloned().collect();
    write_weights(&partial, &missing);
    let err = error(&[], train_args(o, partial.to_str().unwrap(), d));
    assert!(err.contains("no tensor h.1.mlp.c_fc.bias"), "{err}");
    // A Conv1D weight stored as nn.Linear would store it: refused (a square one cannot be told).
    let linear = dir.join("linear.safetensors");
    let mut transposed = tensors.clone();
    let fc = transposed.iter_mut().find(|(n, _, _)| n == "h.0.mlp.c_fc.weight").unwrap();
    fc.1 = vec![4 * WIDTH, WIDTH];
    write_weights(&linear, &transposed);
    let err = error(&[], train_args(o, linear.to_str().unwrap(), d));
    assert!(err.contains("h.0.mlp.c_fc.weight is [64, 16], GPT-2's layout for n_embd 16 is [16, 64]"), "{err}");
    let err = error(&[], train_args(o, dir.to_str().unwrap(), d));
    assert!(err.contains("cannot read weights"), "{err}");
    // A tensor that is not a float, a name counting absurdly many layers, a FIFO: refused up front.
    let ints = dir.join("ints.safetensors");
    let mut map: HashMap<String, Tensor> = HashMap::new();
    for (n, shape, v) in &tensors {
        let t = Tensor::from_vec(v.clone(), shape.as_slice(), &Device::Cpu).unwrap();
        map.insert(n.clone(), if n == "ln_f.bias" { t.to_dtype(DType::I64).unwrap() } else { t });
    }
    candle_core::safetensors::save(&map, &ints).unwrap();
    let err = error(&[], train_args(o, ints.to_str().unwrap(), d));
    assert!(err.contains("ln_f.bias is I64"), "{err}");
    // A NaN or an infinity in any dtype the loader reads: refused before training (it was a
    // NaN loss at the first evaluation, blamed on the learning rate).
    for (dtype, bad) in [(DType::F32, f32::NAN), (DType::F16, f32::INFINITY), (DType::BF16, f32::NEG_INFINITY)] {
        let poisoned_file = dir.join("poisoned.safetensors");
        let mut poisoned = tensors.clone();
        poisoned.iter_mut().find(|(n, _, _)| n == "h.1.attn.c_proj.weight").unwrap().2[5] = bad;
        write_weights_as(&poisoned_file, &poisoned, dtype);
        let err = error(&[], train_args(o, poisoned_file.to_str().unwrap(), d));
        assert!(err.contains("h.1.attn.c_proj.weight holds NaN or infinite values"), "{dtype:?}: {err}");
    }
    let absurd = dir.join("absurd.safetensors");
    let mut named = tensors.clone();
    named.push((format!("h.{}.x", usize::MAX), vec![1], vec![0.0]));
    write_weights(&absurd, &named);
    let err = error(&[], train_args(o, absurd.to_str().unwrap(), d));
    assert!(err.contains(&format!("{} layers, the config's n_layer is 2", usize::MAX)), "{err}");
    #[cfg(unix)]
    {
        let fifo = dir.join("fifo.safetensors");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()), "mkfifo (coreutils) runs");
        let err = error(&[], train_args(o, fifo.to_str().unwrap(), d));
        assert!(err.contains("not a file"), "{err}");
    }
    // --resume continues a checkpoint: it does not take weights.
    let err = one_error_line(&run(&["train", "--resume", "--out-dir", o, "--weights", f]));
    assert!(err.contains("--weights starts a new run"), "{err}");
    assert!(!out_dir.join("ckpt.safetensors").exists(), "nothing was trained");
}

/// A file of GPT-2 124M's layout whose data is a hole: the header is all that is read before the
/// run's shape is settled (and the pre-flight, given 64 MiB, stops it before any tensor is).
fn sparse_gpt2_small(path: &Path) {
    // Without the mask buffers (a [1, 1, 1024, 1024] hole each would not matter, but are not needed).
    let shapes: Vec<(String, Vec<usize>)> = hf_layout(12, 768, 50257, 1024)
        .into_iter()
        .filter(|(n, _)| !n.ends_with(".attn.bias") && !n.ends_with(".attn.masked_bias"))
        .collect();
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, shape) in &shapes {
        let bytes = 4 * shape.iter().product::<usize>();
        header.insert(name.clone(), serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + bytes]}));
        offset += bytes;
    }
    let mut text = serde_json::Value::Object(header).to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut head = (text.len() as u64).to_le_bytes().to_vec();
    head.extend_from_slice(text.as_bytes());
    std::fs::write(path, &head).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_len((head.len() + offset) as u64).unwrap();
}

/// GPT-2's own sizes give the model their shape, with a note, as from_pretrained does; a block
/// past the 1024 positions or an init_from naming another size is an error.
#[test]
fn gpt2_sized_weights_give_the_run_their_shape() {
    let dir = scratch("pretrained-gpt2-small");
    let file = dir.join("model.safetensors");
    sparse_gpt2_small(&file);
    // Enough tokens for the default block of 64 in the val split.
    let data = dir.join("long-story.txt");
    std::fs::write(&data, "Once upon a time there was a small model that wanted to learn. ".repeat(400)).unwrap();
    let out_dir = dir.join("out");
    let (o, f, d) = (out_dir.to_str().unwrap(), file.to_str().unwrap(), data.to_str().unwrap());
    let base = ["train", "--out-dir", o, "--weights", f, "--data", d, "--tokenizer", "gpt2", "--max-memory-mib", "64"];
    let out = run(&base);
    let err = one_error_line(&out);
    assert!(err.contains("this run needs") && err.contains("64.0 MiB is available"), "the pre-flight stops it: {err}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("note: --weights: gpt2's shape: n_layer 2 -> 12, n_head 4 -> 12, n_embd 64 -> 768"), "{stderr}");
    assert!(stderr.contains("bias False -> True"), "{stderr}");
    let with = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        one_error_line(&run(&args))
    };
    let err = with(&["--block-size", "2048"]);
    assert!(err.contains("fewer than block_size 2048 positions"), "{err}");
    let err = with(&["--link", "?v=1&init=gpt2-xl&B=1"]);
    assert!(err.contains("--weights holds gpt2's weights but the settings name init_from = 'gpt2-xl'"), "{err}");
    assert!(!out_dir.exists(), "nothing was written");
}
