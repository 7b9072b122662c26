//! ONNX rules (opset 17) for the layers and blocks of the backbones beyond ResNet: the hard
//! activations, LayerNorm (LayerNormalization), squeeze-excitation, stochastic depth (the
//! identity in evaluation), multi-head attention (MatMul/Softmax), and the blocks and models
//! of MobileNetV2/V3, EfficientNet, ConvNeXt and the Vision Transformer.

use super::{attr_float, attr_int, attr_ints, display, join, Builder, Value};
use crate::error::Result;
use crate::onnx_proto::{TensorProto, DTYPE_INT64};
use tch::{Kind, Tensor};
use torchlight_nn::{
    CNBlock, ConvNeXt, EfficientNet, Encoder, EncoderBlock, FusedMBConv, Hardsigmoid, Hardswish,
    InvertedResidualV2, InvertedResidualV3, LayerNorm, LayerNorm2d, MBConv, MobileNetV2, MobileNetV3, Module,
    MultiheadAttention, Permute, ReLU6, Sequential, SqueezeExcitation, StochasticDepth, VisionTransformer,
};

impl Builder {
    /// An int64 initializer (shapes, indices).
    pub(super) fn ints(&mut self, name: String, values: &[i64]) -> String {
        self.initializers.push(TensorProto {
            dims: vec![values.len() as i64],
            data_type: DTYPE_INT64,
            name: name.clone(),
            raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        });
        name
    }

    /// A scalar int64 initializer (a Gather index that drops the axis).
    pub(super) fn int_scalar(&mut self, name: String, value: i64) -> String {
        self.initializers.push(TensorProto {
            dims: vec![],
            data_type: DTYPE_INT64,
            name: name.clone(),
            raw_data: value.to_le_bytes().to_vec(),
        });
        name
    }

    pub(super) fn unary(
        &mut self,
        op: &str,
        path: &str,
        x: &Value,
        attrs: Vec<crate::onnx_proto::AttributeProto>,
    ) -> Value {
        Value { name: self.node(op, path, vec![x.name.clone()], attrs), rank: x.rank }
    }

    pub(super) fn binary(&mut self, op: &str, path: &str, a: &Value, b: String) -> Value {
        Value { name: self.node(op, path, vec![a.name.clone(), b], vec![]), rank: a.rank }
    }

    pub(super) fn transpose(&mut self, path: &str, x: &Value, perm: &[i64]) -> Value {
        Value {
            name: self.node("Transpose", path, vec![x.name.clone()], vec![attr_ints("perm", perm)]),
            rank: Some(perm.len()),
        }
    }

    pub(super) fn reshape(&mut self, path: &str, suffix: &str, x: &Value, shape: &[i64]) -> Value {
        let shape_name = self.ints(format!("{}.{suffix}", display(path)), shape);
        Value {
            name: self.node("Reshape", path, vec![x.name.clone(), shape_name], vec![]),
            rank: Some(shape.len()),
        }
    }

    /// `x[..., index, ...]` along `axis`, dropping the axis.
    pub(super) fn gather(&mut self, path: &str, suffix: &str, x: &Value, index: i64, axis: i64) -> Value {
        let i = self.int_scalar(format!("{}.{suffix}", display(path)), index);
        let name = self.node("Gather", path, vec![x.name.clone(), i], vec![attr_int("axis", axis)]);
        Value { name, rank: x.rank.map(|r| r - 1) }
    }

    /// LayerNormalization over the last `dims` axes.
    fn layer_norm(
        &mut self,
        path: &str,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        shape: &[i64],
        eps: f64,
        x: &Value,
    ) -> Value {
        let ones = Tensor::ones(shape, (Kind::Float, tch::Device::Cpu));
        let zeros = Tensor::zeros(shape, (Kind::Float, tch::Device::Cpu));
        let inputs = vec![
            x.name.clone(),
            self.initializer(join(path, "weight"), weight.unwrap_or(&ones)),
            self.initializer(join(path, "bias"), bias.unwrap_or(&zeros)),
        ];
        let attrs = vec![attr_int("axis", -(shape.len() as i64)), attr_float("epsilon", eps as f32)];
        Value { name: self.node("LayerNormalization", path, inputs, attrs), rank: x.rank }
    }

    /// `x + branch`.
    pub(super) fn add(&mut self, path: &str, branch: Value, x: &Value) -> Value {
        self.binary("Add", path, &branch, x.name.clone())
    }

    /// Exports the layers and blocks of the backbones: `Ok(None)` when `m` is none of them.
    pub(super) fn backbone_layer(&mut self, path: &str, m: &dyn Module, x: &Value) -> Result<Option<Value>> {
        let any = m.as_any();
        let out = if any.is::<ReLU6>() {
            let lo = self.scalar(&format!("{}.min", display(path)), 0.0);
            let hi = self.scalar(&format!("{}.max", display(path)), 6.0);
            Value { name: self.node("Clip", path, vec![x.name.clone(), lo, hi], vec![]), rank: x.rank }
        } else if any.is::<Hardswish>() {
            self.unary("HardSwish", path, x, vec![])
        } else if any.is::<Hardsigmoid>() {
            // PyTorch's relu6(x + 3) / 6 is ONNX's max(0, min(1, x / 6 + 0.5)).
            self.unary("HardSigmoid", path, x, vec![attr_float("alpha", 1.0 / 6.0), attr_float("beta", 0.5)])
        } else if let Some(p) = any.downcast_ref::<Permute>() {
            self.transpose(path, x, &p.dims)
        } else if any.is::<StochasticDepth>() {
            // The identity in evaluation, which is what an exported model runs.
            x.clone()
        } else if let Some(ln) = any.downcast_ref::<LayerNorm>() {
            self.layer_norm(path, ln.weight.as_ref(), ln.bias.as_ref(), &ln.normalized_shape, ln.eps, x)
        } else if let Some(ln) = any.downcast_ref::<LayerNorm2d>() {
            let t = self.transpose(path, x, &[0, 2, 3, 1]);
            let n = self.layer_norm(path, ln.weight.as_ref(), ln.bias.as_ref(), &[ln.channels], ln.eps, &t);
            self.transpose(path, &n, &[0, 3, 1, 2])
        } else if let Some(se) = any.downcast_ref::<SqueezeExcitation>() {
            let s = self.module(&join(path, "avgpool"), &se.avgpool, x.clone())?;
            let s = self.module(&join(path, "fc1"), &se.fc1, s)?;
            let s = self.module(&join(path, "activation"), se.activation.as_ref(), s)?;
            let s = self.module(&join(path, "fc2"), &se.fc2, s)?;
            let s = self.module(&join(path, "scale_activation"), se.scale_activation.as_ref(), s)?;
            self.binary("Mul", path, x, s.name)
        } else if let Some(b) = any.downcast_ref::<InvertedResidualV2>() {
            self.residual_block(path, "conv", &b.conv, b.use_res_connect, x)?
        } else if let Some(b) = any.downcast_ref::<InvertedResidualV3>() {
            self.residual_block(path, "block", &b.block, b.use_res_connect, x)?
        } else if let Some(b) = any.downcast_ref::<MBConv>() {
            self.residual_block(path, "block", &b.block, b.use_res_connect, x)?
        } else if let Some(b) = any.downcast_ref::<FusedMBConv>() {
            self.residual_block(path, "block", &b.block, b.use_res_connect, x)?
        } else if let Some(b) = any.downcast_ref::<CNBlock>() {
            let branch = self.module(&join(path, "block"), &b.block, x.clone())?;
            let scale = self.initializer(join(path, "layer_scale"), &b.layer_scale);
            let branch = self.binary("Mul", path, &branch, scale);
            self.add(path, branch, x)
        } else if let Some(mha) = any.downcast_ref::<MultiheadAttention>() {
            self.self_attention(path, mha, x, None)
        } else if let Some(b) = any.downcast_ref::<EncoderBlock>() {
            let y = self.module(&join(path, "ln_1"), &b.ln_1, x.clone())?;
            let y = self.module(&join(path, "self_attention"), &b.self_attention, y)?;
            let x = self.add(path, y, x);
            let y = self.module(&join(path, "ln_2"), &b.ln_2, x.clone())?;
            let y = self.module(&join(path, "mlp"), &b.mlp, y)?;
            self.add(path, y, &x)
        } else if let Some(e) = any.downcast_ref::<Encoder>() {
            let pos = self.initializer(join(path, "pos_embedding"), &e.pos_embedding);
            let y = self.binary("Add", path, x, pos);
            let y = self.module(&join(path, "layers"), &e.layers, y)?;
            self.module(&join(path, "ln"), &e.ln, y)?
        } else if let Some(v) = any.downcast_ref::<VisionTransformer>() {
            self.vision_transformer(path, v, x)?
        } else if let Some(n) = any.downcast_ref::<MobileNetV2>() {
            let y = self.module(&join(path, "features"), &n.features, x.clone())?;
            let y = self.unary("GlobalAveragePool", path, &y, vec![]);
            self.classify(path, &n.classifier, y)?
        } else if let Some(n) = any.downcast_ref::<MobileNetV3>() {
            self.pooled_classifier(path, &n.features, &n.avgpool, &n.classifier, x)?
        } else if let Some(n) = any.downcast_ref::<EfficientNet>() {
            self.pooled_classifier(path, &n.features, &n.avgpool, &n.classifier, x)?
        } else if let Some(n) = any.downcast_ref::<ConvNeXt>() {
            let y = self.module(&join(path, "features"), &n.features, x.clone())?;
            let y = self.module(&join(path, "avgpool"), &n.avgpool, y)?;
            self.module(&join(path, "classifier"), &n.classifier, y)?
        } else {
            return Ok(None);
        };
        Ok(Some(out))
    }

    /// `block(x)`, plus `x` when residual (stochastic depth is the identity in evaluation).
    fn residual_block(
        &mut self,
        path: &str,
        name: &str,
        block: &Sequential,
        residual: bool,
        x: &Value,
    ) -> Result<Value> {
        let out = self.module(&join(path, name), block, x.clone())?;
        Ok(if residual { self.add(path, out, x) } else { out })
    }

    /// Flatten the pooled `[N, C, 1, 1]` and apply the classifier.
    fn classify(&mut self, path: &str, classifier: &Sequential, pooled: Value) -> Result<Value> {
        let flat = Value {
            name: self.node("Flatten", path, vec![pooled.name], vec![attr_int("axis", 1)]),
            rank: Some(2),
        };
        self.module(&join(path, "classifier"), classifier, flat)
    }

    fn pooled_classifier(
        &mut self,
        path: &str,
        features: &Sequential,
        avgpool: &dyn Module,
        classifier: &Sequential,
        x: &Value,
    ) -> Result<Value> {
        let y = self.module(&join(path, "features"), features, x.clone())?;
        let y = self.module(&join(path, "avgpool"), avgpool, y)?;
        self.classify(path, classifier, y)
    }

    /// Self-attention of `[N, L, E]`: the packed projection, heads split by Reshape and
    /// Transpose, `softmax(q k^T / sqrt(d)) v` with MatMul and Softmax, heads joined, the
    /// output projection. `mask`, when given, is an additive `[N, 1, 1, L]` key padding mask
    /// (0 for a key that takes part, `-inf` at padding) added to the scores before Softmax.
    pub(super) fn self_attention(
        &mut self,
        path: &str,
        mha: &MultiheadAttention,
        x: &Value,
        mask: Option<&str>,
    ) -> Value {
        let e = mha.embed_dim();
        let (h, d) = (mha.num_heads, e / mha.num_heads);
        let _guard = torchlight_tensor::no_grad();
        let w = self.initializer(join(path, "in_proj_weight_t"), &mha.in_proj_weight.tr());
        let mut qkv = self.binary("MatMul", path, x, w);
        if let Some(b) = &mha.in_proj_bias {
            let b = self.initializer(join(path, "in_proj_bias"), b);
            qkv = self.binary("Add", path, &qkv, b);
        }
        let qkv = self.reshape(path, "qkv_shape", &qkv, &[0, 0, 3, h, d]);
        let qkv = self.transpose(path, &qkv, &[2, 0, 3, 1, 4]);
        let q = self.gather(path, "q_index", &qkv, 0, 0);
        let k = self.gather(path, "k_index", &qkv, 1, 0);
        let v = self.gather(path, "v_index", &qkv, 2, 0);
        let kt = self.transpose(path, &k, &[0, 1, 3, 2]);
        let scores = self.binary("MatMul", path, &q, kt.name);
        let scale = self.scalar(&format!("{}.scale", display(path)), 1.0 / (d as f32).sqrt());
        let mut scores = self.binary("Mul", path, &scores, scale);
        if let Some(mask) = mask {
            scores = self.binary("Add", path, &scores, mask.to_string());
        }
        let weights = self.unary("Softmax", path, &scores, vec![attr_int("axis", -1)]);
        let heads = self.binary("MatMul", path, &weights, v.name);
        let heads = self.transpose(path, &heads, &[0, 2, 1, 3]);
        let joined = self.reshape(path, "joined_shape", &heads, &[0, 0, e]);
        self.linear(&join(path, "out_proj"), &mha.out_proj, joined)
    }

    /// Patches embedded and flattened, the class token expanded to the batch and prepended,
    /// the encoder, the class token's features, the head.
    fn vision_transformer(&mut self, path: &str, v: &VisionTransformer, x: &Value) -> Result<Value> {
        let e = v.config.hidden_dim;
        let patches = self.module(&join(path, "conv_proj"), &v.conv_proj, x.clone())?;
        let patches = self.reshape(path, "patches_shape", &patches, &[0, e, -1]);
        let tokens = self.transpose(path, &patches, &[0, 2, 1]);
        // [N, 1, E] from the input's batch size: Shape, the batch dim, Concat, Expand.
        let shape = self.node("Shape", path, vec![tokens.name.clone()], vec![]);
        let zero = self.ints(format!("{}.batch_index", display(path)), &[0]);
        let batch = self.node("Gather", path, vec![shape, zero], vec![attr_int("axis", 0)]);
        let rest = self.ints(format!("{}.token_shape", display(path)), &[1, e]);
        let target = self.node("Concat", path, vec![batch, rest], vec![attr_int("axis", 0)]);
        let token = self.initializer(join(path, "class_token"), &v.class_token);
        let token = self.node("Expand", path, vec![token, target], vec![]);
        let seq = self.node("Concat", path, vec![token, tokens.name], vec![attr_int("axis", 1)]);
        let encoded = self.module(&join(path, "encoder"), &v.encoder, Value { name: seq, rank: Some(3) })?;
        let first = self.gather(path, "class_index", &encoded, 0, 1);
        self.module(&join(path, "heads"), &v.heads, first)
    }
}
