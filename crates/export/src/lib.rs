//! `torchlight-export`: the model leaves Rust as a file another program can run.
//!
//! - [`export_torchscript`]: traced TorchScript that Python's `torch.jit.load` (and
//!   [`load_torchscript`]) run at any batch size.
//! - [`export_onnx`]: ONNX opset 17 written natively (no Python, no `protoc`), with a dynamic
//!   batch axis, weights as initializers and `metadata_props` for preprocessing; a layer of
//!   your own exports through its [`OnnxExport`] rule.
//! - [`EvalPreprocessing`] (torchlight-vision's, re-exported): the evaluation recipe both
//!   carry, so a deployer need not guess it.

mod error;
mod io;
mod onnx;
pub mod onnx_proto;
mod torchscript;

pub use error::{ExportError, Result};
pub use onnx::{
    export_onnx, onnx_attr, onnx_model, register_onnx_rule, OnnxExport, OnnxGraph, OnnxOptions, OnnxValue,
    OPSET,
};
pub use torchlight_vision::{EvalPreprocessing, InterpolationMode};
pub use torchscript::{export_torchscript, load_torchscript};
