//! `SqueezeExcitation` (`torchvision.ops.SqueezeExcitation`): channel attention from a global
//! average pool, as in MobileNetV3 and EfficientNet.

use crate::conv::{Conv2d, Conv2dConfig};
use crate::module::Module;
use crate::options::LayerOptions;
use crate::pooling::AdaptiveAvgPool2d;
use tch::nn::ModuleT;
use tch::Tensor;

/// `x * scale_activation(fc2(activation(fc1(avgpool(x)))))` over `[N, C, H, W]`: a per-channel
/// gate computed from the channel means through a 1x1-convolution bottleneck of
/// `squeeze_channels`. Keys torchvision's: `fc1.weight`, `fc1.bias`, `fc2.weight`, `fc2.bias`.
#[derive(Debug, Module)]
pub struct SqueezeExcitation {
    /// Global average pool to `[N, C, 1, 1]`.
    pub avgpool: AdaptiveAvgPool2d,
    /// 1x1 convolution `C -> squeeze_channels`, with bias.
    pub fc1: Conv2d,
    /// 1x1 convolution `squeeze_channels -> C`, with bias.
    pub fc2: Conv2d,
    /// After `fc1` (torchvision's default ReLU; SiLU in EfficientNet).
    pub activation: Box<dyn Module>,
    /// The gate (torchvision's default Sigmoid; Hardsigmoid in MobileNetV3).
    pub scale_activation: Box<dyn Module>,
}

impl SqueezeExcitation {
    /// The block over `input_channels` with a `squeeze_channels` bottleneck, its convolutions
    /// created (and PyTorch-initialised unless skipped) in `options`' dtype on its device, in
    /// torchvision's order (`fc1`, then `fc2`).
    pub fn new_on(
        input_channels: i64,
        squeeze_channels: i64,
        activation: impl Module,
        scale_activation: impl Module,
        options: impl Into<LayerOptions>,
    ) -> Self {
        let o = options.into();
        let fc1 = Conv2d::new_on(input_channels, squeeze_channels, 1, Conv2dConfig::default(), o);
        let fc2 = Conv2d::new_on(squeeze_channels, input_channels, 1, Conv2dConfig::default(), o);
        SqueezeExcitation {
            avgpool: AdaptiveAvgPool2d { output_size: [1, 1] },
            fc1,
            fc2,
            activation: Box::new(activation),
            scale_activation: Box::new(scale_activation),
        }
    }

    /// The gate alone, `[N, C, 1, 1]`.
    pub fn scale(&self, xs: &Tensor, train: bool) -> Tensor {
        let s = self.avgpool.forward_t(xs, train);
        let s = self.activation.forward_t(&self.fc1.forward_t(&s, train), train);
        self.scale_activation.forward_t(&self.fc2.forward_t(&s, train), train)
    }
}

impl ModuleT for SqueezeExcitation {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.scale(xs, train) * xs
    }
}
