//! Pre-flight: before `train` allocates anything, predict its memory with
//! `vramfit_core::trainer_model` and compare with what the machine has free.
//!
//! - [`preflight`]: fits → the config to run; does not fit → one error line with the breakdown and the
//!   fixes, or with `--auto-fit` the largest micro-batch that fits (gradient accumulation raised to
//!   keep tokens per iteration).
//! - [`available_cpu_bytes`]: free memory, within the cgroup's and `ulimit -v`'s limits (Linux); `None` elsewhere.
//! - [`predicted_line`]: the pre-flight's line when the run fits.
//! - [`measured_line`]: "measured peak vs predicted" after the first iterations and at the run's end.
//!
//! The model was validated against the trainer's measured peaks on the CPU and, for the tensors, on
//! an H100 (the CUDA pool's high-water marks, within 0.02%). On CUDA the run also needs memory the
//! model leaves out (the pool's cached blocks, cuBLAS's workspace, kernels loaded as first used:
//! GPT-2 124M's pool held 1.3 GiB beyond its tensors on the H100), so with [`Basis::Estimate`]
//! the figures are marked `~` and the message says what they leave out.

use vramfit_core::sim::Simulation;
use vramfit_core::trainer_model::{self, TrainerOptions};
use vramfit_core::{Category, Config};

/// Rows of gemm's f32 microkernel on this CPU, for [`TrainerOptions::gemm_kernel_rows`]: with the
/// `x86-v4` feature (root Cargo.toml) gemm-common 0.19 runs its AVX-512 kernels (64 rows) when the
/// CPU has AVX-512F, else its AVX2/FMA ones (16 rows). Other architectures count as 16 (an estimate).
pub fn gemm_kernel_rows() -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        return 64;
    }
    16
}

/// This CPU's caches as gemm reads them (gemm-common 0.19's `CACHE_INFO`, which sizes its
/// buffers), for [`TrainerOptions::cpu_caches`].
pub fn cpu_caches() -> vramfit_core::trainer_model::CpuCaches {
    let [l1, l2, l3] = *gemm_common::cache::CACHE_INFO;
    vramfit_core::trainer_model::CpuCaches {
        l1_bytes: l1.cache_bytes as u64,
        l1_associativity: l1.associativity as u64,
        l1_line_bytes: l1.cache_line_bytes as u64,
        l2_bytes: l2.cache_bytes as u64,
        l2_associativity: l2.associativity as u64,
        l3_bytes: l3.cache_bytes as u64,
        l3_associativity: l3.associativity as u64,
    }
}

/// What the predicted figures rest on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// The CPU trainer, whose peaks the model was validated against.
    Measured,
    /// CUDA: the tensors are measured, CUDA's own memory beside them is not modelled.
    Estimate,
}

impl Basis {
    /// `~` before an estimated figure, as `vramfit plan` marks them.
    fn mark(self) -> &'static str {
        match self {
            Basis::Measured => "",
            Basis::Estimate => "~",
        }
    }

    /// What a message says about its figures, after "trainer memory model".
    fn caveat(self) -> &'static str {
        match self {
            Basis::Measured => "",
            Basis::Estimate => {
                "; on CUDA tensors only: the pool's cache and cuBLAS come on top, 1.3 GiB for GPT-2 124M on an H100, an estimate"
            }
        }
    }
}

/// What pre-flight decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Preflight {
    /// The config to train: the input, or the auto-fitted one.
    pub config: Config,
    pub predicted_peak: u64,
    /// A note to print when the config was changed by `--auto-fit`.
    pub note: Option<String>,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Two sizes (a need and what is available, a measurement and its prediction), written so that
/// two different sizes never read the same ("needs 1.0 MiB but 1.0 MiB is available"): MiB to
/// one decimal, else to three, else bytes.
fn sizes_apart(need: u64, available: u64) -> (String, String) {
    let at = |decimals: usize, b: u64| format!("{:.*} MiB", decimals, b as f64 / (1u64 << 20) as f64);
    for decimals in [1, 3] {
        let (n, a) = (at(decimals, need), at(decimals, available));
        if n != a {
            return (n, a);
        }
    }
    let bytes = |b: u64| format!("{} bytes", vramfit_core::params::thousands(b));
    (bytes(need), bytes(available))
}

/// A predicted size, marked `~` when it is an estimate.
fn predicted(bytes: u64, basis: Basis) -> String {
    format!("{}{}", basis.mark(), mib(bytes))
}

/// The categories of the highest window, largest first, as one line, named as `vramfit plan
/// --runtime trainer` names them.
pub fn breakdown_line(sim: &Simulation, basis: Basis) -> String {
    let peak = [&sim.train, &sim.eval, &sim.first_iter, &sim.eval_at_start].into_iter().max_by_key(|p| p.bytes).unwrap_or(&sim.train);
    let mut parts: Vec<(Category, u64)> = Category::ALL.iter().map(|&c| (c, peak.breakdown.get(c))).filter(|(_, b)| *b > 0).collect();
    parts.sort_by_key(|p| std::cmp::Reverse(p.1));
    let listed: Vec<String> =
        parts.iter().map(|(c, b)| format!("{} {}", trainer_model::category_label(*c).to_lowercase(), predicted(*b, basis))).collect();
    let phase = peak.phase.map(|p| p.label()).unwrap_or("init");
    format!("peak in {phase} ({}): {}", peak.op, listed.join(", "))
}

/// Checks `cfg` against `available` bytes. `Err` is one line for `error: ...`; its fixes are
/// `vramfit train` flags as they can be pasted.
pub fn preflight(cfg: &Config, opts: &TrainerOptions, available: u64, auto_fit: bool, basis: Basis) -> Result<Preflight, String> {
    let sim = trainer_model::simulate(cfg, opts);
    let need = trainer_model::peak_bytes(&sim);
    if need <= available {
        return Ok(Preflight { config: cfg.clone(), predicted_peak: need, note: None });
    }
    if auto_fit {
        if let Some(fitted) = trainer_model::auto_fit(cfg, opts, available) {
            let fitted_need = trainer_model::peak_bytes(&trainer_model::simulate(&fitted, opts));
            let note = format!(
                "--auto-fit: batch_size {} -> {}, gradient_accumulation_steps {} -> {}, {} (predicted {} of {} available{})",
                cfg.batch_size,
                fitted.batch_size,
                cfg.gradient_accumulation_steps,
                fitted.gradient_accumulation_steps,
                sequences_change(cfg, &fitted),
                predicted(fitted_need, basis),
                mib(available),
                basis.caveat()
            );
            return Ok(Preflight { config: fitted, predicted_peak: fitted_need, note: Some(note) });
        }
    }
    let mut fixes = Vec::new();
    if let Some(fitted) = trainer_model::auto_fit(cfg, opts, available) {
        fixes.push(format!(
            "--batch-size {} --gradient-accumulation-steps {} (or --auto-fit, {})",
            fitted.batch_size,
            fitted.gradient_accumulation_steps,
            sequences_change(cfg, &fitted)
        ));
    }
    // Where evaluation is the peak (a large eval batch) a smaller eval batch, or the eval batch
    // in pieces, fits where no micro-batch does.
    let (eval_batch, eval_rows) = trainer_model::eval_fixes(cfg, opts, available);
    if let Some(e) = eval_batch {
        fixes.push(format!("--eval-batch-size {} ({})", e.value, predicted(e.needed_bytes, basis)));
    }
    if let Some(rows) = eval_rows {
        fixes.push(format!("--eval-chunk-rows {} ({})", rows.value, predicted(rows.needed_bytes, basis)));
    }
    // The memory savers, with their predicted peaks: a fix only where that fits (one that merely
    // lowers the peak would fail the same way, a flag later).
    let mut savers = Vec::new();
    if !cfg.activation_checkpointing {
        let c = Config { activation_checkpointing: true, ..cfg.clone() };
        savers.push(("--activation-checkpointing true", trainer_model::peak_bytes(&trainer_model::simulate(&c, opts))));
    }
    if !opts.chunked_loss {
        let o = TrainerOptions { chunked_loss: true, ..*opts };
        savers.push(("--chunked-loss true", trainer_model::peak_bytes(&trainer_model::simulate(cfg, &o))));
    }
    for (flags, n) in &savers {
        if *n <= available {
            fixes.push(format!("{flags} ({})", predicted(*n, basis)));
        }
    }
    let fixes = if !fixes.is_empty() {
        format!("fixes: {}", fixes.join("; "))
    } else {
        // Said with the one that comes closest, if any lowers the peak at all: a memory saver,
        // or the smallest micro-batch, which auto_fit tried and found too large (it often needs
        // the least: a run of batch 64 that needs 35 MiB with checkpointing needed 5.6 at batch 1).
        let mut closest: Vec<(String, u64)> = savers.iter().map(|(flags, n)| (flags.to_string(), *n)).collect();
        let sequences = u64::from(cfg.batch_size) * u64::from(cfg.gradient_accumulation_steps.max(1));
        // Only an accumulation the config takes (a suggestion it would refuse helps nobody).
        if cfg.batch_size > 1 && sequences <= u64::from(vramfit_core::config::MAX_ACCUM) {
            let accumulation = sequences as u32;
            let one = Config { batch_size: 1, gradient_accumulation_steps: accumulation, ..cfg.clone() };
            let one_need = trainer_model::peak_bytes(&trainer_model::simulate(&one, opts));
            closest.push((format!("--batch-size 1 --gradient-accumulation-steps {accumulation}"), one_need));
        }
        match closest.iter().filter(|(_, n)| *n < need).min_by_key(|(_, n)| *n) {
            Some((flags, n)) => {
                format!("no single fix fits (the closest, {flags}, still needs {}): use a smaller model", predicted(*n, basis))
            }
            None => "no single fix fits: use a smaller model".to_string(),
        }
    };
    let (need_shown, available_shown) = sizes_apart(need, available);
    Err(format!(
        "this run needs {}{need_shown} (trainer memory model{}) but {available_shown} is available; {}; {}",
        basis.mark(),
        basis.caveat(),
        breakdown_line(&sim, basis),
        fixes
    ))
}

/// The pre-flight's line when the run fits; `available` is `u64::MAX` when no limit is known.
/// `upper_by`: how much of the prediction a thread pool may not make
/// ([`trainer_model::pool_slabs_not_made_bound`]); said when there is any.
pub fn predicted_line(predicted_peak: u64, available: u64, basis: Basis, upper_by: u64) -> String {
    let room = if available == u64::MAX { "no limit known".to_string() } else { format!("{} available", mib(available)) };
    // Not an upper bound: what the model leaves out (rayon's workers, candle's bookkeeping) puts
    // a measurement a little above it where every slab was made.
    let bound = if upper_by > 0 {
        format!(", may over-count by up to {}: gemm buffers a pool thread may not have made yet", mib(upper_by))
    } else {
        String::new()
    };
    format!("pre-flight: predicted peak {} (trainer memory model{}{bound}), {room}", predicted(predicted_peak, basis), basis.caveat())
}

/// On CUDA, where the tensors fit but would not with the pool's cache on top (as measured once,
/// [`trainer_model::POOL_CACHE_SHARE`]): a note that the run may still run out of memory.
pub fn pool_cache_note(predicted_peak: u64, available: u64) -> Option<String> {
    let cached = trainer_model::with_pool_cache(predicted_peak);
    (predicted_peak <= available && cached > available).then(|| {
        format!(
            "tight: with CUDA's pool cache on top (+{:.1}%, measured once: GPT-2 124M on an H100) this run needs ~{} of {} \
             available and may run out of memory; a smaller --batch-size with more --gradient-accumulation-steps leaves room",
            100.0 * trainer_model::POOL_CACHE_SHARE,
            mib(cached),
            mib(available)
        )
    })
}

/// What this process may still allocate, in bytes, for a run on `threads` threads: the least
/// of the machine's free memory (`MemAvailable`), the room under its cgroup's memory limit (a
/// container's, a systemd slice's) and the room under its address-space limit (`ulimit -v`).
/// Past either limit a run the machine's free memory would take is killed, or aborted at an
/// allocation. `None` if none can be read (not Linux).
pub fn available_cpu_bytes(threads: u32) -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let free = read("/proc/meminfo").and_then(|t| parse_mem_available(&t));
    let cgroup = read("/proc/self/cgroup").and_then(|t| cgroup_room(&t, &read));
    let address_space = read("/proc/self/limits")
        .zip(read("/proc/self/status"))
        .and_then(|(l, s)| address_space_room(&l, &s))
        .map(|room| room.saturating_sub(address_space_per_thread(threads)));
    [free, cgroup, address_space].into_iter().flatten().min()
}

/// Address space a run reserves beyond its heap, which `ulimit -v` counts: glibc gives each
/// thread that allocates an arena reserving 64 MiB (HEAP_MAX_SIZE on 64-bit), and each pool
/// thread a stack of up to 8 MiB; the pool starts after the pre-flight. Measured with the
/// address-space test's model (429 MiB predicted): one thread needed 135 to 184 MiB more than
/// the heap, two threads more than 184.
fn address_space_per_thread(threads: u32) -> u64 {
    (u64::from(threads) + 2) * (64 << 20) + u64::from(threads) * (8 << 20)
}

/// The least room (limit minus usage) over the process's memory cgroup and its ancestors, from
/// `/proc/self/cgroup` (`cgroup`) and the files `read` returns: cgroup v2's `memory.max` and
/// `memory.current`, or v1's `memory.limit_in_bytes` and `memory.usage_in_bytes`. Usage counts
/// the page cache, which the kernel reclaims before it kills anything: the inactive file pages
/// of `memory.stat` are left out of it, as container runtimes leave them out. A limit of `max`
/// (v2) or an unreadable level counts as none.
fn cgroup_room(cgroup: &str, read: &dyn Fn(&str) -> Option<String>) -> Option<u64> {
    let number = |path: String| read(&path).and_then(|t| t.trim().parse::<u64>().ok());
    let stat = |path: String, key: &str| {
        read(&path).and_then(|t| t.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse::<u64>().ok()))
    };
    let mut least: Option<u64> = None;
    for line in cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (fields.next(), fields.next(), fields.next()) else { continue };
        let (root, limit, usage, inactive) = match controllers {
            "" => ("/sys/fs/cgroup", "memory.max", "memory.current", "inactive_file"),
            c if c.split(',').any(|c| c == "memory") => {
                ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
            }
            _ => continue,
        };
        // The cgroup itself, then each parent up to the root of the hierarchy.
        let mut dir = path.trim_end_matches('/').to_string();
        loop {
            if let (Some(max), Some(used)) = (number(format!("{root}{dir}/{limit}")), number(format!("{root}{dir}/{usage}"))) {
                let cache = stat(format!("{root}{dir}/memory.stat"), inactive).unwrap_or(0);
                let room = max.saturating_sub(used.saturating_sub(cache));
                least = Some(least.map_or(room, |l| l.min(room)));
            }
            match dir.rfind('/') {
                Some(at) => dir.truncate(at),
                None => break,
            }
        }
    }
    least
}

/// The room under the soft `Max address space` limit of `/proc/self/limits` (`limits`), less
/// the `VmSize` of `/proc/self/status` (`status`); `None` when unlimited or unreadable.
fn address_space_room(limits: &str, status: &str) -> Option<u64> {
    let line = limits.lines().find_map(|l| l.strip_prefix("Max address space"))?;
    let limit: u64 = line.split_whitespace().next()?.parse().ok()?;
    let vm_kib: u64 = status.lines().find_map(|l| l.strip_prefix("VmSize:"))?.split_whitespace().next()?.parse().ok()?;
    Some(limit.saturating_sub(vm_kib.saturating_mul(1024)))
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Which part of a run a measured peak covers, and the prediction it is set beside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MeasuredSpan {
    /// The first two iterations: before the evaluation after a step (which may be the run's
    /// peak) and before any save; beside the prediction of the windows they ran (a fresh run's
    /// evaluation at start, first iteration and a training step), not the run's peak: where
    /// the evaluation after a step is the peak, that read up to 11.9% over (QA).
    FirstTwoIterations { predicted: u64 },
    /// The whole run, every window and save behind it; beside the run's predicted peak.
    WholeRun { predicted: u64 },
    /// A whole run that took no training step (`--max-iters 0`, Ctrl-C in the first
    /// evaluation): the run's predicted peak is a training step's, which never ran. Beside the
    /// evaluation at start's prediction where that evaluation ran whole, else beside nothing.
    NoTrainingStep { eval_at_start_predicted: Option<u64> },
}

/// "memory: measured peak ... X, predicted Y (+e%)"; `measured` is the counting allocator's
/// peak (or, `on_gpu`, the CUDA pool's) minus what was live before the model was built: the
/// run's own memory, not the data's, where the progress lines' process heap counts the data too.
pub fn measured_line(measured: u64, span: MeasuredSpan, on_gpu: bool) -> String {
    let source = if on_gpu {
        "the run's tensors in the CUDA pool from before the model was built"
    } else {
        "the run's own heap from before the model was built, not the data"
    };
    let beside = |predicted: u64| {
        let err = if measured > 0 { (predicted as f64 - measured as f64) / measured as f64 * 100.0 } else { 0.0 };
        // Equal sizes at one decimal with an error beside them would contradict it.
        let (measured, predicted) = if measured == predicted { (mib(measured), mib(predicted)) } else { sizes_apart(measured, predicted) };
        (measured, predicted, format!("{err:+.1}%"))
    };
    match span {
        MeasuredSpan::FirstTwoIterations { predicted } => {
            let (measured, predicted, err) = beside(predicted);
            format!(
                "memory: measured peak of the first two iterations ({source}; before the eval after a step and the saves) \
                 {measured}, predicted for them {predicted} ({err})"
            )
        }
        MeasuredSpan::WholeRun { predicted } => {
            let (measured, predicted, err) = beside(predicted);
            format!("memory: measured peak of the run ({source}) {measured}, predicted {predicted} ({err})")
        }
        MeasuredSpan::NoTrainingStep { eval_at_start_predicted: Some(predicted) } => {
            let (measured, predicted, err) = beside(predicted);
            format!(
                "memory: measured peak of the run ({source}) {measured}, predicted {predicted} for the evaluation at start, \
                 all that ran: no training step did ({err})"
            )
        }
        MeasuredSpan::NoTrainingStep { eval_at_start_predicted: None } => format!(
            "memory: measured peak of the run ({source}) {}; no training step ran, so no prediction to set it beside",
            mib(measured)
        ),
    }
}

/// What an auto-fit does to the sequences per iteration: kept, or how many more.
fn sequences_change(from: &Config, to: &Config) -> String {
    let per_iter = |c: &Config| u64::from(c.batch_size) * u64::from(c.gradient_accumulation_steps);
    match (per_iter(from), per_iter(to)) {
        (a, b) if a == b => format!("the same {a} sequences per iteration"),
        (a, b) => format!("{a} -> {b} sequences per iteration (no micro-batch that fits divides {a} usefully)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A need past what is available never reads as the same size as it ("needs 1.0 MiB but
    /// 1.0 MiB is available"): more decimals, then bytes, only where one decimal ties.
    #[test]
    fn a_need_and_the_room_are_written_apart() {
        const MIB: u64 = 1 << 20;
        assert_eq!(sizes_apart(25 * MIB, MIB), ("25.0 MiB".to_string(), "1.0 MiB".to_string()));
        assert_eq!(sizes_apart(MIB + MIB / 30, MIB), ("1.033 MiB".to_string(), "1.000 MiB".to_string()));
        assert_eq!(sizes_apart(MIB + 100, MIB), ("1,048,676 bytes".to_string(), "1,048,576 bytes".to_string()));
        for (need, room) in [(MIB + 1, MIB), (3 * MIB + 5000, 3 * MIB), (MIB + MIB / 19, MIB)] {
            let (n, r) = sizes_apart(need, room);
            assert_ne!(n, r, "{need} vs {room}");
        }
    }

    /// Core's copy of gemm's blocking rule gives what gemm itself computes on this CPU, for both
    /// kernels, depths below, at and above the k-block, and widths up to past the L3 panel.
    #[test]
    fn core_blocks_products_as_gemm_does() {
        let caches = cpu_caches();
        for mr in [16u64, 64] {
            for k in [1u64, 65, 256, 333, 511, 512, 513, 1024, 2048, 3000, 16384, 1 << 20] {
                for n in [6u64, 65, 8192, 50257, 50304, 1 << 22, 1 << 26] {
                    let gemm = gemm_common::cache::kernel_params(256, n as usize, k as usize, mr as usize, 6, 4);
                    assert_eq!(caches.gemm_blocks(k, n, mr), (gemm.kc as u64, gemm.nc as u64), "mr {mr}, k {k}, n {n}");
                }
            }
        }
    }

    fn cfg() -> Config {
        Config {
            n_layer: 2,
            n_head: 2,
            n_embd: 64,
            block_size: 128,
            vocab_size: 500,
            batch_size: 16,
            gradient_accumulation_steps: 1,
            ..Config::default()
        }
    }

    /// A memory saver is listed as a fix only if the run then fits; one that lowers the peak but
    /// not enough is named as not enough, not offered as a fix.
    #[test]
    fn fixes_are_only_what_fits() {
        let opts = TrainerOptions::default();
        let checkpointed = Config { activation_checkpointing: true, ..cfg() };
        let need = trainer_model::peak_bytes(&trainer_model::simulate(&cfg(), &opts));
        let with_ckpt = trainer_model::peak_bytes(&trainer_model::simulate(&checkpointed, &opts));
        assert!(with_ckpt < need);
        let listed = preflight(&cfg(), &opts, with_ckpt, false, Basis::Measured).expect_err("does not fit");
        assert!(listed.contains(&format!("--activation-checkpointing true ({})", mib(with_ckpt))), "{listed}");
        // Too little for checkpointing (or anything else) to fit.
        let err = preflight(&cfg(), &opts, with_ckpt.min(need / 8), false, Basis::Measured).expect_err("does not fit");
        assert!(!err.contains("fixes:"), "{err}");
        assert!(err.contains("no single fix fits (the closest, "), "{err}");
        assert!(err.contains("still needs") && err.ends_with("use a smaller model"), "{err}");
    }

    /// Where nothing fits, "the closest" is the single fix that needs least: at batch 64 the
    /// smallest micro-batch, not a memory saver (it named checkpointing at 35.4 MiB where
    /// batch 1 x 64 needed 5.6).
    #[test]
    fn the_closest_fix_is_the_one_that_needs_least() {
        let opts = TrainerOptions::default();
        let big_batch = Config { batch_size: 64, gradient_accumulation_steps: 2, ..cfg() };
        let need = |c: &Config, o: &TrainerOptions| trainer_model::peak_bytes(&trainer_model::simulate(c, o));
        let one = need(&Config { batch_size: 1, gradient_accumulation_steps: 128, ..big_batch.clone() }, &opts);
        let checkpointed = need(&Config { activation_checkpointing: true, ..big_batch.clone() }, &opts);
        let chunked = need(&big_batch, &TrainerOptions { chunked_loss: true, ..opts });
        assert!(one < checkpointed.min(chunked), "batch 1 needs {one}, the savers {checkpointed} and {chunked}");
        let err = preflight(&big_batch, &opts, 1 << 20, false, Basis::Measured).expect_err("does not fit");
        let closest = format!("(the closest, --batch-size 1 --gradient-accumulation-steps 128, still needs {})", mib(one));
        assert!(err.contains(&closest), "{err}");
    }

    #[test]
    fn fits_refuses_and_auto_fits() {
        let opts = TrainerOptions::default();
        let need = trainer_model::peak_bytes(&trainer_model::simulate(&cfg(), &opts));
        let ok = preflight(&cfg(), &opts, need, false, Basis::Measured).expect("fits exactly");
        assert_eq!(ok.config, cfg());
        let err = preflight(&cfg(), &opts, need / 2, false, Basis::Measured).expect_err("does not fit");
        assert!(err.contains("needs") && err.contains("peak in") && err.contains("fixes:"), "{err}");
        assert!(!err.contains('\n'));
        let fitted = preflight(&cfg(), &opts, need / 2, true, Basis::Measured).expect("auto-fit");
        assert!(fitted.config.batch_size < 16 && fitted.predicted_peak <= need / 2);
        assert!(fitted.config.batch_size * fitted.config.gradient_accumulation_steps >= 16);
        assert!(fitted.note.is_some());
        assert!(preflight(&cfg(), &opts, 1000, true, Basis::Measured).is_err());
    }

    /// On the CPU trainer the workspace is gemm's packing buffers (one 2 MiB slab on one thread; with
    /// 64-row kernels n_embd 64 packs no dlogits), named as `plan --runtime trainer` names them.
    #[test]
    fn the_breakdown_names_gemm_buffers() {
        let sim = trainer_model::simulate(&cfg(), &TrainerOptions { cpu_threads: 1, gemm_kernel_rows: 64, ..Default::default() });
        let line = breakdown_line(&sim, Basis::Measured);
        assert!(line.contains("gemm buffers 2.0 MiB"), "{line}");
        assert!(!line.to_lowercase().contains("cublas"), "{line}");
    }

    /// The sizes in a message ("12.3 MiB"), each with whether it is marked `~`.
    fn figures(message: &str) -> Vec<(bool, String)> {
        let pieces: Vec<&str> = message.split(" MiB").collect();
        let numbers = pieces[..pieces.len() - 1].iter().map(|p| p.rsplit([' ', '(']).next().unwrap_or_default());
        numbers.map(|n| (n.starts_with('~'), n.trim_start_matches('~').to_string())).collect()
    }

    /// With a thread pool the pre-flight says how far over its prediction may be.
    #[test]
    fn a_thread_pools_prediction_says_by_how_much_it_may_over_count() {
        let threads = |n: u32| TrainerOptions { cpu_threads: n, ..TrainerOptions::default() };
        // One slab of 2 MiB (the default caches' L2) per pool thread but one.
        assert_eq!(trainer_model::pool_slabs_not_made_bound(&threads(1)), 0);
        assert_eq!(trainer_model::pool_slabs_not_made_bound(&threads(4)), 3 * (2 << 20));
        assert_eq!(trainer_model::pool_slabs_not_made_bound(&TrainerOptions { cuda: true, unfused_ops: true, ..threads(4) }), 0);
        let bound = trainer_model::pool_slabs_not_made_bound(&threads(4));
        let line = predicted_line(40 << 20, 100 << 20, Basis::Measured, bound);
        assert!(line.contains("40.0 MiB (trainer memory model, may over-count by up to 6.0 MiB: gemm buffers"), "{line}");
        assert!(!line.contains("upper bound"), "measurements come out a little above it: {line}");
        assert!(!predicted_line(40 << 20, 100 << 20, Basis::Measured, 0).contains("over-count"));
    }

    /// On CUDA every predicted figure of every pre-flight message is marked and called an
    /// estimate; the memory available (read from the device, or the flag) is not a prediction.
    /// On the CPU nothing is.
    #[test]
    fn cuda_figures_are_estimates_and_cpu_figures_are_not() {
        let opts = TrainerOptions::default();
        let need = trainer_model::peak_bytes(&trainer_model::simulate(&cfg(), &opts));
        let available = need / 2;
        let available_mib = mib(available).trim_end_matches(" MiB").to_string();
        for basis in [Basis::Measured, Basis::Estimate] {
            let refusal = preflight(&cfg(), &opts, available, false, basis).expect_err("does not fit");
            let note = preflight(&cfg(), &opts, available, true, basis).expect("auto-fit").note.expect("a note");
            let fits = predicted_line(need, need * 2, basis, 0);
            let unlimited = predicted_line(need, u64::MAX, basis, 0);
            for message in [&refusal, &note, &fits, &unlimited] {
                let sizes = figures(message);
                assert!(sizes.len() >= 2 || message == &unlimited, "{message}");
                let said = message.contains("on CUDA tensors only") && message.contains("an estimate");
                match basis {
                    Basis::Measured => assert!(!said && sizes.iter().all(|(marked, _)| !marked), "{message}"),
                    Basis::Estimate => {
                        assert!(said, "{message}");
                        for (marked, number) in &sizes {
                            // Only the memory there is goes unmarked.
                            let is_available = *number == available_mib || *number == mib(need * 2).trim_end_matches(" MiB");
                            assert_eq!(*marked, !is_available, "{number} in {message}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn reads_mem_available() {
        let text = "MemTotal:       16000000 kB\nMemFree:         1000 kB\nMemAvailable:    8000000 kB\n";
        assert_eq!(parse_mem_available(text), Some(8_000_000 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: lots kB\n"), None);
        if cfg!(target_os = "linux") {
            assert!(available_cpu_bytes(1).is_some_and(|b| b > 0));
        }
    }

    /// A container's or slice's memory limit bounds what a run may take, at whichever level of
    /// the hierarchy it is set, in cgroup v2 and v1.
    #[test]
    fn reads_cgroup_limits() {
        let files = |entries: &'static [(&'static str, &'static str)]| {
            move |path: &str| entries.iter().find(|(p, _)| *p == path).map(|(_, t)| t.to_string())
        };
        // v2: the slice above the process's scope sets 1000 bytes, 300 used; the scope has none.
        let v2 = files(&[
            ("/sys/fs/cgroup/user.slice/run.scope/memory.max", "max\n"),
            ("/sys/fs/cgroup/user.slice/run.scope/memory.current", "200\n"),
            ("/sys/fs/cgroup/user.slice/memory.max", "1000\n"),
            ("/sys/fs/cgroup/user.slice/memory.current", "300\n"),
        ]);
        assert_eq!(cgroup_room("0::/user.slice/run.scope\n", &v2), Some(700));
        // A namespaced container sees its own cgroup as the root.
        let root = files(&[("/sys/fs/cgroup/memory.max", "4096"), ("/sys/fs/cgroup/memory.current", "1024")]);
        assert_eq!(cgroup_room("0::/\n", &root), Some(3072));
        // v1: the memory controller's line, among others; usage past the limit leaves nothing.
        let v1 = files(&[
            ("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "5000"),
            ("/sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", "6000"),
        ]);
        assert_eq!(cgroup_room("12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n", &v1), Some(0));
        // The slice alone (its parent, the root, has no limit files).
        assert_eq!(cgroup_room("0::/user.slice\n", &v2), Some(700));
        // Reclaimable page cache is room: 900 used of 1000, 600 of it inactive file pages.
        let cached = files(&[
            ("/sys/fs/cgroup/box/memory.max", "1000"),
            ("/sys/fs/cgroup/box/memory.current", "900"),
            ("/sys/fs/cgroup/box/memory.stat", "anon 300\nfile 600\nactive_file 0\ninactive_file 600\n"),
        ]);
        assert_eq!(cgroup_room("0::/box\n", &cached), Some(700));
        let cached_v1 = files(&[
            ("/sys/fs/cgroup/memory/box/memory.limit_in_bytes", "1000"),
            ("/sys/fs/cgroup/memory/box/memory.usage_in_bytes", "900"),
            ("/sys/fs/cgroup/memory/box/memory.stat", "cache 600\ninactive_file 1\ntotal_inactive_file 500\n"),
        ]);
        assert_eq!(cgroup_room("5:memory:/box\n", &cached_v1), Some(600));
        // No limit anywhere, or nothing readable.
        assert_eq!(cgroup_room("0::/elsewhere\n", &files(&[])), None);
        assert_eq!(cgroup_room("garbage", &v2), None);
    }

    #[test]
    fn reads_the_address_space_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max address space         409600000            unlimited            bytes\n";
        assert_eq!(address_space_room(limits, "Name: x\nVmSize:     100000 kB\n"), Some(409_600_000 - 102_400_000));
        let unlimited = "Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(address_space_room(unlimited, "VmSize: 1 kB\n"), None);
        assert_eq!(address_space_room(limits, "VmSize: lots\n"), None);
    }

    #[test]
    fn measured_line_reports_the_error() {
        let whole = |measured, predicted| measured_line(measured, MeasuredSpan::WholeRun { predicted }, false);
        assert_eq!(
            whole(100 << 20, 103 << 20),
            "memory: measured peak of the run (the run's own heap from before the model was built, not the data) \
             100.0 MiB, predicted 103.0 MiB (+3.0%)"
        );
        let early = measured_line(100 << 20, MeasuredSpan::FirstTwoIterations { predicted: 103 << 20 }, false);
        assert!(early.starts_with("memory: measured peak of the first two iterations ("), "{early}");
        assert!(early.contains("; before the eval after a step and the saves) 100.0 MiB, predicted for them 103.0 MiB"), "{early}");
        let on_gpu = measured_line(100 << 20, MeasuredSpan::WholeRun { predicted: 103 << 20 }, true);
        assert!(on_gpu.contains("(the run's tensors in the CUDA pool from") && !on_gpu.contains("heap"), "{on_gpu}");
        // Sizes that round alike at one decimal get more, so they never read equal beside an error.
        let (measured, predicted) = (6_130_000, 6_075_000);
        assert!(whole(measured, predicted).ends_with(" 5.846 MiB, predicted 5.794 MiB (-0.9%)"), "{}", whole(measured, predicted));
        assert!(whole(measured, measured).ends_with(" 5.8 MiB, predicted 5.8 MiB (+0.0%)"));
    }

    /// A run that took no training step is not set beside a training step's prediction (it
    /// read "3.9 MiB, predicted 10.2 MiB (+158.5%)" after --max-iters 0).
    #[test]
    fn a_run_without_a_training_step_is_not_set_beside_one() {
        let eval_only = measured_line(4 << 20, MeasuredSpan::NoTrainingStep { eval_at_start_predicted: Some(4 << 20) }, false);
        assert!(
            eval_only.contains(" 4.0 MiB, predicted 4.0 MiB for the evaluation at start, all that ran: no training step did (+0.0%)"),
            "{eval_only}"
        );
        let nothing = measured_line(4 << 20, MeasuredSpan::NoTrainingStep { eval_at_start_predicted: None }, false);
        assert!(nothing.contains(" 4.0 MiB; no training step ran") && !nothing.contains("predicted"), "{nothing}");
    }

    /// The pool-cache note comes only where the tensors fit and the cache would not.
    #[test]
    fn pool_cache_note_only_when_tight() {
        let peak = 1000 << 20;
        let cached = (peak as f64 * (1.0 + trainer_model::POOL_CACHE_SHARE)).ceil() as u64;
        assert_eq!(pool_cache_note(peak, peak - 1), None, "does not fit at all: the refusal says so");
        assert_eq!(pool_cache_note(peak, cached), None, "room for the cache too");
        let note = pool_cache_note(peak, cached - 1).expect("tight");
        assert!(note.starts_with("tight:") && note.contains("+12.9%") && note.contains("~1129.0 MiB"), "{note}");
    }
}
