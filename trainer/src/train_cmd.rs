//! `vramfit train`: resolve the settings, load the data, build the model, run the loop.
//!
//! Settings, lowest precedence first:
//! - with neither `--config` nor `--link`: [`vramfit::train::small_default`], a character model that learns the
//!   built-in corpus in about ten seconds on a CPU; otherwise nanoGPT's train.py defaults, except that
//!   with a link and no config file the training schedule, and the gradient accumulation and eval_iters a
//!   link leaves out, stay the small default's (a link carries no schedule; see `resolve_fresh`);
//! - the config file (its model settings through core's reader, its training settings here);
//! - the link; then the flags.
//!
//! With `--resume` the checkpoint's settings replace all of that (`--config` and `--link` are
//! refused), and flags may change the training settings and the batch shapes but not the model.
//!
//! Exit codes: 0 done, 2 bad input (one `error:` line), 1 training failed, 130 Ctrl-C (checkpoint saved).

use crate::cli::{CardArgs, DeviceArg, RunArgs, TrainArgs};
use crate::inputs;
use candle_core::Device;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use vramfit::checkpoint::{self, Checkpoint, CheckpointMeta};
use vramfit::data::{DataSource, Dataset, Tokenizer, Vocabulary};
use vramfit::preflight::{available_cpu_bytes, pool_cache_note, predicted_line, preflight, Basis};
use vramfit::pretrained;
use vramfit::progress::{MemoryPrediction, Progress};
use vramfit::train::{self, Run, TrainSettings};
use vramfit_core::nanogpt::Value;
use vramfit_core::params::thousands;
use vramfit_core::trainer_model::{self, TrainerOptions};
use vramfit_core::{Config, Dtype};

/// A failure and the exit code it maps to.
pub struct Failure {
    pub code: u8,
    pub message: String,
}

/// A path as one word of a POSIX shell command the user can paste: as it is where it holds
/// only characters the shell leaves alone, else in single quotes (a space, `$`, `;`, or a
/// leading `~`, which a config's `out_dir` means literally and the shell would expand).
fn shell_word(path: &Path) -> String {
    let text = path.to_string_lossy();
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./+=:,@%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        return text.into_owned();
    }
    format!("'{}'", text.replace('\'', "'\\''"))
}

fn input(message: impl Into<String>) -> Failure {
    Failure { code: 2, message: message.into() }
}

fn failed(message: impl Into<String>) -> Failure {
    Failure { code: 1, message: message.into() }
}

/// Runs `vramfit train`; `Ok` carries the exit code (0, or 130 after Ctrl-C).
pub fn run(args: &TrainArgs) -> Result<u8, Failure> {
    // Read first, so that a bad value is refused before any work; applied once the model is
    // known (see `set_threads`).
    let env_threads = if args.threads.is_none() { crate::cli::threads_from_env().map_err(input)? } else { None };
    let device = make_device(args.device)?;
    // With --resume, the directory read from is the one written to, wherever the checkpoint says
    // the run started.
    let out_dir = if args.resume { Some(args.out_dir.clone().unwrap_or_else(|| PathBuf::from("out"))) } else { args.out_dir.clone() };
    if let Some(dir) = &out_dir {
        check_out_dir(dir, args.out_dir.is_some(), args.resume)?;
    }
    let out_dir_name = if args.out_dir.is_some() { "--out-dir" } else { "out_dir" };
    // A resumed run locks its directory before it reads the checkpoint: one read while another
    // run is still writing would continue from a state that run then moves past.
    let mut lock = match (&out_dir, args.resume) {
        (Some(dir), true) if dir.is_dir() => Some(RunLock::take(dir, out_dir_name)?),
        _ => None,
    };
    if args.resume && args.weights.is_some() {
        return Err(input("--weights starts a new run from GPT-2's weights and --resume continues a checkpoint: use one"));
    }
    let resume = if args.resume {
        if args.run.config.is_some() || args.run.link.is_some() {
            return Err(input("--resume takes the settings from the checkpoint: drop --config/--link and change settings with flags"));
        }
        let path = out_dir.clone().unwrap_or_default().join(checkpoint::FILE_NAME);
        if !path.exists() {
            return Err(input(format!("--resume: no checkpoint at {}", path.display())));
        }
        let ckpt = checkpoint::load(&path, &device).map_err(input)?;
        checkpoint::check_matches_config(&ckpt, &path).map_err(input)?;
        Some(ckpt)
    } else {
        None
    };

    let (mut cfg, mut settings, explicit_vocab, init_from) = match &resume {
        Some(ckpt) => {
            let mut cfg = ckpt.meta.config.clone();
            check_shape_flags(&cfg, &args.run)?;
            check_seed_flag(ckpt.meta.settings.seed, args.seed)?;
            inputs::apply_flags(&mut cfg, &args.run);
            cfg.validate().map_err(|e| input(e.to_string()))?;
            (cfg, ckpt.meta.settings.clone(), true, None)
        }
        None => resolve_fresh(args)?,
    };
    // GPT-2's weights, read before anything else: the model takes their shape, as train.py's
    // from_pretrained does, whatever the settings said.
    let weights = match &args.weights {
        None => None,
        Some(path) => {
            let weights = pretrained::Weights::open(path).map_err(input)?;
            let size = weights.gpt2_size();
            if let (Some(named), Some(held)) = (&init_from, size) {
                if named != held {
                    return Err(input(format!(
                        "--weights holds {held}'s weights but the settings name init_from = '{named}': pass that checkpoint's file, \
                         or drop init_from"
                    )));
                }
            }
            if let Some(name) = size {
                let given = cfg.clone();
                vramfit_core::nanogpt::take_pretrained_shape(&mut cfg, name);
                // A longer block is the settings' error, not the file's to crop (from_pretrained's
                // crop_block_size asserts it only shrinks): check_shape says so below.
                (cfg.block_size, cfg.eval_block_size) = (given.block_size, given.eval_block_size);
                let changed: Vec<String> = vramfit_core::nanogpt::shape_changes(&given, &cfg)
                    .into_iter()
                    .map(|(name, was, is)| format!("{name} {was} -> {is}"))
                    .collect();
                if !changed.is_empty() {
                    crate::print_note(&format!("--weights: {name}'s shape: {}", changed.join(", ")));
                }
            }
            weights.check_shape(&cfg).map_err(input)?;
            Some(weights)
        }
    };
    let explicit_vocab = explicit_vocab || weights.is_some();
    // Before the data's scan, the first thing to run on candle's thread pool.
    set_threads(args.threads.or(env_threads), &cfg);
    apply_training_flags(&mut settings, args);
    let checked_out_dir = out_dir.is_some();
    if let Some(dir) = out_dir {
        settings.out_dir = dir;
    }
    // Where the settings no flag gave came from, for what check_settings says about them.
    let source = match (&resume, &args.run.config) {
        (Some(_), _) => Some(format!("checkpoint {}", settings.out_dir.join(checkpoint::FILE_NAME).display())),
        (None, Some(file)) => Some(format!("config file {}", file.display())),
        (None, None) => None,
    };
    check_settings(&settings, args, source.as_deref())?;
    if !checked_out_dir {
        // The default, or a config file's out_dir.
        check_out_dir(&settings.out_dir, false, args.resume)?;
    }
    if let Some(ckpt) = &resume {
        check_resume_has_work(ckpt.meta.iter_num, ckpt.meta.evaluated, settings.max_iters)?;
    }

    // The data, and the vocabulary size it implies.
    let source = match (&args.data, &resume) {
        (Some(path), resumed) => {
            check_utf8_path(path, "--data")?;
            // Resuming on new text keeps the checkpoint's tokenizer unless told otherwise.
            let resumed_tokenizer = match resumed.as_ref().map(|c| &c.meta.data) {
                Some(DataSource::Text { tokenizer, .. }) => Some(*tokenizer),
                _ => None,
            };
            DataSource::from_path(path, args.tokenizer.or(resumed_tokenizer).unwrap_or(Tokenizer::Char))
        }
        (None, Some(ckpt)) => {
            let stored = match &ckpt.meta.data {
                DataSource::Text { tokenizer, .. } => Some(*tokenizer),
                // The built-in corpus is character-level: `--tokenizer char` is what it was.
                DataSource::Builtin { .. } => Some(Tokenizer::Char),
                // Token ids: --tokenizer does not apply, as refused below.
                DataSource::Bin { .. } => None,
            };
            if let (Some(flag), Some(stored)) = (args.tokenizer, stored) {
                if flag != stored {
                    return Err(input(format!(
                        "--tokenizer {} differs from the checkpoint's data, {}; pass --data to resume on other data",
                        tokenizer_name(flag),
                        ckpt.meta.data.describe()
                    )));
                }
            }
            ckpt.meta.data.clone()
        }
        (None, None) => {
            if args.tokenizer == Some(Tokenizer::Gpt2) {
                return Err(input("--tokenizer gpt2 needs --data (the built-in corpus is character-level)"));
            }
            DataSource::Builtin { version: vramfit::corpus::CORPUS_VERSION }
        }
    };
    if matches!(source, DataSource::Bin { .. }) && args.tokenizer.is_some() {
        return Err(input("--tokenizer applies to text files; train.bin / val.bin hold token ids already"));
    }
    let data = Dataset::load(&source).map_err(|e| {
        // A resumed run reads the path its checkpoint names, as it was given: relative to
        // where that run started, which need not be here.
        let stored = match &source {
            DataSource::Text { path, .. } => Some(path),
            DataSource::Bin { dir } => Some(dir),
            DataSource::Builtin { .. } => None,
        };
        // (Only where it is not there: a file found and refused has its own reason.)
        match stored.filter(|p| args.data.is_none() && resume.is_some() && p.is_relative() && !p.exists()) {
            Some(_) => input(format!(
                "{e} (the checkpoint names its data relative to the directory its run started in: resume from there, or \
                 pass --data)"
            )),
            None => input(e),
        }
    })?;
    if let Some(ckpt) = &resume {
        if data.vocab != ckpt.meta.vocab {
            // A checkpoint from before vramfit read meta.pkl took these .bin files for GPT-2 tokens.
            let meta_since = match (&source, &ckpt.meta.vocab, &data.vocab) {
                (DataSource::Bin { dir }, Vocabulary::Gpt2, Vocabulary::Chars { .. }) => format!(
                    ": it read these .bin files as GPT-2 tokens, before vramfit read {}; to resume it as it was trained, \
                     move that file away",
                    dir.join(vramfit::data::META_FILE).display()
                ),
                _ => String::new(),
            };
            return Err(input(format!(
                "the data's vocabulary ({}) differs from the checkpoint's{meta_since}",
                describe_vocab(&data.vocab)
            )));
        }
    }
    let data_vocab = data.vocab.size() as u32;
    if let Vocabulary::Chars { .. } = data.vocab {
        if !explicit_vocab {
            // nanoGPT takes vocab_size from the prepared data's meta.pkl the same way.
            cfg.vocab_size = data_vocab;
        }
    }
    if cfg.vocab_size < data_vocab && matches!(data.vocab, Vocabulary::Chars { .. }) {
        return Err(input(format!("the data has {data_vocab} distinct characters but vocab_size is {}", cfg.vocab_size)));
    }
    if weights.is_some() && data.vocab != Vocabulary::Gpt2 {
        return Err(input(format!(
            "--weights: GPT-2's weights read GPT-2's tokens, not this data's {} (a text file with --tokenizer gpt2, or \
             nanoGPT's train.bin / val.bin)",
            describe_vocab(&data.vocab)
        )));
    }
    cfg.validate().map_err(|e| input(e.to_string()))?;
    data.check(cfg.vocab_size, cfg.block_size, cfg.eval_block()).map_err(input)?;
    if let Some(note) = resume.as_ref().and_then(|ckpt| data_changed(&ckpt.meta, &data)) {
        crate::print_note(&note);
    }

    // Pre-flight: core's model of this trainer against the memory there is, before allocating.
    let trainer_opts = TrainerOptions {
        chunked_loss: settings.chunked_loss,
        eval_chunk_rows: settings.eval_chunk_rows.map(|r| r as u64),
        grad_clip: settings.grad_clip > 0.0,
        // Threads candle's matmuls use (RAYON_NUM_THREADS, set above): gemm keeps a buffer per thread.
        cpu_threads: candle_core::utils::get_num_threads() as u32,
        gemm_kernel_rows: vramfit::preflight::gemm_kernel_rows(),
        cpu_caches: vramfit::preflight::cpu_caches(),
        // The fused layer norm, GELU, softmax and attention kernels are CPU-only: on CUDA candle's
        // compositions run, with more temporaries (AdamW runs in place on both).
        unfused_ops: !device.is_cpu(),
        // cuBLAS, not gemm: none of gemm's CPU buffers.
        cuda: !device.is_cpu(),
        // On CUDA a bfloat16 or float16 config trains in mixed precision (`train::compute_dtype`).
        mixed_precision: (vramfit::train::compute_dtype(&cfg, &device) != candle_core::DType::F32).then_some(cfg.dtype),
    };
    let available = available_memory(&device, args.max_memory_mib);
    if let Some(note) = capped_limit_note(available, args.max_memory_mib) {
        crate::print_note(&note);
    }
    // The trainer model was measured on CPU; on CUDA its figures are estimates (see plan --runtime trainer).
    let basis = if device.is_cpu() { Basis::Measured } else { Basis::Estimate };
    let checked = preflight(&cfg, &trainer_opts, available, args.auto_fit, basis).map_err(input)?;
    if let Some(note) = &checked.note {
        crate::print_note(note);
    }
    cfg = checked.config;
    // --auto-fit may have raised gradient accumulation past what a config allows.
    cfg.validate().map_err(|e| input(format!("--auto-fit: {e}")))?;
    std::fs::create_dir_all(&settings.out_dir).map_err(|e| input(format!("cannot create {}: {e}", settings.out_dir.display())))?;
    // Held until this function returns, whichever way: before anything is written to out_dir.
    if lock.is_none() {
        lock = Some(RunLock::take(&settings.out_dir, out_dir_name)?);
    }
    let _lock = lock;
    print_header(&cfg, &settings, &data, &device, resume.as_ref());
    say(predicted_line(checked.predicted_peak, available, basis, trainer_model::pool_slabs_not_made_bound(&trainer_opts)));
    if device.is_cpu() {
        vramfit::mem::note_planned(checked.predicted_peak, (available != u64::MAX).then_some(available));
    }
    // Test hook, in debug builds only (what `cargo test` runs): a request of this many bytes
    // after the pre-flight, as if the run met a memory limit it did not plan for.
    if cfg!(debug_assertions) {
        if let Some(bytes) = std::env::var(REFUSAL_HOOK).ok().and_then(|b| b.parse::<usize>().ok()) {
            std::hint::black_box(Vec::<u8>::with_capacity(bytes));
        }
    }
    if let Some(note) = (!device.is_cpu()).then(|| pool_cache_note(checked.predicted_peak, available)).flatten() {
        crate::print_note(&note);
    }
    // With room to spare, trade resident memory for speed: glibc keeps freed tensor memory for
    // reuse (measured: 488 MiB resident for a 334 MiB counted peak) instead of page-faulting fresh
    // memory in every iteration. Near the limit keep its defaults, where resident memory stays
    // at the counted peak.
    if device.is_cpu() && checked.predicted_peak.saturating_mul(2) <= available {
        vramfit::mem::keep_freed_memory();
    }
    let stale = checkpoint::remove_stale_temps(&settings.out_dir);
    if stale > 0 {
        crate::print_note(&format!("removed {stale} temporary checkpoint file(s) an interrupted write left behind"));
    }

    // Before the baseline: its counting buffer is not the run's memory (it was the whole
    // measured peak of a tiny model, 1.4 MiB against 0.8 predicted).
    let entropy = data.unigram_entropy();
    vramfit::mem::reset_peak();
    // The run's memory is what the model, the optimizer and the steps hold: a resumed run's
    // checkpoint tensors, loaded already, are not part of what was live before it (its
    // values go into the model and optimizer, by copy or shared).
    let checkpoint_bytes =
        resume.as_ref().map_or(0, |c| c.params.iter().chain(&c.exp_avg).chain(&c.exp_avg_sq).map(|t| t.elem_count() as u64 * 4).sum());
    let baseline = vramfit::mem::live().saturating_sub(if device.is_cpu() { checkpoint_bytes } else { 0 });
    // On CUDA the tensors live in the device's memory pool, whose counters play the same part.
    let gpu_baseline = vramfit::gpu_mem::reset_peak(&device)
        .and_then(|()| vramfit::gpu_mem::bytes(&device))
        .map(|b| b.used.saturating_sub(checkpoint_bytes));

    let (model, mut optimizer) = train::build(&cfg, &settings, &device, resume.as_ref()).map_err(input)?;
    // A resumed run keeps the checkpoint's metadata only: its tensors (the model's and the
    // optimizer's values now) were one more copy of the parameters for the whole run. The
    // peak starts again from here (the load's moment of both copies is not the run's).
    let resume = resume.map(|ckpt| {
        let Checkpoint { meta, params, exp_avg, exp_avg_sq } = ckpt;
        drop((params, exp_avg, exp_avg_sq));
        vramfit::mem::reset_peak();
        let _ = vramfit::gpu_mem::reset_peak(&device);
        meta
    });
    if let (Some(weights), Some(path)) = (&weights, &args.weights) {
        let loaded = weights.load_into(&model).map_err(input)?;
        say(format!("starting from GPT-2's weights: {loaded} tensors from {}", path.display()));
    }
    drop(weights);
    let interrupt = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&interrupt);
    // Ctrl-C, and (ctrlc's `termination` feature) SIGTERM and SIGHUP on Unix.
    ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            // A second Ctrl-C: stop now. The checkpoint on disk is whole (atomic writes); a save
            // in progress is abandoned (it exited 130 with no word, mid-save).
            checkpoint::exit_abandoning_write(130, |abandoned| {
                let line = match abandoned {
                    Some(path) if path.exists() => {
                        format!("interrupt: quit at once: the save in progress was abandoned; {} is the previous one, kept", path.display())
                    }
                    Some(path) => {
                        format!("interrupt: quit at once: the save in progress was abandoned; no checkpoint at {}", path.display())
                    }
                    None => "interrupt: quit at once".to_string(),
                };
                let _ = writeln!(std::io::stderr(), "\n{line}");
            });
        }
        let _ = writeln!(
            std::io::stderr(),
            "\ninterrupt: stopping after this iteration or evaluation batch (Ctrl-C or the signal again to quit at once)"
        );
    })
    .map_err(|e| failed(format!("cannot install the Ctrl-C handler: {e}")))?;

    let start = resume.as_ref().map_or(0, |m| m.iter_num);
    if resume.is_none() && settings.out_dir.join(checkpoint::FILE_NAME).exists() {
        crate::print_note(&format!(
            "{} exists: this new run replaces it (and its log and loss curve) at its first save, Ctrl-C before then keeps it \
             (--resume continues it instead)",
            settings.out_dir.join(checkpoint::FILE_NAME).display()
        ));
    }
    // The old checkpoint stays until this run's first save (and for good if this run fails
    // before it): its log must stay with it.
    if let Some(note) = vramfit::progress::prepare_log(&settings.out_dir, resume.is_none()).map_err(failed)? {
        crate::print_note(&note);
    }
    if let Some(meta) = &resume {
        if let Some(note) = vramfit::progress::trim_log_to_checkpoint(&settings.out_dir, meta.iter_num).map_err(failed)? {
            crate::print_note(&note);
        }
    }
    let mut progress = Progress::new(&settings.out_dir, start, settings.max_iters, settings.log_interval).map_err(failed)?;
    // After the second iteration the AdamW state exists and the first evaluation has run; the
    // evaluation after a step and the saves come later (the run's end reports its whole peak).
    let check_at = start.saturating_add(1);
    // A fresh run that takes no training step (--max-iters 0, Ctrl-C before the first) runs only
    // the evaluation at start, a window the model predicts on its own. (A resumed run's first
    // evaluation has the optimizer's state beside it: not that window.)
    // What the first two iterations run: a fresh run's evaluation at start, its first iteration
    // (the optimizer's state made) and a training step. (A resumed run's are set beside the
    // run's peak, as its evaluation has the optimizer's state beside it.)
    let fresh = resume.is_none().then(|| trainer_model::simulate(&cfg, &trainer_opts));
    let predicted = MemoryPrediction {
        run: checked.predicted_peak,
        first_two: fresh.as_ref().map_or(checked.predicted_peak, |s| s.eval_at_start.bytes.max(s.first_iter.bytes).max(s.train.bytes)),
        eval_at_start: fresh.as_ref().map(|s| s.eval_at_start.bytes),
    };
    if device.is_cpu() && vramfit::mem::installed() {
        progress.compare_memory_after(check_at, baseline, predicted);
    } else if let Some(gpu_baseline) = gpu_baseline {
        progress.watch_gpu(&device);
        progress.compare_memory_after(check_at, gpu_baseline, predicted);
    }
    let summary = train::run(
        Run {
            cfg: &cfg,
            settings: &settings,
            data: &data,
            device: &device,
            model: &model,
            optimizer: &mut optimizer,
            interrupt: &interrupt,
        },
        resume.as_ref(),
        &mut progress,
    )
    .map_err(failed)?;
    progress.finish();

    let mut lines = Vec::new();
    if summary.interrupted && summary.checkpoint.is_none() {
        lines.push(format!("interrupted at iteration {} before this run's first save: nothing of this run was saved", summary.iter_num));
    } else if summary.interrupted {
        lines.push(format!(
            "interrupted at iteration {}: continue with --resume --out-dir {}",
            summary.iter_num,
            shell_word(&settings.out_dir)
        ));
    } else {
        lines.push(format!("done: {}, {:.0} tokens/s", counted(summary.iter_num, "iteration"), summary.tokens_per_s));
    }
    if let Some((_, val)) = summary.last_eval {
        // After Ctrl-C the last evaluation may be far behind the model that was saved.
        let when = match summary.last_eval_iter {
            Some(at) if at != summary.iter_num => format!(" at iteration {at}, its last evaluation"),
            _ => String::new(),
        };
        lines.push(format!(
            "val loss {val:.4} nats{when} (lowest {:.4}); a model that ignores context scores the unigram entropy, {entropy:.4}",
            summary.lowest_val_loss.unwrap_or(val)
        ));
    }
    match &summary.checkpoint {
        Some(path) => lines.push(format!("checkpoint: {}  (vramfit sample --out-dir {})", path.display(), shell_word(&settings.out_dir))),
        None if summary.interrupted => {
            // Ctrl-C before this run's first save left the previous run's checkpoint as it was.
            let kept_log = settings.out_dir.join(vramfit::progress::PREVIOUS_LOG_FILE);
            let log_note = if kept_log.is_file() { format!(", its log as {}", kept_log.display()) } else { String::new() };
            lines.push(format!(
                "checkpoint: {} is the previous run's, kept{log_note} (--resume continues that run)",
                settings.out_dir.join(checkpoint::FILE_NAME).display()
            ));
        }
        // A fresh run that saved nothing left the previous run's checkpoint (and its loss curve) as it was.
        None if settings.out_dir.join(checkpoint::FILE_NAME).exists() => lines.push(format!(
            "no checkpoint written; {} is the previous run's, kept (--resume continues that run)",
            settings.out_dir.join(checkpoint::FILE_NAME).display()
        )),
        None => lines.push(match summary.best_val_loss {
            // Steps ran, and their evaluations saved nothing: only an improvement saves with
            // always_save_checkpoint off, and the evaluation at iteration 0 set the mark.
            Some(first) if summary.iter_num > 0 && !settings.always_save_checkpoint => format!(
                "no checkpoint written: val loss never went below its first value, {first:.4} at iteration 0 (which is never \
                 saved), and always_save_checkpoint is off"
            ),
            _ => "no checkpoint written (none is saved at iteration 0)".into(),
        }),
    }
    // Every window and save is behind it now: the line the early one could only foretell.
    if let Some(line) = progress.whole_run_memory_line() {
        lines.push(line);
    }
    let log = settings.out_dir.join(vramfit::progress::LOG_FILE);
    lines.push(if summary.loss_curve {
        format!("log: {}, loss curve: {}", log.display(), settings.out_dir.join(vramfit::lossplot::SVG_FILE).display())
    } else {
        format!("log: {} (this run drew no loss curve)", log.display())
    });
    for l in lines {
        progress.line(&l);
    }
    Ok(if summary.interrupted { 130 } else { 0 })
}

/// Sets the thread count before candle starts its thread pools (they read it once): `given`
/// (--threads, or the environment's), else one thread for the small default model, which is
/// faster on one thread than on two (candle's pool spins; measured 20k vs 9k tokens/s on a busy
/// 2-core machine), else candle's default, every core (`plan --runtime trainer` plans the same).
fn set_threads(given: Option<u32>, cfg: &Config) {
    let threads = given.or(is_small_default_model(cfg).then_some(1));
    // Both variables are set to the count chosen: candle's matmuls read only RAYON_NUM_THREADS.
    if let Some(n) = threads {
        std::env::set_var("CANDLE_NUM_THREADS", n.to_string());
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    }
}

/// Whether `cfg` trains the small default model's layers, heads, width, block and batch, however
/// it came to (no flags, flags or a link that name the same, or a checkpoint of it resumed): its
/// vocabulary is the data's, whichever that is.
pub fn is_small_default_model(cfg: &Config) -> bool {
    let (small, _) = train::small_default();
    let shape = |c: &Config| (c.n_layer, c.n_head, c.n_embd, c.block_size, c.batch_size);
    shape(cfg) == shape(&small)
}

pub fn make_device(arg: Option<DeviceArg>) -> Result<Device, Failure> {
    match arg.unwrap_or(DeviceArg::Cpu) {
        DeviceArg::Cpu => Ok(Device::Cpu),
        DeviceArg::Cuda => cuda_device(),
    }
}

#[cfg(feature = "cuda")]
fn cuda_device() -> Result<Device, Failure> {
    Device::new_cuda(0).map_err(|e| input(format!("--device cuda: {e}")))
}

#[cfg(not(feature = "cuda"))]
fn cuda_device() -> Result<Device, Failure> {
    Err(input("--device cuda: this vramfit was built without CUDA (build with `cargo build --release -p vramfit --features cuda`)"))
}

/// See the hook's use in [`run`].
const REFUSAL_HOOK: &str = "VRAMFIT_TEST_ALLOCATE_AFTER_PREFLIGHT";

/// What the pre-flight may plan for: free CPU memory within the process's limits
/// ([`available_cpu_bytes`]) or free CUDA memory (or the flag's
/// limit, if lower); unknown counts as unlimited.
fn available_memory(device: &Device, max_memory_mib: Option<u64>) -> u64 {
    let limit = max_memory_mib.map_or(u64::MAX, |m| m.saturating_mul(1 << 20));
    let threads = u32::try_from(candle_core::utils::get_num_threads()).unwrap_or(u32::MAX);
    let machine = if device.is_cpu() { available_cpu_bytes(threads) } else { free_device_bytes(device) };
    machine.unwrap_or(u64::MAX).min(limit)
}

/// A note when `--max-memory-mib` asked for more than the machine has: the pre-flight plans
/// for what is there (a run planned past it would be killed or run out of memory).
fn capped_limit_note(available: u64, max_memory_mib: Option<u64>) -> Option<String> {
    let asked = max_memory_mib?;
    (asked.saturating_mul(1 << 20) > available).then(|| {
        format!(
            "--max-memory-mib {asked} is more than this machine has available: the pre-flight plans for {:.1} MiB",
            available as f64 / (1u64 << 20) as f64
        )
    })
}

/// Free memory on the CUDA device (cudarc's `cuMemGetInfo` through candle's context), after the
/// context exists. Built by `scripts/check-cuda-build`; run on an H100 (tests/reference/data/trainer-cuda-h100-runs.txt).
#[cfg(feature = "cuda")]
fn free_device_bytes(device: &Device) -> Option<u64> {
    let cuda = device.as_cuda_device().ok()?;
    let (free, _total) = cuda.cuda_stream().context().mem_get_info().ok()?;
    Some(free as u64)
}

#[cfg(not(feature = "cuda"))]
fn free_device_bytes(_device: &Device) -> Option<u64> {
    None
}

/// Defaults, config file, link and flags for a run that is not resumed; the bool says whether
/// vocab_size was given explicitly (flag, or the link's vocab key) rather than left to the data.
///
/// A link carries what the page shares: the model, the batch and the memory settings, not a
/// training schedule. Without `--config`, the schedule (max_iters, learning rate, eval_interval)
/// is therefore train's own ([`train::small_default`]: 600 iterations), not train.py's 600000;
/// so are gradient_accumulation_steps and eval_iters when the link leaves them out (they set how
/// long each iteration and evaluation takes), and vocab_size is the data's unless the link has it.
/// With `--config`, the file is train.py's settings and train.py's defaults fill the rest.
fn resolve_fresh(args: &TrainArgs) -> Result<Fresh, Failure> {
    let run = &args.run;
    if run.config.is_none() && run.link.is_none() {
        let (mut cfg, settings) = train::small_default();
        inputs::apply_flags(&mut cfg, run);
        cfg.validate().map_err(|e| input(e.to_string()))?;
        return Ok((cfg, settings, run.vocab_size.is_some(), None));
    }
    let no_cards = CardArgs { gpu: Vec::new(), other_usage_mib: None };
    let resolved = inputs::resolve(run, &no_cards).map_err(input)?;
    // What the command line still says once the config file replaced the flags before it that
    // it sets (a replaced `--vocab_size` is not an explicit vocabulary).
    let run = &run.without(&resolved.flags_replaced_by_file);
    if let (Some(name), None) = (&resolved.init_from, &args.weights) {
        // The settings name a GPT-2 checkpoint, whose shape they take; a shape flag on top
        // would train neither that model nor the one the flags describe. (With --weights the
        // weights' shape wins, with a note.)
        let mut gpt2 = resolved.config.clone();
        vramfit_core::nanogpt::take_pretrained_shape(&mut gpt2, name);
        check_flags_keep_shape(&gpt2, run, &format!("init_from = '{name}' is GPT-2's model, which has"))?;
    }
    if let Some(what) = resolved.unreadable.first() {
        // Training on a default in place of a setting the file meant to change loses the run.
        return Err(input(format!("{what} (train needs every training setting it is given)")));
    }
    // What a file's eval_only and init_from mean for train.py's plan; `train` says its own (an
    // error for eval_only, a resume in a file, or a name train.py stops on; a note for a resume
    // under --weights). Likewise the vocabulary train.py would read from a dataset's meta.pkl:
    // `train`'s comes from its own data.
    let plan_only = |n: &String| {
        [
            "eval_only = True: train.py",
            "init_from = 'resume': train.py",
            "train.py would stop; vramfit plans",
            "(train.py reads it there)",
            "train.py takes vocab_size from data/",
            // vramfit's own settings, which `train` reads (and says of expandable_segments).
            "which stock train.py does not read",
            "expandable_segments = True: planned as",
        ]
        .iter()
        .any(|said| n.contains(said))
    };
    let notices: Vec<String> = resolved.notices.iter().filter(|n| !plan_only(n)).cloned().collect();
    crate::print_input_notes(&notices);
    let link_gives = |name: &str| resolved.link_sets.contains(&name);
    if let (true, Some(name), None) = (link_gives("init_from"), &resolved.init_from, &args.weights) {
        crate::print_note(&format!(
            "--link: init_from = '{name}': vramfit downloads no weights; without --weights (GPT-2's model.safetensors) it trains \
             GPT-2's shape from scratch"
        ));
    }
    let explicit_vocab = run.vocab_size.is_some() || link_gives("vocab_size");
    let mut cfg = resolved.config;
    let mut settings = TrainSettings::default();
    if run.config.is_none() {
        let (small, small_settings) = train::small_default();
        settings = small_settings;
        if run.gradient_accumulation_steps.is_none() && !link_gives("gradient_accumulation_steps") {
            cfg.gradient_accumulation_steps = small.gradient_accumulation_steps;
        }
        if run.eval_iters.is_none() && !link_gives("eval_iters") {
            cfg.eval_iters = small.eval_iters;
        }
        cfg.validate().map_err(|e| input(e.to_string()))?;
    }
    apply_config_extras(&mut settings, &resolved.extra, run.config.as_deref(), args.weights.is_some(), args.data.is_some())?;
    // A file's eval_only stopped above; a link's (`eo=1`, the page's eval-only plan) the same way.
    if cfg.eval_only {
        return Err(input(
            "--link: eo=1 (eval_only): vramfit train has no evaluate-only mode, and training would replace out_dir's checkpoint; \
             take eo=1 out of the link to train"
                .to_string(),
        ));
    }
    Ok((cfg, settings, explicit_vocab, resolved.init_from))
}

/// A fresh run's config, settings, whether vocab_size was explicit, and the GPT-2 checkpoint the
/// config file or link names (`init_from`), if any.
type Fresh = (Config, TrainSettings, bool, Option<String>);

/// A resumed run's data is read again from where the checkpoint says (or from `--data`): when it
/// is not what the checkpoint was trained on, the run goes on (continuing on new text is
/// legitimate), but the user hears which split changed and, for the val split, that the best
/// val loss so far was measured on the old one. Checkpoints from before fingerprints say nothing.
fn data_changed(meta: &CheckpointMeta, data: &Dataset) -> Option<String> {
    let then = meta.data_fingerprint.as_ref()?;
    let now = data.fingerprint();
    let changed: Vec<String> = [("train", &then.train, &now.train), ("val", &then.val, &now.val)]
        .into_iter()
        .filter(|(_, a, b)| a != b)
        .map(|(split, a, b)| {
            if a.tokens == b.tokens {
                format!("the {split} split has other ids in its {} tokens", thousands(b.tokens))
            } else {
                format!("the {split} split has {} tokens where it had {}", thousands(b.tokens), thousands(a.tokens))
            }
        })
        .collect();
    if changed.is_empty() {
        return None;
    }
    let best = match meta.best_val_loss {
        Some(l) if then.val != now.val => format!("; the best val loss so far, {l:.4}, was measured on the old val split"),
        _ => String::new(),
    };
    // Resuming on other data (`--data`) is not the checkpoint's data having changed.
    let what = if meta.data == data.source {
        format!("{} changed since this checkpoint was written", data.source.describe())
    } else {
        format!("{} is not the data this checkpoint was trained on ({})", data.source.describe(), meta.data.describe())
    };
    Some(format!("{what}: {}. The run continues on the data as it is now{best}.", changed.join("; ")))
}

/// With `--resume`, flags may not change the model the checkpoint holds.
fn check_shape_flags(cfg: &Config, run: &RunArgs) -> Result<(), Failure> {
    if let Some(b) = run.block_size.filter(|&b| b != cfg.block_size) {
        return Err(input(format!("--resume: the checkpoint's model has block_size = {}, not {b}", cfg.block_size)));
    }
    check_flags_keep_shape(cfg, run, "--resume: the checkpoint's model has")
}

/// Flags that would change the model's shape (all but the block) from `cfg`'s, a model the
/// run must keep: an error starting with `whose` ("... has").
fn check_flags_keep_shape(cfg: &Config, run: &RunArgs, whose: &str) -> Result<(), Failure> {
    let checks: [(&str, Option<u64>, u64); 4] = [
        ("n_layer", run.n_layer.map(u64::from), cfg.n_layer as u64),
        ("n_head", run.n_head.map(u64::from), cfg.n_head as u64),
        ("n_embd", run.n_embd.map(u64::from), cfg.n_embd as u64),
        ("vocab_size", run.vocab_size.map(u64::from), cfg.vocab_size as u64),
    ];
    for (name, flag, saved) in checks {
        if let Some(v) = flag.filter(|&v| v != saved) {
            return Err(input(format!("{whose} {name} = {saved}, not {v}")));
        }
    }
    if let Some(b) = run.bias.filter(|&b| b != cfg.bias) {
        return Err(input(format!("{whose} bias = {}, not {b}", cfg.bias)));
    }
    Ok(())
}

/// train.py settings a nanoGPT config file (`file`) set (`learning_rate = 1e-3`, ...).
fn apply_config_extras(
    s: &mut TrainSettings,
    extra: &[(String, Value)],
    file: Option<&Path>,
    weights: bool,
    data_given: bool,
) -> Result<(), Failure> {
    // Errors name the file, as core's do for the model settings ("config file x.py: ...").
    let file = file.map_or_else(|| "config file".to_string(), |f| format!("config file {}", f.display()));
    let number = |key: &str, v: &Value| -> Result<f64, Failure> {
        match v {
            Value::Int(n) if *n >= 0 => Ok(*n as f64),
            Value::Float(x) if x.is_finite() && *x >= 0.0 => Ok(*x),
            other => Err(input(format!("{file}: {key} must be a number >= 0 (got {other})"))),
        }
    };
    let count = |key: &str, v: &Value| -> Result<u64, Failure> {
        match v {
            Value::Int(n) if *n >= 0 => Ok(*n as u64),
            other => Err(input(format!("{file}: {key} must be a whole number >= 0 (got {other})"))),
        }
    };
    // As core reads the model's flags (`bias = 1`): True/False, and 0/1, which say it as clearly.
    let boolean = |key: &str, v: &Value| -> Result<bool, Failure> {
        match v {
            Value::Bool(b) => Ok(*b),
            Value::Int(0) => Ok(false),
            Value::Int(1) => Ok(true),
            other => Err(input(format!("{file}: {key} must be True or False (got {other})"))),
        }
    };
    for (key, v) in extra {
        match key.as_str() {
            "max_iters" => s.max_iters = count(key, v)?,
            "learning_rate" => s.lr.learning_rate = number(key, v)?,
            "decay_lr" => s.lr.decay_lr = boolean(key, v)?,
            "warmup_iters" => s.lr.warmup_iters = count(key, v)?,
            "lr_decay_iters" => s.lr.lr_decay_iters = count(key, v)?,
            "min_lr" => s.lr.min_lr = number(key, v)?,
            "weight_decay" => s.adamw.weight_decay = number(key, v)?,
            "beta1" => s.adamw.beta1 = number(key, v)?,
            "beta2" => s.adamw.beta2 = number(key, v)?,
            "grad_clip" => s.grad_clip = number(key, v)?,
            "eval_interval" => s.eval_interval = count(key, v)?,
            "log_interval" => s.log_interval = count(key, v)?,
            "always_save_checkpoint" => s.always_save_checkpoint = boolean(key, v)?,
            "seed" => s.seed = count(key, v)?,
            "out_dir" => match v {
                Value::Str(dir) => s.out_dir = PathBuf::from(dir),
                other => return Err(input(format!("{file}: out_dir must be a string (got {other})"))),
            },
            // Settings that would change what runs: say they are not followed. (wandb_* and
            // backend only concern logging and multi-GPU; they are dropped quietly.)
            "dataset" if data_given => {
                crate::print_note(&format!("config file: dataset = {v} is not used: --data gives the data and its vocabulary"))
            }
            "dataset" => crate::print_note(&format!(
                "config file: dataset = {v} is not used: pass the data with --data (this run trains on the built-in text, \
                 whose vocabulary is its own)"
            )),
            "device" => crate::print_note(&format!("config file: device = {v} is not used: pick it with --device")),
            "init_from" if !matches!(v, Value::Str(_)) => {
                return Err(input(format!("{file}: init_from must be a string such as 'scratch' or 'gpt2' (got {v})")))
            }
            // train.py resumes from out_dir's checkpoint here; a new run would overwrite it.
            "init_from" if *v == Value::Str("resume".into()) && !weights => {
                return Err(input(format!(
                    "{file}: init_from = 'resume' continues the run in out_dir: use `vramfit train --resume --out-dir DIR` \
                     (its settings come from the checkpoint); this file would start a new run over it"
                )))
            }
            "init_from" if *v == Value::Str("resume".into()) => {
                crate::print_note("config file: init_from = 'resume' is not used: --weights starts a new run from those weights")
            }
            // train.py stops on a name that is none of its own; so does this.
            "init_from" if !matches!(v, Value::Str(name) if name == "scratch" || vramfit_core::nanogpt::pretrained(name).is_some()) => {
                return Err(input(format!(
                    "{file}: init_from = {v} is none of train.py's (scratch, resume, gpt2, gpt2-medium, gpt2-large, gpt2-xl)"
                )))
            }
            "init_from" if *v != Value::Str("scratch".into()) && !weights => crate::print_note(&format!(
                "config file: init_from = {v}: vramfit downloads no weights; without --weights (GPT-2's model.safetensors) it \
                 trains from scratch, or continues with --resume"
            )),
            // train.py would evaluate and stop, writing nothing; a run here would train and
            // replace out_dir's checkpoint at its first save.
            // train.py tests `if iter_num == 0 and eval_only`: any true value stops it there.
            "eval_only" if v.is_truthy() => {
                return Err(input(format!(
                    "{file}: eval_only = {v}: vramfit train has no evaluate-only mode, and training would replace out_dir's \
                     checkpoint; remove the line to train"
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

fn apply_training_flags(s: &mut TrainSettings, a: &TrainArgs) {
    fn set<T: Copy>(slot: &mut T, flag: Option<T>) {
        if let Some(v) = flag {
            *slot = v;
        }
    }
    set(&mut s.max_iters, a.max_iters);
    set(&mut s.lr.learning_rate, a.learning_rate);
    set(&mut s.lr.decay_lr, a.decay_lr);
    set(&mut s.lr.warmup_iters, a.warmup_iters);
    set(&mut s.lr.lr_decay_iters, a.lr_decay_iters);
    set(&mut s.lr.min_lr, a.min_lr);
    set(&mut s.adamw.weight_decay, a.weight_decay);
    set(&mut s.adamw.beta1, a.beta1);
    set(&mut s.adamw.beta2, a.beta2);
    set(&mut s.grad_clip, a.grad_clip);
    set(&mut s.eval_interval, a.eval_interval);
    set(&mut s.log_interval, a.log_interval);
    set(&mut s.always_save_checkpoint, a.always_save_checkpoint);
    set(&mut s.seed, a.seed);
    set(&mut s.chunked_loss, a.chunked_loss);
    if let Some(rows) = a.eval_chunk_rows {
        s.eval_chunk_rows = Some(rows as usize);
    }
}

/// What the flag parsers cannot see: values from config files and checkpoints, and combinations.
/// `source` names where the settings no flag gave came from ("config file x.py", "checkpoint
/// out/ckpt.safetensors"), so that an error about one of them says where to put it right.
fn check_settings(s: &TrainSettings, a: &TrainArgs, source: Option<&str>) -> Result<(), Failure> {
    // The defaults are all valid: a bad value no flag gave is the source's.
    let refuse = |flag_given: bool, message: String| match source {
        Some(source) if !flag_given => input(format!("{source}: {message}")),
        _ => input(message),
    };
    // The flag parsers and the config file reader see to these; a checkpoint's metadata may not.
    for (name, value, flag) in [
        ("learning_rate", s.lr.learning_rate, a.learning_rate),
        ("min_lr", s.lr.min_lr, a.min_lr),
        ("weight_decay", s.adamw.weight_decay, a.weight_decay),
        ("grad_clip", s.grad_clip, a.grad_clip),
    ] {
        if !(value.is_finite() && value >= 0.0) {
            return Err(refuse(flag.is_some(), format!("{name} must be a finite number >= 0 (got {value})")));
        }
    }
    if !(s.adamw.eps.is_finite() && s.adamw.eps > 0.0) {
        return Err(refuse(false, format!("AdamW's eps must be a finite number > 0 (got {})", s.adamw.eps)));
    }
    if s.out_dir.as_os_str().is_empty() {
        return Err(refuse(a.out_dir.is_some(), "out_dir is empty: name a directory".into()));
    }
    // The flag takes at least 1; a checkpoint's metadata may say 0 (no rows per eval forward).
    if s.eval_chunk_rows == Some(0) {
        return Err(refuse(a.eval_chunk_rows.is_some(), "eval_chunk_rows must be at least 1 (got 0)".into()));
    }
    // The weights and the schedule's rate are f32: a rate past f32's range is an infinity
    // (1e308 was, logged as null), not a rate.
    for (name, value, flag) in [("learning_rate", s.lr.learning_rate, a.learning_rate), ("min_lr", s.lr.min_lr, a.min_lr)] {
        if value > MAX_LEARNING_RATE {
            return Err(refuse(flag.is_some(), format!("{name} must be at most {MAX_LEARNING_RATE:e} (got {value:e})")));
        }
    }
    for (name, value, flag) in [("beta1", s.adamw.beta1, a.beta1), ("beta2", s.adamw.beta2, a.beta2)] {
        if !(0.0..1.0).contains(&value) {
            return Err(refuse(flag.is_some(), format!("{name} must be in [0, 1) (got {value})")));
        }
    }
    for (name, value, flag) in [("eval_interval", s.eval_interval, a.eval_interval), ("log_interval", s.log_interval, a.log_interval)] {
        if value == 0 {
            return Err(refuse(flag.is_some(), format!("{name} must be at least 1")));
        }
    }
    if s.lr.decay_lr && s.lr.lr_decay_iters < s.lr.warmup_iters {
        return Err(refuse(
            // Either flag given: the flags are at fault as much as the source.
            a.lr_decay_iters.is_some() || a.warmup_iters.is_some(),
            format!("lr_decay_iters ({}) must be at least warmup_iters ({})", s.lr.lr_decay_iters, s.lr.warmup_iters),
        ));
    }
    if s.lr.decay_lr && s.lr.min_lr > s.lr.learning_rate {
        // train.py's get_lr runs with it too: its cosine "decay" then climbs towards min_lr.
        crate::print_note(&format!(
            "min_lr ({:e}) is above learning_rate ({:e}): after warmup the rate rises towards min_lr instead of decaying",
            s.lr.min_lr, s.lr.learning_rate
        ));
    }
    Ok(())
}

/// The largest learning rate `train` takes: one an f32 holds (AdamW's are around 1e-3; a rate
/// far below this already diverges at once, but as a NaN loss that names the rate as its cause).
const MAX_LEARNING_RATE: f64 = 1e38;

/// With `--resume`, a `--seed` other than the checkpoint's is refused: the run continues the
/// checkpoint's random state (its batches and dropout), so the seed would only be recorded in the
/// new checkpoint, falsely.
fn check_seed_flag(saved: u64, flag: Option<u64>) -> Result<(), Failure> {
    match flag {
        Some(seed) if seed != saved => Err(input(format!(
            "--resume: the checkpoint's run has seed = {saved}, not {seed} (a resumed run continues its random state): drop --seed"
        ))),
        _ => Ok(()),
    }
}

/// `out_dir` must be a directory, or not exist yet (it is created), and what the run writes there
/// must be able to go there: checked before any work, not found out at the first save.
fn check_out_dir(dir: &Path, flag_given: bool, resume: bool) -> Result<(), Failure> {
    let name = if flag_given { "--out-dir" } else { "out_dir" };
    check_utf8_path(dir, name)?;
    match std::fs::metadata(dir) {
        Ok(m) if m.is_file() => return Err(input(format!("{name} {} is a file, not a directory", dir.display()))),
        Ok(m) if !m.is_dir() => return Err(input(format!("{name} {} is not a directory", dir.display()))),
        Ok(_) => {}
        // Created later; if that fails, the error says why.
        Err(_) => return Ok(()),
    }
    let files = [
        (checkpoint::FILE_NAME, "its checkpoint"),
        (vramfit::progress::LOG_FILE, "its log"),
        // A new run moves the last run's log there (a resumed one appends to it instead).
        (vramfit::progress::PREVIOUS_LOG_FILE, "the previous run's log"),
    ];
    for (file, what) in files {
        let path = dir.join(file);
        let written = file != vramfit::progress::PREVIOUS_LOG_FILE || (!resume && dir.join(vramfit::progress::LOG_FILE).is_file());
        // Followed through a symlink: the run would write into what it points to (a link to
        // /dev/null), or replace a named pipe `sample` and `--resume` refuse to read.
        let kind = match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => "a directory",
            // A resumed run reads its checkpoint first, and says why it cannot.
            Ok(m) if !(m.is_file() || resume && file == checkpoint::FILE_NAME) => "not a regular file (a named pipe, socket or device)",
            _ => continue,
        };
        if written {
            return Err(input(format!("{} is {kind}, where this run writes {what}: move it away or pick another {name}", path.display())));
        }
    }
    Ok(())
}

/// The checkpoint records the out_dir and the data's path as text (JSON): a name that is not
/// UTF-8 is refused before any work, not found out at the first save (with the run lost).
fn check_utf8_path(path: &Path, name: &str) -> Result<(), Failure> {
    match path.to_str() {
        Some(_) => Ok(()),
        None => Err(input(format!(
            "{name} {}: the name is not valid UTF-8, and the checkpoint records it as text: rename it or pick another",
            path.display()
        ))),
    }
}

/// The lock file a running `vramfit train` holds in its out_dir. It is never removed (as Cargo
/// leaves its own): removing it would let a run that opened it just before lock a file no
/// longer there while a third run creates and locks a new one.
const LOCK_FILE: &str = ".vramfit-train.lock";

/// An exclusive advisory lock on out_dir for the run's duration: two runs writing one directory
/// would leave one's checkpoint beside the other's log. The OS releases it when the process
/// ends, however it ends, so a killed run does not block the next one.
struct RunLock {
    _file: std::fs::File,
}

impl RunLock {
    /// `Ok(None)` where the file system cannot lock (a note says so). `name` is how the user
    /// named out_dir.
    fn take(out_dir: &Path, name: &str) -> Result<Option<RunLock>, Failure> {
        use std::fs::TryLockError;
        use std::io::Read;
        let path = out_dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| input(format!("cannot create {}: {e}", path.display())))?;
        match file.try_lock() {
            Ok(()) => {
                // Who holds it, for the message of a run refused meanwhile.
                let mut writer = &file;
                let _ = writer.set_len(0).and_then(|()| write!(writer, "{}", std::process::id()));
                Ok(Some(RunLock { _file: file }))
            }
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = (&file).read_to_string(&mut holder);
                let pid = holder.trim().parse::<u32>().map(|pid| format!(" (pid {pid})")).unwrap_or_default();
                Err(input(format!(
                    "{name} {} is in use by another vramfit train{pid}: wait for it to end, or pick another {name}",
                    out_dir.display()
                )))
            }
            // Some network file systems: the run need not fail for want of a lock.
            Err(TryLockError::Error(e)) => {
                crate::print_note(&format!(
                    "cannot lock {}: {e}; another vramfit train on {} at the same time would not be stopped",
                    path.display(),
                    out_dir.display()
                ));
                Ok(None)
            }
        }
    }
}

fn tokenizer_name(t: Tokenizer) -> &'static str {
    match t {
        Tokenizer::Char => "char",
        Tokenizer::Gpt2 => "gpt2",
    }
}

/// A resumed run must have iterations left (or, at `max_iters`, the final evaluation a Ctrl-C
/// cut off); otherwise it would report "done" having done nothing.
fn check_resume_has_work(iter_num: u64, evaluated: bool, max_iters: u64) -> Result<(), Failure> {
    if max_iters < iter_num || (max_iters == iter_num && evaluated) {
        // No --max-iters goes past the last iteration a count holds.
        if iter_num == u64::MAX {
            return Err(input(format!("--resume: the checkpoint is at iteration {iter_num}, the last there is: nothing is left to train")));
        }
        return Err(input(format!(
            "--resume: the checkpoint is already at iteration {iter_num} and max_iters is {max_iters}: \
             pass a --max-iters larger than {iter_num} to continue training"
        )));
    }
    Ok(())
}

/// "1 layer", "12 layers".
fn counted(n: u64, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

fn describe_vocab(v: &Vocabulary) -> String {
    match v {
        Vocabulary::Chars { chars } => counted(chars.chars().count() as u64, "character"),
        Vocabulary::Gpt2 => "GPT-2 BPE".into(),
    }
}

fn print_header(cfg: &Config, s: &TrainSettings, data: &Dataset, device: &Device, resume: Option<&Checkpoint>) {
    let params = vramfit_core::params::count(cfg);
    let threads = candle_core::utils::get_num_threads();
    let device_name =
        if device.is_cpu() { format!("cpu ({threads} thread{})", if threads == 1 { "" } else { "s" }) } else { "cuda:0".to_string() };
    say(format!(
        "model: {}, {}, {} wide, block {}, vocab {}: number of parameters {} as nanoGPT prints it ({} with position embeddings)",
        counted(cfg.n_layer.into(), "layer"),
        counted(cfg.n_head.into(), "head"),
        cfg.n_embd,
        cfg.block_size,
        cfg.vocab_size,
        params.printed_millions(),
        thousands(params.total)
    ));
    say(format!(
        "data: {}, {} train / {} val tokens, vocabulary {}",
        data.source.describe(),
        data.train.len(),
        data.val.len(),
        describe_vocab(&data.vocab)
    ));
    say(format!(
        "training: batch {} x block {} x {} = {} tokens per iteration, {}, lr {:e}, on {device_name}",
        cfg.batch_size,
        cfg.block_size,
        counted(cfg.gradient_accumulation_steps.into(), "micro-step"),
        cfg.tokens_per_iter(),
        counted(s.max_iters, "iteration"),
        s.lr.learning_rate
    ));
    match vramfit::train::compute_dtype(cfg, device) {
        candle_core::DType::F32 if cfg.dtype != Dtype::Float32 => say(format!(
            "note: the trainer computes in float32 on the CPU (dtype {} is what a PyTorch run of this config would use; \
             it applies with --device cuda)",
            cfg.dtype.name()
        )),
        candle_core::DType::F32 => {}
        compute => say(format!(
            "mixed precision: {} compute with float32 master weights, layer norms and loss{}",
            cfg.dtype.name(),
            if compute == candle_core::DType::F16 { ", dynamic loss scaling" } else { "" }
        )),
    }
    // PyTorch settings the config may carry (a nanoGPT config file, a page link) that this
    // trainer does not have: said once, rather than trained as something else silently.
    let unused: Vec<&str> = [
        (cfg.optimizer == vramfit_core::Optimizer::Sgd, "optimizer = sgd (it trains AdamW)"),
        (cfg.compile, "compile = true"),
        (cfg.attention == vramfit_core::Attention::Flash, "attention = flash (it runs explicit causal attention)"),
        (cfg.expandable_segments, "expandable_segments = true"),
    ]
    .into_iter()
    .filter_map(|(set, what)| set.then_some(what))
    .collect();
    if !unused.is_empty() {
        say(format!("note: PyTorch settings the trainer does not have, not applied: {}", unused.join(", ")));
    }
    if let Some(ckpt) = resume {
        let lowest = ckpt
            .meta
            .lowest_val_loss
            .or(ckpt.meta.best_val_loss)
            .map_or_else(|| "no val loss measured yet".to_string(), |l| format!("lowest val loss so far {l:.4}"));
        say(format!("resuming from iteration {} ({lowest})", ckpt.meta.iter_num));
    }
}

/// A line on stdout; a closed pipe (`vramfit train | head`) or a full disk must not stop
/// training (see [`vramfit::progress::stdout_line`]).
fn say(text: String) {
    vramfit::progress::stdout_line(&text);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    /// The shell reads each suggested --out-dir back as the path itself (sh is the judge), and
    /// plain paths stay unquoted.
    #[cfg(unix)]
    #[test]
    fn suggested_out_dirs_are_one_shell_word() {
        for dir in ["out", "runs/out-2.1", "my dir", "$HOME;x", "~/x", "it's", "a\"b`c`\\", "tab\there", ""] {
            let word = shell_word(Path::new(dir));
            let out = std::process::Command::new("sh").args(["-c", &format!("printf %s {word}")]).output().expect("sh runs");
            assert_eq!(String::from_utf8_lossy(&out.stdout), dir, "{word}");
        }
        assert_eq!(shell_word(Path::new("runs/out-2.1")), "runs/out-2.1");
    }

    /// A limit above what the machine has is capped with a note that says so; one within it,
    /// none given, or a machine whose memory is unknown (unlimited) gives none.
    #[test]
    fn a_memory_limit_above_the_machines_is_capped_with_a_note() {
        let mib = 1u64 << 20;
        let note = capped_limit_note(1000 * mib, Some(4_000_000)).expect("a note");
        assert!(note.contains("--max-memory-mib 4000000") && note.contains("1000.0 MiB"), "{note}");
        assert_eq!(capped_limit_note(1000 * mib, Some(1000)), None);
        assert_eq!(capped_limit_note(1000 * mib, Some(999)), None);
        assert_eq!(capped_limit_note(1000 * mib, None), None);
        assert_eq!(capped_limit_note(u64::MAX, Some(u64::MAX >> 20)), None);
        // What train passes: the machine's memory, or the limit where that is lower.
        assert!(available_memory(&Device::Cpu, Some(1)) <= mib);
    }

    #[test]
    fn counts_of_one_are_singular() {
        assert_eq!(counted(1, "layer"), "1 layer");
        assert_eq!(counted(12, "head"), "12 heads");
        assert_eq!(describe_vocab(&Vocabulary::Chars { chars: "a".into() }), "1 character");
        assert_eq!(describe_vocab(&Vocabulary::Chars { chars: "aé".into() }), "2 characters");
    }

    fn fresh(args: &[&str]) -> (Config, TrainSettings, bool) {
        let argv = ["vramfit", "train"].iter().chain(args).copied();
        let Command::Train(train_args) = Cli::try_parse_from(argv).expect("the flags parse").command else { panic!("not a train command") };
        let (cfg, settings, explicit_vocab, _) = resolve_fresh(&train_args).unwrap_or_else(|f| panic!("{}", f.message));
        (cfg, settings, explicit_vocab)
    }

    /// The README's link sets the model and the batch; the vocabulary stays the data's and the
    /// schedule train's own (not train.py's 600000 iterations of 40 micro-steps).
    #[test]
    fn a_link_without_vocab_or_schedule_keys_keeps_trains_defaults() {
        let (small, small_settings) = train::small_default();
        let (cfg, settings, explicit_vocab) = fresh(&["--link", "http://127.0.0.1:8080/?v=1&L=4&C=128&H=4&T=128&B=8"]);
        assert!(!explicit_vocab, "a link without its vocab key set vocab_size");
        assert_eq!((cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.block_size, cfg.batch_size), (4, 128, 4, 128, 8));
        assert_eq!(settings, small_settings);
        assert_eq!(cfg.gradient_accumulation_steps, small.gradient_accumulation_steps);
        assert_eq!(cfg.eval_iters, small.eval_iters);
    }

    /// Keys the link does carry are kept, by short key or long name; flags still win.
    #[test]
    fn a_link_s_vocab_and_accumulation_keys_are_kept() {
        let (_, _, explicit) = fresh(&["--link", "?v=1&L=2&V=100"]);
        assert!(explicit);
        let (_, _, explicit) = fresh(&["--link", "?v=1&L=2&vocab_size=100"]);
        assert!(explicit);
        let (cfg, _, _) = fresh(&["--link", "?v=1&L=2&GA=3&EI=7"]);
        assert_eq!((cfg.gradient_accumulation_steps, cfg.eval_iters), (3, 7));
        let (cfg, _, explicit) = fresh(&["--link", "?v=1&L=2&GA=3", "--gradient-accumulation-steps", "5", "--vocab-size", "90"]);
        assert_eq!((cfg.gradient_accumulation_steps, cfg.vocab_size, explicit), (5, 90, true));
        // Without --config or --link, and with flags only, the data decides.
        assert!(!fresh(&[]).2);
        assert!(fresh(&["--vocab-size", "90"]).2);
    }

    /// A config file is train.py's settings: train.py's defaults fill in what it leaves out.
    #[test]
    fn a_config_file_keeps_train_py_defaults() {
        let dir = std::env::temp_dir().join(format!("vramfit-train-cmd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("train_x.py");
        std::fs::write(&file, "n_layer = 2\nlearning_rate = 1e-3\n").unwrap();
        let (cfg, settings, _) = fresh(&["--config", file.to_str().unwrap(), "--link", "?v=1&C=64&H=4"]);
        let _ = std::fs::remove_dir_all(&dir);
        let nanogpt = TrainSettings::default();
        assert_eq!((settings.max_iters, settings.lr.learning_rate), (nanogpt.max_iters, 1e-3));
        assert_eq!(cfg.gradient_accumulation_steps, Config::default().gradient_accumulation_steps);
    }

    /// Training flags in a config file read as the model's do (`bias = 1`): True/False or 0/1;
    /// any other value is an error naming the file and the setting.
    #[test]
    fn config_file_training_flags_take_zero_and_one() {
        let dir = std::env::temp_dir().join(format!("vramfit-train-flags-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("train_x.py");
        std::fs::write(&file, "always_save_checkpoint = 0\ndecay_lr = 1\n").unwrap();
        let (_, settings, _) = fresh(&["--config", file.to_str().unwrap()]);
        assert_eq!((settings.always_save_checkpoint, settings.lr.decay_lr), (false, true));
        std::fs::write(&file, "decay_lr = 2\n").unwrap();
        let argv = ["vramfit", "train", "--config", file.to_str().unwrap()];
        let Command::Train(args) = Cli::try_parse_from(argv).expect("the flags parse").command else { panic!("not a train command") };
        let Err(err) = resolve_fresh(&args) else { panic!("2 is not a flag value") };
        let _ = std::fs::remove_dir_all(&dir);
        assert!(err.message.contains("decay_lr must be True or False (got 2)"), "{}", err.message);
    }

    #[test]
    fn resuming_needs_iterations_left() {
        assert!(check_resume_has_work(610, true, 5).is_err());
        assert!(check_resume_has_work(610, true, 610).is_err());
        let err = check_resume_has_work(610, true, 5).err().unwrap();
        assert_eq!(err.code, 2);
        assert!(err.message.contains("already at iteration 610") && err.message.contains("--max-iters"), "{}", err.message);
        // Interrupted right after its last step: the final evaluation is still to do.
        assert!(check_resume_has_work(610, false, 610).is_ok());
        assert!(check_resume_has_work(610, true, 611).is_ok());
    }
}
