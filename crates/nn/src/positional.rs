//! `LearnedPositionalEmbedding`: a learned `[max_len, d_model]` table of position vectors added
//! to token embeddings (the `nn.Embedding(max_len, d_model)` of positions in BERT-style models).

use crate::init::normal_;
use crate::module::Module;
use crate::options::LayerOptions;
use tch::Tensor;

/// Learned absolute positions: `forward_t(x)` is `x + weight[:T]` for token embeddings `x`
/// `[B, T, D]`, position `t` of every sequence getting row `t` of `weight`.
///
/// This is PyTorch's `x + pos(torch.arange(T))` with `pos = nn.Embedding(max_len, d_model)`:
/// one key, `weight` (`[max_len, d_model]`), so a field `pos_embedding:
/// LearnedPositionalEmbedding` saves as `pos_embedding.weight`, the key of such an embedding,
/// and its weights load both ways. Initialised N(0, 1) as `nn.Embedding` is (BERT and timm
/// re-initialise with std 0.02; call [`crate::init::trunc_normal_`] on `weight` for that).
/// Positions are the same in training and evaluation; dropout after the sum is the caller's.
/// Padding needs nothing here: padded positions get a row like any other and the attention's
/// `key_padding_mask` keeps them out.
#[derive(Debug, Module)]
pub struct LearnedPositionalEmbedding {
    /// `[max_len, d_model]`: row `t` is added at position `t`.
    #[param]
    pub weight: Tensor,
}

impl LearnedPositionalEmbedding {
    /// A float32 CPU table for sequences of up to `max_len` positions of width `d_model`.
    pub fn new(max_len: i64, d_model: i64) -> Self {
        Self::new_on(max_len, d_model, LayerOptions::default())
    }

    /// The table created in `options`' dtype on its device, N(0, 1) unless initialisation is
    /// skipped.
    pub fn new_on(max_len: i64, d_model: i64, options: impl Into<LayerOptions>) -> Self {
        let weight = options.into().param(&[max_len, d_model], |w| normal_(w, 0.0, 1.0));
        LearnedPositionalEmbedding { weight }
    }

    /// The longest sequence this table covers.
    pub fn max_len(&self) -> i64 {
        self.weight.size()[0]
    }

    /// The width `D` of each position vector.
    pub fn d_model(&self) -> i64 {
        self.weight.size()[1]
    }
}

impl tch::nn::ModuleT for LearnedPositionalEmbedding {
    /// `xs + weight[:T]` for `xs` `[B, T, D]` (or `[T, D]`), broadcast over the batch.
    ///
    /// # Panics
    /// When `T` exceeds `max_len` or the last dim is not `d_model`.
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        let size = xs.size();
        assert!(size.len() >= 2, "LearnedPositionalEmbedding: input must be [B, T, D], got {size:?}");
        let (t, d) = (size[size.len() - 2], size[size.len() - 1]);
        assert!(
            t <= self.max_len() && d == self.d_model(),
            "LearnedPositionalEmbedding: input [.., T = {t}, D = {d}] needs T <= max_len {} and D = {}",
            self.max_len(),
            self.d_model()
        );
        // Rows gathered at positions made from `xs` itself (not `narrow(0, 0, t)` with the `t`
        // read here), so a TorchScript trace keeps the length dynamic; the same values.
        let positions = xs.select(-1, 0).ones_like().cumsum(-1, tch::Kind::Int64) - 1;
        xs + Tensor::embedding(&self.weight, &positions, -1, false, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::named_parameters;
    use tch::nn::ModuleT;
    use tch::{Device, Kind};

    #[test]
    fn adds_row_t_at_position_t_under_the_key_weight() {
        let pe = LearnedPositionalEmbedding::new(6, 4);
        let keys: Vec<String> = named_parameters(&pe).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["weight"]);
        let x = Tensor::zeros([2, 3, 4], (Kind::Float, Device::Cpu));
        let y = pe.forward_t(&x, false);
        assert!(y.get(0).equal(&pe.weight.narrow(0, 0, 3)));
        assert!(y.get(1).equal(&pe.weight.narrow(0, 0, 3)));
    }

    #[test]
    #[should_panic(expected = "needs T <= max_len 6")]
    fn a_sequence_longer_than_the_table_panics() {
        let pe = LearnedPositionalEmbedding::new(6, 4);
        let _ = pe.forward_t(&Tensor::zeros([1, 7, 4], (Kind::Float, Device::Cpu)), false);
    }
}
