//! Losses: `CrossEntropyLoss` (with target checking), `MSELoss`, `BCEWithLogitsLoss`.
//!
//! The arithmetic is libtorch's own kernels (`torch.nn.functional`'s); what these add is
//! PyTorch's module-style configuration and errors that name a bad label instead of a device
//! assert or an abort deep inside libtorch.

use crate::error::{NnError, Result};
use tch::{Kind, Tensor};

/// How a loss reduces over the batch (`reduction=`), PyTorch's default `Mean`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reduction {
    /// The mean (for class-weighted cross-entropy: weighted by the targets' weights).
    #[default]
    Mean,
    /// The sum.
    Sum,
    /// One loss per element.
    None,
}

impl From<Reduction> for tch::Reduction {
    fn from(r: Reduction) -> Self {
        match r {
            Reduction::Mean => tch::Reduction::Mean,
            Reduction::Sum => tch::Reduction::Sum,
            Reduction::None => tch::Reduction::None,
        }
    }
}

/// `torch.nn.CrossEntropyLoss`: log-softmax over dim 1 plus negative log-likelihood.
/// Logits `[N, C]` (or `[N, C, d...]`), targets int64 class indices `[N]` (`[N, d...]`), or
/// class probabilities of the logits' shape (floating point, e.g. Mixup/CutMix's soft
/// targets), which PyTorch's `cross_entropy` takes too: `-sum(target * log_softmax)` per
/// sample, label smoothing applied to the probabilities (`target * (1 - s) + s / C`), weights
/// per class, the mean over the samples (`ignore_index` does not apply).
#[derive(Debug)]
pub struct CrossEntropyLoss {
    /// Reduction (default mean).
    pub reduction: Reduction,
    /// Label smoothing in `[0, 1)` (default 0).
    pub label_smoothing: f64,
    /// Per-class weights `[C]` (default none).
    pub weight: Option<Tensor>,
    /// A target value that contributes nothing (default -100, PyTorch's).
    pub ignore_index: i64,
    /// Check targets before the kernel (default on): costs one small device-to-host read.
    pub check_targets: bool,
}

impl Default for CrossEntropyLoss {
    fn default() -> Self {
        CrossEntropyLoss {
            reduction: Reduction::Mean,
            label_smoothing: 0.0,
            weight: None,
            ignore_index: -100,
            check_targets: true,
        }
    }
}

impl CrossEntropyLoss {
    /// The loss with PyTorch's defaults.
    pub fn new() -> Self {
        Self::default()
    }
    /// With a reduction.
    pub fn with_reduction(mut self, reduction: Reduction) -> Self {
        self.reduction = reduction;
        self
    }
    /// With label smoothing.
    pub fn with_label_smoothing(mut self, label_smoothing: f64) -> Self {
        self.label_smoothing = label_smoothing;
        self
    }
    /// With per-class weights `[C]`.
    pub fn with_weight(mut self, weight: Tensor) -> Self {
        self.weight = Some(weight);
        self
    }
    /// With or without the target check.
    pub fn with_check_targets(mut self, check: bool) -> Self {
        self.check_targets = check;
        self
    }

    /// The loss of `logits` against class-index `targets` (or class probabilities of the
    /// logits' shape); an error naming the first target outside `[0, C)` (other than
    /// `ignore_index`), or mismatched batch sizes.
    pub fn forward(&self, logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
        let shape = logits.size();
        if shape.len() < 2 {
            return Err(NnError::Shape {
                what: "CrossEntropyLoss",
                detail: format!("logits {shape:?} need at least 2 dims [N, C]"),
            });
        }
        if targets.is_floating_point() && targets.size() == shape {
            // Probability targets: libtorch's own kernel for them (no index to check).
            return Ok(logits.cross_entropy_loss(
                &targets.to_kind(logits.kind()),
                self.weight.as_ref(),
                self.reduction.into(),
                self.ignore_index,
                self.label_smoothing,
            ));
        }
        let num_classes = shape[1];
        let mut expected = shape.clone();
        expected.remove(1);
        if targets.size() != expected {
            return Err(NnError::Shape {
                what: "CrossEntropyLoss",
                detail: format!(
                    "targets {:?} do not match logits {shape:?} (expected {expected:?})",
                    targets.size()
                ),
            });
        }
        if !matches!(targets.kind(), Kind::Int64 | Kind::Int | Kind::Int16 | Kind::Int8 | Kind::Uint8) {
            return Err(NnError::Shape {
                what: "CrossEntropyLoss",
                detail: format!(
                    "targets must be integer class indices, or probabilities of the logits' shape, got {:?}",
                    targets.kind()
                ),
            });
        }
        let targets = targets.to_kind(Kind::Int64);
        if self.check_targets {
            check_targets(&targets, num_classes, self.ignore_index)?;
        }
        Ok(logits.cross_entropy_loss(
            &targets,
            self.weight.as_ref(),
            self.reduction.into(),
            self.ignore_index,
            self.label_smoothing,
        ))
    }
}

fn check_targets(targets: &Tensor, num_classes: i64, ignore_index: i64) -> Result<()> {
    let _guard = torchlight_tensor::no_grad();
    let flat = targets.flatten(0, -1);
    let bad = flat.lt(0).logical_or(&flat.ge(num_classes)).logical_and(&flat.ne(ignore_index));
    if bad.any().int64_value(&[]) == 0 {
        return Ok(());
    }
    let position = bad.to_kind(Kind::Int64).argmax(0, false).int64_value(&[]);
    Err(NnError::InvalidTarget { value: flat.int64_value(&[position]), position, num_classes })
}

fn same_shape(what: &'static str, input: &Tensor, target: &Tensor) -> Result<()> {
    if input.size() == target.size() {
        Ok(())
    } else {
        Err(NnError::Shape {
            what,
            detail: format!(
                "input {:?} and target {:?} must have the same shape",
                input.size(),
                target.size()
            ),
        })
    }
}

/// `torch.nn.MSELoss`: squared error.
#[derive(Debug, Clone, Copy, Default)]
pub struct MSELoss {
    /// Reduction (default mean).
    pub reduction: Reduction,
}

impl MSELoss {
    /// The loss of `input` against `target` (same shape).
    pub fn forward(&self, input: &Tensor, target: &Tensor) -> Result<Tensor> {
        same_shape("MSELoss", input, target)?;
        Ok(input.mse_loss(target, self.reduction.into()))
    }
}

/// `torch.nn.BCEWithLogitsLoss`: sigmoid + binary cross-entropy, numerically stable.
#[derive(Debug, Default)]
pub struct BCEWithLogitsLoss {
    /// Reduction (default mean).
    pub reduction: Reduction,
    /// Per-element rescaling weight, broadcast to the input.
    pub weight: Option<Tensor>,
    /// Weight of positive examples per class, broadcast over the last dim.
    pub pos_weight: Option<Tensor>,
}

impl BCEWithLogitsLoss {
    /// The loss of `logits` against float `targets` in `[0, 1]` (same shape).
    pub fn forward(&self, logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
        same_shape("BCEWithLogitsLoss", logits, targets)?;
        Ok(logits.binary_cross_entropy_with_logits(
            targets,
            self.weight.as_ref(),
            self.pos_weight.as_ref(),
            self.reduction.into(),
        ))
    }
}

/// `torch.nn.L1Loss`: absolute error.
#[derive(Debug, Clone, Copy, Default)]
pub struct L1Loss {
    /// Reduction (default mean).
    pub reduction: Reduction,
}

impl L1Loss {
    /// The loss of `input` against `target` (same shape).
    pub fn forward(&self, input: &Tensor, target: &Tensor) -> Result<Tensor> {
        same_shape("L1Loss", input, target)?;
        Ok(input.l1_loss(target, self.reduction.into()))
    }
}

/// `torch.nn.HuberLoss`: quadratic for errors below `delta` (default 1.0), linear above.
#[derive(Debug, Clone, Copy)]
pub struct HuberLoss {
    /// Reduction (default mean).
    pub reduction: Reduction,
    /// Where the loss turns from quadratic to linear; must be positive.
    pub delta: f64,
}

impl Default for HuberLoss {
    fn default() -> Self {
        HuberLoss { reduction: Reduction::default(), delta: 1.0 }
    }
}

impl HuberLoss {
    /// Huber loss with threshold `delta`.
    pub fn new(delta: f64) -> Self {
        HuberLoss { delta, ..Self::default() }
    }

    /// The loss of `input` against `target` (same shape).
    pub fn forward(&self, input: &Tensor, target: &Tensor) -> Result<Tensor> {
        same_shape("HuberLoss", input, target)?;
        Ok(input.huber_loss(target, self.reduction.into(), self.delta))
    }
}
