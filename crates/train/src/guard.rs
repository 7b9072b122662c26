//! Training guards: the non-finite gradient check, the device check, and the out-of-memory
//! report with the largest batch that fits (found by halving), plus their messages.
//!
//! Cost: [`grads_all_finite`] reads every gradient once (a sum per gradient, vectorised,
//! which NaN and Inf propagate through, writing nothing) and reads one flag per device and
//! dtype back to the host per optimizer step; on CUDA that read waits for the backward pass to
//! finish, so [`GuardRead::Deferred`](crate::GuardRead::Deferred) (the default there) hands the
//! flag to the fused optimizer kernels instead and reads it a step later. With a GradScaler the
//! trainer leaves this check to the scaler's own `found_inf`, which it reads anyway. The
//! per-parameter search behind the error runs only once a step has already gone bad.

use crate::error::{Result, TrainError};
use std::any::Any;
use tch::{Device, Kind, Tensor};
use torchlight_nn::{named_parameters, Module};

/// Whether every defined gradient in `params` is finite: a sum of each gradient (NaN or Inf
/// if any element is), the sums of each (device, dtype) group checked together, and one host
/// read per group; only when a sum is not finite (a bad step, or finite values summing past
/// the accumulator's range) is each gradient's largest absolute value checked, exactly. It
/// writes nothing into the gradients. Parameters without a gradient, and empty gradients, are
/// ignored.
pub fn grads_all_finite<'a>(params: impl IntoIterator<Item = &'a Tensor>) -> Result<bool> {
    let params: Vec<&Tensor> = params.into_iter().collect();
    if GradCheck::new(params.iter().copied())?.all_finite()? {
        return Ok(true);
    }
    let _guard = torchlight_tensor::no_grad();
    for p in params {
        let g = p.grad();
        if !g.defined() || g.numel() == 0 {
            continue;
        }
        // linalg.norm of the flattened gradient (a view: gradients are contiguous) with
        // ord=inf is vector_norm's max-abs reduction: exact, but several times slower than a sum.
        let max_abs = g
            .f_reshape([-1])
            .and_then(|flat| flat.f_linalg_norm(f64::INFINITY, None::<&[i64]>, false, None::<Kind>))
            .map_err(torch_err)?;
        if !is_all_finite(&max_abs) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The per-gradient sums behind the non-finite check, kept on the device: read them now
/// ([`all_finite`](Self::all_finite)), or hand [`found_inf`](Self::found_inf) to the fused
/// optimizer kernels (which then skip the update on the device) and read the check a step
/// later, with no host sync in between. A sum is NaN or Inf when an element is, and also when
/// finite elements sum past the range of its accumulator (float32, or float64 for float64
/// gradients): such a gradient counts as non-finite here.
#[derive(Debug)]
pub struct GradCheck {
    /// Per (device, dtype): the indices (into the parameters given) of the gradients checked,
    /// and their sums stacked.
    groups: Vec<(Vec<usize>, Tensor)>,
}

/// One (device, dtype) group of a [`GradCheck`] before stacking: the key, the gradients'
/// indices and their sums.
type Unstacked = ((Device, Kind), Vec<usize>, Vec<Tensor>);

impl GradCheck {
    /// Queues one sum per defined, non-empty gradient of `params`; reads nothing.
    pub fn new<'a>(params: impl IntoIterator<Item = &'a Tensor>) -> Result<Self> {
        let _guard = torchlight_tensor::no_grad();
        let mut groups: Vec<Unstacked> = Vec::new();
        for (i, p) in params.into_iter().enumerate() {
            let g = p.grad();
            if !g.defined() || g.numel() == 0 {
                continue;
            }
            let key = (g.device(), g.kind());
            // Half-precision gradients are summed in float32, which their largest finite
            // values cannot overflow one by one.
            let acc = if g.kind() == Kind::Double { Kind::Double } else { Kind::Float };
            let sum = g.f_sum(acc).map_err(torch_err)?;
            match groups.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, idx, v)) => {
                    idx.push(i);
                    v.push(sum);
                }
                None => groups.push((key, vec![i], vec![sum])),
            }
        }
        let groups = groups
            .into_iter()
            .map(|(_, idx, sums)| Ok((idx, Tensor::f_stack(&sums, 0).map_err(torch_err)?)))
            .collect::<Result<_>>()?;
        Ok(GradCheck { groups })
    }

    /// Whether every checked gradient is finite: one host read per (device, dtype) group.
    pub fn all_finite(&self) -> Result<bool> {
        for (_, sums) in &self.groups {
            let finite = sums.f_isfinite().and_then(|f| f.f_all());
            if !finite.and_then(bool::try_from).map_err(torch_err)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// A 0-dim float32 flag on `device` (GradScaler's shape), 1 where some gradient is NaN or
    /// Inf, else 0: the `found_inf` that PyTorch's fused optimizer kernels take. Reads nothing.
    pub fn found_inf(&self, device: Device) -> Result<Tensor> {
        let _guard = torchlight_tensor::no_grad();
        let mut flag = Tensor::f_zeros([] as [i64; 0], (Kind::Float, device)).map_err(torch_err)?;
        for (_, sums) in &self.groups {
            let bad = sums
                .f_isfinite()
                .and_then(|f| f.f_all())
                .and_then(|f| f.f_logical_not())
                .and_then(|f| f.f_to(device))
                .and_then(|f| f.f_to_kind(Kind::Float))
                .map_err(torch_err)?;
            flag = flag.f_maximum(&bad).map_err(torch_err)?;
        }
        Ok(flag)
    }

    /// The index (into the parameters given to [`new`](Self::new)) of every gradient holding
    /// NaN or Inf, ascending: one host read per group.
    pub fn non_finite(&self) -> Result<Vec<usize>> {
        let mut bad = Vec::new();
        for (idx, sums) in &self.groups {
            let finite = sums.f_isfinite().and_then(|f| f.f_to(Device::Cpu)).map_err(torch_err)?;
            let finite = Vec::<bool>::try_from(&finite).map_err(torch_err)?;
            bad.extend(idx.iter().zip(finite).filter(|(_, ok)| !ok).map(|(i, _)| *i));
        }
        bad.sort_unstable();
        Ok(bad)
    }
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

/// Whether a libtorch error message reports an allocation failure: CUDA's "CUDA out of
/// memory" (and the CUDA runtime's "out of memory"), or the CPU allocator's "can't allocate
/// memory" (a failed `malloc`, e.g. under `ulimit -v`; without such a limit Linux usually
/// kills the process instead of failing the allocation).
pub fn is_out_of_memory(message: &str) -> bool {
    message.contains("out of memory") || message.contains("can't allocate memory")
}

/// The input shape in nn's BatchNorm panic over one value per channel ("Expected more than 1
/// value per channel when training, got input size [1, 8, 1, 1]"), if `message` is that panic.
pub fn batch_norm_single_value(message: &str) -> Option<Vec<i64>> {
    let shape =
        message.strip_prefix("Expected more than 1 value per channel when training, got input size ")?;
    let inner = shape.trim().strip_prefix('[')?.strip_suffix(']')?;
    inner.split(',').map(|d| d.trim().parse().ok()).collect()
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
    fn finite_values_summing_past_float32_are_confirmed_finite_by_the_exact_check() {
        let overflowing = with_grad(Tensor::from_slice(&[f32::MAX, f32::MAX, 1.0]));
        let check = GradCheck::new([&overflowing]).unwrap();
        assert!(!check.all_finite().unwrap(), "the sum alone overflows to inf");
        assert!(grads_all_finite([&overflowing]).unwrap(), "every element is finite");
    }

    #[test]
    fn the_device_flag_and_the_bad_indices_name_the_non_finite_gradients() {
        let good = with_grad(Tensor::from_slice(&[1f32, -2.0]));
        let no_grad = Tensor::zeros([2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let nan = with_grad(Tensor::from_slice(&[0.5f32, f32::NAN]));
        let inf = with_grad(Tensor::from_slice(&[f64::NEG_INFINITY, 1.0]));
        let check = GradCheck::new([&good, &no_grad, &nan, &inf]).unwrap();
        let flag = check.found_inf(Device::Cpu).unwrap();
        assert_eq!((flag.kind(), flag.size(), flag.double_value(&[])), (Kind::Float, vec![], 1.0));
        assert_eq!(check.non_finite().unwrap(), [2, 3], "indices into the parameters given");
        let check = GradCheck::new([&good, &no_grad]).unwrap();
        assert_eq!(check.found_inf(Device::Cpu).unwrap().double_value(&[]), 0.0);
        assert!(check.non_finite().unwrap().is_empty() && check.all_finite().unwrap());
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
        // libtorch 2.11's CPU allocator, as the reference PyTorch words it.
        assert!(is_out_of_memory(
            "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: \
             you tried to allocate 1000000000000000 bytes. Error code 12 (Cannot allocate memory)"
        ));
        let m = describe_out_of_memory("cuda:0", 256, &[256, 3, 224, 224], Some(64), true);
        assert_eq!(
            m,
            "cuda:0 ran out of memory at batch size 256 (inputs [256, 3, 224, 224]); the largest batch that fits is 64: \
             set train.batch_size = 64 (and train.accumulation_steps = 4 to keep the effective batch)"
        );
        let m = describe_out_of_memory("cuda:1", 2, &[2, 3, 4096, 4096], None, true);
        assert!(m.contains("batch size 2") && m.contains("one sample of shape [3, 4096, 4096]"), "{m}");
        let m = describe_out_of_memory("cuda:1", 32, &[32, 3, 224, 224], None, false);
        assert!(m.contains("was not searched") && !m.contains("not even one sample"), "{m}");
        let e = TrainError::OutOfMemory {
            device: "cuda:0".into(),
            batch_size: 32,
            input_shape: vec![32, 3, 512, 512],
            fits: Some(16),
            searched: true,
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
