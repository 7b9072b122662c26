//! The text model's layers against torch.nn 2.11: `MultiheadAttention` with `key_padding_mask`,
//! `TransformerEncoderLayer` (post-norm relu, pre-norm gelu), `TransformerEncoder` (two layers
//! and a final norm) and a learned positional embedding, each on fixed weights (forward and
//! gradients), the keys and seeded init of PyTorch's encoder, and padding invariance.
//! Fixtures: `tests/fixtures/make_transformer.py`, generated at test time at this process's
//! thread count and dispatch level.
//!
//! Tolerance: 1e-5 absolute plus 1e-5 relative on every output and gradient. Our attention
//! broadcasts the padding mask over heads where PyTorch materialises it per head, and the
//! layers run the same ops as PyTorch's training path otherwise, so the differences are float
//! rounding: measured under ATEN_CPU_CAPABILITY default, avx2 and avx512 (2 threads), at most
//! 9.5e-7 (attention and the pre-norm GELU layer), 7.2e-7 on the two-layer encoder, 0 on the
//! positional embedding; padding invariance at most 4.8e-7.

use crate::{assert_close, load};
use std::collections::HashMap;
use std::path::PathBuf;
use tch::{Device, Kind, Tensor};
use torchlight_nn::*;

const RTOL: f64 = 1e-5;
const ATOL: f64 = 1e-5;

fn fixtures() -> PathBuf {
    let threads = tch::get_num_threads().to_string();
    torchlight_testing::generated_fixture("crates/nn/tests/fixtures/make_transformer.py", &[&threads])
        .unwrap_or_else(|e| panic!("{e}"))
}

fn set(dst: &Tensor, src: &Tensor) {
    let _g = torchlight_tensor::no_grad();
    dst.shallow_clone().copy_(src);
}

/// `sum(y * linspace(-1, 1))`, the fixture's weighting, backpropagated.
fn weighted_backward(y: &Tensor) {
    let w = Tensor::linspace(-1.0, 1.0, y.numel() as i64, (Kind::Float, Device::Cpu)).reshape(y.size());
    (y * w).sum(Kind::Float).backward();
}

/// Compares every parameter's gradient with `prefix.<key>`, then clears them; the largest
/// absolute difference.
fn check_grads(what: &str, m: &dyn Module, f: &HashMap<String, Tensor>, prefix: &str) -> f64 {
    let mut worst = 0f64;
    for (name, p) in named_parameters(m) {
        let d = assert_close(
            &format!("{what}: gradient of {name}"),
            &p.grad(),
            &f[&format!("{prefix}.{name}")],
            RTOL,
            ATOL,
        );
        worst = worst.max(d);
        let _ = p.grad().zero_();
    }
    worst
}

/// `t` at the valid (unmasked) positions of `mask` `[B, T]`: `[valid, D]`.
fn valid(t: &Tensor, mask: &Tensor) -> Tensor {
    let keep = mask.logical_not().flatten(0, 1).nonzero().squeeze_dim(1);
    t.flatten(0, 1).index_select(0, &keep)
}

#[test]
fn multihead_attention_key_padding_mask_matches_torch() {
    let f = load(fixtures().join("mha.safetensors"));
    let mha = MultiheadAttention::new_on(8, 2, 0.0, true, LayerOptions::default().skip_init());
    for (name, p) in named_parameters(&mha) {
        set(&p, &f[&format!("weight.{name}")]);
    }
    let (x, kv, mask, kv_mask) = (&f["x"], &f["kv"], &f["mask"], &f["kv_mask"]);

    let xs = x.detach().set_requires_grad(true);
    let y = mha.self_attention(&xs, Some(mask), true);
    weighted_backward(&y);
    let mut worst = assert_close("masked self-attention", &y, &f["self.y"], RTOL, ATOL);
    worst = worst.max(assert_close(
        "masked self-attention: input gradient",
        &xs.grad(),
        &f["self.grad_x"],
        RTOL,
        ATOL,
    ));
    worst = worst.max(check_grads("masked self-attention", &mha, &f, "self.grad"));

    let q = x.detach().set_requires_grad(true);
    let y = mha.attend_masked(&q, kv, &(kv * 0.5), Some(kv_mask), true);
    weighted_backward(&y);
    worst = worst.max(assert_close("masked cross-attention", &y, &f["cross.y"], RTOL, ATOL));
    worst = worst.max(assert_close(
        "masked cross-attention: query gradient",
        &q.grad(),
        &f["cross.grad_q"],
        RTOL,
        ATOL,
    ));
    worst = worst.max(check_grads("masked cross-attention", &mha, &f, "cross.grad"));

    let _g = torchlight_tensor::no_grad();
    let float_mask = mask.to_kind(Kind::Float) * -1.5;
    let y = mha.self_attention(x, Some(&float_mask), false);
    worst = worst.max(assert_close("self-attention with a float mask", &y, &f["float.y"], RTOL, ATOL));
    // No mask is the unmasked forward, bit for bit (the ViT's path).
    assert!(mha.self_attention(x, None, false).equal(&mha.forward_t(x, false)));
    eprintln!("MultiheadAttention key_padding_mask: max |diff| {worst:.3e}");
}

/// `read_pth`'s keys (PyTorch's `state_dict` order) equal ours, and the model loads strictly.
fn load_pth(m: &dyn Module, path: PathBuf) {
    let theirs = read_pth(&path).unwrap();
    let ours: Vec<String> = named_tensors(m).into_iter().map(|(k, _, _)| k).collect();
    let their_keys: Vec<String> = theirs.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(ours, their_keys, "{}: PyTorch's state_dict keys, in its order", path.display());
    load_state_dict(m, theirs, &LoadOptions::strict()).unwrap();
}

/// The training forward with `src_key_padding_mask` (output, input and parameter gradients,
/// all positions) and PyTorch's eval fast path at the valid positions; the largest difference.
fn check_encoder_like(tag: &str, forward: &dyn Fn(&Tensor, &Tensor, bool) -> Tensor, m: &dyn Module) -> f64 {
    let dir = fixtures();
    load_pth(m, dir.join(format!("{tag}.pth")));
    let f = load(dir.join(format!("{tag}.safetensors")));
    let (x, mask) = (&f["x"], &f["mask"]);
    let xs = x.detach().set_requires_grad(true);
    let y = forward(&xs, mask, true);
    weighted_backward(&y);
    let mut worst = assert_close(&format!("{tag}: training forward"), &y, &f["y"], RTOL, ATOL);
    worst = worst.max(assert_close(&format!("{tag}: input gradient"), &xs.grad(), &f["grad_x"], RTOL, ATOL));
    worst = worst.max(check_grads(tag, m, &f, "grad"));
    let _g = torchlight_tensor::no_grad();
    let y = forward(x, mask, false);
    worst = worst.max(assert_close(
        &format!("{tag}: eval at valid positions (PyTorch's fast path)"),
        &valid(&y, mask),
        &valid(&f["eval"], mask),
        RTOL,
        ATOL,
    ));
    eprintln!("{tag}: max |diff| {worst:.3e}");
    worst
}

#[test]
fn transformer_encoder_layers_match_torch() {
    for (tag, activation, eps, norm_first) in [
        ("layer_post_relu", TransformerActivation::Relu, 1e-5, false),
        ("layer_pre_gelu", TransformerActivation::Gelu, 1e-6, true),
    ] {
        let layer = TransformerEncoderLayerConfig::new(16, 4)
            .with_dim_feedforward(32)
            .with_dropout(0.0)
            .with_activation(activation)
            .with_layer_norm_eps(eps)
            .with_norm_first(norm_first)
            .build_on(LayerOptions::default().skip_init());
        check_encoder_like(tag, &|x, m, train| layer.forward_masked(x, Some(m), train), &layer);
    }
}

fn encoder_16(options: LayerOptions) -> TransformerEncoder {
    let layer = TransformerEncoderLayerConfig::new(16, 4)
        .with_dim_feedforward(32)
        .with_dropout(0.0)
        .build_on(options);
    TransformerEncoder::new(layer, 2, Some(LayerNorm::new_on(&[16], 1e-5, true, options)))
}

#[test]
fn transformer_encoder_matches_torch() {
    let encoder = encoder_16(LayerOptions::default().skip_init());
    check_encoder_like("encoder", &|x, m, train| encoder.forward_masked(x, Some(m), train), &encoder);
}

#[test]
fn transformer_encoder_keys_and_seeded_init_are_pytorchs() {
    let dir = fixtures();
    let bias_false = TransformerEncoder::new(
        TransformerEncoderLayerConfig::new(16, 4)
            .with_dim_feedforward(32)
            .with_bias(false)
            .with_norm_first(true)
            .build_on(LayerOptions::default().skip_init()),
        1,
        None,
    );
    load_pth(&bias_false, dir.join("encoder_bias_false.pth"));
    if !crate::alone_in_a_process("transformer::transformer_encoder_keys_and_seeded_init_are_pytorchs") {
        return;
    }
    let _rng = crate::torch_rng_lock();
    tch::manual_seed(0);
    let ours = encoder_16(LayerOptions::default());
    let theirs = read_pth(dir.join("encoder_init.pth")).unwrap();
    let ours = state_dict(&ours);
    assert_eq!(ours.len(), theirs.len());
    for ((k, a), (k2, b)) in ours.iter().zip(&theirs) {
        assert_eq!(k, k2);
        // Exact: the fixture is drawn at this process's dispatch level, in the same order.
        assert!(a.equal(b), "{k} differs from PyTorch's seeded init (tolerance: exact)");
    }
}

#[test]
fn learned_positional_embedding_matches_torch() {
    let f = load(fixtures().join("positional.safetensors"));
    let pe = LearnedPositionalEmbedding::new_on(10, 16, LayerOptions::default().skip_init());
    set(&pe.weight, &f["weight"]);
    let x = f["x"].detach().set_requires_grad(true);
    let y = pe.forward_t(&x, true);
    weighted_backward(&y);
    let mut worst = assert_close("positional embedding", &y, &f["y"], RTOL, ATOL);
    worst =
        worst.max(assert_close("positional embedding: input gradient", &x.grad(), &f["grad_x"], RTOL, ATOL));
    worst = worst.max(assert_close(
        "positional embedding: weight gradient",
        &pe.weight.grad(),
        &f["grad.weight"],
        RTOL,
        ATOL,
    ));
    eprintln!("LearnedPositionalEmbedding: max |diff| {worst:.3e}");
}

/// A sequence gives the same outputs at its valid positions alone (no mask) and batched,
/// padded, beside one ten times longer; in training (dropout 0) and evaluation, pre- and
/// post-norm.
#[test]
fn a_sequence_gives_the_same_outputs_alone_and_padded_beside_a_longer_one() {
    let _rng = crate::torch_rng_lock();
    tch::manual_seed(7);
    for norm_first in [false, true] {
        let layer = TransformerEncoderLayerConfig::new(16, 4)
            .with_dim_feedforward(32)
            .with_dropout(0.0)
            .with_activation(TransformerActivation::Gelu)
            .with_norm_first(norm_first)
            .build();
        let encoder = TransformerEncoder::new(layer, 2, Some(LayerNorm::new(16, 1e-5)));
        let pe = LearnedPositionalEmbedding::new(64, 16);
        let (short, long) = (5, 50);
        let a = Tensor::randn([1, short, 16], (Kind::Float, Device::Cpu));
        let b = Tensor::randn([1, long, 16], (Kind::Float, Device::Cpu));
        // The short one padded with garbage (large values) that the mask must keep out.
        let padded = Tensor::cat(
            &[a.shallow_clone(), Tensor::full([1, long - short, 16], 1e3, (Kind::Float, Device::Cpu))],
            1,
        );
        let batch = Tensor::cat(&[padded, b], 0);
        let lengths = Tensor::from_slice(&[short, long]);
        let mask =
            Tensor::arange(long, (Kind::Int64, Device::Cpu)).unsqueeze(0).ge_tensor(&lengths.unsqueeze(1));
        for train in [true, false] {
            let alone = encoder.forward_masked(&pe.forward_t(&a, train), None, train);
            let batched = encoder.forward_masked(&pe.forward_t(&batch, train), Some(&mask), train);
            let d = assert_close(
                &format!("norm_first {norm_first}, train {train}: valid positions alone vs batched"),
                &batched.narrow(0, 0, 1).narrow(1, 0, short),
                &alone,
                RTOL,
                ATOL,
            );
            eprintln!("padding invariance (norm_first {norm_first}, train {train}): max |diff| {d:.3e}");
        }
    }
}
