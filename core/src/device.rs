//! GPUs: how much memory PyTorch can use on each, and what lives outside its tensor counters.
//!
//! `torch.cuda.max_memory_allocated()` counts tensors (and, since PyTorch allocates it through
//! the caching allocator, the cuBLAS workspace). The process's line in `nvidia-smi` adds the
//! allocator's reserve (segments it keeps cached) and the CUDA context. A run fits when that
//! process total stays under what `cudaMemGetInfo` calls the total, less what other programs
//! (a desktop, a browser) already hold.

use crate::sim::Target;
use serde::{Deserialize, Serialize};

const MIB: u64 = 1 << 20;
const GIB: f64 = (1u64 << 30) as f64;

/// How a figure was obtained: measured on that device, computed by a model whose error against
/// measurements is published (README: Accuracy), or estimated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A constant of the card or runtime, read off a measurement (a context size, a usable size).
    Measured,
    /// A model's figure, checked against measured peaks.
    Validated,
    /// Neither: a documented default or an extrapolation.
    Estimate,
}

/// A GPU as vramfit models it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    /// Short key used in flags and links, e.g. `rtx-4070`.
    pub id: String,
    pub name: String,
    /// The "Total" nvidia-smi prints, in bytes (a "12 GB" RTX 4070 shows 12282 MiB).
    pub memory_bytes: u64,
    /// What `torch.cuda.mem_get_info()` reports as total: the most a process can ever hold.
    pub usable_bytes: u64,
    pub usable_source: Source,
    /// Compute capability (major, minor): bf16 needs 8.0 (Ampere) or newer.
    pub compute_capability: (u32, u32),
    /// CUDA context and library code resident per process (in nvidia-smi, not in torch's counters).
    pub context_bytes: u64,
    pub context_source: Source,
}

/// Why a card has no room for any run, whatever the config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoRoom {
    /// Other programs hold all the card offers.
    TakenByOthers,
    /// What is left is no more than the CUDA context alone.
    BelowContext,
}

impl Gpu {
    /// Whether `other_usage` bytes held by other programs leave no room for any run.
    pub fn no_room(&self, other_usage: u64) -> Option<NoRoom> {
        let available = self.usable_bytes.saturating_sub(other_usage);
        if available == 0 && other_usage > 0 {
            Some(NoRoom::TakenByOthers)
        } else if available <= self.context_bytes {
            Some(NoRoom::BelowContext)
        } else {
            None
        }
    }

    pub fn supports_bf16(&self) -> bool {
        self.compute_capability.0 >= 8
    }

    /// cuBLAS workspace per (handle, stream), as PyTorch sizes it by default
    /// (`CUBLAS_WORKSPACE_CONFIG` unset): 32 MiB on sm90 (measured on an H100 and an H200 with
    /// torch 2.11: exactly 33554432 bytes for the forward thread and again for the autograd
    /// thread), and
    /// 4096 KiB x 2 + 16 KiB x 8 on other cards (PyTorch's documented default; not measured here).
    pub fn cublas_workspace_bytes(&self) -> u64 {
        if self.compute_capability == (9, 0) {
            32 << 20
        } else {
            2 * 4096 * 1024 + 8 * 16 * 1024
        }
    }

    /// Streaming multiprocessors, from NVIDIA's specifications of each card (a custom card is
    /// taken as an RTX 4070's 46). CUDA's reduction kernels size their scratch by it.
    pub fn multiprocessors(&self) -> u32 {
        match self.id.as_str() {
            "rtx-3060" => 28,
            "rtx-4070" => 46,
            "rtx-4080" => 76,
            "rtx-3090" => 82,
            "rtx-4090" => 128,
            "t4" => 40,
            "v100-16gb" => 80,
            "a100-40gb" | "a100-80gb" => 108,
            "h100-80gb" | "h200-141gb" => 132,
            _ => 46,
        }
    }

    /// Most threads resident on one multiprocessor, by compute capability (the CUDA C++
    /// Programming Guide's table): 1024 on 7.5, 1536 on 8.6 and 8.9, 2048 on 7.0, 8.0 and 9.0.
    pub fn threads_per_multiprocessor(&self) -> u32 {
        match self.compute_capability {
            (7, 5) => 1024,
            (8, 6) | (8, 7) | (8, 9) => 1536,
            _ => 2048,
        }
    }

    /// The kernels and allocator the simulation should assume on this card.
    pub fn target(&self) -> Target {
        Target {
            granularity: 512,
            cublas_workspace_bytes: self.cublas_workspace_bytes(),
            cuda_kernels: true,
            fake_tensors: false,
            multiprocessors: self.multiprocessors(),
            threads_per_multiprocessor: self.threads_per_multiprocessor(),
            flash_kernels: self.compute_capability >= (8, 0),
            sdpa_prefers_cudnn: matches!(self.compute_capability.0, 9 | 10),
        }
    }

    /// A card of a given size with no known quirks (capacity and context estimated).
    pub fn custom(gib: f64) -> Gpu {
        let gib = if gib.is_finite() { gib.clamp(0.25, 4096.0) } else { 12.0 };
        let memory_bytes = (gib * GIB) as u64;
        Gpu {
            id: format!("custom-{}", trim_float(gib)),
            name: format!("Custom {} GiB card", trim_float(gib)),
            memory_bytes,
            // Same share the driver keeps back on an RTX 4070 (11.69 of 11.99 GiB).
            usable_bytes: (memory_bytes as f64 * 0.975) as u64,
            usable_source: Source::Estimate,
            compute_capability: (8, 6),
            context_bytes: DEFAULT_CONTEXT,
            context_source: Source::Estimate,
        }
    }

    /// Finds a preset by id or name (case-insensitive, spaces and underscores as dashes), or by
    /// words that name exactly one preset (`4070`, `rtx4070`, `h100`, `RTX 3090`), or parses a
    /// size: `custom-<GiB>`, a number of GiB with a unit (`6gb`, `10GiB`), or a bare number
    /// below 100 (`12`). `None` where [`Gpu::lookup`] explains why.
    pub fn find(query: &str) -> Option<Gpu> {
        Gpu::lookup(query).ok()
    }

    /// [`Gpu::find`], or one line saying why nothing was found. A bare number of 100 or more is
    /// a model number, never a size: `--gpu 4060` once planned for a 4,060 GiB card, and said
    /// it fits. Words naming several presets (`a100`) name them instead of picking one.
    pub fn lookup(query: &str) -> Result<Gpu, String> {
        let norm = |s: &str| s.trim().to_ascii_lowercase().replace([' ', '_'], "-");
        let q = norm(query);
        let all = presets();
        if let Some(p) = all.iter().find(|g| g.id == q || norm(&g.name) == q) {
            return Ok(p.clone());
        }
        // A size with its unit (`12gb`) is a size, though words like `12gb` are in card names.
        let (custom, rest) = match q.strip_prefix("custom-") {
            Some(n) => (true, n),
            None => (false, q.as_str()),
        };
        let (num, explicit) = match rest.strip_suffix("gib").or_else(|| rest.strip_suffix("gb")) {
            Some(n) if n.trim_end_matches('-').parse::<f64>().is_ok() => (n.trim_end_matches('-'), true),
            _ => (rest, custom),
        };
        let size = num.parse::<f64>();
        let words = if explicit { Vec::new() } else { card_words(&q) };
        let named: Vec<&Gpu> = all
            .iter()
            .filter(|g| {
                let own = format!("{}-{}", g.id, norm(&g.name));
                // A bare number is a whole model number (`4`: not the T4).
                let own = if size.is_ok() { own.split('-').map(str::to_string).collect() } else { card_words(&own) };
                !words.is_empty() && words.iter().all(|w| own.contains(w))
            })
            .collect();
        match named[..] {
            [one] => return Ok(one.clone()),
            [_, _, ..] if named.len() < all.len() => {
                let ids: Vec<&str> = named.iter().map(|g| g.id.as_str()).collect();
                return Err(format!("\"{}\" names {} cards: {}; give one of them", query.trim(), ids.len(), ids.join(", ")));
            }
            _ => {}
        }
        let range = "a custom size is 0.25 to 4096 GiB";
        match size {
            Ok(gib) if !explicit && gib.is_finite() && (100.0..=4096.0).contains(&gib) => Err(format!(
                "no preset card is named \"{}\" (see --list-gpus); for a custom size of that many GiB write custom-{}",
                crate::nanogpt::excerpt(query.trim()),
                num
            )),
            // Past the largest custom size: no suggestion that would be refused in turn.
            Ok(gib) if !explicit && gib.is_finite() && gib > 4096.0 => {
                Err(format!("no preset card is named \"{}\" (see --list-gpus; {range})", crate::nanogpt::excerpt(query.trim())))
            }
            Ok(gib) if gib.is_finite() && (0.25..=4096.0).contains(&gib) => Ok(Gpu::custom(gib)),
            Ok(_) => Err(format!("\"{}\": {range}", crate::nanogpt::excerpt(query.trim()))),
            Err(_) => Err(format!(
                "unknown GPU \"{}\": a preset id (see --list-gpus), a model number naming one card (4070), or a size such as 12gb or custom-12",
                crate::nanogpt::excerpt(query.trim())
            )),
        }
    }
}

/// The words of a card's id or name, split at dashes and where letters meet digits, so that
/// `rtx4070` and `rtx-4070` read the same (and `a100` as `a` `100`, naming both A100s).
fn card_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    for part in s.split('-').filter(|w| !w.is_empty()) {
        let mut word = String::new();
        for c in part.chars() {
            if let Some(last) = word.chars().last() {
                if last.is_ascii_digit() != c.is_ascii_digit() && (last.is_ascii_alphabetic() || c.is_ascii_alphabetic()) {
                    words.push(std::mem::take(&mut word));
                }
            }
            word.push(c);
        }
        words.push(word);
    }
    words
}

fn trim_float(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// CUDA context + kernels of a PyTorch process with lazy module loading. Measured on an
/// H100 (torch 2.11, CUDA 13.0): 742-758 MiB; public reports for consumer cards range from 250
/// to 700 MiB on older stacks. Other cards use the H100 figure as an estimate.
const DEFAULT_CONTEXT: u64 = 758 * MIB;

/// The default card: a 12 GB RTX 4070, the card in the OOM reports this tool was built for.
pub fn default_gpu() -> Gpu {
    presets().into_iter().find(|g| g.id == "rtx-4070").expect("preset exists")
}

/// The presets. `memory_bytes` is the nvidia-smi total; `usable_bytes` the total PyTorch
/// reports in its out-of-memory messages (cudaMemGetInfo), from public reports where cited.
pub fn presets() -> Vec<Gpu> {
    let gpu = |id: &str, name: &str, mem_mib: u64, usable_gib: f64, usable_source, cc| Gpu {
        id: id.to_string(),
        name: name.to_string(),
        memory_bytes: mem_mib * MIB,
        usable_bytes: (usable_gib * GIB) as u64,
        usable_source,
        compute_capability: cc,
        context_bytes: DEFAULT_CONTEXT,
        context_source: Source::Estimate,
    };
    use Source::*;
    vec![
        gpu("rtx-3060", "NVIDIA GeForce RTX 3060 12GB", 12288, 11.76, Estimate, (8, 6)),
        // "GPU 0 has a total capacity of 11.69 GiB" in a reported nanoGPT OOM (12282 MiB card).
        gpu("rtx-4070", "NVIDIA GeForce RTX 4070 12GB", 12282, 11.69, Measured, (8, 9)),
        gpu("rtx-4080", "NVIDIA GeForce RTX 4080 16GB", 16376, 15.70, Estimate, (8, 9)),
        gpu("rtx-3090", "NVIDIA GeForce RTX 3090 24GB", 24576, 23.69, Estimate, (8, 6)),
        gpu("rtx-4090", "NVIDIA GeForce RTX 4090 24GB", 24564, 23.64, Estimate, (8, 9)),
        gpu("t4", "NVIDIA Tesla T4 16GB", 15360, 14.75, Estimate, (7, 5)),
        gpu("v100-16gb", "NVIDIA Tesla V100 16GB", 16160, 15.77, Estimate, (7, 0)),
        gpu("a100-40gb", "NVIDIA A100 40GB", 40960, 39.39, Estimate, (8, 0)),
        gpu("a100-80gb", "NVIDIA A100 80GB", 81920, 79.15, Estimate, (8, 0)),
        Gpu {
            // Measured on this card (tests/reference/data/cuda-h100*.json): mem_get_info()
            // reports a total of 85,017,493,504 B (81,079 MiB), and nvidia-smi less
            // max_memory_reserved() is the 742-758 MiB context DEFAULT_CONTEXT takes.
            context_source: Measured,
            ..gpu("h100-80gb", "NVIDIA H100 80GB HBM3", 81559, 81079.0 / 1024.0, Measured, (9, 0))
        },
        Gpu {
            // Measured on this card (tests/reference/data/cuda-h200*.json, 2026-11-26): mem_get_info()
            // reports a total of 150,109,880,320 B (139.8 GiB); nvidia-smi less
            // max_memory_reserved() is 742-758 MiB, the H100's figure to the MiB.
            usable_bytes: 150_109_880_320,
            context_source: Measured,
            ..gpu("h200-141gb", "NVIDIA H200 141GB", 143771, 139.8, Measured, (9, 0))
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_findable_and_sane() {
        for g in presets() {
            assert_eq!(Gpu::find(&g.id).as_ref(), Some(&g));
            assert!(g.usable_bytes < g.memory_bytes, "{}", g.id);
        }
        assert_eq!(default_gpu().id, "rtx-4070");
        assert!(!Gpu::find("t4").unwrap().supports_bf16());
        assert!(Gpu::find("RTX 3060").unwrap().supports_bf16());
        // The H100's figures are the measured ones, to the byte.
        let h100 = Gpu::find("h100-80gb").unwrap();
        assert_eq!(h100.usable_bytes, 85_017_493_504);
        assert_eq!((h100.usable_source, h100.context_source), (Source::Measured, Source::Measured));
        let h200 = Gpu::find("h200").unwrap();
        assert_eq!(h200.usable_bytes, 150_109_880_320);
        assert_eq!((h200.usable_source, h200.context_source), (Source::Measured, Source::Measured));
    }

    #[test]
    fn custom_sizes_parse() {
        let g = Gpu::find("custom-10").unwrap();
        assert_eq!(g.memory_bytes, 10 << 30);
        assert_eq!(Gpu::find("6gb").unwrap().memory_bytes, 6 << 30);
        assert!(Gpu::find("nonsense").is_none());
        assert!(Gpu::find("custom-nan").is_none());
        assert!(Gpu::find("-4").is_none());
        // A bare number below 100 that no card is named by is a size; a size with a unit is a
        // size even where card names carry the same word ("12GB").
        assert_eq!(Gpu::find("12").unwrap().memory_bytes, 12 << 30);
        assert_eq!(Gpu::find("12gb").unwrap().memory_bytes, 12 << 30);
        assert_eq!(Gpu::find("24 GiB").unwrap().memory_bytes, 24 << 30);
        assert_eq!(Gpu::find("custom-4096").unwrap().memory_bytes, 4096 << 30);
        assert_eq!(Gpu::find("custom-10GiB").unwrap().memory_bytes, 10 << 30);
        assert!(Gpu::lookup("inf").unwrap_err().contains("0.25 to 4096 GiB"));
        assert!(Gpu::lookup("custom-5000").unwrap_err().contains("0.25 to 4096 GiB"));
        // A bare model number names no card; the custom size it suggests is one that works.
        assert!(Gpu::lookup("4000").unwrap_err().ends_with("write custom-4000"));
        assert!(Gpu::find("custom-4000").is_some());
        let past = Gpu::lookup("5000").unwrap_err();
        assert!(
            past.contains("no preset card is named \"5000\"") && past.contains("0.25 to 4096 GiB") && !past.contains("custom-5000"),
            "{past}"
        );
    }

    /// A bare number of 100 or more is a card's model number, never a size: a card vramfit has
    /// no preset for (`4060`, an 8 GB card) is an error that says how to ask for a size.
    #[test]
    fn model_numbers_without_a_preset_are_not_sizes() {
        for query in ["4060", "3080", "1080", "970"] {
            let why = Gpu::lookup(query).unwrap_err();
            assert!(why.contains(&format!("no preset card is named \"{query}\"")) && why.contains(&format!("custom-{query}")), "{why}");
        }
        assert_eq!(Gpu::find("custom-141").unwrap().memory_bytes, 141 << 30);
        assert_eq!(Gpu::find("141gb").unwrap().memory_bytes, 141 << 30);
    }

    /// A model number or a card's printed name finds the card (`--gpu 4070` planned for a
    /// 4,070 GiB card once); words naming two cards find none.
    #[test]
    fn cards_are_found_by_the_words_users_type() {
        for (query, id) in
            [("4070", "rtx-4070"), ("3090", "rtx-3090"), ("h100", "h100-80gb"), ("RTX 4090", "rtx-4090"), ("a100 80gb", "a100-80gb")]
                .into_iter()
                .chain([("rtx4070", "rtx-4070"), ("RTX4090", "rtx-4090"), ("a100-40GB", "a100-40gb"), ("V100", "v100-16gb")])
        {
            assert_eq!(Gpu::find(query).map(|g| g.id), Some(id.to_string()), "{query}");
        }
        for g in presets() {
            assert_eq!(Gpu::find(&g.name).map(|f| f.id), Some(g.id.clone()), "{}", g.name);
        }
        assert_eq!(Gpu::lookup("a100").unwrap_err(), "\"a100\" names 2 cards: a100-40gb, a100-80gb; give one of them");
        assert!(Gpu::lookup("nvidia").unwrap_err().starts_with("unknown GPU \"nvidia\""), "every card");
        assert!(Gpu::lookup("rtx 5090").unwrap_err().starts_with("unknown GPU"));
    }
}
