//! The text model's layers against torch.nn 2.11 on fixed weights (forward and gradients):
//! `MultiheadAttention` with `key_padding_mask` and a learned positional embedding. Fixtures:
//! `tests/fixtures/make_transformer.py`, generated at test time at this process's thread count
//! and dispatch level.
//!
//! Tolerance: 1e-5 absolute plus 1e-5 relative on every output and gradient. Our attention
//! broadcasts the padding mask over heads where PyTorch materialises it per head, so the
//! differences are float rounding: measured under ATEN_CPU_CAPABILITY default, avx2 and avx512
//! (2 threads), at most 9.5e-7 on attention, 0 on the positional embedding.

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
