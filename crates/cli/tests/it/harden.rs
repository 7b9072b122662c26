//! The command line under hostile input and odd use: several images with bad ones among
//! them, a closed pipe, a decompression bomb, files that are not what they claim, folders
//! that do not exist, and what a deployer reads from an exported file.

use super::{fails, ok, s, temp, torchlight};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use torchlight_recipes::synthetic::{write_image_folder, Shape, SyntheticSpec};
use torchlight_recipes::{ModelCard, TrainConfig};

/// An untrained 3-class resnet18 checkpoint (32-pixel input) as `train` would leave it, and a
/// small `train/ val/` ImageFolder of its classes: what the CLI needs without training.
pub(crate) fn tiny_run(dir: &Path) -> (PathBuf, PathBuf) {
    let data = dir.join("data");
    let spec = SyntheticSpec {
        shapes: vec![Shape::Circle, Shape::Cross, Shape::Star],
        per_class: [3, 2, 0],
        size_range: (40, 56),
        seed: 5,
    };
    write_image_folder(&data, &spec).unwrap();
    let mut config = TrainConfig::default();
    config.data.image_size = Some(32);
    config.train.device = "cpu".into();
    // Initialised as train would (ModelCard::build_model leaves the tensors for a restore).
    let model = torchlight_recipes::build_model(&config, 3, tch::Device::Cpu).unwrap();
    let classes = vec!["circle".into(), "cross".into(), "star".into()];
    let card = ModelCard { config, classes, schedule_start: 0, tokenizer: None, temperature: None };
    let checkpoint = dir.join("checkpoint");
    let snapshot = torchlight_checkpoint::Snapshot {
        config: serde_json::to_value(&card).unwrap(),
        ..torchlight_checkpoint::Snapshot::model(model.as_ref())
    };
    torchlight_checkpoint::save(&checkpoint, &snapshot).unwrap();
    (checkpoint, data)
}

pub(crate) fn images(data: &Path) -> Vec<String> {
    let mut found: Vec<String> = ["circle", "cross", "star"]
        .iter()
        .flat_map(|c| std::fs::read_dir(data.join("train").join(c)).unwrap())
        .map(|e| s(&e.unwrap().path()))
        .collect();
    found.sort();
    found
}

#[test]
fn predict_reports_every_image_and_fails_at_the_end_if_any_failed() {
    let dir = temp("predict-many");
    let (checkpoint, data) = tiny_run(&dir);
    let good = images(&data);
    std::fs::write(dir.join("broken.jpg"), b"\xff\xd8 not really a jpeg").unwrap();
    let missing = s(&dir.join("missing.png"));
    let args = [
        "predict",
        "--checkpoint",
        &s(&checkpoint),
        "--device",
        "cpu",
        &good[0],
        &s(&dir.join("broken.jpg")),
        &missing,
        &good[1],
    ];
    let out = torchlight(&args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "a failed image makes the exit status non-zero");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for image in [&good[0], &good[1]] {
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!("{image}: "))),
            "{image} is reported:\n{stdout}"
        );
    }
    assert!(stderr.contains("broken.jpg") && stderr.contains("missing.png"), "{stderr}");
    assert!(stderr.contains("2 of 4 images could not be classified"), "{stderr}");
    // The OS error is said once, not once per layer of the error.
    let line = stderr.lines().find(|l| l.contains("missing.png")).unwrap();
    assert_eq!(line.matches("No such file or directory").count(), 1, "{line}");

    // With --json every image has an entry: its classes, or its error.
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let out = torchlight(&json_args);
    assert!(!out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entries = json.as_array().unwrap();
    assert_eq!(entries.len(), 4);
    assert!(entries[0]["top"].is_array() && entries[3]["top"].is_array());
    assert!(entries[1]["error"].as_str().unwrap().contains("broken.jpg"));
    assert!(entries[2]["error"].as_str().unwrap().contains("missing.png"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_closed_pipe_ends_predict_quietly() {
    let dir = temp("pipe");
    let (checkpoint, data) = tiny_run(&dir);
    let mut args = vec![
        "predict".to_string(),
        "--checkpoint".into(),
        s(&checkpoint),
        "--device".into(),
        "cpu".into(),
        "--json".into(),
    ];
    args.extend(images(&data));
    let mut child = Command::new(env!("CARGO_BIN_EXE_torchlight"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `| head -0`: the reader is gone before the command writes (it loads libtorch and the
    // model first).
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{stderr}");
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    // A command that still prints with println! (demo-data) is caught by the panic hook.
    let mut child = Command::new(env!("CARGO_BIN_EXE_torchlight"))
        .args(["demo-data", "--out", &s(&dir.join("demo")), "--per-class", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !stderr.contains("panicked"), "{:?}: {stderr}", out.status);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_decompression_bomb_is_refused_quickly_by_predict() {
    let dir = temp("bomb");
    let (checkpoint, data) = tiny_run(&dir);
    let bomb = dir.join("bomb.png");
    std::fs::write(&bomb, bomb_png(40_000, 40_000)).unwrap();
    let out = torchlight(&["predict", "--checkpoint", &s(&checkpoint), "--device", "cpu", &s(&bomb)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && !stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("bomb.png") && stderr.contains("40000x40000"), "{stderr}");
    assert!(stderr.contains("1 of 1 images"), "{stderr}");
    // The limit is a flag: a real image over a tiny limit is refused, under it accepted.
    let image = &images(&data)[0];
    let err = torchlight(&[
        "predict",
        "--checkpoint",
        &s(&checkpoint),
        "--device",
        "cpu",
        "--max-image-pixels",
        "100",
        image,
    ]);
    assert!(String::from_utf8_lossy(&err.stderr).contains("more than the limit of 100"));
    ok(&["predict", "--checkpoint", &s(&checkpoint), "--device", "cpu", "--max-image-pixels", "0", image]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A PNG header declaring `width x height` RGB pixels, with one row of data.
fn bomb_png(width: u32, height: u32) -> Vec<u8> {
    fn crc(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            }
        }
        !c
    }
    fn chunk(out: &mut Vec<u8>, tag: &[u8], data: &[u8]) {
        out.extend((data.len() as u32).to_be_bytes());
        let body = [tag, data].concat();
        out.extend(&body);
        out.extend(crc(&body).to_be_bytes());
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut out, b"IHDR", &[&width.to_be_bytes()[..], &height.to_be_bytes(), &[8, 2, 0, 0, 0]].concat());
    chunk(
        &mut out,
        b"IDAT",
        &[0x78, 0x01, 0x01, 16, 0, !16u8, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    );
    chunk(&mut out, b"IEND", b"");
    out
}

#[test]
fn a_file_that_is_not_torchscript_is_one_line() {
    let dir = temp("not-jit");
    let (_, data) = tiny_run(&dir);
    let state_dict = dir.join("weights.pt");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../nn/tests/fixtures/pth_cases/linear.pth"),
        &state_dict,
    )
    .unwrap();
    let out = torchlight(&["predict", "--checkpoint", &s(&state_dict), "--device", "cpu", &images(&data)[0]]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.lines().count(), 1, "one line, no C++ stack:\n{stderr}");
    assert!(stderr.contains("weights.pt") && stderr.contains("not a TorchScript module"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn messages_say_what_is_wrong_once_and_name_what_the_user_gave() {
    let dir = temp("messages");
    let (checkpoint, data) = tiny_run(&dir);
    // A split root without test/: say so, and what to pass instead.
    let err = fails(&["eval", "--checkpoint", &s(&checkpoint), "--data", &s(&data), "--device", "cpu"]);
    assert!(err.contains("no test/") && err.contains(&s(&data.join("val"))), "{err}");
    assert!(!err.contains("do not match"), "{err}");
    // Export into a missing folder names the file asked for, not a temporary one.
    for (format, file) in [("onnx", "m.onnx"), ("torchscript", "m.pt"), ("safetensors", "m.safetensors")] {
        let out = dir.join("nowhere").join(file);
        let err = fails(&["export", "--checkpoint", &s(&checkpoint), "--format", format, "--out", &s(&out)]);
        assert!(
            err.contains(&s(&out)) && err.contains("does not exist") && !err.contains(".tmp"),
            "{format}: {err}"
        );
    }
    // A weights file that does not exist: the OS's words once.
    let err = fails(&[
        "train",
        "--data",
        &s(&data),
        "--weights",
        &s(&dir.join("absent.pth")),
        "--epochs",
        "1",
        "--out",
        &s(&dir.join("runs")),
    ]);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    // Values the parser refused for the wrong reason, or accepted though useless.
    let err = fails(&["summary", "--num-classes", "0"]);
    assert!(err.contains("--num-classes") && err.contains('0'), "{err}");
    let err = fails(&["train", "--data", &s(&data), "--lr", "-0.1", "--out", &s(&dir.join("runs"))]);
    assert!(err.contains("optim.lr") && err.contains("-0.1"), "a negative lr reaches validation: {err}");
    let err = fails(&["train", "--data", &s(&data), "--lr=-0.1", "--out", &s(&dir.join("runs"))]);
    assert!(err.contains("optim.lr"), "{err}");
    // The help lists every export format.
    let help = ok(&["--help"]);
    let line = help.lines().find(|l| l.trim_start().starts_with("export")).unwrap();
    assert!(line.contains("safetensors"), "{line}");
    let help = ok(&["export", "--help"]);
    assert!(help.contains("onnx") && help.contains("torchscript") && help.contains("safetensors"), "{help}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A deployer with the ONNX file alone: rebuilding the preprocessing from its metadata with
/// torchvision gives exactly the inputs Torchlight's evaluation transform makes (tolerance 0),
/// and onnxruntime on them `torchlight predict`'s probabilities (tolerance 1e-3: an untrained
/// network through onnxruntime's kernels and libtorch's).
#[test]
fn the_onnx_metadata_is_enough_to_preprocess_like_torchlight() {
    use torchlight_vision::Transform;
    let dir = temp("deploy");
    let (checkpoint, data) = tiny_run(&dir);
    let onnx = dir.join("model.onnx");
    ok(&["export", "--checkpoint", &s(&checkpoint), "--format", "onnx", "--out", &s(&onnx)]);
    // PNG only: the test must hold in every build, and the zune-jpeg build (vision without its
    // default `libjpeg-turbo` feature) decodes JPEGs a few units off PIL's bytes.
    let pictures: Vec<String> = images(&data).into_iter().filter(|p| p.ends_with(".png")).collect();
    assert_eq!(pictures.len(), 3);
    let mut args = vec![s(&onnx), s(&dir)];
    args.extend(pictures.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let theirs = torchlight_testing::run_reference_script("crates/cli/tests/deploy_onnx.py", &args).unwrap();
    let inputs: std::collections::HashMap<String, tch::Tensor> =
        tch::Tensor::read_safetensors(dir.join("inputs.safetensors")).unwrap().into_iter().collect();
    let transform = torchlight_vision::EvalPreprocessing::classification(32).transform();
    for (i, picture) in pictures.iter().enumerate() {
        let image = torchlight_vision::decode_file(picture).unwrap();
        let mut rng = torchlight_tensor::seed::rng_from_seed(0);
        let ours = transform
            .apply(torchlight_vision::Sample::Image(image), &mut rng)
            .unwrap()
            .into_tensor()
            .unwrap();
        let want = Vec::<f32>::try_from(&inputs[&i.to_string()].flatten(0, -1)).unwrap();
        let differ = ours.data.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(
            (ours.data.len(), differ),
            (want.len(), 0),
            "{picture}: the input built from the metadata differs"
        );
    }
    let mut predict = vec![
        "predict",
        "--checkpoint",
        checkpoint.to_str().unwrap(),
        "--device",
        "cpu",
        "--json",
        "--top-k",
        "3",
    ];
    predict.extend(pictures.iter().map(String::as_str));
    let ours: serde_json::Value = serde_json::from_str(&ok(&predict)).unwrap();
    let classes = ["circle", "cross", "star"];
    for (line, entry) in theirs.lines().zip(ours.as_array().unwrap()) {
        let mut parts = line.split(' ');
        assert_eq!(parts.next().unwrap(), entry["image"].as_str().unwrap());
        let probs: Vec<f64> = parts.map(|p| p.parse().unwrap()).collect();
        for top in entry["top"].as_array().unwrap() {
            let i = classes.iter().position(|c| *c == top["class"].as_str().unwrap()).unwrap();
            let (a, b) = (top["probability"].as_f64().unwrap(), probs[i]);
            assert!((a - b).abs() <= 1e-3, "{line}: {} {a} vs {b}", classes[i]);
        }
    }
    assert_eq!(theirs.lines().count(), pictures.len());
    // The TorchScript sidecar carries the same recipe.
    let pt = dir.join("model.pt");
    ok(&["export", "--checkpoint", &s(&checkpoint), "--format", "torchscript", "--out", &s(&pt)]);
    let sidecar: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("model.json")).unwrap()).unwrap();
    assert_eq!(sidecar["resize_shorter_side"], 36, "32 * 256 / 224");
    assert_eq!(sidecar["center_crop"], serde_json::json!([32, 32]));
    assert_eq!(sidecar["resize_interpolation"], "bilinear");
    std::fs::remove_dir_all(&dir).unwrap();
}
