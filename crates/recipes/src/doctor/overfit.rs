//! Stage 3 of the doctor: overfitting one batch, through the real training step.

use super::{step_config, DoctorOptions, Finding, Status};
use crate::config::{TaskKind, TrainConfig};
use crate::error::Result;
use crate::optimizer::build_optimizer;
use serde_json::json;
use torchlight_nn::count_parameters;
use torchlight_train::{AsDynModule, Batch, Classification, StepConfig, StepRunner, Task};

/// Stage 3: trains `model` on the one `batch` for `options.overfit_steps` steps with the
/// configured optimizer (head under `head`) and the training step `torchlight train` runs
/// (AMP, clipping; one batch per step); PASS once the loss drops below `options.overfit_loss`,
/// WARN (raise the lr) when it at least halved without getting there, FAIL otherwise.
/// Any model and batch the classification task takes: an image model (`dyn Module`) on
/// `(x, y)`, a text model (a `MultiInput`) on `(Inputs { ids, lengths }, y)`.
pub fn overfit_batch<M, B>(
    model: &M,
    head: &str,
    batch: &B,
    config: &TrainConfig,
    options: &DoctorOptions,
) -> Result<Finding>
where
    M: AsDynModule + ?Sized,
    B: Batch,
    Classification: Task<M, B>,
{
    let count = count_parameters(model.as_dyn());
    if count.trainable == 0 {
        return Ok(Finding::new(
            3,
            "overfit_one_batch",
            Status::Fail,
            format!("no parameter trains (0 of {})", count.total),
        )
        .fix("unfreeze the model (model.freeze_epochs, unfreeze)"));
    }
    let mut optimizer = build_optimizer(config, model.as_dyn(), head)?;
    let device = batch.tensors().first().map_or(tch::Device::Cpu, |t| t.device());
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
    let (Some(&first), Some(&last)) = (losses.first(), losses.last()) else {
        return Ok(Finding::new(
            3,
            "overfit_one_batch",
            Status::Skip,
            "not run: 0 steps asked (--overfit-steps)",
        ));
    };
    // Halved but not at the target: the model learns the batch, only slowly (FastText at
    // AdamW's 1e-3), which is a WARN about the lr or the step count, not "cannot memorise".
    let slow = last.is_finite() && last < 0.5 * first;
    let status = if last < options.overfit_loss {
        Status::Pass
    } else if slow {
        Status::Warn
    } else {
        Status::Fail
    };
    let samples = if config.train.task == TaskKind::Text { "documents" } else { "images" };
    let fix = if slow {
        format!(
            "the loss is still falling: raise the lr (try optim.lr = {:.1e}) or give it more steps (--overfit-steps)",
            config.optim.lr * 10.0
        )
    } else {
        format!(
            "the model cannot memorise one batch: check that labels match {samples}, that gradients reach the weights, and the lr"
        )
    };
    Ok(Finding::new(
        3,
        "overfit_one_batch",
        status,
        format!(
            "loss {first:.4} -> {last:.4} in {} steps on {} {} (target < {})",
            losses.len(),
            batch.len(),
            samples,
            options.overfit_loss
        ),
    )
    .fix(fix)
    .data(json!({ "losses": losses })))
}
