//! `BackboneFinetuning`: the classic two-stage fine-tune, the backbone frozen for the first
//! epochs and trained with the head after.

use crate::callback::{Callback, Context};
use crate::error::{Result, TrainError};
use torchlight_nn::{count_parameters, freeze_all_but, unfreeze, visit_modules_mut, BatchNorm2d};

/// Freezes every parameter outside the head (those whose `state_dict` key starts with
/// `head`, e.g. `fc.` for torchvision's ResNets) for epochs `1..=freeze_epochs`, then
/// unfreezes the whole model, checking that the trainable count grew. Optimizers skip
/// parameters without gradients, so nothing is rebuilt. The state follows from the epoch, so
/// a resumed run (mid-epoch too) is frozen exactly when the uninterrupted one was.
///
/// The frozen part's BatchNorms still update their running statistics while it is frozen (a
/// training forward), as Lightning's `BackboneFinetuning(train_bn=True)`, its default;
/// [`with_frozen_batch_norm`](Self::with_frozen_batch_norm) keeps them fixed too
/// (`train_bn=False`). BatchNorms frozen before (`torchlight_nn::freeze_batch_norm`, the
/// recipes' `model.freeze_bn`) stay frozen when the backbone thaws.
#[derive(Debug)]
pub struct BackboneFinetuning {
    freeze_epochs: u64,
    head: String,
    freeze_batch_norm: bool,
    /// Whether this callback froze the backbone (so the next epoch past the frozen ones thaws
    /// it), and the BatchNorms it froze with it.
    frozen: Option<Vec<String>>,
}

impl BackboneFinetuning {
    /// Trains only `head` for `freeze_epochs` epochs.
    pub fn new(freeze_epochs: u64, head: impl Into<String>) -> Self {
        BackboneFinetuning { freeze_epochs, head: head.into(), freeze_batch_norm: false, frozen: None }
    }

    /// Also keeps the BatchNorms outside the head fixed while the backbone is frozen (running
    /// statistics used, not updated), as Lightning's `train_bn=False`.
    pub fn with_frozen_batch_norm(mut self, freeze: bool) -> Self {
        self.freeze_batch_norm = freeze;
        self
    }

    /// Sets `frozen` on every BatchNorm outside the head that is not frozen already (or, to
    /// thaw, on those named), returning the paths it changed.
    fn set_batch_norms(&self, ctx: &mut Context<'_>, frozen: bool, only: &[String]) -> Vec<String> {
        let head = self.head.trim_end_matches('.');
        let mut changed = Vec::new();
        visit_modules_mut(ctx.model_mut(), &mut |path, m| {
            let Some(bn) = m.as_any_mut().downcast_mut::<BatchNorm2d>() else { return };
            let in_head = !head.is_empty() && (path == head || path.starts_with(&format!("{head}.")));
            let wanted = if frozen { !in_head && !bn.frozen } else { only.iter().any(|p| p == path) };
            if wanted {
                bn.frozen = frozen;
                changed.push(path.to_string());
            }
        });
        changed
    }
}

impl Callback for BackboneFinetuning {
    fn name(&self) -> String {
        "BackboneFinetuning".into()
    }

    fn on_train_epoch_start(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        if self.freeze_epochs == 0 {
            return Ok(());
        }
        let before = count_parameters(ctx.model());
        if ctx.position.epoch < self.freeze_epochs {
            if self.frozen.is_some() {
                return Ok(());
            }
            freeze_all_but(ctx.model(), &self.head);
            let batch_norms =
                if self.freeze_batch_norm { self.set_batch_norms(ctx, true, &[]) } else { Vec::new() };
            let statistics = if self.freeze_batch_norm {
                format!(", {} BatchNorms keep their statistics", batch_norms.len())
            } else {
                String::new()
            };
            ctx.progress.line(&format!(
                "backbone frozen for epochs 1-{}: {} of {} parameters train{statistics}",
                self.freeze_epochs,
                count_parameters(ctx.model()).trainable,
                before.total
            ));
            self.frozen = Some(batch_norms);
        } else if let Some(batch_norms) = self.frozen.take() {
            // Thawed first, so `unfreeze` gives their weight and bias back their gradients.
            self.set_batch_norms(ctx, false, &batch_norms);
            unfreeze(ctx.model(), "");
            let after = count_parameters(ctx.model()).trainable;
            if after <= before.trainable {
                return Err(TrainError::Training {
                    epoch: ctx.position.epoch + 1,
                    reason: format!("unfreezing left the trainable count at {after} of {}", before.total),
                });
            }
            ctx.progress.line(&format!(
                "epoch {}: backbone unfrozen, {} -> {after} trainable parameters",
                ctx.position.epoch + 1,
                before.trainable
            ));
        }
        Ok(())
    }
}
