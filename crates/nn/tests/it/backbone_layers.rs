//! The layers the backbones are made of, each against torch.nn / torchvision.ops: outputs and
//! gradients (ReLU6, Hardswish, Hardsigmoid, LayerNorm, LayerNorm2d, SqueezeExcitation,
//! MultiheadAttention), StochasticDepth's draws, and the initialisers' seeded draws.
//! Fixtures: `make_backbones.py ... layers`, at this process's thread count and dispatch
//! level.

use crate::backbones::fixtures;
use crate::{assert_close, load};
use std::collections::HashMap;
use tch::{Device, Kind, Tensor};
use torchlight_nn::init::{kaiming_uniform_, trunc_normal_, xavier_uniform_, FanMode, Nonlinearity};
use torchlight_nn::*;

fn layers() -> HashMap<String, Tensor> {
    load(fixtures(&["layers"]).join("layers.safetensors"))
}

fn set(dst: &Tensor, src: &Tensor) {
    let _g = torchlight_tensor::no_grad();
    dst.shallow_clone().copy_(src);
}

/// `module(x)` and the gradients of `sum(y * linspace(-1, 1))` (the fixture's weighting),
/// compared with the fixture's `tag.y`, `tag.grad_x` and `tag.grad.<param>` (float32
/// tolerances: 1e-5 relative, 1e-6 absolute). Measured under ATEN_CPU_CAPABILITY default, avx2
/// and avx512: the activations, LayerNorms and SqueezeExcitation are bit-identical, and
/// MultiheadAttention (another operation order than torch's) reaches 0.17 of the bound
/// (3.6e-7 on a parameter gradient); against a fixture from another level, 0.19.
fn check_with_grads(tag: &str, module: &dyn Module, x: &Tensor, f: &HashMap<String, Tensor>) {
    let x = x.detach().set_requires_grad(true);
    let y = module.forward_t(&x, true);
    let weights = Tensor::linspace(-1.0, 1.0, y.numel() as i64, (Kind::Float, Device::Cpu)).reshape(y.size());
    (&y * weights).sum(Kind::Float).backward();
    assert_close(&format!("{tag} output"), &y, &f[&format!("{tag}.y")], 1e-5, 1e-6);
    assert_close(&format!("{tag} input gradient"), &x.grad(), &f[&format!("{tag}.grad_x")], 1e-5, 1e-6);
    for (name, p) in named_parameters(module) {
        assert_close(
            &format!("{tag} gradient of {name}"),
            &p.grad(),
            &f[&format!("{tag}.grad.{name}")],
            1e-5,
            1e-6,
        );
    }
}

#[test]
fn hard_activations_match_torch() {
    let f = layers();
    let x = &f["act.x"];
    check_with_grads("act.relu6", &ReLU6, x, &f);
    check_with_grads("act.hardswish", &Hardswish, x, &f);
    check_with_grads("act.hardsigmoid", &Hardsigmoid, x, &f);
}

#[test]
fn layer_norm_and_channels_last_layer_norm_2d_match_torch() {
    let f = layers();
    let ln = LayerNorm::new(5, 1e-6);
    let ln2d = LayerNorm2d::new_on(6, 1e-6, LayerOptions::default());
    for (tag, m) in [("ln", &ln as &dyn Module), ("ln2d", &ln2d)] {
        let own: HashMap<String, Tensor> = named_parameters(m).into_iter().collect();
        set(&own["weight"], &f[&format!("{tag}.weight")]);
        set(&own["bias"], &f[&format!("{tag}.bias")]);
        check_with_grads(tag, m, &f["act.x"], &f);
    }
}

#[test]
fn squeeze_excitation_matches_torchvision() {
    let f = layers();
    let se = SqueezeExcitation::new_on(6, 8, ReLU, Hardsigmoid, LayerOptions::default());
    let keys: Vec<String> = named_parameters(&se).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"], "torchvision's keys");
    for (name, p) in named_parameters(&se) {
        set(&p, &f[&format!("se.{name}")]);
    }
    check_with_grads("se", &se, &f["act.x"], &f);
}

#[test]
fn stochastic_depth_draws_what_torchvision_draws() {
    if !crate::alone_in_a_process("backbone_layers::stochastic_depth_draws_what_torchvision_draws") {
        return;
    }
    let f = layers();
    let _rng = crate::torch_rng_lock();
    let ones = Tensor::ones([64, 3, 2], (Kind::Float, Device::Cpu));
    for (tag, mode) in [("row", StochasticDepthMode::Row), ("batch", StochasticDepthMode::Batch)] {
        let sd = StochasticDepth::new(0.4, mode);
        tch::manual_seed(5);
        let ours = Tensor::stack(
            &[sd.forward_t(&ones, true), sd.forward_t(&ones, true), sd.forward_t(&ones, true)],
            0,
        );
        assert!(ours.equal(&f[&format!("sd.{tag}")]), "{tag}: the same keep masks (tolerance: exact)");
    }
    let sd = StochasticDepth::new(0.4, StochasticDepthMode::Row);
    let before = torchlight_tensor::torch_rng_state().unwrap();
    assert!(sd.forward_t(&ones, false).equal(&ones), "identity in evaluation");
    assert!(StochasticDepth::new(0.0, StochasticDepthMode::Row).forward_t(&ones, true).equal(&ones));
    let after = torchlight_tensor::torch_rng_state().unwrap();
    assert!(before.cpu.equal(&after.cpu), "nothing drawn in evaluation or at p = 0");
}

#[test]
fn multihead_attention_matches_torch() {
    let f = layers();
    let mha = MultiheadAttention::new_on(8, 2, 0.0, true, LayerOptions::default());
    let keys: Vec<String> = named_parameters(&mha).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"], "torch's keys");
    for (name, p) in named_parameters(&mha) {
        set(&p, &f[&format!("mha.{name}")]);
    }
    check_with_grads("mha.self", &mha, &f["mha.x"], &f);
    let _g = torchlight_tensor::no_grad();
    let (q, kv) = (&f["mha.x"], &f["mha.kv"]);
    assert_close("self-attention in eval", &mha.forward_t(q, false), &f["mha.self.y_eval"], 1e-5, 1e-6);
    // Measured at most 0.05 of the bound (1.2e-7), at every dispatch level.
    let cross = mha.attend(q, kv, &(kv * 0.5), false);
    assert_close("cross-attention", &cross, &f["mha.cross.y"], 1e-5, 1e-6);
}

#[test]
fn initialisers_draw_what_torch_draws() {
    // Exact draws: other tests of this binary initialise layers without the rng lock (the
    // attention and squeeze-excitation tests here), and a draw of theirs between two of ours
    // changed these values (0.43 off, seen in three of forty runs on a busy machine).
    if !crate::alone_in_a_process("backbone_layers::initialisers_draw_what_torch_draws") {
        return;
    }
    let f = layers();
    let _rng = crate::torch_rng_lock();
    tch::manual_seed(3);
    let empty = |shape: &[i64]| Tensor::empty(shape, (Kind::Float, Device::Cpu));
    let t = empty(&[300, 40]);
    trunc_normal_(&t, 0.0, 0.02, -2.0, 2.0);
    assert!(t.equal(&f["init.trunc_normal"]), "trunc_normal_ std 0.02 (tolerance: exact)");
    let t = empty(&[500]);
    trunc_normal_(&t, 0.1, 1.0, -0.5, 1.5);
    // Bounds within the distribution go through erf: the same draws up to float rounding
    // (measured 0 at the fixture's own dispatch level, 2.4e-7 across levels: erf is vectorised
    // per level). The other draws are exact at the fixture's level; across levels uniform_
    // differs in the last bit (1.5e-8), which the fixture's cache key rules out.
    assert_close("trunc_normal_ truncated at -0.6 and 1.4 std", &t, &f["init.trunc_normal_tight"], 0.0, 1e-6);
    assert!(t.min().double_value(&[]) >= -0.5 && t.max().double_value(&[]) <= 1.5);
    let t = empty(&[96, 32]);
    xavier_uniform_(&t, 1.0);
    assert!(t.equal(&f["init.xavier_uniform"]), "xavier_uniform_ (tolerance: exact)");
    let t = empty(&[48, 24, 3, 3]);
    kaiming_uniform_(&t, FanMode::FanIn, Nonlinearity::LeakyRelu(5f64.sqrt()));
    assert!(t.equal(&f["init.kaiming_uniform"]), "kaiming_uniform_ a = sqrt(5) (tolerance: exact)");
}

#[test]
fn permute_and_conv_norm_activation_have_torchvisions_shapes_and_keys() {
    let x = Tensor::zeros([2, 3, 4, 5], (Kind::Float, Device::Cpu));
    assert_eq!(Permute::new(&[0, 2, 3, 1]).forward_t(&x, false).size(), [2, 4, 5, 3]);
    let block = Conv2dNormActivation::new(3, 8, 3)
        .stride(2)
        .groups(1)
        .norm(Norm::BatchNorm(BatchNormConfig::default()))
        .activation(Hardswish)
        .build(LayerOptions::default());
    let keys: Vec<String> = named_tensors(&block).into_iter().map(|(k, _, _)| k).collect();
    assert_eq!(
        keys,
        ["0.weight", "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked"]
    );
    assert_eq!(block.forward_t(&x, false).size(), [2, 8, 2, 3], "same padding: (k - 1) / 2");
    let stem =
        Conv2dNormActivation::new(3, 8, 4).stride(4).padding(0).norm(Norm::LayerNorm2d(1e-6)).bias(true);
    let keys: Vec<String> =
        named_tensors(&stem.build(LayerOptions::default())).into_iter().map(|(k, _, _)| k).collect();
    assert_eq!(keys, ["0.weight", "0.bias", "1.weight", "1.bias"]);
}
