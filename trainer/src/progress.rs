//! What a training run shows and records: a progress bar on a terminal (loss, tokens/s, memory),
//! plain progress lines otherwise, and `log.jsonl` in `out_dir` with one JSON object per
//! iteration, evaluation and checkpoint (appended to on `--resume`).
//!
//! Memory is the counting allocator's live and peak heap bytes ([`crate::mem`]) when the binary
//! installed it, else the process's resident set from `/proc/self/status` (Linux).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::path::Path;

/// The log's file name inside `out_dir`.
pub const LOG_FILE: &str = "log.jsonl";

/// Where a fresh run moves the log it finds: until its first save the checkpoint on disk is
/// still the previous run's, and that run's log must not vanish before it. The file exists
/// exactly while the checkpoint on disk is older than `log.jsonl`.
pub const PREVIOUS_LOG_FILE: &str = "log.previous.jsonl";

/// Puts the log that belongs with the checkpoint on disk where the run about to start needs
/// it; returns a note for the user, if anything moved.
///
/// A fresh run moves `log.jsonl` aside, unless a log is aside already: then the checkpoint's
/// log is that one, and `log.jsonl` is from a run that failed before saving anything, so it
/// goes. A resumed run continues the checkpoint's log, so one kept aside comes back.
///
/// Without a checkpoint in `out_dir`, a fresh run replaces no earlier run at its first save, so
/// nothing there is that run's to replace: a log or loss curve found there (a run that failed
/// before saving, or the user's own files) is kept under names no run writes
/// ([`set_aside_unclaimed`]).
pub fn prepare_log(out_dir: &Path, fresh: bool) -> Result<Option<String>, String> {
    if fresh && !out_dir.join(crate::checkpoint::FILE_NAME).exists() {
        return set_aside_unclaimed(out_dir);
    }
    let log = out_dir.join(LOG_FILE);
    let kept = out_dir.join(PREVIOUS_LOG_FILE);
    let moved =
        |from: &Path, to: &Path| std::fs::rename(from, to).map_err(|e| format!("cannot move {} to {}: {e}", from.display(), to.display()));
    match (fresh, kept.is_file(), log.is_file()) {
        (true, true, true) => {
            std::fs::remove_file(&log).map_err(|e| format!("cannot remove {}: {e}", log.display()))?;
            Ok(Some(format!(
                "{} was from a run that saved no checkpoint: removed ({} stays with the checkpoint)",
                log.display(),
                kept.display()
            )))
        }
        (true, false, true) => {
            moved(&log, &kept)?;
            Ok(Some(format!("the previous run's log is kept as {} until this run saves", kept.display())))
        }
        (false, true, _) => {
            moved(&kept, &log)?;
            Ok(Some(format!("continuing the checkpoint's log, {} (the log of a run that saved nothing is replaced)", log.display())))
        }
        _ => Ok(None),
    }
}

/// Renames the log, a log kept aside and the loss curve in `out_dir` (those that are files) to
/// `NAME.old-N.EXT`, with the first N none of the three names has: a run writes none of these,
/// so nothing later overwrites or removes them. (The run's lock on out_dir keeps another run from
/// taking the same names meanwhile.) A note naming them, if any moved.
fn set_aside_unclaimed(out_dir: &Path) -> Result<Option<String>, String> {
    let names = [LOG_FILE, PREVIOUS_LOG_FILE, crate::lossplot::SVG_FILE];
    let found: Vec<&str> = names.into_iter().filter(|name| out_dir.join(name).is_file()).collect();
    if found.is_empty() {
        return Ok(None);
    }
    let aside = |name: &str, n: u32| {
        let (stem, ext) = name.rsplit_once('.').unwrap_or((name, ""));
        out_dir.join(format!("{stem}.old-{n}.{ext}"))
    };
    // `symlink_metadata`: a dangling link is a name taken too.
    let n = (1..=u32::MAX)
        .find(|&n| names.iter().all(|name| std::fs::symlink_metadata(aside(name, n)).is_err()))
        .ok_or_else(|| format!("cannot find a free name in {} for its old log", out_dir.display()))?;
    let (mut was, mut now) = (Vec::new(), Vec::new());
    for name in found {
        let (from, to) = (out_dir.join(name), aside(name, n));
        std::fs::rename(&from, &to).map_err(|e| format!("cannot move {} to {}: {e}", from.display(), to.display()))?;
        was.push(from.display().to_string());
        now.push(to.display().to_string());
    }
    Ok(Some(format!(
        "no checkpoint in {} goes with {}: kept as {} (this run writes its own)",
        out_dir.display(),
        was.join(", "),
        now.join(", ")
    )))
}

/// A resumed run continues the log from its checkpoint's save: what a run wrote after that save
/// (one that failed or was killed before saving again) would otherwise stand in the log beside
/// this run's records of the same iterations. Cuts `log.jsonl` after its last `checkpoint`
/// record at `iter`, the checkpoint's; leaves it as it is where it has none, but for a last
/// record cut short (no whole JSON and no newline), which goes. A note when it cut.
pub fn trim_log_to_checkpoint(out_dir: &Path, iter: u64) -> Result<Option<String>, String> {
    use std::io::{BufRead, BufReader};
    let path = out_dir.join(LOG_FILE);
    let Ok(file) = File::open(&path) else { return Ok(None) };
    let (mut offset, mut cut, mut lines_after, mut last_byte) = (0u64, None, 0u64, None);
    // Where a last line without its newline starts, if it is no whole JSON record: a run killed
    // mid-write. Only the last line can lack its newline.
    let mut cut_short_at = None;
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        if line.last() != Some(&b'\n') && serde_json::from_slice::<serde_json::Value>(&line).is_err() {
            cut_short_at = Some(offset);
        }
        offset += n as u64;
        lines_after += 1;
        last_byte = line.last().copied();
        // Only checkpoint records are parsed (a log has one per save).
        const CHECKPOINT: &[u8] = b"\"checkpoint\"";
        if line.windows(CHECKPOINT.len()).any(|w| w == CHECKPOINT) {
            let record: Option<serde_json::Value> = serde_json::from_slice(&line).ok();
            if record.is_some_and(|r| r["kind"] == "checkpoint" && r["iter"] == iter) {
                cut = Some(offset);
                lines_after = 0;
            }
        }
    }
    // A last record cut short (a run killed mid-write) would have the next one appended onto
    // its line: it goes (the cut below removes it too), and a whole last record without its
    // newline gets one, so the log ends with a newline before anything is appended.
    let ends_in_newline = last_byte.is_none_or(|b| b == b'\n');
    let Some(cut) = cut.filter(|_| lines_after > 0) else {
        if let Some(start) = cut_short_at {
            let log = OpenOptions::new().write(true).open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            log.set_len(start).map_err(|e| format!("cannot trim {}: {e}", path.display()))?;
            return Ok(Some(format!("{}: removed its last record, cut short by a run that was stopped while writing it", path.display())));
        }
        if !ends_in_newline {
            let mut log = OpenOptions::new().append(true).open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            writeln!(log).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        return Ok(None);
    };
    let log = OpenOptions::new().write(true).open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    log.set_len(cut).map_err(|e| format!("cannot trim {}: {e}", path.display()))?;
    Ok(Some(format!(
        "{}: removed {lines_after} record(s) written after the checkpoint's save by a run that did not save again",
        path.display()
    )))
}

/// A checkpoint was saved in `out_dir`: a log kept aside belongs to no checkpoint any more.
pub fn checkpoint_saved(out_dir: &Path) {
    let _ = std::fs::remove_file(out_dir.join(PREVIOUS_LOG_FILE));
}

/// One optimizer step.
#[derive(Clone, Debug, Serialize)]
pub struct IterRecord {
    pub iter: u64,
    /// Mean loss over the iteration's micro-steps.
    pub loss: f32,
    pub lr: f64,
    /// Global gradient norm before clipping (absent when clipping is off).
    pub grad_norm: Option<f64>,
    pub secs: f64,
    /// Of `secs`, the part spent outside forward/backward: accumulation, clipping, AdamW.
    pub optimizer_secs: f64,
    pub tokens_per_s: f64,
}

/// One `estimate_loss`.
#[derive(Clone, Debug, Serialize)]
pub struct EvalRecord {
    pub iter: u64,
    pub train_loss: f32,
    pub val_loss: f32,
    pub secs: f64,
}

/// Heap bytes (live, peak) from the counting allocator, else resident bytes (current, high-water).
pub fn memory() -> Option<(u64, u64)> {
    if crate::mem::installed() {
        return Some((crate::mem::live(), crate::mem::peak()));
    }
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |key: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        line[key.len()..].trim().trim_end_matches("kB").trim().parse::<u64>().ok().map(|kb| kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

struct MemoryCheck {
    iter: u64,
    baseline: u64,
    predicted: MemoryPrediction,
}

/// What a run's measured peaks are set beside.
#[derive(Clone, Copy, Debug)]
pub struct MemoryPrediction {
    /// The run's predicted peak (its highest window).
    pub run: u64,
    /// The highest of the windows its first two iterations run (see `MeasuredSpan::FirstTwoIterations`).
    pub first_two: u64,
    /// The evaluation at start's own prediction, for a run that takes no training step (`None`
    /// where the run's first evaluation is not that window: a resumed run's).
    pub eval_at_start: Option<u64>,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Whether a line for stdout was lost (said once on stderr).
static STDOUT_LOST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes a line of the run's report on stdout. A closed pipe (`vramfit train | head`) is not
/// worth a word; any other failure (a full disk under `> report.txt`) is said once on stderr,
/// and training goes on: its records are in log.jsonl, its checkpoint where it says.
pub fn stdout_line(text: &str) {
    let mut out = std::io::stdout().lock();
    let written = writeln!(out, "{text}").and_then(|()| out.flush());
    if let Err(e) = written {
        if e.kind() != std::io::ErrorKind::BrokenPipe && !STDOUT_LOST.swap(true, std::sync::atomic::Ordering::Relaxed) {
            let _ = writeln!(
                std::io::stderr(),
                "note: cannot write the report to standard output: {e}; training goes on, with its records in {LOG_FILE}"
            );
        }
    }
}

/// The bar, the log file and the plain-text fallback.
pub struct Progress {
    bar: ProgressBar,
    /// Whether the bar is drawn (stderr is a terminal); otherwise plain lines go to stdout.
    interactive: bool,
    log: Option<File>,
    log_interval: u64,
    /// The iteration, the bytes live before the model and the predicted peak: measured vs
    /// predicted is printed after that iteration.
    memory_check: Option<MemoryCheck>,
    /// A CUDA run's device: its memory pool ([`crate::gpu_mem`]), where the tensors live, is
    /// what the memory check measures and each iteration's line and record report; `None`: the
    /// heap ([`crate::mem`]).
    gpu: Option<candle_core::Device>,
    /// Whether a record could not be written to the log (said once on stderr; training goes on).
    log_write_failed: bool,
    /// Training steps and whole evaluations this run has recorded.
    steps_run: u64,
    evaluations_run: u64,
}

impl Progress {
    /// Opens (appends to) `out_dir/log.jsonl`; the bar counts iterations `start .. max_iters`.
    pub fn new(out_dir: &Path, start: u64, max_iters: u64, log_interval: u64) -> Result<Progress, String> {
        let path = out_dir.join(LOG_FILE);
        let log = OpenOptions::new().create(true).append(true).open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let interactive = std::io::stderr().is_terminal();
        let bar = if interactive {
            let bar = ProgressBar::with_draw_target(Some(max_iters), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed_precise}<{eta_precise}]")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_position(start);
            bar
        } else {
            ProgressBar::hidden()
        };
        Ok(Progress {
            bar,
            interactive,
            log: Some(log),
            log_interval: log_interval.max(1),
            memory_check: None,
            gpu: None,
            log_write_failed: false,
            steps_run: 0,
            evaluations_run: 0,
        })
    }

    /// A progress that shows and records nothing (library callers and tests).
    pub fn silent() -> Progress {
        Progress {
            bar: ProgressBar::hidden(),
            interactive: false,
            log: None,
            log_interval: u64::MAX,
            memory_check: None,
            gpu: None,
            log_write_failed: false,
            steps_run: 0,
            evaluations_run: 0,
        }
    }

    /// Prints a line on stdout without tearing the bar.
    pub fn line(&self, text: &str) {
        if self.log.is_none() {
            return;
        }
        self.bar.suspend(|| stdout_line(text));
    }

    /// The CUDA pool's counters of a run with [`Progress::watch_gpu`] (reading them waits for the
    /// device: once per record).
    fn pool(&self) -> Option<crate::gpu_mem::PoolBytes> {
        self.gpu.as_ref().and_then(crate::gpu_mem::bytes)
    }

    fn record<T: Serialize>(&mut self, kind: &str, value: &T) {
        let pool = self.pool();
        self.record_with(kind, value, pool);
    }

    fn record_with<T: Serialize>(&mut self, kind: &str, value: &T, pool: Option<crate::gpu_mem::PoolBytes>) {
        let Some(log) = self.log.as_mut() else { return };
        let mut object = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
        if let serde_json::Value::Object(map) = &mut object {
            map.insert("kind".into(), kind.into());
            if let Some((live, peak)) = memory() {
                map.insert("mem_bytes".into(), live.into());
                map.insert("mem_peak_bytes".into(), peak.into());
            }
            if let Some(pool) = pool {
                map.insert("gpu_bytes".into(), pool.used.into());
                map.insert("gpu_peak_bytes".into(), pool.used_high.into());
                // What the pool held from the driver at most (tensors and its cache): nvidia-smi's part.
                map.insert("gpu_reserved_peak_bytes".into(), pool.reserved_high.into());
            }
        }
        // A full disk must not stop training (the checkpoint write reports its own errors), but
        // a log that misses records is said, once: `--resume` reads the log's records.
        if let Err(e) = writeln!(log, "{object}") {
            if !self.log_write_failed {
                self.log_write_failed = true;
                self.bar.suspend(|| {
                    let _ = writeln!(
                        std::io::stderr(),
                        "note: cannot write to {LOG_FILE}: {e}; training goes on, and the log misses records from here"
                    );
                });
            }
        }
    }

    /// After iteration `iter`, print the measured peak since `baseline` (heap bytes, or with
    /// [`Progress::watch_gpu`] the CUDA pool's used bytes) beside the predictions of what ran
    /// (see [`MemoryPrediction`]).
    pub fn compare_memory_after(&mut self, iter: u64, baseline: u64, predicted: MemoryPrediction) {
        self.memory_check = Some(MemoryCheck { iter, baseline, predicted });
    }

    /// The memory line for the whole run, at its end (where a memory check was asked for).
    pub fn whole_run_memory_line(&self) -> Option<String> {
        use crate::preflight::MeasuredSpan;
        let check = self.memory_check.as_ref()?;
        let peak = match &self.gpu {
            None => crate::mem::installed().then(crate::mem::peak),
            Some(_) => self.pool().map(|b| b.used_high),
        }?;
        let span = if self.steps_run > 0 {
            MeasuredSpan::WholeRun { predicted: check.predicted.run }
        } else {
            // A partial evaluation (Ctrl-C) is no window the model predicts.
            MeasuredSpan::NoTrainingStep { eval_at_start_predicted: check.predicted.eval_at_start.filter(|_| self.evaluations_run > 0) }
        };
        Some(crate::preflight::measured_line(peak.saturating_sub(check.baseline), span, self.gpu.is_some()))
    }

    /// Measure and report `device`'s memory pool (a CUDA run: the tensors live there, not on the heap).
    pub fn watch_gpu(&mut self, device: &candle_core::Device) {
        self.gpu = Some(device.clone());
    }

    pub fn iter(&mut self, rec: &IterRecord) {
        self.steps_run += 1;
        let pool = self.pool();
        self.record_with("iter", rec, pool);
        if let Some(check) = self.memory_check.as_ref().filter(|c| c.iter == rec.iter) {
            let peak = match &self.gpu {
                None => Some(crate::mem::peak()),
                Some(_) => pool.map(|b| b.used_high),
            };
            if let Some(peak) = peak {
                let span = crate::preflight::MeasuredSpan::FirstTwoIterations { predicted: check.predicted.first_two };
                let line = crate::preflight::measured_line(peak.saturating_sub(check.baseline), span, self.gpu.is_some());
                self.line(&line);
            }
        }
        // The whole process (data, tokenizer and all), where the memory line's measured peak is
        // the training run's own, from the baseline before the model was built: named apart.
        let kind = if crate::mem::installed() { "process heap" } else { "process resident memory" };
        let mut mem =
            memory().map(|(live, peak)| format!(", {kind} {} (peak {}, the data included)", mib(live), mib(peak))).unwrap_or_default();
        if let Some(pool) = pool {
            mem.push_str(&format!(", gpu tensors {} (peak {})", mib(pool.used), mib(pool.used_high)));
        }
        let text = format!("loss {:.4}, {:.0} tok/s{mem}", rec.loss, rec.tokens_per_s);
        if self.interactive {
            self.bar.set_message(text);
            self.bar.set_position(rec.iter + 1);
        } else if rec.iter.is_multiple_of(self.log_interval) {
            self.line(&format!("iter {}: {text}, {:.0} ms", rec.iter, rec.secs * 1000.0));
        }
    }

    pub fn eval(&mut self, rec: &EvalRecord) {
        self.evaluations_run += 1;
        self.record("eval", rec);
        self.line(&format!("step {}: train loss {:.4}, val loss {:.4}", rec.iter, rec.train_loss, rec.val_loss));
    }

    pub fn checkpoint(&mut self, iter: u64, path: &Path, why: &str) {
        #[derive(Serialize)]
        struct Saved<'a> {
            iter: u64,
            path: String,
            why: &'a str,
        }
        self.record("checkpoint", &Saved { iter, path: path.display().to_string(), why });
        self.line(&format!("saved checkpoint at iteration {iter} to {} ({why})", path.display()));
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log that cannot be written (a full disk: Linux's /dev/full) does not stop training,
    /// and the failure is noted, once.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_log_write_that_fails_is_noted_and_training_goes_on() {
        let mut progress = Progress::silent();
        progress.log = Some(OpenOptions::new().append(true).open("/dev/full").expect("/dev/full opens"));
        assert!(!progress.log_write_failed);
        progress.record("iter", &serde_json::json!({ "iter": 1 }));
        assert!(progress.log_write_failed, "the failed write went unnoticed");
        progress.record("iter", &serde_json::json!({ "iter": 2 }));
        assert!(progress.log_write_failed);
    }

    /// The log a resume continues: cut after the checkpoint's own save record, the last one of
    /// its iteration; left whole where it has none, but for a last record cut short; ending in
    /// a newline either way, so that the next record never joins a line cut short.
    #[test]
    fn a_resume_cuts_the_log_back_to_its_checkpoint() {
        let dir = std::env::temp_dir().join(format!("vramfit-log-cut-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(LOG_FILE);
        let saved = "{\"iter\":0,\"kind\":\"eval\"}\n{\"iter\":2,\"kind\":\"checkpoint\"}\n{\"iter\":2,\"kind\":\"iter\"}\n{\"iter\":4,\"kind\":\"checkpoint\"}\n";
        let cases = [
            // (log, checkpoint iteration, log after, a note)
            (format!("{saved}{{\"iter\":4,\"kind\":\"iter\"}}\n{{\"iter\":5,\"ki"), 4, saved.to_string(), true),
            (saved.to_string(), 4, saved.to_string(), false),
            (saved.trim_end().to_string(), 4, saved.to_string(), false),
            (
                format!("{saved}{{\"iter\":4,\"kind\":\"iter\"}}\n"),
                2,
                saved[..saved.find("{\"iter\":2,\"kind\":\"iter\"}").unwrap()].to_string(),
                true,
            ),
            // A record cut short goes, with no checkpoint record to cut back to (it was kept,
            // and the next record appended after it), and where it is that record itself.
            (format!("{saved}{{\"iter\":9,\"ki"), 7, saved.to_string(), true),
            (format!("{saved}{{\"iter\":6,\"kind\":\"checkp"), 6, saved.to_string(), true),
            (String::new(), 4, String::new(), false),
        ];
        for (before, iter, after, noted) in cases {
            std::fs::write(&log, &before).unwrap();
            let note = trim_log_to_checkpoint(&dir, iter).unwrap();
            assert_eq!(std::fs::read_to_string(&log).unwrap(), after, "{before:?} at {iter}");
            assert_eq!(note.is_some(), noted, "{before:?}: {note:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(trim_log_to_checkpoint(&dir, 1).unwrap(), None, "no log, nothing to do");
    }
}
