//! `torchlight-nn`: layers, initialisers, losses and the ResNet family, with PyTorch
//! `state_dict` names, so weights move to and from PyTorch and torchvision without renaming.
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
mod batch_norm;
mod conv;
mod dropout;
mod error;
mod flatten;
pub mod init;
mod linear;
mod loss;
mod module;
mod module_dict;
mod module_list;
mod options;
mod pooling;
mod pth;
mod registry;
mod resnet;
mod sequential;
mod state_dict;
mod var_store;

pub use activation::{LeakyReLU, ReLU, SiLU, Sigmoid, Tanh, GELU};
pub use batch_norm::{BatchNorm2d, BatchNormConfig};
pub use conv::{Conv2d, Conv2dConfig};
pub use dropout::Dropout;
pub use error::{NnError, Result};
pub use flatten::{Flatten, Identity};
pub use linear::Linear;
pub use loss::{BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, L1Loss, MSELoss, Reduction};
pub use module::{
    count_parameters, freeze, freeze_all_but, named_buffers, named_parameters, named_tensors, state_dict,
    summary_table, to_device, unfreeze, visit_modules, Module, OwnTensor, ParamCount, Role,
};
pub use module_dict::ModuleDict;
pub use module_list::ModuleList;
pub use options::LayerOptions;
pub use pooling::{AdaptiveAvgPool2d, AvgPool2d, MaxPool2d};
pub use pth::read_pth;
pub use registry::{architecture, architecture_names, register_architecture, Architecture};
pub use resnet::{
    resnet101, resnet101_on, resnet152, resnet152_on, resnet18, resnet18_on, resnet34, resnet34_on, resnet50,
    resnet50_on, resnet_by_name, resnet_by_name_on, BasicBlock, BlockKind, Bottleneck, ResNet,
};
pub use sequential::Sequential;
pub use state_dict::{
    load_state_dict, load_weights, read_safetensors, read_weights, save_safetensors, LoadOptions, LoadReport,
};
pub use tch::nn::ModuleT;
pub use var_store::VarStoreModule;
