//! `VarStoreModule`: a model built with tch's own `nn` on a `VarStore`, as a Torchlight
//! [`Module`], so it trains, freezes, checkpoints and exports like a native one.

use crate::module::{Module, OwnTensor, Role};
use std::any::Any;
use std::borrow::Cow;
use std::cmp::Ordering;
use tch::nn::{ModuleT, VarStore};
use tch::Tensor;

/// A tch `nn` model and the `VarStore` holding its variables, seen as a Torchlight
/// [`Module`]: its tensors are the store's variables under their VarStore paths, which tch
/// already joins with `.` (`vs.root() / "fc1"` then `"weight"` is `fc1.weight`), so they are
/// PyTorch-style state_dict keys.
///
/// Trainable variables (`Path::var`, `randn`, the layers' weights and biases) are parameters;
/// the others (`zeros_no_train`, BatchNorm's running statistics) are buffers. Keys are in
/// natural order (numbered segments by value: `layer.2` before `layer.10`), because a
/// `VarStore` does not keep the order variables were created in. The variables are taken
/// when the model is wrapped: build the whole model first. The tensors are shared with the
/// store, so `named_parameters`, `freeze`, `load_state_dict`, `to_device`, optimizers,
/// checkpoints and TorchScript export all act on the model's own variables.
///
/// ```
/// use tch::nn::{self, Module as _, VarStore};
/// use tch::Device;
/// use torchlight_nn::{named_parameters, VarStoreModule};
///
/// let vs = VarStore::new(Device::Cpu);
/// let net = nn::seq()
///     .add(nn::linear(vs.root() / "fc1", 4, 8, Default::default()))
///     .add_fn(|x| x.relu())
///     .add(nn::linear(vs.root() / "fc2", 8, 2, Default::default()));
/// let model = VarStoreModule::new(vs, net);
/// let keys: Vec<String> = named_parameters(&model).into_iter().map(|(k, _)| k).collect();
/// assert_eq!(keys, ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]);
/// ```
#[derive(Debug)]
pub struct VarStoreModule<M> {
    vs: VarStore,
    model: M,
    tensors: Vec<(String, Tensor, Role)>,
}

impl<M: ModuleT + 'static> VarStoreModule<M> {
    /// Wraps `model`, whose variables live in `vs`.
    pub fn new(vs: VarStore, model: M) -> Self {
        let trainable = vs.trainable_variables();
        let mut tensors: Vec<(String, Tensor, Role)> = vs
            .variables()
            .into_iter()
            .map(|(name, t)| {
                let role =
                    if trainable.iter().any(|p| same_tensor(p, &t)) { Role::Parameter } else { Role::Buffer };
                (name, t, role)
            })
            .collect();
        tensors.sort_by(|a, b| natural_cmp(&a.0, &b.0));
        VarStoreModule { vs, model, tensors }
    }

    /// The variable store.
    pub fn var_store(&self) -> &VarStore {
        &self.vs
    }

    /// The tch model.
    pub fn model(&self) -> &M {
        &self.model
    }

    /// The store and the model, unwrapped.
    pub fn into_parts(self) -> (VarStore, M) {
        (self.vs, self.model)
    }
}

/// Whether two handles are the same variable (the same storage, offset, shape and strides).
fn same_tensor(a: &Tensor, b: &Tensor) -> bool {
    a.data_ptr() == b.data_ptr() && a.size() == b.size() && a.stride() == b.stride()
}

/// Compares dotted keys segment by segment, numbered segments by value (`2` < `10`).
fn natural_cmp(a: &str, b: &str) -> Ordering {
    let mut a_parts = a.split('.');
    let mut b_parts = b.split('.');
    loop {
        match (a_parts.next(), b_parts.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let order = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(m), Ok(n)) => m.cmp(&n),
                    _ => x.cmp(y),
                };
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

impl<M: ModuleT> ModuleT for VarStoreModule<M> {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.model.forward_t(xs, train)
    }
}

impl<M: ModuleT + 'static> Module for VarStoreModule<M> {
    fn kind(&self) -> &'static str {
        "VarStoreModule"
    }
    fn own_tensors(&self) -> Vec<OwnTensor<'_>> {
        self.tensors
            .iter()
            .map(|(name, tensor, role)| OwnTensor { name: Cow::Owned(name.clone()), tensor, role: *role })
            .collect()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::natural_cmp;

    #[test]
    fn numbered_segments_sort_by_value() {
        let mut keys = vec!["layer.10.w", "layer.2.w", "head.b", "layer.2", "layer.b"];
        keys.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(keys, ["head.b", "layer.2", "layer.2.w", "layer.10.w", "layer.b"]);
    }
}
