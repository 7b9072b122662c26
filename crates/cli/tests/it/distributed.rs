//! `torchlight train --nproc N`: with the `distributed` feature, two local ranks train a tiny
//! ImageFolder (and a tiny TextFolder, `--task text`) into one run folder that rank 0 alone
//! writes, show the per-rank and global batch, and resume with `--nproc 2`; the text run's
//! weights equal one process's on both ranks' batches together; `tune lr --nproc 2` sweeps on
//! both ranks and rank 0 alone reports; without the feature, `--nproc` is one line saying how
//! to get it.

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

/// `tune lr --nproc 2` (here with `train.sync_bn`): both ranks sweep their shards with the
/// gradients and losses averaged, rank 0 alone prints the suggestion and draws the plot, and
/// `--apply` writes it once.
#[cfg(feature = "distributed")]
#[test]
fn tune_lr_nproc_2_sweeps_on_every_rank_and_rank_0_reports() {
    let dir = temp("nproc-tune");
    super::ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "6"]);
    let data = s(&dir.join("data/target"));
    let (config, out_dir) = (dir.join("tune.toml"), dir.join("tune"));
    std::fs::write(&config, "[optim]\nlr = 0.01\n").unwrap();
    let (config_s, out_s) = (s(&config), s(&out_dir));
    let out = super::torchlight(&[
        "tune",
        "lr",
        "--nproc",
        "2",
        "--data",
        &data,
        "--config",
        &config_s,
        "--out",
        &out_s,
        "--steps",
        "14",
        "--min-lr",
        "1e-5",
        "--apply",
        "--set",
        "model.name=resnet18",
        "--set",
        "data.image_size=32",
        "--set",
        "train.batch_size=2",
        "--set",
        "train.device=cpu",
        "--set",
        "data.workers=0",
        "--set",
        "train.sync_bn=true",
    ]);
    let printed =
        format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{printed}");
    assert!(printed.contains("lr range test: 14 steps of 2 images on each of 2 ranks"), "{printed}");
    assert!(printed.contains("BatchNorm layers normalise with the statistics of all 2 ranks"), "{printed}");
    assert!(printed.contains("on 2 ranks (losses averaged over them)"), "{printed}");
    assert_eq!(printed.matches("suggested lr: ").count(), 1, "only rank 0 reports: {printed}");
    assert_eq!(printed.matches("applied: ").count(), 1, "only rank 0 applies: {printed}");
    let png = std::fs::read(out_dir.join("lr_finder.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{} bytes", png.len());
    // The launcher prefixes each rank's lines.
    let rest = printed.lines().find_map(|l| l.split_once("suggested lr: ").map(|(_, r)| r)).unwrap();
    let lr: f64 = rest.split_whitespace().next().unwrap().parse().unwrap();
    assert!(lr.is_finite() && (1e-5..=1.0).contains(&lr), "{lr}: {printed}");
    assert_eq!(torchlight_recipes::TrainConfig::from_toml_file(&config).unwrap().optim.lr, lr);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Mixup and CutMix on two ranks (each rank mixes its own batch from its rank's seeded draws,
/// as torchvision's reference mixes in each rank's collate): a run stopped after one epoch and
/// resumed on two ranks ends with the weights and losses of the uninterrupted run, bit for bit.
#[cfg(feature = "distributed")]
#[test]
fn nproc_2_mixes_each_ranks_batch_and_resumes_bit_for_bit() {
    let dir = temp("nproc-mix");
    super::ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "6"]);
    let data = s(&dir.join("data/target"));
    let train = |runs: &str, epochs: &str| {
        let out = super::torchlight(&[
            "train",
            "--nproc",
            "2",
            "--data",
            &data,
            "--epochs",
            epochs,
            "--image-size",
            "32",
            "--batch-size",
            "4",
            "--workers",
            "0",
            "--device",
            "cpu",
            "--model",
            "resnet18",
            "--out",
            runs,
            "--set",
            "train.mixup_alpha=0.2",
            "--set",
            "train.cutmix_alpha=1.0",
        ]);
        let printed =
            format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{printed}");
        printed
    };
    let (whole, split) = (dir.join("whole"), dir.join("split"));
    train(&s(&whole), "2");
    train(&s(&split), "1");
    let run = split.join("exp_001");
    let out = super::torchlight(&["train", "--nproc", "2", "--resume", &s(&run), "--epochs", "2"]);
    let printed =
        format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{printed}");
    let m = metrics(&whole.join("exp_001"));
    assert!(m["train_loss"].iter().all(|l| l.is_finite() && *l > 0.0), "{m:?}");
    let weights = |run: &std::path::Path| {
        let mut w = tch::Tensor::read_safetensors(run.join("checkpoints/last/model.safetensors")).unwrap();
        w.sort_by(|a, b| a.0.cmp(&b.0));
        w
    };
    let (a, b) = (weights(&whole.join("exp_001")), weights(&run));
    assert_eq!(a.len(), b.len());
    for ((name, x), (other, y)) in a.iter().zip(&b) {
        assert_eq!(name, other);
        assert!(x.equal(y), "{name} differs between the whole run and the resumed one");
    }
    assert_eq!(metrics(&run)["train_loss"], m["train_loss"], "the resumed epoch's mixed loss");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `train --task text --nproc N` on `corpus` (16 documents a class, a quarter held out): a
/// fasttext for `epochs`, `batch` documents per rank, into `runs`, with `more` arguments; the
/// command's output.
#[cfg(feature = "distributed")]
fn train_text(data: &str, runs: &str, nproc: usize, batch: usize, epochs: usize, more: &[&str]) -> String {
    let (nproc, batch, epochs) = (nproc.to_string(), batch.to_string(), epochs.to_string());
    let mut args = vec![
        "train",
        "--task",
        "text",
        "--nproc",
        &nproc,
        "--data",
        data,
        "--model",
        "fasttext",
        "--epochs",
        &epochs,
        "--batch-size",
        &batch,
        "--lr",
        "0.1",
        "--workers",
        "0",
        "--device",
        "cpu",
        "--out",
        runs,
        "--set",
        "text.embed_dim=16",
        "--set",
        "text.max_len=16",
        "--set",
        "data.val_fraction=0.25",
    ];
    args.extend(more);
    let out = super::torchlight(&args);
    let printed =
        format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{printed}");
    printed
}

/// The columns of `metrics.csv` by header name, one value a row.
#[cfg(feature = "distributed")]
fn metrics(run: &std::path::Path) -> std::collections::HashMap<String, Vec<f64>> {
    let text = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let rows: Vec<Vec<f64>> =
        lines.map(|l| l.split(',').map(|v| v.parse().unwrap_or(f64::NAN)).collect()).collect();
    header.iter().enumerate().map(|(i, h)| (h.to_string(), rows.iter().map(|r| r[i]).collect())).collect()
}

#[cfg(feature = "distributed")]
#[test]
fn text_nproc_2_trains_into_one_run_folder_equals_one_process_on_both_batches_and_resumes() {
    let dir = temp("nproc-text");
    super::text::corpus(&dir.join("data"));
    let (data, runs) = (s(&dir.join("data")), s(&dir.join("runs")));
    let printed = train_text(&data, &runs, 2, 4, 3, &[]);
    assert!(printed.contains("distributed: 2 ranks; batch 4 per rank, 8 global"), "{printed}");
    assert!(printed.contains("batch:           4 per rank x 2 ranks = 8 global"), "{printed}");
    assert!(printed.contains("documents/s"), "{printed}");
    assert_eq!(printed.matches("run folder:").count(), 1, "only rank 0 reports: {printed}");
    assert_eq!(printed.matches("tokenizer: ").count(), 1, "only rank 0 prints: {printed}");
    let run = dir.join("runs/exp_001");
    for file in ["vocab.json", "config.toml", "summary.json", "metrics.csv", "checkpoints/last/meta.json"] {
        assert!(run.join(file).exists(), "no {file} in {}", run.display());
    }
    assert!(!dir.join("runs/exp_002").exists(), "a second rank made a run folder of its own");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["world_size"], 2, "{summary}");
    // The keyword decides the class: both losses fall and most of the held-out quarter (8
    // documents) is learnt (measured: train loss 0.70 to 0.42, val loss 0.71 to 0.53, best
    // val acc 0.875).
    let m = metrics(&run);
    for key in ["train_loss", "val_loss"] {
        let loss = &m[key];
        assert!(loss.iter().all(|l| l.is_finite() && *l > 0.0), "{key} {loss:?}");
        assert!(loss[2] < loss[0] - 0.1, "{key} {loss:?}");
    }
    let acc = summary["best_val_acc"].as_f64().unwrap();
    assert!((0.75..=1.0).contains(&acc), "best val acc {acc}: {summary}");

    // One process on a batch of 8 sees, step by step, the two ranks' batches of 4 together (a
    // DistributedSampler of one rank draws the same permutation), and the fasttext's mean over
    // tokens ignores padding: the same weights up to float summation order (measured: at most
    // 2.4e-7 apart, on weights of size 1, with ATEN_CPU_CAPABILITY default and avx2 alike).
    let one = dir.join("one");
    train_text(&data, &s(&one), 1, 8, 3, &[]);
    let weights = |run: &std::path::Path| {
        let mut w = tch::Tensor::read_safetensors(run.join("checkpoints/last/model.safetensors")).unwrap();
        w.sort_by(|a, b| a.0.cmp(&b.0));
        w
    };
    let (ddp, single) = (weights(&run), weights(&one.join("exp_001")));
    assert_eq!(ddp.len(), single.len());
    for ((name, a), (other, b)) in ddp.iter().zip(&single) {
        assert_eq!(name, other);
        let diff = (a - b).abs().max().double_value(&[]);
        eprintln!("{name}: max |diff| {diff:e}");
        assert!(diff < 1e-5, "{name}: max |diff| {diff} between 2 ranks of 4 and 1 process of 8");
    }
    let val = |m: &std::collections::HashMap<String, Vec<f64>>| m["val_loss"].clone();
    let (a, b) = (val(&m), val(&metrics(&one.join("exp_001"))));
    assert!(a.iter().zip(&b).all(|(a, b)| (a - b).abs() < 1e-5), "val loss {a:?} vs {b:?}");

    // Resumed on two ranks from rank 0's checkpoint, with its vocabulary: one more epoch.
    let out = super::torchlight(&["train", "--nproc", "2", "--resume", &s(&run), "--epochs", "4"]);
    let printed =
        format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{printed}");
    assert!(printed.contains("epochs:          4") && printed.contains("documents/s"), "{printed}");
    let rows = std::fs::read_to_string(run.join("metrics.csv")).unwrap().lines().count();
    assert_eq!(rows, 5, "a header and one row per epoch, written once");

    // text.bucket: the ranks take turns at the bucketed batches (3 steps of 4 documents each).
    let bucketed = dir.join("bucketed");
    let printed = train_text(&data, &s(&bucketed), 2, 4, 1, &["--set", "text.bucket=true"]);
    assert!(printed.contains("distributed: 2 ranks; batch 4 per rank, 8 global"), "{printed}");
    let loss = metrics(&bucketed.join("exp_001"))["train_loss"][0];
    assert!(loss.is_finite() && loss > 0.0, "{loss}");
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
