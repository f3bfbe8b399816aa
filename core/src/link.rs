//! The shareable-link codec: the page keeps its whole state in the URL query, and
//! `vramfit plan --link` / `vramfit train --link` read the same string.
//!
//! # Format (version 1)
//!
//! `v=1&L=12&H=12&C=768&T=1024&V=50304&B=12&GA=40&EI=200&d=bf16&a=flash&bias=0&drop=0&cmp=1&ckpt=0&opt=adamw&xs=0&gpu=rtx-4070&other=0`
//!
//! | key     | field                         | values                                   |
//! |---------|-------------------------------|------------------------------------------|
//! | `v`     | link format version           | `1`                                      |
//! | `L`     | `n_layer`                     | integer                                  |
//! | `H`     | `n_head`                      | integer                                  |
//! | `C`     | `n_embd`                      | integer                                  |
//! | `T`     | `block_size`                  | integer                                  |
//! | `V`     | `vocab_size`                  | integer                                  |
//! | `B`     | `batch_size`                  | integer                                  |
//! | `GA`    | `gradient_accumulation_steps` | integer                                  |
//! | `EB`    | `eval_batch_size`             | integer; absent = same as `B`            |
//! | `ET`    | `eval_block_size`             | integer; absent = same as `T`            |
//! | `EI`    | `eval_iters`                  | integer                                  |
//! | `d`     | `dtype`                       | `f32`, `f16`, `bf16`                     |
//! | `a`     | `attention`                   | `flash`, `manual`                        |
//! | `bias`  | `bias`                        | `0`, `1`                                 |
//! | `drop`  | `dropout`                     | decimal in [0, 1)                        |
//! | `cmp`   | `compile`                     | `0`, `1`                                 |
//! | `ckpt`  | `activation_checkpointing`    | `0`, `1`                                 |
//! | `opt`   | `optimizer`                   | `adamw`, `sgd`                           |
//! | `xs`    | `expandable_segments`         | `0`, `1`                                 |
//! | `gpu`   | GPU id                        | a preset id (`rtx-4070`) or `custom-<GiB>` |
//! | `other` | MiB other programs hold       | integer                                  |
//! | `init`  | `init_from`                   | `scratch`, `gpt2`, `gpt2-medium`, `gpt2-large`, `gpt2-xl` |
//! | `eo`    | `eval_only`                   | `0`, `1`; absent = `0`                   |
//!
//! [`encode`] always writes every key in this order (omitting `EB` / `ET` only when they are
//! unset, `init` for a run from scratch, and `eo` for a run that trains): a link then means the same thing even if
//! vramfit's defaults change later, and two equal states always give byte-identical links.
//! That costs about 150 characters.
//!
//! A run that starts from GPT-2's weights (`init=gpt2-xl`) has the checkpoint's shape, as
//! train.py loads it: `L`, `H`, `C`, `V` and `bias` are GPT-2's and `T` is at most 1024.
//! [`encode`] writes them as they are; [`decode`] ignores, with a notice, values that differ.
//!
//! [`decode`] is lenient, for the page: it accepts a full URL, a query with or without `?`, or
//! nothing; nanoGPT's long names (`n_layer=12`) work as keys too; keys are case-sensitive. Whatever
//! it cannot use falls back to the default with one notice saying what was ignored and why.
//! [`decode_strict`] turns any notice into an error, for the command line.
//! [`decode_strict_deferred`] is the command line's reader under flags: strict about each key,
//! it leaves the checks of settings together (n_embd divisible by n_head, sizes that overflow
//! only in combination, a block past the checkpoint's) to the caller, who makes them once the
//! flags are applied.

use crate::config::{self, Attention, Config, ConfigError, Dtype, Optimizer};
use crate::device::{self, Gpu};
use serde::{Deserialize, Serialize};

/// The link format version [`encode`] writes and [`decode`] reads.
pub const LINK_VERSION: u32 = 1;

/// The most MiB of "other programs' usage" a link may carry: as large as the largest card
/// [`Gpu::custom`] models (4096 GiB), so `other_usage_mib * 2^20` never overflows.
pub const MAX_OTHER_USAGE_MIB: u64 = 4096 * 1024;

/// Longest value quoted back in a notice; longer ones are cut with `…`.
const MAX_SHOWN_CHARS: usize = 40;

/// Everything the page's URL carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LinkState {
    pub config: Config,
    /// GPU id as [`Gpu::find`] returns it (`rtx-4070`, `custom-10`).
    pub gpu: String,
    /// MiB other programs already hold on the card.
    pub other_usage_mib: u64,
    /// The GPT-2 checkpoint the run starts from (`init_from`, as
    /// [`crate::nanogpt::pretrained_names`] spells it), or `None` for a run from scratch. It
    /// changes no byte of memory (the same shape from scratch needs the same), but it fixes the
    /// shape: fixes must keep it ([`crate::plan::keeping_pretrained_shape`]).
    pub init_from: Option<String>,
}

impl Default for LinkState {
    /// nanoGPT's defaults on the default card, with nothing else on it.
    fn default() -> Self {
        LinkState { config: Config::default(), gpu: device::default_gpu().id, other_usage_mib: 0, init_from: None }
    }
}

impl LinkState {
    /// Why an edit of the page cannot stand with the checkpoint the run starts from (its shape
    /// is the checkpoint's, its block at most 1024), or `None` when it can.
    pub fn pretrained_conflict(&self) -> Option<String> {
        let name = self.init_from.as_deref()?;
        let mut shaped = self.config.clone();
        crate::nanogpt::take_pretrained_shape(&mut shaped, name);
        let changes = crate::nanogpt::shape_changes(&self.config, &shaped);
        changes.first().map(|(field, _, must)| match *field {
            "block_size" => format!("init_from = '{name}': GPT-2's checkpoint has {must} positions, so block_size is at most {must}"),
            "bias" => format!("init_from = '{name}': GPT-2's checkpoint has biases (bias True)"),
            _ => format!("init_from = '{name}': {field} is the checkpoint's ({must}); start from scratch to change it"),
        })
    }
}

/// What [`decode`] made of a link: a state that is always valid, and what it had to ignore.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decoded {
    pub state: LinkState,
    /// One line per ignored key or value, e.g. `ignored C=abc (n_embd): not a number`.
    pub notices: Vec<String>,
    /// The settings the link gave and that were kept, by their long names (`vocab_size`), so a
    /// caller can tell a value the link chose from one it left at the base's.
    pub given: Vec<&'static str>,
}

impl Decoded {
    /// Whether the link set the setting of this long name (and it was kept).
    pub fn sets(&self, long_name: &str) -> bool {
        self.given.contains(&long_name)
    }
}

/// Every setting a link can carry, in the order [`encode`] writes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Version,
    NLayer,
    NHead,
    NEmbd,
    BlockSize,
    VocabSize,
    BatchSize,
    GradAccum,
    EvalBatch,
    EvalBlock,
    EvalIters,
    Dtype,
    Attention,
    Bias,
    Dropout,
    Compile,
    Checkpointing,
    Optimizer,
    Expandable,
    Gpu,
    OtherUsage,
    InitFrom,
    EvalOnly,
}

/// (field, short key, long name). Long names are nanoGPT's where it has one.
const FIELDS: [(Field, &str, &str); 23] = [
    (Field::Version, "v", "version"),
    (Field::NLayer, "L", "n_layer"),
    (Field::NHead, "H", "n_head"),
    (Field::NEmbd, "C", "n_embd"),
    (Field::BlockSize, "T", "block_size"),
    (Field::VocabSize, "V", "vocab_size"),
    (Field::BatchSize, "B", "batch_size"),
    (Field::GradAccum, "GA", "gradient_accumulation_steps"),
    (Field::EvalBatch, "EB", "eval_batch_size"),
    (Field::EvalBlock, "ET", "eval_block_size"),
    (Field::EvalIters, "EI", "eval_iters"),
    (Field::Dtype, "d", "dtype"),
    (Field::Attention, "a", "attention"),
    (Field::Bias, "bias", "bias"),
    (Field::Dropout, "drop", "dropout"),
    (Field::Compile, "cmp", "compile"),
    (Field::Checkpointing, "ckpt", "activation_checkpointing"),
    (Field::Optimizer, "opt", "optimizer"),
    (Field::Expandable, "xs", "expandable_segments"),
    (Field::Gpu, "gpu", "gpu"),
    (Field::OtherUsage, "other", "other_usage_mib"),
    (Field::InitFrom, "init", "init_from"),
    (Field::EvalOnly, "eo", "eval_only"),
];

/// The model-shape fields a GPT-2 checkpoint sets (block_size only as a ceiling).
const PRETRAINED_SHAPE: [Field; 5] = [Field::NLayer, Field::NHead, Field::NEmbd, Field::VocabSize, Field::Bias];

impl Field {
    fn index(self) -> usize {
        self as usize
    }
    fn key(self) -> &'static str {
        FIELDS[self.index()].1
    }
    fn long_name(self) -> &'static str {
        FIELDS[self.index()].2
    }
    fn from_key(key: &str) -> Option<Field> {
        FIELDS.iter().find(|(_, short, long)| *short == key || *long == key).map(|(f, _, _)| *f)
    }
    /// The field a `ConfigError` names (only range errors carry a field name).
    fn from_config_field(name: &str) -> Option<Field> {
        FIELDS.iter().find(|(f, _, long)| *long == name && *f != Field::Version).map(|(f, _, _)| *f)
    }
}

/// The short spelling of a dtype in links.
fn dtype_key(d: Dtype) -> &'static str {
    match d {
        Dtype::Float32 => "f32",
        Dtype::Float16 => "f16",
        Dtype::Bfloat16 => "bf16",
    }
}

fn bool_key(b: bool) -> &'static str {
    if b {
        "1"
    } else {
        "0"
    }
}

/// The query string (without `?`) for a state: every key, in the fixed order of the table above.
pub fn encode(state: &LinkState) -> String {
    let c = &state.config;
    let mut pairs: Vec<(Field, String)> = vec![
        (Field::Version, LINK_VERSION.to_string()),
        (Field::NLayer, c.n_layer.to_string()),
        (Field::NHead, c.n_head.to_string()),
        (Field::NEmbd, c.n_embd.to_string()),
        (Field::BlockSize, c.block_size.to_string()),
        (Field::VocabSize, c.vocab_size.to_string()),
        (Field::BatchSize, c.batch_size.to_string()),
        (Field::GradAccum, c.gradient_accumulation_steps.to_string()),
    ];
    if let Some(eb) = c.eval_batch_size {
        pairs.push((Field::EvalBatch, eb.to_string()));
    }
    if let Some(et) = c.eval_block_size {
        pairs.push((Field::EvalBlock, et.to_string()));
    }
    pairs.extend([
        (Field::EvalIters, c.eval_iters.to_string()),
        (Field::Dtype, dtype_key(c.dtype).to_string()),
        (Field::Attention, c.attention.name().to_string()),
        (Field::Bias, bool_key(c.bias).to_string()),
        (Field::Dropout, dropout_text(c.dropout)),
        (Field::Compile, bool_key(c.compile).to_string()),
        (Field::Checkpointing, bool_key(c.activation_checkpointing).to_string()),
        (Field::Optimizer, c.optimizer.name().to_string()),
        (Field::Expandable, bool_key(c.expandable_segments).to_string()),
        (Field::Gpu, state.gpu.clone()),
        (Field::OtherUsage, state.other_usage_mib.to_string()),
    ]);
    if let Some(name) = &state.init_from {
        pairs.push((Field::InitFrom, name.clone()));
    }
    if c.eval_only {
        pairs.push((Field::EvalOnly, bool_key(true).to_string()));
    }
    let parts: Vec<String> = pairs.iter().map(|(f, v)| format!("{}={}", f.key(), percent_encode(v))).collect();
    parts.join("&")
}

/// Escapes everything outside RFC 3986's unreserved set, so any value survives a URL.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Undoes form encoding: `+` is a space, `%XX` a byte; a malformed `%` stays as it is, and
/// bytes that are not UTF-8 become U+FFFD.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    // from_str_radix accepts a leading '+', which is not a hex digit here.
                    Some(b) if !hex.is_some_and(|h| h.starts_with('+')) => {
                        out.push(b);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A value as notices quote it: control characters escaped and long values cut, so a notice
/// is always one short line whatever the link holds.
fn shown(s: &str) -> String {
    crate::shown_input(s, MAX_SHOWN_CHARS)
}

/// The query part of whatever was pasted (a full URL, `?a=1`, `a=1`, or nothing) and the
/// fragment after `#`, which vramfit's links never have.
fn query_part(input: &str) -> (&str, &str) {
    let s = input.trim();
    let (s, fragment) = s.split_once('#').unwrap_or((s, ""));
    let query = match s.split_once('?') {
        Some((_, query)) => query,
        // A URL without a query carries no settings; anything else is the query itself.
        None if s.contains("://") => "",
        None => s,
    };
    (query, fragment)
}

/// Whether a fragment holds link settings (`key=value` with a key the link format has).
fn settings_in(fragment: &str) -> bool {
    fragment.split('&').any(|segment| segment.split_once('=').is_some_and(|(key, _)| Field::from_key(&percent_decode(key)).is_some()))
}

/// Whether the query holds anything at all (settings or garbage) besides the format's version:
/// the command line refuses a link without, the page opens it with its defaults.
fn has_settings(input: &str) -> bool {
    query_part(input).0.split('&').any(|segment| {
        let key = segment.split_once('=').map_or(segment, |(key, _)| key);
        !segment.is_empty() && Field::from_key(&percent_decode(key)) != Some(Field::Version)
    })
}

/// One key as the link spelt it, for notices: `C=abc (n_embd)`.
#[derive(Clone, Debug, PartialEq)]
struct Given {
    key: String,
    value: String,
}

impl Given {
    /// `C=768`, as the link wrote it (cut and escaped as notices quote values).
    fn written(&self) -> String {
        format!("{}={}", shown(&self.key), shown(&self.value))
    }
    fn describe(&self, field: Field) -> String {
        if self.key == field.long_name() {
            format!("{}={}", shown(&self.key), shown(&self.value))
        } else {
            format!("{}={} ({})", shown(&self.key), shown(&self.value), field.long_name())
        }
    }
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty value".into());
    }
    if !t.bytes().all(|b| b.is_ascii_digit()) {
        // A whole number written another way (6.0, 1e3) is read, as the page's number boxes
        // read it; otherwise say why a number is refused, as they do.
        return match t.parse::<f64>() {
            Ok(x) if x.is_finite() && x < 0.0 => Err("cannot be negative".into()),
            Ok(x) if x.is_finite() && x.fract() != 0.0 => Err("not a whole number".into()),
            // Up to 2^53 every whole f64 is exact; past it the text may not mean the number.
            Ok(x) if x.is_finite() && x <= (1u64 << 53) as f64 => Ok(x as u64),
            Ok(x) if x.is_finite() => Err("too large".into()),
            _ => Err("not a number".into()),
        };
    }
    t.parse::<u64>().map_err(|_| "too large".into())
}

/// A whole number within `[min, max]`, the range `Config::validate` accepts for the field.
fn parse_in_range(s: &str, min: u32, max: u32) -> Result<u32, String> {
    let n = parse_u64(s)?;
    if n < min as u64 {
        return Err(format!("must be at least {min}"));
    }
    if n > max as u64 {
        return Err(format!("larger than vramfit models (at most {max})"));
    }
    Ok(n as u32)
}

fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        "" => Err("empty value".into()),
        // Links write 0 and 1; the words are read too, and the message says so.
        _ => Err("expected 0 or 1 (or true/false, yes/no, on/off)".into()),
    }
}

/// A dropout as the link and the command line write it: the shortest decimal that reads back
/// to the same value (`0`, `0.2`), in exponent form below 1e-4 (`1e-320` rather than 320
/// zeros: `{}` on f64 never uses an exponent, `{:?}` does there, and the page links it already
/// for the exported config). -0 is written as 0: clap reads `-0` as a flag.
pub fn dropout_text(dropout: f64) -> String {
    let d = dropout + 0.0;
    if d == 0.0 {
        "0".into()
    } else {
        format!("{d:?}")
    }
}

fn parse_dropout(s: &str) -> Result<f64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty value".into());
    }
    // Only plain decimals: Rust would also accept "inf" and "NaN", which are not dropouts.
    if !t.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+')) {
        return Err("not a number".into());
    }
    let p: f64 = t.parse().map_err(|_| "not a number".to_string())?;
    if !(p.is_finite() && (0.0..1.0).contains(&p)) {
        return Err("must be in [0, 1)".into());
    }
    // -0 is in range; adding 0 makes it 0, which the command line's `--dropout` also takes.
    Ok(p + 0.0)
}

/// Applies one key's value to the state, or says why it cannot.
fn apply(state: &mut LinkState, field: Field, value: &str) -> Result<(), String> {
    let c = &mut state.config;
    match field {
        Field::Version => {
            let v = parse_u64(value)?;
            if v != LINK_VERSION as u64 {
                return Err(format!("unknown link version (this vramfit reads version {LINK_VERSION})"));
            }
        }
        Field::NLayer => c.n_layer = parse_in_range(value, 1, config::MAX_LAYERS)?,
        Field::NHead => c.n_head = parse_in_range(value, 1, config::MAX_HEADS)?,
        Field::NEmbd => c.n_embd = parse_in_range(value, 1, config::MAX_EMBD)?,
        Field::BlockSize => c.block_size = parse_in_range(value, 1, config::MAX_BLOCK)?,
        Field::VocabSize => c.vocab_size = parse_in_range(value, 1, config::MAX_VOCAB)?,
        Field::BatchSize => c.batch_size = parse_in_range(value, 1, config::MAX_BATCH)?,
        Field::GradAccum => c.gradient_accumulation_steps = parse_in_range(value, 1, config::MAX_ACCUM)?,
        Field::EvalBatch => c.eval_batch_size = Some(parse_in_range(value, 1, config::MAX_BATCH)?),
        Field::EvalBlock => c.eval_block_size = Some(parse_in_range(value, 1, config::MAX_BLOCK)?),
        Field::EvalIters => c.eval_iters = parse_in_range(value, 1, config::MAX_EVAL_ITERS)?,
        Field::Dtype => c.dtype = Dtype::parse(value).ok_or("expected f32, f16 or bf16")?,
        Field::Attention => c.attention = Attention::parse(value).ok_or("expected flash or manual")?,
        Field::Optimizer => c.optimizer = Optimizer::parse(value).ok_or("expected adamw or sgd")?,
        Field::Bias => c.bias = parse_bool(value)?,
        Field::Compile => c.compile = parse_bool(value)?,
        Field::Checkpointing => c.activation_checkpointing = parse_bool(value)?,
        Field::Expandable => c.expandable_segments = parse_bool(value)?,
        Field::EvalOnly => c.eval_only = parse_bool(value)?,
        Field::Dropout => c.dropout = parse_dropout(value)?,
        Field::Gpu => {
            if value.trim().is_empty() {
                return Err("empty value".into());
            }
            state.gpu = match Gpu::find(value) {
                Some(gpu) => gpu.id,
                None if value.trim().to_ascii_lowercase().starts_with("custom-") => {
                    return Err("a custom size is 0.25 to 4096 GiB (custom-<GiB>)".into())
                }
                // A name that fits several cards says which (as `--gpu` does); a link still
                // takes only a preset's id.
                None => match Gpu::lookup(value) {
                    Err(e) if e.contains(" names ") => return Err(format!("{e} (a link takes its preset id)")),
                    _ => return Err("unknown GPU (a preset id such as rtx-4070, or custom-<GiB>)".into()),
                },
            };
        }
        Field::OtherUsage => {
            let mib = parse_u64(value)?;
            if mib > MAX_OTHER_USAGE_MIB {
                return Err(format!("larger than vramfit models (at most {MAX_OTHER_USAGE_MIB} MiB)"));
            }
            state.other_usage_mib = mib;
        }
        Field::InitFrom => {
            state.init_from = match value.trim() {
                "scratch" => None,
                name => Some(
                    crate::nanogpt::pretrained(name)
                        .ok_or("expected scratch, gpt2, gpt2-medium, gpt2-large or gpt2-xl (GPT-2's checkpoints)")?
                        .to_string(),
                ),
            }
        }
    }
    Ok(())
}

/// A run from a GPT-2 checkpoint has its shape: the link's shape values that differ from it are
/// ignored (with a notice) and the rest are the checkpoint's, not the link's choice (`given`
/// false, so a later fallback never reverts them); a block longer than 1024, or an eval context
/// longer than the block, falls back to the base's, cropped.
///
/// With [`Combination::Defer`], the block and eval context are left for the caller to check
/// (a flag after the link may shorten them): the checkpoint crops only a block the link
/// neither wrote nor chose the checkpoint for (the base's, under the base's checkpoint, as
/// [`decode`] crops it), and keeps an eval context the link wrote.
fn take_checkpoint_shape(
    state: &mut LinkState,
    base: &Config,
    latest: &[Option<Given>],
    given: &mut [bool],
    notices: &mut Vec<String>,
    combination: Combination,
) {
    let Some(name) = state.init_from.clone() else { return };
    let mut shaped = state.config.clone();
    crate::nanogpt::take_pretrained_shape(&mut shaped, &name);
    for field in PRETRAINED_SHAPE {
        if given[field.index()] {
            let mut c = state.config.clone();
            revert(&mut c, &shaped, field);
            if c != state.config {
                let g = latest[field.index()].as_ref().expect("a given field has its key and value");
                let value = match field {
                    Field::NLayer => shaped.n_layer.to_string(),
                    Field::NHead => shaped.n_head.to_string(),
                    Field::NEmbd => shaped.n_embd.to_string(),
                    Field::VocabSize => shaped.vocab_size.to_string(),
                    _ => "True".into(),
                };
                // Over a base from a checkpoint, a link without `init` is planned from it.
                let hint = if given[Field::InitFrom.index()] { "" } else { "; add init=scratch to the link to plan it from scratch" };
                notices.push(format!(
                    "ignored {}: init_from = '{name}' loads GPT-2's {} ({value}){hint}",
                    g.describe(field),
                    field.long_name()
                ));
            }
            given[field.index()] = false;
        }
    }
    if combination == Combination::Defer {
        let (block, eval_block) = (state.config.block_size, state.config.eval_block_size);
        crate::nanogpt::take_pretrained_shape(&mut state.config, &name);
        if given[Field::BlockSize.index()] || given[Field::InitFrom.index()] {
            state.config.block_size = block;
            state.config.eval_block_size = eval_block;
        } else if given[Field::EvalBlock.index()] {
            state.config.eval_block_size = eval_block;
        }
        return;
    }
    let limit = crate::nanogpt::PRETRAINED_BLOCK;
    if given[Field::BlockSize.index()] && state.config.block_size > limit {
        let g = latest[Field::BlockSize.index()].as_ref().expect("a given field has its key and value");
        notices.push(format!("ignored {}: GPT-2's checkpoint has {limit} positions (init_from = '{name}')", g.describe(Field::BlockSize)));
        given[Field::BlockSize.index()] = false;
        // The base's block, which the checkpoint crops below.
        state.config.block_size = base.block_size;
    }
    let block = state.config.block_size.min(limit);
    if let (true, Some(et)) = (given[Field::EvalBlock.index()], state.config.eval_block_size) {
        if et > block {
            let g = latest[Field::EvalBlock.index()].as_ref().expect("a given field has its key and value");
            let why = if state.config.block_size > limit { format!(" (GPT-2's checkpoint crops it to {limit})") } else { String::new() };
            notices.push(format!("ignored {}: longer than block_size {block}{why}", g.describe(Field::EvalBlock)));
            given[Field::EvalBlock.index()] = false;
            state.config.eval_block_size = base.eval_block_size;
        }
    }
    crate::nanogpt::take_pretrained_shape(&mut state.config, &name);
}

/// Sets one config field back to its value in `base`.
fn revert(cfg: &mut Config, base: &Config, field: Field) {
    match field {
        Field::NLayer => cfg.n_layer = base.n_layer,
        Field::NHead => cfg.n_head = base.n_head,
        Field::NEmbd => cfg.n_embd = base.n_embd,
        Field::BlockSize => cfg.block_size = base.block_size,
        Field::VocabSize => cfg.vocab_size = base.vocab_size,
        Field::BatchSize => cfg.batch_size = base.batch_size,
        Field::GradAccum => cfg.gradient_accumulation_steps = base.gradient_accumulation_steps,
        Field::EvalBatch => cfg.eval_batch_size = base.eval_batch_size,
        Field::EvalBlock => cfg.eval_block_size = base.eval_block_size,
        Field::EvalIters => cfg.eval_iters = base.eval_iters,
        Field::Dtype => cfg.dtype = base.dtype,
        Field::Attention => cfg.attention = base.attention,
        Field::Bias => cfg.bias = base.bias,
        Field::Dropout => cfg.dropout = base.dropout,
        Field::Compile => cfg.compile = base.compile,
        Field::Checkpointing => cfg.activation_checkpointing = base.activation_checkpointing,
        Field::Optimizer => cfg.optimizer = base.optimizer,
        Field::Expandable => cfg.expandable_segments = base.expandable_segments,
        Field::EvalOnly => cfg.eval_only = base.eval_only,
        Field::Version | Field::Gpu | Field::OtherUsage | Field::InitFrom => {}
    }
}

/// How far a size field was pushed above the base: the field an overflow is blamed on.
fn growth(cfg: &Config, base: &Config, field: Field) -> f64 {
    let (now, was) = match field {
        Field::NLayer => (cfg.n_layer, base.n_layer),
        Field::NHead => (cfg.n_head, base.n_head),
        Field::NEmbd => (cfg.n_embd, base.n_embd),
        Field::BlockSize => (cfg.block_size, base.block_size),
        Field::VocabSize => (cfg.vocab_size, base.vocab_size),
        Field::BatchSize => (cfg.batch_size, base.batch_size),
        Field::EvalBatch => (cfg.eval_batch(), base.eval_batch()),
        _ => return 0.0,
    };
    now as f64 / was.max(1) as f64
}

/// Which of the link's fields to give up on for a config error: the field it names when it was
/// in the link, else the other one involved, else (for sizes too large to count) the field
/// pushed furthest above the base.
fn blame(err: &ConfigError, cfg: &Config, base: &Config, given: &[bool]) -> Option<Field> {
    let was_given = |f: Field| given[f.index()];
    let first_given = |fields: &[Field]| fields.iter().copied().find(|&f| was_given(f));
    match err {
        ConfigError::TooSmall { field, .. } | ConfigError::TooLarge { field, .. } => {
            let f = Field::from_config_field(field)?;
            // eval_batch_size falls back to batch_size when unset.
            first_given(&[f, Field::BatchSize])
        }
        ConfigError::HeadsDoNotDivide { .. } => {
            // Give up on the one whose base value divides (or is divided by) the other; failing
            // that, on n_head, keeping the model's width.
            let heads_ok = |f: Field| {
                let mut c = cfg.clone();
                revert(&mut c, base, f);
                c.n_embd.is_multiple_of(c.n_head.max(1))
            };
            let candidates = [Field::NHead, Field::NEmbd];
            candidates.iter().copied().find(|&f| was_given(f) && heads_ok(f)).or_else(|| first_given(&candidates))
        }
        ConfigError::EvalBlockTooLong { .. } => first_given(&[Field::EvalBlock, Field::BlockSize]),
        ConfigError::Dropout(_) => first_given(&[Field::Dropout]),
        ConfigError::Overflow(_) => {
            let sizes = [Field::NLayer, Field::NHead, Field::NEmbd, Field::BlockSize, Field::VocabSize, Field::BatchSize, Field::EvalBatch];
            sizes
                .iter()
                .copied()
                .filter(|&f| was_given(f) && growth(cfg, base, f) > 1.0)
                .max_by(|&a, &b| growth(cfg, base, a).total_cmp(&growth(cfg, base, b)))
        }
    }
}

/// Reads a link leniently; see the module docs. The result's config always passes
/// `Config::validate`.
pub fn decode(input: &str) -> Decoded {
    decode_over(&LinkState::default(), input)
}

/// Like [`decode`], but keys the link does not mention keep their value from `base` (and
/// fallbacks go to `base`), so a partial link can refine a config read elsewhere.
pub fn decode_over(base: &LinkState, input: &str) -> Decoded {
    read(base, input, Combination::FallBack).decoded
}

/// What [`decode_over`] does with settings that are valid one by one but not together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Combination {
    /// Give up on the link's fields one at a time, with a notice each, until the config is
    /// valid (the page's way).
    FallBack,
    /// Keep them all: the caller applies its own settings on top and validates the result.
    Defer,
}

/// The link read over `base`, with the keys it wrote and kept.
fn read(base: &LinkState, input: &str, combination: Combination) -> Deferred {
    let mut notices = Vec::new();
    // Last occurrence of each field wins: collect first, so repeats can be reported.
    let mut latest: Vec<Option<Given>> = FIELDS.iter().map(|_| None).collect();
    let (query, fragment) = query_part(input);
    if settings_in(fragment) {
        // Settings pasted after `#` would otherwise vanish without a word (an anchor such as
        // `#fit`, or the `#:~:text=` a browser adds to a link to highlighted text, is fine).
        notices.push(format!("ignored #{}: settings go in the query, after '?'", shown(&percent_decode(fragment))));
    }
    for segment in query.split('&') {
        if segment.is_empty() {
            continue;
        }
        let (raw_key, raw_value) = match segment.split_once('=') {
            Some(kv) => kv,
            None => {
                notices.push(format!("ignored {}: not a key=value pair", shown(&percent_decode(segment))));
                continue;
            }
        };
        let given = Given { key: percent_decode(raw_key), value: percent_decode(raw_value) };
        match Field::from_key(&given.key) {
            None => notices.push(format!("ignored {}={}: unknown key", shown(&given.key), shown(&given.value))),
            Some(field) => {
                if let Some(previous) = &latest[field.index()] {
                    notices.push(format!("ignored {}: {} is given again later", previous.describe(field), field.long_name()));
                }
                latest[field.index()] = Some(given);
            }
        }
    }

    let mut state = base.clone();
    let mut given = [false; FIELDS.len()];
    for (field, _, _) in FIELDS {
        let Some(g) = &latest[field.index()] else {
            continue;
        };
        match apply(&mut state, field, &g.value) {
            Ok(()) => given[field.index()] = field != Field::Version,
            Err(why) => notices.push(format!("ignored {}: {why}", g.describe(field))),
        }
    }
    take_checkpoint_shape(&mut state, &base.config, &latest, &mut given, &mut notices, combination);

    // Each field is fine alone; give up on fields one at a time until the combination is valid.
    while let (Combination::FallBack, Err(err)) = (combination, state.config.validate()) {
        match blame(&err, &state.config, &base.config, &given) {
            Some(field) => {
                let g = latest[field.index()].as_ref().expect("a given field has its key and value");
                notices.push(format!("ignored {}: {err}", g.describe(field)));
                revert(&mut state.config, &base.config, field);
                given[field.index()] = false;
            }
            None => {
                // Only reachable when the base itself is invalid.
                notices.push(format!("ignored the whole configuration: {err}; using nanoGPT's defaults"));
                state.config = Config::default();
                state.init_from = None;
                for (field, _, _) in FIELDS {
                    if !matches!(field, Field::Gpu | Field::OtherUsage) {
                        given[field.index()] = false;
                    }
                }
            }
        }
    }
    if let Some(name) = state.init_from.clone() {
        if combination == Combination::FallBack {
            // A block reverted to a base from scratch may be longer than the checkpoint's:
            // cropped (never invalid: a shorter block and eval context only shrink the run).
            crate::nanogpt::take_pretrained_shape(&mut state.config, &name);
        }
        if given[Field::InitFrom.index()] {
            // The link chose the shape, by naming the checkpoint.
            for field in PRETRAINED_SHAPE {
                given[field.index()] = true;
            }
        }
    }
    let written = FIELDS
        .iter()
        .filter(|(field, _, _)| given[field.index()])
        .filter_map(|(field, _, long)| latest[field.index()].as_ref().map(|g| (*long, g.clone())))
        .collect();
    let given = FIELDS.iter().filter(|(field, _, _)| given[field.index()]).map(|(_, _, long)| *long).collect();
    Deferred { decoded: Decoded { state, notices, given }, written }
}

/// Reads a link for the command line: anything [`decode`] would ignore is an error, reported
/// as one line.
pub fn decode_strict(input: &str) -> Result<LinkState, String> {
    decode_strict_over(&LinkState::default(), input).map(|decoded| decoded.state)
}

/// [`decode_strict`] on top of `base` (see [`decode_over`]); what it returns has no notices.
pub fn decode_strict_over(base: &LinkState, input: &str) -> Result<Decoded, String> {
    strict(base, input, Combination::FallBack).map(|read| read.decoded)
}

/// What [`decode_strict_deferred`] read: the link over the base, each key valid on its own,
/// but the config not checked as a whole.
#[derive(Clone, Debug, PartialEq)]
pub struct Deferred {
    /// Has no notices. Its config may fail `Config::validate` (n_head not dividing n_embd, an
    /// eval context longer than the block, sizes too large together), and under a checkpoint
    /// its block may be longer than the checkpoint's positions: the caller checks both.
    pub decoded: Decoded,
    /// The keys the link wrote and that were kept, by long name (a checkpoint's shape that
    /// `init` implies is given but not written).
    written: Vec<(&'static str, Given)>,
}

impl Deferred {
    fn given(&self, long_name: &str) -> Option<(Field, &Given)> {
        let (_, given) = self.written.iter().find(|(long, _)| *long == long_name)?;
        Some((Field::from_config_field(long_name)?, given))
    }

    /// How the link wrote the setting of this long name (`H=5`), if it wrote it.
    pub fn written(&self, long_name: &str) -> Option<String> {
        self.given(long_name).map(|(_, g)| g.written())
    }

    /// The same, as notices and errors name it: `H=5 (n_head)`.
    pub fn described(&self, long_name: &str) -> Option<String> {
        self.given(long_name).map(|(field, g)| g.describe(field))
    }
}

/// Reads a link for the command line, to be overridden by flags: anything [`decode_strict`]
/// refuses for a key on its own (not a number, out of the setting's range, an unknown key, a
/// repeat, a shape that differs from the checkpoint the link names) is an error, reported as
/// one line; but settings that are valid one by one and not together are kept, for the caller
/// to check once its own settings are applied (a later `--n-embd 100` makes `H=5` valid).
pub fn decode_strict_deferred(base: &LinkState, input: &str) -> Result<Deferred, String> {
    strict(base, input, Combination::Defer)
}

fn strict(base: &LinkState, input: &str, combination: Combination) -> Result<Deferred, String> {
    if !has_settings(input) {
        // The page opens a bare address with its defaults; asked for on purpose, a link without
        // settings is a wrong paste.
        let after_hash = if settings_in(query_part(input).1) { " (what follows '#' is not read)" } else { "" };
        // A query of only the format's version has its '?' part; it lacks the settings.
        let only_version = query_part(input)
            .0
            .split('&')
            .any(|segment| segment.split_once('=').is_some_and(|(key, _)| Field::from_key(&percent_decode(key)) == Some(Field::Version)));
        let hint = if only_version {
            "only the link format's version, no setting (e.g. ?v=1&L=12 sets n_layer; the page opens it with its defaults)"
        } else {
            "a vramfit link has them after '?' (e.g. ?v=1&L=12)"
        };
        return Err(format!("{:?} carries no settings{after_hash}: {hint}", shown(input.trim())));
    }
    let read = read(base, input, combination);
    if read.decoded.notices.is_empty() {
        Ok(read)
    } else {
        // In an error, "ignored" would be misleading: nothing is used.
        // One line stays one readable line, however many keys a link repeats.
        let problems: Vec<String> = read.decoded.notices.iter().map(|n| n.strip_prefix("ignored ").unwrap_or(n).to_string()).collect();
        let (shown, more) = distinct_first(&problems, 3);
        let more = if more > 0 { format!("; and {more} more") } else { String::new() };
        Err(format!("{}{more}", shown.join("; ")))
    }
}

/// The first `max` distinct messages of `all`, in order, and how many messages were left out
/// (repeats of the shown ones aside; repeats among the others each count): a link repeating a
/// key 20,000 times gets one notice for it, not 19,999, and the cost stays linear.
pub fn distinct_first(all: &[String], max: usize) -> (Vec<String>, usize) {
    let mut shown: Vec<String> = Vec::new();
    let mut left_out = 0;
    for message in all {
        if shown.contains(message) {
            continue;
        }
        if shown.len() < max {
            shown.push(message.clone());
        } else {
            left_out += 1;
        }
    }
    (shown, left_out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn state(config: Config) -> LinkState {
        LinkState { config, ..LinkState::default() }
    }

    #[test]
    fn default_link_is_the_documented_one() {
        assert_eq!(
            encode(&LinkState::default()),
            "v=1&L=12&H=12&C=768&T=1024&V=50304&B=12&GA=40&EI=200&d=bf16&a=flash&bias=0&drop=0&cmp=1&ckpt=0&opt=adamw&xs=0&gpu=rtx-4070&other=0"
        );
    }

    #[test]
    fn empty_and_bare_inputs_give_defaults_silently() {
        for input in [
            "",
            "?",
            "#x",
            "  ",
            "http://localhost:8080/",
            "https://x.org/vramfit/#top",
            "?&&",
            "https://x.org/#:~:text=batch%20size",
            "v=1",
            "https://x.org/?v=1&",
        ] {
            let d = decode(input);
            assert_eq!(d.state, LinkState::default(), "{input:?}");
            assert!(d.notices.is_empty(), "{input:?}: {:?}", d.notices);
            // On the command line a link without settings is a mistake, said in one line.
            let err = decode_strict(input).unwrap_err();
            assert!(err.contains("carries no settings") && !err.contains('\n'), "{input:?}: {err}");
            // A link of only the version is not blamed for a missing '?'.
            let versioned = input.contains("v=1");
            assert_eq!(err.contains("only the link format's version"), versioned, "{input:?}: {err}");
            assert_eq!(err.contains("after '?'"), !versioned, "{input:?}: {err}");
        }
    }

    #[test]
    fn settings_after_a_hash_are_reported_not_dropped() {
        for (input, fragment) in [("https://x.org/vramfit/#L=3", "#L=3"), ("#v=1&L=3", "#v=1&L=3"), ("?B=4#L=3", "#L=3")] {
            let d = decode(input);
            assert_eq!(d.state.config.n_layer, Config::default().n_layer, "{input:?}");
            assert!(d.notices.iter().any(|n| n.contains(fragment) && n.contains("after '?'")), "{input:?}: {:?}", d.notices);
            assert!(decode_strict(input).is_err(), "{input:?}");
        }
        assert_eq!(decode("?B=4#L=3").state.config.batch_size, 4);
        // A browser's text fragment is not settings: the link reads as if it were not there.
        let highlighted = "https://x.org/?v=1&L=3#:~:text=batch%20size=12";
        assert!(decode(highlighted).notices.is_empty(), "{:?}", decode(highlighted).notices);
        assert_eq!(decode_strict(highlighted).unwrap().config.n_layer, 3);
    }

    #[test]
    fn full_urls_and_bare_queries_read_the_same() {
        let s = LinkState {
            config: Config { n_layer: 6, n_head: 6, n_embd: 384, eval_batch_size: Some(4), dropout: 0.2, ..Config::default() },
            gpu: "t4".into(),
            other_usage_mib: 700,
            init_from: None,
        };
        let q = encode(&s);
        for input in [q.clone(), format!("?{q}"), format!("http://127.0.0.1:8080/app/?{q}#breakdown"), format!(" {q}\n")] {
            let d = decode(&input);
            assert_eq!(d.state, s);
            assert!(d.notices.is_empty(), "{:?}", d.notices);
        }
    }

    #[test]
    fn tiny_dropouts_are_written_with_an_exponent_and_read_back() {
        for d in [1e-320, 5e-324, 1.5e-7, 9.99e-5] {
            let text = dropout_text(d);
            assert!(text.len() <= 12 && text.contains('e'), "{d}: {text}");
            assert_eq!(parse_dropout(&text), Ok(d), "{text}");
            let link = encode(&state(Config { dropout: d, ..Config::default() }));
            assert!(!link.contains("00000"), "{link}");
            assert_eq!(decode_strict(&link).map(|s| s.config.dropout), Ok(d), "{link}");
        }
        assert_eq!(
            (dropout_text(0.0), dropout_text(-0.0), dropout_text(0.2), dropout_text(1e-4)),
            ("0".into(), "0".into(), "0.2".into(), "0.0001".into())
        );
    }

    #[test]
    fn negative_zero_dropout_reads_and_writes_as_zero() {
        let d = decode("drop=-0");
        assert!(d.notices.is_empty(), "{:?}", d.notices);
        assert!(d.state.config.dropout == 0.0 && d.state.config.dropout.is_sign_positive());
        let s = state(Config { dropout: -0.0, ..Config::default() });
        assert!(encode(&s).contains("&drop=0&"), "{}", encode(&s));
    }

    #[test]
    fn bad_values_fall_back_one_notice_each() {
        let d = decode("C=abc&L=0&H=99999&drop=1.5&d=float8&gpu=gtx-9999&other=-3&xyz=1&bias=maybe&EB=");
        assert_eq!(d.state, LinkState::default());
        assert_eq!(d.notices.len(), 10, "{:#?}", d.notices);
        assert!(d.notices.contains(&"ignored C=abc (n_embd): not a number".to_string()), "{:#?}", d.notices);
        assert!(d.notices.iter().any(|n| n.starts_with("ignored L=0 (n_layer): must be at least 1")));
        assert!(d.notices.iter().any(|n| n.starts_with("ignored xyz=1: unknown key")));
        assert!(d.notices.iter().any(|n| n.starts_with("ignored EB= (eval_batch_size): empty value")));
        // A switch names every spelling it reads (not only the 0 and 1 links write).
        assert!(d.notices.contains(&"ignored bias=maybe: expected 0 or 1 (or true/false, yes/no, on/off)".to_string()), "{:#?}", d.notices);
        // Negative and fractional numbers say so.
        let d = decode("v=1&B=-3&GA=2.5");
        assert!(d.notices.contains(&"ignored B=-3 (batch_size): cannot be negative".to_string()), "{:#?}", d.notices);
        assert!(d.notices.contains(&"ignored GA=2.5 (gradient_accumulation_steps): not a whole number".to_string()), "{:#?}", d.notices);
    }

    #[test]
    fn whole_numbers_written_as_decimals_read_as_the_page_boxes_read_them() {
        let d = decode("v=1&L=6.0&B=1e1&other=5.00");
        assert!(d.notices.is_empty(), "{:#?}", d.notices);
        assert_eq!((d.state.config.n_layer, d.state.config.batch_size, d.state.other_usage_mib), (6, 10, 5));
        // Not whole, not finite, or past what an f64 holds exactly: refused, saying which.
        let d = decode("L=6.5&B=inf&other=1e300&C=1e16");
        assert_eq!(d.state, LinkState::default());
        assert!(d.notices.contains(&"ignored L=6.5 (n_layer): not a whole number".to_string()), "{:#?}", d.notices);
        assert!(d.notices.contains(&"ignored B=inf (batch_size): not a number".to_string()), "{:#?}", d.notices);
        assert!(d.notices.contains(&"ignored other=1e300 (other_usage_mib): too large".to_string()), "{:#?}", d.notices);
        assert!(d.notices.contains(&"ignored C=1e16 (n_embd): too large".to_string()), "{:#?}", d.notices);
    }

    #[test]
    fn given_names_the_settings_the_link_set_and_kept() {
        // Short and long keys both count; a value that was ignored, and the version, do not.
        let d = decode("v=1&V=65&gradient_accumulation_steps=4&C=abc&gpu=rtx-3090");
        assert_eq!(d.given, vec!["vocab_size", "gradient_accumulation_steps", "gpu"]);
        assert!(d.sets("vocab_size") && !d.sets("n_embd") && !d.sets("version"));
        // A setting dropped because the combination is invalid is not given either.
        let d = decode("H=5");
        assert!(!d.notices.is_empty());
        assert!(!d.sets("n_head"), "{:?}", d.given);
        // The strict reader reports the same.
        assert_eq!(decode_strict_over(&LinkState::default(), "L=6&EI=3").unwrap().given, vec!["n_layer", "eval_iters"]);
    }

    #[test]
    fn long_names_percent_encoding_and_plus_work() {
        let d = decode("n_layer=%32&dtype=float16&gpu=RTX+3090&attention=%20manual");
        assert!(d.notices.is_empty(), "{:?}", d.notices);
        assert_eq!(d.state.config.n_layer, 2);
        assert_eq!(d.state.config.dtype, Dtype::Float16);
        assert_eq!(d.state.config.attention, Attention::Manual);
        assert_eq!(d.state.gpu, "rtx-3090");
    }

    #[test]
    fn repeated_keys_last_wins_with_a_notice() {
        let d = decode("L=4&n_layer=6&L=8");
        assert_eq!(d.state.config.n_layer, 8);
        assert_eq!(d.notices.len(), 2, "{:?}", d.notices);
        assert!(d.notices[0].contains("L=4"));
    }

    #[test]
    fn invalid_combinations_fall_back_field_by_field() {
        // n_head does not divide n_embd: n_head (the one named first) goes back to 12, 768/12 ok.
        let d = decode("C=768&H=7");
        assert_eq!((d.state.config.n_embd, d.state.config.n_head), (768, 12));
        assert_eq!(d.notices, vec!["ignored H=7 (n_head): n_embd (768) must be divisible by n_head (7)".to_string()]);

        // Only n_embd's fallback helps: n_head=12 stays.
        let d = decode("C=770&H=12");
        assert_eq!((d.state.config.n_embd, d.state.config.n_head), (768, 12));
        assert_eq!(d.notices.len(), 1, "{:?}", d.notices);
        assert!(d.notices[0].starts_with("ignored C=770 (n_embd)"), "{:?}", d.notices);

        // Neither fallback works with the other's value: both fall back; unrelated keys stay.
        let d = decode("C=100&H=7&L=3");
        assert_eq!((d.state.config.n_layer, d.state.config.n_embd, d.state.config.n_head), (3, 768, 12));
        assert_eq!(d.notices.len(), 2, "{:?}", d.notices);

        // Eval context longer than the training context.
        let d = decode("T=256&ET=512");
        assert_eq!((d.state.config.block_size, d.state.config.eval_block_size), (256, None));
        assert_eq!(d.notices.len(), 1);

        // Each size is in range but their product is not countable: the most extreme goes.
        let d = decode("B=65536&T=1048576&V=4194304");
        assert!(d.state.config.validate().is_ok());
        assert!(!d.notices.is_empty());
    }

    #[test]
    fn hostile_inputs_do_not_panic() {
        for input in [
            "%",
            "%%",
            "%zz=%",
            "%E2%82=1",
            "L=99999999999999999999999999",
            "=&=&=",
            "ü=ö&L=١٢",
            "?#?#",
            "drop=NaN&drop=inf&drop=1e-400",
            "L=\u{0}\n",
        ] {
            let d = decode(input);
            assert!(d.state.config.validate().is_ok(), "{input:?}");
            assert!(d.notices.iter().all(|n| !n.contains('\n')), "{input:?}");
        }
    }

    #[test]
    fn strict_decoding_rejects_any_notice_in_one_line() {
        assert_eq!(decode_strict("L=6&gpu=a100-80gb").unwrap().config.n_layer, 6);
        let err = decode_strict("L=x&v=9").unwrap_err();
        assert!(!err.contains('\n'));
        assert!(err.contains("L=x"), "{err}");
        assert!(err.contains("version"), "{err}");
        // A link repeating keys thousands of times: each problem once, three at most, a count.
        let spam = format!("v=1{}{}", "&L=4".repeat(5000), "&zz=1&yy=2&xx=3&ww=4");
        let err = decode_strict(&spam).unwrap_err();
        assert!(err.len() < 300 && err.ends_with("; and 2 more"), "{} bytes: {}", err.len(), &err[..err.len().min(300)]);
        assert_eq!(err.matches("n_layer is given again later").count(), 1, "{err}");
    }

    /// A right-to-left override in a link is shown escaped: raw, it turned the rest of the
    /// notice line backwards.
    #[test]
    fn notices_escape_characters_that_reshape_text() {
        let notices = decode("?v=1&gpu=%E2%80%AEabc&L=%E2%81%A6x").notices;
        assert_eq!(notices.len(), 2, "{notices:?}");
        assert!(notices.iter().all(|n| !n.chars().any(crate::reshapes_text)), "{notices:?}");
        assert!(notices.iter().any(|n| n.contains("gpu=\\u{202e}abc")), "{notices:?}");
    }

    /// A custom card out of range says the range, not "unknown GPU".
    #[test]
    fn a_custom_card_out_of_range_names_the_range() {
        for size in ["custom-0", "custom-0.1", "custom-1e9"] {
            let notices = decode(&format!("?v=1&gpu={size}")).notices;
            assert_eq!(notices, [format!("ignored gpu={size}: a custom size is 0.25 to 4096 GiB (custom-<GiB>)")]);
        }
        assert!(decode("?v=1&gpu=nvidia").notices[0].ends_with("unknown GPU (a preset id such as rtx-4070, or custom-<GiB>)"));
        // A name of several cards says which, as --gpu does.
        assert_eq!(
            decode("?v=1&gpu=a100").notices,
            ["ignored gpu=a100: \"a100\" names 2 cards: a100-40gb, a100-80gb; give one of them (a link takes its preset id)"]
        );
    }

    #[test]
    fn decode_over_keeps_unmentioned_fields_of_the_base() {
        let base = state(Config { n_layer: 6, n_head: 6, n_embd: 384, ..Config::default() });
        let d = decode_over(&base, "B=4&H=5");
        assert_eq!(d.state.config.batch_size, 4);
        assert_eq!((d.state.config.n_layer, d.state.config.n_head, d.state.config.n_embd), (6, 6, 384));
        assert_eq!(d.notices.len(), 1);
    }

    fn from_checkpoint(name: &str, config: Config) -> LinkState {
        let mut s = LinkState { config, init_from: Some(name.into()), ..LinkState::default() };
        assert!(crate::nanogpt::take_pretrained_shape(&mut s.config, name));
        s
    }

    #[test]
    fn a_run_from_a_checkpoint_round_trips_with_its_key_last() {
        let s = from_checkpoint("gpt2-xl", Config { block_size: 512, batch_size: 1, gradient_accumulation_steps: 32, ..Config::default() });
        let q = encode(&s);
        assert!(q.ends_with("&other=0&init=gpt2-xl"), "{q}");
        assert!(q.contains("&L=48&H=25&C=1600&T=512&V=50257&"), "{q}");
        let d = decode(&q);
        assert!(d.notices.is_empty(), "{:?}", d.notices);
        assert_eq!(d.state, s);
        assert!(d.sets("init_from"));
        // The long name works too, and the shape need not be spelt out.
        let d = decode("init_from=gpt2-medium&B=4");
        assert!(d.notices.is_empty(), "{:?}", d.notices);
        assert_eq!(d.state, from_checkpoint("gpt2-medium", Config { batch_size: 4, ..Config::default() }));
        // The link chose the shape by naming the checkpoint.
        assert!(d.sets("n_layer") && d.sets("vocab_size") && !d.sets("block_size"), "{:?}", d.given);
        // Over a base from a checkpoint, a link without `init` sets no shape.
        let d = decode_over(&d.state, "B=2");
        assert!(!d.sets("n_layer") && !d.sets("init_from"), "{:?}", d.given);
    }

    #[test]
    fn shape_values_a_checkpoint_overrides_are_ignored_with_notices() {
        let d = decode("init=gpt2&L=4&H=12&T=2048&bias=0&V=65&ET=2048&B=8");
        assert_eq!(d.state, from_checkpoint("gpt2", Config { batch_size: 8, ..Config::default() }));
        let all = d.notices.join("\n");
        assert_eq!(d.notices.len(), 5, "{all}");
        for needle in [
            "ignored L=4 (n_layer): init_from = 'gpt2' loads GPT-2's n_layer (12)",
            "ignored bias=0: init_from = 'gpt2' loads GPT-2's bias (True)",
            "ignored V=65 (vocab_size): init_from = 'gpt2' loads GPT-2's vocab_size (50257)",
            "ignored T=2048 (block_size): GPT-2's checkpoint has 1024 positions",
            "ignored ET=2048 (eval_block_size): longer than block_size 1024",
        ] {
            assert!(all.contains(needle), "{needle:?} not in\n{all}");
        }
        // H=12 is GPT-2's own: no notice for it.
        assert!(!all.contains("H=12"), "{all}");
        assert!(decode_strict("init=gpt2&L=4").unwrap_err().contains("L=4 (n_layer)"));
        // A shorter block and eval context are train.py's crop: kept.
        let d = decode("init=gpt2-large&T=256&ET=128");
        assert!(d.notices.is_empty(), "{:?}", d.notices);
        assert_eq!((d.state.config.n_layer, d.state.config.block_size, d.state.config.eval_block_size), (36, 256, Some(128)));
    }

    #[test]
    fn init_from_takes_gpt2s_checkpoints_and_scratch_only() {
        for bad in ["resume", "gpt2-xxl", "GPT2", ""] {
            let d = decode(&format!("init={bad}&L=4"));
            assert_eq!((d.state.init_from.as_deref(), d.state.config.n_layer), (None, 4), "{bad}");
            assert_eq!(d.notices.len(), 1, "{bad}: {:?}", d.notices);
            assert!(d.notices[0].starts_with(&format!("ignored init={bad} (init_from): ")), "{:?}", d.notices);
        }
        // `scratch` over a base from a checkpoint keeps the shape and drops the checkpoint.
        let base = from_checkpoint("gpt2-medium", Config::default());
        let d = decode_over(&base, "init=scratch&L=4");
        assert!(d.notices.is_empty(), "{:?}", d.notices);
        assert_eq!((d.state.init_from.as_deref(), d.state.config.n_layer, d.state.config.n_embd), (None, 4, 1024));
        assert!(d.sets("init_from"));
        assert!(!encode(&d.state).contains("init="));
        // A link without `init` keeps the base's checkpoint, and its shape; the notice says how
        // to plan the link's own shape.
        let d = decode_over(&base, "L=4&B=2");
        assert_eq!((d.state.init_from.as_deref(), d.state.config.n_layer, d.state.config.batch_size), (Some("gpt2-medium"), 24, 2));
        assert_eq!(d.notices.len(), 1, "{:?}", d.notices);
        assert!(d.notices[0].ends_with("(24); add init=scratch to the link to plan it from scratch"), "{:?}", d.notices);
        assert!(!decode("init=gpt2&L=4").notices[0].contains("add init=scratch"));
    }

    #[test]
    fn a_base_from_scratch_with_a_long_block_is_cropped_to_the_checkpoint() {
        let base = state(Config { block_size: 2048, eval_block_size: Some(2048), ..Config::default() });
        let d = decode_over(&base, "init=gpt2");
        assert!(d.notices.is_empty(), "{:?}", d.notices);
        assert_eq!((d.state.config.block_size, d.state.config.eval_block_size), (1024, None));
        assert!(d.state.config.validate().is_ok());
        // An eval context the crop makes too long names the crop; one longer than the link's
        // own block does not blame the checkpoint.
        let d = decode_over(&base, "init=gpt2&ET=1536");
        assert_eq!(d.notices, ["ignored ET=1536 (eval_block_size): longer than block_size 1024 (GPT-2's checkpoint crops it to 1024)"]);
        assert_eq!(d.state.config.eval_block_size, None);
        let d = decode("init=gpt2&T=512&ET=1024");
        assert_eq!(d.notices, ["ignored ET=1024 (eval_block_size): longer than block_size 512"]);
        assert_eq!((d.state.config.block_size, d.state.config.eval_block_size), (512, None));
    }

    /// The command line's reader under flags keeps settings that only conflict together, for
    /// the flags to settle, and refuses what is wrong for a key on its own as the strict one does.
    #[test]
    fn deferred_decoding_keeps_combinations_and_refuses_bad_keys() {
        let base = LinkState::default();
        let d = decode_strict_deferred(&base, "?v=1&H=5").unwrap();
        assert_eq!((d.decoded.state.config.n_head, d.decoded.state.config.n_embd), (5, 768));
        assert!(d.decoded.notices.is_empty() && d.decoded.sets("n_head"));
        assert!(d.decoded.state.config.validate().is_err());
        assert_eq!(d.written("n_head").as_deref(), Some("H=5"));
        assert_eq!(d.described("n_head").as_deref(), Some("H=5 (n_head)"));
        assert_eq!((d.written("n_embd"), d.written("version")), (None, None));
        // The strict reader refuses the same link; the page's falls back.
        assert!(decode_strict_over(&base, "H=5").unwrap_err().contains("divisible"));
        assert_eq!(decode("H=5").state.config.n_head, 12);
        for (link, config) in [
            ("T=256&ET=512", Config { block_size: 256, eval_block_size: Some(512), ..Config::default() }),
            ("B=65536&T=1048576&V=4194304", Config { batch_size: 65536, block_size: 1 << 20, vocab_size: 1 << 22, ..Config::default() }),
        ] {
            let d = decode_strict_deferred(&base, link).unwrap();
            assert_eq!(d.decoded.state.config, config, "{link}");
        }
        // Each key is still checked on its own.
        for (link, why) in [
            ("H=0", "H=0 (n_head): must be at least 1"),
            ("H=abc", "H=abc (n_head): not a number"),
            ("C=-4", "C=-4 (n_embd): cannot be negative"),
            ("zz=1", "zz=1: unknown key"),
            ("L=4&L=5", "L=4 (n_layer): n_layer is given again later"),
            ("init=gpt2&L=4", "L=4 (n_layer): init_from = 'gpt2' loads GPT-2's n_layer (12)"),
            ("", "carries no settings"),
        ] {
            let err = decode_strict_deferred(&base, link).unwrap_err();
            assert!(err.contains(why), "{link}: {err}");
        }
    }

    /// Under a checkpoint the deferred reader takes the shape but leaves the block to the
    /// caller: a flag may shorten it.
    #[test]
    fn deferred_decoding_leaves_a_checkpoints_block_to_the_caller() {
        let d = decode_strict_deferred(&LinkState::default(), "init=gpt2-medium&T=2048&ET=1536&V=50257").unwrap();
        let c = &d.decoded.state.config;
        assert_eq!((c.n_layer, c.n_embd, c.vocab_size, c.bias), (24, 1024, 50257, true));
        assert_eq!((c.block_size, c.eval_block_size), (2048, Some(1536)));
        assert_eq!(d.written("vocab_size").as_deref(), Some("V=50257"));
        assert_eq!(d.written("n_layer"), None);
        assert!(d.decoded.sets("n_layer"));
        // A base's long block under the link's checkpoint stays for the caller to refuse.
        let long = state(Config { block_size: 2048, ..Config::default() });
        assert_eq!(decode_strict_deferred(&long, "init=gpt2").unwrap().decoded.state.config.block_size, 2048);
        // Under the base's own checkpoint, a link naming neither it nor the block is cropped, as
        // the page crops it.
        let base =
            LinkState { config: Config { block_size: 2048, ..Config::default() }, init_from: Some("gpt2".into()), ..LinkState::default() };
        let d = decode_strict_deferred(&base, "B=4").unwrap();
        assert_eq!((d.decoded.state.config.block_size, d.decoded.state.config.n_layer), (1024, 12));
        assert_eq!(d.decoded.state, decode_over(&base, "B=4").state);
    }

    #[test]
    fn pretrained_conflict_names_what_the_checkpoint_fixes() {
        let s = from_checkpoint("gpt2", Config::default());
        assert_eq!(s.pretrained_conflict(), None);
        assert_eq!(LinkState { config: Config { n_layer: 4, ..Config::default() }, ..LinkState::default() }.pretrained_conflict(), None);
        let edit = |f: fn(&mut Config)| {
            let mut e = s.clone();
            f(&mut e.config);
            e.pretrained_conflict().unwrap_or_default()
        };
        assert!(edit(|c| c.n_layer = 4).contains("n_layer is the checkpoint's (12)"));
        assert!(edit(|c| c.n_embd = 1024).contains("n_embd is the checkpoint's (768)"));
        assert!(edit(|c| c.block_size = 2048).contains("block_size is at most 1024"));
        assert!(edit(|c| c.bias = false).contains("bias True"));
        assert_eq!(edit(|c| c.block_size = 64), "");
    }

    /// A valid state: config fields within range and consistent, a canonical gpu id, sometimes
    /// from a GPT-2 checkpoint (with its shape).
    pub(crate) fn valid_state() -> impl Strategy<Value = LinkState> {
        let gpu_ids: Vec<String> = device::presets().into_iter().map(|g| g.id).collect();
        let sizes = (1u32..=48, 1u32..=32, 1u32..=64, 1u32..=4096, 1u32..=200_000, 1u32..=512, 1u32..=1000);
        let eval = (proptest::option::of(1u32..=512), proptest::option::of(0.0f64..=1.0), 1u32..=1000);
        let enums = (0usize..3, any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>());
        let dropout = prop_oneof![Just(0.0), 0.0f64..1.0];
        let gpu = prop_oneof![proptest::sample::select(gpu_ids), (1u32..=40_000).prop_map(|q| Gpu::custom(q as f64 / 100.0).id)];
        let init = proptest::option::weighted(0.2, proptest::sample::select(crate::nanogpt::pretrained_names().to_vec()));
        (sizes, eval, enums, dropout, gpu, 0u64..=MAX_OTHER_USAGE_MIB, init).prop_map(
            |(
                (l, h, head_size, t, v, b, ga),
                (eb, et_frac, ei),
                (d, att, bias, cmp, ckpt, sgd, xs, eval_only),
                dropout,
                gpu,
                other,
                init,
            )| {
                let config = Config {
                    n_layer: l,
                    n_head: h,
                    n_embd: h * head_size,
                    block_size: t,
                    vocab_size: v,
                    bias,
                    dropout,
                    batch_size: b,
                    gradient_accumulation_steps: ga,
                    eval_iters: ei,
                    eval_batch_size: eb,
                    eval_block_size: et_frac.map(|f| ((t as f64 * f) as u32).clamp(1, t)),
                    dtype: Dtype::ALL[d],
                    attention: if att { Attention::Flash } else { Attention::Manual },
                    compile: cmp,
                    activation_checkpointing: ckpt,
                    optimizer: if sgd { Optimizer::Sgd } else { Optimizer::Adamw },
                    expandable_segments: xs,
                    eval_only,
                };
                let mut s = LinkState { config, gpu, other_usage_mib: other, init_from: init.map(str::to_string) };
                if let Some(name) = init {
                    crate::nanogpt::take_pretrained_shape(&mut s.config, name);
                }
                s
            },
        )
    }

    proptest! {
        #[test]
        fn round_trip_is_exact_and_silent(s in valid_state()) {
            prop_assume!(s.config.validate().is_ok());
            let d = decode(&encode(&s));
            prop_assert!(d.notices.is_empty(), "{:?}", d.notices);
            prop_assert_eq!(d.state, s);
        }

        /// Over any valid base (some from a checkpoint), a link of any keys decodes to a valid
        /// config with its checkpoint's shape.
        #[test]
        fn links_over_any_base_keep_the_invariants(
            base in valid_state(),
            pairs in proptest::collection::vec(("(L|H|C|T|V|B|ET|EB|bias|init)", "(gpt2|gpt2-xl|scratch|resume|0|1|4|512|1024|2048|4096)"), 0..8)
        ) {
            prop_assume!(base.config.validate().is_ok());
            let input: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let d = decode_over(&base, &input.join("&"));
            prop_assert!(d.state.config.validate().is_ok(), "{:?}", d.state.config);
            prop_assert_eq!(d.state.pretrained_conflict(), None);
            // What the page writes reads back the same, over the default base.
            let again = decode(&encode(&d.state));
            prop_assert!(again.notices.is_empty(), "{:?}", again.notices);
            prop_assert_eq!(again.state, d.state);
        }

        #[test]
        fn arbitrary_strings_never_panic_and_decode_valid(input in any::<String>()) {
            let d = decode(&input);
            prop_assert!(d.state.config.validate().is_ok());
            prop_assert!(d.notices.iter().all(|n| !n.contains('\n')));
        }

        #[test]
        fn link_shaped_garbage_never_panics(
            pairs in proptest::collection::vec(("(v|L|H|C|T|V|B|GA|EB|ET|EI|d|a|bias|drop|cmp|ckpt|opt|xs|gpu|other|init|n_embd|zz)", "(gpt2|gpt2-xl|[0-9a-z.%+&=#?-]{0,12})"), 0..12)
        ) {
            let input: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let d = decode(&input.join("&"));
            prop_assert!(d.state.config.validate().is_ok());
            // A run from a checkpoint always has its shape.
            prop_assert_eq!(d.state.pretrained_conflict(), None);
            let joined = input.join("&");
            prop_assert!(decode_strict(&joined).is_ok() == (d.notices.is_empty() && has_settings(&joined)));
            // The deferred reader accepts all the strict one does, with the same result, and
            // what it accepts besides only fails as a whole.
            let deferred = decode_strict_deferred(&LinkState::default(), &joined);
            match decode_strict_over(&LinkState::default(), &joined) {
                Ok(strict) => prop_assert_eq!(deferred.map(|r| r.decoded), Ok(strict)),
                Err(_) => {
                    if let Ok(r) = deferred {
                        let c = &r.decoded.state.config;
                        let past_checkpoint = r.decoded.state.init_from.is_some() && c.block_size > crate::nanogpt::PRETRAINED_BLOCK;
                        prop_assert!(c.validate().is_err() || past_checkpoint, "{:?}", c);
                    }
                }
            }
        }
    }
}
