//! Turning flags, a config file and a link into one validated run description.
//!
//! Precedence, lowest first: nanoGPT's defaults, `--config FILE`, `--link`, explicit flags. A
//! config file given as train.py takes it (no `--config`) is run where it stands among the
//! flags, as train.py's configurator runs its arguments: it reads over the flags before it and
//! replaces those it sets.
//! `plan` and `train` read their settings this way (`train` starts from a small model when given
//! neither a config file nor a link; see `train_cmd`).

use crate::cli::{CardArgs, RunArgs};
use vramfit_core::link::{self, LinkState};
use vramfit_core::nanogpt::{self, ConfigFileError, Value};
use vramfit_core::{device, Config, Gpu};

/// A nanoGPT config file is a few hundred bytes; past this it is not one (and `/dev/zero` or an
/// endless pipe would otherwise be read until memory runs out).
const MAX_CONFIG_FILE_BYTES: u64 = 64 << 20;

/// Everything a command needs to know about the run and the cards.
#[derive(Debug)]
pub struct Inputs {
    /// Passes `Config::validate`.
    pub config: Config,
    /// At least one card; the first is the one fixes and the largest batch are computed for.
    pub gpus: Vec<Gpu>,
    pub other_usage_mib: u64,
    /// Settings the config file set that the memory model does not use (learning_rate, ...).
    pub extra: Vec<(String, Value)>,
    /// Lines of the config file that were skipped, each prefixed with the file's name.
    pub notices: Vec<String>,
    /// Training settings the config file assigned but whose value could not be read (each
    /// also in `notices`): `train` refuses to run on defaults in their place.
    pub unreadable: Vec<String>,
    /// The settings `--link` gave, by their long names (`vocab_size`); empty without a link.
    pub link_sets: Vec<&'static str>,
    /// The GPT-2 checkpoint the run starts from (`init_from` of the file, the command line or
    /// the link, the link last), or `None` from scratch.
    pub init_from: Option<String>,
    /// The dataset whose meta.pkl train.py would take vocab_size from (the config file's or
    /// the command line's `dataset`, which set no vocab_size): see
    /// [`nanogpt::ConfigFile::vocab_from_dataset`].
    pub vocab_from_dataset: Option<String>,
    /// Flags given before a config file (as train.py takes it) that the file sets: train.py
    /// takes the file's values, and so does the plan; `RunArgs::without` them is what the
    /// command line still says.
    pub flags_replaced_by_file: Vec<&'static str>,
}

impl Inputs {
    /// Other programs' usage in bytes (bounded by the flag and link parsers, so no overflow).
    pub fn other_usage_bytes(&self) -> u64 {
        self.other_usage_mib.saturating_mul(1 << 20)
    }
}

/// A command-line value as a Python string literal, as train.py's configurator takes a value
/// it cannot evaluate (`--dataset=shakespeare_char`); one already quoted stays as it is.
fn python_string(value: &str) -> String {
    let v = value.trim();
    let quoted = v.len() >= 2 && ((v.starts_with('\'') && v.ends_with('\'')) || (v.starts_with('"') && v.ends_with('"')));
    if quoted {
        v.to_string()
    } else {
        format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

/// The settings a file (or command line) assigned but whose value could not be read, one line
/// each with why, naming where.
fn unreadable_lines(source: &str, names: Vec<String>, reasons: Vec<String>) -> Vec<String> {
    names.into_iter().zip(reasons).map(|(name, why)| format!("{source}: cannot read the value of {name} ({why})")).collect()
}

/// Combines the sources in order of precedence; the error is one line for the user.
pub fn resolve(run: &RunArgs, card: &CardArgs) -> Result<Inputs, String> {
    let mut state = LinkState::default();
    let mut extra = Vec::new();
    let mut notices = Vec::new();
    let mut unreadable = Vec::new();
    let mut link_sets = Vec::new();
    let mut vocab_from_dataset = None;
    // The config file's values that are bad only as its final ones (see below), and its name.
    let mut file_errors: Vec<ConfigFileError> = Vec::new();
    let mut file_shown = String::new();
    // `--dataset=X` / `--init_from=Y` from a pasted train.py command line, as config lines.
    let command_line: String = run.file_settings.iter().map(|(name, value)| format!("{name} = {}\n", python_string(value))).collect();
    // Flags before the config file that it sets (see `Inputs::flags_replaced_by_file`).
    let mut replaced: Vec<&'static str> = Vec::new();

    if let Some(path) = &run.config {
        let shown = path.display();
        let bytes = vramfit::data::read_input_file(path, Some(MAX_CONFIG_FILE_BYTES)).map_err(|e| {
            // A page link pasted where a file goes (first, without --link) is not a file name.
            let link_like = path.to_str().is_some_and(|p| p.contains("?v=") || p.starts_with("http") || p.starts_with('?'));
            let hint = if link_like { " (a page link goes after --link)" } else { "" };
            format!("cannot read config file {shown}: {e}{hint}")
        })?;
        let mut text = String::from_utf8(bytes).map_err(|e| format!("cannot read config file {shown}: not UTF-8 text ({e})"))?;
        if !command_line.is_empty() {
            // After the file's own lines, as train.py's configurator applies them.
            text.push('\n');
            text.push_str(&command_line);
        }
        // Flags before a file given as train.py takes it are run before it, as train.py's
        // configurator runs its arguments in order: the file reads over them.
        apply_flags_where(&mut state.config, run, |name| run.before_file.contains(&name));
        // What would refuse the file only for its final values waits for the link and flags,
        // which train.py would apply on top (its command-line overrides).
        let (file, deferred) =
            nanogpt::parse_config_file_deferring(&text, &state.config).map_err(|e| format!("config file {shown}: {e}"))?;
        replaced = run.before_file.iter().copied().filter(|name| file.sets.contains(name)).collect();
        for &name in &replaced {
            let (flag, file_value) = (python_setting(&state.config, name), python_setting(&file.config, name));
            if flag != file_value {
                notices.push(format!(
                    "{shown}: {name} = {file_value} replaces --{name}={}, given before the file (train.py runs its arguments in order)",
                    flag.trim_matches('\'')
                ));
            }
        }
        (file_errors, file_shown) = (deferred, shown.to_string());
        if let (false, Some((line, text))) = (file.recognised, &file.first_statement) {
            // Prose, a log, a data file: not a config file that sets nothing but the wrong file.
            return Err(format!(
                "config file {shown}: not a nanoGPT config file (it sets none of the settings vramfit reads, and line {line}, \
                 `{text}`, is not a Python assignment)"
            ));
        }
        if !file.recognised {
            // An empty file, or one of comments and other names: say so rather than plan the
            // defaults silently.
            notices.push(format!("{shown}: sets none of the settings vramfit reads (empty, or only names vramfit does not know)"));
        } else if file.config == state.config && file.extra.is_empty() && file_errors.is_empty() {
            notices.push(format!("{shown}: changes none of the settings vramfit reads (all at their defaults)"));
        }
        state.config = file.config;
        vocab_from_dataset = file.vocab_from_dataset;
        extra = file.extra;
        unreadable = unreadable_lines(&shown.to_string(), file.unreadable, file.unreadable_reasons);
        notices.extend(file.notices.into_iter().map(|n| format!("{shown}: {n}")));
    }
    if run.config.is_none() && !command_line.is_empty() {
        let given = nanogpt::parse_config_file(&command_line, &state.config).map_err(|e| format!("command line: {e}"))?;
        state.config = given.config;
        vocab_from_dataset = given.vocab_from_dataset;
        extra = given.extra;
        unreadable = unreadable_lines("command line", given.unreadable, given.unreadable_reasons);
        notices.extend(given.notices.into_iter().map(|n| format!("command line: {n}")));
    }
    // The file's checkpoint is the link's base: a link without `init` keeps it.
    state.init_from = nanogpt::pretrained_in(&extra).map(str::to_string);
    // Settings valid one by one but not together are checked once, after the flags (a flag
    // may settle them, as train.py only sees the final values).
    let mut link_read = None;
    if let Some(url) = &run.link {
        let read = link::decode_strict_deferred(&state, url).map_err(|e| format!("--link: {e}"))?;
        let decoded = &read.decoded;
        if decoded.sets("init_from") {
            // The link's start replaces the file's: the file's `init_from` is not used.
            if let Some((_, file_value)) = extra.iter().find(|(k, _)| k == "init_from") {
                let link_value = decoded.state.init_from.as_deref().unwrap_or("scratch");
                if *file_value != Value::Str(link_value.into()) {
                    notices.push(format!("--link: init_from = '{link_value}' replaces the file's init_from = {file_value}"));
                }
            }
            extra.retain(|(k, _)| k != "init_from");
            // A checkpoint the link starts from overrides the shape the file gave: a note names
            // the file's settings it replaces (those the file changed from nanoGPT's defaults
            // and the link did not write itself; the link's own always agree with the
            // checkpoint). The block is checked after the flags.
            if let Some(name) = decoded.state.init_from.as_deref() {
                let from_file: Vec<&str> =
                    nanogpt::shape_changes(&Config::default(), &state.config).into_iter().map(|(setting, _, _)| setting).collect();
                let counts = |setting: &str| setting != "block_size" && from_file.contains(&setting) && read.written(setting).is_none();
                if let Some(notice) = replaced_by_checkpoint(name, &state.config, &decoded.state.config, counts)? {
                    notices.push(format!("--link: {notice}"));
                }
            }
        }
        state = read.decoded.state.clone();
        link_sets = read.decoded.given.clone();
        link_read = Some(read);
    }
    // From here on, the flags are those the file did not replace (a flag before the file that
    // it does not set stands, over the link too, as any flag).
    let kept;
    let run = match replaced.is_empty() {
        true => run,
        false => {
            kept = run.without(&replaced);
            &kept
        }
    };
    apply_flags(&mut state.config, run);
    // The file's block past a checkpoint's positions is not the run's once the link or a flag
    // replaces it (train.py applies its command line on top); the final block is checked below.
    if flag_sets(run, "block_size") || link_read.as_ref().is_some_and(|read| read.decoded.sets("block_size")) {
        notices.retain(|n| !(n.starts_with(&format!("{file_shown}: ")) && n.contains(nanogpt::PAST_POSITIONS)));
    }
    // Each of the file's values that is still bad, in line order (replacing one does not excuse
    // the others).
    for err in &file_errors {
        let link_sets_it = |key: &str| link_read.as_ref().is_some_and(|read| read.decoded.sets(key));
        let still_at_fault = match err {
            // A bad value the link or a flag replaces is not the one the run gets.
            ConfigFileError::BadValue { key, .. } => !flag_sets(run, key) && !link_sets_it(key),
            // The file's values are still the ones that do not go together.
            ConfigFileError::Invalid { source, .. } | ConfigFileError::InvalidBase(source) => {
                state.config.validate().err().as_ref() == Some(source)
            }
            ConfigFileError::Syntax { .. } => true,
        };
        if still_at_fault {
            return Err(format!("config file {file_shown}: {err}"));
        }
    }
    match &link_read {
        Some(read) => check_over_link(&state, run, read)?,
        None => state.config.validate().map_err(|e| e.to_string())?,
    }

    let gpus = if card.gpu.is_empty() {
        // The link's id came out of Gpu::find, so it is found again; the default is a fallback.
        vec![Gpu::find(&state.gpu).unwrap_or_else(device::default_gpu)]
    } else {
        // A card named twice (`--gpu 4070,rtx-4070`) is planned once.
        let mut gpus: Vec<Gpu> = Vec::new();
        for gpu in &card.gpu {
            if !gpus.iter().any(|g| g.id == gpu.id) {
                gpus.push(gpu.clone());
            }
        }
        gpus
    };
    Ok(Inputs {
        config: state.config,
        gpus,
        other_usage_mib: card.other_usage_mib.unwrap_or(state.other_usage_mib),
        extra,
        notices,
        unreadable,
        link_sets,
        init_from: state.init_from,
        vocab_from_dataset,
        flags_replaced_by_file: replaced,
    })
}

/// The final config under a link, checked once with the flags applied: a block past the
/// checkpoint's positions, then `Config::validate`. An error on settings that conflict says
/// which of them the link gave (and which a flag), so a conflict the user cannot see in the
/// link itself is not a puzzle.
fn check_over_link(state: &LinkState, run: &RunArgs, read: &link::Deferred) -> Result<(), String> {
    let cfg = &state.config;
    let positions = nanogpt::PRETRAINED_BLOCK;
    // A flag's block is checked where the checkpoint's shape is taken, as without a link.
    if let (Some(name), true, None) = (&state.init_from, cfg.block_size > positions, run.block_size) {
        return Err(match read.described("block_size") {
            Some(t) => format!("--link: {t}: GPT-2's checkpoint has {positions} positions (init_from = '{name}')"),
            None => format!(
                "block_size {}: init_from = '{name}' loads GPT-2's {positions} positions, which train.py crops but never extends",
                cfg.block_size
            ),
        });
    }
    cfg.validate().map_err(|err| {
        let link_gave = |setting: &str| read.decoded.sets(setting) && !flag_sets(run, setting);
        // A checkpoint's shape is the link's through its `init`.
        let spelt = |setting: &str, as_written: bool| {
            let spell = |s: &str| if as_written { read.written(s) } else { read.described(s) };
            spell(setting).or_else(|| spell("init_from"))
        };
        let involved = err.settings(cfg);
        if !involved.iter().any(|s| link_gave(s)) {
            return err.to_string();
        }
        if !involved.iter().any(|s| flag_sets(run, s)) {
            // The link's own settings conflict: named as a link's bad key is.
            let mut keys: Vec<String> = Vec::new();
            for key in involved.iter().filter(|s| link_gave(s)).filter_map(|s| spelt(s, false)) {
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
            return format!("--link: {}: {err}", keys.join(", "));
        }
        let sources: Vec<String> = involved
            .iter()
            .filter_map(|&setting| {
                if flag_sets(run, setting) {
                    Some(format!("{setting} from --{}", setting.replace('_', "-")))
                } else if link_gave(setting) {
                    Some(format!("{setting} from --link {}", spelt(setting, true)?))
                } else {
                    None
                }
            })
            .collect();
        format!("{err}: {}", sources.join(", "))
    })
}

/// The config's settings a flag can set, by their nanoGPT names (clap's ids for the flags).
pub const SETTINGS: [&str; 18] = nanogpt::MODELLED;

/// A setting of `cfg` by its nanoGPT name, as Python writes it (as a note quotes it).
fn python_setting(cfg: &Config, name: &str) -> String {
    nanogpt::config_value(cfg, name).map_or_else(|| "None".to_string(), |v| v.to_string())
}

/// Whether an explicit flag set the setting (by its nanoGPT name).
fn flag_sets(run: &RunArgs, setting: &str) -> bool {
    macro_rules! given {
        ($field:ident) => {
            if setting == stringify!($field) {
                return run.$field.is_some();
            }
        };
    }
    crate::cli::for_each_setting_flag!(given);
    false
}

/// What a GPT-2 checkpoint (`init_from = name`) replaced going from `given` to `shaped` (its
/// shape), among the settings `counts` says the user gave: a note naming them, or an error for
/// a block past the checkpoint's positions (train.py crops positions, never adds them, and its
/// first forward would stop). Shared by a link's checkpoint over a file and by `plan`'s flags.
pub fn replaced_by_checkpoint(
    name: &str,
    given: &Config,
    shaped: &Config,
    counts: impl Fn(&str) -> bool,
) -> Result<Option<String>, String> {
    let positions = nanogpt::PRETRAINED_BLOCK;
    if given.block_size > positions && counts("block_size") {
        return Err(format!(
            "block_size {}: init_from = '{name}' loads GPT-2's {positions} positions, which train.py crops but never extends",
            given.block_size
        ));
    }
    let unused: Vec<String> = nanogpt::shape_changes(given, shaped)
        .into_iter()
        .filter(|(setting, _, _)| counts(setting))
        .map(|(setting, was, _)| format!("{setting} {was}"))
        .collect();
    Ok((!unused.is_empty())
        .then(|| format!("init_from = '{name}': {} not used; train.py loads GPT-2's shape from the checkpoint", unused.join(", "))))
}

/// Explicit flags override whatever the file and the link said.
pub fn apply_flags(cfg: &mut Config, run: &RunArgs) {
    apply_flags_where(cfg, run, |_| true);
}

/// [`apply_flags`] for the settings `this` takes (by their names in [`SETTINGS`]).
fn apply_flags_where(cfg: &mut Config, run: &RunArgs, this: impl Fn(&str) -> bool) {
    // `Into`: the eval batch and context are `Option`s in the config (unset: the training one's).
    macro_rules! apply {
        ($field:ident) => {
            if let (Some(v), true) = (run.$field, this(stringify!($field))) {
                cfg.$field = v.into();
            }
        };
    }
    crate::cli::for_each_setting_flag!(apply);
}
