//! `BackboneFinetuning`: the classic two-stage fine-tune, the backbone frozen for the first
//! epochs and trained with the head after.

use crate::callback::{Callback, Context};
use crate::error::{Result, TrainError};
use torchlight_nn::{count_parameters, freeze_all_but, unfreeze};

/// Freezes every parameter outside the head (those whose `state_dict` key starts with
/// `head`, e.g. `fc.` for torchvision's ResNets) for epochs `1..=freeze_epochs`, then
/// unfreezes the whole model, checking that the trainable count grew. Optimizers skip
/// parameters without gradients, so nothing is rebuilt. The state follows from the epoch, so
/// a resumed run (mid-epoch too) is frozen exactly when the uninterrupted one was.
#[derive(Debug)]
pub struct BackboneFinetuning {
    freeze_epochs: u64,
    head: String,
}

impl BackboneFinetuning {
    /// Trains only `head` for `freeze_epochs` epochs.
    pub fn new(freeze_epochs: u64, head: impl Into<String>) -> Self {
        BackboneFinetuning { freeze_epochs, head: head.into() }
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
            if freeze_all_but(ctx.model(), &self.head) > 0 {
                ctx.progress.line(&format!(
                    "backbone frozen for epochs 1-{}: {} of {} parameters train",
                    self.freeze_epochs,
                    count_parameters(ctx.model()).trainable,
                    before.total
                ));
            }
        } else if before.trainable < before.total {
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
