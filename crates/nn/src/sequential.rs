//! `Sequential`: named children applied in order.

use crate::module::Module;
use std::any::Any;
use tch::Tensor;

/// `torch.nn.Sequential`. Children are named `"0"`, `"1"`, ... unless added with a name
/// (like an `OrderedDict`), and their tensors' keys follow (`"0.weight"`, `"conv.bias"`).
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
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, layer: impl Module) -> Self {
        let name = self.layers.len().to_string();
        self.layers.push((name, Box::new(layer)));
        self
    }

    /// Appends `layer` under `name`.
    pub fn add_named(mut self, name: impl Into<String>, layer: impl Module) -> Self {
        self.layers.push((name.into(), Box::new(layer)));
        self
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
}

impl tch::nn::ModuleT for Sequential {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let mut out = xs.shallow_clone();
        for (_, layer) in &self.layers {
            out = layer.forward_t(&out, train);
        }
        out
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
}
