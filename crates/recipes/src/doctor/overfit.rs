//! Stage 3 of the doctor: overfitting one batch, through the real training step.

use super::{step_config, DoctorOptions, Finding, Status};
use crate::config::TrainConfig;
use crate::error::Result;
use crate::optimizer::build_optimizer;
use serde_json::json;
use tch::Tensor;
use torchlight_nn::{count_parameters, Module};
use torchlight_train::{Classification, StepConfig, StepRunner};

/// Stage 3: trains `model` on the one batch `(x, y)` for `options.overfit_steps` steps with
/// the configured optimizer (head under `head`) and the training step `torchlight train` runs
/// (AMP, clipping; one batch per step); PASS once the loss drops below `options.overfit_loss`.
pub fn overfit_batch(
    model: &dyn Module,
    head: &str,
    batch: &(Tensor, Tensor),
    config: &TrainConfig,
    options: &DoctorOptions,
) -> Result<Finding> {
    let count = count_parameters(model);
    if count.trainable == 0 {
        return Ok(Finding::new(
            3,
            "overfit_one_batch",
            Status::Fail,
            format!("no parameter trains (0 of {})", count.total),
        )
        .fix("unfreeze the model (model.freeze_epochs, unfreeze)"));
    }
    let mut optimizer = build_optimizer(config, model, head)?;
    let device = batch.0.device();
    let mut runner = StepRunner::new(StepConfig { accumulation: 1, ..step_config(config) }, device)?;
    // Plain cross-entropy: label smoothing would keep the loss above the target.
    let task = Classification::new(config.model.num_classes.unwrap_or(2));
    let mut losses = Vec::new();
    for _ in 0..options.overfit_steps {
        let (loss, _) = runner.step(model, &task, batch, optimizer.as_mut(), true)?;
        let l = loss.double_value(&[]);
        losses.push(l);
        if !l.is_finite() || l < options.overfit_loss {
            break;
        }
    }
    let (first, last) = (losses[0], *losses.last().expect("at least one step"));
    let status = if last < options.overfit_loss { Status::Pass } else { Status::Fail };
    Ok(Finding::new(
        3,
        "overfit_one_batch",
        status,
        format!(
            "loss {first:.4} -> {last:.4} in {} steps on {} images (target < {})",
            losses.len(),
            batch.0.size()[0],
            options.overfit_loss
        ),
    )
    .fix("the model cannot memorise one batch: check that labels match images, that gradients reach the weights, and the lr")
    .data(json!({ "losses": losses })))
}
