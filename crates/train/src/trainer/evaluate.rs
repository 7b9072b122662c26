//! The evaluation loop, once: validation inside `fit`, [`Trainer::evaluate`](super::Trainer::evaluate)
//! and the free [`evaluate`] (what `torchlight eval` and the test split run) all go through
//! [`eval_loop`] and [`eval_step`].

use super::step::{StepConfig, StepRunner};
use super::AsDynModule;
use crate::batch::Batch;
use crate::error::Result;
use crate::metrics::MetricSet;
use crate::progress::Progress;
use crate::source::BatchSource;
use crate::task::{Stage, Task};
use tch::Device;
use torchlight_tensor::no_grad;

/// Every batch of one pass over `source`, on `device`, under no-grad, handed to `each` in
/// order (which runs [`eval_step`] and whatever else its loop does per batch).
pub(crate) fn eval_loop<B: Batch>(
    source: &mut dyn BatchSource<B>,
    device: Device,
    mut each: impl FnMut(&B) -> Result<()>,
) -> Result<()> {
    let _grad = no_grad();
    for batch in source.batches(0, 0) {
        each(&batch?.to_device(device))?;
    }
    Ok(())
}

/// One evaluation step: `task.step(model, batch, stage)` under the runner's autocast (what
/// training sees), its outputs into `metrics`.
pub(crate) fn eval_step<M, B, T>(
    model: &M,
    task: &T,
    batch: &B,
    stage: Stage,
    runner: &StepRunner,
    metrics: &mut MetricSet,
) -> Result<()>
where
    M: AsDynModule + ?Sized,
    T: Task<M, B> + ?Sized,
{
    let out = {
        let _amp = runner.autocast()?;
        task.step(model, batch, stage)?
    };
    metrics.update(&out.loss, &out.output, &out.target)
}

/// Runs `model` over every batch of `source` in evaluation mode (no-grad, autocast as `step`
/// says, `task.step(.., stage)`) with a progress bar, and returns the metrics of `stage`.
pub fn evaluate<M, B, T>(
    model: &M,
    task: &T,
    source: &mut dyn BatchSource<B>,
    device: Device,
    step: &StepConfig,
    stage: Stage,
    progress: &Progress,
) -> Result<MetricSet>
where
    M: AsDynModule + ?Sized,
    B: Batch,
    T: Task<M, B> + ?Sized,
{
    let runner = StepRunner::new(step.clone(), device)?;
    let mut metrics = MetricSet::new(task.metrics(stage));
    let bar = progress.bar(source.len() as u64, stage.prefix());
    eval_loop(source, device, |batch| {
        eval_step(model, task, batch, stage, &runner, &mut metrics)?;
        bar.inc(1);
        Ok(())
    })?;
    bar.finish_and_clear();
    Ok(metrics)
}
