//! TorchScript export by tracing, loadable by Python's `torch.jit.load`.

use crate::error::{ExportError, Result};
use std::path::Path;
use tch::Tensor;
use torchlight_nn::{named_tensors, Module, Role};
use torchlight_tensor::jit::{trace_and_save, TracedTensor};

/// Traces `model` in eval mode on `example` (`[N, ...]`) and saves the TorchScript module to
/// `path`, through a temporary file and a rename.
///
/// The batch axis stays dynamic: the nn crate's layers never build shapes from sizes read in
/// Rust (`flatten(1, -1)`, not `view(n, -1)`), so the trace is valid at any batch size. Tracing
/// records the eval-mode graph (BatchNorm with running statistics, Dropout as identity).
/// Parameters and buffers become the TorchScript module's attributes under their `state_dict`
/// keys; parameters are frozen for the duration of the trace and their `requires_grad`
/// restored afterwards.
pub fn export_torchscript(model: &dyn Module, example: &Tensor, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let tensors = named_tensors(model);
    let params: Vec<&Tensor> =
        tensors.iter().filter(|(_, _, r)| *r == Role::Parameter).map(|(_, t, _)| t).collect();
    let flags: Vec<bool> = params.iter().map(|p| p.requires_grad()).collect();
    for p in &params {
        let _ = p.set_requires_grad(false);
    }
    let tmp = path.with_extension("pt.tmp");
    let traced: Vec<TracedTensor<'_>> = tensors
        .iter()
        .map(|(name, tensor, role)| TracedTensor { name, tensor, is_buffer: *role == Role::Buffer })
        .collect();
    let result = {
        let _guard = torchlight_tensor::no_grad();
        trace_and_save(&traced, example, &mut |x| model.forward_t(x, false), &tmp)
    };
    for (p, flag) in params.iter().zip(flags) {
        let _ = p.set_requires_grad(flag);
    }
    result.map_err(|e| ExportError::TorchScript(e.to_string()))?;
    std::fs::rename(&tmp, path).map_err(|error| ExportError::Io { path: path.to_path_buf(), error })
}

/// Loads a TorchScript file for inference (`torch.jit.load`), e.g. one written by
/// [`export_torchscript`] or by PyTorch.
pub fn load_torchscript(path: impl AsRef<Path>) -> Result<tch::CModule> {
    let path = path.as_ref();
    tch::CModule::load(path).map_err(|e| ExportError::TorchScript(format!("loading {}: {e}", path.display())))
}
