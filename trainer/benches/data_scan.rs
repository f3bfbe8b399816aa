//! The pass `vramfit train` makes over its data before training: the largest id (the check that
//! every id is below vocab_size), the train split's unigram entropy, and the fingerprint a
//! checkpoint keeps for `--resume`. nanoGPT's OpenWebText `train.bin` holds about 9 billion ids,
//! so this pass is the run's start-up time.
//!
//! ```sh
//! cargo bench -p vramfit --bench data_scan                 # 256 Mi ids (512 MiB), all cores
//! VRAMFIT_SCAN_MIB=1024 cargo bench -p vramfit --bench data_scan
//! ```
//!
//! It writes a uint16 `train.bin` of random GPT-2 ids to a temporary directory, then times, one
//! after the other on the same (page-cached) bytes: the scan as `train` runs it now (one pass,
//! a counting table, on the run's threads: all cores here, then one), and the two passes it replaced (a max-id pass, then counts in
//! a hash map over 1 Mi ids at a time), kept here as the baseline. Each is timed 3 times;
//! the table has the fastest of each and their ratio.

use std::collections::HashMap;
use std::time::Instant;
use vramfit::data::{DataSource, Dataset};

/// The replaced code: the largest id and its first position, then the entropy over a hash map.
fn two_passes(bytes: &[u8]) -> (Option<(u32, usize)>, f64) {
    let mut best: Option<(u32, usize)> = None;
    for (i, b) in bytes.chunks_exact(2).enumerate() {
        let id = u16::from_le_bytes([b[0], b[1]]) as u32;
        if best.is_none_or(|(m, _)| id > m) {
            best = Some((id, i));
        }
    }
    let mut counts = HashMap::<u32, u64>::new();
    let mut buf = Vec::new();
    for piece in bytes.chunks(2 << 20) {
        buf.clear();
        buf.extend(piece.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]) as u32));
        for &id in &buf {
            *counts.entry(id).or_default() += 1;
        }
    }
    let total = (bytes.len() / 2) as f64;
    (best, counts.values().map(|&c| c as f64 / total).map(|p| -p * p.ln()).sum())
}

fn fastest<T>(mut run: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut out = None;
    for _ in 0..3 {
        let start = Instant::now();
        let value = run();
        best = best.min(start.elapsed().as_secs_f64());
        out = Some(value);
    }
    (best, out.expect("three runs"))
}

fn main() {
    let mib: usize = std::env::var("VRAMFIT_SCAN_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(512);
    let ids = mib << 19;
    let dir = std::env::temp_dir().join(format!("vramfit-data-scan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    // SplitMix64 ids below GPT-2's 50,257: a spread of counts like real text's, without the file.
    let mut state = 0x853c_49e6_748f_ea9bu64;
    let mut bytes = Vec::with_capacity(ids * 2);
    for _ in 0..ids {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        bytes.extend_from_slice(&(((z ^ (z >> 31)) % 50_257) as u16).to_le_bytes());
    }
    std::fs::write(dir.join("train.bin"), &bytes).expect("train.bin written");
    std::fs::write(dir.join("val.bin"), &bytes[..ids / 100 * 2]).expect("val.bin written");
    let source = DataSource::Bin { dir: dir.clone() };

    // The scan takes as many threads as the run's matmuls (RAYON_NUM_THREADS, else all cores);
    // `train` gives the small default model one.
    let scan = || {
        // A fresh dataset each time: its scan is made once and cached.
        let data = Dataset::load(&source).expect("the data loads");
        let check = data.check(50_257, 16, 16);
        (check, data.unigram_entropy(), data.fingerprint().train.hash)
    };
    let threads = candle_core::utils::get_num_threads();
    let (new_s, (new_check, new_entropy, hash)) = fastest(scan);
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let (one_s, (one_check, one_entropy, one_hash)) = fastest(scan);
    std::env::remove_var("RAYON_NUM_THREADS");
    assert!(one_check.is_ok() && one_entropy == new_entropy && one_hash == hash, "one thread scans the same");
    let (old_s, (old_max, old_entropy)) = fastest(|| {
        let (max, entropy) = two_passes(&bytes);
        let (val_max, _) = two_passes(&bytes[..ids / 100 * 2]);
        (max.max(val_max), entropy)
    });
    let _ = std::fs::remove_dir_all(&dir);
    assert!(new_check.is_ok(), "{new_check:?}");
    assert!(old_max.is_some_and(|(m, _)| m < 50_257));
    // The same entropy up to summation order (the map's order is arbitrary).
    assert!((new_entropy - old_entropy).abs() < 1e-9 * old_entropy, "{new_entropy} vs {old_entropy}");

    let gb = (bytes.len() + ids / 100 * 2) as f64 / 1e9;
    println!("data scan: {} Mi ids in train.bin (+1% val.bin), {threads} threads; fastest of 3 each", ids >> 20);
    println!("| pass | seconds | GB/s | vs the two passes |");
    println!("|---|---:|---:|---:|");
    println!("| one pass, counting table, {threads} threads (train now) | {new_s:.3} | {:.2} | {:.1}x faster |", gb / new_s, old_s / new_s);
    println!("| one pass, counting table, 1 thread | {one_s:.3} | {:.2} | {:.1}x faster |", gb / one_s, old_s / one_s);
    println!("| max-id pass + hash-map counts, 1 thread (before) | {old_s:.3} | {:.2} | 1.0x |", gb / old_s);
    println!("entropy {new_entropy:.6} nats (both), fingerprint {hash}");
}
