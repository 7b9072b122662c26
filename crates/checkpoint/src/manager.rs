//! Retention for a run's checkpoints: `last` every epoch, `best` by a metric, and optionally
//! the last N epochs (`epoch_0007`).

use crate::atomic::{clean_leftovers, finish_removals, remove, Staging};
use crate::checkpoint::{save, Checkpoint, Snapshot};
use crate::error::{io, Result};
use crate::meta::{Metric, MetricMode};
use std::fs;
use std::path::{Path, PathBuf};

/// Keeps a run's `checkpoints/` folder: `last`, `best`, and the last `keep_epochs` epochs.
#[derive(Debug)]
pub struct CheckpointManager {
    root: PathBuf,
    metric: String,
    mode: MetricMode,
    keep_epochs: usize,
    best: Option<Metric>,
    leftovers: Vec<PathBuf>,
}

/// What [`CheckpointManager::save`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    /// Whether this save became the new `best`.
    pub best: bool,
    /// Epoch folders removed by retention.
    pub removed: Vec<PathBuf>,
}

impl CheckpointManager {
    /// A manager for `root` choosing `best` by `metric` (`"val_acc"`, [`MetricMode::Max`]).
    /// Picks up the best metric of an existing `best` checkpoint, so a resumed run keeps it.
    ///
    /// Folders a killed run left half-written or half-deleted in `root` are deleted first
    /// (see [`CheckpointManager::leftovers_removed`]); complete checkpoints are never touched.
    /// That clean-up is best effort: a leftover that cannot be deleted stays, hidden, and
    /// nothing reads it.
    pub fn new(root: impl Into<PathBuf>, metric: impl Into<String>, mode: MetricMode) -> Self {
        let root = root.into();
        let leftovers = clean_leftovers(&root);
        let best = Checkpoint::load(root.join("best")).ok().and_then(|c| c.meta.metric);
        CheckpointManager { root, metric: metric.into(), mode, keep_epochs: 0, best, leftovers }
    }

    /// The folders [`CheckpointManager::new`] deleted: what a killed run left aside while
    /// saving or deleting a checkpoint.
    pub fn leftovers_removed(&self) -> &[PathBuf] {
        &self.leftovers
    }

    /// Also keep the last `n` epochs as `epoch_NNNN` (0, the default, keeps none).
    pub fn keep_epochs(mut self, n: usize) -> Self {
        self.keep_epochs = n;
        self
    }

    /// The folder of `last`.
    pub fn last(&self) -> PathBuf {
        self.root.join("last")
    }

    /// The folder of `best`.
    pub fn best(&self) -> PathBuf {
        self.root.join("best")
    }

    /// The best metric so far.
    pub fn best_metric(&self) -> Option<&Metric> {
        self.best.as_ref()
    }

    /// Saves `snapshot` (made after epoch `snapshot.progress.epoch`) with this epoch's metric
    /// value: always as `last`, as `best` when the metric improves, and as an epoch folder when
    /// keeping epochs. `best` and epoch folders are copies of `last`, sharing no file with it.
    /// Epoch folders beyond the last `keep_epochs` are deleted so that a crash leaves each
    /// either complete or gone, never half-deleted.
    pub fn save(&mut self, snapshot: Snapshot<'_>, value: f64) -> Result<Saved> {
        let epoch = snapshot.progress.epoch;
        let metric = Metric { name: self.metric.clone(), value, mode: self.mode, epoch };
        let improves = self.mode.improves(value, self.best.as_ref().map(|m| m.value));
        let best = if improves { Some(metric.clone()) } else { self.best.clone() };
        let snapshot = Snapshot { metric: Some(metric), best: best.clone(), ..snapshot };
        save(self.last(), &snapshot)?;
        self.best = best;
        if improves {
            copy_checkpoint(&self.last(), &self.best())?;
        }
        let mut removed = Vec::new();
        if self.keep_epochs > 0 {
            copy_checkpoint(&self.last(), &self.root.join(format!("epoch_{epoch:04}")))?;
            let mut epochs: Vec<PathBuf> = fs::read_dir(&self.root)
                .map_err(io(&self.root))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("epoch_")))
                .collect();
            epochs.sort();
            let excess = epochs.len().saturating_sub(self.keep_epochs);
            for old in epochs.into_iter().take(excess) {
                remove(&old)?;
                removed.push(old);
            }
        }
        // The replaced versions were deleting in the background meanwhile; a caller sees
        // the folder as it will stay.
        finish_removals();
        Ok(Saved { best: improves, removed })
    }
}

impl CheckpointManager {
    /// Saves `snapshot` as `last` only, with no metric (a mid-epoch or interrupt save): `best`
    /// and the epoch folders are left as they are, and the best metric so far is recorded.
    pub fn save_last(&mut self, snapshot: Snapshot<'_>) -> Result<()> {
        let snapshot = Snapshot { metric: None, best: self.best.clone(), ..snapshot };
        save(self.last(), &snapshot)?;
        finish_removals();
        Ok(())
    }
}

/// Makes `to` an independent copy of the checkpoint folder `from`, atomically: its files are
/// copied into a staging folder, synced, and the folder renamed into place (a kill leaves the
/// old `to` or the new one). Copies, not hard links, so that a file damaged on disk or
/// overwritten in place damages one checkpoint, never `best` and `last` together. `fs::copy`
/// is `copy_file_range` on Linux, which a copy-on-write filesystem (Btrfs, XFS) may turn into
/// a clone sharing the blocks until one is written.
fn copy_checkpoint(from: &Path, to: &Path) -> Result<()> {
    let staging = Staging::new(to)?;
    for entry in fs::read_dir(from).map_err(io(from))? {
        let src = entry.map_err(io(from))?.path();
        let dst = staging.dir.join(src.file_name().expect("a file in a folder has a name"));
        fs::copy(&src, &dst).map_err(io(&dst))?;
    }
    staging.commit()
}
