//! nanoGPT's `train.py` loop on [`Gpt`]: what `vramfit train` runs once its settings are resolved.
//!
//! One iteration, as in train.py:
//! 1. if `iter_num % eval_interval == 0` (and once more at the end): estimate the train and val
//!    loss over `eval_iters` batches of `eval_batch_size × eval_block_size` each, without
//!    dropout or gradients; if val improved (or `always_save_checkpoint`), remember it and, past
//!    iteration 0, write the checkpoint;
//! 2. stop once `iter_num == max_iters` (train.py runs one more step after its last evaluation,
//!    whose result it never saves; vramfit stops there, so `max_iters` steps are taken);
//! 3. `gradient_accumulation_steps` micro-steps: a random batch, forward, loss, backward; the
//!    gradients are summed and divided by the number of micro-steps (train.py divides each loss);
//! 4. clip to `grad_clip` by global norm (unless 0), set the learning rate from the schedule and
//!    take an AdamW step.
//!
//! Reproducibility: the parameters start from `seed`; batches and dropout masks come from one
//! seeded RNG whose state is checkpointed after each evaluation, so `--resume` from a checkpoint
//! continues exactly as the uninterrupted run would (bit-identical on CPU). Ctrl-C sets a flag the
//! loop checks between iterations and between an evaluation's batches (an evaluation it cuts short
//! is dropped, to run again on resume): it saves a checkpoint there and returns, except in a fresh
//! run that has not saved yet over a previous run's checkpoint, which it leaves as it is.

use crate::checkpoint::{self, Checkpoint, CheckpointMeta};
use crate::data::{get_batch, Dataset, Tokens};
use crate::model::{Gpt, HostRng, ModelOptions};
use crate::optim::{clip_grad_norm, grad_norm, AdamW, AdamWSettings, LossScaler, LrSchedule};
use crate::progress::{EvalRecord, IterRecord, Progress};
use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use vramfit_core::{Config, Dtype};

/// train.py's settings that the memory model does not need (nanoGPT's names and meanings).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainSettings {
    pub max_iters: u64,
    pub lr: LrSchedule,
    pub adamw: AdamWSettings,
    /// 0 disables clipping.
    pub grad_clip: f64,
    pub eval_interval: u64,
    /// Iterations between progress lines when stderr is not a terminal.
    pub log_interval: u64,
    pub always_save_checkpoint: bool,
    pub seed: u64,
    pub out_dir: PathBuf,
    /// Cross-entropy over chunks of rows (memory saver).
    pub chunked_loss: bool,
    /// Rows per eval forward (memory saver); `None` = the whole eval batch.
    pub eval_chunk_rows: Option<usize>,
}

impl Default for TrainSettings {
    /// train.py's defaults (GPT-2 124M on OpenWebText).
    fn default() -> Self {
        TrainSettings {
            max_iters: 600_000,
            lr: LrSchedule { learning_rate: 6e-4, decay_lr: true, warmup_iters: 2000, lr_decay_iters: 600_000, min_lr: 6e-5 },
            adamw: AdamWSettings { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 },
            grad_clip: 1.0,
            eval_interval: 2000,
            log_interval: 1,
            always_save_checkpoint: true,
            seed: 1337,
            out_dir: PathBuf::from("out"),
            chunked_loss: false,
            eval_chunk_rows: None,
        }
    }
}

/// The run `vramfit train` does with no arguments: 2 layers × 64 wide (about 0.1 M parameters
/// plus the character embedding), context 64, batch 16, 600 iterations at a peak learning rate
/// of 1e-3 (nanoGPT's `train_shakespeare_char.py` choices, scaled down).
pub fn small_default() -> (Config, TrainSettings) {
    use vramfit_core::{Attention, Dtype};
    let cfg = Config {
        n_layer: 2,
        n_head: 4,
        n_embd: 64,
        block_size: 64,
        bias: false,
        dropout: 0.0,
        batch_size: 16,
        gradient_accumulation_steps: 1,
        eval_iters: 20,
        dtype: Dtype::Float32,
        attention: Attention::Manual,
        compile: false,
        ..Config::default()
    };
    let mut settings = TrainSettings { max_iters: 600, eval_interval: 100, log_interval: 50, ..TrainSettings::default() };
    settings.lr.learning_rate = 1e-3;
    settings.lr.warmup_iters = 20;
    settings.lr.lr_decay_iters = 600;
    settings.lr.min_lr = 1e-4;
    settings.adamw.beta2 = 0.99;
    (cfg, settings)
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Iterations completed (the next one to run).
    pub iter_num: u64,
    /// train.py's best_val_loss (see [`CheckpointMeta::best_val_loss`]).
    pub best_val_loss: Option<f32>,
    /// The lowest val loss measured, this run and the runs it resumed.
    pub lowest_val_loss: Option<f32>,
    /// The last evaluation's (train, val) loss.
    pub last_eval: Option<(f32, f32)>,
    /// The iteration it evaluated (an interrupted run may have trained on since).
    pub last_eval_iter: Option<u64>,
    /// Ctrl-C stopped it (a checkpoint was saved unless `checkpoint` is `None`: see
    /// [`save_on_interrupt`]).
    pub interrupted: bool,
    /// Where this run's checkpoint is (written by this run, or by the run it resumed); `None`
    /// when it saved none (a previous run's checkpoint may be there, untouched).
    pub checkpoint: Option<PathBuf>,
    /// Training tokens per second over this run's iterations.
    pub tokens_per_s: f64,
    /// Whether this run's last redraw of `out_dir/loss.svg` drew it (a file left by an earlier
    /// run is not this run's curve).
    pub loss_curve: bool,
}

/// One split's mean loss over `eval_iters` random batches; `None` when Ctrl-C came first (checked
/// between batches: an evaluation of many batches would otherwise keep a stopping run for minutes).
fn split_loss(
    model: &Gpt,
    tokens: &Tokens,
    cfg: &Config,
    rng: &mut HostRng,
    device: &Device,
    interrupt: &AtomicBool,
) -> Result<Option<f32>, String> {
    let (b, t) = (cfg.eval_batch() as usize, cfg.eval_block() as usize);
    let mut sum = 0f64;
    for _ in 0..cfg.eval_iters {
        if interrupt.load(Ordering::SeqCst) {
            return Ok(None);
        }
        let (x, y) = get_batch(tokens, b, t, rng);
        let (x, y) = (to_tensor(x, b, t, device)?, to_tensor(y, b, t, device)?);
        sum += model.eval_loss(&x, &y).map_err(|e| format!("eval forward failed: {e}"))? as f64;
    }
    Ok(Some((sum / cfg.eval_iters as f64) as f32))
}

fn to_tensor(ids: Vec<u32>, b: usize, t: usize, device: &Device) -> Result<Tensor, String> {
    Tensor::from_vec(ids, (b, t), device).map_err(|e| format!("cannot move a batch to the device: {e}"))
}

/// Builds the model (and, when resuming, loads the checkpoint's weights and optimizer state).
pub fn build(cfg: &Config, settings: &TrainSettings, device: &Device, resume: Option<&Checkpoint>) -> Result<(Gpt, AdamW), String> {
    let opts = ModelOptions {
        activation_checkpointing: cfg.activation_checkpointing,
        chunked_loss: settings.chunked_loss,
        eval_chunk_rows: settings.eval_chunk_rows,
    };
    let model =
        Gpt::new_mixed(cfg, opts, device, settings.seed, compute_dtype(cfg, device)).map_err(|e| format!("cannot build the model: {e}"))?;
    let mut optimizer = AdamW::new(model.params(), settings.adamw);
    if let Some(ckpt) = resume {
        load_weights(&model, ckpt)?;
        optimizer.restore(model.params(), ckpt.meta.optimizer_steps, ckpt.exp_avg.clone(), ckpt.exp_avg_sq.clone())?;
    }
    Ok((model, optimizer))
}

/// What the model computes in: on CUDA the config's dtype (bfloat16 or float16: mixed precision
/// with f32 master weights, as nanoGPT's autocast); on CPU always f32 (CPU bf16 matmuls are widened
/// to f32 by candle anyway, and f16 ones are slower than f32).
pub fn compute_dtype(cfg: &Config, device: &Device) -> DType {
    match (device.is_cuda(), cfg.dtype) {
        (true, Dtype::Bfloat16) => DType::BF16,
        (true, Dtype::Float16) => DType::F16,
        _ => DType::F32,
    }
}

/// Copies a checkpoint's parameters into the model, checking names and shapes.
pub fn load_weights(model: &Gpt, ckpt: &Checkpoint) -> Result<(), String> {
    let params = model.params();
    if ckpt.meta.param_names.len() != params.len() {
        return Err(format!("the checkpoint has {} parameters, the model {}", ckpt.meta.param_names.len(), params.len()));
    }
    for ((name, var), (saved_name, saved)) in params.iter().zip(ckpt.meta.param_names.iter().zip(&ckpt.params)) {
        if name != saved_name || var.dims() != saved.dims() {
            return Err(format!("the checkpoint's {saved_name} {:?} does not match the model's {name} {:?}", saved.dims(), var.dims()));
        }
        var.set(&saved.to_device(var.device()).map_err(|e| e.to_string())?).map_err(|e| format!("cannot load {name}: {e}"))?;
    }
    Ok(())
}

/// Everything the loop needs.
pub struct Run<'a> {
    pub cfg: &'a Config,
    pub settings: &'a TrainSettings,
    pub data: &'a Dataset,
    pub device: &'a Device,
    pub model: &'a Gpt,
    pub optimizer: &'a mut AdamW,
    /// Set by the Ctrl-C handler.
    pub interrupt: &'a AtomicBool,
}

/// Where the loop stands; what a checkpoint records besides the tensors.
struct LoopState {
    iter_num: u64,
    evaluated: bool,
    best_val_loss: Option<f32>,
    lowest_val_loss: Option<f32>,
    rng: HostRng,
    /// f16 training's loss scaling (`None` otherwise).
    scaler: Option<LossScaler>,
}

/// Test hook, in debug builds only (what `cargo test` runs): `VRAMFIT_TEST_ITERATION_PAUSE_MS=N`
/// sleeps N ms after each iteration, so that a test's Ctrl-C lands mid-run however loaded the
/// machine is; a release binary ignores the variable.
const PAUSE_HOOK: &str = "VRAMFIT_TEST_ITERATION_PAUSE_MS";

/// Runs the loop from `resume`'s state (or from the start) to `max_iters` or Ctrl-C.
pub fn run(run: Run<'_>, resume: Option<&CheckpointMeta>, progress: &mut Progress) -> Result<Summary, String> {
    let Run { cfg, settings, data, device, model, optimizer, interrupt } = run;
    let ckpt_path = settings.out_dir.join(checkpoint::FILE_NAME);
    let mut state = match resume {
        Some(meta) => LoopState {
            iter_num: meta.iter_num,
            evaluated: meta.evaluated,
            best_val_loss: meta.best_val_loss,
            lowest_val_loss: meta.lowest_val_loss.or(meta.best_val_loss),
            rng: HostRng::new(meta.rng_state),
            scaler: (model.compute_dtype() == DType::F16).then(|| meta.loss_scaler.unwrap_or_default()),
        },
        // A stream apart from the model's initialisation, which also starts from `seed`.
        None => LoopState {
            iter_num: 0,
            evaluated: false,
            best_val_loss: None,
            lowest_val_loss: None,
            rng: HostRng::new(settings.seed ^ 0x0062_6174_6368_6573),
            scaler: (model.compute_dtype() == DType::F16).then(LossScaler::new),
        },
    };
    let mut saved_any = resume.is_some();
    let (b, t, ga) = (cfg.batch_size as usize, cfg.block_size as usize, cfg.gradient_accumulation_steps as usize);
    let tokens_per_iter = (b * t * ga) as f64;
    let (mut last_eval, mut last_eval_iter) = (None, None);
    let (mut train_secs, mut train_iters) = (0f64, 0u64);
    let pause = if cfg!(debug_assertions) { std::env::var(PAUSE_HOOK).ok().and_then(|ms| ms.parse().ok()) } else { None };
    let mut plot = LossPlot { out_dir: &settings.out_dir, given_up: false, drawn: false };

    loop {
        if interrupt.load(Ordering::SeqCst) {
            let tokens_per_s = tokens_per_iter * train_iters as f64 / train_secs.max(1e-9);
            if !save_on_interrupt(saved_any, ckpt_path.exists()) {
                // The checkpoint on disk (and its log, kept aside) is a previous run's, and this
                // run never reached a save of its own: an interrupted run must not cost it (nor
                // the log kept aside with it, nor its loss plot).
                return Ok(Summary {
                    iter_num: state.iter_num,
                    best_val_loss: state.best_val_loss,
                    lowest_val_loss: state.lowest_val_loss,
                    last_eval,
                    last_eval_iter,
                    interrupted: true,
                    checkpoint: None,
                    tokens_per_s,
                    loss_curve: plot.drawn,
                });
            }
            save(&ckpt_path, cfg, settings, data, model, optimizer, &state)?;
            progress.checkpoint(state.iter_num, &ckpt_path, "interrupted");
            plot.redraw();
            return Ok(Summary {
                iter_num: state.iter_num,
                best_val_loss: state.best_val_loss,
                lowest_val_loss: state.lowest_val_loss,
                last_eval,
                last_eval_iter,
                interrupted: true,
                checkpoint: Some(ckpt_path),
                tokens_per_s,
                loss_curve: plot.drawn,
            });
        }
        let finished = state.iter_num >= settings.max_iters;
        let scheduled = settings.eval_interval > 0 && state.iter_num % settings.eval_interval == 0;
        if (scheduled || finished) && !state.evaluated {
            let started = Instant::now();
            let rng_before = state.rng.state();
            let train_loss = split_loss(model, &data.train, cfg, &mut state.rng, device, interrupt)?;
            let val_loss = match train_loss {
                Some(_) => split_loss(model, &data.val, cfg, &mut state.rng, device, interrupt)?,
                None => None,
            };
            let (Some(train_loss), Some(val_loss)) = (train_loss, val_loss) else {
                // Ctrl-C mid-evaluation: the partial losses are no evaluation (nothing logged,
                // no best val loss, no save as "best"). The state goes back to before it, as if
                // Ctrl-C had come just before: the checkpoint the top of the loop saves says
                // the evaluation is still to do, and a resume draws the same batches for it.
                state.rng = HostRng::new(rng_before);
                continue;
            };
            state.evaluated = true;
            last_eval = Some((train_loss, val_loss));
            last_eval_iter = Some(state.iter_num);
            progress.eval(&EvalRecord { iter: state.iter_num, train_loss, val_loss, secs: started.elapsed().as_secs_f64() });
            // A model whose loss is no longer a number must not replace the last good checkpoint.
            if let Some((split, loss)) = [("train", train_loss), ("val", val_loss)].into_iter().find(|(_, l)| !l.is_finite()) {
                return Err(format!(
                    "the estimated {split} loss became {loss} at iteration {}: no checkpoint saved of this model; {}",
                    state.iter_num,
                    divergence_advice(settings)
                ));
            }
            let lowest_yet = state.lowest_val_loss.is_none_or(|lowest| val_loss < lowest);
            state.lowest_val_loss = Some(state.lowest_val_loss.map_or(val_loss, |l| l.min(val_loss)));
            // train.py's rule: best_val_loss is the last save's, so with always_save_checkpoint it
            // may be above the lowest, and "improved" is no best val loss.
            let improved = state.best_val_loss.is_none_or(|best| val_loss < best);
            if improved || settings.always_save_checkpoint {
                state.best_val_loss = Some(val_loss);
                if state.iter_num > 0 {
                    save(&ckpt_path, cfg, settings, data, model, optimizer, &state)?;
                    saved_any = true;
                    let why = match (lowest_yet, settings.always_save_checkpoint) {
                        (true, _) => "best val loss so far",
                        (false, true) => "always_save_checkpoint",
                        // A checkpoint of an always-saving run resumed with it off.
                        (false, false) => "val loss below the last save's",
                    };
                    progress.checkpoint(state.iter_num, &ckpt_path, why);
                    plot.redraw();
                }
            }
        }
        if finished {
            break;
        }

        let started = Instant::now();
        let lr = settings.lr.at(state.iter_num);
        let LoopState { rng, scaler, iter_num, .. } = &mut state;
        let next_batch = || {
            let (x, y) = get_batch(&data.train, b, t, rng);
            let dropout_seed = rng.next_u64();
            Ok((to_tensor(x, b, t, device)?, to_tensor(y, b, t, device)?, dropout_seed))
        };
        let step = optimizer_iteration(model, optimizer, scaler.as_mut(), ga, lr, settings.grad_clip, next_batch).map_err(|e| match e {
            StepError::NonFiniteLoss(loss) => format!("the loss became {loss} at iteration {iter_num}: {}", divergence_advice(settings)),
            StepError::Failed(why) => why,
        })?;
        if step.skipped {
            let scale = scaler.map_or(1.0, |s| s.scale);
            progress.line(&format!("iter {iter_num}: gradients overflowed in f16; step skipped, loss scale lowered to {scale}"));
        }
        let secs = started.elapsed().as_secs_f64();
        train_secs += secs;
        train_iters += 1;
        progress.iter(&IterRecord {
            iter: state.iter_num,
            loss: step.loss,
            lr,
            grad_norm: step.grad_norm,
            secs,
            optimizer_secs: step.optimizer_secs,
            tokens_per_s: tokens_per_iter / secs.max(1e-9),
        });
        state.iter_num += 1;
        state.evaluated = false;
        if let Some(ms) = pause {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }
    // A fresh run that saved nothing over a previous run's checkpoint (`--max-iters 0`, or no
    // evaluation that improved with always_save_checkpoint off) leaves that run's curve as it is,
    // as it leaves its checkpoint.
    if saved_any || !ckpt_path.exists() {
        plot.redraw();
    }
    Ok(Summary {
        iter_num: state.iter_num,
        best_val_loss: state.best_val_loss,
        lowest_val_loss: state.lowest_val_loss,
        last_eval,
        last_eval_iter,
        interrupted: false,
        checkpoint: saved_any.then_some(ckpt_path),
        tokens_per_s: tokens_per_iter * train_iters as f64 / train_secs.max(1e-9),
        loss_curve: plot.drawn,
    })
}

/// What one optimizer iteration did.
#[derive(Clone, Copy, Debug)]
pub struct StepOutcome {
    /// The micro-steps' mean loss (what train.py logs: `loss.item() * gradient_accumulation_steps`).
    pub loss: f32,
    /// The global gradient norm before clipping; `None` with clipping off or the step skipped.
    pub grad_norm: Option<f64>,
    /// f16 only: the gradients overflowed, so no step was taken and the loss scale was lowered.
    pub skipped: bool,
    /// Seconds from the last backward to the end of the step (scaling, clipping, AdamW).
    pub optimizer_secs: f64,
}

/// Why an optimizer iteration stopped.
#[derive(Debug)]
pub enum StepError {
    /// A micro-step's loss was NaN or infinite: the run diverged.
    NonFiniteLoss(f32),
    Failed(String),
}

/// Steps 3 and 4 of the loop (see the module's comment): `micro_steps` forwards and backwards on
/// the batches `next_batch` hands out (inputs, targets, dropout seed), the gradients summed and
/// divided by `micro_steps` (and f16's loss scale), clipped to `grad_clip` by global norm
/// (unless 0) and an AdamW step at `lr`. f16's `scaler` skips a step whose gradients
/// overflowed. `vramfit train` runs it once per iteration; `tests/torch_equivalence.rs` holds it
/// to PyTorch running train.py's arithmetic.
pub fn optimizer_iteration(
    model: &Gpt,
    optimizer: &mut AdamW,
    scaler: Option<&mut LossScaler>,
    micro_steps: usize,
    lr: f64,
    grad_clip: f64,
    mut next_batch: impl FnMut() -> Result<(Tensor, Tensor, u64), String>,
) -> Result<StepOutcome, StepError> {
    fn failed(what: &'static str) -> impl Fn(candle_core::Error) -> StepError {
        move |e| StepError::Failed(format!("{what} failed: {e}"))
    }
    let mut acc: Vec<Tensor> = Vec::new();
    let mut loss_sum = 0f64;
    let loss_scale = scaler.as_ref().map_or(1.0, |s| s.scale);
    for _ in 0..micro_steps {
        let (x, y, dropout_seed) = next_batch().map_err(StepError::Failed)?;
        let (loss, grads) = model.loss_and_grads_scaled(&x, &y, dropout_seed, loss_scale).map_err(failed("training step"))?;
        if !loss.is_finite() {
            return Err(StepError::NonFiniteLoss(loss));
        }
        loss_sum += loss as f64;
        acc = if acc.is_empty() {
            grads
        } else {
            acc.iter().zip(&grads).map(|(a, g)| a + g).collect::<candle_core::Result<Vec<_>>>().map_err(failed("gradient accumulation"))?
        };
    }
    let optimizer_started = Instant::now();
    // train.py divides each micro-step's loss by their number before its backward; summing the
    // gradients and dividing once is the same up to rounding, and one pass over them.
    if micro_steps > 1 || loss_scale != 1.0 {
        let inv = 1.0 / (micro_steps as f64 * loss_scale);
        acc = acc.iter().map(|g| g * inv).collect::<candle_core::Result<Vec<_>>>().map_err(failed("gradient scaling"))?;
    }
    // f16: a step whose gradients overflowed is skipped and the scale lowered (GradScaler).
    let take_step = match scaler {
        Some(scaler) => {
            let norm = grad_norm(&acc).map_err(failed("gradient norm"))?;
            scaler.update(norm.is_finite())
        }
        None => true,
    };
    let grad_norm =
        if grad_clip > 0.0 && take_step { Some(clip_grad_norm(&mut acc, grad_clip).map_err(failed("gradient clipping"))?) } else { None };
    if take_step {
        optimizer.step(model.params(), &acc, lr).map_err(failed("optimizer step"))?;
    }
    drop(acc);
    Ok(StepOutcome {
        loss: (loss_sum / micro_steps.max(1) as f64) as f32,
        grad_norm,
        skipped: !take_step,
        optimizer_secs: optimizer_started.elapsed().as_secs_f64(),
    })
}

/// `out_dir/loss.svg`, redrawn at each save and at the end.
struct LossPlot<'a> {
    out_dir: &'a Path,
    /// A redraw failed (a directory holds its name, the log is unreadable, ...): its note was
    /// said once, and the run does not try (and say it) again at every save.
    given_up: bool,
    /// The last redraw drew it.
    drawn: bool,
}

impl LossPlot<'_> {
    fn redraw(&mut self) {
        if self.given_up {
            return;
        }
        self.drawn = crate::lossplot::write_for(self.out_dir);
        self.given_up = !self.drawn;
    }
}

/// What to try when the model stopped being finite. Usually a lower learning rate; but a weight
/// decay above 1 with `learning_rate × weight_decay ≥ 1` scales the 2-D weights by
/// `1 − learning_rate × weight_decay ≤ 0` at every step, whatever the learning rate does for the
/// gradients: that is the setting to lower.
fn divergence_advice(settings: &TrainSettings) -> String {
    let lr = if settings.lr.decay_lr { settings.lr.learning_rate.max(settings.lr.min_lr) } else { settings.lr.learning_rate };
    let wd = settings.adamw.weight_decay;
    if wd > 1.0 && lr * wd >= 1.0 {
        format!(
            "try a lower --weight-decay (at learning_rate {lr:e}, weight_decay {wd:e} scales the weights by {:e} each step)",
            1.0 - lr * wd
        )
    } else {
        "try a lower --learning-rate".to_string()
    }
}

/// Whether Ctrl-C saves a checkpoint: always once this run owns the checkpoint on disk (it saved
/// one, or it resumed from it), and otherwise only where there is none. A fresh run interrupted
/// before its first regular save would otherwise replace a previous run's checkpoint (maybe
/// thousands of iterations) with a few iterations of its own.
pub fn save_on_interrupt(run_owns_checkpoint: bool, checkpoint_exists: bool) -> bool {
    run_owns_checkpoint || !checkpoint_exists
}

fn save(
    path: &Path,
    cfg: &Config,
    settings: &TrainSettings,
    data: &Dataset,
    model: &Gpt,
    optimizer: &AdamW,
    state: &LoopState,
) -> Result<(), String> {
    // Whatever asked for this save (an evaluation, the end, Ctrl-C), a model that is no longer
    // a number must not replace the last good checkpoint.
    if let Some(name) = model.first_non_finite_param().map_err(|e| e.to_string())? {
        return Err(format!(
            "parameter {name} is no longer finite at iteration {}: no checkpoint saved of this model; {}",
            state.iter_num,
            divergence_advice(settings)
        ));
    }
    let (steps, m, v) = optimizer.state();
    let ckpt = Checkpoint {
        meta: CheckpointMeta {
            format: checkpoint::FORMAT_VERSION,
            config: cfg.clone(),
            settings: settings.clone(),
            data: data.source.clone(),
            vocab: data.vocab.clone(),
            iter_num: state.iter_num,
            evaluated: state.evaluated,
            best_val_loss: state.best_val_loss,
            lowest_val_loss: state.lowest_val_loss,
            rng_state: state.rng.state(),
            optimizer_steps: steps,
            param_names: model.params().iter().map(|(n, _)| n.clone()).collect(),
            loss_scaler: state.scaler,
            data_fingerprint: Some(data.fingerprint()),
        },
        params: model.params().iter().map(|(_, v)| v.as_tensor().clone()).collect(),
        exp_avg: m.to_vec(),
        exp_avg_sq: v.to_vec(),
    };
    checkpoint::save(path, &ckpt)?;
    if let Some(out_dir) = path.parent() {
        crate::progress::checkpoint_saved(out_dir);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{divergence_advice, save_on_interrupt, TrainSettings};

    /// A weight decay that zeroes or flips the weights at every step is named, not the learning
    /// rate; an absurd learning rate is still the learning rate.
    #[test]
    fn divergence_advice_names_the_setting_at_fault() {
        let mut s = TrainSettings::default();
        assert_eq!(divergence_advice(&s), "try a lower --learning-rate");
        s.adamw.weight_decay = 1e308;
        assert!(divergence_advice(&s).starts_with("try a lower --weight-decay"), "{}", divergence_advice(&s));
        s.adamw.weight_decay = 0.1;
        s.lr.learning_rate = 1e30;
        assert_eq!(divergence_advice(&s), "try a lower --learning-rate");
    }

    /// A fresh run that has not saved leaves a previous run's checkpoint alone; everything else
    /// (its own checkpoint, a resumed one, an empty directory) is saved on Ctrl-C.
    #[test]
    fn ctrl_c_saves_only_over_a_checkpoint_this_run_owns() {
        assert!(!save_on_interrupt(false, true), "a fresh run would replace the previous run's checkpoint");
        assert!(save_on_interrupt(false, false));
        assert!(save_on_interrupt(true, true));
        assert!(save_on_interrupt(true, false));
    }
}
