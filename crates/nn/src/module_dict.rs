//! `ModuleDict`: modules under names chosen at run time, in insertion order
//! (`torch.nn.ModuleDict`).

use crate::error::Result;
use crate::module::{check_child_name, forward_in_order, Module};
use std::any::Any;
use tch::Tensor;

/// `torch.nn.ModuleDict`: modules under string names chosen at run time (a head per task or
/// per dataset), kept in insertion order; a name is a state_dict path segment
/// (`heads.cats.weight` for a field `heads`).
///
/// `M` is the item type: one concrete module or, by default, `Box<dyn Module>`.
///
/// PyTorch's `ModuleDict` has no forward of its own; Torchlight's `Module` needs one, so
/// `forward_t` applies the modules in insertion order. Reach them by name for anything else.
///
/// ```
/// use torchlight_nn::{named_parameters, Linear, ModuleDict};
/// let mut heads = ModuleDict::new();
/// for task in ["species", "age"] {
///     heads.insert(task, Linear::new(8, 3, true)).unwrap();
/// }
/// assert_eq!(named_parameters(&heads)[2].0, "age.weight");
/// assert!(heads.insert("a.b", Linear::new(8, 3, true)).is_err());
/// ```
#[derive(Debug)]
pub struct ModuleDict<M: Module = Box<dyn Module>> {
    entries: Vec<(String, M)>,
}

impl<M: Module> Default for ModuleDict<M> {
    fn default() -> Self {
        ModuleDict { entries: Vec::new() }
    }
}

impl<M: Module> ModuleDict<M> {
    /// An empty dict.
    pub fn new() -> Self {
        Self::default()
    }

    /// `dict[name] = module`: a new name goes last, an existing one is replaced in place and
    /// its old module returned. An error naming `name` when it is empty or contains `.`.
    pub fn insert(&mut self, name: impl Into<String>, module: M) -> Result<Option<M>> {
        let name = name.into();
        if let Some((_, slot)) = self.entries.iter_mut().find(|(n, _)| *n == name) {
            return Ok(Some(std::mem::replace(slot, module)));
        }
        check_child_name("ModuleDict", &name, std::iter::empty())?;
        self.entries.push((name, module));
        Ok(None)
    }

    /// Removes `name` (`pop`), keeping the others' order.
    pub fn remove(&mut self, name: &str) -> Option<M> {
        let index = self.entries.iter().position(|(n, _)| n == name)?;
        Some(self.entries.remove(index).1)
    }

    /// The module under `name`.
    pub fn get(&self, name: &str) -> Option<&M> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, m)| m)
    }

    /// The module under `name`, mutably.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut M> {
        self.entries.iter_mut().find(|(n, _)| n == name).map(|(_, m)| m)
    }

    /// Whether `name` is present.
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Number of modules.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the dict is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The names, in insertion order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(n, _)| n.as_str())
    }

    /// Names and modules, in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &M)> {
        self.entries.iter().map(|(n, m)| (n.as_str(), m))
    }
}

impl<M: Module> tch::nn::ModuleT for ModuleDict<M> {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        forward_in_order(self.entries.iter().map(|(_, m)| m as &dyn Module), xs, train)
    }
}

impl<M: Module> Module for ModuleDict<M> {
    fn kind(&self) -> &'static str {
        "ModuleDict"
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        self.entries.iter().map(|(n, m)| (n.clone(), m as &dyn Module)).collect()
    }
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module)> {
        self.entries.iter_mut().map(|(n, m)| (n.clone(), m as &mut dyn Module)).collect()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
