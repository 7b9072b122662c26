//! Shape layers without parameters: `Flatten`, `Permute` and `Identity`.

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

/// `torchvision.ops.Permute`: the input's dims reordered (`x.permute(dims)`), e.g. `[0, 2, 3, 1]`
/// to move channels last around a `LayerNorm` in ConvNeXt's blocks.
#[derive(Debug, Clone, Module)]
pub struct Permute {
    /// The new order of the input's dims.
    #[module(skip)]
    pub dims: Vec<i64>,
}

impl Permute {
    /// Permutes to `dims`.
    pub fn new(dims: &[i64]) -> Self {
        Permute { dims: dims.to_vec() }
    }
}

impl tch::nn::ModuleT for Permute {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.permute(self.dims.as_slice())
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
