//! `Embedding` (`torch.nn.Embedding`): a lookup table of vectors indexed by token id.

use crate::init::{normal_, zeros_};
use crate::module::Module;
use crate::options::LayerOptions;
use tch::Tensor;
use torchlight_tensor::no_grad;

/// Options of an [`Embedding`], with PyTorch's defaults (no padding index, gradients not
/// scaled by frequency).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EmbeddingConfig {
    /// The row that padding tokens use: zero at initialisation and never given a gradient, so it
    /// stays what it is (PyTorch's `padding_idx`). Negative values count from the end, as in
    /// PyTorch (`-1` is the last row). Default none.
    pub padding_idx: Option<i64>,
    /// Scale each row's gradient by the inverse of its index's frequency in the mini-batch
    /// (PyTorch's `scale_grad_by_freq`). Default `false`.
    pub scale_grad_by_freq: bool,
}

impl EmbeddingConfig {
    /// With padding row `padding_idx` (negative counts from the end).
    pub fn with_padding_idx(mut self, padding_idx: i64) -> Self {
        self.padding_idx = Some(padding_idx);
        self
    }

    /// With or without gradients scaled by the inverse index frequency.
    pub fn with_scale_grad_by_freq(mut self, scale: bool) -> Self {
        self.scale_grad_by_freq = scale;
        self
    }
}

/// `padding_idx` as PyTorch's constructors store it: a row index in `0..num_embeddings`
/// (`-1` is the last row).
///
/// # Panics
/// When `padding_idx` is outside `-num_embeddings..num_embeddings`, as PyTorch asserts.
pub(crate) fn normalize_padding_idx(padding_idx: Option<i64>, num_embeddings: i64) -> Option<i64> {
    padding_idx.map(|p| {
        assert!(
            (-num_embeddings..num_embeddings).contains(&p),
            "padding_idx {p} must be within num_embeddings {num_embeddings}"
        );
        if p < 0 {
            p + num_embeddings
        } else {
            p
        }
    })
}

/// A table of `num_embeddings` vectors of size `embedding_dim` (`torch.nn.Embedding`):
/// indices `[*]` (int64, e.g. token ids `[B, T]`) give `[*, embedding_dim]` (`[B, T, D]`).
/// Its one tensor is `weight`, `[num_embeddings, embedding_dim]`, PyTorch's key.
///
/// With a padding index that row is zero after initialisation and receives no gradient, so a
/// padded position contributes nothing the optimizer changes, as in PyTorch. `max_norm` and
/// sparse gradients are not supported.
#[derive(Debug, Module)]
pub struct Embedding {
    /// `[num_embeddings, embedding_dim]`.
    #[param]
    pub weight: Tensor,
    /// The padding row, in `0..num_embeddings` (a negative index given at construction is
    /// stored counted from the start, as PyTorch stores it).
    #[module(skip)]
    pub padding_idx: Option<i64>,
    /// Whether gradients are scaled by the inverse index frequency in the mini-batch.
    #[module(skip)]
    pub scale_grad_by_freq: bool,
}

impl Embedding {
    /// A float32 CPU table initialised as PyTorch does: N(0, 1), then the padding row zeroed.
    ///
    /// # Panics
    /// When the padding index is outside `-num_embeddings..num_embeddings`.
    pub fn new(num_embeddings: i64, embedding_dim: i64, config: EmbeddingConfig) -> Self {
        Self::new_on(num_embeddings, embedding_dim, config, LayerOptions::default())
    }

    /// The table created in `options`' dtype on its device (`nn.Embedding(n, d, padding_idx,
    /// device=..., dtype=...)`), initialised unless skipped.
    ///
    /// # Panics
    /// When the padding index is outside `-num_embeddings..num_embeddings`.
    pub fn new_on(
        num_embeddings: i64,
        embedding_dim: i64,
        config: EmbeddingConfig,
        options: impl Into<LayerOptions>,
    ) -> Self {
        let padding_idx = normalize_padding_idx(config.padding_idx, num_embeddings);
        let weight = options.into().param(&[num_embeddings, embedding_dim], |w| {
            normal_(w, 0.0, 1.0);
            if let Some(p) = padding_idx {
                zeros_(&w.get(p));
            }
        });
        Embedding { weight, padding_idx, scale_grad_by_freq: config.scale_grad_by_freq }
    }

    /// A table holding `weight` `[num_embeddings, embedding_dim]` as it is
    /// (`nn.Embedding.from_pretrained(weight, freeze, padding_idx)`): frozen (no gradient) when
    /// `freeze`. As in PyTorch the padding row is not zeroed; it only receives no gradient.
    ///
    /// # Panics
    /// When `weight` is not 2-D or the padding index is out of range.
    pub fn from_pretrained(weight: &Tensor, freeze: bool, config: EmbeddingConfig) -> Self {
        assert_eq!(weight.dim(), 2, "Embedding weight must be 2-D, got shape {:?}", weight.size());
        let padding_idx = normalize_padding_idx(config.padding_idx, weight.size()[0]);
        let weight = {
            let _guard = no_grad();
            weight.detach().copy()
        }
        .set_requires_grad(!freeze);
        Embedding { weight, padding_idx, scale_grad_by_freq: config.scale_grad_by_freq }
    }

    /// `num_embeddings`.
    pub fn num_embeddings(&self) -> i64 {
        self.weight.size()[0]
    }

    /// `embedding_dim`.
    pub fn embedding_dim(&self) -> i64 {
        self.weight.size()[1]
    }
}

impl tch::nn::ModuleT for Embedding {
    /// Rows of `weight` for int64 indices `[*]`: `[*, embedding_dim]`.
    ///
    /// # Panics
    /// When `xs` is not an integer tensor or holds an index outside `0..num_embeddings`
    /// (libtorch's error).
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        Tensor::embedding(&self.weight, xs, self.padding_idx.unwrap_or(-1), self.scale_grad_by_freq, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::nn::ModuleT;
    use tch::{Device, Kind};

    #[test]
    fn the_padding_row_starts_at_zero_and_gets_no_gradient() {
        let emb = Embedding::new(6, 3, EmbeddingConfig::default().with_padding_idx(-2));
        assert_eq!(emb.padding_idx, Some(4), "-2 of 6 rows is row 4, as PyTorch stores it");
        assert_eq!(emb.weight.get(4).abs().sum(Kind::Float).double_value(&[]), 0.0);
        assert!(emb.weight.get(0).abs().sum(Kind::Float).double_value(&[]) > 0.0);
        let ids = Tensor::from_slice(&[4i64, 1, 4, 0]).reshape([2, 2]);
        let out = emb.forward_t(&ids, true);
        assert_eq!(out.size(), [2, 2, 3]);
        out.sum(Kind::Float).backward();
        let grad = emb.weight.grad();
        assert_eq!(grad.get(4).abs().sum(Kind::Float).double_value(&[]), 0.0, "no gradient at padding");
        assert_eq!(grad.get(1).sum(Kind::Float).double_value(&[]), 3.0);
    }

    #[test]
    fn pretrained_weights_are_kept_and_frozen() {
        let w = Tensor::arange(6, (Kind::Float, Device::Cpu)).reshape([3, 2]);
        let emb = Embedding::from_pretrained(&w, true, EmbeddingConfig::default().with_padding_idx(0));
        assert!(emb.weight.equal(&w), "the padding row is not zeroed, as in PyTorch");
        assert!(!emb.weight.requires_grad());
        assert_eq!((emb.num_embeddings(), emb.embedding_dim()), (3, 2));
    }

    #[test]
    #[should_panic(expected = "padding_idx 6 must be within num_embeddings 6")]
    fn a_padding_index_past_the_table_panics() {
        Embedding::new(6, 3, EmbeddingConfig::default().with_padding_idx(6));
    }
}
