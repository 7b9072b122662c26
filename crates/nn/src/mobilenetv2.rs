//! MobileNetV2 (`torchvision.models.mobilenet_v2`), with torchvision's module structure and
//! `state_dict` keys.

use crate::activation::ReLU6;
use crate::batch_norm::{BatchNorm2d, BatchNormConfig};
use crate::conv::{Conv2d, Conv2dConfig};
use crate::conv_norm_activation::Conv2dNormActivation;
use crate::dropout::Dropout;
use crate::init::normal_;
use crate::linear::Linear;
use crate::mobile::{init_conv_bn_linear, make_divisible};
use crate::module::Module;
use crate::options::LayerOptions;
use crate::sequential::Sequential;
use tch::nn::ModuleT;
use tch::Tensor;

/// MobileNetV2's inverted residual block (torchvision's `mobilenetv2.InvertedResidual`): a 1x1
/// expansion (unless the ratio is 1), a 3x3 depthwise convolution, both with BatchNorm and
/// ReLU6, then a linear 1x1 projection with BatchNorm; the input is added back when the stride
/// is 1 and the channels stay. Keys `conv.0.0.weight`, ..., `conv.3.running_var`.
#[derive(Debug, Module)]
#[module(kind = "InvertedResidual")]
pub struct InvertedResidualV2 {
    /// `[expand], depthwise, project conv, project norm`.
    pub conv: Sequential,
    /// Whether the input is added to the output.
    #[module(skip)]
    pub use_res_connect: bool,
}

impl InvertedResidualV2 {
    /// `inp -> oup` channels with `stride` (1 or 2) and expansion ratio `expand_ratio`, built in
    /// torchvision's order.
    ///
    /// # Panics
    /// When `stride` is not 1 or 2, as torchvision raises.
    pub fn new_on(inp: i64, oup: i64, stride: i64, expand_ratio: f64, o: LayerOptions) -> Self {
        assert!(stride == 1 || stride == 2, "InvertedResidual: stride should be 1 or 2 instead of {stride}");
        // Python's `round` halves to even.
        let hidden = (inp as f64 * expand_ratio).round_ties_even() as i64;
        let mut conv = Sequential::new();
        if expand_ratio != 1.0 {
            conv.push(Conv2dNormActivation::new(inp, hidden, 1).activation(ReLU6).build(o));
        }
        conv.push(
            Conv2dNormActivation::new(hidden, hidden, 3)
                .stride(stride)
                .groups(hidden)
                .activation(ReLU6)
                .build(o),
        );
        conv.push(Conv2d::new_on(hidden, oup, 1, Conv2dConfig::default().with_bias(false), o));
        conv.push(BatchNorm2d::new_on(oup, BatchNormConfig::default(), o));
        InvertedResidualV2 { conv, use_res_connect: stride == 1 && inp == oup }
    }
}

impl ModuleT for InvertedResidualV2 {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let out = self.conv.forward_t(xs, train);
        if self.use_res_connect {
            xs + out
        } else {
            out
        }
    }
}

/// `torchvision.models.MobileNetV2`. Input `[N, 3, H, W]`, output logits `[N, num_classes]`;
/// `features` (stem, 17 inverted residual blocks, a 1x1 convolution to 1280 channels), a global
/// average pool, then `classifier` (`0` Dropout, `1` Linear, the head).
#[derive(Debug, Module)]
pub struct MobileNetV2 {
    /// The convolutional trunk, `features.0` ... `features.18`.
    pub features: Sequential,
    /// Dropout, then the `Linear` head (`classifier.1`).
    pub classifier: Sequential,
}

/// MobileNetV2's stages: expansion ratio `t`, channels `c`, blocks `n`, first stride `s`.
const V2_SETTING: [(f64, i64, usize, i64); 7] = [
    (1.0, 16, 1, 1),
    (6.0, 24, 2, 2),
    (6.0, 32, 3, 2),
    (6.0, 64, 4, 2),
    (6.0, 96, 3, 1),
    (6.0, 160, 3, 2),
    (6.0, 320, 1, 1),
];

impl MobileNetV2 {
    /// `MobileNetV2(num_classes, width_mult, dropout=dropout)` with its tensors created in
    /// `options`' dtype on its device and torchvision's initialisation (convolutions
    /// kaiming-normal fan-out, BatchNorm 1/0, the Linear N(0, 0.01) with zero bias) drawn in
    /// torchvision's order, unless skipped.
    pub fn new_on(num_classes: i64, width_mult: f64, dropout: f64, options: impl Into<LayerOptions>) -> Self {
        let o = options.into();
        let mut input_channel = make_divisible(32.0 * width_mult, 8, None);
        let last_channel = make_divisible(1280.0 * width_mult.max(1.0), 8, None);
        let mut features = Sequential::new();
        features.push(Conv2dNormActivation::new(3, input_channel, 3).stride(2).activation(ReLU6).build(o));
        for (t, c, n, s) in V2_SETTING {
            let output_channel = make_divisible(c as f64 * width_mult, 8, None);
            for i in 0..n {
                let stride = if i == 0 { s } else { 1 };
                features.push(InvertedResidualV2::new_on(input_channel, output_channel, stride, t, o));
                input_channel = output_channel;
            }
        }
        features.push(Conv2dNormActivation::new(input_channel, last_channel, 1).activation(ReLU6).build(o));
        let classifier = Sequential::new().add(Dropout { p: dropout }).add(Linear::new_on(
            last_channel,
            num_classes,
            true,
            o,
        ));
        let model = MobileNetV2 { features, classifier };
        if o.init {
            init_conv_bn_linear(&model, |l| normal_(&l.weight, 0.0, 0.01));
        }
        model
    }

    /// The features before the classifier: `[N, 1280]` (global average pool of the trunk).
    pub fn features_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.features.forward_t(xs, train).adaptive_avg_pool2d([1, 1]).flatten(1, -1)
    }
}

impl ModuleT for MobileNetV2 {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.classifier.forward_t(&self.features_t(xs, train), train)
    }
}

impl crate::classifier::Classifier for MobileNetV2 {
    fn features_t(&self, xs: &Tensor, train: bool) -> Tensor {
        MobileNetV2::features_t(self, xs, train)
    }
    fn head(&self) -> &dyn Module {
        &self.classifier
    }
}

/// `torchvision.models.mobilenet_v2(num_classes=...)`: 3.5M parameters at 1000 classes.
pub fn mobilenet_v2(num_classes: i64) -> MobileNetV2 {
    mobilenet_v2_on(num_classes, LayerOptions::default())
}

/// [`mobilenet_v2`] with its tensors created in `options`' dtype on its device (uninitialised
/// with [`LayerOptions::skip_init`]).
pub fn mobilenet_v2_on(num_classes: i64, options: impl Into<LayerOptions>) -> MobileNetV2 {
    MobileNetV2::new_on(num_classes, 1.0, 0.2, options)
}
