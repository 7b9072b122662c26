//! `MultiheadAttention` (`torch.nn.MultiheadAttention` with `batch_first=True`), the attention
//! of the Vision Transformer and of `TransformerEncoderLayer`, with PyTorch's `key_padding_mask`.

use crate::init::{constant_, xavier_uniform_};
use crate::linear::Linear;
use crate::module::Module;
use crate::options::LayerOptions;
use tch::nn::ModuleT;
use tch::Tensor;

/// Multi-head scaled dot-product attention over `[N, L, E]` (batch first), with PyTorch's
/// packed input projection: keys `in_proj_weight` (`[3E, E]`, query, key and value rows
/// stacked), `in_proj_bias` (`[3E]`), `out_proj.weight`, `out_proj.bias`, so
/// `nn.MultiheadAttention(E, H, batch_first=True)` weights load as they are.
///
/// `forward_t(x, train)` is self-attention (`mha(x, x, x, need_weights=False)[0]`);
/// [`MultiheadAttention::attend`] takes separate query, key and value. Attention dropout
/// applies in training only. [`MultiheadAttention::self_attention`] and
/// [`MultiheadAttention::attend_masked`] take PyTorch's `key_padding_mask` (`[N, S]`, true at
/// padding). `attn_mask`, `is_causal`, `add_bias_kv`, `add_zero_attn`, returned attention
/// weights and different key/value sizes are not supported.
#[derive(Debug, Module)]
pub struct MultiheadAttention {
    /// `[3E, E]`: the query, key and value projections, stacked.
    #[param]
    pub in_proj_weight: Tensor,
    /// `[3E]`, when the layer has biases.
    #[param]
    pub in_proj_bias: Option<Tensor>,
    /// `E -> E` after the heads are joined.
    pub out_proj: Linear,
    /// Number of heads `H`; `E` divides by it.
    #[module(skip)]
    pub num_heads: i64,
    /// Dropout on the attention weights in training (PyTorch's default 0).
    #[module(skip)]
    pub dropout: f64,
}

impl MultiheadAttention {
    /// `nn.MultiheadAttention(embed_dim, num_heads, dropout, bias, batch_first=True)` with its
    /// tensors created in `options`' dtype on its device, initialised as PyTorch does (unless
    /// skipped) and in its order: `out_proj` with Linear's default, then `in_proj_weight`
    /// xavier-uniform and both biases 0.
    ///
    /// # Panics
    /// When `embed_dim` does not divide by `num_heads`, as PyTorch raises.
    pub fn new_on(
        embed_dim: i64,
        num_heads: i64,
        dropout: f64,
        bias: bool,
        options: impl Into<LayerOptions>,
    ) -> Self {
        assert!(
            num_heads > 0 && embed_dim % num_heads == 0,
            "MultiheadAttention: embed_dim {embed_dim} must divide by num_heads {num_heads}"
        );
        let o = options.into();
        let in_proj_weight = o.param(&[3 * embed_dim, embed_dim], |_| {});
        let in_proj_bias = bias.then(|| o.param(&[3 * embed_dim], |_| {}));
        let out_proj = Linear::new_on(embed_dim, embed_dim, bias, o);
        if o.init {
            xavier_uniform_(&in_proj_weight, 1.0);
            if let (Some(b), Some(out_b)) = (&in_proj_bias, &out_proj.bias) {
                constant_(b, 0.0);
                constant_(out_b, 0.0);
            }
        }
        MultiheadAttention { in_proj_weight, in_proj_bias, out_proj, num_heads, dropout }
    }

    /// `E`.
    pub fn embed_dim(&self) -> i64 {
        self.in_proj_weight.size()[1]
    }

    /// Query, key and value projected and split into heads: each `[N, H, L, E / H]`.
    fn project(&self, xs: &Tensor, rows: std::ops::Range<i64>) -> Tensor {
        let e = self.embed_dim();
        let w = self.in_proj_weight.narrow(0, rows.start, rows.end - rows.start);
        let b = self.in_proj_bias.as_ref().map(|b| b.narrow(0, rows.start, rows.end - rows.start));
        xs.linear(&w, b.as_ref()).unflatten(-1, [self.num_heads, e / self.num_heads]).transpose(1, 2)
    }

    /// Scaled dot-product attention of the heads and the output projection: `[N, L, E]`.
    /// `mask` is an additive `[N, 1, 1, S]` mask, broadcast over heads and queries.
    fn heads(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<Tensor>, train: bool) -> Tensor {
        let dropout = if train { self.dropout } else { 0.0 };
        let out = Tensor::scaled_dot_product_attention(q, k, v, mask, dropout, false, None, false);
        self.out_proj.forward_t(&out.transpose(1, 2).flatten(2, 3), train)
    }

    /// PyTorch's `key_padding_mask` as the additive mask the attention kernel takes, as
    /// `F._canonical_mask` makes it: a bool mask becomes 0 where a key takes part and `-inf`
    /// at padding (true), in the query's dtype; a float mask is added as it is. `[N, 1, 1, S]`.
    fn additive_key_mask(mask: &Tensor, query: &Tensor, batch: i64, src_len: i64) -> Tensor {
        assert_eq!(
            mask.size(),
            [batch, src_len],
            "MultiheadAttention: key_padding_mask must be [N, S] = [{batch}, {src_len}] (true at padding)"
        );
        let mask = mask.to_device(query.device());
        // Made from the mask and unsqueezed, never from the sizes, so a trace stays dynamic.
        let additive = if mask.kind() == tch::Kind::Bool {
            mask.zeros_like().to_kind(query.kind()).masked_fill(&mask, f64::NEG_INFINITY)
        } else if mask.is_floating_point() {
            mask.to_kind(query.kind())
        } else {
            panic!(
                "MultiheadAttention: key_padding_mask must be bool or floating point, not {:?}",
                mask.kind()
            )
        };
        additive.unsqueeze(1).unsqueeze(1)
    }

    /// Self-attention of `xs` `[N, L, E]` with PyTorch's `key_padding_mask` (`[N, L]`, bool,
    /// true at padding: those keys get no attention; or a float mask added to the scores):
    /// `mha(x, x, x, key_padding_mask=mask, need_weights=False)[0]`, `[N, L, E]`. Without a mask it
    /// is `forward_t`. Outputs at padded query positions are computed as PyTorch's training
    /// path computes them (attending to the valid keys); a sequence that is all padding gives
    /// NaN, as in PyTorch.
    ///
    /// # Panics
    /// When the mask is not `[N, L]`, or neither bool nor floating point.
    pub fn self_attention(&self, xs: &Tensor, key_padding_mask: Option<&Tensor>, train: bool) -> Tensor {
        let e = self.embed_dim();
        let (n, l) = (xs.size()[0], xs.size()[1]);
        let mask = key_padding_mask.map(|m| Self::additive_key_mask(m, xs, n, l));
        let qkv = xs
            .linear(&self.in_proj_weight, self.in_proj_bias.as_ref())
            .unflatten(-1, [3, self.num_heads, e / self.num_heads])
            .permute([2, 0, 3, 1, 4]);
        self.heads(&qkv.get(0), &qkv.get(1), &qkv.get(2), mask, train)
    }

    /// Attention of `query` `[N, L, E]` over `key` and `value` `[N, S, E]`: `[N, L, E]`
    /// (`mha(query, key, value, need_weights=False)[0]`).
    pub fn attend(&self, query: &Tensor, key: &Tensor, value: &Tensor, train: bool) -> Tensor {
        self.attend_masked(query, key, value, None, train)
    }

    /// [`MultiheadAttention::attend`] with PyTorch's `key_padding_mask` over the keys (`[N, S]`,
    /// bool true at padding, or a float mask added to the scores): `mha(query, key, value,
    /// key_padding_mask=mask, need_weights=False)[0]`, `[N, L, E]`.
    ///
    /// # Panics
    /// When the mask is not `[N, S]`, or neither bool nor floating point.
    pub fn attend_masked(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        key_padding_mask: Option<&Tensor>,
        train: bool,
    ) -> Tensor {
        let e = self.embed_dim();
        let (n, s) = (key.size()[0], key.size()[1]);
        let mask = key_padding_mask.map(|m| Self::additive_key_mask(m, query, n, s));
        let q = self.project(query, 0..e);
        let k = self.project(key, e..2 * e);
        let v = self.project(value, 2 * e..3 * e);
        self.heads(&q, &k, &v, mask, train)
    }
}

impl ModuleT for MultiheadAttention {
    /// Self-attention of `[N, L, E]`: one packed projection, as PyTorch does when query, key
    /// and value are the same tensor.
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.self_attention(xs, None, train)
    }
}
