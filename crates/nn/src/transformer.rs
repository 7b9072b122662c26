//! `TransformerEncoderLayer` and `TransformerEncoder` (`torch.nn`'s, batch-first), with
//! `src_key_padding_mask`, their configuration and PyTorch's `state_dict` keys.

use crate::activation::{ReLU, GELU};
use crate::attention::MultiheadAttention;
use crate::dropout::Dropout;
use crate::layer_norm::LayerNorm;
use crate::linear::Linear;
use crate::module::{named_tensors, Module};
use crate::options::LayerOptions;
use tch::nn::ModuleT;
use tch::Tensor;

/// The feed-forward activation of a [`TransformerEncoderLayer`]: PyTorch's `activation="relu"`
/// (the default) or `"gelu"` (exact, erf-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransformerActivation {
    /// `F.relu`, PyTorch's default.
    #[default]
    Relu,
    /// `F.gelu` with `approximate='none'`.
    Gelu,
}

/// The hyperparameters of `nn.TransformerEncoderLayer`, with PyTorch's defaults:
/// `dim_feedforward` 2048, `dropout` 0.1, `activation` relu, `layer_norm_eps` 1e-5,
/// `norm_first` false (post-norm), `bias` true. The layout is always batch-first (`[B, T, D]`,
/// PyTorch's `batch_first=True`).
///
/// ```
/// use torchlight_nn::{TransformerActivation, TransformerEncoder, TransformerEncoderLayerConfig};
/// let layer = TransformerEncoderLayerConfig::new(64, 4)
///     .with_dim_feedforward(128)
///     .with_activation(TransformerActivation::Gelu)
///     .with_norm_first(true)
///     .build();
/// let encoder = TransformerEncoder::new(layer, 2, None);
/// # let _ = encoder;
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransformerEncoderLayerConfig {
    /// Token width `D`.
    pub d_model: i64,
    /// Attention heads; `d_model` divides by it.
    pub nhead: i64,
    /// Hidden width of the feed-forward block (default 2048).
    pub dim_feedforward: i64,
    /// Dropout on the attention weights, after the attention, inside and after the feed-forward
    /// block, in training only (default 0.1).
    pub dropout: f64,
    /// Feed-forward activation (default relu).
    pub activation: TransformerActivation,
    /// The eps of both LayerNorms (default 1e-5).
    pub layer_norm_eps: f64,
    /// Pre-norm (`x + sa(norm1(x))`) when true, post-norm (`norm1(x + sa(x))`) when false
    /// (default false).
    pub norm_first: bool,
    /// Biases in the attention projections, the Linears and the LayerNorms (default true).
    pub bias: bool,
}

impl TransformerEncoderLayerConfig {
    /// `nn.TransformerEncoderLayer(d_model, nhead, batch_first=True)`'s settings.
    pub fn new(d_model: i64, nhead: i64) -> Self {
        TransformerEncoderLayerConfig {
            d_model,
            nhead,
            dim_feedforward: 2048,
            dropout: 0.1,
            activation: TransformerActivation::Relu,
            layer_norm_eps: 1e-5,
            norm_first: false,
            bias: true,
        }
    }

    /// Sets `dim_feedforward`.
    pub fn with_dim_feedforward(self, dim_feedforward: i64) -> Self {
        TransformerEncoderLayerConfig { dim_feedforward, ..self }
    }

    /// Sets `dropout`.
    pub fn with_dropout(self, dropout: f64) -> Self {
        TransformerEncoderLayerConfig { dropout, ..self }
    }

    /// Sets `activation`.
    pub fn with_activation(self, activation: TransformerActivation) -> Self {
        TransformerEncoderLayerConfig { activation, ..self }
    }

    /// Sets `layer_norm_eps`.
    pub fn with_layer_norm_eps(self, layer_norm_eps: f64) -> Self {
        TransformerEncoderLayerConfig { layer_norm_eps, ..self }
    }

    /// Sets `norm_first`.
    pub fn with_norm_first(self, norm_first: bool) -> Self {
        TransformerEncoderLayerConfig { norm_first, ..self }
    }

    /// Sets `bias`.
    pub fn with_bias(self, bias: bool) -> Self {
        TransformerEncoderLayerConfig { bias, ..self }
    }

    /// The layer in float32 on the CPU, initialised as PyTorch initialises it.
    ///
    /// # Panics
    /// When `d_model` does not divide by `nhead`.
    pub fn build(self) -> TransformerEncoderLayer {
        self.build_on(LayerOptions::default())
    }

    /// The layer with its tensors created in `options`' dtype on its device, built and
    /// initialised in PyTorch's order (`self_attn`, `linear1`, `linear2`, then the norms at
    /// weight 1 and bias 0), so `manual_seed(s)` gives PyTorch's seeded weights.
    ///
    /// # Panics
    /// When `d_model` does not divide by `nhead`.
    pub fn build_on(self, options: impl Into<LayerOptions>) -> TransformerEncoderLayer {
        let o = options.into();
        let (d, ff) = (self.d_model, self.dim_feedforward);
        let self_attn = MultiheadAttention::new_on(d, self.nhead, self.dropout, self.bias, o);
        let linear1 = Linear::new_on(d, ff, self.bias, o);
        let linear2 = Linear::new_on(ff, d, self.bias, o);
        let norm = || {
            let mut n = LayerNorm::new_on(&[d], self.layer_norm_eps, true, o);
            if !self.bias {
                n.bias = None;
            }
            n
        };
        let dropout = Dropout { p: self.dropout };
        TransformerEncoderLayer {
            self_attn,
            linear1,
            dropout,
            linear2,
            norm1: norm(),
            norm2: norm(),
            dropout1: dropout,
            dropout2: dropout,
            config: self,
        }
    }
}

/// `nn.TransformerEncoderLayer(..., batch_first=True)`: self-attention and a feed-forward
/// block (`linear2(dropout(activation(linear1(x))))`), each with a residual connection and a
/// LayerNorm, post-norm by default or pre-norm with `norm_first`. Input and output `[B, T, D]`.
///
/// Keys are PyTorch's, in its order: `self_attn.in_proj_weight`, `self_attn.in_proj_bias`,
/// `self_attn.out_proj.{weight,bias}`, `linear1.*`, `linear2.*`, `norm1.*`, `norm2.*`.
/// Outputs are those of PyTorch's training path (the one taken with gradients or in training;
/// see [`TransformerEncoderLayer::forward_masked`] for padded positions).
#[derive(Debug, Module)]
pub struct TransformerEncoderLayer {
    /// Self-attention over the sequence, with the layer's dropout on its weights.
    pub self_attn: MultiheadAttention,
    /// `D -> dim_feedforward`.
    pub linear1: Linear,
    /// Inside the feed-forward block, after the activation.
    pub dropout: Dropout,
    /// `dim_feedforward -> D`.
    pub linear2: Linear,
    /// The attention's norm (before it with `norm_first`, after the residual otherwise).
    pub norm1: LayerNorm,
    /// The feed-forward block's norm.
    pub norm2: LayerNorm,
    /// After the attention.
    pub dropout1: Dropout,
    /// After the feed-forward block.
    pub dropout2: Dropout,
    /// The settings it was built with (activation and `norm_first` are read from here).
    #[module(skip)]
    pub config: TransformerEncoderLayerConfig,
}

/// Asserts `src` is `[B, T, d_model]` and the mask, when given, `[B, T]`.
fn check_shapes(what: &str, src: &Tensor, mask: Option<&Tensor>, d_model: i64) {
    let size = src.size();
    assert!(
        size.len() == 3 && size[2] == d_model,
        "{what}: src must be [B, T, D = {d_model}] (batch first), got {size:?}"
    );
    if let Some(m) = mask {
        assert_eq!(
            m.size(),
            [size[0], size[1]],
            "{what}: src_key_padding_mask must be [B, T] = [{}, {}] (true at padding)",
            size[0],
            size[1]
        );
    }
}

impl TransformerEncoderLayer {
    /// `layer(src, src_key_padding_mask=mask)` for `src` `[B, T, D]` and a bool mask `[B, T]`
    /// true at padding (or a float mask added to the attention scores); `None` attends
    /// everywhere. Returns `[B, T, D]`; dropout applies only when `train`.
    ///
    /// Padded positions are computed as PyTorch's training path computes them (their queries
    /// attend to the valid keys), so they hold finite values that no valid position depends
    /// on. PyTorch's inference fast path (eval, no grad) may give other values there (zeros,
    /// from nested tensors): compare and pool valid positions only.
    ///
    /// # Panics
    /// When `src` is not `[B, T, d_model]` or the mask not `[B, T]` of bool or float.
    pub fn forward_masked(&self, src: &Tensor, src_key_padding_mask: Option<&Tensor>, train: bool) -> Tensor {
        check_shapes("TransformerEncoderLayer", src, src_key_padding_mask, self.config.d_model);
        let sa = |x: &Tensor| {
            self.dropout1.forward_t(&self.self_attn.self_attention(x, src_key_padding_mask, train), train)
        };
        let ff = |x: &Tensor| {
            let h = self.linear1.forward_t(x, train);
            let h = match self.config.activation {
                TransformerActivation::Relu => ReLU.forward_t(&h, train),
                TransformerActivation::Gelu => GELU.forward_t(&h, train),
            };
            let h = self.linear2.forward_t(&self.dropout.forward_t(&h, train), train);
            self.dropout2.forward_t(&h, train)
        };
        if self.config.norm_first {
            let x = src + sa(&self.norm1.forward_t(src, train));
            let y = ff(&self.norm2.forward_t(&x, train));
            x + y
        } else {
            let x = self.norm1.forward_t(&(src + sa(src)), train);
            let y = ff(&x);
            self.norm2.forward_t(&(x + y), train)
        }
    }

    /// An independent copy (PyTorch's `copy.deepcopy`): the same values in new tensors of the
    /// same dtype, device and `requires_grad`.
    fn deep_copy(&self) -> Self {
        let w = &self.self_attn.in_proj_weight;
        let copy = self.config.build_on(LayerOptions::new(w.kind(), w.device()).skip_init());
        let _g = torchlight_tensor::no_grad();
        for ((_, src, _), (_, dst, _)) in named_tensors(self).into_iter().zip(named_tensors(&copy)) {
            dst.shallow_clone().copy_(&src);
            let _ = dst.set_requires_grad(src.requires_grad());
        }
        copy
    }
}

impl ModuleT for TransformerEncoderLayer {
    /// [`TransformerEncoderLayer::forward_masked`] without a mask.
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.forward_masked(xs, None, train)
    }
}

/// `nn.TransformerEncoder(encoder_layer, num_layers, norm)` over `[B, T, D]`: the layers in
/// turn with the same `src_key_padding_mask`, then the optional final norm. Keys
/// `layers.0.self_attn.in_proj_weight`, ..., `layers.{num_layers - 1}.norm2.bias`, then
/// `norm.weight`, `norm.bias`.
#[derive(Debug, Module)]
pub struct TransformerEncoder {
    /// `num_layers` layers, copies of one at construction.
    pub layers: Vec<TransformerEncoderLayer>,
    /// The final norm, when given (PyTorch's `norm=None` default leaves it out).
    pub norm: Option<LayerNorm>,
}

impl TransformerEncoder {
    /// `num_layers` copies of `encoder_layer` and the final `norm`. As in PyTorch, every layer
    /// starts from `encoder_layer`'s values (deep copies), so the layers begin identical and
    /// diverge in training, and `manual_seed(s)` before building the layer gives PyTorch's
    /// seeded encoder.
    pub fn new(encoder_layer: TransformerEncoderLayer, num_layers: usize, norm: Option<LayerNorm>) -> Self {
        let mut layers: Vec<TransformerEncoderLayer> =
            (1..num_layers).map(|_| encoder_layer.deep_copy()).collect();
        if num_layers > 0 {
            layers.insert(0, encoder_layer);
        }
        TransformerEncoder { layers, norm }
    }

    /// `encoder(src, src_key_padding_mask=mask)` for `src` `[B, T, D]` and a bool mask `[B, T]`
    /// true at padding (`None`: no padding). Returns `[B, T, D]`. Padded positions are as
    /// [`TransformerEncoderLayer::forward_masked`] describes: PyTorch's training path, where its
    /// inference fast path would return zeros; only valid positions are meaningful.
    ///
    /// # Panics
    /// When `src` is not `[B, T, D]` or the mask not `[B, T]` of bool or float.
    pub fn forward_masked(&self, src: &Tensor, src_key_padding_mask: Option<&Tensor>, train: bool) -> Tensor {
        let x = self
            .layers
            .iter()
            .fold(src.shallow_clone(), |x, layer| layer.forward_masked(&x, src_key_padding_mask, train));
        match &self.norm {
            Some(norm) => norm.forward_t(&x, train),
            None => x,
        }
    }
}

impl ModuleT for TransformerEncoder {
    /// [`TransformerEncoder::forward_masked`] without a mask.
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.forward_masked(xs, None, train)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::named_parameters;
    use tch::{Device, Kind};

    fn keys(m: &dyn Module) -> Vec<String> {
        named_parameters(m).into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn keys_are_pytorchs_in_its_order() {
        let layer = TransformerEncoderLayerConfig::new(8, 2).with_dim_feedforward(16).build();
        let encoder = TransformerEncoder::new(layer, 2, Some(LayerNorm::new(8, 1e-5)));
        let k = keys(&encoder);
        assert_eq!(k.len(), 2 * 12 + 2);
        assert_eq!(
            k[..12],
            [
                "layers.0.self_attn.in_proj_weight",
                "layers.0.self_attn.in_proj_bias",
                "layers.0.self_attn.out_proj.weight",
                "layers.0.self_attn.out_proj.bias",
                "layers.0.linear1.weight",
                "layers.0.linear1.bias",
                "layers.0.linear2.weight",
                "layers.0.linear2.bias",
                "layers.0.norm1.weight",
                "layers.0.norm1.bias",
                "layers.0.norm2.weight",
                "layers.0.norm2.bias",
            ]
        );
        assert_eq!(k[12], "layers.1.self_attn.in_proj_weight");
        assert_eq!(k[24..], ["norm.weight", "norm.bias"]);
        let no_bias =
            TransformerEncoderLayerConfig::new(8, 2).with_dim_feedforward(16).with_bias(false).build();
        assert_eq!(
            keys(&no_bias),
            [
                "self_attn.in_proj_weight",
                "self_attn.out_proj.weight",
                "linear1.weight",
                "linear2.weight",
                "norm1.weight",
                "norm2.weight"
            ]
        );
    }

    #[test]
    fn layers_start_as_independent_copies() {
        let layer = TransformerEncoderLayerConfig::new(8, 2).with_dim_feedforward(16).build();
        let encoder = TransformerEncoder::new(layer, 3, None);
        let (a, b) = (&encoder.layers[0].linear1.weight, &encoder.layers[2].linear1.weight);
        assert!(a.equal(b) && b.requires_grad());
        let _g = torchlight_tensor::no_grad();
        let _ = b.shallow_clone().fill_(0.0);
        assert!(!a.equal(b), "a copy shares no storage with the original");
    }

    #[test]
    fn masked_positions_do_not_reach_valid_ones() {
        let layer =
            TransformerEncoderLayerConfig::new(8, 2).with_dim_feedforward(16).with_dropout(0.0).build();
        let encoder = TransformerEncoder::new(layer, 2, None);
        let x = Tensor::randn([1, 5, 8], (Kind::Float, Device::Cpu));
        let mask = Tensor::from_slice(&[false, false, false, true, true]).view([1, 5]);
        let full = encoder.forward_masked(&x, Some(&mask), false).narrow(1, 0, 3);
        let changed = x.copy();
        let _ = changed.narrow(1, 3, 2).fill_(100.0);
        let other = encoder.forward_masked(&changed, Some(&mask), false).narrow(1, 0, 3);
        assert!((&full - &other).abs().max().double_value(&[]) < 1e-5);
    }

    #[test]
    #[should_panic(expected = "src_key_padding_mask must be [B, T] = [1, 5]")]
    fn a_mask_of_another_shape_panics() {
        let layer = TransformerEncoderLayerConfig::new(8, 2).with_dim_feedforward(16).build();
        let x = Tensor::zeros([1, 5, 8], (Kind::Float, Device::Cpu));
        let _ = layer.forward_masked(&x, Some(&Tensor::zeros([1, 4], (Kind::Bool, Device::Cpu))), false);
    }
}
