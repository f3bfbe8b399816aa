//! Getting a config into and out of the page (pure functions, tested natively): the link
//! (core's one codec, the same `vramfit plan --link` and `vramfit train --link` read), the
//! `vramfit train` command line, and nanoGPT config files (core's reader and writer).

use vramfit_core::link::{self, Decoded, LinkState};
use vramfit_core::nanogpt;
use vramfit_core::Config;

/// The state a page address carries (the whole `location.href`, so that settings after `#` are
/// noticed), with what was ignored.
pub fn read_link(search: &str) -> Decoded {
    let mut decoded = link::decode(search);
    decoded.notices = at_most(&decoded.notices);
    decoded
}

/// Notices the page lists at once: one for every field a link has (`link::FIELDS`, 22) and some unknown keys;
/// more is a wall nobody reads.
const MAX_NOTICES: usize = 32;

/// The first distinct notices, and a last line counting the rest.
fn at_most(notices: &[String]) -> Vec<String> {
    let (mut shown, left_out) = link::distinct_first(notices, MAX_NOTICES);
    if left_out > 0 {
        shown.push(format!("… and {left_out} more"));
    }
    shown
}

/// The query (with `?`) for a state: what `history.replaceState` writes.
pub fn query_of(state: &LinkState) -> String {
    format!("?{}", link::encode(state))
}

/// The shareable address: the page's address without its query, plus the state's query.
pub fn share_url(page_url: &str, state: &LinkState) -> String {
    let base = page_url.split(['?', '#']).next().unwrap_or("");
    format!("{base}{}", query_of(state))
}

/// `vramfit train --link '...'`: the short hand-off. The link only holds characters of
/// RFC 3986's unreserved set, `%`, `=` and `&`, so single quotes are enough for any shell.
/// `train` has no evaluate-only mode (it refuses `eo=1`): its command trains the config.
pub fn train_command_link(state: &LinkState) -> String {
    let mut training = state.clone();
    training.config.eval_only = false;
    format!("vramfit train --link '{}'", link::encode(&training))
}

/// The same run as explicit `vramfit train` flags (the names of `trainer/src/cli.rs`). The card
/// is not among them: `train` checks the device it runs on (its pre-flight), so `--gpu` and
/// `--other-usage-mib` are `plan`'s flags only.
pub fn train_command_flags(state: &LinkState) -> String {
    let c = &state.config;
    let mut parts: Vec<String> = vec!["vramfit train".into()];
    let mut flag = |name: &str, value: String| parts.push(format!("--{name} {value}"));
    flag("n-layer", c.n_layer.to_string());
    flag("n-head", c.n_head.to_string());
    flag("n-embd", c.n_embd.to_string());
    flag("block-size", c.block_size.to_string());
    flag("vocab-size", c.vocab_size.to_string());
    flag("bias", c.bias.to_string());
    flag("dropout", link::dropout_text(c.dropout));
    flag("batch-size", c.batch_size.to_string());
    flag("gradient-accumulation-steps", c.gradient_accumulation_steps.to_string());
    if let Some(eb) = c.eval_batch_size {
        flag("eval-batch-size", eb.to_string());
    }
    if let Some(et) = c.eval_block_size {
        flag("eval-block-size", et.to_string());
    }
    flag("eval-iters", c.eval_iters.to_string());
    flag("dtype", c.dtype.name().to_string());
    flag("attention", c.attention.name().to_string());
    flag("compile", c.compile.to_string());
    flag("activation-checkpointing", c.activation_checkpointing.to_string());
    flag("optimizer", c.optimizer.name().to_string());
    flag("expandable-segments", c.expandable_segments.to_string());
    parts.join(" ")
}

/// A command line in the pieces a line may break between: the program and each flag with its
/// value. Joined by single spaces they are the command again.
pub fn flag_pieces(command: &str) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    for word in command.split(' ') {
        match pieces.last_mut() {
            Some(last) if !word.starts_with("--") => {
                last.push(' ');
                last.push_str(word);
            }
            _ => pieces.push(word.to_string()),
        }
    }
    pieces
}

/// A fix's title in the pieces a line may break between: its settings, each `name = value`
/// kept whole (a phone broke "block_size = / 1023"); true marks those. Joined by ", " they are
/// the title again.
pub fn setting_pieces(title: &str) -> Vec<(&str, bool)> {
    title
        .split(", ")
        .map(|piece| {
            let whole = piece.split_once(" = ").is_some_and(|(name, value)| !name.contains(' ') && !value.contains(' '));
            (piece, whole)
        })
        .collect()
}

/// The config as a nanoGPT config file (core's writer).
pub fn export_config(state: &LinkState) -> String {
    nanogpt::to_config_file(&state.config, state.init_from.as_deref())
}

/// A pasted nanoGPT config file read over train.py's defaults (as train.py execs it), keeping
/// the card: the new state and the lines that were skipped, or the error as one line.
pub fn import_config(text: &str, current: &LinkState) -> Result<(LinkState, Vec<String>), String> {
    if text.trim().is_empty() {
        return Err("paste the text of a nanoGPT config file (config/train_*.py) first".into());
    }
    let file = nanogpt::parse_config_file(text, &Config::default()).map_err(|e| e.to_string())?;
    if !file.recognised {
        // Prose, a link or the wrong file: importing it would swap the config for train.py's
        // defaults without a word.
        return Err("no nanoGPT setting found in the pasted text (a config file assigns them, e.g. n_layer = 6); the config \
                    is unchanged"
            .into());
    }
    // A GPT-2 checkpoint (whose shape the reader has given the config) stays the run's start.
    let init_from = nanogpt::pretrained_in(&file.extra).map(str::to_string);
    let mut notices = file.notices.clone();
    if !file.sets_modelled() && file.config == Config::default() && init_from.is_none() && file.config != current.config {
        // A file of learning rates and paths replaces the page's config all the same, as
        // train.py runs it: say so, since nothing on the page names what the file set.
        notices.insert(
            0,
            "the file sets none of the settings vramfit models, so they are train.py's defaults (GPT-2 124M, batch 12): the \
             page's config is replaced by them"
                .to_string(),
        );
    }
    Ok((LinkState { config: file.config, init_from, ..current.clone() }, at_most(&notices)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramfit_core::{Attention, Dtype};

    fn odd_state() -> LinkState {
        LinkState {
            config: Config {
                n_layer: 7,
                n_head: 6,
                n_embd: 384,
                block_size: 300,
                vocab_size: 65,
                bias: true,
                dropout: 0.15,
                batch_size: 33,
                gradient_accumulation_steps: 3,
                eval_batch_size: Some(5),
                eval_block_size: Some(128),
                eval_iters: 17,
                dtype: Dtype::Float16,
                attention: Attention::Manual,
                compile: false,
                activation_checkpointing: true,
                expandable_segments: true,
                ..Config::default()
            },
            gpu: "custom-10".into(),
            other_usage_mib: 512,
            init_from: None,
        }
    }

    #[test]
    fn the_query_round_trips_through_the_codec() {
        let s = odd_state();
        let q = query_of(&s);
        assert!(q.starts_with("?v=1&"));
        let back = read_link(&q);
        assert!(back.notices.is_empty(), "{:?}", back.notices);
        assert_eq!(back.state, s);
        let url = share_url("http://127.0.0.1:8080/index.html?L=3#top", &s);
        assert_eq!(url, format!("http://127.0.0.1:8080/index.html{q}"));
        assert_eq!(read_link(&url).state, s);
    }

    #[test]
    fn garbage_in_a_link_falls_back_with_notices_naming_it() {
        let d = read_link("?v=1&B=abc&L=0&zzz=1&d=fp8&gpu=<script>alert(1)</script>");
        assert_eq!(d.state, LinkState::default());
        let all = d.notices.join("\n");
        for needle in ["B=abc", "L=0", "zzz", "fp8", "<script>"] {
            assert!(all.contains(needle), "{needle} not named in {all}");
        }
    }

    #[test]
    fn the_flag_command_line_names_every_setting() {
        let s = odd_state();
        let cmd = train_command_flags(&s);
        for part in [
            "--n-layer 7",
            "--n-head 6",
            "--n-embd 384",
            "--block-size 300",
            "--vocab-size 65",
            "--bias true",
            "--dropout 0.15",
            "--batch-size 33",
            "--gradient-accumulation-steps 3",
            "--eval-batch-size 5",
            "--eval-block-size 128",
            "--eval-iters 17",
            "--dtype float16",
            "--attention manual",
            "--compile false",
            "--activation-checkpointing true",
            "--optimizer adamw",
            "--expandable-segments true",
        ] {
            assert!(cmd.contains(part), "{part} missing from {cmd}");
        }
        // train has no card flags (it checks the device it runs on).
        assert!(!cmd.contains("--gpu") && !cmd.contains("--other-usage-mib"), "{cmd}");
        assert!(!train_command_flags(&LinkState::default()).contains("eval-batch-size"));
        // A link may carry drop=-0; the flags must not hand the CLI "-0", which it reads as a flag.
        let neg_zero = read_link("?drop=-0");
        assert!(neg_zero.notices.is_empty(), "{:?}", neg_zero.notices);
        assert!(train_command_flags(&neg_zero.state).contains("--dropout 0 "), "{}", train_command_flags(&neg_zero.state));
        let link_cmd = train_command_link(&s);
        let quoted = link_cmd.strip_prefix("vramfit train --link '").unwrap().strip_suffix('\'').unwrap();
        assert_eq!(read_link(quoted).state, s);
        assert!(!quoted.contains('\''));
    }

    #[test]
    fn export_then_import_gives_the_same_config() {
        let s = odd_state();
        let text = export_config(&s);
        assert!(text.contains("n_layer = 7"));
        let (back, notices) = import_config(&text, &LinkState::default()).unwrap();
        assert_eq!(back.config, s.config);
        // What it says is which of them stock train.py does not read.
        assert!(notices.len() == 1 && notices[0].contains("which stock train.py does not read"), "{notices:?}");
        // The card is the page's, not the file's.
        assert_eq!(back.gpu, LinkState::default().gpu);
    }

    /// A fine-tuning run keeps its checkpoint through the file both ways, and a pasted
    /// fine-tuning config (nanoGPT's finetune_shakespeare.py) starts the page from it.
    #[test]
    fn a_run_from_a_checkpoint_exports_and_imports_with_it() {
        let mut s = LinkState { config: Config { block_size: 512, batch_size: 2, ..Config::default() }, ..odd_state() };
        crate::model::start_from(&mut s, "gpt2-large");
        let text = export_config(&s);
        assert!(text.contains("\ninit_from = 'gpt2-large'"), "{text}");
        let (back, notices) = import_config(&text, &odd_state()).unwrap();
        assert_eq!((back.config, back.init_from.as_deref()), (s.config.clone(), Some("gpt2-large")));
        assert!(notices.iter().any(|n| n.starts_with("init_from = 'gpt2-large'")), "{notices:?}");
        // The page's commands name the shape; the caption says train starts from scratch.
        assert!(train_command_flags(&s).contains("--n-layer 36 --n-head 20 --n-embd 1280 --block-size 512 --vocab-size 50257 --bias true"));
        assert!(train_command_link(&s).ends_with("&init=gpt2-large'"), "{}", train_command_link(&s));
        let finetune = "init_from = 'gpt2-xl'\nbatch_size = 1\ngradient_accumulation_steps = 32\nlearning_rate = 3e-5\n";
        let (back, _) = import_config(finetune, &s).unwrap();
        assert_eq!((back.init_from.as_deref(), back.config.n_layer, back.config.block_size), (Some("gpt2-xl"), 48, 1024));
        // And a file from scratch (or resuming) starts from scratch, whatever the page had.
        for text in ["n_layer = 4\n", "init_from = 'resume'\nn_layer = 4\n"] {
            let (back, _) = import_config(text, &s).unwrap();
            assert_eq!((back.init_from, back.config.n_layer), (None, 4), "{text}");
        }
    }

    #[test]
    fn import_reads_nanogpt_files_and_reports_problems() {
        let text = "import os\nn_layer = 6\nn_head = 6\nn_embd = 384\nbatch_size = 64\nlearning_rate = 1e-3\n";
        let (s, notices) = import_config(text, &LinkState::default()).unwrap();
        assert_eq!((s.config.n_layer, s.config.n_embd, s.config.batch_size), (6, 384, 64));
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert!(notices[0].contains("line 1"));
        let e = import_config("n_head = 7\n", &LinkState::default()).unwrap_err();
        assert!(e.contains("line 1") && e.contains("n_head"), "{e}");
        assert!(import_config("  \n", &LinkState::default()).is_err());
        let e = import_config("n_layer = '<script>alert(1)</script>'\n", &LinkState::default()).unwrap_err();
        assert!(e.contains("n_layer"), "{e}");
        // Text with no setting at all (prose, a page link) is refused, not read as the defaults.
        for text in ["hello world, this is not a config\n", "http://127.0.0.1:8080/?v=1&L=4\n"] {
            let e = import_config(text, &odd_state()).unwrap_err();
            assert!(e.contains("no nanoGPT setting found"), "{e}");
        }
        // A file that sets GPT-2 124M's own values is a config all the same.
        let (s, _) = import_config("n_layer = 12\nn_head = 12\nn_embd = 768\n", &odd_state()).unwrap();
        assert_eq!(s.config, Config::default());
        // A file that sets only what vramfit does not model replaces the config with the
        // defaults, and says so; from the defaults it has nothing to say.
        let (s, notices) = import_config("learning_rate = 1e-3\nmax_iters = 5000\n", &odd_state()).unwrap();
        assert_eq!(s.config, Config::default());
        assert!(notices[0].starts_with("the file sets none of the settings vramfit models"), "{notices:?}");
        let (_, notices) = import_config("learning_rate = 1e-3\n", &LinkState::default()).unwrap();
        assert!(notices.is_empty(), "{notices:?}");
        // A file that sets the defaults themselves (nanoGPT's own train_gpt2.py) is not one.
        let (s, notices) = import_config("batch_size = 12\nblock_size = 1024\n", &odd_state()).unwrap();
        assert!(s.config == Config::default() && notices.is_empty(), "{notices:?}");
        // eval_only is planned as the eval at start alone, and said to change what runs; the
        // train command trains the config (train has no evaluate-only mode).
        let (s, notices) = import_config("eval_only = True\ninit_from = 'scratch'\n", &LinkState::default()).unwrap();
        assert!(s.config.eval_only && notices.iter().any(|n| n.contains("eval_only = True")), "{notices:?}");
        assert!(query_of(&s).ends_with("&eo=1") && !train_command_link(&s).contains("eo="), "{}", train_command_link(&s));
        assert!(export_config(&s).contains("\neval_only = True"), "{}", export_config(&s));
        // A huge paste: a few dozen notices and a count, not one per line.
        let text: String = std::iter::once("n_layer = 4\n".to_string()).chain((0..5000).map(|i| format!("foo{i} = 1\n"))).collect();
        let (s, notices) = import_config(&text, &LinkState::default()).unwrap();
        assert_eq!(s.config.n_layer, 4);
        assert_eq!(notices.len(), MAX_NOTICES + 1, "{notices:?}");
        assert_eq!(notices[MAX_NOTICES], format!("… and {} more", 5000 - MAX_NOTICES));
    }

    #[test]
    fn fix_titles_break_between_settings_only() {
        let title = "dtype = 'float16', batch_size = 512, gradient_accumulation_steps = 2, eval_batch_size = 2";
        let pieces = setting_pieces(title);
        assert_eq!(pieces.iter().map(|(p, _)| *p).collect::<Vec<_>>().join(", "), title);
        assert!(pieces.iter().all(|(_, whole)| *whole), "{pieces:?}");
        // Prose stays breakable; a title without settings is one piece.
        let pieces = setting_pieces("dtype = 'float16' (NVIDIA Tesla T4 16GB has no bf16)");
        assert_eq!(pieces, [("dtype = 'float16' (NVIDIA Tesla T4 16GB has no bf16)", false)]);
        assert_eq!(setting_pieces("activation checkpointing per block"), [("activation checkpointing per block", false)]);
    }

    #[test]
    fn commands_break_between_flags_only() {
        let command = train_command_flags(&odd_state());
        let pieces = flag_pieces(&command);
        assert_eq!(pieces.join(" "), command);
        assert_eq!(pieces[0], "vramfit train");
        assert!(pieces[1..].iter().all(|p| p.starts_with("--") && p.matches(' ').count() == 1), "{pieces:?}");
        assert!(pieces.contains(&"--expandable-segments false".to_string()) || pieces.contains(&"--expandable-segments true".to_string()));
    }

    /// A link repeating keys lists each problem once, and a few dozen at most before a count.
    #[test]
    fn link_notices_are_distinct_and_few() {
        let repeated = format!("?v=1{}", "&L=6".repeat(20_000));
        assert_eq!(read_link(&repeated).notices.len(), 1);
        let unknown: String = (0..100).map(|i| format!("&zz{i}=1")).collect();
        let notices = read_link(&format!("?v=1{unknown}")).notices;
        assert_eq!(notices.len(), MAX_NOTICES + 1, "{notices:?}");
        assert_eq!(notices[MAX_NOTICES], format!("… and {} more", 100 - MAX_NOTICES));
    }
}
