//! `cargo xtask train-demo`: the seed workflow end to end on a synthetic image set, through
//! the `torchlight` command: pre-train a backbone on a broader source task, fine-tune it on the
//! three-class target (new head, backbone frozen first), evaluate on test, export, predict.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

pub(crate) fn torchlight(bin: &Path, args: &[&str]) -> Result<()> {
    eprintln!("\n$ torchlight {}", args.join(" "));
    let status =
        Command::new(bin).args(args).status().with_context(|| format!("could not run {}", bin.display()))?;
    if !status.success() {
        bail!("`torchlight {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

pub(crate) fn newest_run(parent: &Path) -> Result<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(parent)
        .with_context(|| format!("{}", parent.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("summary.json").is_file())
        .collect();
    runs.sort();
    runs.pop().with_context(|| format!("no finished run under {}", parent.display()))
}

fn summary_value(run: &Path, key: &str) -> Result<f64> {
    let text = std::fs::read_to_string(run.join("summary.json"))?;
    // summary.json is pretty-printed JSON with one `"key": value` per line.
    text.lines()
        .find_map(|l| {
            l.trim().strip_prefix(&format!("\"{key}\":")).map(|v| v.trim().trim_end_matches(',').to_string())
        })
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("{} has no numeric {key}", run.join("summary.json").display()))
}

pub fn train_demo(root: &Path, target_dir: &Path, cargo: impl Fn() -> Command) -> Result<()> {
    let started = Instant::now();
    eprintln!("xtask: building the torchlight command (release)");
    let status = cargo().current_dir(root).args(["build", "--release", "-p", "torchlight-cli"]).status()?;
    if !status.success() {
        bail!("cargo build failed ({status})");
    }
    let bin = target_dir.join("release/torchlight");
    let demo = target_dir.join("demo");
    let runs = demo.join("runs");
    if runs.exists() {
        std::fs::remove_dir_all(&runs)?;
    }
    let built = Instant::now();
    let data = demo.join("data");
    if !data.join("target/test").is_dir() {
        torchlight(&bin, &["demo-data", "--out", &data.display().to_string()])?;
    }
    let d = |p: &Path| p.display().to_string();
    let common = [
        "--model",
        "resnet18",
        "--image-size",
        "64",
        "--batch-size",
        "32",
        "--workers",
        "2",
        "--device",
        "auto",
    ];

    // 1. Pre-train the backbone on the broader source task (five shapes).
    let mut args = vec!["train", "--data"];
    let (source, source_runs) = (d(&data.join("source")), d(&runs.join("source")));
    args.extend([source.as_str(), "--epochs", "12", "--lr", "1e-3", "--backbone-lr", "1e-3"]);
    args.extend(["--out", source_runs.as_str(), "--set", "data.min_crop_scale=0.5"]);
    args.extend(common);
    torchlight(&bin, &args)?;
    let source_run = newest_run(&runs.join("source"))?;
    let backbone = d(&demo.join("backbone.safetensors"));
    torchlight(
        &bin,
        &["export", "--checkpoint", &d(&source_run), "--format", "safetensors", "--out", &backbone],
    )?;

    // 2. Fine-tune on the three-class target: new head, backbone frozen for three epochs, then
    //    unfrozen at half the head's learning rate.
    let (target, target_runs) = (d(&data.join("target")), d(&runs.join("target")));
    let mut args =
        vec!["train", "--data", target.as_str(), "--weights", backbone.as_str(), "--freeze-epochs", "3"];
    args.extend(["--epochs", "15", "--lr", "1e-3", "--backbone-lr", "5e-4", "--out", target_runs.as_str()]);
    args.extend(["--set", "data.min_crop_scale=0.5", "--set", "train.top_k=2"]);
    args.extend(common);
    torchlight(&bin, &args)?;
    let run = newest_run(&runs.join("target"))?;

    // 3. Evaluate, export and predict.
    torchlight(&bin, &["eval", "--checkpoint", &d(&run), "--data", &target])?;
    let onnx = d(&run.join("model.onnx"));
    let script = d(&run.join("model.pt"));
    torchlight(&bin, &["export", "--checkpoint", &d(&run), "--format", "onnx", "--out", &onnx])?;
    torchlight(&bin, &["export", "--checkpoint", &d(&run), "--format", "torchscript", "--out", &script])?;
    let samples: Vec<String> = ["ring", "star", "frame"]
        .iter()
        .map(|c| d(&data.join(format!("target/test/{c}/00000.jpg"))))
        .collect();
    let mut args = vec!["predict", "--checkpoint", script.as_str()];
    args.extend(samples.iter().map(String::as_str));
    torchlight(&bin, &args)?;

    let test_acc = summary_value(&run, "test_acc")?;
    println!(
        "\n== Torchlight demo finished in {:.0} s (plus {:.0} s building) ==",
        built.elapsed().as_secs_f64(),
        (built - started).as_secs_f64()
    );
    println!("pre-training run:   {}", source_run.display());
    println!("fine-tuning run:    {}", run.display());
    println!("  curves:           {}", run.join("curves.png").display());
    println!("  confusion matrix: {}", run.join("confusion_matrix.png").display());
    println!("  checkpoints:      {}", run.join("checkpoints").display());
    println!("  exports:          {onnx}, {script}");
    println!("  TensorBoard:      tensorboard --logdir {}", runs.display());
    println!("target test accuracy: {:.2}%", test_acc * 100.0);
    if test_acc < 0.95 {
        bail!("the demo's target test accuracy {:.2}% is below its 95% goal", test_acc * 100.0);
    }
    Ok(())
}
