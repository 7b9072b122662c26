//! Single-label classification: cross-entropy over logits `[N, C]` and class indices `[N]`.

use crate::error::Result;
use crate::metrics::{Accuracy, Calibration, ConfusionMatrixMetric, Metric, TopKAccuracy};
use crate::task::{Monitor, Stage, StepOutput, Task};
use tch::{Kind, Tensor};
use torchlight_nn::{CrossEntropyLoss, Inputs, Module, MultiInput};

/// Single-label classification (`nn.CrossEntropyLoss`, optionally with label smoothing and
/// class weights). Batches are `(inputs, targets)` with class indices `[N]`, or soft targets
/// `[N, C]` (class probabilities, as [`MixupCutMix`](crate::MixupCutMix) makes them: the loss
/// is then PyTorch's `cross_entropy` with probability targets, and accuracy and the confusion
/// matrix count each sample against its largest class, the label of the larger share of a
/// mixed image, ties to the lower index as `argmax` breaks them); the model returns logits
/// `[N, C]`. Metrics: accuracy when training; accuracy and top-k when validating; and
/// the confusion matrix too when testing. The best checkpoint is the one of highest `val_acc`.
#[derive(Debug)]
pub struct Classification {
    num_classes: usize,
    top_k: usize,
    loss: CrossEntropyLoss,
    calibration: bool,
}

impl Classification {
    /// A task over `num_classes` classes with plain cross-entropy and top-5 accuracy (clamped
    /// to the class count).
    pub fn new(num_classes: usize) -> Self {
        Classification { num_classes, top_k: 5, loss: CrossEntropyLoss::new(), calibration: false }
    }

    /// Label smoothing of the cross-entropy (`label_smoothing=`), default 0.
    pub fn with_label_smoothing(mut self, smoothing: f64) -> Self {
        self.loss = self.loss.with_label_smoothing(smoothing);
        self
    }

    /// Per-class loss weights `[C]` (`weight=`), on the device the logits will be on.
    pub fn with_class_weights(mut self, weights: Tensor) -> Self {
        self.loss = self.loss.with_weight(weights);
        self
    }

    /// The `k` of the top-k accuracy reported when validating (default 5).
    pub fn with_top_k(mut self, k: usize) -> Self {
        self.top_k = k.max(1);
        self
    }

    /// Also keeps the test stage's logits in a [`Calibration`] metric (`ece`, `mce`, `nll`,
    /// `brier`), for temperature scaling after evaluation; default off.
    pub fn with_calibration(mut self, on: bool) -> Self {
        self.calibration = on;
        self
    }

    /// The number of classes.
    pub fn num_classes(&self) -> usize {
        self.num_classes
    }
}

impl Classification {
    fn loss_of(&self, logits: Tensor, y: &Tensor) -> Result<StepOutput> {
        let logits = logits.to_kind(Kind::Float);
        let loss = self.loss.forward(&logits, y)?;
        // Soft targets (Mixup/CutMix): the metrics count against each sample's largest class.
        let target =
            if y.is_floating_point() && y.dim() == 2 { y.argmax(1, false) } else { y.shallow_clone() };
        Ok(StepOutput { loss, output: logits, target })
    }

    fn stage_metrics(&self, stage: Stage) -> Vec<Box<dyn Metric>> {
        let k = self.top_k.min(self.num_classes.max(1));
        match stage {
            Stage::Train => vec![Box::new(Accuracy::new())],
            Stage::Validate => vec![Box::new(Accuracy::new()), Box::new(TopKAccuracy::new(k))],
            Stage::Test => {
                let mut metrics: Vec<Box<dyn Metric>> = vec![
                    Box::new(Accuracy::new()),
                    Box::new(TopKAccuracy::new(k)),
                    Box::new(ConfusionMatrixMetric::new(self.num_classes.max(1))),
                ];
                if self.calibration {
                    metrics.push(Box::new(Calibration::new()));
                }
                metrics
            }
        }
    }
}

impl<M: Module + ?Sized> Task<M, (Tensor, Tensor)> for Classification {
    fn step(&self, model: &M, (x, y): &(Tensor, Tensor), stage: Stage) -> Result<StepOutput> {
        self.loss_of(model.forward_t(x, stage.is_train()), y)
    }

    fn metrics(&self, stage: Stage) -> Vec<Box<dyn Metric>> {
        self.stage_metrics(stage)
    }

    fn monitor(&self) -> Monitor {
        Monitor::max("val_acc")
    }
}

/// Models with several inputs (token ids and lengths, a mask): batches `(inputs, targets)`.
impl<M: MultiInput + ?Sized> Task<M, (Inputs, Tensor)> for Classification {
    fn step(&self, model: &M, (inputs, y): &(Inputs, Tensor), stage: Stage) -> Result<StepOutput> {
        self.loss_of(model.forward_inputs(inputs, stage.is_train())?, y)
    }

    fn metrics(&self, stage: Stage) -> Vec<Box<dyn Metric>> {
        self.stage_metrics(stage)
    }

    fn monitor(&self) -> Monitor {
        Monitor::max("val_acc")
    }
}
