//! `StochasticDepth` (`torchvision.ops.StochasticDepth`): residual branches dropped at random in
//! training.

use crate::module::Module;
use tch::Tensor;

/// What [`StochasticDepth`] drops: one draw per sample or one for the whole batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StochasticDepthMode {
    /// `"row"`: each sample's branch is kept or zeroed on its own (EfficientNet, ConvNeXt).
    Row,
    /// `"batch"`: the whole batch's branch is kept or zeroed together.
    Batch,
}

/// Zeroes its input (a residual branch) with probability `p` in training and scales what it
/// keeps by `1 / (1 - p)`; the identity in evaluation and at `p = 0`.
///
/// The keep mask is drawn as torchvision draws it, from torch's global generator: a
/// `[N, 1, ..., 1]` (row) or `[1, ..., 1]` (batch) tensor of the input's dtype filled by
/// `bernoulli_(1 - p)`, so a model seeded like torchvision's makes the same draws (a parity
/// test checks EfficientNet's and ConvNeXt's training forwards), and nothing is drawn in
/// evaluation or at `p = 0`. Like `Dropout`, it is seeded by `seed_everything`.
#[derive(Debug, Clone, Copy, Module)]
pub struct StochasticDepth {
    /// Drop probability, in `[0, 1]`.
    #[module(skip)]
    pub p: f64,
    /// Per sample or per batch.
    #[module(skip)]
    pub mode: StochasticDepthMode,
}

impl StochasticDepth {
    /// Drops with probability `p` in `mode`.
    ///
    /// # Panics
    /// When `p` is outside `[0, 1]`, as torchvision raises.
    pub fn new(p: f64, mode: StochasticDepthMode) -> Self {
        assert!((0.0..=1.0).contains(&p), "StochasticDepth: drop probability has to be in [0, 1], got {p}");
        StochasticDepth { p, mode }
    }
}

impl tch::nn::ModuleT for StochasticDepth {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        if !train || self.p == 0.0 {
            return xs.shallow_clone();
        }
        let survival = 1.0 - self.p;
        let mut size = vec![1i64; xs.dim()];
        if self.mode == StochasticDepthMode::Row {
            size[0] = xs.size()[0];
        }
        let mut noise = Tensor::empty(size.as_slice(), (xs.kind(), xs.device()));
        let _ = noise.bernoulli_float_(survival);
        if survival > 0.0 {
            let _ = noise.g_div_scalar_(survival);
        }
        xs * noise
    }
}
