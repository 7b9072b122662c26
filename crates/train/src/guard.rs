//! Training guards: the non-finite gradient check, the device check, and the out-of-memory
//! report with the largest batch that fits (found by halving), plus their messages.
//!
//! Cost: [`grads_all_finite`] is one fused kernel over all gradients
//! (`_amp_foreach_non_finite_check_and_unscale_` with a scale of 1) and one read of a single
//! float back to the host per optimizer step; on CUDA that read waits for the backward pass to
//! finish, which the optimizer step has to do anyway, so it stops the host from queueing the
//! next batch's kernels early but moves no data. The per-parameter search behind the error runs
//! only once a step has already gone bad.

use crate::error::{Result, TrainError};
use std::any::Any;
use tch::{Device, Kind, Tensor};
use torchlight_nn::{named_parameters, Module};
use torchlight_tensor::non_finite_check_and_unscale;

/// Whether every defined gradient in `params` is finite: one fused check per (device, dtype)
/// group and one host read. Parameters without a gradient are ignored.
pub fn grads_all_finite<'a>(params: impl IntoIterator<Item = &'a Tensor>) -> Result<bool> {
    let mut groups: Vec<((Device, Kind), Vec<Tensor>)> = Vec::new();
    for p in params {
        let g = p.grad();
        if !g.defined() {
            continue;
        }
        let key = (g.device(), g.kind());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(g),
            None => groups.push((key, vec![g])),
        }
    }
    let mut found: Option<Tensor> = None;
    for ((device, _), grads) in &groups {
        let flag = Tensor::zeros([1], (Kind::Float, *device));
        let one = Tensor::ones([1], (Kind::Float, *device));
        non_finite_check_and_unscale(grads, &flag, &one)?;
        let flag = flag.to_device(Device::Cpu);
        found = Some(match found {
            Some(f) => f + flag,
            None => flag,
        });
    }
    Ok(found.is_none_or(|f| f.double_value(&[0]) == 0.0))
}

/// The first parameter of `model` (`state_dict` order) whose gradient holds NaN or Inf.
pub fn first_non_finite_grad(model: &dyn Module) -> Option<String> {
    named_parameters(model).into_iter().find_map(|(name, p)| {
        let g = p.grad();
        (g.defined() && !bool::try_from(g.isfinite().all()).unwrap_or(true)).then_some(name)
    })
}

/// Whether every element of `tensor` is finite (one host read).
pub fn is_all_finite(tensor: &Tensor) -> bool {
    !tensor.is_floating_point() || bool::try_from(tensor.isfinite().all()).unwrap_or(false)
}

/// An error when `model`'s parameters are not on `device`, where batches are put.
pub fn check_device(model: &dyn Module, device: Device) -> Result<()> {
    match named_parameters(model).first() {
        Some((_, p)) if p.device() != device => {
            Err(TrainError::DeviceMismatch { model: device_name(p.device()), batch: device_name(device) })
        }
        _ => Ok(()),
    }
}

/// `cpu`, `cuda:0`: PyTorch's spelling.
pub fn device_name(device: Device) -> String {
    match device {
        Device::Cpu => "cpu".into(),
        Device::Cuda(i) => format!("cuda:{i}"),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// Whether a libtorch error message reports an allocation failure.
pub fn is_out_of_memory(message: &str) -> bool {
    message.contains("out of memory")
}

/// The text of a panic payload (tch panics with libtorch's message).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Halves `batch` until `fits(b)` holds and returns that `b`; `None` when not even 1 fits.
pub fn largest_fitting_batch(batch: usize, mut fits: impl FnMut(usize) -> bool) -> Option<usize> {
    let mut b = batch / 2;
    while b >= 1 {
        if fits(b) {
            return Some(b);
        }
        b /= 2;
    }
    None
}

/// The message of [`TrainError::NonFinite`].
pub(crate) fn describe_non_finite(
    epoch: u64,
    step: u64,
    lr: f64,
    loss: f64,
    inputs_finite: bool,
    parameter: Option<&str>,
) -> String {
    let what = match parameter {
        Some(p) => {
            let layer = p.rsplit_once('.').map_or(p, |(l, _)| l);
            format!("non-finite gradient in `{p}` (layer `{layer}`)")
        }
        None => "non-finite loss".to_string(),
    };
    let fix = if inputs_finite {
        "lower the lr or set train.grad_clip (or train.on_nonfinite = \"skip\")"
    } else {
        "the batch holds NaN/Inf inputs: check the data and its transforms"
    };
    format!(
        "epoch {epoch}, step {step}: {what}; loss {loss}, lr {lr:.3e}, batch inputs {}; {fix}",
        if inputs_finite { "finite" } else { "NOT finite" }
    )
}

/// The message of [`TrainError::OutOfMemory`].
pub(crate) fn describe_out_of_memory(
    device: &str,
    batch_size: usize,
    input_shape: &[i64],
    fits: Option<usize>,
) -> String {
    let sample: Vec<i64> = input_shape.iter().skip(1).copied().collect();
    let hint = match fits {
        Some(b) => format!(
            "the largest batch that fits is {b}: set train.batch_size = {b} (and train.accumulation_steps = {} to keep the effective batch)",
            batch_size.div_ceil(b)
        ),
        None => format!(
            "not even one sample of shape {sample:?} fits: lower data.image_size or use a smaller model"
        ),
    };
    format!("{device} ran out of memory at batch size {batch_size} (inputs {input_shape:?}); {hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halving_finds_the_largest_batch_that_fits() {
        let mut tried = Vec::new();
        let fits = largest_fitting_batch(64, |b| {
            tried.push(b);
            b <= 12
        });
        assert_eq!((fits, tried), (Some(8), vec![32, 16, 8]));
        assert_eq!(largest_fitting_batch(8, |_| false), None);
        assert_eq!(largest_fitting_batch(1, |_| true), None, "a batch of 1 cannot be halved");
    }

    #[test]
    fn out_of_memory_messages_name_batch_image_and_fix() {
        assert!(is_out_of_memory("CUDA out of memory. Tried to allocate 2.00 GiB"));
        assert!(!is_out_of_memory("Expected all tensors to be on the same device"));
        let m = describe_out_of_memory("cuda:0", 256, &[256, 3, 224, 224], Some(64));
        assert_eq!(
            m,
            "cuda:0 ran out of memory at batch size 256 (inputs [256, 3, 224, 224]); the largest batch that fits is 64: \
             set train.batch_size = 64 (and train.accumulation_steps = 4 to keep the effective batch)"
        );
        let m = describe_out_of_memory("cuda:1", 2, &[2, 3, 4096, 4096], None);
        assert!(m.contains("batch size 2") && m.contains("one sample of shape [3, 4096, 4096]"), "{m}");
        let e = TrainError::OutOfMemory {
            device: "cuda:0".into(),
            batch_size: 32,
            input_shape: vec![32, 3, 512, 512],
            fits: Some(16),
        };
        assert!(e.to_string().contains("train.batch_size = 16"), "{e}");
    }

    #[test]
    fn non_finite_messages_name_step_lr_inputs_and_layer() {
        let m = describe_non_finite(2, 17, 10.0, f64::NAN, true, Some("layer1.0.conv1.weight"));
        assert_eq!(
            m,
            "epoch 2, step 17: non-finite gradient in `layer1.0.conv1.weight` (layer `layer1.0.conv1`); \
             loss NaN, lr 1.000e1, batch inputs finite; lower the lr or set train.grad_clip (or train.on_nonfinite = \"skip\")"
        );
        let m = describe_non_finite(1, 1, 1e-3, f64::INFINITY, false, None);
        assert!(m.contains("non-finite loss") && m.contains("batch inputs NOT finite"), "{m}");
    }

    #[test]
    fn the_fused_check_finds_a_single_bad_gradient() {
        let a = Tensor::ones([3], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let b = Tensor::ones([2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        (&a * 2.0).sum(Kind::Float).backward();
        assert!(grads_all_finite([&a, &b]).unwrap(), "b has no gradient and is ignored");
        (&b * f64::NAN).sum(Kind::Float).backward();
        assert!(!grads_all_finite([&a, &b]).unwrap());
        assert_eq!(
            a.grad().sum(Kind::Float).double_value(&[]),
            6.0,
            "a scale of 1 leaves gradients as they were"
        );
    }

    #[test]
    fn panic_payloads_become_text() {
        use std::panic::catch_unwind;
        let p = catch_unwind(|| panic!("CUDA out of memory. Tried {}", 1)).unwrap_err();
        assert!(is_out_of_memory(&panic_message(p.as_ref())));
    }
}
