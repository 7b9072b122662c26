//! `torchlight train`.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use torchlight_train::{fit, Progress, TrainConfig};

/// Options of `torchlight train`; each flag overrides the config file's value.
#[derive(clap::Args)]
pub struct Args {
    /// ImageFolder root with `train/` and optional `val/`, `test/` (config `data.root`).
    #[arg(long)]
    data: Option<PathBuf>,
    /// A TOML config file with every hyperparameter.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Architecture: resnet18, resnet34, resnet50, resnet101, resnet152.
    #[arg(long)]
    model: Option<String>,
    /// Starting weights (`.pth` from torchvision or `.safetensors`); the head is replaced.
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Epochs to train.
    #[arg(long, allow_negative_numbers = true)]
    epochs: Option<usize>,
    /// Side of the square model input.
    #[arg(long, allow_negative_numbers = true)]
    image_size: Option<u32>,
    /// Images per batch.
    #[arg(long, allow_negative_numbers = true)]
    batch_size: Option<usize>,
    /// Learning rate of the head.
    #[arg(long, allow_negative_numbers = true)]
    lr: Option<f64>,
    /// Learning rate of the backbone once unfrozen.
    #[arg(long, allow_negative_numbers = true)]
    backbone_lr: Option<f64>,
    /// Epochs with the backbone frozen (only the head trains).
    #[arg(long, allow_negative_numbers = true)]
    freeze_epochs: Option<usize>,
    /// Loader worker threads.
    #[arg(long, allow_negative_numbers = true)]
    workers: Option<usize>,
    /// Seed for initialisation, split, shuffling and augmentation.
    #[arg(long, allow_negative_numbers = true)]
    seed: Option<u64>,
    /// Mixed precision (fp16 + GradScaler on CUDA, bf16 on CPU).
    #[arg(long)]
    amp: bool,
    /// `auto`, `cpu`, `cuda` or `cuda:N`.
    #[arg(long)]
    device: Option<String>,
    /// Parent folder of the run folders.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Any other config value, as `section.key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Continue the run in this run folder from its last checkpoint (its own config is used).
    #[arg(long, conflicts_with_all = ["config", "data", "set"])]
    resume: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    let progress = Progress::auto();
    if let Some(run_dir) = &args.resume {
        let summary = fit(TrainConfig::default(), Some(run_dir), &progress)?;
        return report(&summary);
    }
    let mut config = match &args.config {
        Some(path) => TrainConfig::from_toml_file(path)?,
        None => TrainConfig::default(),
    };
    let flags: Vec<(&str, Option<String>)> = vec![
        ("data.root", args.data.as_ref().map(|p| p.display().to_string())),
        ("model.name", args.model.clone()),
        ("model.pretrained", args.weights.as_ref().map(|p| p.display().to_string())),
        ("train.epochs", args.epochs.map(|v| v.to_string())),
        ("data.image_size", args.image_size.map(|v| v.to_string())),
        ("train.batch_size", args.batch_size.map(|v| v.to_string())),
        ("optim.lr", args.lr.map(|v| v.to_string())),
        ("optim.backbone_lr", args.backbone_lr.map(|v| v.to_string())),
        ("model.freeze_epochs", args.freeze_epochs.map(|v| v.to_string())),
        ("data.workers", args.workers.map(|v| v.to_string())),
        ("train.seed", args.seed.map(|v| v.to_string())),
        ("train.amp", args.amp.then(|| "true".to_string())),
        ("train.device", args.device.clone()),
        ("train.out_dir", args.out.as_ref().map(|p| p.display().to_string())),
    ];
    for (key, value) in flags {
        if let Some(value) = value {
            config.set(key, &value)?;
        }
    }
    for pair in &args.set {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("--set {pair}: expected KEY=VALUE, e.g. --set optim.weight_decay=0.05");
        };
        config.set(key.trim(), value.trim())?;
    }
    if !config.data.train_dir().is_dir() {
        bail!(
            "{}: no train/ folder; --data must name an ImageFolder root holding train/<class>/ (and optionally val/, test/)",
            config.data.root.display()
        );
    }
    let summary = fit(config, None, &progress).context("training failed")?;
    report(&summary)
}

fn report(summary: &torchlight_train::RunSummary) -> Result<()> {
    println!("run folder:      {}", summary.run_dir.display());
    println!("best val acc:    {:.4} (epoch {})", summary.best_val_acc, summary.best_epoch);
    if let Some(acc) = summary.test_acc {
        println!("test acc:        {acc:.4}");
    }
    println!(
        "epochs:          {}{}",
        summary.epochs,
        if summary.stopped_early { " (stopped early)" } else { "" }
    );
    println!("throughput:      {:.1} images/s ({:.0} s)", summary.train_images_per_s, summary.seconds);
    println!("checkpoints:     {}", summary.run_dir.join("checkpoints").display());
    println!("curves:          {}", summary.run_dir.join("curves.png").display());
    Ok(())
}
