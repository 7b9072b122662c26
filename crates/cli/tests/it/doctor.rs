//! `torchlight doctor` from the command line: text and `--json` on a healthy set, and a
//! failing check as a non-zero exit.

use super::{fails, ok, s, temp, torchlight};

const QUICK: &[&str] = &[
    "--set",
    "data.image_size=32",
    "--set",
    "train.batch_size=8",
    "--set",
    "train.device=cpu",
    "--set",
    "data.workers=0",
    // The backbone at a tenth of the lr, as these figures were measured with (from scratch it
    // now trains at optim.lr, 1e-3, which six steps on 8 images can read as a rising loss).
    "--set",
    "optim.backbone_lr=1e-4",
    "--overfit-steps",
    "30",
    "--run-steps",
    "6",
];

#[test]
fn doctor_runs_the_checklist_as_text_and_json() {
    let dir = temp("doctor");
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "18"]);
    let data = s(&dir.join("data/target"));
    let mut args = vec!["doctor", "--data", &data, "--model", "resnet18"];
    args.extend_from_slice(QUICK);
    let text = ok(&args);
    for line in [
        "[1] PASS  split_leak",
        "[2] PASS  initial_loss",
        "[3] PASS  overfit_one_batch",
        "[4] PASS  grad_flow",
    ] {
        assert!(text.contains(line), "`{line}` in:\n{text}");
    }
    args.push("--json");
    let json: serde_json::Value = serde_json::from_str(&ok(&args)).unwrap();
    let findings = json["findings"].as_array().unwrap();
    let stages: std::collections::BTreeSet<u64> =
        findings.iter().map(|f| f["stage"].as_u64().unwrap()).collect();
    assert_eq!(stages.into_iter().collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    let balance = findings.iter().find(|f| f["check"] == "class_balance").unwrap();
    assert_eq!(balance["data"]["counts"]["train"]["star"], 6, "{balance}");

    // Too few outputs for the labels: a FAIL with its fix, later stages skipped, exit 1.
    let mut args = vec!["doctor", "--data", &data, "--set", "model.num_classes=2"];
    args.extend_from_slice(QUICK);
    let out = torchlight(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("[1] FAIL  label_range: labels 0..=2 (3 classes); the model has 2 outputs"),
        "{stdout}"
    );
    assert!(stdout.contains("fix: set model.num_classes = 3"), "{stdout}");
    assert!(stdout.contains("SKIP"), "{stdout}");
    let err = fails(&args);
    assert_eq!(err, "error: doctor found 1 failing check(s)");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn doctor_task_text_checks_duplicates_lengths_and_unknown_words() {
    let dir = temp("doctor-text");
    let data = dir.join("data");
    crate::text::corpus(&data);
    let data_s = s(&data);
    let mut args = vec!["doctor", "--task", "text", "--data", &data_s, "--model", "fasttext"];
    args.extend_from_slice(&[
        "--set",
        "text.embed_dim=16",
        "--set",
        "text.max_len=32",
        "--set",
        "train.batch_size=8",
        "--set",
        "train.device=cpu",
        "--set",
        "data.workers=0",
        "--set",
        "optim.lr=0.05",
        "--run-steps",
        "6",
    ]);
    let text = ok(&args);
    for line in [
        "[1] PASS  unreadable_documents: all 32 documents",
        "[1] PASS  split_duplicates: no document in two splits",
        "[1] PASS  length_truncation: tokens per training document: min 20, median 20, p95 20, max 20; text.max_len 32 cuts 0",
        "[1] PASS  unknown_tokens: val: 0 of",
        "[2] PASS  initial_loss",
        "[3] PASS  overfit_one_batch",
        "[4] PASS  grad_flow",
    ] {
        assert!(text.contains(line), "`{line}` in:\n{text}");
    }
    assert!(!text.contains("JPEG decoder"), "{text}");

    // A training document copied into test/, and documents cut by a short max_len: WARNs with
    // their figures and fixes; a WARN alone exits 0.
    for class in ["pos", "neg"] {
        std::fs::create_dir_all(data.join("test").join(class)).unwrap();
    }
    std::fs::copy(data.join("train/pos/3.txt"), data.join("test/pos/copy.txt")).unwrap();
    std::fs::write(data.join("test/neg/own.txt"), "bad w1 bad").unwrap();
    args.extend_from_slice(&["--set", "text.max_len=10", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&ok(&args)).unwrap();
    let finding = |check: &str| {
        json["findings"].as_array().unwrap().iter().find(|f| f["check"] == check).unwrap().clone()
    };
    let dup = finding("split_duplicates");
    assert_eq!(dup["status"], "WARN", "{dup}");
    let pair = &dup["data"]["train_test"]["pairs"][0];
    assert!(pair[0].as_str().unwrap().ends_with("pos/3.txt"), "{dup}");
    assert!(pair[1].as_str().unwrap().ends_with("copy.txt"), "{dup}");
    let cut = finding("length_truncation");
    assert_eq!((cut["status"].as_str(), cut["data"]["share"].as_f64()), (Some("WARN"), Some(1.0)), "{cut}");
    assert_eq!(
        cut["fix"],
        "set text.max_len = 20 (the 95th percentile), so the model reads the whole of most documents"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--out DIR` is the report folder: the image checklist draws `augmented_samples.png` there
/// (8 views of 8 training images beside their originals) and names it in the
/// `augmentation_strength` line; a folder that cannot be made is an error naming it.
#[test]
fn doctor_out_draws_the_augmented_samples_grid() {
    let dir = temp("doctor-out");
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "10"]);
    let data = s(&dir.join("data/target"));
    let report = dir.join("report");
    let out = s(&report);
    let mut args = vec!["doctor", "--data", &data, "--model", "resnet18", "--out", &out];
    args.extend_from_slice(QUICK);
    let text = ok(&args);
    let png = report.join("augmented_samples.png");
    assert!(
        text.contains("[1] PASS  augmentation_strength: no step beyond crop and flip: mean distortion 0.00"),
        "{text}"
    );
    assert!(text.contains(&format!("grid in {}", png.display())), "{text}");
    // Six steps are too few to compare two runs: the A/B says so instead of guessing.
    assert!(text.contains("[4] SKIP  augmentation_ab: not compared: 6 steps"), "{text}");
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    // IHDR: 9 columns (original + 8 views) and 8 rows of 32 px tiles with 4 px gaps.
    let (w, h) = (
        u32::from_be_bytes(bytes[16..20].try_into().unwrap()),
        u32::from_be_bytes(bytes[20..24].try_into().unwrap()),
    );
    assert_eq!((w, h), (9 * 32 + 10 * 4, 8 * 32 + 9 * 4));

    let blocked = dir.join("file");
    std::fs::write(&blocked, b"not a folder").unwrap();
    let blocked = s(&blocked.join("report"));
    let mut args = vec!["doctor", "--data", &data, "--out", &blocked];
    args.extend_from_slice(QUICK);
    let err = fails(&args);
    assert!(err.contains(&blocked), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
