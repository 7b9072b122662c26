//! Multi-label classification: independent sigmoid outputs, binary cross-entropy.

use crate::error::Result;
use crate::metrics::{MeanAveragePrecision, Metric, MultiLabelF1};
use crate::task::{Monitor, Stage, StepOutput, Task};
use tch::{Kind, Tensor};
use torchlight_nn::{BCEWithLogitsLoss, Module};

/// Multi-label classification (`nn.BCEWithLogitsLoss`): batches are `(inputs, targets)` with
/// targets `[N, L]` of 0/1 (any float or integer type); the model returns logits `[N, L]`.
/// Metrics: macro F1 at a probability threshold (default 0.5) when training; F1 and mean
/// average precision when validating and testing. The best checkpoint has the highest `val_map`.
#[derive(Debug, Default)]
pub struct MultiLabel {
    threshold: f64,
    loss: BCEWithLogitsLoss,
}

impl MultiLabel {
    /// The task with plain BCE and an F1 threshold of 0.5.
    pub fn new() -> Self {
        MultiLabel { threshold: 0.5, loss: BCEWithLogitsLoss::default() }
    }

    /// The probability above which a label counts as predicted for F1.
    pub fn with_threshold(mut self, threshold: f64) -> Self {
        self.threshold = threshold;
        self
    }

    /// Weights of positive examples per label `[L]` (`pos_weight=`), for rare labels.
    pub fn with_pos_weight(mut self, pos_weight: Tensor) -> Self {
        self.loss.pos_weight = Some(pos_weight);
        self
    }
}

impl<M: Module + ?Sized> Task<M, (Tensor, Tensor)> for MultiLabel {
    fn step(&self, model: &M, (x, y): &(Tensor, Tensor), stage: Stage) -> Result<StepOutput> {
        let logits = model.forward_t(x, stage.is_train()).to_kind(Kind::Float);
        let target = y.to_kind(Kind::Float);
        let loss = self.loss.forward(&logits, &target)?;
        Ok(StepOutput { loss, output: logits, target })
    }

    fn metrics(&self, stage: Stage) -> Vec<Box<dyn Metric>> {
        match stage {
            Stage::Train => vec![Box::new(MultiLabelF1::new(self.threshold))],
            Stage::Validate | Stage::Test => {
                vec![Box::new(MultiLabelF1::new(self.threshold)), Box::new(MeanAveragePrecision::new())]
            }
        }
    }

    fn monitor(&self) -> Monitor {
        Monitor::max("val_map")
    }
}
