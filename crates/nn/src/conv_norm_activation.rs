//! `Conv2dNormActivation` (`torchvision.ops.Conv2dNormActivation`): convolution, normalisation,
//! activation as one `Sequential`, the unit torchvision's mobile and ConvNeXt models stack.

use crate::batch_norm::{BatchNorm2d, BatchNormConfig};
use crate::conv::{Conv2d, Conv2dConfig};
use crate::layer_norm::LayerNorm2d;
use crate::module::Module;
use crate::options::LayerOptions;
use crate::sequential::Sequential;

/// The normalisation after the convolution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Norm {
    /// `BatchNorm2d` with these options (MobileNetV3: eps 1e-3, momentum 0.01).
    BatchNorm(BatchNormConfig),
    /// torchvision's channels-last `LayerNorm2d` with this eps (ConvNeXt's stem).
    LayerNorm2d(f64),
    /// No normalisation; the convolution then has a bias by default.
    None,
}

/// Builds the `Sequential` torchvision's `Conv2dNormActivation` is: `0` the convolution, `1`
/// the norm (if any), then the activation (if any), so keys are `0.weight`, `1.running_mean`.
///
/// Defaults as torchvision's: kernel 3, stride 1, padding `(kernel - 1) / 2 * dilation`,
/// groups 1, BatchNorm with PyTorch's defaults, no activation unless one is given (torchvision
/// defaults to ReLU; here it is always named), bias only without a norm.
///
/// ```
/// use torchlight_nn::{named_tensors, Conv2dNormActivation, Hardswish, LayerOptions};
/// let stem = Conv2dNormActivation::new(3, 16, 3).stride(2).activation(Hardswish).build(LayerOptions::default());
/// let keys: Vec<String> = named_tensors(&stem).into_iter().map(|(k, _, _)| k).collect();
/// assert_eq!(keys[..3], ["0.weight", "1.weight", "1.bias"]);
/// ```
#[derive(Debug)]
pub struct Conv2dNormActivation {
    in_channels: i64,
    out_channels: i64,
    kernel_size: i64,
    stride: i64,
    padding: Option<i64>,
    dilation: i64,
    groups: i64,
    norm: Norm,
    activation: Option<Box<dyn Module>>,
    bias: Option<bool>,
}

impl Conv2dNormActivation {
    /// A `kernel_size` convolution `in_channels -> out_channels` followed by a BatchNorm.
    pub fn new(in_channels: i64, out_channels: i64, kernel_size: i64) -> Self {
        Conv2dNormActivation {
            in_channels,
            out_channels,
            kernel_size,
            stride: 1,
            padding: None,
            dilation: 1,
            groups: 1,
            norm: Norm::BatchNorm(BatchNormConfig::default()),
            activation: None,
            bias: None,
        }
    }
    /// The stride.
    pub fn stride(mut self, stride: i64) -> Self {
        self.stride = stride;
        self
    }
    /// Explicit padding instead of "same" padding `(kernel - 1) / 2 * dilation`.
    pub fn padding(mut self, padding: i64) -> Self {
        self.padding = Some(padding);
        self
    }
    /// The dilation.
    pub fn dilation(mut self, dilation: i64) -> Self {
        self.dilation = dilation;
        self
    }
    /// Groups (`groups = channels` is a depthwise convolution).
    pub fn groups(mut self, groups: i64) -> Self {
        self.groups = groups;
        self
    }
    /// The normalisation.
    pub fn norm(mut self, norm: Norm) -> Self {
        self.norm = norm;
        self
    }
    /// The activation after the norm.
    pub fn activation(mut self, activation: impl Module) -> Self {
        self.activation = Some(Box::new(activation));
        self
    }
    /// A convolution bias or not, instead of "only without a norm".
    pub fn bias(mut self, bias: bool) -> Self {
        self.bias = Some(bias);
        self
    }

    /// The `Sequential`, its tensors created in `options`' dtype on its device (the
    /// convolution PyTorch-initialised unless skipped).
    ///
    /// # Panics
    /// When the channels do not divide by the groups.
    pub fn build(self, options: impl Into<LayerOptions>) -> Sequential {
        let o = options.into();
        let padding = self.padding.unwrap_or((self.kernel_size - 1) / 2 * self.dilation);
        let config = Conv2dConfig::default()
            .with_stride(self.stride)
            .with_padding(padding)
            .with_dilation(self.dilation)
            .with_groups(self.groups)
            .with_bias(self.bias.unwrap_or(self.norm == Norm::None));
        let mut seq = Sequential::new().add(Conv2d::new_on(
            self.in_channels,
            self.out_channels,
            self.kernel_size,
            config,
            o,
        ));
        match self.norm {
            Norm::BatchNorm(c) => seq.push(BatchNorm2d::new_on(self.out_channels, c, o)),
            Norm::LayerNorm2d(eps) => seq.push(LayerNorm2d::new_on(self.out_channels, eps, o)),
            Norm::None => {}
        }
        if let Some(activation) = self.activation {
            seq.push(activation);
        }
        seq
    }
}
