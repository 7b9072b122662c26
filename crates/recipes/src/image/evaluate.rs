//! Evaluating a classifier on a loader of the recipe, as `torchlight eval` does: through the
//! Trainer's one evaluation loop, read back as a [`MetricsSummary`].

use super::data::Loader;
use crate::config::TrainConfig;
use crate::error::Result;
use tch::Device;
use torchlight_nn::Module;
use torchlight_train::{Classification, MetricsSummary, Progress, Stage, StepConfig};

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
    let step = StepConfig { amp: config.train.amp, ..StepConfig::default() };
    let task = Classification::new(num_classes).with_top_k(config.train.top_k);
    let metrics = torchlight_train::evaluate(model, &task, loader, device, &step, Stage::Test, progress)?;
    Ok(MetricsSummary::from_metrics(&metrics)?)
}
