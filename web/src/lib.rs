//! The vramfit page: a Leptos (client-side) calculator over `vramfit-core`, built by Trunk.
//!
//! A guided tour:
//! 1. [`model`] — what the page computes from its state (a `LinkState`): core's plan, the
//!    peak-vs-batch series, the live-memory timeline, the verdict. Pure, tested natively.
//! 2. [`charts`] — the three charts as SVG strings (plotters' SVG backend). Pure, tested natively.
//! 3. [`share`] — the link (core's codec), the `vramfit train` command line, nanoGPT config
//!    export and import. Pure, tested natively.
//! 4. [`app`] — the components: controls, verdict, charts, fixes, share; state in the URL.
//!    Tested in headless Chromium by `web/tests/browser.rs` (wasm-bindgen-test) and end to end
//!    against the built `dist/` by `tests/e2e/`.
//!
//! This file starts the app and makes sure a panic is visible on the page, never a blank page.

pub mod app;
pub mod charts;
pub mod model;
pub mod share;

pub use app::App;
pub use model::{format_gib, format_signed_gib};

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
    // What the page benchmark subtracts from the first chart's mark: wasm loaded and started.
    if let Some(p) = web_sys::window().and_then(|w| w.performance()) {
        let _ = p.mark("vramfit:start");
    }
    let doc = web_sys::window().and_then(|w| w.document()).expect("a browser document");
    match doc.get_element_by_id("app").and_then(|e| wasm_bindgen::JsCast::dyn_into::<web_sys::HtmlElement>(e).ok()) {
        Some(root) => {
            root.set_inner_html("");
            leptos::mount::mount_to(root, App).forget();
        }
        None => leptos::mount::mount_to_body(App),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_text_is_actionable() {
        let t = panic_text("boom");
        assert!(t.contains("boom") && t.contains("Reload"));
    }
}
