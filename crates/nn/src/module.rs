//! The `Module` trait: structure (children, parameters, buffers) on top of tch's `ModuleT`.
//!
//! Forward passes are tch's `ModuleT::forward_t(&self, xs, train)`: the explicit `train` flag
//! is how BatchNorm and Dropout tell training from evaluation, so "forgot `model.eval()`"
//! cannot happen silently. `Module` adds what PyTorch's `nn.Module` offers for inspection:
//! named children, named parameters and buffers whose paths are `state_dict` keys.

use crate::error::{NnError, Result};
use std::any::Any;
use std::borrow::Cow;
use tch::Tensor;

/// `#[derive(Module)]`: the [`Module`] structure of a struct from its fields (the crate
/// documentation shows it in use; the attributes are described on the macro).
pub use torchlight_derive::Module;

/// Whether a tensor is learned (`nn.Parameter`) or state (`register_buffer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A learned parameter; trainable while `requires_grad` is set.
    Parameter,
    /// A buffer such as BatchNorm's `running_mean` or `num_batches_tracked`.
    Buffer,
}

/// A named tensor of a module, as listed by [`Module::own_tensors`].
#[derive(Debug)]
pub struct OwnTensor<'a> {
    /// The name within its module (`weight`, `running_mean`, ...): a `&'static str` for a
    /// field, or built at run time (a tch `VarStore`'s paths).
    pub name: Cow<'static, str>,
    /// The tensor itself.
    pub tensor: &'a Tensor,
    /// Parameter or buffer.
    pub role: Role,
}

/// A layer or model: a `ModuleT` whose structure can be walked.
///
/// Implementors list their own tensors and their direct children; everything else
/// (`named_parameters`, `state_dict`, freezing, initialisation, summaries) is derived from
/// those two lists by the functions in this crate. `#[derive(Module)]` writes the
/// implementation from a struct's fields (see the crate documentation).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a torchlight `Module`",
    label = "not a `Module`",
    note = "derive it with `#[derive(Module)]` (and write `impl ModuleT` for its forward pass)"
)]
pub trait Module: tch::nn::ModuleT + Any {
    /// The layer's kind in PyTorch's vocabulary (`"Conv2d"`, `"BatchNorm2d"`, `"ResNet"`).
    fn kind(&self) -> &'static str;

    /// This module's own parameters and buffers, not its children's.
    fn own_tensors(&self) -> Vec<OwnTensor<'_>> {
        Vec::new()
    }

    /// Direct children with their names (`"layer1"`, `"0"`, `"downsample"`).
    fn children(&self) -> Vec<(String, &dyn Module)> {
        Vec::new()
    }

    /// Mutable access to the direct children, for replacing a layer (e.g. a new head).
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module)> {
        Vec::new()
    }

    /// `self` as `Any`, for `isinstance`-style checks: `m.as_any().downcast_ref::<Conv2d>()`.
    fn as_any(&self) -> &dyn Any;

    /// `self` as mutable `Any`, to change a layer found by its type
    /// (`m.as_any_mut().downcast_mut::<Dropout>()`; see [`visit_modules_mut`]).
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// A boxed module is a module: containers hold `Box<dyn Module>`, and downcasts through
/// [`Module::as_any`] see the boxed type.
impl tch::nn::ModuleT for Box<dyn Module> {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        (**self).forward_t(xs, train)
    }
}

impl Module for Box<dyn Module> {
    fn kind(&self) -> &'static str {
        (**self).kind()
    }
    fn own_tensors(&self) -> Vec<OwnTensor<'_>> {
        (**self).own_tensors()
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        (**self).children()
    }
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module)> {
        (**self).children_mut()
    }
    fn as_any(&self) -> &dyn Any {
        (**self).as_any()
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        (**self).as_any_mut()
    }
}

/// Checks a child name given at run time (to `Sequential`, `ModuleDict`): non-empty, free of
/// `.` (the separator of state_dict keys) and not already taken, as PyTorch's `add_module`.
pub(crate) fn check_child_name<'a>(
    container: &'static str,
    name: &str,
    mut taken: impl Iterator<Item = &'a str>,
) -> Result<()> {
    let reason = if name.is_empty() {
        "is empty"
    } else if name.contains('.') {
        "contains `.`, the separator of state_dict keys"
    } else if taken.any(|t| t == name) {
        "is already taken"
    } else {
        return Ok(());
    };
    Err(NnError::ModuleName { container, name: name.to_string(), reason })
}

/// Applies `modules` one after the other (the forward pass of the containers).
pub(crate) fn forward_in_order<'a>(
    modules: impl Iterator<Item = &'a dyn Module>,
    xs: &Tensor,
    train: bool,
) -> Tensor {
    modules.fold(xs.shallow_clone(), |out, m| m.forward_t(&out, train))
}

/// Joins a prefix and a name with `.`, as PyTorch's state_dict keys are formed.
pub(crate) fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Calls `f(path, module)` for `module` and every descendant, parents first, in
/// registration order (`model.named_modules()`; the root's path is `""`).
pub fn visit_modules(module: &dyn Module, f: &mut dyn FnMut(&str, &dyn Module)) {
    fn walk(path: &str, m: &dyn Module, f: &mut dyn FnMut(&str, &dyn Module)) {
        f(path, m);
        for (name, child) in m.children() {
            walk(&join(path, &name), child, f);
        }
    }
    walk("", module, f);
}

/// [`visit_modules`] with mutable access: `f(path, module)` for `module` and every descendant,
/// parents first, through [`Module::children_mut`] (how a callback changes a layer of a model
/// it holds, e.g. every `Dropout`'s `p`).
pub fn visit_modules_mut(module: &mut dyn Module, f: &mut dyn FnMut(&str, &mut dyn Module)) {
    fn walk(path: &str, m: &mut dyn Module, f: &mut dyn FnMut(&str, &mut dyn Module)) {
        f(path, m);
        for (name, child) in m.children_mut() {
            walk(&join(path, &name), child, f);
        }
    }
    walk("", module, f);
}

/// Every parameter and buffer of `module` with its state_dict key and role, in PyTorch's
/// order (a module's own tensors, then its children's). Tensors are shallow clones: they share
/// storage and `requires_grad` with the model's.
pub fn named_tensors(module: &dyn Module) -> Vec<(String, Tensor, Role)> {
    let mut out = Vec::new();
    visit_modules(module, &mut |path, m| {
        for t in m.own_tensors() {
            out.push((join(path, &t.name), t.tensor.shallow_clone(), t.role));
        }
    });
    out
}

/// `model.named_parameters()`: parameters only, trainable or not.
pub fn named_parameters(module: &dyn Module) -> Vec<(String, Tensor)> {
    named_tensors(module)
        .into_iter()
        .filter(|(_, _, r)| *r == Role::Parameter)
        .map(|(n, t, _)| (n, t))
        .collect()
}

/// [`named_parameters`] with the [`Module::kind`] of the module that owns each parameter
/// (`"BatchNorm2d"` for `bn1.weight`, `"Linear"` for `fc.bias`, `"VisionTransformer"` for a
/// ViT's `class_token`), in the same state_dict order: what rules about the owning layer
/// need, such as torchvision's `norm_weight_decay` (`torchlight_optim::ParamGroupBuilder`
/// takes these triples).
pub fn named_parameters_with_kind(module: &dyn Module) -> Vec<(String, Tensor, &'static str)> {
    let mut out = Vec::new();
    visit_modules(module, &mut |path, m| {
        for t in m.own_tensors() {
            if t.role == Role::Parameter {
                out.push((join(path, &t.name), t.tensor.shallow_clone(), m.kind()));
            }
        }
    });
    out
}

/// `model.named_buffers()`.
pub fn named_buffers(module: &dyn Module) -> Vec<(String, Tensor)> {
    named_tensors(module).into_iter().filter(|(_, _, r)| *r == Role::Buffer).map(|(n, t, _)| (n, t)).collect()
}

/// `model.state_dict()`: parameters and buffers by key, detached, sharing storage.
pub fn state_dict(module: &dyn Module) -> Vec<(String, Tensor)> {
    named_tensors(module).into_iter().map(|(n, t, _)| (n, t.detach())).collect()
}

/// Parameter counts of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamCount {
    /// All parameter elements.
    pub total: i64,
    /// Elements of parameters with `requires_grad`.
    pub trainable: i64,
}

/// `sum(p.numel() for p in model.parameters())`, and the trainable part.
pub fn count_parameters(module: &dyn Module) -> ParamCount {
    let mut count = ParamCount { total: 0, trainable: 0 };
    for (_, p) in named_parameters(module) {
        let n = p.numel() as i64;
        count.total += n;
        if p.requires_grad() {
            count.trainable += n;
        }
    }
    count
}

/// Sets `requires_grad` on every parameter whose key starts with `prefix` (all with `""`).
/// Returns how many parameter tensors changed state.
/// Parameters of a frozen BatchNorm ([`crate::freeze_batch_norm`]) are never made trainable.
fn set_trainable(module: &dyn Module, prefix: &str, trainable: bool, matching: bool) -> usize {
    let mut frozen_bn = std::collections::HashSet::new();
    if trainable {
        visit_modules(module, &mut |path, m| {
            if m.as_any().downcast_ref::<crate::BatchNorm2d>().is_some_and(|bn| bn.frozen) {
                frozen_bn.insert(join(path, "weight"));
                frozen_bn.insert(join(path, "bias"));
            }
        });
    }
    let mut changed = 0;
    for (name, p) in named_parameters(module) {
        if frozen_bn.contains(&name) {
            continue;
        }
        if name.starts_with(prefix) == matching && p.requires_grad() != trainable {
            let _ = p.set_requires_grad(trainable);
            changed += 1;
        }
    }
    changed
}

/// Freezes (turns `requires_grad` off for) the parameters whose key starts with `prefix`;
/// `freeze(model, "")` freezes everything. Returns how many tensors changed.
pub fn freeze(module: &dyn Module, prefix: &str) -> usize {
    set_trainable(module, prefix, false, true)
}

/// Unfreezes the parameters whose key starts with `prefix`. Returns how many tensors changed.
pub fn unfreeze(module: &dyn Module, prefix: &str) -> usize {
    set_trainable(module, prefix, true, true)
}

/// Freezes everything except the parameters under `prefix`, the usual first stage of a
/// fine-tune (`freeze_all_but(model, "fc.")`). Returns how many tensors changed.
pub fn freeze_all_but(module: &dyn Module, prefix: &str) -> usize {
    set_trainable(module, prefix, false, false) + set_trainable(module, prefix, true, true)
}

/// Moves every parameter and buffer to `device` in place (`model.to(device)`). Tensor handles
/// held elsewhere (an optimizer's) keep pointing at the moved data, and `requires_grad` is kept.
pub fn to_device(module: &dyn Module, device: tch::Device) {
    let _guard = torchlight_tensor::no_grad();
    for (_, t, _) in named_tensors(module) {
        if t.device() != device {
            let moved = t.to_device(device);
            t.shallow_clone().set_data(&moved);
        }
    }
}

/// The per-layer table PyTorch users get from `torchinfo.summary`: one row per parameter
/// tensor with its shape, element count and whether it trains, then the totals.
pub fn summary_table(module: &dyn Module) -> String {
    let rows: Vec<(String, String, i64, bool)> = named_parameters(module)
        .into_iter()
        .map(|(n, p)| (n, format!("{:?}", p.size()), p.numel() as i64, p.requires_grad()))
        .collect();
    let name_w = rows.iter().map(|r| r.0.len()).max().unwrap_or(4).max(4);
    let shape_w = rows.iter().map(|r| r.1.len()).max().unwrap_or(5).max(5);
    let mut out = format!("{:<name_w$}  {:<shape_w$}  {:>12}  trainable\n", "name", "shape", "params");
    out.push_str(&format!("{}\n", "-".repeat(name_w + shape_w + 27)));
    for (name, shape, n, trainable) in &rows {
        out.push_str(&format!(
            "{name:<name_w$}  {shape:<shape_w$}  {:>12}  {}\n",
            group_thousands(*n),
            if *trainable { "yes" } else { "no" }
        ));
    }
    let count = count_parameters(module);
    out.push_str(&format!(
        "{}\ntotal params: {}   trainable: {}   frozen: {}\n",
        "-".repeat(name_w + shape_w + 27),
        group_thousands(count.total),
        group_thousands(count.trainable),
        group_thousands(count.total - count.trainable)
    ));
    out
}

fn group_thousands(n: i64) -> String {
    let digits = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(group_thousands(11_689_512), "11,689,512");
        assert_eq!(group_thousands(512), "512");
        assert_eq!(group_thousands(1000), "1,000");
    }

    #[test]
    fn keys_join_with_dots() {
        assert_eq!(join("", "fc"), "fc");
        assert_eq!(join("layer1.0", "conv1"), "layer1.0.conv1");
    }
}
