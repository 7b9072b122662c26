//! Evaluating a classifier on a loader of the recipe, as `torchlight eval` does: through the
//! Trainer's one evaluation loop, read back as a [`MetricsSummary`], optionally with the
//! logits kept for calibration ([`evaluate_with_logits`]).

use super::data::Loader;
use crate::config::TrainConfig;
use crate::error::Result;
use tch::{Device, Tensor};
use torchlight_nn::Module;
use torchlight_train::{
    Calibration, Classification, MetricSet, MetricsSummary, Progress, Stage, StepConfig, TrainError,
};

/// Runs a classifier over `loader` in evaluation mode (no-grad, BatchNorm's running
/// statistics, no dropout) and returns loss, top-1/top-k accuracy and the confusion matrix.
/// `config.train.amp` and `config.train.top_k` apply.
pub fn evaluate(
    model: &dyn Module,
    loader: &mut Loader,
    device: Device,
    config: &TrainConfig,
    num_classes: usize,
    progress: &Progress,
) -> Result<MetricsSummary> {
    let metrics = run(model, loader, device, config, num_classes, false, progress)?;
    Ok(MetricsSummary::from_metrics(&metrics)?)
}

/// What [`evaluate_with_logits`] returns: the summary and every image's logits and label.
#[derive(Debug)]
pub struct Evaluated {
    /// Loss, accuracies and the confusion matrix, as [`evaluate`] returns them.
    pub summary: MetricsSummary,
    /// The logits `[N, C]` (`f32`, CPU), in the loader's order.
    pub logits: Tensor,
    /// The labels `[N]` (`i64`, CPU).
    pub labels: Tensor,
}

/// [`evaluate`], also keeping the logits and labels (for calibration: ECE, temperature
/// scaling). The loop and the logits are those of [`evaluate`].
pub fn evaluate_with_logits(
    model: &dyn Module,
    loader: &mut Loader,
    device: Device,
    config: &TrainConfig,
    num_classes: usize,
    progress: &Progress,
) -> Result<Evaluated> {
    let metrics = run(model, loader, device, config, num_classes, true, progress)?;
    Evaluated::from_metrics(&metrics, "images")
}

impl Evaluated {
    /// The summary and the logits and labels the `Calibration` metric of a test stage kept
    /// (an error saying the data held no `unit`, images or documents, when it kept none).
    pub(crate) fn from_metrics(metrics: &MetricSet, unit: &str) -> Result<Self> {
        let kept = metrics.find::<Calibration>().and_then(|c| Some((c.logits()?, c.labels()?)));
        let (logits, labels) = kept.ok_or_else(|| TrainError::Metric {
            metric: "calibration".into(),
            reason: format!("the evaluated data held no {unit}"),
        })?;
        Ok(Evaluated { summary: MetricsSummary::from_metrics(metrics)?, logits, labels })
    }
}

fn run(
    model: &dyn Module,
    loader: &mut Loader,
    device: Device,
    config: &TrainConfig,
    num_classes: usize,
    calibration: bool,
    progress: &Progress,
) -> Result<MetricSet> {
    let step = StepConfig { amp: config.train.amp, ..StepConfig::default() };
    let task = Classification::new(num_classes).with_top_k(config.train.top_k).with_calibration(calibration);
    Ok(torchlight_train::evaluate(model, &task, loader, device, &step, Stage::Test, progress)?)
}
