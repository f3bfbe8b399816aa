//! The page in a real browser: `scripts/test` runs this with wasm-bindgen-test-runner and
//! Debian's chromium + chromedriver (`cargo test -p vramfit-web --target wasm32-unknown-unknown`).
//! Each test mounts the app into a fresh element, drives it like a user (input events), and
//! checks the verdict, the charts and the address bar against core's numbers.
#![cfg(target_arch = "wasm32")]

use vramfit_core::link::LinkState;
use vramfit_core::{Config, Gpu};
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;
use web_sys::{Event, EventInit, HtmlElement, HtmlInputElement, HtmlSelectElement};

wasm_bindgen_test_configure!(run_in_browser);

/// Lets the reactive system run its queued effects (they are spawned as tasks).
async fn sleep_ms(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        web_sys::window().unwrap().set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms).unwrap();
    });
    wasm_bindgen_futures::JsFuture::from(promise).await.unwrap();
}

async fn settle() {
    for _ in 0..3 {
        sleep_ms(0).await;
    }
}

fn set_query(q: &str) {
    let w = web_sys::window().unwrap();
    // An empty URL would keep the current one, query and all (the last test's link): the bare
    // path clears it.
    let url = if q.is_empty() { w.location().pathname().unwrap() } else { q.to_string() };
    w.history().unwrap().replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&url)).unwrap();
}

/// The address bar's query once it has caught up with the page's state (the live link follows
/// the state `LINK_DELAY` after it rests; the share box holds the link of the state now). Gives
/// up after 2 s and returns what the address bar holds then.
async fn query() -> String {
    let w = web_sys::window().unwrap();
    for _ in 0..80 {
        let shown = w.document().unwrap().query_selector("#share-url").unwrap().and_then(|e| e.dyn_into::<HtmlInputElement>().ok());
        if shown.is_none_or(|e| e.value() == w.location().href().unwrap()) {
            break;
        }
        sleep_ms(25).await;
    }
    w.location().search().unwrap()
}

/// The app mounted in a fresh element after the address bar is set to `q`.
struct Mounted {
    host: HtmlElement,
    /// Dropping it unmounts the app.
    _handle: Box<dyn std::any::Any>,
}

async fn mount_with(q: &str) -> Mounted {
    set_query(q);
    let doc = web_sys::window().unwrap().document().unwrap();
    let host: HtmlElement = doc.create_element("div").unwrap().dyn_into().unwrap();
    doc.body().unwrap().append_child(&host).unwrap();
    let handle = leptos::mount::mount_to(host.clone(), || leptos::prelude::IntoAny::into_any(vramfit_web::App()));
    settle().await;
    Mounted { host, _handle: Box::new(handle) }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.host.remove();
    }
}

impl Mounted {
    fn el(&self, selector: &str) -> web_sys::Element {
        self.host.query_selector(selector).unwrap().unwrap_or_else(|| panic!("no element matches {selector}"))
    }
    fn has(&self, selector: &str) -> bool {
        self.host.query_selector(selector).unwrap().is_some()
    }
    /// Waits up to 5 s for `selector` (what comes a moment later: fixes, notices); fails with `what`.
    async fn wait_for(&self, selector: &str, what: &str) {
        for _ in 0..100 {
            if self.has(selector) {
                return;
            }
            sleep_ms(50).await;
        }
        panic!("{what} after 5 s");
    }
    fn text(&self, selector: &str) -> String {
        self.el(selector).text_content().unwrap_or_default()
    }
    fn exact(&self, name: &str) -> String {
        self.el("#exact").get_attribute(&format!("data-{name}")).unwrap_or_else(|| panic!("no data-{name}"))
    }
    fn chart(&self, id: &str) -> String {
        self.el(&format!("#{id}")).inner_html()
    }
    async fn type_into(&self, name: &str, value: &str) {
        let input: HtmlInputElement = self.el(&format!("input[name={name}]")).dyn_into().unwrap();
        input.set_value(value);
        dispatch(&input, "input");
        settle().await;
    }
    /// Types `value` one character at a time after focusing the box, as a user does.
    async fn type_keys(&self, name: &str, value: &str) {
        let input: HtmlInputElement = self.el(&format!("input[name={name}]")).dyn_into().unwrap();
        dispatch(&input, "focus");
        for end in 1..=value.len() {
            input.set_value(&value[..end]);
            dispatch(&input, "input");
            settle().await;
        }
    }
    async fn choose(&self, name: &str, value: &str) {
        let select: HtmlSelectElement = self.el(&format!("select[name={name}]")).dyn_into().unwrap();
        select.set_value(value);
        dispatch(&select, "change");
        settle().await;
    }
}

fn dispatch(target: &web_sys::EventTarget, kind: &str) {
    let init = EventInit::new();
    init.set_bubbles(true);
    target.dispatch_event(&Event::new_with_event_init_dict(kind, &init).unwrap()).unwrap();
}

fn expected(config: Config) -> vramfit_web::model::Computed {
    vramfit_web::model::compute(&LinkState { config, ..LinkState::default() }).unwrap()
}

/// GPT-2 124M compiled without accumulation on an RTX 4070 with 1,960 MiB taken by other
/// programs needs less at batch 11 than at 10 (allocator packing): the chart says why.
#[wasm_bindgen_test]
async fn a_dip_in_the_need_is_captioned_under_the_batch_chart() {
    let page = mount_with("?v=1&B=10&GA=1&gpu=rtx-4070&other=1960").await;
    let want = vramfit_web::model::compute(&LinkState {
        config: Config { batch_size: 10, gradient_accumulation_steps: 1, ..Config::default() },
        gpu: "rtx-4070".into(),
        other_usage_mib: 1960,
        ..LinkState::default()
    })
    .unwrap();
    let dip = want.series.dip().expect("the case dips");
    assert!(
        page.text(".batch-dip").starts_with(&format!("The need falls from batch {} to {}: ", dip.0, dip.1)),
        "{}",
        page.text(".batch-dip")
    );
}

#[wasm_bindgen_test]
async fn slider_moves_the_verdict_the_charts_and_the_link() {
    let page = mount_with("").await;
    let want = expected(Config::default());
    assert_eq!(page.text(".param-count"), "123.59M");
    assert_eq!(page.exact("needed"), want.plan.cards[0].needed_bytes.to_string());
    assert_eq!(page.exact("train-allocated"), want.plan.train.peak_allocated_bytes.to_string());
    for id in ["chart-breakdown", "chart-batch", "chart-timeline"] {
        assert!(page.chart(id).starts_with("<svg"), "{id} not drawn");
    }
    // The default config's need grows with every batch: no dip caption.
    assert!(want.series.dip().is_none() && !page.has(".batch-dip"));
    // The headroom or shortfall is printed in GiB (in MiB under a tenth of one).
    let margin = page.text(".verdict-margin");
    assert!(margin.starts_with(&vramfit_web::model::format_margin(want.plan.cards[0].headroom_bytes.unsigned_abs())), "{margin}");
    let before = [page.chart("chart-breakdown"), page.chart("chart-batch"), page.chart("chart-timeline")];
    // Screen readers hear the verdict through one live region that outlives every redraw; the
    // estimate notes a user opened stay open.
    let announcer = page.el("#verdict-announce");
    assert_eq!(announcer.get_attribute("aria-live").as_deref(), Some("polite"));
    assert_eq!(page.text("#verdict-announce"), vramfit_web::model::verdict(&want.plan).announcement());
    assert!(!page.has("section[aria-live]"), "the rebuilt verdict must not be a live region of its own");
    let notes: HtmlElement = page.el("details.notes summary").dyn_into().unwrap();
    notes.click();
    settle().await;
    assert!(page.el("details.notes").has_attribute("open"));

    // The slider (not the box) for n_layer: 24 layers.
    let slider: HtmlInputElement = page.el("input[name=n_layer-slider]").dyn_into().unwrap();
    slider.set_value("24");
    dispatch(&slider, "input");
    settle().await;
    let want = expected(Config { n_layer: 24, ..Config::default() });
    assert_eq!(page.exact("needed"), want.plan.cards[0].needed_bytes.to_string());
    assert_eq!(page.text(".param-count"), want.plan.params.printed_millions());
    let title = page.text(".verdict-title");
    assert_eq!(title, if want.plan.cards[0].fits { "Fits" } else { "Does not fit" });
    assert!(announcer.is_same_node(Some(&page.el("#verdict-announce"))), "the live region was replaced");
    assert_eq!(page.text("#verdict-announce"), vramfit_web::model::verdict(&want.plan).announcement());
    assert!(page.el("details.notes").has_attribute("open"), "the notes closed on a redraw");
    let after = [page.chart("chart-breakdown"), page.chart("chart-batch"), page.chart("chart-timeline")];
    for (b, a) in before.iter().zip(&after) {
        assert_ne!(b, a, "a chart was not redrawn");
    }
    assert!(query().await.contains("&L=24&"), "{}", query().await);
    // The box shows the slider's value.
    let boxed: HtmlInputElement = page.el("input[name=n_layer]").dyn_into().unwrap();
    assert_eq!(boxed.value(), "24");

    // The number box for batch_size, and the select for dtype.
    page.type_into("batch_size", "4").await;
    page.choose("dtype", "float32").await;
    let want = expected(Config { n_layer: 24, batch_size: 4, dtype: vramfit_core::Dtype::Float32, ..Config::default() });
    assert_eq!(page.exact("needed"), want.plan.cards[0].needed_bytes.to_string());
    let q = query().await;
    assert!(q.contains("&B=4&") && q.contains("&d=f32&"), "{q}");
    // The link decodes to the page's state, without notices.
    let d = vramfit_core::link::decode(&q);
    assert!(d.notices.is_empty());
    assert_eq!(d.state.config, want.plan.config);
}

#[wasm_bindgen_test]
async fn a_link_restores_the_state_and_fixes_apply_with_one_click() {
    // GPT-2 124M at micro-batch 64 does not fit a 12 GB card (an OOM report).
    let page = mount_with("?v=1&B=64&GA=8&gpu=rtx-4070").await;
    let want = expected(Config { batch_size: 64, gradient_accumulation_steps: 8, ..Config::default() });
    assert_eq!(page.exact("needed"), want.plan.cards[0].needed_bytes.to_string());
    assert_eq!(page.text(".verdict-title"), "Does not fit");
    // The shortfall, marked as an estimate (the 4070's CUDA context was not measured).
    let margin = page.text(".verdict-margin");
    assert!(margin.contains(" GiB short") && margin.ends_with("estimate"), "{margin}");
    assert!(!page.has(".notice"));
    // Fixes come a moment later.
    page.wait_for("ol.fixes", "no fixes").await;
    let fixes = vramfit_core::plan::fixes(&want.plan.config, &vramfit_core::device::default_gpu(), 0);
    let shown: Vec<String> = fixes.iter().map(|f| f.needed_bytes.to_string()).collect();
    assert_eq!(page.el("ol.fixes").get_attribute("data-needed").unwrap(), shown.join(","));
    assert_eq!(page.text("ol.fixes li .fix-title"), fixes[0].title);
    // Screen readers hear which fix a button applies, and the block slider's value, not its
    // exponent.
    assert_eq!(page.el("ol.fixes li button.apply").get_attribute("aria-label").unwrap(), format!("Apply: {}", fixes[0].title));
    assert_eq!(page.el("input[name=block_size-slider]").get_attribute("aria-valuetext").unwrap(), "1024");
    let apply: HtmlElement = page.el("ol.fixes li button.apply").dyn_into().unwrap();
    apply.click();
    settle().await;
    assert_eq!(page.exact("needed"), fixes[0].needed_bytes.to_string());
    assert_eq!(page.exact("fits"), fixes[0].fits.to_string());
    assert_eq!(vramfit_core::link::decode(&query().await).state.config, fixes[0].config);
}

/// A fix that fits the two simulated iterations but runs out of memory later in the allocator
/// model (an eval batch of 28 for a 4-layer model at batch 33 on an RTX 4070 with 1,000 MiB
/// taken: no smaller eval batch fits at all) says so in its row, and its status is not a plain
/// "fits".
#[wasm_bindgen_test]
async fn a_fix_that_runs_out_later_says_so_in_its_row() {
    let page = mount_with("?v=1&L=4&H=12&C=1152&T=256&B=33&GA=14&a=manual&cmp=0&gpu=rtx-4070&other=1000").await;
    let cfg = Config {
        n_layer: 4,
        n_head: 12,
        n_embd: 1152,
        block_size: 256,
        batch_size: 33,
        gradient_accumulation_steps: 14,
        attention: vramfit_core::Attention::Manual,
        compile: false,
        ..Config::default()
    };
    let state = LinkState { config: cfg, gpu: "rtx-4070".into(), other_usage_mib: 1000, ..LinkState::default() };
    let want = vramfit_web::model::compute(&state).unwrap();
    let fixes = vramfit_core::plan::fixes_of(&want.plan, &Gpu::find("rtx-4070").unwrap(), 1000 << 20);
    let marked: Vec<&vramfit_core::plan::Fix> = fixes.iter().filter(|f| f.runs_out_later.is_some()).collect();
    assert!(!marked.is_empty(), "{fixes:?}");
    page.wait_for("ol.fixes", "no fixes").await;
    let rows = page.host.query_selector_all("ol.fixes li.fix.later").unwrap();
    assert_eq!(rows.length() as usize, marked.len());
    for (i, f) in marked.iter().enumerate() {
        let row = rows.item(i as u32).unwrap().text_content().unwrap_or_default();
        let when = f.runs_out_later.unwrap().when();
        assert!(row.contains(&f.title), "{row}");
        let close = if f.close_call { ", a close call" } else { "" };
        let need = format!("(fits the first two steps{close}; out of memory at {when} by the allocator model, an estimate)");
        assert!(row.contains(&need), "{row}");
    }
}

/// Where the allocator model's reserve passes the card after the two simulated iterations
/// (12 layers of 768 at block 256, eager, batch 33 accumulating 4), the verdict says so in its
/// own line, marked as an estimate; at batch 4, where it does not, the line goes.
#[wasm_bindgen_test]
async fn a_reserve_that_grows_later_is_shown_in_the_verdict() {
    let page = mount_with("?v=1&H=6&T=256&B=33&GA=4&cmp=0").await;
    let grows = Config { n_head: 6, block_size: 256, gradient_accumulation_steps: 4, compile: false, ..Config::default() };
    let want = expected(Config { batch_size: 33, ..grows.clone() });
    let verdict = vramfit_web::model::verdict(&want.plan);
    let later = verdict.later.clone().expect("the model's reserve passes the card later");
    assert_eq!(page.text(".verdict-title"), "Fits the first two steps");
    let shown = page.text(".verdict-later");
    assert!(shown.starts_with(&later) && shown.ends_with("estimate"), "{shown}");
    // Batch 33 is the largest that fits: the batch chart also marks the one that keeps fitting.
    let lasting = want.series.lasting.expect("a smaller batch keeps fitting");
    assert!(later.ends_with(&format!("; batch_size {lasting} keeps fitting")), "{later}");
    let chart = page.chart("chart-batch");
    assert!(chart.contains(&format!("keeps fitting later: {lasting} (estimate)")), "{chart}");
    // The fixes, a moment later, do not say a plain "it fits".
    page.wait_for(".fixes-none", "no fixes").await;
    assert!(page.text(".fixes-none").starts_with("It fits the first two steps"), "{}", page.text(".fixes-none"));
    page.type_into("batch_size", "4").await;
    let smaller = expected(Config { batch_size: 4, ..grows });
    assert_eq!(vramfit_web::model::verdict(&smaller.plan).later, None);
    assert!(!page.has(".verdict-later"));
    assert_eq!(page.text(".verdict-title"), "Fits");
}

/// A tiny dropout shows in its box, and goes back into the link, as 1e-320, not 320 zeros.
#[wasm_bindgen_test]
async fn a_tiny_dropout_is_written_with_an_exponent() {
    let page = mount_with("?v=1&drop=1e-320").await;
    let input: HtmlInputElement = page.el("input[name=dropout]").dyn_into().unwrap();
    assert_eq!(input.value(), "1e-320");
    assert!(query().await.contains("drop=1e-320"), "{}", query().await);
    assert_eq!(vramfit_core::link::decode(&query().await).state.config.dropout, 1e-320);
}

/// A fine-tuning link: the checkpoint's shape is locked, its fixes keep it, a block past its
/// 1024 positions is refused with a notice, and back to scratch frees the shape.
#[wasm_bindgen_test]
async fn a_run_from_gpt2_weights_keeps_the_checkpoints_shape() {
    let page = mount_with("?v=1&init=gpt2-xl&B=1&GA=32&T=512&gpu=rtx-4070").await;
    let state = vramfit_core::link::decode(&query().await).state;
    assert_eq!((state.init_from.as_deref(), state.config.n_layer, state.config.block_size), (Some("gpt2-xl"), 48, 512));
    let select: HtmlSelectElement = page.el("select[name=init_from]").dyn_into().unwrap();
    assert_eq!(select.value(), "gpt2-xl");
    let disabled = |selector: &str| {
        page.el(selector).has_attribute("disabled") || page.el(selector).dyn_into::<HtmlInputElement>().is_ok_and(|i| i.disabled())
    };
    for locked in ["input[name=n_layer]", "input[name=n_embd]", "input[name=vocab_size]", "input[name=bias]", "input[name=n_layer-slider]"]
    {
        assert!(disabled(locked), "{locked} is the checkpoint's");
    }
    assert!(page.el("select[name=n_head]").dyn_into::<HtmlSelectElement>().unwrap().disabled());
    assert!(!disabled("input[name=batch_size]") && !disabled("input[name=block_size]"));
    assert!(page.text("#help-n_layer").contains(". Set by init_from (GPT-2"), "{}", page.text("#help-n_layer"));
    // GPT-2 XL does not fit 12 GB: the fixes keep its shape.
    let mut tries = 0;
    while !page.has("ol.fixes") {
        tries += 1;
        assert!(tries < 200, "no fixes after 10 s");
        sleep_ms(50).await;
    }
    let gpu = Gpu::find("rtx-4070").unwrap();
    let fixes = vramfit_core::plan::keeping_pretrained_shape(vramfit_core::plan::fixes(&state.config, &gpu, 0), &state.config);
    assert!(!fixes.is_empty());
    let shown: Vec<String> = fixes.iter().map(|f| f.needed_bytes.to_string()).collect();
    assert_eq!(page.el("ol.fixes").get_attribute("data-needed").unwrap(), shown.join(","));
    // The block's slider ends at the checkpoint's 1024 positions (2^10); a longer block typed
    // into the box: a notice, and the page keeps 512.
    assert_eq!(page.el("input[name=block_size-slider]").get_attribute("max").as_deref(), Some("10"));
    page.type_into("block_size", "2048").await;
    assert!(page.text(".input-error").contains("block_size is at most 1024"), "{}", page.text(".input-error"));
    assert_eq!(vramfit_core::link::decode(&query().await).state.config.block_size, 512);
    assert!(page.text("#train-command-link").contains("init=gpt2-xl"));
    // Back to scratch: the same model, no longer locked, and the link says so.
    page.choose("init_from", "scratch").await;
    let back = vramfit_core::link::decode(&query().await).state;
    assert_eq!((back.init_from, &back.config), (None, &state.config));
    assert!(!disabled("input[name=n_layer]"));
    assert!(!query().await.contains("init="), "{}", query().await);
    assert_eq!(page.el("input[name=block_size-slider]").get_attribute("max").as_deref(), Some("14"));
    // Choosing a checkpoint under a longer block cuts it to the 1024 positions, with a notice
    // that stays while that config does.
    page.type_into("block_size", "2048").await;
    page.choose("init_from", "gpt2").await;
    assert!(page.text(".crop-notice").contains("block_size 2048 is now 1024"), "{}", page.text(".crop-notice"));
    let cut = vramfit_core::link::decode(&query().await).state;
    assert_eq!((cut.config.block_size, cut.config.eval_block_size), (1024, None));
    page.type_into("batch_size", "2").await;
    assert!(!page.has(".crop-notice"));
    page.choose("init_from", "scratch").await;
    // A model preset is a run from scratch: it leaves a checkpoint too.
    page.choose("init_from", "gpt2").await;
    assert!(query().await.ends_with("&init=gpt2"), "{}", query().await);
    page.choose("preset", "shakespeare-char").await;
    let preset = vramfit_core::link::decode(&query().await).state;
    assert_eq!((preset.init_from, preset.config.n_layer, preset.config.vocab_size), (None, 6, 65));
    assert_eq!(page.el("select[name=init_from]").dyn_into::<HtmlSelectElement>().unwrap().value(), "scratch");
}

/// Settings typed after `#` into the open page's address (a hashchange, no reload) get the
/// notice a link with them gets on load, and the state stays the query's.
#[wasm_bindgen_test]
async fn settings_added_after_a_hash_while_open_get_a_notice() {
    let page = mount_with("?v=1&L=4").await;
    assert!(!page.has(".notice"));
    web_sys::window().unwrap().location().set_hash("L=8&B=3").unwrap();
    page.wait_for(".notice", "no notice since the hash changed").await;
    assert!(page.text(".notice").contains("settings go in the query"), "{}", page.text(".notice"));
    assert_eq!(vramfit_core::link::decode(&query().await).state.config.n_layer, 4);
}

#[wasm_bindgen_test]
async fn garbage_and_script_payloads_in_a_link_become_visible_text_notices() {
    let payload = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>";
    let enc = js_sys::encode_uri_component(payload);
    let q = format!("?v=1&L={enc}&B=99999999&gpu={enc}&d={enc}&{enc}=1&drop=2&T=abc");
    let page = mount_with(&q).await;
    let notices = page.text(".notice");
    for needle in ["L=", "B=99999999", "gpu=", "dtype", "drop=2", "T=abc", "<script>"] {
        assert!(notices.contains(needle), "{needle} not in notices: {notices}");
    }
    // Shown as text: nothing injected.
    assert!(!page.has("script") && !page.has("img"));
    let pwned = js_sys::Reflect::get(&web_sys::window().unwrap(), &"__pwned".into()).unwrap();
    assert!(pwned.is_undefined());
    // Everything fell back to the defaults.
    assert_eq!(page.exact("needed"), expected(Config::default()).plan.cards[0].needed_bytes.to_string());
    // The address bar now holds the clean link.
    assert_eq!(vramfit_core::link::decode(&query().await).notices, Vec::<String>::new());
}

#[wasm_bindgen_test]
async fn number_boxes_keep_the_config_valid() {
    let page = mount_with("").await;
    let config = || async { vramfit_core::link::decode(&query().await).state.config };
    // A width the head count does not divide takes the nearest head count that does (12 -> 11
    // for 770), and typing 768 goes back to the 12 heads the box started from.
    page.type_into("n_embd", "770").await;
    assert!(!page.has(".config-error") && !page.has(".input-error"));
    assert_eq!((config().await.n_embd, config().await.n_head), (770, 11));
    assert_eq!(config().await, Config { n_embd: 770, n_head: 11, ..Config::default() });
    assert_eq!(page.exact("needed"), expected(config().await).plan.cards[0].needed_bytes.to_string());
    page.type_into("n_embd", "768").await;
    assert_eq!((config().await.n_embd, config().await.n_head), (768, 12));
    // Typed key by key, the in-between widths (1, 10, 102) do not decide the head count.
    page.type_keys("n_embd", "1024").await;
    assert_eq!((config().await.n_embd, config().await.n_head), (1024, vramfit_web::model::nearest_divisor(1024, 12)));
    // From there, 768 keeps the 8 heads it began with (8 divides 768), not 4 (of 76).
    page.type_keys("n_embd", "768").await;
    assert_eq!((config().await.n_embd, config().await.n_head), (768, 8));
    // Values the config cannot take are refused with core's reason; the last valid one stays,
    // in the page and in the link.
    for bad in ["0", "100000", "12x"] {
        page.type_into("batch_size", bad).await;
        assert!(page.text(".input-error").contains("batch_size"), "{bad}");
        assert_eq!(config().await.batch_size, 12, "{bad}");
    }
    // Too large is measured against what vramfit models for that setting, not u32's range.
    page.type_into("n_layer", "1e30").await;
    assert!(page.text(".input-error").contains("n_layer: \"1e30\" is too large (at most 1024)"), "{}", page.text(".input-error"));
    page.type_into("dropout", "1.5").await;
    assert!(page.text(".input-error").contains("dropout"));
    assert_eq!(config().await.dropout, 0.0);
    // Any other change of state takes the stale complaint away.
    let bias: HtmlInputElement = page.el("input[name=bias]").dyn_into().unwrap();
    bias.click();
    settle().await;
    assert!(!page.has(".input-error"));
    // The eval context a fix may shorten has its own control, and follows a shorter block.
    page.type_into("eval_block_size", "512").await;
    assert_eq!(config().await.eval_block_size, Some(512));
    // Typing block 2048 passes through 2 and 20: the eval context comes back at the end.
    page.type_keys("block_size", "2048").await;
    assert_eq!((config().await.block_size, config().await.eval_block_size), (2048, Some(512)));
    page.type_keys("block_size", "256").await;
    assert_eq!((config().await.block_size, config().await.eval_block_size), (256, None));
    // An eval context longer than the block is refused with core's reason.
    page.type_into("eval_block_size", "4096").await;
    assert!(page.text(".input-error").contains("eval"));
    assert_eq!(config().await.eval_block_size, None);
    assert!(!page.has(".config-error"));
    // Dragged below an eval context and back, the block slider gives the eval context back
    // (the drag follows from where it began, as typing does).
    page.type_into("eval_block_size", "128").await;
    let block: HtmlInputElement = page.el("input[name=block_size-slider]").dyn_into().unwrap();
    dispatch(&block, "focus");
    for exponent in ["6", "4", "6", "8"] {
        block.set_value(exponent);
        dispatch(&block, "input");
        settle().await;
        let want = if exponent == "8" { Some(128) } else { None };
        assert_eq!(
            (config().await.block_size, config().await.eval_block_size),
            (1 << exponent.parse::<u32>().unwrap(), want),
            "{exponent}"
        );
    }
    // Its slider ends at the block (2^8 = 256 here), so no stretch of the track is refused.
    let slider: HtmlInputElement = page.el("input[name=eval_block_size-slider]").dyn_into().unwrap();
    assert_eq!((slider.min(), slider.max()), ("4".to_string(), "8".to_string()));
    page.type_keys("block_size", "1024").await;
    assert_eq!(slider.max(), "10");
}

#[wasm_bindgen_test]
async fn a_custom_card_follows_its_box_as_it_is_typed() {
    let page = mount_with("").await;
    let gpu = || async { vramfit_core::link::decode(&query().await).state.gpu };
    page.choose("gpu", "custom").await;
    assert!(gpu().await.starts_with("custom-"), "{}", gpu().await);
    // Every keystroke plans for the size typed so far, as the other number boxes do.
    page.type_keys("custom_gib", "10.5").await;
    assert_eq!(gpu().await, "custom-10.5");
    let card = Gpu::find("custom-10.5").unwrap();
    assert!(page.text(".verdict").contains(&card.name), "{}", page.text(".verdict"));
    let want = vramfit_web::model::compute(&LinkState { gpu: card.id.clone(), ..LinkState::default() }).unwrap();
    assert_eq!(page.exact("needed"), want.plan.cards[0].needed_bytes.to_string());
    // A size it cannot take is refused with a notice; the card stays as it was.
    page.type_into("custom_gib", "0.1").await;
    assert!(page.text(".input-error").contains("custom capacity"));
    assert_eq!(gpu().await, "custom-10.5");
    // More decimals than the card keeps: what was typed stays in the box (it was rewritten to
    // the rounded size mid-typing), and the card is the rounded size.
    page.type_keys("custom_gib", "12.345").await;
    let input: HtmlInputElement = page.el("input[name=custom_gib]").dyn_into().unwrap();
    assert_eq!((input.value(), gpu().await), ("12.345".to_string(), "custom-12.35".to_string()));
    // Committed, a size it takes stays, and the box shows it as the card has it (QA: "11.996"
    // stayed in the box of a 12 GiB card).
    dispatch(&input, "change");
    settle().await;
    assert_eq!((gpu().await, input.value()), ("custom-12.35".to_string(), "12.35".to_string()));
    // The rounding is said (QA: it was silent).
    let notice = page.text(".input-error");
    assert!(notice.contains("custom capacity: \"12.345\" is planned as 12.35 GiB"), "{notice}");
    // Left holding a size it did not take ("1e9" passes through a 1 GiB card on the way): back
    // to the card from before the edit, and said so, as every number box does.
    page.type_keys("custom_gib", "1e9").await;
    assert_eq!(gpu().await, "custom-1");
    dispatch(&input, "change");
    settle().await;
    assert_eq!((gpu().await, input.value()), ("custom-12.35".to_string(), "12.35".to_string()));
    let notice = page.text(".input-error");
    assert!(notice.contains("custom capacity: \"1e9\" was not taken; back to 12.35"), "{notice}");
    // Any size to the hundredth is valid for the box itself (a step would flag 11.99).
    assert_eq!(input.get_attribute("step").as_deref(), Some("any"));
}

#[wasm_bindgen_test]
async fn import_and_export_round_trip_and_import_errors_are_visible() {
    let page = mount_with("").await;
    let import: web_sys::HtmlTextAreaElement = page.el("#import-config").dyn_into().unwrap();
    import.set_value("n_layer = '<script>window.__pwned=3</script>'\n");
    dispatch(&import, "input");
    settle().await;
    let button: HtmlElement = page.el("#import-button").dyn_into().unwrap();
    button.click();
    settle().await;
    assert!(page.text(".import-error").contains("n_layer"));
    assert!(!page.has("script"));
    // Text without a single setting is refused; the config stays as it was.
    let before = query().await;
    import.set_value("hello, this is not a config\n");
    dispatch(&import, "input");
    settle().await;
    button.click();
    settle().await;
    assert!(page.text(".import-error").contains("no nanoGPT setting found"));
    assert_eq!(query().await, before);
    import.set_value("n_layer = 6\nn_head = 6\nn_embd = 384\nbatch_size = 64\nblock_size = 256\n");
    dispatch(&import, "input");
    settle().await;
    // The refusal was of the text before the edit (QA: it stayed until the next Import).
    assert!(!page.has(".import-error"));
    button.click();
    settle().await;
    assert!(!page.has(".import-error"));
    assert!(page.text(".import-ok").starts_with("Imported."));
    let exported: web_sys::HtmlTextAreaElement = page.el("#export-config").dyn_into().unwrap();
    assert!(exported.value().contains("n_layer = 6\n") && exported.value().contains("batch_size = 64\n"));
    assert!(query().await.contains("&L=6&H=6&C=384&T=256&"), "{}", query().await);
    assert!(page.text("#train-command-link").starts_with("vramfit train --link 'v=1&L=6&"));
    // "Imported." and its notes are about the imported state: gone once the state moves on
    // (QA: an import's note that the model was GPT-2's stayed after a preset replaced it).
    let bias: HtmlInputElement = page.el("input[name=bias]").dyn_into().unwrap();
    bias.click();
    settle().await;
    assert!(!page.has(".import-ok"));
}

#[wasm_bindgen_test]
fn fatal_message_is_visible() {
    vramfit_web::show_fatal(&vramfit_web::panic_text("test"));
    let doc = web_sys::window().unwrap().document().unwrap();
    let el = doc.query_selector(".fatal").unwrap().expect("a .fatal element");
    assert!(el.text_content().unwrap().contains("test"));
    el.remove();
}

/// The config the address bar holds now.
async fn link_config() -> Config {
    vramfit_core::link::decode(&query().await).state.config
}

/// Typed key by key, a value the setting cannot take passes through values it can (n_layer
/// 2000 through 200): left with it, the box and the state go back to where the edit began, and
/// the notice says so.
#[wasm_bindgen_test]
async fn a_refused_value_is_undone_when_its_box_is_left() {
    let page = mount_with("?v=1").await;
    page.type_keys("n_layer", "2000").await;
    assert_eq!(link_config().await.n_layer, 200, "the valid prefix, while the box is still being typed in");
    let input: HtmlInputElement = page.el("input[name=n_layer]").dyn_into().unwrap();
    dispatch(&input, "change");
    settle().await;
    assert_eq!((link_config().await.n_layer, input.value()), (12, "12".to_string()));
    assert!(page.text(".input-error").contains("n_layer: \"2000\" was not taken; back to 12"), "{}", page.text(".input-error"));
    // The notice outlives the change of state that undid the edit; the next one clears it.
    let bias: HtmlInputElement = page.el("input[name=bias]").dyn_into().unwrap();
    bias.click();
    settle().await;
    assert!(!page.has(".input-error"));
    bias.click();
    settle().await;
    // A value committed with Enter (a change, the box still focused) is where the next edit
    // goes back to.
    page.type_keys("n_layer", "24").await;
    dispatch(&input, "change");
    for end in 1..=4 {
        input.set_value(&"2000"[..end]);
        dispatch(&input, "input");
        settle().await;
    }
    dispatch(&input, "change");
    settle().await;
    assert_eq!((link_config().await.n_layer, input.value()), (24, "24".to_string()));
    // What lies outside the config is undone too: the other programs' share.
    page.type_keys("other_usage_mib", "5000000").await;
    let other: HtmlInputElement = page.el("input[name=other_usage_mib]").dyn_into().unwrap();
    dispatch(&other, "change");
    settle().await;
    let state = vramfit_core::link::decode(&query().await).state;
    assert_eq!((state.other_usage_mib, other.value()), (0, "0".to_string()));
    assert!(page.text(".input-error").contains("back to 0, the value before this edit"), "{}", page.text(".input-error"));
    // The card's "other programs" box steps down to 0, where its slider starts.
    assert_eq!(page.el("input[name=other_usage_mib]").get_attribute("min").as_deref(), Some("0"));
}

/// A box is not rewritten while it is typed in: Chrome reads "0." as "0", and writing "0"
/// back put the caret before it, so "0.3" became "30". Once left, it shows the state's value.
#[wasm_bindgen_test]
async fn a_box_being_typed_in_is_not_rewritten() {
    let page = mount_with("?v=1&drop=0.2").await;
    let input: HtmlInputElement = page.el("input[name=dropout]").dyn_into().unwrap();
    dispatch(&input, "focus");
    for (typed, dropout) in [("0", 0.0), ("0.30", 0.3)] {
        input.set_value(typed);
        dispatch(&input, "input");
        settle().await;
        assert_eq!((link_config().await.dropout, input.value()), (dropout, typed.to_string()));
    }
    dispatch(&input, "change");
    settle().await;
    assert_eq!(input.value(), "0.3");
    // Left holding what dropout cannot take: back to 0.2, where the edit began.
    dispatch(&input, "focus");
    input.set_value("1.5");
    dispatch(&input, "input");
    dispatch(&input, "change");
    settle().await;
    assert_eq!((link_config().await.dropout, input.value()), (0.3, "0.3".to_string()));
    assert!(page.text(".input-error").contains("dropout: \"1.5\" was not taken; back to 0.3"), "{}", page.text(".input-error"));
}

/// Back and Forward change the address without a reload: the page follows it.
#[wasm_bindgen_test]
async fn back_and_forward_follow_the_address() {
    let page = mount_with("?v=1&L=4").await;
    let window = web_sys::window().unwrap();
    // As after Back to an entry with another link: the address changes, then popstate.
    window.history().unwrap().replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some("?v=1&L=6")).unwrap();
    dispatch(&window, "popstate");
    settle().await;
    let layers: HtmlInputElement = page.el("input[name=n_layer]").dyn_into().unwrap();
    assert_eq!((link_config().await.n_layer, layers.value()), (6, "6".to_string()));
    // An edit under way when the address moves is not undone to before the move: the box,
    // left with a refused value, shows the address's state.
    page.type_keys("n_layer", "20").await;
    window.history().unwrap().replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some("?v=1&L=3")).unwrap();
    dispatch(&window, "popstate");
    settle().await;
    layers.set_value("2000");
    dispatch(&layers, "input");
    dispatch(&layers, "change");
    settle().await;
    assert_eq!((link_config().await.n_layer, layers.value()), (3, "3".to_string()));
}

/// n_head follows an n_embd it does not divide, and the page says so while that config stands.
#[wasm_bindgen_test]
async fn a_head_count_that_follows_n_embd_is_said() {
    let page = mount_with("?v=1").await;
    page.type_keys("n_embd", "1024").await;
    assert_eq!((link_config().await.n_embd, link_config().await.n_head), (1024, 8));
    assert!(
        page.text(".follow-note").starts_with("n_head 12 → 8: n_embd 1024 splits into 8 heads of 128"),
        "{}",
        page.text(".follow-note")
    );
    // Another change of config leaves it behind.
    page.type_keys("n_layer", "6").await;
    assert!(!page.has(".follow-note"));
}

/// A block typed no longer than the eval context takes it along, and the page says so (QA: the
/// eval context was dropped without a word).
#[wasm_bindgen_test]
async fn an_eval_context_that_follows_the_block_is_said() {
    let page = mount_with("?v=1&T=1024&ET=512").await;
    page.type_keys("block_size", "256").await;
    assert_eq!((link_config().await.block_size, link_config().await.eval_block_size), (256, None));
    assert!(page.text(".follow-note").starts_with("eval block_size 512 → 256"), "{}", page.text(".follow-note"));
}

/// The dropout slider snaps to its 0.05 step; a screen reader hears the value, not the snap.
#[wasm_bindgen_test]
async fn the_dropout_slider_says_its_value() {
    let page = mount_with("?v=1&drop=0.13").await;
    assert_eq!(page.el("input[name=dropout-slider]").get_attribute("aria-valuetext").as_deref(), Some("0.13"));
}

/// A value taken but written another way ("00012") is shown as the page writes it once its box
/// is left: nothing else rewrites it, since the state is what it was.
#[wasm_bindgen_test]
async fn a_value_written_another_way_is_shown_as_taken() {
    let page = mount_with("?v=1").await;
    page.type_keys("batch_size", "00012").await;
    let input: HtmlInputElement = page.el("input[name=batch_size]").dyn_into().unwrap();
    assert_eq!(input.value(), "00012", "not rewritten while typed in");
    dispatch(&input, "change");
    settle().await;
    assert_eq!((link_config().await.batch_size, input.value()), (12, "12".to_string()));
    assert!(!page.has(".input-error"), "{}", page.text(".input-error"));
}
