//! The text report `vramfit plan` prints: exact figures first (parameters, tokens), then the
//! predictions, with every estimated figure marked `~` and explained in the notes.

use crate::inputs::Inputs;
use std::fmt::Write;
use vramfit_core::device::Source;
use vramfit_core::params::thousands;
use vramfit_core::plan::{Note, Plan, WindowReport};
use vramfit_core::{Category, Gpu};

const MIB: f64 = (1u64 << 20) as f64;
const GIB: f64 = (1u64 << 30) as f64;

/// Column width of the window names in the tables.
const LABEL_WIDTH: usize = 20;

/// `7.16 GiB (7,333 MiB)`, with a leading `~` for an estimate.
fn size(bytes: u64, estimate: bool) -> String {
    format!("{}{} GiB ({} MiB)", tilde(estimate), grouped(bytes as f64 / GIB, 2), vramfit_core::params::mib_text(bytes))
}

/// `x` with `places` decimals and its whole part in groups of three: `32,813.26`.
fn grouped(x: f64, places: usize) -> String {
    let text = format!("{x:.places$}");
    let (whole, fraction) = text.split_once('.').map_or((text.as_str(), None), |(w, f)| (w, Some(f)));
    let (sign, digits) = whole.strip_prefix('-').map_or(("", whole), |d| ("-", d));
    let whole = match digits.parse::<u64>() {
        Ok(n) => thousands(n),
        Err(_) => digits.to_string(),
    };
    match fraction {
        Some(f) => format!("{sign}{whole}.{f}"),
        None => format!("{sign}{whole}"),
    }
}

/// The width of a table's column: its widest cell, and at least `min`.
fn column_width<'a>(cells: impl IntoIterator<Item = &'a String>, min: usize) -> usize {
    cells.into_iter().map(|c| c.chars().count()).max().unwrap_or(0).max(min)
}

fn tilde(estimate: bool) -> &'static str {
    if estimate {
        "~"
    } else {
        ""
    }
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// Which figures a card's notes call estimates. A figure built on an estimate is one too: the
/// allocated peak holds the cuBLAS workspace, the reserve holds the allocated blocks, and
/// nvidia-smi holds the reserve.
struct Estimates {
    /// The tensors' own terms (e.g. the compile model).
    tensors: bool,
    /// The cuBLAS workspace's size (PyTorch's default, measured only on Hopper: the H100 and H200).
    workspace: bool,
    /// The bias gradients' reduction scratch, sized by the card (measured only on Hopper too).
    temporaries: bool,
    allocated: bool,
    reserved: bool,
    nvidia_smi: bool,
    usable: bool,
}

impl Estimates {
    fn of(notes: &[Note]) -> Estimates {
        let noted = |figure: &str| notes.iter().any(|n| n.figure == figure && n.source == Source::Estimate);
        let (tensors, workspace, temporaries) = (noted("peak_allocated_bytes"), noted("workspace"), noted("temporaries"));
        let allocated = tensors || workspace || temporaries;
        let reserved = allocated || noted("peak_reserved_bytes");
        Estimates {
            tensors,
            workspace,
            temporaries,
            allocated,
            reserved,
            nvidia_smi: reserved || noted("nvidia_smi_bytes"),
            usable: noted("usable_bytes"),
        }
    }

    /// Whether a breakdown row's bytes are an estimate.
    fn row(&self, category: Category) -> bool {
        // The fp32 weights, resident from start to end, are exact in every config.
        category != Category::Parameters
            && (self.tensors
                || (category == Category::Workspace && self.workspace)
                || (category == Category::Temporaries && self.temporaries))
    }
}

/// The four windows, the steady step first because it is what people ask about, then the
/// rest in the reverse of the order a run meets them (as `plan`'s JSON lists them).
fn windows(plan: &Plan) -> [(&'static str, &WindowReport); 4] {
    [("training step", &plan.train), ("eval", &plan.eval), ("first iteration", &plan.first_iter), ("eval at start", &plan.eval_at_start)]
}

/// A window's JSON key (`CardFit::worst_window`) as the report names it.
fn window_label(key: &str) -> &str {
    match key {
        "train" => "training step",
        "first_iter" => "first iteration",
        "eval_at_start" => "eval at start",
        other => other,
    }
}

/// The plan as a report for people.
pub fn render(plan: &Plan, inputs: &Inputs, with_fixes: bool) -> String {
    let mut out = String::new();
    let est = Estimates::of(&plan.notes);
    // Writing into a String cannot fail.
    let _ = write_model(&mut out, plan, inputs);
    let _ = write_peaks(&mut out, plan, inputs, &est);
    let _ = write_breakdown(&mut out, plan, &est);
    let _ = write_fit(&mut out, plan, inputs, &est);
    let _ = write_fixes(&mut out, plan, with_fixes);
    let _ = write_notes(&mut out, plan);
    // Padded columns leave trailing spaces; drop them.
    out.lines().map(|l| format!("{}\n", l.trim_end())).collect()
}

fn write_model(out: &mut String, plan: &Plan, inputs: &Inputs) -> std::fmt::Result {
    let (c, p) = (&plan.config, &plan.params);
    writeln!(out, "Model (exact counts, as nanoGPT prints them)")?;
    writeln!(out, "  number of parameters: {}", p.printed_millions())?;
    writeln!(out, "  num decayed parameter tensors: {}, with {} parameters", p.decayed_tensors, thousands(p.decayed_params))?;
    writeln!(out, "  num non-decayed parameter tensors: {}, with {} parameters", p.no_decay_tensors, thousands(p.no_decay_params))?;
    writeln!(out, "  all parameters, position embeddings included: {}", thousands(p.total))?;
    writeln!(
        out,
        "  tokens per iteration will be: {} (gradient_accumulation_steps {} x batch_size {} x block_size {})",
        thousands(plan.tokens_per_iter),
        c.gradient_accumulation_steps,
        c.batch_size,
        c.block_size
    )?;
    writeln!(out)?;
    writeln!(out, "Run")?;
    write_model_line(out, c)?;
    writeln!(
        out,
        "  dtype {}, attention {}, compile {}, optimizer {}, activation_checkpointing {}, expandable_segments {}",
        c.dtype.name(),
        c.attention.name(),
        py_bool(c.compile),
        c.optimizer.name(),
        py_bool(c.activation_checkpointing),
        py_bool(c.expandable_segments)
    )?;
    writeln!(out, "  estimate_loss: eval_iters {} batches of {} x {} tokens", c.eval_iters, c.eval_batch(), c.eval_block())?;
    if let Some(name) = &inputs.init_from {
        writeln!(out, "  init_from '{name}': GPT-2's weights and shape (the same memory as from scratch); fixes keep the shape")?;
    }
    if c.eval_only {
        writeln!(out, "  eval_only True: train.py runs the eval at start and exits; only that window decides the fit")?;
    }
    // What the lines above or core's notes already say of (init_from, eval_only, and dataset,
    // whose meta.pkl sets vocab_size) changes the plan: it is not listed here.
    let settings: Vec<String> = inputs
        .extra
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "init_from" | "eval_only" | "dataset"))
        .map(|(k, v)| vramfit_core::shown_input(&format!("{k} = {v}"), 80))
        .collect();
    if !settings.is_empty() {
        writeln!(out, "  also in the config file, no effect on memory: {}", settings.join(", "))?;
    }
    Ok(())
}

fn write_peaks(out: &mut String, plan: &Plan, inputs: &Inputs, est: &Estimates) -> std::fmt::Result {
    let card = inputs.gpus.first().map_or("the first card", |g| g.name.as_str());
    writeln!(out)?;
    writeln!(out, "Peaks on {card} (~ marks an estimate; see the notes)")?;
    if plan.config.eval_only {
        writeln!(out, "  (eval_only: only the eval at start runs; the other rows are what training this config would need)")?;
    }
    // Columns of at least 27 and a space ("~232.86 GiB (238,446 MiB)" is 25 wide), wider where
    // a figure is, so the columns stay aligned.
    let rows: Vec<(&str, String, String, String)> = windows(plan)
        .into_iter()
        .map(|(name, w)| {
            (
                name,
                size(w.peak_allocated_bytes, est.allocated),
                size(w.peak_reserved_bytes, est.reserved),
                size(w.nvidia_smi_bytes, est.nvidia_smi),
            )
        })
        .collect();
    let a = column_width(rows.iter().map(|r| &r.1), 27);
    let r = column_width(rows.iter().map(|r| &r.2), 27);
    writeln!(out, "  {:<LABEL_WIDTH$}{:<a$} {:<r$} nvidia-smi (process)", "", "allocated", "reserved")?;
    for ((name, allocated, reserved, smi), (_, w)) in rows.iter().zip(windows(plan)) {
        writeln!(out, "  {:<LABEL_WIDTH$}{allocated:<a$} {reserved:<r$} {smi}", name)?;
        let phase = w.phase.map(|p| format!("{} ", p.label())).unwrap_or_default();
        let step = if w.micro_step > 0 { format!(", micro-step {}", w.micro_step) } else { String::new() };
        writeln!(out, "  {:<LABEL_WIDTH$}peak during {phase}at {}{step}", "", w.op)?;
    }
    Ok(())
}

fn write_breakdown(out: &mut String, plan: &Plan, est: &Estimates) -> std::fmt::Result {
    let rows: Vec<(&str, Vec<(String, f64)>)> = Category::ALL
        .iter()
        .map(|&category| {
            let cells = windows(plan)
                .into_iter()
                .map(|(_, w)| {
                    let bytes = w.breakdown.get(category);
                    let share = if w.peak_allocated_bytes == 0 { 0.0 } else { 100.0 * bytes as f64 / w.peak_allocated_bytes as f64 };
                    (format!("{}{}", tilde(est.row(category) && bytes > 0), grouped(bytes as f64 / MIB, 1)), share)
                })
                .collect();
            (category.label(), cells)
        })
        .collect();
    writeln!(out)?;
    // QA read optimizer state 2 MiB apart between two dropouts as an error: it is the blocks.
    writeln!(
        out,
        "What each peak is made of (allocated MiB, % of that peak; each tensor counts its allocator block, up to 1 MiB over its size)"
    )?;
    breakdown_table(out, &windows(plan).map(|(name, _)| name), &rows)
}

/// A breakdown table: a column per window, a row per category, each cell the MiB right-aligned
/// (at least 11 wide, a space before it) and the share of the window's peak: `    ~3,951.1  30.0%`.
fn breakdown_table(out: &mut String, names: &[&str], rows: &[(&str, Vec<(String, f64)>)]) -> std::fmt::Result {
    let mib_width = column_width(rows.iter().flat_map(|(_, cells)| cells.iter().map(|(mib, _)| mib)), 11);
    let cell_width = mib_width + 7;
    write!(out, "  {:<LABEL_WIDTH$}", "")?;
    for name in names {
        write!(out, " {name:>cell_width$}")?;
    }
    writeln!(out)?;
    for (label, cells) in rows {
        write!(out, "  {label:<LABEL_WIDTH$}")?;
        for (mib, share) in cells {
            write!(out, " {mib:>mib_width$} {share:>5.1}%")?;
        }
        writeln!(out)?;
    }
    Ok(())
}

fn write_fit(out: &mut String, plan: &Plan, inputs: &Inputs, est: &Estimates) -> std::fmt::Result {
    writeln!(out)?;
    writeln!(out, "Fit (the process must fit at its worst window; other programs hold {} MiB)", thousands(inputs.other_usage_mib))?;
    for fit in &plan.cards {
        let card_est = Estimates::of(&fit.notes);
        let (usable_est, needed_est) = (card_est.usable, card_est.nvidia_smi);
        let verdict = match (fit.fits, fit.bf16_unsupported) {
            (true, _) => "fits",
            // Recent PyTorch emulates bf16 there (slowly, with kernels not modelled here).
            (false, true) => "not planned: no bf16 hardware before Ampere (recent PyTorch emulates it, slowly; use --dtype float16)",
            (false, false) => "does NOT fit",
        };
        let margin = if fit.headroom_bytes >= 0 { "headroom" } else { "short by" };
        let close = if fit.close_call {
            // Under a dtype verdict the margin is memory's alone.
            let what = if fit.bf16_unsupported { "memory alone is a close call" } else { "a close call" };
            format!(
                " ({what}: the margin is under {:.0}% of the need, which the model's error could cover; README: Accuracy)",
                100.0 * vramfit_core::plan::need_error(needed_est)
            )
        } else {
            String::new()
        };
        writeln!(out, "  {} ({}): {verdict}{close}", fit.gpu, fit.gpu_name)?;
        writeln!(
            out,
            "      needs {} at {} of {} available; {margin} {}",
            size(fit.needed_bytes, needed_est),
            window_label(&fit.worst_window),
            size(fit.available_bytes, usable_est),
            size(fit.headroom_bytes.unsigned_abs(), needed_est || usable_est)
        )?;
        match fit.no_room {
            Some(vramfit_core::device::NoRoom::TakenByOthers) => {
                writeln!(out, "      no config fits: other programs hold all the card offers")?;
            }
            Some(vramfit_core::device::NoRoom::BelowContext) => {
                writeln!(out, "      no config fits: what is left is less than the CUDA context alone")?;
            }
            None => {}
        }
        // Where the run stops is the first window past the card, not the largest one.
        // (Said only where it is not the window the need is given for.)
        if let Some(first_short) = fit.first_short_window.as_deref().filter(|w| !fit.fits && *w != fit.worst_window) {
            let when = match first_short {
                "eval_at_start" => "the eval at start (iteration 0's estimate_loss, before any training)",
                "first_iter" => "the first iteration",
                "eval" => "the first eval after training starts (or the steady steps before it)",
                _ => "the steady training step (from iteration 2)",
            };
            let there = windows(plan).into_iter().find(|(label, _)| *label == window_label(first_short)).map(|(_, w)| w.nvidia_smi_bytes);
            match there.filter(|_| std::ptr::eq(fit, &plan.cards[0])) {
                Some(bytes) => writeln!(out, "      passes the card first at {when}: needs {} there", size(bytes, needed_est))?,
                None => writeln!(out, "      passes the card first at {when}")?,
            }
        }
    }
    if let (Some(first), Some(later)) = (plan.cards.first(), &plan.later) {
        let when = later.when();
        let verdict = match later.past_card {
            _ if later.fits => "still fits".to_string(),
            Some(p) if p.recovers => match later.after_release_bytes {
                Some(after) => format!(
                    "past this card; PyTorch frees its cached blocks and goes on, slower, needing {} from then on",
                    size(after, true)
                ),
                None => "past this card; PyTorch frees its cached blocks and goes on, slower".to_string(),
            },
            Some(_) => "past this card, and freeing its cached blocks is not enough: out of memory there".to_string(),
            None => "past this card".to_string(),
        };
        writeln!(
            out,
            "  {} after a few steps (the allocator model at {when}, an estimate): needs {}: {verdict}, see the notes",
            first.gpu,
            size(later.nvidia_smi_bytes, true)
        )?;
    }
    if let Some(first) = plan.cards.first() {
        // The largest batch's own config decides (it can pass the shapes measured).
        let approx = est.usable || plan.largest_micro_batch_is_estimate;
        match plan.largest_micro_batch {
            Some(b) => writeln!(
                out,
                "  largest micro-batch that fits {}: {}{b} (batch_size is {}){}{}",
                first.gpu,
                tilde(approx),
                plan.config.batch_size,
                if first.bf16_unsupported { "; memory only: bf16 still needs another dtype there" } else { "" },
                // The search stops at the largest batch vramfit takes, not where memory runs out.
                if b == vramfit_core::config::MAX_BATCH { "; the most vramfit plans, and more may fit" } else { "" }
            )?,
            None => {
                // With its own eval batch, eval does not shrink with the micro-batch: say when it
                // is what does not fit.
                let eval_held = match plan.config.eval_batch_size {
                    Some(eb) if first.first_short_window.as_deref().is_some_and(|w| w.starts_with("eval")) => {
                        format!(" (eval_batch_size {eb} stays, and eval is what does not fit)")
                    }
                    _ => String::new(),
                };
                writeln!(out, "  largest micro-batch that fits {}: none, even batch_size 1 does not fit{eval_held}", first.gpu)?
            }
        }
        // The config's own batch runs out later, and the largest that fits does not: say so, as
        // the Fixes line offers it.
        if let (Some(_), None, Some(b)) = (plan.later_past_card(), &plan.largest_lasting_micro_batch, plan.largest_micro_batch) {
            if b != plan.config.batch_size {
                writeln!(out, "  after a few steps (the allocator model, an estimate): batch_size {b} keeps fitting")?;
            }
        }
        if let (Some(lasting), Some(b)) = (&plan.largest_lasting_micro_batch, plan.largest_micro_batch) {
            let keeps = match (lasting.batch_size, lasting.needed_bytes) {
                (Some(k), Some(need)) if lasting.frees_cached_blocks => format!(
                    "~{k} keeps running (needs {} once PyTorch, past the card, frees its cached blocks; that step slower)",
                    size(need, true)
                ),
                (Some(k), Some(need)) => format!("~{k} keeps fitting (needs {})", size(need, true)),
                _ => "no smaller micro-batch keeps fitting".to_string(),
            };
            // The config's own batch below it running out too reads as "anything below is safe":
            // near the card the allocator's packing makes the need rise and fall with the batch.
            let own = plan.config.batch_size;
            let not_monotone = match (plan.later_past_card(), lasting.batch_size) {
                (Some(_), Some(k)) if own < k => {
                    format!(" (above batch_size {own}, which runs out too: near the card the need rises and falls with the batch)")
                }
                _ => String::new(),
            };
            writeln!(
                out,
                "  after a few steps (the allocator model, an estimate): batch_size {b} runs out of memory at {}; {keeps}{not_monotone}",
                lasting.when()
            )?;
        }
    }
    Ok(())
}

fn write_fixes(out: &mut String, plan: &Plan, with_fixes: bool) -> std::fmt::Result {
    let card = plan.cards.first().map_or("the first card", |c| c.gpu.as_str());
    writeln!(out)?;
    writeln!(out, "Fixes for {card}")?;
    // Fixes and the largest micro-batch are the first card's: a later card that does not fit
    // must not read as covered by "none needed".
    let short: Vec<&str> = plan.cards.iter().skip(1).filter(|c| !c.fits).map(|c| c.gpu.as_str()).collect();
    if !short.is_empty() {
        let (them, it) = if short.len() == 1 { ("does", "it") } else { ("do", "one") };
        writeln!(out, "  ({} {them} not fit: give {it} first in --gpu for its fixes and largest micro-batch)", short.join(", "))?;
    }
    let fits = plan.cards.first().is_some_and(|c| c.fits);
    let Some(fixes) = plan.fixes.as_deref().filter(|_| with_fixes) else {
        return writeln!(out, "  not computed (--no-fixes)");
    };
    if fixes.is_empty() && plan.cards.first().is_some_and(|c| c.no_room.is_some()) {
        return writeln!(out, "  none can help: the card leaves no room for any run (see Fit)");
    }
    if fixes.is_empty() {
        let none = match plan.later_past_card() {
            Some(_) => {
                // What the page offers to apply (core's `later_fixes`), as flags and settings.
                let ways: Vec<String> = plan
                    .later_fixes()
                    .iter()
                    .map(|f| match f.config.expandable_segments && !plan.config.expandable_segments {
                        true => "expandable_segments:True".to_string(),
                        false => format!("--batch-size {}", f.config.batch_size),
                    })
                    .collect();
                match ways.is_empty() {
                    true => "none needed for the two simulated steps; for the growth after them, see the notes".to_string(),
                    false => {
                        format!("none needed for the two simulated steps; for the growth after them, {} (see the notes)", ways.join(" or "))
                    }
                }
            }
            None if fits => "none needed: it fits".to_string(),
            None => "none found".to_string(),
        };
        return writeln!(out, "  {none}");
    }
    for (i, fix) in fixes.iter().enumerate() {
        let verdict = match (fix.fits, fix.runs_out_later) {
            (true, None) if fix.close_call => "fits, a close call".to_string(),
            (true, None) => "fits".to_string(),
            (true, Some(r)) => format!(
                "fits the two simulated steps{}, out of memory at {} by the allocator model (estimate)",
                if fix.close_call { " (a close call)" } else { "" },
                r.when()
            ),
            (false, _) if fix.close_call => "still does not fit, a close call (the model's error could cover it)".to_string(),
            (false, _) => "still does not fit".to_string(),
        };
        // A fix's need rests on its own config's terms (compile added is an estimate).
        writeln!(out, "  {}. {}: needs {}, {verdict}", i + 1, fix.title, size(fix.needed_bytes, fix.needed_is_estimate))?;
        writeln!(out, "     cost: {}", fix.cost)?;
        if !fix.stock_nanogpt {
            writeln!(out, "     needs a change to nanoGPT's train.py")?;
        }
    }
    Ok(())
}

fn write_notes(out: &mut String, plan: &Plan) -> std::fmt::Result {
    writeln!(out)?;
    writeln!(out, "Notes")?;
    let line = |out: &mut String, note: &Note| {
        let source = match note.source {
            Source::Validated => "validated",
            Source::Measured => "measured",
            Source::Estimate => "estimate",
        };
        writeln!(out, "  - {} ({source}): {}", note.figure, note.detail)
    };
    for note in &plan.notes {
        line(out, note)?;
    }
    // The other cards' own terms (context, workspace, usable size, kernels).
    for card in plan.cards.iter().skip(1) {
        let own: Vec<&Note> = card.notes.iter().filter(|n| !plan.notes.contains(n)).collect();
        if !own.is_empty() {
            writeln!(out, "  for {}:", card.gpu)?;
            for note in own {
                line(out, note)?;
            }
        }
    }
    Ok(())
}

/// `--list-gpus`: the presets, one per line.
pub fn gpu_list(gpus: &[Gpu]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<12}{:<34}{:>12}{:>14}  bf16", "id", "name", "nvidia-smi", "usable");
    for g in gpus {
        let usable = format!("{}{:.2} GiB", tilde(g.usable_source == Source::Estimate), g.usable_bytes as f64 / GIB);
        let _ = writeln!(
            out,
            "{:<12}{:<34}{:>8} MiB{:>14}  {}",
            g.id,
            g.name,
            thousands(g.memory_bytes >> 20),
            usable,
            if g.supports_bf16() { "yes" } else { "no" }
        );
    }
    let _ = writeln!(out, "Any size: --gpu custom-<GiB> (e.g. custom-10) or --gpu 10gb. ~ marks an estimate.");
    out
}

/// The report of `vramfit plan --runtime trainer`: the trainer's heap on this CPU, per window,
/// what each peak is made of, and whether it fits the memory available.
pub fn render_trainer(plan: &vramfit_core::trainer_model::TrainerPlan) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = write_trainer(&mut out, plan);
    out.lines().map(|l| format!("{}\n", l.trim_end())).collect()
}

fn write_trainer(out: &mut String, plan: &vramfit_core::trainer_model::TrainerPlan) -> std::fmt::Result {
    let (c, p, o) = (&plan.config, &plan.params, &plan.options);
    let cuda = plan.device == "cuda";
    if cuda {
        let precision = o.mixed_precision.map_or("float32".to_string(), |d| format!("{} mixed precision", d.name()));
        writeln!(out, "Runtime: vramfit's trainer (`vramfit train --device cuda`) on CUDA, {precision}")?;
    } else {
        writeln!(out, "Runtime: vramfit's trainer (`vramfit train`) on CPU, float32")?;
    }
    writeln!(out, "  number of parameters: {} ({} with position embeddings)", p.printed_millions(), thousands(p.total))?;
    write_model_line(out, c)?;
    writeln!(
        out,
        "  batch_size {}, gradient_accumulation_steps {}, tokens per iteration {}, eval {} x {}",
        c.batch_size,
        c.gradient_accumulation_steps,
        thousands(plan.tokens_per_iter),
        c.eval_batch(),
        c.eval_block()
    )?;
    let eval_chunks = o.eval_chunk_rows.map_or("whole batch".to_string(), |r| format!("{r} rows"));
    let threads = if cuda { String::new() } else { format!(", {} matmul thread(s)", o.cpu_threads.max(1)) };
    writeln!(
        out,
        "  activation_checkpointing {}, chunked loss {}, eval in chunks of {}, grad clipping {}{threads}",
        py_bool(c.activation_checkpointing),
        py_bool(o.chunked_loss),
        eval_chunks,
        py_bool(o.grad_clip),
    )?;
    // Each window with whether its peak is an estimate: with a thread pool, every window may
    // over-count (a pool thread's gemm buffer may not exist yet; see the notes).
    let pool = vramfit_core::trainer_model::pool_slabs_not_made_bound(o) > 0;
    let windows = [
        ("training step", &plan.train, pool),
        ("eval", &plan.eval, pool),
        ("first iteration", &plan.first_iter, pool),
        ("eval at start", &plan.eval_at_start, pool),
    ];
    let peak_estimate = !windows.iter().any(|(_, w, estimate)| !estimate && w.peak_bytes == plan.peak_bytes);
    writeln!(out)?;
    let memory = if cuda { "CUDA memory pool (tensors only)" } else { "heap" };
    writeln!(out, "Peak {memory} per window (validated against measured peaks; ~ marks an estimate, see the notes)")?;
    for (name, w, estimate) in windows {
        let phase = w.phase.map_or("init", |ph| ph.label());
        let micro = if w.micro_step > 0 { format!(", micro-step {}", w.micro_step) } else { String::new() };
        writeln!(out, "  {name:<LABEL_WIDTH$}{}  at {phase}: {}{micro}", size(w.peak_bytes, estimate), w.op)?;
    }
    let rows: Vec<(&str, Vec<(String, f64)>)> = Category::ALL
        .iter()
        .filter(|&&category| windows.iter().any(|(_, w, _)| w.breakdown.get(category) > 0))
        .map(|&category| {
            let cells = windows
                .iter()
                .map(|(_, w, _)| {
                    let bytes = w.breakdown.get(category);
                    let share = if w.peak_bytes == 0 { 0.0 } else { 100.0 * bytes as f64 / w.peak_bytes as f64 };
                    // The gemm buffers are sized from this CPU's caches, measured on one CPU only (see the notes).
                    (format!("{}{}", tilde(category == Category::Workspace && bytes > 0), grouped(bytes as f64 / MIB, 1)), share)
                })
                .collect();
            (vramfit_core::trainer_model::category_label(category), cells)
        })
        .collect();
    writeln!(out)?;
    writeln!(out, "What each peak is made of (MiB, % of that peak)")?;
    breakdown_table(out, &windows.map(|(name, _, _)| name), &rows)?;
    writeln!(out)?;
    // On a card, the memory available is the card's less the trainer's CUDA context: an estimate
    // wherever either was not measured.
    let avail_estimate = plan.card.as_ref().is_some_and(|c| c.usable_source == Source::Estimate || c.context_source == Source::Estimate);
    if let (Some(card), Some(avail)) = (&plan.card, plan.available_bytes) {
        let others = if card.other_usage_bytes > 0 {
            format!(", less {} MiB other programs hold", thousands(card.other_usage_bytes >> 20))
        } else {
            String::new()
        };
        writeln!(
            out,
            "Card: {}: {} MiB usable, less {}{:.0} MiB for the trainer's CUDA context{others}: {} for tensors",
            card.name,
            vramfit_core::params::mib_text(card.usable_bytes),
            tilde(card.context_source == Source::Estimate),
            card.context_bytes as f64 / MIB,
            size(avail, avail_estimate)
        )?;
    }
    match (plan.available_bytes, plan.fits) {
        (Some(avail), Some(true)) => {
            // On a card: tight where the pool's cache, as measured once, would not fit too.
            let verdict = if plan.card.as_ref().is_some_and(|c| !c.fits_with_pool_cache) { "Tight" } else { "Fits" };
            writeln!(out, "{verdict}: needs {} of {} available", size(plan.peak_bytes, peak_estimate), size(avail, avail_estimate))?
        }
        (Some(avail), _) => {
            writeln!(out, "Does not fit: needs {} but {} is available", size(plan.peak_bytes, peak_estimate), size(avail, avail_estimate))?;
            if let Some(fitted) = &plan.auto_fit {
                writeln!(
                    out,
                    "  fix: --batch-size {} --gradient-accumulation-steps {} (what `vramfit train --auto-fit` picks)",
                    fitted.batch_size, fitted.gradient_accumulation_steps
                )?;
            }
            // Where evaluation is the peak (a large eval batch), these fit and no micro-batch does.
            if let Some(e) = plan.fitting_eval_batch {
                let need = size(e.needed_bytes, peak_estimate);
                writeln!(out, "  fix: --eval-batch-size {} (the largest eval batch that fits; needs {need})", e.value)?;
            }
            if let Some(rows) = plan.fitting_eval_chunk_rows {
                let need = size(rows.needed_bytes, peak_estimate);
                writeln!(out, "  fix: --eval-chunk-rows {} (the eval batch in pieces of that many rows; needs {need})", rows.value)?;
            }
            if plan.auto_fit.is_none() && plan.fitting_eval_batch.is_none() && plan.fitting_eval_chunk_rows.is_none() {
                writeln!(
                    out,
                    "  not even a micro-batch of 1 fits: try --activation-checkpointing true, --chunked-loss true, or a smaller model"
                )?;
            }
        }
        _ => writeln!(out, "Needs {} (available memory unknown)", size(plan.peak_bytes, peak_estimate))?,
    }
    let card = plan.card.as_ref();
    if let Some(c) = card.filter(|_| plan.fits == Some(true)) {
        let cached = vramfit_core::trainer_model::with_pool_cache(plan.peak_bytes);
        let verdict = if c.fits_with_pool_cache { "fits with it" } else { "may not fit" };
        writeln!(
            out,
            "  ~ with CUDA's pool cache on top (+{:.1}%, measured once: GPT-2 124M on an H100) it needs {}: {verdict}",
            100.0 * c.pool_cache_share,
            size(cached, true)
        )?;
    }
    match (plan.largest_micro_batch, card.map(|c| c.largest_micro_batch_with_pool_cache)) {
        (Some(b), Some(cached)) => {
            let cached = cached.map_or("none".to_string(), |c| c.to_string());
            writeln!(out, "  largest micro-batch that fits: {b} (~{cached} with the pool's cache)")?
        }
        (Some(b), None) => writeln!(out, "  largest micro-batch that fits: {b}")?,
        _ => {}
    }
    if cuda && plan.available_bytes.is_some() {
        writeln!(out, "  ~ tensors only: CUDA's own memory (context, cuBLAS, the pool's cache) comes on top, see the notes")?;
    }
    writeln!(out)?;
    writeln!(out, "Notes")?;
    for note in &plan.notes {
        writeln!(out, "  - {note}")?;
    }
    Ok(())
}

/// The model's shape in nanoGPT's names, one line (both runtimes' reports).
fn write_model_line(out: &mut String, c: &vramfit_core::Config) -> std::fmt::Result {
    writeln!(
        out,
        "  n_layer {}, n_head {}, n_embd {}, block_size {}, vocab_size {}, bias {}, dropout {:?}",
        c.n_layer,
        c.n_head,
        c.n_embd,
        c.block_size,
        c.vocab_size,
        py_bool(c.bias),
        c.dropout
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_show_gib_and_mib() {
        assert_eq!(size(3 << 30, false), "3.00 GiB (3,072 MiB)");
        assert_eq!(size(1 << 29, true), "~0.50 GiB (512 MiB)");
    }

    /// `plan --runtime trainer` marks every window and the need `~` only with a thread pool, the
    /// gemm buffers row always, and nothing else: the categories are validated figures.
    #[test]
    fn trainer_report_marks_its_estimates() {
        use vramfit_core::trainer_model::{self, TrainerOptions};
        let cfg = vramfit_core::Config {
            n_layer: 2,
            n_head: 2,
            n_embd: 64,
            block_size: 128,
            vocab_size: 500,
            batch_size: 8,
            ..vramfit_core::Config::default()
        };
        for threads in [1u32, 2] {
            // 64-row kernels: n_embd 64 packs no dlogits, so the gemm buffers are the slabs alone.
            let opts = TrainerOptions { cpu_threads: threads, gemm_kernel_rows: 64, ..Default::default() };
            let text = render_trainer(&trainer_model::plan(&cfg, &opts, Some(1 << 40)).expect("valid"));
            let line = |start: &str| {
                text.lines().find(|l| l.trim_start().starts_with(start)).unwrap_or_else(|| panic!("no {start:?} line in {text}"))
            };
            assert_eq!(line("eval at start").contains('~'), threads >= 2, "{text}");
            assert_eq!(line("first iteration").contains('~'), threads >= 2, "{text}");
            assert_eq!(line("eval ").contains('~'), threads >= 2, "{text}");
            assert_eq!(line("training step").contains('~'), threads >= 2, "{text}");
            // The need is the highest window's, so it may over-count too with a pool.
            assert_eq!(line("Fits:").contains('~'), threads >= 2, "{text}");
            for unmarked in ["Parameters", "Saved activations"] {
                assert!(!line(unmarked).contains('~'), "{unmarked:?} marked in {text}");
            }
            // One 2 MiB slab on one thread; with two, the calling thread's, made in the first eval
            // by p · v on the first 64-row block (64 x 64 x 32: a head size gemm packs into a slab,
            // work below its threading threshold), and each pool thread's from the first product
            // split over them, in the first training step (eval's are all too small to split).
            let slabs = if threads == 1 { 1 } else { threads + 1 };
            let gemm = line("gemm buffers");
            let after_a_step = if threads == 1 { 4 } else { 3 };
            assert_eq!(gemm.matches(&format!("~{:.1}", 2.0 * f64::from(slabs))).count(), after_a_step, "{text}");
            let cells: Vec<&str> = gemm.split_whitespace().collect();
            assert_eq!(cells[cells.len() - 2], "~2.0", "eval at start: the calling thread's slab alone: {text}");
            assert!(text.contains("- ~ gemm buffers: 2.0 MiB per thread"), "{text}");
            assert_eq!(text.contains("- ~ with 2 or more threads"), threads >= 2, "{text}");
        }
    }
}
