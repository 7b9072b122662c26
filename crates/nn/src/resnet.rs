//! The ResNet family (`torchvision.models.resnet18` ... `resnet152`), with torchvision's
//! parameter names so its weights load without a renaming table, and timm's `d` variants
//! (`resnet18d` ... `resnet152d`: deep stem, average-pool downsample) with timm's.

use crate::activation::ReLU;
use crate::batch_norm::{BatchNorm2d, BatchNormConfig};
use crate::conv::{Conv2d, Conv2dConfig};
use crate::flatten::Identity;
use crate::init::{constant_, kaiming_normal_, FanMode, Nonlinearity};
use crate::linear::Linear;
use crate::module::OwnTensor;
use crate::module::{visit_modules, Module};
use crate::options::LayerOptions;
use crate::pooling::{AdaptiveAvgPool2d, AvgPool2d, MaxPool2d};
use crate::sequential::Sequential;
use std::any::Any;
use tch::nn::ModuleT;
use tch::Tensor;

fn conv3x3(in_planes: i64, out_planes: i64, stride: i64, o: LayerOptions) -> Conv2d {
    let config = Conv2dConfig::default().with_stride(stride).with_padding(1).with_bias(false);
    Conv2d::new_on(in_planes, out_planes, 3, config, o)
}

fn conv1x1(in_planes: i64, out_planes: i64, stride: i64, o: LayerOptions) -> Conv2d {
    Conv2d::new_on(in_planes, out_planes, 1, Conv2dConfig::default().with_stride(stride).with_bias(false), o)
}

fn bn(planes: i64, o: LayerOptions) -> BatchNorm2d {
    BatchNorm2d::new_on(planes, BatchNormConfig::default(), o)
}

/// The residual block of resnet18/34: two 3x3 convolutions (`expansion` 1).
#[derive(Debug, Module)]
pub struct BasicBlock {
    /// 3x3, carries the block's stride.
    pub conv1: Conv2d,
    /// After `conv1`.
    pub bn1: BatchNorm2d,
    /// The ReLU after `bn1` and after the sum (stateless; listed where torchvision registers it).
    pub relu: ReLU,
    /// 3x3.
    pub conv2: Conv2d,
    /// After `conv2`.
    pub bn2: BatchNorm2d,
    /// 1x1 conv + BN on the shortcut when the shape changes (`downsample.0`, `downsample.1`).
    pub downsample: Option<Sequential>,
}

/// The residual block of resnet50/101/152: 1x1, 3x3 (with the stride, as torchvision's
/// "ResNet v1.5"), 1x1 expanding by 4.
#[derive(Debug, Module)]
pub struct Bottleneck {
    /// 1x1 reduce.
    pub conv1: Conv2d,
    /// After `conv1`.
    pub bn1: BatchNorm2d,
    /// 3x3, carries the block's stride.
    pub conv2: Conv2d,
    /// After `conv2`.
    pub bn2: BatchNorm2d,
    /// 1x1 expand.
    pub conv3: Conv2d,
    /// After `conv3`.
    pub bn3: BatchNorm2d,
    /// The ReLUs (stateless; listed where torchvision registers it).
    pub relu: ReLU,
    /// 1x1 conv + BN on the shortcut when the shape changes.
    pub downsample: Option<Sequential>,
}

fn shortcut(downsample: &Option<Sequential>, xs: &Tensor, train: bool) -> Tensor {
    match downsample {
        Some(d) => d.forward_t(xs, train),
        None => xs.shallow_clone(),
    }
}

impl ModuleT for BasicBlock {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let out = self.bn1.forward_t(&self.conv1.forward_t(xs, train), train).relu();
        let out = self.bn2.forward_t(&self.conv2.forward_t(&out, train), train);
        (out + shortcut(&self.downsample, xs, train)).relu()
    }
}

impl ModuleT for Bottleneck {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let out = self.bn1.forward_t(&self.conv1.forward_t(xs, train), train).relu();
        let out = self.bn2.forward_t(&self.conv2.forward_t(&out, train), train).relu();
        let out = self.bn3.forward_t(&self.conv3.forward_t(&out, train), train);
        (out + shortcut(&self.downsample, xs, train)).relu()
    }
}

/// Which residual block a ResNet stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// [`BasicBlock`] (resnet18, resnet34).
    Basic,
    /// [`Bottleneck`] (resnet50, resnet101, resnet152).
    Bottleneck,
}

impl BlockKind {
    /// Output channels per block over its `planes` (1 or 4).
    pub fn expansion(self) -> i64 {
        match self {
            BlockKind::Basic => 1,
            BlockKind::Bottleneck => 4,
        }
    }
}

/// What a ResNet departs from torchvision's by: timm's `ResNet(stem_type="deep", stem_width,
/// avg_down)`. The default is torchvision's ResNet; [`ResNetVariant::D`] is timm's `d` variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResNetVariant {
    /// timm's `stem_type="deep"` with `stem_width`: `conv1` is three 3x3 convolutions (stride 2,
    /// then 1, 1) to `stem_width`, `stem_width` and 64 channels, each of the first two followed
    /// by a BatchNorm and a ReLU (`conv1.0` ... `conv1.6`), instead of torchvision's 7x7. `None`:
    /// the 7x7.
    pub deep_stem: Option<i64>,
    /// timm's `avg_down`: a shortcut that downsamples is `AvgPool2d(2, stride, ceil_mode=True,
    /// count_include_pad=False)` (`Identity` at stride 1), a stride-1 1x1 convolution and a
    /// BatchNorm (`downsample.0` ... `downsample.2`), instead of a strided 1x1 convolution and a
    /// BatchNorm.
    pub avg_down: bool,
}

impl ResNetVariant {
    /// torchvision's ResNet.
    pub const TORCHVISION: ResNetVariant = ResNetVariant { deep_stem: None, avg_down: false };
    /// timm's `d` variants (`resnet50d`: `stem_width=32, stem_type="deep", avg_down=True`).
    pub const D: ResNetVariant = ResNetVariant { deep_stem: Some(32), avg_down: true };
}

/// A ResNet's first convolution(s), `conv1`: torchvision's 7x7 ([`Conv2d`], keys
/// `conv1.weight`) or timm's deep stem ([`Sequential`], keys `conv1.0.weight` ...). It is the
/// module it holds everywhere a model is walked (its kind, tensors, children and `as_any`
/// are the held module's), so the `state_dict` keys are that module's.
#[derive(Debug)]
pub enum ResNetStem {
    /// torchvision's 7x7 stride-2 convolution.
    Conv(Conv2d),
    /// timm's deep stem: conv, BN, ReLU, conv, BN, ReLU, conv.
    Deep(Sequential),
}

impl ResNetStem {
    /// The module held.
    pub fn inner(&self) -> &dyn Module {
        match self {
            ResNetStem::Conv(c) => c,
            ResNetStem::Deep(s) => s,
        }
    }

    fn inner_mut(&mut self) -> &mut dyn Module {
        match self {
            ResNetStem::Conv(c) => c,
            ResNetStem::Deep(s) => s,
        }
    }

    /// The first convolution: the 7x7, or the deep stem's `conv1.0`.
    pub fn first_conv(&self) -> &Conv2d {
        match self {
            ResNetStem::Conv(c) => c,
            ResNetStem::Deep(s) => s
                .children()
                .first()
                .and_then(|(_, m)| m.as_any().downcast_ref::<Conv2d>())
                .expect("a deep stem starts with a convolution"),
        }
    }
}

impl ModuleT for ResNetStem {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.inner().forward_t(xs, train)
    }
}

impl Module for ResNetStem {
    fn kind(&self) -> &'static str {
        self.inner().kind()
    }
    fn own_tensors(&self) -> Vec<OwnTensor<'_>> {
        self.inner().own_tensors()
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        self.inner().children()
    }
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module)> {
        self.inner_mut().children_mut()
    }
    fn as_any(&self) -> &dyn Any {
        self.inner().as_any()
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self.inner_mut().as_any_mut()
    }
}

/// `torchvision.models.ResNet`. Input `[N, 3, H, W]` (H, W >= 32), output logits
/// `[N, num_classes]`. State-dict keys are torchvision's (`conv1.weight`,
/// `layer1.0.bn1.running_mean`, `layer2.0.downsample.0.weight`, `fc.bias`, ...); with a
/// [`ResNetVariant`], timm's `ResNet` of those options, with timm's keys (`conv1.0.weight`,
/// `layer2.0.downsample.1.weight`).
#[derive(Debug, Module)]
pub struct ResNet {
    /// 7x7 stride-2 stem convolution, or timm's deep stem.
    pub conv1: ResNetStem,
    /// After `conv1`.
    pub bn1: BatchNorm2d,
    /// After `bn1` (stateless).
    pub relu: ReLU,
    /// 3x3 stride-2 max pool.
    pub maxpool: MaxPool2d,
    /// Stage 1 (64 planes).
    pub layer1: Sequential,
    /// Stage 2 (128 planes, stride 2).
    pub layer2: Sequential,
    /// Stage 3 (256 planes, stride 2).
    pub layer3: Sequential,
    /// Stage 4 (512 planes, stride 2).
    pub layer4: Sequential,
    /// Global average pool.
    pub avgpool: AdaptiveAvgPool2d,
    /// The classification head; replace it with [`ResNet::replace_fc`] for transfer learning.
    pub fc: Linear,
    /// The block kind, for reference.
    #[module(skip)]
    pub block: BlockKind,
    /// The stem and shortcut options, for reference.
    #[module(skip)]
    pub variant: ResNetVariant,
}

impl ResNet {
    /// A float32 CPU ResNet with `layers[i]` blocks in stage `i`, initialised as torchvision
    /// does (convolutions kaiming-normal fan-out ReLU, BatchNorm weight 1 and bias 0, the head
    /// with Linear's default), drawing from torch's generator in torchvision's order, so a
    /// seeded build equals torchvision's seeded build.
    pub fn new(block: BlockKind, layers: [usize; 4], num_classes: i64) -> Self {
        Self::new_on(block, layers, num_classes, LayerOptions::default())
    }

    /// The ResNet with every tensor created once, in `options`' dtype on its device
    /// (`resnet50(device=..., dtype=...)` where torchvision has it). With
    /// [`LayerOptions::skip_init`] no initialiser runs at all: the model is only storage for
    /// weights loaded right after.
    pub fn new_on(
        block: BlockKind,
        layers: [usize; 4],
        num_classes: i64,
        options: impl Into<LayerOptions>,
    ) -> Self {
        Self::with_variant_on(block, layers, num_classes, ResNetVariant::TORCHVISION, options)
    }

    /// [`ResNet::new_on`] with timm's stem and shortcut options (`resnet50d` is
    /// `Bottleneck, [3, 4, 6, 3], ResNetVariant::D`). Initialised as torchvision's ResNets,
    /// and, for a variant other than torchvision's, with timm's `zero_init_last` (each
    /// block's last BatchNorm weight 0), as timm builds them.
    pub fn with_variant_on(
        block: BlockKind,
        layers: [usize; 4],
        num_classes: i64,
        variant: ResNetVariant,
        options: impl Into<LayerOptions>,
    ) -> Self {
        let o = options.into();
        // torchvision's construction order, which is the order random init draws in: the stem,
        // then each stage (a block's downsample before its convolutions), then the head.
        let conv1 = match variant.deep_stem {
            None => ResNetStem::Conv(Conv2d::new_on(
                3,
                64,
                7,
                Conv2dConfig::default().with_stride(2).with_padding(3).with_bias(false),
                o,
            )),
            Some(width) => ResNetStem::Deep(
                Sequential::new()
                    .add(conv3x3(3, width, 2, o))
                    .add(bn(width, o))
                    .add(ReLU)
                    .add(conv3x3(width, width, 1, o))
                    .add(bn(width, o))
                    .add(ReLU)
                    .add(conv3x3(width, 64, 1, o)),
            ),
        };
        let bn1 = bn(64, o);
        let mut inplanes = 64;
        let mut stage = |planes: i64, blocks: usize, stride: i64| {
            let mut seq = Sequential::new();
            for i in 0..blocks {
                let s = if i == 0 { stride } else { 1 };
                let out = planes * block.expansion();
                let downsample = (s != 1 || inplanes != out).then(|| {
                    if variant.avg_down {
                        // timm's downsample_avg: the pool (Identity at stride 1), then a
                        // stride-1 1x1 convolution.
                        let pool = if s == 1 {
                            Sequential::new().add(Identity)
                        } else {
                            let mut pool = AvgPool2d::new(2, s, 0);
                            pool.ceil_mode = true;
                            pool.count_include_pad = false;
                            Sequential::new().add(pool)
                        };
                        pool.add(conv1x1(inplanes, out, 1, o)).add(bn(out, o))
                    } else {
                        Sequential::new().add(conv1x1(inplanes, out, s, o)).add(bn(out, o))
                    }
                });
                seq = match block {
                    BlockKind::Basic => seq.add(BasicBlock {
                        conv1: conv3x3(inplanes, planes, s, o),
                        bn1: bn(planes, o),
                        relu: ReLU,
                        conv2: conv3x3(planes, planes, 1, o),
                        bn2: bn(planes, o),
                        downsample,
                    }),
                    BlockKind::Bottleneck => seq.add(Bottleneck {
                        conv1: conv1x1(inplanes, planes, 1, o),
                        bn1: bn(planes, o),
                        conv2: conv3x3(planes, planes, s, o),
                        bn2: bn(planes, o),
                        conv3: conv1x1(planes, out, 1, o),
                        bn3: bn(out, o),
                        relu: ReLU,
                        downsample,
                    }),
                };
                inplanes = out;
            }
            seq
        };
        let layer1 = stage(64, layers[0], 1);
        let layer2 = stage(128, layers[1], 2);
        let layer3 = stage(256, layers[2], 2);
        let layer4 = stage(512, layers[3], 2);
        let model = ResNet {
            conv1,
            bn1,
            relu: ReLU,
            maxpool: MaxPool2d::new(3, 2, 1),
            layer1,
            layer2,
            layer3,
            layer4,
            avgpool: AdaptiveAvgPool2d { output_size: [1, 1] },
            fc: Linear::new_on(512 * block.expansion(), num_classes, true, o),
            block,
            variant,
        };
        if o.init {
            visit_modules(&model, &mut |_, m| {
                if let Some(conv) = m.as_any().downcast_ref::<Conv2d>() {
                    kaiming_normal_(&conv.weight, FanMode::FanOut, Nonlinearity::Relu);
                } else if let Some(norm) = m.as_any().downcast_ref::<BatchNorm2d>() {
                    norm.weight.iter().for_each(|w| constant_(w, 1.0));
                    norm.bias.iter().for_each(|b| constant_(b, 0.0));
                }
            });
            if variant != ResNetVariant::TORCHVISION {
                let _guard = tch::no_grad_guard();
                visit_modules(&model, &mut |_, m| {
                    let last = if let Some(b) = m.as_any().downcast_ref::<BasicBlock>() {
                        &b.bn2
                    } else if let Some(b) = m.as_any().downcast_ref::<Bottleneck>() {
                        &b.bn3
                    } else {
                        return;
                    };
                    last.weight.iter().for_each(|w| constant_(w, 0.0));
                });
            }
        }
        model
    }

    /// Replaces the head with a fresh `Linear(in_features, num_classes)` (PyTorch's default
    /// init) and returns the old one: `model.fc = nn.Linear(model.fc.in_features, n)`.
    pub fn replace_fc(&mut self, num_classes: i64) -> Linear {
        let w = &self.fc.weight;
        let fresh = Linear::new_on(self.fc.in_features(), num_classes, true, (w.kind(), w.device()));
        std::mem::replace(&mut self.fc, fresh)
    }

    /// The backbone's features before the head: `[N, 512 * expansion]`.
    pub fn features_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let x = self.bn1.forward_t(&self.conv1.forward_t(xs, train), train).relu();
        let x = self.maxpool.forward_t(&x, train);
        let x = self.layer1.forward_t(&x, train);
        let x = self.layer2.forward_t(&x, train);
        let x = self.layer3.forward_t(&x, train);
        let x = self.layer4.forward_t(&x, train);
        self.avgpool.forward_t(&x, train).flatten(1, -1)
    }
}

impl ModuleT for ResNet {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.fc.forward_t(&self.features_t(xs, train), train)
    }
}

impl crate::classifier::Classifier for ResNet {
    fn features_t(&self, xs: &Tensor, train: bool) -> Tensor {
        ResNet::features_t(self, xs, train)
    }
    fn head(&self) -> &dyn Module {
        &self.fc
    }
}

/// The ResNet family's names and their (block, stage depths, variant): torchvision's, then
/// timm's `d` variants.
const FAMILY: [(&str, BlockKind, [usize; 4], ResNetVariant); 10] = [
    ("resnet18", BlockKind::Basic, [2, 2, 2, 2], ResNetVariant::TORCHVISION),
    ("resnet34", BlockKind::Basic, [3, 4, 6, 3], ResNetVariant::TORCHVISION),
    ("resnet50", BlockKind::Bottleneck, [3, 4, 6, 3], ResNetVariant::TORCHVISION),
    ("resnet101", BlockKind::Bottleneck, [3, 4, 23, 3], ResNetVariant::TORCHVISION),
    ("resnet152", BlockKind::Bottleneck, [3, 8, 36, 3], ResNetVariant::TORCHVISION),
    ("resnet18d", BlockKind::Basic, [2, 2, 2, 2], ResNetVariant::D),
    ("resnet34d", BlockKind::Basic, [3, 4, 6, 3], ResNetVariant::D),
    ("resnet50d", BlockKind::Bottleneck, [3, 4, 6, 3], ResNetVariant::D),
    ("resnet101d", BlockKind::Bottleneck, [3, 4, 23, 3], ResNetVariant::D),
    ("resnet152d", BlockKind::Bottleneck, [3, 8, 36, 3], ResNetVariant::D),
];

macro_rules! family {
    ($($name:ident, $name_on:ident, $index:literal, $doc:literal;)*) => {$(
        #[doc = $doc]
        pub fn $name(num_classes: i64) -> ResNet {
            $name_on(num_classes, LayerOptions::default())
        }

        #[doc = concat!("[`", stringify!($name), "`] with its tensors created in `options`' dtype on its device ")]
        #[doc = "(uninitialised with [`LayerOptions::skip_init`], for loading weights right after)."]
        pub fn $name_on(num_classes: i64, options: impl Into<LayerOptions>) -> ResNet {
            let (_, block, layers, variant) = FAMILY[$index];
            ResNet::with_variant_on(block, layers, num_classes, variant, options)
        }
    )*};
}

family! {
    resnet18, resnet18_on, 0, "`torchvision.models.resnet18(num_classes=...)`: BasicBlock, [2, 2, 2, 2], 11.7M parameters at 1000 classes.";
    resnet34, resnet34_on, 1, "`torchvision.models.resnet34`: BasicBlock, [3, 4, 6, 3], 21.8M parameters.";
    resnet50, resnet50_on, 2, "`torchvision.models.resnet50`: Bottleneck, [3, 4, 6, 3], 25.6M parameters.";
    resnet101, resnet101_on, 3, "`torchvision.models.resnet101`: Bottleneck, [3, 4, 23, 3], 44.5M parameters.";
    resnet152, resnet152_on, 4, "`torchvision.models.resnet152`: Bottleneck, [3, 8, 36, 3], 60.2M parameters.";
    resnet18d, resnet18d_on, 5, "timm's `resnet18d`: BasicBlock, [2, 2, 2, 2], deep stem (32, 32, 64), average-pool downsample; timm's keys.";
    resnet34d, resnet34d_on, 6, "timm's `resnet34d`: BasicBlock, [3, 4, 6, 3], deep stem, average-pool downsample.";
    resnet50d, resnet50d_on, 7, "timm's `resnet50d`: Bottleneck, [3, 4, 6, 3], deep stem, average-pool downsample, 25.6M parameters.";
    resnet101d, resnet101d_on, 8, "timm's `resnet101d`: Bottleneck, [3, 4, 23, 3], deep stem, average-pool downsample.";
    resnet152d, resnet152d_on, 9, "timm's `resnet152d`: Bottleneck, [3, 8, 36, 3], deep stem, average-pool downsample.";
}

/// A ResNet by torchvision's name (`"resnet18"` ... `"resnet152"`) or timm's `d` variant's
/// (`"resnet18d"` ... `"resnet152d"`); `None` for other names.
pub fn resnet_by_name(name: &str, num_classes: i64) -> Option<ResNet> {
    resnet_by_name_on(name, num_classes, LayerOptions::default())
}

/// [`resnet_by_name`] with its tensors created in `options`' dtype on its device.
pub fn resnet_by_name_on(name: &str, num_classes: i64, options: impl Into<LayerOptions>) -> Option<ResNet> {
    let (_, block, layers, variant) = FAMILY.into_iter().find(|(n, _, _, _)| *n == name)?;
    Some(ResNet::with_variant_on(block, layers, num_classes, variant, options))
}
