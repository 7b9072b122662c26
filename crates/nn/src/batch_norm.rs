//! `BatchNorm2d` (`torch.nn.BatchNorm2d`), with running statistics and `num_batches_tracked`.

use crate::module::Module;
use crate::options::LayerOptions;
use tch::{Kind, Tensor};
use torchlight_tensor::no_grad;

/// Options of a [`BatchNorm2d`], with PyTorch's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchNormConfig {
    /// Added to the variance for stability (default 1e-5).
    pub eps: f64,
    /// Weight of the new batch statistics in the running average (default 0.1);
    /// `None` means a cumulative average over all batches (`1 / num_batches_tracked`).
    pub momentum: Option<f64>,
    /// Learnable `weight` and `bias` (default on).
    pub affine: bool,
    /// Keep running statistics for evaluation (default on).
    pub track_running_stats: bool,
}

impl Default for BatchNormConfig {
    fn default() -> Self {
        BatchNormConfig { eps: 1e-5, momentum: Some(0.1), affine: true, track_running_stats: true }
    }
}

/// Batch normalisation over `[N, C, H, W]`, per channel.
///
/// In training (`forward_t(.., true)`) it normalises with the batch's statistics and, when
/// tracking, updates `running_mean` / `running_var` (unbiased) and increments
/// `num_batches_tracked`; in evaluation it uses the running statistics and changes nothing.
#[derive(Debug, Module)]
pub struct BatchNorm2d {
    /// `[C]` scale, when affine.
    #[param]
    pub weight: Option<Tensor>,
    /// `[C]` shift, when affine.
    #[param]
    pub bias: Option<Tensor>,
    /// `[C]` running mean, when tracking.
    #[buffer]
    pub running_mean: Option<Tensor>,
    /// `[C]` running variance, when tracking.
    #[buffer]
    pub running_var: Option<Tensor>,
    /// Scalar int64 count of training batches seen, when tracking.
    #[buffer]
    pub num_batches_tracked: Option<Tensor>,
    /// eps, momentum, affine, tracking.
    #[module(skip)]
    pub config: BatchNormConfig,
}

impl BatchNorm2d {
    /// A float32 CPU layer over `num_features` channels: weight 1, bias 0, running mean 0,
    /// variance 1.
    pub fn new(num_features: i64, config: BatchNormConfig) -> Self {
        Self::new_on(num_features, config, LayerOptions::default())
    }

    /// The layer with its tensors created in `options`' dtype on its device
    /// (`num_batches_tracked` stays int64), initialised unless skipped.
    pub fn new_on(num_features: i64, config: BatchNormConfig, options: impl Into<LayerOptions>) -> Self {
        let o = options.into();
        let n = [num_features];
        let (weight, bias) = if config.affine {
            (
                Some(o.full(&n, 1.0, o.kind).set_requires_grad(true)),
                Some(o.full(&n, 0.0, o.kind).set_requires_grad(true)),
            )
        } else {
            (None, None)
        };
        let track = config.track_running_stats;
        BatchNorm2d {
            weight,
            bias,
            running_mean: track.then(|| o.full(&n, 0.0, o.kind)),
            running_var: track.then(|| o.full(&n, 1.0, o.kind)),
            num_batches_tracked: track.then(|| o.full(&[], 0.0, Kind::Int64)),
            config,
        }
    }
}

impl tch::nn::ModuleT for BatchNorm2d {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let tracking = self.running_mean.is_some();
        let mut momentum = self.config.momentum.unwrap_or(0.0);
        if train {
            if let Some(n) = &self.num_batches_tracked {
                let _guard = no_grad();
                let _ = n.shallow_clone().g_add_scalar_(1);
                if self.config.momentum.is_none() {
                    // A cumulative average needs the count on the host, as in PyTorch.
                    momentum = 1.0 / n.int64_value(&[]) as f64;
                }
            }
        }
        xs.batch_norm(
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.running_mean.as_ref(),
            self.running_var.as_ref(),
            train || !tracking,
            momentum,
            self.config.eps,
            true,
        )
    }
}
