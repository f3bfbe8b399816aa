//! The page's components: controls, verdict, charts, fixes, share / export / import.
//!
//! One signal holds the whole state (a [`LinkState`]); everything else derives from it:
//! - `computed` (a memo): core's plan without fixes plus the chart data
//!   ([`model::compute_remembering`], whose search reuses the last input's when only the batch moved);
//! - one effect draws the three charts into their containers and sets the performance mark
//!   `vramfit:charts` (what `scripts/bench-page` times);
//! - one effect writes the link into the address bar with `history.replaceState`;
//! - fixes are the slow part (tens of exact simulations), so they are computed 150 ms after the
//!   state stops changing, keyed by the link they belong to, in steps that let the browser's
//!   input and paint run between them.
//!
//! Text reaches the DOM only through Leptos text nodes and attributes (escaped); SVG strings
//! come from [`crate::charts`], whose text plotters escapes.

use crate::charts::{self, Segment};
use crate::model::{self, format_gib, Computed};
use crate::share;
use leptos::html;
use leptos::prelude::*;
use std::time::Duration;
use vramfit_core::link::{self, LinkState};
use vramfit_core::nanogpt;
use vramfit_core::plan::Fix;
use vramfit_core::{config, device, Attention, Config, Dtype, Gpu, Optimizer};

fn location_href() -> String {
    web_sys::window().and_then(|w| w.location().href().ok()).unwrap_or_default()
}

/// How long the fixes computation runs its steps before it lets the browser's other work run:
/// about a frame (a step itself can run longer: a search or a few exact simulations). Yielding
/// after every step instead cost a list a few ms per step (timeouts nested that deep wait 4 ms).
const FIXES_SLICE_MS: f64 = 12.0;

/// Milliseconds on the page's clock (`performance.now()`).
fn now_ms() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}

/// Resolves in a later task of the browser's event loop (a zero-delay timeout), so that input
/// and paint waiting meanwhile run first.
async fn next_task() {
    use wasm_bindgen_futures::js_sys::Promise;
    let promise = Promise::new(&mut |resolve, _| {
        let queued = web_sys::window().and_then(|w| w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, 0).ok());
        if queued.is_none() {
            let _ = resolve.call0(&wasm_bindgen::JsValue::NULL);
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

/// Moves keyboard focus to the element with this id, if there is one.
fn focus_by_id(id: &str) {
    use wasm_bindgen::JsCast;
    let element = web_sys::window().and_then(|w| w.document()).and_then(|d| d.get_element_by_id(id));
    if let Some(e) = element.and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok()) {
        let _ = e.focus();
    }
}

/// How long the state must rest before the address bar's link follows it (the live link in
/// [`App`]): longer than the steps of a dragged slider, short enough that the address bar is
/// current by the time a user reaches for it.
const LINK_DELAY: Duration = Duration::from_millis(200);

/// Replaces the current history entry's query (no new entry per slider move).
fn replace_query(query: &str) {
    if let Some(history) = web_sys::window().and_then(|w| w.history().ok()) {
        // Keeps the path, and an anchor (`#accuracy`: the link was written without it, so a
        // link to the Accuracy section opened at the top); a failure (e.g. a sandboxed frame)
        // only loses the live link.
        let anchor = page_anchor().map(|(hash, _)| hash).unwrap_or_default();
        let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&format!("{query}{anchor}")));
    }
}

/// The address's `#fragment` (with its `#`) when it names an element of the page, with that
/// element; settings after `#` name none (the link's notice speaks of those).
fn page_anchor() -> Option<(String, web_sys::Element)> {
    let window = web_sys::window()?;
    let hash = window.location().hash().ok()?;
    let id = hash.strip_prefix('#').filter(|id| !id.is_empty())?;
    let element = window.document()?.get_element_by_id(id)?;
    Some((hash, element))
}

/// A performance mark the benchmark reads (no-op without `window.performance`).
fn mark(name: &str) {
    if let Some(p) = web_sys::window().and_then(|w| w.performance()) {
        let _ = p.mark(name);
    }
}

/// Copies text to the clipboard; `done` gets whether it worked.
fn copy_text(text: String, done: impl FnOnce(bool) + 'static) {
    let Some(window) = web_sys::window() else {
        done(false);
        return;
    };
    // Browsers leave `navigator.clipboard` undefined outside secure contexts (a page served on
    // a LAN address over http): calling it would throw, and no "copying failed" would show.
    let navigator = window.navigator();
    let has_clipboard = wasm_bindgen_futures::js_sys::Reflect::get(&navigator, &"clipboard".into()).is_ok_and(|c| !c.is_undefined());
    if !has_clipboard {
        done(false);
        return;
    }
    let promise = navigator.clipboard().write_text(&text);
    leptos::task::spawn_local(async move {
        done(wasm_bindgen_futures::JsFuture::from(promise).await.is_ok());
    });
}

/// How a numeric control's slider maps to the value.
#[derive(Clone, Copy)]
enum Slider {
    Linear {
        min: u32,
        max: u32,
        step: u32,
    },
    /// Powers of two from 2^min to 2^max (the box takes any value).
    Pow2 {
        min: u32,
        max: u32,
    },
    /// n_embd: multiples of the head count up to 4096.
    Width,
    /// The eval context: powers of two up to block_size (a longer one is refused, so the
    /// track stops where the valid values do).
    EvalBlock,
}

/// Which way an arrow key moves a slider (up or right: up), if the key is an arrow key without
/// a modifier (the browser's own steps are kept for Home, End and the page keys).
fn arrow_key_direction(ev: &leptos::ev::KeyboardEvent) -> Option<bool> {
    if ev.alt_key() || ev.ctrl_key() || ev.meta_key() || ev.shift_key() {
        return None;
    }
    match ev.key().as_str() {
        "ArrowUp" | "ArrowRight" => Some(true),
        "ArrowDown" | "ArrowLeft" => Some(false),
        _ => None,
    }
}

/// Rounds `v` to the nearest power of two's exponent.
fn log2_round(v: u32) -> u32 {
    let v = v.max(1) as f64;
    v.log2().round() as u32
}

/// The signals every control writes: the state, and the message for text that is not a number.
#[derive(Clone, Copy)]
struct Signals {
    state: RwSignal<LinkState>,
    input_error: RwSignal<Option<String>>,
    /// Set when a change of state brings its own notice (a refused edit undone as its box is
    /// left): the effect that clears notices on every change of state lets that one stand.
    keep_error: StoredValue<bool>,
    /// How many times the address (Back, Forward, a typed hash) has replaced the state: an
    /// edit that began before one has nothing to go back to.
    address_moves: StoredValue<u64>,
    /// What followed the last edit untyped ([`model::followed`]), with the config it is about:
    /// shown while the config is still that one.
    follow_note: RwSignal<Option<(String, Config)>>,
}

/// Where a box's edit began: the whole state (a box may set what lies outside the config,
/// as the other programs' share does) when it was focused or last committed.
#[derive(Clone)]
struct EditStart {
    state: LinkState,
    address_moves: u64,
}

impl EditStart {
    fn now(signals: Signals) -> EditStart {
        EditStart { state: signals.state.get_untracked(), address_moves: signals.address_moves.get_value() }
    }
}

/// Applies an edit to the state if the config stays valid; otherwise shows why (`label: "text"
/// <why>`) and keeps the last valid state, as the README promises. `started` is the config when
/// the edit began (the box was focused), which the settings that follow an edit follow from
/// ([`model::follow_edit`]).
fn try_edit(
    Signals { state, input_error, follow_note, .. }: Signals,
    label: &str,
    text: &str,
    started: &Config,
    edit: impl FnOnce(&mut LinkState),
) {
    let before = state.get_untracked();
    let mut next = before.clone();
    edit(&mut next);
    model::follow_edit(started, &before.config, &mut next.config);
    let refused = next.config.validate().map_err(|e| e.to_string()).err().or_else(|| next.pretrained_conflict());
    match refused {
        None => {
            input_error.set(None);
            // Unchanged ("0." after "0", "012" after "12"): setting it would rewrite the box
            // under the caret while the user types.
            if next != before {
                follow_note.set(model::followed(started, &next.config).map(|n| (n, next.config.clone())));
                state.set(next);
            }
        }
        Some(e) => input_error.set(Some(format!("{label}: \"{}\": {e}; the page keeps the last valid value", text.trim()))),
    }
}

/// A box left (blur or Enter) holding text its setting did not take: typing passed through
/// valid values on the way (n_layer 2000 through 200), so the state would be one the user
/// never chose. It goes back to the state from before the edit, and says so; `show` writes a
/// state's value as the box shows it. Where the address replaced the state during the edit,
/// that state stands and the box only shows it. `ev` is the box's change event: the box is
/// rewritten here, since what it shows may be what it showed when the edit began (see
/// [`shown_unless_editing`]), which would not redraw.
fn undo_refused_edit(signals: Signals, ev: &leptos::ev::Event, label: &str, start: &EditStart, show: impl Fn(&LinkState) -> String) {
    let Signals { state, input_error, keep_error, address_moves, .. } = signals;
    let text = event_target_value(ev);
    let input = event_target::<web_sys::HtmlInputElement>(ev);
    if address_moves.get_value() != start.address_moves {
        input.set_value(&state.with_untracked(&show));
        return;
    }
    let shown = show(&start.state);
    // A number box gives "" for text it cannot read as a number ("abc", "1e"): quoting that
    // would say the user typed nothing.
    let typed = model::refused_text(input.validity().bad_input(), &text);
    keep_error.set_value(true);
    state.set(start.state.clone());
    input.set_value(&shown);
    input_error.set(Some(format!("{label}: {typed} was not taken; back to {shown}, the value before this edit")));
}

/// What a number box shows: the state's value, except while the user types in it. Chrome
/// reads "0." as "0", and writing any text into a box that differs from what it displays
/// puts the caret at the start: "0.3" typed after "0.2" became "30". So the box is not
/// written between its first keystroke and the moment it is left or Enter commits it
/// (`editing`); then it shows the state's value again.
fn shown_unless_editing(editing: RwSignal<bool>, text: impl Fn() -> String + Send + Sync + 'static) -> Memo<String> {
    Memo::new(move |prev: Option<&String>| match prev {
        Some(p) if editing.get() => p.clone(),
        _ => text(),
    })
}

/// A labelled slider with a number box for exact entry; both write the state, through
/// [`try_edit`]: a value the config cannot take gets a notice and leaves the state unchanged.
#[allow(clippy::too_many_arguments)] // the control's name, texts, slider, limit and field: one call each
fn number_control(
    signals: Signals,
    name: &'static str,
    label: &'static str,
    help: &'static str,
    slider: Slider,
    max: u32,
    get: fn(&LinkState) -> u32,
    set: fn(&mut LinkState, u32),
    shape: bool,
) -> impl IntoView {
    let Signals { state, input_error, .. } = signals;
    let id = format!("in-{name}");
    // A model-shape setting is the checkpoint's when the run starts from GPT-2's weights.
    let locked = move || shape && state.with(|s| s.init_from.is_some());
    let shape_capped = name == "block_size";
    let help_id = format!("help-{name}");
    let slider_bounds = move || match slider {
        Slider::Linear { min, max, step } => (min, max, step),
        // A checkpoint's 1024 positions end the block's track (2^10) where longer blocks are refused.
        Slider::Pow2 { min, max } if shape_capped && state.with(|s| s.init_from.is_some()) => {
            (min, max.min(nanogpt::PRETRAINED_BLOCK.ilog2()), 1)
        }
        Slider::Pow2 { min, max } => (min, max, 1),
        Slider::Width => {
            let h = state.with(|s| s.config.n_head).max(1);
            (h, h * (4096 / h).max(1), h)
        }
        Slider::EvalBlock => {
            let top = 31 - state.with(|s| s.config.block_size).max(1).leading_zeros();
            (top.min(4), top, 1)
        }
    };
    let slider_value = move || {
        let v = state.with(get);
        match slider {
            Slider::Pow2 { .. } | Slider::EvalBlock => log2_round(v).to_string(),
            _ => v.to_string(),
        }
    };
    // The state when this box was last focused or committed: typing n_embd 768 digit by digit passes
    // through 7 and 76, and block_size 2048 through 2, which the head count and the eval
    // context must not follow.
    let started = StoredValue::new(EditStart::now(signals));
    let remember = move || started.set_value(EditStart::now(signals));
    let remember_start = move |_| remember();
    let editing = RwSignal::new(false);
    let shown = shown_unless_editing(editing, move || state.with(get).to_string());
    let on_slide = move |ev: leptos::ev::Event| {
        let Ok(pos) = event_target_value(&ev).parse::<u32>() else { return };
        let v = match slider {
            Slider::Pow2 { .. } | Slider::EvalBlock => 1u32 << pos.min(30),
            _ => pos,
        };
        // From the config the drag began with, as a box's typing: a block dragged below the eval
        // context and back gets the eval context back, where it was silently dropped.
        started.with_value(|start| try_edit(signals, label, &v.to_string(), &start.state.config, |s| set(s, v)));
    };
    // Arrow keys step from the value itself (see `model::slider_key_step`), as a slide does.
    let on_slider_key = move |ev: leptos::ev::KeyboardEvent| {
        let Some(up) = arrow_key_direction(&ev) else { return };
        ev.prevent_default();
        let (min, max, step) = slider_bounds();
        let v = state.with_untracked(get);
        let to = match slider {
            Slider::Pow2 { .. } | Slider::EvalBlock => model::slider_key_step((v.max(1) as f64).log2(), min as f64, max as f64, 1.0, up)
                .map(|p| 1u32 << (p.round() as u32).min(30)),
            _ => model::slider_key_step(v as f64, min as f64, max as f64, step.max(1) as f64, up).map(|p| p.round() as u32),
        };
        if let Some(to) = to {
            started.with_value(|start| try_edit(signals, label, &to.to_string(), &start.state.config, |s| set(s, to)));
        }
    };
    let on_type = move |ev: leptos::ev::Event| {
        editing.set(true);
        let text = event_target_value(&ev);
        match model::parse_whole(&text, max) {
            Ok(v) => started.with_value(|start| try_edit(signals, label, &text, &start.state.config, |s| set(s, v))),
            Err(why) => input_error.set(Some(format!("{label}: \"{}\" {why}; the page keeps the last valid value", text.trim()))),
        }
    };
    // Left with text the setting did not take: back to where the edit began.
    let on_commit = move |ev: leptos::ev::Event| {
        editing.set(false);
        let text = event_target_value(&ev);
        if !model::parse_whole(&text, max).is_ok_and(|v| v == state.with_untracked(get)) {
            started.with_value(|start| undo_refused_edit(signals, &ev, label, start, |s| get(s).to_string()));
        } else {
            // Taken, written another way ("00012", "1e1"): the box shows it as the page does. (The
            // state did not change, so nothing else would rewrite it.)
            let shown = state.with_untracked(get).to_string();
            if text != shown {
                event_target::<web_sys::HtmlInputElement>(&ev).set_value(&shown);
            }
        }
        // Committed (Enter keeps the focus): the next edit goes back to here.
        remember();
    };
    view! {
        <div class="field">
            <label for=id.clone()>{label}</label>
            <input
                type="range"
                id=id
                name=format!("{name}-slider")
                aria-describedby=help_id.clone()
                min=move || slider_bounds().0.to_string()
                max=move || slider_bounds().1.to_string()
                step=move || slider_bounds().2.to_string()
                prop:value=slider_value
                aria-valuetext=move || state.with(get).to_string()
                prop:disabled=locked
                on:focus=move |_| remember()
                on:pointerdown=move |_| remember()
                on:input=on_slide
                on:keydown=on_slider_key
            />
            <input
                type="number"
                name=name
                aria-label=format!("{label} (exact)")
                min=match slider {
                    Slider::Linear { min, .. } => min.min(1).to_string(),
                    _ => "1".to_string(),
                }
                step="1"
                prop:value=move || shown.get()
                prop:disabled=locked
                on:focus=remember_start
                on:input=on_type
                on:change=on_commit
                on:blur=move |_| editing.set(false)
            />
            <small id=help_id>{help}{move || locked().then_some(" Set by init_from (GPT-2's weights).")}</small>
        </div>
    }
}

fn check_control(
    state: RwSignal<LinkState>,
    name: &'static str,
    label: &'static str,
    get: fn(&Config) -> bool,
    set: fn(&mut Config, bool),
    shape: bool,
) -> impl IntoView {
    view! {
        <label class="check">
            <input
                type="checkbox"
                name=name
                prop:disabled=move || shape && state.with(|s| s.init_from.is_some())
                prop:checked=move || state.with(|s| get(&s.config))
                on:change=move |ev| {
                    let on = event_target_checked(&ev);
                    state.update(|s| set(&mut s.config, on));
                }
            />
            {label}
        </label>
    }
}

/// A select over fixed choices: (value, label) pairs; `get` gives the current value.
fn select_control(
    state: RwSignal<LinkState>,
    name: &'static str,
    label: &'static str,
    choices: &'static [(&'static str, &'static str)],
    get: fn(&LinkState) -> &'static str,
    set: fn(&mut LinkState, &str),
) -> impl IntoView {
    let id = format!("in-{name}");
    view! {
        <div class="field select">
            <label for=id.clone()>{label}</label>
            <select
                id=id
                name=name
                on:change=move |ev| {
                    let v = event_target_value(&ev);
                    state.update(|s| set(s, &v));
                }
            >
                {choices
                    .iter()
                    .map(|(value, text)| {
                        let value = *value;
                        view! {
                            <option value=value prop:selected=move || state.with(get) == value>
                                {*text}
                            </option>
                        }
                    })
                    .collect_view()}
            </select>
        </div>
    }
}

const DTYPES: &[(&str, &str)] =
    &[("bfloat16", "bfloat16 (autocast)"), ("float16", "float16 (autocast + GradScaler)"), ("float32", "float32")];
const ATTENTIONS: &[(&str, &str)] = &[("flash", "flash (scaled_dot_product_attention)"), ("manual", "manual (T×T matrices)")];
const OPTIMIZERS: &[(&str, &str)] = &[("adamw", "AdamW"), ("sgd", "SGD (no momentum)")];

/// A visible "estimate" marker; hovering shows why. Not a tab stop (a page has a dozen or more):
/// the verdict's "Which figures are estimates" list says why for keyboard and screen readers.
fn estimate_marker(why: Option<String>) -> impl IntoView {
    why.map(|why| {
        view! {
            <span class="estimate" title=why>
                "estimate"
            </span>
        }
    })
}

/// The numbers the end-to-end test compares with `vramfit plan --json`, as exact bytes.
fn exact_figures(c: &Computed) -> impl IntoView {
    let p = &c.plan;
    let card = &p.cards[0];
    view! {
        <div
            id="exact"
            hidden
            data-params=p.params.printed.to_string()
            data-tokens=p.tokens_per_iter.to_string()
            data-train-allocated=p.train.peak_allocated_bytes.to_string()
            data-train-reserved=p.train.peak_reserved_bytes.to_string()
            data-train-smi=p.train.nvidia_smi_bytes.to_string()
            data-eval-allocated=p.eval.peak_allocated_bytes.to_string()
            data-eval-smi=p.eval.nvidia_smi_bytes.to_string()
            data-first-iter-allocated=p.first_iter.peak_allocated_bytes.to_string()
            data-eval-at-start-allocated=p.eval_at_start.peak_allocated_bytes.to_string()
            data-needed=card.needed_bytes.to_string()
            data-available=card.available_bytes.to_string()
            data-headroom=card.headroom_bytes.to_string()
            data-fits=card.fits.to_string()
            data-worst-window=card.worst_window.clone()
            data-largest-micro-batch=p.largest_micro_batch.map(|b| b.to_string()).unwrap_or_else(|| "null".into())
        ></div>
    }
}

/// The verdict, rebuilt on every change. Screen readers hear it through the stable live region
/// the page keeps beside it (a region created with its content is not announced), and the
/// estimate notes stay open or closed across rebuilds through `notes_open`.
fn verdict_view(c: &Computed, notes_open: RwSignal<bool>) -> impl IntoView {
    let v = model::verdict(&c.plan);
    let class = format!("verdict {}", v.tone());
    let need_estimate = model::estimate_detail(&c.plan, model::NEED_FIGURES);
    let avail_estimate = model::estimate_detail(&c.plan, &["usable_bytes"]);
    let notes: Vec<(String, String)> = c
        .plan
        .notes
        .iter()
        .filter(|n| n.source == device::Source::Estimate)
        .map(|n| (n.figure.clone(), model::on_page(&n.detail)))
        .collect();
    let no_estimates = notes.is_empty();
    view! {
        <section class=class>
            <p class="verdict-title">{v.title}</p>
            <p class="verdict-margin">{v.margin} " " {estimate_marker(need_estimate.clone())}</p>
            <p class="verdict-detail">
                {v.detail} " "
                {estimate_marker(match (need_estimate, avail_estimate) {
                    (Some(n), Some(a)) => Some(format!("{n}; available: {a}")),
                    (n, a) => n.or(a.map(|d| format!("available: {d}"))),
                })}
            </p>
            <p class="verdict-where">{v.where_peak}</p>
            {v.later.map(|later| {
                view! {
                    <p class="verdict-later">
                        {later} " " {estimate_marker(Some("the allocator model beyond the two simulated iterations: an estimate, checked on an H200 (see the notes)".to_string()))}
                    </p>
                }
            })}
            <p class="params">
                "number of parameters: " <strong class="param-count">{c.plan.params.printed_millions()}</strong>
                " · tokens per iteration: " <strong class="tokens">{vramfit_core::params::thousands(c.plan.tokens_per_iter)}</strong>
                " · " {model::describe(&c.plan.config)}
            </p>
            <details
                class="notes"
                class:hidden=no_estimates
                prop:open=move || notes_open.get()
                on:toggle=move |ev| {
                    let open = event_target::<web_sys::Element>(&ev).has_attribute("open");
                    if open != notes_open.get_untracked() {
                        notes_open.set(open);
                    }
                }
            >
                <summary>"Which figures are estimates"</summary>
                <ul>
                    {notes
                        .into_iter()
                        .map(|(figure, detail)| {
                            view! {
                                <li>
                                    <span class="estimate">"estimate"</span> " " <strong>{model::figure_label(&figure).to_string()}</strong> ": " {detail}
                                </li>
                            }
                        })
                        .collect_view()}
                </ul>
            </details>
            {exact_figures(c)}
        </section>
    }
}

/// The legend of the breakdown chart: each segment's colour, bytes in the window where the need
/// is reached and its one-sentence explanation.
fn legend_view(c: &Computed) -> impl IntoView {
    let (_, desc, w) = model::need_window(&c.plan);
    let ctx = c.gpu.context_bytes;
    let rows: Vec<_> =
        Segment::all().into_iter().map(|s| (s, s.bytes(w, ctx), model::estimate_detail(&c.plan, model::segment_figures(s)))).collect();
    view! {
        <p class="legend-caption">"At the peak of the " {desc} ":"</p>
        <ul class="legend">
            {rows
                .into_iter()
                .map(|(s, bytes, estimate)| {
                    view! {
                        <li data-segment=s.key() data-bytes=bytes.to_string()>
                            <span class="swatch" style=format!("background:{}", charts::css_color(s.color()))></span>
                            <strong>{s.label()}</strong>
                            " "
                            <span class="num">{model::format_margin(bytes)}</span>
                            " "
                            {estimate_marker(estimate)}
                            " — "
                            {s.explanation()}
                        </li>
                    }
                })
                .collect_view()}
        </ul>
    }
}

fn fix_view(f: Fix, state: RwSignal<LinkState>, need_estimate: Option<String>) -> impl IntoView {
    let config = f.config.clone();
    let apply_label = format!("Apply: {}", f.title);
    // A fix the allocator model sees run out of memory a few steps later is not a plain "fits"
    // (an estimate, as the marker beside the need says where the need is one).
    let (class, status) = match (f.fits, f.runs_out_later) {
        (true, None) if f.close_call => ("fix fits", "fits, a close call".to_string()),
        (true, None) => ("fix fits", "fits".to_string()),
        (true, Some(r)) => {
            let close = if f.close_call { ", a close call" } else { "" };
            ("fix later", format!("fits the first two steps{close}; out of memory at {} by the allocator model, an estimate", r.when()))
        }
        (false, _) if f.close_call => ("fix partial", "still short, a close call: the model's error could cover it".to_string()),
        (false, _) => ("fix partial", "still short".to_string()),
    };
    view! {
        <li class=class data-needed=f.needed_bytes.to_string()>
            <div>
                <strong class="fix-title">
                    {share::setting_pieces(&f.title)
                        .into_iter()
                        .enumerate()
                        .map(|(i, (piece, whole))| {
                            let piece = piece.to_string();
                            view! {
                                {(i > 0).then_some(", ")}
                                <span class:nowrap=whole>{piece}</span>
                            }
                        })
                        .collect_view()}
                </strong>
                <span class="fix-need">" → needs " {format_gib(f.needed_bytes)} " GiB (" {status} ")"</span>
                " "
                {estimate_marker(need_estimate)}
                // A space between the badges: copied text and screen readers ran them together.
                {(!f.stock_nanogpt).then(|| view! { " " <span class="tag">"needs a train.py change"</span> })}
            </div>
            <div class="fix-cost">"Cost: " {f.cost.clone()}</div>
            <button
                type="button"
                class="apply"
                aria-label=apply_label
                on:click=move |ev| {
                    // The second click of a double click: the list is rebuilt for the config the
                    // first applied, and another fix may now sit under the pointer.
                    if ev.detail() > 1 {
                        return;
                    }
                    let cfg = config.clone();
                    state.update(|s| s.config = cfg);
                    // The list (and this button) is rebuilt for the new config: keep keyboard
                    // focus at the list's heading rather than losing it to the page.
                    focus_by_id("fixes-heading");
                }
            >
                "Apply"
            </button>
        </li>
    }
}

/// The card: presets, a custom size, and what other programs hold.
fn card_controls(signals: Signals) -> impl IntoView {
    let Signals { state, input_error, .. } = signals;
    let presets = device::presets();
    let is_custom = move || state.with(|s| s.gpu.starts_with("custom-"));
    let custom_gib = move || state.with(|s| model::gpu_of(s).memory_bytes as f64 / model::GIB);
    // What was typed in the custom box, shown while it still names the card in the state: the
    // card's id rounds to 0.01 GiB, and writing that back rewrote "12.345" to "12.35" mid-typing.
    // Not a signal: the box is redrawn when the card changes, never because of a keystroke alone
    // (a number box reads "" while "12." is typed, and writing that back would erase it).
    let custom_typed = StoredValue::new(String::new());
    // Where an edit of the custom box began, for a box left holding a size it did not take
    // ("1e9" passes through a 1 GiB card on the way): as every number box, back to that.
    let custom_started = StoredValue::new(EditStart::now(signals));
    // The card's size as the box shows it (the custom ids keep 0.01 GiB).
    let shown_gib = |s: &LinkState| format!("{}", (model::gpu_of(s).memory_bytes as f64 / model::GIB * 100.0).round() / 100.0);
    view! {
        <div class="field select">
            <label for="in-gpu">"GPU"</label>
            <select
                id="in-gpu"
                name="gpu"
                on:change=move |ev| {
                    let v = event_target_value(&ev);
                    let id = if v == "custom" { Gpu::custom(custom_gib()).id } else { v };
                    state.update(|s| s.gpu = id);
                }
            >
                {presets
                    .into_iter()
                    .map(|g| {
                        let id = g.id.clone();
                        let id2 = id.clone();
                        view! {
                            <option value=id prop:selected=move || state.with(|s| s.gpu == id2)>
                                {g.name.clone()}
                            </option>
                        }
                    })
                    .collect_view()}
                <option value="custom" prop:selected=is_custom>
                    "Custom size…"
                </option>
            </select>
        </div>
        <div class="field" class:hidden=move || !is_custom()>
            <label for="in-custom-gib">"Custom capacity (GiB)"</label>
            <input
                type="number"
                id="in-custom-gib"
                name="custom_gib"
                min="0.25"
                max="4096"
                // Any size to 0.01 GiB: a step would make a card's own size (11.99) read invalid.
                step="any"
                prop:value=move || {
                    let typed = custom_typed.get_value();
                    let same_card = typed.trim().parse::<f64>().ok().and_then(|g| Gpu::find(&format!("custom-{g}")));
                    if same_card.is_some_and(|g| state.with(|s| s.gpu == g.id)) {
                        typed
                    } else {
                        state.with(shown_gib)
                    }
                }
                // Follows each keystroke, as the other number boxes do; a partial or bad entry
                // gets a notice and leaves the card as it was.
                on:input=move |ev| {
                    let text = event_target_value(&ev);
                    custom_typed.set_value(text.clone());
                    match text.trim().parse::<f64>().ok().and_then(|g| Gpu::find(&format!("custom-{g}"))) {
                        Some(g) => {
                            input_error.set(None);
                            if state.with_untracked(|s| s.gpu != g.id) {
                                state.update(|s| s.gpu = g.id);
                            }
                        }
                        None => input_error.set(Some(format!(
                            "custom capacity: \"{}\" is not a size between 0.25 and 4096 GiB; the page keeps the last valid value",
                            text.trim()
                        ))),
                    }
                }
                on:focus=move |_| custom_started.set_value(EditStart::now(signals))
                on:change=move |ev| {
                    let text = event_target_value(&ev);
                    let taken = text.trim().parse::<f64>().ok().and_then(|g| Gpu::find(&format!("custom-{g}")));
                    if !taken.is_some_and(|g| state.with_untracked(|s| s.gpu == g.id)) {
                        custom_typed.set_value(String::new());
                        custom_started.with_value(|start| undo_refused_edit(signals, &ev, "custom capacity", start, shown_gib));
                    } else {
                        // Taken, perhaps rounded to 0.01 GiB or written another way (11.996, 1e1):
                        // the box shows the size in use, as the other boxes do on commit.
                        let shown = state.with_untracked(shown_gib);
                        if text.trim() != shown {
                            custom_typed.set_value(String::new());
                            event_target::<web_sys::HtmlInputElement>(&ev).set_value(&shown);
                            // Rounded, not just written another way: say so (QA: 12.345 became
                            // 12.35 without a word).
                            if text.trim().parse::<f64>().ok() != shown.parse::<f64>().ok() {
                                input_error.set(Some(format!(
                                    "custom capacity: \"{}\" is planned as {shown} GiB (a card's size is kept to a hundredth of a GiB)",
                                    text.trim()
                                )));
                            }
                        }
                    }
                    custom_started.set_value(EditStart::now(signals));
                }
            />
            <small>"Custom cards are modelled as an Ampere-class card (bf16, flash attention) with an estimated usable memory and CUDA context."</small>
        </div>
        {number_control(
            signals,
            "other_usage_mib",
            "Used by other programs (MiB)",
            "A desktop, a browser: nvidia-smi lists them. Subtracted from what the card offers.",
            Slider::Linear { min: 0, max: 4096, step: 64 },
            // Typed beyond what vramfit models: a notice, as a link with it gets.
            link::MAX_OTHER_USAGE_MIB as u32,
            |s| s.other_usage_mib.min(u32::MAX as u64) as u32,
            |s, v| s.other_usage_mib = (v as u64).min(link::MAX_OTHER_USAGE_MIB),
            false,
        )}
    }
}

fn dtype_key(c: &Config) -> &'static str {
    c.dtype.name()
}

/// The page.
#[component]
pub fn App() -> impl IntoView {
    // The whole address, so that settings put after `#` get core's notice instead of vanishing.
    let initial = share::read_link(&location_href());
    let state = RwSignal::new(initial.state);
    let link_notices = RwSignal::new(initial.notices);
    let input_error = RwSignal::new(None::<String>);
    let keep_error = StoredValue::new(false);
    // The config when the dropout box was focused (see `undo_refused_edit`), and whether the
    // user is typing in it (see `shown_unless_editing`).
    let address_moves = StoredValue::new(0u64);
    let follow_note = RwSignal::new(None::<(String, Config)>);
    let signals = Signals { state, input_error, keep_error, address_moves, follow_note };
    let dropout_started = StoredValue::new(EditStart::now(signals));
    let dropout_editing = RwSignal::new(false);
    let dropout_shown = shown_unless_editing(dropout_editing, move || state.with(|s| link::dropout_text(s.config.dropout)));
    // What choosing a checkpoint cut short (the block), with the config it gave: shown while the
    // config is still that one.
    let crop_notice = RwSignal::new(None::<(String, Config)>);
    // What the last plans' largest-batch searches simulated: a batch slider's steps share it.
    let search_memo = StoredValue::new(vramfit_core::plan::SearchMemo::default());
    let computed = Memo::new(move |_| {
        state.with(|s| search_memo.try_update_value(|m| model::compute_remembering(s, m)).unwrap_or_else(|| model::compute(s)))
    });
    let notes_open = RwSignal::new(false);
    // Every chart's figures rest on the same terms as the need: marked where one is an estimate.
    let chart_estimate =
        move || computed.with(|r| r.as_ref().ok().map(|c| estimate_marker(model::estimate_detail(&c.plan, model::NEED_FIGURES))));
    // The batch chart's marked largest batch can rest on an estimate where the config's own
    // need does not (a batch past the shapes measured on a GPU).
    let batch_chart_estimate = move || {
        computed.with(|r| {
            r.as_ref().ok().map(|c| {
                let own = model::estimate_detail(&c.plan, model::NEED_FIGURES);
                estimate_marker(own.or_else(|| {
                    c.plan.largest_micro_batch_is_estimate.then(|| {
                        "the largest batch that fits is past the shapes measured on a GPU: its reserve is extrapolated".to_string()
                    })
                }))
            })
        })
    };

    // The live link. On load it is written at once (the address then shows the whole,
    // normalised link); after that, once the state has rested for `LINK_DELAY`. Browsers limit
    // how often a page may call `history.replaceState`: Chromium ignores calls past 200 in 10
    // seconds (https://crbug.com/1038223), Safari refuses those past 100 in 30. Written on every
    // input, a dragged slider reached that and left an old link in the address bar
    // (tests/e2e/page.test.mjs checks that it no longer does). Each call also took a median 1.3
    // to 7.8 ms in headless Chromium here, run after the charts were drawn but in the same task,
    // so before the browser could show them.
    let pending_link = StoredValue::new(None::<leptos::prelude::TimeoutHandle>);
    Effect::new(move |ran: Option<()>| {
        let query = state.with(share::query_of);
        if let Some(h) = pending_link.get_value() {
            h.clear();
        }
        if ran.is_none() {
            replace_query(&query);
            // The browser went to the anchor before the page above it was built: once the
            // charts are drawn (their effect runs after this one), go again; what grows above
            // it later (the fixes) is the browser's scroll anchoring's to make up for.
            if page_anchor().is_some() {
                set_timeout(
                    || {
                        if let Some((_, element)) = page_anchor() {
                            element.scroll_into_view();
                        }
                    },
                    Duration::ZERO,
                );
            }
        } else {
            pending_link.set_value(set_timeout_with_handle(move || replace_query(&query), LINK_DELAY).ok());
        }
    });
    // A link still waiting when the page's app goes (a test mounts the next one) is not written
    // over the next one's address.
    on_cleanup(move || {
        if let Some(h) = pending_link.try_get_value().flatten() {
            h.clear();
        }
    });
    // Settings typed after `#` into the open page's address (no reload happens): read as on
    // load, so they get the same notice instead of being ignored unseen.
    // Back and Forward between such entries (or any the browser keeps) change the address
    // without a reload too: the page follows it the same way.
    let follow_address = move |href: String| {
        let read = share::read_link(&href);
        // The query is the live state: setting it unchanged would clear a number box's complaint.
        if state.with_untracked(|s| *s != read.state) {
            address_moves.update_value(|n| *n += 1);
            // What followed an edit is not news when Back returns to its config.
            follow_note.set(None);
            state.set(read.state);
        }
        link_notices.set(read.notices);
    };
    // A hash change is read at the address it went to: Back to an entry with a hash fires
    // popstate, then hashchange, and by then the live link has rewritten the address without
    // the hash (whose notice must stay).
    let hash_listener = window_event_listener_untyped("hashchange", move |ev| {
        let to = wasm_bindgen_futures::js_sys::Reflect::get(&ev, &"newURL".into()).ok().and_then(|u| u.as_string());
        follow_address(to.unwrap_or_else(location_href));
    });
    let history_listener = window_event_listener_untyped("popstate", move |_| follow_address(location_href()));
    on_cleanup(move || {
        hash_listener.remove();
        history_listener.remove();
    });
    // A number box's complaint is about the value it held: any change of state (a checkbox, a
    // preset, a fix) leaves it behind.
    Effect::new(move |_| {
        state.track();
        if keep_error.get_value() {
            keep_error.set_value(false);
        } else {
            input_error.set(None);
        }
    });

    // The charts: one effect draws all three, then marks the time.
    let chart_breakdown = NodeRef::<html::Div>::new();
    let chart_batch = NodeRef::<html::Div>::new();
    let chart_timeline = NodeRef::<html::Div>::new();
    Effect::new(move |_| {
        let (Some(a), Some(b), Some(t)) = (chart_breakdown.get(), chart_batch.get(), chart_timeline.get()) else { return };
        computed.with(|r| {
            let svgs = match r {
                Ok(c) => {
                    let room = c.tensor_room();
                    [
                        charts::breakdown_svg(&c.plan, c.available(), c.gpu.context_bytes, &c.gpu.name),
                        charts::batch_svg(&c.series, c.available()),
                        charts::timeline_svg(&c.timeline, room),
                    ]
                }
                Err(_) => [Ok(String::new()), Ok(String::new()), Ok(String::new())],
            };
            for (el, svg) in [a, b, t].iter().zip(svgs) {
                match svg {
                    Ok(s) => el.set_inner_html(&s),
                    // The error is our own message: set as text, never as markup.
                    Err(e) => el.set_text_content(Some(&e)),
                }
            }
        });
        mark("vramfit:charts");
    });

    // Fixes, 150 ms after the state settles, in steps with the browser's other work between
    // them (a whole list can take over 100 ms); a newer state stops a list still in the works.
    let fixes = RwSignal::new(None::<(String, Vec<Fix>)>);
    let fixes_generation = StoredValue::new(0u64);
    Effect::new(move |pending: Option<Option<leptos::prelude::TimeoutHandle>>| {
        if let Some(Some(h)) = pending {
            h.clear();
        }
        fixes_generation.update_value(|g| *g += 1);
        let generation = fixes_generation.get_value();
        let current = move || fixes_generation.try_get_value() == Some(generation);
        let key = state.with(link::encode);
        let needs_fixes = computed.with(|r| r.as_ref().is_ok_and(|c| !c.plan.cards[0].fits));
        if !needs_fixes {
            fixes.set(Some((key, Vec::new())));
            return None;
        }
        let snapshot = state.get_untracked();
        // The plan already has the config's need and largest batch: the fixes reuse them.
        let (plan, gpu) = computed.with_untracked(|r| r.as_ref().ok().map(|c| (c.plan.clone(), c.gpu.clone())))?;
        set_timeout_with_handle(
            move || {
                leptos::task::spawn_local(async move {
                    let other = snapshot.other_usage_mib.saturating_mul(model::MIB);
                    let mut steps = vramfit_core::plan::FixesInSteps::of(&plan, &gpu, other);
                    let mut list = loop {
                        let slice_start = now_ms();
                        let done = loop {
                            if let Some(list) = steps.step() {
                                break Some(list);
                            }
                            if now_ms() - slice_start >= FIXES_SLICE_MS {
                                break None;
                            }
                        };
                        if let Some(list) = done {
                            break list;
                        }
                        next_task().await;
                        if !current() {
                            return;
                        }
                    };
                    if snapshot.init_from.is_some() {
                        list = vramfit_core::plan::keeping_pretrained_shape(list, &plan.config);
                    }
                    fixes.set(Some((key, list)));
                })
            },
            Duration::from_millis(150),
        )
        .ok()
    });

    // Which copy button was pressed last, and what came of it: said next to that button.
    let copy_status = RwSignal::new((String::new(), String::new()));
    // (`what` is the thing's name in a sentence: `to_lowercase` would cost the wasm about 10 KB
    // of Unicode tables.)
    let copy = move |which: &'static str, text: String, what: &'static str| {
        copy_text(text, move |ok| {
            let message = if ok { format!("Copied the {what}.") } else { format!("Copying failed: select the {what} and copy it.") };
            copy_status.set((which.to_string(), message));
        })
    };
    let status_of = move |which: &'static str| move || copy_status.with(|(w, m)| if w == which { m.clone() } else { String::new() });
    let import_text = RwSignal::new(String::new());
    // An import's notes with the state it made, or why it was refused.
    let import_result = RwSignal::new(None::<Result<(Vec<String>, LinkState), String>>);
    // The result is about the state it made: once the state moves on (a preset, a slider,
    // Back), "Imported." and its notes are gone, as a refusal is once the text is edited.
    Effect::new(move |_| {
        let moved_on = state.with(|s| import_result.with_untracked(|r| matches!(r, Some(Ok((_, made))) if made != s)));
        if moved_on {
            import_result.set(None);
        }
    });

    let model_id = move || state.with(|s| model::preset_of(&s.config)).unwrap_or("custom");

    view! {
        <main class="vramfit">
            <header>
                <h1 id="page-title" tabindex="-1">"vramfit"</h1>
                <p class="lede">
                    "Will this nanoGPT training run fit on your GPU? Every figure comes from a simulation of PyTorch's memory during "
                    <code>"train.py"</code> "'s loop, computed in your browser."
                </p>
            </header>
            {move || {
                link_notices
                    .with(|n| !n.is_empty())
                    .then(|| {
                        view! {
                            <div class="notice" role="status">
                                <strong>"Some of the link was ignored:"</strong>
                                <ul>{link_notices.get().into_iter().map(|n| view! { <li>{n}</li> }).collect_view()}</ul>
                                <button
                                    type="button"
                                    on:click=move |_| {
                                        link_notices.set(Vec::new());
                                        // The button goes with the notice: keep keyboard focus
                                        // at the top of the page rather than losing it.
                                        focus_by_id("page-title");
                                    }
                                >
                                    "Dismiss"
                                </button>
                            </div>
                        }
                    })
            }}
            // One column (phones, tablets): the verdict is a screen below the controls, so a
            // one-line copy stays at the top while they move (hidden on wide screens).
            <div class="verdict-bar" aria-hidden="true">
                {move || {
                    let (class, text) = computed.with(|r| match r {
                        Ok(c) => {
                            let v = model::verdict(&c.plan);
                            (v.tone(), v.short)
                        }
                        Err(e) => ("no-fit", e.clone()),
                    });
                    view! { <p class=class>{text}</p> }
                }}
                {move || input_error.get().map(|e| view! { <p class="no-fit">{e}</p> })}
            </div>
            <div class="layout">
                <form class="controls" on:submit=|ev| ev.prevent_default() aria-label="Run settings">
                    <fieldset>
                        <legend>"Model"</legend>
                        <div class="field select">
                            <label for="in-preset">"Preset"</label>
                            <select
                                id="in-preset"
                                name="preset"
                                on:change=move |ev| {
                                    let v = event_target_value(&ev);
                                    if let Some(p) = model::model_presets().into_iter().find(|p| p.id == v) {
                                        // The presets are runs from scratch.
                                        state.update(|s| {
                                            s.config = p.config;
                                            s.init_from = None;
                                        });
                                    }
                                }
                            >
                                {model::model_presets()
                                    .into_iter()
                                    .map(|p| {
                                        view! {
                                            <option value=p.id prop:selected=move || model_id() == p.id>
                                                {p.label}
                                            </option>
                                        }
                                    })
                                    .collect_view()}
                                <option value="custom" disabled prop:selected=move || model_id() == "custom">
                                    "(edited)"
                                </option>
                            </select>
                            {move || {
                                computed.with(|r| {
                                    r.as_ref()
                                        .ok()
                                        .and_then(|c| model::report_remark(model_id(), &c.plan))
                                        .map(|remark| view! { <small class="report-remark">{remark}</small> })
                                })
                            }}
                        </div>
                        <div class="field select">
                            <label for="in-init_from">"init_from"</label>
                            <select
                                id="in-init_from"
                                name="init_from"
                                aria-describedby="help-init_from"
                                on:change=move |ev| {
                                    let v = event_target_value(&ev);
                                    let mut cropped = None;
                                    state.update(|s| cropped = model::start_from(s, &v));
                                    crop_notice.set(cropped.map(|n| (n, state.with(|s| s.config.clone()))));
                                }
                            >
                                <option value="scratch" prop:selected=move || state.with(|s| s.init_from.is_none())>
                                    "scratch (random weights)"
                                </option>
                                {nanogpt::pretrained_names()
                                    .into_iter()
                                    .map(|name| {
                                        view! {
                                            <option value=name prop:selected=move || state.with(|s| s.init_from.as_deref() == Some(name))>
                                                {format!("{name} (fine-tune GPT-2's weights)")}
                                            </option>
                                        }
                                    })
                                    .collect_view()}
                            </select>
                            <small id="help-init_from">
                                "GPT-2's weights set n_layer, n_head, n_embd, vocab_size 50257 and bias; block_size at most 1024. The memory is that of the same model from scratch; fixes keep the shape."
                            </small>
                            {move || {
                                crop_notice
                                    .with(|n| n.as_ref().filter(|(_, c)| state.with(|s| &s.config == c)).map(|(m, _)| m.clone()))
                                    .map(|m| view! { <p class="crop-notice" role="status">{m}</p> })
                            }}
                        </div>
                        {number_control(
            signals,
                            "batch_size",
                            "batch_size",
                            "Sequences per forward/backward (micro-batch).",
                            Slider::Linear { min: 1, max: 128, step: 1 },
                            config::MAX_BATCH,
                            |s| s.config.batch_size,
                            |s, v| s.config.batch_size = v,
                            false,
                        )}
                        {number_control(
            signals,
                            "block_size",
                            "block_size",
                            "Context length in tokens (slider: powers of two).",
                            Slider::Pow2 { min: 4, max: 14 },
                            config::MAX_BLOCK,
                            |s| s.config.block_size,
                            |s, v| s.config.block_size = v,
                            false,
                        )}
                        {number_control(
            signals,
                            "n_embd",
                            "n_embd",
                            "Model width (slider: steps of n_head).",
                            Slider::Width,
                            config::MAX_EMBD,
                            |s| s.config.n_embd,
                            |s, v| s.config.n_embd = v,
                            true,
                        )}
                        {number_control(
            signals,
                            "n_layer",
                            "n_layer",
                            "Transformer blocks.",
                            Slider::Linear { min: 1, max: 96, step: 1 },
                            config::MAX_LAYERS,
                            |s| s.config.n_layer,
                            |s, v| s.config.n_layer = v,
                            true,
                        )}
                        <div class="field select">
                            <label for="in-n_head">"n_head"</label>
                            <select
                                id="in-n_head"
                                name="n_head"
                                prop:disabled=move || state.with(|s| s.init_from.is_some())
                                on:change=move |ev| {
                                    if let Ok(h) = event_target_value(&ev).parse::<u32>() {
                                        state.update(|s| s.config.n_head = h);
                                    }
                                }
                            >
                                {move || {
                                    let (embd, head) = state.with(|s| (s.config.n_embd, s.config.n_head));
                                    let mut options = model::divisors(embd, 128);
                                    if !options.contains(&head) {
                                        options.push(head);
                                    }
                                    options
                                        .into_iter()
                                        .map(|d| {
                                            view! {
                                                <option value=d.to_string() prop:selected=d == head>
                                                    {d.to_string()}
                                                </option>
                                            }
                                        })
                                        .collect_view()
                                }}
                            </select>
                            <small>"Only divisors of n_embd."</small>
                        </div>
                        {number_control(
            signals,
                            "vocab_size",
                            "vocab_size",
                            "50304 for GPT-2's tokenizer (padded), 65 for shakespeare-char.",
                            Slider::Linear { min: 64, max: 131072, step: 64 },
                            config::MAX_VOCAB,
                            |s| s.config.vocab_size,
                            |s, v| s.config.vocab_size = v,
                            true,
                        )}
                        <div class="checks">
                            {check_control(state, "bias", "bias", |c| c.bias, |c, v| c.bias = v, true)}
                        </div>
                        <div class="field">
                            <label for="in-dropout">"dropout"</label>
                            <input
                                type="range"
                                id="in-dropout"
                                name="dropout-slider"
                                min="0"
                                max="0.9"
                                step="0.05"
                                prop:value=move || state.with(|s| s.config.dropout.to_string())
                                // The slider snaps to its step (0.13 shows as 0.15): say the value.
                                aria-valuetext=move || state.with(|s| link::dropout_text(s.config.dropout))
                                on:input=move |ev| {
                                    if let Ok(p) = event_target_value(&ev).parse::<f64>() {
                                        state.update(|s| s.config.dropout = (p * 100.0).round() / 100.0);
                                    }
                                }
                                // From the value itself: 0.13 goes to 0.15, not 0.2 (see `model::slider_key_step`).
                                on:keydown=move |ev| {
                                    let Some(up) = arrow_key_direction(&ev) else { return };
                                    ev.prevent_default();
                                    let now = state.with_untracked(|s| s.config.dropout);
                                    if let Some(p) = model::slider_key_step(now, 0.0, 0.9, 0.05, up) {
                                        state.update(|s| s.config.dropout = (p * 100.0).round() / 100.0);
                                    }
                                }
                            />
                            <input
                                type="number"
                                name="dropout"
                                aria-label="dropout (exact)"
                                min="0"
                                max="0.99"
                                step="0.05"
                                prop:value=move || dropout_shown.get()
                                on:focus=move |_| dropout_started.set_value(EditStart::now(signals))
                                on:blur=move |_| dropout_editing.set(false)
                                on:input=move |ev| {
                                    dropout_editing.set(true);
                                    let t = event_target_value(&ev);
                                    match t.trim().parse::<f64>() {
                                        Ok(p) if p.is_finite() => {
                                            let now = state.with_untracked(|s| s.config.clone());
                                            // + 0.0 turns "-0" into 0: `--dropout -0` reads as a flag.
                                            try_edit(signals, "dropout", &t, &now, |s| s.config.dropout = p + 0.0);
                                        }
                                        _ => input_error.set(Some(format!("dropout: \"{}\" is not a number", t.trim()))),
                                    }
                                }
                                // Left: what the box holds is taken if it can be ("0." is 0),
                                // else the edit is undone.
                                on:change=move |ev| {
                                    dropout_editing.set(false);
                                    let t = event_target_value(&ev);
                                    let now = state.get_untracked().config;
                                    match t.trim().parse::<f64>() {
                                        Ok(p) if p.is_finite() && (p + 0.0) == now.dropout => {}
                                        Ok(p) if p.is_finite() && Config { dropout: p + 0.0, ..now.clone() }.validate().is_ok() => {
                                            try_edit(signals, "dropout", &t, &now, |s| s.config.dropout = p + 0.0)
                                        }
                                        _ => dropout_started.with_value(|start| {
                                            undo_refused_edit(signals, &ev, "dropout", start, |s| link::dropout_text(s.config.dropout))
                                        }),
                                    }
                                    // Committed (Enter keeps the focus): the next edit goes back to here.
                                    dropout_started.set_value(EditStart::now(signals));
                                }
                            />
                            <small>"nn.Dropout keeps a 1-byte mask per element for backward; flash attention's dropout keeps none, manual attention's a B·H·T² one."</small>
                        </div>
                    </fieldset>
                    <fieldset>
                        <legend>"Training"</legend>
                        {number_control(
            signals,
                            "gradient_accumulation_steps",
                            "gradient_accumulation_steps",
                            "Micro-steps per optimizer step: more tokens per iteration. From 1 to 2 the fp32 gradients stay resident through the next micro-step's forward; from 2 up, memory stays the same.",
                            Slider::Linear { min: 1, max: 128, step: 1 },
                            config::MAX_ACCUM,
                            |s| s.config.gradient_accumulation_steps,
                            |s, v| s.config.gradient_accumulation_steps = v,
                            false,
                        )}
                        {number_control(
            signals,
                            "eval_batch_size",
                            "eval batch size",
                            "Sequences per estimate_loss forward (train.py uses batch_size; vramfit train can differ).",
                            Slider::Linear { min: 1, max: 128, step: 1 },
                            config::MAX_BATCH,
                            |s| s.config.eval_batch(),
                            |s, v| s.config.eval_batch_size = Some(v),
                            false,
                        )}
                        <div class="checks">
                            <label class="check">
                                <input
                                    type="checkbox"
                                    name="eval_batch_same"
                                    prop:checked=move || state.with(|s| s.config.eval_batch_size.is_none())
                                    on:change=move |ev| {
                                        let same = event_target_checked(&ev);
                                        state.update(|s| s.config.eval_batch_size = if same { None } else { Some(s.config.batch_size) });
                                    }
                                />
                                "eval batch = batch_size (train.py)"
                            </label>
                        </div>
                        {number_control(
            signals,
                            "eval_block_size",
                            "eval block size",
                            "Context estimate_loss uses (train.py: block_size; a fix may shorten it, which needs a train.py change).",
                            Slider::EvalBlock,
                            config::MAX_BLOCK,
                            |s| s.config.eval_block(),
                            |s, v| s.config.eval_block_size = Some(v),
                            false,
                        )}
                        <div class="checks">
                            <label class="check">
                                <input
                                    type="checkbox"
                                    name="eval_block_same"
                                    prop:checked=move || state.with(|s| s.config.eval_block_size.is_none())
                                    on:change=move |ev| {
                                        let same = event_target_checked(&ev);
                                        state.update(|s| s.config.eval_block_size = if same { None } else { Some(s.config.block_size) });
                                    }
                                />
                                "eval block = block_size (train.py)"
                            </label>
                        </div>
                        {select_control(
                            state,
                            "dtype",
                            "dtype",
                            DTYPES,
                            |s| dtype_key(&s.config),
                            |s, v| s.config.dtype = Dtype::parse(v).unwrap_or(s.config.dtype),
                        )}
                        {select_control(
                            state,
                            "attention",
                            "attention",
                            ATTENTIONS,
                            |s| s.config.attention.name(),
                            |s, v| s.config.attention = Attention::parse(v).unwrap_or(s.config.attention),
                        )}
                        {select_control(
                            state,
                            "optimizer",
                            "optimizer",
                            OPTIMIZERS,
                            |s| s.config.optimizer.name(),
                            |s, v| s.config.optimizer = Optimizer::parse(v).unwrap_or(s.config.optimizer),
                        )}
                        <div class="checks">
                            {check_control(state, "compile", "compile (torch.compile; an estimate)", |c| c.compile, |c, v| c.compile = v, false)}
                            {check_control(
                                state,
                                "activation_checkpointing",
                                "activation checkpointing",
                                |c| c.activation_checkpointing,
                                |c, v| c.activation_checkpointing = v,
                                false,
                            )}
                            {check_control(
                                state,
                                "expandable_segments",
                                "expandable_segments",
                                |c| c.expandable_segments,
                                |c, v| c.expandable_segments = v,
                                false,
                            )}
                            {check_control(
                                state,
                                "eval_only",
                                "eval_only (one eval at start, no training)",
                                |c| c.eval_only,
                                |c, v| c.eval_only = v,
                                false,
                            )}
                        </div>
                    </fieldset>
                    <fieldset>
                        <legend>"Card"</legend>
                        {card_controls(signals)}
                    </fieldset>
                </form>
                <div class="results">
                    {move || input_error.get().map(|e| view! { <p class="error input-error" role="alert">{e}</p> })}
                    {move || {
                        follow_note
                            .with(|n| n.as_ref().filter(|(_, c)| state.with(|s| s.config == *c)).map(|(n, _)| n.clone()))
                            .map(|n| view! { <p class="notice follow-note" role="status">{n}</p> })
                    }}
                    {move || {
                        computed
                            .with(|r| r.as_ref().ok().and_then(|c| state.with(|s| model::capacity_warning(s, c))))
                            .map(|w| view! { <p class="error capacity-warning" role="alert">{w}</p> })
                    }}
                    <p class="visually-hidden" id="verdict-announce" aria-live="polite">
                        {move || computed.with(|r| r.as_ref().ok().map(|c| model::verdict(&c.plan).announcement()))}
                    </p>
                    {move || {
                        computed
                            .with(|r| match r {
                                Ok(c) => verdict_view(c, notes_open).into_any(),
                                Err(e) => {
                                    view! {
                                        <section class="verdict invalid" role="alert">
                                            <p class="verdict-title">"This config cannot be planned"</p>
                                            <p class="error config-error">{e.clone()}</p>
                                        </section>
                                    }
                                        .into_any()
                                }
                            })
                    }}
                    <section class="chart-block" class:hidden=move || computed.with(|r| r.is_err())>
                        <h2>"Where the memory goes"</h2>
                        <p class="phone-hint">"On a narrow screen each chart scrolls sideways (swipe, or focus it and use the arrow keys)."</p>
                        <p class="chart-caption">
                            "Each window's peak as nvidia-smi would show it, stacked by what the bytes are for; the red line is what the card offers. "
                            {chart_estimate}
                        </p>
                        <div class="chart" id="chart-breakdown" tabindex="0" role="img" aria-label="Peak memory by category for each window, with the card's capacity" node_ref=chart_breakdown></div>
                        {move || computed.with(|r| r.as_ref().ok().map(legend_view))}
                        <h2>"Peak against batch size"</h2>
                        <p class="chart-caption">
                            "Training and eval need for each micro-batch size, the capacity, where you are, and the largest batch that fits. Simulated block by block, as the verdict is, at the current batch and at the largest that fits; in between, the fast model scaled to them (an estimate). "
                            {move || state.with(|s| s.config.eval_only).then_some("eval_only: one curve, the eval at start's need (nothing trains). ")}
                            {batch_chart_estimate}
                        </p>
                        <div class="chart" id="chart-batch" tabindex="0" role="img" aria-label="Memory need against batch size" node_ref=chart_batch></div>
                        {move || {
                            computed.with(|r| {
                                r.as_ref().ok().and_then(|c| c.series.dip()).map(|(lo, hi)| {
                                    view! {
                                        <p class="chart-caption batch-dip">
                                            {format!("The need falls from batch {lo} to {hi}: ")}
                                            "PyTorch's caching allocator splits a cached block or takes a new segment depending on each tensor's exact size, so a larger batch can pack into less reserved memory. This is what the allocator model predicts; near the card's edge, check such a batch on the card itself."
                                        </p>
                                    }
                                })
                            })
                        }}
                        <h2>"Memory over one iteration"</h2>
                        <p class="chart-caption">
                            "Live tensor memory (each tensor rounded as the allocator rounds it, without placing blocks: within 1% of the allocated peak; no cached reserve) through one steady training iteration (with gradient accumulation, its first two micro-steps: the later ones repeat the second) and the estimate_loss after it (its first two eval batches: the later ones repeat the second). The line is the room the card leaves for them once the CUDA context and the allocator's overhead at the peak are taken out, so the gap at the peak is the verdict's headroom or shortfall. "
                            {move || state.with(|s| s.config.eval_only).then_some("eval_only: the eval at start alone, the one window that runs. ")}
                            {chart_estimate}
                        </p>
                        <div class="chart" id="chart-timeline" tabindex="0" role="img" aria-label="Live memory over one training iteration and an estimate_loss" node_ref=chart_timeline></div>
                    </section>
                    <section class="fixes-block">
                        <h2 id="fixes-heading" tabindex="-1">"Fixes"</h2>
                        {move || {
                            let key = state.with(link::encode);
                            let fits = computed.with(|r| r.as_ref().map(|c| c.plan.cards[0].fits).unwrap_or(false));
                            let invalid = computed.with(|r| r.is_err());
                            // The verdict warns of growth past the card after the simulated steps;
                            // what keeps it fitting then is offered to apply.
                            let later = computed.with(|r| r.as_ref().ok().is_some_and(|c| c.plan.later_past_card().is_some()));
                            let later_fixes = computed.with(|r| r.as_ref().ok().map(|c| c.plan.later_fixes()).unwrap_or_default());
                            // When the card leaves nothing for any run, no fix can help.
                            let no_room =
                                computed.with(|r| r.as_ref().ok().is_some_and(|c| state.with(|s| model::capacity_warning(s, c)).is_some()));
                            // The card whose notes decide which fix needs are estimates.
                            let gpu = computed.with(|r| r.as_ref().ok().map(|c| c.gpu.clone()));
                            fixes
                                .with(|f| match f {
                                    Some((k, list)) if *k == key => {
                                        if list.is_empty() && fits && !later_fixes.is_empty() && !no_room {
                                            view! {
                                                <p class="fixes-none">
                                                    "It fits the first two steps; for the growth the allocator model sees after them (see the verdict), these keep it fitting (estimates):"
                                                </p>
                                                <ol class="fixes later-fixes" data-state="ready">
                                                    {later_fixes
                                                        .iter()
                                                        .cloned()
                                                        .map(|f| {
                                                            let estimate = Some("the allocator model's continuation past the two simulated steps".to_string());
                                                            fix_view(f, state, estimate)
                                                        })
                                                        .collect_view()}
                                                </ol>
                                            }
                                                .into_any()
                                        } else if list.is_empty() || no_room {
                                            let msg = if no_room {
                                                "No fix can help: the card leaves too little for any run (see the warning above)."
                                            } else if invalid {
                                                "No fixes: the config cannot be planned (see above)."
                                            } else if fits && later {
                                                "It fits the first two steps: nothing to fix there. For the growth the allocator model sees after them, see the verdict."
                                            } else if fits {
                                                "It fits: nothing to fix."
                                            } else {
                                                "No fix found that makes it fit this card."
                                            };
                                            view! {
                                                <p class="fixes-none" data-state="ready">
                                                    {msg}
                                                </p>
                                            }
                                                .into_any()
                                        } else {
                                            let needed: Vec<String> = list.iter().map(|f| f.needed_bytes.to_string()).collect();
                                            view! {
                                                <ol class="fixes" data-state="ready" data-needed=needed.join(",")>
                                                    {list
                                                        .iter()
                                                        .cloned()
                                                        .map(|f| {
                                                            let estimate = gpu.as_ref().and_then(|g| model::fix_estimate_detail(&f, g));
                                                            fix_view(f, state, estimate)
                                                        })
                                                        .collect_view()}
                                                </ol>
                                            }
                                                .into_any()
                                        }
                                    }
                                    _ => view! { <p class="fixes-pending" data-state="pending">"Looking for fixes…"</p> }.into_any(),
                                })
                        }}
                    </section>
                    <section class="share-block">
                        <h2>"Share and hand off"</h2>
                        <div class="row">
                            <button
                                type="button"
                                id="copy-link"
                                on:click=move |_| {
                                    let url = state.with(|s| share::share_url(&location_href(), s));
                                    copy("link", url, "link");
                                }
                            >
                                "Copy link"
                            </button>
                            <span class="copy-status" id="copy-link-status" role="status">{status_of("link")}</span>
                        </div>
                        <input
                            type="text"
                            readonly
                            id="share-url"
                            aria-label="Link to this configuration"
                            prop:value=move || state.with(|s| share::share_url(&location_href(), s))
                        />
                        <h3>"Train it"</h3>
                        <p class="chart-caption">
                            "The same run for " <code>"vramfit train"</code>
                            ", as the link or as flags (add " <code>"--device cuda"</code>
                            " to train on the GPU; its pre-flight checks the card it runs on)."
                            {move || {
                                state
                                    .with(|s| s.init_from.is_some())
                                    .then_some(" vramfit downloads no weights: add --weights with the checkpoint's model.safetensors from Hugging Face to fine-tune from them; without it, train starts GPT-2's shape from random weights (the same memory).")
                            }}
                            {move || {
                                state
                                    .with(|s| s.config.optimizer == Optimizer::Sgd)
                                    .then_some(" vramfit train trains AdamW only: optimizer sgd is planned here, not trained.")
                            }}
                            {move || {
                                state
                                    .with(|s| s.config.expandable_segments)
                                    .then_some(" expandable_segments is PyTorch's allocator setting: train notes it and does not apply it.")
                            }}
                            {move || {
                                state
                                    .with(|s| s.config.eval_only)
                                    .then_some(" This plan is eval_only; vramfit train has no evaluate-only mode, so these commands train the config.")
                            }}
                        </p>
                        <pre class="command" id="train-command-link">{move || state.with(share::train_command_link)}</pre>
                        // Each flag with its value in one unbreakable piece: a phone wrapped the
                        // command inside flags ("--expandable-" / "segments").
                        <pre class="command" id="train-command-flags">
                            {move || {
                                let command = state.with(share::train_command_flags);
                                share::flag_pieces(&command)
                                    .into_iter()
                                    .enumerate()
                                    .map(|(i, piece)| view! { {(i > 0).then_some(" ")}<span class="nowrap">{piece}</span> })
                                    .collect_view()
                            }}
                        </pre>
                        <button
                            type="button"
                            on:click=move |_| {
                                copy("command-link", state.with(share::train_command_link), "command");
                            }
                        >
                            "Copy the --link command"
                        </button>
                        <span class="copy-status" role="status">{status_of("command-link")}</span>
                        <button
                            type="button"
                            on:click=move |_| {
                                copy("command-flags", state.with(share::train_command_flags), "command");
                            }
                        >
                            "Copy the flags command"
                        </button>
                        <span class="copy-status" role="status">{status_of("command-flags")}</span>
                        <h3>"nanoGPT config file"</h3>
                        <textarea readonly id="export-config" rows="12" aria-label="nanoGPT config file for this run" prop:value=move || state.with(share::export_config)></textarea>
                        <button
                            type="button"
                            on:click=move |_| {
                                copy("config", state.with(share::export_config), "config file");
                            }
                        >
                            "Copy config"
                        </button>
                        <span class="copy-status" role="status">{status_of("config")}</span>
                        <h3>"Import a nanoGPT config"</h3>
                        <label for="import-config">"Paste a config/train_*.py file (read over train.py's defaults; the card stays):"</label>
                        <textarea
                            id="import-config"
                            rows="8"
                            prop:value=move || import_text.get()
                            on:input=move |ev| {
                                import_text.set(event_target_value(&ev));
                                if import_result.with_untracked(|r| matches!(r, Some(Err(_)))) {
                                    import_result.set(None);
                                }
                            }
                        ></textarea>
                        <button
                            type="button"
                            id="import-button"
                            on:click=move |_| {
                                let text = import_text.get_untracked();
                                match share::import_config(&text, &state.get_untracked()) {
                                    Ok((s, notices)) => {
                                        import_result.set(Some(Ok((notices, s.clone()))));
                                        state.set(s);
                                    }
                                    Err(e) => import_result.set(Some(Err(e))),
                                }
                            }
                        >
                            "Import"
                        </button>
                        {move || {
                            import_result
                                .get()
                                .map(|r| match r {
                                    Ok((notices, _)) => {
                                        view! {
                                            <div class="import-ok" role="status">
                                                "Imported."
                                                <ul>{notices.into_iter().map(|n| view! { <li>{n}</li> }).collect_view()}</ul>
                                            </div>
                                        }
                                            .into_any()
                                    }
                                    Err(e) => view! { <p class="error import-error" role="alert">"Cannot import: " {e}</p> }.into_any(),
                                })
                        }}
                    </section>
                </div>
            </div>
            <footer>
                <p>
                    "Memory model: "
                    <code>"vramfit-core"</code>
                    ", validated against PyTorch's own counters on an H100 and an H200 ("
                    <a href="#accuracy">"Accuracy"</a>
                    "); figures marked estimate rest on terms not measured for this config or card. Same numbers as "
                    <code>"vramfit plan --link"</code>
                    "."
                </p>
            </footer>
        </main>
    }
}
