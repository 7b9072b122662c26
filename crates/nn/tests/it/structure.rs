use tch::{Device, Kind, Tensor};
use torchlight_nn::init::{self, FanMode, Init, InitPolicy, Nonlinearity};
use torchlight_nn::*;

#[test]
fn freezing_all_but_the_head_changes_the_trainable_count() {
    let _rng = crate::torch_rng_lock();
    let mut model = resnet18(1000);
    model.replace_fc(3);
    let all = count_parameters(&model);
    assert_eq!(all.total, 11_689_512 - 512 * 1000 - 1000 + 512 * 3 + 3);
    assert_eq!(all.trainable, all.total);
    freeze_all_but(&model, "fc.");
    let head = count_parameters(&model);
    assert_eq!(head.trainable, 512 * 3 + 3);
    // Staged fine-tune: unfreezing the last stage must visibly change the count.
    assert_eq!(unfreeze(&model, "layer4."), 15);
    assert!(count_parameters(&model).trainable > head.trainable);
    assert_eq!(freeze(&model, ""), 15 + 2);
    assert_eq!(count_parameters(&model).trainable, 0);
    // Frozen parameters get no gradient.
    unfreeze(&model, "fc.");
    let y = model.forward_t(&Tensor::ones([2, 3, 32, 32], (Kind::Float, Device::Cpu)), true);
    y.sum(Kind::Float).backward();
    assert!(!model.conv1.first_conv().weight.grad().defined());
    assert!(model.fc.weight.grad().defined());
}

#[test]
fn summary_table_lists_every_parameter_and_the_totals() {
    let _rng = crate::torch_rng_lock();
    let model = resnet18(10);
    freeze_all_but(&model, "fc.");
    let table = summary_table(&model);
    assert!(table.contains("layer2.0.downsample.0.weight  [128, 64, 1, 1]"), "{table}");
    assert!(table.contains("fc.weight"), "{table}");
    assert!(table.contains("total params: 11,181,642   trainable: 5,130   frozen: 11,176,512"), "{table}");
    assert_eq!(table.lines().filter(|l| l.ends_with(" no")).count(), 60);
}

#[test]
fn modules_are_visited_in_torchvision_order_and_can_be_downcast() {
    let _rng = crate::torch_rng_lock();
    let model = resnet18(10);
    let mut paths = Vec::new();
    let mut convs = 0;
    visit_modules(&model, &mut |path, m| {
        paths.push(format!("{path}:{}", m.kind()));
        convs += usize::from(m.as_any().downcast_ref::<Conv2d>().is_some());
    });
    assert_eq!(convs, 20);
    assert_eq!(&paths[..5], [":ResNet", "conv1:Conv2d", "bn1:BatchNorm2d", "relu:ReLU", "maxpool:MaxPool2d"]);
    assert!(paths.contains(&"layer2.0.downsample.1:BatchNorm2d".to_string()));
}

#[test]
fn parameters_come_with_the_kind_of_their_owning_module() {
    let model = resnet18_on(10, LayerOptions::default().skip_init());
    let with_kind = named_parameters_with_kind(&model);
    let names: Vec<&str> = with_kind.iter().map(|(n, _, _)| n.as_str()).collect();
    let plain: Vec<String> = named_parameters(&model).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, plain, "same parameters in the same order");
    let kind = |name: &str| with_kind.iter().find(|(n, _, _)| n == name).map(|(_, _, k)| *k);
    assert_eq!(kind("conv1.weight"), Some("Conv2d"));
    assert_eq!(kind("bn1.bias"), Some("BatchNorm2d"));
    assert_eq!(kind("layer2.0.downsample.1.weight"), Some("BatchNorm2d"));
    assert_eq!(kind("fc.weight"), Some("Linear"));
    // A parameter of the model itself, and the tensors are the model's (shared storage).
    let vit = vit_b_16_on(10, 224, LayerOptions::default().skip_init());
    let vit_params = named_parameters_with_kind(&vit);
    assert_eq!((vit_params[0].0.as_str(), vit_params[0].2), ("class_token", "VisionTransformer"));
    assert!(vit_params.iter().any(|(n, _, k)| n == "encoder.ln.weight" && *k == "LayerNorm"));
    assert_eq!(vit_params[0].1.data_ptr(), vit.class_token.data_ptr());
}

#[test]
fn kaiming_and_xavier_draw_with_pytorchs_spread() {
    let _rng = crate::torch_rng_lock();
    // Statistical check of the formulas in torch.nn.init over 2^20 draws: std within 1%.
    let w = Tensor::empty([256, 128, 4, 8], (Kind::Float, Device::Cpu));
    torchlight_tensor::seed_everything(3);
    init::kaiming_normal_(&w, FanMode::FanOut, Nonlinearity::Relu);
    let expected = (2.0f64 / (256.0 * 32.0)).sqrt();
    let std = w.std(true).double_value(&[]);
    assert!((std / expected - 1.0).abs() < 0.01, "kaiming_normal fan_out std {std} vs {expected}");
    init::kaiming_uniform_(&w, FanMode::FanIn, Nonlinearity::LeakyRelu(5f64.sqrt()));
    let bound = 1.0 / (128.0f64 * 32.0).sqrt();
    let max = w.abs().max().double_value(&[]);
    assert!(max <= bound && max > 0.99 * bound, "kaiming_uniform(a=sqrt 5) bound {max} vs {bound}");
    init::xavier_uniform_(&w, init::calculate_gain(Nonlinearity::Tanh));
    let bound = 5.0 / 3.0 * (6.0f64 / (128.0 * 32.0 + 256.0 * 32.0)).sqrt();
    let max = w.abs().max().double_value(&[]);
    assert!(max <= bound && max > 0.99 * bound, "xavier_uniform bound {max} vs {bound}");
    init::xavier_normal_(&w, 1.0);
    let expected = (2.0f64 / (128.0 * 32.0 + 256.0 * 32.0)).sqrt();
    let std = w.std(true).double_value(&[]);
    assert!((std / expected - 1.0).abs() < 0.01, "xavier_normal std {std} vs {expected}");
}

#[test]
fn an_init_policy_applies_by_layer_kind() {
    let _rng = crate::torch_rng_lock();
    let model = resnet18(10);
    let policy = InitPolicy::new()
        .rule("BatchNorm2d", "weight", Init::Constant(0.5))
        .rule("Linear", "weight", Init::Constant(0.0))
        .rule("Linear", "bias", Init::Constant(2.0));
    assert_eq!(policy.apply(&model), 20 + 2);
    assert_eq!(model.bn1.weight.as_ref().unwrap().mean(Kind::Float).double_value(&[]), 0.5);
    let y = model.forward_t(&Tensor::ones([1, 3, 32, 32], (Kind::Float, Device::Cpu)), false);
    assert!(y.equal(&Tensor::full([1, 10], 2.0, (Kind::Float, Device::Cpu))));
}

#[test]
fn state_dict_loading_reports_like_pytorch_and_never_half_loads() {
    let _rng = crate::torch_rng_lock();
    let src = resnet18(1000);
    let mut dst = resnet18(1000);
    dst.replace_fc(3);
    let before = dst.conv1.first_conv().weight.copy();
    let err = load_state_dict(&dst, state_dict(&src), &LoadOptions::lenient()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("fc.weight (weights [1000, 512], model [3, 512])"), "{text}");
    assert!(dst.conv1.first_conv().weight.equal(&before), "nothing is copied when loading fails");
    let report = load_state_dict(&dst, state_dict(&src), &LoadOptions::strict().skip("fc.")).unwrap();
    assert_eq!(report.skipped, ["fc.weight", "fc.bias"]);
    assert!(report.missing.is_empty() && report.unexpected.is_empty());
    assert!(dst.conv1.first_conv().weight.equal(&src.conv1.first_conv().weight));

    let mut partial = state_dict(&src);
    partial.retain(|(k, _)| !k.starts_with("layer4."));
    partial.push(("extra.weight".into(), Tensor::zeros([1], (Kind::Float, Device::Cpu))));
    let err = load_state_dict(
        &src,
        partial.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect(),
        &LoadOptions::strict(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("missing key(s): layer4.0.conv1.weight")
            && err.contains("1 unexpected key(s): extra.weight"),
        "{err}"
    );
    let report = load_state_dict(&src, partial, &LoadOptions::lenient()).unwrap();
    assert_eq!(report.unexpected, ["extra.weight"]);
    assert!(report.missing.iter().all(|k| k.starts_with("layer4.")));
}

#[test]
fn safetensors_round_trip_keeps_every_tensor() {
    let _rng = crate::torch_rng_lock();
    let model = resnet18(5);
    {
        let _g = torchlight_tensor::no_grad();
        let _ = model.forward_t(&Tensor::ones([2, 3, 32, 32], (Kind::Float, Device::Cpu)), true);
    }
    let path = std::env::temp_dir().join(format!("tl-nn-rt-{}.safetensors", std::process::id()));
    save_safetensors(&model, &path).unwrap();
    let other = resnet18(5);
    load_weights(&other, &path, &LoadOptions::strict()).unwrap();
    for ((k, a), (_, b)) in state_dict(&model).into_iter().zip(state_dict(&other)) {
        assert!(a.equal(&b), "{k}");
    }
    assert_eq!(other.bn1.num_batches_tracked.as_ref().unwrap().int64_value(&[]), 1);
    std::fs::remove_file(&path).unwrap();
}
