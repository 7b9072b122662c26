//! Resuming a run from a checkpoint folder: weights, optimizer, scheduler, GradScaler,
//! generator states, the loop's position and history, the partial metrics of a mid-epoch save,
//! and every callback's JSON and tensor state.

use super::run::Run;
use super::AsDynModule;
use crate::callback::callback_tensor_key;
use crate::error::{Result, TrainError};
use crate::record::history_from_json;
use std::collections::BTreeMap;
use std::path::Path;
use tch::Tensor;
use torchlight_checkpoint::Checkpoint;
use torchlight_optim::{GradScaler, LrScheduler, ReduceLROnPlateauState};

impl<M: AsDynModule + ?Sized, T: ?Sized> Run<'_, M, T> {
    /// Loads `path` into the model, optimizer, scheduler (unless the Trainer starts it
    /// afresh), GradScaler, the loop and the callbacks.
    pub(super) fn restore(&mut self, path: &Path) -> Result<()> {
        let mut checkpoint = Checkpoint::load(path)?;
        let trainer = &mut *self.trainer;
        let scheduler = match trainer.scheduler.as_mut() {
            Some((s, _)) if trainer.restore_scheduler => Some(&mut **s as &mut dyn LrScheduler),
            _ => None,
        };
        let scaler: Option<&mut GradScaler> =
            checkpoint.meta.grad_scaler.is_some().then_some(self.runner.scaler_mut());
        let progress =
            checkpoint.restore(self.model.as_dyn(), Some(&mut *self.optimizer), scheduler, scaler)?;
        // The optimizer's lrs come back as they were saved: the schedule's at the saved step. A
        // schedule built anew for this resume (more epochs, continued or restarted) has others
        // at its position, which the optimizer takes now, so the first added step trains at the
        // new schedule's lr and not at the finished one's last (0 after a cosine). For the
        // schedule the run was saved with they are the same values.
        if let Some((s, _)) = trainer.scheduler.as_mut() {
            let at = s.last_epoch();
            s.step_to(at, &mut *self.optimizer)?;
        }
        let saved = &checkpoint.meta.loop_state;
        if let Some(history) = saved.get("history") {
            self.history = history_from_json(history)?;
        }
        if let Some(p) = trainer.plateau.as_mut().filter(|_| trainer.restore_scheduler) {
            let state = saved.get("plateau").ok_or_else(|| TrainError::State {
                what: "ReduceLROnPlateau".into(),
                reason: format!(
                    "{} holds no plateau scheduler state (it was saved by a run without one): resume \
                     with restore_scheduler(false) to start it afresh",
                    checkpoint.dir.display()
                ),
            })?;
            let state: ReduceLROnPlateauState =
                serde_json::from_value(state.clone()).map_err(|e| TrainError::State {
                    what: "ReduceLROnPlateau".into(),
                    reason: format!("{}: loop_state.plateau: {e}", checkpoint.dir.display()),
                })?;
            p.scheduler.load_state_dict(&state);
        }
        let mut tensors: BTreeMap<String, Tensor> = checkpoint.loop_tensors().into_iter().collect();
        let json_states = saved.get("callbacks").and_then(|c| c.as_object());
        let tensor_keys = saved.get("callback_tensors").and_then(|c| c.as_object());
        for c in &mut trainer.callbacks {
            let name = c.name();
            if let Some(s) = json_states.and_then(|states| states.get(&name)) {
                c.load_state_dict(s)?;
            }
            let Some(keys) = tensor_keys.and_then(|k| k.get(&name)).and_then(|k| k.as_array()) else {
                continue;
            };
            let mut own = Vec::with_capacity(keys.len());
            for key in keys {
                let key = key.as_str().ok_or_else(|| TrainError::State {
                    what: format!("callback `{name}`"),
                    reason: format!("a tensor key is not text: {key}"),
                })?;
                let tensor =
                    tensors.remove(&callback_tensor_key(&name, key)).ok_or_else(|| TrainError::State {
                        what: format!("callback `{name}`"),
                        reason: format!(
                            "the checkpoint lists its tensor `{key}` but {} does not hold it",
                            checkpoint.dir.display()
                        ),
                    })?;
                own.push((key.to_string(), tensor));
            }
            c.load_tensor_state(own)?;
        }
        self.position.epoch = progress.epoch;
        self.position.global_step = progress.global_step;
        self.position.batch = progress.batch;
        // The saved partial metrics are the world's (reduced over the ranks before the save):
        // rank 0 takes them, the other ranks count from the resume on, and the epoch's reduce
        // adds them up.
        if progress.batch > 0 && trainer.is_main() {
            let partial: Vec<(String, Tensor)> = tensors
                .into_iter()
                .filter_map(|(k, t)| k.strip_prefix("train_metrics.").map(|k| (k.to_string(), t)))
                .collect();
            self.metrics.load_state(&partial)?;
        }
        let at = if progress.batch > 0 {
            format!("epoch {}, batch {} of {}", progress.epoch + 1, progress.batch, self.position.batches)
        } else {
            format!("after epoch {}", progress.epoch)
        };
        trainer.progress.line(&format!("resuming from {} at {at}", checkpoint.dir.display()));
        Ok(())
    }
}
