//! What resuming a run folder means for every recipe: its config (held to the checkpoint's),
//! the changes a resume may make, and the `last` checkpoint to continue from.

use crate::card::ModelCard;
use crate::config::{ExtendSchedule, TrainConfig};
use crate::error::{RecipeError, Result};
use crate::run_dir::RunDir;
use std::path::{Path, PathBuf};
use torchlight_checkpoint::Checkpoint;
use torchlight_train::{Distributed, Progress};

/// The config keys a resumed run may change: how long it trains and where, not what it learns.
pub const RESUME_CHANGEABLE: &[&str] = &[
    "train.epochs",
    "train.device",
    "train.extend_schedule",
    "train.allow_nonfinite_val",
    "train.checkpoint_every_steps",
    "train.log_interval",
    "data.workers",
];

/// A run folder ready to continue: its effective config (rewritten with the changes), the
/// `last` checkpoint, where the lr schedule starts and whether the scheduler's state is restored
/// (not when a finished run's schedule restarts).
pub(crate) struct Resumed {
    pub config: TrainConfig,
    pub run: RunDir,
    pub last: PathBuf,
    pub schedule_start: u64,
    pub restore_scheduler: bool,
}

/// Opens `run_dir` for resume: reads its config and `last` checkpoint, refuses a hand edit or a
/// change outside [`RESUME_CHANGEABLE`], extends a finished run when `train.epochs` grows (as
/// the output says), and writes the effective config back (rank 0 of `world`).
pub(crate) fn prepare_resume(
    run_dir: &Path,
    changes: &[(String, String)],
    progress: &Progress,
    world: Option<&dyn Distributed>,
) -> Result<Resumed> {
    let main = world.is_none_or(|w| w.is_main());
    let run = RunDir::open(run_dir)?;
    let saved = TrainConfig::from_toml_file(run.config_path())?;
    let last = run.checkpoints_dir()?.join("last");
    if !last.exists() && torchlight_checkpoint::read_meta(&last).is_err() {
        return Err(RecipeError::RunDir {
            path: run.path().to_path_buf(),
            reason: format!(
                "there is no {} to resume from: training stopped before it saved one (at the end of the first epoch, or every train.checkpoint_every_steps); start the run again",
                last.display()
            ),
        });
    }
    let checkpoint = Checkpoint::load(&last)?;
    let card = ModelCard::from_checkpoint(&checkpoint)?;
    // The config the weights were trained with is the checkpoint's: a hand-edited
    // `config.toml` may change what `--set` may change on resume, and nothing else.
    if let Some((key, held, edited)) = first_unchangeable_change(&card.config, &saved) {
        return Err(RecipeError::RunDir {
            path: run.config_path(),
            reason: format!(
                "`{key}` is {edited} here but {held} in the checkpoint {} was trained with: a resumed run keeps its config; only {} may change: undo the edit, or start a new run to change it",
                last.display(),
                RESUME_CHANGEABLE.join(", ")
            ),
        });
    }
    let mut config = saved.clone();
    for (key, value) in changes {
        config.set(key, value)?;
    }
    check_changes(&saved, &config)?;
    config.validate()?;
    let position = checkpoint.meta.progress;
    drop(checkpoint);
    let (done, target) = (position.epoch, config.train.epochs as u64);
    if position.batch == 0 && done >= target {
        return Err(RecipeError::RunDir {
            path: run.path().to_path_buf(),
            reason: format!(
                "the run has already trained {done} epochs (train.epochs = {target}): to train more, resume with more epochs (torchlight train --resume {} --epochs {})",
                run.path().display(),
                done + 5
            ),
        });
    }
    let mut schedule_start = card.schedule_start;
    if target != saved.train.epochs as u64 {
        let kind = config.scheduler.kind();
        let how = if config.train.extend_schedule == ExtendSchedule::Restart && position.batch == 0 {
            schedule_start = done;
            format!(
                "the {kind} schedule restarts over epochs {}-{target} (train.extend_schedule = \"restart\")",
                done + 1
            )
        } else {
            format!(
                "the {kind} schedule is rebuilt for {target} epochs and continues from epoch {done} (set train.extend_schedule = \"restart\" for a fresh one)"
            )
        };
        progress.line(&format!("changing the run from {} to {target} epochs: {how}", saved.train.epochs));
    }
    if let Some(w) = world {
        // Every rank has read the saved config before rank 0 rewrites it.
        w.barrier()?;
    }
    if main {
        config.write_toml_file(run.config_path())?;
    }
    let restore_scheduler = schedule_start == card.schedule_start;
    Ok(Resumed { config, run, last, schedule_start, restore_scheduler })
}

/// Refuses a `--set` (or flag) on resume that changes a key outside [`RESUME_CHANGEABLE`].
fn check_changes(saved: &TrainConfig, config: &TrainConfig) -> Result<()> {
    match first_unchangeable_change(saved, config) {
        None => Ok(()),
        Some((key, before, value)) => Err(RecipeError::InvalidOverride {
            key,
            value,
            reason: format!(
                "a resumed run keeps its config (it has {before}); only {} may change: start a new run to change it",
                RESUME_CHANGEABLE.join(", ")
            ),
        }),
    }
}

/// The first key outside [`RESUME_CHANGEABLE`] whose value differs between `saved` and
/// `config`, with both values as TOML text (`no value` for an unset one).
fn first_unchangeable_change(saved: &TrainConfig, config: &TrainConfig) -> Option<(String, String, String)> {
    let (a, b) = (toml::Table::try_from(saved).ok()?, toml::Table::try_from(config).ok()?);
    let shown = |v: Option<&toml::Value>| v.map_or("no value".to_string(), |v| v.to_string());
    let sections: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for section in sections {
        let (sa, sb) = (a.get(section.as_str()), b.get(section.as_str()));
        let fields: std::collections::BTreeSet<&String> =
            [sa, sb].into_iter().flatten().filter_map(|t| t.as_table()).flat_map(|t| t.keys()).collect();
        for field in fields {
            let key = format!("{section}.{field}");
            let (before, after) = (sa.and_then(|s| s.get(field)), sb.and_then(|s| s.get(field)));
            if before != after && !RESUME_CHANGEABLE.contains(&key.as_str()) {
                return Some((key, shown(before), shown(after)));
            }
        }
    }
    None
}
