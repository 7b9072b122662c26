//! EfficientNet-B0 to -B3 and EfficientNetV2-S (`torchvision.models.efficientnet_b0` ...
//! `efficientnet_v2_s`), with torchvision's module structure and `state_dict` keys.

use crate::activation::{SiLU, Sigmoid};
use crate::batch_norm::BatchNormConfig;
use crate::conv_norm_activation::{Conv2dNormActivation, Norm};
use crate::dropout::Dropout;
use crate::init::uniform_;
use crate::linear::Linear;
use crate::mobile::{init_conv_bn_linear, make_divisible};
use crate::module::Module;
use crate::options::LayerOptions;
use crate::pooling::AdaptiveAvgPool2d;
use crate::sequential::Sequential;
use crate::squeeze_excitation::SqueezeExcitation;
use crate::stochastic_depth::{StochasticDepth, StochasticDepthMode};
use tch::nn::ModuleT;
use tch::Tensor;

/// Which block a stage stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MBConvKind {
    /// [`MBConv`]: expansion, depthwise convolution, squeeze-excitation, projection.
    MBConv,
    /// [`FusedMBConv`] (EfficientNetV2's early stages): one full convolution in place of the
    /// expansion and depthwise convolution.
    Fused,
}

/// One stage of an EfficientNet (torchvision's `MBConvConfig` / `FusedMBConvConfig`), channels
/// and depth already scaled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MBConvConfig {
    /// The block kind.
    pub kind: MBConvKind,
    /// Expansion ratio of the hidden channels.
    pub expand_ratio: f64,
    /// Kernel size.
    pub kernel: i64,
    /// Stride of the stage's first block.
    pub stride: i64,
    /// Input channels of the stage's first block.
    pub input_channels: i64,
    /// Output channels of every block of the stage.
    pub out_channels: i64,
    /// Blocks in the stage.
    pub num_layers: usize,
}

impl MBConvConfig {
    /// An `MBConvConfig(expand_ratio, kernel, stride, input, out, layers, width_mult,
    /// depth_mult)`: channels times `width_mult` rounded to multiples of 8, layers times
    /// `depth_mult` rounded up.
    #[allow(clippy::too_many_arguments)]
    pub fn mbconv(
        expand_ratio: f64,
        kernel: i64,
        stride: i64,
        input_channels: i64,
        out_channels: i64,
        num_layers: usize,
        width_mult: f64,
        depth_mult: f64,
    ) -> Self {
        MBConvConfig {
            kind: MBConvKind::MBConv,
            expand_ratio,
            kernel,
            stride,
            input_channels: adjust_channels(input_channels, width_mult),
            out_channels: adjust_channels(out_channels, width_mult),
            num_layers: (num_layers as f64 * depth_mult).ceil() as usize,
        }
    }

    /// A `FusedMBConvConfig(expand_ratio, kernel, stride, input, out, layers)` (no scaling).
    pub fn fused(
        expand_ratio: f64,
        kernel: i64,
        stride: i64,
        input_channels: i64,
        out_channels: i64,
        num_layers: usize,
    ) -> Self {
        MBConvConfig {
            kind: MBConvKind::Fused,
            expand_ratio,
            kernel,
            stride,
            input_channels,
            out_channels,
            num_layers,
        }
    }
}

fn adjust_channels(channels: i64, width_mult: f64) -> i64 {
    make_divisible(channels as f64 * width_mult, 8, None)
}

/// EfficientNet's block (torchvision's `MBConv`): 1x1 expansion (unless the ratio keeps the
/// channels), depthwise convolution, squeeze-excitation (SiLU, Sigmoid gate), linear 1x1
/// projection; SiLU activations, BatchNorm after each convolution. With stride 1 and the same
/// channels the block is residual, its branch dropped by stochastic depth in training. Keys
/// `block.0.0.weight`, ..., `block.N.fc1.weight`, ...
#[derive(Debug, Module)]
pub struct MBConv {
    /// `[expand], depthwise, squeeze-excitation, project`.
    pub block: Sequential,
    /// Drops the residual branch per sample in training.
    pub stochastic_depth: StochasticDepth,
    /// Whether the input is added back.
    #[module(skip)]
    pub use_res_connect: bool,
}

/// EfficientNetV2's early block (torchvision's `FusedMBConv`): a full `kernel` convolution
/// expanding the channels, then a 1x1 projection (or one convolution when the ratio is 1).
#[derive(Debug, Module)]
pub struct FusedMBConv {
    /// `expand, project` or the one convolution.
    pub block: Sequential,
    /// Drops the residual branch per sample in training.
    pub stochastic_depth: StochasticDepth,
    /// Whether the input is added back.
    #[module(skip)]
    pub use_res_connect: bool,
}

fn check_stride(stride: i64) {
    assert!((1..=2).contains(&stride), "MBConv: illegal stride value {stride}");
}

impl MBConv {
    /// The block of `cnf` (one block: its `input_channels` and `stride`), dropping its branch
    /// with probability `stochastic_depth_prob`, built in torchvision's order.
    ///
    /// # Panics
    /// When the stride is not 1 or 2.
    pub fn new_on(
        cnf: &MBConvConfig,
        stochastic_depth_prob: f64,
        norm: BatchNormConfig,
        o: LayerOptions,
    ) -> Self {
        check_stride(cnf.stride);
        let norm = Norm::BatchNorm(norm);
        let expanded = adjust_channels(cnf.input_channels, cnf.expand_ratio);
        let mut block = Sequential::new();
        if expanded != cnf.input_channels {
            block.push(
                Conv2dNormActivation::new(cnf.input_channels, expanded, 1)
                    .norm(norm)
                    .activation(SiLU)
                    .build(o),
            );
        }
        block.push(
            Conv2dNormActivation::new(expanded, expanded, cnf.kernel)
                .stride(cnf.stride)
                .groups(expanded)
                .norm(norm)
                .activation(SiLU)
                .build(o),
        );
        let squeeze = (cnf.input_channels / 4).max(1);
        block.push(SqueezeExcitation::new_on(expanded, squeeze, SiLU, Sigmoid, o));
        block.push(Conv2dNormActivation::new(expanded, cnf.out_channels, 1).norm(norm).build(o));
        MBConv {
            block,
            stochastic_depth: StochasticDepth::new(stochastic_depth_prob, StochasticDepthMode::Row),
            use_res_connect: cnf.stride == 1 && cnf.input_channels == cnf.out_channels,
        }
    }
}

impl FusedMBConv {
    /// The block of `cnf` (one block), dropping its branch with probability
    /// `stochastic_depth_prob`, built in torchvision's order.
    ///
    /// # Panics
    /// When the stride is not 1 or 2.
    pub fn new_on(
        cnf: &MBConvConfig,
        stochastic_depth_prob: f64,
        norm: BatchNormConfig,
        o: LayerOptions,
    ) -> Self {
        check_stride(cnf.stride);
        let norm = Norm::BatchNorm(norm);
        let expanded = adjust_channels(cnf.input_channels, cnf.expand_ratio);
        let mut block = Sequential::new();
        if expanded != cnf.input_channels {
            block.push(
                Conv2dNormActivation::new(cnf.input_channels, expanded, cnf.kernel)
                    .stride(cnf.stride)
                    .norm(norm)
                    .activation(SiLU)
                    .build(o),
            );
            block.push(Conv2dNormActivation::new(expanded, cnf.out_channels, 1).norm(norm).build(o));
        } else {
            block.push(
                Conv2dNormActivation::new(cnf.input_channels, cnf.out_channels, cnf.kernel)
                    .stride(cnf.stride)
                    .norm(norm)
                    .activation(SiLU)
                    .build(o),
            );
        }
        FusedMBConv {
            block,
            stochastic_depth: StochasticDepth::new(stochastic_depth_prob, StochasticDepthMode::Row),
            use_res_connect: cnf.stride == 1 && cnf.input_channels == cnf.out_channels,
        }
    }
}

/// The residual forward both blocks share: `block(x)`, plus `x` through stochastic depth when
/// residual.
fn residual(block: &Sequential, sd: &StochasticDepth, use_res: bool, xs: &Tensor, train: bool) -> Tensor {
    let out = block.forward_t(xs, train);
    if use_res {
        sd.forward_t(&out, train) + xs
    } else {
        out
    }
}

impl ModuleT for MBConv {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        residual(&self.block, &self.stochastic_depth, self.use_res_connect, xs, train)
    }
}

impl ModuleT for FusedMBConv {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        residual(&self.block, &self.stochastic_depth, self.use_res_connect, xs, train)
    }
}

/// `torchvision.models.EfficientNet`. Input `[N, 3, H, W]`, output logits `[N, num_classes]`;
/// `features` (stem, one `Sequential` of blocks per stage, a 1x1 convolution), `avgpool`, then
/// `classifier` (`0` Dropout, `1` Linear, the head).
#[derive(Debug, Module)]
pub struct EfficientNet {
    /// The convolutional trunk.
    pub features: Sequential,
    /// Global average pool.
    pub avgpool: AdaptiveAvgPool2d,
    /// Dropout, then the `Linear` head (`classifier.1`).
    pub classifier: Sequential,
}

/// The hyperparameters of one EfficientNet besides its stages.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EfficientNetConfig {
    /// Dropout before the head.
    pub dropout: f64,
    /// Stochastic depth of the last block; block `i` of `n` drops with `prob * i / n`.
    pub stochastic_depth_prob: f64,
    /// The BatchNorms (EfficientNetV2: eps 1e-3).
    pub norm: BatchNormConfig,
    /// Channels of the last 1x1 convolution; `None` is four times the last stage's.
    pub last_channel: Option<i64>,
}

impl EfficientNet {
    /// `EfficientNet(setting, dropout, stochastic_depth_prob, num_classes, norm_layer,
    /// last_channel)` with its tensors created in `options`' dtype on its device and
    /// torchvision's initialisation (convolutions kaiming-normal fan-out, BatchNorm 1/0, the
    /// Linear U(-1/sqrt(classes), 1/sqrt(classes)) with zero bias) drawn in torchvision's
    /// order, unless skipped.
    ///
    /// # Panics
    /// When `setting` is empty.
    pub fn new_on(
        setting: &[MBConvConfig],
        config: EfficientNetConfig,
        num_classes: i64,
        options: impl Into<LayerOptions>,
    ) -> Self {
        assert!(!setting.is_empty(), "EfficientNet: the inverted residual setting should not be empty");
        let o = options.into();
        let norm = Norm::BatchNorm(config.norm);
        let mut features = Sequential::new();
        features.push(
            Conv2dNormActivation::new(3, setting[0].input_channels, 3)
                .stride(2)
                .norm(norm)
                .activation(SiLU)
                .build(o),
        );
        let total: usize = setting.iter().map(|c| c.num_layers).sum();
        let mut block_id = 0;
        for cnf in setting {
            let mut stage = Sequential::new();
            for i in 0..cnf.num_layers {
                let mut block_cnf = *cnf;
                if i > 0 {
                    block_cnf.input_channels = block_cnf.out_channels;
                    block_cnf.stride = 1;
                }
                let sd_prob = config.stochastic_depth_prob * block_id as f64 / total as f64;
                match cnf.kind {
                    MBConvKind::MBConv => stage.push(MBConv::new_on(&block_cnf, sd_prob, config.norm, o)),
                    MBConvKind::Fused => stage.push(FusedMBConv::new_on(&block_cnf, sd_prob, config.norm, o)),
                }
                block_id += 1;
            }
            features.push(stage);
        }
        let last_in = setting[setting.len() - 1].out_channels;
        let last_out = config.last_channel.unwrap_or(4 * last_in);
        features.push(Conv2dNormActivation::new(last_in, last_out, 1).norm(norm).activation(SiLU).build(o));
        let classifier = Sequential::new().add(Dropout { p: config.dropout }).add(Linear::new_on(
            last_out,
            num_classes,
            true,
            o,
        ));
        let model = EfficientNet { features, avgpool: AdaptiveAvgPool2d { output_size: [1, 1] }, classifier };
        if o.init {
            init_conv_bn_linear(&model, |l| {
                let range = 1.0 / (l.out_features() as f64).sqrt();
                uniform_(&l.weight, -range, range);
            });
        }
        model
    }

    /// The pooled features before the classifier: `[N, last_channel]`.
    pub fn features_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.avgpool.forward_t(&self.features.forward_t(xs, train), train).flatten(1, -1)
    }
}

impl ModuleT for EfficientNet {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.classifier.forward_t(&self.features_t(xs, train), train)
    }
}

impl crate::classifier::Classifier for EfficientNet {
    fn features_t(&self, xs: &Tensor, train: bool) -> Tensor {
        EfficientNet::features_t(self, xs, train)
    }
    fn head(&self) -> &dyn Module {
        &self.classifier
    }
}

/// The EfficientNet-B stages at a width and depth multiplier (torchvision's
/// `_efficientnet_conf("efficientnet_bX")`).
pub fn efficientnet_b_setting(width_mult: f64, depth_mult: f64) -> Vec<MBConvConfig> {
    let c = |e, k, s, i, o, n| MBConvConfig::mbconv(e, k, s, i, o, n, width_mult, depth_mult);
    vec![
        c(1.0, 3, 1, 32, 16, 1),
        c(6.0, 3, 2, 16, 24, 2),
        c(6.0, 5, 2, 24, 40, 2),
        c(6.0, 3, 2, 40, 80, 3),
        c(6.0, 5, 1, 80, 112, 3),
        c(6.0, 5, 2, 112, 192, 4),
        c(6.0, 3, 1, 192, 320, 1),
    ]
}

/// EfficientNetV2-S's stages (torchvision's `_efficientnet_conf("efficientnet_v2_s")`).
pub fn efficientnet_v2_s_setting() -> Vec<MBConvConfig> {
    let m = |e, k, s, i, o, n| MBConvConfig::mbconv(e, k, s, i, o, n, 1.0, 1.0);
    vec![
        MBConvConfig::fused(1.0, 3, 1, 24, 24, 2),
        MBConvConfig::fused(4.0, 3, 2, 24, 48, 4),
        MBConvConfig::fused(4.0, 3, 2, 48, 64, 4),
        m(4.0, 3, 2, 64, 128, 6),
        m(6.0, 3, 1, 128, 160, 9),
        m(6.0, 3, 2, 160, 256, 15),
    ]
}

/// torchvision's EfficientNet-B variants: name, width and depth multipliers, dropout.
const B_VARIANTS: [(&str, f64, f64, f64); 4] = [
    ("efficientnet_b0", 1.0, 1.0, 0.2),
    ("efficientnet_b1", 1.0, 1.1, 0.2),
    ("efficientnet_b2", 1.1, 1.2, 0.3),
    ("efficientnet_b3", 1.2, 1.4, 0.3),
];

fn efficientnet_b(index: usize, num_classes: i64, options: LayerOptions) -> EfficientNet {
    let (_, width, depth, dropout) = B_VARIANTS[index];
    let config = EfficientNetConfig {
        dropout,
        stochastic_depth_prob: 0.2,
        norm: BatchNormConfig::default(),
        last_channel: None,
    };
    EfficientNet::new_on(&efficientnet_b_setting(width, depth), config, num_classes, options)
}

macro_rules! b_variants {
    ($($name:ident, $name_on:ident, $index:literal, $doc:literal;)*) => {$(
        #[doc = $doc]
        pub fn $name(num_classes: i64) -> EfficientNet {
            $name_on(num_classes, LayerOptions::default())
        }

        #[doc = concat!("[`", stringify!($name), "`] with its tensors created in `options`' dtype on its device ")]
        #[doc = "(uninitialised with [`LayerOptions::skip_init`], for loading weights right after)."]
        pub fn $name_on(num_classes: i64, options: impl Into<LayerOptions>) -> EfficientNet {
            efficientnet_b($index, num_classes, options.into())
        }
    )*};
}

b_variants! {
    efficientnet_b0, efficientnet_b0_on, 0, "`torchvision.models.efficientnet_b0(num_classes=...)`: width 1.0, depth 1.0, dropout 0.2; 5.3M parameters at 1000 classes.";
    efficientnet_b1, efficientnet_b1_on, 1, "`torchvision.models.efficientnet_b1`: width 1.0, depth 1.1, dropout 0.2; 7.8M parameters.";
    efficientnet_b2, efficientnet_b2_on, 2, "`torchvision.models.efficientnet_b2`: width 1.1, depth 1.2, dropout 0.3; 9.1M parameters.";
    efficientnet_b3, efficientnet_b3_on, 3, "`torchvision.models.efficientnet_b3`: width 1.2, depth 1.4, dropout 0.3; 12.2M parameters.";
}

/// `torchvision.models.efficientnet_v2_s(num_classes=...)`: Fused-MBConv then MBConv stages,
/// BatchNorm eps 1e-3, 1280 final channels, dropout 0.2; 21.5M parameters at 1000 classes.
pub fn efficientnet_v2_s(num_classes: i64) -> EfficientNet {
    efficientnet_v2_s_on(num_classes, LayerOptions::default())
}

/// [`efficientnet_v2_s`] with its tensors created in `options`' dtype on its device
/// (uninitialised with [`LayerOptions::skip_init`]).
pub fn efficientnet_v2_s_on(num_classes: i64, options: impl Into<LayerOptions>) -> EfficientNet {
    let config = EfficientNetConfig {
        dropout: 0.2,
        stochastic_depth_prob: 0.2,
        norm: BatchNormConfig { eps: 1e-3, ..BatchNormConfig::default() },
        last_channel: Some(1280),
    };
    EfficientNet::new_on(&efficientnet_v2_s_setting(), config, num_classes, options)
}
