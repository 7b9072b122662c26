//! `torchlight-nn`: layers, initialisers, losses and torchvision's classification backbones
//! (ResNet, MobileNetV2/V3, EfficientNet, ConvNeXt, ViT), with PyTorch `state_dict` names, so
//! weights move to and from PyTorch and torchvision without renaming.
//!
//! Forward passes are tch's `ModuleT::forward_t(xs, train)`; [`Module`] adds structure
//! (children, parameters, buffers) from which naming, counting, freezing, initialisation and
//! loading are derived. A model of one's own is a struct with `#[derive(Module)]` and a
//! hand-written forward pass; its fields are its `state_dict` path segments:
//!
//! ```
//! use tch::{Device, Kind, Tensor};
//! use torchlight_nn::{named_tensors, Conv2d, Conv2dConfig, Linear, Module, ModuleT};
//!
//! #[derive(Debug, Module)]
//! struct Net {
//!     stem: Conv2d,
//!     blocks: Vec<Conv2d>,  // numbered like nn.ModuleList: blocks.0, blocks.1
//!     head: Option<Linear>, // absent when None
//!     #[param]
//!     scale: Tensor,        // a parameter of Net itself
//!     #[module(skip)]
//!     width: i64,           // plain data
//! }
//!
//! impl ModuleT for Net {
//!     fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
//!         let x = self.blocks.iter().fold(self.stem.forward_t(xs, train), |x, b| b.forward_t(&x, train).relu());
//!         let x = x.mean_dim([2, 3].as_slice(), false, Kind::Float) * &self.scale;
//!         self.head.as_ref().map_or(x.shallow_clone(), |h| h.forward_t(&x, train))
//!     }
//! }
//!
//! let conv = |c_in| Conv2d::new(c_in, 8, 3, Conv2dConfig::default().with_padding(1).with_bias(false));
//! let net = Net {
//!     stem: conv(3),
//!     blocks: vec![conv(8), conv(8)],
//!     head: Some(Linear::new(8, 10, true)),
//!     scale: Tensor::ones([1], (Kind::Float, Device::Cpu)).set_requires_grad(true),
//!     width: 8,
//! };
//! let keys: Vec<String> = named_tensors(&net).into_iter().map(|(k, _, _)| k).collect();
//! assert_eq!(keys, ["scale", "stem.weight", "blocks.0.weight", "blocks.1.weight", "head.weight", "head.bias"]);
//! assert_eq!(net.forward_t(&Tensor::ones([2, 3, 8, 8], (Kind::Float, Device::Cpu)), false).size(), [2, 10]);
//! ```
//!
//! Every layer and ResNet can be built on its final dtype and device, and without random
//! initialisation when weights are loaded right after ([`LayerOptions`]); containers name
//! their children at run time ([`Sequential`], [`ModuleList`], [`ModuleDict`]); and a model
//! built with tch's own `nn` on a `VarStore` joins in through [`VarStoreModule`].

// `#[derive(Module)]` names this crate `::torchlight_nn`, also inside it.
extern crate self as torchlight_nn;

#[doc(hidden)]
#[path = "derive_support.rs"]
pub mod __derive;
mod activation;
mod attention;
mod batch_norm;
mod classifier;
mod conv;
mod conv_norm_activation;
mod convnext;
mod dropout;
mod efficientnet;
mod embedding;
mod embedding_bag;
mod error;
mod file_kind;
mod flatten;
pub mod init;
mod inputs;
mod layer_groups;
mod layer_norm;
mod linear;
mod loss;
mod mobile;
mod mobilenetv2;
mod mobilenetv3;
mod module;
mod module_dict;
mod module_list;
mod options;
mod packed_sequence;
mod pooling;
mod positional;
mod pth;
mod pth_write;
mod registry;
mod resnet;
mod rnn;
mod sequential;
mod squeeze_excitation;
mod state_dict;
mod stochastic_depth;
mod text_classifiers;
mod timm;
mod transformer;
mod var_store;
mod vision_transformer;

pub use activation::{Hardsigmoid, Hardswish, LeakyReLU, ReLU, ReLU6, SiLU, Sigmoid, Tanh, GELU};
pub use attention::MultiheadAttention;
pub use batch_norm::{
    freeze_batch_norm, probe_single_value_batch_norm, set_batch_norm_sync, unfreeze_batch_norm, BatchNorm2d,
    BatchNormConfig, BatchNormSync,
};
pub use classifier::{classifier_of, Classifier};
pub use conv::{Conv2d, Conv2dConfig};
pub use conv_norm_activation::{Conv2dNormActivation, Norm};
pub use convnext::{
    convnext_base, convnext_base_on, convnext_base_setting, convnext_setting, convnext_small,
    convnext_small_on, convnext_tiny, convnext_tiny_on, CNBlock, CNBlockConfig, ConvNeXt,
};
pub use dropout::Dropout;
pub use efficientnet::{
    efficientnet_b0, efficientnet_b0_on, efficientnet_b1, efficientnet_b1_on, efficientnet_b2,
    efficientnet_b2_on, efficientnet_b3, efficientnet_b3_on, efficientnet_b_setting, efficientnet_v2_s,
    efficientnet_v2_s_on, efficientnet_v2_s_setting, EfficientNet, EfficientNetConfig, FusedMBConv, MBConv,
    MBConvConfig, MBConvKind,
};
pub use embedding::{Embedding, EmbeddingConfig};
pub use embedding_bag::{EmbeddingBag, EmbeddingBagConfig, EmbeddingBagMode};
pub use error::{NnError, Result};
pub use flatten::{Flatten, Identity, Permute};
pub use inputs::{Inputs, MultiInput};
pub use layer_groups::{
    convnext_layer_ids, efficientnet_layer_ids, mobilenet_v2_layer_ids, mobilenet_v3_layer_ids,
    resnet_layer_ids, vit_layer_ids, LayerGroupsFn,
};
pub use layer_norm::{LayerNorm, LayerNorm2d};
pub use linear::Linear;
pub use loss::{BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, L1Loss, MSELoss, Reduction};
pub use mobilenetv2::{mobilenet_v2, mobilenet_v2_on, InvertedResidualV2, MobileNetV2};
pub use mobilenetv3::{
    mobilenet_v3_config, mobilenet_v3_large, mobilenet_v3_large_on, mobilenet_v3_small,
    mobilenet_v3_small_on, mobilenetv3_large_100_on, mobilenetv3_small_100_on, InvertedResidualConfig,
    InvertedResidualV3, MobileNetV3, MobileNetV3Arch,
};
pub use module::{
    count_parameters, freeze, freeze_all_but, named_buffers, named_parameters, named_parameters_with_kind,
    named_tensors, state_dict, summary_table, to_device, unfreeze, visit_modules, visit_modules_mut, Module,
    OwnTensor, ParamCount, Role,
};
pub use module_dict::ModuleDict;
pub use module_list::ModuleList;
pub use options::LayerOptions;
pub use packed_sequence::{pack_padded_sequence, pad_packed_sequence, PackedSequence};
pub use pooling::{AdaptiveAvgPool2d, AvgPool2d, MaxPool2d};
pub use positional::LearnedPositionalEmbedding;
pub use pth::{read_pth, read_pth_checkpoint, STATE_DICT_ENTRIES};
pub use pth_write::{save_pth, write_pth};
pub use registry::{
    architecture, architecture_list, architecture_names, canonical_architecture, register_architecture,
    Architecture, BuildFn, ClassifierFn, ModelSpec, ARCHITECTURE_ALIASES,
};
pub use resnet::{
    resnet101, resnet101_on, resnet101d, resnet101d_on, resnet152, resnet152_on, resnet152d, resnet152d_on,
    resnet18, resnet18_on, resnet18d, resnet18d_on, resnet34, resnet34_on, resnet34d, resnet34d_on, resnet50,
    resnet50_on, resnet50d, resnet50d_on, resnet_by_name, resnet_by_name_on, BasicBlock, BlockKind,
    Bottleneck, ResNet, ResNetStem, ResNetVariant,
};
pub use rnn::{GruOutput, LstmOutput, RnnConfig, GRU, LSTM};
pub use sequential::Sequential;
pub use squeeze_excitation::SqueezeExcitation;
pub use state_dict::{
    load_state_dict, load_weights, read_safetensors, read_weights, save_safetensors, write_safetensors,
    KeyRewrite, LoadOptions, LoadReport, WRAPPER_PREFIXES,
};
pub use stochastic_depth::{StochasticDepth, StochasticDepthMode};
pub use tch::nn::ModuleT;
pub use text_classifiers::{
    lengths_from_padding, BiLstmClassifier, Conv1d, FastText, TextClassifierConfig, TextCnn,
    TransformerClassifier, PAD_ID,
};
pub use timm::{
    check_timm_architecture, hub_weights_file, parse_hub_config, read_hub_folder, resample_abs_pos_embed,
    timm_layout, timm_to_torchvision, HubConfig, HubFolder, PretrainedCfg, HUB_WEIGHT_FILES,
    TIMM_ARCHITECTURES,
};
pub use transformer::{
    TransformerActivation, TransformerEncoder, TransformerEncoderLayer, TransformerEncoderLayerConfig,
};
pub use var_store::VarStoreModule;
pub use vision_transformer::{
    vit_b_16, vit_b_16_on, vit_s_16, vit_s_16_on, Encoder, EncoderBlock, VisionTransformer, VitConfig,
};
