//! TorchScript export by tracing, loadable by Python's `torch.jit.load`.

use crate::error::{ExportError, Result};
use crate::io::check_parent;
use std::path::Path;
use tch::Tensor;
use torchlight_nn::{named_tensors, Inputs, Module, MultiInput, Role};
use torchlight_tensor::jit::{trace_and_save, trace_and_save_inputs, TracedTensor};

/// Traces `model` in eval mode on `example` (`[N, ...]`) and saves the TorchScript module to
/// `path`, through a temporary file and a rename.
///
/// The batch axis stays dynamic: the nn crate's layers never build shapes from sizes read in
/// Rust (`flatten(1, -1)`, not `view(n, -1)`), so the trace is valid at any batch size. Tracing
/// records the eval-mode graph (BatchNorm with running statistics, Dropout as identity).
/// Parameters and buffers become the TorchScript module's attributes under their `state_dict`
/// keys; parameters are frozen for the duration of the trace and their `requires_grad`
/// restored afterwards.
///
/// # Errors
/// [`ExportError::Io`] naming `path` (never the temporary file) when its folder is missing or
/// it cannot be written; [`ExportError::TorchScript`] when tracing fails.
pub fn export_torchscript(model: &dyn Module, example: &Tensor, path: impl AsRef<Path>) -> Result<()> {
    trace_to(model, path.as_ref(), &mut |traced, tmp| {
        trace_and_save(traced, example, &mut |x| model.forward_t(x, false), tmp)
    })
}

/// [`export_torchscript`] with the logits divided by `temperature` inside the traced graph
/// (temperature scaling: an `aten::div` by the constant after the model's forward), so
/// `softmax` of the module's output gives the calibrated probabilities.
///
/// # Errors
/// As [`export_torchscript`].
pub fn export_torchscript_calibrated(
    model: &dyn Module,
    example: &Tensor,
    temperature: f64,
    path: impl AsRef<Path>,
) -> Result<()> {
    trace_to(model, path.as_ref(), &mut |traced, tmp| {
        trace_and_save(traced, example, &mut |x| model.forward_t(x, false) / temperature, tmp)
    })
}

/// [`export_torchscript`] with test-time augmentation by the horizontal flip inside the traced
/// graph: the module runs the model on `cat([x, x.flip(-1)])` (one batch of both), divides the
/// logits by `temperature` when given, and returns the mean of the two softmax distributions,
/// `[N, classes]` class probabilities, as `torchlight predict --tta hflip` computes them.
///
/// # Errors
/// As [`export_torchscript`]; [`ExportError::TorchScript`] when the model's output is not
/// `[N, classes]`.
pub fn export_torchscript_hflip_tta(
    model: &dyn Module,
    example: &Tensor,
    temperature: Option<f64>,
    path: impl AsRef<Path>,
) -> Result<()> {
    let classes = {
        let _guard = torchlight_tensor::no_grad();
        let y = model.forward_t(&example.narrow(0, 0, 1), false);
        match y.size().as_slice() {
            [1, c] => *c,
            other => {
                return Err(ExportError::TorchScript(format!(
                "test-time augmentation (hflip) averages the class probabilities of `[N, classes]` logits; \
                     {} gives {other:?} at batch 1",
                model.kind()
            )))
            }
        }
    };
    trace_to(model, path.as_ref(), &mut |traced, tmp| {
        trace_and_save(
            traced,
            example,
            &mut |x| {
                let both = Tensor::cat(&[x.shallow_clone(), x.flip([-1])], 0);
                let logits = match temperature {
                    Some(t) => model.forward_t(&both, false) / t,
                    None => model.forward_t(&both, false),
                };
                logits.softmax(1, tch::Kind::Float).reshape([2, -1, classes]).mean_dim(
                    [0].as_slice(),
                    false,
                    tch::Kind::Float,
                )
            },
            tmp,
        )
    })
}

/// Traces a model of several inputs (a [`MultiInput`], e.g. a text classifier) in eval mode
/// through [`MultiInput::forward_inputs`] on `example`, and saves the TorchScript module to
/// `path` as [`export_torchscript`] does. The module's `forward` takes the inputs as positional
/// arguments in `example`'s (name) order: for the text classifiers `forward(ids, lengths)`,
/// ids int64 `[B, T]` and lengths int64 `[B]`, so `torch.jit.load(path)(ids, lengths)` gives
/// the logits.
///
/// The trace holds at any batch size and length: the text classifiers build their masks,
/// positions, padding and the LSTM's zero states from the inputs themselves, never from sizes
/// read in Rust (which a trace would freeze), and the packed LSTM is traced as
/// `aten::_pack_padded_sequence` and `aten::lstm` over the lengths tensor.
///
/// # Errors
/// As [`export_torchscript`]; a `forward_inputs` error (a missing input) is an
/// [`ExportError::TorchScript`] naming it.
pub fn export_torchscript_inputs(
    model: &dyn MultiInput,
    example: &Inputs,
    path: impl AsRef<Path>,
) -> Result<()> {
    trace_inputs(model, example, None, path.as_ref())
}

/// [`export_torchscript_inputs`] with the logits divided by `temperature` inside the traced
/// graph, as [`export_torchscript_calibrated`].
///
/// # Errors
/// As [`export_torchscript_inputs`].
pub fn export_torchscript_inputs_calibrated(
    model: &dyn MultiInput,
    example: &Inputs,
    temperature: f64,
    path: impl AsRef<Path>,
) -> Result<()> {
    trace_inputs(model, example, Some(temperature), path.as_ref())
}

fn trace_inputs(
    model: &dyn MultiInput,
    example: &Inputs,
    temperature: Option<f64>,
    path: &Path,
) -> Result<()> {
    let names: Vec<String> = example.iter().map(|(name, _)| name.to_string()).collect();
    let examples: Vec<(&str, &Tensor)> = example.iter().collect();
    trace_to(model, path, &mut |traced, tmp| {
        let forward = &mut |tensors: &[Tensor]| {
            let inputs = names
                .iter()
                .zip(tensors)
                .fold(Inputs::new(), |inputs, (name, t)| inputs.with(name.clone(), t.shallow_clone()));
            let logits = model.forward_inputs(&inputs, false).unwrap_or_else(|e| panic!("{e}"));
            match temperature {
                Some(t) => logits / t,
                None => logits,
            }
        };
        trace_and_save_inputs(traced, &examples, forward, tmp)
    })
}

/// The shared part of both exports: the folder checked, parameters frozen for the trace and
/// restored, `trace` writing the temporary file, the rename.
fn trace_to(
    model: &dyn Module,
    path: &Path,
    trace: &mut dyn FnMut(&[TracedTensor<'_>], &Path) -> torchlight_tensor::Result<()>,
) -> Result<()> {
    check_parent(path)?;
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
        trace(&traced, &tmp)
    };
    for (p, flag) in params.iter().zip(flags) {
        let _ = p.set_requires_grad(flag);
    }
    let renamed = result.map_err(|e| ExportError::TorchScript(first_line(&e.to_string()))).and_then(|()| {
        std::fs::rename(&tmp, path).map_err(|error| ExportError::Io { path: path.to_path_buf(), error })
    });
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
}

/// Loads a TorchScript file for inference (`torch.jit.load`), e.g. one written by
/// [`export_torchscript`] or by PyTorch.
///
/// # Errors
/// [`ExportError::Io`] when the file cannot be read; [`ExportError::NotTorchScript`] when it
/// is not a TorchScript module (a state_dict or checkpoint saved with `torch.save`, a legacy
/// file, anything else), in one line without libtorch's C++ stack.
pub fn load_torchscript(path: impl AsRef<Path>) -> Result<tch::CModule> {
    let path = path.as_ref();
    let not = |reason: String| ExportError::NotTorchScript { path: path.to_path_buf(), reason };
    let mut magic = [0u8; 4];
    {
        use std::io::Read;
        let io = |error| ExportError::Io { path: path.to_path_buf(), error };
        let n = std::fs::File::open(path).map_err(io)?.read(&mut magic).map_err(io)?;
        if n < 4 || &magic != b"PK\x03\x04" {
            let what = if magic[..2] == [0x80, 0x02] {
                "a pickle, e.g. a legacy torch.save file"
            } else {
                "not a zip archive"
            };
            return Err(not(what.to_string()));
        }
    }
    tch::CModule::load(path).map_err(|e| {
        let text = e.to_string();
        if text.contains("constants.pkl") {
            not("a zip archive without TorchScript code, such as a state_dict or checkpoint saved with \
                 torch.save"
                .to_string())
        } else {
            not(first_line(&text))
        }
    })
}

/// libtorch's message without its C++ stack trace, the `Internal torch error: ` prefix and
/// miniz's advice about corrupted checkpoints.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let line = line.strip_prefix("Internal torch error: ").unwrap_or(line);
    let line = line.split(" This is an internal miniz error.").next().unwrap_or(line);
    line.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtorch_messages_are_cut_to_their_first_line() {
        let raw = "Internal torch error: PytorchStreamReader failed reading zip archive: not a ZIP archive. \
                   This is an internal miniz error. If you are seeing this error...\nException raised from valid \
                   at inline_container.cc:242\nframe #0: c10::Error::Error";
        assert_eq!(first_line(raw), "PytorchStreamReader failed reading zip archive: not a ZIP archive.");
    }
}
