//! `EmbeddingBag` (`torch.nn.EmbeddingBag`): sums, means or maxima of bags of embeddings,
//! without materialising the `[*, D]` lookups.

use crate::embedding::normalize_padding_idx;
use crate::init::{normal_, zeros_};
use crate::module::Module;
use crate::options::LayerOptions;
use tch::{Kind, Tensor};

/// How an [`EmbeddingBag`] reduces a bag, PyTorch's `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmbeddingBagMode {
    /// The sum of the bag's rows (weighted by `per_sample_weights` when given).
    Sum,
    /// The mean of the bag's rows (PyTorch's default).
    #[default]
    Mean,
    /// The elementwise maximum of the bag's rows.
    Max,
}

impl EmbeddingBagMode {
    /// ATen's mode number (`sum` 0, `mean` 1, `max` 2).
    fn aten(self) -> i64 {
        match self {
            EmbeddingBagMode::Sum => 0,
            EmbeddingBagMode::Mean => 1,
            EmbeddingBagMode::Max => 2,
        }
    }
}

/// Options of an [`EmbeddingBag`], with PyTorch's defaults: mode `mean`, no padding index,
/// `include_last_offset` false, gradients not scaled by frequency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EmbeddingBagConfig {
    /// The reduction over a bag. Default [`EmbeddingBagMode::Mean`].
    pub mode: EmbeddingBagMode,
    /// Indices equal to this row are left out of every bag (not summed, not counted in a mean,
    /// not a candidate for the max), the row is zero at initialisation and gets no gradient,
    /// as in PyTorch. Negative values count from the end. Default none.
    pub padding_idx: Option<i64>,
    /// `offsets` has one more entry than there are bags, the last being the number of indices
    /// (CSR layout), as PyTorch's `include_last_offset`. Default `false`.
    pub include_last_offset: bool,
    /// Scale each row's gradient by the inverse of its index's frequency in the mini-batch
    /// (not with mode `max`). Default `false`.
    pub scale_grad_by_freq: bool,
}

impl EmbeddingBagConfig {
    /// With reduction `mode`.
    pub fn with_mode(mut self, mode: EmbeddingBagMode) -> Self {
        self.mode = mode;
        self
    }

    /// With padding row `padding_idx` (negative counts from the end).
    pub fn with_padding_idx(mut self, padding_idx: i64) -> Self {
        self.padding_idx = Some(padding_idx);
        self
    }

    /// With or without a last offset closing the last bag.
    pub fn with_include_last_offset(mut self, include: bool) -> Self {
        self.include_last_offset = include;
        self
    }

    /// With or without gradients scaled by the inverse index frequency.
    pub fn with_scale_grad_by_freq(mut self, scale: bool) -> Self {
        self.scale_grad_by_freq = scale;
        self
    }
}

/// Bags of embeddings reduced to one vector each (`torch.nn.EmbeddingBag`); its one tensor is
/// `weight`, `[num_embeddings, embedding_dim]`, PyTorch's key.
///
/// Two input forms, as in PyTorch ([`EmbeddingBag::forward_bags`]):
/// - 2-D indices `[B, N]` and no offsets: `B` bags of `N` indices each (`forward_t` takes this
///   form), `include_last_offset` ignored as PyTorch ignores it there;
/// - 1-D indices `[L]` with 1-D `offsets` `[B]` (`[B + 1]` with `include_last_offset`, whose
///   last entry must then be `L`, as PyTorch requires): bag `b` holds
///   `indices[offsets[b]..offsets[b + 1]]`, the last running to the end.
///
/// Either way the output is `[B, embedding_dim]`. An empty bag (or one holding only padding)
/// gives zeros in every mode. `max_norm` and sparse gradients are not supported.
#[derive(Debug, Module)]
pub struct EmbeddingBag {
    /// `[num_embeddings, embedding_dim]`.
    #[param]
    pub weight: Tensor,
    /// The reduction over a bag.
    #[module(skip)]
    pub mode: EmbeddingBagMode,
    /// The padding row, in `0..num_embeddings`, left out of the reductions.
    #[module(skip)]
    pub padding_idx: Option<i64>,
    /// Whether `offsets` ends with the number of indices.
    #[module(skip)]
    pub include_last_offset: bool,
    /// Whether gradients are scaled by the inverse index frequency in the mini-batch.
    #[module(skip)]
    pub scale_grad_by_freq: bool,
}

impl EmbeddingBag {
    /// A float32 CPU table initialised as PyTorch does: N(0, 1), then the padding row zeroed.
    ///
    /// # Panics
    /// When the padding index is outside `-num_embeddings..num_embeddings`, or mode `max` is
    /// combined with `scale_grad_by_freq` (PyTorch raises both).
    pub fn new(num_embeddings: i64, embedding_dim: i64, config: EmbeddingBagConfig) -> Self {
        Self::new_on(num_embeddings, embedding_dim, config, LayerOptions::default())
    }

    /// The table created in `options`' dtype on its device, initialised unless skipped.
    ///
    /// # Panics
    /// As [`EmbeddingBag::new`].
    pub fn new_on(
        num_embeddings: i64,
        embedding_dim: i64,
        config: EmbeddingBagConfig,
        options: impl Into<LayerOptions>,
    ) -> Self {
        assert!(
            !(config.mode == EmbeddingBagMode::Max && config.scale_grad_by_freq),
            "max mode does not support scaling the gradient by the frequency"
        );
        let padding_idx = normalize_padding_idx(config.padding_idx, num_embeddings);
        let weight = options.into().param(&[num_embeddings, embedding_dim], |w| {
            normal_(w, 0.0, 1.0);
            if let Some(p) = padding_idx {
                zeros_(&w.get(p));
            }
        });
        EmbeddingBag {
            weight,
            mode: config.mode,
            padding_idx,
            include_last_offset: config.include_last_offset,
            scale_grad_by_freq: config.scale_grad_by_freq,
        }
    }

    /// `num_embeddings`.
    pub fn num_embeddings(&self) -> i64 {
        self.weight.size()[0]
    }

    /// `embedding_dim`.
    pub fn embedding_dim(&self) -> i64 {
        self.weight.size()[1]
    }

    /// One vector per bag, `[B, embedding_dim]` (`bag(input, offsets, per_sample_weights)`):
    /// `input` is `[B, N]` with `offsets` `None`, or `[L]` with `offsets` `[B]` (`[B + 1]` with
    /// `include_last_offset`), both int64; `per_sample_weights` (mode `sum` only) has
    /// `input`'s shape and weighs each index's row.
    ///
    /// # Panics
    /// When the input form is neither of those (2-D input with offsets, 1-D input without),
    /// `per_sample_weights` is given with another mode or shape, or libtorch refuses the
    /// indices (out of range, offsets not increasing from 0).
    pub fn forward_bags(
        &self,
        input: &Tensor,
        offsets: Option<&Tensor>,
        per_sample_weights: Option<&Tensor>,
    ) -> Tensor {
        if let Some(w) = per_sample_weights {
            assert_eq!(
                w.size(),
                input.size(),
                "EmbeddingBag: per_sample_weights must have the shape of the input"
            );
            assert_eq!(
                self.mode,
                EmbeddingBagMode::Sum,
                "EmbeddingBag: per_sample_weights is only supported for mode sum"
            );
        }
        let (input, offsets, per_sample_weights, include_last_offset) = match (input.dim(), offsets) {
            (2, None) => {
                // PyTorch's fixed-length form: a bag starts every N indices, and
                // include_last_offset is set aside.
                let n = input.size()[1];
                let offsets = if n > 0 {
                    // `b * N` made from the input rather than from its size read here, so a
                    // TorchScript trace keeps the batch and the bag length dynamic.
                    let sizes = input.ones_like().sum_dim_intlist(1, false, Kind::Int64);
                    (sizes.cumsum(0, Kind::Int64) - &sizes).to_kind(input.kind())
                } else {
                    Tensor::arange_start_step(0, input.numel() as i64, 1, (Kind::Int64, input.device()))
                        .to_kind(input.kind())
                };
                (input.reshape([-1]), offsets, per_sample_weights.map(|w| w.reshape([-1])), false)
            }
            (2, Some(_)) => {
                panic!("EmbeddingBag: if input is 2-D ([B, N], fixed-length bags), offsets must be None")
            }
            (1, Some(o)) => {
                assert_eq!(o.dim(), 1, "EmbeddingBag: offsets must be 1-D, got shape {:?}", o.size());
                (
                    input.shallow_clone(),
                    o.shallow_clone(),
                    per_sample_weights.map(|w| w.shallow_clone()),
                    self.include_last_offset,
                )
            }
            (1, None) => panic!("EmbeddingBag: a 1-D input needs offsets"),
            (d, _) => panic!("EmbeddingBag: input must be 1-D or 2-D, got {d} dimensions"),
        };
        let (out, _, _, _) = Tensor::embedding_bag_padding_idx(
            &self.weight,
            &input,
            &offsets,
            self.scale_grad_by_freq,
            self.mode.aten(),
            false,
            per_sample_weights.as_ref(),
            include_last_offset,
            self.padding_idx,
        );
        out
    }
}

impl tch::nn::ModuleT for EmbeddingBag {
    /// Fixed-length bags: int64 `[B, N]` gives `[B, embedding_dim]`.
    ///
    /// # Panics
    /// When `xs` is not 2-D (the offsets form goes through [`EmbeddingBag::forward_bags`]).
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        assert_eq!(
            xs.dim(),
            2,
            "EmbeddingBag::forward_t takes [B, N] bags; use forward_bags for indices with offsets"
        );
        self.forward_bags(xs, None, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::nn::ModuleT;
    use tch::Device;

    fn table() -> EmbeddingBag {
        let mut bag = EmbeddingBag::new(4, 2, EmbeddingBagConfig::default().with_padding_idx(0));
        tch::no_grad(|| {
            bag.weight.copy_(&Tensor::from_slice(&[0f32, 0., 1., 2., 3., 4., 5., -6.]).reshape([4, 2]));
        });
        bag
    }

    fn values(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()
    }

    #[test]
    fn padding_is_left_out_of_means_and_maxima() {
        let mut bag = table();
        let ids = Tensor::from_slice(&[1i64, 0, 2, 0, 0, 3]);
        let offsets = Tensor::from_slice(&[0i64, 3, 3]);
        // Bags [1, 0, 2], [], [0, 0, 3]: the padding row 0 counts for nothing.
        assert_eq!(values(&bag.forward_bags(&ids, Some(&offsets), None)), [2., 3., 0., 0., 5., -6.]);
        bag.mode = EmbeddingBagMode::Max;
        assert_eq!(values(&bag.forward_bags(&ids, Some(&offsets), None)), [3., 4., 0., 0., 5., -6.]);
        bag.mode = EmbeddingBagMode::Sum;
        let w = Tensor::from_slice(&[2f32, 1., 1., 1., 1., -1.]);
        assert_eq!(values(&bag.forward_bags(&ids, Some(&offsets), Some(&w))), [5., 8., 0., 0., -5., 6.]);
    }

    #[test]
    fn a_last_offset_closes_the_last_bag_and_two_d_input_makes_fixed_bags() {
        let mut bag = table();
        bag.include_last_offset = true;
        let ids = Tensor::from_slice(&[1i64, 2, 3]);
        let out = bag.forward_bags(&ids, Some(&Tensor::from_slice(&[0i64, 1, 3])), None);
        assert_eq!(values(&out), [1., 2., 4., -1.], "bags [1], [2, 3]");
        // include_last_offset does not apply to [B, N] input, as in PyTorch.
        let out = bag.forward_t(&Tensor::from_slice(&[1i64, 2, 3, 3]).reshape([2, 2]), false);
        assert_eq!(values(&out), [2., 3., 5., -6.]);
    }

    #[test]
    fn the_padding_row_starts_at_zero() {
        let bag = EmbeddingBag::new_on(5, 3, EmbeddingBagConfig::default().with_padding_idx(-1), Device::Cpu);
        assert_eq!(bag.padding_idx, Some(4));
        assert_eq!(values(&bag.weight.get(4)), [0., 0., 0.]);
    }

    #[test]
    #[should_panic(expected = "offsets must be None")]
    fn two_d_input_with_offsets_panics() {
        let _ = table().forward_bags(
            &Tensor::zeros([2, 2], (Kind::Int64, Device::Cpu)),
            Some(&Tensor::from_slice(&[0i64])),
            None,
        );
    }
}
