//! The Vision Transformer (`torchvision.models.VisionTransformer`, `vit_b_16`, and the
//! ViT-S/16 size through the same builder), with torchvision's module structure and
//! `state_dict` keys.

use crate::activation::GELU;
use crate::attention::MultiheadAttention;
use crate::conv::{Conv2d, Conv2dConfig};
use crate::dropout::Dropout;
use crate::init::{constant_, normal_, trunc_normal_, xavier_uniform_};
use crate::layer_norm::LayerNorm;
use crate::linear::Linear;
use crate::module::Module;
use crate::options::LayerOptions;
use crate::sequential::Sequential;
use tch::nn::ModuleT;
use tch::Tensor;

/// The eps of every ViT LayerNorm.
const EPS: f64 = 1e-6;

/// A transformer encoder block (torchvision's `EncoderBlock`), pre-norm: `x + dropout(attn(ln_1(x)))`,
/// then `x + mlp(ln_2(x))`. Input and output `[N, L, E]`. Keys `ln_1.*`, `self_attention.*`,
/// `ln_2.*`, `mlp.0.*` and `mlp.3.*` (the two Linears of torchvision's `MLPBlock`).
#[derive(Debug, Module)]
pub struct EncoderBlock {
    /// Before the attention.
    pub ln_1: LayerNorm,
    /// Self-attention.
    pub self_attention: MultiheadAttention,
    /// After the attention.
    pub dropout: Dropout,
    /// Before the MLP.
    pub ln_2: LayerNorm,
    /// `MLPBlock`: Linear `E -> mlp_dim`, GELU, Dropout, Linear `mlp_dim -> E`, Dropout.
    pub mlp: Sequential,
}

impl EncoderBlock {
    /// A block of `num_heads` heads over `hidden_dim` with an MLP of `mlp_dim`, built and
    /// initialised in torchvision's order (the MLP's Linears xavier-uniform with N(0, 1e-6)
    /// biases, right after the MLP is built).
    pub fn new_on(
        num_heads: i64,
        hidden_dim: i64,
        mlp_dim: i64,
        dropout: f64,
        attention_dropout: f64,
        o: LayerOptions,
    ) -> Self {
        let ln_1 = LayerNorm::new_on(&[hidden_dim], EPS, true, o);
        let self_attention = MultiheadAttention::new_on(hidden_dim, num_heads, attention_dropout, true, o);
        let ln_2 = LayerNorm::new_on(&[hidden_dim], EPS, true, o);
        let fc1 = Linear::new_on(hidden_dim, mlp_dim, true, o);
        let fc2 = Linear::new_on(mlp_dim, hidden_dim, true, o);
        if o.init {
            for fc in [&fc1, &fc2] {
                xavier_uniform_(&fc.weight, 1.0);
                fc.bias.iter().for_each(|b| normal_(b, 0.0, 1e-6));
            }
        }
        let mlp = Sequential::new()
            .add(fc1)
            .add(GELU)
            .add(Dropout { p: dropout })
            .add(fc2)
            .add(Dropout { p: dropout });
        EncoderBlock { ln_1, self_attention, dropout: Dropout { p: dropout }, ln_2, mlp }
    }
}

impl ModuleT for EncoderBlock {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let x = self.self_attention.forward_t(&self.ln_1.forward_t(xs, train), train);
        let x = self.dropout.forward_t(&x, train) + xs;
        let y = self.mlp.forward_t(&self.ln_2.forward_t(&x, train), train);
        x + y
    }
}

/// The encoder (torchvision's `Encoder`): position embedding added, dropout, the blocks
/// (`layers.encoder_layer_0` ...), a final LayerNorm. Input and output `[N, L, E]`.
#[derive(Debug, Module)]
pub struct Encoder {
    /// `[1, L, E]` learned position embedding (N(0, 0.02) at init).
    #[param]
    pub pos_embedding: Tensor,
    /// After adding the position embedding.
    pub dropout: Dropout,
    /// `encoder_layer_0` ... : the [`EncoderBlock`]s.
    pub layers: Sequential,
    /// The final norm.
    pub ln: LayerNorm,
}

impl ModuleT for Encoder {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let x = self.dropout.forward_t(&(xs + &self.pos_embedding), train);
        self.ln.forward_t(&self.layers.forward_t(&x, train), train)
    }
}

/// The sizes of a Vision Transformer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VitConfig {
    /// Side of the square input image; the position embedding has `(image_size /
    /// patch_size)^2 + 1` entries, so a model runs at this size only.
    pub image_size: i64,
    /// Side of the square patches.
    pub patch_size: i64,
    /// Encoder blocks.
    pub num_layers: usize,
    /// Attention heads.
    pub num_heads: i64,
    /// Token width `E`.
    pub hidden_dim: i64,
    /// Hidden width of each block's MLP.
    pub mlp_dim: i64,
    /// Dropout after attention, in the MLP and on the embedded input (torchvision's default 0).
    pub dropout: f64,
    /// Dropout on the attention weights (default 0).
    pub attention_dropout: f64,
}

impl VitConfig {
    /// ViT-B/16 (`vit_b_16`): 12 layers, 12 heads, width 768, MLP 3072, at `image_size`.
    pub fn b_16(image_size: i64) -> Self {
        VitConfig {
            image_size,
            patch_size: 16,
            num_layers: 12,
            num_heads: 12,
            hidden_dim: 768,
            mlp_dim: 3072,
            dropout: 0.0,
            attention_dropout: 0.0,
        }
    }

    /// ViT-S/16 (DeiT-S, timm's `vit_small_patch16`), torchvision's builder at a smaller size:
    /// 12 layers, 6 heads, width 384, MLP 1536, at `image_size`.
    pub fn s_16(image_size: i64) -> Self {
        VitConfig { num_heads: 6, hidden_dim: 384, mlp_dim: 1536, ..Self::b_16(image_size) }
    }

    /// ViT-Ti/16 (DeiT-Ti, timm's `vit_tiny_patch16`): 12 layers, 3 heads, width 192, MLP 768,
    /// at `image_size`.
    pub fn ti_16(image_size: i64) -> Self {
        VitConfig { num_heads: 3, hidden_dim: 192, mlp_dim: 768, ..Self::b_16(image_size) }
    }

    /// Patches per image plus the class token.
    pub fn seq_length(&self) -> i64 {
        (self.image_size / self.patch_size).pow(2) + 1
    }

    /// Why these sizes cannot make a model (torchvision asserts them), if they cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.patch_size <= 0 || self.image_size < self.patch_size || self.image_size % self.patch_size != 0
        {
            return Err(format!(
                "image size {} must be a positive multiple of the patch size {}",
                self.image_size, self.patch_size
            ));
        }
        if self.num_heads <= 0 || self.hidden_dim % self.num_heads != 0 {
            return Err(format!(
                "hidden dim {} must divide by the {} heads",
                self.hidden_dim, self.num_heads
            ));
        }
        Ok(())
    }
}

/// `torchvision.models.VisionTransformer`. Input `[N, 3, S, S]` at the configured image size,
/// output logits `[N, num_classes]`: patches embedded by `conv_proj` (a `patch_size` stride
/// `patch_size` convolution), the `class_token` prepended, the [`Encoder`], then `heads.head`
/// (the Linear head) on the class token.
///
/// Keys torchvision's: `class_token`, `conv_proj.*`, `encoder.pos_embedding`,
/// `encoder.layers.encoder_layer_0.ln_1.weight`, ..., `encoder.ln.*`, `heads.head.*`.
#[derive(Debug, Module)]
pub struct VisionTransformer {
    /// `[1, 1, E]` class token (zeros at init).
    #[param]
    pub class_token: Tensor,
    /// Patch embedding.
    pub conv_proj: Conv2d,
    /// The transformer.
    pub encoder: Encoder,
    /// `head`: the Linear head.
    pub heads: Sequential,
    /// The sizes.
    #[module(skip)]
    pub config: VitConfig,
}

impl VisionTransformer {
    /// `VisionTransformer(image_size, patch_size, num_layers, num_heads, hidden_dim, mlp_dim,
    /// dropout, attention_dropout, num_classes)` with its tensors created in `options`' dtype on
    /// its device and torchvision's initialisation drawn in its order, unless skipped: the
    /// patch embedding truncated-normal with std `sqrt(1 / fan_in)` and zero bias, position
    /// embedding N(0, 0.02), class token 0, attention as PyTorch's, MLPs xavier-uniform, the
    /// head all zeros.
    ///
    /// # Panics
    /// When [`VitConfig::check`] fails.
    pub fn new_on(config: VitConfig, num_classes: i64, options: impl Into<LayerOptions>) -> Self {
        if let Err(reason) = config.check() {
            panic!("VisionTransformer: {reason}");
        }
        let o = options.into();
        let (e, p) = (config.hidden_dim, config.patch_size);
        let conv_proj = Conv2d::new_on(3, e, p, Conv2dConfig::default().with_stride(p), o);
        let class_token = o.full(&[1, 1, e], 0.0, o.kind).set_requires_grad(true);
        let pos_embedding = o.param(&[1, config.seq_length(), e], |t| normal_(t, 0.0, 0.02));
        let mut layers = Sequential::new();
        for i in 0..config.num_layers {
            let block = EncoderBlock::new_on(
                config.num_heads,
                e,
                config.mlp_dim,
                config.dropout,
                config.attention_dropout,
                o,
            );
            layers = layers.add_named(format!("encoder_layer_{i}"), block);
        }
        let encoder = Encoder {
            pos_embedding,
            dropout: Dropout { p: config.dropout },
            layers,
            ln: LayerNorm::new_on(&[e], EPS, true, o),
        };
        let head = Linear::new_on(e, num_classes, true, o);
        if o.init {
            let fan_in = (3 * p * p) as f64;
            trunc_normal_(&conv_proj.weight, 0.0, (1.0 / fan_in).sqrt(), -2.0, 2.0);
            conv_proj.bias.iter().for_each(|b| constant_(b, 0.0));
            constant_(&head.weight, 0.0);
            head.bias.iter().for_each(|b| constant_(b, 0.0));
        }
        VisionTransformer {
            class_token,
            conv_proj,
            encoder,
            heads: Sequential::new().add_named("head", head),
            config,
        }
    }

    /// The class token's features after the encoder: `[N, E]`.
    ///
    /// # Panics
    /// When the input is not `[N, 3, S, S]` at the configured image size, as torchvision
    /// asserts.
    pub fn features_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let size = xs.size();
        let s = self.config.image_size;
        assert!(
            size.len() == 4 && size[2] == s && size[3] == s,
            "VisionTransformer built for {s}x{s} images got an input of shape {size:?}"
        );
        // [N, E, h, w] -> [N, h * w, E]; flatten and expand_as keep the batch axis symbolic
        // when traced.
        let x = self.conv_proj.forward_t(xs, train).flatten(2, 3).transpose(1, 2);
        let class_token = self.class_token.expand_as(&x.narrow(1, 0, 1));
        let x = Tensor::cat(&[class_token, x], 1);
        self.encoder.forward_t(&x, train).select(1, 0)
    }
}

impl ModuleT for VisionTransformer {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.heads.forward_t(&self.features_t(xs, train), train)
    }
}

impl crate::classifier::Classifier for VisionTransformer {
    fn features_t(&self, xs: &Tensor, train: bool) -> Tensor {
        VisionTransformer::features_t(self, xs, train)
    }
    fn head(&self) -> &dyn Module {
        &self.heads
    }
}

/// `torchvision.models.vit_b_16(num_classes=..., image_size=...)`: 86.6M parameters at 1000
/// classes and 224 pixels.
///
/// # Panics
/// When `image_size` is not a positive multiple of 16.
pub fn vit_b_16(num_classes: i64, image_size: i64) -> VisionTransformer {
    vit_b_16_on(num_classes, image_size, LayerOptions::default())
}

/// [`vit_b_16`] with its tensors created in `options`' dtype on its device (uninitialised with
/// [`LayerOptions::skip_init`]).
///
/// # Panics
/// When `image_size` is not a positive multiple of 16.
pub fn vit_b_16_on(num_classes: i64, image_size: i64, options: impl Into<LayerOptions>) -> VisionTransformer {
    VisionTransformer::new_on(VitConfig::b_16(image_size), num_classes, options)
}

/// ViT-S/16 ([`VitConfig::s_16`]): 22.1M parameters at 1000 classes and 224 pixels.
///
/// # Panics
/// When `image_size` is not a positive multiple of 16.
pub fn vit_s_16(num_classes: i64, image_size: i64) -> VisionTransformer {
    vit_s_16_on(num_classes, image_size, LayerOptions::default())
}

/// [`vit_s_16`] with its tensors created in `options`' dtype on its device (uninitialised with
/// [`LayerOptions::skip_init`]).
///
/// # Panics
/// When `image_size` is not a positive multiple of 16.
pub fn vit_s_16_on(num_classes: i64, image_size: i64, options: impl Into<LayerOptions>) -> VisionTransformer {
    VisionTransformer::new_on(VitConfig::s_16(image_size), num_classes, options)
}
