//! `vramfit plan`: will this run fit, and if not, what to change.

use crate::cli::{PlanArgs, Runtime};
use crate::{inputs, report};
use vramfit_core::device;
use vramfit_core::plan::{self, PlanRequest};

/// Runs `vramfit plan`; returns the text for stdout, or one line saying what was wrong.
pub fn run(args: &PlanArgs) -> Result<String, String> {
    if args.list_gpus {
        // The rest of the command line is still read: a bad config file, link or setting is an
        // error here too, not skipped without a word.
        inputs::resolve(&args.run, &args.card)?;
        let presets = device::presets();
        return if args.json { to_json(&presets) } else { Ok(report::gpu_list(&presets)) };
    }
    for (name, value) in &args.training_only {
        check_train_py_type(name, value)?;
    }
    // The trainer's runtime plans `vramfit train`, which takes cpu or cuda: any other device
    // would plan a run it refuses (PyTorch's plan notes a non-CUDA device instead).
    if args.runtime == Some(Runtime::Trainer) {
        if let Some((_, value)) = args.training_only.iter().find(|(name, _)| name == "device") {
            crate::cli::parse_device(&setting_value(value))
                .map_err(|e| format!("--device={}: {e} (as vramfit train takes it)", vramfit_core::shown_input(value, 40)))?;
        }
    }
    let mut inputs = inputs::resolve(&args.run, &args.card)?;
    // Both runtimes: `train` also takes the checkpoint's shape (from --weights, or from
    // scratch without them).
    let pretrained = keep_pretrained_shape(&mut inputs)?;
    refuse_what_train_py_stops_on(&inputs)?;
    // `vramfit train` takes its vocabulary from --data, not from a dataset's meta.pkl.
    if args.runtime != Some(Runtime::Trainer) {
        read_dataset_vocab(&mut inputs, &args.run)?;
    } else {
        say_trainer_reads_no_meta_pkl(&mut inputs);
    }
    // train.py's configurator applies the command line after the file: its eval_only wins.
    if let Some((_, value)) = args.training_only.iter().rev().find(|(name, _)| name == "eval_only") {
        inputs.config.eval_only = crate::cli::parse_bool(value.trim()).unwrap_or(false);
        if !inputs.config.eval_only {
            // The file's note on its eval_only no longer holds.
            inputs.notices.retain(|n| !n.contains("eval_only = True: train.py"));
        }
    }
    // `train` refuses it (it has no evaluate-only mode): the trainer's plan would be of a
    // training run, under a note saying the eval at start decides.
    if inputs.config.eval_only && args.runtime == Some(Runtime::Trainer) {
        return Err("eval_only: vramfit train has no evaluate-only mode, so --runtime trainer has nothing to plan; \
                    plan it for PyTorch (without --runtime trainer) or drop eval_only"
            .to_string());
    }
    crate::print_input_notes(&inputs.notices);
    for note in training_only_notes(&args.training_only, args.runtime.unwrap_or(Runtime::Pytorch)) {
        crate::print_note(&note);
    }
    if args.runtime == Some(Runtime::Trainer) {
        return run_trainer(args, &inputs);
    }
    let trainer_only: Vec<&str> = [
        ("--chunked-loss", args.chunked_loss.is_some()),
        ("--eval-chunk-rows", args.eval_chunk_rows.is_some()),
        ("--grad-clip", args.grad_clip.is_some()),
        ("--threads", args.threads.is_some()),
        ("--max-memory-mib", args.max_memory_mib.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, given)| given.then_some(flag))
    .collect();
    if !trainer_only.is_empty() {
        let verb = if trainer_only.len() == 1 { "applies" } else { "apply" };
        crate::print_note(&format!("{} only {verb} to --runtime trainer; this plan is for PyTorch on a GPU", trainer_only.join(", ")));
    }
    let other_usage = inputs.other_usage_bytes();
    for gpu in &inputs.gpus {
        match gpu.no_room(other_usage) {
            Some(device::NoRoom::TakenByOthers) => crate::print_note(&format!(
                "other programs hold {} MiB, all of the {} MiB the {} offers: nothing is left for this run",
                vramfit_core::params::thousands(inputs.other_usage_mib),
                vramfit_core::params::mib_text(gpu.usable_bytes),
                gpu.id
            )),
            Some(device::NoRoom::BelowContext) => crate::print_note(&format!(
                "only {} MiB is left on the {}, less than the CUDA context alone ({} MiB): no config fits",
                vramfit_core::params::mib_text(gpu.usable_bytes.saturating_sub(other_usage)),
                gpu.id,
                vramfit_core::params::mib_text(gpu.context_bytes)
            )),
            None => {}
        }
    }
    let request = PlanRequest {
        config: inputs.config.clone(),
        gpus: inputs.gpus.clone(),
        other_usage_bytes: inputs.other_usage_bytes(),
        with_fixes: !args.no_fixes,
    };
    let mut plan = plan::plan(&request).map_err(|e| e.to_string())?;
    if pretrained {
        plan.fixes = plan.fixes.map(|f| plan::keeping_pretrained_shape(f, &plan.config));
    }
    if args.json {
        to_json(&plan)
    } else {
        // A file's setting given again on the command line is the command line's (its note says
        // so): the file's value is not what train.py runs with.
        inputs.extra.retain(|(name, _)| !args.training_only.iter().any(|(given, _)| given == name));
        Ok(report::render(&plan, &inputs, !args.no_fixes))
    }
}

/// train.py loads a GPT-2 checkpoint's shape when `init_from` names one, whatever the command
/// line says after the file (`--n_layer=4` is overridden by `from_pretrained`): the plan is for
/// that model, and a note names the settings that were given and are not used. True when the
/// shape is the checkpoint's. A block past the checkpoint's positions is an error, as a link's
/// is: train.py crops positions, never adds them, and its first forward would stop.
fn keep_pretrained_shape(inputs: &mut inputs::Inputs) -> Result<bool, String> {
    let Some(init_from) = inputs.init_from.clone() else {
        return Ok(false);
    };
    let given = inputs.config.clone();
    if !vramfit_core::nanogpt::take_pretrained_shape(&mut inputs.config, &init_from) {
        return Ok(false);
    }
    if let Some(notice) = inputs::replaced_by_checkpoint(&init_from, &given, &inputs.config, |_| true)? {
        inputs.notices.push(notice);
    }
    Ok(true)
}

/// Core's note on a dataset's meta.pkl speaks of train.py; `--runtime trainer` plans `vramfit
/// train`, which reads no meta.pkl (its vocabulary comes from `--data`): the note says that.
fn say_trainer_reads_no_meta_pkl(inputs: &mut inputs::Inputs) {
    let Some(at) = inputs.notices.iter().position(|n| is_dataset_note(n)) else { return };
    let Some(dataset) = dataset_named(inputs) else { return };
    // Where the setting came from ("command line: ", a file's name), as core said it.
    let source = inputs.notices[at].split("dataset = '").next().unwrap_or_default().to_string();
    inputs.notices[at] = format!(
        "{source}dataset = '{}': --runtime trainer plans vramfit train, which takes its vocabulary from --data, not from a dataset's \
         meta.pkl; planned with vocab_size {} (--vocab-size sets another)",
        vramfit_core::shown_input(&dataset, 60),
        inputs.config.vocab_size
    );
}

/// The dataset whose meta.pkl sets the vocabulary: the one the inputs took it from, else the
/// one a config file names.
fn dataset_named(inputs: &inputs::Inputs) -> Option<String> {
    let named = inputs.extra.iter().find_map(|(k, v)| match (k.as_str(), v) {
        ("dataset", vramfit_core::nanogpt::Value::Str(d)) => Some(d.clone()),
        _ => None,
    });
    inputs.vocab_from_dataset.clone().or(named)
}

/// Whether a notice is core's (or [`read_dataset_vocab`]'s) about a dataset's meta.pkl.
fn is_dataset_note(n: &str) -> bool {
    n.contains(": dataset = '") && n.contains("meta.pkl")
}

/// train.py takes vocab_size from `data/<dataset>/meta.pkl`, under the directory it runs in,
/// when it starts from scratch: `plan` reads the same file from where it runs (core, which
/// opens no files, assumed a size and noted it; that note is replaced by what was found here).
/// A flag or the link that sets vocab_size decides instead, and the dataset goes unmentioned;
/// so it does where a GPT-2 checkpoint brings its vocabulary. A vocab_size the config file sets
/// is planned as vramfit reads config files, with a note where this directory's meta.pkl says
/// otherwise (train.py has no vocab_size setting: the file's would not reach its model).
fn read_dataset_vocab(inputs: &mut inputs::Inputs, run: &crate::cli::RunArgs) -> Result<(), String> {
    let dataset_note = |n: &String| is_dataset_note(n);
    // A `--vocab_size` that a config file after it replaced is not the user's (see `RunArgs::without`).
    let flag_sets_vocab = run.without(&inputs.flags_replaced_by_file).vocab_size.is_some();
    if flag_sets_vocab || inputs.link_sets.contains(&"vocab_size") || inputs.init_from.is_some() {
        inputs.notices.retain(|n| !dataset_note(n));
        return Ok(());
    }
    let Some(dataset) = dataset_named(inputs) else { return Ok(()) };
    let path = std::path::Path::new("data").join(&dataset).join(vramfit::data::META_FILE);
    let (shown_path, shown_set) = (vramfit_core::shown_input(&path.display().to_string(), 120), vramfit_core::shown_input(&dataset, 60));
    let found = vramfit::data::read_meta_vocab_size(&path)?;
    let assumed = inputs.config.vocab_size;
    let note = match (found, inputs.vocab_from_dataset.is_some()) {
        // The config file set vocab_size itself.
        (Some(size), false) if size != assumed => Some(format!(
            "dataset = '{shown_set}': {shown_path} says vocab_size {size}, which is what train.py builds (it has no vocab_size \
             setting); planned with the config file's {assumed}"
        )),
        (_, false) => None,
        (Some(size), true) => {
            inputs.config.vocab_size = size;
            inputs.config.validate().map_err(|e| format!("vocab_size {size} from {shown_path}: {e}"))?;
            Some(format!("vocab_size {size}, from {shown_path} as train.py reads it (dataset = '{shown_set}')"))
        }
        // Nothing here: core's assumption, said as what it is (GPT-2's BPE datasets have no
        // meta.pkl, and train.py's 50304 needs no word).
        (None, true) if dataset == "openwebtext" || dataset == "shakespeare" => None,
        (None, true) => Some(format!(
            "dataset = '{shown_set}': no {shown_path} under this directory; planned with vocab_size {assumed} ({}; set vocab_size \
             if yours differs)",
            if dataset == "shakespeare_char" {
                "the 65 characters nanoGPT's prepare.py writes there"
            } else {
                "what train.py uses without one"
            }
        )),
    };
    if let Some(note) = note {
        inputs.notices.retain(|n| !dataset_note(n));
        inputs.notices.insert(0, note);
    }
    Ok(())
}

/// Settings train.py would stop on, or that decide the model and could not be read: a plan
/// would be for a run that never happens, or for another model (`train` refuses them too).
fn refuse_what_train_py_stops_on(inputs: &inputs::Inputs) -> Result<(), String> {
    // `dataset` sets the vocabulary (its meta.pkl), `init_from` the shape (a GPT-2 checkpoint).
    let decides_model =
        |line: &&String| crate::cli::FILE_LEVEL.iter().any(|name| line.contains(&format!("cannot read the value of {name} ")));
    if let Some(line) = inputs.unreadable.iter().find(decides_model) {
        return Err(format!("{line}: it decides the model, so plan cannot tell which one train.py builds"));
    }
    // A notice in core's words where train.py would stop (a name it does not know, a block past
    // a checkpoint's positions): the same as the flags' error. (No notice quoting the user's
    // text can hold these words: quotes are shorter.)
    use vramfit_core::nanogpt::{PAST_POSITIONS, TRAIN_PY_WOULD_STOP};
    match inputs.notices.iter().find(|n| n.contains(TRAIN_PY_WOULD_STOP) || n.contains(PAST_POSITIONS)) {
        Some(n) => Err(n.replace(TRAIN_PY_WOULD_STOP, "train.py would stop").split(": planned with").next().unwrap_or(n).to_string()),
        None => Ok(()),
    }
}

/// The type train.py's default has for a setting `plan` takes off its command line, which its
/// configurator requires of a value given there (`assert type(attempt) == type(globals()[key])`
/// after `literal_eval`, or the text itself where that fails); `None` where train.py has no
/// such global to compare with (`seed` is `vramfit train`'s).
fn train_py_type(name: &str) -> Option<&'static str> {
    Some(match name {
        "out_dir" | "init_from" | "wandb_project" | "wandb_run_name" | "dataset" | "backend" | "device" => "str",
        "eval_interval" | "log_interval" | "max_iters" | "warmup_iters" | "lr_decay_iters" => "int",
        "eval_only" | "always_save_checkpoint" | "wandb_log" | "decay_lr" => "bool",
        "learning_rate" | "weight_decay" | "beta1" | "beta2" | "min_lr" => "float",
        _ => return None,
    })
}

/// One error line where a command-line value is not of the kind the setting takes
/// (`--max_iters=abc`, `--learning_rate=NaN`): train.py's configurator stops on it, and so does
/// `train`. As lenient as `train`'s own flags, since either command line may be pasted here: an
/// integer for a float, `true`/`false`/`1`/`0` for a boolean, anything for a string.
fn check_train_py_type(name: &str, value: &str) -> Result<(), String> {
    use vramfit_core::nanogpt::{self, Value};
    let Some(want) = train_py_type(name) else { return Ok(()) };
    // `literal_eval`'s reading, through core's reader of config lines; text it cannot read as
    // a literal stays text, as train.py's configurator keeps it. Core's reader evaluates
    // expressions and names (`2*3`, `n_layer`), which literal_eval does not: for a number or a
    // boolean only a literal is read.
    let literal = want == "str" || is_python_number_literal(value) || matches!(value.trim(), "True" | "False");
    let read = (literal && !value.contains(['\n', '\r', ';', '#']))
        .then(|| nanogpt::parse_config_file(&format!("{name} = {value}\n"), &vramfit_core::Config::default()).ok())
        .flatten()
        .and_then(|f| f.get(name).cloned());
    // `--dataset=5` is train.py's int 5 (its AssertionError): only `train`'s own flags need
    // the leniency, and it has no `--dataset` or `--init_from` (`--out-dir 123` is a name there).
    let not_a_string =
        crate::cli::FILE_LEVEL.contains(&name) && (is_python_number_literal(value) || matches!(value.trim(), "True" | "False" | "None"));
    let fits = match (want, &read) {
        ("str", _) => !not_a_string,
        ("bool", Some(Value::Bool(_))) => true,
        ("bool", _) => crate::cli::parse_bool(value).is_ok(),
        ("int", Some(Value::Int(_))) => true,
        ("float", Some(Value::Int(_) | Value::Float(_))) => true,
        _ => false,
    };
    if fits {
        return Ok(());
    }
    let wanted = match want {
        "int" => "an integer",
        "float" => "a number",
        "str" => "a name (a string)",
        _ => "True or False",
    };
    Err(format!(
        "--{name}={}: train.py wants {wanted} here and its configurator stops on anything else (it requires the default's type)",
        vramfit_core::shown_input(value, 60)
    ))
}

/// Whether `text` is a number as Python's `literal_eval` reads one: an optional sign, then an
/// integer (underscores between digits, `0x`/`0o`/`0b` prefixes) or a float (`1e-3`, `.5`), in
/// optional parentheses. Not `inf` or `nan` (names to Python), nor any expression.
fn is_python_number_literal(text: &str) -> bool {
    let mut t = text.trim();
    while let Some(inner) = t.strip_prefix('(').and_then(|s| s.strip_suffix(')')) {
        t = inner.trim();
    }
    let t = t.strip_prefix(['+', '-']).map_or(t, str::trim_start);
    let digits_ok = |s: &str, radix: u32| {
        !s.is_empty() && !s.starts_with('_') && !s.ends_with('_') && !s.contains("__") && s.chars().all(|c| c == '_' || c.is_digit(radix))
    };
    let lower = t.to_ascii_lowercase();
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(rest) = lower.strip_prefix(prefix) {
            return digits_ok(rest.strip_prefix('_').unwrap_or(rest), radix);
        }
    }
    // An underscore only between two digits.
    let bytes = t.as_bytes();
    let underscores_ok = bytes
        .iter()
        .enumerate()
        .all(|(i, &b)| b != b'_' || (i > 0 && bytes[i - 1].is_ascii_digit() && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)));
    let plain = t.replace('_', "");
    underscores_ok
        && !plain.is_empty()
        && t.chars().all(|c| c.is_ascii_digit() || matches!(c, '_' | '.' | 'e' | 'E' | '+' | '-'))
        && t.chars().next().is_some_and(|c| c.is_ascii_digit() || c == '.')
        && plain.parse::<f64>().is_ok()
}

/// A train.py setting's value as compared: unquoted (`'cuda'` as a config file writes it), lower case.
fn setting_value(value: &str) -> String {
    value.trim().trim_matches(['\'', '"']).to_ascii_lowercase()
}

/// What `plan` says of the train.py settings it took out of the command line and does not use:
/// one line for those that do not change memory, one each for those that change what runs
/// (`dataset` and `init_from` are not among them: they are read as the config file's).
fn training_only_notes(taken: &[(String, String)], runtime: Runtime) -> Vec<String> {
    let mut unused = Vec::new();
    let mut notes = Vec::new();
    for (name, value) in taken {
        let flag = format!("--{name}={value}");
        let value = setting_value(value);
        match name.as_str() {
            "device" if runtime == Runtime::Pytorch && !value.starts_with("cuda") => {
                notes.push(format!("{flag}: plan predicts a CUDA GPU's memory (for the trainer on this CPU, --runtime trainer)"))
            }
            // --runtime trainer plans a CUDA run with it (`run_trainer`).
            "device" if runtime == Runtime::Trainer && value.starts_with("cuda") => {}
            "eval_only" if crate::cli::parse_bool(&value).unwrap_or(false) => {
                notes.push(format!("{flag}: train.py evaluates once and exits, so the plan's fit is the eval at start's"))
            }
            // Undoes a file's eval_only (the configurator applies the command line last).
            "eval_only" => {}
            _ => unused.push(flag),
        }
    }
    if !unused.is_empty() {
        notes.insert(0, format!("{}: training settings that do not change memory; not used by plan", unused.join(" ")));
    }
    notes
}

/// `vramfit plan --runtime trainer --device=cuda`: the trainer's tensors on a CUDA GPU, against
/// `--max-memory-mib` (the memory free on the card once a CUDA program runs, as `train`'s
/// pre-flight reads it) if given, else against the card (`--gpu`, the link's, or the default),
/// less the trainer's CUDA context and `--other-usage-mib`.
fn run_trainer_cuda(args: &PlanArgs, inputs: &inputs::Inputs) -> Result<String, String> {
    use vramfit_core::trainer_model::{self, TrainerOptions};
    let cfg = &inputs.config;
    if args.threads.is_some() {
        crate::print_note("--threads does not apply to a CUDA run");
    }
    let opts = TrainerOptions {
        chunked_loss: args.chunked_loss.unwrap_or(false),
        eval_chunk_rows: args.eval_chunk_rows,
        grad_clip: args.grad_clip.unwrap_or(true),
        // As `train` sets them on CUDA (train_cmd.rs): candle's op-by-op kernels, no gemm, and
        // mixed precision for a bfloat16 or float16 config.
        unfused_ops: true,
        cuda: true,
        mixed_precision: (cfg.dtype != vramfit_core::Dtype::Float32).then_some(cfg.dtype),
        ..TrainerOptions::default()
    };
    let plan = match args.max_memory_mib {
        Some(mib) => {
            if !args.card.gpu.is_empty() || args.card.other_usage_mib.is_some() {
                crate::print_note("--gpu and --other-usage-mib are not used: --max-memory-mib sets the memory to plan for");
            }
            trainer_model::plan(cfg, &opts, Some(mib.saturating_mul(1 << 20)))
        }
        None => {
            let Some(gpu) = inputs.gpus.first() else { return Err("no card to plan for".to_string()) };
            if inputs.gpus.len() > 1 {
                crate::print_note(&format!("--runtime trainer plans for one card: the first, {}", gpu.id));
            }
            trainer_model::plan_on_card(cfg, &opts, gpu, inputs.other_usage_bytes())
        }
    }
    .map_err(|e| e.to_string())?;
    if args.json {
        to_json(&plan)
    } else {
        Ok(report::render_trainer(&plan))
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, String> {
    serde_json::to_string_pretty(value)
        .map(|mut s| {
            s.push('\n');
            s
        })
        .map_err(|e| format!("cannot write JSON: {e}"))
}

/// `vramfit plan --runtime trainer`: the trainer's own memory on this CPU, or with train.py's
/// `device = 'cuda'` (`--device=cuda`) on a CUDA GPU, as `vramfit train --device cuda` runs it.
fn run_trainer(args: &PlanArgs, inputs: &inputs::Inputs) -> Result<String, String> {
    use vramfit_core::trainer_model::{self, TrainerOptions};
    let cfg = &inputs.config;
    let cuda = args.training_only.iter().any(|(name, value)| name == "device" && setting_value(value).starts_with("cuda"));
    if cuda {
        return run_trainer_cuda(args, inputs);
    }
    if !args.card.gpu.is_empty() {
        crate::print_note("--gpu does not apply to --runtime trainer (it plans for this CPU's memory; --device=cuda plans a CUDA run)");
    }
    if args.card.other_usage_mib.is_some() {
        crate::print_note("--other-usage-mib does not apply to --runtime trainer (--max-memory-mib sets the memory to plan for)");
    }
    // As `train` takes them: its one thread for the small default model's shape included.
    let threads = match args.threads {
        Some(n) => n as usize,
        None => match crate::cli::threads_from_env()? {
            Some(n) => n as usize,
            None if crate::train_cmd::is_small_default_model(&inputs.config) => 1,
            None => candle_core::utils::get_num_threads(),
        },
    };
    let opts = TrainerOptions {
        chunked_loss: args.chunked_loss.unwrap_or(false),
        eval_chunk_rows: args.eval_chunk_rows,
        grad_clip: args.grad_clip.unwrap_or(true),
        cpu_threads: u32::try_from(threads).unwrap_or(u32::MAX),
        gemm_kernel_rows: vramfit::preflight::gemm_kernel_rows(),
        cpu_caches: vramfit::preflight::cpu_caches(),
        // It plans a run on this CPU, where the fused kernels run.
        unfused_ops: false,
        // On the CPU the trainer computes in f32 whatever the config's dtype.
        mixed_precision: None,
        cuda: false,
    };
    let available = match args.max_memory_mib {
        Some(mib) => Some(mib.saturating_mul(1 << 20)),
        None => vramfit::preflight::available_cpu_bytes(opts.cpu_threads),
    };
    let plan = trainer_model::plan(cfg, &opts, available).map_err(|e| e.to_string())?;
    if args.json {
        to_json(&plan)
    } else {
        Ok(report::render_trainer(&plan))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Python 3.11's `type(ast.literal_eval(text)) in (int, float)` for each text.
    #[test]
    fn number_literals_are_read_as_literal_eval_reads_them() {
        let python = [
            ("5", true),
            ("-5", true),
            ("+5", true),
            (" 5 ", true),
            ("1_000", true),
            ("1__0", false),
            ("_1", false),
            ("1_", false),
            ("0x1F", true),
            ("0o17", true),
            ("0b101", true),
            ("0x_1f", true),
            ("1e-3", true),
            (".5", true),
            ("5.", true),
            ("1.5e+3", true),
            ("(5)", true),
            ("((-2))", true),
            ("2*3", false),
            ("n_layer", false),
            ("inf", false),
            ("nan", false),
            ("1e", false),
            ("--5", false),
            ("", false),
            ("abc", false),
            ("0x", false),
            ("1.2.3", false),
            ("True", false),
            ("- 5", true),
            ("5j", false),
        ];
        for (text, number) in python {
            assert_eq!(is_python_number_literal(text), number, "{text:?}");
        }
    }

    /// An expression or a name is no value for train.py's configurator, whose literal_eval
    /// reads neither (core's config reader would evaluate both).
    #[test]
    fn a_command_line_expression_is_refused_as_train_py_refuses_it() {
        for (name, value) in [("max_iters", "2*3"), ("max_iters", "n_layer"), ("learning_rate", "1/1000"), ("decay_lr", "not False")] {
            assert!(check_train_py_type(name, value).is_err(), "--{name}={value}");
        }
        for (name, value) in
            [("max_iters", "5000"), ("learning_rate", "6e-4"), ("learning_rate", "1"), ("decay_lr", "False"), ("out_dir", "5")]
        {
            assert!(check_train_py_type(name, value).is_ok(), "--{name}={value}");
        }
        // train.py's dataset and init_from are names: `--dataset=5` is its int 5, an
        // AssertionError (`vramfit train` has neither flag, so no leniency is owed).
        for value in ["5", "-1.5", "True", "None"] {
            let err = check_train_py_type("dataset", value).unwrap_err();
            assert!(err.contains("train.py wants a name (a string) here"), "{err}");
        }
        for value in ["shakespeare_char", "'5'", "gpt2-xl"] {
            assert!(check_train_py_type("dataset", value).is_ok() && check_train_py_type("init_from", value).is_ok(), "{value}");
        }
    }
}
