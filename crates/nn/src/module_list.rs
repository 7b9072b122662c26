//! `ModuleList`: modules named by their position (`torch.nn.ModuleList`).

use crate::module::{forward_in_order, Module};
use std::any::Any;
use tch::Tensor;

/// `torch.nn.ModuleList`: modules named `"0"`, `"1"`, ... by position, so a list of `N`
/// blocks built at run time has PyTorch's keys (`blocks.3.conv.weight` for a field `blocks`).
///
/// `M` is the item type: one concrete module (`ModuleList<Block>`, whose items are reached
/// as `Block`s) or, by default, `Box<dyn Module>` for a list of mixed layers.
///
/// PyTorch's `ModuleList` has no forward of its own; Torchlight's `Module` needs one, so
/// `forward_t` applies the modules in order, as `Sequential` does. Call them one by one
/// through [`ModuleList::iter`] for anything else.
///
/// ```
/// use torchlight_nn::{named_parameters, Linear, ModuleList};
/// let layers: ModuleList<Linear> = (0..3).map(|_| Linear::new(4, 4, false)).collect();
/// let keys: Vec<String> = named_parameters(&layers).into_iter().map(|(k, _)| k).collect();
/// assert_eq!(keys, ["0.weight", "1.weight", "2.weight"]);
/// ```
#[derive(Debug)]
pub struct ModuleList<M: Module = Box<dyn Module>> {
    modules: Vec<M>,
}

impl<M: Module> Default for ModuleList<M> {
    fn default() -> Self {
        ModuleList { modules: Vec::new() }
    }
}

impl<M: Module> ModuleList<M> {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `module` (`append`); it is named by its position.
    pub fn push(&mut self, module: M) {
        self.modules.push(module);
    }

    /// Number of modules.
    pub fn len(&self) -> usize {
        self.modules.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.modules.is_empty()
    }

    /// Module `index`.
    pub fn get(&self, index: usize) -> Option<&M> {
        self.modules.get(index)
    }

    /// Module `index`, mutably (to replace a block).
    pub fn get_mut(&mut self, index: usize) -> Option<&mut M> {
        self.modules.get_mut(index)
    }

    /// The modules in order.
    pub fn iter(&self) -> std::slice::Iter<'_, M> {
        self.modules.iter()
    }

    /// The modules in order, mutably.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, M> {
        self.modules.iter_mut()
    }
}

impl<M: Module> FromIterator<M> for ModuleList<M> {
    fn from_iter<I: IntoIterator<Item = M>>(iter: I) -> Self {
        ModuleList { modules: iter.into_iter().collect() }
    }
}

impl<M: Module> Extend<M> for ModuleList<M> {
    fn extend<I: IntoIterator<Item = M>>(&mut self, iter: I) {
        self.modules.extend(iter);
    }
}

impl<'a, M: Module> IntoIterator for &'a ModuleList<M> {
    type Item = &'a M;
    type IntoIter = std::slice::Iter<'a, M>;
    fn into_iter(self) -> Self::IntoIter {
        self.modules.iter()
    }
}

impl<M: Module> std::ops::Index<usize> for ModuleList<M> {
    type Output = M;
    fn index(&self, index: usize) -> &M {
        &self.modules[index]
    }
}

impl<M: Module> tch::nn::ModuleT for ModuleList<M> {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        forward_in_order(self.modules.iter().map(|m| m as &dyn Module), xs, train)
    }
}

impl<M: Module> Module for ModuleList<M> {
    fn kind(&self) -> &'static str {
        "ModuleList"
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        self.modules.iter().enumerate().map(|(i, m)| (i.to_string(), m as &dyn Module)).collect()
    }
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module)> {
        self.modules.iter_mut().enumerate().map(|(i, m)| (i.to_string(), m as &mut dyn Module)).collect()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
