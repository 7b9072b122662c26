//! `Batch`: what the Trainer needs to know of a loader's batch: move it to a device, count its
//! samples, check its inputs, and build a probe of the same shape for the out-of-memory search.

use std::collections::BTreeMap;
use tch::{Device, Tensor};
use torchlight_nn::Inputs;
use torchlight_tensor::to_device_non_blocking;

/// A batch of samples as a [`DataLoader`](torchlight_data::DataLoader) yields it, in the
/// shapes PyTorch's `default_collate` gives: the first dimension of every tensor is the batch.
///
/// Implemented for a tensor, tuples of two or three tensors (`(inputs, targets)`,
/// `(inputs, targets, weights)`), `Vec<Tensor>`, keyed batches (`BTreeMap<String, Tensor>`)
/// and the batches of models with several inputs (`(Inputs, targets)`, see
/// [`MultiInput`](torchlight_nn::MultiInput));
/// implement it for a batch type of your own the same way (Lightning's
/// `transfer_batch_to_device` is the `to_device` part).
pub trait Batch: Sized {
    /// The batch on `device`, copied without blocking the host where the source is pinned.
    fn to_device(&self, device: Device) -> Self;

    /// The tensors of the batch, in a fixed order (used for the checks below).
    fn tensors(&self) -> Vec<&Tensor>;

    /// Samples in the batch: the first dimension of its first tensor (0 for an empty batch).
    fn len(&self) -> usize {
        self.tensors().first().map_or(0, |t| t.size().first().copied().unwrap_or(0).max(0) as usize)
    }

    /// Whether the batch holds no sample.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether every floating-point tensor of the batch is free of NaN and Inf (one host read
    /// per tensor; used only after a step has gone bad, to say whether the data is at fault).
    fn all_finite(&self) -> bool {
        self.tensors()
            .into_iter()
            .filter(|t| t.is_floating_point())
            .all(|t| bool::try_from(t.isfinite().all()).unwrap_or(false))
    }

    /// A batch of `n` samples shaped and typed like this one, filled with zeros (class 0 for
    /// integer targets), on the same device: the probe the out-of-memory guard trains on to
    /// find the largest batch that fits.
    fn probe(&self, n: usize) -> Self;
}

fn probe_tensor(t: &Tensor, n: usize) -> Tensor {
    let mut size = t.size();
    if let Some(first) = size.first_mut() {
        *first = n as i64;
    }
    Tensor::zeros(size.as_slice(), (t.kind(), t.device()))
}

impl Batch for Tensor {
    fn to_device(&self, device: Device) -> Self {
        to_device_non_blocking(self, device)
    }
    fn tensors(&self) -> Vec<&Tensor> {
        vec![self]
    }
    fn probe(&self, n: usize) -> Self {
        probe_tensor(self, n)
    }
}

impl Batch for (Tensor, Tensor) {
    fn to_device(&self, device: Device) -> Self {
        (to_device_non_blocking(&self.0, device), to_device_non_blocking(&self.1, device))
    }
    fn tensors(&self) -> Vec<&Tensor> {
        vec![&self.0, &self.1]
    }
    fn probe(&self, n: usize) -> Self {
        (probe_tensor(&self.0, n), probe_tensor(&self.1, n))
    }
}

impl Batch for (Tensor, Tensor, Tensor) {
    fn to_device(&self, device: Device) -> Self {
        (
            to_device_non_blocking(&self.0, device),
            to_device_non_blocking(&self.1, device),
            to_device_non_blocking(&self.2, device),
        )
    }
    fn tensors(&self) -> Vec<&Tensor> {
        vec![&self.0, &self.1, &self.2]
    }
    fn probe(&self, n: usize) -> Self {
        (probe_tensor(&self.0, n), probe_tensor(&self.1, n), probe_tensor(&self.2, n))
    }
}

impl Batch for Vec<Tensor> {
    fn to_device(&self, device: Device) -> Self {
        self.iter().map(|t| to_device_non_blocking(t, device)).collect()
    }
    fn tensors(&self) -> Vec<&Tensor> {
        self.iter().collect()
    }
    fn probe(&self, n: usize) -> Self {
        self.iter().map(|t| probe_tensor(t, n)).collect()
    }
}

impl Batch for BTreeMap<String, Tensor> {
    fn to_device(&self, device: Device) -> Self {
        self.iter().map(|(k, t)| (k.clone(), to_device_non_blocking(t, device))).collect()
    }
    fn tensors(&self) -> Vec<&Tensor> {
        self.values().collect()
    }
    fn probe(&self, n: usize) -> Self {
        self.iter().map(|(k, t)| (k.clone(), probe_tensor(t, n))).collect()
    }
}

impl Batch for (Inputs, Tensor) {
    fn to_device(&self, device: Device) -> Self {
        (self.0.map(|t| to_device_non_blocking(t, device)), to_device_non_blocking(&self.1, device))
    }
    fn tensors(&self) -> Vec<&Tensor> {
        self.0.iter().map(|(_, t)| t).chain([&self.1]).collect()
    }
    fn probe(&self, n: usize) -> Self {
        (self.0.map(|t| probe_tensor(t, n)), probe_tensor(&self.1, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn probes_keep_shape_kind_and_device_but_the_batch_size() {
        let x = Tensor::ones([8, 3, 4, 4], (Kind::Float, Device::Cpu));
        let y = Tensor::ones([8], (Kind::Int64, Device::Cpu));
        let batch = (x, y);
        assert_eq!(batch.len(), 8);
        let (px, py) = batch.probe(2);
        assert_eq!((px.size(), px.kind()), (vec![2, 3, 4, 4], Kind::Float));
        assert_eq!((py.size(), py.kind()), (vec![2], Kind::Int64));
        assert_eq!(py.sum(Kind::Int64).int64_value(&[]), 0, "class 0 is a valid target");
    }

    #[test]
    fn non_finite_inputs_are_found_and_integer_tensors_ignored() {
        let x = Tensor::from_slice(&[1.0f32, f32::NAN]);
        let y = Tensor::from_slice(&[1i64, 2]);
        assert!(!(x.shallow_clone(), y.shallow_clone()).all_finite());
        assert!((Tensor::from_slice(&[1.0f32]), y).all_finite());
        let keyed: BTreeMap<String, Tensor> = [("image".to_string(), x)].into();
        assert!(!keyed.all_finite());
        assert_eq!(Batch::len(&keyed), 2, "samples, not keys");
    }

    #[test]
    fn batches_of_several_inputs_count_samples_and_probe_every_input() {
        let ids = Tensor::ones([4, 7], (Kind::Int64, Device::Cpu));
        let lengths = Tensor::from_slice(&[7i64, 5, 2, 1]);
        let batch =
            (Inputs::new().with("ids", ids).with("lengths", lengths), Tensor::from_slice(&[0i64, 1, 1, 0]));
        assert_eq!(batch.len(), 4);
        assert_eq!(batch.tensors().len(), 3);
        let (inputs, y) = batch.probe(2);
        assert_eq!(inputs.get("ids").unwrap().size(), [2, 7]);
        assert_eq!(inputs.get("lengths").unwrap().size(), [2]);
        assert_eq!(y.size(), [2]);
    }
}
