//! `torchlight tune lr` on a tiny generated image set: the suggestion is printed, finite and
//! inside the sweep, `lr_finder.png` is written, `--apply` sets `optim.lr` in the config file
//! and keeps its other lines; `--apply` without `--config` and too short a sweep are errors
//! before any work, saying what to change. `torchlight tune batch-size` on the CPU: each try and
//! the largest batch that trains (the ceiling, where nothing runs out of memory), the batch and
//! accumulation steps for the target effective batch (given, or the config's), `--apply`
//! writing them into the config file, `--nproc 2` keeping the effective batch over two ranks; no
//! ceiling on the CPU, `--nproc 0` and `--apply` without `--config` are one-line errors before any
//! work.

use super::{fails, ok, s, temp};

const QUICK: &[&str] = &[
    "--set",
    "model.name=resnet18",
    "--set",
    "data.image_size=32",
    "--set",
    "train.batch_size=4",
    "--set",
    "train.device=cpu",
    "--set",
    "data.workers=0",
];

/// The number after `prefix` on the output's line that starts with it.
fn value_after(out: &str, prefix: &str) -> f64 {
    let line =
        out.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no `{prefix}` in:\n{out}"));
    let rest = &line[prefix.len()..];
    rest.split_whitespace().next().unwrap().parse().unwrap_or_else(|e| panic!("{line}: {e}"))
}

#[test]
fn tune_lr_prints_a_suggestion_inside_the_sweep_draws_it_and_applies_it() {
    let dir = temp("tune");
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "6"]);
    let data = s(&dir.join("data/source"));
    let config = dir.join("my.toml");
    std::fs::write(&config, "# my settings\n[train]\nepochs = 3\n\n[optim]\nlr = 0.01 # hand-picked\n")
        .unwrap();
    let out_dir = dir.join("tune");
    let mut args = vec!["tune", "lr", "--data", &data];
    let (config_s, out_s) = (s(&config), s(&out_dir));
    args.extend(["--config", &config_s, "--out", &out_s, "--steps", "14", "--min-lr", "1e-6", "--apply"]);
    args.extend_from_slice(QUICK);
    let out = ok(&args);
    let lr = value_after(&out, "suggested lr: ");
    assert!(lr.is_finite() && (1e-6..=1.0).contains(&lr), "{lr} outside the sweep:\n{out}");
    assert_eq!(value_after(&out, "config line: optim.lr = "), lr, "{out}");
    let png = std::fs::read(out_dir.join("lr_finder.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "{} bytes", png.len());
    let edited = std::fs::read_to_string(&config).unwrap();
    assert!(edited.starts_with("# my settings\n[train]\nepochs = 3\n"), "{edited}");
    assert!(edited.contains("# hand-picked"), "{edited}");
    let read = torchlight_recipes::TrainConfig::from_toml_file(&config).unwrap();
    assert_eq!(read.optim.lr, lr, "{edited}");
    assert_eq!(read.train.epochs, 3);
    assert!(out.contains(&format!("applied: {config_s} now sets optim.lr")), "{out}");

    // --apply without a config file says so before any work; too short a sweep leaves no
    // suggestion.
    let mut args = vec!["tune", "lr", "--data", &data, "--out", &out_s, "--apply"];
    args.extend_from_slice(QUICK);
    let err = fails(&args);
    assert!(err.contains("--apply") && err.contains("--config"), "{err}");
    let mut args = vec!["tune", "lr", "--data", &data, "--out", &out_s, "--steps", "5"];
    args.extend_from_slice(QUICK);
    let err = fails(&args);
    assert!(err.contains("--steps 5") && err.contains("--steps 13 or more"), "{err}");
}

#[test]
fn tune_batch_size_prints_each_try_the_largest_batch_and_the_suggestion_and_applies_it() {
    let dir = temp("tune-bs");
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "6"]);
    let data = s(&dir.join("data/source"));
    let config = dir.join("my.toml");
    std::fs::write(&config, "# my settings\n[train]\nepochs = 3\nbatch_size = 32 # too big?\n").unwrap();
    let config_s = s(&config);
    let mut args = vec!["tune", "batch-size", "--data", &data, "--config", &config_s];
    args.extend(["--max-batch-size", "8", "--target-batch", "12", "--apply"]);
    args.extend_from_slice(QUICK);
    let out = ok(&args);
    assert!(out.contains("batch-size search on cpu, up to 8 (--max-batch-size):"), "{out}");
    let tries: Vec<&str> = out.lines().filter(|l| l.starts_with("  batch ")).collect();
    assert_eq!(
        tries,
        ["  batch      2: trains", "  batch      4: trains", "  batch      8: trains"],
        "{out}"
    );
    assert!(out.contains("largest batch that trains: 8 (the ceiling, --max-batch-size"), "{out}");
    // 12 in micro-batches of at most 8: two steps of 6, not 8 x 2 = 16.
    assert!(out.contains("train.batch_size = 6, train.accumulation_steps = 2"), "{out}");
    assert!(out.contains("config lines: train.batch_size = 6; train.accumulation_steps = 2"), "{out}");
    let edited = std::fs::read_to_string(&config).unwrap();
    assert!(edited.starts_with("# my settings\n[train]\n"), "{edited}");
    assert!(edited.contains("batch_size = 6 # too big?"), "{edited}");
    let read = torchlight_recipes::TrainConfig::from_toml_file(&config).unwrap();
    assert_eq!((read.train.batch_size, read.train.accumulation_steps, read.train.epochs), (6, 2, 3));
    assert!(out.contains(&format!("applied: {config_s} now sets train.batch_size = 6")), "{out}");

    // A ceiling that is no power of two is tried as it is; the target defaults to the config's
    // effective batch (train.batch_size=4 from QUICK, x 1), which 3 reaches in 2 steps of 2.
    let mut args = vec!["tune", "batch-size", "--data", &data, "--max-batch-size", "3"];
    args.extend_from_slice(QUICK);
    let out = ok(&args);
    let tries: Vec<&str> = out.lines().filter(|l| l.starts_with("  batch ")).collect();
    assert_eq!(tries, ["  batch      2: trains", "  batch      3: trains"], "{out}");
    assert!(out.contains("suggested for an effective batch of 4 (the config has 4 x 1"), "{out}");
    assert!(out.contains("train.batch_size = 2, train.accumulation_steps = 2"), "{out}");

    // On the CPU the ceiling is required; DDP and --apply without a file are refused.
    let mut args = vec!["tune", "batch-size", "--data", &data];
    args.extend_from_slice(QUICK);
    let err = fails(&args);
    assert!(err.contains("--max-batch-size is required on the CPU") && err.contains("kernel"), "{err}");
    // For `train --nproc 2` the search still runs here, and the suggestion keeps the effective
    // batch over both ranks: 24 = 6 per rank x 2 steps x 2 ranks (the largest, 8, would take
    // 2 steps as well); the default target is the config's 4 x 1 x 2 ranks.
    let mut args = vec!["tune", "batch-size", "--data", &data, "--max-batch-size", "8", "--nproc", "2"];
    args.extend(["--target-batch", "24"]);
    args.extend_from_slice(QUICK);
    let out = ok(&args);
    assert!(out.contains("largest batch that trains: 8"), "{out}");
    assert!(
        out.contains("suggested for an effective batch of 24 over 2 ranks (the config has 4 x 1 accumulation steps x 2 ranks = 8): train.batch_size = 6 per rank, train.accumulation_steps = 2"),
        "{out}"
    );
    let mut args = vec!["tune", "batch-size", "--data", &data, "--max-batch-size", "3", "--nproc", "2"];
    args.extend_from_slice(QUICK);
    let out = ok(&args);
    assert!(out.contains("an effective batch of 8 over 2 ranks"), "{out}");
    // 8 over 2 ranks with at most 3 per rank: 2 steps of 2 per rank.
    assert!(out.contains("train.batch_size = 2 per rank, train.accumulation_steps = 2"), "{out}");
    // A rank's batch is capped at its shard of the epoch: half the training images.
    let mut args = vec!["tune", "batch-size", "--data", &data, "--max-batch-size", "64", "--nproc", "2"];
    args.extend_from_slice(QUICK);
    let out = ok(&args);
    assert!(
        out.contains(
            "up to 15 (a rank's 15 of the 30 training images over 2 ranks (--max-batch-size 64 is more))"
        ),
        "{out}"
    );
    let mut args = vec!["tune", "batch-size", "--data", &data, "--max-batch-size", "8", "--nproc", "0"];
    args.extend_from_slice(QUICK);
    let err = fails(&args);
    assert!(err.contains("--nproc 0"), "{err}");
    let mut args = vec!["tune", "batch-size", "--data", &data, "--max-batch-size", "8", "--apply"];
    args.extend_from_slice(QUICK);
    let err = fails(&args);
    assert!(err.contains("--apply") && err.contains("--config"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
