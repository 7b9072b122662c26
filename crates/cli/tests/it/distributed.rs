//! `torchlight train --nproc N`: with the `distributed` feature, two local ranks train a tiny
//! ImageFolder into one run folder that rank 0 alone writes, show the per-rank and global
//! batch, and resume with `--nproc 2`; without it, `--nproc` is one line saying how to get it.

use super::{s, temp};

#[cfg(feature = "distributed")]
#[test]
fn nproc_2_trains_into_one_run_folder_and_resumes() {
    use super::{ok, torchlight};
    let dir = temp("nproc");
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "6"]);
    let (data, runs) = (s(&dir.join("data/target")), s(&dir.join("runs")));
    let out = torchlight(&[
        "train",
        "--nproc",
        "2",
        "--data",
        &data,
        "--epochs",
        "1",
        "--image-size",
        "32",
        "--batch-size",
        "2",
        "--workers",
        "0",
        "--device",
        "cpu",
        "--model",
        "resnet18",
        "--out",
        &runs,
    ]);
    let printed =
        format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{printed}");
    assert!(printed.contains("batch:           2 per rank x 2 ranks = 4 global"), "{printed}");
    assert!(printed.contains("distributed: 2 ranks; batch 2 per rank, 4 global"), "{printed}");
    assert_eq!(printed.matches("run folder:").count(), 1, "only rank 0 reports: {printed}");
    let run = dir.join("runs/exp_001");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["world_size"], 2, "{summary}");
    assert!(run.join("checkpoints/last/meta.json").is_file());
    assert!(!dir.join("runs/exp_002").exists(), "a second rank made a run folder of its own");

    // Resumed on two ranks from rank 0's checkpoint: one more epoch in the same folder.
    let out = torchlight(&["train", "--nproc", "2", "--resume", &s(&run), "--epochs", "2"]);
    let printed =
        format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{printed}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["epochs"], 2, "{summary}");
    let rows = std::fs::read_to_string(run.join("metrics.csv")).unwrap().lines().count();
    assert_eq!(rows, 3, "a header and one row per epoch, written once");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(not(feature = "distributed"))]
#[test]
fn nproc_without_the_feature_says_how_to_get_it() {
    let dir = temp("nproc-off");
    let err = super::fails(&["train", "--nproc", "2", "--data", &s(&dir)]);
    assert!(err.contains("--nproc 2") && err.contains("--features distributed"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
