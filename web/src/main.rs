//! The page's entry point; Trunk builds this binary for wasm32. All logic lives in `lib.rs`.

fn main() {
    #[cfg(target_arch = "wasm32")]
    vramfit_web::start();
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("vramfit-web is the browser page: run `scripts/serve` and open the printed address.");
}
