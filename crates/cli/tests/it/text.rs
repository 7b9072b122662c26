//! `torchlight train --task text` on a tiny generated TextFolder: a run folder with the
//! tokenizer, a resume that continues it, and a bad `[text]` value named in one line; then
//! eval, predict and summary on the run and on its checkpoint copied away from it.

use crate::{fails, ok, s, temp, torchlight};
use std::path::Path;

/// `root/train/<class>/<i>.txt`: twenty-word documents whose class is the keyword they repeat.
pub(crate) fn corpus(root: &Path) {
    for (c, (class, word)) in [("pos", "good"), ("neg", "bad")].into_iter().enumerate() {
        let dir = root.join("train").join(class);
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..16 {
            let filler: Vec<String> = (0..16).map(|j| format!("w{}", (i * 7 + j * 3 + c) % 23)).collect();
            let text = format!("{word} {} {word} and {word}", filler.join(" "));
            std::fs::write(dir.join(format!("{i}.txt")), text).unwrap();
        }
    }
}

#[test]
fn train_task_text_trains_saves_the_vocabulary_and_resumes() {
    let dir = temp("text");
    let (data, out) = (dir.join("data"), dir.join("runs"));
    corpus(&data);
    let (data_s, out_s) = (s(&data), s(&out));
    let stdout = ok(&[
        "train",
        "--task",
        "text",
        "--data",
        &data_s,
        "--model",
        "fasttext",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--out",
        &out_s,
        "--set",
        "text.embed_dim=16",
        "--set",
        "text.max_len=16",
        "--workers",
        "1",
        "--device",
        "cpu",
    ]);
    let run = out.join("exp_001");
    assert!(stdout.contains(&format!("run folder:      {}", run.display())), "{stdout}");
    assert!(stdout.contains("documents/s"), "{stdout}");
    for file in ["vocab.json", "config.toml", "summary.json", "metrics.csv", "checkpoints/last"] {
        assert!(run.join(file).exists(), "no {file} in {}", run.display());
    }
    let run_s = s(&run);
    let stdout = ok(&["train", "--resume", &run_s, "--epochs", "2", "--device", "cpu", "--workers", "1"]);
    assert!(stdout.contains("epochs:          2"), "{stdout}");
    let rows = std::fs::read_to_string(run.join("metrics.csv")).unwrap().lines().count();
    assert_eq!(rows, 3, "a header and one row per epoch");

    let line = fails(&[
        "train",
        "--task",
        "text",
        "--data",
        &data_s,
        "--model",
        "textcnn",
        "--set",
        "text.max_len=0",
    ]);
    assert!(line.contains("text.max_len"), "{line}");
    let line = fails(&["train", "--task", "video", "--data", &data_s]);
    assert!(line.contains("train.task"), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `root/{train,val,test}/<class>/<i>.txt` (16, 6 and 6 a class) in `corpus`'s pattern.
fn split_corpus(root: &Path) {
    for (split, n, offset) in [("train", 16, 0), ("val", 6, 100), ("test", 6, 200)] {
        for (c, (class, word)) in [("pos", "good"), ("neg", "bad")].into_iter().enumerate() {
            let dir = root.join(split).join(class);
            std::fs::create_dir_all(&dir).unwrap();
            for i in 0..n {
                let k = i + offset;
                let filler: Vec<String> = (0..16).map(|j| format!("w{}", (k * 7 + j * 3 + c) % 23)).collect();
                let text = format!("{word} {} {word} and {word}", filler.join(" "));
                std::fs::write(dir.join(format!("{i}.txt")), text).unwrap();
            }
        }
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The first class `predict` lists on the line of `name`.
fn first_class<'a>(stdout: &'a str, name: &str) -> &'a str {
    let line =
        stdout.lines().find(|l| l.starts_with(&format!("{name}: "))).unwrap_or_else(|| panic!("{stdout}"));
    line[name.len() + 2..].split(' ').next().unwrap()
}

#[test]
fn a_text_run_evaluates_predicts_and_summarises_from_its_checkpoint_alone() {
    let dir = temp("text-use");
    let (data, out) = (dir.join("data"), dir.join("runs"));
    split_corpus(&data);
    let (data_s, out_s) = (s(&data), s(&out));
    #[rustfmt::skip]
    ok(&[
        "train", "--task", "text", "--data", &data_s, "--model", "fasttext", "--epochs", "1",
        "--batch-size", "8", "--lr", "0.5", "--out", &out_s, "--set", "text.embed_dim=16",
        "--set", "text.max_len=16", "--workers", "1", "--device", "cpu",
    ]);
    let run = out.join("exp_001");
    let run_s = s(&run);
    let summary = json(&std::fs::read_to_string(run.join("summary.json")).unwrap());
    let (val_acc, test_acc) =
        (summary["best_val_acc"].as_f64().unwrap(), summary["test_acc"].as_f64().unwrap());
    let metrics = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    let header: Vec<&str> = metrics.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = metrics.lines().nth(1).unwrap().split(',').collect();
    let val_loss: f64 = row[header.iter().position(|h| *h == "val_loss").unwrap()].parse().unwrap();

    // eval on the root evaluates test/: the run's own test figures, with documents counted.
    let png = dir.join("confusion.png");
    let e = json(&ok(&[
        "eval",
        "--checkpoint",
        &run_s,
        "--data",
        &data_s,
        "--device",
        "cpu",
        "--json",
        "--confusion-png",
        &s(&png),
    ]));
    assert!(png.is_file());
    assert_eq!(e["documents"], 12, "{e}");
    assert!(e.get("images").is_none(), "{e}");
    assert_eq!(e["accuracy"].as_f64().unwrap(), test_acc, "{e}");
    assert_eq!(e["classes"], serde_json::json!(["neg", "pos"]));
    assert_eq!(e["support"], serde_json::json!([6, 6]));
    let matrix: Vec<Vec<u64>> = serde_json::from_value(e["confusion_matrix"].clone()).unwrap();
    assert_eq!(matrix.iter().flatten().sum::<u64>(), 12);
    assert_eq!((matrix[0][0] + matrix[1][1]) as f64 / 12.0, test_acc);
    assert!(e["top2_accuracy"].as_f64().is_some() && e["loss"].as_f64().unwrap().is_finite(), "{e}");
    assert!(e["checkpoint"]["path"].as_str().unwrap().ends_with("best"), "{e}");
    // On val/: the accuracy and loss the run validated its best checkpoint with.
    let e = json(&ok(&[
        "eval",
        "--checkpoint",
        &run_s,
        "--data",
        &s(&data.join("val")),
        "--device",
        "cpu",
        "--json",
    ]));
    assert_eq!(e["accuracy"].as_f64().unwrap(), val_acc, "{e}");
    assert!((e["loss"].as_f64().unwrap() - val_loss).abs() < 1e-6, "{e} vs val_loss {val_loss}");
    let text = ok(&["eval", "--checkpoint", &run_s, "--data", &s(&data.join("val")), "--device", "cpu"]);
    assert!(text.contains("val: 12 documents"), "{text}");
    assert!(text.contains(&format!("accuracy {val_acc:.4}")), "{text}");
    assert!(text.contains("precision     recall   f1-score    support"), "{text}");
    assert!(text.contains("weighted avg"), "{text}");
    // Test-time augmentation makes image views: a text checkpoint refuses it in one line.
    for cmd in [&["eval", "--data", &s(&data.join("val"))][..], &["predict", "--text", "good"][..]] {
        let out = torchlight(&[cmd, &["--checkpoint", &run_s, "--device", "cpu", "--tta", "hflip"]].concat());
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(!out.status.success() && err.trim_end().lines().count() == 1, "{err}");
        assert!(err.starts_with("error: --tta: ") && err.contains("is a text checkpoint"), "{err}");
        assert!(err.contains("(image checkpoints only)"), "{err}");
    }

    // predict: a text full of a class's keyword is that class, and so is a file of it.
    let file = data.join("test/neg/0.txt");
    let args = [
        "predict",
        "--checkpoint",
        &run_s,
        "--device",
        "cpu",
        "--text",
        "good good good good",
        "--text",
        "bad bad bad bad",
        &s(&file),
    ];
    let stdout = ok(&args);
    assert_eq!(first_class(&stdout, "\"good good good good\""), "pos", "{stdout}");
    assert_eq!(first_class(&stdout, "\"bad bad bad bad\""), "neg", "{stdout}");
    assert_eq!(stdout.lines().count(), 3, "one line each: {stdout}");
    assert!(stdout.lines().nth(2).unwrap().starts_with(&s(&file)), "{stdout}");
    let p = json(&ok(&[&args[..], &["--json", "--top-k", "1"]].concat()));
    assert_eq!(p.as_array().unwrap().len(), 3, "{p}");
    assert_eq!(p[0]["input"], "good good good good");
    assert_eq!(p[0]["top"][0]["class"], "pos", "{p}");
    assert!(p[0]["top"][0]["probability"].as_f64().unwrap() > 0.5, "{p}");
    assert_eq!(p[0]["top"].as_array().unwrap().len(), 1, "{p}");
    assert_eq!(p[2]["input"], s(&file));
    assert!(p[2]["checkpoint"]["path"].as_str().unwrap().ends_with("best"), "{p}");

    // The checkpoint folder alone, its run folder's vocabulary gone: the tokenizer travelled.
    let alone = dir.join("elsewhere/ckpt");
    std::fs::create_dir_all(&alone).unwrap();
    for entry in std::fs::read_dir(run.join("checkpoints/best")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), alone.join(entry.file_name())).unwrap();
    }
    std::fs::remove_file(run.join("vocab.json")).unwrap();
    let alone_s = s(&alone);
    let again = json(&ok(&[&args[..], &["--json"]].concat()));
    let moved = json(&ok(&[
        "predict",
        "--checkpoint",
        &alone_s,
        "--device",
        "cpu",
        "--json",
        "--text",
        "good good good good",
        "--text",
        "bad bad bad bad",
        &s(&file),
    ]));
    for i in 0..3 {
        assert_eq!(moved[i]["top"], again[i]["top"], "the same probabilities from the copy");
    }
    let e = json(&ok(&["eval", "--checkpoint", &alone_s, "--data", &data_s, "--device", "cpu", "--json"]));
    assert_eq!(e["accuracy"].as_f64().unwrap(), test_acc, "{e}");

    // Inputs that cannot be classified fail on their own; the rest still print.
    let png_bytes = dir.join("photo.png");
    std::fs::write(&png_bytes, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    let out = torchlight(&[
        "predict",
        "--checkpoint",
        &alone_s,
        "--device",
        "cpu",
        "--text",
        "good good",
        "--text",
        "  \n ",
        &s(&png_bytes),
    ]);
    assert!(!out.status.success());
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(first_class(&stdout, "\"good good\""), "pos", "{stdout}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stderr.contains("photo.png is not UTF-8 text"), "{stderr}");
    assert!(stderr.contains("an empty text (white space only)"), "{stderr}");
    assert!(stderr.contains("error: 2 of 3 texts could not be classified"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // An image checkpoint given --text names its task.
    let (image_checkpoint, _) = crate::harden::tiny_run(&dir.join("image"));
    let line =
        fails(&["predict", "--checkpoint", &s(&image_checkpoint), "--device", "cpu", "--text", "good"]);
    assert!(line.contains("an image model") && line.contains("train.task = \"image\""), "{line}");

    // --calibrate: a temperature fitted on val/ (12 documents), which cannot raise val's NLL
    // (T = 1 is one of the candidates), and test/'s figures before and after it.
    let reliability = dir.join("reliability.png");
    #[rustfmt::skip]
    let e = json(&ok(&[
        "eval", "--checkpoint", &run_s, "--data", &data_s, "--device", "cpu", "--json", "--calibrate",
        "--reliability-png", &s(&reliability),
    ]));
    let c = &e["calibration"];
    assert!(reliability.is_file(), "{e}");
    assert!(c["temperature"].as_f64().unwrap() > 0.0, "{c}");
    assert_eq!(
        (c["val"]["documents"].as_i64(), c["data"]["documents"].as_i64()),
        (Some(12), Some(12)),
        "{c}"
    );
    let nll = |split: &str, when: &str| c[split][when]["nll"].as_f64().unwrap();
    assert!(nll("val", "after") <= nll("val", "before") + 1e-9, "{c}");
    assert!(c["val_root"].as_str().unwrap().ends_with("data"), "{c}");

    // Records: eval of a CSV of test/'s documents gives the folder's figures; a records folder
    // without test.<ext> names what to pass; a label the checkpoint does not know names its line.
    let records = dir.join("records");
    std::fs::create_dir_all(&records).unwrap();
    let mut csv = String::from("label,text\n");
    for class in ["neg", "pos"] {
        for i in 0..6 {
            let text =
                std::fs::read_to_string(data.join("test").join(class).join(format!("{i}.txt"))).unwrap();
            csv.push_str(&format!("{class},\"{text}\"\n"));
        }
    }
    std::fs::write(records.join("test.csv"), &csv).unwrap();
    let e = json(&ok(&[
        "eval",
        "--checkpoint",
        &run_s,
        "--data",
        &s(&records.join("test.csv")),
        "--device",
        "cpu",
        "--json",
    ]));
    assert_eq!((e["documents"].as_i64(), e["accuracy"].as_f64()), (Some(12), Some(test_acc)), "{e}");
    std::fs::write(records.join("train.csv"), &csv).unwrap();
    let e = json(&ok(&["eval", "--checkpoint", &run_s, "--data", &s(&records), "--device", "cpu", "--json"]));
    assert_eq!(e["accuracy"].as_f64(), Some(test_acc), "records/test.csv: {e}");
    std::fs::remove_file(records.join("test.csv")).unwrap();
    let line = fails(&["eval", "--checkpoint", &run_s, "--data", &s(&records), "--device", "cpu"]);
    assert!(line.contains("no test.<ext>") && line.contains("train.csv"), "{line}");
    std::fs::write(records.join("odd.csv"), "label,text\npos,good\nmaybe,good bad\n").unwrap();
    let line =
        fails(&["eval", "--checkpoint", &run_s, "--data", &s(&records.join("odd.csv")), "--device", "cpu"]);
    assert!(line.contains("odd.csv") && line.contains("maybe"), "{line}");
    std::fs::create_dir_all(data.join("other/pos")).unwrap();
    std::fs::write(data.join("other/pos/a.txt"), "good").unwrap();
    let line = fails(&["eval", "--checkpoint", &run_s, "--data", &s(&data.join("other")), "--device", "cpu"]);
    assert!(line.contains("classes [pos] do not match the checkpoint's [neg, pos]"), "{line}");

    // Export: ONNX and TorchScript with the tokenizer beside them; onnxruntime and
    // torch.jit.load give predict's probability for "good good good good" (1e-5), tokenized
    // from the exported vocabulary file.
    let onnx = dir.join("m.onnx");
    let pt = dir.join("m.pt");
    ok(&["export", "--checkpoint", &alone_s, "--format", "onnx", "--out", &s(&onnx)]);
    ok(&["export", "--checkpoint", &alone_s, "--format", "torchscript", "--out", &s(&pt)]);
    for f in ["m.tokenizer.json", "m.json"] {
        assert!(dir.join(f).is_file(), "no {f}");
    }
    let sidecar = json(&std::fs::read_to_string(dir.join("m.json")).unwrap());
    assert_eq!(
        (sidecar["task"].as_str(), sidecar["max_len"].as_u64()),
        (Some("text"), Some(16)),
        "{sidecar}"
    );
    let want = p[0]["top"][0]["probability"].as_f64().unwrap();
    let script = r#"
import json, sys
import numpy as np, onnxruntime as ort, torch
onnx, pt, vocab = sys.argv[1:4]
tokens = json.load(open(vocab))["tokens"]
ids = np.array([[tokens.index("good")] * 4], dtype=np.int64)
lengths = np.array([4], dtype=np.int64)
sess = ort.InferenceSession(onnx)
meta = sess.get_modelmeta().custom_metadata_map
a = sess.run(None, {"ids": ids, "lengths": lengths})[0]
b = torch.jit.load(pt)(torch.from_numpy(ids), torch.from_numpy(lengths)).detach().numpy()
classes = json.loads(meta["class_names"]) if meta.get("class_names", "").startswith("[") else meta.get("class_names")
pa = np.exp(a - a.max()) / np.exp(a - a.max()).sum()
pb = np.exp(b - b.max()) / np.exp(b - b.max()).sum()
print(json.dumps({"onnx": float(pa[0].max()), "script": float(pb[0].max()), "argmax": int(pa[0].argmax()), "max_len": meta.get("max_len"), "temperature": meta.get("temperature")}))
"#;
    let python = torchlight_testing::reference_python().expect("the reference python");
    let run_script = |onnx: &Path, pt: &Path, tokenizer: &str| {
        let out = std::process::Command::new(&python)
            .args(["-c", script, &s(onnx), &s(pt), &s(&dir.join(tokenizer))])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        json(&String::from_utf8(out.stdout).unwrap())
    };
    let r = run_script(&onnx, &pt, "m.tokenizer.json");
    assert_eq!((r["argmax"].as_u64(), r["max_len"].as_str()), (Some(1), Some("16")), "pos is class 1: {r}");
    assert!(r["temperature"].is_null(), "an uncalibrated export records no temperature: {r}");
    for k in ["onnx", "script"] {
        let got = r[k].as_f64().unwrap();
        assert!((got - want).abs() < 1e-5, "{k}: {got} against predict's {want}");
    }
    // The run's checkpoint, calibrated above, carries T: predict's probability is the
    // sigmoid of the logit difference over T (two classes), and both exports divide by it.
    let t = c["temperature"].as_f64().unwrap();
    let calibrated = json(&ok(&[
        "predict",
        "--checkpoint",
        &run_s,
        "--device",
        "cpu",
        "--json",
        "--text",
        "good good good good",
    ]));
    assert_eq!(calibrated[0]["checkpoint"]["temperature"].as_f64(), Some(t), "{calibrated}");
    let want_t = calibrated[0]["top"][0]["probability"].as_f64().unwrap();
    // `want` is a float32 softmax near 1, whose 1 - p holds ~2 significant digits; from its
    // logit divided by T the probability is known to ~1e-4 here.
    let logit = (want / (1.0 - want)).ln();
    let scaled = 1.0 / (1.0 + (-logit / t).exp());
    assert!((scaled - want_t).abs() < 5e-4, "T {t}: {want_t}, but {want} scaled gives {scaled}");
    let (onnx_t, pt_t) = (dir.join("t.onnx"), dir.join("t.pt"));
    ok(&["export", "--checkpoint", &run_s, "--format", "onnx", "--out", &s(&onnx_t)]);
    ok(&["export", "--checkpoint", &run_s, "--format", "torchscript", "--out", &s(&pt_t)]);
    let sidecar = json(&std::fs::read_to_string(dir.join("t.json")).unwrap());
    assert_eq!(sidecar["temperature"].as_f64(), Some(t), "{sidecar}");
    let r = run_script(&onnx_t, &pt_t, "t.tokenizer.json");
    assert_eq!(r["temperature"].as_str().map(|v| v.parse::<f64>().unwrap()), Some(t), "{r}");
    for k in ["onnx", "script"] {
        let got = r[k].as_f64().unwrap();
        assert!((got - want_t).abs() < 1e-5, "{k}: {got} against predict's {want_t} (T {t})");
    }

    // summary: the checkpoint's model with its vocabulary, or a text model by name.
    let out = ok(&["summary", "--checkpoint", &alone_s]);
    assert!(out.contains("embedding.weight") && out.contains("fc.weight"), "{out}");
    let vocab = summary_vocab(&out);
    assert!(
        out.contains(&format!(
            "fasttext with 2 classes and a vocabulary of {vocab} ids (text.max_len 16): {} parameters",
            vocab * 16 + 2 * 16 + 2
        )),
        "{out}"
    );
    let out = ok(&[
        "summary",
        "--model",
        "textcnn",
        "--vocab-size",
        "50",
        "--num-classes",
        "3",
        "--set",
        "text.embed_dim=8",
        "--set",
        "text.num_filters=4",
    ]);
    // Embedding 50x8, three Conv1d of 4 filters (widths 3, 4, 5) and a 12 -> 3 head.
    let params = 50 * 8 + (4 * 8 * 3 + 4) + (4 * 8 * 4 + 4) + (4 * 8 * 5 + 4) + (12 * 3 + 3);
    assert!(
        out.contains(&format!(
            "textcnn with 3 classes and a vocabulary of 50 ids (text.max_len 256): {params} parameters"
        )),
        "{out}"
    );
    let line = fails(&["summary", "--model", "bilstm"]);
    assert!(line.contains("--vocab-size"), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The vocabulary size `summary` reports.
fn summary_vocab(out: &str) -> usize {
    let at = out.find("a vocabulary of ").unwrap_or_else(|| panic!("{out}")) + "a vocabulary of ".len();
    out[at..].split(' ').next().unwrap().parse().unwrap()
}
