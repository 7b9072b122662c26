//! `torchlight train --weights HUB_FOLDER`: the folder's `pretrained_cfg` is the run's
//! preprocessing, said on the way in, saved in config.toml and carried by the export.

use super::{s, temp, torchlight};

/// A Hub folder whose config.json says bicubic, crop_pct 0.95 and CLIP's mean/std (the
/// recipes crate's fixture `hub_cfg/bicubic.json`, the one its timm comparison uses): the
/// train output names those values as pretrained_cfg's, the run's config.toml holds them, and
/// the TorchScript sidecar and ONNX export describe that preprocessing (resize 33 for a 32 crop,
/// bicubic, the folder's mean and std); `--set data.interpolation=bilinear` wins over it.
#[test]
fn a_hub_folders_pretrained_cfg_reaches_config_toml_and_the_export() {
    let dir = temp("hub_cfg");
    super::ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "8"]);
    let data = s(&dir.join("data/target"));
    let hub = dir.join("resnet18.clip");
    std::fs::create_dir_all(&hub).unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../recipes/tests/fixtures/hub_cfg/bicubic.json");
    std::fs::copy(fixture, hub.join("config.json")).unwrap();
    torchlight_nn::save_safetensors(&torchlight_nn::resnet18(1000), hub.join("model.safetensors")).unwrap();
    let train = |out: &str, extra: &[&str]| {
        let runs = s(&dir.join(out));
        let mut args = vec!["train", "--data", &data, "--model", "resnet18", "--weights"];
        let hub = s(&hub);
        args.extend([hub.as_str(), "--epochs", "1", "--image-size", "32", "--batch-size", "4"]);
        args.extend(["--workers", "0", "--device", "cpu", "--out", &runs]);
        args.extend(extra);
        let done = torchlight(&args);
        let printed =
            format!("{}{}", String::from_utf8_lossy(&done.stdout), String::from_utf8_lossy(&done.stderr));
        assert!(done.status.success(), "{printed}");
        (printed, dir.join(out).join("exp_001"))
    };
    let (printed, run) = train("runs", &[]);
    let line = printed.lines().find(|l| l.contains("pretrained_cfg")).unwrap_or_else(|| panic!("{printed}"));
    assert!(
        line.contains("data.interpolation = \"bicubic\"")
            && line.contains("data.crop_pct = 0.95")
            && line.contains("data.mean = [0.48145466"),
        "{line}"
    );
    let saved = std::fs::read_to_string(run.join("config.toml")).unwrap();
    assert!(saved.contains("interpolation = \"bicubic\"") && saved.contains("crop_pct = 0.95"), "{saved}");

    let pt = dir.join("model.pt");
    super::ok(&["export", "--checkpoint", &s(&run), "--format", "torchscript", "--out", &s(&pt)]);
    let sidecar: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("model.json")).unwrap()).unwrap();
    assert_eq!(sidecar["resize_shorter_side"], 33, "{sidecar}");
    assert_eq!(sidecar["resize_interpolation"], "bicubic", "{sidecar}");
    let mean: Vec<f64> = serde_json::from_value(sidecar["mean"].clone()).unwrap();
    assert!((mean[0] - 0.48145466).abs() < 1e-7, "{sidecar}");
    let std: Vec<f64> = serde_json::from_value(sidecar["std"].clone()).unwrap();
    assert!((std[2] - 0.27577711).abs() < 1e-7, "{sidecar}");

    // The user's own value wins, and the line says it was kept.
    let (printed, run) = train("runs_own", &["--set", "data.interpolation=bilinear"]);
    assert!(printed.contains("the config's own data.interpolation kept"), "{printed}");
    let saved = std::fs::read_to_string(run.join("config.toml")).unwrap();
    assert!(saved.contains("interpolation = \"bilinear\"") && saved.contains("crop_pct = 0.95"), "{saved}");
    std::fs::remove_dir_all(&dir).unwrap();
}
