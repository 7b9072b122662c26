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
/// mixed image, ties to the lower index as `argmax` breaks them; in the Trainer, Mixup/CutMix
/// batches count against the labels before mixing instead, see
/// [`BatchContext::set_metric_target`](crate::BatchContext::set_metric_target)); the model returns logits
/// `[N, C]`. Metrics: accuracy when training; accuracy and top-k when validating; and
/// the confusion matrix too when testing. The best checkpoint is the one of highest `val_acc`.
///
/// The training loss is the configured one (smoothing, class weights, or timm's binary
/// cross-entropy with [`with_bce`](Self::with_bce)); validation and test losses are plain
/// cross-entropy on the hard labels, as timm validates (`validate_loss_fn =
/// nn.CrossEntropyLoss()`), so `val_loss` is the same quantity whatever the training recipe
/// and runs with and without smoothing, Mixup or BCE compare on one curve.
#[derive(Debug)]
pub struct Classification {
    num_classes: usize,
    top_k: usize,
    loss: CrossEntropyLoss,
    eval_loss: CrossEntropyLoss,
    label_smoothing: f64,
    /// The class weights, kept for the BCE (the cross-entropy holds its own copy).
    class_weights: Option<Tensor>,
    bce: Option<Bce>,
    calibration: bool,
}

/// timm's `BinaryCrossEntropy` as the training loss (see [`Classification::with_bce`]).
#[derive(Debug, Clone, Copy)]
struct Bce {
    target_threshold: Option<f64>,
}

impl Classification {
    /// A task over `num_classes` classes with plain cross-entropy and top-5 accuracy (clamped
    /// to the class count).
    pub fn new(num_classes: usize) -> Self {
        Classification {
            num_classes,
            top_k: 5,
            loss: CrossEntropyLoss::new(),
            eval_loss: CrossEntropyLoss::new(),
            label_smoothing: 0.0,
            class_weights: None,
            bce: None,
            calibration: false,
        }
    }

    /// Label smoothing of the training cross-entropy (`label_smoothing=`), default 0; with
    /// [`with_bce`](Self::with_bce), the smoothing of its one-hot targets.
    pub fn with_label_smoothing(mut self, smoothing: f64) -> Self {
        self.loss = self.loss.with_label_smoothing(smoothing);
        self.label_smoothing = smoothing;
        self
    }

    /// Trains with timm's `BinaryCrossEntropy` (`--bce-loss`) instead of cross-entropy:
    /// `binary_cross_entropy_with_logits` averaged over every logit, against the soft targets
    /// as given (Mixup/CutMix's, smoothing already folded in) or, for class indices, one-hot
    /// targets smoothed as timm smooths them (`off = s / C`, `on = 1 - s + off` for the
    /// [label smoothing](Self::with_label_smoothing) `s`); with `target_threshold = Some(t)`
    /// (timm's `--bce-target-thresh`) every target becomes `target > t` as 1 or 0.
    /// [Class weights](Self::with_class_weights) are timm's `weight=`: each class's column of
    /// the element-wise loss is scaled by its weight before the mean. Validation stays plain
    /// cross-entropy.
    ///
    /// timm uses this loss only with Mixup/CutMix or smoothing on and falls back to
    /// cross-entropy otherwise; here it is used whenever asked for (plain one-hot targets).
    pub fn with_bce(mut self, target_threshold: Option<f64>) -> Self {
        self.bce = Some(Bce { target_threshold });
        self
    }

    /// Per-class loss weights `[C]` (`weight=`) of the training loss, on the device the logits
    /// will be on: the cross-entropy's, or with [`with_bce`](Self::with_bce) timm's
    /// `BinaryCrossEntropy(weight=)`.
    pub fn with_class_weights(mut self, weights: Tensor) -> Self {
        self.class_weights = Some(weights.shallow_clone());
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
    fn loss_of(&self, logits: Tensor, y: &Tensor, stage: Stage) -> Result<StepOutput> {
        let logits = logits.to_kind(Kind::Float);
        let loss = match (stage, self.bce) {
            (Stage::Train, Some(bce)) => self.bce_loss(&logits, y, bce)?,
            (Stage::Train, None) => self.loss.forward(&logits, y)?,
            (Stage::Validate | Stage::Test, _) => self.eval_loss.forward(&logits, y)?,
        };
        // Soft targets (Mixup/CutMix): the metrics count against each sample's largest class.
        let target =
            if y.is_floating_point() && y.dim() == 2 { y.argmax(1, false) } else { y.shallow_clone() };
        Ok(StepOutput { loss, output: logits, target })
    }

    /// timm's `BinaryCrossEntropy.forward` (see [`Classification::with_bce`]).
    fn bce_loss(&self, logits: &Tensor, y: &Tensor, bce: Bce) -> Result<Tensor> {
        let classes = logits.size().last().copied().unwrap_or(0);
        let targets = if y.is_floating_point() && y.dim() == 2 {
            y.to_kind(Kind::Float)
        } else {
            let valid = y.dim() == 1 && y.size()[0] == logits.size()[0];
            let in_range = valid && {
                let (lo, hi) = (y.min().int64_value(&[]), y.max().int64_value(&[]));
                y.numel() == 0 || (lo >= 0 && hi < classes)
            };
            if !in_range {
                return Err(crate::error::TrainError::Task {
                    task: "Classification (BCE)".into(),
                    reason: format!(
                        "targets must be class indices in [0, {classes}) [{}] or probabilities [{}, {classes}], got {:?} {:?}",
                        logits.size()[0],
                        logits.size()[0],
                        y.size(),
                        y.kind()
                    ),
                });
            }
            let off = self.label_smoothing / classes as f64;
            let on = 1.0 - self.label_smoothing + off;
            logits.full_like(off).scatter_value(1, &y.to_kind(Kind::Int64).view([-1, 1]), on)
        };
        let targets = match bce.target_threshold {
            Some(t) => targets.gt(t).to_kind(Kind::Float),
            None => targets,
        };
        let weight = self.class_weights.as_ref().map(Tensor::shallow_clone);
        if let Some(w) = weight.as_ref().filter(|w| w.size() != [classes]) {
            return Err(crate::error::TrainError::Task {
                task: "Classification (BCE)".into(),
                reason: format!("class weights {:?} for {classes} classes: need one per class", w.size()),
            });
        }
        Ok(torchlight_nn::BCEWithLogitsLoss { weight, ..Default::default() }.forward(logits, &targets)?)
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
        self.loss_of(model.forward_t(x, stage.is_train()), y, stage)
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
        self.loss_of(model.forward_inputs(inputs, stage.is_train())?, y, stage)
    }

    fn metrics(&self, stage: Stage) -> Vec<Box<dyn Metric>> {
        self.stage_metrics(stage)
    }

    fn monitor(&self) -> Monitor {
        Monitor::max("val_acc")
    }
}
