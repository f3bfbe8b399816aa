//! The command line: subcommands and flags (clap), and clap's errors as one line.
//!
//! Flags are kebab-case (`--n-layer 12`); nanoGPT's snake_case spellings work too
//! (`--n_layer=12`), so a nanoGPT command line can be pasted as it is.

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use vramfit_core::{Attention, Dtype, Gpu, Optimizer};

/// Predicts a nanoGPT training run's GPU memory.
#[derive(Debug, Parser)]
#[command(name = "vramfit", version, color = clap::ColorChoice::Never)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Will it fit? Peaks per window, what they are made of, fit per card, and fixes.
    #[command(after_help = "Settings are read from nanoGPT's defaults, then --config, then --link, then the flags \
        (each overriding the one before). nanoGPT's snake_case spellings work too: --n_layer=12.")]
    Plan(PlanArgs),
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

/// Where a run's settings come from. Precedence: defaults < --config < --link < flags.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// A nanoGPT config file (config/train_*.py) to start from.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A vramfit page link (full URL or just its query) to apply over the config file.
    #[arg(long, value_name = "URL")]
    pub link: Option<String>,
    /// Transformer blocks [default: 12].
    #[arg(long = "n-layer", alias = "n_layer", value_name = "N")]
    pub n_layer: Option<u32>,
    /// Attention heads; must divide n-embd [default: 12].
    #[arg(long = "n-head", alias = "n_head", value_name = "N")]
    pub n_head: Option<u32>,
    /// Model width [default: 768].
    #[arg(long = "n-embd", alias = "n_embd", value_name = "N")]
    pub n_embd: Option<u32>,
    /// Context length in tokens [default: 1024].
    #[arg(long = "block-size", alias = "block_size", value_name = "N")]
    pub block_size: Option<u32>,
    /// Vocabulary size [default: 50304].
    #[arg(long = "vocab-size", alias = "vocab_size", value_name = "N")]
    pub vocab_size: Option<u32>,
    /// Biases in Linear and LayerNorm layers: true or false [default: false].
    #[arg(long, value_name = "BOOL", value_parser = parse_bool, action = clap::ArgAction::Set)]
    pub bias: Option<bool>,
    /// Dropout probability in [0, 1) [default: 0.0].
    #[arg(long, value_name = "P")]
    pub dropout: Option<f64>,
    /// Micro-batch size: sequences per forward/backward [default: 12].
    #[arg(long = "batch-size", alias = "batch_size", value_name = "N")]
    pub batch_size: Option<u32>,
    /// Micro-steps per optimizer step [default: 40].
    #[arg(long = "gradient-accumulation-steps", alias = "gradient_accumulation_steps", value_name = "N")]
    pub gradient_accumulation_steps: Option<u32>,
    /// Sequences per estimate_loss forward [default: batch-size].
    #[arg(long = "eval-batch-size", alias = "eval_batch_size", value_name = "N")]
    pub eval_batch_size: Option<u32>,
    /// Context length estimate_loss uses [default: block-size].
    #[arg(long = "eval-block-size", alias = "eval_block_size", value_name = "N")]
    pub eval_block_size: Option<u32>,
    /// Batches per split in estimate_loss [default: 200].
    #[arg(long = "eval-iters", alias = "eval_iters", value_name = "N")]
    pub eval_iters: Option<u32>,
    /// float32, float16 or bfloat16 [default: bfloat16].
    #[arg(long, value_name = "DTYPE", value_parser = parse_dtype)]
    pub dtype: Option<Dtype>,
    /// flash or manual [default: flash].
    #[arg(long, value_name = "KIND", value_parser = parse_attention)]
    pub attention: Option<Attention>,
    /// torch.compile: true or false (modelled as eager) [default: true].
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

fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err("expected true or false".into()),
    }
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
    Gpu::find(s).ok_or_else(|| "unknown GPU (see --list-gpus; custom-<GiB> for any size)".into())
}

fn parse_other_usage(s: &str) -> Result<u64, String> {
    let max = vramfit_core::link::MAX_OTHER_USAGE_MIB;
    match s.trim().parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        Ok(_) => Err(format!("at most {max}")),
        Err(_) => Err("expected a whole number of MiB".into()),
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
    match Cli::try_parse() {
        Ok(cli) => Parsed::Run(cli),
        Err(err) if matches!(err.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            // Printing help can only fail if stdout is gone; there is nothing left to tell.
            let _ = err.print();
            Parsed::Exit(0)
        }
        Err(err) if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            crate::print_error("no command given: try 'vramfit plan' or 'vramfit --help'");
            Parsed::Exit(2)
        }
        Err(err) => {
            crate::print_error(&one_line(&err.render().to_string()));
            Parsed::Exit(2)
        }
    }
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

    #[test]
    fn clap_errors_become_one_line() {
        let msg = "error: unexpected argument '--n-layr' found\n\n  tip: a similar argument exists: '--n-layer'\n\nUsage: vramfit plan --n-layer <N>\n\nFor more information, try '--help'.\n";
        assert_eq!(one_line(msg), "unexpected argument '--n-layr' found (tip: a similar argument exists: '--n-layer')");
        assert_eq!(one_line(""), "invalid arguments");
    }
}
