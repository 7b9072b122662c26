//! ONNX export (opset 17) of the nn crate's layers, written natively with prost.
//!
//! The exporter walks the model's structure (`Module::children`) and emits one ONNX node group
//! per layer, naming initializers by their `state_dict` keys. The batch axis is the symbolic
//! dimension `batch` on input and output, like `torch.onnx.export(dynamic_axes=...)`. A layer
//! it does not know is an error naming the layer's path, never a silently wrong graph.

use crate::error::{ExportError, Result};
use crate::io::{check_parent, write_through_tmp};
use crate::onnx_proto::*;
use prost::Message;
use std::path::Path;
use tch::{Kind, Tensor};
use torchlight_nn::{
    AdaptiveAvgPool2d, AvgPool2d, BasicBlock, BatchNorm2d, Bottleneck, Conv2d, Dropout, Flatten, Identity,
    LeakyReLU, Linear, MaxPool2d, Module, ReLU, ResNet, ResNetStem, Sequential, SiLU, Sigmoid, Tanh, GELU,
};
use torchlight_vision::EvalPreprocessing;

#[path = "onnx_backbones.rs"]
mod backbones;
#[path = "onnx_text.rs"]
mod text;

pub use text::{export_text_onnx, text_onnx_model, TextOnnxOptions};

/// The ONNX opset written.
pub const OPSET: i64 = 17;
/// The IR version matching opset 17.
const IR_VERSION: i64 = 8;

/// Options of [`export_onnx`].
#[derive(Debug, Clone)]
pub struct OnnxOptions {
    /// Name of the graph input (default `input`).
    pub input_name: String,
    /// Name of the graph output (default `logits`).
    pub output_name: String,
    /// Input shape without the batch axis, e.g. `[3, 224, 224]`.
    pub input_shape: Vec<i64>,
    /// Fold each BatchNorm that follows a convolution into the convolution's weights (default
    /// off: BatchNormalization nodes are written).
    pub fold_batch_norm: bool,
    /// `metadata_props` entries, e.g. class names and normalisation, for consumers.
    pub metadata: Vec<(String, String)>,
    /// A temperature the graph divides the model's logits by (temperature scaling, Guo et al.
    /// 2017), recorded as the `temperature` metadata entry; `None` (the default) leaves the
    /// logits as the model gives them and records nothing.
    pub temperature: Option<f64>,
    /// Test-time augmentation with the horizontal flip in the graph: the model runs on the
    /// input and its mirror image (one batch of both), and the output is the mean of the two
    /// softmax distributions (after any temperature), i.e. class probabilities, as `torchlight
    /// predict --tta hflip` computes them; recorded as the `tta` (`hflip`) and `output`
    /// (`probabilities`) metadata entries. Off (the default): the output is the logits.
    pub hflip_tta: bool,
}

impl OnnxOptions {
    /// Options for an input of `input_shape` (without the batch axis).
    pub fn new(input_shape: &[i64]) -> Self {
        OnnxOptions {
            input_name: "input".into(),
            output_name: "logits".into(),
            input_shape: input_shape.to_vec(),
            fold_batch_norm: false,
            metadata: Vec::new(),
            temperature: None,
            hflip_tta: false,
        }
    }
    /// Averages the softmax over the input and its horizontal flip inside the graph
    /// ([`hflip_tta`](Self::hflip_tta)); the output is then class probabilities.
    pub fn with_hflip_tta(mut self, on: bool) -> Self {
        self.hflip_tta = on;
        self
    }
    /// Divides the output logits by `temperature` in the graph (a `Div` by the scalar
    /// initializer `temperature`, after the model's last node), and records it as the
    /// `temperature` metadata entry.
    pub fn with_temperature(mut self, temperature: f64) -> Self {
        self.temperature = Some(temperature);
        self
    }
    /// Fold BatchNorm into the preceding convolutions.
    pub fn with_fold_batch_norm(mut self, fold: bool) -> Self {
        self.fold_batch_norm = fold;
        self
    }
    /// Records the class names (index order) as `class_names`, a JSON array.
    pub fn with_class_names(mut self, names: &[String]) -> Self {
        let items: Vec<String> = names.iter().map(|n| json_string(n)).collect();
        self.metadata.push(("class_names".into(), format!("[{}]", items.join(", "))));
        self
    }
    /// Records the input normalisation as `mean` and `std`, JSON arrays per channel.
    pub fn with_normalization(mut self, mean: &[f32], std: &[f32]) -> Self {
        let list =
            |v: &[f32]| format!("[{}]", v.iter().map(|x| format!("{x}")).collect::<Vec<_>>().join(", "));
        self.metadata.push(("mean".into(), list(mean)));
        self.metadata.push(("std".into(), list(std)));
        self
    }
    /// Records the evaluation preprocessing (resize side, interpolation, crop, value range,
    /// channel order, layout, mean and std, and the torchvision recipe), so a deployer need
    /// not guess any of it; see [`EvalPreprocessing::metadata`] for the keys.
    pub fn with_preprocessing(mut self, preprocessing: &EvalPreprocessing) -> Self {
        self.metadata.extend(preprocessing.metadata());
        self
    }
    /// Any other `metadata_props` entry.
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.push((key.into(), value.into()));
        self
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn attr_ints(name: &str, ints: &[i64]) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: ATTR_INTS, ints: ints.to_vec(), ..Default::default() }
}

fn attr_int(name: &str, i: i64) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: ATTR_INT, i, ..Default::default() }
}

fn attr_float(name: &str, f: f32) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: ATTR_FLOAT, f, ..Default::default() }
}

/// A value in the ONNX graph: its name and, when known, its rank (e.g. 4 for `[N, C, H, W]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnnxValue {
    /// The graph value's name, as node inputs and outputs refer to it.
    pub name: String,
    /// Its number of dimensions, batch included, when known.
    pub rank: Option<usize>,
}

type Value = OnnxValue;

/// How a layer of your own exports to ONNX: the nodes that compute its forward (in eval mode)
/// from `x`, added through `graph`. A layer made of layers the exporter knows hands them back
/// with [`OnnxGraph::module`]; one computed by hand adds nodes with [`OnnxGraph::node`] and its
/// weights with [`OnnxGraph::initializer`]. Register the rule once with [`register_onnx_rule`].
///
/// ```
/// use tch::{nn::ModuleT, Tensor};
/// use torchlight_export::{onnx_attr, register_onnx_rule, OnnxExport, OnnxGraph, OnnxValue};
/// use torchlight_nn::Module;
///
/// /// `x * sigmoid(x)`, written by hand.
/// #[derive(Debug, Module)]
/// struct Swish;
///
/// impl ModuleT for Swish {
///     fn forward_t(&self, x: &Tensor, _train: bool) -> Tensor {
///         x * x.sigmoid()
///     }
/// }
///
/// impl OnnxExport for Swish {
///     fn export_onnx(&self, graph: &mut OnnxGraph, path: &str, x: OnnxValue) -> torchlight_export::Result<OnnxValue> {
///         let s = graph.node("Sigmoid", path, vec![x.name.clone()], vec![]);
///         let y = graph.node("Mul", path, vec![x.name, s], vec![]);
///         Ok(OnnxValue { name: y, rank: x.rank })
///     }
/// }
///
/// register_onnx_rule::<Swish>();
/// # let _ = onnx_attr::int("axis", 1);
/// ```
pub trait OnnxExport: Module + 'static {
    /// Adds the nodes of `self`'s eval forward applied to `x`; `path` is the layer's name in the
    /// model (`block.act`), to name its nodes and initializers.
    ///
    /// # Errors
    /// An [`ExportError`] (e.g. from a child that has no rule).
    fn export_onnx(&self, graph: &mut OnnxGraph, path: &str, x: OnnxValue) -> Result<OnnxValue>;
}

/// A rule of the registry: the layer seen as `Any`, downcast by the closure made in
/// [`register_onnx_rule`].
type Rule = fn(&dyn std::any::Any, &mut OnnxGraph, &str, OnnxValue) -> Result<OnnxValue>;

fn rules() -> &'static std::sync::RwLock<std::collections::HashMap<std::any::TypeId, Rule>> {
    static RULES: std::sync::OnceLock<std::sync::RwLock<std::collections::HashMap<std::any::TypeId, Rule>>> =
        std::sync::OnceLock::new();
    RULES.get_or_init(Default::default)
}

/// Makes [`export_onnx`] export every `T` in a model with `T`'s [`OnnxExport`] rule, which
/// takes precedence over a built-in rule for the same type. Registering twice is harmless.
pub fn register_onnx_rule<T: OnnxExport>() {
    fn apply<T: OnnxExport>(
        layer: &dyn std::any::Any,
        graph: &mut OnnxGraph,
        path: &str,
        x: OnnxValue,
    ) -> Result<OnnxValue> {
        let layer = layer.downcast_ref::<T>().expect("the registry is keyed by the layer's TypeId");
        layer.export_onnx(graph, path, x)
    }
    let mut rules = rules().write().unwrap_or_else(|poisoned| poisoned.into_inner());
    rules.insert(std::any::TypeId::of::<T>(), apply::<T>);
}

/// The graph under construction, as a layer's [`OnnxExport`] rule sees it.
pub struct OnnxGraph<'a> {
    builder: &'a mut Builder,
}

impl OnnxGraph<'_> {
    /// Adds a node `op` (an ONNX opset-17 operator, e.g. `"Mul"`) named after `path` with
    /// `inputs` (value or initializer names); returns its output's name.
    pub fn node(
        &mut self,
        op: &str,
        path: &str,
        inputs: Vec<String>,
        attributes: Vec<AttributeProto>,
    ) -> String {
        self.builder.node(op, path, inputs, attributes)
    }

    /// Adds `tensor` (any float dtype or device; stored as float32) as an initializer named
    /// `name`; returns the name. Use the layer's path for unique names: `"{path}.weight"`.
    pub fn initializer(&mut self, name: impl Into<String>, tensor: &Tensor) -> String {
        self.builder.initializer(name.into(), tensor)
    }

    /// Exports `module` (a child of the layer, or any layer the exporter or the registry knows)
    /// at `path` applied to `x`.
    ///
    /// # Errors
    /// [`ExportError::Unsupported`] naming the first layer below with no rule.
    pub fn module(&mut self, path: &str, module: &dyn Module, x: OnnxValue) -> Result<OnnxValue> {
        self.builder.module(path, module, x)
    }
}

/// ONNX node attributes for [`OnnxGraph::node`].
pub mod onnx_attr {
    use crate::onnx_proto::AttributeProto;

    /// An integer attribute (`axis`).
    pub fn int(name: &str, value: i64) -> AttributeProto {
        super::attr_int(name, value)
    }

    /// An integer-list attribute (`kernel_shape`, `pads`).
    pub fn ints(name: &str, values: &[i64]) -> AttributeProto {
        super::attr_ints(name, values)
    }

    /// A float attribute (`alpha`, `epsilon`).
    pub fn float(name: &str, value: f32) -> AttributeProto {
        super::attr_float(name, value)
    }
}

struct Builder {
    fold: bool,
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    next_id: usize,
}

fn display(path: &str) -> String {
    if path.is_empty() {
        "<root>".to_string()
    } else {
        path.to_string()
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

impl Builder {
    fn initializer(&mut self, name: String, tensor: &Tensor) -> String {
        let t = tensor.detach().to_device(tch::Device::Cpu).to_kind(Kind::Float).contiguous();
        let values = Vec::<f32>::try_from(t.flatten(0, -1)).expect("a float CPU tensor converts to Vec<f32>");
        let raw_data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.initializers.push(TensorProto {
            dims: t.size(),
            data_type: DTYPE_FLOAT,
            name: name.clone(),
            raw_data,
        });
        name
    }

    fn node(&mut self, op: &str, name: &str, inputs: Vec<String>, attribute: Vec<AttributeProto>) -> String {
        self.next_id += 1;
        let output = format!("{}/{op}_{}", display(name), self.next_id);
        self.nodes.push(NodeProto {
            input: inputs,
            output: vec![output.clone()],
            name: format!("{}/{op}_{}", display(name), self.next_id),
            op_type: op.into(),
            attribute,
        });
        output
    }

    /// A node with `outputs` outputs (`LSTM`'s `Y` and `Y_h`); returns their names.
    fn node_outputs(
        &mut self,
        op: &str,
        name: &str,
        inputs: Vec<String>,
        attribute: Vec<AttributeProto>,
        outputs: usize,
    ) -> Vec<String> {
        self.next_id += 1;
        let base = format!("{}/{op}_{}", display(name), self.next_id);
        let output: Vec<String> = (0..outputs).map(|i| format!("{base}:{i}")).collect();
        self.nodes.push(NodeProto {
            input: inputs,
            output: output.clone(),
            name: base,
            op_type: op.into(),
            attribute,
        });
        output
    }

    fn scalar(&mut self, name: &str, value: f32) -> String {
        self.initializer(name.to_string(), &Tensor::from(value))
    }

    /// `logits / temperature`: a `Div` by the scalar initializer `temperature` (float32, as
    /// libtorch divides a float32 tensor by a scalar); returns its output.
    fn divide_by_temperature(&mut self, logits: String, temperature: f64) -> String {
        let t = self.scalar("temperature", temperature as f32);
        self.node("Div", "temperature", vec![logits, t], vec![])
    }

    /// `[x; flip(x, width)]`: the input and its mirror image along the last axis as one batch
    /// of twice the size (a Slice with step -1, then a Concat on the batch axis).
    fn with_hflip(&mut self, x: Value) -> Value {
        let starts = self.ints("tta.flip_starts".into(), &[-1]);
        let ends = self.ints("tta.flip_ends".into(), &[i64::MIN]);
        let axes = self.ints("tta.flip_axes".into(), &[-1]);
        let steps = self.ints("tta.flip_steps".into(), &[-1]);
        let flipped = self.node("Slice", "tta", vec![x.name.clone(), starts, ends, axes, steps], vec![]);
        Value {
            name: self.node("Concat", "tta", vec![x.name, flipped], vec![attr_int("axis", 0)]),
            rank: x.rank,
        }
    }

    /// The mean over the two halves of the batch [`with_hflip`](Self::with_hflip) made of the
    /// softmax of `logits` `[2N, C]`: Softmax, Reshape to `[2, N, C]`, ReduceMean over the first
    /// axis.
    fn mean_softmax_of_halves(&mut self, logits: Value, classes: i64) -> Value {
        let p = self.node("Softmax", "tta", vec![logits.name], vec![attr_int("axis", 1)]);
        let shape = self.ints("tta.halves".into(), &[2, -1, classes]);
        let halves = self.node("Reshape", "tta", vec![p, shape], vec![]);
        let mean = self.node(
            "ReduceMean",
            "tta",
            vec![halves],
            vec![attr_ints("axes", &[0]), attr_int("keepdims", 0)],
        );
        Value { name: mean, rank: Some(2) }
    }

    /// Exports `module` at `path` applied to `x`.
    fn module(&mut self, path: &str, m: &dyn Module, x: Value) -> Result<Value> {
        let any = m.as_any();
        let rule =
            rules().read().unwrap_or_else(|poisoned| poisoned.into_inner()).get(&any.type_id()).copied();
        if let Some(rule) = rule {
            return rule(any, &mut OnnxGraph { builder: self }, path, x);
        }
        let same_rank = |name: String| Value { name, rank: x.rank };
        if let Some(conv) = any.downcast_ref::<Conv2d>() {
            return Ok(self.conv(path, conv, None, x));
        }
        if let Some(bn) = any.downcast_ref::<BatchNorm2d>() {
            return self.batch_norm(path, bn, x);
        }
        if let Some(lin) = any.downcast_ref::<Linear>() {
            return Ok(self.linear(path, lin, x));
        }
        if any.is::<ReLU>() {
            return Ok(same_rank(self.node("Relu", path, vec![x.name.clone()], vec![])));
        }
        if let Some(l) = any.downcast_ref::<LeakyReLU>() {
            let attrs = vec![attr_float("alpha", l.negative_slope as f32)];
            return Ok(same_rank(self.node("LeakyRelu", path, vec![x.name.clone()], attrs)));
        }
        if any.is::<Sigmoid>() {
            return Ok(same_rank(self.node("Sigmoid", path, vec![x.name.clone()], vec![])));
        }
        if any.is::<Tanh>() {
            return Ok(same_rank(self.node("Tanh", path, vec![x.name.clone()], vec![])));
        }
        if any.is::<SiLU>() {
            let s = self.node("Sigmoid", path, vec![x.name.clone()], vec![]);
            return Ok(same_rank(self.node("Mul", path, vec![x.name.clone(), s], vec![])));
        }
        if any.is::<GELU>() {
            // Opset 17 has no Gelu: 0.5 * x * (1 + erf(x / sqrt(2))), PyTorch's exact form.
            let sqrt2 = self.scalar(&format!("{}.sqrt2", display(path)), std::f32::consts::SQRT_2);
            let one = self.scalar(&format!("{}.one", display(path)), 1.0);
            let half = self.scalar(&format!("{}.half", display(path)), 0.5);
            let d = self.node("Div", path, vec![x.name.clone(), sqrt2], vec![]);
            let e = self.node("Erf", path, vec![d], vec![]);
            let a = self.node("Add", path, vec![e, one], vec![]);
            let m = self.node("Mul", path, vec![x.name.clone(), a], vec![]);
            return Ok(same_rank(self.node("Mul", path, vec![m, half], vec![])));
        }
        if let Some(p) = any.downcast_ref::<MaxPool2d>() {
            let attrs = vec![
                attr_ints("kernel_shape", &p.kernel_size),
                attr_ints("strides", &p.stride),
                attr_ints("pads", &[p.padding[0], p.padding[1], p.padding[0], p.padding[1]]),
                attr_ints("dilations", &p.dilation),
                attr_int("ceil_mode", i64::from(p.ceil_mode)),
            ];
            return Ok(same_rank(self.node("MaxPool", path, vec![x.name.clone()], attrs)));
        }
        if let Some(p) = any.downcast_ref::<AvgPool2d>() {
            let attrs = vec![
                attr_ints("kernel_shape", &p.kernel_size),
                attr_ints("strides", &p.stride),
                attr_ints("pads", &[p.padding[0], p.padding[1], p.padding[0], p.padding[1]]),
                attr_int("ceil_mode", i64::from(p.ceil_mode)),
                attr_int("count_include_pad", i64::from(p.count_include_pad)),
            ];
            return Ok(same_rank(self.node("AveragePool", path, vec![x.name.clone()], attrs)));
        }
        if let Some(p) = any.downcast_ref::<AdaptiveAvgPool2d>() {
            if p.output_size != [1, 1] {
                return Err(ExportError::Unsupported {
                    path: display(path),
                    kind: m.kind(),
                    reason: format!(
                        "output size {:?} has no ONNX equivalent; only (1, 1) (GlobalAveragePool) is exported",
                        p.output_size
                    ),
                });
            }
            return Ok(same_rank(self.node("GlobalAveragePool", path, vec![x.name.clone()], vec![])));
        }
        if let Some(f) = any.downcast_ref::<Flatten>() {
            let end_is_last = f.end_dim == -1 || x.rank.is_some_and(|r| f.end_dim == r as i64 - 1);
            if !end_is_last || f.start_dim < 0 {
                return Err(ExportError::Unsupported {
                    path: display(path),
                    kind: m.kind(),
                    reason: format!(
                        "flatten({}, {}) is exported only with end_dim -1 (ONNX Flatten)",
                        f.start_dim, f.end_dim
                    ),
                });
            }
            let out = self.node("Flatten", path, vec![x.name.clone()], vec![attr_int("axis", f.start_dim)]);
            return Ok(Value { name: out, rank: Some(f.start_dim.max(1) as usize + 1) });
        }
        if any.is::<Dropout>() || any.is::<Identity>() {
            // Identity in evaluation, which is what an exported model runs.
            return Ok(x);
        }
        if let Some(seq) = any.downcast_ref::<Sequential>() {
            return self.sequential(path, seq, x);
        }
        if let Some(b) = any.downcast_ref::<BasicBlock>() {
            let out = self.conv(&join(path, "conv1"), &b.conv1, Some(&b.bn1), x.clone());
            let out = self.bn_if_unfolded(&join(path, "bn1"), &b.bn1, out)?;
            let out = Value {
                name: self.node("Relu", &join(path, "relu"), vec![out.name], vec![]),
                rank: out.rank,
            };
            let out = self.conv(&join(path, "conv2"), &b.conv2, Some(&b.bn2), out);
            let out = self.bn_if_unfolded(&join(path, "bn2"), &b.bn2, out)?;
            return self.residual(path, &b.downsample, out, x);
        }
        if let Some(b) = any.downcast_ref::<Bottleneck>() {
            let mut out = x.clone();
            for (i, (conv, bn)) in
                [(&b.conv1, &b.bn1), (&b.conv2, &b.bn2), (&b.conv3, &b.bn3)].into_iter().enumerate()
            {
                out = self.conv(&join(path, &format!("conv{}", i + 1)), conv, Some(bn), out);
                out = self.bn_if_unfolded(&join(path, &format!("bn{}", i + 1)), bn, out)?;
                if i < 2 {
                    out = Value {
                        name: self.node("Relu", &join(path, "relu"), vec![out.name], vec![]),
                        rank: out.rank,
                    };
                }
            }
            return self.residual(path, &b.downsample, out, x);
        }
        if let Some(r) = any.downcast_ref::<ResNet>() {
            let out = match &r.conv1 {
                ResNetStem::Conv(conv1) => {
                    let out = self.conv(&join(path, "conv1"), conv1, Some(&r.bn1), x);
                    self.bn_if_unfolded(&join(path, "bn1"), &r.bn1, out)?
                }
                // timm's deep stem: its last convolution has no BatchNorm of its own to fold
                // (`bn1` follows the Sequential), so `bn1` stays a BatchNormalization node.
                ResNetStem::Deep(stem) => {
                    let out = self.sequential(&join(path, "conv1"), stem, x)?;
                    self.batch_norm(&join(path, "bn1"), &r.bn1, out)?
                }
            };
            let mut out = Value {
                name: self.node("Relu", &join(path, "relu"), vec![out.name], vec![]),
                rank: out.rank,
            };
            out = self.module(&join(path, "maxpool"), &r.maxpool, out)?;
            for (name, stage) in
                [("layer1", &r.layer1), ("layer2", &r.layer2), ("layer3", &r.layer3), ("layer4", &r.layer4)]
            {
                out = self.module(&join(path, name), stage, out)?;
            }
            out = self.module(&join(path, "avgpool"), &r.avgpool, out)?;
            out = self.module(&join(path, "flatten"), &Flatten::default(), out)?;
            return self.module(&join(path, "fc"), &r.fc, out);
        }
        if let Some(out) = self.backbone_layer(path, m, &x)? {
            return Ok(out);
        }
        Err(ExportError::Unsupported {
            path: display(path),
            kind: m.kind(),
            reason: "the ONNX exporter has no rule for this layer kind; a layer of your own gets one by \
                     implementing `OnnxExport` and calling `register_onnx_rule`"
                .to_string(),
        })
    }

    fn sequential(&mut self, path: &str, seq: &Sequential, x: Value) -> Result<Value> {
        let children = seq.children();
        let mut out = x;
        let mut i = 0;
        while i < children.len() {
            let (name, child) = &children[i];
            let next_bn = children
                .get(i + 1)
                .and_then(|(n, m)| m.as_any().downcast_ref::<BatchNorm2d>().map(|b| (n, b)));
            if let (Some(conv), Some((bn_name, bn)), true) =
                (child.as_any().downcast_ref::<Conv2d>(), next_bn, self.fold)
            {
                out = self.conv(&join(path, name), conv, Some(bn), out);
                out = self.bn_if_unfolded(&join(path, bn_name), bn, out)?;
                i += 2;
            } else {
                out = self.module(&join(path, name), *child, out)?;
                i += 1;
            }
        }
        Ok(out)
    }

    fn residual(
        &mut self,
        path: &str,
        downsample: &Option<Sequential>,
        out: Value,
        x: Value,
    ) -> Result<Value> {
        let shortcut = match downsample {
            Some(d) => self.module(&join(path, "downsample"), d, x)?,
            None => x,
        };
        let sum = self.node("Add", path, vec![out.name, shortcut.name], vec![]);
        Ok(Value { name: self.node("Relu", &join(path, "relu"), vec![sum], vec![]), rank: out.rank })
    }

    /// A convolution; with folding on and a following `bn`, the BatchNorm is folded into it.
    fn conv(&mut self, path: &str, conv: &Conv2d, bn: Option<&BatchNorm2d>, x: Value) -> Value {
        let _guard = torchlight_tensor::no_grad();
        let foldable = bn.filter(|b| self.fold && b.running_mean.is_some());
        let (weight, bias) = match foldable {
            Some(b) => {
                let (scale, shift) = bn_affine(b);
                let w = &conv.weight * scale.view([-1, 1, 1, 1]);
                let bias = match &conv.bias {
                    Some(cb) => cb * &scale + &shift,
                    None => shift,
                };
                (w, Some(bias))
            }
            None => (conv.weight.shallow_clone(), conv.bias.as_ref().map(Tensor::shallow_clone)),
        };
        let mut inputs = vec![x.name, self.initializer(join(path, "weight"), &weight)];
        if let Some(b) = bias {
            inputs.push(self.initializer(join(path, "bias"), &b));
        }
        let c = &conv.config;
        let k = conv.weight.size();
        let attrs = vec![
            attr_ints("kernel_shape", &k[2..]),
            attr_ints("strides", &c.stride),
            attr_ints("pads", &[c.padding[0], c.padding[1], c.padding[0], c.padding[1]]),
            attr_ints("dilations", &c.dilation),
            attr_int("group", c.groups),
        ];
        Value { name: self.node("Conv", path, inputs, attrs), rank: x.rank }
    }

    fn bn_if_unfolded(&mut self, path: &str, bn: &BatchNorm2d, x: Value) -> Result<Value> {
        if self.fold && bn.running_mean.is_some() {
            Ok(x)
        } else {
            self.batch_norm(path, bn, x)
        }
    }

    fn batch_norm(&mut self, path: &str, bn: &BatchNorm2d, x: Value) -> Result<Value> {
        let (Some(mean), Some(var)) = (&bn.running_mean, &bn.running_var) else {
            return Err(ExportError::Unsupported {
                path: display(path),
                kind: "BatchNorm2d",
                reason: "without running statistics it normalises with batch statistics even in evaluation, \
                         which ONNX BatchNormalization cannot express"
                    .to_string(),
            });
        };
        let channels = mean.size()[0];
        let ones = Tensor::ones([channels], (Kind::Float, tch::Device::Cpu));
        let zeros = Tensor::zeros([channels], (Kind::Float, tch::Device::Cpu));
        let inputs = vec![
            x.name,
            self.initializer(join(path, "weight"), bn.weight.as_ref().unwrap_or(&ones)),
            self.initializer(join(path, "bias"), bn.bias.as_ref().unwrap_or(&zeros)),
            self.initializer(join(path, "running_mean"), mean),
            self.initializer(join(path, "running_var"), var),
        ];
        let attrs = vec![attr_float("epsilon", bn.config.eps as f32), attr_float("momentum", 0.9)];
        Ok(Value { name: self.node("BatchNormalization", path, inputs, attrs), rank: x.rank })
    }

    fn linear(&mut self, path: &str, lin: &Linear, x: Value) -> Value {
        if x.rank == Some(2) {
            let mut inputs = vec![x.name, self.initializer(join(path, "weight"), &lin.weight)];
            if let Some(b) = &lin.bias {
                inputs.push(self.initializer(join(path, "bias"), b));
            }
            let attrs = vec![attr_int("transB", 1)];
            return Value { name: self.node("Gemm", path, inputs, attrs), rank: Some(2) };
        }
        // Other ranks: x @ W^T (+ b), which broadcasts over leading dims as torch.nn.Linear.
        let wt = self.initializer(join(path, "weight_t"), &lin.weight.tr());
        let mut out = self.node("MatMul", path, vec![x.name, wt], vec![]);
        if let Some(b) = &lin.bias {
            let b = self.initializer(join(path, "bias"), b);
            out = self.node("Add", path, vec![out, b], vec![]);
        }
        Value { name: out, rank: x.rank }
    }
}

/// BatchNorm in evaluation as `y = x * scale + shift` per channel.
fn bn_affine(bn: &BatchNorm2d) -> (Tensor, Tensor) {
    let mean = bn.running_mean.as_ref().expect("checked by the caller");
    let var = bn.running_var.as_ref().expect("checked by the caller");
    let inv_std = (var + bn.config.eps).rsqrt();
    let scale = match &bn.weight {
        Some(w) => w * &inv_std,
        None => inv_std,
    };
    let shift = match &bn.bias {
        Some(b) => b - mean * &scale,
        None => -(mean * &scale),
    };
    (scale, shift)
}

fn value_info(name: &str, dims: &[Option<i64>]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d {
                Some(v) => DimensionValue::DimValue(*v),
                None => DimensionValue::DimParam("batch".into()),
            }),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: DTYPE_FLOAT,
                shape: Some(TensorShapeProto { dim }),
            }),
        }),
    }
}

/// Builds the ONNX model of `model` in eval mode, without writing it.
pub fn onnx_model(model: &dyn Module, options: &OnnxOptions) -> Result<ModelProto> {
    // The output's shape from one eval forward at batch 1.
    let out_shape = {
        let _guard = torchlight_tensor::no_grad();
        let mut shape = vec![1];
        shape.extend(&options.input_shape);
        let y = model.forward_t(&Tensor::zeros(shape.as_slice(), (Kind::Float, first_device(model))), false);
        y.size()
    };
    if options.hflip_tta && out_shape.len() != 2 {
        return Err(ExportError::Unsupported {
            path: "<root>".into(),
            kind: model.kind(),
            reason: format!(
                "test-time augmentation (hflip) averages the class probabilities of `[N, classes]` logits; \
                 the model gives {out_shape:?} at batch 1"
            ),
        });
    }
    let mut builder =
        Builder { fold: options.fold_batch_norm, nodes: Vec::new(), initializers: Vec::new(), next_id: 0 };
    let mut input = Value { name: options.input_name.clone(), rank: Some(options.input_shape.len() + 1) };
    if options.hflip_tta {
        input = builder.with_hflip(input);
    }
    let mut out = builder.module("", model, input)?;
    if let Some(t) = options.temperature {
        out = Value { name: builder.divide_by_temperature(out.name, t), rank: out.rank };
    }
    if options.hflip_tta {
        out = builder.mean_softmax_of_halves(out, out_shape[1]);
    }
    // Rename the last node's output to the requested output name.
    let last = builder.nodes.iter_mut().rev().find(|n| n.output.contains(&out.name));
    match last {
        Some(node) => node.output = vec![options.output_name.clone()],
        None => {
            builder.nodes.push(NodeProto {
                input: vec![out.name],
                output: vec![options.output_name.clone()],
                name: "output".into(),
                op_type: "Identity".into(),
                attribute: vec![],
            });
        }
    }
    let mut in_dims = vec![None];
    in_dims.extend(options.input_shape.iter().map(|d| Some(*d)));
    let mut out_dims = vec![None];
    out_dims.extend(out_shape[1..].iter().map(|d| Some(*d)));
    let graph = GraphProto {
        node: builder.nodes,
        name: format!("torchlight_{}", model.kind()),
        initializer: builder.initializers,
        input: vec![value_info(&options.input_name, &in_dims)],
        output: vec![value_info(&options.output_name, &out_dims)],
    };
    let mut metadata_props: Vec<StringStringEntryProto> = options
        .metadata
        .iter()
        .map(|(k, v)| StringStringEntryProto { key: k.clone(), value: v.clone() })
        .collect();
    if let Some(t) = options.temperature {
        metadata_props.push(StringStringEntryProto { key: "temperature".into(), value: format!("{t}") });
    }
    if options.hflip_tta {
        metadata_props.push(StringStringEntryProto { key: "tta".into(), value: "hflip".into() });
        metadata_props.push(StringStringEntryProto { key: "output".into(), value: "probabilities".into() });
    }
    let size = options.input_shape.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
    metadata_props.push(StringStringEntryProto { key: "input_size".into(), value: format!("[{size}]") });
    Ok(ModelProto {
        ir_version: IR_VERSION,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: OPSET }],
        producer_name: "torchlight".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        doc_string: format!("{} exported by Torchlight", model.kind()),
        graph: Some(graph),
        metadata_props,
    })
}

fn first_device(model: &dyn Module) -> tch::Device {
    torchlight_nn::named_tensors(model).first().map(|(_, t, _)| t.device()).unwrap_or(tch::Device::Cpu)
}

/// Exports `model` (in eval mode) to an ONNX file at `path`, through a temporary file and a
/// rename. Nothing is written when a layer cannot be exported.
///
/// # Errors
/// [`ExportError::Unsupported`] naming a layer with no ONNX rule; [`ExportError::Io`] naming
/// `path` (never the temporary file) when it cannot be written, e.g. its folder is missing.
pub fn export_onnx(model: &dyn Module, options: &OnnxOptions, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    check_parent(path)?;
    let bytes = onnx_model(model, options)?.encode_to_vec();
    write_through_tmp(path, "onnx.tmp", |tmp| std::fs::write(tmp, &bytes))
}
