//! `torchlight tune lr`: the lr range test (`torchlight_recipes::tune::lr_find`), its plot, the
//! suggested `optim.lr` and, with `--apply`, that value written into the config file.

use anyhow::{bail, Result};
use std::path::PathBuf;
use torchlight_recipes::tune::{lr_find, LR_FINDER_PNG};
use torchlight_recipes::{format_lr, TrainConfig};
use torchlight_train::{LrFindConfig, LrFindMode, Progress};

/// `torchlight tune`'s subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// The learning-rate range test (Leslie Smith's, as PyTorch Lightning's `Tuner.lr_find`):
    /// the lr raised each optimizer step from --min-lr to --max-lr through the real training
    /// step and train loader of the config, stopping once the smoothed loss passes 4x its best;
    /// suggests the lr where the smoothed loss falls fastest and draws `lr_finder.png`.
    Lr(LrArgs),
}

/// Options of `torchlight tune lr`.
#[derive(clap::Args)]
pub struct LrArgs {
    /// ImageFolder root with `train/` (config `data.root`).
    #[arg(long)]
    data: PathBuf,
    /// A TOML config file (the one `train` would use); `--apply` writes the suggestion into it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Any other config value, as `section.key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// The first lr tried.
    #[arg(long, default_value_t = LrFindConfig::default().min_lr)]
    min_lr: f64,
    /// The last lr tried.
    #[arg(long, default_value_t = LrFindConfig::default().max_lr)]
    max_lr: f64,
    /// Optimizer steps (lrs tried); each takes `train.accumulation_steps` batches.
    #[arg(long, default_value_t = LrFindConfig::default().num_training)]
    steps: usize,
    /// How the lr grows: exponential (evenly spaced on a log axis) or linear.
    #[arg(long, default_value = "exponential", value_name = "exponential|linear")]
    mode: String,
    /// Folder for `lr_finder.png` (made if missing); default the config's `train.out_dir`.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Write the suggested `optim.lr` into the `--config` file (its other lines and comments
    /// are kept); an error without `--config`.
    #[arg(long)]
    apply: bool,
}

pub fn run(command: Command) -> Result<()> {
    match command {
        Command::Lr(args) => run_lr(args),
    }
}

fn run_lr(args: LrArgs) -> Result<()> {
    if args.apply && args.config.is_none() {
        bail!("--apply writes the suggestion into the --config file, and none was given: pass --config FILE");
    }
    let mut config = match &args.config {
        Some(path) => TrainConfig::from_toml_file(path)?,
        None => TrainConfig::default(),
    };
    config.set("data.root", &args.data.display().to_string())?;
    for pair in &args.set {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("--set {pair}: expected KEY=VALUE, e.g. --set train.batch_size=16");
        };
        config.set(key.trim(), value.trim())?;
    }
    if !config.data.train_dir().is_dir() {
        bail!(
            "{}: no train/ folder; --data must name an ImageFolder root holding train/<class>/",
            args.data.display()
        );
    }
    let Some(mode) = LrFindMode::parse(&args.mode) else {
        bail!("--mode {}: expected exponential or linear", args.mode);
    };
    let finder = LrFindConfig {
        min_lr: args.min_lr,
        max_lr: args.max_lr,
        num_training: args.steps,
        mode,
        ..LrFindConfig::default()
    };
    let needed = finder.skip_begin + finder.skip_end + 2;
    if finder.num_training < needed {
        bail!(
            "--steps {}: the suggestion leaves out the first {} and the last {} points and needs 2 more; use --steps {needed} or more",
            finder.num_training,
            finder.skip_begin,
            finder.skip_end
        );
    }
    let out = args.out.clone().unwrap_or_else(|| config.train.out_dir.clone());
    let report = lr_find(config, &finder, &out, &Progress::auto())?;
    let f = &report.finder;
    println!(
        "lr range test: {} steps, lr {:.2e} to {:.2e}{}",
        f.lrs.len(),
        f.lrs.first().copied().unwrap_or(finder.min_lr),
        f.lrs.last().copied().unwrap_or(finder.max_lr),
        if f.stopped_early { " (stopped early: the loss diverged)" } else { "" }
    );
    println!("plot: {}", report.plot.display());
    let Some(lr) = report.suggestion() else {
        bail!(
            "no lr suggestion: {} steps leave fewer than 2 points after skipping the first {} and last {}; \
             raise --steps or --max-lr, or see {}",
            f.lrs.len(),
            finder.skip_begin,
            finder.skip_end,
            LR_FINDER_PNG
        );
    };
    let line = report.config_line().expect("a suggestion gives a config line");
    println!(
        "suggested lr: {} (the steepest fall of the smoothed loss; the config has optim.lr = {})",
        format_lr(lr),
        format_lr(report.current_lr)
    );
    println!("config line: {line}   (--set {} on the command line)", line.replace(" = ", "="));
    if args.apply {
        if let Some(path) = &args.config {
            TrainConfig::apply_lr_to_file(path, lr)?;
            println!("applied: {} now sets optim.lr = {}", path.display(), format_lr(lr));
        }
    }
    Ok(())
}
