//! Training data: where tokens come from, the vocabulary that maps them to text, and nanoGPT's
//! random batches.
//!
//! Three sources ([`DataSource`]):
//! - the built-in corpus ([`crate::corpus`]), character-level;
//! - any UTF-8 text file, character-level (ids are the sorted distinct characters, as nanoGPT's
//!   `shakespeare_char/prepare.py` makes them) or GPT-2 BPE (tiktoken's `r50k_base`, which is
//!   nanoGPT's `tiktoken.get_encoding("gpt2")`); the first 90 % of the text trains, the rest
//!   validates, as nanoGPT's prepare scripts split it;
//! - a directory with nanoGPT's prepared `train.bin` and `val.bin` (raw little-endian uint16
//!   ids, memory-mapped and widened to u32 batch by batch), with the character vocabulary of the
//!   `meta.pkl` beside them if there is one (nanoGPT's char-level datasets), else decoded as GPT-2
//!   as nanoGPT's `sample.py` does when there is no `meta.pkl`.
//!
//! Every problem is one line for the user (`Err(String)`).

use crate::model::HostRng;
use memmap2::Mmap;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// GPT-2's vocabulary: 50,256 BPE merges' tokens plus `<|endoftext|>`.
pub const GPT2_VOCAB: usize = 50257;

/// How text is cut into tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tokenizer {
    Char,
    Gpt2,
}

impl Tokenizer {
    pub fn parse(s: &str) -> Option<Tokenizer> {
        match s.trim().to_ascii_lowercase().as_str() {
            "char" | "chars" | "character" => Some(Tokenizer::Char),
            "gpt2" | "gpt-2" | "r50k_base" => Some(Tokenizer::Gpt2),
            _ => None,
        }
    }
}

/// Where the tokens come from; a checkpoint records it so `--resume` finds the same data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum DataSource {
    /// The generated corpus of [`crate::corpus`] at this version.
    Builtin {
        version: u32,
    },
    Text {
        path: PathBuf,
        tokenizer: Tokenizer,
    },
    /// A directory holding `train.bin` and `val.bin`.
    Bin {
        dir: PathBuf,
    },
}

impl DataSource {
    /// What `--data PATH [--tokenizer T]` names: a directory is nanoGPT's prepared data, a file is text.
    pub fn from_path(path: &Path, tokenizer: Tokenizer) -> DataSource {
        if path.is_dir() {
            DataSource::Bin { dir: path.to_path_buf() }
        } else {
            DataSource::Text { path: path.to_path_buf(), tokenizer }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            DataSource::Builtin { version } => format!("built-in corpus v{version} (characters)"),
            DataSource::Text { path, tokenizer: Tokenizer::Char } => format!("{} (characters)", path.display()),
            DataSource::Text { path, tokenizer: Tokenizer::Gpt2 } => format!("{} (GPT-2 BPE)", path.display()),
            DataSource::Bin { dir } => format!("{}/{{train,val}}.bin (uint16 token ids)", dir.display()),
        }
    }
}

/// Maps token ids to text and back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Vocabulary {
    /// Character-level: id `i` is the `i`-th character of `chars`.
    Chars { chars: String },
    /// GPT-2 BPE (tiktoken `r50k_base`).
    Gpt2,
}

impl Vocabulary {
    /// Ids the data can contain.
    pub fn size(&self) -> usize {
        match self {
            Vocabulary::Chars { chars } => chars.chars().count(),
            Vocabulary::Gpt2 => GPT2_VOCAB,
        }
    }

    /// Token ids of `text`; a character the vocabulary lacks is an error.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        match self {
            Vocabulary::Chars { chars } => {
                // Ids by character, in a table as long as the largest character's value (at most
                // 1.1 Mi entries): a text of hundreds of millions of characters is one lookup each.
                const ABSENT: u32 = u32::MAX;
                let len = chars.chars().map(|c| c as usize + 1).max().unwrap_or(0);
                let mut table = vec![ABSENT; len];
                for (id, c) in chars.chars().enumerate() {
                    table[c as usize] = id as u32;
                }
                text.chars()
                    .map(|c| match table.get(c as usize) {
                        Some(&id) if id != ABSENT => Ok(id),
                        _ => Err(format!("the character {c:?} is not in the checkpoint's vocabulary")),
                    })
                    .collect()
            }
            Vocabulary::Gpt2 => Ok(tiktoken_rs::r50k_base_singleton().encode_ordinary(text)),
        }
    }

    /// Text of `ids`; ids outside the vocabulary (a model with a padded vocab_size can sample
    /// them) show as `�`.
    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            Vocabulary::Chars { chars } => {
                let table: Vec<char> = chars.chars().collect();
                ids.iter().map(|&i| table.get(i as usize).copied().unwrap_or('\u{FFFD}')).collect()
            }
            Vocabulary::Gpt2 => {
                let bpe = tiktoken_rs::r50k_base_singleton();
                let mut bytes = Vec::new();
                for &id in ids {
                    match bpe.decode_bytes(&[id]) {
                        Ok(b) => bytes.extend_from_slice(&b),
                        Err(_) => bytes.extend_from_slice("\u{FFFD}".as_bytes()),
                    }
                }
                String::from_utf8_lossy(&bytes).into_owned()
            }
        }
    }
}

/// The file nanoGPT's char-level prepare scripts write beside train.bin and val.bin.
pub const META_FILE: &str = "meta.pkl";

/// The vocabulary of nanoGPT's `meta.pkl` at `path`, if there is one: train.py takes the
/// model's vocab_size from it and sample.py decodes with its `itos`, so a char-level dataset
/// is not GPT-2 tokens. vramfit's character vocabulary is one character per id, in order (as
/// `prepare.py`'s `sorted(set(data))` makes it); a meta.pkl that is not is refused.
pub fn read_meta(path: &Path) -> Result<Option<Vocabulary>, String> {
    let Some(meta) = load_meta(path)? else { return Ok(None) };
    let shown = path.display();
    let Some(crate::pickle::Value::Dict(itos)) = meta.get("itos") else {
        return Err(format!(
            "{shown} has no itos (the id -> character map nanoGPT's char-level prepare.py writes): vramfit reads only those \
             (move it away to read the .bin files as GPT-2 tokens)"
        ));
    };
    // Each id's character, in one pass over the dict.
    let mut by_id: Vec<Option<char>> = vec![None; itos.len()];
    for (k, v) in itos {
        let id = match k {
            crate::pickle::Value::Int(id) if (0..itos.len() as i64).contains(id) => *id as usize,
            _ => return Err(format!("{shown}: itos has the key {} (its ids must be 0 to {})", short(k), itos.len() - 1)),
        };
        by_id[id] = match v {
            crate::pickle::Value::Str(s) if s.chars().count() == 1 => s.chars().next(),
            _ => {
                return Err(format!(
                    "{shown}: itos[{id}] is {}, not one character (vramfit's vocabularies from meta.pkl are characters)",
                    short(v)
                ))
            }
        };
    }
    let mut chars = String::new();
    for (id, c) in by_id.into_iter().enumerate() {
        // (A key set twice leaves an id without one.)
        let Some(c) = c else { return Err(format!("{shown}: itos has no character for id {id}")) };
        if chars.chars().next_back().is_some_and(|last| last >= c) {
            return Err(format!("{shown}: its characters are not in sorted order (as prepare.py's sorted(set(data)) gives them)"));
        }
        chars.push(c);
    }
    if chars.is_empty() {
        return Err(format!("{shown}: its itos is empty"));
    }
    match meta.get("vocab_size") {
        Some(crate::pickle::Value::Int(n)) if *n == itos.len() as i64 => {}
        Some(other) => return Err(format!("{shown}: vocab_size is {} but itos has {} characters", short(other), itos.len())),
        None => {}
    }
    Ok(Some(Vocabulary::Chars { chars }))
}

/// A pickled value as an error line quotes it: at most 40 characters of its Python `repr`.
fn short(v: &crate::pickle::Value) -> String {
    let full = v.python_repr();
    match full.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &full[..at]),
        None => full,
    }
}

/// The unpickled `meta.pkl` at `path`, or `None` if there is no such file.
fn load_meta(path: &Path) -> Result<Option<crate::pickle::Value>, String> {
    if !path.exists() {
        return Ok(None);
    }
    let shown = path.display();
    let bytes = read_input_file(path, Some(MAX_META_BYTES)).map_err(|e| format!("cannot read {shown}: {e}"))?;
    crate::pickle::load(&bytes).map(Some).map_err(|e| format!("{shown} is not a pickle vramfit can read: {e}"))
}

/// The `vocab_size` of nanoGPT's `meta.pkl` at `path`, the one key train.py reads from it (any
/// prepare script's, characters or not); `None` if there is no such file.
pub fn read_meta_vocab_size(path: &Path) -> Result<Option<u32>, String> {
    let Some(meta) = load_meta(path)? else { return Ok(None) };
    let shown = path.display();
    match meta.get("vocab_size") {
        Some(crate::pickle::Value::Int(n)) if (1..=i64::from(u32::MAX)).contains(n) => Ok(Some(*n as u32)),
        Some(v) => Err(format!("{shown}: vocab_size is {}, not a whole number of tokens", short(v))),
        None => Err(format!("{shown} has no vocab_size, the key train.py reads from it")),
    }
}

/// A meta.pkl of 1.1 M characters is about 20 MiB; a larger file is not one.
const MAX_META_BYTES: u64 = 64 << 20;

/// One split's token ids.
pub enum Tokens {
    Ids(Vec<u32>),
    /// A memory-mapped file of little-endian uint16 ids.
    U16(Mmap),
}

impl Tokens {
    pub fn len(&self) -> usize {
        match self {
            Tokens::Ids(v) => v.len(),
            Tokens::U16(m) => m.len() / 2,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends ids `start .. start + n` to `out`.
    fn extend_into(&self, start: usize, n: usize, out: &mut Vec<u32>) {
        match self {
            Tokens::Ids(v) => out.extend_from_slice(&v[start..start + n]),
            Tokens::U16(m) => {
                out.extend(m[2 * start..2 * (start + n)].chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]) as u32));
            }
        }
    }
}

/// What a checkpoint keeps of its data: the splits' lengths and a hash of every token id, so
/// that `--resume` can say when the data changed under it (an edited text file, new `.bin`s).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataFingerprint {
    pub train: SplitFingerprint,
    pub val: SplitFingerprint,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitFingerprint {
    pub tokens: u64,
    /// 16 hex digits (a JSON number could not hold every u64 for every reader).
    pub hash: String,
}

/// One pass over both splits: what `check`, the unigram entropy and the fingerprint need. A
/// nanoGPT `train.bin` can hold billions of ids (OpenWebText: 9 billion), so they are read once,
/// on the run's threads, and counted in a table rather than a map.
struct DataScan {
    train: SplitScan,
    val: SplitScan,
}

struct SplitScan {
    /// The largest id and where it first occurs.
    max_id: Option<(u32, usize)>,
    /// Unigram entropy in nats (the counts it comes from are not kept: 512 KiB for GPT-2 ids).
    entropy: f64,
    hash: u64,
}

/// Ids per piece of work: 8 MiB of a uint16 file.
const SCAN_CHUNK: usize = 1 << 22;

/// One step of the split's hash. `(h ^ id) * K` with K odd, then a rotation, is a bijection of
/// `h` for each id: two sequences of the same length that differ in one id always hash
/// differently (more differences could cancel, with a chance of about 2^-64).
#[inline(always)]
pub(crate) fn hash_step(h: u64, id: u64) -> u64 {
    (h ^ id).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(27)
}

/// What a piece of a split yields: its largest id (first position, counted from the split's
/// start) and its hash. Its counts go into its thread's table.
type PieceScan = (Option<(u32, usize)>, u64);

fn scan_piece(ids: impl Iterator<Item = u32>, first: usize, counts: &mut Vec<u64>) -> PieceScan {
    let mut max: Option<(u32, usize)> = None;
    let mut h = 0u64;
    for (i, id) in ids.enumerate() {
        let slot = id as usize;
        if slot >= counts.len() {
            counts.resize(slot + 1, 0);
        }
        counts[slot] += 1;
        if max.is_none_or(|(m, _)| id > m) {
            max = Some((id, first + i));
        }
        h = hash_step(h, id as u64);
    }
    (max, h)
}

/// Scans a split on up to `threads` threads. `table` is the count table's length: every id of
/// the split is below it (65,536 for uint16 ids, the vocabulary's size for ids made from text).
fn scan_split(tokens: &Tokens, threads: usize, table: usize) -> SplitScan {
    let n = tokens.len();
    let pieces = n.div_ceil(SCAN_CHUNK);
    let threads = threads.clamp(1, pieces.max(1));
    // Thread t takes a contiguous run of pieces; results are combined in piece order, so the
    // hash and the position of the largest id do not depend on the number of threads.
    let per_thread = pieces.div_ceil(threads);
    let scan_run = |t: usize, (counts, results): &mut (Vec<u64>, Vec<PieceScan>)| {
        for piece in (t * per_thread..((t + 1) * per_thread).min(pieces)).map(|p| p * SCAN_CHUNK) {
            let end = (piece + SCAN_CHUNK).min(n);
            results.push(match tokens {
                Tokens::Ids(v) => scan_piece(v[piece..end].iter().copied(), piece, counts),
                Tokens::U16(m) => {
                    scan_piece(m[2 * piece..2 * end].chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]) as u32), piece, counts)
                }
            });
        }
    };
    // Each thread's memory is allocated here, so the scan threads never call malloc: glibc would
    // give each its own arena, 64 MiB of address space that outlives the thread and that the
    // pre-flight's `ulimit -v` room counts only for the run's own threads.
    let runs: Vec<Mutex<(Vec<u64>, Vec<PieceScan>)>> =
        (0..threads).map(|_| Mutex::new((vec![0u64; table], Vec::with_capacity(per_thread)))).collect();
    // Threads claim runs until none is left, so the calling thread does whatever the others do not.
    let next = AtomicUsize::new(0);
    let work = || loop {
        let t = next.fetch_add(1, Ordering::Relaxed);
        let Some(run) = runs.get(t) else { break };
        scan_run(t, &mut run.lock().unwrap_or_else(|e| e.into_inner()));
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            // No thread to be had (a process or address-space limit): this one scans more.
            if std::thread::Builder::new().spawn_scoped(s, work).is_err() {
                break;
            }
        }
        work();
    });
    let runs = runs.into_iter().map(|r| r.into_inner().unwrap_or_else(|e| e.into_inner()));
    let mut counts: Vec<u64> = Vec::new();
    let mut max_id: Option<(u32, usize)> = None;
    let mut hash = n as u64;
    for (thread_counts, results) in runs {
        if thread_counts.len() > counts.len() {
            counts.resize(thread_counts.len(), 0);
        }
        counts.iter_mut().zip(&thread_counts).for_each(|(c, t)| *c += t);
        for (piece_max, piece_hash) in results {
            if let Some((id, at)) = piece_max {
                if max_id.is_none_or(|(m, _)| id > m) {
                    max_id = Some((id, at));
                }
            }
            hash = hash_step(hash, piece_hash);
        }
    }
    let total = n as f64;
    // In id order, so the sum (and the printed figure) is the same on every run.
    let entropy = counts.iter().filter(|&&c| c > 0).map(|&c| c as f64 / total).map(|p| -p * p.ln()).sum();
    SplitScan { max_id, entropy, hash }
}

/// The two splits and their vocabulary.
pub struct Dataset {
    pub train: Tokens,
    pub val: Tokens,
    pub vocab: Vocabulary,
    pub source: DataSource,
    /// One pass over both splits, made the first time anything asks (see [`DataScan`]).
    scan: std::sync::OnceLock<DataScan>,
}

impl Dataset {
    pub fn new(train: Tokens, val: Tokens, vocab: Vocabulary, source: DataSource) -> Dataset {
        Dataset { train, val, vocab, source, scan: std::sync::OnceLock::new() }
    }

    /// Both splits scanned once: checks, entropy and fingerprint all read this.
    fn scan(&self) -> &DataScan {
        self.scan.get_or_init(|| {
            // As many threads as the run's matmuls get (`--threads`, RAYON_NUM_THREADS, all cores).
            let threads = candle_core::utils::get_num_threads();
            let table = |tokens: &Tokens| if matches!(tokens, Tokens::U16(_)) { 1 << 16 } else { self.vocab.size() };
            DataScan { train: scan_split(&self.train, threads, table(&self.train)), val: scan_split(&self.val, threads, table(&self.val)) }
        })
    }

    /// What a checkpoint records of the data, for `--resume` to tell whether it changed.
    pub fn fingerprint(&self) -> DataFingerprint {
        let scan = self.scan();
        let split =
            |tokens: &Tokens, scanned: &SplitScan| SplitFingerprint { tokens: tokens.len() as u64, hash: format!("{:016x}", scanned.hash) };
        DataFingerprint { train: split(&self.train, &scan.train), val: split(&self.val, &scan.val) }
    }

    /// Reads (or generates) the data.
    pub fn load(source: &DataSource) -> Result<Dataset, String> {
        match source {
            DataSource::Builtin { version } => {
                if *version != crate::corpus::CORPUS_VERSION {
                    return Err(format!(
                        "the data is the built-in corpus v{version}, but this vramfit has v{}",
                        crate::corpus::CORPUS_VERSION
                    ));
                }
                from_text(&crate::corpus::builtin(), Tokenizer::Char, source.clone())
            }
            DataSource::Text { path, tokenizer } => {
                let shown = path.display();
                let bytes = read_input_file(path, None).map_err(|e| format!("cannot read data file {shown}: {e}"))?;
                if bytes.is_empty() {
                    return Err(format!("data file {shown} is empty"));
                }
                let text = String::from_utf8(bytes).map_err(|e| format!("data file {shown} is not UTF-8 text ({e})"))?;
                from_text(&text, *tokenizer, source.clone())
            }
            DataSource::Bin { dir } => {
                let train = map_u16(&dir.join("train.bin"))?;
                let val = map_u16(&dir.join("val.bin"))?;
                let vocab = read_meta(&dir.join(META_FILE))?.unwrap_or(Vocabulary::Gpt2);
                Ok(Dataset::new(train, val, vocab, source.clone()))
            }
        }
    }

    /// Checks that every id is below `vocab_size` and that both splits are long enough for a
    /// sequence of `block_size` inputs plus its shifted target (`eval_block` for the val split).
    pub fn check(&self, vocab_size: u32, block_size: u32, eval_block: u32) -> Result<(), String> {
        for (split, tokens, block) in [("train", &self.train, block_size), ("val", &self.val, eval_block)] {
            let need = block as usize + 1;
            if tokens.len() < need {
                return Err(format!(
                    "the {split} split of {} has {} tokens, fewer than block_size + 1 = {need}: use more data or a smaller --block-size",
                    self.source.describe(),
                    tokens.len()
                ));
            }
            let scanned = if split == "train" { &self.scan().train } else { &self.scan().val };
            if let Some((id, at)) = scanned.max_id {
                if id >= vocab_size {
                    return Err(format!(
                        "token id {id} at position {at} of the {split} split of {} is not below vocab_size {vocab_size}",
                        self.source.describe()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Unigram entropy of the train split in nats: the loss of a model that ignores context.
    pub fn unigram_entropy(&self) -> f64 {
        self.scan().train.entropy
    }
}

/// Reads a whole file the user named (data, checkpoint, config file, meta.pkl) without reading
/// until memory runs out or waiting forever: with a `limit`, anything longer (`/dev/zero`) is
/// refused once that many bytes are read; without one, only regular files are read (`/dev/zero`
/// and `/dev/urandom` never end). A named pipe or socket is refused either way: opening a named
/// pipe nothing writes to waits forever.
pub fn read_input_file(path: &Path, limit: Option<u64>) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    // Checked before opening (following symlinks): the open itself is what waits on a pipe.
    let kind = std::fs::metadata(path)?.file_type();
    if kind.is_dir() {
        return Err(std::io::Error::other("it is a directory, not a file"));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() || kind.is_socket() {
            return Err(std::io::Error::other("it is a named pipe or socket, not a file"));
        }
        // With a limit a device reads as far as the limit: `/dev/null` is an empty config file.
        if limit.is_none() && (kind.is_char_device() || kind.is_block_device()) {
            return Err(std::io::Error::other("it is a device, not a file"));
        }
    }
    let Some(limit) = limit else {
        let file = File::open(path)?;
        // Sized up front as `std::fs::read` does: a checkpoint may be gigabytes.
        let mut bytes = Vec::with_capacity(usize::try_from(file.metadata()?.len()).unwrap_or(0));
        (&file).read_to_end(&mut bytes)?;
        return Ok(bytes);
    };
    let file = File::open(path)?;
    let meta = file.metadata()?;
    let too_long = || std::io::Error::other(format!("it is longer than {} MiB", limit >> 20));
    if meta.len() > limit {
        return Err(too_long());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_long());
    }
    Ok(bytes)
}

fn from_text(text: &str, tokenizer: Tokenizer, source: DataSource) -> Result<Dataset, String> {
    // Split the text, then encode each part, as nanoGPT's prepare scripts do.
    let cut = text.char_indices().nth(text.chars().count() * 9 / 10).map(|(i, _)| i).unwrap_or(text.len());
    let (train_text, val_text) = text.split_at(cut);
    let vocab = match tokenizer {
        Tokenizer::Char => {
            // The distinct characters in order, from a bit per Unicode scalar value (136 KiB)
            // rather than a sorted copy of the text (4 bytes per character).
            let mut seen = vec![0u64; (char::MAX as usize + 1).div_ceil(64)];
            for c in text.chars() {
                seen[c as usize / 64] |= 1 << (c as usize % 64);
            }
            let chars = seen
                .iter()
                .enumerate()
                .flat_map(|(word, &bits)| (0..64).filter(move |b| bits >> b & 1 == 1).map(move |b| word * 64 + b))
                .filter_map(|v| char::from_u32(v as u32))
                .collect();
            Vocabulary::Chars { chars }
        }
        Tokenizer::Gpt2 => Vocabulary::Gpt2,
    };
    let train = Tokens::Ids(vocab.encode(train_text)?);
    let val = Tokens::Ids(vocab.encode(val_text)?);
    Ok(Dataset::new(train, val, vocab, source))
}

fn map_u16(path: &Path) -> Result<Tokens, String> {
    let shown = path.display();
    // Before opening: a FIFO would wait for a writer, and a directory only fails at the map.
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(format!("data file {shown} is a directory, not uint16 token ids")),
        Ok(m) if !m.is_file() => return Err(format!("data file {shown} is not a regular file")),
        _ => {}
    }
    let file = File::open(path).map_err(|e| format!("cannot read data file {shown}: {e}"))?;
    let len = file.metadata().map_err(|e| format!("cannot read data file {shown}: {e}"))?.len();
    if len == 0 {
        return Err(format!("data file {shown} is empty"));
    }
    if len % 2 != 0 {
        return Err(format!("data file {shown} has an odd number of bytes ({len}): not uint16 token ids"));
    }
    // SAFETY: the map is read-only and only read as bytes; if another process truncates the file
    // while training runs, reads fault (as with any mmap) — nanoGPT's np.memmap shares that.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| format!("cannot map data file {shown}: {e}"))?;
    Ok(Tokens::U16(map))
}

/// `batch` random windows of `block + 1` tokens: inputs and targets shifted by one, each
/// `[batch * block]` row-major, as nanoGPT's `get_batch` draws them (start in `0 .. len - block`).
pub fn get_batch(tokens: &Tokens, batch: usize, block: usize, rng: &mut HostRng) -> (Vec<u32>, Vec<u32>) {
    let span = (tokens.len() - block) as u64;
    let mut x = Vec::with_capacity(batch * block);
    let mut y = Vec::with_capacity(batch * block);
    let mut window = Vec::with_capacity(block + 1);
    for _ in 0..batch {
        let start = (rng.next_u64() % span) as usize;
        window.clear();
        tokens.extend_into(start, block + 1, &mut window);
        x.extend_from_slice(&window[..block]);
        y.extend_from_slice(&window[1..]);
    }
    (x, y)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nanoGPT's char-level meta.pkl, as Python pickles it (trainer/tests/data/make_meta.py):
    /// the vocabulary is its characters in id order, whatever the protocol, past 255 ids and
    /// memo entries, and across pickle's batches of 1,000 dict items.
    #[test]
    fn meta_pkl_gives_the_character_vocabulary() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let mut small: Vec<char> = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll: Speak, speak. é".chars().collect();
        small.sort();
        small.dedup();
        let small: String = small.into_iter().collect();
        let large: String = (0..1500).map(|i| char::from_u32(0x4E00 + i).unwrap()).collect();
        for (file, want) in [("meta_small.pkl", &small), ("meta_protocol2.pkl", &small), ("meta_large.pkl", &large)] {
            assert_eq!(read_meta(&fixtures.join(file)).unwrap(), Some(Vocabulary::Chars { chars: want.clone() }), "{file}");
        }
        assert_eq!(read_meta(&fixtures.join("no-such-meta.pkl")).unwrap(), None);
        // What train.py reads of it: the vocab_size key.
        for (file, want) in
            [("meta_small.pkl", small.chars().count()), ("meta_protocol2.pkl", small.chars().count()), ("meta_large.pkl", 1500)]
        {
            assert_eq!(read_meta_vocab_size(&fixtures.join(file)).unwrap(), Some(want as u32), "{file}");
        }
        assert_eq!(read_meta_vocab_size(&fixtures.join("no-such-meta.pkl")).unwrap(), None);
        let junk = std::env::temp_dir().join(format!("vramfit-meta-junk-{}.pkl", std::process::id()));
        std::fs::write(&junk, b"not a pickle").unwrap();
        let err = read_meta_vocab_size(&junk).unwrap_err();
        assert!(err.contains("is not a pickle vramfit can read") && !err.contains('\n'), "{err}");
        std::fs::remove_file(&junk).unwrap();
    }

    /// A meta.pkl vramfit cannot use as a character vocabulary is one line naming the file and
    /// what is wrong (pickles from Python: `pickle.dumps` of the dict in each comment).
    #[test]
    fn a_meta_pkl_that_is_no_character_vocabulary_is_refused() {
        let dir = std::env::temp_dir().join(format!("vramfit-meta-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (bytes, want) in [
            // {'vocab_size': 50257}
            (&b"\x80\x04\x95\x14\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x0avocab_size\x94MQ\xc4s."[..], "has no itos"),
            // {'vocab_size': 2, 'itos': {0: 'ab', 1: 'c'}}
            (b"\x80\x04\x95,\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x0avocab_size\x94K\x02\x8c\x04itos\x94}\x94(K\x00\x8c\x02ab\x94K\x01\x8c\x01c\x94uu.", "itos[0] is 'ab', not one character"),
            // {'vocab_size': 2, 'itos': {0: 'b', 1: 'a'}}
            (b"\x80\x04\x95+\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x0avocab_size\x94K\x02\x8c\x04itos\x94}\x94(K\x00\x8c\x01b\x94K\x01\x8c\x01a\x94uu.", "not in sorted order"),
            // {'vocab_size': 5, 'itos': {0: 'a'}}
            (b"\x80\x04\x95$\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x0avocab_size\x94K\x05\x8c\x04itos\x94}\x94K\x00\x8c\x01a\x94su.", "vocab_size is 5 but itos has 1 characters"),
            (b"not a pickle", "is not a pickle vramfit can read"),
        ] {
            let path = dir.join("meta.pkl");
            std::fs::write(&path, bytes).unwrap();
            let err = read_meta(&path).unwrap_err();
            assert!(err.contains(want) && err.contains("meta.pkl") && !err.contains('\n'), "{err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn text_file(name: &str, contents: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vramfit-data-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    #[test]
    fn char_vocabulary_round_trips_and_splits_ninety_ten() {
        let path = text_file("hello.txt", "hello world, hello data!".repeat(10).as_bytes());
        let data = Dataset::load(&DataSource::Text { path, tokenizer: Tokenizer::Char }).unwrap();
        let Vocabulary::Chars { chars } = &data.vocab else { panic!("char vocab") };
        assert_eq!(chars, " !,adehlortw");
        assert_eq!(data.train.len() + data.val.len(), 240);
        assert_eq!(data.train.len(), 216);
        let ids = data.vocab.encode("hello").unwrap();
        assert_eq!(ids, vec![6, 5, 7, 7, 8]);
        assert_eq!(data.vocab.decode(&ids), "hello");
        assert!(data.vocab.encode("HELLO").is_err());
        assert!(data.check(12, 200, 20).is_ok());
        assert!(data.check(11, 8, 8).unwrap_err().contains("not below vocab_size 11"));
        assert!(data.check(12, 216, 8).unwrap_err().contains("train split"));
        assert!(data.check(12, 8, 24).unwrap_err().contains("val split"));
    }

    /// The vocabulary is the distinct characters in code-point order, whatever their plane
    /// (ASCII, accented, CJK, emoji), and encoding is its inverse; a character outside it is an
    /// error naming it.
    #[test]
    fn char_vocabulary_covers_every_plane_in_code_point_order() {
        let text = "b\u{1F600}a\u{65E5}\u{E9}a\n\u{10FFFF}b";
        let path = text_file("planes.txt", text.repeat(20).as_bytes());
        let data = Dataset::load(&DataSource::Text { path, tokenizer: Tokenizer::Char }).unwrap();
        let Vocabulary::Chars { chars } = &data.vocab else { panic!("char vocab") };
        let mut expected: Vec<char> = text.chars().collect();
        expected.sort_unstable();
        expected.dedup();
        assert_eq!(chars.chars().collect::<Vec<_>>(), expected);
        let ids = data.vocab.encode(text).unwrap();
        assert_eq!(ids, text.chars().map(|c| expected.binary_search(&c).unwrap() as u32).collect::<Vec<_>>());
        assert_eq!(data.vocab.decode(&ids), text);
        assert_eq!(data.vocab.encode("a\u{1F601}").unwrap_err(), "the character '\u{1f601}' is not in the checkpoint's vocabulary");
        assert!(data.vocab.encode("z").is_err(), "below the largest character, still absent");
    }

    #[test]
    fn gpt2_ids_match_known_encoding() {
        // "Hello world" is [15496, 995] in GPT-2's BPE (the id table nanoGPT uses).
        assert_eq!(Vocabulary::Gpt2.encode("Hello world").unwrap(), vec![15496, 995]);
        assert_eq!(Vocabulary::Gpt2.decode(&[15496, 995]), "Hello world");
    }

    #[test]
    fn bin_files_are_little_endian_u16() {
        let train = text_file("train.bin", &[1, 0, 0, 1, 2, 0, 255, 255]);
        text_file("val.bin", &[3, 0, 4, 0, 5, 0]);
        let dir = train.parent().unwrap();
        let data = Dataset::load(&DataSource::Bin { dir: dir.to_path_buf() }).unwrap();
        let mut all = Vec::new();
        data.train.extend_into(0, 4, &mut all);
        assert_eq!(all, vec![1, 256, 2, 65535]);
        assert_eq!(data.scan().train.max_id, Some((65535, 3)));
        assert!(data.check(50304, 2, 2).unwrap_err().contains("token id 65535 at position 3"));
        text_file("odd.bin", &[1, 2, 3]);
        assert!(map_u16(&dir.join("odd.bin")).is_err());
        std::fs::create_dir_all(dir.join("folder.bin")).unwrap();
        assert!(map_u16(&dir.join("folder.bin")).is_err_and(|e| e.ends_with("folder.bin is a directory, not uint16 token ids")));
    }

    /// Worked by hand: "aab" has p(a) = 2/3, p(b) = 1/3; k equally frequent ids give ln k (here
    /// over more than the 1 Mi tokens counted at a time); one id alone, 0. Only the train split counts.
    #[test]
    fn unigram_entropy_is_the_train_splits_in_nats() {
        let data = |train: Vec<u32>| {
            Dataset::new(
                Tokens::Ids(train),
                Tokens::Ids(vec![2; 10]),
                Vocabulary::Chars { chars: "abcde".into() },
                DataSource::Builtin { version: crate::corpus::CORPUS_VERSION },
            )
        };
        let aab = -(2.0 / 3.0 * (2.0f64 / 3.0).ln() + 1.0 / 3.0 * (1.0f64 / 3.0).ln());
        assert!((data(vec![0, 0, 1]).unigram_entropy() - aab).abs() < 1e-12);
        let uniform: Vec<u32> = (0..5 * 300_000).map(|i| i % 5).collect();
        assert!((data(uniform).unigram_entropy() - 5f64.ln()).abs() < 1e-12);
        assert_eq!(data(vec![3; 7]).unigram_entropy(), 0.0);
    }

    #[test]
    fn batches_are_shifted_windows() {
        let tokens = Tokens::Ids((0..100).collect());
        let mut rng = HostRng::new(7);
        let (x, y) = get_batch(&tokens, 4, 8, &mut rng);
        assert_eq!((x.len(), y.len()), (32, 32));
        for row in 0..4 {
            let xs = &x[row * 8..row * 8 + 8];
            let ys = &y[row * 8..row * 8 + 8];
            for i in 0..8 {
                assert_eq!(ys[i], xs[i] + 1);
            }
            assert!(xs[0] < 92);
        }
    }

    /// The scan, split into pieces on threads, against one plain pass: the same entropy, the same
    /// first position of the largest id (which occurs in two pieces here), and a hash that is
    /// the pieces' hashes folded in order.
    #[test]
    fn the_threaded_scan_is_one_plain_pass() {
        let n = 2 * SCAN_CHUNK + 12_345;
        let mut ids: Vec<u32> = (0..n as u64).map(|i| (i.wrapping_mul(2_654_435_761) % 1000) as u32).collect();
        ids[SCAN_CHUNK + 17] = 5000;
        ids[2 * SCAN_CHUNK + 3] = 5000;
        let scan = scan_split(&Tokens::Ids(ids.clone()), 2, 5001);
        let one_thread = scan_split(&Tokens::Ids(ids.clone()), 1, 0);
        assert_eq!((one_thread.max_id, one_thread.hash, one_thread.entropy), (scan.max_id, scan.hash, scan.entropy));
        let mut counts = std::collections::BTreeMap::<u32, u64>::new();
        ids.iter().for_each(|&id| *counts.entry(id).or_default() += 1);
        let entropy: f64 = counts.values().map(|&c| c as f64 / n as f64).map(|p| -p * p.ln()).sum();
        assert_eq!(scan.entropy, entropy);
        assert_eq!(scan.max_id, Some((5000, SCAN_CHUNK + 17)));
        let mut hash = n as u64;
        for piece in ids.chunks(SCAN_CHUNK) {
            hash = hash_step(hash, piece.iter().fold(0, |h, &id| hash_step(h, id as u64)));
        }
        assert_eq!(scan.hash, hash);
        // A uint16 file scans as the same ids.
        let bytes: Vec<u8> = ids.iter().flat_map(|&id| (id as u16).to_le_bytes()).collect();
        let path = text_file("scan.bin", &bytes);
        let Tokens::U16(map) = map_u16(&path).unwrap() else { panic!("a uint16 map") };
        let mapped = scan_split(&Tokens::U16(map), 3, 1 << 16);
        assert_eq!((mapped.max_id, mapped.hash, mapped.entropy), (scan.max_id, scan.hash, scan.entropy));
    }

    /// Any single changed id changes the split's fingerprint (each hash step is a bijection of
    /// the state); the same ids give the same one.
    #[test]
    fn one_changed_id_changes_the_fingerprint() {
        let data = |train: Vec<u32>| {
            Dataset::new(
                Tokens::Ids(train),
                Tokens::Ids(vec![1, 2, 3]),
                Vocabulary::Chars { chars: "abcd".into() },
                DataSource::Builtin { version: crate::corpus::CORPUS_VERSION },
            )
        };
        let base: Vec<u32> = (0..1000).map(|i| i % 4).collect();
        let reference = data(base.clone()).fingerprint();
        assert_eq!(data(base.clone()).fingerprint(), reference);
        assert_eq!(reference.train.hash.len(), 16);
        for at in [0, 1, 499, 999] {
            for id in 0..4 {
                if id == base[at] {
                    continue;
                }
                let mut edited = base.clone();
                edited[at] = id;
                let f = data(edited).fingerprint();
                assert_ne!(f.train, reference.train, "id {id} at {at}");
                assert_eq!(f.val, reference.val);
            }
        }
        // Two ids swapped: same counts, other order.
        let mut swapped = base.clone();
        swapped.swap(10, 11);
        assert_ne!(data(swapped).fingerprint().train, reference.train);
    }
}
