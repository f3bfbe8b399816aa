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
//!   ids, memory-mapped and widened to u32 batch by batch), decoded as GPT-2 as nanoGPT's
//!   `sample.py` does when there is no `meta.pkl`.
//!
//! Every problem is one line for the user (`Err(String)`).

use crate::model::HostRng;
use memmap2::Mmap;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::{Path, PathBuf};

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
                let table: Vec<char> = chars.chars().collect();
                text.chars()
                    .map(|c| {
                        table
                            .binary_search(&c)
                            .map(|i| i as u32)
                            .map_err(|_| format!("the character {c:?} is not in the checkpoint's vocabulary"))
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

    /// The largest id and where it first occurs.
    fn max_id(&self) -> Option<(u32, usize)> {
        let mut best: Option<(u32, usize)> = None;
        let mut consider = |id: u32, at: usize| {
            if best.is_none_or(|(b, _)| id > b) {
                best = Some((id, at));
            }
        };
        match self {
            Tokens::Ids(v) => v.iter().enumerate().for_each(|(i, &id)| consider(id, i)),
            Tokens::U16(m) => m.chunks_exact(2).enumerate().for_each(|(i, b)| consider(u16::from_le_bytes([b[0], b[1]]) as u32, i)),
        }
        best
    }
}

/// The two splits and their vocabulary.
pub struct Dataset {
    pub train: Tokens,
    pub val: Tokens,
    pub vocab: Vocabulary,
    pub source: DataSource,
}

impl Dataset {
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
                Ok(Dataset { train, val, vocab: Vocabulary::Gpt2, source: source.clone() })
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
            if let Some((id, at)) = tokens.max_id() {
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
        let mut counts = std::collections::HashMap::<u32, u64>::new();
        let mut buf = Vec::new();
        let n = self.train.len();
        let mut start = 0;
        while start < n {
            let len = (n - start).min(1 << 20);
            buf.clear();
            self.train.extend_into(start, len, &mut buf);
            for &id in &buf {
                *counts.entry(id).or_default() += 1;
            }
            start += len;
        }
        let total = n as f64;
        counts.values().map(|&c| c as f64 / total).map(|p| -p * p.ln()).sum()
    }
}

/// Reads a whole file the user named (data, checkpoint, config file) without reading until
/// memory runs out: with a `limit`, anything longer (`/dev/zero`, an endless pipe) is refused once
/// that many bytes are read; without one, devices are refused (`/dev/zero` and `/dev/urandom`
/// never end).
pub fn read_input_file(path: &Path, limit: Option<u64>) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = File::open(path)?;
    let meta = file.metadata()?;
    let Some(limit) = limit else {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            let kind = meta.file_type();
            if kind.is_char_device() || kind.is_block_device() {
                return Err(std::io::Error::other("it is a device, not a file"));
            }
        }
        // Sized up front as `std::fs::read` does: a checkpoint may be gigabytes.
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        (&file).read_to_end(&mut bytes)?;
        return Ok(bytes);
    };
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
            let mut chars: Vec<char> = text.chars().collect();
            chars.sort_unstable();
            chars.dedup();
            Vocabulary::Chars { chars: chars.into_iter().collect() }
        }
        Tokenizer::Gpt2 => Vocabulary::Gpt2,
    };
    let train = Tokens::Ids(vocab.encode(train_text)?);
    let val = Tokens::Ids(vocab.encode(val_text)?);
    Ok(Dataset { train, val, vocab, source })
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
        assert_eq!(data.train.max_id(), Some((65535, 3)));
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
        let data = |train: Vec<u32>| Dataset {
            train: Tokens::Ids(train),
            val: Tokens::Ids(vec![2; 10]),
            vocab: Vocabulary::Chars { chars: "abcde".into() },
            source: DataSource::Builtin { version: crate::corpus::CORPUS_VERSION },
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
}
