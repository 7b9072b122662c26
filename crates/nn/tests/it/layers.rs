//! Single layers against torch.nn, on the committed `tests/fixtures/layers.safetensors`
//! (`make_small.py`, made at the AVX2/AVX-512 dispatch level). Its tolerances hold on every
//! x86-64 level: measured with ATEN_CPU_CAPABILITY default, avx2 and avx512 (also oneDNN and
//! MKL held to AVX2 or SSE4.1/4.2), 1, 2 and 8 threads, and against the fixture regenerated
//! at the default and SSE levels, the worst is 0.18 of a bound (GELU's erf, vectorised per
//! level: 4.8e-7 of atol 1e-6 + rtol 1e-6); conv2d 0.05, BatchNorm 0.14, Linear 0.

use crate::{assert_close, fixture, load};
use tch::{Kind, Tensor};
use torchlight_nn::*;

fn set(dst: &Tensor, src: &Tensor) {
    let _g = torchlight_tensor::no_grad();
    dst.shallow_clone().copy_(src);
}

#[test]
fn conv2d_with_stride_padding_dilation_groups_matches_pytorch() {
    let _rng = crate::torch_rng_lock();
    let f = load(fixture("layers.safetensors"));
    let conv = Conv2d::new(
        4,
        6,
        3,
        Conv2dConfig::default().with_stride(2).with_padding(1).with_dilation(2).with_groups(2),
    );
    set(&conv.weight, &f["conv.weight"]);
    set(conv.bias.as_ref().unwrap(), &f["conv.bias"]);
    assert_close(
        "conv2d output (float32 tolerance)",
        &conv.forward_t(&f["conv.x"], false),
        &f["conv.y"],
        1e-5,
        1e-6,
    );
}

#[test]
fn linear_matches_pytorch() {
    let _rng = crate::torch_rng_lock();
    let f = load(fixture("layers.safetensors"));
    let lin = Linear::new(5, 3, true);
    set(&lin.weight, &f["linear.weight"]);
    set(lin.bias.as_ref().unwrap(), &f["linear.bias"]);
    assert_close("linear output", &lin.forward_t(&f["linear.x"], true), &f["linear.y"], 1e-6, 1e-7);
}

#[test]
fn batch_norm_training_and_eval_match_pytorch_for_both_momentum_modes() {
    let f = load(fixture("layers.safetensors"));
    for (tag, momentum) in [("bn", Some(0.1)), ("bn_cma", None)] {
        let bn = BatchNorm2d::new(3, BatchNormConfig { momentum, ..Default::default() });
        set(bn.weight.as_ref().unwrap(), &f[&format!("{tag}.weight")]);
        set(bn.bias.as_ref().unwrap(), &f[&format!("{tag}.bias")]);
        for i in 0..3 {
            let y = bn.forward_t(&f[&format!("{tag}.x{i}")], true);
            assert_close(
                &format!("{tag} train forward {i}"),
                &y,
                &f[&format!("{tag}.train_y{i}")],
                1e-5,
                1e-6,
            );
        }
        assert_close(
            &format!("{tag} running_mean"),
            bn.running_mean.as_ref().unwrap(),
            &f[&format!("{tag}.running_mean")],
            1e-6,
            1e-7,
        );
        assert_close(
            &format!("{tag} running_var"),
            bn.running_var.as_ref().unwrap(),
            &f[&format!("{tag}.running_var")],
            1e-6,
            1e-7,
        );
        assert_eq!(bn.num_batches_tracked.as_ref().unwrap().int64_value(&[]), 3);
        let before = bn.running_mean.as_ref().unwrap().copy();
        let y = bn.forward_t(&f[&format!("{tag}.xe")], false);
        assert_close(&format!("{tag} eval forward"), &y, &f[&format!("{tag}.eval_y")], 1e-5, 1e-6);
        assert!(bn.running_mean.as_ref().unwrap().equal(&before), "eval must not touch running stats");
        assert_eq!(bn.num_batches_tracked.as_ref().unwrap().int64_value(&[]), 3);
    }
}

#[test]
fn pooling_activations_and_flatten_match_pytorch() {
    let f = load(fixture("layers.safetensors"));
    let x = &f["pool.x"];
    let cases: Vec<(&str, Box<dyn Module>)> = vec![
        ("pool.max", Box::new(MaxPool2d::new(3, 2, 1))),
        ("pool.max_ceil", Box::new(MaxPool2d { ceil_mode: true, ..MaxPool2d::new(2, 2, 0) })),
        ("pool.avg", Box::new(AvgPool2d::new(3, 2, 1))),
        ("pool.avg_nopad", Box::new(AvgPool2d { count_include_pad: false, ..AvgPool2d::new(3, 2, 1) })),
        ("pool.adaptive", Box::new(AdaptiveAvgPool2d { output_size: [3, 3] })),
        ("act.leaky", Box::new(LeakyReLU { negative_slope: 0.2 })),
        ("act.gelu", Box::new(GELU)),
        ("act.silu", Box::new(SiLU)),
        ("flatten", Box::new(Flatten::default())),
    ];
    for (key, layer) in cases {
        assert_close(key, &layer.forward_t(x, false), &f[key], 1e-6, 1e-6);
    }
}

#[test]
fn dropout_is_identity_in_eval_and_drops_in_training() {
    let _rng = crate::torch_rng_lock();
    let x = Tensor::ones([1000], (Kind::Float, tch::Device::Cpu));
    let d = Dropout { p: 0.3 };
    assert!(d.forward_t(&x, false).equal(&x));
    let y = d.forward_t(&x, true);
    let zeros = y.eq(0.0).sum(Kind::Int64).int64_value(&[]);
    assert!((200..400).contains(&zeros), "{zeros} of 1000 dropped at p = 0.3");
    assert_close("kept elements scaled by 1/(1-p)", &y.max(), &Tensor::from(1.0f32 / 0.7), 1e-6, 0.0);
}

#[test]
fn sequential_names_children_by_position_or_name() {
    let _rng = crate::torch_rng_lock();
    let seq =
        Sequential::new().add(Linear::new(4, 3, true)).add(ReLU).add_named("head", Linear::new(3, 2, false));
    let keys: Vec<String> = named_parameters(&seq).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["0.weight", "0.bias", "head.weight"]);
    let y = seq.forward_t(&Tensor::ones([5, 4], (Kind::Float, tch::Device::Cpu)), false);
    assert_eq!(y.size(), [5, 2]);
}
