//! `torchlight-nn`: layers, initialisers, losses and the ResNet family, with PyTorch
//! `state_dict` names, so weights move to and from PyTorch and torchvision without renaming.
//!
//! Forward passes are tch's `ModuleT::forward_t(xs, train)`; [`Module`] adds structure
//! (children, parameters, buffers) from which naming, counting, freezing, initialisation and
//! loading are derived.

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
mod pooling;
mod pth;
mod resnet;
mod sequential;
mod state_dict;

pub use activation::{LeakyReLU, ReLU, SiLU, Sigmoid, Tanh, GELU};
pub use batch_norm::{BatchNorm2d, BatchNormConfig};
pub use conv::{Conv2d, Conv2dConfig};
pub use dropout::Dropout;
pub use error::{NnError, Result};
pub use flatten::{Flatten, Identity};
pub use linear::Linear;
pub use loss::{BCEWithLogitsLoss, CrossEntropyLoss, MSELoss, Reduction};
pub use module::{
    count_parameters, freeze, freeze_all_but, named_buffers, named_parameters, named_tensors, state_dict,
    summary_table, to_device, unfreeze, visit_modules, Module, OwnTensor, ParamCount, Role,
};
pub use pooling::{AdaptiveAvgPool2d, AvgPool2d, MaxPool2d};
pub use pth::read_pth;
pub use resnet::{
    resnet101, resnet152, resnet18, resnet34, resnet50, resnet_by_name, BasicBlock, BlockKind, Bottleneck,
    ResNet,
};
pub use sequential::Sequential;
pub use state_dict::{
    load_state_dict, load_weights, read_safetensors, read_weights, save_safetensors, write_safetensors,
    LoadOptions, LoadReport,
};
pub use tch::nn::ModuleT;
