//! `Flatten` and `Identity`.

use crate::module::Module;
use tch::Tensor;

/// `torch.nn.Flatten`: merges dims `start_dim..=end_dim` (default `1..=-1`: `[N, ...]` ->
/// `[N, rest]`). Uses `flatten`, never a view built from sizes read in Rust, so a traced model
/// keeps a dynamic batch axis.
#[derive(Debug, Clone, Copy, Module)]
pub struct Flatten {
    /// First dim to merge (default 1).
    #[module(skip)]
    pub start_dim: i64,
    /// Last dim to merge (default -1).
    #[module(skip)]
    pub end_dim: i64,
}

impl Default for Flatten {
    fn default() -> Self {
        Flatten { start_dim: 1, end_dim: -1 }
    }
}

impl tch::nn::ModuleT for Flatten {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.flatten(self.start_dim, self.end_dim)
    }
}

/// `torch.nn.Identity`: returns its input (a placeholder head, e.g. for feature extraction).
#[derive(Debug, Clone, Copy, Default, Module)]
pub struct Identity;

impl tch::nn::ModuleT for Identity {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.shallow_clone()
    }
}
