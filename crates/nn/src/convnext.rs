//! ConvNeXt-Tiny and -Small (`torchvision.models.convnext_tiny` / `_small`), with torchvision's
//! module structure and `state_dict` keys.

use crate::activation::GELU;
use crate::conv::{Conv2d, Conv2dConfig};
use crate::conv_norm_activation::{Conv2dNormActivation, Norm};
use crate::flatten::{Flatten, Permute};
use crate::init::{constant_, trunc_normal_};
use crate::layer_norm::{LayerNorm, LayerNorm2d};
use crate::linear::Linear;
use crate::module::{visit_modules, Module};
use crate::options::LayerOptions;
use crate::pooling::AdaptiveAvgPool2d;
use crate::sequential::Sequential;
use crate::stochastic_depth::{StochasticDepth, StochasticDepthMode};
use tch::nn::ModuleT;
use tch::Tensor;

/// The eps of every ConvNeXt LayerNorm.
const EPS: f64 = 1e-6;

/// ConvNeXt's block (torchvision's `CNBlock`): 7x7 depthwise convolution, then channels-last
/// LayerNorm, Linear to 4x, GELU, Linear back, scaled per channel by `layer_scale`; the branch,
/// dropped per sample by stochastic depth in training, is added to the input. Keys
/// `layer_scale`, `block.0.weight` (the depthwise convolution), `block.2.weight` (the norm),
/// `block.3.weight`, `block.5.weight` (the Linears).
#[derive(Debug, Module)]
pub struct CNBlock {
    /// `[C, 1, 1]` per-channel scale of the branch (torchvision's default init 1e-6).
    #[param]
    pub layer_scale: Tensor,
    /// Conv2d, Permute to channels-last, LayerNorm, Linear, GELU, Linear, Permute back.
    pub block: Sequential,
    /// Drops the branch per sample in training.
    pub stochastic_depth: StochasticDepth,
}

impl CNBlock {
    /// A block over `dim` channels with initial layer scale `layer_scale` and drop probability
    /// `stochastic_depth_prob`, built in torchvision's order.
    pub fn new_on(dim: i64, layer_scale: f64, stochastic_depth_prob: f64, o: LayerOptions) -> Self {
        let depthwise = Conv2dConfig::default().with_padding(3).with_groups(dim);
        let block = Sequential::new()
            .add(Conv2d::new_on(dim, dim, 7, depthwise, o))
            .add(Permute::new(&[0, 2, 3, 1]))
            .add(LayerNorm::new_on(&[dim], EPS, true, o))
            .add(Linear::new_on(dim, 4 * dim, true, o))
            .add(GELU)
            .add(Linear::new_on(4 * dim, dim, true, o))
            .add(Permute::new(&[0, 3, 1, 2]));
        CNBlock {
            layer_scale: o.full(&[dim, 1, 1], layer_scale, o.kind).set_requires_grad(true),
            block,
            stochastic_depth: StochasticDepth::new(stochastic_depth_prob, StochasticDepthMode::Row),
        }
    }
}

impl ModuleT for CNBlock {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let branch = &self.layer_scale * self.block.forward_t(xs, train);
        self.stochastic_depth.forward_t(&branch, train) + xs
    }
}

/// One ConvNeXt stage (torchvision's `CNBlockConfig`): its blocks' channels, the channels
/// the downsampling after it leads to (`None` for the last stage), and its block count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CNBlockConfig {
    /// Channels of the stage's blocks.
    pub input_channels: i64,
    /// Channels after the stage's downsampling layer; `None`: no downsampling.
    pub out_channels: Option<i64>,
    /// Blocks in the stage.
    pub num_layers: usize,
}

/// `torchvision.models.ConvNeXt`. Input `[N, 3, H, W]` (H, W >= 32), output logits
/// `[N, num_classes]`; `features` (a 4x4 stride-4 stem with LayerNorm2d, then stages
/// alternating with LayerNorm2d + 2x2 stride-2 downsampling), `avgpool`, then `classifier`
/// (`0` LayerNorm2d, `1` Flatten, `2` Linear, the head).
#[derive(Debug, Module)]
pub struct ConvNeXt {
    /// Stem, stages and downsampling layers: `features.0` ... `features.7`.
    pub features: Sequential,
    /// Global average pool.
    pub avgpool: AdaptiveAvgPool2d,
    /// LayerNorm2d, Flatten, the `Linear` head (`classifier.2`).
    pub classifier: Sequential,
}

impl ConvNeXt {
    /// `ConvNeXt(block_setting, stochastic_depth_prob, layer_scale, num_classes)` with its
    /// tensors created in `options`' dtype on its device and torchvision's initialisation
    /// (convolutions and Linears truncated-normal std 0.02 with zero bias, LayerNorms 1/0)
    /// drawn in torchvision's order, unless skipped.
    ///
    /// # Panics
    /// When `setting` is empty.
    pub fn new_on(
        setting: &[CNBlockConfig],
        stochastic_depth_prob: f64,
        layer_scale: f64,
        num_classes: i64,
        options: impl Into<LayerOptions>,
    ) -> Self {
        assert!(!setting.is_empty(), "ConvNeXt: the block setting should not be empty");
        let o = options.into();
        let mut features = Sequential::new();
        features.push(
            Conv2dNormActivation::new(3, setting[0].input_channels, 4)
                .stride(4)
                .padding(0)
                .norm(Norm::LayerNorm2d(EPS))
                .bias(true)
                .build(o),
        );
        let total: usize = setting.iter().map(|c| c.num_layers).sum();
        let mut block_id = 0;
        for cnf in setting {
            let mut stage = Sequential::new();
            for _ in 0..cnf.num_layers {
                let sd_prob = stochastic_depth_prob * block_id as f64 / (total as f64 - 1.0);
                stage.push(CNBlock::new_on(cnf.input_channels, layer_scale, sd_prob, o));
                block_id += 1;
            }
            features.push(stage);
            if let Some(out) = cnf.out_channels {
                let down = Conv2dConfig::default().with_stride(2);
                features.push(
                    Sequential::new()
                        .add(LayerNorm2d::new_on(cnf.input_channels, EPS, o))
                        .add(Conv2d::new_on(cnf.input_channels, out, 2, down, o)),
                );
            }
        }
        let last = setting[setting.len() - 1];
        let last_channels = last.out_channels.unwrap_or(last.input_channels);
        let classifier = Sequential::new()
            .add(LayerNorm2d::new_on(last_channels, EPS, o))
            .add(Flatten::default())
            .add(Linear::new_on(last_channels, num_classes, true, o));
        let model = ConvNeXt { features, avgpool: AdaptiveAvgPool2d { output_size: [1, 1] }, classifier };
        if o.init {
            visit_modules(&model, &mut |_, m| {
                let (weight, bias) = if let Some(conv) = m.as_any().downcast_ref::<Conv2d>() {
                    (&conv.weight, &conv.bias)
                } else if let Some(lin) = m.as_any().downcast_ref::<Linear>() {
                    (&lin.weight, &lin.bias)
                } else {
                    return;
                };
                trunc_normal_(weight, 0.0, 0.02, -2.0, 2.0);
                bias.iter().for_each(|b| constant_(b, 0.0));
            });
        }
        model
    }
}

impl ConvNeXt {
    /// The pooled features `[N, C, 1, 1]` the classifier (LayerNorm2d, Flatten, Linear) reads.
    pub fn features_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.avgpool.forward_t(&self.features.forward_t(xs, train), train)
    }
}

impl ModuleT for ConvNeXt {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.classifier.forward_t(&self.features_t(xs, train), train)
    }
}

impl crate::classifier::Classifier for ConvNeXt {
    fn features_t(&self, xs: &Tensor, train: bool) -> Tensor {
        ConvNeXt::features_t(self, xs, train)
    }
    fn head(&self) -> &dyn Module {
        &self.classifier
    }
}

/// The stages of ConvNeXt-Tiny (`[3, 3, 9, 3]` blocks) or, with `small`, -Small (`[3, 3, 27, 3]`).
pub fn convnext_setting(small: bool) -> Vec<CNBlockConfig> {
    let c =
        |input_channels, out_channels, num_layers| CNBlockConfig { input_channels, out_channels, num_layers };
    vec![
        c(96, Some(192), 3),
        c(192, Some(384), 3),
        c(384, Some(768), if small { 27 } else { 9 }),
        c(768, None, 3),
    ]
}

/// The stages of ConvNeXt-Base (`[3, 3, 27, 3]` blocks of 128, 256, 512, 1024 channels).
pub fn convnext_base_setting() -> Vec<CNBlockConfig> {
    let c =
        |input_channels, out_channels, num_layers| CNBlockConfig { input_channels, out_channels, num_layers };
    vec![c(128, Some(256), 3), c(256, Some(512), 3), c(512, Some(1024), 27), c(1024, None, 3)]
}

/// `torchvision.models.convnext_tiny(num_classes=...)`: stochastic depth 0.1; 28.6M parameters
/// at 1000 classes.
pub fn convnext_tiny(num_classes: i64) -> ConvNeXt {
    convnext_tiny_on(num_classes, LayerOptions::default())
}

/// [`convnext_tiny`] with its tensors created in `options`' dtype on its device (uninitialised
/// with [`LayerOptions::skip_init`]).
pub fn convnext_tiny_on(num_classes: i64, options: impl Into<LayerOptions>) -> ConvNeXt {
    ConvNeXt::new_on(&convnext_setting(false), 0.1, 1e-6, num_classes, options)
}

/// `torchvision.models.convnext_small(num_classes=...)`: stochastic depth 0.4; 50.2M
/// parameters at 1000 classes.
pub fn convnext_small(num_classes: i64) -> ConvNeXt {
    convnext_small_on(num_classes, LayerOptions::default())
}

/// [`convnext_small`] with its tensors created in `options`' dtype on its device
/// (uninitialised with [`LayerOptions::skip_init`]).
pub fn convnext_small_on(num_classes: i64, options: impl Into<LayerOptions>) -> ConvNeXt {
    ConvNeXt::new_on(&convnext_setting(true), 0.4, 1e-6, num_classes, options)
}

/// `torchvision.models.convnext_base(num_classes=...)`: stochastic depth 0.5; 88.6M parameters
/// at 1000 classes (timm's `convnext_base` weights load into it).
pub fn convnext_base(num_classes: i64) -> ConvNeXt {
    convnext_base_on(num_classes, LayerOptions::default())
}

/// [`convnext_base`] with its tensors created in `options`' dtype on its device (uninitialised
/// with [`LayerOptions::skip_init`]).
pub fn convnext_base_on(num_classes: i64, options: impl Into<LayerOptions>) -> ConvNeXt {
    ConvNeXt::new_on(&convnext_base_setting(), 0.5, 1e-6, num_classes, options)
}
