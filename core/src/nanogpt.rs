//! Reading and writing nanoGPT `config/train_*.py` files.
//!
//! nanoGPT's `configurator.py` simply `exec`s a config file inside `train.py`'s globals, so a
//! config file is Python. vramfit reads the subset such files use: assignments at the top level
//! (one per line or joined by `;`, chained as `a = b = 4`), `name = <expression>` with integers
//! (`1_000`, `0x1f`, `0o17`, `0b101`), floats (`6e-4`), strings (`'...'`, `"..."`, with Python's
//! escapes but not `\N{name}`; no prefixes such as `r'...'`), `True`,
//! `False`, `None`, names assigned earlier (or train.py's settings), `+ - * / // % **` and
//! parentheses; an augmented assignment (`n_layer += 2`) is the assignment it amounts to.
//! Anything else (imports, function calls, blocks) is skipped with a notice, unless it sets a
//! setting vramfit models, or may set names no assignment shows (`exec`, `globals()`, a star
//! import of another config): that would silently change the prediction, so it is an error.

use crate::config::{self, Attention, Config, ConfigError, Dtype, Optimizer};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use thiserror::Error;

/// A Python value as the config file wrote it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl fmt::Display for Value {
    /// Python's `repr`, so a value can be written back into a config file.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::None => f.write_str("None"),
            Value::Bool(true) => f.write_str("True"),
            Value::Bool(false) => f.write_str("False"),
            Value::Int(n) => write!(f, "{n}"),
            // `{:?}` keeps a `.0` on whole floats, as Python does, and round-trips exactly.
            Value::Float(x) => write!(f, "{x:?}"),
            Value::Str(s) => {
                f.write_str("'")?;
                for ch in s.chars() {
                    match ch {
                        '\'' => f.write_str("\\'")?,
                        '\\' => f.write_str("\\\\")?,
                        '\n' => f.write_str("\\n")?,
                        '\t' => f.write_str("\\t")?,
                        '\r' => f.write_str("\\r")?,
                        c => write!(f, "{c}")?,
                    }
                }
                f.write_str("'")
            }
        }
    }
}

impl Value {
    /// Python's truth value (`if eval_only:`): false for None, False, 0, 0.0 and ''.
    pub fn is_truthy(&self) -> bool {
        match self {
            Value::None => false,
            Value::Bool(b) => *b,
            Value::Int(n) => *n != 0,
            Value::Float(x) => *x != 0.0,
            Value::Str(s) => !s.is_empty(),
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "a bool",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Str(_) => "a string",
        }
    }
}

/// What a config file set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigFile {
    /// The base config with the file's modelled settings applied; passes `Config::validate`
    /// (from [`parse_config_file`]; [`parse_config_file_deferring`] says when it does not).
    pub config: Config,
    /// Training settings vramfit recognises but does not model (`learning_rate`, `max_iters`,
    /// `out_dir`, ...), in file order, each once with its last value.
    pub extra: Vec<(String, Value)>,
    /// One line per skipped line, e.g. `line 4: skipped import (vramfit reads assignments only)`.
    pub notices: Vec<String>,
    /// Recognised unmodelled settings whose value could not be read (each also has a notice):
    /// harmless for `plan`, but `train` must not run on a default in their place.
    #[serde(default)]
    pub unreadable: Vec<String>,
    /// Why each of `unreadable` could not be read, at the same index: one line naming the line
    /// of the file, e.g. ``line 3: cannot read `1e400`: 1e400 is too large``. See
    /// [`ConfigFile::unreadable_reason`].
    #[serde(default)]
    pub unreadable_reasons: Vec<String>,
    /// Whether the file assigns any setting vramfit knows (modelled or not), whatever its value:
    /// false for prose, a link or an empty file, which a reader should refuse rather than take
    /// as train.py's defaults.
    #[serde(default)]
    pub recognised: bool,
    /// The first top-level line that is neither an assignment nor an import, as (line, excerpt):
    /// with nothing recognised, the mark of a file that is not a config file at all (train.py
    /// would fail to exec it), where an empty one is only a config that sets nothing.
    #[serde(default)]
    pub first_statement: Option<(usize, String)>,
    /// The dataset whose `data/<dataset>/meta.pkl` train.py takes vocab_size from, where the
    /// file names one, sets no vocab_size and starts from scratch. `config.vocab_size` is then
    /// what vramfit assumes without that file (65 for shakespeare_char, else train.py's 50304),
    /// and a notice says so; a reader that can open the file (`vramfit plan`) reads it instead.
    #[serde(default)]
    pub vocab_from_dataset: Option<String>,
    /// The modelled settings the file assigns (a GPT-2 checkpoint's shape may replace the
    /// value), by their names in [`MODELLED`]. (Not serialized: the names are `'static`.)
    #[serde(skip)]
    pub sets: Vec<&'static str>,
}

impl ConfigFile {
    /// Whether the file assigns any setting vramfit models (n_layer, batch_size, dtype...),
    /// whatever its value: a file of learning rates and paths does not, though it is a
    /// config file all the same.
    pub fn sets_modelled(&self) -> bool {
        !self.sets.is_empty()
    }

    /// The value of a recognised unmodelled setting, if the file set it.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.extra.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// Why the setting `name` of [`ConfigFile::unreadable`] could not be read (one line naming
    /// the line of the file), if it is one.
    pub fn unreadable_reason(&self, name: &str) -> Option<&str> {
        let at = self.unreadable.iter().position(|n| n == name)?;
        self.unreadable_reasons.get(at).map(String::as_str)
    }
}

/// Why a config file cannot be used. Each message is one line naming the line at fault.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum ConfigFileError {
    /// A modelled setting with a value of the wrong type, out of range, or not evaluable.
    #[error("line {line}: {key}: {reason}")]
    BadValue { line: usize, key: String, reason: String },
    /// The settings are fine one by one but not together (e.g. n_embd not divisible by n_head).
    #[error("line {line}: {source}")]
    Invalid { line: usize, source: ConfigError },
    /// The combined config is invalid and no line of the file is to blame (the base was invalid).
    #[error("{0}")]
    InvalidBase(ConfigError),
    /// Python would refuse the file before running any of it.
    #[error("line {line}: {reason}")]
    Syntax { line: usize, reason: String },
}

/// nanoGPT's train.py settings that vramfit recognises and does not model: the schedule,
/// logging, where data and checkpoints go, the device and the data set (`dataset` and
/// `init_from` are read for the vocabulary and shape they imply, not modelled as such).
/// `vramfit plan` takes these off a pasted train.py command line too.
pub const TRAIN_PY_UNMODELLED: [&str; 23] = [
    "out_dir",
    "eval_interval",
    "log_interval",
    "eval_only",
    "always_save_checkpoint",
    "init_from",
    "wandb_log",
    "wandb_project",
    "wandb_run_name",
    "dataset",
    "learning_rate",
    "max_iters",
    "weight_decay",
    "beta1",
    "beta2",
    "grad_clip",
    "decay_lr",
    "warmup_iters",
    "lr_decay_iters",
    "min_lr",
    "backend",
    "device",
    "seed",
];

/// sample.py's settings, and `meta_vocab_size` (a name train.py derives from meta.pkl), which
/// config files also carry.
const SAMPLE_PY_AND_DERIVED: [&str; 6] = ["start", "num_samples", "max_new_tokens", "temperature", "top_k", "meta_vocab_size"];

/// Whether `name` is a nanoGPT setting vramfit recognises without modelling it.
fn is_known_extra(name: &str) -> bool {
    TRAIN_PY_UNMODELLED.contains(&name) || SAMPLE_PY_AND_DERIVED.contains(&name)
}

/// The column a logical line starts at, as CPython's tokenizer counts it: with tabs to the next
/// multiple of 8, and with tabs as one column.
fn indentation_columns(code: &str) -> (usize, usize) {
    let (mut column, mut tabs_as_one) = (0, 0);
    for c in code.chars() {
        match c {
            ' ' => column += 1,
            '\t' => column = (column / 8 + 1) * 8,
            _ => break,
        }
        tabs_as_one += 1;
    }
    (column, tabs_as_one)
}

/// GPT-2 checkpoints `init_from` can name: (name, n_layer, n_head, n_embd), as nanoGPT's
/// `GPT.from_pretrained` builds them (vocab_size 50257, block_size 1024, bias True).
const PRETRAINED: [(&str, u32, u32, u32); 4] =
    [("gpt2", 12, 12, 768), ("gpt2-medium", 24, 16, 1024), ("gpt2-large", 36, 20, 1280), ("gpt2-xl", 48, 25, 1600)];

/// How a notice of the reader ends where train.py would stop on the settings (`vramfit plan`
/// refuses those; the page plans them with the notice). Longer than any quoted piece of input
/// ([`excerpt`]), so no notice quoting the user's text can hold it.
pub const TRAIN_PY_WOULD_STOP: &str = "train.py would stop; vramfit plans the model these settings give";
/// What a notice says of a block past a GPT-2 checkpoint's positions (train.py's first forward
/// would stop); see [`TRAIN_PY_WOULD_STOP`].
pub const PAST_POSITIONS: &str = "which train.py crops but never extends (its first forward would stop)";

/// train.py takes the model's shape from the checkpoint when `init_from` names one, whatever
/// the file says about n_layer and friends; a prediction from the file's values would be for
/// the wrong model.
fn apply_init_from(cfg: &mut Config, extra: &[(String, Value)], notices: &mut Vec<String>, set_on: &mut Vec<(&'static str, usize)>) {
    let init_from = match extra.iter().find(|(k, _)| k == "init_from") {
        Some((_, Value::Str(name))) => name,
        Some((_, other)) => {
            // train.py calls init_from.startswith(...): it stops on anything but a string.
            notices.push(format!(
                "init_from = {} is not a name such as 'scratch' or 'gpt2': {TRAIN_PY_WOULD_STOP}",
                excerpt(&other.to_string())
            ));
            return;
        }
        None => return,
    };
    let (block_given, eval_given) = (cfg.block_size, cfg.eval_block_size);
    if take_pretrained_shape(cfg, init_from) {
        if block_given > cfg.block_size {
            notices.push(format!(
                "init_from = '{init_from}': block_size {block_given} is past GPT-2's {PRETRAINED_BLOCK} positions, {PAST_POSITIONS}: \
                 planned with {PRETRAINED_BLOCK}"
            ));
        }
        if let (Some(t), None) = (eval_given, cfg.eval_block_size) {
            notices.push(format!("eval_block_size {t} is past the block of {}: evaluated at block_size", cfg.block_size));
        }
        // These no longer come from any line of the file.
        set_on.retain(|(k, _)| !matches!(*k, "n_layer" | "n_head" | "n_embd" | "vocab_size" | "bias"));
        notices.push(format!(
            "init_from = '{init_from}': the model is GPT-2's (n_layer {}, n_head {}, n_embd {}, vocab_size {PRETRAINED_VOCAB}, bias True, block_size at most {PRETRAINED_BLOCK}), as train.py loads it",
            cfg.n_layer, cfg.n_head, cfg.n_embd
        ));
    } else if init_from == "resume" {
        notices.push(
            "init_from = 'resume': train.py takes the model's shape from the checkpoint in out_dir; vramfit uses this file's settings"
                .into(),
        );
    } else if init_from != "scratch" {
        // train.py's `GPT.from_pretrained` asserts the name is one of GPT-2's four.
        notices.push(format!(
            "init_from = '{}' is none of train.py's (scratch, resume, gpt2, gpt2-medium, gpt2-large, gpt2-xl): {TRAIN_PY_WOULD_STOP}",
            excerpt(init_from)
        ));
    }
}

/// Gives `cfg` the shape of the GPT-2 checkpoint `init_from` names, as train.py loads it
/// (vocab_size 50257, bias True, the checkpoint's width and depth, 1024 positions cropped to a
/// smaller block_size, never grown); false, and `cfg` untouched, for any other name.
pub fn take_pretrained_shape(cfg: &mut Config, init_from: &str) -> bool {
    let Some(&(_, n_layer, n_head, n_embd)) = PRETRAINED.iter().find(|p| p.0 == init_from) else {
        return false;
    };
    cfg.n_layer = n_layer;
    cfg.n_head = n_head;
    cfg.n_embd = n_embd;
    cfg.vocab_size = PRETRAINED_VOCAB;
    cfg.bias = true;
    cfg.block_size = cfg.block_size.min(PRETRAINED_BLOCK);
    // vramfit's own eval context cannot be longer than the (cropped) block: one that was goes
    // back to the block's, as a cropped block_size and eval context would both be 1024.
    cfg.eval_block_size = cfg.eval_block_size.filter(|&t| t <= cfg.block_size);
    true
}

/// The model-shape settings that differ between `given` and `shaped` (the same config after
/// [`take_pretrained_shape`]): (name, given value, checkpoint's value), booleans as Python
/// spells them. For the notes that say which settings a checkpoint overrode.
pub fn shape_changes(given: &Config, shaped: &Config) -> Vec<(&'static str, String, String)> {
    let py = |b: bool| py_bool(b).to_string();
    [
        ("n_layer", given.n_layer.to_string(), shaped.n_layer.to_string()),
        ("n_head", given.n_head.to_string(), shaped.n_head.to_string()),
        ("n_embd", given.n_embd.to_string(), shaped.n_embd.to_string()),
        ("vocab_size", given.vocab_size.to_string(), shaped.vocab_size.to_string()),
        ("bias", py(given.bias), py(shaped.bias)),
        ("block_size", given.block_size.to_string(), shaped.block_size.to_string()),
    ]
    .into_iter()
    .filter(|(_, was, is)| was != is)
    .collect()
}

/// GPT-2's vocabulary as its checkpoints have it (not padded to 50304).
pub const PRETRAINED_VOCAB: u32 = 50257;
/// The positions GPT-2's checkpoints have: train.py crops them to a smaller block, never grows them.
pub const PRETRAINED_BLOCK: u32 = 1024;

/// The names `init_from` takes for GPT-2's checkpoints, smallest first.
pub fn pretrained_names() -> [&'static str; 4] {
    PRETRAINED.map(|p| p.0)
}

/// The GPT-2 checkpoint a config file's `init_from` names, among the settings the reader did
/// not model (`ConfigFile::extra`); `None` for scratch, resume or no `init_from`.
pub fn pretrained_in(extra: &[(String, Value)]) -> Option<&'static str> {
    extra.iter().find_map(|(k, v)| match v {
        Value::Str(name) if k == "init_from" => pretrained(name),
        _ => None,
    })
}

/// Which of GPT-2's checkpoints has this shape (layers, width, vocabulary), if one does.
pub fn pretrained_of_shape(n_layer: u32, n_embd: u32, vocab_size: u32) -> Option<&'static str> {
    PRETRAINED.iter().find(|p| (p.1, p.3, PRETRAINED_VOCAB) == (n_layer, n_embd, vocab_size)).map(|p| p.0)
}

/// The checkpoint `init_from = name` loads, by its name as [`pretrained_names`] lists it;
/// `None` for `scratch`, `resume` and anything else.
pub fn pretrained(name: &str) -> Option<&'static str> {
    PRETRAINED.iter().find(|p| p.0 == name).map(|p| p.0)
}

/// train.py takes vocab_size from `data/<dataset>/meta.pkl` when the dataset has one (and the
/// file does not set vocab_size); vramfit cannot read that file, so it knows nanoGPT's own
/// datasets and says what it assumed for any other.
/// Returns the dataset where its meta.pkl would decide ([`ConfigFile::vocab_from_dataset`]).
fn apply_dataset_vocab(
    cfg: &mut Config,
    extra: &[(String, Value)],
    notices: &mut Vec<String>,
    set_on: &[(&'static str, usize)],
) -> Option<String> {
    let dataset = match extra.iter().find(|(k, _)| k == "dataset") {
        Some((_, Value::Str(dataset))) => dataset,
        Some((_, other)) => {
            // train.py joins it into a path (`os.path.join('data', dataset)`) whatever else is
            // set: anything but a string stops it there.
            notices.push(format!(
                "dataset = {} is not a data set's name such as 'openwebtext': {TRAIN_PY_WOULD_STOP}",
                excerpt(&other.to_string())
            ));
            return None;
        }
        None => return None,
    };
    let from_checkpoint = extra.iter().any(|(k, v)| k == "init_from" && *v != Value::Str("scratch".into()));
    if from_checkpoint || set_on.iter().any(|(k, _)| *k == "vocab_size") {
        return None;
    }
    match dataset.as_str() {
        // nanoGPT's data/shakespeare_char/prepare.py writes 65 characters to meta.pkl.
        "shakespeare_char" => {
            cfg.vocab_size = 65;
            notices.push(
                "dataset = 'shakespeare_char': vocab_size 65, the characters nanoGPT's prepare.py writes to its meta.pkl \
                 (train.py reads it there)"
                    .into(),
            );
        }
        // GPT-2 BPE datasets without a meta.pkl: train.py's 50304.
        "openwebtext" | "shakespeare" => {}
        other => notices.push(format!(
            "dataset = '{}': train.py takes vocab_size from data/{}/meta.pkl if it has one, which vramfit cannot read; \
             it assumes {} (set vocab_size in the file if yours differs)",
            excerpt(other),
            excerpt(other),
            cfg.vocab_size
        )),
    }
    Some(dataset.clone())
}

/// The modelled settings, under nanoGPT's names (and vramfit's for the ones nanoGPT lacks).
pub const MODELLED: [&str; 18] = [
    "n_layer",
    "n_head",
    "n_embd",
    "block_size",
    "vocab_size",
    "bias",
    "dropout",
    "batch_size",
    "gradient_accumulation_steps",
    "eval_iters",
    "eval_batch_size",
    "eval_block_size",
    "dtype",
    "attention",
    "compile",
    "activation_checkpointing",
    "optimizer",
    "expandable_segments",
];

/// A modelled setting's current value, so expressions can refer to it (`eval_iters = batch_size * 2`).
pub fn config_value(cfg: &Config, name: &str) -> Option<Value> {
    let int = |n: u32| Some(Value::Int(n as i64));
    let opt = |n: Option<u32>| Some(n.map_or(Value::None, |n| Value::Int(n as i64)));
    match name {
        "n_layer" => int(cfg.n_layer),
        "n_head" => int(cfg.n_head),
        "n_embd" => int(cfg.n_embd),
        "block_size" => int(cfg.block_size),
        "vocab_size" => int(cfg.vocab_size),
        "bias" => Some(Value::Bool(cfg.bias)),
        "dropout" => Some(Value::Float(cfg.dropout)),
        "batch_size" => int(cfg.batch_size),
        "gradient_accumulation_steps" => int(cfg.gradient_accumulation_steps),
        "eval_iters" => int(cfg.eval_iters),
        "eval_batch_size" => opt(cfg.eval_batch_size),
        "eval_block_size" => opt(cfg.eval_block_size),
        "dtype" => Some(Value::Str(cfg.dtype.name().into())),
        "attention" => Some(Value::Str(cfg.attention.name().into())),
        "compile" => Some(Value::Bool(cfg.compile)),
        "activation_checkpointing" => Some(Value::Bool(cfg.activation_checkpointing)),
        "optimizer" => Some(Value::Str(cfg.optimizer.name().into())),
        "expandable_segments" => Some(Value::Bool(cfg.expandable_segments)),
        _ => None,
    }
}

/// A whole number in `[min, max]`: the range `Config::validate` accepts for the setting.
fn int_in(value: &Value, min: u32, max: u32) -> Result<u32, String> {
    match value {
        Value::Int(n) if *n < min as i64 => Err(format!("must be at least {min} (got {n})")),
        Value::Int(n) if *n > max as i64 => Err(format!("{n} is larger than vramfit models (at most {max})")),
        Value::Int(n) => Ok(*n as u32),
        other => Err(format!("expected an integer, got {} ({})", other.type_name(), quoted(other))),
    }
}

fn optional_int_in(value: &Value, min: u32, max: u32) -> Result<Option<u32>, String> {
    match value {
        Value::None => Ok(None),
        v => int_in(v, min, max).map(Some),
    }
}

/// Python truthiness would take any value; only True/False (and 0/1) say clearly what was meant.
fn boolean(value: &Value) -> Result<bool, String> {
    match value {
        Value::Bool(b) => Ok(*b),
        Value::Int(0) => Ok(false),
        Value::Int(1) => Ok(true),
        other => Err(format!("expected True or False, got {} ({})", other.type_name(), quoted(other))),
    }
}

fn string<'a>(value: &'a Value, expected: &str) -> Result<&'a str, String> {
    match value {
        Value::Str(s) => Ok(s),
        other => Err(format!("expected {expected}, got {} ({})", other.type_name(), quoted(other))),
    }
}

/// Sets a modelled setting, checking its type and its own range.
fn set_modelled(cfg: &mut Config, name: &str, value: &Value) -> Result<(), String> {
    match name {
        "n_layer" => cfg.n_layer = int_in(value, 1, config::MAX_LAYERS)?,
        "n_head" => cfg.n_head = int_in(value, 1, config::MAX_HEADS)?,
        "n_embd" => cfg.n_embd = int_in(value, 1, config::MAX_EMBD)?,
        "block_size" => cfg.block_size = int_in(value, 1, config::MAX_BLOCK)?,
        "vocab_size" => cfg.vocab_size = int_in(value, 1, config::MAX_VOCAB)?,
        "batch_size" => cfg.batch_size = int_in(value, 1, config::MAX_BATCH)?,
        "gradient_accumulation_steps" => cfg.gradient_accumulation_steps = int_in(value, 1, config::MAX_ACCUM)?,
        "eval_iters" => cfg.eval_iters = int_in(value, 1, config::MAX_EVAL_ITERS)?,
        "eval_batch_size" => cfg.eval_batch_size = optional_int_in(value, 1, config::MAX_BATCH)?,
        "eval_block_size" => cfg.eval_block_size = optional_int_in(value, 1, config::MAX_BLOCK)?,
        "bias" => cfg.bias = boolean(value)?,
        "compile" => cfg.compile = boolean(value)?,
        "activation_checkpointing" => cfg.activation_checkpointing = boolean(value)?,
        "expandable_segments" => cfg.expandable_segments = boolean(value)?,
        "dropout" => {
            let p = match value {
                Value::Int(n) => *n as f64,
                Value::Float(x) => *x,
                other => return Err(format!("expected a number, got {} ({})", other.type_name(), quoted(other))),
            };
            if !(p.is_finite() && (0.0..1.0).contains(&p)) {
                return Err(format!("must be in [0, 1) (got {p})"));
            }
            cfg.dropout = p + 0.0; // -0.0 as 0
        }
        "dtype" => {
            let s = string(value, "'float32', 'float16' or 'bfloat16'")?;
            // train.py looks the name up in a dict of these three (`ptdtype = {...}[dtype]`):
            // 'fp16', which vramfit's own flags take, is its KeyError.
            if !matches!(s, "float32" | "float16" | "bfloat16") {
                return Err(format!(
                    "{} is not one of train.py's names ('float32', 'float16' or 'bfloat16'): it stops on any other (a KeyError)",
                    quoted(value)
                ));
            }
            cfg.dtype = Dtype::parse(s).unwrap_or(cfg.dtype);
        }
        "attention" => {
            let s = string(value, "'flash' or 'manual'")?;
            cfg.attention =
                Attention::parse(s).ok_or_else(|| format!("unknown attention {}: expected 'flash' or 'manual'", quoted(value)))?;
        }
        "optimizer" => {
            let s = string(value, "'adamw' or 'sgd'")?;
            cfg.optimizer = Optimizer::parse(s).ok_or_else(|| format!("unknown optimizer {}: expected 'adamw' or 'sgd'", quoted(value)))?;
        }
        // Only names in MODELLED reach here; keep the two lists in step.
        _ => return Err("not a modelled setting".into()),
    }
    Ok(())
}

/// Reads a nanoGPT config file on top of `base` (train.py's settings before the file runs).
///
/// Lines it cannot read produce notices; a modelled setting it cannot read, or a combination
/// `Config::validate` rejects, is an error naming the line. As in Python only a setting's last
/// value counts: an out-of-range value a later line replaces is no error.
pub fn parse_config_file(text: &str, base: &Config) -> Result<ConfigFile, ConfigFileError> {
    let (file, mut deferred) = parse_config_file_deferring(text, base)?;
    match deferred.is_empty() {
        true => Ok(file),
        false => Err(deferred.swap_remove(0)),
    }
}

/// [`parse_config_file`] for a reader with more settings to apply on top (train.py's
/// command-line overrides): what would refuse the file only for its final values is returned
/// beside the file rather than as the error, in line order: every modelled setting whose last
/// value is out of range or of the wrong type ([`ConfigFileError::BadValue`]; the config keeps
/// the value before it), or, when there is none, a combination `Config::validate` rejects
/// ([`ConfigFileError::Invalid`] or `InvalidBase`). The file's `config` then need not pass
/// `Config::validate`: later settings may still make it valid. Syntax errors and values that
/// cannot be read at all are errors as before.
pub fn parse_config_file_deferring(text: &str, base: &Config) -> Result<(ConfigFile, Vec<ConfigFileError>), ConfigFileError> {
    let mut cfg = base.clone();
    // Modelled settings whose last value is bad on its own (a later line may replace it).
    let mut bad_values: Vec<(&'static str, ConfigFileError)> = Vec::new();
    let mut extra: Vec<(String, Value)> = Vec::new();
    let mut notices = Vec::new();
    // Recognised settings whose value could not be read, each with why (naming its line).
    let mut unreadable: Vec<(String, String)> = Vec::new();
    // Names the file assigned, for later expressions (Python globals).
    // A map, not a list of every assignment: a pasted file of 100,000 lines once froze the page
    // for 22 s, each lookup passing every earlier line.
    let mut env: BTreeMap<String, Value> = BTreeMap::new();
    // Names assigned a value that could not be read, with the line: a later use of one points
    // there, not to an "unknown name" (`big = 10**30` was assigned; only its value is out of
    // reach). Only the line: quoting that line's reason would nest a chain of such names
    // (x1 = x0, x2 = x1, ...) into messages that grow with the square of the file.
    let mut unread: BTreeMap<String, usize> = BTreeMap::new();
    // Names the file made up: a value of one a later line reads was used, not "ignored"
    // (`tokens_per_iter = 2**19`, then `gradient_accumulation_steps = tokens_per_iter // ...`).
    let made_up: std::cell::RefCell<MadeUp> = std::cell::RefCell::default();
    // Names a block vramfit does not run may have set (an `if`'s body, a loop's target, an
    // import, a `del`), with the line: their value is not known from there on, so a later
    // line that reads one cannot be read either (it once kept the value from before the block).
    let mut set_in_block: BTreeMap<String, usize> = BTreeMap::new();
    // train.py's settings a top-level `del` unbound, with its line and text: one still unbound
    // when the file ends makes train.py's `config = {k: globals()[k] for k in config_keys}` raise.
    let mut deleted_settings: Vec<(String, usize, String)> = Vec::new();
    // Whether the last top-level statement was an `if` (or `elif`) whose every condition so far
    // was read as false: Python then evaluates the next `elif`'s condition.
    let mut if_chain_false = false;
    // Whether the body of the block the last top-level header opened runs for sure: an `if` or
    // `elif` whose condition was read as true, an `else` after conditions all read as false.
    let mut body_runs = false;
    // The line that last set each modelled setting, to blame combination errors on.
    let mut set_on: Vec<(&'static str, usize)> = Vec::new();
    // Settings that shape the model (and init_from) last assigned inside a conditional block,
    // and where; and whether the lines being read are in one.
    let mut conditional: Vec<(&'static str, usize)> = Vec::new();
    let mut in_conditional_block = false;
    let mut first_statement: Option<(usize, String)> = None;
    // The quote of the triple-quoted string the lines being read are in, and its first line.
    let mut in_triple: Option<(char, usize)> = None;
    // A statement continued over several lines (brackets still open, or a trailing `\`), its
    // first line, and how many brackets are open after what it has so far.
    let mut continued: Option<(usize, String, usize)> = None;
    // The brackets open in it, innermost last (Python refuses `(]`).
    let mut open_brackets: Vec<char> = Vec::new();
    // The quote of a string the statement continued ends in, continued by a backslash.
    let mut string_continues: Option<char> = None;
    let mut joined_line;

    // Editors on Windows may start the file with a byte-order mark, which train.py's
    // `exec(open(f).read())` refuses (Python reads it as a character, not as the encoding's mark).
    if text.starts_with('\u{feff}') {
        return Err(ConfigFileError::Syntax {
            line: 1,
            reason: "the file starts with a byte-order mark (U+FEFF), which train.py's exec refuses: save it as UTF-8 without one".into(),
        });
    }
    // Python's `open` reads `\r\n` and a lone `\r` as line ends too.
    let normalised;
    let text = if text.contains('\r') {
        normalised = text.replace("\r\n", "\n").replace('\r', "\n");
        normalised.as_str()
    } else {
        text
    };
    // Python's indentation: after a header ending in `:` the next statement must be indented,
    // an indented one needs such a header before it, and a dedent must return to a level
    // opened before. The open levels, as CPython's tokenizer keeps them: each one's column with
    // tabs to the next multiple of 8, and with tabs as one column (where the two orders of
    // levels disagree, the meaning would depend on the tab size: Python's TabError).
    let mut block_expected = None::<usize>;
    let mut levels: Vec<(usize, usize)> = vec![(0, 0)];
    for (index, raw_line) in text.lines().enumerate() {
        let line = index + 1;
        // A form feed at the start of a line is no indentation (Python resets the column).
        let raw_line = raw_line.trim_start_matches('\u{c}');
        // Lines inside a triple-quoted string are text, not code: Python runs none of them
        // (a block of settings "commented out" in quotes must not be applied).
        // Top-level text inside a triple-quoted string (a docstring, `notes = """...`): no code.
        if let (Some((quote, start)), None) = (in_triple, &continued) {
            if let Some(statement) = statement_after_closing_quote(raw_line, quote) {
                // Python runs it (even when the line opens another string after it); skipping
                // it with the string would plan another model.
                return Err(ConfigFileError::Syntax {
                    line,
                    reason: format!(
                        "`{}` follows the closing triple quote after a `;`: vramfit does not read that (put it on a line of its own)",
                        excerpt(statement.trim())
                    ),
                });
            }
            let (_, after) = elide_triple_quoted(raw_line, Some(quote));
            if after != Some(quote) {
                notices.push(format!("{}: skipped: inside a triple-quoted string, which Python does not run", line_span(start, line)));
                // Closed, and perhaps a string of the other quote opened after it.
                in_triple = after.map(|q| (q, line + 1));
            }
            continue;
        }
        // The line as code: each triple-quoted string's text elided (`'''...'''`, which the
        // reader refuses to evaluate), so that brackets, quotes and `#` inside one count for
        // nothing; inside a statement continued over lines, a string opened on an earlier line
        // takes the start of this one.
        let open_before = in_triple.map(|(q, _)| q);
        // A string continued by a backslash from the line before: read from its quote.
        let resumed;
        let raw = match string_continues {
            Some(q) => {
                resumed = format!("{q}{raw_line}");
                resumed.as_str()
            }
            None => raw_line,
        };
        let (view, open_after) = elide_triple_quoted(raw, open_before);
        in_triple = match (open_after, in_triple) {
            // Still inside the one opened before: nothing of the line is code.
            (Some(_), Some(before)) if view.is_empty() => Some(before),
            (Some(q), _) => Some((q, line + 1)),
            (None, _) => None,
        };
        let code = strip_comment(&view);
        // Python joins the lines of a statement whose brackets are open, or that ends in a
        // backslash, into one: read them as one, at the line where it starts (a setting after a
        // list continued over lines, `tags = ["a",\n "b"]; n_layer = 3`, is one Python runs).
        let (open_quote, bad_closer) = scan_brackets(code, &mut open_brackets);
        // A backslash continues a line only as its very last character (Python refuses one
        // followed by a space or a comment); in a string it continues the string.
        let backslash = open_after.is_none() && code.len() == view.len() && view.ends_with('\\');
        if code.trim_end().ends_with('\\') && !backslash && open_after.is_none() {
            return Err(ConfigFileError::Syntax {
                line,
                reason: format!(
                    "`{}`: a backslash continues a line only as its last character (Python would refuse the file)",
                    excerpt(code.trim())
                ),
            });
        }
        if open_quote.is_some() && !backslash {
            return Err(ConfigFileError::Syntax {
                line,
                reason: format!("`{}`: a string is never closed on its line (Python would refuse the file)", excerpt(code.trim())),
            });
        }
        let (start, mut so_far, depth) = match continued.take() {
            Some((start, mut so_far, _)) => {
                // A string continued by a backslash goes on without a break (less the quote it
                // was read from); code gets a space.
                match string_continues {
                    Some(q) => so_far.push_str(&code[q.len_utf8()..]),
                    // A first line of only a backslash: the statement starts here, at the
                    // first line's indentation.
                    None if so_far.trim().is_empty() => so_far.push_str(code.trim_start()),
                    None => {
                        so_far.push(' ');
                        so_far.push_str(code.trim_start());
                    }
                }
                (start, so_far, open_brackets.len())
            }
            None if code.trim().is_empty() => continue,
            None => (line, code.to_string(), open_brackets.len()),
        };
        string_continues = open_quote.filter(|_| backslash);
        if let Some(closer) = bad_closer {
            return Err(ConfigFileError::Syntax {
                line,
                reason: format!(
                    "`{}`: its `{closer}` closes a bracket that is not open, or one of another kind (Python would refuse the file)",
                    excerpt(code.trim())
                ),
            });
        }
        if depth > 0 || backslash {
            if backslash {
                // In place: copying the statement at every line was quadratic in its length.
                so_far.pop();
                if string_continues.is_none() {
                    so_far.truncate(so_far.trim_end().len());
                }
            }
            continued = Some((start, so_far, depth));
            continue;
        }
        // A triple-quoted string still open after this complete statement (`notes = """...`):
        // its lines are skipped at the top of the loop, as text.
        let line = start;
        joined_line = so_far;
        let code = joined_line.as_str();
        if code.trim().is_empty() {
            continue;
        }
        let refuse = |reason: &str| ConfigFileError::Syntax {
            line,
            reason: format!("`{}`: {reason} (Python would refuse the file)", excerpt(code.trim())),
        };
        // A no-break space or another non-ASCII space outside strings and comments (pasted from
        // a web page): Python's "invalid non-printable character".
        if let Some(at) = find_in_code(code, |_, c, _| !c.is_ascii() && c.is_whitespace()) {
            let c = code[at..].chars().next().unwrap_or(' ');
            return Err(refuse(&format!("it holds U+{:04X}, a space Python does not take outside strings and comments", c as u32)));
        }
        let mixed_tabs = "tabs and spaces in its indentation mixed so that its level depends on the tab size (a TabError)";
        let (column, tabs_as_one) = indentation_columns(code);
        let &(top, top_tabs_as_one) = levels.last().unwrap_or(&(0, 0));
        if let Some(header) = block_expected {
            if column <= top {
                return Err(ConfigFileError::Syntax {
                    line,
                    reason: format!("expected an indented block after line {header} (Python would refuse the file)"),
                });
            }
            if tabs_as_one <= top_tabs_as_one {
                return Err(refuse(mixed_tabs));
            }
            levels.push((column, tabs_as_one));
        } else if column > top {
            return Err(refuse("unexpected indent"));
        } else {
            while levels.len() > 1 && levels.last().is_some_and(|&(level, _)| column < level) {
                levels.pop();
            }
            let &(level, level_tabs_as_one) = levels.last().unwrap_or(&(0, 0));
            if column != level {
                return Err(refuse(
                    "its indentation returns to no level opened before it (unindent does not match any outer indentation level)",
                ));
            }
            if tabs_as_one != level_tabs_as_one {
                return Err(refuse(mixed_tabs));
            }
        }
        if has_empty_statement(code) {
            return Err(ConfigFileError::Syntax {
                line,
                reason: format!("`{}`: a `;` with no statement before it (Python would refuse the file)", excerpt(code.trim())),
            });
        }
        block_expected = code.trim_end().ends_with(':').then_some(line);
        // `a = 1; b = 2` at the top level: each statement in turn, as Python runs them.
        for code in top_level_statements(code) {
            // A setting bound some other way than `name = value` (`:=`, a loop's or `as`'s
            // target, unpacking with `*`, a function's `global`): skipping it would plan with a
            // value train.py does not have.
            if let Some((name, how)) = binds_modelled_unread(code) {
                return Err(ConfigFileError::BadValue {
                    line,
                    key: name.to_string(),
                    reason: format!("{how}, which vramfit does not read: write it as `{name} = value` at the top level"),
                });
            }
            let skip = |why: &str| format!("line {line}: skipped `{}` ({why})", excerpt(code.trim()));
            if !code.starts_with(char::is_whitespace) {
                // A top-level line that opens a block whose lines may or may not run.
                in_conditional_block = opens_conditional_block(code) && code.trim_end().ends_with(':');
            }
            if code.starts_with(char::is_whitespace) {
                // Inside an `if`, a loop or a `try`, whether and how often a line runs is not known
                // here. For a setting that changes the answer that is an error, not a silent
                // default (unless a top-level line sets it again later: the last assignment wins).
                // In a function body, a call's continued arguments or a string it is nothing.
                // `for k, v in overrides.items(): globals()[k] = v` sets what it likes, and a
                // function called later can do the same.
                refuse_names_unseen(code, line)?;
                // A line of a body that runs for sure (its first level: not a nested block's)
                // raises what its values raise, before it binds anything.
                if body_runs && levels.len() == 2 {
                    let lookup = |n: &str| name_value(n, &env, &cfg, &set_in_block, &unread, &made_up);
                    if let Some((e, why)) = certain_error_in(code.trim_start(), &lookup, &set_in_block, &unread) {
                        notices.push(format!("line {line}: `{}`: {e} ({why}): {TRAIN_PY_WOULD_STOP}", excerpt(code.trim())));
                    }
                }
                if in_conditional_block {
                    mark_conditional(code.trim_start(), line, &mut conditional, &mut unreadable);
                    for name in names_bound_in(code.trim_start()) {
                        env.remove(&name);
                        set_in_block.insert(name, line);
                    }
                }
                notices.push(skip("indented: vramfit reads top-level assignments only"));
                continue;
            }
            // `n_layer += 2` is `n_layer = n_layer + (2)` for the settings read here.
            let chain_before = std::mem::take(&mut if_chain_false);
            body_runs = false;
            let rewritten;
            let code = match augmented_assignment(code) {
                Some(plain) => {
                    rewritten = plain;
                    rewritten.as_str()
                }
                None => code,
            };
            // Skipping it would plan with values train.py would not use.
            refuse_names_unseen(code, line)?;
            let Some(targets) = assignments(code) else {
                // A block's one-line body is as conditional as an indented one.
                if let Some(body) = conditional_body(code) {
                    mark_conditional(body, line, &mut conditional, &mut unreadable);
                }
                // A top-level `if` or `while` always evaluates its condition, and an `elif` does
                // after conditions that were all false: a name nothing defines there is Python's
                // NameError, where train.py stops.
                if let Some((keyword, condition)) = header_condition(code).filter(|(k, _)| *k != "elif" || chain_before) {
                    match evaluate(condition, &|n: &str| name_value(n, &env, &cfg, &set_in_block, &unread, &made_up)) {
                        Ok(v) => {
                            if_chain_false = keyword != "while" && !v.is_truthy();
                            body_runs = keyword != "while" && v.is_truthy();
                        }
                        Err(e) => {
                            if let Some(why) = python_stops_on(&e, &set_in_block, &unread) {
                                notices.push(format!("line {line}: `{}`: {e} ({why}): {TRAIN_PY_WOULD_STOP}", excerpt(code.trim())));
                            }
                        }
                    }
                }
                if chain_before && code.trim_start().strip_prefix("else").is_some_and(|rest| rest.trim_start().starts_with(':')) {
                    body_runs = true;
                }
                // `if big: x = y` with the condition read as true: its body runs here.
                // Its statements run in turn: what one binds, the next may read (its value is
                // not known here, so it is as a block's).
                if let Some(body) = conditional_body(code).filter(|_| body_runs) {
                    let mut bound = set_in_block.clone();
                    for statement in top_level_statements(body) {
                        let lookup = |n: &str| name_value(n, &env, &cfg, &bound, &unread, &made_up);
                        if let Some((e, why)) = certain_error_in(statement, &lookup, &bound, &unread) {
                            notices.push(format!("line {line}: `{}`: {e} ({why}): {TRAIN_PY_WOULD_STOP}", excerpt(code.trim())));
                            break;
                        }
                        bound.extend(names_bound_in(statement).into_iter().map(|n| (n, line)));
                    }
                }
                // A top-level `assert` evaluates its condition too: false, it is Python's
                // AssertionError; one that holds needs no notice (nothing was skipped).
                let mut assertion_holds = false;
                if let Some(condition) = assert_condition(code) {
                    let stops = match evaluate(condition, &|n: &str| name_value(n, &env, &cfg, &set_in_block, &unread, &made_up)) {
                        Ok(v) if v.is_truthy() => {
                            assertion_holds = true;
                            None
                        }
                        Ok(_) => Some(("the assertion fails".to_string(), "an AssertionError")),
                        Err(e) => python_stops_on(&e, &set_in_block, &unread).map(|why| (e, why)),
                    };
                    if let Some((e, why)) = stops {
                        notices.push(format!("line {line}: `{}`: {e} ({why}): {TRAIN_PY_WOULD_STOP}", excerpt(code.trim())));
                        continue;
                    }
                }
                // `del` of plain names: Python unbinds each in turn.
                if let Some(names) = deleted_names(code) {
                    for name in names {
                        let maybe_bound = set_in_block.contains_key(name) || unread.contains_key(name);
                        let setting = is_train_py_setting(name);
                        if maybe_bound || setting || TRAIN_PY_GLOBALS.contains(&name) || name.starts_with("__") {
                            // Bound for sure or perhaps: its value is gone (a later read of a
                            // setting would find train.py's default here otherwise).
                            if setting && !maybe_bound {
                                deleted_settings.push((name.to_string(), line, excerpt(code.trim())));
                            }
                            env.remove(name);
                            set_in_block.insert(name.to_string(), line);
                        } else if env.remove(name).is_none() {
                            // Not bound (builtins are not in the module's globals): NameError.
                            notices.push(format!(
                                "line {line}: `{}`: unknown name {name} (a NameError): {TRAIN_PY_WOULD_STOP}",
                                excerpt(code.trim())
                            ));
                            break;
                        }
                        // Bound by the file and now unbound: a later read is a NameError.
                    }
                    if first_statement.is_none() {
                        first_statement = Some((line, excerpt(code.trim())));
                    }
                    continue;
                }
                // What the statement binds or unbinds (a loop's target, an import, `del`, a
                // one-line body's assignments) has no value vramfit knows from here on.
                for name in names_bound_in(code) {
                    env.remove(&name);
                    set_in_block.insert(name, line);
                }
                let first_word = code.split_whitespace().next().unwrap_or("");
                let import = matches!(first_word, "import" | "from");
                // A string on its own (a docstring) is not the mark of a file that is not config.
                let docstring = code.trim_start().starts_with(['"', '\'']);
                if !import && !docstring && first_statement.is_none() {
                    first_statement = Some((line, excerpt(code.trim())));
                }
                // (An assertion that holds was read: nothing to say. What it binds, `:=`, was
                // handled above as anything's.)
                if !assertion_holds {
                    notices.push(skip(if import { "imports are not needed" } else { "not a simple assignment" }));
                }
                continue;
            };
            // Python evaluates every value before it assigns any (`a, b = b, a`).
            let values: Vec<Result<Value, String>> = {
                // train.py's globals, and vramfit's own settings once the file has set them
                // (before that, Python has no such name).
                let lookup = |n: &str| name_value(n, &env, &cfg, &set_in_block, &unread, &made_up);
                let unread_named = |e: String| {
                    let name = e.strip_prefix("unknown name ");
                    match (name.and_then(|n| set_in_block.get_key_value(n)), name.and_then(|n| unread.get_key_value(n))) {
                        (Some((n, at)), _) => format!("{n} may be set at line {at}, in a block or statement vramfit does not run"),
                        (None, Some((n, at))) => format!("{n} has no value vramfit could read (see line {at})"),
                        (None, None) => e,
                    }
                };
                targets
                    .iter()
                    .map(|(_, expr)| expr.as_ref().map_err(Clone::clone).and_then(|e| evaluate(e, &lookup)).map_err(unread_named))
                    .collect()
            };
            for ((name, expr), value) in targets.into_iter().zip(values) {
                // Why the value cannot be read, quoting its expression where it has one of its own.
                let unreadable_because = |e: String| match expr {
                    Ok(x) if x.trim().is_empty() => e,
                    Ok(x) => format!("cannot read `{}`: {e}", excerpt(x.trim())),
                    Err(_) => e,
                };
                if let Some(&modelled) = MODELLED.iter().find(|&&m| m == name) {
                    let bad = |reason: String| ConfigFileError::BadValue { line, key: name.to_string(), reason };
                    let value = value.map_err(|e| {
                        // Python's own error where it is certain: train.py would stop there too.
                        let stops = python_stops_on(&e, &set_in_block, &unread);
                        let why = unreadable_because(e);
                        bad(stops.map_or(why.clone(), |error| format!("{why} ({error}): train.py would stop")))
                    })?;
                    // Python assigns any value; only the one train.py ends up with must be good.
                    bad_values.retain(|(k, _)| *k != modelled);
                    if let Err(reason) = set_modelled(&mut cfg, name, &value) {
                        bad_values.push((modelled, bad(reason)));
                    }
                    set_on.retain(|(k, _)| *k != modelled);
                    set_on.push((modelled, line));
                    conditional.retain(|(k, _)| *k != modelled);
                    set_in_block.remove(name);
                    env.insert(name.to_string(), value);
                    continue;
                }
                match value {
                    Ok(value) => {
                        unread.remove(name);
                        set_in_block.remove(name);
                        if is_known_extra(name) {
                            unreadable.retain(|(n, _)| n != name);
                            conditional.retain(|(k, _)| *k != name);
                            match extra.iter_mut().find(|(k, _)| k == name) {
                                Some(slot) => slot.1 = value.clone(),
                                None => extra.push((name.to_string(), value.clone())),
                            }
                        } else {
                            notices.push(format!("line {line}: ignored {name}: not a nanoGPT setting vramfit knows"));
                            made_up.borrow_mut().assigned_at.insert(name.to_string(), line);
                        }
                        env.insert(name.to_string(), value);
                    }
                    // Python refuses the whole file at compile time (a bad escape): train.py
                    // would run none of it.
                    Err(e) if e.ends_with(PYTHON_REFUSES) => return Err(ConfigFileError::Syntax { line, reason: unreadable_because(e) }),
                    Err(e) => {
                        // A name no line defines and no builtin has, or a division by zero:
                        // Python raises, and train.py stops (a name a block or an import may set
                        // says so instead).
                        let stops = python_stops_on(&e, &set_in_block, &unread);
                        let why = unreadable_because(e);
                        if let Some(error) = stops {
                            notices.push(format!("line {line}: {name}: {why} ({error}): {TRAIN_PY_WOULD_STOP}"));
                        } else {
                            notices.push(format!("line {line}: ignored {name}: {why}"));
                        }
                        // An earlier value is gone too: Python would have assigned this one.
                        env.remove(name);
                        extra.retain(|(k, _)| k != name);
                        unread.insert(name.to_string(), line);
                        if is_known_extra(name) {
                            mark_unreadable(&mut unreadable, name, format!("line {line}: {why}"));
                        }
                    }
                }
            }
        }
    }
    // A setting of train.py's that a `del` left unbound: train.py's exec of the file succeeds,
    // its next line does not.
    for (name, line, code) in deleted_settings {
        if set_in_block.get(&name) == Some(&line) && !env.contains_key(&name) && !unread.contains_key(&name) {
            notices.push(format!(
                "line {line}: `{code}`: {name} is not set again, so train.py's `config = {{k: globals()[k] for k in config_keys}}` fails \
                 (a KeyError): {TRAIN_PY_WOULD_STOP}"
            ));
        }
    }
    if let Some((_, start)) = in_triple {
        // Python stops at this with a SyntaxError: train.py would run none of the file.
        return Err(ConfigFileError::Syntax {
            line: start - 1,
            reason: "a triple-quoted string opens here and is never closed (Python would refuse the file)".into(),
        });
    }

    if let Some((start, _, depth)) = continued {
        return Err(ConfigFileError::Syntax {
            line: start,
            reason: match depth {
                0 => "the last line ends in a backslash: the statement never ends (Python would refuse the file)".into(),
                _ => "a bracket opens here and is never closed (Python would refuse the file)".into(),
            },
        });
    }
    if let Some(header) = block_expected {
        return Err(ConfigFileError::Syntax {
            line: header,
            reason: "the file ends where an indented block should follow this line (Python would refuse the file)".into(),
        });
    }
    if let Some(&(name, line)) = conditional.first() {
        return Err(ConfigFileError::BadValue {
            line,
            key: name.to_string(),
            reason: "set inside a block (if, for, while, with, try), which vramfit does not run: move it to the top level".into(),
        });
    }
    let recognised = !set_on.is_empty() || !extra.is_empty() || !unreadable.is_empty();
    // What changes the model or the run as a whole comes before the notes on single lines:
    // readers show the first few of a long list.
    let mut file_notes = Vec::new();
    let assigned: Vec<&'static str> = set_on.iter().map(|&(k, _)| k).collect();
    apply_init_from(&mut cfg, &extra, &mut file_notes, &mut set_on);
    // train.py tests `if iter_num == 0 and eval_only`: any true value.
    if extra.iter().any(|(k, v)| k == "eval_only" && v.is_truthy()) {
        cfg.eval_only = true;
        file_notes.push("eval_only = True: train.py evaluates once and exits, so the plan's fit is the eval at start's".into());
    }
    let vocab_from_dataset = apply_dataset_vocab(&mut cfg, &extra, &mut file_notes, &set_on);
    if let Some(note) = vramfit_only_note(&cfg, &set_on) {
        file_notes.push(note);
    }
    // A made-up name's value some later line read was used, not ignored.
    let used: std::collections::BTreeSet<String> = made_up
        .into_inner()
        .read
        .into_iter()
        .map(|(line, name)| format!("line {line}: ignored {name}: not a nanoGPT setting vramfit knows"))
        .collect();
    if !used.is_empty() {
        notices.retain(|n| !used.contains(n));
    }
    file_notes.append(&mut notices);
    let notices = file_notes;

    if pretrained_in(&extra).is_some() {
        // The checkpoint's shape replaced these, whatever the file said (train.py ignores them).
        bad_values.retain(|(k, _)| !matches!(*k, "n_layer" | "n_head" | "n_embd" | "vocab_size" | "bias"));
    }
    // The values still bad, by line; else a combination the file's values make.
    let mut deferred: Vec<ConfigFileError> = bad_values.into_iter().map(|(_, e)| e).collect();
    deferred.sort_by_key(|e| match e {
        ConfigFileError::BadValue { line, .. } => *line,
        _ => usize::MAX,
    });
    if deferred.is_empty() {
        if let Err(err) = cfg.validate() {
            // The last line that set any of the settings the combination failed on.
            let names = err.settings(&cfg);
            let line = set_on.iter().filter(|(k, _)| names.contains(k)).map(|&(_, l)| l).max();
            deferred.push(match line {
                Some(line) => ConfigFileError::Invalid { line, source: err },
                None => ConfigFileError::InvalidBase(err),
            });
        }
    }
    let (unreadable, unreadable_reasons) = unreadable.into_iter().unzip();
    let file = ConfigFile {
        config: cfg,
        extra,
        notices,
        unreadable,
        unreadable_reasons,
        recognised,
        first_statement,
        sets: assigned,
        vocab_from_dataset,
    };
    Ok((file, deferred))
}

/// How a value's reason ends where Python would refuse the file before running any of it (a
/// malformed escape is a compile-time error).
const PYTHON_REFUSES: &str = "(Python would refuse the file)";

/// Longest piece of a line quoted in a message.
const MAX_EXCERPT_CHARS: usize = 60;

/// A piece of the file (or of any input) as messages quote it: one line, bounded length, and
/// the characters that would reshape a terminal's line (control characters, bidirectional
/// overrides: [`crate::reshapes_text`]) shown escaped, `\u{1b}`, as `link`'s notices show them.
pub(crate) fn excerpt(s: &str) -> String {
    crate::shown_input(s, MAX_EXCERPT_CHARS)
}

/// A value as messages quote it: its Python `repr`, through [`excerpt`].
fn quoted(value: &Value) -> String {
    excerpt(&value.to_string())
}

/// Calls `visit(index, char, depth)` for each character of `s` outside string literals ('...'
/// or "...", with backslash escapes), `depth` being how many brackets are open before it, until
/// `visit` returns true; returns that character's byte index. The one scanner of the reader's
/// helpers, so that all of them agree on what is in a string.
fn find_in_code(s: &str, mut visit: impl FnMut(usize, char, i32) -> bool) -> Option<usize> {
    let (mut depth, mut quote, mut escaped) = (0i32, None::<char>, false);
    for (i, c) in s.char_indices() {
        match quote {
            Some(_) if escaped => escaped = false,
            Some(_) if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => {
                if visit(i, c, depth) {
                    return Some(i);
                }
                match c {
                    '\'' | '"' => quote = Some(c),
                    '(' | '[' | '{' => depth += 1,
                    ')' | ']' | '}' => depth -= 1,
                    _ => {}
                }
            }
        }
    }
    None
}

/// `line` with each triple-quoted string replaced by `"""..."""` on the line that opens it
/// (`x = """a (b` reads `x = """..."""`), given the quote of one open before the line: its
/// text up to the closing quote is dropped. Also the quote of a triple-quoted string still open
/// after the line.
fn elide_triple_quoted(line: &str, open: Option<char>) -> (std::borrow::Cow<'_, str>, Option<char>) {
    // Most lines hold no triple quote: as they are.
    if open.is_none() && !line.contains("\"\"\"") && !line.contains("'''") {
        return (std::borrow::Cow::Borrowed(line), None);
    }
    let chars: Vec<char> = line.chars().collect();
    let triple_at = |i: usize, q: char| chars.get(i) == Some(&q) && chars.get(i + 1) == Some(&q) && chars.get(i + 2) == Some(&q);
    let mut out = String::with_capacity(line.len());
    let (mut triple, mut single) = (open, None::<char>);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match (triple, single) {
            (Some(_), _) if c == '\\' => i += 1,
            (Some(q), _) if triple_at(i, q) => {
                triple = None;
                i += 2;
            }
            (Some(_), _) => {}
            (None, Some(_)) if c == '\\' => {
                out.push(c);
                if let Some(&next) = chars.get(i + 1) {
                    out.push(next);
                }
                i += 1;
            }
            (None, Some(q)) if c == q => {
                single = None;
                out.push(c);
            }
            (None, Some(_)) => out.push(c),
            (None, None) if c == '#' => {
                out.extend(&chars[i..]);
                break;
            }
            (None, None) if (c == '"' || c == '\'') && triple_at(i, c) => {
                triple = Some(c);
                out.extend([c, c, c, '.', '.', '.', c, c, c]);
                i += 2;
            }
            (None, None) if c == '"' || c == '\'' => {
                single = Some(c);
                out.push(c);
            }
            (None, None) => out.push(c),
        }
        i += 1;
    }
    (std::borrow::Cow::Owned(out), triple)
}

/// Follows the brackets `code` opens and closes (outside strings) on `open`, the stack of those
/// open before it: the quote of a string still open at its end, if any, and the first closing
/// bracket that matches no open one (none open, or one of another kind).
fn scan_brackets(code: &str, open: &mut Vec<char>) -> (Option<char>, Option<char>) {
    let (mut quote, mut escaped) = (None::<char>, false);
    for c in code.chars() {
        match quote {
            Some(_) if escaped => escaped = false,
            Some(_) if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' => quote = Some(c),
                '(' | '[' | '{' => open.push(c),
                ')' | ']' | '}' => {
                    let opener = match c {
                        ')' => '(',
                        ']' => '[',
                        _ => '{',
                    };
                    if open.pop() != Some(opener) {
                        return (quote, Some(c));
                    }
                }
                _ => {}
            },
        }
    }
    (quote, None)
}

/// The line without its `# comment` (a `#` inside a string literal is kept).
fn strip_comment(line: &str) -> &str {
    find_in_code(line, |_, c, _| c == '#').map_or(line, |i| &line[..i])
}

/// "line 4" or "lines 4-9".
fn line_span(first: usize, last: usize) -> String {
    if first >= last {
        format!("line {first}")
    } else {
        format!("lines {first}-{last}")
    }
}

/// The statement a line that closes a triple-quoted string of `quote` starts after a `;`
/// (`"""; n_layer = 4`), if any: Python runs it. Text after the closing quote without a `;`
/// only continues the expression (`""" + '''`, `""".strip()`).
fn statement_after_closing_quote(line: &str, quote: char) -> Option<&str> {
    let triple: String = std::iter::repeat_n(quote, 3).collect();
    // The first unescaped closing quote.
    let mut from = 0;
    let close = loop {
        let at = from + line[from..].find(&triple)?;
        let backslashes = line[..at].chars().rev().take_while(|&c| c == '\\').count();
        if backslashes % 2 == 0 {
            break at + 3;
        }
        from = at + 1;
    };
    let rest = &line[close..];
    let mut single = None::<char>;
    let mut escaped = false;
    for (i, c) in rest.char_indices() {
        match single {
            _ if escaped => escaped = false,
            Some(_) if c == '\\' => escaped = true,
            Some(q) if c == q => single = None,
            Some(_) => {}
            None if c == '#' => return None,
            None if c == '"' || c == '\'' => single = Some(c),
            None if c == ';' => return Some(&rest[i + 1..]).filter(|s| !strip_comment(s).trim().is_empty()),
            None => {}
        }
    }
    None
}

/// The names of a top-level `del` of plain names (`del x`, `del a, b`), in order; `None` for any
/// other statement, or a `del` of anything else (`del d[k]`, `del a.b`).
fn deleted_names(code: &str) -> Option<Vec<&str>> {
    let targets = code.trim().strip_prefix("del").filter(|r| r.starts_with(char::is_whitespace))?;
    let names = top_level_items(targets.trim());
    (!names.is_empty() && names.iter().all(|n| is_name(n.trim()) && !PYTHON_KEYWORDS.contains(&n.trim())))
        .then(|| names.into_iter().map(str::trim).collect())
}

/// Whether train.py defines `name` itself before it runs the file (a setting with a default, in
/// its `config_keys`), as opposed to vramfit's own settings, which only the file may bind.
fn is_train_py_setting(name: &str) -> bool {
    !VRAMFIT_ONLY.contains(&name) && (config_value(&Config::default(), name).is_some() || train_py_default(name).is_some())
}

/// Whether `s` is a Python name.
fn is_name(s: &str) -> bool {
    // Keywords that can start a line with a `:` before an `=` (`else: n_layer = 24`).
    // (`match` is a soft keyword: `match = 3` assigns a name, and its block needs a line of its own.)
    const KEYWORDS: [&str; 12] = ["if", "elif", "else", "for", "while", "with", "try", "except", "finally", "def", "class", "lambda"];
    s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !KEYWORDS.contains(&s)
}

/// `s` split at its top-level commas (not inside brackets or strings), a trailing comma dropped.
fn top_level_items(s: &str) -> Vec<&str> {
    let mut commas = Vec::new();
    find_in_code(s, |i, c, depth| {
        if c == ',' && depth == 0 {
            commas.push(i);
        }
        false
    });
    let mut from = 0;
    let mut items: Vec<&str> = Vec::new();
    for i in commas {
        items.push(&s[from..i]);
        from = i + 1;
    }
    items.push(&s[from..]);
    if items.len() > 1 && items.last().is_some_and(|l| l.trim().is_empty()) {
        items.pop();
    }
    items
}

/// `s` without one pair of brackets around all of it (`(1, 2)` → `1, 2`; `(1) + (2)` stays).
fn unbracketed(s: &str) -> &str {
    let t = s.trim();
    for (open, close) in [('(', ')'), ('[', ']')] {
        if let Some(inner) = t.strip_prefix(open).and_then(|r| r.strip_suffix(close)) {
            // The brackets must match each other, not close early: `(1) + (2)`.
            if find_in_code(inner, |_, c, depth| depth == 0 && matches!(c, ')' | ']' | '}')).is_none() {
                return inner;
            }
        }
    }
    t
}

/// Where the `=` of an assignment is: the first one outside brackets and strings that is not
/// part of `==`, `<=`, `+=`, `:=` and the like.
fn assignment_sign(code: &str) -> Option<usize> {
    let bytes = code.as_bytes();
    let mut prev = ' ';
    let at = find_in_code(code, |_, c, depth| {
        let found = c == '=' && depth == 0;
        if !found {
            prev = c;
        }
        found
    })?;
    let compound = "=!<>+-*/%&|^@:".contains(prev) || bytes.get(at + 1) == Some(&b'=');
    (!compound).then_some(at)
}

/// The items of a tuple or list display (`1, 2`, `4,`, `(4,)`, `[4]`, `()`), or None when `s`
/// is one value (`4`, `(4)`, `f()`): only a display can be unpacked item by item.
fn sequence_items(s: &str) -> Option<Vec<&str>> {
    let has_comma = |x: &str| find_in_code(x, |_, c, depth| c == ',' && depth == 0).is_some();
    let mut t = s.trim();
    // Parentheses only group (`((4,))` is `(4,)`); Python refuses more than 200 levels.
    for _ in 0..200 {
        if has_comma(t) {
            return Some(top_level_items(t));
        }
        let inner = unbracketed(t);
        if inner.len() == t.len() {
            return None;
        }
        // `[x]`, `[]` and `()` are displays; `(x)` is x itself.
        if t.starts_with('[') || inner.trim().is_empty() {
            return Some(if inner.trim().is_empty() { Vec::new() } else { top_level_items(inner) });
        }
        t = inner.trim();
    }
    None
}

/// One target of an assignment: its name, and its expression, or why its value cannot be told.
type Target<'a> = (&'a str, Result<&'a str, String>);

/// The statements of a line, split at its top-level semicolons (outside strings and
/// brackets), the first as it is and the others trimmed; a trailing `;` ends nothing. A block's
/// header (`if x: a = 1; b = 2`) is one statement: its `;`s belong to its one-line body.
fn top_level_statements(code: &str) -> Vec<&str> {
    let header = opens_conditional_block(code) || matches!(first_word(code), "def" | "class");
    if code.starts_with(char::is_whitespace) || header || !code.contains(';') {
        return vec![code];
    }
    split_statements(code)
}

/// Whether a `;` of `code` (outside strings and brackets) follows no statement: `;` first,
/// `;;`, `a = 1; ;`. Python takes one `;` at the end of a line, and none of those.
fn has_empty_statement(code: &str) -> bool {
    let (mut start, mut empty) = (0, false);
    find_in_code(code, |i, c, depth| {
        if c == ';' && depth == 0 {
            empty |= code[start..i].trim().is_empty();
            start = i + 1;
        }
        empty
    });
    empty
}

/// `code` split at its top-level semicolons, the first as it is and the others trimmed, empty
/// ones dropped.
fn split_statements(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = find_in_code(rest, |_, c, depth| c == ';' && depth == 0) {
        out.push(&rest[..at]);
        rest = rest[at + 1..].trim_start();
    }
    out.push(rest);
    out.retain(|s| !s.trim().is_empty());
    out
}

/// The word a line starts with (a keyword, a name), without what follows it.
fn first_word(code: &str) -> &str {
    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap_or("")
}

/// Whether `code` starts a block whose lines may or may not run, or run many times.
fn opens_conditional_block(code: &str) -> bool {
    match first_word(code) {
        "if" | "elif" | "else" | "for" | "while" | "with" | "try" | "except" | "finally" => true,
        // Soft keywords: `match = 3` is an assignment.
        "match" | "case" => code.trim_end().ends_with(':'),
        _ => false,
    }
}

/// A setting that changes the answer (or `init_from`, `dataset`), bound by `code` other than
/// as `name = value`, and how: `name := ...`, a `for` loop's or an `as` target, unpacking with
/// `*` or nested brackets, `global name` (a function may set it), `def`/`class name`.
fn binds_modelled_unread(code: &str) -> Option<(&'static str, &'static str)> {
    // The common statement, `name = value` with a plain name, binds nothing else: read fast.
    let plain_target = code.find('=').is_some_and(|eq| !code[..eq].contains([',', '*', '(', '[', ':']));
    let keyword = matches!(first_word(code.trim_start()), "for" | "global" | "nonlocal" | "def" | "class" | "with" | "except" | "import");
    if plain_target && !keyword && !code.contains(":=") && !code.contains(" as ") {
        return None;
    }
    let watched = |w: &str| MODELLED.iter().chain(["init_from", "dataset"].iter()).find(|&&m| m == w).copied();
    // Whole words outside strings, with their byte offsets and bracket depths.
    let mut words: Vec<(usize, &str, i32)> = Vec::new();
    let mut word_start: Option<(usize, i32)> = None;
    find_in_code(code, |i, c, depth| {
        let part = c.is_ascii_alphanumeric() || c == '_';
        match (part, word_start) {
            (true, None) => word_start = Some((i, depth)),
            (false, Some((st, d))) => {
                words.push((st, &code[st..i], d));
                word_start = None;
            }
            _ => {}
        }
        false
    });
    if let Some((st, d)) = word_start {
        words.push((st, &code[st..], d));
    }
    // A string ending a word's run (`x = 'a' n_layer`) is not reached: fine, it is no binding.
    let first = words.first().map(|(_, w, _)| *w).unwrap_or("");
    let header = opens_conditional_block(code) || matches!(first, "def" | "class" | "lambda");
    for (k, &(at, w, depth)) in words.iter().enumerate() {
        let Some(name) = watched(w) else { continue };
        // `cfg.n_layer = 4` sets an attribute, not the name.
        if code[..at].trim_end().ends_with('.') {
            continue;
        }
        let after = code[at + w.len()..].trim_start();
        let before = words[..k].iter().map(|(_, w, _)| *w);
        if after.starts_with(":=") {
            return Some((name, "assigned with `:=` inside an expression"));
        }
        if k > 0 && words[k - 1].1 == "as" {
            return Some((name, "bound by `as`"));
        }
        if first == "for" && !before.clone().any(|b| b == "in") {
            return Some((name, "the target of a for loop"));
        }
        if matches!(first, "global" | "nonlocal") {
            return Some((name, "declared global, so a function may set it"));
        }
        if matches!(first, "def" | "class") && k == 1 {
            return Some((name, "defined as a function or class"));
        }
        // A target of the statement's `=` the reader does not take (`n_layer, *rest = ...`,
        // nested unpacking): the plain forms, `a, b = 1, 2` and `(a, b) = ...`, it reads.
        let eq = find_in_code(code, |i, c, depth| {
            depth == 0
                && c == '='
                && !code[i + 1..].starts_with('=')
                && !code[..i].ends_with(['=', '!', '<', '>', ':', '+', '-', '*', '/', '%', '&', '|', '^', '@'])
        });
        let Some(eq) = eq.filter(|&e| at < e && !header) else { continue };
        let lhs = code[..eq].trim();
        // An unpacking: a top-level `,` or `*`, or brackets around the targets; the name one of
        // its targets (not an index, `d[n_layer] = 1`).
        let unpacking = lhs.starts_with(['(', '[']) || find_in_code(lhs, |_, c, d| d == 0 && (c == ',' || c == '*')).is_some();
        let target = depth == 0 || lhs.starts_with(['(', '[']);
        if unpacking && target && !assignments(code).is_some_and(|targets| targets.iter().any(|(n, _)| *n == name)) {
            return Some((name, "a target of an unpacking with `*` or nested brackets"));
        }
    }
    None
}

/// An error for a statement that may set names no assignment shows (see [`sets_names_unseen`]).
fn refuse_names_unseen(code: &str, line: usize) -> Result<(), ConfigFileError> {
    match sets_names_unseen(code) {
        Some(why) => Err(ConfigFileError::Syntax {
            line,
            reason: format!("`{}` {why}, which vramfit cannot follow: write the settings as assignments", excerpt(code.trim())),
        }),
        None => Ok(()),
    }
}

/// Settings assigned in `body` (its statements, augmented ones included), where vramfit does
/// not run the assignment (an indented or one-line block body that may or may not run): one
/// that shapes the model is an error unless a top-level line sets it again later
/// (`conditional`, with the line); a known train.py setting is unreadable.
fn mark_conditional(body: &str, line: usize, conditional: &mut Vec<(&'static str, usize)>, unreadable: &mut Vec<(String, String)>) {
    for statement in split_statements(body) {
        let plain = augmented_assignment(statement);
        for (name, _) in assignments(plain.as_deref().unwrap_or(statement)).unwrap_or_default() {
            if let Some(&shaping) = MODELLED.iter().chain(&["init_from"]).find(|&&m| m == name) {
                conditional.retain(|(k, _)| *k != shaping);
                conditional.push((shaping, line));
            }
            if is_known_extra(name) {
                let why = format!("line {line}: set inside a block (if, for, while, with, try), which vramfit does not run");
                mark_unreadable(unreadable, name, why);
            }
        }
    }
}

/// What else is defined where train.py runs a config file (its configurator execs the file in
/// train.py's globals): train.py's imports, `config_keys`, and the configurator's own names.
/// vramfit knows no value for them, but reading one is no NameError. (Dunder names, such as
/// `__name__`, count too.)
const TRAIN_PY_GLOBALS: [&str; 21] = [
    "os",
    "time",
    "math",
    "pickle",
    "nullcontext",
    "np",
    "torch",
    "DDP",
    "init_process_group",
    "destroy_process_group",
    "GPTConfig",
    "GPT",
    "config_keys",
    "sys",
    "literal_eval",
    "arg",
    "config_file",
    "f",
    // Bound by the configurator only for `--key=value` arguments before the file's: maybe.
    "key",
    "val",
    "attempt",
];

/// Python's builtins (3.11's, and 3.13's one more), separated by spaces: a name among them is no
/// NameError (a call of one is only a call vramfit does not evaluate). One string, not a table
/// of 150 entries: the page's wasm carries it.
const PYTHON_BUILTINS: &str = concat!(
    "ArithmeticError AssertionError AttributeError BaseException BaseExceptionGroup ",
    "BlockingIOError BrokenPipeError BufferError BytesWarning ChildProcessError ",
    "ConnectionAbortedError ConnectionError ConnectionRefusedError ConnectionResetError ",
    "DeprecationWarning EOFError Ellipsis EncodingWarning EnvironmentError Exception ",
    "ExceptionGroup FileExistsError FileNotFoundError FloatingPointError FutureWarning ",
    "GeneratorExit IOError ImportError ImportWarning IndentationError IndexError InterruptedError ",
    "IsADirectoryError KeyError KeyboardInterrupt LookupError MemoryError ModuleNotFoundError ",
    "NameError NotADirectoryError NotImplemented NotImplementedError OSError OverflowError ",
    "PendingDeprecationWarning PermissionError ProcessLookupError PythonFinalizationError ",
    "RecursionError ReferenceError ResourceWarning RuntimeError RuntimeWarning StopAsyncIteration ",
    "StopIteration SyntaxError SyntaxWarning SystemError SystemExit TabError TimeoutError ",
    "TypeError UnboundLocalError UnicodeDecodeError UnicodeEncodeError UnicodeError ",
    "UnicodeTranslateError UnicodeWarning UserWarning ValueError Warning ZeroDivisionError abs ",
    "aiter all anext any ascii bin bool breakpoint bytearray bytes callable chr classmethod ",
    "compile complex copyright credits delattr dict dir divmod enumerate eval exec exit filter ",
    "float format frozenset getattr globals hasattr hash help hex id input int isinstance ",
    "issubclass iter len license list locals map max memoryview min next object oct open ord pow ",
    "print property quit range repr reversed round set setattr slice sorted staticmethod str sum ",
    "super tuple type vars zip",
);

/// Python's keywords that cannot be a value (`True`, `False`, `None` are values; `lambda` starts
/// one; `not` is an operator where it may stand).
const PYTHON_KEYWORDS: [&str; 31] = [
    "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del", "elif", "else", "except", "finally", "for",
    "from", "global", "if", "import", "in", "is", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
];

/// Whether `name` is one of Python's builtins.
fn is_python_builtin(name: &str) -> bool {
    PYTHON_BUILTINS.split(' ').any(|b| b == name)
}

/// The names a config file made up (no setting of train.py's or vramfit's): where each was last
/// assigned, and which of those assignments a later line read (a value read was used, so its
/// "ignored" notice is dropped). A read finds the assignment before its own line's, as Python
/// evaluates the value before it binds the name.
#[derive(Default)]
struct MadeUp {
    assigned_at: BTreeMap<String, usize>,
    read: std::collections::BTreeSet<(usize, String)>,
}

/// What a name holds for an expression the reader evaluates: what the file assigned it, else
/// train.py's global (a modelled setting's value so far, an unmodelled one's default); nothing
/// for a name a statement vramfit does not run may have set, for one whose last value could
/// not be read (train.py's default is not what it holds then), and for vramfit's own settings
/// before the file sets them (Python has no such name).
fn name_value(
    n: &str,
    env: &BTreeMap<String, Value>,
    cfg: &Config,
    set_in_block: &BTreeMap<String, usize>,
    unread: &BTreeMap<String, usize>,
    made_up: &std::cell::RefCell<MadeUp>,
) -> Option<Value> {
    if set_in_block.contains_key(n) || unread.contains_key(n) {
        return None;
    }
    let mut made_up = made_up.borrow_mut();
    if let Some(&line) = made_up.assigned_at.get(n) {
        made_up.read.insert((line, n.to_string()));
    }
    drop(made_up);
    env.get(n).cloned().or_else(|| (!VRAMFIT_ONLY.contains(&n)).then(|| config_value(cfg, n).or_else(|| train_py_default(n))).flatten())
}

/// How the evaluator's errors begin where Python raises a TypeError: a binary operator, a unary
/// sign, an ordering between types that have none (see [`python_stops_on`]).
const TYPE_ERROR_BINARY: &str = "unsupported operand types for ";
const TYPE_ERROR_UNARY: &str = "bad operand for unary ";
const TYPE_ERROR_COMPARE: &str = "cannot compare ";
/// How the evaluator's error begins where a float power overflows: Python's OverflowError.
const FLOAT_POWER_OVERFLOW: &str = "a float power out of range";

/// The Python exception an evaluation error is certain to be, where it is one: a name no line
/// defines (not a builtin, not one a block, import or unreadable line may have set), a
/// division by zero, or an operator Python has no meaning for between the operands' types (a
/// string and a number, None and anything; the reader's values carry Python's exact types, and
/// it refuses non-finite floats before they reach an operator, so no NaN comparison is taken
/// for one).
fn python_stops_on(e: &str, set_in_block: &BTreeMap<String, usize>, unread: &BTreeMap<String, usize>) -> Option<&'static str> {
    if e.starts_with("division by zero") {
        return Some("a ZeroDivisionError");
    }
    if [TYPE_ERROR_BINARY, TYPE_ERROR_UNARY, TYPE_ERROR_COMPARE].iter().any(|start| e.starts_with(start)) {
        return Some("a TypeError");
    }
    if e.starts_with(FLOAT_POWER_OVERFLOW) {
        return Some("an OverflowError");
    }
    if e.ends_with(PYTHON_REFUSES) {
        return Some("a SyntaxError");
    }
    let name = e.strip_prefix("unknown name ")?;
    let defined = is_python_builtin(name) || TRAIN_PY_GLOBALS.contains(&name) || name.starts_with("__");
    (!defined && !set_in_block.contains_key(name) && !unread.contains_key(name)).then_some("a NameError")
}

/// The Python error the values of `statement`, an assignment that certainly runs, certainly
/// raise (see [`python_stops_on`]), with its name: the message and the error.
fn certain_error_in(
    statement: &str,
    lookup: &dyn Fn(&str) -> Option<Value>,
    set_in_block: &BTreeMap<String, usize>,
    unread: &BTreeMap<String, usize>,
) -> Option<(String, &'static str)> {
    let rewritten = augmented_assignment(statement);
    let targets = assignments(rewritten.as_deref().unwrap_or(statement))?;
    targets.iter().find_map(|(_, expr)| {
        let e = evaluate(expr.as_ref().ok()?, lookup).err()?;
        python_stops_on(&e, set_in_block, unread).map(|why| (e, why))
    })
}

/// The keyword and condition of a top-level `if`, `elif` or `while` header (`if big:` or
/// `if big: n_layer = 24`).
fn header_condition(code: &str) -> Option<(&'static str, &str)> {
    let code = code.trim_start();
    let (keyword, rest) = ["if", "elif", "while"].into_iter().find_map(|k| code.strip_prefix(k).map(|rest| (k, rest)))?;
    if !rest.starts_with(|c: char| c.is_whitespace() || c == '(') {
        return None;
    }
    let colon = find_in_code(rest, |_, c, depth| c == ':' && depth == 0)?;
    Some(rest[..colon].trim()).filter(|c| !c.is_empty()).map(|c| (keyword, c))
}

/// The condition of a top-level `assert` (`assert n_embd % n_head == 0, "message"`).
fn assert_condition(code: &str) -> Option<&str> {
    let rest = code.trim_start().strip_prefix("assert")?;
    if !rest.starts_with(|c: char| c.is_whitespace() || c == '(') {
        return None;
    }
    let end = find_in_code(rest, |_, c, depth| c == ',' && depth == 0).unwrap_or(rest.len());
    Some(rest[..end].trim()).filter(|c| !c.is_empty())
}

/// vramfit's own settings, which train.py has no global for: a file that reads one before it
/// sets it stops with Python's NameError.
const VRAMFIT_ONLY: [&str; 7] =
    ["vocab_size", "eval_batch_size", "eval_block_size", "attention", "optimizer", "activation_checkpointing", "expandable_segments"];

/// What the file's vramfit-only settings change from what stock train.py runs (which never
/// reads them), said once: the plan is then for a train.py changed to use them.
fn vramfit_only_note(cfg: &Config, set_on: &[(&'static str, usize)]) -> Option<String> {
    let set = |name: &str| set_on.iter().any(|(k, _)| *k == name);
    let changed: Vec<String> = [
        ("eval_batch_size", cfg.eval_batch_size.is_some_and(|e| e != cfg.batch_size)),
        ("eval_block_size", cfg.eval_block_size.is_some_and(|t| t != cfg.block_size)),
        ("attention", cfg.attention != crate::config::Attention::Flash),
        ("optimizer", cfg.optimizer != crate::config::Optimizer::Adamw),
        ("activation_checkpointing", cfg.activation_checkpointing),
    ]
    .into_iter()
    .filter(|&(name, differs)| differs && set(name))
    .map(|(name, _)| config_value(cfg, name).map_or_else(|| name.to_string(), |v| format!("{name} = {v}")))
    .collect();
    let mut notes = Vec::new();
    if !changed.is_empty() {
        notes.push(format!(
            "{}: vramfit's settings, which stock train.py does not read; the plan is for a train.py changed to use them",
            changed.join(", ")
        ));
    }
    if cfg.expandable_segments && set("expandable_segments") {
        notes.push("expandable_segments = True: planned as PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which train.py takes from the environment, not from this file".to_string());
    }
    (!notes.is_empty()).then(|| notes.join("; "))
}

/// train.py's own default of a setting vramfit does not model, which a config file may read
/// (`eval_iters = max_iters // 3000`); nanoGPT's train.py as of its master branch.
fn train_py_default(name: &str) -> Option<Value> {
    let s = |v: &str| Some(Value::Str(v.into()));
    match name {
        "out_dir" => s("out"),
        "eval_interval" => Some(Value::Int(2000)),
        "log_interval" => Some(Value::Int(1)),
        "eval_only" | "wandb_log" => Some(Value::Bool(false)),
        "always_save_checkpoint" | "decay_lr" => Some(Value::Bool(true)),
        "init_from" => s("scratch"),
        "wandb_project" => s("owt"),
        "wandb_run_name" => s("gpt2"),
        "dataset" => s("openwebtext"),
        "learning_rate" => Some(Value::Float(6e-4)),
        "max_iters" | "lr_decay_iters" => Some(Value::Int(600_000)),
        "weight_decay" => Some(Value::Float(1e-1)),
        "beta1" => Some(Value::Float(0.9)),
        "beta2" => Some(Value::Float(0.95)),
        "grad_clip" => Some(Value::Float(1.0)),
        "warmup_iters" => Some(Value::Int(2000)),
        "min_lr" => Some(Value::Float(6e-5)),
        "backend" => s("nccl"),
        "device" => s("cuda"),
        _ => None,
    }
}

/// The names a statement vramfit does not run binds or unbinds: assignment targets (augmented
/// ones too), a `for` loop's targets, `as` targets, walrus targets, imported names, `def` and
/// `class` names, `del`'s names, and those of a one-line body after a block's `:`.
fn names_bound_in(code: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut add = |n: &str| {
        let n = n.trim().trim_start_matches('*').trim_matches(|c| c == '(' || c == ')' || c == '[' || c == ']').trim();
        if is_name(n) && !names.iter().any(|m| m == n) {
            names.push(n.to_string());
        }
    };
    for statement in split_statements(code) {
        let statement = statement.trim();
        let plain = augmented_assignment(statement);
        if let Some(targets) = assignments(plain.as_deref().unwrap_or(statement)) {
            targets.iter().for_each(|(n, _)| add(n));
        }
        // Every whole word directly before `:=` or after ` as `, in code (not in a string).
        let in_code = |at: usize| find_in_code(statement, |i, _, _| i >= at) == Some(at);
        for (at, _) in statement.match_indices(":=").filter(|(at, _)| in_code(*at)) {
            add(statement[..at].trim_end().rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap_or(""));
        }
        for (at, _) in statement.match_indices(" as ").filter(|(at, _)| in_code(*at)) {
            add(statement[at + 4..].split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap_or(""));
        }
        let rest = |kw: &str| statement.strip_prefix(kw).filter(|r| r.starts_with(char::is_whitespace));
        if let Some(r) = rest("for").or_else(|| rest("async for")) {
            let targets = r.split(" in ").next().unwrap_or("");
            targets.split(',').for_each(&mut add);
        } else if let Some(r) = rest("import") {
            r.split(',').filter(|i| !i.contains(" as ")).for_each(|i| add(i.trim().split('.').next().unwrap_or("")));
        } else if let Some((_, imported)) = rest("from").and_then(|r| r.split_once(" import ")) {
            imported.split(',').filter(|i| !i.contains(" as ")).for_each(&mut add);
        } else if let Some(r) = rest("del") {
            r.split(',').for_each(&mut add);
        } else if let Some(r) = rest("def").or_else(|| rest("class")).or_else(|| rest("async def")) {
            add(r.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c.is_whitespace())).next().unwrap_or(""));
        }
        // A block's one-line body (`if big: scale = 2`).
        if let Some(body) = conditional_body(statement) {
            for n in names_bound_in(body) {
                add(&n);
            }
        }
    }
    names
}

/// Records that the setting `name` cannot be read, and why: a setting already recorded keeps
/// its place (the first is the one `train` names) and takes the reason of its latest line.
fn mark_unreadable(unreadable: &mut Vec<(String, String)>, name: &str, why: String) {
    match unreadable.iter_mut().find(|(n, _)| n == name) {
        Some(slot) => slot.1 = why,
        None => unreadable.push((name.to_string(), why)),
    }
}

/// The one-line body of a top-level block whose lines may or may not run (`if big: n_layer = 24`,
/// `else: x = 1`), if `code` is such a header with a body after its colon.
fn conditional_body(code: &str) -> Option<&str> {
    if !opens_conditional_block(code) {
        return None;
    }
    let colon = find_in_code(code, |_, c, depth| c == ':' && depth == 0)?;
    Some(code[colon + 1..].trim()).filter(|body| !body.is_empty())
}

/// `name OP= expr` as the plain assignment it amounts to, `name = name OP (expr)`.
fn augmented_assignment(code: &str) -> Option<String> {
    let name_end = code.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(code.len());
    let (name, rest) = code.split_at(name_end);
    if !is_name(name) {
        return None;
    }
    let rest = rest.trim_start();
    // Bitwise ones too: the value then reads as `n_layer >> (1)`, which the evaluator refuses
    // (skipped, they once left the setting as it was).
    ["**=", "//=", "<<=", ">>=", "+=", "-=", "*=", "/=", "%=", "|=", "&=", "^=", "@="]
        .into_iter()
        .find_map(|op| rest.strip_prefix(op).map(|expr| format!("{name} = {name} {} ({})", &op[..op.len() - 1], expr.trim())))
}

/// Why a statement may set names that no assignment shows, if it may: code that `exec`s text or
/// calls `setattr`, writes through `globals()`, `locals()` or `vars()` (reading them is fine), or
/// imports settings from another file (`from config.x import *`, or a setting by name).
fn sets_names_unseen(code: &str) -> Option<&'static str> {
    let code = code.trim();
    // Every case below is an import or a call (the common line is neither: read fast).
    if !code.contains('(') && !code.starts_with("from") {
        return None;
    }
    let words: Vec<&str> = code.split(|c: char| c.is_whitespace() || c == ',').filter(|w| !w.is_empty()).collect();
    if words.first() == Some(&"from") {
        let imported = words
            .iter()
            .skip_while(|w| !w.starts_with("import"))
            .map(|w| w.trim_start_matches("import").trim_matches(|c| c == '(' || c == ')'));
        let names: Vec<&str> = imported.filter(|w| !w.is_empty()).collect();
        if names.iter().any(|n| n.starts_with('*')) {
            return Some("takes every name of another file");
        }
        if names.iter().any(|n| MODELLED.contains(n) || is_known_extra(n) || *n == "init_from") {
            return Some("takes a setting from another file");
        }
        return None;
    }
    // Where each name is called, outside strings: what follows its `(`...`)`.
    let calls = |f: &str, writes_only: bool| {
        let mut found = false;
        find_in_code(code, |at, c, _| {
            let before = code[..at].chars().next_back();
            if c == f.as_bytes()[0] as char && code[at..].starts_with(f) && !before.is_some_and(|b| b.is_ascii_alphanumeric() || b == '_') {
                let after = code[at + f.len()..].trim_start();
                if let Some(args) = after.strip_prefix('(') {
                    // `globals()[k] = v`, `vars().update(...)`; not `print(globals().keys())`.
                    let rest = args.split_once(')').map_or("", |(_, r)| r.trim_start());
                    found = !writes_only
                        || rest.starts_with('[') && assignment_sign(rest).is_some()
                        || [".update(", ".setdefault(", ".__setitem__("].iter().any(|m| rest.starts_with(m));
                }
            }
            found
        });
        found
    };
    let exec = calls("exec", false) || calls("setattr", false);
    let writes = ["globals", "locals", "vars"].into_iter().any(|f| calls(f, true));
    (exec || writes).then_some("may set names in code")
}

/// The targets of an assignment line, in order: `name = expr`, `name: annotation = expr`,
/// unpacking, `a, b = 1, 2` (brackets on either side allowed), and chains of names, `a = b = 4`;
/// a target whose value cannot be told (`a, b = f()`) carries the reason. None: not an
/// assignment (`==`, `+=`, `x.y = 1`, a call, an import).
fn assignments(code: &str) -> Option<Vec<Target<'_>>> {
    let eq = assignment_sign(code)?;
    let (lhs, expr) = (&code[..eq], &code[eq + 1..]);
    // `a = b = 4`: every name takes the last expression, leftmost first, as Python assigns.
    // Another chain (`n_layer = d['n'] = 8`, `f = lambda x=1: x`) is read as `a = <the rest>`,
    // whose value then cannot be read: an error for a setting vramfit models, as before.
    if expr.contains('=') && assignment_sign(expr).is_some() {
        let name = unbracketed(lhs).trim();
        let chained = assignments(expr).filter(|rest| rest.iter().all(|(_, e)| e.is_ok() && *e == rest[0].1));
        if let (true, Some(mut rest)) = (is_name(name), chained) {
            let value = rest[0].1.clone();
            rest.insert(0, (name, value));
            return Some(rest);
        }
    }
    // An annotated assignment: `name: type = value` (the annotation may not contain `=`).
    let lhs = match lhs.split_once(':') {
        Some((name, annotation)) if !annotation.trim().is_empty() && is_name(name.trim()) => return Some(vec![(name.trim(), Ok(expr))]),
        Some(_) => return None,
        None => lhs,
    };
    // `(name) = 4` assigns name; `name, = ...` and `[name] = ...` unpack.
    let Some(names) = sequence_items(lhs) else {
        let name = unbracketed(lhs).trim();
        return is_name(name).then(|| vec![(name, Ok(expr))]);
    };
    if names.is_empty() || !names.iter().all(|n| is_name(n.trim())) {
        return None;
    }
    // Only a display's items can be told apart: `n_layer, = 4` is Python's TypeError, and
    // `a, b = f()` depends on what f returns.
    Some(match sequence_items(expr) {
        Some(values) if values.len() == names.len() => names.iter().zip(values).map(|(n, v)| (n.trim(), Ok(v))).collect(),
        _ => {
            let count = if names.len() == 1 { "1 name".to_string() } else { format!("{} names", names.len()) };
            let why = format!("cannot unpack `{}` into {count}", excerpt(expr.trim()));
            names.iter().map(|n| (n.trim(), Err(why.clone()))).collect()
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Expressions
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Value(Value),
    /// A string literal, kept apart from other values until the next token so that adjacent
    /// ones join.
    Literal(String),
    Name(String),
    Op(&'static str),
    Open,
    Close,
}

/// A string literal's token: adjacent literals are one string (`'float' '16'`), as in Python.
/// (A string value from a name or parentheses is not a literal: `x 'a'` stays an error, a
/// value then a value.)
fn push_string(tokens: &mut Vec<Token>, s: String) {
    match tokens.last_mut() {
        Some(Token::Literal(prev)) => prev.push_str(&s),
        _ => tokens.push(Token::Literal(s)),
    }
}

fn tokenize(expr: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            let start = i;
            // `0x1e+5` is 0x1e plus 5: only a decimal literal has an exponent.
            let prefixed = c == '0' && chars.get(i + 1).is_some_and(|p| matches!(p, 'x' | 'X' | 'o' | 'O' | 'b' | 'B'));
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.' || chars[i] == '_') {
                // An exponent's sign belongs to the number: 6e-4.
                if !prefixed && matches!(chars[i], 'e' | 'E') && matches!(chars.get(i + 1), Some('+' | '-')) {
                    i += 1;
                }
                i += 1;
            }
            let literal: String = chars[start..i].iter().collect();
            tokens.push(Token::Value(number(&literal)?));
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if matches!(chars.get(i), Some('\'' | '"')) {
                // `u'...'` is a plain string; `r'...'` keeps its backslashes. Bytes and
                // f-strings are not read (their values are not what a setting takes).
                let (s, next) = match word.as_str() {
                    "u" | "U" => string_literal(&chars, i, false)?,
                    "r" | "R" => string_literal(&chars, i, true)?,
                    _ => return Err(format!("string prefix {}'...' is not supported", excerpt(&word))),
                };
                push_string(&mut tokens, s);
                i = next;
                continue;
            }
            tokens.push(match word.as_str() {
                "True" => Token::Value(Value::Bool(true)),
                "False" => Token::Value(Value::Bool(false)),
                "None" => Token::Value(Value::None),
                _ => Token::Name(word),
            });
        } else if c == '\'' || c == '"' {
            let (s, next) = string_literal(&chars, i, false)?;
            push_string(&mut tokens, s);
            i = next;
        } else {
            let two: String = chars[i..chars.len().min(i + 2)].iter().collect();
            let (token, len) = match (two.as_str(), c) {
                ("**", _) => (Token::Op("**"), 2),
                ("//", _) => (Token::Op("//"), 2),
                ("==", _) => (Token::Op("=="), 2),
                ("!=", _) => (Token::Op("!="), 2),
                ("<=", _) => (Token::Op("<="), 2),
                (">=", _) => (Token::Op(">="), 2),
                ("<<" | ">>", _) => return Err(format!("unsupported `{two}` (bitwise operators)")),
                (_, '<') => (Token::Op("<"), 1),
                (_, '>') => (Token::Op(">"), 1),
                (_, '+') => (Token::Op("+"), 1),
                (_, '-') => (Token::Op("-"), 1),
                (_, '*') => (Token::Op("*"), 1),
                (_, '/') => (Token::Op("/"), 1),
                (_, '%') => (Token::Op("%"), 1),
                (_, '(') => (Token::Open, 1),
                (_, ')') => (Token::Close, 1),
                (_, '.') => return Err("attribute access (`.`) is not supported".into()),
                _ => return Err(format!("unsupported `{}`", excerpt(&c.to_string()))),
            };
            tokens.push(token);
            i += len;
        }
    }
    Ok(tokens)
}

/// An integer or float literal as the file wrote it: decimal (`1_000`, leading zeros only on
/// zero), `0x`/`0o`/`0b` with their digits, or a float (`6e-4`, `.5`, `5.`, `1_000.5`), with
/// underscores where Python takes them (singly, between digits, or after a base's prefix).
fn number(literal: &str) -> Result<Value, String> {
    // Messages quote the literal cut short: a pasted 100,000-digit number stays one short line.
    let shown = excerpt(literal);
    let bytes = literal.as_bytes();
    let radix = match bytes.get(..2) {
        Some([b'0', b'x' | b'X']) => Some(16),
        Some([b'0', b'o' | b'O']) => Some(8),
        Some([b'0', b'b' | b'B']) => Some(2),
        _ => None,
    };
    if let Some(radix) = radix {
        // `0x_1f` is Python's; `0x`, `0x_`, `0x1f_`, `0x1__f` are not.
        let body = &literal[2..];
        let digits = body.strip_prefix('_').unwrap_or(body);
        let is_digit = |c: char| c.is_digit(radix);
        if digits.is_empty() || !digits.split('_').all(|group| !group.is_empty() && group.chars().all(is_digit)) {
            return Err(format!("invalid number {shown}"));
        }
        let digits: String = digits.chars().filter(|&c| c != '_').collect();
        return i64::from_str_radix(&digits, radix).map(Value::Int).map_err(|_| format!("{shown} is too large"));
    }
    // An underscore only between two digits: not `1_`, `1__0`, `1_.5`, `1._5`, `1_e5`, `1e_5`.
    let digit_at = |i: Option<usize>| i.and_then(|i| bytes.get(i)).is_some_and(u8::is_ascii_digit);
    if bytes.iter().enumerate().any(|(i, &b)| b == b'_' && !(digit_at(i.checked_sub(1)) && digit_at(Some(i + 1)))) {
        return Err(format!("invalid number {shown}: `_` goes only between two digits (1_000)"));
    }
    let literal: String = literal.chars().filter(|&c| c != '_').collect();
    let is_float = literal.contains(['.', 'e', 'E']);
    if !is_float {
        if !literal.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("unsupported number {shown}"));
        }
        // Python forbids leading zeros on integers ("012"), except for zero itself.
        if literal.len() > 1 && literal.starts_with('0') && literal.bytes().any(|b| b != b'0') {
            return Err(format!("invalid number {shown}"));
        }
        return literal.parse::<i64>().map(Value::Int).map_err(|_| format!("{shown} is too large"));
    }
    if !literal.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-')) {
        return Err(format!("invalid number {shown}"));
    }
    match literal.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(Value::Float(x)),
        Ok(_) => Err(format!("{shown} is too large")),
        Err(_) => Err(format!("invalid number {shown}")),
    }
}

/// A '...' or "..." literal starting at `chars[start]`; returns it and the index after it.
/// Escapes are decoded as Python decodes them in a str literal; the ones Python refuses
/// (`\x4`, `\U00110000`) and the ones a Rust string cannot hold or the reader cannot decode
/// (a lone surrogate, `\N{name}`) are errors, never kept as written. A `raw` one (`r'...'`)
/// keeps its text as written: a backslash only keeps the quote after it from closing it.
fn string_literal(chars: &[char], start: usize, raw: bool) -> Result<(String, usize), String> {
    let quote = chars[start];
    if chars.get(start + 1) == Some(&quote) && chars.get(start + 2) == Some(&quote) {
        return Err("triple-quoted strings are not supported".into());
    }
    let mut out = String::new();
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            c if c == quote => return Ok((out, i + 1)),
            '\\' if raw => {
                out.extend(chars[i..chars.len().min(i + 2)].iter());
                i += 2;
            }
            '\\' => i = escape(chars, i + 1, &mut out)?,
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Err("unterminated string".into())
}

/// Decodes the escape after a backslash, `chars[at]` being the character after it, onto `out`;
/// returns the index after the escape.
fn escape(chars: &[char], at: usize, out: &mut String) -> Result<usize, String> {
    // The line ends at the backslash: Python continues the string on the next line.
    let escaped = *chars.get(at).ok_or("a string continued on the next line (`\\` at its end) is not supported")?;
    let simple = match escaped {
        '\\' | '\'' | '"' => Some(escaped),
        'a' => Some('\u{7}'),
        'b' => Some('\u{8}'),
        'f' => Some('\u{c}'),
        'n' => Some('\n'),
        'r' => Some('\r'),
        't' => Some('\t'),
        'v' => Some('\u{b}'),
        _ => None,
    };
    if let Some(c) = simple {
        out.push(c);
        return Ok(at + 1);
    }
    match escaped {
        // One to three octal digits: `\0`, `\12`, `\101` (up to `\777`, U+01FF).
        '0'..='7' => {
            let digits = chars[at..].iter().take(3).take_while(|c| c.is_digit(8)).count();
            let code = chars[at..at + digits].iter().fold(0, |n, c| n * 8 + c.to_digit(8).unwrap_or(0));
            out.push(char::from_u32(code).ok_or("invalid octal escape")?);
            Ok(at + digits)
        }
        'x' | 'u' | 'U' => {
            let count = match escaped {
                'x' => 2,
                'u' => 4,
                _ => 8,
            };
            let digits = chars[at + 1..].iter().take(count).take_while(|c| c.is_ascii_hexdigit()).count();
            if digits < count {
                return Err(format!("truncated \\{escaped} escape: it takes exactly {count} hex digits (Python would refuse the file)"));
            }
            let code = chars[at + 1..at + 1 + count].iter().fold(0u32, |n, c| n * 16 + c.to_digit(16).unwrap_or(0));
            match char::from_u32(code) {
                Some(c) => out.push(c),
                None if (0xd800..=0xdfff).contains(&code) => {
                    return Err(format!(
                        "\\{escaped}{code:0count$x} is a lone surrogate, which vramfit cannot read (write the character itself)"
                    ))
                }
                None => return Err(format!("\\U{code:08x} is not a Unicode character (Python would refuse the file)")),
            }
            Ok(at + 1 + count)
        }
        'N' if chars.get(at + 1) == Some(&'{') => {
            Err("named Unicode escapes (\\N{...}) are not supported: write the character itself or its \\u escape".into())
        }
        'N' => Err("malformed \\N escape: Python takes \\N{name} (Python would refuse the file)".into()),
        // Python keeps unknown escapes (`\d`, `\8`) as written, with a warning.
        other => {
            out.push('\\');
            out.push(other);
            Ok(at + 1)
        }
    }
}

/// The longest string an expression may build: far beyond any setting's value, and small
/// enough that a file doubling a string on every line cannot exhaust memory.
const MAX_STRING_BYTES: usize = 4096;

fn concat(x: &str, y: &str) -> Result<Value, String> {
    if x.len() + y.len() > MAX_STRING_BYTES {
        return Err(format!("string too long (over {MAX_STRING_BYTES} bytes)"));
    }
    Ok(Value::Str(format!("{x}{y}")))
}

/// Evaluates one expression; `lookup` resolves names.
fn evaluate(expr: &str, lookup: &dyn Fn(&str) -> Option<Value>) -> Result<Value, String> {
    let tokens = tokenize(expr)?;
    if tokens.is_empty() {
        return Err(format!("no value after `=` {PYTHON_REFUSES}"));
    }
    let mut parser = Parser { tokens: &tokens, pos: 0, lookup, depth: 0, skipping: 0 };
    let value = parser.expression().map_err(|e| e.strip_prefix(EVALUATION_ERROR).map_or(e.clone(), str::to_string))?;
    match parser.tokens.get(parser.pos) {
        None => Ok(value),
        Some(Token::Open) => Err("function calls are not supported".into()),
        Some(t) => Err(format!("unexpected {}", describe(t))),
    }
}

fn describe(t: &Token) -> String {
    match t {
        Token::Value(v) => quoted(v),
        Token::Literal(s) => quoted(&Value::Str(s.clone())),
        Token::Name(n) => excerpt(n),
        Token::Op(op) => format!("`{op}`"),
        Token::Open => "`(`".into(),
        Token::Close => "`)`".into(),
    }
}

/// Marks an error of evaluation (a name, an operation) inside the parser, as against one of
/// syntax: only the first kind is dropped where Python skips an operand. Never shown.
const EVALUATION_ERROR: char = '\u{1}';

/// Deepest nesting of parentheses and unary signs: keeps recursion bounded on hostile input.
const MAX_DEPTH: usize = 64;

/// Recursive descent over Python's precedence: conditional expression < `or` < `and` < `not` <
/// comparison < sum < product < unary sign < power < atom. What Python skips (the branch not
/// taken, the right of a deciding `or` or `and`, the rest of a chain of comparisons once one
/// fails) is parsed but not evaluated, as Python compiles it but does not run it: its syntax
/// must hold, but a name it reads or a division by zero in it is no error (`warm == 0 or
/// max_iters % warm == 0`, a guard).
struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
    lookup: &'a dyn Fn(&str) -> Option<Value>,
    depth: usize,
    /// Above 0 while parsing what Python skips: what evaluating it would raise is dropped (see
    /// [`Parser::run`]).
    skipping: usize,
}

impl Parser<'_> {
    fn peek_op(&self) -> Option<&'static str> {
        match self.tokens.get(self.pos) {
            Some(Token::Op(op)) => Some(op),
            _ => None,
        }
    }

    fn keyword(&self, word: &str) -> bool {
        matches!(self.tokens.get(self.pos), Some(Token::Name(n)) if n == word)
    }

    /// The result of evaluating something: an error of evaluation (not of syntax) is dropped
    /// while skipping, its value then `None` (never used); otherwise it is marked as one
    /// ([`EVALUATION_ERROR`]), for [`Parser::expression`].
    fn run(&self, result: Result<Value, String>) -> Result<Value, String> {
        match result {
            Err(_) if self.skipping > 0 => Ok(Value::None),
            Err(e) => Err(format!("{EVALUATION_ERROR}{e}")),
            r => r,
        }
    }

    /// Parses what Python skips (see [`Parser::skipping`]): only a syntax error counts.
    fn skipped(&mut self, f: impl FnOnce(&mut Self) -> Result<Value, String>) -> Result<(), String> {
        self.skipping += 1;
        let r = self.nested(f);
        self.skipping -= 1;
        r.map(|_| ())
    }

    /// `a if c else b`: `c` first, then one of the two.
    fn expression(&mut self) -> Result<Value, String> {
        let start = self.pos;
        let mut value = self.or_test();
        match &value {
            // An error of evaluation stopped it where it was raised, no place to go on from:
            // parse it again, skipping, to its end (a syntax error there is the expression's).
            Err(e) if e.starts_with(EVALUATION_ERROR) => {
                self.pos = start;
                self.skipped(|p| p.or_test())?;
            }
            // A syntax error stands (parsing again would meet it again, at every level).
            Err(_) => return value,
            Ok(_) => {}
        }
        if !self.keyword("if") {
            return value;
        }
        self.pos += 1;
        let condition = self.nested(|p| p.or_test())?;
        if !self.keyword("else") {
            return Err("`if` without `else` in an expression".into());
        }
        self.pos += 1;
        if condition.is_truthy() {
            self.skipped(|p| p.expression())?;
        } else {
            value = self.nested(|p| p.expression());
        }
        value
    }

    /// `a or b`: the first truthy operand, or the last (those after a truthy one not evaluated).
    fn or_test(&mut self) -> Result<Value, String> {
        let mut acc = self.and_test()?;
        while self.keyword("or") {
            self.pos += 1;
            if acc.is_truthy() {
                self.skipped(|p| p.and_test())?;
            } else {
                acc = self.nested(|p| p.and_test())?;
            }
        }
        Ok(acc)
    }

    /// `a and b`: the first falsy operand, or the last (those after a falsy one not evaluated).
    fn and_test(&mut self) -> Result<Value, String> {
        let mut acc = self.not_test()?;
        while self.keyword("and") {
            self.pos += 1;
            if acc.is_truthy() {
                acc = self.nested(|p| p.not_test())?;
            } else {
                self.skipped(|p| p.not_test())?;
            }
        }
        Ok(acc)
    }

    fn not_test(&mut self) -> Result<Value, String> {
        if self.keyword("not") {
            self.pos += 1;
            let v = self.nested(|p| p.not_test())?;
            return Ok(Value::Bool(!v.is_truthy()));
        }
        self.comparison()
    }

    /// `a < b <= c`: each pair compared, all must hold (chained, as in Python: once one fails,
    /// the operands after it are not evaluated).
    fn comparison(&mut self) -> Result<Value, String> {
        let mut lhs = self.sum()?;
        let mut result: Option<bool> = None;
        while let Some(op @ ("==" | "!=" | "<" | "<=" | ">" | ">=")) = self.peek_op() {
            self.pos += 1;
            if result == Some(false) {
                self.skipped(|p| p.sum())?;
                continue;
            }
            let rhs = self.sum()?;
            let holds = match self.run(compare(op, &lhs, &rhs).map(Value::Bool))? {
                Value::Bool(b) => b,
                _ => false,
            };
            result = Some(holds);
            lhs = rhs;
        }
        Ok(result.map_or(lhs, Value::Bool))
    }

    fn sum(&mut self) -> Result<Value, String> {
        let mut acc = self.product()?;
        while let Some(op @ ("+" | "-")) = self.peek_op() {
            self.pos += 1;
            let rhs = self.product()?;
            acc = self.run(binary(op, acc, rhs))?;
        }
        Ok(acc)
    }

    fn product(&mut self) -> Result<Value, String> {
        let mut acc = self.unary()?;
        while let Some(op @ ("*" | "/" | "//" | "%")) = self.peek_op() {
            self.pos += 1;
            let rhs = self.unary()?;
            acc = self.run(binary(op, acc, rhs))?;
        }
        Ok(acc)
    }

    fn unary(&mut self) -> Result<Value, String> {
        match self.peek_op() {
            Some(op @ ("+" | "-")) => {
                self.pos += 1;
                let v = match self.nested(|p| p.unary())? {
                    // A bool is an integer here too (`-True` is -1).
                    Value::Bool(b) => Value::Int(b as i64),
                    v => v,
                };
                let result = match (op, v) {
                    ("+", v @ (Value::Int(_) | Value::Float(_))) => Ok(v),
                    ("-", Value::Int(n)) => n.checked_neg().map(Value::Int).ok_or_else(|| "integer overflow".into()),
                    ("-", Value::Float(x)) => Ok(Value::Float(-x)),
                    (_, v) => Err(format!("{TYPE_ERROR_UNARY}{op}: {}", v.type_name())),
                };
                self.run(result)
            }
            _ => self.power(),
        }
    }

    fn power(&mut self) -> Result<Value, String> {
        let base = self.atom()?;
        if self.peek_op() == Some("**") {
            self.pos += 1;
            // Right-associative and binds tighter than a unary minus on its left: -2**2 == -4.
            let exponent = self.nested(|p| p.unary())?;
            return self.run(binary("**", base, exponent));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<Value, String> {
        let token = self.tokens.get(self.pos).ok_or("expression ends early")?;
        self.pos += 1;
        match token {
            Token::Value(v) => Ok(v.clone()),
            Token::Literal(s) => Ok(Value::Str(s.clone())),
            Token::Name(n) => {
                if self.tokens.get(self.pos) == Some(&Token::Open) {
                    return Err(format!("function calls are not supported ({}(...))", excerpt(n)));
                }
                // A keyword where a value goes (`6 or if`): Python refuses the file, even where it
                // would skip the operand. A lambda is an expression vramfit does not evaluate.
                if n == "lambda" {
                    return Err("lambda is not supported".into());
                }
                if PYTHON_KEYWORDS.contains(&n.as_str()) {
                    return Err(format!("`{n}` where a value goes {PYTHON_REFUSES}"));
                }
                let value = (self.lookup)(n).ok_or_else(|| format!("unknown name {}", excerpt(n)));
                self.run(value)
            }
            Token::Open => {
                let v = self.nested(|p| p.expression())?;
                match self.tokens.get(self.pos) {
                    Some(Token::Close) => {
                        self.pos += 1;
                        Ok(v)
                    }
                    None => Err("unclosed parenthesis".into()),
                    Some(t) => Err(format!("unexpected {} (tuples are not supported)", describe(t))),
                }
            }
            t => Err(format!("unexpected {}", describe(t))),
        }
    }

    fn nested(&mut self, f: impl FnOnce(&mut Self) -> Result<Value, String>) -> Result<Value, String> {
        if self.depth >= MAX_DEPTH {
            return Err("expression nested too deeply".into());
        }
        self.depth += 1;
        let v = f(self);
        self.depth -= 1;
        v
    }
}

/// Python's comparison `a op b` of the values config files use: numbers (a bool counts as 0
/// or 1) with numbers, strings with strings; `==` and `!=` between any two.
fn compare(op: &str, a: &Value, b: &Value) -> Result<bool, String> {
    use std::cmp::Ordering;
    let number = |v: &Value| match v {
        Value::Bool(b) => Some(*b as i64 as f64),
        other => as_float(other),
    };
    let whole = |v: &Value| match v {
        Value::Bool(b) => Some(*b as i64),
        Value::Int(n) => Some(*n),
        _ => None,
    };
    let order = match (a, b) {
        (Value::Str(x), Value::Str(y)) => Some(x.cmp(y)),
        // Exact for integers (an f64 would round large ones), and between an integer and a
        // float as Python compares them (2**53 + 1 > 2.0**53).
        _ if whole(a).is_some() && whole(b).is_some() => whole(a).zip(whole(b)).map(|(x, y)| x.cmp(&y)),
        (_, Value::Float(y)) if whole(a).is_some() => whole(a).and_then(|x| cmp_int_float(x, *y)),
        (Value::Float(x), _) if whole(b).is_some() => whole(b).and_then(|y| cmp_int_float(y, *x)).map(Ordering::reverse),
        (Value::None, Value::None) => Some(Ordering::Equal).filter(|_| matches!(op, "==" | "!=")),
        _ => match (number(a), number(b)) {
            (Some(x), Some(y)) => x.partial_cmp(&y),
            _ => None,
        },
    };
    match (op, order) {
        ("==", o) => Ok(o == Some(Ordering::Equal)),
        ("!=", o) => Ok(o != Some(Ordering::Equal)),
        (_, Some(o)) => Ok(match op {
            "<" => o == Ordering::Less,
            "<=" => o != Ordering::Greater,
            ">" => o == Ordering::Greater,
            _ => o != Ordering::Less,
        }),
        (_, None) => Err(format!("{TYPE_ERROR_COMPARE}{} and {} with {op}", a.type_name(), b.type_name())),
    }
}

/// An integer against a float, exactly (no rounding of the integer to a float); `None` for NaN.
fn cmp_int_float(i: i64, f: f64) -> Option<std::cmp::Ordering> {
    use std::cmp::Ordering;
    if f.is_nan() {
        return None;
    }
    // Every i64 lies in [-2^63, 2^63).
    if f >= 9_223_372_036_854_775_808.0 {
        return Some(Ordering::Less);
    }
    if f < -9_223_372_036_854_775_808.0 {
        return Some(Ordering::Greater);
    }
    // Here the float's whole part fits an i64 exactly.
    let whole = f.trunc();
    match i.cmp(&(whole as i64)) {
        Ordering::Equal => 0.0f64.partial_cmp(&(f - whole)),
        other => Some(other),
    }
}

/// Python's float `divmod` (CPython's `float_divmod`): the remainder from `fmod`, with the
/// divisor's sign, and the floor quotient from it, which `floor(x / y)` can miss by one where
/// `x / y` rounds (`1 // 0.1` is 9.0, `1 % 0.1` is 0.09999999999999995).
fn float_divmod(x: f64, y: f64) -> (f64, f64) {
    let mut rem = x % y;
    let mut div = (x - rem) / y;
    if rem != 0.0 {
        if (y < 0.0) != (rem < 0.0) {
            rem += y;
            div -= 1.0;
        }
    } else {
        rem = 0.0f64.copysign(y);
    }
    let floor = if div != 0.0 {
        let f = div.floor();
        if div - f > 0.5 {
            f + 1.0
        } else {
            f
        }
    } else {
        0.0f64.copysign(x / y)
    };
    (floor, rem)
}

/// A number as a float, for mixed arithmetic.
fn as_float(v: &Value) -> Option<f64> {
    match v {
        Value::Int(n) => Some(*n as f64),
        Value::Float(x) => Some(*x),
        _ => None,
    }
}

/// Python's binary operators on the values config files use.
fn binary(op: &str, a: Value, b: Value) -> Result<Value, String> {
    let overflow = || "integer overflow".to_string();
    // A bool is an integer in arithmetic (`True + 1` is 2).
    let as_int = |v: Value| match v {
        Value::Bool(b) => Value::Int(b as i64),
        v => v,
    };
    let (a, b) = (as_int(a), as_int(b));
    match (&a, &b) {
        (Value::Int(x), Value::Int(y)) => {
            let (x, y) = (*x, *y);
            let zero = || "division by zero".to_string();
            let v = match op {
                "+" => x.checked_add(y).ok_or_else(overflow)?,
                "-" => x.checked_sub(y).ok_or_else(overflow)?,
                "*" => x.checked_mul(y).ok_or_else(overflow)?,
                "//" => {
                    if y == 0 {
                        return Err(zero());
                    }
                    // Python floors; Rust truncates towards zero.
                    let q = x.checked_div(y).ok_or_else(overflow)?;
                    if (x % y != 0) && ((x < 0) != (y < 0)) {
                        q - 1
                    } else {
                        q
                    }
                }
                "%" => {
                    if y == 0 {
                        return Err(zero());
                    }
                    let r = x.checked_rem(y).ok_or_else(overflow)?;
                    if r != 0 && ((r < 0) != (y < 0)) {
                        r + y
                    } else {
                        r
                    }
                }
                "/" => {
                    if y == 0 {
                        return Err(zero());
                    }
                    return Ok(Value::Float(int_true_division(x, y)));
                }
                "**" => {
                    // Python takes a negative power of an integer in floats (0 has none).
                    if y < 0 && x == 0 {
                        return Err("division by zero (0 to a negative power)".into());
                    }
                    if y < 0 {
                        return finite((x as f64).powf(y as f64));
                    }
                    let e = u32::try_from(y).map_err(|_| overflow())?;
                    x.checked_pow(e).ok_or_else(overflow)?
                }
                _ => return Err(format!("unsupported operator {op}")),
            };
            Ok(Value::Int(v))
        }
        (Value::Str(x), Value::Str(y)) if op == "+" => concat(x, y),
        // Python repeats a string by an integer (a bool counts as 0 or 1), either way round.
        (Value::Str(s), Value::Int(_) | Value::Bool(_)) | (Value::Int(_) | Value::Bool(_), Value::Str(s)) if op == "*" => {
            let times = match (&a, &b) {
                (Value::Int(n), _) | (_, Value::Int(n)) => *n,
                (Value::Bool(t), _) | (_, Value::Bool(t)) => *t as i64,
                _ => 0,
            };
            let times = usize::try_from(times).unwrap_or(0);
            if s.len().saturating_mul(times) > MAX_STRING_BYTES {
                return Err(format!("string too long (over {MAX_STRING_BYTES} bytes)"));
            }
            Ok(Value::Str(s.repeat(times)))
        }
        (Value::Str(_), _) if op == "%" => Err("vramfit does not evaluate Python's string formatting (`%`)".into()),
        _ => match (as_float(&a), as_float(&b)) {
            (Some(x), Some(y)) => {
                let v = match op {
                    "+" => x + y,
                    "-" => x - y,
                    "*" => x * y,
                    "/" | "//" | "%" if y == 0.0 => return Err("division by zero".into()),
                    "/" => x / y,
                    "//" => float_divmod(x, y).0,
                    "%" => float_divmod(x, y).1,
                    "**" if x == 0.0 && y < 0.0 => return Err("division by zero (0 to a negative power)".into()),
                    "**" if x < 0.0 && y.fract() != 0.0 => return Err("a complex number (vramfit reads real numbers only)".into()),
                    "**" => {
                        // Python raises where a float power overflows (`2.0 ** 1024`); other
                        // float operations give inf there, which vramfit does not hold.
                        let v = x.powf(y);
                        if v.is_infinite() {
                            return Err(format!("{FLOAT_POWER_OVERFLOW} ({x:?} ** {y:?})"));
                        }
                        v
                    }
                    _ => return Err(format!("unsupported operator {op}")),
                };
                finite(v)
            }
            _ => Err(format!("{TYPE_ERROR_BINARY}{op}: {} and {}", a.type_name(), b.type_name())),
        },
    }
}

/// Python's `x / y` of two integers: the exact quotient rounded once to the nearest float (ties
/// to even). Dividing the two after rounding each to a float rounds twice, which differs past
/// 2^53 (`874709080445262125 / 1999`). `y` is not 0.
fn int_true_division(x: i64, y: i64) -> f64 {
    let negative = (x < 0) != (y < 0);
    let (n, d) = (u128::from(x.unsigned_abs()), u128::from(y.unsigned_abs()));
    if n == 0 {
        return if negative { -0.0 } else { 0.0 };
    }
    // The quotient in binary: its integer part, then bits of the fraction until it has at
    // least 55 significant bits (two past a float's 53, for rounding), with what is left over.
    let (mut q, mut r, mut exponent) = (n / d, n % d, 0i32);
    while q < 1 << 55 {
        r <<= 1;
        let bit = u128::from(r >= d);
        r -= bit * d;
        q = q << 1 | bit;
        exponent -= 1;
    }
    let drop = 128 - q.leading_zeros() as i32 - 53;
    let (mantissa, rest, half) = (q >> drop, q & ((1 << drop) - 1), 1u128 << (drop - 1));
    let up = rest > half || (rest == half && (r != 0 || mantissa & 1 == 1));
    // Exact: at most 2^53, times a power of two well within the exponent range.
    let value = (mantissa + u128::from(up)) as f64 * 2f64.powi(exponent + drop);
    if negative {
        -value
    } else {
        value
    }
}

fn finite(x: f64) -> Result<Value, String> {
    if x.is_finite() {
        Ok(Value::Float(x))
    } else {
        Err("number too large".into())
    }
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

fn py_optional(n: Option<u32>) -> String {
    n.map_or("None".to_string(), |n| n.to_string())
}

/// A nanoGPT config file (the page's export) that [`parse_config_file`] reads back to `cfg`.
///
/// Settings stock train.py does not have are written too, in a section of their own: train.py
/// `exec`s the file into its globals, so they are harmless there.
pub fn to_config_file(cfg: &Config, init_from: Option<&str>) -> String {
    let mut out = String::new();
    out.push_str(&format!("# nanoGPT config written by vramfit {}.\n", env!("CARGO_PKG_VERSION")));
    out.push_str("# Use it as: python train.py config/<this file>.py\n");
    // Counting parameters of an invalid config could overflow; the figures are only a comment.
    if cfg.validate().is_ok() {
        let params = crate::params::count(cfg);
        out.push_str(&format!("# number of parameters: {}; tokens per iteration: {}\n", params.printed_millions(), cfg.tokens_per_iter()));
    }
    let lines: [(&str, String); 11] = [
        ("n_layer", cfg.n_layer.to_string()),
        ("n_head", cfg.n_head.to_string()),
        ("n_embd", cfg.n_embd.to_string()),
        ("block_size", cfg.block_size.to_string()),
        ("bias", py_bool(cfg.bias).into()),
        ("dropout", format!("{:?}", cfg.dropout)),
        ("batch_size", cfg.batch_size.to_string()),
        ("gradient_accumulation_steps", cfg.gradient_accumulation_steps.to_string()),
        ("eval_iters", cfg.eval_iters.to_string()),
        ("dtype", Value::Str(cfg.dtype.name().into()).to_string()),
        ("compile", py_bool(cfg.compile).into()),
    ];
    out.push_str("\n# model and training settings train.py reads\n");
    if let Some(name) = init_from {
        // train.py then takes n_layer, n_head, n_embd and bias from the weights (the values
        // below are the checkpoint's), and crops its 1024 positions to block_size.
        out.push_str(&format!("init_from = {}  # start from GPT-2's weights (fine-tuning)\n", Value::Str(name.into())));
    }
    for (key, value) in lines {
        out.push_str(&format!("{key} = {value}\n"));
    }
    if cfg.eval_only {
        out.push_str("eval_only = True  # evaluate once and exit\n");
    }
    // train.py takes vocab_size from the data's meta.pkl, 50304 without one (openwebtext, its
    // default): the data that gives this vocabulary, where nanoGPT has it, else what to look for.
    // Without it the file trained GPT-2's vocabulary: shakespeare_char's 2.6 GiB became 8.7.
    match cfg.vocab_size {
        _ if init_from.is_some() => {}
        65 => out.push_str("dataset = 'shakespeare_char'  # its meta.pkl gives vocab_size 65\n"),
        50304 => {}
        v => out.push_str(&format!("# dataset = ...  # data whose meta.pkl gives vocab_size {v} (train.py reads it there)\n")),
    }
    out.push_str("\n# vramfit's settings: stock train.py does not read these\n");
    out.push_str(&format!("vocab_size = {}  # train.py takes it from the dataset's meta.pkl (50304 without one)\n", cfg.vocab_size));
    out.push_str(&format!("eval_batch_size = {}  # None: batch_size\n", py_optional(cfg.eval_batch_size)));
    out.push_str(&format!("eval_block_size = {}  # None: block_size\n", py_optional(cfg.eval_block_size)));
    out.push_str(&format!("attention = {}  # 'flash' when PyTorch >= 2.0\n", Value::Str(cfg.attention.name().into())));
    out.push_str(&format!("activation_checkpointing = {}\n", py_bool(cfg.activation_checkpointing)));
    out.push_str(&format!("optimizer = {}\n", Value::Str(cfg.optimizer.name().into())));
    out.push_str(&format!(
        "expandable_segments = {}  # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n",
        py_bool(cfg.expandable_segments)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SHAKESPEARE_CHAR: &str = r#"# train a miniature character-level shakespeare model
# good for debugging and playing on macbooks and such

out_dir = 'out-shakespeare-char'
eval_interval = 250 # keep frequent because we'll overfit
eval_iters = 200
log_interval = 10 # don't print too too often

# we expect to overfit on this small dataset, so only save when val improves
always_save_checkpoint = False

wandb_log = False # override via command line if you like
wandb_project = 'shakespeare-char'
wandb_run_name = 'mini-gpt'

dataset = 'shakespeare_char'
gradient_accumulation_steps = 1
batch_size = 64
block_size = 256 # context of up to 256 previous characters

# baby GPT model :)
n_layer = 6
n_head = 6
n_embd = 384
dropout = 0.2

learning_rate = 1e-3 # with baby networks can afford to go a bit higher
max_iters = 5000
lr_decay_iters = 5000 # make equal to max_iters usually
min_lr = 1e-4 # learning_rate / 10 usually
beta2 = 0.99 # make a bit bigger because number of tokens per iter is small

warmup_iters = 100 # not super necessary potentially

# on macbook also add
# device = 'cpu'  # run on cpu only
# compile = False # do not torch compile the model
"#;

    const GPT2: &str = r#"# config for training GPT-2 (124M) down to very nice loss of ~2.85 on 1 node of 8X A100 40GB
# launch as the following (e.g. in a screen session) and wait ~5 days:
# $ torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2.py

wandb_log = True
wandb_project = 'owt'
wandb_run_name='gpt2-124M'

# these make the total batch size be ~0.5M
# 12 batch size * 1024 block size * 5 gradaccum * 8 GPUs = 491,520
batch_size = 12
block_size = 1024
gradient_accumulation_steps = 5 * 8

# this makes total number of tokens be 300B
max_iters = 600000
lr_decay_iters = 600000

# eval stuff
eval_interval = 1000
eval_iters = 200
log_interval = 10

# weight decay
weight_decay = 1e-1
"#;

    fn parse(text: &str) -> Result<ConfigFile, ConfigFileError> {
        parse_config_file(text, &Config::default())
    }

    /// A name assigned a value vramfit cannot read is no unknown name: a use of it says why it
    /// has no value, and an earlier value of it is not used in its place (Python would have
    /// assigned the new one).
    #[test]
    fn a_name_whose_value_could_not_be_read_says_why_where_it_is_used() {
        let err = parse("big = 10**30\nn_layer = 4 if big > 0 else 5\n").unwrap_err().to_string();
        assert!(err.ends_with("cannot read `4 if big > 0 else 5`: big has no value vramfit could read (see line 1)"), "{err}");
        let err = parse("a = 5\na = 10**30\nn_layer = a\n").unwrap_err().to_string();
        assert!(err.contains("a has no value vramfit could read (see line 2)"), "{err}");
        // A chain of them: each message points one line back, whatever the chain's length.
        let chain: String = std::iter::once("x0 = 10**30\n".to_string()).chain((1..200).map(|i| format!("x{i} = x{}\n", i - 1))).collect();
        let f = parse(&format!("{chain}max_iters = 5\n")).unwrap();
        assert!(f.notices.iter().all(|n| n.len() < 120), "{:?}", f.notices.iter().map(String::len).max());
        // A known setting's earlier value is not kept in its place either.
        let f = parse("dataset = 'mine'\ndataset = 10**30\n").unwrap();
        assert_eq!((f.get("dataset"), f.unreadable.as_slice()), (None, &["dataset".to_string()][..]));
        // Assigned again readably, it is an ordinary name.
        assert_eq!(parse("a = 10**30\na = 3\nn_layer = a\n").unwrap().config.n_layer, 3);
        // A name never assigned is still unknown.
        let err = parse("n_layer = nothing_here\n").unwrap_err().to_string();
        assert!(err.contains("unknown name nothing_here"), "{err}");
    }

    /// Statements that change a setting without a plain assignment: an augmented assignment is
    /// the assignment it amounts to; code that may set names (exec, globals(), a star import)
    /// is an error naming its line, not skipped (vramfit planned with values train.py would
    /// not use). A string that only mentions exec is a value like any other.
    #[test]
    fn settings_changed_without_a_plain_assignment_are_followed_or_refused() {
        let f =
            parse("n_layer = 4\nn_layer += 2\nn_embd = 768\nn_embd //= 2\nn_head = 2\nn_head **= 3\nbatch_size = 10\nbatch_size -= 4\n")
                .unwrap();
        assert_eq!((f.config.n_layer, f.config.n_embd, f.config.n_head, f.config.batch_size), (6, 384, 8, 6));
        for (text, line, why) in [
            ("n_layer = 4\nexec(\"n_layer = 3\")\n", 2, "may set names in code"),
            ("n_layer = 4\nglobals()['n_layer'] = 3\n", 2, "may set names in code"),
            ("n_layer = 4\nglobals().update(n_layer=3)\n", 2, "may set names in code"),
            ("from config.train_gpt2 import *\n", 1, "takes every name of another file"),
        ] {
            match parse(text) {
                Err(ConfigFileError::Syntax { line: l, reason }) => assert!(l == line && reason.contains(why), "{text}: {reason}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        let f = parse("import os\nwandb_run_name = 'exec(1)'\nn_layer = 2\n").unwrap();
        assert_eq!(f.config.n_layer, 2);
        // Code that only mentions or reads these runs as any other skipped line.
        let f =
            parse("print('call exec(x) later'); print(globals().keys())\nx = vars()\nexecution = 1\nfrom math import sqrt\nn_layer = 3\n")
                .unwrap();
        assert_eq!(f.config.n_layer, 3);
        // What may set a setting: refused wherever it is, a block's body included.
        for (text, line) in [
            ("_ = exec('n_layer = 3')\n", 1),
            ("import builtins\nbuiltins.exec('n_layer = 3')\n", 2),
            ("for k, v in overrides.items():\n    globals()[k] = v\n", 2),
            ("from config.train_gpt2 import n_layer\n", 1),
            ("from config.train_gpt2 import (batch_size, max_iters)\n", 1),
            ("from config.train_gpt2 import*\n", 1),
        ] {
            match parse(text) {
                Err(ConfigFileError::Syntax { line: l, reason }) => {
                    assert!(l == line && reason.contains("cannot follow"), "{text}: {reason}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        // In an indented block, joined statements and augmented assignments are as conditional
        // as plain ones.
        for text in ["if big:\n    n_layer = 24; n_head = 16\n", "if big:\n    n_layer += 12\n"] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.starts_with("line 2: n_layer: set inside a block"), "{text:?}: {err}");
        }
        assert_eq!(parse("if big:\n    max_iters = 10; n_layer = 2\nn_layer = 4\n").unwrap().unreadable, ["max_iters"]);
        // A chain vramfit cannot read whole is `a = <the rest>`: unreadable, an error for a
        // modelled setting, a notice otherwise.
        for text in ["n_layer = d['n_layer'] = 8\n", "n_layer = x.y = 8\n"] {
            assert!(parse(text).unwrap_err().to_string().starts_with("line 1: n_layer:"), "{text:?}");
        }
        let f = parse("f = lambda x=1: x\nn_layer = 5\n").unwrap();
        assert!(f.notices.iter().any(|n| n.starts_with("line 1: ignored f: cannot read")), "{:#?}", f.notices);
    }

    /// Valid Python the reader once refused with an error line: statements joined by `;` run
    /// in turn (not inside a string, and not the one-line body of a block), and a chained
    /// assignment gives every name the value.
    #[test]
    fn semicolons_and_chained_assignments_are_read_as_python_runs_them() {
        let f = parse("n_layer = 6; n_head = 6;\nn_embd = block_size = 384 ; out_dir = 'a;b'\n").unwrap();
        assert_eq!((f.config.n_layer, f.config.n_head, f.config.n_embd, f.config.block_size), (6, 6, 384, 384));
        assert_eq!(f.get("out_dir"), Some(&Value::Str("a;b".into())));
        // Later statements see earlier ones, on the same line too.
        let f = parse("n_layer = 4; n_layer += 2; n_head = n_layer\n").unwrap();
        assert_eq!((f.config.n_layer, f.config.n_head), (6, 6));
        // A block's one-line body is the block's, as conditional as an indented one: a setting
        // that shapes the model there is an error unless a top-level line sets it again later; a
        // train.py setting there cannot be read.
        let err = parse("if big: n_layer = 24; n_head = 16\n").unwrap_err().to_string();
        assert!(err.starts_with("line 1: n_layer: set inside a block"), "{err}");
        let f = parse("if big: n_layer += 12\nn_layer = 6\nelse: max_iters = 10\n").unwrap();
        assert_eq!(f.config.n_layer, 6);
        assert_eq!(f.unreadable, ["max_iters"]);
        assert!(f.notices.iter().any(|n| n.ends_with("(not a simple assignment)")), "{:#?}", f.notices);
        // A chain through a tuple is not read as a chain of names.
        let f = parse("out_dir = x, y = 1, 2\nn_layer = 3\n").unwrap();
        assert_eq!((f.get("out_dir"), f.config.n_layer), (None, 3));
        // A bad value in a joined statement names its line.
        let err = parse("n_layer = 4; n_head = 'six'\n").unwrap_err().to_string();
        assert!(err.starts_with("line 1: n_head:"), "{err}");
    }

    #[test]
    fn reads_shakespeare_char() {
        let f = parse(SHAKESPEARE_CHAR).unwrap();
        let c = &f.config;
        assert_eq!((c.n_layer, c.n_head, c.n_embd, c.block_size), (6, 6, 384, 256));
        assert_eq!((c.batch_size, c.gradient_accumulation_steps, c.eval_iters), (64, 1, 200));
        assert_eq!(c.dropout, 0.2);
        // vocab_size comes from the dataset's meta.pkl, as train.py reads it: 65 characters,
        // so the model is the one nanoGPT prints as 10.65M parameters.
        assert_eq!(c.vocab_size, 65);
        assert_eq!(crate::params::count(c).printed_millions(), "10.65M");
        assert_eq!(f.notices.len(), 1, "{:?}", f.notices);
        assert!(f.notices[0].contains("meta.pkl"));
        assert_eq!(f.get("learning_rate"), Some(&Value::Float(1e-3)));
        assert_eq!(f.get("max_iters"), Some(&Value::Int(5000)));
        assert_eq!(f.get("out_dir"), Some(&Value::Str("out-shakespeare-char".into())));
        assert_eq!(f.get("always_save_checkpoint"), Some(&Value::Bool(false)));
        assert_eq!(f.extra.first().map(|(k, _)| k.as_str()), Some("out_dir"));
    }

    #[test]
    fn a_dataset_names_its_vocabulary_unless_the_file_does() {
        // A vocab_size in the file wins over the dataset's meta.pkl.
        let f = parse("dataset = 'shakespeare_char'\nvocab_size = 100\n").unwrap();
        assert_eq!((f.config.vocab_size, f.notices.len(), f.vocab_from_dataset), (100, 0, None));
        // GPT-2 BPE datasets have no meta.pkl: train.py's 50304, nothing to say (a reader
        // that finds one there reads it, as train.py would).
        let f = parse("dataset = 'openwebtext'\n").unwrap();
        assert_eq!((f.config.vocab_size, f.notices.len()), (50304, 0));
        assert_eq!(f.vocab_from_dataset.as_deref(), Some("openwebtext"));
        // Any other dataset: the page cannot read its meta.pkl, and says what it assumed.
        let f = parse("dataset = 'my_chars'\n").unwrap();
        assert_eq!(f.config.vocab_size, 50304);
        assert!(f.notices[0].contains("data/my_chars/meta.pkl") && f.notices[0].contains("50304"), "{:?}", f.notices);
        assert_eq!(f.vocab_from_dataset.as_deref(), Some("my_chars"));
        // A pretrained checkpoint brings its own vocabulary.
        let f = parse("dataset = 'shakespeare_char'\ninit_from = 'gpt2'\n").unwrap();
        assert_eq!((f.config.vocab_size, f.vocab_from_dataset), (50257, None));
    }

    #[test]
    fn reads_train_gpt2_with_arithmetic() {
        let f = parse(GPT2).unwrap();
        assert_eq!(f.config.gradient_accumulation_steps, 40);
        assert_eq!(f.config, Config::default());
        assert_eq!(f.get("weight_decay"), Some(&Value::Float(0.1)));
        assert_eq!(f.get("wandb_run_name"), Some(&Value::Str("gpt2-124M".into())));
    }

    #[test]
    fn init_from_gpt2_takes_the_checkpoints_shape() {
        // nanoGPT's config/finetune_shakespeare.py.
        let text = "import time\n\nout_dir = 'out-shakespeare'\neval_interval = 5\neval_iters = 40\nwandb_log = False # feel free to turn on\nwandb_project = 'shakespeare'\nwandb_run_name = 'ft-' + str(time.time())\n\ndataset = 'shakespeare'\ninit_from = 'gpt2-xl' # this is the largest GPT-2 model\n\n# only save checkpoints if the validation loss improves\nalways_save_checkpoint = False\n\n# the number of examples per iter:\n# 1 batch_size * 32 grad_accum * 1024 tokens = 32,768 tokens/iter\n# shakespeare has 301,966 tokens, so 1 epoch ~= 9.2 iters\nbatch_size = 1\ngradient_accumulation_steps = 32\nmax_iters = 20\n\n# finetune at constant LR\nlearning_rate = 3e-5\ndecay_lr = False\n";
        let f = parse(text).unwrap();
        let c = &f.config;
        assert_eq!((c.n_layer, c.n_head, c.n_embd, c.vocab_size, c.block_size), (48, 25, 1600, 50257, 1024));
        assert!(c.bias);
        assert_eq!((c.batch_size, c.gradient_accumulation_steps, c.eval_iters), (1, 32, 40));
        assert_eq!(f.notices.len(), 3, "{:#?}", f.notices);
        // What changes the model comes first, before the skipped lines.
        assert!(f.notices[0].starts_with("init_from = 'gpt2-xl'"), "{:#?}", f.notices);

        let f = parse("block_size = 256\nn_layer = 2\ninit_from = 'gpt2'").unwrap();
        assert_eq!((f.config.n_layer, f.config.block_size), (12, 256));
        assert_eq!(parse("init_from = 'scratch'\nn_layer = 2").unwrap().config.n_layer, 2);
        // A block past the checkpoint's positions and an eval context past the crop are said,
        // not planned silently at 1024; an init_from that is not a name is said too.
        let f = parse("init_from = 'gpt2'\nblock_size = 2048\neval_block_size = 1536\n").unwrap();
        assert_eq!((f.config.block_size, f.config.eval_block_size), (1024, None));
        assert!(f.notices.iter().any(|n| n.contains("block_size 2048 is past GPT-2's 1024 positions")), "{:#?}", f.notices);
        assert!(
            f.notices.iter().any(|n| n == "eval_block_size 1536 is past the block of 1024: evaluated at block_size"),
            "{:#?}",
            f.notices
        );
        let f = parse("init_from = 5\n").unwrap();
        assert!(f.notices.iter().any(|n| n.starts_with("init_from = 5 is not a name")), "{:#?}", f.notices);
        // So is a dataset that is not a name (train.py's os.path.join stops on it), even where a
        // checkpoint gives the vocabulary; a name is not.
        for text in ["dataset = 5\n", "dataset = None\ninit_from = 'gpt2'\n"] {
            let f = parse(text).unwrap();
            assert!(f.notices.iter().any(|n| n.starts_with("dataset = ") && n.contains(TRAIN_PY_WOULD_STOP)), "{text}: {:#?}", f.notices);
        }
        let f = parse("dataset = 'openwebtext'\n").unwrap();
        assert!(!f.notices.iter().any(|n| n.contains(TRAIN_PY_WOULD_STOP)), "{:#?}", f.notices);
    }

    /// train.py looks dtype up in a dict of three names: the spellings vramfit's flags take
    /// (`fp16`, `bf16`) are its KeyError in a config file; a later line may still replace it.
    #[test]
    fn a_dtype_train_py_does_not_name_is_refused() {
        for name in ["fp16", "bf16", "Float16", "half"] {
            let err = parse(&format!("dtype = '{name}'\n")).unwrap_err().to_string();
            assert!(err.contains(&format!("'{name}' is not one of train.py's names")) && err.ends_with("(a KeyError)"), "{err}");
        }
        assert_eq!(parse("dtype = 'fp16'\ndtype = 'float16'\n").unwrap().config.dtype, Dtype::Float16);
    }

    #[test]
    fn unsupported_lines_are_notices() {
        let text = "import time\nout_dir = 'out'\nwandb_run_name = 'mini-gpt' + str(time.time())\nfoo = 3\nif foo:\n    n_layer = 2\nn_layer = foo + 1\n";
        let f = parse(text).unwrap();
        assert_eq!(f.config.n_layer, 4);
        assert_eq!(f.notices.len(), 4, "{:#?}", f.notices);
        assert!(f.notices[0].starts_with("line 1: skipped `import time`"));
        assert!(f.notices[1].starts_with("line 3: ignored wandb_run_name: cannot read"), "{}", f.notices[1]);
        // foo is not nanoGPT's, but line 7 uses its value: not ignored. One nothing reads is.
        assert!(!f.notices.iter().any(|n| n.contains("ignored foo")), "{:#?}", f.notices);
        let unused = parse("foo = 3\nn_layer = 4\nbar = 1\nn_head = bar\nbar = 2\nbaz = 1\nbaz = 2\nn_embd = baz * 384\n").unwrap();
        let ignored: Vec<&String> = unused.notices.iter().filter(|n| n.contains(": ignored ")).collect();
        // baz's first value is never read: the line after it assigns it again.
        assert_eq!(
            ignored,
            [
                "line 1: ignored foo: not a nanoGPT setting vramfit knows",
                "line 5: ignored bar: not a nanoGPT setting vramfit knows",
                "line 6: ignored baz: not a nanoGPT setting vramfit knows"
            ]
        );
        assert_eq!(f.get("out_dir"), Some(&Value::Str("out".into())));
        assert_eq!(f.get("wandb_run_name"), None);
        // The first line that is not an assignment (imports do not count) is kept: with nothing
        // recognised it marks a file that is not a config file at all.
        assert_eq!(f.first_statement, Some((5, "if foo:".to_string())));
        assert!(f.recognised);
        let prose = parse("# a note\nimport os\nJust some words.\nfoo = 3\n").unwrap();
        assert!(!prose.recognised);
        assert_eq!(prose.first_statement, Some((3, "Just some words.".to_string())));
        let other = parse("import os\nfoo = 3\n").unwrap();
        assert!(!other.recognised && other.first_statement.is_none());
    }

    #[test]
    fn settings_inside_blocks_are_not_silently_defaults() {
        // A modelled setting only assigned inside a block: an error naming its line.
        let err = parse("n_embd = 384\nif big:\n    n_layer = 24\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 3: n_layer: set inside a block (if, for, while, with, try), which vramfit does not run: move it to the top level"
        );
        // A training setting only assigned inside a block: unreadable, so `train` refuses it.
        let f = parse("if True:\n    learning_rate = 5\n").unwrap();
        assert_eq!(f.unreadable, ["learning_rate"]);
        assert_eq!(f.notices.len(), 2, "{:#?}", f.notices);
        // Assigned again at the top level afterwards: the last assignment wins, as in Python.
        let f = parse("if x:\n    learning_rate = 5\n    n_layer = 2\nlearning_rate = 1e-3\nn_layer = 3\n").unwrap();
        assert!(f.unreadable.is_empty(), "{:?}", f.unreadable);
        assert_eq!((f.config.n_layer, f.get("learning_rate")), (3, Some(&Value::Float(1e-3))));
        // A huge literal is quoted cut short in the error.
        let err = parse(&format!("n_layer = {}\n", "1".repeat(100_000))).unwrap_err().to_string();
        assert!(err.len() < 200 && err.contains("is too large"), "{} bytes: {}", err.len(), &err[..200.min(err.len())]);
        // The same holds for a value that could not be read and is then set readably.
        assert!(parse("max_iters = foo\nmax_iters = 10\n").unwrap().unreadable.is_empty());
        // init_from decides the model's shape: in a block it is an error too.
        let err = parse("for i in range(2):\n    init_from = 'gpt2-xl'\n").unwrap_err();
        assert!(err.to_string().starts_with("line 2: init_from: set inside a block"), "{err}");
        // Indented lines that are not in a conditional block stay notices: a call's continued
        // arguments, a string, a function's local variable.
        for text in ["wandb_config = dict(\n    n_layer=4,\n)\n", "\"\"\"\n    n_layer = 3\n\"\"\"\n", "def f():\n    n_layer = 3\n"] {
            let f = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(f.config.n_layer, Config::default().n_layer, "{text:?}");
            assert!(f.unreadable.is_empty(), "{text:?}");
        }
    }

    /// A block of settings "commented out" in a triple-quoted string is text: Python runs none
    /// of it, so neither does vramfit (once it applied `n_layer = 99` from inside one).
    #[test]
    fn lines_inside_triple_quoted_strings_are_not_run() {
        for quote in ["\"\"\"", "'''"] {
            let text = format!("n_embd = 384\nold = {quote}\nn_layer = 99\nbatch_size = 1 # {quote}\nn_head = 3\n");
            let f = parse(&text).unwrap();
            assert_eq!((f.config.n_layer, f.config.batch_size, f.config.n_head), (12, 12, 3), "{quote}");
            let skipped = "lines 3-4: skipped: inside a triple-quoted string, which Python does not run";
            assert!(f.notices.iter().any(|n| n == skipped), "{:#?}", f.notices);
        }
        // A docstring at the top: skipped, and not the mark of a file that is not config.
        let f = parse("\"\"\"GPT-2 small on 12 GB.\nn_layer = 99\n\"\"\"\nn_layer = 6\n").unwrap();
        assert_eq!((f.config.n_layer, f.first_statement.clone()), (6, None));
        assert!(f.notices.iter().any(|n| n.starts_with("lines 2-3: skipped: inside a triple-quoted string")), "{:#?}", f.notices);
        // Opened and closed on one line, or quoted inside another string or a comment: nothing opens.
        for text in ["s = \"\"\"one line\"\"\"\nn_layer = 4\n", "s = '\"\"\"'\nn_layer = 4\n", "# a \"\"\" in a comment\nn_layer = 4\n"] {
            assert_eq!(parse(text).unwrap().config.n_layer, 4, "{text:?}");
        }
        // Never closed: Python refuses the whole file, so that is an error naming where it opens.
        for text in ["n_layer = 4\nx = '''\nn_layer = 99\nn_head = 1\n", "n_layer = 4\nx = '''"] {
            let err = parse(text).unwrap_err().to_string();
            assert_eq!(err, "line 2: a triple-quoted string opens here and is never closed (Python would refuse the file)");
        }
        // Closed, and one of the other quote opened on the same line: the lines after are text too.
        let f = parse("a = \"\"\"\nx\n\"\"\" + '''\nn_layer = 99\n'''\nn_layer = 6\n").unwrap();
        assert_eq!(f.config.n_layer, 6);
        // A statement after a `;` on the closing line: Python runs it, so it is an error, not
        // skipped with the string. A `;` inside a string or a comment there is not one.
        for quote in ["\"\"\"", "'''"] {
            let err = parse(&format!("x = {quote}\nabc\n{quote}; n_layer = 4\n")).unwrap_err().to_string();
            assert_eq!(
                err,
                "line 3: `n_layer = 4` follows the closing triple quote after a `;`: vramfit does not read that (put it on a line of its own)"
            );
            for fine in [
                format!("{quote}.strip() # ; n_layer = 4"),
                format!("{quote} + ';'"),
                format!("{quote};"),
                format!("{quote}; # n_layer = 4"),
            ] {
                let f = parse(&format!("x = {quote}\nabc\n{fine}\nn_layer = 6\n")).unwrap();
                assert_eq!(f.config.n_layer, 6, "{fine}");
            }
        }
        // Closed, a statement, and the same quote opened again: Python still runs the statement.
        let err = parse("x = \"\"\"\nabc\n\"\"\"; n_layer = 4; y = \"\"\"\ndef\n\"\"\"\n").unwrap_err().to_string();
        assert!(err.starts_with("line 3: `n_layer = 4; y = \"\"\"` follows the closing triple quote"), "{err}");
        // An escaped quote does not close the string.
        assert!(parse("x = '''\nabc \\'''; n_layer = 4\n'''\nn_layer = 6\n").is_ok());
    }

    /// Unpacking and annotated assignments set what Python would set; once they were skipped
    /// with a notice, and `train` ran on the defaults in their place.
    #[test]
    fn tuple_and_annotated_assignments() {
        let text = "n_layer, n_head = 4, 4\n(n_embd, block_size) = (256, 128)\nlearning_rate, max_iters = 1e-3, 5\nwarmup_iters: int = 7\nbatch_size: int = 3\n";
        let f = parse(text).unwrap();
        let c = &f.config;
        assert_eq!((c.n_layer, c.n_head, c.n_embd, c.block_size, c.batch_size), (4, 4, 256, 128, 3));
        assert_eq!(f.get("learning_rate"), Some(&Value::Float(1e-3)));
        assert_eq!((f.get("max_iters"), f.get("warmup_iters")), (Some(&Value::Int(5)), Some(&Value::Int(7))));
        assert!(f.notices.is_empty(), "{:#?}", f.notices);
        // Every value is read before any is assigned: a swap swaps.
        let f = parse("batch_size = 4\neval_iters = 8\nbatch_size, eval_iters = eval_iters, batch_size\n").unwrap();
        assert_eq!((f.config.batch_size, f.config.eval_iters), (8, 4));
        // Values that cannot be told: an error for a modelled setting, unreadable for a training one.
        let err = parse("n_layer, n_head = sizes()\n").unwrap_err();
        assert_eq!(err.to_string(), "line 1: n_layer: cannot unpack `sizes()` into 2 names");
        let f = parse("max_iters, lr = schedule\n").unwrap();
        assert_eq!(f.unreadable, ["max_iters"]);
        // One name unpacks only a display of one item; a bare value is Python's TypeError.
        for text in
            ["n_layer, = 4,\n", "n_layer, = (4,)\n", "[n_layer] = [4]\n", "(n_layer,) = [4]\n", "(n_layer) = 4\n", "n_layer, = ((4,))\n"]
        {
            assert_eq!(parse(text).unwrap().config.n_layer, 4, "{text:?}");
        }
        let f = parse("n_layer, n_head = ((4, 2))\n((n_embd, block_size)) = [64, 32]\n").unwrap();
        assert_eq!((f.config.n_layer, f.config.n_head, f.config.n_embd, f.config.block_size), (4, 2, 64, 32));
        assert!(parse("n_layer, = [(4,)]\n").is_err(), "a tuple is no layer count");
        for text in ["n_layer, = 4\n", "n_layer, = (4)\n", "[n_layer] = 4\n", "n_layer, = 4, 5\n", "n_layer, n_head = ()\n"] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.starts_with("line 1: n_layer: cannot unpack `"), "{text:?}: {err}");
        }
        assert_eq!(parse("n_layer, = 4\n").unwrap_err().to_string(), "line 1: n_layer: cannot unpack `4` into 1 name");
        // In a conditional block, unpacking a shaping setting is the same error as assigning it.
        let err = parse("if big:\n    n_layer, n_head = 24, 16\n").unwrap_err();
        assert!(err.to_string().starts_with("line 2: n_layer: set inside a block"), "{err}");
        // Not assignments: comparisons, attributes, a bare annotation, and a keyword's block on
        // one line (not a name with an annotation). (An augmented assignment is one: see below.)
        for text in ["n_layer == 4\n", "cfg.n_layer = 4\n", "n_layer: int\n", "n_layer <= 4\n", "else: wandb_x = 4\n"] {
            let f = parse(text).unwrap();
            assert_eq!(f.config.n_layer, 12, "{text:?}");
            assert!(!f.recognised, "{text:?}");
        }
        // Brackets inside strings do not count: `(')', 1)` is two values.
        let f = parse("out_dir, n_layer = (')', 4)\n").unwrap();
        assert_eq!((f.get("out_dir"), f.config.n_layer), (Some(&Value::Str(")".into())), 4));
        let f = parse("else: wandb_x = 4\n").unwrap();
        assert!(f.notices[0].ends_with("(not a simple assignment)"), "{:#?}", f.notices);
    }

    #[test]
    fn quoted_lines_cannot_reshape_the_message() {
        let f = parse("n_layer = 4\nfoo bar \u{202e}baz\nwandb_run_name = \u{2067}x\n").unwrap();
        assert_eq!(f.notices.len(), 2, "{:#?}", f.notices);
        assert!(f.notices.iter().all(|n| !n.chars().any(crate::reshapes_text)), "{:#?}", f.notices);
    }

    #[test]
    fn vramfit_keys_and_expressions() {
        let text = "eval_batch_size = 4\neval_block_size = block_size // 2\nattention = \"manual\"\nactivation_checkpointing = True\noptimizer = 'sgd'\nexpandable_segments = 1\nn_embd = (64 + 0) * 12\ndropout = 1e-1\nbias = False\ncompile = False\ndtype = 'float16'\neval_iters = 2 ** 4 - -4 % 3";
        let c = parse(text).unwrap().config;
        assert_eq!((c.eval_batch_size, c.eval_block_size), (Some(4), Some(512)));
        assert_eq!(c.attention, Attention::Manual);
        assert!(c.activation_checkpointing && c.expandable_segments && !c.compile && !c.bias);
        assert_eq!(c.optimizer, Optimizer::Sgd);
        assert_eq!((c.n_embd, c.dropout, c.dtype), (768, 0.1, Dtype::Float16));
        // Python: 2**4 - (-4 % 3) = 16 - 2.
        assert_eq!(c.eval_iters, 14);
        // A string repeated by an integer or a bool, either way round, as Python does; string
        // formatting is said to be unread, not to be an error of types.
        let c = parse("dtype = 'float16' * 1\nattention = 'manual' * True + 0 * 'x'\n").unwrap_or_else(|e| panic!("{e}")).config;
        assert_eq!((c.dtype, c.attention), (Dtype::Float16, Attention::Manual));
        assert_eq!(parse("out_dir = 'ab' * 3").unwrap().get("out_dir"), Some(&Value::Str("ababab".into())));
        assert_eq!(parse("out_dir = 'ab' * -2").unwrap().get("out_dir"), Some(&Value::Str(String::new())));
        let err = parse("dtype = 'float%d' % 16").unwrap_err().to_string();
        assert!(err.contains("does not evaluate Python's string formatting"), "{err}");
        assert!(parse("dtype = 'x' * 10**9").is_err());
    }

    /// A name a block vramfit does not run may set has no known value after it: a later line
    /// reading it is refused, where it once read the value from before the block (a
    /// differential fuzz against Python found these). Names set at the top level again, names
    /// only a function sets locally, and train.py's own defaults read as Python reads them.
    /// A modelled setting Python cannot evaluate either says which error train.py stops on; a
    /// keyword where a value goes refuses the file, as Python does even where it would skip it.
    #[test]
    fn a_setting_python_cannot_evaluate_names_its_error() {
        let base = Config::default();
        let err = parse_config_file("n_layer = foo\n", &base).unwrap_err().to_string();
        assert!(err.ends_with("unknown name foo (a NameError): train.py would stop"), "{err}");
        let err = parse_config_file("n_layer = 6 or if\n", &base).unwrap_err().to_string();
        assert!(err.contains("`if` where a value goes (Python would refuse the file)"), "{err}");
        // What Python skips may not be readable: the value is what Python reads.
        assert_eq!(parse_config_file("n_layer = 6 or foo\n", &base).unwrap().config.n_layer, 6);
        assert_eq!(parse_config_file("n_layer = 0 and 1 / 0 or 7\n", &base).unwrap().config.n_layer, 7);
    }

    /// A top-level `del` of plain names unbinds them as Python does: a name not bound is a
    /// NameError there, a later read of a deleted one too, and a setting of train.py's left
    /// deleted makes train.py's `config = {k: globals()[k] ...}` raise a KeyError.
    #[test]
    fn del_unbinds_names() {
        let stops = |text: &str, error: &str| {
            let f = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert!(f.notices.iter().any(|n| n.contains(error) && n.ends_with(TRAIN_PY_WOULD_STOP)), "{text:?}: {:?}", f.notices);
        };
        stops("del undefined\nn_layer = 4\n", "unknown name undefined (a NameError)");
        stops("del len\nn_layer = 4\n", "unknown name len (a NameError)");
        stops("x = 1\ndel x, y\nn_layer = 4\n", "unknown name y (a NameError)");
        stops("x = 1\ndel x\ndel x\nn_layer = 4\n", "unknown name x (a NameError)");
        stops("n_layer = 4\ndel n_layer\n", "n_layer is not set again");
        stops("del max_iters\nn_layer = 4\n", "(a KeyError)");
        let err = parse("x = 3\ndel x\nn_layer = x\n").unwrap_err().to_string();
        assert!(err.contains("unknown name x (a NameError): train.py would stop"), "{err}");
        // Bound again, or perhaps bound: no claim.
        for (text, n_layer) in [
            ("n_layer = 4\ndel n_layer\nn_layer = 6\n", 6),
            ("del learning_rate\nn_layer = 4\nlearning_rate = 1e-3\n", 4),
            ("x = 1\ndel x\nx = 2\nn_layer = x\n", 2),
            ("import os\ndel os\nn_layer = 4\n", 4),
            ("vocab_size = 65\ndel vocab_size\nn_layer = 4\n", 4),
            ("if big:\n    x = 1\ndel x\nn_layer = 4\n", 4),
            ("del __name__\nn_layer = 3\n", 3),
        ] {
            let f = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(f.config.n_layer, n_layer, "{text:?}");
            assert!(!f.notices.iter().any(|n| n.ends_with(TRAIN_PY_WOULD_STOP) && !n.contains("big")), "{text:?}: {:?}", f.notices);
        }
        // Other targets are skipped as before.
        let f = parse("d = 1\ndel d[0]\nn_layer = 4\n").unwrap();
        assert!(f.notices.iter().any(|n| n.ends_with("(not a simple assignment)")), "{:?}", f.notices);
    }

    #[test]
    fn names_a_block_may_set_are_not_read_with_their_old_values() {
        for (text, key, line, name) in [
            ("scale = 1\nif True:\n    scale = 2\nn_layer = 6 * scale\n", "n_layer", 4, "scale"),
            ("if True:\n    n_layer = 24\nn_layer += 2\n", "n_layer", 3, "n_layer"),
            ("k = 1\nfor i in range(3):\n    k = k * 2\nbatch_size = k\n", "batch_size", 4, "k"),
            ("max_iters = 5000\nif True:\n    max_iters = 100\neval_iters = max_iters // 25\n", "eval_iters", 4, "max_iters"),
            ("if True:\n    bias = True\nbias = not bias\n", "bias", 3, "bias"),
            ("k = 1\ntry:\n    k = 8\nexcept Exception:\n    pass\nbatch_size = k\n", "batch_size", 6, "k"),
            ("k = 4\nif big: k = 8\nbatch_size = k\n", "batch_size", 3, "k"),
            ("for n_layer_i in range(3): pass\nn_layer = n_layer_i\n", "n_layer", 2, "n_layer_i"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("line {line}: {key}: ")) && err.contains(&format!("{name} may be set at line")),
                "{text:?}: {err}"
            );
        }
        for (text, n_layer) in [
            ("if True:\n    n_layer = 24\nn_layer = 6\nn_embd = n_layer * 64\nn_head = 6\n", 6),
            ("scale = 2\nif False:\n    other = 1\nn_layer = 6 * scale\n", 12),
            ("def f():\n    scale = 5\n    return scale\nscale = 2\nn_layer = 6 * scale\n", 12),
            ("n_layer = max_iters // 100000 + warmup_iters // 1000\n", 8),
        ] {
            assert_eq!(parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}")).config.n_layer, n_layer, "{text:?}");
        }
        // An unreadable value leaves no default behind: train.py's 600000 is not max_iters then.
        let err = parse("max_iters = int(5000)\neval_iters = max_iters // 3000\n").unwrap_err().to_string();
        assert!(err.starts_with("line 2: eval_iters: ") && err.contains("max_iters has no value vramfit could read (see line 1)"), "{err}");
        // vramfit's own settings are no train.py globals: read before set, Python stops.
        let err = parse("block_size = 256 if vocab_size > 1000 else 64\n").unwrap_err().to_string();
        assert!(err.contains("unknown name vocab_size"), "{err}");
        assert_eq!(parse("vocab_size = 65\nblock_size = 256 if vocab_size > 1000 else 64\n").unwrap().config.block_size, 64);
        // ` as ` inside a string binds nothing; outside one it does.
        assert_eq!(parse("scale = 2\nprint('seen as scale')\nn_layer = 6 * scale\n").unwrap().config.n_layer, 12);
        assert!(parse("scale = 2\nwith open('f') as scale: pass\nn_layer = 6 * scale\n").is_err());
        // A no-break space outside strings and comments (Python's invalid non-printable
        // character); inside a string or a comment it is text.
        for text in ["n_layer = 4\u{a0}# comment\n", "batch_size = 8\n\u{a0}n_layer = 4\n"] {
            assert!(parse(text).unwrap_err().to_string().contains("U+00A0"), "{text:?}");
        }
        assert_eq!(parse("out_dir = 'a\u{a0}b' # \u{a0}\nn_layer = 4\n").unwrap().config.n_layer, 4);
        // A function that writes globals() when called.
        assert!(parse("def f():\n    globals()['n_layer'] = 4\nf()\nbatch_size = 8\n").is_err());
        // A name nothing defines, in a line vramfit does not use itself: Python's NameError, so
        // train.py would stop (`plan` refuses such notices); a builtin's call is only unread.
        for (text, error) in [
            ("lr_decay_iters = eval_batch_size\nn_layer = 4\n", "(a NameError)"),
            ("x = y + 1\nn_layer = 4\n", "(a NameError)"),
            ("max_iters = 1 // 0\nn_layer = 4\n", "(a ZeroDivisionError)"),
            ("if y > 3:\n    pass\nn_layer = 4\n", "(a NameError)"),
            ("if big: x = 1\nn_layer = 4\n", "(a NameError)"),
            ("n_layer = 4\nassert n_layer > 6, 'too shallow'\n", "the assertion fails (an AssertionError)"),
            ("assert(n_embd % 7 == 0)\nn_layer = 4\n", "the assertion fails (an AssertionError)"),
            ("assert big\nn_layer = 4\n", "(a NameError)"),
            ("if n_layer > 50:\n    x = 1\nelif big:\n    x = 2\nn_layer = 4\n", "(a NameError)"),
            ("if False: x = 1\nelif 0:\n    x = 2\n# note\nelif 1 / 0: pass\nn_layer = 4\n", "(a ZeroDivisionError)"),
            // The body of a branch that runs for sure: an `if` read as true, an `else` after
            // conditions read as false, a one-line body.
            ("if compile:\n    n_head = base\nn_head = 4\n", "(a NameError)"),
            ("if dtype == 'x':\n    k = 1\nelif n_layer < 2:\n    k = 2\nelse:\n    j = j\n", "(a NameError)"),
            ("if not False:\n    block_size = eval_batch_size % 33\nblock_size = 17\n", "(a NameError)"),
            ("if True: y = 1; x = z\nn_layer = 4\n", "(a NameError)"),
            // A guard Python does not evaluate past: only what it runs raises.
            ("warm = 0\nassert warm != 0 and max_iters % warm == 0\nn_layer = 4\n", "the assertion fails (an AssertionError)"),
            ("x = 1 if False else big\nn_layer = 4\n", "(a NameError)"),
            // Zero to a negative power is Python's ZeroDivisionError (QA: "number too large").
            ("x = dropout ** -1\nn_layer = 4\n", "(a ZeroDivisionError)"),
            // A keyword where a value goes is Python's SyntaxError, skipped or not.
            ("assert 6 or if\nn_layer = 4\n", "(a SyntaxError)"),
            ("if 1:\n    x = 3 % 0\n", "(a ZeroDivisionError)"),
            // Operators Python has no meaning for between the operands' types.
            ("x = 1 + 'a'\nn_layer = 4\n", "(a TypeError)"),
            ("x = None * 2\nn_layer = 4\n", "(a TypeError)"),
            ("x = dataset - 1\nn_layer = 4\n", "(a TypeError)"),
            ("x = 'ab' * 2.0\nn_layer = 4\n", "(a TypeError)"),
            ("x = -'a'\nn_layer = 4\n", "(a TypeError)"),
            ("assert n_layer < 'deep'\nn_layer = 4\n", "(a TypeError)"),
            ("x = None < None\nn_layer = 4\n", "(a TypeError)"),
            // A float power that overflows; other float operations give inf (not read, no stop).
            ("x = 2.0 ** 1024\nn_layer = 4\n", "(an OverflowError)"),
            ("x = 2 ** 1024.0\nn_layer = 4\n", "(an OverflowError)"),
            ("x = (-1.5) ** 2001\nn_layer = 4\n", "(an OverflowError)"),
        ] {
            let f = parse(text).unwrap();
            assert!(f.notices.iter().any(|n| n.contains(error) && n.ends_with(TRAIN_PY_WOULD_STOP)), "{text:?}: {:?}", f.notices);
        }
        // A condition vramfit can read, or one on a name an import set: no such notice.
        // An `elif` after a condition that holds (or one vramfit cannot read) is not evaluated.
        for text in [
            "if n_layer > 3:\n    pass\nn_layer = 4\n",
            "import os\nif os.environ:\n    pass\nn_layer = 4\n",
            "if n_layer > 3:\n    x = 1\nelif big:\n    x = 2\nn_layer = 4\n",
            "import os\nif os.environ:\n    x = 1\nelif big:\n    x = 2\nn_layer = 4\n",
            "if False:\n    x = 1\nn_layer = 4\nif True: pass\nelif big: pass\n",
            // A body that may not run, or a line vramfit cannot tell the names of.
            "if False:\n    x = big\nn_layer = 4\n",
            "if n_layer > 3:\n    pass\nelse:\n    x = big\n",
            "import os\nif os.environ:\n    x = big\n",
            "if True:\n    k = 1\n    x = k\n",
            "if True:\n    for i in range(0):\n        x = big\n",
            "if True:\n    try:\n        x = big\n    except NameError:\n        pass\n",
            "for i in range(0):\n    x = big\nelse:\n    pass\n",
            // What one statement of a one-line body binds, the next may read (QA: refused).
            "if dtype == 'bfloat16': scale = 2; lr = 6e-4 * scale\nn_layer = 4\n",
            "if False: pass\nelse: k = 2; x = k\n",
            // What Python skips is not evaluated: a guard, a branch not taken, a failed chain.
            "warm = 0\nassert warm == 0 or max_iters % warm == 0\nn_layer = 4\n",
            "if n_layer > 50:\n    pass\nelif True or big:\n    pass\n",
            "if True:\n    x = 1 if True else big\n",
            "x = 0 and 1 / 0\ny = 1 > 2 > big\nn_layer = 4\n",
            // Names train.py's globals have where it runs the file, and Python's builtins.
            "if __name__ == '__main__':\n    pass\nx = config_file\ny = os\nn_layer = 4\n",
            "x = sorted\nassert callable\nif Exception:\n    pass\nn_layer = 4\n",
            // Operators Python does apply between these types.
            "x = 'a' * 3 + 'b'\ny = True + 1.5\nz = -True\nw = 1 < 2.5 < True + 2\nn_layer = 4\n",
            "x = 'a' == 1\ny = None != None\nz = dataset != None\nw = 'a' < 'b'\nn_layer = 4\n",
            "x = 0 and 'a' + 1\ny = 1 if True else -'a'\nn_layer = 4\n",
            "x = 1e308 * 10\ny = 2.0 ** -2000\nz = 2 ** 1024\nw = 0.5 ** 1100\nn_layer = 4\n",
        ] {
            let f = parse(text).unwrap();
            assert!(!f.notices.iter().any(|n| n.contains(TRAIN_PY_WOULD_STOP)), "{text:?}: {:?}", f.notices);
        }
        // An assertion that holds is read, not skipped; one vramfit cannot evaluate (an
        // imported module's value) is skipped as before.
        let f = parse("n_layer = 4\nassert n_embd % n_head == 0, f'{n_embd} by {n_head}'\n").unwrap();
        assert!(f.notices.is_empty(), "{:?}", f.notices);
        // A name an assertion binds (`:=`) is set, not undefined, after it.
        let f = parse("assert (k := 5) > 0\nx = k\nn_layer = 4\n").unwrap();
        assert!(!f.notices.iter().any(|n| n.contains(TRAIN_PY_WOULD_STOP)), "{:?}", f.notices);
        let f = parse("import os\nassert os.path.exists('data')\nn_layer = 4\n").unwrap();
        assert!(f.notices.iter().all(|n| !n.contains(TRAIN_PY_WOULD_STOP)), "{:?}", f.notices);
        assert!(f.notices.iter().any(|n| n.ends_with("(not a simple assignment)")), "{:?}", f.notices);
        for text in
            ["x = int(3)\nn_layer = 4\n", "import math\nx = math.pi\nn_layer = 4\n", "a = 1\nif a:\n    y = 1\nx = y\nn_layer = 4\n"]
        {
            let f = parse(text).unwrap();
            assert!(!f.notices.iter().any(|n| n.contains(TRAIN_PY_WOULD_STOP)), "{text:?}: {:?}", f.notices);
        }
    }

    /// Float `%` and `//` as CPython's float divmod gives them, and comparisons between an
    /// integer and a float done exactly (the values are Python 3.12's).
    #[test]
    fn float_division_and_mixed_comparisons_follow_python() {
        let float = |expr: &str| match parse(&format!("learning_rate = {expr}\n")).unwrap().get("learning_rate") {
            Some(Value::Float(x)) => *x,
            other => panic!("{expr}: {other:?}"),
        };
        for (expr, python) in [
            ("1 % 0.1", 0.09999999999999995),
            ("1 // 0.1", 9.0),
            ("-7 // 2.0", -4.0),
            ("7 % -3.0", -2.0),
            ("-7.5 % 2", 0.5),
            ("5.5 // -2", -3.0),
            ("1e300 % 7.0", 1.0),
        ] {
            assert_eq!(float(expr).to_bits(), f64::to_bits(python), "{expr}: {}", float(expr));
        }
        assert!(float("0.0 % -1.0").is_sign_negative(), "Python: -0.0");
        let truth = |expr: &str| parse(&format!("n_layer = 4 if {expr} else 6\n")).unwrap().config.n_layer == 4;
        for (expr, python) in [
            ("2**53 + 1 > 2.0**53", true),
            ("2**53 + 1 == 2.0**53", false),
            ("3 < 3.5", true),
            ("True < 1.5", true),
            ("1 // 0.1 == 9", true),
        ] {
            assert_eq!(truth(expr), python, "{expr}");
        }
    }

    #[test]
    fn bad_modelled_values_are_errors_with_line_numbers() {
        let cases = [
            ("n_layer = 'x'", 1, "n_layer"),
            ("\n\ndtype = 'float8'", 3, "dtype"),
            ("batch_size = 0", 1, "batch_size"),
            ("batch_size = 12.0", 1, "batch_size"),
            ("n_layer = some_name", 1, "n_layer"),
            ("dropout = 1.0", 1, "dropout"),
            ("compile = 'yes'", 1, "compile"),
            ("n_layer = 2 ** 99", 1, "n_layer"),
            ("attention = 'fast'", 1, "attention"),
            ("eval_block_size = None\nn_layer = len('abc')", 2, "n_layer"),
        ];
        for (text, line, key) in cases {
            let err = parse(text).unwrap_err();
            let msg = err.to_string();
            assert!(msg.starts_with(&format!("line {line}: {key}: ")), "{text:?} -> {msg}");
            assert!(!msg.contains('\n'), "{msg}");
        }
        let err = parse("n_embd = 768\n# comment\nn_head = 7\n").unwrap_err();
        assert_eq!(err.to_string(), "line 3: n_embd (768) must be divisible by n_head (7)");
        let err = parse("block_size = 128\neval_block_size = 256").unwrap_err();
        assert!(err.to_string().starts_with("line 2: "), "{err}");
    }

    #[test]
    fn comments_strings_and_escapes() {
        let f = parse("out_dir = 'a#b' # comment\nwandb_project = \"it's\"\ndataset='x\\'y'").unwrap();
        assert_eq!(f.get("out_dir"), Some(&Value::Str("a#b".into())));
        assert_eq!(f.get("wandb_project"), Some(&Value::Str("it's".into())));
        assert_eq!(f.get("dataset"), Some(&Value::Str("x'y".into())));
    }

    /// String escapes decode as Python decodes them (`\x41`, `\101`, `\0` were once kept as
    /// written, and `'out\x'` accepted); the ones Python refuses, and the ones vramfit cannot
    /// hold or decode, are errors naming the line, never a value kept as written.
    /// Cases a differential run against Python found where vramfit kept another value than
    /// Python's, silently, or planned a file Python refuses. Each now reads as Python does or
    /// is an error naming its line.
    #[test]
    fn files_read_as_python_binds_them() {
        // Line ends as Python's `open` reads them, a form feed, a first line of a lone backslash.
        for text in ["#\rn_layer = 3\n", "n_layer = 1\r\nn_layer = 3\r", "x = 1\n\u{c}n_layer = 3\n", "n_layer = 2\n\\\nn_layer = 3\n"] {
            let f = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(f.config.n_layer, 3, "{text:?}: {:#?}", f.notices);
        }
        // Bound other than by `name = value`: an error for a setting that changes the answer.
        for (text, why) in [
            ("n_layer = 6\nn_layer >>= 1\n", "n_layer: cannot read"),
            ("n_layer = 6\nn_layer |= 1\n", "n_layer: cannot read"),
            ("n_layer = 2\nx = (n_layer := 4)\n", "n_layer: assigned with `:=`"),
            ("n_layer = 2\nfor n_layer in [4]: pass\n", "n_layer: the target of a for loop"),
            ("n_layer = 2\nwith open('f') as n_layer: pass\n", "n_layer: bound by `as`"),
            ("n_layer = 2\nn_layer, *rest = 4, 1\n", "n_layer: a target of an unpacking"),
            ("n_layer = 2\nn_head, (n_layer, x) = 3, (1, 2)\n", "n_head: a target of an unpacking"),
            ("def f():\n    global n_layer\n    n_layer = 3\nf()\n", "n_layer: declared global"),
            ("n_layer = 2\nmatch 1:\n    case 1:\n        n_layer = 4\n", "n_layer: set inside a block"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(why), "{text:?}: {err}");
        }
        // Still read, or rightly left alone: an attribute, an index, a name in a value, a soft
        // keyword as a name, an unpacking the reader takes.
        for (text, n_layer) in [
            ("cfg.n_layer = 4\n", 12),
            ("d = {}\nd[n_layer] = 4\n", 12),
            ("x = n_layer * 2\n", 12),
            ("match = 3\nn_layer = match\n", 3),
            ("[n_layer, n_head] = [4, 4]\n", 4),
            // One `;` may end a line; one in a string or a comment is text.
            ("n_layer = 4;\n", 4),
            ("n_layer = 4 ;  # a comment;;\n", 4),
            ("s = 'a;;b'; n_layer = 4\n", 4),
        ] {
            assert_eq!(parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}")).config.n_layer, n_layer, "{text:?}");
        }
        // What Python refuses: indentation out of place, a byte-order mark (train.py's exec
        // reads it as a character).
        for (text, want) in [
            ("n_layer = 2\n n_layer = 4\n", "line 2: `n_layer = 4`: unexpected indent"),
            ("if True:\nn_layer = 3\n", "line 2: expected an indented block after line 1"),
            ("n_layer = 2\nif True:\n", "line 2: the file ends where an indented block should follow"),
            // A dedent to no level opened before, and tabs and spaces mixed so that the block
            // depends on the tab size (CPython: IndentationError and TabError).
            ("if True:\n    x = 1\n  y = 2\nn_layer = 4\n", "line 3: `y = 2`: its indentation returns to no level opened before it"),
            ("if True:\n\tx = 1\n        y = 2\nn_layer = 4\n", "line 3: `y = 2`: tabs and spaces in its indentation mixed"),
            ("if True:\n        x = 1\n\ty = 2\n", "line 3: `y = 2`: tabs and spaces in its indentation mixed"),
            ("if a:\n    if b:\n        x = 1\n      y = 2\n", "line 4: `y = 2`: its indentation returns to no level"),
            ("\u{feff}n_layer = 3\n", "line 1: the file starts with a byte-order mark"),
            // Empty statements and empty values: train.py's exec would stop on them.
            ("n_layer = 4;;\n", "line 1: `n_layer = 4;;`: a `;` with no statement before it"),
            ("n_head = 4\n; n_layer = 4\n", "line 2: `; n_layer = 4`: a `;` with no statement before it"),
            ("n_layer = 4; ; n_head = 2\n", "line 1: `n_layer = 4; ; n_head = 2`: a `;` with no statement"),
            ("if True: n_layer = 4;;\n", "line 1: `if True: n_layer = 4;;`: a `;` with no statement"),
            ("x = ;\n", "line 1: no value after `=`"),
            ("n_layer = 4\ndtype =\n", "line 2: dtype: no value after `=`"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.starts_with(want), "{text:?}: {err}");
        }
        // Indented blocks that Python runs stay as they were: a function, a docstring in one, a
        // block after a blank line and a comment.
        let f =
            parse("def f():\n    \"\"\"doc\n    \"\"\"\n    return 1\n\nif x:\n\n    # note\n    max_iters = 5\nn_layer = 3\n").unwrap();
        assert_eq!(f.config.n_layer, 3);
        // Tabs used the same way at each level are no error, nor are tabs then spaces inside
        // them (each level deeper either way).
        for text in ["if x:\n\ty = 1\n\tz = 2\nn_layer = 3\n", "if a:\n\tif b:\n\t    y = 1\n\tz = 2\nn_layer = 3\n"] {
            assert_eq!(parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}")).config.n_layer, 3, "{text:?}");
        }
    }

    /// A statement continued over lines (open brackets, a trailing backslash) is read as the
    /// one Python runs: a setting after a list that spans lines was once dropped silently. What
    /// Python refuses (a bracket or string never closed, one closed that was not open) is an
    /// error naming its line.
    #[test]
    fn statements_continued_over_lines_are_read_whole() {
        for text in [
            "n_embd = 256\nn_head = 4\nwandb_tags = [\"baseline\",\n              \"small\"]; n_layer = 3\n",
            "x = {\n\"a\": 1}; n_layer = 3\n",
            "x = (\"a\"  # a comment ( inside\n\"b\"); n_layer = 3\n",
            "n_layer = (1 +\n    2)\n",
            "n_layer = 1 + \\\n    2\n",
        ] {
            let f = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(f.config.n_layer, 3, "{text:?}: {:#?}", f.notices);
        }
        // The line a continued statement starts on is the one messages name.
        let err = parse("n_embd = 256\nn_layer = (0 +\n  0)\n").unwrap_err().to_string();
        assert!(err.starts_with("line 2: n_layer: "), "{err}");
        for (text, want) in [
            ("n_layer = 4\nx = (\n", "line 2: a bracket opens here and is never closed (Python would refuse the file)"),
            ("y = \"abc\nn_layer = 4\n", "line 1: `y = \"abc`: a string is never closed on its line (Python would refuse the file)"),
            ("print(\"hi\"\n", "line 1: a bracket opens here and is never closed (Python would refuse the file)"),
            (
                "n_layer = 4)\n",
                "line 1: `n_layer = 4)`: its `)` closes a bracket that is not open, or one of another kind (Python would refuse the file)",
            ),
            (
                "x = (]\nn_layer = 4\n",
                "line 1: `x = (]`: its `]` closes a bracket that is not open, or one of another kind (Python would refuse the file)",
            ),
            ("n_layer = 4 + \\\n", "line 1: the last line ends in a backslash: the statement never ends (Python would refuse the file)"),
        ] {
            assert_eq!(parse(text).unwrap_err().to_string(), want, "{text:?}");
        }
        // Triple-quoted strings keep their own rules: a bracket inside one opens nothing.
        assert_eq!(parse("\"\"\"notes (\n[ draft\n\"\"\"\nn_layer = 3\n").unwrap().config.n_layer, 3);
        // One inside a statement continued over lines is part of it (once "closes a bracket
        // that is not open"); one on a line, with its own quote inside, closes where Python does.
        for text in [
            "x = dict(\n  a=\"\"\"x (\ny\"\"\",\n  b=2)\nn_layer = 3\n",
            "x = [\n\"\"\"doc [\n\"\"\",\n1]; n_layer = 3\n",
            "x = (1,\n'''a\nb''' + ''')''', 2)\nn_layer = 3\n",
            "wandb_run_name = '''it's'''\nn_layer = 3\n",
            "'''Karpathy's config'''\nn_layer = 3\n",
        ] {
            let f = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(f.config.n_layer, 3, "{text:?}: {:#?}", f.notices);
        }
        // A string continued by a backslash goes on without a break, as in Python.
        let f = parse("out_dir = 'out\\\n-dir # not a comment'\nn_layer = 3\n").unwrap();
        assert_eq!((f.get("out_dir"), f.config.n_layer), (Some(&Value::Str("out-dir # not a comment".into())), 3));
        // A backslash followed by anything is no continuation, and Python refuses the file.
        for text in ["n_layer = 1 + \\ \n  2\n", "n_layer = 1 + \\ # two\n  2\n"] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains("a backslash continues a line only as its last character"), "{text:?}: {err}");
        }
    }

    #[test]
    fn string_escapes_decode_as_python_does() {
        let v = |e: &str| evaluate(e, &|_| None);
        let s = |x: &str| Ok(Value::Str(x.into()));
        for (literal, want) in [
            (r"'esc\x41\tdir'", "escA\tdir"),
            (r"'\101'", "A"),
            (r"'\0'", "\u{0}"),
            (r"'\0a'", "\u{0}a"),
            (r"'\12'", "\n"),
            (r"'\1012'", "A2"),
            (r"'\777'", "\u{1ff}"),
            (r"'\a\b\f\v\n\r\t'", "\u{7}\u{8}\u{c}\u{b}\n\r\t"),
            (r#"'\\ \' \"'"#, "\\ ' \""),
            (r"'\x4a\x4A'", "JJ"),
            (r"'\u0041\u00e9'", "Aé"),
            (r"'\U0001F600'", "\u{1f600}"),
            (r"'\U0010ffff'", "\u{10ffff}"),
            (r#""\x27""#, "'"),
            // Unknown escapes keep their backslash (Python only warns); 8 and 9 are not octal.
            (r"'\q\d\8\9'", "\\q\\d\\8\\9"),
            (r"'C:\data\new'", "C:\\data\new"),
        ] {
            assert_eq!(v(literal), s(want), "{literal}");
        }
        for (literal, why) in [
            (r"'out\x'", "truncated \\x escape"),
            (r"'\x4'", "truncated \\x escape"),
            (r"'\x4g'", "truncated \\x escape"),
            (r"'\u004'", "truncated \\u escape"),
            (r"'\u004g'", "truncated \\u escape"),
            (r"'\U0001F60'", "truncated \\U escape"),
            (r"'\ud800'", "\\ud800 is a lone surrogate"),
            (r"'\U0000DFFF'", "\\U0000dfff is a lone surrogate"),
            (r"'\U00110000'", "\\U00110000 is not a Unicode character"),
            (r"'\N{LATIN SMALL LETTER A}'", "named Unicode escapes (\\N{...}) are not supported"),
            (r"'\N'", "malformed \\N escape"),
            (r"'abc\", "continued on the next line"),
            (r"'abc\'", "unterminated string"),
        ] {
            match v(literal) {
                Err(e) => assert!(e.contains(why) && !e.contains('\n'), "{literal}: {e}"),
                other => panic!("{literal}: {other:?}"),
            }
        }
        // In a file: the decoded value, and errors that name their line (an error for a
        // modelled setting; for a training setting a notice, and unreadable with the reason).
        let f = parse("out_dir = 'esc\\x41\\tdir'\nwandb_run_name = '\\101\\0'\n").unwrap();
        assert_eq!(f.get("out_dir"), Some(&Value::Str("escA\tdir".into())));
        assert_eq!(f.get("wandb_run_name"), Some(&Value::Str("A\u{0}".into())));
        assert_eq!(parse("dtype = 'float\\x31\\066'\n").unwrap().config.dtype, Dtype::Float16);
        let err = parse("n_layer = 2\ndtype = 'out\\x'\n").unwrap_err().to_string();
        assert!(err.starts_with("line 2: dtype: cannot read `'out\\x'`: truncated \\x escape"), "{err}");
        let err = parse("\n\nattention = '\\N{BULLET}'\n").unwrap_err().to_string();
        assert!(err.starts_with("line 3: attention: ") && err.contains("are not supported"), "{err}");
        // Python refuses a file with a malformed escape before running any of it, whatever
        // the setting: an error for a training setting too (it was once a notice).
        let err = parse("n_layer = 2\nout_dir = 'out\\x'\n").unwrap_err().to_string();
        assert!(err.starts_with("line 2: cannot read `'out\\x'`: truncated \\x escape"), "{err}");
        assert!(err.ends_with(PYTHON_REFUSES), "{err}");
        // An escape vramfit cannot decode but Python can (a lone surrogate) stays a notice.
        let f = parse("n_layer = 2\nout_dir = 'out\\ud800'\n").unwrap();
        assert_eq!((f.get("out_dir"), &f.unreadable[..]), (None, &["out_dir".to_string()][..]));
        let why = f.unreadable_reason("out_dir").unwrap();
        assert!(why.starts_with("line 2: cannot read") && why.contains("lone surrogate"), "{why}");
        // `u'...'` is a plain string, `r'...'` keeps its backslashes (once both were refused),
        // and adjacent literals join, as in Python.
        for (text, want) in [
            ("out_dir = r'C:\\x41'\n", "C:\\x41"),
            ("out_dir = R'a\\'b'\n", "a\\'b"),
            ("out_dir = u'caf\\u00e9'\n", "caf\u{e9}"),
            ("out_dir = 'out' \"-\" r'\\d'\n", "out-\\d"),
            ("out_dir = ('a'\n    'b')\n", "ab"),
        ] {
            assert_eq!(parse(text).unwrap().get("out_dir"), Some(&Value::Str(want.into())), "{text:?}");
        }
        assert_eq!(parse("dtype = 'float' '16'\n").unwrap().config.dtype, Dtype::Float16);
        assert_eq!(parse("dtype = r'bfloat16'\n").unwrap().config.dtype, Dtype::Bfloat16);
        // A value then a string is no concatenation: Python refuses `x 'a'`.
        assert!(parse("x = 'a'\ndtype = x '16'\n").is_err());
        // Bytes and f-strings are not read, so never misread.
        for prefix in ["b", "rb", "f", "F", "fr"] {
            let f = parse(&format!("out_dir = {prefix}'C:\\x41'\n")).unwrap();
            assert_eq!((f.get("out_dir"), &f.unreadable[..]), (None, &["out_dir".to_string()][..]), "{prefix}");
            assert!(f.notices.iter().any(|n| n.contains("string prefix")), "{prefix}: {:#?}", f.notices);
            assert!(parse(&format!("dtype = {prefix}'float16'\n")).unwrap_err().to_string().starts_with("line 1: dtype: "), "{prefix}");
        }
    }

    /// Conditional expressions, `not`, `and`, `or`, comparisons (chained) and bools as
    /// integers read as Python reads them (they were refused: `n_layer = 3 if True else 0`).
    #[test]
    fn conditions_and_comparisons_read_as_python_does() {
        for (text, want) in [
            ("n_layer = 3 if True else 0\n", 3),
            ("big = False\nn_layer = 24 if big else 6\n", 6),
            ("n_layer = 4 if 1 < 2 <= 2 else 8\n", 4),
            ("n_layer = 4 if 1 < 2 > 3 else 8\n", 8),
            ("n_layer = 0 or 5\n", 5),
            ("n_layer = 2 and 7\n", 7),
            ("n_layer = 0 and 7 or 9\n", 9),
            ("n_layer = True + 1\n", 2),
            ("n_layer = -True + 3\n", 2),
            ("n_layer = (5 if 'a' == 'a' else 1)\n", 5),
            ("n_layer = 1 if None == 0 else 2\n", 2),
            ("n_layer = 2 + (3 if not False else 100)\n", 5),
        ] {
            let f = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(f.config.n_layer, want, "{text:?}");
        }
        assert!(!parse("compile = not True\n").unwrap().config.compile);
        assert!(parse("bias = 3 > 2\n").unwrap().config.bias);
        // What Python refuses or cannot know stays an error for a modelled setting.
        for text in [
            "n_layer = 3 if True\n",
            "n_layer = 3 if big else 6\n",
            "n_layer = 1 if 'a' < 2 else 2\n",
            "n_layer = 1 << 3\n",
            "n_layer = 1 if x is None else 2\n",
        ] {
            assert!(parse(text).unwrap_err().to_string().starts_with("line 1: n_layer: "), "{text:?}");
        }
    }

    /// Underscores in numbers only where Python takes them (they were once dropped wherever
    /// they were); the other literal forms read as Python reads them.
    #[test]
    fn number_literals_follow_python() {
        let v = |e: &str| evaluate(e, &|_| None);
        for (literal, want) in [
            ("1_000", Value::Int(1000)),
            ("1_000_000", Value::Int(1_000_000)),
            ("0_0", Value::Int(0)),
            ("00", Value::Int(0)),
            ("1_0.5", Value::Float(10.5)),
            ("1_000.000_1", Value::Float(1000.0001)),
            ("1e1_0", Value::Float(1e10)),
            ("6e-4", Value::Float(6e-4)),
            ("1e-3", Value::Float(1e-3)),
            ("1E+3", Value::Float(1e3)),
            (".5", Value::Float(0.5)),
            ("5.", Value::Float(5.0)),
            ("1.e5", Value::Float(1e5)),
            ("00.5", Value::Float(0.5)),
            ("0x1f", Value::Int(31)),
            ("0X1F", Value::Int(31)),
            ("0x_1f", Value::Int(31)),
            ("0xdead_beef", Value::Int(0xdead_beef)),
            ("0o17", Value::Int(15)),
            ("0O_1_7", Value::Int(15)),
            ("0b101", Value::Int(5)),
            ("0B_1_0_1", Value::Int(5)),
            // A hex literal has no exponent: 0x1e plus 5.
            ("0x1e+5", Value::Int(35)),
            ("0x7fffffffffffffff", Value::Int(i64::MAX)),
            ("-9223372036854775807 - 1", Value::Int(i64::MIN)),
        ] {
            assert_eq!(v(literal), Ok(want), "{literal}");
        }
        for (literal, why) in [
            ("1__0", "`_` goes only between two digits"),
            ("1_", "`_` goes only between two digits"),
            ("1_.5", "`_` goes only between two digits"),
            ("1._5", "`_` goes only between two digits"),
            ("1_e5", "`_` goes only between two digits"),
            ("1e_5", "`_` goes only between two digits"),
            ("1e5_", "`_` goes only between two digits"),
            ("1_j", "`_` goes only between two digits"),
            ("0x", "invalid number"),
            ("0x_", "invalid number"),
            ("0x1f_", "invalid number"),
            ("0x__1f", "invalid number"),
            ("0x1__f", "invalid number"),
            ("0b102", "invalid number"),
            ("0o8", "invalid number"),
            ("0x1g", "invalid number"),
            ("012", "invalid number"),
            ("0_1", "invalid number"),
            ("1j", "unsupported number"),
            ("1.5.2", "invalid number"),
            ("1e400", "1e400 is too large"),
            ("9223372036854775808", "is too large"),
            ("18446744073709551616", "is too large"),
            ("0x8000000000000000", "is too large"),
        ] {
            match v(literal) {
                Err(e) => assert!(e.contains(why), "{literal}: {e}"),
                other => panic!("{literal}: {other:?}"),
            }
        }
        // A leading underscore makes a name, as in Python.
        assert_eq!(v("_1"), Err("unknown name _1".into()));
        // In a file: read as before when valid, an error naming the line otherwise.
        let f = parse("n_embd = 1_536\nmax_iters = 600_000\nlearning_rate = 6e-4\nmin_lr = 1_0.5\n").unwrap();
        assert_eq!(f.config.n_embd, 1536);
        assert_eq!((f.get("max_iters"), f.get("min_lr")), (Some(&Value::Int(600_000)), Some(&Value::Float(10.5))));
        for (text, line) in [("n_layer = 1__0\n", 1), ("\nn_layer = 1_\n", 2), ("n_layer = 4\nn_embd = 0x_\n", 2)] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.starts_with(&format!("line {line}: ")) && err.contains("invalid number"), "{text:?}: {err}");
        }
        let f = parse("max_iters = 1__0\n").unwrap();
        assert_eq!(f.unreadable, ["max_iters"]);
        assert!(f.unreadable_reason("max_iters").is_some_and(|r| r.starts_with("line 1: cannot read `1__0`: invalid number")));
    }

    /// A value too large to read says so where the file's settings are listed as unreadable,
    /// not only in its notice; the reason follows the setting's last unreadable line.
    #[test]
    fn unreadable_settings_carry_their_reason() {
        let f = parse("min_lr = 1e400\nmax_iters = 99999999999999999999\nif x:\n    lr_decay_iters = 5\n").unwrap();
        assert_eq!(f.unreadable, ["min_lr", "max_iters", "lr_decay_iters"]);
        assert_eq!(f.unreadable_reasons.len(), 3);
        assert_eq!(f.unreadable_reason("min_lr"), Some("line 1: cannot read `1e400`: 1e400 is too large"));
        assert_eq!(f.unreadable_reason("max_iters"), Some("line 2: cannot read `99999999999999999999`: 99999999999999999999 is too large"));
        let why = f.unreadable_reason("lr_decay_iters").unwrap();
        assert!(why.starts_with("line 4: set inside a block"), "{why}");
        assert_eq!(f.unreadable_reason("learning_rate"), None);
        // Unreadable twice: the first place, the latest reason; read at last: neither.
        let f = parse("min_lr = 1e400\nmax_iters = foo\nmin_lr = 1e308 * 10\n").unwrap();
        assert_eq!(f.unreadable, ["min_lr", "max_iters"]);
        assert_eq!(f.unreadable_reason("min_lr"), Some("line 3: cannot read `1e308 * 10`: number too large"));
        // A float power out of range is Python's OverflowError: the reason says which.
        let f = parse("min_lr = 2 ** 2000.0\n").unwrap();
        assert_eq!(f.unreadable_reason("min_lr"), Some("line 1: cannot read `2 ** 2000.0`: a float power out of range (2.0 ** 2000.0)"));
        let f = parse("min_lr = 1e400\nmin_lr = 1e-5\n").unwrap();
        assert!(f.unreadable.is_empty() && f.unreadable_reasons.is_empty(), "{f:?}");
    }

    /// Messages that quote the file show control characters and bidirectional overrides
    /// escaped, as link's notices do (`\u{1b}`), rather than print them to a terminal.
    #[test]
    fn messages_escape_characters_that_reshape_text() {
        let clean = |m: &str| !m.chars().any(crate::reshapes_text);
        // Written into the file as they are, and decoded from escapes.
        for text in ["n_layer = 'a\u{1b}[2J\u{202e}b'\n", "n_layer = 'a\\x1b[2J\\u202eb'\n", "n_layer = 'a\\033[2J\\u202Eb'\n"] {
            let err = parse(text).unwrap_err().to_string();
            assert_eq!(err, "line 1: n_layer: expected an integer, got a string ('a\\u{1b}[2J\\u{202e}b')", "{text:?}");
            assert!(clean(&err), "{err}");
        }
        for (text, key) in [
            ("dtype = '\\x1bfloat\\u202e'\n", "dtype"),
            ("bias = '\\x1b'\n", "bias"),
            ("dropout = '\\x1b'\n", "dropout"),
            ("n_layer = 1 + '\u{1b}'\n", "n_layer"),
            ("n_layer = 1 '\\x1b\\u202e'\n", "n_layer"),
            ("n_layer = na\u{202e}me\n", "n_layer"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.starts_with(&format!("line 1: {key}: ")) && clean(&err), "{text:?}: {err}");
            assert!(err.contains("\\u{1b}") || err.contains("\\u{202e}"), "{text:?}: {err}");
        }
        // An invisible character in a name: the quoted line must not look like a valid one.
        let f = parse("n_layer\u{200b} = 2\n").unwrap();
        assert!(f.notices.iter().any(|n| n.contains("n_layer\\u{200b}")) && f.notices.iter().all(|n| clean(n)), "{:#?}", f.notices);
        // A line that is not an assignment, as the reader quotes it for "not a config file".
        let f = parse("\u{1b}2J \u{202e}oops\nfoo = '\u{1b}' + 1\nmax_iters = '\u{202e}' - 1\n").unwrap();
        assert_eq!(f.first_statement, Some((1, "\\u{1b}2J \\u{202e}oops".to_string())));
        assert!(f.notices.iter().all(|n| clean(n)), "{:#?}", f.notices);
        assert!(f.notices[0].contains("\\u{1b}2J \\u{202e}oops"), "{:#?}", f.notices);
        assert!(f.unreadable_reasons.iter().all(|n| clean(n)), "{:#?}", f.unreadable_reasons);
        // A statement after a closing triple quote, and one that may set names.
        let err = parse("x = '''\n'''; a = '\u{1b}'\n").unwrap_err().to_string();
        assert!(clean(&err) && err.contains("\\u{1b}"), "{err}");
        let err = parse("exec('\u{202e}')\n").unwrap_err().to_string();
        assert!(clean(&err) && err.contains("\\u{202e}"), "{err}");
    }

    #[test]
    fn repeated_assignment_last_wins() {
        let f = parse("max_iters = 1\nn_layer = 3\nmax_iters = 2\nn_layer = 5").unwrap();
        assert_eq!(f.config.n_layer, 5);
        assert_eq!(f.extra, vec![("max_iters".to_string(), Value::Int(2))]);
    }

    #[test]
    fn python_integer_division_floors() {
        let v = |e: &str| evaluate(e, &|_| None);
        // True division of integers rounds the exact quotient once, as Python does past 2^53
        // (QA: `874709080445262125 / 1999` was a float off by one unit). Python 3.11's bits.
        for (x, y, bits) in [
            (874709080445262125, 1999, 0x42f8df87ab654ba2),
            (-874709080445262125, 1999, 0xc2f8df87ab654ba2),
            (9223372036854775807, 3, 0x43c5555555555555),
            (i64::MIN, 7, 0xc3b2492492492492),
            (1, 3, 0x3fd5555555555555),
            (2, 3, 0x3fe5555555555555),
            (1000000000000000001, 1000000000000000000, 0x3ff0000000000000),
            (9007199254740993, 1, 0x4340000000000000),
            (9007199254740995, 1, 0x4340000000000002),
            (i64::MIN, -1, 0x43e0000000000000),
            (1, 9223372036854775807, 0x3c00000000000000),
            (0, -5, 0x8000000000000000),
            (7, 2, 0x400c000000000000),
        ] {
            assert_eq!(int_true_division(x, y).to_bits(), bits, "{x} / {y}");
        }
        assert_eq!(v("0 ** -1"), Err("division by zero (0 to a negative power)".into()));
        assert_eq!(v("0.0 ** -0.5"), Err("division by zero (0 to a negative power)".into()));
        assert!(v("(-8) ** 0.5").is_err());
        assert_eq!(v("-7 // 2"), Ok(Value::Int(-4)));
        assert_eq!(v("7 % -3"), Ok(Value::Int(-2)));
        assert_eq!(v("-2 ** 2"), Ok(Value::Int(-4)));
        assert_eq!(v("2 ** 3 ** 2"), Ok(Value::Int(512)));
        assert_eq!(v("1 / 4"), Ok(Value::Float(0.25)));
        assert!(v("1 // 0").is_err());
        assert!(v("(1, 2)").is_err());
        assert!(v(&"(".repeat(10_000)).is_err());
        assert!(v(&"-".repeat(10_000)).is_err());
    }

    /// Only a setting's last value counts, as in Python: an out-of-range value a later line
    /// replaces is no error; one left standing is, at its line.
    #[test]
    fn a_bad_value_a_later_line_replaces_is_no_error() {
        let base = Config::default();
        let file = parse_config_file("n_layer = 2000\nn_layer = 2\ndtype = 'float64'\ndtype = 'float16'\n", &base).unwrap();
        assert_eq!((file.config.n_layer, file.config.dtype), (2, Dtype::Float16));
        let err = parse_config_file("n_layer = 2000\nn_head = 0\nn_head = 4\n", &base).unwrap_err();
        assert_eq!(err.to_string(), "line 1: n_layer: 2000 is larger than vramfit models (at most 1024)");
        // The earliest bad line that stands is the one named.
        let err = parse_config_file("n_head = 0\nn_layer = 2000\n", &base).unwrap_err();
        assert!(err.to_string().starts_with("line 1: n_head: "), "{err}");
    }

    /// The deferring reader hands back what would refuse the file only for its final values,
    /// with the file's settings, for a caller with more settings to apply.
    #[test]
    fn the_deferring_reader_returns_final_value_errors_beside_the_file() {
        let base = Config::default();
        let (file, err) = parse_config_file_deferring("n_embd = 100\nn_head = 7\n", &base).unwrap();
        assert_eq!((file.config.n_embd, file.config.n_head), (100, 7));
        assert!(file.config.validate().is_err());
        assert!(matches!(err[..], [ConfigFileError::Invalid { line: 2, source: ConfigError::HeadsDoNotDivide { .. } }]), "{err:?}");
        let (file, err) = parse_config_file_deferring("n_layer = 2000\nn_embd = 384\n", &base).unwrap();
        assert_eq!((file.config.n_layer, file.config.n_embd), (base.n_layer, 384));
        assert!(matches!(&err[..], [ConfigFileError::BadValue { line: 1, key, .. }] if key == "n_layer"), "{err:?}");
        // Every value still bad, in line order: replacing one must not pass over the others.
        let (_, err) = parse_config_file_deferring("batch_size = 0\nn_layer = 2000\nn_head = 0\n", &base).unwrap();
        let keys: Vec<(usize, &str)> = err
            .iter()
            .filter_map(|e| match e {
                ConfigFileError::BadValue { line, key, .. } => Some((*line, key.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(keys, [(1, "batch_size"), (2, "n_layer"), (3, "n_head")]);
        let (_, err) = parse_config_file_deferring("n_layer = 4\n", &base).unwrap();
        assert!(err.is_empty());
        // A checkpoint's shape replaces the file's, bad or not, as in train.py.
        let file = parse_config_file("init_from = 'gpt2'\nn_layer = 2000\n", &base).unwrap();
        assert_eq!(file.config.n_layer, 12);
        assert!(parse_config_file("init_from = 'gpt2'\nbatch_size = 0\n", &base).is_err(), "the batch is the file's still");
        // Syntax errors and unreadable values are errors still.
        assert!(parse_config_file_deferring("n_layer = (4\n", &base).is_err());
        assert!(parse_config_file_deferring("n_layer = foo()\n", &base).is_err());
    }

    #[test]
    fn export_round_trips() {
        let cfg = Config {
            n_layer: 6,
            n_head: 6,
            n_embd: 384,
            vocab_size: 65,
            dropout: 0.2,
            eval_batch_size: Some(8),
            attention: Attention::Manual,
            optimizer: Optimizer::Sgd,
            ..Config::default()
        };
        let text = to_config_file(&cfg, None);
        assert!(text.starts_with("# nanoGPT config written by vramfit"));
        assert!(!text.contains("init_from"), "{text}");
        let f = parse(&text).unwrap();
        assert_eq!(f.config, cfg);
        // The data that gives stock train.py the 65-character vocabulary is named; what stock
        // train.py does not read is said once.
        assert_eq!(f.extra, [("dataset".to_string(), Value::Str("shakespeare_char".into()))]);
        assert_eq!(
            f.notices,
            ["eval_batch_size = 8, attention = 'manual', optimizer = 'sgd': vramfit's settings, which stock train.py does not read; \
              the plan is for a train.py changed to use them"]
        );
        let without_vocab: String = text.lines().filter(|l| !l.starts_with("vocab_size")).map(|l| format!("{l}\n")).collect();
        assert_eq!(parse(&without_vocab).unwrap().config, cfg, "stock train.py's reading of it");
        // GPT-2's (train.py's default data) needs none; another says what to look for.
        assert!(!to_config_file(&Config::default(), None).contains("dataset ="));
        let other = to_config_file(&Config { vocab_size: 8192, ..cfg.clone() }, None);
        assert!(other.contains("# dataset = ...  # data whose meta.pkl gives vocab_size 8192"), "{other}");
    }

    #[test]
    fn export_from_a_checkpoint_names_it_and_reads_back_to_the_same_run() {
        let mut cfg = Config { block_size: 512, batch_size: 1, gradient_accumulation_steps: 32, ..Config::default() };
        assert!(take_pretrained_shape(&mut cfg, "gpt2-xl"));
        let text = to_config_file(&cfg, Some("gpt2-xl"));
        assert!(text.contains("\ninit_from = 'gpt2-xl'"), "{text}");
        let f = parse(&text).unwrap();
        assert_eq!(f.config, cfg);
        assert_eq!(f.extra, vec![("init_from".to_string(), Value::Str("gpt2-xl".into()))]);
    }

    #[test]
    fn a_checkpoints_shape_crops_block_and_eval_context_and_names_are_gpt2s() {
        let mut cfg = Config { block_size: 2048, eval_block_size: Some(1536), ..Config::default() };
        assert!(take_pretrained_shape(&mut cfg, "gpt2-medium"));
        assert_eq!((cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.vocab_size, cfg.bias), (24, 16, 1024, 50257, true));
        // An eval context past the cropped block goes back to the block's (as train.py's would be).
        assert_eq!((cfg.block_size, cfg.eval_block_size), (1024, None));
        assert!(cfg.validate().is_ok());
        let mut shorter = Config { block_size: 2048, eval_block_size: Some(512), ..Config::default() };
        take_pretrained_shape(&mut shorter, "gpt2");
        assert_eq!((shorter.block_size, shorter.eval_block_size), (1024, Some(512)));
        assert_eq!(pretrained_names(), ["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"]);
        for name in pretrained_names() {
            assert_eq!(pretrained(name), Some(name));
        }
        let mut shaped = Config { n_layer: 4, block_size: 2048, bias: false, ..Config::default() };
        let given = shaped.clone();
        take_pretrained_shape(&mut shaped, "gpt2");
        let changes: Vec<String> = shape_changes(&given, &shaped).into_iter().map(|(n, was, is)| format!("{n} {was} -> {is}")).collect();
        assert_eq!(changes, ["n_layer 4 -> 12", "vocab_size 50304 -> 50257", "bias False -> True", "block_size 2048 -> 1024"]);
        assert!(shape_changes(&shaped, &shaped).is_empty());
        assert_eq!(pretrained_of_shape(48, 1600, 50257), Some("gpt2-xl"));
        assert_eq!(pretrained_of_shape(12, 768, 50257), Some("gpt2"));
        assert_eq!(pretrained_of_shape(12, 768, 50304), None);
        assert_eq!(pretrained_of_shape(6, 768, 50257), None, "distilgpt2 is not one of train.py's");
        for other in ["scratch", "resume", "GPT2", "gpt2-xxl", ""] {
            assert_eq!(pretrained(other), None, "{other}");
            assert!(!take_pretrained_shape(&mut cfg.clone(), other));
        }
    }

    proptest! {
        #[test]
        fn export_round_trips_for_valid_configs(s in crate::link::tests::valid_state()) {
            prop_assume!(s.config.validate().is_ok());
            let f = parse_config_file(&to_config_file(&s.config, None), &Config::default()).unwrap();
            prop_assert_eq!(&f.config, &s.config);
            // What it says is what an eval-only run is planned as, and what stock train.py does
            // not read.
            let said: Vec<&String> = f
                .notices
                .iter()
                .filter(|n| !(s.config.eval_only && n.starts_with("eval_only = True: ")))
                .filter(|n| !n.contains("which stock train.py does not read") && !n.starts_with("expandable_segments = True: planned as"))
                .collect();
            prop_assert!(said.is_empty(), "{:?}", said);
        }

        #[test]
        fn arbitrary_text_never_panics(text in any::<String>()) {
            if let Ok(f) = parse(&text) {
                prop_assert!(f.config.validate().is_ok());
            }
        }

        #[test]
        fn python_shaped_text_never_panics(lines in proptest::collection::vec("[a-z_]{1,8} ?= ?[-+*/%() 0-9.e'\"a-z#]{0,16}", 0..8)) {
            let text = lines.join("\n");
            if let Ok(f) = parse(&text) {
                prop_assert!(f.config.validate().is_ok());
            }
        }
    }
}
