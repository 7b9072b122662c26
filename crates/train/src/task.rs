//! `Task`: what a training step computes for a model and a batch (its loss and what its
//! metrics read), and which metric picks the best checkpoint. The built-in tasks are in
//! `crate::tasks`; a task of your own implements this trait.

use crate::error::Result;
use crate::metrics::Metric;
use tch::Tensor;
use torchlight_checkpoint::MetricMode;

/// Which loop a step belongs to (Lightning's `training_step` / `validation_step` /
/// `test_step`). Training steps run the model in training mode (`forward_t(.., true)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// A training step: gradients on, dropout and BatchNorm's batch statistics on.
    Train,
    /// A validation step: no gradients, evaluation mode.
    Validate,
    /// A test step: as validation, on the held-out split.
    Test,
}

impl Stage {
    /// Whether the model runs in training mode.
    pub fn is_train(self) -> bool {
        self == Stage::Train
    }

    /// The prefix of this stage's metric names in logs (`train`, `val`, `test`).
    pub fn prefix(self) -> &'static str {
        match self {
            Stage::Train => "train",
            Stage::Validate => "val",
            Stage::Test => "test",
        }
    }
}

/// What one step computed.
#[derive(Debug)]
pub struct StepOutput {
    /// The batch's mean loss, a float scalar with its autograd graph (for training steps).
    pub loss: Tensor,
    /// What the task's metrics read as their "output" (logits, predictions).
    pub output: Tensor,
    /// What the metrics read as their "target" (class indices, 0/1 labels, values).
    pub target: Tensor,
}

impl StepOutput {
    /// The same output with every tensor detached from the autograd graph.
    pub fn detach(&self) -> StepOutput {
        StepOutput { loss: self.loss.detach(), output: self.output.detach(), target: self.target.detach() }
    }
}

/// The metric that picks the best checkpoint and drives early stopping, by its logged name
/// (`val_acc`, `val_loss`, `train_loss`), and whether larger or smaller is better.
#[derive(Debug, Clone, PartialEq)]
pub struct Monitor {
    /// The logged name: the stage prefix and the metric's name.
    pub name: String,
    /// Larger (accuracy-like) or smaller (loss-like) is better.
    pub mode: MetricMode,
}

impl Monitor {
    /// A metric where larger is better.
    pub fn max(name: impl Into<String>) -> Self {
        Monitor { name: name.into(), mode: MetricMode::Max }
    }

    /// A metric where smaller is better.
    pub fn min(name: impl Into<String>) -> Self {
        Monitor { name: name.into(), mode: MetricMode::Min }
    }
}

/// A learning problem: how a model `M` turns a batch `B` into a loss and metric inputs
/// (Lightning's `training_step` / `validation_step`, burn's `TrainStep` / `ValidStep`).
///
/// The Trainer owns everything around the step (device placement, autocast, gradient scaling,
/// accumulation, clipping, guards, checkpoints); a task only says what to compute. `step` runs
/// under the Trainer's autocast when AMP is on; return a float32 loss (cast the model's output
/// with `.to_kind(Kind::Float)` before the loss, as the built-in tasks do).
pub trait Task<M: ?Sized, B> {
    /// Runs `model` on `batch` in the mode of `stage` (`forward_t(x, stage.is_train())`) and
    /// returns the batch's mean loss with the output and target the metrics read.
    fn step(&self, model: &M, batch: &B, stage: Stage) -> Result<StepOutput>;

    /// Fresh metrics for one epoch of `stage` (the mean loss is always tracked besides them).
    fn metrics(&self, stage: Stage) -> Vec<Box<dyn Metric>> {
        let _ = stage;
        Vec::new()
    }

    /// The metric that picks the best checkpoint; `val_loss` (smaller is better) by default.
    fn monitor(&self) -> Monitor {
        Monitor::min("val_loss")
    }
}
