//! Straight from a Hub model folder to deployment: `torchlight export --weights DIR` (ONNX,
//! TorchScript, safetensors), `summary --weights` and `predict --weights`, with no training run.
//!
//! The folders are the timm fixtures of torchlight-nn (`crates/nn/tests/fixtures/timm`,
//! made by `make_timm.py` with timm 1.0.31): each case's `config.json` as timm's `save_for_hf`
//! wrote it, its weights rebuilt from the formula the script used (`hub_folder`), and timm's eval
//! logits for a stored input. onnxruntime and `torch.jit.load` in the reference Python run the
//! exported files on that input (batch 1 and 7) and must give timm's logits.

use super::hub_folder::{case, hub_folder, timm_fixtures};
use super::{fails, ok, s, temp};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use tch::Tensor;

/// `<name>-io.safetensors` for check_exports.py: timm's input and logits at batch 1 (the
/// first image) and batch 7 (the two images repeated).
fn write_io(checks: &Path, name: &str) {
    let fx: HashMap<String, Tensor> =
        Tensor::read_safetensors(timm_fixtures().join("timm_logits.safetensors"))
            .unwrap()
            .into_iter()
            .collect();
    let (x, y) = (&fx[&format!("input.{name}")], &fx[&format!("logits.{name}")]);
    let rows = Tensor::from_slice(&[0i64, 1, 0, 1, 0, 1, 0]);
    let tensors = vec![
        ("x1".to_string(), x.narrow(0, 0, 1).contiguous()),
        ("y1".to_string(), y.narrow(0, 0, 1).contiguous()),
        ("x7".to_string(), x.index_select(0, &rows)),
        ("y7".to_string(), y.index_select(0, &rows)),
    ];
    Tensor::write_safetensors(&tensors, checks.join(format!("{name}-io.safetensors"))).unwrap();
}

/// DeiT-Ti at 32 px and ResNet-18 (at 64 px through `--set data.image_size=64`) export
/// from their Hub folders to ONNX and TorchScript that onnxruntime and torch.jit run to timm
/// 1.0.31's logits (tolerance 1e-4: the logits are below 3, and the runtimes' kernels sum in
/// other orders than libtorch's), carrying the folder's preprocessing (input_size 32 from
/// `pretrained_cfg`, `floor(32 / 0.9)` = 35 bicubic, the folder's `label_names`); the
/// safetensors export holds Torchlight's keys. `summary` and `predict` read the same folder.
#[test]
fn a_hub_folder_exports_to_what_onnxruntime_and_torch_jit_run_as_timm() {
    let dir = temp("hub_deploy");
    let checks = dir.join("exports");
    std::fs::create_dir_all(&checks).unwrap();
    let names: Vec<String> = (0..10).map(|i| format!("class_{i}")).collect();
    let deit =
        hub_folder(&dir, &case("deit_tiny_patch16_224"), |c| c["label_names"] = serde_json::json!(names));
    let resnet = hub_folder(&dir, &case("resnet18"), |_| {});
    for (name, folder, extra) in
        [("deit_tiny_patch16_224", &deit, vec![]), ("resnet18", &resnet, vec!["--set", "data.image_size=64"])]
    {
        for (format, ext) in [("onnx", "onnx"), ("torchscript", "pt")] {
            let out = s(&checks.join(format!("{name}__hub.{ext}")));
            let folder = s(folder);
            let mut args = vec!["export", "--model", name, "--weights", &folder, "--format", format];
            args.extend(["--out", &out]);
            args.extend(extra.iter().copied());
            let printed = ok(&args);
            assert!(printed.contains(&format!("from Hub folder {folder} ({name})")), "{printed}");
        }
        write_io(&checks, name);
    }
    let out =
        torchlight_testing::run_reference_script("crates/export/tests/check_exports.py", &[&s(&checks)])
            .unwrap_or_else(|e| panic!("{e}"));
    let rows: Vec<&str> = out.lines().filter(|l| !l.starts_with("meta ")).collect();
    assert_eq!(rows.len(), 2 * 2 * 2, "{out}");
    for row in rows {
        let parts: Vec<&str> = row.split(' ').collect();
        let diff: f64 = parts[3].parse().unwrap();
        eprintln!("{row}");
        assert!(diff <= 1e-4, "{row}");
    }
    let meta = |file: &str, key: &str| -> String {
        let prefix = format!("meta {file} {key} ");
        out.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("{prefix} in {out}"))
            .to_string()
    };
    let deit_onnx = "deit_tiny_patch16_224__hub.onnx";
    assert_eq!(meta(deit_onnx, "resize_shorter_side"), "35");
    assert_eq!(meta(deit_onnx, "center_crop"), "[32, 32]");
    assert_eq!(meta(deit_onnx, "resize_interpolation"), "bicubic");
    assert!(meta(deit_onnx, "class_names").starts_with("[\"class_0\", \"class_1\""), "{out}");
    // ResNet-18's pretrained_cfg at the 64 px the command line asked for: its test_crop_pct 1.0
    // (timm's use_test_size keeps a given img_size but takes test_crop_pct).
    assert_eq!(meta("resnet18__hub.onnx", "resize_shorter_side"), "64");
    assert_eq!(meta("resnet18__hub.onnx", "center_crop"), "[64, 64]");
    let sidecar: Value = serde_json::from_str(
        &std::fs::read_to_string(checks.join("deit_tiny_patch16_224__hub.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        (sidecar["image_size"].clone(), sidecar["resize_shorter_side"].clone()),
        (32.into(), 35.into())
    );
    assert_eq!(sidecar["classes"][9], "class_9");

    // The weights alone, under Torchlight's (torchvision's) keys.
    let st = dir.join("deit.safetensors");
    ok(&["export", "--weights", &s(&deit), "--format", "safetensors", "--out", &s(&st)]);
    let saved: HashMap<String, Tensor> = Tensor::read_safetensors(&st).unwrap().into_iter().collect();
    assert_eq!(saved["heads.head.weight"].size(), [10, 192]);
    assert_eq!(saved["encoder.pos_embedding"].size(), [1, 5, 192]);

    // summary: what loaded, the head, the preprocessing.
    let summary = ok(&["summary", "--weights", &s(&deit)]);
    assert!(summary.contains("every tensor loaded"), "{summary}");
    assert!(
        summary.contains("head: heads.head.weight [10, 192], heads.head.bias [10] (10 classes: class_0"),
        "{summary}"
    );
    assert!(summary.contains("input: [N, 3, 32, 32]"), "{summary}");
    assert!(summary.contains("resize the shorter side to 35 (bicubic"), "{summary}");
    // Left to its pretrained_cfg, ResNet-18 evaluates at test_input_size 288, test_crop_pct 1.0.
    let summary_resnet = ok(&["summary", "--weights", &s(&resnet)]);
    assert!(
        summary_resnet.contains("input: [N, 3, 288, 288] (data.eval_image_size 288; data.image_size 224"),
        "{summary_resnet}"
    );
    assert!(summary_resnet.contains("resize the shorter side to 288 (bicubic"), "{summary_resnet}");
    let count = summary.lines().find(|l| l.contains(" parameters (")).unwrap();
    assert!(count.starts_with("deit_tiny_patch16_224 from Hub folder"), "{count}");

    // predict: the folder's class names, the same top class as its TorchScript export.
    let image = dir.join("picture.png");
    let pixels: Vec<u8> = (0..40 * 30 * 3).map(|i| (i * 37 % 251) as u8).collect();
    torchlight_recipes::image::save_png(&torchlight_vision::Image::new(40, 30, 3, pixels), &image).unwrap();
    let hub: Value =
        serde_json::from_str(&ok(&["predict", "--weights", &s(&deit), &s(&image), "--json"])).unwrap();
    let pt = s(&checks.join("deit_tiny_patch16_224__hub.pt"));
    let script: Value =
        serde_json::from_str(&ok(&["predict", "--checkpoint", &pt, &s(&image), "--json"])).unwrap();
    assert!(hub[0]["top"][0]["class"].as_str().unwrap().starts_with("class_"), "{hub}");
    assert_eq!(hub[0]["top"][0]["class"], script[0]["top"][0]["class"], "{hub} vs {script}");
    let (a, b) = (
        hub[0]["top"][0]["probability"].as_f64().unwrap(),
        script[0]["top"][0]["probability"].as_f64().unwrap(),
    );
    assert!((a - b).abs() < 1e-5, "{a} vs {b}");

    // Another architecture than the folder's is named, as are both sides of it.
    let err = fails(&[
        "export",
        "--model",
        "resnet50",
        "--weights",
        &s(&deit),
        "--format",
        "onnx",
        "--out",
        "x.onnx",
    ]);
    assert!(err.contains("deit_tiny_patch16_224") && err.contains("resnet50"), "{err}");
    let err = fails(&["export", "--format", "onnx", "--out", "x.onnx"]);
    assert!(err.contains("required arguments were not provided"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--model`'s help lists each module once, timm's names as its aliases, and an alias names a
/// Hub folder's model: `summary --model deit_small_patch16_224` loads a `vit_small_patch16_224`
/// folder (ViT-S/16 at 32 px: the DeiT-Ti case's keys at ViT-S widths, 384/1152/1536, formula
/// weights) strictly, while another module's name (`vit_tiny_patch16_224`) is refused naming
/// both; `train --model vit_tiny_patch16_224` fine-tunes from a `deit_tiny_patch16_224` folder
/// with a new head.
#[test]
fn model_help_shows_aliases_and_an_alias_loads_the_hub_folder_of_its_module() {
    for command in ["train", "summary"] {
        let help = ok(&[command, "--help"]);
        let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
        for listed in [
            "vit_s_16 (alias vit_small_patch16_224, deit_small_patch16_224, vit_small_patch16_384)",
            "vit_b_16 (alias vit_base_patch16_224, deit_base_patch16_224, vit_base_patch16_384, deit_base_patch16_384)",
            "vit_tiny_patch16_224 (alias deit_tiny_patch16_224, vit_tiny_patch16_384)",
            "mobilenetv3_large_100",
            "convnext_base",
            "resnet18d",
            "convnext_small",
        ] {
            assert!(flat.contains(listed), "{command} --help: {listed} in\n{help}");
        }
        assert_eq!(
            flat.matches("deit_small_patch16_224").count(),
            1,
            "{command} --help lists it once: {help}"
        );
    }

    let dir = temp("hub_alias");
    let mut small = case("deit_tiny_patch16_224");
    small["name"] = "vit_small_patch16_224".into();
    let widen = |d: &Value| match d.as_i64().unwrap() {
        192 => 384,
        576 => 1152,
        768 => 1536,
        d => d,
    };
    for key in small["keys"].as_array_mut().unwrap() {
        let shape: Vec<i64> = key[1].as_array().unwrap().iter().map(widen).collect();
        key[1] = serde_json::json!(shape);
    }
    let vit_s = hub_folder(&dir, &small, |c| {
        c["architecture"] = "vit_small_patch16_224".into();
        c["num_features"] = 384.into();
    });
    let printed = ok(&["summary", "--model", "deit_small_patch16_224", "--weights", &s(&vit_s)]);
    assert!(printed.contains("every tensor loaded"), "{printed}");
    assert!(printed.contains("head: heads.head.weight [10, 384]"), "{printed}");
    let count = printed.lines().find(|l| l.contains(" parameters (")).unwrap();
    assert!(count.starts_with("deit_small_patch16_224 from Hub folder"), "{count}");
    let err = fails(&["summary", "--model", "vit_tiny_patch16_224", "--weights", &s(&vit_s)]);
    assert!(err.contains("vit_small_patch16_224") && err.contains("vit_tiny_patch16_224"), "{err}");

    // Fine-tuning through train: the folder's head (timm's `head`, 10 classes) replaced by one
    // for the data's 3 classes.
    let deit = hub_folder(&dir, &case("deit_tiny_patch16_224"), |_| {});
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "4"]);
    let runs = dir.join("runs");
    let args = [
        "train",
        "--data",
        &s(&dir.join("data/target")),
        "--model",
        "vit_tiny_patch16_224",
        "--weights",
        &s(&deit),
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--workers",
        "0",
        "--device",
        "cpu",
        "--out",
        &s(&runs),
    ];
    ok(&args);
    let saved = std::fs::read_to_string(runs.join("exp_001/config.toml")).unwrap();
    assert!(
        saved.contains("name = \"vit_tiny_patch16_224\"") && saved.contains("image_size = 32"),
        "{saved}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
