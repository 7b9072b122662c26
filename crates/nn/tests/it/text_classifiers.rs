//! The baseline text classifiers (`FastText`, `TextCnn`, `BiLstmClassifier`,
//! `TransformerClassifier`) against the PyTorch modules of
//! `tests/fixtures/make_text_classifiers.py`, generated at test time at this process's thread
//! count and dispatch level: keys in PyTorch's order and a strict load of its `state_dict`,
//! logits and every parameter's gradient of the cross-entropy on fixed labels, and PyTorch's
//! seeded init (exact, alone in a process); then, without PyTorch, padding invariance (a
//! document's logits alone and batched beside a much longer one, also with junk ids past its
//! length) and a short training run per model on a synthetic two-class token task.
//!
//! Tolerance: 1e-5 absolute on logits and gradients, 1e-5 on padding invariance. Both sides
//! run the same ATen ops in the same order: measured at 1 and 2 threads under the machine's
//! dispatch level and ATEN_CPU_CAPABILITY=default and avx2 (each against fixtures made at that
//! level), every difference was 0 for FastText, TextCnn and the BiLSTM and at most 7.5e-9 for
//! the transformer; padding invariance at most 1.2e-7 (the transformer's attention over 40
//! positions rather than 2 or 6). The bound leaves room for a CPU whose kernels differ.

use crate::{assert_close, load};
use std::collections::HashMap;
use std::path::PathBuf;
use tch::Tensor;
use torchlight_nn::*;

/// The tolerance (absolute) of every comparison here.
const TOL: f64 = 1e-5;

const TAGS: [&str; 4] = ["fasttext", "textcnn", "bilstm", "transformer"];

fn fixtures() -> PathBuf {
    let threads = tch::get_num_threads().to_string();
    torchlight_testing::generated_fixture("crates/nn/tests/fixtures/make_text_classifiers.py", &[&threads])
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The script's sizes: vocab 40, 3 classes, embed 8, TextCNN 4 filters of widths 3/4/5,
/// BiLSTM hidden 6 in 2 layers, transformer 2 heads, feed-forward 16, 2 layers, max_len 16.
fn script_config() -> TextClassifierConfig {
    TextClassifierConfig::new(40, 3)
        .with_embed_dim(8)
        .with_num_filters(4)
        .with_hidden_size(6)
        .with_lstm_layers(2)
        .with_nhead(2)
        .with_dim_feedforward(16)
        .with_encoder_layers(2)
        .with_max_len(16)
}

/// A model of each kind, behind one enum so the tests can loop over them.
enum Model {
    FastText(FastText),
    TextCnn(TextCnn),
    BiLstm(BiLstmClassifier),
    Transformer(TransformerClassifier),
}

impl Model {
    fn build(tag: &str, config: &TextClassifierConfig, options: LayerOptions) -> Model {
        match tag {
            "fasttext" => Model::FastText(FastText::new_on(config, options)),
            "textcnn" => Model::TextCnn(TextCnn::new_on(config, options)),
            "bilstm" => Model::BiLstm(BiLstmClassifier::new_on(config, options)),
            "transformer" => Model::Transformer(TransformerClassifier::new_on(config, options)),
            _ => unreachable!("{tag}"),
        }
    }

    fn module(&self) -> &dyn Module {
        match self {
            Model::FastText(m) => m,
            Model::TextCnn(m) => m,
            Model::BiLstm(m) => m,
            Model::Transformer(m) => m,
        }
    }

    fn forward(&self, ids: &Tensor, lengths: &Tensor, train: bool) -> Tensor {
        let inputs = Inputs::new().with("ids", ids.shallow_clone()).with("lengths", lengths.shallow_clone());
        match self {
            Model::FastText(m) => m.forward_inputs(&inputs, train),
            Model::TextCnn(m) => m.forward_inputs(&inputs, train),
            Model::BiLstm(m) => m.forward_inputs(&inputs, train),
            Model::Transformer(m) => m.forward_inputs(&inputs, train),
        }
        .unwrap()
    }

    fn forward_t(&self, ids: &Tensor, train: bool) -> Tensor {
        match self {
            Model::FastText(m) => m.forward_t(ids, train),
            Model::TextCnn(m) => m.forward_t(ids, train),
            Model::BiLstm(m) => m.forward_t(ids, train),
            Model::Transformer(m) => m.forward_t(ids, train),
        }
    }
}

fn keys(m: &dyn Module) -> Vec<String> {
    named_tensors(m).into_iter().map(|(k, _, _)| k).collect()
}

/// Keys in PyTorch's order, the strict load of its `state_dict`, then logits and every
/// gradient; returns the largest difference.
fn check_parity(tag: &str) -> f64 {
    let dir = fixtures();
    let model = Model::build(tag, &script_config(), LayerOptions::default().skip_init());
    let theirs = read_pth(dir.join(format!("{tag}.pth"))).unwrap();
    let their_keys: Vec<String> = theirs.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(keys(model.module()), their_keys, "{tag}: keys and their order are PyTorch's");
    load_state_dict(model.module(), theirs, &LoadOptions::strict()).unwrap();
    let f: HashMap<String, Tensor> = load(dir.join(format!("{tag}.safetensors")));
    let logits = model.forward(&f["ids"], &f["lengths"], false);
    let what = |s: &str| format!("{tag} {s} (tolerance 1e-5 absolute)");
    let mut worst = assert_close(&what("logits"), &logits, &f["logits"], 0.0, TOL);
    logits.cross_entropy_for_logits(&f["labels"]).backward();
    for (name, p) in named_parameters(model.module()) {
        let d = assert_close(
            &what(&format!("gradient of {name}")),
            &p.grad(),
            &f[&format!("grad.{name}")],
            0.0,
            TOL,
        );
        worst = worst.max(d);
    }
    eprintln!("{tag}: logits and gradients max |diff| {worst:.3e}");
    worst
}

#[test]
fn fasttext_matches_pytorch() {
    check_parity("fasttext");
}

#[test]
fn textcnn_matches_pytorch() {
    check_parity("textcnn");
}

#[test]
fn bilstm_classifier_matches_pytorch() {
    check_parity("bilstm");
}

#[test]
fn transformer_classifier_matches_pytorch() {
    check_parity("transformer");
}

#[test]
fn seeded_init_is_pytorchs() {
    let dir = fixtures();
    if !crate::alone_in_a_process("text_classifiers::seeded_init_is_pytorchs") {
        return;
    }
    let _rng = crate::torch_rng_lock();
    for (seed, tag) in TAGS.iter().enumerate() {
        tch::manual_seed(seed as i64);
        let ours = state_dict(Model::build(tag, &script_config(), LayerOptions::default()).module());
        let theirs = read_pth(dir.join(format!("{tag}.pth"))).unwrap();
        assert_eq!(ours.len(), theirs.len(), "{tag}");
        for ((k, a), (k2, b)) in ours.iter().zip(&theirs) {
            assert_eq!(k, k2);
            // Exact: drawn in the same order at this process's dispatch level.
            assert!(a.equal(b), "{tag}: {k} differs from PyTorch's seeded init (tolerance: exact)");
        }
    }
}

/// `[1, n]` ids `first..` wrapping inside `1..vocab`.
fn document(first: i64, n: i64, vocab: i64) -> Vec<i64> {
    (0..n).map(|i| 1 + (first + 7 * i) % (vocab - 1)).collect()
}

/// Rows padded to `t` with `pad` (0, or junk ids that a model must ignore) into `[B, t]`.
fn batch(docs: &[&[i64]], t: usize, pad: impl Fn(usize) -> i64) -> (Tensor, Tensor) {
    let mut ids = Vec::new();
    for d in docs {
        ids.extend_from_slice(d);
        ids.extend((d.len()..t).map(&pad));
    }
    let lengths: Vec<i64> = docs.iter().map(|d| d.len() as i64).collect();
    (Tensor::from_slice(&ids).reshape([docs.len() as i64, t as i64]), Tensor::from_slice(&lengths))
}

#[test]
fn a_document_gives_the_same_logits_alone_and_batched_beside_a_longer_one() {
    let _rng = crate::torch_rng_lock();
    tch::manual_seed(11);
    let config = TextClassifierConfig::new(50, 3).with_embed_dim(16).with_num_filters(5).with_hidden_size(8);
    let short = document(3, 2, 50); // shorter than TextCnn's widest filter
    let mid = document(10, 6, 50);
    let long = document(20, 40, 50);
    let mut worst = 0f64;
    for tag in TAGS {
        let model = Model::build(tag, &config, LayerOptions::default());
        let (ids, lengths) = batch(&[&short, &long, &mid], 40, |_| 0);
        let batched = model.forward(&ids, &lengths, false);
        let (junk_ids, _) = batch(&[&short, &long, &mid], 40, |i| 1 + (i as i64 * 13) % 49);
        let junk = model.forward(&junk_ids, &lengths, false);
        let one_tensor = model.forward_t(&ids, false);
        for (row, doc) in [(0, &short), (2, &mid)] {
            let (alone_ids, alone_lengths) = batch(&[doc], doc.len(), |_| 0);
            let alone = model.forward(&alone_ids, &alone_lengths, false).get(0);
            let what = |s: &str| format!("{tag}, a {}-id document {s} (tolerance 1e-5)", doc.len());
            worst = worst.max(assert_close(&what("batched"), &batched.get(row), &alone, 0.0, TOL));
            worst =
                worst.max(assert_close(&what("with junk past its length"), &junk.get(row), &alone, 0.0, TOL));
            worst =
                worst.max(assert_close(&what("through forward_t"), &one_tensor.get(row), &alone, 0.0, TOL));
        }
    }
    eprintln!("padding invariance: max |diff| {worst:.3e}");
}

/// A tiny deterministic generator for the synthetic task (xorshift64).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> i64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n) as i64
    }
}

/// 64 documents of 3 to 12 filler ids (1..=20) with one signal id at a random place: from
/// 21..=25 for class 0, 26..=29 for class 1. Vocabulary 30.
fn synthetic_task() -> (Tensor, Tensor, Tensor) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (n, t) = (64, 12);
    let (mut ids, mut lengths, mut labels) = (vec![0i64; n * t], Vec::new(), Vec::new());
    for i in 0..n {
        let label = (i % 2) as i64;
        let len = 3 + rng.below(10);
        for j in 0..len as usize {
            ids[i * t + j] = 1 + rng.below(20);
        }
        let signal = if label == 0 { 21 + rng.below(5) } else { 26 + rng.below(4) };
        ids[i * t + rng.below(len as u64) as usize] = signal;
        lengths.push(len);
        labels.push(label);
    }
    (
        Tensor::from_slice(&ids).reshape([n as i64, t as i64]),
        Tensor::from_slice(&lengths),
        Tensor::from_slice(&labels),
    )
}

/// Adam (lr 0.03, betas 0.9/0.999, eps 1e-8), full batch, in training mode; the loss in
/// evaluation mode before and after.
fn train_adam(model: &Model, steps: i32) -> (f64, f64) {
    let (ids, lengths, labels) = synthetic_task();
    let loss = |train: bool| model.forward(&ids, &lengths, train).cross_entropy_for_logits(&labels);
    let before = tch::no_grad(|| loss(false).double_value(&[]));
    let params: Vec<Tensor> = named_parameters(model.module()).into_iter().map(|(_, p)| p).collect();
    let mut m: Vec<Tensor> = params.iter().map(Tensor::zeros_like).collect();
    let mut v: Vec<Tensor> = params.iter().map(Tensor::zeros_like).collect();
    let (lr, b1, b2, eps) = (0.03, 0.9f64, 0.999f64, 1e-8);
    for step in 1..=steps {
        for p in &params {
            let g = p.grad();
            if g.defined() {
                let _ = g.detach().zero_();
            }
        }
        loss(true).backward();
        tch::no_grad(|| {
            for ((p, m), v) in params.iter().zip(&mut m).zip(&mut v) {
                let g = p.grad();
                *m = &*m * b1 + &g * (1.0 - b1);
                *v = &*v * b2 + &g * &g * (1.0 - b2);
                let m_hat = &*m / (1.0 - b1.powi(step));
                let v_hat = &*v / (1.0 - b2.powi(step));
                let _ = p.shallow_clone().g_sub_(&(m_hat / (v_hat.sqrt() + eps) * lr));
            }
        });
    }
    let after = tch::no_grad(|| loss(false).double_value(&[]));
    (before, after)
}

/// Trains the `tag` model of the learning tests' size (embed 16, 8 filters per width, hidden
/// 16, one encoder layer of 2 heads) from `manual_seed(5)` for 60 Adam steps and asserts the
/// loss fell well below ln 2.
fn learns(tag: &str) {
    let _rng = crate::torch_rng_lock();
    let config = TextClassifierConfig::new(30, 2)
        .with_embed_dim(16)
        .with_num_filters(8)
        .with_hidden_size(16)
        .with_nhead(2)
        .with_dim_feedforward(32)
        .with_encoder_layers(1)
        .with_max_len(16);
    tch::manual_seed(5);
    let model = Model::build(tag, &config, LayerOptions::default());
    let (before, after) = train_adam(&model, 60);
    eprintln!("{tag}: cross-entropy {before:.3} -> {after:.3} in 60 Adam steps");
    assert!(after < 0.1, "{tag}: the loss fell only from {before:.3} to {after:.3} (ln 2 = 0.693)");
}

#[test]
fn fasttext_learns_which_token_range_decides_the_class() {
    learns("fasttext");
}

#[test]
fn textcnn_learns_which_token_range_decides_the_class() {
    learns("textcnn");
}

#[test]
fn bilstm_classifier_learns_which_token_range_decides_the_class() {
    learns("bilstm");
}

#[test]
fn transformer_classifier_learns_which_token_range_decides_the_class() {
    learns("transformer");
}
