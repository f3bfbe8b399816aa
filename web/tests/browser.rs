//! The page in a real browser: `scripts/test` runs this with wasm-bindgen-test-runner and
//! Debian's chromium + chromedriver (`cargo test -p vramfit-web --target wasm32-unknown-unknown`).
#![cfg(target_arch = "wasm32")]

use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;
use web_sys::{Event, EventInit, HtmlElement, HtmlInputElement};

wasm_bindgen_test_configure!(run_in_browser);

/// Lets the reactive system run its queued effects (they are spawned as tasks).
async fn settle() {
    for _ in 0..3 {
        let promise = js_sys::Promise::new(&mut |resolve, _| {
            web_sys::window().unwrap().set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, 0).unwrap();
        });
        wasm_bindgen_futures::JsFuture::from(promise).await.unwrap();
    }
}

/// A fresh element in the document with the app mounted in it.
async fn mount_app() -> HtmlElement {
    let doc = web_sys::window().unwrap().document().unwrap();
    let host: HtmlElement = doc.create_element("div").unwrap().dyn_into().unwrap();
    doc.body().unwrap().append_child(&host).unwrap();
    leptos::mount::mount_to(host.clone(), vramfit_web::App).forget();
    settle().await;
    host
}

fn text_of(host: &HtmlElement, selector: &str) -> String {
    host.query_selector(selector).unwrap().unwrap_or_else(|| panic!("no element matches {selector}")).text_content().unwrap_or_default()
}

async fn type_into(host: &HtmlElement, name: &str, value: &str) {
    let input: HtmlInputElement = host.query_selector(&format!("input[name={name}]")).unwrap().unwrap().dyn_into().unwrap();
    input.set_value(value);
    let init = EventInit::new();
    init.set_bubbles(true);
    input.dispatch_event(&Event::new_with_event_init_dict("input", &init).unwrap()).unwrap();
    settle().await;
}

const TRAIN_PEAK: &str = "tr[data-window=train] td.peak-allocated";

#[wasm_bindgen_test]
async fn shows_parameters_and_recomputes_when_the_batch_changes() {
    let host = mount_app().await;
    assert_eq!(text_of(&host, ".param-count"), "123.59M");
    let default_plan = vramfit_web::compute(vramfit_web::Inputs::default()).unwrap();
    let before = text_of(&host, TRAIN_PEAK);
    assert!(before.starts_with(&vramfit_web::format_gib(default_plan.train.peak_allocated_bytes)), "{before}");
    // compile=True (the default) makes the allocated peak an estimate: the marker shows.
    assert!(before.contains("estimate"), "{before}");
    assert_eq!(host.query_selector_all("table.windows tbody tr").unwrap().length(), 4);

    type_into(&host, "batch_size", "4").await;
    let small = vramfit_web::compute(vramfit_web::Inputs { batch_size: 4, ..Default::default() }).unwrap();
    let after = text_of(&host, TRAIN_PEAK);
    assert_ne!(before, after);
    assert!(after.starts_with(&vramfit_web::format_gib(small.train.peak_allocated_bytes)), "{after}");
}

#[wasm_bindgen_test]
async fn bad_input_shows_a_message_and_recovers() {
    let host = mount_app().await;
    type_into(&host, "n_layer", "0").await;
    let error = text_of(&host, ".error");
    assert!(error.contains("n_layer"), "{error}");
    assert!(host.query_selector("table.windows").unwrap().is_none());
    type_into(&host, "n_layer", "24").await;
    assert!(host.query_selector(".error").unwrap().is_none());
    assert_ne!(text_of(&host, ".param-count"), "123.59M");
}

#[wasm_bindgen_test]
fn fatal_message_is_visible() {
    vramfit_web::show_fatal(&vramfit_web::panic_text("test"));
    let doc = web_sys::window().unwrap().document().unwrap();
    let el = doc.query_selector(".fatal").unwrap().expect("a .fatal element");
    assert!(el.text_content().unwrap().contains("test"));
    el.remove();
}
