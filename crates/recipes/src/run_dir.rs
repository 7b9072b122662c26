//! Run folders: `runs/exp_001`, `runs/exp_002`, ... claimed atomically, or reopened to resume.

use crate::config::TrainConfig;
use crate::error::{RecipeError, Result};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use tch::{Kind, Tensor};
use torchlight_train::Distributed;

/// The run folder of a new run, `fill`ed by the process that writes (its config, a text run's
/// tokenizer). Alone: the next `exp_NNN` under `config.train.out_dir`. As a rank of `world`:
/// rank 0 makes and fills it, the others learn its number once that is done (one small
/// all-reduce on the run's device) and open it (the output folder is shared, as with
/// torchrun); a failure on rank 0 fails every rank.
pub(crate) fn new_run_dir(
    config: &TrainConfig,
    world: Option<&dyn Distributed>,
    fill: impl FnOnce(&RunDir) -> Result<()>,
) -> Result<RunDir> {
    let parent = &config.train.out_dir;
    let Some(world) = world else {
        let run = RunDir::create_next(parent)?;
        fill(&run)?;
        return Ok(run);
    };
    let device = config.train.device_spec()?.resolve()?;
    let created =
        world.is_main().then(|| RunDir::create_next(parent).and_then(|run| fill(&run).map(|()| run)));
    let number = match &created {
        Some(Ok(run)) => run
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| run_number(n, "exp"))
            .and_then(|n| i64::try_from(n).ok())
            .unwrap_or(-1),
        Some(Err(_)) => -1,
        None => 0,
    };
    let shared = Tensor::from_slice(&[number]).to_kind(Kind::Int64).to_device(device);
    world.all_reduce_sum(&[shared.shallow_clone()])?;
    let number = shared.int64_value(&[0]);
    match created {
        Some(run) => run,
        None if number < 0 => Err(RecipeError::RunDir {
            path: parent.clone(),
            reason: "rank 0 could not make the run folder (its output says why)".into(),
        }),
        None => RunDir::open(parent.join(format!("exp_{number:03}"))),
    }
}

/// One run's folder and the names of what goes in it.
///
/// [`create_next`](Self::create_next) claims the next free `exp_NNN` under a parent folder
/// with a single `create_dir`, which the OS makes atomic: when two processes race for the
/// same number, one gets `AlreadyExists` and moves on to the next, so no two runs ever share a
/// folder. [`open`](Self::open) takes an existing folder back for `--resume`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// Claims `parent/exp_NNN` with NNN one more than the highest `exp_` number there (001 in
    /// an empty or missing parent), creating `parent` if needed.
    pub fn create_next(parent: impl AsRef<Path>) -> Result<Self> {
        Self::create_next_with_prefix(parent, "exp")
    }

    /// Like [`create_next`](Self::create_next) with folders named `<prefix>_NNN`.
    pub fn create_next_with_prefix(parent: impl AsRef<Path>, prefix: &str) -> Result<Self> {
        let parent = parent.as_ref();
        if let Some(file) = parent.ancestors().find(|p| p.is_file()) {
            return Err(RecipeError::RunDir {
                path: file.to_path_buf(),
                reason: format!(
                    "is a file, not a folder, so the run folders cannot go under {} (train.out_dir, --out)",
                    parent.display()
                ),
            });
        }
        std::fs::create_dir_all(parent).map_err(|e| RecipeError::io(parent, e))?;
        let mut next = highest_number(parent, prefix)? + 1;
        loop {
            let path = parent.join(format!("{prefix}_{next:03}"));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(RunDir { path }),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => next += 1,
                Err(e) => return Err(RecipeError::io(path, e)),
            }
        }
    }

    /// An existing run folder, to resume into. An error naming it when it is missing or not a
    /// folder.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => Ok(RunDir { path: path.to_path_buf() }),
            Ok(_) => Err(RecipeError::RunDir { path: path.to_path_buf(), reason: "is not a folder".into() }),
            Err(e) if e.kind() == ErrorKind::NotFound => Err(RecipeError::RunDir {
                path: path.to_path_buf(),
                reason: "no such run folder to resume".into(),
            }),
            Err(e) => Err(RecipeError::io(path, e)),
        }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` inside the folder.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    /// `config.toml`: the effective [`TrainConfig`](crate::TrainConfig).
    pub fn config_path(&self) -> PathBuf {
        self.join("config.toml")
    }

    /// `metrics.csv`: one row per epoch ([`CsvLogger`](torchlight_train::CsvLogger)).
    pub fn metrics_csv_path(&self) -> PathBuf {
        self.join("metrics.csv")
    }

    /// `curves.png`: loss and accuracy per epoch ([`plot_curves`](torchlight_train::plot_curves)).
    pub fn curves_path(&self) -> PathBuf {
        self.join("curves.png")
    }

    /// `confusion_matrix.png`: the test set's confusion matrix.
    pub fn confusion_matrix_path(&self) -> PathBuf {
        self.join("confusion_matrix.png")
    }

    /// `summary.json`: best and final numbers of the run.
    pub fn summary_path(&self) -> PathBuf {
        self.join("summary.json")
    }

    /// `checkpoints/`, created on first call.
    pub fn checkpoints_dir(&self) -> Result<PathBuf> {
        let dir = self.join("checkpoints");
        std::fs::create_dir_all(&dir).map_err(|e| RecipeError::io(&dir, e))?;
        Ok(dir)
    }
}

/// The highest N of folders named `<prefix>_N` in `parent` (0 when none).
fn highest_number(parent: &Path, prefix: &str) -> Result<u64> {
    let entries = std::fs::read_dir(parent).map_err(|e| RecipeError::io(parent, e))?;
    let mut highest = 0;
    for entry in entries {
        let entry = entry.map_err(|e| RecipeError::io(parent, e))?;
        let name = entry.file_name();
        let Some(number) = name.to_str().and_then(|n| run_number(n, prefix)) else { continue };
        highest = highest.max(number);
    }
    Ok(highest)
}

/// N when `name` is `<prefix>_N` with N all digits.
fn run_number(name: &str, prefix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?.strip_prefix('_')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_numbers_are_parsed_strictly() {
        assert_eq!(run_number("exp_007", "exp"), Some(7));
        assert_eq!(run_number("exp_1234", "exp"), Some(1234));
        assert_eq!(run_number("exp_", "exp"), None);
        assert_eq!(run_number("exp_01a", "exp"), None);
        assert_eq!(run_number("expx_01", "exp"), None);
        assert_eq!(run_number("other_01", "exp"), None);
    }
}
