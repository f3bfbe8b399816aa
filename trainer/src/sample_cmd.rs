//! `vramfit sample`: text from a checkpoint, as nanoGPT's `sample.py` draws it.
//!
//! Each sample starts from the prompt and appends one token at a time: the logits of the last
//! position (of at most `block_size` tokens of context) are divided by the temperature, all but
//! the `top_k` largest are dropped, and a token is drawn from the softmax with a seeded RNG.
//! The model runs forward only, on detached weights (no graph is built).

use crate::cli::SampleArgs;
use crate::train_cmd::{make_device, Failure};
use std::io::Write;
use vramfit::checkpoint;
use vramfit::data::Vocabulary;
use vramfit::model::HostRng;

fn input(message: impl Into<String>) -> Failure {
    Failure { code: 2, message: message.into() }
}

/// Index of a draw from softmax(`logits` / `temperature`) restricted to the `top_k` largest.
pub fn draw(logits: &[f32], temperature: f64, top_k: usize, rng: &mut HostRng) -> usize {
    // Shifted by the largest logit before dividing, so that a tiny temperature sends the others to
    // -inf (greedy) rather than every logit to ±inf (NaN weights, always token 0).
    let top = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let top = if top.is_finite() { top } else { 0.0 };
    let scaled: Vec<f64> = logits.iter().map(|&l| (l as f64 - top) / temperature).collect();
    let k = top_k.clamp(1, scaled.len());
    // The k-th largest value; everything below it is dropped (ties at it stay, as in sample.py).
    let mut sorted = scaled.clone();
    sorted.sort_unstable_by(|a, b| b.total_cmp(a));
    let cutoff = sorted[k - 1];
    let max = sorted[0];
    let weights: Vec<f64> = scaled.iter().map(|&x| if x >= cutoff { (x - max).exp() } else { 0.0 }).collect();
    let total: f64 = weights.iter().sum();
    let mut target = rng.uniform() * total;
    for (i, w) in weights.iter().enumerate() {
        if *w > 0.0 {
            if target < *w {
                return i;
            }
            target -= w;
        }
    }
    // Rounding left a sliver past the last candidate.
    weights.iter().rposition(|w| *w > 0.0).unwrap_or(0)
}

/// Runs `vramfit sample`; the samples go to stdout, separated by a line of dashes.
pub fn run(args: &SampleArgs) -> Result<u8, Failure> {
    // The thread count, decided once, before candle's pools start: without RAYON_NUM_THREADS
    // candle counts the cores (reading /proc/cpuinfo) at every matmul, about 13 times a token,
    // which took two thirds of a sample's time. --threads and CANDLE_NUM_THREADS are honoured
    // as by `train`.
    let env_threads = if args.threads.is_none() { crate::cli::threads_from_env().map_err(input)? } else { None };
    let threads = match args.threads.or(env_threads) {
        Some(n) => n as usize,
        None => candle_core::utils::get_num_threads(),
    };
    std::env::set_var("CANDLE_NUM_THREADS", threads.to_string());
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    let device = make_device(args.device)?;
    let path = args.out_dir.join(checkpoint::FILE_NAME);
    if !path.exists() {
        return Err(input(format!("no checkpoint at {} (run vramfit train first, or pass --out-dir)", path.display())));
    }
    let ckpt = checkpoint::load(&path, &device).map_err(input)?;
    checkpoint::check_matches_config(&ckpt, &path).map_err(input)?;
    let mut settings = ckpt.meta.settings.clone();
    settings.out_dir = args.out_dir.clone();
    let (model, _) = vramfit::train::build(&ckpt.meta.config, &settings, &device, None).map_err(input)?;
    vramfit::train::load_weights(&model, &ckpt).map_err(input)?;
    let vocab = &ckpt.meta.vocab;

    let start = match &args.prompt {
        Some(prompt) => {
            let start = vocab.encode(prompt).map_err(|e| input(format!("--prompt: {e}")))?;
            if start.is_empty() {
                return Err(input("--prompt: the prompt encodes to no tokens"));
            }
            if let Some(&bad) = start.iter().find(|&&id| id >= ckpt.meta.config.vocab_size) {
                return Err(input(format!("--prompt: token {bad} is outside the model's vocabulary")));
            }
            start
        }
        None => default_start(vocab, ckpt.meta.config.vocab_size),
    };
    // A model padded past its vocabulary (nanoGPT's 50304 for GPT-2's 50257, or a char model
    // given a larger vocab_size) has ids no text decodes to (they printed U+FFFD): draws are
    // among the vocabulary's tokens, which are all the data ever held.
    let drawable = vocab.size().min(ckpt.meta.config.vocab_size as usize);
    // (GPT-2's own padding, to 50304, is nanoGPT's default: no note for that.)
    if drawable < ckpt.meta.config.vocab_size as usize && matches!(vocab, Vocabulary::Chars { .. }) {
        crate::print_note(&format!(
            "the model's vocab_size {} is past its vocabulary's {drawable} tokens: samples draw from those {drawable}",
            ckpt.meta.config.vocab_size
        ));
    }
    let block = model.block_size();
    let mut rng = HostRng::new(args.seed);
    let mut out = std::io::stdout().lock();
    for _ in 0..args.num_samples {
        let mut ids = start.clone();
        for _ in 0..args.max_new_tokens {
            let context = &ids[ids.len().saturating_sub(block)..];
            let idx = candle_core::Tensor::from_vec(context.to_vec(), (1, context.len()), &device)
                .map_err(|e| Failure { code: 1, message: e.to_string() })?;
            let logits = model
                .next_logits(&idx)
                .and_then(|l| l.squeeze(0))
                .and_then(|l| l.to_dtype(candle_core::DType::F32))
                .and_then(|l| l.to_vec1::<f32>())
                .map_err(|e| Failure { code: 1, message: format!("sampling failed: {e}") })?;
            ids.push(draw(&logits[..drawable.min(logits.len())], args.temperature, args.top_k as usize, &mut rng) as u32);
        }
        let text = vocab.decode(&ids);
        match writeln!(out, "{text}\n---------------").and_then(|()| out.flush()) {
            Ok(()) => {}
            // A closed pipe (`vramfit sample | head`) ends the output; that is not an error.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
            // A full disk, say: the samples were lost, as `plan` reports it.
            Err(e) => return Err(Failure { code: 1, message: format!("cannot write output: {e}") }),
        }
    }
    Ok(0)
}

/// Where samples start without `--prompt`: a newline, as sample.py's default, where the model
/// can take one; otherwise token 0, with a note saying why (no `--prompt` was given, so none is
/// to blame).
fn default_start(vocab: &Vocabulary, vocab_size: u32) -> Vec<u32> {
    let why = match vocab.encode("\n") {
        Ok(ids) if !ids.is_empty() && ids.iter().all(|&id| id < vocab_size) => return ids,
        // GPT-2's newline is token 198; a model of fewer tokens (nanoGPT .bin data) lacks it.
        Ok(ids) if !ids.is_empty() => format!("the newline's token {} is not below the model's vocab_size {vocab_size}", ids[0]),
        _ => "the checkpoint's vocabulary has no newline".to_string(),
    };
    crate::print_note(&format!("{why}: the samples start from token 0, {:?} (--prompt sets the start)", vocab.decode(&[0])));
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without --prompt: a newline where the model has one; otherwise token 0, not an error
    /// about a --prompt no one gave.
    #[test]
    fn the_default_start_falls_back_to_the_first_token() {
        assert_eq!(default_start(&Vocabulary::Chars { chars: "\n ab".into() }, 4), [0]);
        assert_eq!(default_start(&Vocabulary::Chars { chars: "\t\nab".into() }, 4), [1]);
        assert_eq!(default_start(&Vocabulary::Chars { chars: "abc".into() }, 3), [0]);
        // GPT-2's newline is token 198: a model with fewer tokens cannot take it.
        assert_eq!(default_start(&Vocabulary::Gpt2, 50304), [198]);
        assert_eq!(default_start(&Vocabulary::Gpt2, 100), [0]);
    }

    #[test]
    fn top_k_one_is_argmax_and_draws_follow_the_softmax() {
        let logits = [0.0f32, 2.0, 1.0, -1.0];
        let mut rng = HostRng::new(3);
        for _ in 0..20 {
            assert_eq!(draw(&logits, 1.0, 1, &mut rng), 1);
        }
        // With top_k 2 only ids 1 and 2 appear, about e^2 : e^1 (73 % : 27 %).
        let mut counts = [0usize; 4];
        for _ in 0..20_000 {
            counts[draw(&logits, 1.0, 2, &mut rng)] += 1;
        }
        assert_eq!(counts[0] + counts[3], 0);
        let share = counts[1] as f64 / 20_000.0;
        let expected = 1.0 / (1.0 + (-1.0f64).exp());
        assert!((share - expected).abs() < 0.02, "{share} vs {expected}");
        // A high temperature flattens: all four appear.
        let mut seen = [false; 4];
        for _ in 0..2_000 {
            seen[draw(&logits, 100.0, 4, &mut rng)] = true;
        }
        assert_eq!(seen, [true; 4]);
    }
}
