//! End-to-end tests of the `torchlight` command, run as a subprocess.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod augment;
mod backbones;
mod calibrate;
mod distributed;
mod doctor;
mod harden;
mod hostile;
mod hub_cfg;
mod hub_deploy;
mod hub_finetune;
mod hub_folder;
mod setup;
mod text;
mod tta;
mod tune;

fn torchlight(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_torchlight")).args(args).output().expect("the torchlight binary runs")
}

fn ok(args: &[&str]) -> String {
    let out = torchlight(args);
    assert!(
        out.status.success(),
        "torchlight {} failed:\n{}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs a failing command and returns its one-line error.
fn fails(args: &[&str]) -> String {
    let out = torchlight(args);
    assert!(!out.status.success(), "torchlight {} should fail", args.join(" "));
    let err = String::from_utf8(out.stderr).unwrap();
    let line = err.lines().rfind(|l| l.starts_with("error")).unwrap_or_default().to_string();
    assert!(!line.is_empty(), "no error line in {err}");
    assert!(!err.contains("panicked"), "a panic instead of an error: {err}");
    line
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tl-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// `--version` names the JPEG decoder: libjpeg-turbo (PIL's, byte-identical) in the default
/// build.
#[test]
fn version_names_the_jpeg_decoder() {
    let out = ok(&["--version"]);
    assert!(out.starts_with(&format!("torchlight {}", env!("CARGO_PKG_VERSION"))), "{out}");
    assert!(
        out.contains("JPEG decoder: libjpeg-turbo 2.") || out.contains("JPEG decoder: libjpeg-turbo 3."),
        "{out}"
    );
    // And whether `train --nproc` works in this build, and how to get it when not.
    let line = out.lines().find(|l| l.starts_with("distributed: ")).unwrap_or_else(|| panic!("{out}"));
    if cfg!(feature = "distributed") {
        assert!(line.starts_with("distributed: built in"), "{line}");
    } else {
        assert!(line.contains("not built in") && line.contains("--features distributed"), "{line}");
        assert!(line.contains("libgloo-dev"), "{line}");
    }
}

#[test]
fn summary_prints_the_parameter_table() {
    let out = ok(&["summary", "--model", "resnet34", "--num-classes", "3", "--frozen-backbone"]);
    assert!(out.contains("layer4.2.conv2.weight"), "{out}");
    assert!(out.contains("resnet34 with 3 classes: 21286211 parameters (1539 trainable)"), "{out}");
}

#[test]
fn bad_input_is_one_clear_line_and_a_non_zero_exit() {
    let dir = temp("errors");
    let err = fails(&["train", "--data", &s(&dir.join("nowhere"))]);
    assert!(err.contains("nowhere") && err.contains("train/"), "{err}");
    let err = fails(&["train", "--data", &s(&dir), "--set", "optim.learning_rate=0.1"]);
    assert!(err.contains("unknown config key `optim.learning_rate`"), "{err}");
    std::fs::write(dir.join("bad.toml"), "[train]\nepochs = 3\nbach_size = 8\n").unwrap();
    let err = fails(&["train", "--config", &s(&dir.join("bad.toml"))]);
    assert!(err.contains("bad.toml:3") && err.contains("bach_size"), "{err}");
    std::fs::create_dir_all(dir.join("empty/train/cat")).unwrap();
    let runs = dir.join("runs");
    let err = fails(&["train", "--data", &s(&dir.join("empty")), "--epochs", "1", "--out", &s(&runs)]);
    assert!(err.contains("cat"), "an empty class folder is named: {err}");
    assert!(!runs.exists(), "a run that could not start leaves no run folder");
    let err = fails(&["eval", "--checkpoint", &s(&dir.join("missing")), "--data", &s(&dir)]);
    assert!(err.contains("missing") && err.contains("not a Torchlight checkpoint"), "{err}");
    let err = fails(&["summary", "--model", "vgg16"]);
    assert!(err.contains("unknown model `vgg16`"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn train_resume_eval_export_and_predict_from_the_command_line() {
    let dir = temp("e2e");
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "18"]);
    let data = dir.join("data/target");
    let common = |out: &str, epochs: &str| -> Vec<String> {
        [
            "train",
            "--data",
            &s(&data),
            "--epochs",
            epochs,
            "--image-size",
            "32",
            "--batch-size",
            "8",
            "--workers",
            "1",
            "--device",
            "cpu",
            "--out",
            &s(&dir.join(out)),
            "--set",
            "scheduler.kind=step",
            "--set",
            "scheduler.step_size=1",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    let args = common("straight", "3");
    let out = ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.contains("run folder:") && out.contains("test acc:"), "{out}");
    let straight = dir.join("straight/exp_001");

    // Interrupted after 2 of 3 epochs, then resumed from the run folder.
    let args = common("resumed", "2");
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let resumed = dir.join("resumed/exp_001");
    let err = fails(&["train", "--resume", &s(&resumed)]);
    assert!(err.contains("already trained 2 epochs") && err.contains("--epochs"), "{err}");
    let err = fails(&["train", "--resume", &s(&resumed), "--set", "optim.lr=0.5"]);
    assert!(err.contains("optim.lr") && err.contains("start a new run"), "{err}");
    // Extending the finished run to 3 epochs: the step schedule continues, as if never stopped.
    let out = torchlight(&["train", "--resume", &s(&resumed), "--epochs", "3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("changing the run from 2 to 3 epochs: the step schedule is rebuilt"), "{said}");
    let a = tch::Tensor::read_safetensors(straight.join("checkpoints/last/model.safetensors")).unwrap();
    let b: std::collections::HashMap<String, tch::Tensor> =
        tch::Tensor::read_safetensors(resumed.join("checkpoints/last/model.safetensors"))
            .unwrap()
            .into_iter()
            .collect();
    for (key, t) in &a {
        assert!(t.equal(&b[key]), "{key}: the resumed run differs from the straight one");
    }

    let json: serde_json::Value =
        serde_json::from_str(&ok(&["eval", "--checkpoint", &s(&straight), "--data", &s(&data), "--json"]))
            .unwrap();
    assert_eq!(json["classes"], serde_json::json!(["frame", "ring", "star"]));
    assert_eq!(json["confusion_matrix"].as_array().unwrap().len(), 3);
    assert_eq!(json["images"], 18);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(straight.join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        json["accuracy"], summary["test_acc"],
        "eval of the best checkpoint reproduces the run's test accuracy"
    );
    // Which checkpoint served it, as eval, export and predict say.
    let best = s(&straight.join("checkpoints/best"));
    assert_eq!(json["checkpoint"]["path"], serde_json::json!(best), "{json}");
    assert_eq!(json["checkpoint"]["epoch"], summary["best_epoch"], "{json}");
    assert_eq!(json["checkpoint"]["metric"]["name"], "val_acc", "{json}");
    let text = ok(&["eval", "--checkpoint", &s(&straight), "--data", &s(&data)]);
    assert!(text.starts_with(&format!("checkpoint {best} (epoch ")), "{text}");
    // The per-class report: recall is the per-class accuracy, support the confusion matrix's
    // row sums, precision its columns; report.json equals --json's `report`; report.csv
    // holds a row per class, accuracy and both averages.
    let report_dir = dir.join("report");
    ok(&["eval", "--checkpoint", &s(&straight), "--data", &s(&data), "--report", &s(&report_dir)]);
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report_dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(written, json["report"], "report.json is --json's report");
    let rows: Vec<Vec<u64>> = serde_json::from_value(json["confusion_matrix"].clone()).unwrap();
    for (k, entry) in written["per_class"].as_array().unwrap().iter().enumerate() {
        assert_eq!(entry["class"], json["classes"][k]);
        assert_eq!(entry["recall"], json["per_class_accuracy"][k], "{entry}");
        assert_eq!(entry["support"], json["support"][k], "{entry}");
        let predicted: u64 = rows.iter().map(|r| r[k]).sum();
        let precision = if predicted == 0 { 0.0 } else { rows[k][k] as f64 / predicted as f64 };
        assert_eq!(entry["precision"].as_f64().unwrap(), precision, "{entry}");
    }
    assert_eq!(written["accuracy"], json["accuracy"]);
    let off_diagonal: u64 = (0..3)
        .flat_map(|t| (0..3).map(move |p| (t, p)))
        .filter(|(t, p)| t != p)
        .map(|(t, p)| rows[t][p])
        .sum();
    let listed: u64 =
        written["most_confused"].as_array().unwrap().iter().map(|c| c["count"].as_u64().unwrap()).sum();
    assert_eq!(listed, off_diagonal, "every confusion of 3 classes is listed (at most 6 pairs)");
    let csv = std::fs::read_to_string(report_dir.join("report.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "class,precision,recall,f1-score,support");
    assert!(lines[1].starts_with("frame,") && lines[4].starts_with("accuracy,,,"), "{csv}");
    assert_eq!(lines.len(), 7, "{csv}");
    assert!(text.contains("weighted avg"), "{text}");

    let pt = dir.join("model.pt");
    let wrote = ok(&["export", "--checkpoint", &s(&straight), "--format", "torchscript", "--out", &s(&pt)]);
    assert!(wrote.contains(&format!("from checkpoint {best} (epoch ")), "{wrote}");
    ok(&["export", "--checkpoint", &s(&straight), "--format", "onnx", "--out", &s(&dir.join("model.onnx"))]);
    let image = data.join("test/star/00000.jpg");
    let from_pt: serde_json::Value = serde_json::from_str(&ok(&[
        "predict",
        "--checkpoint",
        &s(&pt),
        &s(&image),
        "--json",
        "--top-k",
        "3",
    ]))
    .unwrap();
    let from_ckpt: serde_json::Value =
        serde_json::from_str(&ok(&["predict", "--checkpoint", &s(&straight), &s(&image), "--json"])).unwrap();
    assert_eq!(from_ckpt[0]["checkpoint"]["path"], serde_json::json!(best), "{from_ckpt}");
    let top = from_pt[0]["top"].as_array().unwrap();
    assert_eq!(top.len(), 3);
    let total: f64 = top.iter().map(|t| t["probability"].as_f64().unwrap()).sum();
    assert!((total - 1.0).abs() < 1e-5, "three classes' probabilities sum to 1: {total}");
    assert_eq!(
        from_pt[0]["top"][0]["class"], from_ckpt[0]["top"][0]["class"],
        "TorchScript and checkpoint agree"
    );
    let p_pt = from_pt[0]["top"][0]["probability"].as_f64().unwrap();
    let p_ck = from_ckpt[0]["top"][0]["probability"].as_f64().unwrap();
    assert!((p_pt - p_ck).abs() < 1e-5, "{p_pt} vs {p_ck}");

    // A run folder without `best` says why there is none; without any checkpoint, that too.
    let broken = dir.join("broken");
    std::fs::create_dir_all(broken.join("checkpoints")).unwrap();
    std::fs::copy(straight.join("config.toml"), broken.join("config.toml")).unwrap();
    let last = broken.join("checkpoints/last");
    std::fs::create_dir_all(&last).unwrap();
    for f in std::fs::read_dir(straight.join("checkpoints/last")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, last.join(f.file_name().unwrap())).unwrap();
    }
    let eval_broken = || fails(&["eval", "--checkpoint", &s(&broken), "--data", &s(&data)]);
    let err = eval_broken();
    assert!(err.contains("the run has no best checkpoint: no epoch had a finite validation score"), "{err}");
    let meta_path = last.join("meta.json");
    let mut meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&meta_path).unwrap()).unwrap();
    meta["progress"]["epoch"] = serde_json::json!(0);
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    let err = eval_broken();
    assert!(err.contains("training stopped before its first epoch ended, so no best exists yet"), "{err}");
    std::fs::remove_dir_all(&last).unwrap();
    let err = eval_broken();
    assert!(err.contains("a run folder with no checkpoint yet"), "{err}");
    let err = fails(&["train", "--resume", &s(&broken)]);
    assert!(err.contains("to resume from: training stopped before it saved one"), "{err}");

    // A checkpoint evaluated on data with other classes is an error naming both.
    let err = fails(&["eval", "--checkpoint", &s(&straight), "--data", &s(&dir.join("data/source/train"))]);
    assert!(err.contains("do not match the checkpoint's [frame, ring, star]"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sigterm_stops_after_the_step_saves_and_says_how_to_resume() {
    let dir = temp("sigterm");
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "6"]);
    let data = dir.join("data/target");
    let runs = dir.join("runs");
    let child = Command::new(env!("CARGO_BIN_EXE_torchlight"))
        .args(["train", "--data", &s(&data), "--epochs", "1000", "--image-size", "32", "--batch-size", "4"])
        .args(["--workers", "0", "--device", "cpu", "--model", "resnet18", "--out", &s(&runs)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first checkpoint (no deadline: the run has 1000 epochs to go), then stop it.
    let meta = runs.join("exp_001/checkpoints/last/meta.json");
    while !meta.is_file() {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted by SIGTERM"), "{err}");
    let run = runs.join("exp_001");
    assert!(err.contains(&format!("resume with: torchlight train --resume {}", run.display())), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // The checkpoint is complete and the run goes on from it.
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&meta).unwrap()).unwrap();
    let epoch = saved["progress"]["epoch"].as_u64().unwrap();
    ok(&["train", "--resume", &s(&run), "--epochs", &(epoch + 1).to_string()]);
    std::fs::remove_dir_all(&dir).unwrap();
}
