//! MobileNetV3-Small and -Large (`torchvision.models.mobilenet_v3_small` / `_large`), with
//! torchvision's module structure and `state_dict` keys.

use crate::activation::{Hardsigmoid, Hardswish, ReLU};
use crate::batch_norm::BatchNormConfig;
use crate::conv_norm_activation::{Conv2dNormActivation, Norm};
use crate::dropout::Dropout;
use crate::init::normal_;
use crate::linear::Linear;
use crate::mobile::{init_conv_bn_linear, make_divisible};
use crate::module::Module;
use crate::options::LayerOptions;
use crate::pooling::AdaptiveAvgPool2d;
use crate::sequential::Sequential;
use crate::squeeze_excitation::SqueezeExcitation;
use tch::nn::ModuleT;
use tch::Tensor;

/// One row of MobileNetV3's block tables (torchvision's `InvertedResidualConfig`, Tables 1 and
/// 2 of the paper), channels already adjusted to the width multiplier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InvertedResidualConfig {
    /// Input channels.
    pub input_channels: i64,
    /// Depthwise kernel size.
    pub kernel: i64,
    /// Channels after the expansion.
    pub expanded_channels: i64,
    /// Output channels.
    pub out_channels: i64,
    /// Squeeze-excitation after the depthwise convolution.
    pub use_se: bool,
    /// Hardswish (`"HS"`) rather than ReLU (`"RE"`).
    pub use_hs: bool,
    /// Stride of the depthwise convolution (1 or 2).
    pub stride: i64,
    /// Dilation of the depthwise convolution (a dilated block keeps stride 1).
    pub dilation: i64,
}

impl InvertedResidualConfig {
    /// A table row (`bneck_conf(input, kernel, expanded, out, use_se, activation, stride,
    /// dilation)`) with channels scaled by `width_mult` and rounded to multiples of 8.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        input_channels: i64,
        kernel: i64,
        expanded_channels: i64,
        out_channels: i64,
        use_se: bool,
        use_hs: bool,
        stride: i64,
        dilation: i64,
        width_mult: f64,
    ) -> Self {
        let adjust = |c: i64| make_divisible(c as f64 * width_mult, 8, None);
        InvertedResidualConfig {
            input_channels: adjust(input_channels),
            kernel,
            expanded_channels: adjust(expanded_channels),
            out_channels: adjust(out_channels),
            use_se,
            use_hs,
            stride,
            dilation,
        }
    }
}

/// MobileNetV3's block (torchvision's `mobilenetv3.InvertedResidual`): 1x1 expansion (unless
/// the channels stay), depthwise convolution, optional squeeze-excitation (ReLU, Hardsigmoid
/// gate), linear 1x1 projection; each convolution with BatchNorm. Keys `block.0.0.weight`, ...
#[derive(Debug, Module)]
#[module(kind = "InvertedResidual")]
pub struct InvertedResidualV3 {
    /// `[expand], depthwise, [squeeze-excitation], project`.
    pub block: Sequential,
    /// Whether the input is added to the output (stride 1 and the same channels).
    #[module(skip)]
    pub use_res_connect: bool,
}

impl InvertedResidualV3 {
    /// The block of `cnf` with BatchNorms `norm`, built in torchvision's order.
    ///
    /// # Panics
    /// When the stride is not 1 or 2, as torchvision raises.
    pub fn new_on(cnf: &InvertedResidualConfig, norm: BatchNormConfig, o: LayerOptions) -> Self {
        assert!((1..=2).contains(&cnf.stride), "InvertedResidual: illegal stride value {}", cnf.stride);
        let activation =
            |c: Conv2dNormActivation| if cnf.use_hs { c.activation(Hardswish) } else { c.activation(ReLU) };
        let norm = Norm::BatchNorm(norm);
        let mut block = Sequential::new();
        if cnf.expanded_channels != cnf.input_channels {
            let expand = Conv2dNormActivation::new(cnf.input_channels, cnf.expanded_channels, 1).norm(norm);
            block.push(activation(expand).build(o));
        }
        let stride = if cnf.dilation > 1 { 1 } else { cnf.stride };
        let depthwise = Conv2dNormActivation::new(cnf.expanded_channels, cnf.expanded_channels, cnf.kernel)
            .stride(stride)
            .dilation(cnf.dilation)
            .groups(cnf.expanded_channels)
            .norm(norm);
        block.push(activation(depthwise).build(o));
        if cnf.use_se {
            let squeeze = make_divisible((cnf.expanded_channels / 4) as f64, 8, None);
            block.push(SqueezeExcitation::new_on(cnf.expanded_channels, squeeze, ReLU, Hardsigmoid, o));
        }
        block.push(Conv2dNormActivation::new(cnf.expanded_channels, cnf.out_channels, 1).norm(norm).build(o));
        InvertedResidualV3 {
            block,
            use_res_connect: cnf.stride == 1 && cnf.input_channels == cnf.out_channels,
        }
    }
}

impl ModuleT for InvertedResidualV3 {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let out = self.block.forward_t(xs, train);
        if self.use_res_connect {
            out + xs
        } else {
            out
        }
    }
}

/// `torchvision.models.MobileNetV3`. Input `[N, 3, H, W]`, output logits `[N, num_classes]`;
/// `features` (stem, the blocks, a 1x1 convolution), `avgpool`, then `classifier` (`0` Linear,
/// `1` Hardswish, `2` Dropout, `3` Linear, the head).
#[derive(Debug, Module)]
pub struct MobileNetV3 {
    /// The convolutional trunk.
    pub features: Sequential,
    /// Global average pool.
    pub avgpool: AdaptiveAvgPool2d,
    /// Linear, Hardswish, Dropout, the `Linear` head (`classifier.3`).
    pub classifier: Sequential,
}

/// Which MobileNetV3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MobileNetV3Arch {
    /// `mobilenet_v3_large`: 15 blocks, 960 -> 1280 -> classes.
    Large,
    /// `mobilenet_v3_small`: 11 blocks, 576 -> 1024 -> classes.
    Small,
}

/// `_mobilenet_v3_conf(arch, width_mult)` without the reduced tail or dilation: the block
/// table and the classifier's hidden width (`last_channel`).
pub fn mobilenet_v3_config(arch: MobileNetV3Arch, width_mult: f64) -> (Vec<InvertedResidualConfig>, i64) {
    let c = |i, k, e, o, se, hs, s| InvertedResidualConfig::new(i, k, e, o, se, hs, s, 1, width_mult);
    let (re, hs) = (false, true);
    match arch {
        MobileNetV3Arch::Large => (
            vec![
                c(16, 3, 16, 16, false, re, 1),
                c(16, 3, 64, 24, false, re, 2),
                c(24, 3, 72, 24, false, re, 1),
                c(24, 5, 72, 40, true, re, 2),
                c(40, 5, 120, 40, true, re, 1),
                c(40, 5, 120, 40, true, re, 1),
                c(40, 3, 240, 80, false, hs, 2),
                c(80, 3, 200, 80, false, hs, 1),
                c(80, 3, 184, 80, false, hs, 1),
                c(80, 3, 184, 80, false, hs, 1),
                c(80, 3, 480, 112, true, hs, 1),
                c(112, 3, 672, 112, true, hs, 1),
                c(112, 5, 672, 160, true, hs, 2),
                c(160, 5, 960, 160, true, hs, 1),
                c(160, 5, 960, 160, true, hs, 1),
            ],
            make_divisible(1280.0 * width_mult, 8, None),
        ),
        MobileNetV3Arch::Small => (
            vec![
                c(16, 3, 16, 16, true, re, 2),
                c(16, 3, 72, 24, false, re, 2),
                c(24, 3, 88, 24, false, re, 1),
                c(24, 5, 96, 40, true, hs, 2),
                c(40, 5, 240, 40, true, hs, 1),
                c(40, 5, 240, 40, true, hs, 1),
                c(40, 5, 120, 48, true, hs, 1),
                c(48, 5, 144, 48, true, hs, 1),
                c(48, 5, 288, 96, true, hs, 2),
                c(96, 5, 576, 96, true, hs, 1),
                c(96, 5, 576, 96, true, hs, 1),
            ],
            make_divisible(1024.0 * width_mult, 8, None),
        ),
    }
}

impl MobileNetV3 {
    /// `MobileNetV3(setting, last_channel, num_classes, dropout=dropout)` with torchvision's
    /// BatchNorm (eps 1e-3, momentum 0.01), its tensors created in `options`' dtype on its
    /// device and torchvision's initialisation (convolutions kaiming-normal fan-out, BatchNorm
    /// 1/0, Linears N(0, 0.01) with zero bias) drawn in torchvision's order, unless skipped.
    ///
    /// # Panics
    /// When `setting` is empty.
    pub fn new_on(
        setting: &[InvertedResidualConfig],
        last_channel: i64,
        num_classes: i64,
        dropout: f64,
        options: impl Into<LayerOptions>,
    ) -> Self {
        let bn = BatchNormConfig { eps: 0.001, momentum: Some(0.01), ..BatchNormConfig::default() };
        Self::with_batch_norm_on(setting, last_channel, num_classes, dropout, bn, options)
    }

    /// [`new_on`](Self::new_on) with the BatchNorms `bn` (timm's `mobilenetv3_*_100`: PyTorch's
    /// default eps 1e-5, momentum 0.1).
    ///
    /// # Panics
    /// When `setting` is empty.
    pub fn with_batch_norm_on(
        setting: &[InvertedResidualConfig],
        last_channel: i64,
        num_classes: i64,
        dropout: f64,
        bn: BatchNormConfig,
        options: impl Into<LayerOptions>,
    ) -> Self {
        assert!(!setting.is_empty(), "MobileNetV3: the inverted residual setting should not be empty");
        let o = options.into();
        let mut features = Sequential::new();
        features.push(
            Conv2dNormActivation::new(3, setting[0].input_channels, 3)
                .stride(2)
                .norm(Norm::BatchNorm(bn))
                .activation(Hardswish)
                .build(o),
        );
        for cnf in setting {
            features.push(InvertedResidualV3::new_on(cnf, bn, o));
        }
        let last_in = setting[setting.len() - 1].out_channels;
        let last_out = 6 * last_in;
        features.push(
            Conv2dNormActivation::new(last_in, last_out, 1)
                .norm(Norm::BatchNorm(bn))
                .activation(Hardswish)
                .build(o),
        );
        let classifier = Sequential::new()
            .add(Linear::new_on(last_out, last_channel, true, o))
            .add(Hardswish)
            .add(Dropout { p: dropout })
            .add(Linear::new_on(last_channel, num_classes, true, o));
        let model = MobileNetV3 { features, avgpool: AdaptiveAvgPool2d { output_size: [1, 1] }, classifier };
        if o.init {
            init_conv_bn_linear(&model, |l| normal_(&l.weight, 0.0, 0.01));
        }
        model
    }

    /// The pooled features before the classifier: `[N, 960]` (large) or `[N, 576]` (small).
    pub fn features_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.avgpool.forward_t(&self.features.forward_t(xs, train), train).flatten(1, -1)
    }
}

impl ModuleT for MobileNetV3 {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.classifier.forward_t(&self.features_t(xs, train), train)
    }
}

impl crate::classifier::Classifier for MobileNetV3 {
    fn features_t(&self, xs: &Tensor, train: bool) -> Tensor {
        MobileNetV3::features_t(self, xs, train)
    }
    fn head(&self) -> &dyn Module {
        &self.classifier
    }
}

/// `torchvision.models.mobilenet_v3_large(num_classes=...)`: 5.5M parameters at 1000 classes.
pub fn mobilenet_v3_large(num_classes: i64) -> MobileNetV3 {
    mobilenet_v3_large_on(num_classes, LayerOptions::default())
}

/// [`mobilenet_v3_large`] with its tensors created in `options`' dtype on its device
/// (uninitialised with [`LayerOptions::skip_init`]).
pub fn mobilenet_v3_large_on(num_classes: i64, options: impl Into<LayerOptions>) -> MobileNetV3 {
    let (setting, last) = mobilenet_v3_config(MobileNetV3Arch::Large, 1.0);
    MobileNetV3::new_on(&setting, last, num_classes, 0.2, options)
}

/// `torchvision.models.mobilenet_v3_small(num_classes=...)`: 2.5M parameters at 1000 classes.
pub fn mobilenet_v3_small(num_classes: i64) -> MobileNetV3 {
    mobilenet_v3_small_on(num_classes, LayerOptions::default())
}

/// [`mobilenet_v3_small`] with its tensors created in `options`' dtype on its device
/// (uninitialised with [`LayerOptions::skip_init`]).
pub fn mobilenet_v3_small_on(num_classes: i64, options: impl Into<LayerOptions>) -> MobileNetV3 {
    let (setting, last) = mobilenet_v3_config(MobileNetV3Arch::Small, 1.0);
    MobileNetV3::new_on(&setting, last, num_classes, 0.2, options)
}

/// timm's `mobilenetv3_large_100` as the module timm's weights load into: torchvision's
/// [`mobilenet_v3_large`] (keys, order, initialisation, dropout 0.2) with timm's BatchNorm,
/// eps 1e-5 and momentum 0.1, where torchvision's has 1e-3 and 0.01. timm's keys
/// (`conv_stem`, `blocks.S.M`, `conv_head`, `classifier`) are mapped onto it on load
/// ([`timm_to_torchvision`](crate::timm_to_torchvision)); timm's `conv_head`, a 1x1
/// convolution after the pooling, is `classifier.0`, the same product.
pub fn mobilenetv3_large_100_on(num_classes: i64, options: impl Into<LayerOptions>) -> MobileNetV3 {
    let (setting, last) = mobilenet_v3_config(MobileNetV3Arch::Large, 1.0);
    MobileNetV3::with_batch_norm_on(&setting, last, num_classes, 0.2, BatchNormConfig::default(), options)
}

/// timm's `mobilenetv3_small_100`: torchvision's [`mobilenet_v3_small`] with timm's BatchNorm
/// (eps 1e-5, momentum 0.1), as [`mobilenetv3_large_100_on`].
pub fn mobilenetv3_small_100_on(num_classes: i64, options: impl Into<LayerOptions>) -> MobileNetV3 {
    let (setting, last) = mobilenet_v3_config(MobileNetV3Arch::Small, 1.0);
    MobileNetV3::with_batch_norm_on(&setting, last, num_classes, 0.2, BatchNormConfig::default(), options)
}
