//! `torchlight eval --calibrate` on a tiny trained run: the temperature, the scores before and
//! after in the text and JSON output, and `reliability.png`; the temperature stored in the
//! checkpoint and applied by `predict` and `export`; `--report`'s `errors.png`.

use super::{fails, ok, s, temp};
use serde_json::Value;
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};
use torchlight_checkpoint::Checkpoint;
use torchlight_recipes::image::eval_preprocessing;
use torchlight_recipes::ModelCard;
use torchlight_tensor::seed::rng_from_seed;
use torchlight_vision::{decode_file_with, DecodeOptions, Sample, Transform};

#[test]
fn eval_calibrate_fits_a_temperature_and_draws_the_reliability_diagram() {
    let dir = temp("calibrate");
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "8"]);
    let data = dir.join("data/target");
    let runs = dir.join("runs");
    ok(&[
        "train",
        "--data",
        &s(&data),
        "--epochs",
        "1",
        "--image-size",
        "32",
        "--batch-size",
        "8",
        "--workers",
        "1",
        "--device",
        "cpu",
        "--out",
        &s(&runs),
    ]);
    let run = runs.join("exp_001");
    let png = dir.join("reliability.png");
    let (run_s, data_s, png_s) = (s(&run), s(&data), s(&png));
    let eval = |extra: &[&str]| {
        let mut args =
            vec!["eval", "--checkpoint", &run_s, "--data", &data_s, "--device", "cpu", "--calibrate"];
        args.extend(["--reliability-png", &png_s]);
        args.extend(extra);
        ok(&args)
    };
    let text = eval(&[]);
    assert!(text.contains("calibration: temperature T = "), "{text}");
    for row in ["val    z ", "val    z / T", "test   z ", "test   z / T"] {
        assert!(text.contains(row), "no `{row}` row in {text}");
    }
    // A PNG's IHDR chunk holds its width and height (big-endian) at bytes 16..24.
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    let (w, h) = torchlight_train::RELIABILITY_PANEL_SIZE;
    assert_eq!((be(16), be(20)), (2 * w, 2 * h), "four panels: val and test, before and after");
    if let Ok(keep) = std::env::var("TORCHLIGHT_KEEP_PLOT") {
        std::fs::copy(&png, keep).unwrap();
    }
    std::fs::remove_file(&png).unwrap();

    let json: serde_json::Value = serde_json::from_str(&eval(&["--json"])).unwrap();
    let c = &json["calibration"];
    let t = c["temperature"].as_f64().unwrap();
    assert!(t > 0.0 && t.is_finite(), "{c}");
    assert_eq!(c["bins"], 15);
    for split in ["val", "data"] {
        for when in ["before", "after"] {
            for key in ["ece", "mce", "nll", "brier"] {
                let v = c[split][when][key].as_f64().unwrap_or(f64::NAN);
                assert!(v.is_finite() && v >= 0.0, "{split}.{when}.{key} = {v}");
            }
        }
        // T minimises the validation NLL, so dividing by it never raises it there.
        if split == "val" {
            let (b, a) =
                (c["val"]["before"]["nll"].as_f64().unwrap(), c["val"]["after"]["nll"].as_f64().unwrap());
            assert!(a <= b + 1e-9, "val NLL rose from {b} to {a}");
        }
    }
    assert_eq!(c["data"]["images"], json["images"]);
    assert!(png.exists(), "--json still draws the diagram");

    // Without --reliability-png, --report's folder holds the diagram beside report.json.
    let report = dir.join("report");
    ok(&[
        "eval",
        "--checkpoint",
        &run_s,
        "--data",
        &data_s,
        "--device",
        "cpu",
        "--calibrate",
        "--report",
        &s(&report),
    ]);
    for file in ["reliability.png", "report.json"] {
        assert!(report.join(file).is_file(), "no {file} in --report's folder");
    }

    // The test split alone, with the run's data.root moved away: the error names both.
    let moved = dir.join("moved");
    std::fs::rename(&data, &moved).unwrap();
    let err = fails(&[
        "eval",
        "--checkpoint",
        &s(&run),
        "--data",
        &s(&moved.join("test")),
        "--device",
        "cpu",
        "--calibrate",
        "--reliability-png",
        &s(&png),
    ]);
    assert!(err.contains("--calibrate") && err.contains("data.root") && err.contains("train/"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The model's own logits `[N, C]` for `images`, preprocessed as `predict` does, computed by
/// the library from the checkpoint folder `checkpoint`.
fn model_logits(checkpoint: &Path, images: &[PathBuf]) -> (Tensor, Tensor) {
    let loaded = Checkpoint::load(checkpoint).unwrap();
    let card = ModelCard::from_checkpoint(&loaded).unwrap();
    let model = card.build_model(Device::Cpu).unwrap();
    loaded.restore_model(model.as_ref()).unwrap();
    let transform = eval_preprocessing(&card.config).transform();
    let xs: Vec<Tensor> = images
        .iter()
        .map(|path| {
            let image = decode_file_with(path, &DecodeOptions::default()).unwrap();
            let sample = transform.apply(Sample::Image(image), &mut rng_from_seed(0)).unwrap();
            let t = sample.into_tensor().unwrap();
            Tensor::from_slice(&t.data).view([t.channels as i64, t.height as i64, t.width as i64])
        })
        .collect();
    let x = Tensor::stack(&xs, 0);
    let _g = torchlight_tensor::no_grad();
    let logits = model.forward_t(&x, false);
    (x, logits)
}

/// `predict --json --top-k C`: each image's probabilities `[N, C]` in class order, and the
/// JSON's `checkpoint`.
fn predicted(model: &str, images: &[PathBuf], classes: &[String]) -> (Tensor, Value) {
    let mut args = vec!["predict", "--checkpoint", model, "--device", "cpu", "--json", "--top-k", "99"];
    let paths: Vec<String> = images.iter().map(|p| s(p)).collect();
    args.extend(paths.iter().map(String::as_str));
    let json: Value = serde_json::from_str(&ok(&args)).unwrap();
    let rows = json.as_array().unwrap();
    let mut probs = vec![0f64; images.len() * classes.len()];
    for (i, row) in rows.iter().enumerate() {
        for top in row["top"].as_array().unwrap() {
            let c = classes.iter().position(|c| top["class"] == c.as_str()).unwrap();
            probs[i * classes.len() + c] = top["probability"].as_f64().unwrap();
        }
    }
    let probs = Tensor::from_slice(&probs).view([images.len() as i64, classes.len() as i64]);
    (probs, rows[0]["checkpoint"].clone())
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a.to_kind(Kind::Double) - b.to_kind(Kind::Double)).abs().max().double_value(&[])
}

/// After `eval --calibrate`, the checkpoint holds the temperature its JSON reports (nothing
/// else of the checkpoint changed), `predict`'s probabilities are softmax(logits / T), and the
/// ONNX and TorchScript exports divide the logits by T (onnxruntime and torch.jit in the
/// reference Python give the library's logits / T within 1e-5) and record it in their
/// metadata. Before calibration the same commands give softmax(logits) and record no
/// temperature.
#[test]
fn a_calibrated_checkpoint_carries_its_temperature_into_predict_and_export() {
    let dir = temp("temperature");
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "12"]);
    let data = dir.join("data/target");
    let runs = dir.join("runs");
    let (data_s, runs_s) = (s(&data), s(&runs));
    let mut args = vec!["train", "--data", &data_s, "--epochs", "1", "--image-size", "32"];
    args.extend(["--batch-size", "8", "--workers", "1", "--device", "cpu", "--out", &runs_s]);
    ok(&args);
    let run = runs.join("exp_001");
    let best = run.join("checkpoints/best");
    // The test split in ImageFolder's order (classes, then files, sorted).
    let mut test_images: Vec<PathBuf> = std::fs::read_dir(data.join("test"))
        .unwrap()
        .flat_map(|class| std::fs::read_dir(class.unwrap().path()).unwrap().map(|f| f.unwrap().path()))
        .collect();
    test_images.sort();
    let images = test_images[..7].to_vec();
    let classes = ModelCard::from_checkpoint(&Checkpoint::load(&best).unwrap()).unwrap().classes;
    let (x, logits) = model_logits(&best, &images);
    let checks = dir.join("exports");
    std::fs::create_dir_all(&checks).unwrap();
    let export = |name: &str| {
        for (format, ext) in [("onnx", "onnx"), ("torchscript", "pt")] {
            let out = s(&checks.join(format!("{name}__cli.{ext}")));
            ok(&["export", "--checkpoint", &s(&run), "--format", format, "--out", &out]);
        }
    };
    let write_io = |name: &str, y: &Tensor| {
        let tensors = [
            ("x1".to_string(), x.narrow(0, 0, 1)),
            ("y1".to_string(), y.narrow(0, 0, 1)),
            ("x7".to_string(), x.shallow_clone()),
            ("y7".to_string(), y.shallow_clone()),
        ];
        Tensor::write_safetensors(&tensors, checks.join(format!("{name}-io.safetensors"))).unwrap();
    };

    // Uncalibrated: no temperature anywhere, the model's logits as they are.
    let (_, meta) = torchlight_checkpoint::read_meta(&best).unwrap();
    assert!(meta.config.get("temperature").is_none(), "{}", meta.config);
    let (probs, source) = predicted(&s(&run), &images, &classes);
    assert!(source.get("temperature").is_none(), "{source}");
    let d = max_diff(&probs, &logits.softmax(-1, Kind::Float));
    assert!(d < 1e-6, "uncalibrated predict differs from softmax(logits) by {d}");
    export("plain");
    write_io("plain", &logits);
    let sidecar: Value =
        serde_json::from_str(&std::fs::read_to_string(checks.join("plain__cli.json")).unwrap()).unwrap();
    assert!(sidecar.get("temperature").is_none(), "{sidecar}");

    // Calibrated: the temperature eval reports is the one stored, predicted with and exported.
    let png = s(&dir.join("reliability.png"));
    let run_s = s(&run);
    let mut args = vec!["eval", "--checkpoint", &run_s, "--data", &data_s, "--device", "cpu"];
    args.extend(["--calibrate", "--reliability-png", &png, "--json"]);
    let json: Value = serde_json::from_str(&ok(&args)).unwrap();
    let t = json["calibration"]["temperature"].as_f64().unwrap();
    assert!(t > 0.0 && t.is_finite() && t != 1.0, "{t}");
    assert_eq!(json["calibration"]["stored_in"], s(&best));
    let (_, stored) = torchlight_checkpoint::read_meta(&best).unwrap();
    assert_eq!(stored.config["temperature"].as_f64(), Some(t));
    let mut unchanged = stored.clone();
    unchanged.config.as_object_mut().unwrap().remove("temperature");
    assert_eq!(unchanged, meta, "only the temperature was added");
    let (probs, source) = predicted(&s(&run), &images, &classes);
    assert_eq!(source["temperature"].as_f64(), Some(t));
    let scaled = &logits / t;
    let d = max_diff(&probs, &scaled.softmax(-1, Kind::Float));
    eprintln!("T = {t}: predict vs softmax(logits / T): max |diff| {d:e}");
    assert!(d < 1e-6, "calibrated predict differs from softmax(logits / T) by {d}");
    assert!(max_diff(&probs, &logits.softmax(-1, Kind::Float)) > 1e-4, "T changed nothing");
    export("calibrated");
    write_io("calibrated", &scaled);
    let sidecar: Value =
        serde_json::from_str(&std::fs::read_to_string(checks.join("calibrated__cli.json")).unwrap()).unwrap();
    assert_eq!(sidecar["temperature"].as_f64(), Some(t));
    // predict through the TorchScript file: its graph divides, so the same probabilities.
    let (script, _) = predicted(&s(&checks.join("calibrated__cli.pt")), &images, &classes);
    let d = max_diff(&script, &probs);
    eprintln!("predict with the TorchScript export vs the checkpoint: max |diff| {d:e}");
    assert!(d < 1e-5, "{d}");

    let out =
        torchlight_testing::run_reference_script("crates/export/tests/check_exports.py", &[&s(&checks)])
            .unwrap_or_else(|e| panic!("{e}"));
    let rows: Vec<&str> = out.lines().filter(|l| !l.starts_with("meta ")).collect();
    assert_eq!(rows.len(), 2 * 2 * 2, "{out}");
    for row in rows {
        eprintln!("{row}");
        let diff: f64 = row.split(' ').nth(3).unwrap().parse().unwrap();
        assert!(diff < 1e-5, "{row}");
    }
    let meta_of = |file: &str| -> Vec<&str> {
        out.lines().filter_map(|l| l.strip_prefix(&format!("meta {file} temperature "))).collect()
    };
    assert_eq!(meta_of("plain__cli.onnx"), Vec::<&str>::new(), "{out}");
    let recorded = meta_of("calibrated__cli.onnx");
    assert_eq!(recorded.len(), 1, "{out}");
    assert_eq!(recorded[0].parse::<f64>().unwrap(), t);

    // `--report DIR` also draws errors.png: the misclassified test images with the highest
    // confidence (softmax of logits / T, the checkpoint's T), most confident first.
    let report = dir.join("report");
    let mut args = vec!["eval", "--checkpoint", &run_s, "--data", &data_s, "--device", "cpu"];
    let report_s = s(&report);
    args.extend(["--report", &report_s, "--json"]);
    let json: Value = serde_json::from_str(&ok(&args)).unwrap();
    let (_, all_logits) = model_logits(&best, &test_images);
    let labels: Vec<i64> = test_images
        .iter()
        .map(|p| {
            let class = p.parent().unwrap().file_name().unwrap().to_str().unwrap();
            classes.iter().position(|c| c == class).unwrap() as i64
        })
        .collect();
    let labels = Tensor::from_slice(&labels);
    let expected = torchlight_train::worst_misclassified(&(&all_logits / t), &labels, 16);
    let errors = &json["errors"];
    assert_eq!(errors["temperature"].as_f64(), Some(t), "{errors}");
    let wrong = (all_logits.argmax(1, false) - &labels).count_nonzero(0).int64_value(&[]);
    assert_eq!(errors["misclassified"].as_i64(), Some(wrong), "{errors}");
    let worst = errors["worst"].as_array().unwrap();
    assert_eq!(worst.len(), expected.len(), "{errors}");
    eprintln!("errors.png: {} of {wrong} misclassified of {} test images", worst.len(), test_images.len());
    for (got, want) in worst.iter().zip(&expected) {
        assert_eq!(got["image"], s(&test_images[want.index]), "{errors}");
        assert_eq!(got["true"], classes[want.label].as_str());
        assert_eq!(got["predicted"], classes[want.predicted].as_str());
        let d = (got["confidence"].as_f64().unwrap() - want.confidence).abs();
        assert!(d < 1e-5, "confidence {got} vs {}", want.confidence);
    }
    let png = report.join("errors.png");
    assert_eq!(errors["png"], s(&png));
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    assert_eq!((be(16), be(20)), torchlight_train::errors_grid_size(worst.len()));
    // And it decodes whole, at that size.
    let decoded = decode_file_with(&png, &DecodeOptions::default()).unwrap();
    assert_eq!((decoded.width() as u32, decoded.height() as u32), (be(16), be(20)));
    if let Ok(keep) = std::env::var("TORCHLIGHT_KEEP_PLOT") {
        std::fs::copy(&png, keep).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
