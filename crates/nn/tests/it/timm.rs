//! timm 1.0.31's models in Hub folders: `tests/fixtures/timm/make_timm.py` (run by hand with `.pyref/bin/python`)
//! records each model's `state_dict` keys and shapes, the `config.json` timm's `save_for_hf`
//! writes, an input and timm's eval logits for weights from a formula both sides compute with
//! the same libtorch op. Here the weights are rebuilt, written as `model.safetensors` beside
//! that `config.json`, and the folder loads strictly, through the timm key mapping, into the
//! registry's architecture of the same name, which gives timm's logits.

use crate::{assert_close, fixture, load};
use serde_json::Value;
use std::path::PathBuf;
use tch::{Kind, Tensor};
use torchlight_nn::*;

/// What `formula_weights` in make_timm.py computes for key number `index`.
fn formula_tensor(
    index: usize,
    key: &str,
    shape: &[i64],
    dtype: &str,
    gain: f64,
    layer_scale: f64,
) -> Tensor {
    let n: i64 = shape.iter().product();
    if key.ends_with("num_batches_tracked") {
        assert_eq!(dtype, "torch.int64");
        return Tensor::zeros(shape, (Kind::Int64, tch::Device::Cpu));
    }
    let base = (Tensor::arange(n, (Kind::Double, tch::Device::Cpu)) * 2.399963 + 0.7 * index as f64).sin();
    let v = if key.ends_with("running_var") {
        base * 0.5 + 1.0
    } else if key.ends_with("running_mean") {
        base * 0.1
    } else if shape.len() >= 2 {
        let v = base / ((n / shape[0]) as f64).sqrt();
        if gain == 1.0 {
            v
        } else {
            v * gain
        }
    } else if key.ends_with("gamma") && layer_scale != 1.0 {
        (base * 0.2 + 1.0) * layer_scale
    } else if key.ends_with("weight") || key.ends_with("gamma") {
        base * 0.2 + 1.0
    } else {
        base * 0.1
    };
    assert_eq!(dtype, "torch.float32", "{key}");
    v.to_kind(Kind::Float).reshape(shape)
}

fn cases() -> Vec<Value> {
    let text = std::fs::read_to_string(fixture("timm/timm.json")).unwrap();
    let root: Value = serde_json::from_str(&text).unwrap();
    root["cases"].as_array().unwrap().clone()
}

fn case(name: &str) -> Value {
    cases().into_iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no case {name}"))
}

fn timm_weights(case: &Value) -> Vec<(String, Tensor)> {
    let gain = case["gain"].as_f64().unwrap_or(1.0);
    let layer_scale = case["layer_scale"].as_f64().unwrap_or(1.0);
    case["keys"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let key = k[0].as_str().unwrap();
            let shape: Vec<i64> = k[1].as_array().unwrap().iter().map(|d| d.as_i64().unwrap()).collect();
            (key.to_string(), formula_tensor(i, key, &shape, k[2].as_str().unwrap(), gain, layer_scale))
        })
        .collect()
}

/// A fresh folder under the temp dir for `what`.
fn scratch(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("torchlight-timm-{}-{what}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A Hub folder holding `weights` as `model.safetensors` and the case's `config.json`.
fn hub_folder(case: &Value, weights: &[(String, Tensor)], what: &str) -> PathBuf {
    let dir = scratch(what);
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&case["config"]).unwrap()).unwrap();
    write_safetensors(weights, dir.join("model.safetensors")).unwrap();
    dir
}

fn model_for(case: &Value) -> Box<dyn Module> {
    let arch = architecture(case["architecture"].as_str().unwrap()).expect("a registered timm name");
    let spec = ModelSpec::new(10, case["image_size"].as_i64().unwrap());
    arch.build(spec, LayerOptions::default().skip_init()).unwrap()
}

/// The case's folder loads strictly, every timm key used, and gives timm's logits (1e-4).
fn check_case(name: &str) -> f64 {
    let case = case(name);
    let weights = timm_weights(&case);
    let dir = hub_folder(&case, &weights, name);
    let folder = read_hub_folder(&dir).unwrap();
    assert_eq!(folder.config.architecture, case["architecture"].as_str().unwrap());
    assert_eq!(folder.config.num_classes, Some(10));
    assert!(folder.weights.ends_with("model.safetensors"));
    let model = model_for(&case);
    let report = load_weights(model.as_ref(), &dir, &LoadOptions::strict()).unwrap();
    assert_eq!(report.loaded.len(), weights.len(), "{name}: every timm key is used");
    assert!(report.missing.is_empty() && report.unexpected.is_empty());
    let fx = load(fixture("timm/timm_logits.safetensors"));
    let logits = tch::no_grad(|| model.forward_t(&input(&case, &fx), false));
    // 1e-4, plus 2e-6 of the logit (17 float32 ulps): under the formula weights the bottleneck
    // ResNets' logits reach 180 (resnet50d) and 280 (resnet50), where fp32 summation order
    // alone (libtorch's thread count and CPU kernels) moves them by up to 1.2e-4 (resnet50d:
    // 1.07e-4 with AVX2/AVX-512, 1.22e-4 with ATEN_CPU_CAPABILITY=default, 0 single-threaded as
    // the fixture was made; resnet50: 2.4e-4 single-threaded). The other cases' logits are
    // below 3, where the bound is 1e-4.
    let diff = assert_close(name, &logits, &fx[&format!("logits.{name}")], 2e-6, 1e-4);
    eprintln!("{name}: max |logits - timm| = {diff:.2e}");
    let _ = std::fs::remove_dir_all(&dir);
    diff
}

/// The case's input: stored as `input.NAME`, or, for `input_formula` cases, make_timm.py's
/// `formula(INPUT_INDEX, [2, 3, side, side])` in float32.
fn input(case: &Value, fx: &std::collections::HashMap<String, Tensor>) -> Tensor {
    let side = case["image_size"].as_i64().unwrap();
    if case["input_formula"].as_bool().unwrap_or(false) {
        let n = 2 * 3 * side * side;
        let base = (Tensor::arange(n, (Kind::Double, tch::Device::Cpu)) * 2.399963 + 0.7 * 1000.0).sin();
        base.to_kind(Kind::Float).reshape([2, 3, side, side])
    } else {
        fx[&format!("input.{}", case["name"].as_str().unwrap())].shallow_clone()
    }
}

#[test]
fn timm_resnet18_folder_gives_timms_logits() {
    check_case("resnet18");
}

#[test]
fn timm_resnet50_folder_gives_timms_logits() {
    check_case("resnet50");
}

/// timm's `d` variants (deep stem `conv1.0`..`conv1.6`, average-pool shortcut
/// `downsample.0`..`downsample.2`) load timm's `state_dict` strictly, keys as timm has them.
#[test]
fn timm_resnet18d_folder_gives_timms_logits() {
    check_case("resnet18d");
}

#[test]
fn timm_resnet50d_folder_gives_timms_logits() {
    check_case("resnet50d");
}

#[test]
fn timm_vit_tiny_folder_gives_timms_logits() {
    check_case("vit_tiny_patch16_224");
}

#[test]
fn timm_deit_tiny_folder_gives_timms_logits() {
    check_case("deit_tiny_patch16_224");
}

#[test]
fn timm_convnext_tiny_folder_gives_timms_logits() {
    check_case("convnext_tiny");
}

/// timm's EfficientNet layout (`conv_stem`, `blocks.S.M.{conv_dw, conv_pw, se, conv_pwl}`,
/// `conv_head`, `bn2`, `classifier`) maps onto the registry's (torchvision's) EfficientNet,
/// which timm's `efficientnet_b*` computes alike (same padding, BatchNorm eps 1e-5).
#[test]
fn timm_efficientnet_b0_folder_gives_timms_logits() {
    check_case("efficientnet_b0");
}

#[test]
fn timm_efficientnet_b1_folder_gives_timms_logits() {
    check_case("efficientnet_b1");
}

#[test]
fn timm_efficientnet_b2_folder_gives_timms_logits() {
    check_case("efficientnet_b2");
}

#[test]
fn timm_efficientnet_b3_folder_gives_timms_logits() {
    check_case("efficientnet_b3");
}

/// timm's MobileNetV3 layout (the blocks numbered per stage, `conv_head` a 1x1 convolution on
/// the pooled features) maps onto torchvision's module built with timm's BatchNorm eps 1e-5.
#[test]
fn timm_mobilenetv3_large_100_folder_gives_timms_logits() {
    check_case("mobilenetv3_large_100");
}

#[test]
fn timm_mobilenetv3_small_100_folder_gives_timms_logits() {
    check_case("mobilenetv3_small_100");
}

/// ConvNeXt-B: timm's ConvNeXt keys mapped onto torchvision's `convnext_base`.
#[test]
fn timm_convnext_base_folder_gives_timms_logits() {
    check_case("convnext_base");
}

/// A `_384` ViT folder whose weights were made at 64 pixels (a 4x4 patch grid) loads into a
/// model built at 48 (3x3) and at 80 (5x5): the position embedding is resampled as timm's
/// `checkpoint_filter_fn` resamples it (`resample_abs_pos_embed`: bicubic with antialias,
/// Pillow's cubic, down and up), compared directly (1e-6) and through the logits (1e-4).
#[test]
fn timm_vit_384_folder_at_another_size_resamples_the_position_embedding() {
    let fx = load(fixture("timm/timm_logits.safetensors"));
    for (name, from, to) in [("vit_tiny_patch16_384_at_48", 4, 3), ("vit_tiny_patch16_384_at_80", 4, 5)] {
        check_case(name);
        let case = case(name);
        let dir = hub_folder(&case, &timm_weights(&case), name);
        let model = model_for(&case);
        let report = load_weights(model.as_ref(), &dir, &LoadOptions::strict()).unwrap();
        let line = format!(
            "timm ViT position embedding resampled {from}x{from} -> {to}x{to} (bicubic, timm's resample_abs_pos_embed)"
        );
        assert!(report.rewrites.contains(&line), "{:?}", report.rewrites);
        let ours =
            state_dict(model.as_ref()).into_iter().find(|(k, _)| k == "encoder.pos_embedding").unwrap().1;
        let diff = assert_close(name, &ours, &fx[&format!("pos_embed.{name}")], 0.0, 1e-6);
        eprintln!("{name}: max |pos_embed - timm's resampled| = {diff:.2e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn timm_config_json_reads_timms_fields() {
    let case = case("resnet18");
    let dir = hub_folder(&case, &[], "config");
    let folder = read_hub_folder(&dir).unwrap();
    let cfg = folder.config.pretrained_cfg.unwrap();
    assert_eq!(cfg.input_size, Some([3, 224, 224]));
    assert_eq!(cfg.interpolation.as_deref(), Some("bicubic"));
    assert_eq!(cfg.crop_pct, Some(0.95));
    assert_eq!(cfg.crop_mode.as_deref(), Some("center"));
    assert_eq!(cfg.mean, Some(vec![0.485, 0.456, 0.406]));
    assert_eq!(cfg.std, Some(vec![0.229, 0.224, 0.225]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn timm_folder_errors_name_the_file() {
    let case = case("vit_tiny_patch16_224");
    let mut weights = timm_weights(&case);
    // No weights file: both names in the error.
    let dir = hub_folder(&case, &weights, "errors");
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let e = read_weights(&dir).unwrap_err().to_string();
    assert!(e.contains("model.safetensors") && e.contains("pytorch_model.bin"), "{e}");
    // No config.json.
    let e = read_hub_folder(scratch("empty")).unwrap_err().to_string();
    assert!(e.contains("config.json"), "{e}");
    // A timm key outside the mapping (fc_norm, of a pooled ViT) is named by the strict load.
    weights.push(("fc_norm.weight".to_string(), Tensor::ones([192], (Kind::Float, tch::Device::Cpu))));
    write_safetensors(&weights, dir.join("model.safetensors")).unwrap();
    let model = model_for(&case);
    let e = load_weights(model.as_ref(), &dir, &LoadOptions::strict()).unwrap_err().to_string();
    assert!(e.contains("fc_norm.weight"), "{e}");
    // A 224-pixel position embedding (14x14) loads into the 64-pixel model, resampled to 4x4;
    // one that is no square grid of patches (195 of them) or of another width is named.
    weights.pop();
    let set_pos = |weights: &mut Vec<(String, Tensor)>, shape: [i64; 3]| {
        let pos = weights.iter_mut().find(|(k, _)| k == "pos_embed").unwrap();
        pos.1 = Tensor::zeros(shape, (Kind::Float, tch::Device::Cpu));
        write_safetensors(weights, dir.join("model.safetensors")).unwrap();
    };
    set_pos(&mut weights, [1, 197, 192]);
    let report = load_weights(model.as_ref(), &dir, &LoadOptions::strict()).unwrap();
    assert!(report.rewrites.iter().any(|r| r.contains("resampled 14x14 -> 4x4")), "{:?}", report.rewrites);
    for shape in [[1, 196, 192], [1, 197, 96]] {
        set_pos(&mut weights, shape);
        let e = load_weights(model.as_ref(), &dir, &LoadOptions::strict()).unwrap_err().to_string();
        assert!(e.contains("encoder.pos_embedding"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A folder with `pytorch_model.bin` only (written by `torch.save` at test time,
/// `make_timm_bin.py`) loads through the safe pickle reader and gives timm's logits.
#[test]
fn timm_folder_with_pytorch_model_bin_gives_timms_logits() {
    let name = "deit_tiny_patch16_224";
    let dir =
        torchlight_testing::generated_fixture("crates/nn/tests/fixtures/timm/make_timm_bin.py", &[name])
            .unwrap();
    let folder = read_hub_folder(&dir).unwrap();
    assert!(folder.weights.ends_with("pytorch_model.bin"), "{}", folder.weights.display());
    let case = case(name);
    let model = model_for(&case);
    load_weights(model.as_ref(), &dir, &LoadOptions::strict()).unwrap();
    let fx = load(fixture("timm/timm_logits.safetensors"));
    let logits = tch::no_grad(|| model.forward_t(&fx[&format!("input.{name}")], false));
    let diff = assert_close(name, &logits, &fx[&format!("logits.{name}")], 0.0, 1e-4);
    eprintln!("{name} (pytorch_model.bin): max |logits - timm| = {diff:.2e}");
}

/// A `config.json` that starts with a UTF-8 byte-order mark reads as Python's `json.loads`
/// reads its bytes; a `config.json` that is a FIFO is refused instead of blocking.
#[test]
fn a_config_json_with_a_bom_reads_and_a_fifo_is_refused() {
    let case = case("resnet18");
    let dir = hub_folder(&case, &timm_weights(&case), "bom");
    let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    std::fs::write(dir.join("config.json"), format!("\u{feff}{text}")).unwrap();
    let folder = read_hub_folder(&dir).unwrap();
    assert_eq!(folder.config.architecture, "resnet18");
    #[cfg(unix)]
    {
        std::fs::remove_file(dir.join("config.json")).unwrap();
        assert!(std::process::Command::new("mkfifo")
            .arg(dir.join("config.json"))
            .status()
            .unwrap()
            .success());
        let e = read_hub_folder(&dir).unwrap_err().to_string();
        assert!(e.contains("config.json") && e.contains("FIFO"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `model.safetensors` symlink to nothing (a Hub cache whose blob is gone) beside a
/// `pytorch_model.bin` is an error naming it, not a silent load of the `.bin`.
#[cfg(unix)]
#[test]
fn a_dangling_model_safetensors_is_an_error_not_a_fallback() {
    let case = case("resnet18");
    let weights = timm_weights(&case);
    let dir = hub_folder(&case, &weights, "dangling");
    std::fs::rename(dir.join("model.safetensors"), dir.join("pytorch_model.bin")).unwrap();
    std::os::unix::fs::symlink(dir.join("blobs/gone"), dir.join("model.safetensors")).unwrap();
    for e in [read_weights(&dir).unwrap_err().to_string(), read_hub_folder(&dir).unwrap_err().to_string()] {
        assert!(e.contains("model.safetensors") && e.contains("does not exist"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Hub folder of an architecture whose timm weights Torchlight does not load (a registry
/// name that is not timm's, `mobilenet_v3_large` with torchvision's keys, and names the
/// registry lacks) is refused in one line naming it and listing the supported ones,
/// before its weights file is read (here it is not even safetensors). Every supported name is
/// a registry name.
#[test]
fn an_unsupported_timm_architecture_is_one_line_before_any_load() {
    let case = case("resnet18");
    let dir = scratch("unsupported");
    std::fs::write(dir.join("model.safetensors"), b"not safetensors").unwrap();
    let model = model_for(&case);
    for name in ["mobilenet_v3_large", "tf_efficientnet_b0.in1k", "mobilenetv3_large_075", "resnet26d"] {
        let base = name.split('.').next().unwrap();
        let mut config = case["config"].clone();
        config["architecture"] = Value::from(name);
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        let e = load_weights(model.as_ref(), &dir, &LoadOptions::strict()).unwrap_err().to_string();
        assert!(!e.contains('\n'), "one line: {e}");
        assert!(e.contains(&format!("`{base}` is not a supported architecture")), "{e}");
        assert!(e.contains("resnet18, ") && e.contains("vit_tiny_patch16_224"), "lists the supported: {e}");
        assert!(!e.contains("model.safetensors") && !e.contains("conv1"), "before any load: {e}");
        assert_eq!(e.contains("torchvision's keys"), base == "mobilenet_v3_large", "{e}");
        assert_eq!(check_timm_architecture(name).unwrap_err().to_string(), e);
    }
    for name in TIMM_ARCHITECTURES {
        check_timm_architecture(name).unwrap();
        assert!(architecture(name).is_some(), "{name} is registered");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
