//! The text-classification layers against torch.nn: `Embedding` (padding_idx), `EmbeddingBag`
//! (sum/mean/max, offsets, include_last_offset, [B, N] bags, per_sample_weights), `LSTM` and
//! `GRU` (1 and 2 layers, bidirectional, batch-first and time-major, with and without biases,
//! padded batches with lengths in mixed order through the packed kernels, initial states,
//! dropout in training). Fixtures come from `tests/fixtures/make_text_layers.py`, run by the
//! reference PyTorch at this process's thread count and kernel dispatch level (cached by script
//! content, arguments and [`torchlight_testing::KERNEL_ENV`]).
//!
//! Each case loads PyTorch's fixed weights (its `state_dict`, keys checked in order) and
//! compares the forward and the gradients of a fixed weighted sum of the outputs with respect
//! to every weight and to the input (and initial states) within 1e-5 absolute. Both sides call
//! the same ATen kernels with the same arguments, so every difference measured was 0 (at 1, 2
//! and 4 threads, under the machine's dispatch level and ATEN_CPU_CAPABILITY=default and avx2,
//! each against fixtures made at that level); the bound leaves room for a CPU whose kernels
//! differ from the reference's. Seeded initialisation and dropout's draws are compared
//! exactly, alone in a process. The padding-invariance test (no PyTorch) measured 6e-8.

use crate::{assert_close, load};
use std::collections::HashMap;
use std::path::PathBuf;
use tch::{Kind, Tensor};
use torchlight_nn::*;

/// The parity tolerance (absolute) of every comparison here.
const TOL: f64 = 1e-5;

fn fixtures() -> HashMap<String, Tensor> {
    let threads = tch::get_num_threads().to_string();
    let dir: PathBuf =
        torchlight_testing::generated_fixture("crates/nn/tests/fixtures/make_text_layers.py", &[&threads])
            .unwrap_or_else(|e| panic!("{e}"));
    load(dir.join("text_layers.safetensors"))
}

/// The fixture's `linspace(-1, 1)` over `t`'s shape.
fn ramp(t: &Tensor) -> Tensor {
    Tensor::linspace(-1.0, 1.0, t.numel() as i64, (Kind::Float, tch::Device::Cpu)).reshape(t.size())
}

/// `(t * ramp(t)).sum()`.
fn weighted(t: &Tensor) -> Tensor {
    (t * ramp(t)).sum(Kind::Float)
}

/// A leaf copy of a fixture tensor that records its gradient.
fn leaf(t: &Tensor) -> Tensor {
    t.copy().set_requires_grad(true)
}

/// The tensors `prefix + key` for each key of `order` (a safetensors file does not keep the
/// `state_dict`'s order; the unit tests pin the module's to PyTorch's).
fn weights_of(f: &HashMap<String, Tensor>, prefix: &str, order: &[String]) -> Vec<(String, Tensor)> {
    order.iter().map(|k| (k.clone(), f[&format!("{prefix}{k}")].shallow_clone())).collect()
}

fn keys(m: &dyn Module) -> Vec<String> {
    named_tensors(m).into_iter().map(|(k, _, _)| k).collect()
}

/// Loads `prefix`'s tensors strictly: every key of the module present, no other.
fn load_strict(m: &dyn Module, f: &HashMap<String, Tensor>, prefix: &str) {
    let module_keys = keys(m);
    let in_fixture: Vec<&String> = f.keys().filter(|k| k.starts_with(prefix)).collect();
    assert_eq!(in_fixture.len(), module_keys.len(), "{prefix}: PyTorch's state_dict has the module's keys");
    load_state_dict(m, weights_of(f, prefix, &module_keys), &LoadOptions::strict()).unwrap();
}

/// Compares and reports the largest difference.
fn close(what: &str, actual: &Tensor, expected: &Tensor) -> f64 {
    let d = assert_close(&format!("{what} (tolerance 1e-5 absolute)"), actual, expected, 0.0, TOL);
    eprintln!("{what}: max |diff| {d:.3e}");
    d
}

#[test]
fn embedding_with_padding_idx_matches_pytorch() {
    let f = fixtures();
    let emb = Embedding::new_on(
        10,
        4,
        EmbeddingConfig::default().with_padding_idx(2),
        LayerOptions::default().skip_init(),
    );
    assert_eq!(keys(&emb), ["weight"]);
    load_strict(&emb, &f, "emb.init.");
    let y = emb.forward_t(&f["emb.ids"], true);
    close("embedding forward", &y, &f["emb.y"]);
    weighted(&y).backward();
    let grad = emb.weight.grad();
    close("embedding grad weight", &grad, &f["emb.grad.weight"]);
    assert_eq!(grad.get(2).abs().max().double_value(&[]), 0.0, "the padding row gets no gradient");
}

#[test]
fn embedding_bag_modes_and_forms_match_pytorch() {
    let f = fixtures();
    let mut worst = 0f64;
    for (mode_name, mode) in
        [("sum", EmbeddingBagMode::Sum), ("mean", EmbeddingBagMode::Mean), ("max", EmbeddingBagMode::Max)]
    {
        for form in ["off", "last", "2d", "psw"] {
            if form == "psw" && mode != EmbeddingBagMode::Sum {
                continue;
            }
            let case = if form == "psw" { "sum_psw".to_string() } else { format!("{mode_name}_{form}") };
            let p = |k: &str| format!("bag.{case}.{k}");
            let config = EmbeddingBagConfig::default()
                .with_mode(mode)
                .with_padding_idx(0)
                .with_include_last_offset(form == "last");
            let bag = EmbeddingBag::new_on(12, 3, config, LayerOptions::default().skip_init());
            assert_eq!(keys(&bag), ["weight"]);
            load_strict(&bag, &f, &p("init."));
            let y = bag.forward_bags(&f[&p("ids")], f.get(&p("offsets")), f.get(&p("psw")));
            worst = worst.max(close(&format!("bag {case} forward"), &y, &f[&p("y")]));
            weighted(&y).backward();
            let grad = bag.weight.grad();
            worst = worst.max(close(&format!("bag {case} grad weight"), &grad, &f[&p("grad.weight")]));
            assert_eq!(grad.get(0).abs().max().double_value(&[]), 0.0, "{case}: no gradient at padding");
        }
    }
    eprintln!("EmbeddingBag: worst |diff| {worst:.3e}");
}

/// One recurrent case of the fixture: `(name, lstm, layers, bidirectional, batch_first, bias,
/// lengths, initial state, train with dropout)`, as `RNN_CASES` in the script.
type Case = (&'static str, bool, i64, bool, bool, bool, bool, bool, bool);

const RNN_CASES: &[Case] = &[
    ("lstm_1_bf", true, 1, false, true, true, true, false, false),
    ("lstm_2_bi_bf", true, 2, true, true, true, true, false, false),
    ("lstm_2_bi_tf_state", true, 2, true, false, true, true, true, false),
    ("lstm_2_bi_full", true, 2, true, true, true, false, false, false),
    ("lstm_2_bi_drop", true, 2, true, true, true, true, false, true),
    ("gru_1_bf", false, 1, false, true, true, true, false, false),
    ("gru_2_bi_bf", false, 2, true, true, true, true, false, false),
    ("gru_2_bi_tf_nobias_state", false, 2, true, false, false, true, true, false),
    ("gru_2_bi_full", false, 2, true, true, true, false, false, false),
    ("gru_2_bi_drop", false, 2, true, true, true, true, false, true),
];

enum Rnn {
    Lstm(LSTM),
    Gru(GRU),
}

impl Rnn {
    fn module(&self) -> &dyn Module {
        match self {
            Rnn::Lstm(m) => m,
            Rnn::Gru(m) => m,
        }
    }
}

fn build(case: &Case, options: LayerOptions) -> Rnn {
    let &(_, lstm, layers, bi, batch_first, bias, _, _, train) = case;
    let config = RnnConfig::default()
        .with_num_layers(layers)
        .with_bidirectional(bi)
        .with_batch_first(batch_first)
        .with_bias(bias)
        .with_dropout(if train { 0.5 } else { 0.0 });
    if lstm {
        Rnn::Lstm(LSTM::new_on(4, 3, config, options))
    } else {
        Rnn::Gru(GRU::new_on(4, 3, config, options))
    }
}

/// Runs `case` on PyTorch's weights and compares outputs and gradients; the dropout cases seed
/// torch's generator as the script does, so they must run alone in a process. Returns the
/// largest difference.
fn check_rnn(f: &HashMap<String, Tensor>, case: &Case) -> f64 {
    let &(name, _, _, _, _, _, with_lengths, with_state, train) = case;
    let p = |k: &str| format!("rnn.{name}.{k}");
    let rnn = build(case, LayerOptions::default().skip_init());
    load_strict(rnn.module(), f, &p("param."));
    let x = leaf(&f[&p("x")]);
    let lengths = with_lengths.then(|| f[&p("lengths")].shallow_clone());
    let h0 = with_state.then(|| leaf(&f[&p("h0")]));
    let c0 = f.get(&p("c0")).map(leaf);
    if train {
        tch::manual_seed(7);
    }
    let (out, h_n, c_n) = match &rnn {
        Rnn::Lstm(m) => {
            let state = h0.as_ref().map(|h| (h, c0.as_ref().unwrap()));
            let o = m.forward_with_state(&x, lengths.as_ref(), state, train);
            (o.output, o.h_n, Some(o.c_n))
        }
        Rnn::Gru(m) => {
            let o = m.forward_with_state(&x, lengths.as_ref(), h0.as_ref(), train);
            (o.output, o.h_n, None)
        }
    };
    let mut worst = close(&format!("{name} output"), &out, &f[&p("out")]);
    worst = worst.max(close(&format!("{name} h_n"), &h_n, &f[&p("h_n")]));
    let mut loss = weighted(&out) + weighted(&h_n);
    if let Some(c_n) = &c_n {
        worst = worst.max(close(&format!("{name} c_n"), c_n, &f[&p("c_n")]));
        loss += weighted(c_n);
    }
    loss.backward();
    worst = worst.max(close(&format!("{name} grad x"), &x.grad(), &f[&p("grad.x")]));
    for (what, t) in [("h0", &h0), ("c0", &c0)] {
        if let Some(t) = t {
            worst =
                worst.max(close(&format!("{name} grad {what}"), &t.grad(), &f[&p(&format!("grad.{what}"))]));
        }
    }
    for (key, w) in named_parameters(rnn.module()) {
        worst = worst.max(close(&format!("{name} grad {key}"), &w.grad(), &f[&p(&format!("grad.{key}"))]));
    }
    if let Some(lengths) = &lengths {
        // Nothing flows back from padding: the input's gradient is zero past each length.
        let t_dim = if case.4 { 1 } else { 0 };
        let grad = x.grad();
        for (b, &len) in Vec::<i64>::try_from(lengths).unwrap().iter().enumerate() {
            let sample = grad.select(1 - t_dim, b as i64);
            let past = sample.narrow(0, len, sample.size()[0] - len);
            assert_eq!(past.abs().max().double_value(&[]), 0.0, "{name}: gradient at padding of sample {b}");
        }
    }
    worst
}

#[test]
fn lstm_and_gru_match_pytorch_on_padded_batches() {
    let f = fixtures();
    let mut worst = 0f64;
    for case in RNN_CASES.iter().filter(|c| !c.8) {
        worst = worst.max(check_rnn(&f, case));
    }
    eprintln!("LSTM/GRU: worst |diff| {worst:.3e}");
}

#[test]
fn seeded_init_and_dropout_draw_as_pytorch() {
    if !crate::alone_in_a_process("text_layers::seeded_init_and_dropout_draw_as_pytorch") {
        return;
    }
    let f = fixtures();
    // Exact: the fixture is drawn at this process's dispatch level.
    tch::manual_seed(0);
    let emb = Embedding::new(10, 4, EmbeddingConfig::default().with_padding_idx(2));
    assert!(emb.weight.equal(&f["emb.init.weight"]), "Embedding's seeded init (tolerance: exact)");
    tch::manual_seed(1);
    let bag = EmbeddingBag::new(12, 3, EmbeddingBagConfig::default().with_padding_idx(0));
    assert!(
        bag.weight.equal(&f["bag.mean_off.init.weight"]),
        "EmbeddingBag's seeded init (tolerance: exact)"
    );
    for case in RNN_CASES {
        tch::manual_seed(2);
        let rnn = build(case, LayerOptions::default());
        for (key, w) in named_parameters(rnn.module()) {
            let theirs = &f[&format!("rnn.{}.param.{key}", case.0)];
            assert!(
                w.equal(theirs),
                "{}: {key} differs from PyTorch's seeded init (tolerance: exact)",
                case.0
            );
        }
    }
    let mut worst = 0f64;
    for case in RNN_CASES.iter().filter(|c| c.8) {
        worst = worst.max(check_rnn(&f, case));
    }
    eprintln!("LSTM/GRU with dropout: worst |diff| {worst:.3e}");
}

/// A sequence gives the same outputs and final states alone as batched beside a much longer
/// one whose padding holds arbitrary values, and the same as an unpacked run over its steps.
#[test]
fn a_sequence_alone_and_beside_a_longer_one_gives_the_same_results() {
    let _rng = crate::torch_rng_lock();
    tch::manual_seed(11);
    let config = RnnConfig::default().with_num_layers(2).with_bidirectional(true).with_batch_first(true);
    let lstm = LSTM::new(4, 5, config);
    let gru = GRU::new(4, 5, config);
    let opts = (Kind::Float, tch::Device::Cpu);
    let short = Tensor::randn([1, 3, 4], opts);
    let long = Tensor::randn([1, 20, 4], opts);
    // The short sequence second, padded with noise rather than zeros.
    let batch =
        Tensor::cat(&[long, Tensor::cat(&[short.shallow_clone(), Tensor::randn([1, 17, 4], opts)], 1)], 0);
    let alone_len = Tensor::from_slice(&[3i64]);
    let batch_len = Tensor::from_slice(&[20i64, 3]);
    let mut worst = 0f64;
    let mut same = |what: &str, a: &Tensor, b: &Tensor| {
        worst = worst.max(assert_close(&format!("{what} (tolerance 1e-5 absolute)"), a, b, 0.0, TOL));
    };

    let alone = lstm.forward_padded(&short, &alone_len, false);
    let dense = lstm.forward_with_state(&short, None, None, false);
    let batched = lstm.forward_padded(&batch, &batch_len, false);
    same("LSTM output, batched", &batched.output.narrow(0, 1, 1).narrow(1, 0, 3), &alone.output);
    same("LSTM h_n, batched", &batched.h_n.narrow(1, 1, 1), &alone.h_n);
    same("LSTM c_n, batched", &batched.c_n.narrow(1, 1, 1), &alone.c_n);
    same("LSTM output, unpacked", &dense.output, &alone.output);
    same("LSTM h_n, unpacked", &dense.h_n, &alone.h_n);
    let past = batched.output.get(1).narrow(0, 3, 17);
    assert_eq!(past.abs().max().double_value(&[]), 0.0, "LSTM output is zero past the length");

    let alone = gru.forward_padded(&short, &alone_len, false);
    let dense = gru.forward_with_state(&short, None, None, false);
    let batched = gru.forward_padded(&batch, &batch_len, false);
    same("GRU output, batched", &batched.output.narrow(0, 1, 1).narrow(1, 0, 3), &alone.output);
    same("GRU h_n, batched", &batched.h_n.narrow(1, 1, 1), &alone.h_n);
    same("GRU output, unpacked", &dense.output, &alone.output);
    same("GRU h_n, unpacked", &dense.h_n, &alone.h_n);
    eprintln!("padding invariance: worst |diff| {worst:.3e}");
}
