//! Saving a run's state to a checkpoint folder and restoring it.

use crate::atomic::{resolve, Staging};
use crate::error::{io, CheckpointError, Result};
use crate::meta::{FileRecord, Meta, Metric, Progress, FORMAT, FORMAT_VERSION, LIBTORCH_VERSION};
use crate::tensor_file;
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use tch::Tensor;
use torchlight_nn::{count_parameters, load_state_dict, state_dict, LoadOptions, LoadReport, Module};
use torchlight_optim::{GradScaler, LrScheduler, Optimizer, OptimizerState};
use torchlight_tensor::{set_torch_rng_state, torch_rng_state, TorchRngState};

const MODEL_FILE: &str = "model.safetensors";
const TRAINING_FILE: &str = "training.safetensors";
const META_FILE: &str = "meta.json";

/// Everything a run needs to resume, borrowed from the live objects at save time.
pub struct Snapshot<'a> {
    /// The model (weights and buffers).
    pub model: &'a dyn Module,
    /// The optimizer, when training.
    pub optimizer: Option<&'a dyn Optimizer>,
    /// The lr scheduler.
    pub scheduler: Option<&'a dyn LrScheduler>,
    /// The GradScaler of a mixed-precision run.
    pub grad_scaler: Option<&'a GradScaler>,
    /// Epochs completed and steps taken.
    pub progress: Progress,
    /// The metric this save is for.
    pub metric: Option<Metric>,
    /// The best metric so far.
    pub best: Option<Metric>,
    /// The data seed (shuffle and augmentation seeds derive from it and the epoch).
    pub data_seed: Option<u64>,
    /// Save torch's generator states (default on: dropout and anything else drawing from
    /// torch's global generator then continues exactly).
    pub rng: bool,
    /// The run's configuration.
    pub config: serde_json::Value,
    /// The training loop's own state (history, callbacks' states), stored in `meta.json`.
    pub loop_state: serde_json::Value,
    /// The training loop's tensors (partial metrics of a mid-epoch save), stored as `loop.*`.
    pub loop_tensors: Vec<(String, Tensor)>,
}

impl<'a> Snapshot<'a> {
    /// A snapshot of `model` alone (weights-only checkpoints, e.g. for inference).
    pub fn model(model: &'a dyn Module) -> Self {
        Snapshot {
            model,
            optimizer: None,
            scheduler: None,
            grad_scaler: None,
            progress: Progress::default(),
            metric: None,
            best: None,
            data_seed: None,
            rng: false,
            config: serde_json::Value::Null,
            loop_state: serde_json::Value::Null,
            loop_tensors: Vec::new(),
        }
    }
}

fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Writes `tensors` to `path` (see [`tensor_file::write`]) and returns the open file with its
/// record.
fn write_tensors(path: &Path, tensors: &[(String, Tensor)]) -> Result<(fs::File, FileRecord)> {
    tensor_file::write(path, tensors)
}

/// Asks the kernel to start writing `file` out now, so that its data goes to disk while the
/// next file is being written and the final `fdatasync` waits less.
fn start_writeback(file: &fs::File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain system call on an open descriptor; it only schedules writeback,
        // and its failure changes nothing (the fdatasync that follows is what counts).
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

/// Writes `snapshot` to the checkpoint folder `dir`, atomically: a crash or kill at any point
/// leaves the previous checkpoint at `dir` (or recoverable beside it, see
/// [`Checkpoint::load`]), never a half-written one.
///
/// The version it replaces is deleted on a background thread once the new one is in place;
/// the next save or [`finish_removals`](crate::finish_removals) waits for that.
pub fn save(dir: impl AsRef<Path>, snapshot: &Snapshot<'_>) -> Result<()> {
    let dir = dir.as_ref();
    let mut staging = Staging::new(dir)?;
    let _guard = torchlight_tensor::no_grad();

    let model_path = staging.dir.join(MODEL_FILE);
    let (model_file, model_record) = write_tensors(&model_path, &state_dict(snapshot.model))?;
    start_writeback(&model_file);

    let mut training: Vec<(String, Tensor)> = Vec::new();
    let optimizer = snapshot.optimizer.map(|o| {
        let state = o.state_dict();
        training.extend(state.tensors.into_iter().map(|(k, t)| (format!("optimizer.{k}"), t)));
        state.meta
    });
    if snapshot.rng {
        let rng = torch_rng_state()
            .map_err(|e| CheckpointError::Torch { path: dir.into(), message: e.to_string() })?;
        training.push(("rng.cpu".into(), rng.cpu));
        training.extend(rng.cuda.into_iter().enumerate().map(|(i, t)| (format!("rng.cuda.{i}"), t)));
    }
    training.extend(snapshot.loop_tensors.iter().map(|(k, t)| (format!("loop.{k}"), t.shallow_clone())));
    let training_path = staging.dir.join(TRAINING_FILE);
    let (training_file, training_record) = write_tensors(&training_path, &training)?;
    start_writeback(&training_file);
    // fdatasync (the data and the size, not the timestamps) once both are written, so that
    // the disk works on the first file while the second is produced.
    for (file, path) in [(model_file, model_path), (training_file, training_path)] {
        file.sync_data().map_err(io(&path))?;
        staging.synced(path);
    }

    let files = BTreeMap::from([
        (MODEL_FILE.to_string(), model_record),
        (TRAINING_FILE.to_string(), training_record),
    ]);
    let meta = Meta {
        format: FORMAT.into(),
        format_version: FORMAT_VERSION,
        torchlight_version: env!("CARGO_PKG_VERSION").into(),
        libtorch_version: LIBTORCH_VERSION.into(),
        created_unix: now_unix(),
        model_kind: snapshot.model.kind().into(),
        model_parameters: count_parameters(snapshot.model).total,
        progress: snapshot.progress,
        metric: snapshot.metric.clone(),
        best: snapshot.best.clone(),
        optimizer,
        scheduler: snapshot.scheduler.map(|s| s.state_dict()),
        grad_scaler: snapshot.grad_scaler.map(GradScaler::state_dict),
        data_seed: snapshot.data_seed,
        has_rng: snapshot.rng,
        config: snapshot.config.clone(),
        loop_state: snapshot.loop_state.clone(),
        files,
    };
    let meta_path = staging.dir.join(META_FILE);
    let text = serde_json::to_string_pretty(&meta).expect("checkpoint metadata serialises");
    fs::write(&meta_path, text).map_err(io(&meta_path))?;
    staging.commit()
}

/// Replaces the `config` in the `meta.json` of the checkpoint at `dir` (what a run records
/// about its weights after training, e.g. a fitted temperature in the model card), atomically
/// as [`save`] replaces a checkpoint: a folder is staged beside it with the same tensor files
/// (hard-linked, or copied where the filesystem cannot link; they are never written in place)
/// and the new `meta.json`, then swapped in, so a kill at any point leaves the old checkpoint
/// or the new one. Everything else in `meta.json` (file records, progress, metrics, time)
/// stays as it was.
///
/// `expected` is the metadata the caller read ([`Checkpoint::load`], [`read_meta`]): when the
/// checkpoint on disk no longer records the same files (another process saved over it since),
/// nothing is written and the error is [`CheckpointError::Changed`], so a value computed from
/// one set of weights is never attached to others. Like every save, it must not run while
/// another process writes checkpoints into the same folder.
pub fn update_config(dir: impl AsRef<Path>, expected: &Meta, config: serde_json::Value) -> Result<()> {
    let target = dir.as_ref();
    let (current, mut meta) = read_meta(target)?;
    if meta.files != expected.files {
        return Err(CheckpointError::Changed {
            path: target.to_path_buf(),
            reason: "its tensor files' sizes or checksums differ from those read".into(),
        });
    }
    let staging = Staging::new(target)?;
    for (name, record) in &meta.files {
        let (src, dst) = (current.join(name), staging.dir.join(name));
        let found = fs::metadata(&src).map_err(io(&src))?.len();
        if found != record.bytes {
            return Err(CheckpointError::Truncated { path: src, expected: record.bytes, found });
        }
        if fs::hard_link(&src, &dst).is_err() {
            fs::copy(&src, &dst).map_err(io(&dst))?;
        }
    }
    meta.config = config;
    let meta_path = staging.dir.join(META_FILE);
    let text = serde_json::to_string_pretty(&meta).expect("checkpoint metadata serialises");
    fs::write(&meta_path, text).map_err(io(&meta_path))?;
    staging.commit()
}

/// A checkpoint read from disk and verified (sizes and checksums), ready to restore from.
#[derive(Debug)]
pub struct Checkpoint {
    /// The folder actually read (a recovered `.<name>.old-*` after an interrupted save).
    pub dir: PathBuf,
    /// Its metadata.
    pub meta: Meta,
    model: Vec<(String, Tensor)>,
    training: HashMap<String, Tensor>,
    /// Whether `restore_optimizer` took the optimizer's tensors.
    optimizer_moved: bool,
}

fn read_verified(dir: &Path, name: &str, meta: &Meta) -> Result<Vec<(String, Tensor)>> {
    let record = meta.files.get(name).ok_or_else(|| CheckpointError::Corrupt {
        path: dir.join(META_FILE),
        reason: format!("no record of {name}"),
    })?;
    tensor_file::read_verified(&dir.join(name), record)
}

/// The `meta.json` of the checkpoint folder `requested` (its format and version checked) and
/// the folder it was read from, without reading any tensor: what a caller needs to choose
/// between checkpoints by their metric or position. Resolves an interrupted save as
/// [`Checkpoint::load`] does.
pub fn read_meta(requested: &Path) -> Result<(PathBuf, Meta)> {
    let dir = resolve(requested).ok_or_else(|| CheckpointError::NotACheckpoint {
        path: requested.to_path_buf(),
        reason: format!("no {META_FILE}"),
    })?;
    let meta_path = dir.join(META_FILE);
    let text = fs::read_to_string(&meta_path).map_err(io(&meta_path))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| CheckpointError::Corrupt { path: meta_path.clone(), reason: e.to_string() })?;
    if value.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
        return Err(CheckpointError::NotACheckpoint {
            path: dir.clone(),
            reason: format!("{META_FILE} has no \"format\": \"{FORMAT}\""),
        });
    }
    let version = value.get("format_version").and_then(|v| v.as_u64()).unwrap_or(0) as u32;
    if version > FORMAT_VERSION {
        return Err(CheckpointError::NewerFormat {
            path: meta_path,
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let meta: Meta = serde_json::from_value(value)
        .map_err(|e| CheckpointError::Corrupt { path: meta_path.clone(), reason: e.to_string() })?;
    Ok((dir, meta))
}

impl Checkpoint {
    /// Reads the checkpoint folder `dir`, checking its format version and every file's size
    /// and checksum. If a save was interrupted between its two renames, the previous complete
    /// checkpoint beside `dir` is read instead (`self.dir` says which).
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        let (dir, meta) = read_meta(dir.as_ref())?;
        let model = read_verified(&dir, MODEL_FILE, &meta)?;
        let training = read_verified(&dir, TRAINING_FILE, &meta)?.into_iter().collect();
        Ok(Checkpoint { dir, meta, model, training, optimizer_moved: false })
    }

    /// The model's state_dict as saved (CPU tensors), sorted by key.
    pub fn model_state(&self) -> &[(String, Tensor)] {
        &self.model
    }

    /// Loads the weights into `model` (strict: every key and shape must match, and nothing is
    /// copied otherwise), naming missing, unexpected and mis-shaped keys on error.
    pub fn restore_model(&self, model: &dyn Module) -> Result<LoadReport> {
        let weights = self.model.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect();
        load_state_dict(model, weights, &LoadOptions::strict())
            .map_err(|error| CheckpointError::Model { path: self.dir.join(MODEL_FILE), error })
    }

    /// The training loop's tensors as saved (`loop.*`, prefix removed), sorted by key.
    pub fn loop_tensors(&self) -> Vec<(String, Tensor)> {
        let mut out: Vec<(String, Tensor)> = self
            .training
            .iter()
            .filter_map(|(k, t)| k.strip_prefix("loop.").map(|k| (k.to_string(), t.shallow_clone())))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The optimizer state as saved, if any (none once [`restore_optimizer`] has moved it
    /// into an optimizer). Its tensors share memory with this checkpoint's.
    ///
    /// [`restore_optimizer`]: Checkpoint::restore_optimizer
    pub fn optimizer_state(&self) -> Option<OptimizerState> {
        if self.optimizer_moved {
            return None;
        }
        let meta = self.meta.optimizer.clone()?;
        let tensors = self
            .training
            .iter()
            .filter_map(|(k, t)| k.strip_prefix("optimizer.").map(|k| (k.to_string(), t.shallow_clone())))
            .collect();
        Some(OptimizerState { meta, tensors })
    }

    fn optim_err(&self) -> impl FnOnce(torchlight_optim::OptimError) -> CheckpointError + '_ {
        move |error| CheckpointError::Optim { path: self.dir.clone(), error }
    }

    fn missing(&self, what: &'static str) -> CheckpointError {
        CheckpointError::Missing { path: self.dir.clone(), what }
    }

    /// Restores the optimizer's hyperparameters and per-parameter state, moving the loaded
    /// tensors into the optimizer ([`Optimizer::load_state_dict_owned`]: no copy where the
    /// parameter's device and dtype are the saved ones). The checkpoint then no longer holds
    /// them: a second call is an error, and a failed call leaves them in place.
    pub fn restore_optimizer(&mut self, optimizer: &mut dyn Optimizer) -> Result<()> {
        if self.optimizer_moved {
            return Err(self.missing("optimizer state (moved into an optimizer by an earlier restore)"));
        }
        let state = self.optimizer_state().ok_or_else(|| self.missing("optimizer state"))?;
        optimizer.load_state_dict_owned(state).map_err(self.optim_err())?;
        // The optimizer holds the only handles on them from here.
        self.training.retain(|k, _| !k.starts_with("optimizer."));
        self.optimizer_moved = true;
        Ok(())
    }

    /// Restores the lr scheduler's step count and base lrs.
    pub fn restore_scheduler(&self, scheduler: &mut dyn LrScheduler) -> Result<()> {
        let state = self.meta.scheduler.as_ref().ok_or_else(|| self.missing("scheduler state"))?;
        scheduler.load_state_dict(state).map_err(self.optim_err())
    }

    /// Restores the GradScaler's scale and growth tracker.
    pub fn restore_grad_scaler(&self, scaler: &mut GradScaler) -> Result<()> {
        let state = self.meta.grad_scaler.as_ref().ok_or_else(|| self.missing("GradScaler state"))?;
        scaler.load_state_dict(state).map_err(self.optim_err())
    }

    /// Restores torch's CPU and CUDA generator states.
    pub fn restore_rng(&self) -> Result<()> {
        let cpu = self.training.get("rng.cpu").ok_or_else(|| self.missing("generator state"))?;
        let cuda = (0..)
            .map_while(|i| self.training.get(&format!("rng.cuda.{i}")))
            .map(Tensor::shallow_clone)
            .collect();
        set_torch_rng_state(&TorchRngState { cpu: cpu.shallow_clone(), cuda })
            .map_err(|e| CheckpointError::Torch { path: self.dir.clone(), message: e.to_string() })
    }

    /// Restores everything given: model, then optimizer, scheduler, GradScaler and generator
    /// states where both the checkpoint and the caller have them. Returns the progress to
    /// continue from.
    pub fn restore(
        &mut self,
        model: &dyn Module,
        optimizer: Option<&mut dyn Optimizer>,
        scheduler: Option<&mut dyn LrScheduler>,
        grad_scaler: Option<&mut GradScaler>,
    ) -> Result<Progress> {
        self.restore_model(model)?;
        if let Some(o) = optimizer {
            self.restore_optimizer(o)?;
        }
        if let Some(s) = scheduler {
            self.restore_scheduler(s)?;
        }
        if let Some(g) = grad_scaler {
            self.restore_grad_scaler(g)?;
        }
        if self.meta.has_rng {
            self.restore_rng()?;
        }
        Ok(self.meta.progress)
    }
}

/// Writes the weights of checkpoint `dir` alone to `out` (a safetensors file PyTorch loads with
/// `model.load_state_dict(safetensors.torch.load_file(out))`): the inference artefact, without
/// optimizer state. Verified on read, written through a temporary file and a rename.
///
/// # Errors
/// Anything [`Checkpoint::load`] reports, and [`CheckpointError::Io`] naming `out` (never the
/// temporary file) when it cannot be written, e.g. because its folder does not exist.
pub fn export_weights(dir: impl AsRef<Path>, out: impl AsRef<Path>) -> Result<()> {
    let checkpoint = Checkpoint::load(dir)?;
    let out = out.as_ref();
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        let error = std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("the folder {} does not exist", parent.display()),
        );
        return Err(CheckpointError::Io { path: out.to_path_buf(), error });
    }
    let tmp = out.with_extension("safetensors.tmp");
    let written = write_tensors(&tmp, checkpoint.model_state())
        .and_then(|(file, _)| file.sync_all().map_err(io(&tmp)))
        .and_then(|()| fs::rename(&tmp, out).map_err(io(out)));
    written.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        match e {
            CheckpointError::Io { error, .. } => CheckpointError::Io { path: out.to_path_buf(), error },
            CheckpointError::Torch { message, .. } => {
                CheckpointError::Torch { path: out.to_path_buf(), message }
            }
            other => other,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/dev/full` fails every write with ENOSPC, as a full disk does.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_full_disk_is_an_io_error_in_words_naming_the_file_once() {
        let tensors = vec![("w".to_string(), Tensor::from_slice(&[1f32; 64]))];
        let err = write_tensors(Path::new("/dev/full"), &tensors).unwrap_err();
        assert!(matches!(err, CheckpointError::Io { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("No space left on device"), "{text}");
        assert_eq!(text.matches("/dev/full").count(), 1, "{text}");
        assert!(!text.contains("IoError") && !text.contains("StorageFull"), "no Debug formatting: {text}");
        assert!(std::error::Error::source(&err).is_none(), "the OS error is not repeated as a source");
    }
}
