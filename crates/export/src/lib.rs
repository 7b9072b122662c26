//! `torchlight-export`: the model leaves Rust as a file another program can run.
//!
//! - [`export_torchscript`]: traced TorchScript that Python's `torch.jit.load` (and
//!   [`load_torchscript`]) run at any batch size.
//! - [`export_onnx`]: ONNX opset 17 written natively (no Python, no `protoc`), with a dynamic
//!   batch axis, weights as initializers and `metadata_props` for preprocessing; a layer of
//!   your own exports through its [`OnnxExport`] rule.
//! - Text classifiers (`FastText`, `TextCnn`, `BiLstmClassifier`, `TransformerClassifier`), two
//!   inputs: [`export_text_onnx`] writes a graph with inputs `ids` (int64 `[batch, length]`, pad
//!   id 0 past each length) and `lengths` (int64 `[batch]`), both axes symbolic, and the output
//!   `logits` (float `[batch, classes]`), mirroring each model's `forward_padded` (masks built
//!   from `lengths`, so padding never changes the logits; the BiLSTM as ONNX `LSTM` with
//!   `sequence_lens`); [`export_torchscript_inputs`] traces `forward_inputs`, so
//!   `torch.jit.load(path)(ids, lengths)` gives the logits at any batch size and length.
//!   onnxruntime agrees with `forward_inputs` to 1e-5 (measured: at most 1.2e-7 on logits of
//!   order 1), `torch.jit` exactly.
//! - Temperature scaling: [`OnnxOptions::with_temperature`] and
//!   [`TextOnnxOptions::with_temperature`] put a `Div` by the temperature after the logits
//!   and record it as the `temperature` metadata entry;
//!   [`export_torchscript_calibrated`] and [`export_torchscript_inputs_calibrated`] trace the
//!   division into the TorchScript graph.
//! - Test-time augmentation by the horizontal flip: [`OnnxOptions::with_hflip_tta`] and
//!   [`export_torchscript_hflip_tta`] run the model on the input and its mirror image in one
//!   batch and output the mean of the two softmax distributions (class probabilities, after
//!   any temperature), as `torchlight predict --tta hflip` averages them; the ONNX metadata
//!   says `tta` = `hflip` and `output` = `probabilities`.
//! - [`EvalPreprocessing`] (torchlight-vision's, re-exported): the evaluation recipe both
//!   carry, so a deployer need not guess it.

mod error;
mod io;
mod onnx;
pub mod onnx_proto;
mod torchscript;

pub use error::{ExportError, Result};
pub use onnx::{
    export_onnx, export_text_onnx, onnx_attr, onnx_model, register_onnx_rule, text_onnx_model, OnnxExport,
    OnnxGraph, OnnxOptions, OnnxValue, TextOnnxOptions, OPSET,
};
pub use torchlight_vision::{CropMode, EvalPreprocessing, InterpolationMode};
pub use torchscript::{
    export_torchscript, export_torchscript_calibrated, export_torchscript_hflip_tta,
    export_torchscript_inputs, export_torchscript_inputs_calibrated, load_torchscript,
};
