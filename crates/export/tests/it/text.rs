//! The four text classifiers (and a pre-norm, gelu transformer with a final norm) exported to
//! ONNX (`export_text_onnx`) and TorchScript (`export_torchscript_inputs`), checked by real
//! runtimes through `tests/check_text_exports.py`: onnxruntime and `torch.jit.load` against
//! the Rust model's `forward_inputs` at three batch/length shapes from one exported file
//! (4 x 9, 3 x 13 with junk ids past the lengths, 2 x 3, shorter than TextCnn's widest filter;
//! lengths down to 1, and 2 < 5), the padding invariance in onnxruntime (a document alone and
//! padded to 20 beside a longer one), and the TorchScript file loaded back in Rust; the
//! one-tensor trace (`export_torchscript` of `forward_t`, lengths from the padding) as well.
//!
//! Tolerance: 1e-5 absolute (the logits are of order 0.2 to 0.9). Measured: onnxruntime at most
//! 1.2e-7 (TextCnn and the transformer; the BiLSTM 6e-8, FastText 6e-8), `torch.jit.load` and
//! `load_torchscript` 0 (the same ATen kernels), the padding invariance in onnxruntime 0 (masked
//! positions add exact zeros: `-inf` scores, zero weights in the means). The bound leaves room
//! for another CPU's kernels (onnxruntime dispatches on the CPU it runs on).

use crate::{out_dir, torch_rng_lock};
use std::path::Path;
use tch::{Device, Kind, Tensor};
use torchlight_export::*;
use torchlight_nn::*;

/// The tolerance (absolute) of every comparison here.
const TOL: f64 = 1e-5;

/// Tiny sizes: vocab 40, 3 classes, embed 8, TextCnn 4 filters of widths 3/4/5, BiLSTM hidden 6
/// in 2 layers, transformer 2 heads, feed-forward 16, 2 layers, max_len 32.
fn config() -> TextClassifierConfig {
    TextClassifierConfig::new(40, 3)
        .with_embed_dim(8)
        .with_num_filters(4)
        .with_hidden_size(6)
        .with_lstm_layers(2)
        .with_nhead(2)
        .with_dim_feedforward(16)
        .with_encoder_layers(2)
        .with_max_len(32)
}

/// The transformer with pre-norm layers, exact gelu and a final LayerNorm, built from the
/// layers (the classifier's own constructor makes post-norm relu layers).
fn prenorm_transformer(config: &TextClassifierConfig) -> TransformerClassifier {
    let base = TransformerClassifier::new(config);
    let layer = TransformerEncoderLayerConfig::new(config.embed_dim, config.nhead)
        .with_dim_feedforward(config.dim_feedforward)
        .with_activation(TransformerActivation::Gelu)
        .with_norm_first(true)
        .build();
    let norm = LayerNorm::new(config.embed_dim, 1e-5);
    let _g = torchlight_tensor::no_grad();
    for p in [norm.weight.as_ref().unwrap(), norm.bias.as_ref().unwrap()] {
        p.shallow_clone().copy_(&(Tensor::randn(p.size(), (Kind::Float, Device::Cpu)) * 0.3 + 0.5));
    }
    TransformerClassifier { encoder: TransformerEncoder::new(layer, 2, Some(norm)), ..base }
}

/// Padded ids `[B, T]` for `lengths`: ids in `1..40` before each length, `junk` (or the pad
/// id) past it.
fn batch(lengths: &[i64], t: i64, junk: bool) -> (Tensor, Tensor) {
    let ids = Tensor::randint_low(1, 40, [lengths.len() as i64, t], (Kind::Int64, Device::Cpu));
    let lengths = Tensor::from_slice(lengths);
    let past = Tensor::arange(t, (Kind::Int64, Device::Cpu)).unsqueeze(0).ge_tensor(&lengths.unsqueeze(1));
    let ids = if junk { ids } else { ids.masked_fill(&past, 0) };
    (ids, lengths)
}

fn inputs(ids: &Tensor, lengths: &Tensor) -> Inputs {
    Inputs::new().with("ids", ids.shallow_clone()).with("lengths", lengths.shallow_clone())
}

/// The cases (name, ids, lengths) every runtime is checked at.
fn cases() -> Vec<(&'static str, Tensor, Tensor)> {
    let (a_ids, a_len) = batch(&[9, 2, 1, 5], 9, false);
    let (b_ids, b_len) = batch(&[3, 13, 7], 13, true);
    let (c_ids, c_len) = batch(&[3, 1], 3, false);
    vec![("a", a_ids, a_len), ("b", b_ids, b_len), ("c", c_ids, c_len)]
}

/// Writes the cases with the Rust model's logits, and the padding-invariance pair.
fn write_io(dir: &Path, name: &str, model: &dyn MultiInput) -> Vec<(String, Tensor, Tensor, Tensor)> {
    let _g = torchlight_tensor::no_grad();
    let mut tensors = Vec::new();
    let mut rows = Vec::new();
    for (case, ids, lengths) in cases() {
        let logits = model.forward_inputs(&inputs(&ids, &lengths), false).unwrap();
        tensors.push((format!("ids_{case}"), ids.shallow_clone()));
        tensors.push((format!("lengths_{case}"), lengths.shallow_clone()));
        tensors.push((format!("logits_{case}"), logits.shallow_clone()));
        rows.push((case.to_string(), ids, lengths, logits));
    }
    // One document of 4 ids alone, and padded to 20 beside one of 20.
    let (long, _) = batch(&[20], 20, false);
    let doc = Tensor::randint_low(1, 40, [1, 4], (Kind::Int64, Device::Cpu));
    let pair = Tensor::cat(&[doc.constant_pad_nd([0, 16]), long], 0);
    tensors.push(("alone_ids".into(), doc));
    tensors.push(("alone_lengths".into(), Tensor::from_slice(&[4i64])));
    tensors.push(("pair_ids".into(), pair));
    tensors.push(("pair_lengths".into(), Tensor::from_slice(&[4i64, 20])));
    Tensor::write_safetensors(&tensors, dir.join(format!("{name}-io.safetensors"))).unwrap();
    rows
}

/// Runs the checker over `dir`: (runtime, file, case, max diff, scale) rows, (file, diff)
/// invariance rows and (file, key, value) metadata.
#[allow(clippy::type_complexity)]
fn check(
    dir: &Path,
) -> (Vec<(String, String, String, f64, f64)>, Vec<(String, f64)>, Vec<(String, String, String)>) {
    let out = torchlight_testing::run_reference_script(
        "crates/export/tests/check_text_exports.py",
        &[dir.to_str().unwrap()],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (mut rows, mut invariance, mut meta) = (Vec::new(), Vec::new(), Vec::new());
    for line in out.lines() {
        let parts: Vec<&str> = line.splitn(5, ' ').collect();
        match parts[0] {
            "meta" => {
                let rest: Vec<&str> = line.splitn(4, ' ').collect();
                meta.push((rest[1].to_string(), rest[2].to_string(), rest[3].to_string()));
            }
            "invariance" => invariance.push((parts[1].to_string(), parts[2].parse().unwrap())),
            _ => rows.push((
                parts[0].to_string(),
                parts[1].to_string(),
                parts[2].to_string(),
                parts[3].parse().unwrap(),
                parts[4].parse().unwrap(),
            )),
        }
    }
    (rows, invariance, meta)
}

#[test]
fn text_classifiers_export_to_onnx_and_torchscript_that_real_runtimes_agree_with() {
    let dir = out_dir("text");
    let config = config();
    let classes: Vec<String> = ["neg", "neutral", "pos"].iter().map(|s| s.to_string()).collect();
    let options = TextOnnxOptions::new().with_class_names(&classes).with_metadata("text.max_len", "64");
    let _rng = torch_rng_lock();
    tch::manual_seed(31);
    let models: Vec<(&str, Box<dyn MultiInput>)> = vec![
        ("fasttext", Box::new(FastText::new(&config))),
        ("textcnn", Box::new(TextCnn::new(&config))),
        ("bilstm", Box::new(BiLstmClassifier::new(&config))),
        ("transformer", Box::new(TransformerClassifier::new(&config))),
        ("prenorm", Box::new(prenorm_transformer(&config))),
    ];
    for (name, model) in &models {
        export_text_onnx(model.as_ref(), &options, dir.join(format!("{name}__onnx.onnx"))).unwrap();
        // Traced at 2 x 6, run at 4 x 9, 3 x 13 and 2 x 3.
        let (ids, lengths) = batch(&[6, 3], 6, false);
        let path = dir.join(format!("{name}__traced.pt"));
        export_torchscript_inputs(model.as_ref(), &inputs(&ids, &lengths), &path).unwrap();
        let rows = write_io(&dir, name, model.as_ref());
        // The TorchScript file loaded back in Rust.
        let loaded = load_torchscript(&path).unwrap();
        for (case, ids, lengths, logits) in &rows {
            let theirs = loaded.forward_ts(&[ids, lengths]).unwrap();
            let diff = (&theirs - logits).abs().max().double_value(&[]);
            eprintln!("load_torchscript {name:12} {case}: max |diff| {diff:.2e}");
            assert!(diff <= TOL, "{name} {case}: load_torchscript differs by {diff:e}");
        }
        // The one-tensor form (padded ids, lengths recovered from the padding) traces too.
        let path = dir.join(format!("{name}-ids-only.pt"));
        export_torchscript(model.as_ref(), &ids, &path).unwrap();
        let loaded = load_torchscript(&path).unwrap();
        for (case, ids, _, logits) in rows.iter().filter(|(case, ..)| case != "b") {
            let theirs = loaded.forward_ts(&[ids]).unwrap();
            let diff = (&theirs - logits).abs().max().double_value(&[]);
            assert!(diff <= TOL, "{name} {case}: the forward_t trace differs by {diff:e}");
        }
    }
    let (rows, invariance, meta) = check(&dir);
    assert_eq!(rows.len(), 2 * 3 * models.len(), "{rows:?}");
    for (runtime, file, case, diff, scale) in &rows {
        eprintln!("{runtime:12} {file:28} {case}: max |diff| {diff:.2e} (scale {scale:.2})");
        assert!(*diff <= TOL, "{runtime} {file} at {case}: max |diff| {diff:e} > {TOL:e}");
    }
    assert_eq!(invariance.len(), models.len());
    for (file, diff) in &invariance {
        eprintln!("invariance   {file:28}: max |diff| {diff:.2e}");
        assert!(*diff <= TOL, "{file}: a document alone and padded beside a longer one differ by {diff:e}");
    }
    let of = |file: &str, key: &str| {
        meta.iter().find(|(f, k, _)| f == file && k == key).map(|m| m.2.as_str()).unwrap_or_default()
    };
    assert_eq!(of("bilstm__onnx.onnx", "class_names"), r#"["neg", "neutral", "pos"]"#);
    assert_eq!(of("fasttext__onnx.onnx", "text.max_len"), "64");
    assert_eq!(of("textcnn__onnx.onnx", "pad_id"), "0");
    assert_eq!(of("transformer__onnx.onnx", "max_positions"), "32");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The graphs hold the ops the docs name: ONNX `LSTM` (bidirectional, one per layer) for the
/// BiLSTM, `LayerNormalization` and `Softmax` for the transformer, `ReduceMax` per filter width
/// for TextCnn; a model that is not a text classifier is an error naming what is supported.
#[test]
fn text_graphs_use_the_documented_ops_and_other_models_are_refused() {
    let config = config();
    let count = |model: &dyn Module, op: &str| {
        let graph = text_onnx_model(model, &TextOnnxOptions::new()).unwrap().graph.unwrap();
        graph.node.iter().filter(|n| n.op_type == op).count()
    };
    assert_eq!(count(&BiLstmClassifier::new(&config), "LSTM"), 2);
    assert_eq!(count(&TextCnn::new(&config), "ReduceMax"), 3);
    assert_eq!(count(&TransformerClassifier::new(&config), "LayerNormalization"), 4);
    assert_eq!(count(&TransformerClassifier::new(&config), "Softmax"), 2);
    let err = text_onnx_model(&Linear::new(4, 2, true), &TextOnnxOptions::new()).unwrap_err().to_string();
    assert!(err.contains("(Linear)") && err.contains("FastText, TextCnn"), "{err}");
    // A trace without an input the model reads names it, and writes nothing.
    let dir = out_dir("text-missing-input");
    let path = dir.join("m.pt");
    let ids = Inputs::new().with("ids", Tensor::ones([2, 3], (Kind::Int64, Device::Cpu)));
    let err = export_torchscript_inputs(&FastText::new(&config), &ids, &path).unwrap_err().to_string();
    assert!(err.contains("no input `lengths`"), "{err}");
    assert!(!path.exists() && !path.with_extension("pt.tmp").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
