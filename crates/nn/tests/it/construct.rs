//! Building layers on a dtype and device, skipping random init for weights loaded right after,
//! and torchvision's initialisation drawn in torchvision's order.

use crate::resnet_parity::fixtures;
use tch::{Device, Kind, Tensor};
use torchlight_nn::*;

#[test]
fn layers_and_resnets_are_created_in_the_requested_dtype() {
    let _rng = crate::torch_rng_lock();
    let bf16 = (Kind::BFloat16, Device::Cpu);
    let lin = Linear::new_on(6, 4, true, bf16);
    let conv = Conv2d::new_on(3, 8, 3, Conv2dConfig::default(), bf16);
    let bn = BatchNorm2d::new_on(8, BatchNormConfig::default(), bf16);
    for (name, t) in named_tensors(&lin).into_iter().chain(named_tensors(&conv)).map(|(n, t, _)| (n, t)) {
        assert_eq!(t.kind(), Kind::BFloat16, "{name}");
        assert!(t.requires_grad(), "{name} is a parameter");
    }
    let bound = 1.0 / 6f64.sqrt();
    assert!(lin.weight.abs().max().double_value(&[]) <= bound, "Linear's init ran in bfloat16");
    assert_eq!(bn.running_var.as_ref().unwrap().kind(), Kind::BFloat16);
    assert_eq!(bn.num_batches_tracked.as_ref().unwrap().kind(), Kind::Int64, "the counter stays int64");
    assert_eq!(bn.weight.as_ref().unwrap().double_value(&[0]), 1.0);

    let model = resnet18_on(5, bf16);
    let y = model.forward_t(&Tensor::ones([1, 3, 32, 32], bf16), false);
    assert_eq!((y.size(), y.kind()), (vec![1, 5], Kind::BFloat16));
    let mut fresh = resnet_by_name_on("resnet34", 3, bf16).unwrap();
    fresh.replace_fc(7);
    assert_eq!(fresh.fc.weight.kind(), Kind::BFloat16, "a new head follows the model's dtype");
    assert!(resnet_by_name_on("resnet9", 3, bf16).is_none());
}

/// `LayerOptions::skip_init`: building resnet50 and loading a file does one allocation and one
/// write per tensor. Every tensor is created with `empty` on its final dtype and device (its
/// autograd version counter, which every in-place kernel bumps, is 0 after the build, and
/// torch's generator has not moved), and the load writes each exactly once, in place (version
/// 1, same data pointer: no second allocation).
#[test]
fn skip_init_builds_resnet50_with_one_allocation_and_one_write_per_tensor() {
    let path = fixtures().join("resnet50.pth");
    let weights = read_weights(&path).unwrap();

    let (model, rng_before, rng_after) = {
        let _rng = crate::torch_rng_lock();
        let before = torchlight_tensor::torch_rng_state().unwrap();
        let model = resnet50_on(10, LayerOptions::new(Kind::Float, Device::Cpu).skip_init());
        (model, before, torchlight_tensor::torch_rng_state().unwrap())
    };
    assert!(rng_before.cpu.equal(&rng_after.cpu), "no random initialiser drew from torch's generator");
    let built: Vec<(String, usize, i64)> = named_tensors(&model)
        .into_iter()
        .map(|(k, t, _)| (k, t.data_ptr() as usize, t.internal_version()))
        .collect();
    assert_eq!(built.len(), 320);
    for (key, _, version) in &built {
        assert_eq!(*version, 0, "{key} was written while building");
    }

    let report = load_state_dict(&model, weights, &LoadOptions::strict()).unwrap();
    assert_eq!(report.loaded.len(), 320);
    let theirs: std::collections::HashMap<String, Tensor> = read_pth(&path).unwrap().into_iter().collect();
    for ((key, ptr, _), (_, t, _)) in built.iter().zip(named_tensors(&model)) {
        assert_eq!(t.data_ptr() as usize, *ptr, "{key} was reallocated by the load");
        assert_eq!(t.internal_version(), 1, "{key} was written more than once by the load");
        assert!(t.equal(&theirs[key]), "{key} differs from the file");
    }

    // The default build runs the initialisers: the counters show it (so the check above can fail).
    let _rng = crate::torch_rng_lock();
    let initialised = resnet18(10);
    assert!(initialised.conv1.first_conv().weight.internal_version() >= 1);
    assert!(initialised.bn1.weight.as_ref().unwrap().internal_version() >= 1);
}

/// torchvision's `torch.manual_seed(0); resnetXX(num_classes=10)` (the `.pth` files of
/// `make_resnet.py`) equals `manual_seed(0); resnetXX(10)` here bit for bit: the same
/// initialisers, drawn in the same order.
#[test]
fn seeded_init_equals_torchvisions_draw_for_draw() {
    if !crate::alone_in_a_process("construct::seeded_init_equals_torchvisions_draw_for_draw") {
        return;
    }
    for arch in ["resnet18", "resnet50"] {
        let theirs = read_pth(fixtures().join(format!("{arch}.pth"))).unwrap();
        let model = {
            let _rng = crate::torch_rng_lock();
            tch::manual_seed(0);
            resnet_by_name(arch, 10).unwrap()
        };
        let ours = state_dict(&model);
        assert_eq!(ours.len(), theirs.len());
        for ((key, a), (_, b)) in ours.iter().zip(&theirs) {
            assert!(a.equal(b), "{arch}: {key} differs from torchvision's seeded init (tolerance: exact)");
        }
    }
}
