//! Prints core's prediction against every reference row, then core's CUDA rules against the
//! harness's emulation of them (`cpu-fake-cudalike` files): `cargo run --example compare`.
#[path = "../tests/reference_data.rs"]
mod reference_data;

fn main() {
    let filter: Vec<String> = std::env::args().skip(1).collect();
    for c in reference_data::comparisons().into_iter().chain(reference_data::cudalike_comparisons()) {
        if !filter.is_empty() && !filter.iter().any(|f| c.id.contains(f.as_str()) || c.window == f || c.file.contains(f.as_str())) {
            continue;
        }
        println!(
            "{:<14} {:<48} {:<13} meas {:>14} pred {:>14} err {:>+8.3}% {}",
            c.file,
            c.id,
            c.window,
            c.measured,
            c.predicted,
            100.0 * c.rel_error(),
            c.labels.join(",")
        );
    }
}
