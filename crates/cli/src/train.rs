//! `torchlight train`.

use crate::distributed;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use torchlight_recipes::image::{fit, fit_distributed, resume, resume_distributed};
use torchlight_recipes::{text, RecipeError, TaskKind, TrainConfig};
use torchlight_tensor::DeviceSpec;
use torchlight_train::{Progress, TrainError};

/// Options of `torchlight train`; each flag overrides the config file's value.
#[derive(clap::Args)]
pub struct Args {
    /// ImageFolder root with `train/` and optional `val/`, `test/` (config `data.root`); with
    /// `--task text`, a TextFolder root (`train/<class>/*.txt`).
    #[arg(long)]
    data: Option<PathBuf>,
    /// What to train (config `train.task`): `image` (the default) or `text` (a TextFolder, a
    /// tokenizer and a text model, sized by the config's `[text]` section).
    #[arg(long, value_name = "image|text")]
    task: Option<String>,
    /// A TOML config file with every hyperparameter.
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long, help = crate::model_help(
        "Architecture (config `model.name`)",
        "(`torchlight summary --model NAME` shows one); with `--task text`: fasttext, textcnn, bilstm, transformer"
    ))]
    model: Option<String>,
    /// Starting weights: a torchvision `.pth`, `.safetensors`, a PyTorch Lightning `.ckpt` or a
    /// DDP-saved file (`module.` / `model.` prefixes are stripped), or a timm Hub model folder
    /// (`config.json` + `model.safetensors` or `pytorch_model.bin`); the head is replaced.
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Rewrite the weights' keys before matching, `FROM=TO` (repeatable; `backbone.=` strips
    /// `backbone.`); config `model.key_rewrite`.
    #[arg(long = "key-rewrite", value_name = "FROM=TO")]
    key_rewrite: Vec<String>,
    /// Epochs to train.
    #[arg(long, allow_negative_numbers = true)]
    epochs: Option<usize>,
    /// Side of the square model input.
    #[arg(long, allow_negative_numbers = true)]
    image_size: Option<u32>,
    /// Images per batch.
    #[arg(long, allow_negative_numbers = true)]
    batch_size: Option<usize>,
    /// Learning rate (of the head, and of the backbone when training from scratch).
    #[arg(long, allow_negative_numbers = true)]
    lr: Option<f64>,
    /// Learning rate of the backbone once unfrozen (default: --lr from scratch, a tenth of it
    /// with --weights).
    #[arg(long, allow_negative_numbers = true)]
    backbone_lr: Option<f64>,
    /// Epochs with the backbone frozen (only the head trains).
    #[arg(long, allow_negative_numbers = true)]
    freeze_epochs: Option<usize>,
    /// Loader worker threads.
    #[arg(long, allow_negative_numbers = true)]
    workers: Option<usize>,
    /// Seed for initialisation, split, shuffling and augmentation: 0 to 9223372036854775807,
    /// the range `train.seed` holds (a config's integers are TOML's, 64-bit signed).
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(..=i64::MAX as u64))]
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
        "config", "data", "task", "model", "weights", "key_rewrite", "image_size", "batch_size", "lr", "backbone_lr",
        "freeze_epochs", "seed", "amp", "out",
    ])]
    resume: Option<PathBuf>,
    /// Train data-parallel on N local processes (Gloo on the CPU; NCCL with one GPU per rank on
    /// CUDA), each loading its shard of the data (images, or documents with `--task text`):
    /// `--batch-size` is per rank, the global batch N times it. Rank 0 alone writes the run
    /// folder. Needs the `distributed` feature.
    #[arg(long, value_name = "N")]
    nproc: Option<usize>,
}

pub fn run(mut args: Args) -> Result<()> {
    if let Some(n) = args.nproc {
        if n == 0 {
            bail!("--nproc 0: give the number of processes to train on, at least 1");
        }
        return distributed::launch(n);
    }
    let progress = Progress::auto();
    let mut sets = parse_sets(&args.set)?;
    // A rank (started by --nproc, torchrun or srun) on CUDA takes the GPU of its local rank.
    let cuda = requests_cuda(&args, &sets)?;
    let world = distributed::world(cuda)?;
    if let (Some(w), true) = (&world, cuda) {
        args.device = Some(format!("cuda:{}", w.local_rank));
        sets.retain(|(k, _)| k != "train.device");
    }
    let main = world.as_ref().is_none_or(|w| w.dist.is_main());
    let mut samples = "images";
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
            // The run's own config says which recipe it is; an unreadable one is the image
            // recipe's to report.
            let task = TrainConfig::from_toml_file(run_dir.join("config.toml")).map(|c| c.train.task);
            if matches!(task, Ok(TaskKind::Text)) {
                samples = "documents";
            }
            match (world, task) {
                (None, Ok(TaskKind::Text)) => text::resume(run_dir, &changes, &progress),
                (Some(w), Ok(TaskKind::Text)) => {
                    text::resume_distributed(run_dir, &changes, &progress, w.dist)
                }
                (Some(w), _) => resume_distributed(run_dir, &changes, &progress, w.dist),
                (None, _) => resume(run_dir, &changes, &progress),
            }
        }
        None => {
            let config = config_from(&args, &sets)?;
            let is_text = config.train.task == TaskKind::Text;
            if is_text {
                samples = "documents";
            }
            match world {
                Some(w) if is_text => text::fit_distributed(config, &progress, w.dist),
                Some(w) => fit_distributed(config, &progress, w.dist),
                None if is_text => text::fit(config, &progress),
                None => fit(config, &progress),
            }
        }
    };
    match result {
        Ok(summary) if main => report(&summary, samples),
        Ok(_) => Ok(()),
        Err(e) if !main && matches!(e.as_train(), Some(TrainError::Interrupted { .. })) => {
            std::process::exit(130)
        }
        Err(RecipeError::Train(e)) if matches!(*e, TrainError::Interrupted { .. }) => {
            let TrainError::Interrupted { signal, epoch, step, checkpoint } = *e else { unreachable!() };
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

/// Whether this run trains on CUDA: the device it asks for (`--device`, else the last `--set
/// train.device=`, else the config it starts from: `--resume`'s run or `--config`, else the
/// default) is not the CPU, and libtorch's CUDA backend (loaded first, as `DeviceSpec::resolve`
/// does) sees a GPU. Decides a rank's backend (NCCL or Gloo) and GPU before the config is built,
/// so `--set train.device=cpu` or a config's `device = "cpu"` keeps a rank on the CPU.
fn requests_cuda(args: &Args, sets: &[(String, String)]) -> Result<bool> {
    let requested = requested_device(args, sets);
    let spec = requested.parse::<DeviceSpec>().with_context(|| format!("train.device {requested:?}"))?;
    Ok(spec != DeviceSpec::Cpu && torchlight_tensor::cuda_is_available())
}

/// The `train.device` the run asks for, by the precedence of [`requests_cuda`].
fn requested_device(args: &Args, sets: &[(String, String)]) -> String {
    let from_file = || {
        let file = match &args.resume {
            Some(run) => Some(run.join("config.toml")),
            None => args.config.clone(),
        };
        // An unreadable file is the recipe's to report, with its own error.
        file.and_then(|f| TrainConfig::from_toml_file(&f).ok()).map(|c| c.train.device)
    };
    args.device
        .clone()
        .or_else(|| sets.iter().rev().find(|(k, _)| k == "train.device").map(|(_, v)| v.clone()))
        .or_else(from_file)
        .unwrap_or_else(|| TrainConfig::default().train.device)
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
        ("train.task", args.task.clone()),
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
    if !args.key_rewrite.is_empty() {
        config.model.key_rewrite = args.key_rewrite.clone();
    }
    for (key, value) in sets {
        config.set(key, value)?;
    }
    if !config.data.train_dir().is_dir() {
        let (folder, files) = match config.train.task {
            TaskKind::Text => ("a TextFolder", "train/<class>/*.txt"),
            TaskKind::Image => ("an ImageFolder", "train/<class>/"),
        };
        bail!(
            "{}: no train/ folder; --data must name {folder} root holding {files} (and optionally val/, test/)",
            config.data.root.display()
        );
    }
    Ok(config)
}

/// The run's figures; `samples` names what it trains on (`images`, `documents`).
fn report(summary: &torchlight_recipes::RunSummary, samples: &str) -> Result<()> {
    println!("run folder:      {}", summary.run_dir.display());
    println!("best val acc:    {:.4} (epoch {})", summary.best_val_acc, summary.best_epoch);
    if let (Some(acc), Some(epoch)) = (summary.best_ema_val_acc, summary.best_ema_epoch) {
        let selected =
            if summary.ema_selected { "selected" } else { "not selected: outputs are the raw model's" };
        println!("best EMA val acc: {acc:.4} (epoch {epoch}; EMA weights {selected})");
    }
    if let Some(acc) = summary.test_acc {
        println!("test acc:        {acc:.4}");
    }
    println!(
        "epochs:          {}{}",
        summary.epochs,
        if summary.stopped_early { " (stopped early)" } else { "" }
    );
    if summary.world_size > 1 {
        println!(
            "batch:           {} per rank x {} ranks = {} global",
            summary.batch_size,
            summary.world_size,
            summary.batch_size * summary.world_size
        );
    }
    println!("throughput:      {:.1} {samples}/s ({:.0} s)", summary.train_images_per_s, summary.seconds);
    println!("checkpoints:     {}", summary.run_dir.join("checkpoints").display());
    println!("curves:          {}", summary.run_dir.join("curves.png").display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{parse_sets, requested_device, Args};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn requested(argv: &[&str]) -> String {
        let cli = Cli::try_parse_from(std::iter::once("train").chain(argv.iter().copied())).unwrap();
        requested_device(&cli.args, &parse_sets(&cli.args.set).unwrap())
    }

    /// A rank's backend and GPU follow the device the run asks for, wherever it is asked:
    /// `--device` over `--set train.device` over the config file (or the resumed run's).
    #[test]
    fn a_rank_trains_on_the_device_the_run_asks_for() {
        let dir = std::env::temp_dir().join(format!("torchlight-requested-device-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("cpu.toml");
        std::fs::write(&config, "[train]\ndevice = \"cpu\"\n").unwrap();
        let config = config.to_str().unwrap();
        let default = torchlight_recipes::TrainConfig::default().train.device;
        assert_eq!(requested(&[]), default);
        assert_eq!(requested(&["--config", config]), "cpu");
        assert_eq!(requested(&["--config", config, "--set", "train.device=cuda:0"]), "cuda:0");
        assert_eq!(requested(&["--set", "train.device=cuda", "--set", "train.device=cpu"]), "cpu");
        assert_eq!(requested(&["--config", config, "--set", "train.device=cuda", "--device", "cpu"]), "cpu");
        let run = dir.join("exp_001");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(run.join("config.toml"), "[train]\ndevice = \"cpu\"\n").unwrap();
        assert_eq!(requested(&["--resume", run.to_str().unwrap()]), "cpu");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
