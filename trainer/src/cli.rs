//! The command line: subcommands and flags (clap), and clap's errors as one line.
//!
//! Flags are kebab-case (`--n-layer 12`); nanoGPT's snake_case spellings work too
//! (`--n_layer=12`), so a nanoGPT command line can be pasted as it is.

use clap::error::ErrorKind;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;
use vramfit_core::nanogpt::TRAIN_PY_UNMODELLED;
use vramfit_core::{Attention, Dtype, Gpu, Optimizer};

/// The most CPU threads `--threads` takes (and `train` takes from CANDLE_NUM_THREADS / RAYON_NUM_THREADS).
pub const MAX_THREADS: u32 = 1024;

/// The thread count the environment asks for without `--threads`: CANDLE_NUM_THREADS, else
/// RAYON_NUM_THREADS (what sizes the matmuls' pool). Empty or 0 means all cores, as candle and
/// rayon read it. Anything else that is not a count is an error: candle would ignore it and
/// use every core, silently, which is not what whoever set it meant. A count past
/// [`MAX_THREADS`] is an error too, not a machine: the memory model counts a set of gemm
/// buffers per thread, and "use a smaller model" would be the answer to a typo.
pub fn threads_from_env() -> Result<Option<u32>, String> {
    for var in ["CANDLE_NUM_THREADS", "RAYON_NUM_THREADS"] {
        let Some(value) = std::env::var_os(var) else { continue };
        let text = value.to_string_lossy();
        let Ok(n) = text.trim().parse::<u64>() else {
            if text.trim().is_empty() {
                continue;
            }
            let shown = vramfit_core::shown_input(&text, 40);
            return Err(format!("{var}={shown} is not a thread count: set a number from 1 to {MAX_THREADS}, or unset it"));
        };
        if n == 0 {
            continue;
        }
        return match u32::try_from(n) {
            Ok(n) if n <= MAX_THREADS => Ok(Some(n)),
            _ => Err(format!("{var}={n} is too many threads (at most {MAX_THREADS}): set it lower, or pass --threads")),
        };
    }
    Ok(None)
}

/// Predicts a nanoGPT training run's GPU memory, trains it and samples from it.
#[derive(Debug, Parser)]
#[command(name = "vramfit", version, color = clap::ColorChoice::Never)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Will it fit? Peaks per window, what they are made of, fit per card, and fixes.
    // Negative values reach the value's own check ("-1 is not in 0..") instead of being taken
    // for a flag; a flag given twice takes its last value, so a fix can be appended.
    #[command(allow_negative_numbers = true, args_override_self = true)]
    #[command(after_help = "Settings are read from nanoGPT's defaults, then --config, then --link, then the flags \
        (each overriding the one before). nanoGPT's snake_case spellings work too: --n_layer=12. A train.py command line plans \
        as it is (vramfit plan config/train_x.py --batch_size=8 --max_iters=2000 ...): its config file may come first without \
        --config, --dataset and --init_from act as the file's, and settings that do not change memory (--max_iters, \
        --learning_rate, --device, ...) are noted and not used.")]
    Plan(Box<PlanArgs>),
    /// Train the model for real (CPU, or CUDA when built with --features cuda).
    #[command(allow_negative_numbers = true, args_override_self = true)]
    #[command(after_help = "With no --config and no --link, a small character model (2 layers, 4 heads, 64 wide, context 64, \
        batch 16, no gradient accumulation, eval_iters 20, 600 iterations, about 10 s) trains on the built-in corpus, and \
        vocab_size is the data's. A --link sets the model and batch it carries over nanoGPT's model defaults (vocab_size still \
        the data's unless the link has V) and keeps this run's training schedule, and its accumulation (1) and eval_iters (20) \
        where the link leaves them out. With --config, settings come from nanoGPT's defaults, then the file, then --link, then \
        the flags; the [default: ...] of a training setting names both. The model flags' [default: ...] (gradient-accumulation-steps \
        and eval-iters among them) are nanoGPT's, which apply with --config, and with --link for the model settings it leaves out. With --resume the checkpoint's settings replace all \
        of those; flags may still change the training ones (not the model's shape). CPU threads: --threads, else \
        CANDLE_NUM_THREADS / RAYON_NUM_THREADS, else one for the small default model (its 2 layers, 4 heads, 64 wide, block 64 and batch 16, however they are set, a resumed run's included) and all cores otherwise.")]
    Train(Box<TrainArgs>),
    /// Generate text from a checkpoint written by `vramfit train`.
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Sample(SampleArgs),
}

/// `vramfit train`'s flags: the run's settings as for `plan`, the data, and train.py's training settings.
#[derive(Debug, Args)]
pub struct TrainArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// A text file (character vocabulary, or GPT-2 with --tokenizer gpt2) or a directory with nanoGPT's
    /// train.bin and val.bin [default: the built-in corpus].
    #[arg(long, value_name = "PATH")]
    pub data: Option<PathBuf>,
    /// How a text file becomes tokens: char or gpt2 [default: char].
    #[arg(long, value_name = "KIND", value_parser = parse_tokenizer)]
    pub tokenizer: Option<vramfit::data::Tokenizer>,
    /// Continue from out_dir's checkpoint (same batches and results as an uninterrupted run on CPU).
    #[arg(long)]
    pub resume: bool,
    /// Start from GPT-2's weights (fine-tuning, train.py's init_from = 'gpt2*'): Hugging Face's
    /// model.safetensors of gpt2, gpt2-medium, gpt2-large or gpt2-xl, whose shape the model takes
    /// (another GPT-2-style file needs the config to have its shape); the data must be GPT-2's tokens.
    #[arg(long, value_name = "FILE")]
    pub weights: Option<PathBuf>,
    /// Where the checkpoint, log.jsonl and loss.svg go [default: out].
    #[arg(long = "out-dir", alias = "out_dir", value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// cpu or cuda [default: cpu].
    #[arg(long, value_name = "DEVICE", value_parser = parse_device)]
    pub device: Option<DeviceArg>,
    /// CPU threads (sets CANDLE_NUM_THREADS and RAYON_NUM_THREADS for this run).
    #[arg(long, value_name = "N", value_parser = |s: &str| parse_u32_in(s, 1, MAX_THREADS as u32))]
    pub threads: Option<u32>,
    /// If the pre-flight predicts the run will not fit, train a smaller micro-batch that fits, with
    /// more gradient accumulation to keep the tokens per iteration (the note says if they change).
    #[arg(long = "auto-fit", alias = "auto_fit")]
    pub auto_fit: bool,
    /// Memory the pre-flight may plan for, in MiB: at most what the machine has available (a
    /// larger value, up to 4194304, is capped to it with a note) [default: what the machine has available].
    #[arg(long = "max-memory-mib", alias = "max_memory_mib", value_name = "MIB", value_parser = parse_memory_limit)]
    pub max_memory_mib: Option<u64>,
    /// Optimizer steps to take [default: 600; with --config: 600000].
    #[arg(long = "max-iters", alias = "max_iters", value_name = "N", value_parser = parse_count)]
    pub max_iters: Option<u64>,
    /// Peak learning rate [default: 1e-3; with --config: 6e-4].
    // allow_hyphen_values on every float flag: clap's allow_negative_numbers takes -1e3 but not
    // -1e-3 (an exponent's sign), which it called an unexpected argument '-1'; the value's own
    // parser says what is wrong with it.
    #[arg(long = "learning-rate", alias = "learning_rate", value_name = "LR", value_parser = parse_non_negative, allow_hyphen_values = true)]
    pub learning_rate: Option<f64>,
    /// Cosine decay with warmup: true or false (constant learning rate) [default: true].
    #[arg(long = "decay-lr", alias = "decay_lr", value_name = "BOOL", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub decay_lr: Option<bool>,
    /// Linear warmup iterations [default: 20; with --config: 2000].
    #[arg(long = "warmup-iters", alias = "warmup_iters", value_name = "N", value_parser = parse_count)]
    pub warmup_iters: Option<u64>,
    /// Iteration at which the learning rate reaches min-lr [default: 600; with --config: 600000].
    #[arg(long = "lr-decay-iters", alias = "lr_decay_iters", value_name = "N", value_parser = parse_count)]
    pub lr_decay_iters: Option<u64>,
    /// Final learning rate [default: 1e-4; with --config: 6e-5].
    #[arg(long = "min-lr", alias = "min_lr", value_name = "LR", value_parser = parse_non_negative, allow_hyphen_values = true)]
    pub min_lr: Option<f64>,
    /// AdamW weight decay of the 2-D parameters [default: 0.1].
    #[arg(long = "weight-decay", alias = "weight_decay", value_name = "WD", value_parser = parse_non_negative, allow_hyphen_values = true)]
    pub weight_decay: Option<f64>,
    /// AdamW beta1 [default: 0.9].
    #[arg(long, value_name = "B", value_parser = parse_beta, allow_hyphen_values = true)]
    pub beta1: Option<f64>,
    /// AdamW beta2 [default: 0.99; with --config: 0.95].
    #[arg(long, value_name = "B", value_parser = parse_beta, allow_hyphen_values = true)]
    pub beta2: Option<f64>,
    /// Clip gradients to this global norm; 0 disables [default: 1.0].
    #[arg(long = "grad-clip", alias = "grad_clip", value_name = "NORM", value_parser = parse_non_negative, allow_hyphen_values = true)]
    pub grad_clip: Option<f64>,
    /// Iterations between evaluations (and checkpoints) [default: 100; with --config: 2000].
    #[arg(long = "eval-interval", alias = "eval_interval", value_name = "N", value_parser = parse_positive)]
    pub eval_interval: Option<u64>,
    /// Iterations between progress lines when stderr is not a terminal [default: 50; with --config: 1].
    #[arg(long = "log-interval", alias = "log_interval", value_name = "N", value_parser = parse_positive)]
    pub log_interval: Option<u64>,
    /// Save at every evaluation, not only when val loss improves: true or false [default: true].
    #[arg(
        long = "always-save-checkpoint",
        alias = "always_save_checkpoint",
        value_name = "BOOL",
        value_parser = parse_bool,
        action = clap::ArgAction::Set
    )]
    pub always_save_checkpoint: Option<bool>,
    /// Seed of the initialisation, the batches and dropout [default: 1337].
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub seed: Option<u64>,
    /// train.py's eval_only, which `train` has no mode for: a true value is refused with why
    /// (clap called it unknown and suggested --eval_interval); false is what `train` does.
    #[arg(long = "eval-only", alias = "eval_only", hide = true, value_name = "BOOL", value_parser = refuse_eval_only)]
    pub eval_only: Option<bool>,
    /// Cross-entropy in chunks of rows, never holding all B*T*V logits: true or false [default: false].
    #[arg(long = "chunked-loss", alias = "chunked_loss", value_name = "BOOL", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub chunked_loss: Option<bool>,
    /// Rows (sequences x positions) per eval forward [default: the whole eval batch].
    #[arg(long = "eval-chunk-rows", alias = "eval_chunk_rows", value_name = "N", value_parser = parse_positive)]
    pub eval_chunk_rows: Option<u64>,
}

/// `sample --prompt` followed by one of `sample`'s own flags (`--prompt --seed 3`): clap hands
/// `--prompt` whatever follows it (text may start with '-'), so the text was forgotten, and
/// clap's own complaint would be about the `3`. The joined form (`--prompt=--seed`) is meant.
fn forgotten_prompt(args: &[OsString]) -> Option<String> {
    if args.get(1).and_then(|a| a.to_str()) != Some("sample") {
        return None;
    }
    let at = args.iter().position(|a| a == "--prompt" || a == "--start")?;
    let next = args.get(at + 1)?.to_str()?;
    prompt_is_a_flag(next).then(|| {
        format!(
            "{} is followed by the flag {next}, not by text: give the text after it (quoted if it has spaces; --prompt=TEXT for a text that starts with --)",
            args[at].to_string_lossy()
        )
    })
}

/// Whether a `--prompt` value is one of `sample`'s own flags (`--num-samples`, `--seed=3`).
fn prompt_is_a_flag(prompt: &str) -> bool {
    use clap::Args as _;
    let Some(name) = prompt.strip_prefix("--").map(|rest| rest.split('=').next().unwrap_or(rest)) else { return false };
    let sample = SampleArgs::augment_args(clap::Command::new("sample"));
    let is_flag =
        sample.get_arguments().any(|a| a.get_long() == Some(name) || a.get_all_aliases().is_some_and(|aliases| aliases.contains(&name)));
    is_flag || name == "help"
}

/// `vramfit sample`'s flags (nanoGPT's sample.py names).
#[derive(Debug, Args)]
pub struct SampleArgs {
    /// The directory `vramfit train` wrote the checkpoint to.
    #[arg(long = "out-dir", alias = "out_dir", value_name = "DIR", default_value = "out")]
    pub out_dir: PathBuf,
    /// Text the samples continue [default: a newline].
    // Text may start with '-' (a list item, a negative number); a flag of this command in its
    // place means the text was forgotten, which `parse` says (`forgotten_prompt`).
    #[arg(long, alias = "start", value_name = "TEXT", allow_hyphen_values = true)]
    pub prompt: Option<String>,
    /// Samples to draw.
    #[arg(long = "num-samples", alias = "num_samples", value_name = "N", default_value_t = 3,
        value_parser = |s: &str| parse_u32_in(s, 1, 10_000))]
    pub num_samples: u32,
    /// Tokens generated per sample.
    #[arg(long = "max-new-tokens", alias = "max_new_tokens", value_name = "N", default_value_t = 300,
        value_parser = |s: &str| parse_u32_in(s, 1, 1_000_000))]
    pub max_new_tokens: u32,
    /// Divides the logits: below 1 is more conservative, above 1 more random.
    // allow_hyphen_values: see TrainArgs::learning_rate.
    #[arg(long, value_name = "T", default_value_t = 0.8, value_parser = parse_temperature, allow_hyphen_values = true)]
    pub temperature: f64,
    /// Sample only among the K most likely tokens.
    #[arg(long = "top-k", alias = "top_k", value_name = "K", default_value_t = 200, value_parser = |s: &str| parse_u32_in(s, 1, u32::MAX))]
    pub top_k: u32,
    /// Seed of the sampling.
    #[arg(long, value_name = "N", default_value_t = 1337, value_parser = parse_count)]
    pub seed: u64,
    /// cpu or cuda [default: cpu].
    #[arg(long, value_name = "DEVICE", value_parser = parse_device)]
    pub device: Option<DeviceArg>,
    /// CPU threads [default: CANDLE_NUM_THREADS / RAYON_NUM_THREADS, else all cores].
    #[arg(long, value_name = "N", value_parser = |s: &str| parse_u32_in(s, 1, MAX_THREADS as u32))]
    pub threads: Option<u32>,
}

/// `--device`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceArg {
    Cpu,
    Cuda,
}

pub(crate) fn parse_device(s: &str) -> Result<DeviceArg, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "cpu" => Ok(DeviceArg::Cpu),
        "cuda" | "gpu" | "cuda:0" => Ok(DeviceArg::Cuda),
        _ => Err("expected cpu or cuda".into()),
    }
}

fn parse_tokenizer(s: &str) -> Result<vramfit::data::Tokenizer, String> {
    vramfit::data::Tokenizer::parse(s).ok_or_else(|| "expected char or gpt2".into())
}

/// A flag where a number goes (`--learning-rate --max-iters 5`): the float flags take values
/// that start with `-` (for `-1e-3`), so the next flag would reach their parser as a value.
fn not_a_flag(s: &str) -> Result<(), String> {
    match s.trim_start().starts_with("--") {
        true => Err("a value is required here (the next flag came instead)".into()),
        false => Ok(()),
    }
}

fn parse_non_negative(s: &str) -> Result<f64, String> {
    not_a_flag(s)?;
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err("expected a finite number >= 0".into()),
    }
}

/// A whole number of at least `min`. clap's own u64 parser answers "-1" or "1e3" with only
/// "invalid digit found in string".
fn parse_whole(s: &str, min: u64) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if n >= min => Ok(n),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => Err(format!("expected a whole number <= {}", u64::MAX)),
        _ => Err(format!("expected a whole number >= {min}")),
    }
}

/// A config setting's whole number, its range left to core's validation (which names the
/// setting); spaces around it are taken, as every other flag takes them.
fn parse_setting(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) => Ok(n),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => Err(format!("expected a whole number <= {}", u32::MAX)),
        _ => Err("expected a whole number".into()),
    }
}

/// A whole number in `min..=max`.
fn parse_u32_in(s: &str, min: u32, max: u32) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("expected a whole number from {min} to {max}")),
    }
}

/// A number, its range left to core's validation.
fn parse_number(s: &str) -> Result<f64, String> {
    not_a_flag(s)?;
    s.trim().parse::<f64>().map_err(|_| "expected a number".into())
}

fn parse_count(s: &str) -> Result<u64, String> {
    parse_whole(s, 0)
}

fn parse_positive(s: &str) -> Result<u64, String> {
    parse_whole(s, 1)
}

fn refuse_eval_only(s: &str) -> Result<bool, String> {
    match parse_bool(s)? {
        true => Err("vramfit train has no evaluate-only mode (`vramfit plan --eval_only=True` plans train.py's)".into()),
        false => Ok(false),
    }
}

fn parse_beta(s: &str) -> Result<f64, String> {
    not_a_flag(s)?;
    match s.trim().parse::<f64>() {
        Ok(x) if (0.0..1.0).contains(&x) => Ok(x),
        _ => Err("expected a number in [0, 1)".into()),
    }
}

fn parse_temperature(s: &str) -> Result<f64, String> {
    not_a_flag(s)?;
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err("expected a finite number > 0".into()),
    }
}

/// `vramfit plan`'s flags.
#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub card: CardArgs,
    /// Print the plan as one JSON document instead of the report.
    #[arg(long)]
    pub json: bool,
    /// Skip computing fixes (faster).
    #[arg(long, alias = "no_fixes")]
    pub no_fixes: bool,
    /// List the GPU presets and exit.
    #[arg(long, alias = "list_gpus")]
    pub list_gpus: bool,
    /// Whose memory to predict: pytorch (nanoGPT's train.py on a GPU) or trainer (`vramfit train`
    /// on this CPU, or on a CUDA card with --device=cuda) [default: pytorch].
    #[arg(long, value_name = "RUNTIME", value_parser = parse_runtime)]
    pub runtime: Option<Runtime>,
    /// trainer runtime: cross-entropy in chunks of rows: true or false [default: false].
    #[arg(long = "chunked-loss", alias = "chunked_loss", value_name = "BOOL", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub chunked_loss: Option<bool>,
    /// trainer runtime: rows per eval forward [default: the whole eval batch].
    #[arg(long = "eval-chunk-rows", alias = "eval_chunk_rows", value_name = "N", value_parser = parse_positive)]
    pub eval_chunk_rows: Option<u64>,
    /// trainer runtime: gradient clipping on: true or false, or train's norm (0 is off) [default: true, as train's grad_clip 1.0].
    // allow_hyphen_values: see TrainArgs::learning_rate.
    #[arg(long = "grad-clip", alias = "grad_clip", value_name = "BOOL|NORM", value_parser = parse_clip_on, action = clap::ArgAction::Set, allow_hyphen_values = true)]
    pub grad_clip: Option<bool>,
    /// trainer runtime: CPU threads of the matmuls [default: CANDLE_NUM_THREADS / RAYON_NUM_THREADS, else all cores].
    #[arg(long, value_name = "N", value_parser = |s: &str| parse_u32_in(s, 1, MAX_THREADS as u32))]
    pub threads: Option<u32>,
    /// trainer runtime: memory to check the run against, in MiB [default: the machine's available memory; with --device=cuda the card's (--gpu) less the trainer's CUDA context and --other-usage-mib].
    #[arg(long = "max-memory-mib", alias = "max_memory_mib", value_name = "MIB", value_parser = parse_memory_limit)]
    pub max_memory_mib: Option<u64>,
    /// train.py settings from a pasted command line that plan does not use, as (name, value),
    /// taken out before clap parses the rest (see [`take_training_only`]).
    #[arg(skip)]
    pub training_only: Vec<(String, String)>,
}

/// Whether `name` is a setting of nanoGPT's train.py (and `vramfit train`) that a pasted
/// command line may carry and clap does not: core's [`TRAIN_PY_UNMODELLED`] (the schedule,
/// logging, where data and checkpoints go, the device, the data set) except `grad_clip`, which
/// is a plan flag (the trainer runtime's clipping). Most do not change the memory of the step
/// `plan` models and are noted as not used; `eval_only` and a device other than CUDA change
/// what runs, and `plan` says so; the [`FILE_LEVEL`] ones are read as the config file's.
fn is_training_only(name: &str) -> bool {
    name != "grad_clip" && TRAIN_PY_UNMODELLED.contains(&name)
}

/// The training-only settings ([`is_training_only`]) that decide the model as a config file's do: `dataset` (its
/// meta.pkl's vocab_size) and `init_from` (a GPT-2 checkpoint's shape). train.py's
/// configurator applies command-line settings after the file, so they override its values.
pub const FILE_LEVEL: [&str; 2] = ["dataset", "init_from"];

/// Takes the training-only settings ([`is_training_only`]) out of `plan`'s arguments (`--max_iters=2000`, or
/// `--max-iters 2000` as `vramfit train` spells it), so that a train.py or `vramfit train`
/// command line plans as it is; returns them as (snake_case name, value). Other commands'
/// arguments are left alone, and so is anything after `--`. One given without a value is an
/// error here: clap would call it unknown and suggest a flag of another meaning.
fn take_training_only(args: &mut Vec<OsString>) -> Result<Vec<(String, String)>, String> {
    let mut taken = Vec::new();
    if args.get(1).and_then(|a| a.to_str()) != Some("plan") {
        return Ok(taken);
    }
    let mut i = 2;
    while i < args.len() {
        let Some(flag) = args[i].to_str().and_then(|a| a.strip_prefix("--")) else {
            // `--max_iters=<not UTF-8>`: clap would call the flag unknown.
            let lossy = args[i].to_string_lossy();
            let name = lossy.strip_prefix("--").and_then(|f| f.split_once('=')).map(|(name, _)| name.replace('-', "_"));
            if let Some(name) = name.filter(|n| is_training_only(n)) {
                return Err(format!("the value of --{name} is not valid UTF-8"));
            }
            i += 1;
            continue;
        };
        if flag.is_empty() {
            break;
        }
        let (name, value) = match flag.split_once('=') {
            Some((name, value)) => (name.replace('-', "_"), Some(value.to_string())),
            None => (flag.replace('-', "_"), None),
        };
        if !is_training_only(&name) {
            i += 1;
            continue;
        }
        match value {
            Some(value) => {
                taken.push((name, value));
                args.remove(i);
            }
            None => match args.get(i + 1).and_then(|v| v.to_str()) {
                Some(value) if !value.starts_with("--") => {
                    taken.push((name, value.to_string()));
                    args.drain(i..i + 2);
                }
                None if args.get(i + 1).is_some() => return Err(format!("the value of --{name} is not valid UTF-8")),
                _ => return Err(format!("--{flag} needs a value (--{name}=...): a train.py setting that plan notes and does not use")),
            },
        }
    }
    Ok(taken)
}

/// Which runtime `plan` models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    Pytorch,
    Trainer,
}

fn parse_runtime(s: &str) -> Result<Runtime, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "pytorch" | "torch" => Ok(Runtime::Pytorch),
        "trainer" | "vramfit" | "candle" => Ok(Runtime::Trainer),
        _ => Err("expected pytorch or trainer".into()),
    }
}

/// Which cards to check, and what else is on them.
#[derive(Debug, Args)]
pub struct CardArgs {
    /// GPU preset id or size (rtx-4070, a100-80gb, custom-10, 10gb); repeat or separate with
    /// commas to check several cards [default: the link's, else rtx-4070].
    #[arg(long, value_name = "NAME", value_parser = parse_gpu, value_delimiter = ',')]
    pub gpu: Vec<Gpu>,
    /// MiB other programs already hold on the card (a desktop takes a few hundred).
    #[arg(long, alias = "other_usage_mib", value_name = "MIB", value_parser = parse_other_usage)]
    pub other_usage_mib: Option<u64>,
}

/// Calls `$apply!(field)` for each flag of [`RunArgs`] that sets a modelled setting; the field is
/// named as the setting is (`inputs::SETTINGS`, clap's id for the flag). The one list that
/// clearing, testing and applying the flags go through.
macro_rules! for_each_setting_flag {
    ($apply:ident) => {
        $apply!(n_layer);
        $apply!(n_head);
        $apply!(n_embd);
        $apply!(block_size);
        $apply!(vocab_size);
        $apply!(bias);
        $apply!(dropout);
        $apply!(batch_size);
        $apply!(gradient_accumulation_steps);
        $apply!(eval_iters);
        $apply!(eval_batch_size);
        $apply!(eval_block_size);
        $apply!(dtype);
        $apply!(attention);
        $apply!(compile);
        $apply!(activation_checkpointing);
        $apply!(optimizer);
        $apply!(expandable_segments);
    };
}
pub(crate) use for_each_setting_flag;

/// Where a run's settings come from. Precedence: defaults < --config < --link < flags (a flag
/// before a config file given as train.py takes it is the file's base where the file sets it:
/// see `before_file`).
#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    /// A nanoGPT config file (config/train_*.py) to start from.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The same as --config FILE, given as train.py takes it (python train.py config/train_x.py).
    #[arg(value_name = "CONFIG_FILE", conflicts_with = "config")]
    pub config_file: Option<PathBuf>,
    /// train.py settings from a pasted command line that act as the config file's would (they
    /// set the model's vocabulary or shape): `dataset` and `init_from`, as (name, value), read
    /// over the config file (see [`FILE_LEVEL`]).
    #[arg(skip)]
    pub file_settings: Vec<(String, String)>,
    /// The settings whose flags all come before a config file given as train.py takes it
    /// (`--batch_size=4 config/x.py`): train.py's configurator runs its arguments in order, so
    /// the file's own lines replace those it sets (`inputs::resolve` reads the file over them;
    /// `Inputs::flags_replaced_by_file` names them).
    #[arg(skip)]
    pub before_file: Vec<&'static str>,
    /// A vramfit page link (full URL or just its query) to apply over the config file.
    #[arg(long, value_name = "URL")]
    pub link: Option<String>,
    /// Transformer blocks [default: 12].
    #[arg(long = "n-layer", alias = "n_layer", value_name = "N", value_parser = parse_setting)]
    pub n_layer: Option<u32>,
    /// Attention heads; must divide n-embd [default: 12].
    #[arg(long = "n-head", alias = "n_head", value_name = "N", value_parser = parse_setting)]
    pub n_head: Option<u32>,
    /// Model width [default: 768].
    #[arg(long = "n-embd", alias = "n_embd", value_name = "N", value_parser = parse_setting)]
    pub n_embd: Option<u32>,
    /// Context length in tokens [default: 1024].
    #[arg(long = "block-size", alias = "block_size", value_name = "N", value_parser = parse_setting)]
    pub block_size: Option<u32>,
    /// Vocabulary size [default: 50304].
    #[arg(long = "vocab-size", alias = "vocab_size", value_name = "N", value_parser = parse_setting)]
    pub vocab_size: Option<u32>,
    /// Biases in Linear and LayerNorm layers: true or false [default: false].
    #[arg(long, value_name = "BOOL", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub bias: Option<bool>,
    /// Dropout probability in [0, 1) [default: 0.0].
    // allow_hyphen_values: see TrainArgs::learning_rate.
    #[arg(long, value_name = "P", value_parser = parse_number, allow_hyphen_values = true)]
    pub dropout: Option<f64>,
    /// Micro-batch size: sequences per forward/backward [default: 12].
    #[arg(long = "batch-size", alias = "batch_size", value_name = "N", value_parser = parse_setting)]
    pub batch_size: Option<u32>,
    /// Micro-steps per optimizer step [default: 40].
    #[arg(long = "gradient-accumulation-steps", alias = "gradient_accumulation_steps", value_name = "N", value_parser = parse_setting)]
    pub gradient_accumulation_steps: Option<u32>,
    /// Sequences per estimate_loss forward [default: batch-size].
    #[arg(long = "eval-batch-size", alias = "eval_batch_size", value_name = "N", value_parser = parse_setting)]
    pub eval_batch_size: Option<u32>,
    /// Context length estimate_loss uses [default: block-size].
    #[arg(long = "eval-block-size", alias = "eval_block_size", value_name = "N", value_parser = parse_setting)]
    pub eval_block_size: Option<u32>,
    /// Batches per split in estimate_loss [default: 200].
    #[arg(long = "eval-iters", alias = "eval_iters", value_name = "N", value_parser = parse_setting)]
    pub eval_iters: Option<u32>,
    /// float32, float16 or bfloat16 [default: bfloat16].
    #[arg(long, value_name = "DTYPE", value_parser = parse_dtype)]
    pub dtype: Option<Dtype>,
    /// flash or manual [default: flash].
    #[arg(long, value_name = "KIND", value_parser = parse_attention)]
    pub attention: Option<Attention>,
    /// torch.compile: true or false (a coarse model checked against 99 compiled runs on an H100 and an H200; an estimate) [default: true].
    #[arg(long, value_name = "BOOL", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub compile: Option<bool>,
    /// Recompute each block in backward: true or false [default: false].
    #[arg(
        long = "activation-checkpointing",
        alias = "activation_checkpointing",
        value_name = "BOOL",
        value_parser = parse_bool,
        action = clap::ArgAction::Set
    )]
    pub activation_checkpointing: Option<bool>,
    /// adamw or sgd [default: adamw].
    #[arg(long, value_name = "NAME", value_parser = parse_optimizer)]
    pub optimizer: Option<Optimizer>,
    /// PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: true or false [default: false].
    #[arg(
        long = "expandable-segments",
        alias = "expandable_segments",
        value_name = "BOOL",
        value_parser = parse_bool,
        action = clap::ArgAction::Set
    )]
    pub expandable_segments: Option<bool>,
}

impl RunArgs {
    /// These flags with the settings named (nanoGPT's names) taken out: what the command line
    /// still says once a config file after them replaced those.
    pub fn without(&self, settings: &[&str]) -> RunArgs {
        let mut run = self.clone();
        macro_rules! clear {
            ($field:ident) => {
                if settings.contains(&stringify!($field)) {
                    run.$field = None;
                }
            };
        }
        for_each_setting_flag!(clear);
        run
    }

    /// Moves a config file given without `--config` to `config`, where everything reads it.
    fn take_positional_config(&mut self) {
        if self.config.is_none() {
            self.config = self.config_file.take();
        }
    }
}

pub(crate) fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err("expected true or false".into()),
    }
}

/// `plan --grad-clip`: on or off, spelled as for `train` too (`1.0` on, `0` off), so a train
/// command's flags plan as they are.
fn parse_clip_on(s: &str) -> Result<bool, String> {
    not_a_flag(s)?;
    parse_bool(s).or_else(|_| parse_non_negative(s).map(|norm| norm > 0.0)).map_err(|_| "expected true, false or a norm >= 0".into())
}

fn parse_dtype(s: &str) -> Result<Dtype, String> {
    Dtype::parse(s).ok_or_else(|| "expected float32, float16 or bfloat16".into())
}

fn parse_attention(s: &str) -> Result<Attention, String> {
    Attention::parse(s).ok_or_else(|| "expected flash or manual".into())
}

fn parse_optimizer(s: &str) -> Result<Optimizer, String> {
    Optimizer::parse(s).ok_or_else(|| "expected adamw or sgd".into())
}

fn parse_gpu(s: &str) -> Result<Gpu, String> {
    Gpu::lookup(s)
}

fn parse_other_usage(s: &str) -> Result<u64, String> {
    let max = vramfit_core::link::MAX_OTHER_USAGE_MIB;
    match s.trim().parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        // A whole number too large for any type is still too large, not malformed.
        Ok(_) => Err(format!("at most {max}")),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => Err(format!("at most {max}")),
        Err(_) => Err("expected a whole number of MiB".into()),
    }
}

/// A memory budget in MiB: at least 1, and no more than vramfit models anywhere (4 TiB, as the
/// memory other programs hold; a larger one was shown capped, as 17,592,186,044,416 MiB).
fn parse_memory_limit(s: &str) -> Result<u64, String> {
    let max = vramfit_core::link::MAX_OTHER_USAGE_MIB;
    match s.trim().parse::<u64>() {
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => Err(format!("at most {max}")),
        _ => match parse_positive(s)? {
            n if n <= max => Ok(n),
            _ => Err(format!("at most {max}")),
        },
    }
}

/// What to do after parsing: run a command, or exit now with this code (help, version, or a
/// parse error already printed).
pub enum Parsed {
    Run(Cli),
    Exit(u8),
}

/// Parses the process's arguments. Help and version print as clap prints them (exit 0); any
/// other problem is reported as one `error: ...` line on stderr (exit 2).
pub fn parse() -> Parsed {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let training_only = match take_training_only(&mut args) {
        Ok(taken) => taken,
        Err(e) => {
            crate::print_error(&e);
            return Parsed::Exit(2);
        }
    };
    if let Some(message) = forgotten_prompt(&args) {
        crate::print_error(&message);
        return Parsed::Exit(2);
    }
    let parsed = Cli::command().try_get_matches_from(&args).and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)));
    match parsed {
        Ok((mut cli, matches)) => {
            // Only `plan` and `train` take a config file (asking `sample`'s matches about one
            // is a panic in debug builds).
            let before_file = match matches.subcommand() {
                Some(("plan" | "train", sub)) => settings_before_file(sub),
                _ => Vec::new(),
            };
            match &mut cli.command {
                Command::Plan(plan) => {
                    plan.run.before_file = before_file;
                    plan.run.take_positional_config();
                    let (file_level, rest) = training_only.into_iter().partition(|(name, _)| FILE_LEVEL.contains(&name.as_str()));
                    plan.run.file_settings = file_level;
                    plan.training_only = rest;
                }
                Command::Train(train) => {
                    train.run.before_file = before_file;
                    train.run.take_positional_config();
                }
                Command::Sample(_) => {}
            }
            Parsed::Run(cli)
        }
        Err(err) if matches!(err.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            use std::io::Write;
            match err.print().and_then(|()| std::io::stdout().flush()) {
                Ok(()) => Parsed::Exit(0),
                // `vramfit --help | head`: a closed pipe is not an error.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Parsed::Exit(0),
                // A full disk, say: as `plan` reports its output lost.
                Err(e) => {
                    crate::print_error(&format!("cannot write output: {e}"));
                    Parsed::Exit(1)
                }
            }
        }
        Err(err) if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            crate::print_error("no command given: try 'vramfit plan', 'vramfit train' or 'vramfit --help'");
            Parsed::Exit(2)
        }
        Err(err) if err.kind() == ErrorKind::InvalidUtf8 => {
            crate::print_error(&not_utf8(&args).unwrap_or_else(|| error_line(&err)));
            Parsed::Exit(2)
        }
        Err(err) => {
            let line = swallowed_flag(&args, &err).or_else(|| second_config_file(&args, &err)).unwrap_or_else(|| error_line(&err));
            crate::print_error(&line);
            Parsed::Exit(2)
        }
    }
}

/// The settings (`inputs::SETTINGS`) whose flags all come before the config file given as
/// train.py takes it, if one is (see `RunArgs::before_file`).
fn settings_before_file(sub: &clap::ArgMatches) -> Vec<&'static str> {
    let Some(file_at) = sub.index_of("config_file") else { return Vec::new() };
    crate::inputs::SETTINGS.iter().copied().filter(|&id| sub.indices_of(id).is_some_and(|mut at| at.all(|at| at < file_at))).collect()
}

/// `plan a.py b.py`: train.py runs each config file in turn; vramfit reads one, and clap's
/// "unexpected argument 'b.py'" did not say why.
fn second_config_file(args: &[OsString], err: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let command = args.get(1)?.to_str()?;
    if err.kind() != ErrorKind::UnknownArgument || !matches!(command, "plan" | "train") {
        return None;
    }
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else { return None };
    if arg.starts_with('-') || !arg.ends_with(".py") {
        return None;
    }
    Some(format!(
        "unexpected argument '{}': vramfit {command} reads one config file (train.py would run each in turn): put its lines at the end of the first file, or give them as flags",
        vramfit_core::shown_input(arg, usize::MAX)
    ))
}

/// A number flag followed by another flag (`sample --temperature --seed 5`): the number flags
/// take values that start with `-` (see `not_a_flag`), so `--seed` became the temperature and
/// clap's complaint was about the `5` left over ("unexpected argument '5'"), not the missing
/// number. Said as clap says it when the flag's parser sees the next flag, where clap's
/// complaint is about the argument after those two (another complaint is clap's to make).
fn swallowed_flag(args: &[OsString], err: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(unexpected)) = err.get(ContextKind::InvalidArg).filter(|_| err.kind() == ErrorKind::UnknownArgument)
    else {
        return None;
    };
    let cli = Cli::command();
    let command = cli.find_subcommand(args.get(1)?.to_str()?)?;
    args.get(2..)?.windows(3).find_map(|triple| {
        if triple[2].to_str() != Some(unexpected.as_str()) {
            return None;
        }
        let name = triple[0].to_str()?.strip_prefix("--").filter(|n| !n.contains('='))?;
        let next = triple[1].to_str().filter(|n| n.trim_start().starts_with("--"))?;
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(name) || a.get_all_aliases().is_some_and(|aliases| aliases.contains(&name)))?;
        // The prompt's text may start with `--`: `forgotten_prompt` speaks of it.
        if !arg.is_allow_hyphen_values_set() || arg.get_id() == "prompt" {
            return None;
        }
        let long = arg.get_long()?;
        let value_name = arg.get_value_names().and_then(|names| names.first()).map_or("VALUE", |n| n.as_str());
        Some(format!(
            "invalid value '{}' for '--{long} <{value_name}>': a value is required here (the next flag came instead)",
            vramfit_core::shown_input(next, usize::MAX)
        ))
    })
}

/// Which argument is not UTF-8, for clap's "invalid UTF-8 was detected in one or more
/// arguments": the flag it is the value of (`--gpu`, `--n_layer=`), as it was given.
fn not_utf8(args: &[OsString]) -> Option<String> {
    let at = args.iter().position(|a| a.to_str().is_none())?;
    let arg = args[at].to_string_lossy();
    let shown = vramfit_core::shown_input(&arg, 40);
    let flag = match arg.split_once('=') {
        Some((flag, _)) if flag.starts_with('-') && !flag.contains('\u{FFFD}') => Some(flag.to_string()),
        _ => args.get(at.wrapping_sub(1)).and_then(|a| a.to_str()).filter(|a| a.starts_with('-') && !a.contains('=')).map(String::from),
    };
    Some(match flag {
        Some(flag) => format!("the value of {flag} is not valid UTF-8 ({shown}); vramfit reads text settings as UTF-8"),
        None => format!("argument {at} ({shown}) is not valid UTF-8; vramfit reads text settings as UTF-8"),
    })
}

/// A clap error as one line ([`one_line`]). The value it quotes is shown escaped first: a line
/// break inside it (`--gpu $'h100\nx'`) would otherwise end the line [`one_line`] keeps
/// before the reason.
fn error_line(err: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let mut rendered = err.render().to_string();
    for kind in [ContextKind::InvalidValue, ContextKind::InvalidArg, ContextKind::InvalidSubcommand] {
        if let Some(ContextValue::String(v)) = err.get(kind) {
            if v.contains(['\n', '\r']) {
                // Only where clap quotes it: a value of a bare line break would otherwise escape
                // the line breaks of clap's own message too.
                rendered = rendered.replace(&format!("'{v}'"), &format!("'{}'", vramfit_core::shown_input(v, usize::MAX)));
            }
        }
    }
    one_line(&rendered)
}

/// clap's multi-line message as one line: its first line, with a `tip:` line folded in.
fn one_line(rendered: &str) -> String {
    let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("invalid arguments");
    let first = first.strip_prefix("error:").map(str::trim).unwrap_or(first);
    match lines.find(|l| l.starts_with("tip:")) {
        Some(tip) => format!("{first} ({tip})"),
        None => first.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// A negative number with an exponent's sign reaches the flag's own parser (clap called
    /// -1e-3 an unexpected argument '-1'), for train, plan and sample alike; a valid one parses.
    #[test]
    fn a_negative_number_in_scientific_notation_reaches_the_value_parser() {
        for (command, flag, reason) in [
            ("train", "--learning-rate", "expected a finite number >= 0"),
            ("train", "--min-lr", "expected a finite number >= 0"),
            ("train", "--weight-decay", "expected a finite number >= 0"),
            ("train", "--beta1", "expected a number in [0, 1)"),
            ("train", "--beta2", "expected a number in [0, 1)"),
            ("train", "--grad-clip", "expected a finite number >= 0"),
            ("plan", "--grad-clip", "expected true, false or a norm >= 0"),
            ("sample", "--temperature", "expected a finite number > 0"),
        ] {
            let line = error_line(&Cli::try_parse_from(["vramfit", command, flag, "-1e-3"]).expect_err("refused"));
            assert!(line.contains(&format!("invalid value '-1e-3' for '{flag}")) && line.contains(reason), "{command} {flag}: {line}");
        }
        // --dropout takes any number here (the config's check refuses it later, with its range),
        // and the flags after a value still parse as flags.
        let parsed = Cli::try_parse_from(["vramfit", "plan", "--dropout", "-1e-3", "--n-layer", "2"]).expect("parses");
        let Command::Plan(args) = parsed.command else { panic!("not plan") };
        assert_eq!((args.run.dropout, args.run.n_layer), (Some(-1e-3), Some(2)));
        // A flag where the value should be is said to be one (review: "invalid value
        // '--max-iters'" read as if --max-iters were wrong).
        for (command, flag, rest) in [
            ("train", "--learning-rate", &["--max-iters", "5"][..]),
            ("plan", "--dropout", &["--n-layer", "2"][..]),
            ("plan", "--grad-clip", &["--n-layer", "2"][..]),
            ("sample", "--temperature", &["--top-k=5", "--seed", "5"][..]),
        ] {
            let args = [&["vramfit", command, flag][..], rest].concat();
            let line = error_line(&Cli::try_parse_from(args).expect_err("refused"));
            assert!(line.contains("a value is required here (the next flag came instead)"), "{command} {flag}: {line}");
        }
        // With the next flag's value after it, clap's own complaint is about that value
        // ("unexpected argument '5' found" where no positional argument takes it): the line
        // names the number flag instead (QA).
        for (command, flag, rest) in [
            ("sample", "--temperature", &["--seed", "5"][..]),
            ("sample", "--temperature", &["--top_k", "5"][..]),
            ("plan", "--dropout", &["--n-layer", "2"][..]),
            ("train", "--min_lr", &["--max-iters", "5"][..]),
        ] {
            let args: Vec<OsString> = [&["vramfit", command, flag][..], rest].concat().into_iter().map(OsString::from).collect();
            let err = Cli::try_parse_from(&args).expect_err("refused");
            // What `parse` prints.
            let line = swallowed_flag(&args, &err).unwrap_or_else(|| error_line(&err));
            assert!(
                line.contains(&format!("invalid value '{}'", rest[0])) && line.contains("the next flag came instead"),
                "{args:?}: {line}"
            );
        }
        // A second config file is said to be one.
        let args: Vec<OsString> = ["vramfit", "plan", "a.py", "b.py"].iter().map(OsString::from).collect();
        let err = Cli::try_parse_from(&args).expect_err("refused");
        let line = second_config_file(&args, &err).unwrap_or_default();
        assert!(line.starts_with("unexpected argument 'b.py': vramfit plan reads one config file"), "{line}");
        let args: Vec<OsString> = ["vramfit", "plan", "a.py", "b.txt"].iter().map(OsString::from).collect();
        assert_eq!(second_config_file(&args, &Cli::try_parse_from(&args).expect_err("refused")), None);
        // A flag after a flag that takes no hyphen values, or after the prompt, is left to clap
        // and to `forgotten_prompt`.
        // So is an earlier complaint of clap's own (an unknown flag before them).
        for argv in [
            &["vramfit", "sample", "--seed", "--top-k", "5"][..],
            &["vramfit", "sample", "--start", "--seed", "5"],
            &["vramfit", "sample", "--bogus", "1", "--temperature", "--seed", "5"],
        ] {
            let args: Vec<OsString> = argv.iter().map(OsString::from).collect();
            let err = Cli::try_parse_from(&args).expect_err("refused");
            assert_eq!(swallowed_flag(&args, &err), None, "{argv:?}");
        }
    }

    /// Every modelled setting (`inputs::SETTINGS`) is a flag with that clap id, found by
    /// `settings_before_file`, and one of `for_each_setting_flag`'s fields: `without` clears it.
    #[test]
    fn every_modelled_setting_is_one_flag_of_the_one_list() {
        let flags = [
            "--n_layer=2",
            "--n_head=1",
            "--n_embd=16",
            "--block_size=8",
            "--vocab_size=10",
            "--batch_size=2",
            "--gradient_accumulation_steps=1",
            "--eval_iters=1",
            "--eval_batch_size=2",
            "--eval_block_size=8",
            "--dropout=0",
            "--bias=true",
            "--dtype=float32",
            "--attention=manual",
            "--compile=false",
            "--activation_checkpointing=true",
            "--optimizer=sgd",
            "--expandable_segments=true",
        ];
        assert_eq!(flags.len(), crate::inputs::SETTINGS.len());
        let argv = [&["vramfit", "plan"][..], &flags, &["x.py"]].concat();
        let matches = Cli::command().try_get_matches_from(&argv).expect("parses");
        let (_, sub) = matches.subcommand().expect("plan");
        assert_eq!(settings_before_file(sub), crate::inputs::SETTINGS);
        let Command::Plan(args) = Cli::from_arg_matches(&matches).expect("plan args").command else { panic!("not plan") };
        let set = |run: &RunArgs| -> Vec<bool> {
            let mut set = Vec::new();
            macro_rules! given {
                ($field:ident) => {
                    set.push(run.$field.is_some());
                };
            }
            for_each_setting_flag!(given);
            set
        };
        assert!(set(&args.run).iter().all(|&s| s));
        assert!(set(&args.run.without(&crate::inputs::SETTINGS)).iter().all(|&s| !s));
        assert_eq!(set(&args.run.without(&["n_head"])).iter().filter(|&&s| !s).count(), 1);
    }

    /// train.py's --eval_only on a `train` command line says why it is refused (clap called it
    /// unknown and suggested --eval_interval); a false one is what train does anyway.
    #[test]
    fn train_says_it_has_no_evaluate_only_mode() {
        for spelling in [&["--eval_only=True"][..], &["--eval-only", "true"][..]] {
            let args = [&["vramfit", "train"][..], spelling].concat();
            let line = error_line(&Cli::try_parse_from(args).expect_err("refused"));
            assert!(line.contains("vramfit train has no evaluate-only mode"), "{line}");
        }
        assert!(Cli::try_parse_from(["vramfit", "train", "--eval_only=False"]).is_ok());
    }

    /// A value with a line break in it is quoted escaped, and the reason after it is kept.
    #[test]
    fn a_value_with_a_line_break_keeps_its_reason() {
        for (flag, value, reason) in [
            ("--gpu", "h100\nfoo", "unknown GPU"),
            ("--n-layer", "1\n2", "expected a whole number"),
            ("--dtype", "float16\nx", "expected float32"),
            ("--dtype", "\n", "expected float32"),
        ] {
            let err = Cli::try_parse_from(["vramfit", "plan", flag, value]).expect_err("refused");
            let line = error_line(&err);
            let escaped = value.replace('\n', "\\n");
            assert!(line.contains(&format!("'{escaped}'")) && line.contains(reason) && !line.contains('\n'), "{line}");
            assert!(!line.contains("For more information"), "{line}");
        }
        // A subcommand with a line break in it.
        let err = Cli::try_parse_from(["vramfit", "plan\nx"]).expect_err("refused");
        let line = error_line(&err);
        assert!(line.contains("'plan\\nx'") && !line.contains('\n'), "{line}");
    }

    /// An argument that is not UTF-8 is named by the flag it belongs to.
    #[cfg(unix)]
    #[test]
    fn arguments_that_are_not_utf8_are_named() {
        use std::os::unix::ffi::OsStringExt;
        let bad = || OsString::from_vec(b"rtx\xff".to_vec());
        let argv = |rest: Vec<OsString>| [OsString::from("vramfit"), OsString::from("plan")].into_iter().chain(rest).collect::<Vec<_>>();
        let err = Cli::try_parse_from(argv(vec!["--gpu".into(), bad()])).expect_err("clap refuses it");
        assert_eq!(err.kind(), ErrorKind::InvalidUtf8);
        let text = not_utf8(&argv(vec!["--gpu".into(), bad()])).unwrap();
        assert!(text.starts_with("the value of --gpu is not valid UTF-8 (rtx\u{FFFD})"), "{text}");
        let joined = OsString::from_vec(b"--n_layer=1\xff".to_vec());
        assert!(not_utf8(&argv(vec![joined])).unwrap().starts_with("the value of --n_layer is not valid UTF-8"));
        assert!(not_utf8(&argv(vec![bad()])).unwrap().starts_with("argument 2 (rtx\u{FFFD}) is not valid UTF-8"));
        assert_eq!(not_utf8(&argv(vec!["--gpu".into(), "rtx-4070".into()])), None);
    }

    /// A prompt may start with '-'; one of sample's own flags in its place is caught by
    /// `prompt_is_a_flag` (the text was forgotten), other text is not.
    #[test]
    fn prompts_may_start_with_a_hyphen() {
        let prompt = |argv: &[&str]| match Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(Command::Sample(s)) => s.prompt,
            other => panic!("{argv:?}: {other:?}"),
        };
        assert_eq!(prompt(&["vramfit", "sample", "--prompt", "-a"]).as_deref(), Some("-a"));
        assert_eq!(prompt(&["vramfit", "sample", "--prompt", "- a list item", "--seed", "3"]).as_deref(), Some("- a list item"));
        assert_eq!(prompt(&["vramfit", "sample", "--prompt", "--num-samples"]).as_deref(), Some("--num-samples"));
        for flag in ["--num-samples", "--seed=3", "--start", "--max_new_tokens", "--help"] {
            assert!(prompt_is_a_flag(flag), "{flag}");
        }
        for text in ["-a", "--", "---", "--hello", "-- seed", "seed"] {
            assert!(!prompt_is_a_flag(text), "{text}");
        }
        let args = |argv: &[&str]| argv.iter().map(OsString::from).collect::<Vec<_>>();
        let forgotten = forgotten_prompt(&args(&["vramfit", "sample", "--prompt", "--seed", "3"])).expect("a forgotten text");
        assert!(forgotten.starts_with("--prompt is followed by the flag --seed, not by text"), "{forgotten}");
        for meant in [
            &["vramfit", "sample", "--prompt=--seed", "--seed", "3"][..],
            &["vramfit", "sample", "--prompt", "-a", "--seed", "3"],
            &["vramfit", "plan", "--prompt", "--seed"],
        ] {
            assert_eq!(forgotten_prompt(&args(meant)), None, "{meant:?}");
        }
    }

    #[test]
    fn defaults_in_help_match_core() {
        let d = vramfit_core::Config::default();
        let expected = [
            ("n_layer", d.n_layer.to_string()),
            ("n_head", d.n_head.to_string()),
            ("n_embd", d.n_embd.to_string()),
            ("block_size", d.block_size.to_string()),
            ("vocab_size", d.vocab_size.to_string()),
            ("batch_size", d.batch_size.to_string()),
            ("gradient_accumulation_steps", d.gradient_accumulation_steps.to_string()),
            ("eval_iters", d.eval_iters.to_string()),
            ("dropout", format!("{:?}", d.dropout)),
            ("dtype", d.dtype.name().to_string()),
            ("attention", d.attention.name().to_string()),
            ("optimizer", d.optimizer.name().to_string()),
            ("bias", d.bias.to_string()),
            ("compile", d.compile.to_string()),
            ("activation_checkpointing", d.activation_checkpointing.to_string()),
            ("expandable_segments", d.expandable_segments.to_string()),
        ];
        let cmd = Cli::command();
        let plan = cmd.find_subcommand("plan").expect("plan subcommand");
        for (id, value) in expected {
            let arg = plan.get_arguments().find(|a| a.get_id() == id).expect(id);
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            assert!(help.contains(&format!("[default: {value}]")), "{id}: {help}");
        }
    }

    /// train's `[default: ...]` in --help are those of the run without --config
    /// (`small_default()`), followed by train.py's (`TrainSettings::default()`) where they differ.
    #[test]
    fn train_help_defaults_match_train_settings() {
        let small = vramfit::train::small_default().1;
        let expected_of = |d: &vramfit::train::TrainSettings| {
            [
                ("max_iters", d.max_iters.to_string()),
                ("learning_rate", format!("{:e}", d.lr.learning_rate)),
                ("decay_lr", d.lr.decay_lr.to_string()),
                ("warmup_iters", d.lr.warmup_iters.to_string()),
                ("lr_decay_iters", d.lr.lr_decay_iters.to_string()),
                ("min_lr", format!("{:e}", d.lr.min_lr)),
                ("weight_decay", d.adamw.weight_decay.to_string()),
                ("beta1", d.adamw.beta1.to_string()),
                ("beta2", d.adamw.beta2.to_string()),
                ("grad_clip", format!("{:?}", d.grad_clip)),
                ("eval_interval", d.eval_interval.to_string()),
                ("log_interval", d.log_interval.to_string()),
                ("always_save_checkpoint", d.always_save_checkpoint.to_string()),
                ("seed", d.seed.to_string()),
                ("out_dir", d.out_dir.display().to_string()),
                ("chunked_loss", d.chunked_loss.to_string()),
            ]
        };
        let cmd = Cli::command();
        let train = cmd.find_subcommand("train").expect("train subcommand");
        for ((id, value), (_, small_value)) in expected_of(&vramfit::train::TrainSettings::default()).into_iter().zip(expected_of(&small)) {
            let arg = train.get_arguments().find(|a| a.get_id() == id).expect(id);
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            let want = if small_value == value {
                format!("[default: {value}]")
            } else {
                format!("[default: {small_value}; with --config: {value}]")
            };
            assert!(help.contains(&want), "{id}: {help} (expected {want})");
        }
    }

    /// Every fix the pre-flight prints parses as `vramfit train` flags pasted as printed, and does
    /// what it says: the auto-fitted micro-batch and accumulation, --auto-fit, checkpointing, the
    /// chunked loss.
    #[test]
    fn preflight_fixes_parse_as_train_flags() {
        use vramfit::preflight::{preflight, Basis};
        use vramfit_core::trainer_model::{self, TrainerOptions};
        // A vocabulary large enough that the chunked loss (1,024 of the 2,048 rows at a time) lowers the peak too.
        let cfg = vramfit_core::Config {
            n_layer: 2,
            n_head: 2,
            n_embd: 64,
            block_size: 128,
            vocab_size: 16384,
            batch_size: 16,
            gradient_accumulation_steps: 1,
            ..vramfit_core::Config::default()
        };
        let opts = TrainerOptions::default();
        // Room for each memory saver alone (a fix is one that makes the run fit), not for the run.
        let peak = |c: &vramfit_core::Config, o: &TrainerOptions| trainer_model::peak_bytes(&trainer_model::simulate(c, o));
        let checkpointed = peak(&vramfit_core::Config { activation_checkpointing: true, ..cfg.clone() }, &opts);
        let chunked = peak(&cfg, &TrainerOptions { chunked_loss: true, ..opts });
        let available = checkpointed.max(chunked);
        assert!(available < peak(&cfg, &opts));
        let fitted = trainer_model::auto_fit(&cfg, &opts, available).expect("a smaller micro-batch fits");
        let err = preflight(&cfg, &opts, available, false, Basis::Measured).expect_err("does not fit");
        let (_, fixes) = err.split_once("fixes: ").expect("fixes listed");
        // Each fix: flags, then in parentheses its predicted peak or another way ("or --auto-fit").
        let mut suggested = Vec::new();
        for fix in fixes.split("; ") {
            let (flags, aside) = fix.split_once(" (").unwrap_or((fix, ""));
            suggested.push(flags);
            if let Some(alternative) = aside.strip_prefix("or ") {
                suggested.push(alternative.split([',', ')']).next().unwrap_or(alternative));
            }
        }
        let mut effects = Vec::new();
        for flags in suggested {
            let argv = ["vramfit", "train"].into_iter().chain(flags.split_whitespace());
            let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{flags:?} does not parse: {e}"));
            let Command::Train(args) = cli.command else { panic!("{flags:?}: not train") };
            let mut applied = cfg.clone();
            crate::inputs::apply_flags(&mut applied, &args.run);
            if (applied.batch_size, applied.gradient_accumulation_steps) == (fitted.batch_size, fitted.gradient_accumulation_steps) {
                effects.push("auto-fitted batch");
            }
            if args.auto_fit {
                effects.push("--auto-fit");
            }
            if applied.activation_checkpointing {
                effects.push("checkpointing");
            }
            if args.chunked_loss == Some(true) {
                effects.push("chunked loss");
            }
        }
        assert_eq!(effects, ["auto-fitted batch", "--auto-fit", "checkpointing", "chunked loss"], "{err}");
    }

    #[test]
    fn clap_errors_become_one_line() {
        let msg = "error: unexpected argument '--n-layr' found\n\n  tip: a similar argument exists: '--n-layer'\n\nUsage: vramfit plan --n-layer <N>\n\nFor more information, try '--help'.\n";
        assert_eq!(one_line(msg), "unexpected argument '--n-layr' found (tip: a similar argument exists: '--n-layer')");
        assert_eq!(one_line(""), "invalid arguments");
    }

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn training_only_settings_are_taken_out_of_plan_in_both_spellings() {
        let mut args = os(&["vramfit", "plan", "x.py", "--max_iters=2000", "--n_layer=4", "--learning-rate", "3e-4", "--device=cpu"]);
        let taken = take_training_only(&mut args).unwrap();
        assert_eq!(args, os(&["vramfit", "plan", "x.py", "--n_layer=4"]));
        let names: Vec<(&str, &str)> = taken.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(names, [("max_iters", "2000"), ("learning_rate", "3e-4"), ("device", "cpu")]);
        // Anything after `--` stays for clap; a setting without a value is an error naming it
        // (clap called it unknown and suggested --eval_iters for --max_iters).
        let mut args = os(&["vramfit", "plan", "--n-layer", "4", "--", "--seed=1"]);
        assert!(take_training_only(&mut args).unwrap().is_empty());
        assert_eq!(args.len(), 6);
        for last in ["--max_iters", "--seed"] {
            let mut args = os(&["vramfit", "plan", "--n-layer", "4", last]);
            let err = take_training_only(&mut args).unwrap_err();
            assert!(err.starts_with(&format!("{last} needs a value")), "{err}");
        }
        let mut args = os(&["vramfit", "plan", "--seed", "--n-layer", "4"]);
        assert!(take_training_only(&mut args).is_err());
        // train reads these itself.
        let mut args = os(&["vramfit", "train", "--max-iters=5"]);
        assert!(take_training_only(&mut args).unwrap().is_empty());
        assert_eq!(args.len(), 3);
    }

    #[test]
    fn every_training_only_setting_is_one_plan_does_not_have() {
        let cmd = Cli::command();
        let plan = cmd.find_subcommand("plan").expect("plan subcommand");
        for name in TRAIN_PY_UNMODELLED.into_iter().filter(|n| is_training_only(n)) {
            let kebab = name.replace('_', "-");
            let clash = plan.get_arguments().any(|a| {
                a.get_long() == Some(name)
                    || a.get_long() == Some(kebab.as_str())
                    || a.get_all_aliases().into_iter().flatten().any(|x| x == name)
            });
            assert!(!clash, "{name} is a plan flag and would be swallowed");
        }
    }
}
