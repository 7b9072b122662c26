//! `torchlight tune lr`: the lr range test (`torchlight_recipes::tune::lr_find`), its plot, the
//! suggested `optim.lr` and, with `--apply`, that value written into the config file.
//! `torchlight tune batch-size`: the largest batch that trains
//! (`torchlight_recipes::tune::batch_size_find`), the suggested `train.batch_size` and
//! `train.accumulation_steps` for a target effective batch and, with `--apply`, those written.

use anyhow::{bail, Result};
use std::path::PathBuf;
use tch::Device;
use torchlight_recipes::tune::{
    batch_size_find, lr_find, lr_find_distributed, BatchSizeSearch, LR_FINDER_PNG,
};
use torchlight_recipes::{format_lr, TrainConfig};
use torchlight_train::{format_bytes, LrFindConfig, LrFindMode, Progress};

/// `torchlight tune`'s subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// The learning-rate range test (Leslie Smith's, as PyTorch Lightning's `Tuner.lr_find`):
    /// the lr raised each optimizer step from --min-lr to --max-lr through the real training
    /// step and train loader of the config, stopping once the smoothed loss passes 4x its best;
    /// suggests the lr where the smoothed loss falls fastest and draws `lr_finder.png`.
    /// With --nproc N (or as ranks started by torchrun or srun) every rank sweeps its shard as
    /// `train --nproc N` trains, gradients and losses averaged over the ranks.
    Lr(LrArgs),
    /// The largest batch that trains (as PyTorch Lightning's `Tuner.scale_batch_size` in its
    /// binsearch mode): batch sizes doubled from 2 until one runs out of device memory or
    /// --max-batch-size trained, then bisected; each try is two whole training steps of the
    /// config's model, optimizer, AMP, Mixup and image size on real training images, with the
    /// model, optimizer and generators put back and the device's memory released after it.
    /// Suggests train.batch_size and train.accumulation_steps for the target effective batch.
    /// One process, one device (the per-rank batch of a data-parallel run; --nproc N makes the
    /// suggestion keep the effective batch over N ranks); refused as a rank of a launched job.
    BatchSize(BatchSizeArgs),
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
    /// Run the test data-parallel on N local processes, as `train --nproc N` trains: each rank
    /// sweeps its shard with train.batch_size images, the gradients and the loss of each step
    /// averaged over the ranks, so the curve is the global batch's. Rank 0 prints, plots and
    /// applies. Needs the `distributed` feature.
    #[arg(long, value_name = "N")]
    nproc: Option<usize>,
}

/// Options of `torchlight tune batch-size`.
#[derive(clap::Args)]
pub struct BatchSizeArgs {
    /// ImageFolder root with `train/` (config `data.root`).
    #[arg(long)]
    data: PathBuf,
    /// A TOML config file (the one `train` would use); `--apply` writes the suggestion into it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Any other config value, as `section.key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// The largest batch tried. Required on the CPU, where a batch past the machine's memory
    /// is not an error to catch but the kernel killing the process; on CUDA it defaults to the
    /// number of training images (a rank's share of them with --nproc N; a batch is never
    /// larger than an epoch), which also caps it.
    #[arg(long, value_name = "N")]
    max_batch_size: Option<usize>,
    /// The effective batch (images per optimizer step, over all --nproc ranks) the suggestion
    /// keeps; default the config's train.batch_size x train.accumulation_steps (x N ranks).
    #[arg(long, value_name = "N")]
    target_batch: Option<usize>,
    /// Write the suggested train.batch_size and train.accumulation_steps into the `--config`
    /// file (its other lines and comments are kept); an error without `--config`.
    #[arg(long)]
    apply: bool,
    /// Suggest for `train --nproc N`: the search still runs here, in one process on one device
    /// (each rank of `train --nproc N` trains its own batch of train.batch_size on its own GPU,
    /// so the batch found on one is the per-rank batch), and the suggestion keeps the effective
    /// batch over the N ranks: train.batch_size x train.accumulation_steps x N.
    #[arg(long, value_name = "N")]
    nproc: Option<usize>,
}

pub fn run(command: Command) -> Result<()> {
    match command {
        Command::Lr(args) => run_lr(args),
        Command::BatchSize(args) => run_batch_size(args),
    }
}

/// The config the tuners run: the file (or the defaults), `--data`, then each `--set`.
fn tune_config(config: Option<&PathBuf>, data: &std::path::Path, sets: &[String]) -> Result<TrainConfig> {
    let mut config = match config {
        Some(path) => TrainConfig::from_toml_file(path)?,
        None => TrainConfig::default(),
    };
    config.set("data.root", &data.display().to_string())?;
    for pair in sets {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("--set {pair}: expected KEY=VALUE, e.g. --set train.batch_size=16");
        };
        config.set(key.trim(), value.trim())?;
    }
    if !config.data.train_dir().is_dir() {
        bail!(
            "{}: no train/ folder; --data must name an ImageFolder root holding train/<class>/",
            data.display()
        );
    }
    Ok(config)
}

fn run_batch_size(args: BatchSizeArgs) -> Result<()> {
    if let Some(n) = std::env::var("WORLD_SIZE").ok().and_then(|w| w.parse::<usize>().ok()).filter(|&n| n > 1)
    {
        bail!(
            "WORLD_SIZE={n} (a rank of a launched job): the batch-size search runs in one process on one device, \
             as each rank trains its own batch of train.batch_size on its own GPU; run it once, not under the \
             launcher, with --nproc {n} for a suggestion that keeps the effective batch over the {n} ranks"
        );
    }
    if args.nproc == Some(0) {
        bail!("--nproc 0: give the number of ranks the suggestion is for, at least 1");
    }
    let ranks = args.nproc.unwrap_or(1);
    if args.apply && args.config.is_none() {
        bail!("--apply writes the suggestion into the --config file, and none was given: pass --config FILE");
    }
    for (flag, value) in [("--max-batch-size", args.max_batch_size), ("--target-batch", args.target_batch)] {
        if value == Some(0) {
            bail!("{flag} 0: give a batch of at least 1");
        }
    }
    let config = tune_config(args.config.as_ref(), &args.data, &args.set)?;
    let device = config.train.device_spec()?.resolve()?;
    if device == Device::Cpu && args.max_batch_size.is_none() {
        bail!(
            "--max-batch-size is required on the CPU: there a batch past the machine's memory is not an error \
             the search can catch but the kernel killing the process; give the largest batch to try, e.g. \
             --max-batch-size 256"
        );
    }
    let search =
        BatchSizeSearch { max_batch_size: args.max_batch_size, target_batch: args.target_batch, ranks };
    let report = batch_size_find(config, &search, &Progress::auto())?;
    let f = &report.finder;
    println!("batch-size search on {}, up to {} ({}):", report.device, report.ceiling.0, report.ceiling.1);
    for t in &f.tries {
        println!(
            "  batch {:>6}: {}{}",
            t.batch_size,
            if t.fits { "trains" } else { "out of memory" },
            t.peak_bytes.map_or(String::new(), |b| format!(" (peak {})", format_bytes(b)))
        );
    }
    if let Some((before, after)) = f.allocated_bytes {
        println!(
            "device memory held: {} before the search, {} after it",
            format_bytes(before),
            format_bytes(after)
        );
    }
    let Some(largest) = f.largest else {
        let min = f.config.min_batch_size;
        bail!(
            "not even a batch of {min} trains on {}{}: use a smaller model or data.image_size, train.amp = true, \
             or a device with more free memory",
            report.device,
            if min > 1 { " (a batch of 1 cannot train the model's BatchNorm, so none was tried)" } else { "" }
        );
    };
    println!(
        "largest batch that trains: {largest}{}",
        if f.hit_ceiling() {
            format!(" (the ceiling, {}: larger batches were not tried)", report.ceiling.1)
        } else {
            String::new()
        }
    );
    let s = report.suggestion().expect("a batch trained");
    let (batch, steps) = report.current;
    let effective = report.effective(&s);
    let (over, times) = match ranks {
        1 => (String::new(), String::new()),
        n => (format!(" over {n} ranks"), format!(" x {n} ranks")),
    };
    println!(
        "suggested for an effective batch of {}{over} (the config has {batch} x {steps} accumulation steps{times} = {}): \
         train.batch_size = {}{}, train.accumulation_steps = {}{}",
        report.target,
        batch * steps * ranks,
        s.batch_size,
        if ranks > 1 { " per rank" } else { "" },
        s.accumulation_steps,
        if effective == report.target {
            String::new()
        } else {
            format!(" (effective {effective}, the nearest reachable above {})", report.target)
        }
    );
    let lines = report.config_lines().expect("a suggestion gives config lines");
    println!("config lines: {}; {}", lines[0], lines[1]);
    println!(
        "  (--set {} --set {} on the command line)",
        lines[0].replace(" = ", "="),
        lines[1].replace(" = ", "=")
    );
    if args.apply {
        if let Some(path) = &args.config {
            TrainConfig::apply_batch_size_to_file(path, s.batch_size, s.accumulation_steps)?;
            println!(
                "applied: {} now sets train.batch_size = {} and train.accumulation_steps = {}",
                path.display(),
                s.batch_size,
                s.accumulation_steps
            );
        }
    }
    Ok(())
}

fn run_lr(args: LrArgs) -> Result<()> {
    if args.apply && args.config.is_none() {
        bail!("--apply writes the suggestion into the --config file, and none was given: pass --config FILE");
    }
    if let Some(n) = args.nproc {
        if n == 0 {
            bail!("--nproc 0: give the number of processes to run the range test on, at least 1");
        }
        return crate::distributed::launch(n);
    }
    let mut config = tune_config(args.config.as_ref(), &args.data, &args.set)?;
    // A rank (started by --nproc, torchrun or srun) on CUDA takes the GPU of its local rank.
    let cuda = config.train.device_spec()?.resolve()?.is_cuda();
    let world = crate::distributed::world(cuda)?;
    if let (Some(w), true) = (&world, cuda) {
        config.set("train.device", &format!("cuda:{}", w.local_rank))?;
    }
    let main = world.as_ref().is_none_or(|w| w.dist.is_main());
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
    let progress = Progress::auto();
    let report = match world {
        Some(w) => lr_find_distributed(config, &finder, &out, &progress, w.dist)?,
        None => lr_find(config, &finder, &out, &progress)?,
    };
    if !main {
        return Ok(());
    }
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
