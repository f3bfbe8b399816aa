//! Checkpoints: one safetensors file with the parameters (nanoGPT's names), AdamW's moments
//! (`optimizer.exp_avg.<name>`, `optimizer.exp_avg_sq.<name>`) and, in the header's metadata
//! under `vramfit`, a JSON document with everything else needed to continue or sample: the
//! model config, the training settings, the data source and vocabulary, the iteration, the best
//! validation loss and the batch RNG's state.
//!
//! Writing is atomic: the bytes go to a temporary file in the same directory, which is flushed to
//! disk (fsync) and then renamed over the old checkpoint (rename is atomic within a file system on
//! POSIX), and the directory is synced so the rename itself survives a power cut. A crash or kill
//! at any moment leaves either the old checkpoint or the new one, never a torn file.

use crate::data::{DataSource, Vocabulary};
use crate::train::TrainSettings;
use candle_core::{DType, Device, Tensor};
use safetensors::tensor::{Dtype as StDtype, SafeTensors};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use vramfit_core::Config;

/// The checkpoint file's name inside `out_dir`.
pub const FILE_NAME: &str = "ckpt.safetensors";

/// The metadata key holding [`CheckpointMeta`] as JSON.
const META_KEY: &str = "vramfit";

/// The metadata key holding the tensors' checksum ([`TensorChecksum`], 16 hex digits). Absent
/// in checkpoints written before it: those load unchecked.
const CHECKSUM_KEY: &str = "vramfit_tensor_checksum";

/// Bumped when the layout changes; a checkpoint of another version is refused.
pub const FORMAT_VERSION: u32 = 1;

/// Test hook, in debug builds only (what `cargo test` runs): `VRAMFIT_TEST_CRASH_IN_CHECKPOINT=mid-write`
/// aborts the process after writing half of the temporary file, `=before-rename` after writing
/// and syncing all of it, and `=pause-before-rename` waits a minute there instead (a slow save,
/// for a second Ctrl-C to land in). The tests use it to show a crash at those moments leaves the
/// previous checkpoint loadable; a release binary ignores the variable.
const CRASH_HOOK: &str = "VRAMFIT_TEST_CRASH_IN_CHECKPOINT";

/// The temporary file of a checkpoint write in progress, and the checkpoint it is to replace,
/// until its rename: what [`exit_abandoning_write`] abandons.
static WRITING: std::sync::Mutex<Option<(PathBuf, PathBuf)>> = std::sync::Mutex::new(None);

fn writing() -> std::sync::MutexGuard<'static, Option<(PathBuf, PathBuf)>> {
    // A panic elsewhere while holding it leaves a value as valid as any.
    WRITING.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Ends the process at once with `code` (a second Ctrl-C). A checkpoint write in progress is
/// abandoned: its temporary file is removed, and it is not renamed over the checkpoint on disk
/// afterwards (this holds the lock the rename takes until the process is gone); one renaming
/// already finishes first. `say` is called first with the checkpoint whose write was abandoned,
/// if one was.
pub fn exit_abandoning_write(code: i32, say: impl FnOnce(Option<&Path>)) -> ! {
    let mut in_progress = writing();
    let abandoned = in_progress.take();
    if let Some((temp, _)) = &abandoned {
        let _ = std::fs::remove_file(temp);
    }
    say(abandoned.as_ref().map(|(_, path)| path.as_path()));
    std::process::exit(code)
}

/// Everything but the tensors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    pub format: u32,
    pub config: Config,
    pub settings: TrainSettings,
    pub data: DataSource,
    pub vocab: Vocabulary,
    /// The next iteration to run.
    pub iter_num: u64,
    /// Whether the evaluation scheduled at `iter_num` (if any) already ran before saving.
    pub evaluated: bool,
    /// train.py's `best_val_loss`: the val loss at the last save where always_save_checkpoint
    /// saves at every evaluation, the lowest one otherwise. It decides the next save.
    pub best_val_loss: Option<f32>,
    /// The lowest val loss any evaluation of the run measured, across resumes (absent in
    /// checkpoints written before it was kept: `best_val_loss` stands in for it).
    #[serde(default)]
    pub lowest_val_loss: Option<f32>,
    /// State of the batch-sampling RNG (SplitMix64) at `iter_num`.
    pub rng_state: u64,
    /// AdamW steps taken (0: no moments saved).
    pub optimizer_steps: u64,
    /// Parameter names in the model's order.
    pub param_names: Vec<String>,
    /// f16 training's loss scale and its count of good steps (absent otherwise, and in
    /// checkpoints written before mixed precision).
    #[serde(default)]
    pub loss_scaler: Option<crate::optim::LossScaler>,
    /// The data as it was when this was written, for `--resume` to notice edits (absent in
    /// checkpoints written before fingerprints).
    #[serde(default)]
    pub data_fingerprint: Option<crate::data::DataFingerprint>,
}

/// A checkpoint in memory: the metadata and f32 tensors in `param_names` order.
pub struct Checkpoint {
    pub meta: CheckpointMeta,
    pub params: Vec<Tensor>,
    /// Empty when `optimizer_steps == 0`.
    pub exp_avg: Vec<Tensor>,
    pub exp_avg_sq: Vec<Tensor>,
}

/// The tensors a checkpoint holds, in the file's order, with their names.
fn named_tensors(ckpt: &Checkpoint) -> Vec<(String, &Tensor)> {
    let names = &ckpt.meta.param_names;
    let mut out: Vec<(String, &Tensor)> = names.iter().cloned().zip(&ckpt.params).collect();
    out.extend(names.iter().map(|n| format!("optimizer.exp_avg.{n}")).zip(&ckpt.exp_avg));
    out.extend(names.iter().map(|n| format!("optimizer.exp_avg_sq.{n}")).zip(&ckpt.exp_avg_sq));
    out
}

/// A checksum of a checkpoint's tensor values, in the file's order, so that a file changed after
/// it was written (a flipped bit on a disk or in a copy) is refused rather than trained on or
/// sampled from: the NaN and sign checks catch only the changes that make a value impossible.
/// Each step is [`crate::data::hash_step`], a bijection of the state for each input, so one
/// changed value always changes the checksum.
#[derive(Clone, Copy, Default)]
struct TensorChecksum(u64);

impl TensorChecksum {
    /// Adds one tensor's values (its length first, so that where one tensor ends counts).
    fn add(&mut self, values: &[f32]) {
        use crate::data::hash_step;
        let mut h = hash_step(self.0, values.len() as u64);
        let mut pairs = values.chunks_exact(2);
        for p in &mut pairs {
            h = hash_step(h, u64::from(p[0].to_bits()) | u64::from(p[1].to_bits()) << 32);
        }
        if let [last] = pairs.remainder() {
            h = hash_step(h, u64::from(last.to_bits()));
        }
        self.0 = h;
    }

    fn hex(self) -> String {
        format!("{:016x}", self.0)
    }
}

/// Calls `f` with a tensor's values as f32: a contiguous f32 tensor in CPU memory in place,
/// another copied to the host first.
fn with_values<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R, String> {
    if t.dtype() == DType::F32 && t.device().is_cpu() && t.is_contiguous() {
        let (storage, layout) = t.storage_and_layout();
        if let candle_core::Storage::Cpu(candle_core::CpuStorage::F32(values)) = &*storage {
            let start = layout.start_offset();
            return Ok(f(&values[start..start + t.elem_count()]));
        }
    }
    let values = t.to_dtype(DType::F32).and_then(|v| v.flatten_all()).and_then(|v| v.to_vec1::<f32>()).map_err(|e| e.to_string())?;
    Ok(f(&values))
}

/// The header's JSON object, written as it is serialized: each tensor's entry (`dtype`, `shape`,
/// `data_offsets`, in the order the tensors are written) under its name, the metadata under
/// `__metadata__`, keys in byte order as a `serde_json::Map` has them (the bytes of files
/// written before are unchanged). Built as a map of JSON values first, it was a tiny run's
/// largest allocation during a save (QA).
struct Header<'a> {
    meta: serde_json::Value,
    tensors: &'a [(String, &'a Tensor)],
}

/// Its fields in byte order too, as the map of values wrote them.
#[derive(serde::Serialize)]
struct HeaderEntry<'a> {
    data_offsets: [usize; 2],
    dtype: &'static str,
    shape: &'a [usize],
}

impl serde::Serialize for Header<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        let mut offset = 0usize;
        for (_, t) in self.tensors {
            offsets.push([offset, offset + t.elem_count() * 4]);
            offset += t.elem_count() * 4;
        }
        // None: the metadata.
        let mut keys: Vec<(&str, Option<usize>)> = self.tensors.iter().enumerate().map(|(i, (name, _))| (name.as_str(), Some(i))).collect();
        keys.push(("__metadata__", None));
        keys.sort_unstable_by_key(|&(name, _)| name);
        let mut map = serializer.serialize_map(Some(keys.len()))?;
        for (name, at) in keys {
            match at {
                None => map.serialize_entry(name, &self.meta)?,
                Some(i) => {
                    let entry = HeaderEntry { data_offsets: offsets[i], dtype: "F32", shape: self.tensors[i].1.dims() };
                    map.serialize_entry(name, &entry)?
                }
            }
        }
        map.end()
    }
}

/// The safetensors header of `tensors` (f32, in this order, back to back) with `meta` under
/// [`META_KEY`] and their checksum under [`CHECKSUM_KEY`]: its JSON padded with spaces to a
/// multiple of 8 bytes, as safetensors writes it.
fn header(tensors: &[(String, &Tensor)], meta: &CheckpointMeta) -> Result<Vec<u8>, String> {
    let meta = serde_json::to_string(meta).map_err(|e| format!("cannot encode checkpoint metadata: {e}"))?;
    let mut checksum = TensorChecksum::default();
    for (name, t) in tensors {
        with_values(t, |values| checksum.add(values)).map_err(|e| format!("{name}: {e}"))?;
    }
    let mut json = serde_json::to_vec(&Header { meta: serde_json::json!({ META_KEY: meta, CHECKSUM_KEY: checksum.hex() }), tensors })
        .map_err(|e| format!("cannot encode checkpoint header: {e}"))?;
    json.resize(json.len().div_ceil(8) * 8, b' ');
    Ok(json)
}

/// Writes a tensor's values as little-endian f32. A contiguous f32 tensor in CPU memory is
/// written from where it lies; another is copied to the host first (one tensor at a time: the
/// save's memory beyond the run's is at most its largest tensor, where building the whole file
/// in memory once took twice the checkpoint, which the pre-flight did not plan for).
fn write_tensor(out: &mut dyn Write, t: &Tensor) -> Result<(), String> {
    let write_values = |values: &[f32]| -> std::io::Result<()> {
        // On a little-endian machine the bytes in memory are the file's: no buffer at all
        // (the 64 KiB block and a 64 KiB BufWriter were a tiny run's measured peak, 1.2 MiB
        // against 1.07 predicted for its steps: QA).
        if cfg!(target_endian = "little") {
            return out.write_all(bytemuck::cast_slice(values));
        }
        let mut block: Vec<u8> = Vec::with_capacity(64 << 10);
        for chunk in values.chunks(16 << 10) {
            block.clear();
            chunk.iter().for_each(|x| block.extend_from_slice(&x.to_le_bytes()));
            out.write_all(&block)?;
        }
        Ok(())
    };
    with_values(t, write_values)?.map_err(|e| e.to_string())
}

/// The whole file, ready to stream: its header and the tensors after it.
struct CheckpointFile<'a> {
    header: Vec<u8>,
    tensors: Vec<(String, &'a Tensor)>,
}

impl<'a> CheckpointFile<'a> {
    fn of(ckpt: &'a Checkpoint) -> Result<CheckpointFile<'a>, String> {
        let tensors = named_tensors(ckpt);
        Ok(CheckpointFile { header: header(&tensors, &ckpt.meta)?, tensors })
    }

    /// Its length in bytes.
    fn len(&self) -> u64 {
        (8 + self.header.len() + self.tensors.iter().map(|(_, t)| t.elem_count() * 4).sum::<usize>()) as u64
    }

    fn write(&self, out: &mut dyn Write) -> Result<(), String> {
        let header = &self.header;
        out.write_all(&(header.len() as u64).to_le_bytes()).and_then(|()| out.write_all(header)).map_err(|e| e.to_string())?;
        for (name, t) in &self.tensors {
            write_tensor(out, t).map_err(|e| format!("{name}: {e}"))?;
        }
        Ok(())
    }
}

/// Writes `ckpt` to `path` atomically (see the module docs), streaming its tensors to the file.
pub fn save(path: &Path, ckpt: &Checkpoint) -> Result<(), String> {
    let file = CheckpointFile::of(ckpt)?;
    write_atomically_with(path, file.len(), &|out| file.write(out))
}

/// A file that aborts the process once `left` bytes have gone to disk: the crash hook's
/// "mid-write".
struct CrashAfter {
    file: std::fs::File,
    left: u64,
}

impl Write for CrashAfter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = (buf.len() as u64).min(self.left) as usize;
        self.file.write_all(&buf[..n])?;
        self.left -= n as u64;
        if self.left == 0 {
            self.file.sync_all()?;
            std::process::abort();
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Temporary file (`len` bytes, written by `write`), fsync, rename, fsync of the directory.
fn write_atomically_with(path: &Path, len: u64, write: &dyn Fn(&mut dyn Write) -> Result<(), String>) -> Result<(), String> {
    let shown = path.display();
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "checkpoint".into());
    let temp: PathBuf = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let crash = if cfg!(debug_assertions) { std::env::var(CRASH_HOOK).ok() } else { None };
    let run = || -> Result<(), String> {
        let file = std::fs::File::create(&temp).map_err(|e| e.to_string())?;
        *writing() = Some((temp.clone(), path.to_path_buf()));
        if crash.as_deref() == Some("mid-write") {
            let mut out = CrashAfter { file, left: len / 2 };
            write(&mut out)?;
            return Err("the crash hook did not stop the write".into());
        }
        // Unbuffered: the header and each tensor are one write each, from memory the run holds
        // anyway (a buffer would be the save's own memory beyond the run's).
        let mut file = file;
        write(&mut file)?;
        file.sync_all().map_err(|e| e.to_string())?;
        if crash.as_deref() == Some("before-rename") {
            std::process::abort();
        }
        if crash.as_deref() == Some("pause-before-rename") {
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
        {
            // Held through the rename: a second Ctrl-C either abandons the write before it (and
            // holds this until the process ends) or waits for it.
            let mut in_progress = writing();
            std::fs::rename(&temp, path).map_err(|e| e.to_string())?;
            *in_progress = None;
        }
        // The rename is durable once the directory entry is on disk. Opening a directory to
        // sync it works on Linux and macOS; elsewhere the rename is still atomic.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    };
    let written = run();
    *writing() = None;
    written.map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        format!("cannot write checkpoint {shown}: {e}")
    })
}

/// Removes temporary files a crashed or killed run left in `dir` (`.ckpt.safetensors.tmp-<pid>`);
/// `train` calls it before writing there. Returns how many it removed.
pub fn remove_stale_temps(dir: &Path) -> usize {
    let prefix = format!(".{FILE_NAME}.tmp-");
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    // A file whose writer is still running (another run on the same out_dir) is not stale.
    // `train`'s run lock already rules that out, except on file systems that cannot lock,
    // which is what this check is for. Without /proc to ask, nothing is stale.
    let procfs = Path::new("/proc/self").exists();
    let writer_alive = |pid: &str| match pid.parse::<u32>() {
        Ok(pid) => !procfs || pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists(),
        Err(_) => !procfs,
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().strip_prefix(&prefix).is_some_and(|pid| !writer_alive(pid)))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// Reads a checkpoint; every problem (missing, not safetensors, not vramfit's, truncated,
/// inconsistent) is one line.
pub fn load(path: &Path, device: &Device) -> Result<Checkpoint, String> {
    let shown = path.display();
    let bytes = crate::data::read_input_file(path, None).map_err(|e| format!("cannot read checkpoint {shown}: {e}"))?;
    let bad = |why: String| format!("{shown} is not a usable vramfit checkpoint: {why}");
    let st = SafeTensors::deserialize(&bytes).map_err(|e| bad(invalid_tensor(&bytes).unwrap_or_else(|| e.to_string())))?;
    let (_, header) = SafeTensors::read_metadata(&bytes).map_err(|e| bad(format!("{e}")))?;
    let meta_json = header.metadata().as_ref().and_then(|m| m.get(META_KEY)).ok_or_else(|| bad("no vramfit metadata".into()))?;
    let meta: CheckpointMeta = serde_json::from_str(meta_json).map_err(|e| bad(format!("metadata: {e}")))?;
    if meta.format != FORMAT_VERSION {
        return Err(bad(format!("format version {} (this vramfit reads {FORMAT_VERSION})", meta.format)));
    }
    meta.config.validate().map_err(|e| bad(format!("config: {e}")))?;
    check_loop_state(&meta).map_err(bad)?;
    let saved_checksum = header.metadata().as_ref().and_then(|m| m.get(CHECKSUM_KEY)).cloned();
    let checksum = std::cell::Cell::new(TensorChecksum::default());
    let tensor = |name: &str, parameter: bool| -> Result<Tensor, String> {
        let view = st.tensor(name).map_err(|_| bad(format!("tensor {name} is missing")))?;
        if view.dtype() != StDtype::F32 {
            return Err(bad(format!("tensor {name} is {:?}, not F32", view.dtype())));
        }
        let values: Vec<f32> = view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        // Sampling would print nothing but newlines, and a resumed run stop at a NaN loss. (The
        // moments are AdamW's own: an infinite second moment is a state the run had, and the
        // resumed run continues it as the uninterrupted one would. A NaN moment is not: its
        // first step would make the weights NaN, so the run would have stopped before saving.)
        if parameter && !values.iter().all(|v| v.is_finite()) {
            return Err(bad(format!("tensor {name} holds NaN or infinite values")));
        }
        if !parameter && values.iter().any(|v| v.is_nan()) {
            return Err(bad(format!("tensor {name} holds NaN values")));
        }
        // AdamW's second moment is a running mean of squares.
        if name.starts_with("optimizer.exp_avg_sq.") && values.iter().any(|v| *v < 0.0) {
            return Err(bad(format!("tensor {name} holds negative values, which AdamW's second moment never has")));
        }
        let mut sum = checksum.get();
        sum.add(&values);
        checksum.set(sum);
        Tensor::from_vec(values, view.shape(), device).map_err(|e| bad(format!("tensor {name}: {e}")))
    };
    let params = meta.param_names.iter().map(|n| tensor(n, true)).collect::<Result<Vec<_>, _>>()?;
    let (exp_avg, exp_avg_sq) = if meta.optimizer_steps > 0 {
        (
            meta.param_names.iter().map(|n| tensor(&format!("optimizer.exp_avg.{n}"), false)).collect::<Result<Vec<_>, _>>()?,
            meta.param_names.iter().map(|n| tensor(&format!("optimizer.exp_avg_sq.{n}"), false)).collect::<Result<Vec<_>, _>>()?,
        )
    } else {
        (Vec::new(), Vec::new())
    };
    if let Some(saved) = saved_checksum.filter(|s| *s != checksum.get().hex()) {
        return Err(bad(format!(
            "its tensors do not match the checksum written with them ({saved}, now {}): the file changed after it was saved \
             (a damaged disk or copy)",
            checksum.get().hex()
        )));
    }
    Ok(Checkpoint { meta, params, exp_avg, exp_avg_sq })
}

/// Which tensor of a safetensors file has a shape and dtype that do not fill its byte range,
/// and how (the safetensors crate says only "invalid shape, data type, or offset for tensor").
/// `None` if the header cannot be read or every tensor is consistent.
fn invalid_tensor(bytes: &[u8]) -> Option<String> {
    let len = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(bytes.get(8..8usize.checked_add(len.try_into().ok()?)?)?).ok()?;
    for (name, info) in header.iter().filter(|(name, _)| *name != "__metadata__") {
        let dtype = info["dtype"].as_str()?;
        let width: u64 = match dtype {
            "F64" | "I64" | "U64" => 8,
            "F32" | "I32" | "U32" => 4,
            "F16" | "BF16" | "I16" | "U16" => 2,
            "I8" | "U8" | "BOOL" | "F8_E5M2" | "F8_E4M3" => 1,
            _ => continue,
        };
        let shape: Vec<u64> = info["shape"].as_array()?.iter().map(|d| d.as_u64()).collect::<Option<_>>()?;
        let offsets = info["data_offsets"].as_array()?;
        let (start, end) = (offsets.first()?.as_u64()?, offsets.get(1)?.as_u64()?);
        let needed = shape.iter().try_fold(width, |n, &d| n.checked_mul(d));
        if needed != end.checked_sub(start) {
            let needed = needed.map_or("more than 2^64".to_string(), |n| n.to_string());
            let span = end.checked_sub(start).map_or(format!("ends before it starts ({start} to {end})"), |n| format!("spans {n}"));
            return Some(format!("tensor {name}: shape {shape:?} in {dtype} is {needed} bytes, but its data {span}"));
        }
    }
    None
}

/// What a run that wrote `meta` cannot have left: the loop's state is restored as it is, so an
/// impossible value would otherwise surface as an overflow or a silently wrong run. (Its training
/// settings are checked by `train` after flags, which may put them right.)
fn check_loop_state(meta: &CheckpointMeta) -> Result<(), String> {
    if meta.optimizer_steps > meta.iter_num {
        return Err(format!(
            "optimizer_steps ({}) exceeds iter_num ({}): a run takes at most one optimizer step per iteration",
            meta.optimizer_steps, meta.iter_num
        ));
    }
    // A cross-entropy is never negative, and a run never keeps a NaN or infinite loss as its
    // best: a best below every real loss would stop the resumed run from saving ever again.
    if let Some(best) = meta.best_val_loss.filter(|b| !(b.is_finite() && *b >= 0.0)) {
        return Err(format!("best_val_loss is {best}, not a loss a run can have (a finite number >= 0)"));
    }
    if let Some(lowest) = meta.lowest_val_loss.filter(|b| !(b.is_finite() && *b >= 0.0)) {
        return Err(format!("lowest_val_loss is {lowest}, not a loss a run can have (a finite number >= 0)"));
    }
    if let Some(s) = &meta.loss_scaler {
        if !(s.scale.is_finite() && s.scale > 0.0) {
            return Err(format!("the loss scale is {}, not a finite number > 0", s.scale));
        }
        if s.good_steps >= crate::optim::LossScaler::GROWTH_INTERVAL {
            return Err(format!(
                "the loss scaler counts {} good steps, more than the {} after which it resets",
                s.good_steps,
                crate::optim::LossScaler::GROWTH_INTERVAL - 1
            ));
        }
    }
    Ok(())
}

/// Whether the stored parameters are what the stored config needs (checked before a model of
/// that config is built, so a doctored config cannot make `sample` or `--resume` allocate a
/// model far larger than the file).
pub fn check_matches_config(ckpt: &Checkpoint, path: &Path) -> Result<(), String> {
    let expected = vramfit_core::params::count(&ckpt.meta.config);
    let stored: u64 = ckpt.params.iter().map(|t| t.elem_count() as u64).sum();
    if stored != expected.total || ckpt.params.len() as u64 != expected.tensors {
        return Err(format!(
            "{} is not a usable vramfit checkpoint: it holds {} tensors with {stored} parameters, but its config needs {} with {}",
            path.display(),
            ckpt.params.len(),
            expected.tensors,
            expected.total
        ));
    }
    // Each tensor by name against the shape its config gives it (the counts above can agree
    // while a shape does not, and that would only show once the model is built and loaded,
    // after the run has started printing), and each optimizer moment against its tensor.
    let expected: std::collections::HashMap<String, Vec<usize>> = vramfit_core::params::param_tensors(&ckpt.meta.config)
        .iter()
        .flat_map(|t| {
            let dims: Vec<usize> = if t.rank == 1 { vec![t.shape[0] as usize] } else { vec![t.shape[0] as usize, t.shape[1] as usize] };
            (0..t.count).map(move |i| (t.name.replace("{i}", &i.to_string()), dims.clone()))
        })
        .collect();
    let unusable = |why: String| Err(format!("{} is not a usable vramfit checkpoint: {why}", path.display()));
    for (k, (name, tensor)) in ckpt.meta.param_names.iter().zip(&ckpt.params).enumerate() {
        match expected.get(name) {
            None => return unusable(format!("it holds a tensor {name:?} its config has no place for")),
            Some(dims) if dims.as_slice() != tensor.dims() => {
                return unusable(format!("its {name} is {:?}, but its config makes it {dims:?}", tensor.dims()));
            }
            Some(_) => {}
        }
        for (which, moments) in [("exp_avg", &ckpt.exp_avg), ("exp_avg_sq", &ckpt.exp_avg_sq)] {
            if let Some(m) = moments.get(k).filter(|m| m.dims() != tensor.dims()) {
                return unusable(format!("its optimizer {which} of {name} is {:?}, the tensor {:?}", m.dims(), tensor.dims()));
            }
        }
    }
    // A character vocabulary is the data's distinct characters in order (encoding searches it),
    // and the model has an id for each: anything else samples garbage.
    if let crate::data::Vocabulary::Chars { chars } = &ckpt.meta.vocab {
        let table: Vec<char> = chars.chars().collect();
        let why = if table.is_empty() {
            Some("its character vocabulary is empty".to_string())
        } else if !table.windows(2).all(|w| w[0] < w[1]) {
            Some("its character vocabulary is not distinct characters in order".to_string())
        } else if table.len() as u64 > u64::from(ckpt.meta.config.vocab_size) {
            Some(format!("its vocabulary has {} characters, more than its vocab_size {}", table.len(), ckpt.meta.config.vocab_size))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(format!("{} is not a usable vramfit checkpoint: {why}", path.display()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file's bytes, as `save` streams them (and as long as it says they are).
    fn serialize(ckpt: &Checkpoint) -> Result<Vec<u8>, String> {
        let file = CheckpointFile::of(ckpt)?;
        let mut bytes = Vec::new();
        file.write(&mut bytes)?;
        assert_eq!(bytes.len() as u64, file.len());
        Ok(bytes)
    }

    fn sample_checkpoint(format: u32, steps: u64) -> Checkpoint {
        let t = |v: Vec<f32>, shape: &[usize]| Tensor::from_vec(v, shape, &Device::Cpu).unwrap();
        let params = vec![t(vec![0.1, -2.5e-8, f32::MAX, 3.0], &[2, 2]), t(vec![1.0, f32::MIN_POSITIVE], &[2])];
        let moments = if steps > 0 { params.iter().map(|p| (p * 0.5).unwrap()).collect() } else { Vec::new() };
        Checkpoint {
            meta: CheckpointMeta {
                format,
                config: Config { n_layer: 1, n_head: 1, n_embd: 2, block_size: 2, vocab_size: 2, ..Config::default() },
                settings: TrainSettings::default(),
                data: DataSource::Builtin { version: 1 },
                vocab: Vocabulary::Chars { chars: "ab".into() },
                iter_num: 7,
                evaluated: true,
                best_val_loss: Some(1.25),
                lowest_val_loss: Some(1.125),
                rng_state: u64::MAX - 3,
                optimizer_steps: steps,
                param_names: vec!["w".into(), "b".into()],
                loss_scaler: Some(crate::optim::LossScaler { scale: 512.0, good_steps: 17 }),
                data_fingerprint: Some(crate::data::DataFingerprint {
                    train: crate::data::SplitFingerprint { tokens: 9, hash: "0123456789abcdef".into() },
                    val: crate::data::SplitFingerprint { tokens: 1, hash: "fedcba9876543210".into() },
                }),
            },
            // A second moment is never negative (`load` refuses one that is).
            exp_avg_sq: moments.iter().map(|m| m.abs().unwrap()).collect(),
            exp_avg: moments,
            params,
        }
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vramfit-ckpt-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn round_trip_is_exact() {
        let path = dir("round-trip").join(FILE_NAME);
        let ckpt = sample_checkpoint(FORMAT_VERSION, 3);
        save(&path, &ckpt).unwrap();
        let back = load(&path, &Device::Cpu).unwrap();
        assert_eq!(back.meta, ckpt.meta);
        for (a, b) in ckpt
            .params
            .iter()
            .chain(&ckpt.exp_avg)
            .chain(&ckpt.exp_avg_sq)
            .zip(back.params.iter().chain(&back.exp_avg).chain(&back.exp_avg_sq))
        {
            assert_eq!(a.dims(), b.dims());
            let (a, b) = (a.flatten_all().unwrap().to_vec1::<f32>().unwrap(), b.flatten_all().unwrap().to_vec1::<f32>().unwrap());
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
        }
        // No temporary file is left behind by a successful write.
        let names: Vec<String> =
            std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(names, vec![FILE_NAME.to_string()]);
    }

    /// The header as it is streamed is the JSON a `serde_json::Map` of the same entries gives
    /// (how it was built before, and how safetensors' own writer orders it: keys in byte order),
    /// and safetensors reads the file it heads.
    #[test]
    fn the_streamed_header_is_the_maps_json() {
        let ckpt = sample_checkpoint(FORMAT_VERSION, 3);
        let tensors = named_tensors(&ckpt);
        let meta = serde_json::to_string(&ckpt.meta).unwrap();
        let mut checksum = TensorChecksum::default();
        let mut entries = serde_json::Map::new();
        let mut offset = 0usize;
        for (name, t) in &tensors {
            with_values(t, |values| checksum.add(values)).unwrap();
            let end = offset + t.elem_count() * 4;
            entries.insert(name.clone(), serde_json::json!({ "dtype": "F32", "shape": t.dims(), "data_offsets": [offset, end] }));
            offset = end;
        }
        entries.insert("__metadata__".into(), serde_json::json!({ META_KEY: meta, CHECKSUM_KEY: checksum.hex() }));
        let mut want = serde_json::to_vec(&entries).unwrap();
        want.resize(want.len().div_ceil(8) * 8, b' ');
        assert_eq!(String::from_utf8(header(&tensors, &ckpt.meta).unwrap()).unwrap(), String::from_utf8(want).unwrap());
        let bytes = serialize(&ckpt).unwrap();
        let read = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(read.len(), tensors.len());
    }

    #[test]
    fn other_format_versions_and_missing_tensors_are_refused() {
        let path = dir("versions").join(FILE_NAME);
        save(&path, &sample_checkpoint(FORMAT_VERSION + 1, 0)).unwrap();
        let err = load(&path, &Device::Cpu).err().unwrap();
        assert!(err.contains("format version 2"), "{err}");
        // Claims optimizer steps but carries no moments.
        let mut ckpt = sample_checkpoint(FORMAT_VERSION, 0);
        ckpt.meta.optimizer_steps = 2;
        save(&path, &ckpt).unwrap();
        let err = load(&path, &Device::Cpu).err().unwrap();
        assert!(err.contains("tensor optimizer.exp_avg.w is missing"), "{err}");
    }

    /// A tensor whose header shape or dtype does not fill its bytes is named, with both sizes.
    #[test]
    fn a_tensor_that_does_not_fill_its_bytes_is_named() {
        let path = dir("bad-tensor").join(FILE_NAME);
        let bytes = serialize(&sample_checkpoint(FORMAT_VERSION, 0)).unwrap();
        let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
        for (field, value, expected) in [
            ("dtype", serde_json::json!("F16"), "tensor w: shape [2, 2] in F16 is 8 bytes, but its data spans 16"),
            ("shape", serde_json::json!([2, 3]), "tensor w: shape [2, 3] in F32 is 24 bytes, but its data spans 16"),
        ] {
            let mut doctored = header.clone();
            doctored["w"][field] = value;
            let text = serde_json::to_vec(&doctored).unwrap();
            let file = [&(text.len() as u64).to_le_bytes()[..], &text, &bytes[8 + len..]].concat();
            std::fs::write(&path, file).unwrap();
            let err = load(&path, &Device::Cpu).err().unwrap();
            assert!(err.contains(expected) && !err.contains('\n'), "{err}");
        }
    }

    /// Loop state no run can leave is refused by name, not restored: a best loss below 0 or not
    /// finite, more optimizer steps than iterations (u64::MAX overflowed AdamW's count), a loss
    /// scale of 0 or a good-step count past the interval.
    #[test]
    fn impossible_loop_state_is_refused() {
        let path = dir("loop-state").join(FILE_NAME);
        type Doctor = fn(&mut CheckpointMeta);
        // (A NaN or infinite best cannot be written: JSON has no such number.)
        let doctored: [(Doctor, &str); 6] = [
            (|m| m.best_val_loss = Some(-1.0), "best_val_loss is -1, not a loss"),
            (|m| m.lowest_val_loss = Some(-0.5), "lowest_val_loss is -0.5, not a loss"),
            (|m| m.optimizer_steps = u64::MAX, "optimizer_steps (18446744073709551615) exceeds iter_num (7)"),
            (|m| m.optimizer_steps = 8, "optimizer_steps (8) exceeds iter_num (7)"),
            (|m| m.loss_scaler = Some(crate::optim::LossScaler { scale: 0.0, good_steps: 0 }), "loss scale is 0"),
            (|m| m.loss_scaler = Some(crate::optim::LossScaler { scale: 1.0, good_steps: u32::MAX }), "4294967295 good steps"),
        ];
        for (doctor, expected) in doctored {
            let mut ckpt = sample_checkpoint(FORMAT_VERSION, 3);
            doctor(&mut ckpt.meta);
            save(&path, &ckpt).unwrap();
            let err = load(&path, &Device::Cpu).err().unwrap();
            assert!(err.contains(expected) && err.contains(&path.display().to_string()), "{err}");
        }
        // As many steps as iterations is what a run without skipped steps leaves.
        let mut ckpt = sample_checkpoint(FORMAT_VERSION, 7);
        ckpt.meta.optimizer_steps = 7;
        save(&path, &ckpt).unwrap();
        assert!(load(&path, &Device::Cpu).is_ok());
    }

    /// A value changed after the save, even to another finite number, is refused by the
    /// checksum; a second moment made negative is refused by name even without one (a file
    /// written before checksums); a file without the checksum still loads.
    #[test]
    fn a_changed_value_is_refused() {
        let path = dir("changed").join(FILE_NAME);
        save(&path, &sample_checkpoint(FORMAT_VERSION, 3)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let data_start = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        // The low bit of the first parameter's first value (0.1): still finite.
        let mut changed = bytes.clone();
        changed[data_start] ^= 1;
        std::fs::write(&path, &changed).unwrap();
        let err = load(&path, &Device::Cpu).err().expect("a changed value is refused");
        assert!(err.contains("do not match the checksum written with them"), "{err}");

        // Without the checksum: a header rewritten to lack it (same length, spaces).
        let header = std::str::from_utf8(&bytes[8..data_start]).unwrap();
        let key = format!(",\"{CHECKSUM_KEY}\":\"");
        let at = header.find(&key).expect("the checksum is in the header");
        let end = at + key.len() + 16 + 1;
        let unchecked = format!("{}{}{}", &header[..at], " ".repeat(end - at), &header[end..]);
        let mut old = bytes.clone();
        old[8..data_start].copy_from_slice(unchecked.as_bytes());
        std::fs::write(&path, &old).unwrap();
        assert!(load(&path, &Device::Cpu).is_ok(), "a checkpoint without a checksum loads");
        // The last tensor is the second exp_avg_sq (b's): its last value's sign bit.
        let last = old.len() - 1;
        old[last] ^= 0x80;
        std::fs::write(&path, &old).unwrap();
        let err = load(&path, &Device::Cpu).err().expect("a negative second moment is refused");
        assert!(err.contains("optimizer.exp_avg_sq.b holds negative values"), "{err}");
    }

    /// Checkpoints written before fingerprints (and before mixed precision) have neither field:
    /// they read as `None`, and `--resume` skips its data check.
    #[test]
    fn metadata_without_the_newer_fields_reads() {
        let meta = sample_checkpoint(FORMAT_VERSION, 0).meta;
        let mut json = serde_json::to_value(&meta).unwrap();
        let fields = json.as_object_mut().unwrap();
        assert!(fields.remove("data_fingerprint").is_some() && fields.remove("loss_scaler").is_some());
        let back: CheckpointMeta = serde_json::from_value(json).unwrap();
        assert_eq!((back.data_fingerprint, back.loss_scaler), (None, None));
        assert_eq!(back.iter_num, meta.iter_num);
    }
}
