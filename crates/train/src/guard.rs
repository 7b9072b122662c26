//! Training guards: the non-finite gradient check, the device check, and the out-of-memory
//! report with the largest batch that fits (found by halving), plus their messages.
//!
//! Cost: [`grads_all_finite`] reads every gradient once (a max-abs reduction per gradient,
//! which NaN and Inf propagate through, writing nothing) and reads one flag per device and
//! dtype back to the host per optimizer step; on CUDA that read waits for the backward pass to
//! finish, which the optimizer step has to do anyway, so it stops the host from queueing the
//! next batch's kernels early but moves no data. With a GradScaler the trainer leaves this
//! check to the scaler's own `found_inf`, which it reads anyway. The per-parameter search behind the error runs
//! only once a step has already gone bad.

use crate::error::{Result, TrainError};
use std::any::Any;
use tch::{Device, Kind, Tensor};
use torchlight_nn::{named_parameters, Module};

/// Whether every defined gradient in `params` is finite: the largest absolute value of each
/// gradient (`linalg.vector_norm(g, inf)`, NaN if any element is NaN), the maxima of each
/// (device, dtype) group checked together, and one host read per group. Unlike the fused
/// unscale kernel with a scale of 1 that this replaces, it writes nothing back into the
/// gradients. Parameters without a gradient, and empty gradients, are ignored.
pub fn grads_all_finite<'a>(params: impl IntoIterator<Item = &'a Tensor>) -> Result<bool> {
    let _guard = torchlight_tensor::no_grad();
    let mut groups: Vec<((Device, Kind), Vec<Tensor>)> = Vec::new();
    for p in params {
        let g = p.grad();
        if !g.defined() || g.numel() == 0 {
            continue;
        }
        let key = (g.device(), g.kind());
        // linalg.norm of the flattened gradient (a view: gradients are contiguous) with
        // ord=inf is vector_norm's max-abs reduction.
        let max_abs = g
            .f_reshape([-1])
            .and_then(|flat| flat.f_linalg_norm(f64::INFINITY, None::<&[i64]>, false, None::<Kind>))
            .map_err(torch_err)?;
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(max_abs),
            None => groups.push((key, vec![max_abs])),
        }
    }
    for (_, maxima) in &groups {
        let finite = Tensor::f_stack(maxima, 0).and_then(|m| m.f_isfinite()).and_then(|f| f.f_all());
        if !finite.and_then(bool::try_from).map_err(torch_err)? {
            return Ok(false);
        }
    }
    Ok(true)
}

fn torch_err(err: tch::TchError) -> TrainError {
    let message = err.to_string();
    TrainError::Tensor(torchlight_tensor::TensorError::Torch { op: "grads_all_finite", message })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{describe_non_finite, describe_out_of_memory};

    /// A parameter whose gradient is `grad`.
    fn with_grad(grad: Tensor) -> Tensor {
        let p = grad.zeros_like().set_requires_grad(true);
        (&p * &grad).sum(grad.kind()).backward();
        p
    }

    #[test]
    fn the_finite_check_finds_nan_and_both_infinities_in_any_float_dtype() {
        let big = with_grad(Tensor::from_slice(&[f32::MAX, -f32::MAX, 1.0]));
        let half = with_grad(Tensor::from_slice(&[65504f32, 1.0]).to_kind(Kind::Half));
        let empty = with_grad(Tensor::from_slice::<f32>(&[]));
        let no_grad = Tensor::zeros([2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        assert!(grads_all_finite([&big, &half, &empty, &no_grad]).unwrap(), "large finite values are finite");
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut values = vec![0.5f32; 4099];
            values[4000] = bad;
            let p = with_grad(Tensor::from_slice(&values));
            assert!(!grads_all_finite([&big, &p]).unwrap(), "{bad} in a float32 gradient");
            let q = with_grad(Tensor::from_slice(&values).to_kind(Kind::Half));
            assert!(!grads_all_finite([&q, &half]).unwrap(), "{bad} in a float16 gradient");
        }
    }

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
