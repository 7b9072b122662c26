//! `Sequential`: named children applied in order.

use crate::error::Result;
use crate::module::{check_child_name, forward_in_order, Module};
use std::any::Any;
use tch::Tensor;

/// `torch.nn.Sequential`. Children are named `"0"`, `"1"`, ... unless added with a name
/// (like an `OrderedDict`), and their tensors' keys follow (`"0.weight"`, `"conv.bias"`).
/// Names are strings chosen at run time.
#[derive(Debug, Default)]
pub struct Sequential {
    layers: Vec<(String, Box<dyn Module>)>,
}

impl Sequential {
    /// An empty sequence.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `layer`, named by its position.
    ///
    /// # Panics
    /// When a layer added by name already took that number as its name.
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, layer: impl Module) -> Self {
        self.push(layer);
        self
    }

    /// Appends `layer` under `name`.
    ///
    /// # Panics
    /// When `name` is empty, contains `.` or is already taken; [`Sequential::push_named`]
    /// returns that as an error instead.
    pub fn add_named(mut self, name: impl Into<String>, layer: impl Module) -> Self {
        if let Err(e) = self.push_named(name, layer) {
            panic!("{e}");
        }
        self
    }

    /// Appends `layer`, named by its position.
    ///
    /// # Panics
    /// When a layer added by name already took that number as its name.
    pub fn push(&mut self, layer: impl Module) {
        let name = self.layers.len().to_string();
        self.add_named_boxed(name, Box::new(layer)).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Appends `layer` under `name`; an error naming it when it is empty, contains `.` or is
    /// already taken.
    pub fn push_named(&mut self, name: impl Into<String>, layer: impl Module) -> Result<()> {
        self.add_named_boxed(name.into(), Box::new(layer))
    }

    fn add_named_boxed(&mut self, name: String, layer: Box<dyn Module>) -> Result<()> {
        check_child_name("Sequential", &name, self.layers.iter().map(|(n, _)| n.as_str()))?;
        self.layers.push((name, layer));
        Ok(())
    }

    /// Number of children.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no children.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Child `index`.
    pub fn get(&self, index: usize) -> Option<&dyn Module> {
        self.layers.get(index).map(|(_, m)| m.as_ref())
    }

    /// The child named `name`.
    pub fn get_named(&self, name: &str) -> Option<&dyn Module> {
        self.layers.iter().find(|(n, _)| n == name).map(|(_, m)| m.as_ref())
    }

    /// The children with their names, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &dyn Module)> {
        self.layers.iter().map(|(n, m)| (n.as_str(), m.as_ref()))
    }
}

impl tch::nn::ModuleT for Sequential {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        forward_in_order(self.layers.iter().map(|(_, m)| m.as_ref()), xs, train)
    }
}

impl Module for Sequential {
    fn kind(&self) -> &'static str {
        "Sequential"
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        self.layers.iter().map(|(n, m)| (n.clone(), m.as_ref())).collect()
    }
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module)> {
        self.layers.iter_mut().map(|(n, m)| (n.clone(), m.as_mut() as &mut dyn Module)).collect()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
