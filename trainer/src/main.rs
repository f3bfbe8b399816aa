//! `vramfit`: predicts a nanoGPT training run's GPU memory (`plan`), trains it (`train`) and
//! samples from the result (`sample`). The training machinery lives in the library half
//! (`src/lib.rs`); this binary parses flags and reports.
//!
//! Exit codes: 0 success, 2 bad input (one `error: ...` line on stderr), 1 output or training
//! failure (out of memory included: one `error: out of memory: ...` line), 130 training stopped by Ctrl-C, SIGTERM or SIGHUP (after saving a checkpoint).

mod cli;
mod inputs;
mod plan_cmd;
mod report;
mod sample_cmd;
mod train_cmd;

/// Every heap allocation is counted, so `train` can show (and the pre-flight compare) measured memory.
#[global_allocator]
static ALLOCATOR: vramfit::mem::CountingAlloc = vramfit::mem::CountingAlloc;

use std::io::{self, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    vramfit::mem::exit_when_memory_runs_out();
    let cli = match cli::parse() {
        cli::Parsed::Run(cli) => cli,
        cli::Parsed::Exit(code) => return ExitCode::from(code),
    };
    let result = match &cli.command {
        cli::Command::Plan(args) => plan_cmd::run(args),
        cli::Command::Train(args) => return finish(train_cmd::run(args)),
        cli::Command::Sample(args) => return finish(sample_cmd::run(args)),
    };
    match result {
        Ok(text) => write_stdout(&text),
        Err(message) => {
            print_error(&message);
            ExitCode::from(2)
        }
    }
}

/// The exit of `train` and `sample`, which print as they go.
fn finish(result: Result<u8, train_cmd::Failure>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            print_error(&failure.message);
            ExitCode::from(failure.code)
        }
    }
}

/// A message as one line a terminal shows as it is, whatever input it quotes (a path, a value
/// from a config file): line breaks become spaces, and the other control characters (an escape
/// sequence could retitle the window) and bidirectional overrides are shown escaped, `\u{1b}`.
fn one_line(message: &str) -> String {
    let line = vramfit_core::shown_input(&message.replace(['\n', '\r'], " "), usize::MAX);
    // A value thousands of characters long (`--gpu aaaa...`) is quoted by its start: the line
    // stays one a terminal shows, and the rest of the message stays in view.
    line.split(' ')
        .map(|word| if word.chars().count() > LONGEST_WORD { shortened(word) } else { word.to_string() })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The most characters of one space-free run a message shows (a path is rarely longer).
const LONGEST_WORD: usize = 160;

/// The start of a long run, its length, and its last character (a closing quote stays).
fn shortened(word: &str) -> String {
    // Counted without the quotes around it.
    let count = word.trim_matches(|c: char| !c.is_alphanumeric()).chars().count();
    let start: String = word.chars().take(LONGEST_WORD / 2).collect();
    let last = word.chars().last().filter(|c| !c.is_alphanumeric()).map(String::from).unwrap_or_default();
    format!("{start}…[{count} characters]{last}")
}

/// Prints `error: <message>` as a single line on stderr.
pub fn print_error(message: &str) {
    // If stderr itself is gone there is nowhere left to report to.
    let _ = writeln!(io::stderr(), "error: {}", one_line(message));
}

/// Prints `note: <message>` on stderr: something skipped that the user may want to know about.
pub fn print_note(message: &str) {
    let _ = writeln!(io::stderr(), "note: {}", one_line(message));
}

/// The most notices about the inputs printed one by one; a file of a million odd lines gets a
/// count instead of a million lines.
const MAX_INPUT_NOTES: usize = 20;

/// Prints the notices about the inputs (lines of a config file skipped, ...), the first
/// [`MAX_INPUT_NOTES`] of them and then how many more there were.
pub fn print_input_notes(notices: &[String]) {
    for notice in notices.iter().take(MAX_INPUT_NOTES) {
        print_note(notice);
    }
    if notices.len() > MAX_INPUT_NOTES {
        print_note(&format!("{} more like these not shown", notices.len() - MAX_INPUT_NOTES));
    }
}

/// Writes the output; a closed pipe (`vramfit plan | head`) is not an error.
fn write_stdout(text: &str) -> ExitCode {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(io::stderr(), "error: cannot write output: {e}");
            ExitCode::from(1)
        }
    }
}
