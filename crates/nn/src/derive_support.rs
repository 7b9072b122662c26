//! What `#[derive(Module)]` expands to call: how each kind of field lists its tensors or
//! children. Not a public API; reached as `torchlight_nn::__derive`.

use crate::module::{Module, OwnTensor, Role};
use std::borrow::Cow;
use tch::Tensor;

/// A field marked `#[param]` or `#[buffer]`: a `Tensor`, or an `Option<Tensor>` that is
/// absent when `None`.
#[diagnostic::on_unimplemented(
    message = "a `#[param]` or `#[buffer]` field must be `Tensor` or `Option<Tensor>`, not `{Self}`",
    label = "not a tensor field"
)]
pub trait TensorField {
    /// Appends the tensor (if present) under `name` with `role`.
    fn push_tensor<'a>(&'a self, name: &'static str, role: Role, out: &mut Vec<OwnTensor<'a>>);
}

impl TensorField for Tensor {
    fn push_tensor<'a>(&'a self, name: &'static str, role: Role, out: &mut Vec<OwnTensor<'a>>) {
        out.push(OwnTensor { name: Cow::Borrowed(name), tensor: self, role });
    }
}

impl TensorField for Option<Tensor> {
    fn push_tensor<'a>(&'a self, name: &'static str, role: Role, out: &mut Vec<OwnTensor<'a>>) {
        if let Some(tensor) = self {
            tensor.push_tensor(name, role, out);
        }
    }
}

/// A child field: a module, an `Option` of one (absent when `None`), or a `Vec` of them
/// (named `name.0`, `name.1`, ...).
#[diagnostic::on_unimplemented(
    message = "field of type `{Self}` is not a module, so it cannot be a child",
    label = "not a `Module`, `Option<Module>` or `Vec<Module>`",
    note = "mark plain data with `#[module(skip)]` and tensors with `#[param]` or `#[buffer]`"
)]
pub trait ChildField {
    /// Appends the child modules under `name`.
    fn push_child<'a>(&'a self, name: &'static str, out: &mut Vec<(String, &'a dyn Module)>);
    /// Appends the child modules under `name`, mutably.
    fn push_child_mut<'a>(&'a mut self, name: &'static str, out: &mut Vec<(String, &'a mut dyn Module)>);
}

impl<M: Module> ChildField for M {
    fn push_child<'a>(&'a self, name: &'static str, out: &mut Vec<(String, &'a dyn Module)>) {
        out.push((name.to_string(), self));
    }
    fn push_child_mut<'a>(&'a mut self, name: &'static str, out: &mut Vec<(String, &'a mut dyn Module)>) {
        out.push((name.to_string(), self));
    }
}

impl<M: Module> ChildField for Option<M> {
    fn push_child<'a>(&'a self, name: &'static str, out: &mut Vec<(String, &'a dyn Module)>) {
        if let Some(m) = self {
            out.push((name.to_string(), m));
        }
    }
    fn push_child_mut<'a>(&'a mut self, name: &'static str, out: &mut Vec<(String, &'a mut dyn Module)>) {
        if let Some(m) = self {
            out.push((name.to_string(), m));
        }
    }
}

impl<M: Module> ChildField for Vec<M> {
    fn push_child<'a>(&'a self, name: &'static str, out: &mut Vec<(String, &'a dyn Module)>) {
        out.extend(self.iter().enumerate().map(|(i, m)| (format!("{name}.{i}"), m as &dyn Module)));
    }
    fn push_child_mut<'a>(&'a mut self, name: &'static str, out: &mut Vec<(String, &'a mut dyn Module)>) {
        out.extend(self.iter_mut().enumerate().map(|(i, m)| (format!("{name}.{i}"), m as &mut dyn Module)));
    }
}
