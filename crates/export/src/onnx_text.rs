//! ONNX export (opset 17) of the nn crate's text classifiers: graphs with two inputs, `ids`
//! (int64 `[batch, length]`) and `lengths` (int64 `[batch]`), both axes symbolic, and the output
//! `logits` (float `[batch, classes]`).
//!
//! Each graph mirrors its model's `forward_padded` in evaluation: the padding mask is built
//! from `lengths` (`Range(0, length) < lengths`), the ids past each length are replaced by the
//! pad id before anything reads them, and every pooling runs over valid positions only, so a
//! document's logits do not depend on how far its batch is padded.
//!
//! - FastText: `Gather` of the embedding rows, the sum over the ids that are not the pad id
//!   divided by their count (at least 1: a document of only pad ids gets zeros, as
//!   `EmbeddingBag(mode="mean", padding_idx=0)` does), `Gemm`.
//! - TextCnn: the ids padded by the widest filter minus one pad ids (so a document shorter than
//!   the widest filter has its one window, reading pad embeddings), `Gather`, then per width
//!   `Conv` + `Relu`, `-inf` at the windows that start at or past `max(length - k + 1, 1)` and
//!   `ReduceMax` over time; the maxima concatenated, `Gemm`.
//! - BiLstmClassifier: `Gather`, then per layer one bidirectional ONNX `LSTM` with
//!   `sequence_lens` (the lengths as int32), its weights reordered from PyTorch's gates
//!   (i, f, g, o) to ONNX's (i, o, f, c) and its biases as `[Wb, Rb]`; the last layer's final
//!   forward and backward states concatenated, `Gemm`.
//! - TransformerClassifier: `Gather` of tokens plus the first `length` rows of the positional
//!   table, then per encoder layer the packed attention projection, `MatMul`/`Softmax` with the
//!   key padding mask added to the scores (0 or `-inf`), the output projection, the
//!   feed-forward block (relu or exact gelu as the layer's config says) and
//!   `LayerNormalization` before (`norm_first`) or after each residual; the encoder's final
//!   norm when it has one; the mean over valid positions, `Gemm`. Dropout is the identity.

use super::{attr_int, attr_ints, json_string, Builder, Value, IR_VERSION, OPSET};
use crate::error::{ExportError, Result};
use crate::io::{check_parent, write_through_tmp};
use crate::onnx_proto::*;
use prost::Message;
use std::path::Path;
use tch::Tensor;
use torchlight_nn::{
    BiLstmClassifier, FastText, Linear, Module, TextCnn, TransformerActivation, TransformerClassifier,
    TransformerEncoderLayer, GELU, PAD_ID,
};

/// Options of [`export_text_onnx`]: the names of the graph's inputs and output and the
/// `metadata_props`. The defaults (`new`) are the names the text models read: inputs `ids` and
/// `lengths`, output `logits`.
///
/// ```
/// use torchlight_export::TextOnnxOptions;
/// let options = TextOnnxOptions::new()
///     .with_class_names(&["neg".to_string(), "pos".to_string()])
///     .with_metadata("text.max_len", "256");
/// assert_eq!(options.ids_name, "ids");
/// ```
#[derive(Debug, Clone)]
pub struct TextOnnxOptions {
    /// Name of the token ids input, int64 `[batch, length]` (default `ids`).
    pub ids_name: String,
    /// Name of the lengths input, int64 `[batch]` (default `lengths`).
    pub lengths_name: String,
    /// Name of the output, float `[batch, classes]` (default `logits`).
    pub output_name: String,
    /// `metadata_props` entries, e.g. class names and the tokenizer, for consumers.
    pub metadata: Vec<(String, String)>,
    /// A temperature the graph divides the logits by, recorded as the `temperature` metadata
    /// entry, as [`OnnxOptions::temperature`](crate::OnnxOptions::temperature); `None` by
    /// default.
    pub temperature: Option<f64>,
}

impl Default for TextOnnxOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl TextOnnxOptions {
    /// Inputs `ids` and `lengths`, output `logits`, no metadata yet.
    pub fn new() -> Self {
        TextOnnxOptions {
            ids_name: "ids".into(),
            lengths_name: "lengths".into(),
            output_name: "logits".into(),
            metadata: Vec::new(),
            temperature: None,
        }
    }

    /// Divides the output logits by `temperature` in the graph, and records it as the
    /// `temperature` metadata entry.
    pub fn with_temperature(mut self, temperature: f64) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Records the class names (index order) as `class_names`, a JSON array.
    pub fn with_class_names(mut self, names: &[String]) -> Self {
        let items: Vec<String> = names.iter().map(|n| json_string(n)).collect();
        self.metadata.push(("class_names".into(), format!("[{}]", items.join(", "))));
        self
    }

    /// Any other `metadata_props` entry (the CLI puts the tokenizer and `text.max_len` here).
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.push((key.into(), value.into()));
        self
    }
}

/// The graph's shared values: the inputs, the cleaned ids and the masks built from `lengths`.
struct TextInputs {
    lengths: String,
    /// `[T]` int64: `0..T`.
    positions: String,
    /// `[B, T]` bool: true before each length.
    valid: String,
    /// `[B, T]` int64: the ids with the pad id at and past each length.
    ids: String,
}

fn unsupported(path: &str, kind: &'static str, reason: impl Into<String>) -> ExportError {
    ExportError::Unsupported { path: super::display(path), kind, reason: reason.into() }
}

impl Builder {
    /// `Range(0, x.shape[axis], 1)`: the positions along `axis` of `x`, `[n]` int64.
    fn positions_along(&mut self, path: &str, x: &str, axis: i64) -> String {
        let shape = self.node("Shape", path, vec![x.to_string()], vec![]);
        let axis_index = self.int_scalar(format!("{path}.axis{axis}"), axis);
        let n = self.node("Gather", path, vec![shape, axis_index], vec![attr_int("axis", 0)]);
        let zero = self.int_scalar(format!("{path}.range_start"), 0);
        let one = self.int_scalar(format!("{path}.range_step"), 1);
        self.node("Range", path, vec![zero, n, one], vec![])
    }

    /// `Unsqueeze(x, axes)`.
    fn unsqueeze(&mut self, path: &str, suffix: &str, x: String, axes: &[i64]) -> String {
        let axes = self.ints(format!("{path}.{suffix}"), axes);
        self.node("Unsqueeze", path, vec![x, axes], vec![])
    }

    /// The positions, the valid mask and the cleaned ids (`clean_ids` of the nn crate).
    fn text_inputs(&mut self, ids: &str, lengths: &str) -> TextInputs {
        let path = "mask";
        let positions = self.positions_along(path, ids, 1);
        let row = self.unsqueeze(path, "row_axes", positions.clone(), &[0]);
        let column = self.unsqueeze(path, "column_axes", lengths.to_string(), &[1]);
        let valid = self.node("Less", path, vec![row, column], vec![]);
        let pad = self.int_scalar(format!("{path}.pad_id"), PAD_ID);
        let cleaned = self.node("Where", path, vec![valid.clone(), ids.to_string(), pad], vec![]);
        TextInputs { lengths: lengths.to_string(), positions, valid, ids: cleaned }
    }

    /// `Gather(weight, ids)`: `[B, T, E]`.
    fn embedding(&mut self, path: &str, weight: &Tensor, ids: &str) -> String {
        let w = self.initializer(format!("{path}.weight"), weight);
        self.node("Gather", path, vec![w, ids.to_string()], vec![attr_int("axis", 0)])
    }

    /// `Cast(x, to)`.
    fn cast(&mut self, path: &str, x: String, to: i32) -> String {
        self.node("Cast", path, vec![x], vec![attr_int("to", i64::from(to))])
    }

    /// `ReduceSum(x, axes)` (opset 13+: the axes are an input).
    fn reduce_sum(&mut self, path: &str, suffix: &str, x: String, axes: &[i64], keepdims: bool) -> String {
        let axes = self.ints(format!("{path}.{suffix}"), axes);
        self.node("ReduceSum", path, vec![x, axes], vec![attr_int("keepdims", i64::from(keepdims))])
    }

    /// The classifier on `[B, F]` features.
    fn head(&mut self, path: &str, fc: &Linear, features: String) -> Value {
        self.linear(path, fc, Value { name: features, rank: Some(2) })
    }

    fn fasttext(&mut self, m: &FastText, inputs: &TextInputs) -> Value {
        let path = "embedding";
        let rows = self.embedding(path, &m.embedding.weight, &inputs.ids);
        // EmbeddingBag's padding_idx is left out of the mean wherever it occurs (the ids past
        // each length are the pad id by now); without one, every position counts.
        let counted = match m.embedding.padding_idx {
            Some(p) => {
                let p = self.int_scalar(format!("{path}.padding_idx"), p);
                let is_pad = self.node("Equal", path, vec![inputs.ids.clone(), p], vec![]);
                self.node("Not", path, vec![is_pad], vec![])
            }
            None => self.node("Equal", path, vec![inputs.ids.clone(), inputs.ids.clone()], vec![]),
        };
        let weights = self.cast(path, counted, DTYPE_FLOAT);
        let weights3 = self.unsqueeze(path, "weight_axes", weights.clone(), &[2]);
        let weighted = self.node("Mul", path, vec![rows, weights3], vec![]);
        let sum = self.reduce_sum(path, "sum_axes", weighted, &[1], false);
        let count = self.reduce_sum(path, "count_axes", weights, &[1], true);
        let one = self.scalar(&format!("{path}.one"), 1.0);
        let count = self.node("Max", path, vec![count, one], vec![]);
        let mean = self.node("Div", path, vec![sum, count], vec![]);
        self.head("fc", &m.fc, mean)
    }

    fn textcnn(&mut self, m: &TextCnn, inputs: &TextInputs) -> Value {
        let widest = m.convs.iter().map(|c| c.kernel_size()).max().unwrap_or(1);
        let mut ids = inputs.ids.clone();
        if widest > 1 {
            // Right-padded by widest - 1 pad ids: a document shorter than the widest filter has
            // its window, and no valid window changes (forward_padded pads the same way).
            let pads = self.ints("embedding.pads".into(), &[0, 0, 0, widest - 1]);
            let pad = self.int_scalar("embedding.pad_value".into(), PAD_ID);
            ids = self.node("Pad", "embedding", vec![ids, pads, pad], vec![]);
        }
        let rows = self.embedding("embedding", &m.embedding.weight, &ids);
        let x = self.node("Transpose", "embedding", vec![rows], vec![attr_ints("perm", &[0, 2, 1])]);
        let neg_inf = self.scalar("convs.neg_inf", f32::NEG_INFINITY);
        let one = self.int_scalar("convs.one".into(), 1);
        let mut pooled = Vec::new();
        for (i, conv) in m.convs.iter().enumerate() {
            let path = format!("convs.{i}");
            let k = conv.kernel_size();
            let mut conv_inputs = vec![x.clone(), self.initializer(format!("{path}.weight"), &conv.weight)];
            if let Some(b) = &conv.bias {
                conv_inputs.push(self.initializer(format!("{path}.bias"), b));
            }
            let attrs = vec![
                attr_ints("kernel_shape", &[k]),
                attr_ints("strides", &[1]),
                attr_ints("pads", &[0, 0]),
                attr_ints("dilations", &[1]),
                attr_int("group", 1),
            ];
            let h = self.node("Conv", &path, conv_inputs, attrs);
            let h = self.node("Relu", &path, vec![h], vec![]);
            // Windows starting at or past max(length - k + 1, 1) reach past the document.
            let windows = self.positions_along(&path, &h, 2);
            let row = self.unsqueeze(&path, "row_axes", windows, &[0]);
            let reach = self.int_scalar(format!("{path}.reach"), k - 1);
            let valid = self.node("Sub", &path, vec![inputs.lengths.clone(), reach], vec![]);
            let valid = self.node("Max", &path, vec![valid, one.clone()], vec![]);
            let column = self.unsqueeze(&path, "column_axes", valid, &[1]);
            let keep = self.node("Less", &path, vec![row, column], vec![]);
            let keep = self.unsqueeze(&path, "channel_axes", keep, &[1]);
            let h = self.node("Where", &path, vec![keep, h, neg_inf.clone()], vec![]);
            let attrs = vec![attr_ints("axes", &[2]), attr_int("keepdims", 0)];
            pooled.push(self.node("ReduceMax", &path, vec![h], attrs));
        }
        let features = self.node("Concat", "convs", pooled, vec![attr_int("axis", 1)]);
        self.head("fc", &m.fc, features)
    }

    fn bilstm(&mut self, m: &BiLstmClassifier, inputs: &TextInputs) -> Result<Value> {
        let path = "lstm";
        let config = m.lstm.config();
        if !config.batch_first {
            return Err(unsupported(path, "LSTM", "only a batch-first LSTM is exported"));
        }
        let h = m.lstm.hidden_size();
        let dirs: i64 = if config.bidirectional { 2 } else { 1 };
        let weights: std::collections::HashMap<&str, &Tensor> =
            m.lstm.flat_weights().iter().map(|(k, t)| (k.as_str(), t)).collect();
        let _guard = torchlight_tensor::no_grad();
        // PyTorch's gate rows (i, f, g, o) in ONNX's order (i, o, f, c).
        let reorder = |t: &Tensor| {
            let g = t.chunk(4, 0);
            Tensor::cat(&[&g[0], &g[3], &g[1], &g[2]], 0)
        };
        let rows = self.embedding("embedding", &m.embedding.weight, &inputs.ids);
        let mut x = self.node("Transpose", path, vec![rows], vec![attr_ints("perm", &[1, 0, 2])]);
        let seq_lens = self.cast(path, inputs.lengths.clone(), DTYPE_INT32);
        let mut last_h = String::new();
        for layer in 0..config.num_layers {
            let lp = format!("{path}.l{layer}");
            let (mut w, mut r, mut b) = (Vec::new(), Vec::new(), Vec::new());
            for dir in 0..dirs {
                let suffix = if dir == 1 { "_reverse" } else { "" };
                let get = |name: &str| weights[format!("{name}_l{layer}{suffix}").as_str()];
                w.push(reorder(get("weight_ih")));
                r.push(reorder(get("weight_hh")));
                if config.bias {
                    b.push(Tensor::cat(&[reorder(get("bias_ih")), reorder(get("bias_hh"))], 0));
                }
            }
            let mut lstm_inputs = vec![
                x,
                self.initializer(format!("{lp}.W"), &Tensor::stack(&w, 0)),
                self.initializer(format!("{lp}.R"), &Tensor::stack(&r, 0)),
                if config.bias {
                    self.initializer(format!("{lp}.B"), &Tensor::stack(&b, 0))
                } else {
                    String::new()
                },
            ];
            lstm_inputs.push(seq_lens.clone());
            let direction = if dirs == 2 { "bidirectional" } else { "forward" };
            let attrs = vec![
                attr_int("hidden_size", h),
                AttributeProto {
                    name: "direction".into(),
                    r#type: ATTR_STRING,
                    s: direction.as_bytes().to_vec(),
                    ..Default::default()
                },
            ];
            let out = self.node_outputs("LSTM", &lp, lstm_inputs, attrs, 2);
            // Y [T, dirs, B, H] as the next layer's input [T, B, dirs * H].
            let y = self.node("Transpose", &lp, vec![out[0].clone()], vec![attr_ints("perm", &[0, 2, 1, 3])]);
            let shape = self.ints(format!("{lp}.y_shape"), &[0, 0, -1]);
            x = self.node("Reshape", &lp, vec![y, shape], vec![]);
            last_h = out[1].clone();
        }
        // h_n of the last layer: [dirs, B, H] -> [B, dirs * H] = cat(forward, backward).
        let hn = self.node("Transpose", path, vec![last_h], vec![attr_ints("perm", &[1, 0, 2])]);
        let shape = self.ints(format!("{path}.h_shape"), &[0, -1]);
        let hn = self.node("Reshape", path, vec![hn, shape], vec![]);
        Ok(self.head("fc", &m.fc, hn))
    }

    fn encoder_layer(
        &mut self,
        path: &str,
        layer: &TransformerEncoderLayer,
        mask: &str,
        x: Value,
    ) -> Result<Value> {
        let sa = |b: &mut Builder, x: &Value| {
            b.self_attention(&format!("{path}.self_attn"), &layer.self_attn, x, Some(mask))
        };
        let ff = |b: &mut Builder, x: Value| -> Result<Value> {
            let h = b.module(&format!("{path}.linear1"), &layer.linear1, x)?;
            let h = match layer.config.activation {
                TransformerActivation::Relu => b.unary("Relu", path, &h, vec![]),
                TransformerActivation::Gelu => b.module(&format!("{path}.activation"), &GELU, h)?,
            };
            b.module(&format!("{path}.linear2"), &layer.linear2, h)
        };
        let norm1 = format!("{path}.norm1");
        let norm2 = format!("{path}.norm2");
        if layer.config.norm_first {
            let n = self.module(&norm1, &layer.norm1, x.clone())?;
            let a = sa(self, &n);
            let x = self.add(path, a, &x);
            let n = self.module(&norm2, &layer.norm2, x.clone())?;
            let f = ff(self, n)?;
            Ok(self.add(path, f, &x))
        } else {
            let a = sa(self, &x);
            let x = self.add(path, a, &x);
            let x = self.module(&norm1, &layer.norm1, x)?;
            let f = ff(self, x.clone())?;
            let x = self.add(path, f, &x);
            self.module(&norm2, &layer.norm2, x)
        }
    }

    fn transformer(&mut self, m: &TransformerClassifier, inputs: &TextInputs) -> Result<Value> {
        let tokens = self.embedding("embedding", &m.embedding.weight, &inputs.ids);
        let positions = self.embedding("pos_embedding", &m.pos_embedding.weight, &inputs.positions);
        let x = self.node("Add", "pos_embedding", vec![tokens, positions], vec![]);
        // The key padding mask as the attention adds it: 0 where a key takes part, -inf past
        // each length, [B, 1, 1, T].
        let zero = self.scalar("encoder.mask_zero", 0.0);
        let neg_inf = self.scalar("encoder.mask_neg_inf", f32::NEG_INFINITY);
        let mask = self.node("Where", "encoder", vec![inputs.valid.clone(), zero, neg_inf], vec![]);
        let mask = self.unsqueeze("encoder", "mask_axes", mask, &[1, 2]);
        let mut x = Value { name: x, rank: Some(3) };
        for (i, layer) in m.encoder.layers.iter().enumerate() {
            x = self.encoder_layer(&format!("encoder.layers.{i}"), layer, &mask, x)?;
        }
        if let Some(norm) = &m.encoder.norm {
            x = self.module("encoder.norm", norm, x)?;
        }
        // The mean over valid positions.
        let path = "pool";
        let weights = self.cast(path, inputs.valid.clone(), DTYPE_FLOAT);
        let weights = self.unsqueeze(path, "weight_axes", weights, &[2]);
        let weighted = self.node("Mul", path, vec![x.name, weights.clone()], vec![]);
        let sum = self.reduce_sum(path, "sum_axes", weighted, &[1], false);
        let count = self.reduce_sum(path, "count_axes", weights, &[1], false);
        let mean = self.node("Div", path, vec![sum, count], vec![]);
        Ok(self.head("fc", &m.fc, mean))
    }
}

fn typed_value_info(name: &str, elem_type: i32, dims: &[DimensionValue]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type,
                shape: Some(TensorShapeProto {
                    dim: dims.iter().map(|d| Dimension { value: Some(d.clone()) }).collect(),
                }),
            }),
        }),
    }
}

/// The classes of a text classifier (its `fc`'s rows) and whether it is one of the four.
fn text_classes(model: &dyn Module) -> Option<i64> {
    let any = model.as_any();
    let fc = if let Some(m) = any.downcast_ref::<FastText>() {
        &m.fc
    } else if let Some(m) = any.downcast_ref::<TextCnn>() {
        &m.fc
    } else if let Some(m) = any.downcast_ref::<BiLstmClassifier>() {
        &m.fc
    } else if let Some(m) = any.downcast_ref::<TransformerClassifier>() {
        &m.fc
    } else {
        return None;
    };
    Some(fc.weight.size()[0])
}

/// Builds the ONNX model of a text classifier (`FastText`, `TextCnn`, `BiLstmClassifier` or
/// `TransformerClassifier`) in eval mode, without writing it; see [`export_text_onnx`].
///
/// # Errors
/// [`ExportError::Unsupported`] when `model` is not one of the four text classifiers (or its
/// LSTM is not batch-first).
pub fn text_onnx_model(model: &dyn Module, options: &TextOnnxOptions) -> Result<ModelProto> {
    let Some(classes) = text_classes(model) else {
        return Err(unsupported(
            "",
            model.kind(),
            "export_text_onnx exports the text classifiers FastText, TextCnn, BiLstmClassifier and \
             TransformerClassifier; a one-input model exports with export_onnx",
        ));
    };
    let mut builder = Builder { fold: false, nodes: Vec::new(), initializers: Vec::new(), next_id: 0 };
    let inputs = builder.text_inputs(&options.ids_name, &options.lengths_name);
    let any = model.as_any();
    let mut metadata = options.metadata.clone();
    metadata.push(("pad_id".into(), PAD_ID.to_string()));
    let out = if let Some(m) = any.downcast_ref::<FastText>() {
        builder.fasttext(m, &inputs)
    } else if let Some(m) = any.downcast_ref::<TextCnn>() {
        builder.textcnn(m, &inputs)
    } else if let Some(m) = any.downcast_ref::<BiLstmClassifier>() {
        builder.bilstm(m, &inputs)?
    } else if let Some(m) = any.downcast_ref::<TransformerClassifier>() {
        metadata.push(("max_positions".into(), m.pos_embedding.max_len().to_string()));
        builder.transformer(m, &inputs)?
    } else {
        unreachable!("text_classes checked the kind")
    };
    let out = match options.temperature {
        Some(t) => {
            metadata.push(("temperature".into(), format!("{t}")));
            Value { name: builder.divide_by_temperature(out.name, t), rank: out.rank }
        }
        None => out,
    };
    let last = builder.nodes.iter_mut().rev().find(|n| n.output.contains(&out.name));
    last.expect("the head is a node of the graph").output = vec![options.output_name.clone()];
    let batch = || DimensionValue::DimParam("batch".into());
    let graph = GraphProto {
        node: builder.nodes,
        name: format!("torchlight_{}", model.kind()),
        initializer: builder.initializers,
        input: vec![
            typed_value_info(
                &options.ids_name,
                DTYPE_INT64,
                &[batch(), DimensionValue::DimParam("length".into())],
            ),
            typed_value_info(&options.lengths_name, DTYPE_INT64, &[batch()]),
        ],
        output: vec![typed_value_info(
            &options.output_name,
            DTYPE_FLOAT,
            &[batch(), DimensionValue::DimValue(classes)],
        )],
    };
    Ok(ModelProto {
        ir_version: IR_VERSION,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: OPSET }],
        producer_name: "torchlight".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        doc_string: format!("{} exported by Torchlight", model.kind()),
        graph: Some(graph),
        metadata_props: metadata
            .into_iter()
            .map(|(key, value)| StringStringEntryProto { key, value })
            .collect(),
    })
}

/// Exports a text classifier (`FastText`, `TextCnn`, `BiLstmClassifier` or
/// `TransformerClassifier`, in eval mode) to an ONNX file at `path`, through a temporary file
/// and a rename: inputs `ids` (int64 `[batch, length]`, pad id 0 past each length) and
/// `lengths` (int64 `[batch]`, each in `1..=length`), both axes dynamic, output `logits` (float
/// `[batch, classes]`), the same as the model's `forward_inputs`. `metadata_props` hold the
/// options' entries, `pad_id` and, for the transformer, `max_positions` (the longest `length`
/// its positional table covers). See the module docs of the crate for the ops.
///
/// # Errors
/// [`ExportError::Unsupported`] when `model` is not one of the four; [`ExportError::Io`]
/// naming `path` when it cannot be written.
pub fn export_text_onnx(model: &dyn Module, options: &TextOnnxOptions, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    check_parent(path)?;
    let bytes = text_onnx_model(model, options)?.encode_to_vec();
    write_through_tmp(path, "onnx.tmp", |tmp| std::fs::write(tmp, &bytes))
}
