//! `torchlight train`.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use torchlight_train::{fit, resume, Progress, TrainConfig, TrainError};

/// Options of `torchlight train`; each flag overrides the config file's value.
#[derive(clap::Args)]
pub struct Args {
    /// ImageFolder root with `train/` and optional `val/`, `test/` (config `data.root`).
    #[arg(long)]
    data: Option<PathBuf>,
    /// A TOML config file with every hyperparameter.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Architecture: resnet18, resnet34, resnet50, resnet101, resnet152 (config `model.name`).
    #[arg(long)]
    model: Option<String>,
    /// Starting weights (`.pth` from torchvision or `.safetensors`); the head is replaced.
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Epochs to train.
    #[arg(long)]
    epochs: Option<usize>,
    /// Side of the square model input.
    #[arg(long)]
    image_size: Option<u32>,
    /// Images per batch.
    #[arg(long)]
    batch_size: Option<usize>,
    /// Learning rate of the head.
    #[arg(long)]
    lr: Option<f64>,
    /// Learning rate of the backbone once unfrozen.
    #[arg(long)]
    backbone_lr: Option<f64>,
    /// Epochs with the backbone frozen (only the head trains).
    #[arg(long)]
    freeze_epochs: Option<usize>,
    /// Loader worker threads.
    #[arg(long)]
    workers: Option<usize>,
    /// Seed for initialisation, split, shuffling and augmentation.
    #[arg(long)]
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
    /// Continue the run in this run folder from its last checkpoint, exactly where it stopped
    /// (its own config is used; `--epochs` extends a finished run, and `--device`,
    /// `--workers` and `--set` may change how, not what, it trains).
    #[arg(long, conflicts_with_all = [
        "config", "data", "model", "weights", "image_size", "batch_size", "lr", "backbone_lr",
        "freeze_epochs", "seed", "amp", "out",
    ])]
    resume: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    let progress = Progress::auto();
    let sets = parse_sets(&args.set)?;
    let result = match &args.resume {
        Some(run_dir) => {
            let mut changes: Vec<(String, String)> = [
                ("train.epochs", args.epochs.map(|v| v.to_string())),
                ("train.device", args.device.clone()),
                ("data.workers", args.workers.map(|v| v.to_string())),
            ]
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
            .collect();
            changes.extend(sets);
            resume(run_dir, &changes, &progress)
        }
        None => fit(config_from(&args, &sets)?, &progress),
    };
    match result {
        Ok(summary) => report(&summary),
        Err(TrainError::Interrupted { signal, epoch, step, checkpoint }) => {
            eprintln!("interrupted by {signal} in epoch {epoch} after step {step}");
            match checkpoint.as_deref().and_then(run_folder_of) {
                Some(run) => eprintln!("saved; resume with: torchlight train --resume {}", run.display()),
                None => eprintln!("no checkpoint was saved"),
            }
            std::process::exit(130);
        }
        Err(e) => Err(e).context("training failed"),
    }
}

/// The run folder of a checkpoint folder `<run>/checkpoints/<name>`.
fn run_folder_of(checkpoint: &std::path::Path) -> Option<PathBuf> {
    Some(checkpoint.parent()?.parent()?.to_path_buf())
}

fn parse_sets(pairs: &[String]) -> Result<Vec<(String, String)>> {
    pairs
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) => Ok((key.trim().to_string(), value.trim().to_string())),
            None => bail!("--set {pair}: expected KEY=VALUE, e.g. --set optim.weight_decay=0.05"),
        })
        .collect()
}

/// The config of a new run: the file, then each flag, then each `--set`.
fn config_from(args: &Args, sets: &[(String, String)]) -> Result<TrainConfig> {
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
    for (key, value) in sets {
        config.set(key, value)?;
    }
    if !config.data.train_dir().is_dir() {
        bail!(
            "{}: no train/ folder; --data must name an ImageFolder root holding train/<class>/ (and optionally val/, test/)",
            config.data.root.display()
        );
    }
    Ok(config)
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
