//! The vramfit page: a Leptos (client-side) view over [`vramfit_core::plan::plan`].
//!
//! Everything the page shows is computed by pure functions in this file ([`compute`],
//! [`window_rows`], [`card_rows`], [`estimate_notes`], [`format_gib`]), tested natively with
//! `cargo test -p vramfit-web`. The components only lay those rows out; a browser test
//! (`web/tests/browser.rs`) mounts the app and checks that it reacts to its inputs.

use leptos::prelude::*;
use vramfit_core::device::Source;
use vramfit_core::plan::{Plan, PlanRequest, WindowReport};
use vramfit_core::{Config, Gpu};

const GIB: f64 = (1u64 << 30) as f64;

/// Bytes as GiB with two decimals, the way the page prints every memory figure ("7.42").
pub fn format_gib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / GIB)
}

/// A signed byte count as GiB with an explicit sign ("+0.51", "-1.20").
pub fn format_signed_gib(bytes: i64) -> String {
    let sign = if bytes < 0 { '-' } else { '+' };
    format!("{sign}{}", format_gib(bytes.unsigned_abs()))
}

/// The inputs the page exposes; everything else is nanoGPT's default [`Config`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inputs {
    pub batch_size: u32,
    pub n_layer: u32,
}

impl Default for Inputs {
    fn default() -> Self {
        let cfg = Config::default();
        Inputs { batch_size: cfg.batch_size, n_layer: cfg.n_layer }
    }
}

impl Inputs {
    /// The config the page plans: nanoGPT's defaults with the page's inputs applied.
    pub fn config(&self) -> Config {
        Config { batch_size: self.batch_size, n_layer: self.n_layer, ..Config::default() }
    }
}

/// Reads a whole number typed into one of the inputs; the error names the field.
pub fn parse_count(field: &str, text: &str) -> Result<u32, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err(format!("{field}: enter a whole number"));
    }
    t.parse::<u32>().map_err(|_| format!("{field}: \"{t}\" is not a whole number between 0 and {}", u32::MAX))
}

/// The plan for some inputs on the default card, without fixes (what the page shows).
pub fn compute(inputs: Inputs) -> Result<Plan, String> {
    let req = PlanRequest { config: inputs.config(), gpus: vec![], other_usage_bytes: 0, with_fixes: false };
    vramfit_core::plan::plan(&req).map_err(|e| e.to_string())
}

/// [`compute`] from the inputs' raw text: a parse error or a config error becomes the message.
pub fn compute_from_text(batch_size: &str, n_layer: &str) -> Result<Plan, String> {
    let inputs = Inputs { batch_size: parse_count("batch_size", batch_size)?, n_layer: parse_count("n_layer", n_layer)? };
    compute(inputs)
}

/// Whether a figure of the plan (a `Note::figure` name) is an estimate, and why.
/// Several notes about one figure are joined; `None` when no note calls it an estimate.
pub fn estimate_detail(plan: &Plan, figures: &[&str]) -> Option<String> {
    let details: Vec<&str> = plan
        .notes
        .iter()
        .filter(|n| n.source == Source::Estimate && figures.contains(&n.figure.as_str()))
        .map(|n| n.detail.as_str())
        .collect();
    (!details.is_empty()).then(|| details.join("; "))
}

/// Figures the nvidia-smi column is built from: the reserve estimate plus the CUDA context.
const SMI_FIGURES: &[&str] = &["nvidia_smi_bytes", "peak_reserved_bytes"];
const ALLOCATED_FIGURES: &[&str] = &["peak_allocated_bytes"];
const USABLE_FIGURES: &[&str] = &["usable_bytes"];

/// One row of the windows table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowRow {
    /// `train`, `eval`, `first_iter` or `eval_at_start`.
    pub window: &'static str,
    /// What the window is, in words.
    pub description: &'static str,
    pub peak_allocated_gib: String,
    /// `Some(why)` when the allocated figure is an estimate.
    pub allocated_estimate: Option<String>,
    pub nvidia_smi_gib: String,
    pub smi_estimate: Option<String>,
    pub phase: String,
    pub op: String,
}

/// The four windows of the loop in the order the page lists them.
pub fn windows(plan: &Plan) -> [(&'static str, &'static str, &WindowReport); 4] {
    [
        ("train", "a steady-state training iteration", &plan.train),
        ("eval", "an estimate_loss batch", &plan.eval),
        ("first_iter", "the first iteration (no optimizer state yet)", &plan.first_iter),
        ("eval_at_start", "estimate_loss before the first step", &plan.eval_at_start),
    ]
}

/// The windows table: peak allocated and nvidia-smi GiB, the phase and op at the peak.
pub fn window_rows(plan: &Plan) -> Vec<WindowRow> {
    let allocated_estimate = estimate_detail(plan, ALLOCATED_FIGURES);
    let smi_estimate = estimate_detail(plan, SMI_FIGURES);
    windows(plan)
        .into_iter()
        .map(|(window, description, w)| WindowRow {
            window,
            description,
            peak_allocated_gib: format_gib(w.peak_allocated_bytes),
            allocated_estimate: allocated_estimate.clone(),
            nvidia_smi_gib: format_gib(w.nvidia_smi_bytes),
            smi_estimate: smi_estimate.clone(),
            phase: w.phase.map(|p| p.label().to_string()).unwrap_or_else(|| "-".to_string()),
            op: if w.op.is_empty() { "-".to_string() } else { w.op.clone() },
        })
        .collect()
}

/// One row of the cards table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CardRow {
    pub gpu_name: String,
    pub available_gib: String,
    pub available_estimate: Option<String>,
    pub needed_gib: String,
    pub needed_estimate: Option<String>,
    pub fits: bool,
    /// "fits", "does not fit" or why it cannot run at all.
    pub verdict: String,
    pub headroom_gib: String,
    pub worst_window: String,
}

/// Whether the run fits each card, with the numbers behind the verdict.
pub fn card_rows(plan: &Plan) -> Vec<CardRow> {
    let available_estimate = estimate_detail(plan, USABLE_FIGURES);
    let needed_estimate = estimate_detail(plan, SMI_FIGURES);
    plan.cards
        .iter()
        .enumerate()
        .map(|(i, c)| CardRow {
            gpu_name: c.gpu_name.clone(),
            available_gib: format_gib(c.available_bytes),
            // The notes describe the first card; other cards' presets say how theirs was found.
            available_estimate: if i == 0 {
                available_estimate.clone()
            } else {
                match Gpu::find(&c.gpu) {
                    Some(g) if g.usable_source == Source::Measured => None,
                    _ => Some(format!("{}'s usable memory is estimated", c.gpu_name)),
                }
            },
            needed_gib: format_gib(c.needed_bytes),
            needed_estimate: needed_estimate.clone(),
            fits: c.fits,
            verdict: if c.bf16_unsupported {
                "no: bfloat16 needs an Ampere or newer card".to_string()
            } else if c.fits {
                "fits".to_string()
            } else {
                "does not fit".to_string()
            },
            headroom_gib: format_signed_gib(c.headroom_bytes),
            worst_window: c.worst_window.clone(),
        })
        .collect()
}

/// The notes that mark figures as estimates: (figure, why), for the footnotes.
pub fn estimate_notes(plan: &Plan) -> Vec<(String, String)> {
    plan.notes.iter().filter(|n| n.source == Source::Estimate).map(|n| (n.figure.clone(), n.detail.clone())).collect()
}

/// The text shown when the page's code panics.
pub fn panic_text(info: &str) -> String {
    format!("vramfit stopped with an internal error: {info}. Reload the page; if it happens again, please report it.")
}

/// Shows a message at the top of the page, outside the app (which may be broken).
pub fn show_fatal(message: &str) {
    let Some(doc) = web_sys::window().and_then(|w| w.document()) else {
        return;
    };
    let Some(body) = doc.body() else { return };
    if let Ok(el) = doc.create_element("div") {
        el.set_class_name("fatal");
        let _ = el.set_attribute("role", "alert");
        el.set_text_content(Some(message));
        let _ = body.prepend_with_node_1(&el);
    }
}

/// Logs panics to the console and shows them on the page: never a blank page.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        console_error_panic_hook::hook(info);
        show_fatal(&panic_text(&info.to_string()));
    }));
}

/// Entry point of the page: mounts [`App`] into `#app` (replacing the loading text).
pub fn start() {
    install_panic_hook();
    let doc = web_sys::window().and_then(|w| w.document()).expect("a browser document");
    match doc.get_element_by_id("app").and_then(|e| wasm_bindgen::JsCast::dyn_into::<web_sys::HtmlElement>(e).ok()) {
        Some(root) => {
            root.set_inner_html("");
            leptos::mount::mount_to(root, App).forget();
        }
        None => leptos::mount::mount_to_body(App),
    }
}

/// A visible "estimate" marker; hovering shows why.
fn estimate_marker(why: Option<String>) -> impl IntoView {
    why.map(|why| view! { <span class="estimate" title=why>"estimate"</span> })
}

fn plan_view(plan: &Plan) -> impl IntoView {
    let windows = window_rows(plan);
    let cards = card_rows(plan);
    let notes = estimate_notes(plan);
    let params = plan.params.printed_millions();
    let tokens = plan.tokens_per_iter;
    view! {
        <p class="params">
            "number of parameters: " <strong class="param-count">{params}</strong>
            <span class="tokens">" · tokens per iteration: " {tokens}</span>
        </p>
        <h2>"Peak memory by window"</h2>
        <table class="windows">
            <thead>
                <tr>
                    <th>"window"</th>
                    <th class="num">"peak allocated (GiB)"</th>
                    <th class="num">"nvidia-smi (GiB)"</th>
                    <th>"phase"</th>
                    <th>"op at the peak"</th>
                </tr>
            </thead>
            <tbody>
                {windows
                    .into_iter()
                    .map(|r| {
                        view! {
                            <tr data-window=r.window>
                                <td title=r.description>{r.window}</td>
                                <td class="num peak-allocated">
                                    {r.peak_allocated_gib} {estimate_marker(r.allocated_estimate)}
                                </td>
                                <td class="num nvidia-smi">{r.nvidia_smi_gib} {estimate_marker(r.smi_estimate)}</td>
                                <td>{r.phase}</td>
                                <td><code>{r.op}</code></td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
        <h2>"Does it fit?"</h2>
        <table class="cards">
            <thead>
                <tr>
                    <th>"card"</th>
                    <th class="num">"available (GiB)"</th>
                    <th class="num">"needed (GiB)"</th>
                    <th class="num">"headroom (GiB)"</th>
                    <th>"worst window"</th>
                    <th>"verdict"</th>
                </tr>
            </thead>
            <tbody>
                {cards
                    .into_iter()
                    .map(|c| {
                        let class = if c.fits { "verdict fits" } else { "verdict no-fit" };
                        view! {
                            <tr>
                                <td>{c.gpu_name}</td>
                                <td class="num">{c.available_gib} {estimate_marker(c.available_estimate)}</td>
                                <td class="num">{c.needed_gib} {estimate_marker(c.needed_estimate)}</td>
                                <td class="num">{c.headroom_gib}</td>
                                <td>{c.worst_window}</td>
                                <td class=class>{c.verdict}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
        <ul class="notes">
            {notes
                .into_iter()
                .map(|(figure, detail)| {
                    view! {
                        <li>
                            <span class="estimate">"estimate"</span> " " <code>{figure}</code> ": " {detail}
                        </li>
                    }
                })
                .collect_view()}
        </ul>
    }
}

/// The page.
#[component]
pub fn App() -> impl IntoView {
    let defaults = Inputs::default();
    let batch = RwSignal::new(defaults.batch_size.to_string());
    let layers = RwSignal::new(defaults.n_layer.to_string());
    let result = Memo::new(move |_| compute_from_text(&batch.get(), &layers.get()));
    view! {
        <main class="vramfit">
            <h1>"vramfit"</h1>
            <p class="lede">
                "The GPU memory of a nanoGPT training run, before you run it: "
                <code>"train.py"</code>
                "'s defaults (GPT-2 124M, bf16, block 1024, compile) with the batch size and depth below, on the default card."
            </p>
            <form class="inputs" on:submit=|ev| ev.prevent_default()>
                <label>
                    "batch_size "
                    <input
                        type="number"
                        name="batch_size"
                        min="1"
                        step="1"
                        prop:value=move || batch.get()
                        on:input=move |ev| batch.set(event_target_value(&ev))
                    />
                </label>
                <label>
                    "n_layer "
                    <input
                        type="number"
                        name="n_layer"
                        min="1"
                        step="1"
                        prop:value=move || layers.get()
                        on:input=move |ev| layers.set(event_target_value(&ev))
                    />
                </label>
            </form>
            {move || {
                result
                    .with(|r| match r {
                        Ok(plan) => plan_view(plan).into_any(),
                        Err(msg) => {
                            view! {
                                <p class="error" role="alert">
                                    "Cannot plan this config: " {msg.clone()}
                                </p>
                            }
                                .into_any()
                        }
                    })
            }}
        </main>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gib_formatting() {
        assert_eq!(format_gib(0), "0.00");
        assert_eq!(format_gib(1 << 30), "1.00");
        assert_eq!(format_gib(3 << 29), "1.50");
        assert_eq!(format_signed_gib(-(1 << 30)), "-1.00");
        assert_eq!(format_signed_gib(1 << 29), "+0.50");
    }

    #[test]
    fn parse_count_reads_whole_numbers_and_names_the_field() {
        assert_eq!(parse_count("batch_size", " 12 "), Ok(12));
        assert!(parse_count("batch_size", "").unwrap_err().starts_with("batch_size:"));
        assert!(parse_count("n_layer", "1.5").unwrap_err().starts_with("n_layer:"));
        assert!(parse_count("n_layer", "-3").is_err());
    }

    #[test]
    fn default_plan_shows_nanogpt_parameter_count_and_four_windows() {
        let plan = compute(Inputs::default()).unwrap();
        assert_eq!(plan.params.printed_millions(), "123.59M");
        let rows = window_rows(&plan);
        let names: Vec<_> = rows.iter().map(|r| r.window).collect();
        assert_eq!(names, ["train", "eval", "first_iter", "eval_at_start"]);
        assert_eq!(rows[0].peak_allocated_gib, format_gib(plan.train.peak_allocated_bytes));
        assert_eq!(rows[0].nvidia_smi_gib, format_gib(plan.train.nvidia_smi_bytes));
        assert_eq!(rows[3].peak_allocated_gib, format_gib(plan.eval_at_start.peak_allocated_bytes));
        for r in &rows {
            assert!(!r.phase.is_empty() && !r.op.is_empty());
        }
        let cards = card_rows(&plan);
        assert_eq!(cards.len(), 1);
        assert_eq!(cards[0].gpu_name, plan.cards[0].gpu_name);
        assert_eq!(cards[0].fits, plan.cards[0].fits);
    }

    #[test]
    fn estimate_markers_follow_the_notes() {
        let plan = compute(Inputs::default()).unwrap();
        // The RTX 4070's CUDA context is an estimate, so nvidia-smi is marked; compile=True
        // (the default) makes the allocated peak an estimate too.
        let rows = window_rows(&plan);
        assert!(rows.iter().all(|r| r.smi_estimate.is_some() && r.allocated_estimate.is_some()));
        let eager = Plan { notes: plan.notes.iter().filter(|n| n.figure != "peak_allocated_bytes").cloned().collect(), ..plan.clone() };
        assert!(window_rows(&eager).iter().all(|r| r.allocated_estimate.is_none()));
        // The RTX 4070's usable total is measured: no marker on "available".
        assert!(card_rows(&plan)[0].available_estimate.is_none());
        let notes = estimate_notes(&plan);
        assert!(notes.iter().any(|(f, _)| f == "nvidia_smi_bytes"));
        // The reserve is simulated block by block and validated: not an estimate by itself.
        assert!(notes.iter().all(|(f, _)| f != "peak_reserved_bytes"));
        assert!(notes.iter().all(|(f, _)| f != "usable_bytes"));
    }

    #[test]
    fn inputs_change_the_figures() {
        let small = compute(Inputs { batch_size: 4, ..Inputs::default() }).unwrap();
        let big = compute(Inputs::default()).unwrap();
        assert!(small.train.peak_allocated_bytes < big.train.peak_allocated_bytes);
        let deep = compute(Inputs { n_layer: 24, ..Inputs::default() }).unwrap();
        assert!(deep.params.printed > big.params.printed);
    }

    #[test]
    fn bad_inputs_become_messages() {
        let e = compute_from_text("0", "12").unwrap_err();
        assert!(e.contains("batch_size"), "{e}");
        let e = compute_from_text("12", "").unwrap_err();
        assert!(e.contains("n_layer"), "{e}");
        assert!(compute_from_text("12", "12").is_ok());
    }

    #[test]
    fn panic_text_is_actionable() {
        let t = panic_text("boom");
        assert!(t.contains("boom") && t.contains("Reload"));
    }
}
