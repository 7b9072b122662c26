//! Models with more than one input: [`Inputs`], named tensors that share the batch dimension
//! (token ids with their lengths or offsets, an attention mask), and [`MultiInput`], the
//! forward pass that takes them.
//!
//! Every [`Module`] is a tch `ModuleT`, whose `forward_t` takes one tensor: that is the form
//! export and the image tools use. A model whose forward needs more than that (a text model:
//! ids `[N, L]` and lengths `[N]`) implements `MultiInput` besides; its `forward_t` stays
//! the one-tensor form (for a text model, padded ids, the lengths recovered from the padding).
//! The Trainer's tasks accept `(Inputs, targets)` batches for such models.

use crate::error::{NnError, Result};
use crate::module::Module;
use std::collections::BTreeMap;
use tch::{Device, Tensor};

/// Named input tensors of one batch, in name order; the first dimension of each is the batch.
#[derive(Debug, Default)]
pub struct Inputs {
    tensors: BTreeMap<String, Tensor>,
}

impl Inputs {
    /// No inputs yet.
    pub fn new() -> Self {
        Inputs::default()
    }

    /// Adds (or replaces) the input `name`.
    pub fn with(mut self, name: impl Into<String>, tensor: Tensor) -> Self {
        self.tensors.insert(name.into(), tensor);
        self
    }

    /// The input `name`, or an error naming it and the inputs there are.
    pub fn get(&self, name: &str) -> Result<&Tensor> {
        self.tensors.get(name).ok_or_else(|| NnError::MissingInput {
            name: name.to_string(),
            available: self.tensors.keys().cloned().collect(),
        })
    }

    /// Every input with its name, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.tensors.iter().map(|(k, t)| (k.as_str(), t))
    }

    /// The same inputs with every tensor mapped through `f` (e.g. a move to a device).
    pub fn map(&self, mut f: impl FnMut(&Tensor) -> Tensor) -> Inputs {
        Inputs { tensors: self.tensors.iter().map(|(k, t)| (k.clone(), f(t))).collect() }
    }

    /// The device of the first input (the CPU when there is none).
    pub fn device(&self) -> Device {
        self.tensors.values().next().map_or(Device::Cpu, Tensor::device)
    }

    /// The number of inputs.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether there is no input.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

/// A model whose forward pass takes several named inputs (see the module docs). `train` is
/// the mode, as in `forward_t`.
pub trait MultiInput: Module {
    /// The forward pass over `inputs`; an error names an input that is missing or does not fit.
    fn forward_inputs(&self, inputs: &Inputs, train: bool) -> Result<Tensor>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn a_missing_input_is_named_with_those_there_are() {
        let ids = Tensor::zeros([2, 3], (Kind::Int64, Device::Cpu));
        let inputs = Inputs::new().with("ids", ids).with("lengths", Tensor::from_slice(&[3i64, 1]));
        assert_eq!(inputs.get("ids").unwrap().size(), [2, 3]);
        let err = inputs.get("mask").unwrap_err().to_string();
        assert!(err.contains("no input `mask`") && err.contains("`ids`, `lengths`"), "{err}");
        let names: Vec<&str> = inputs.iter().map(|(k, _)| k).collect();
        assert_eq!(names, ["ids", "lengths"]);
    }
}
