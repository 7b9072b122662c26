//! `torchlight doctor`.

use anyhow::{bail, Result};
use std::path::PathBuf;
use torchlight_recipes::{doctor, DoctorOptions, Status, TaskKind, TrainConfig};

/// Options of `torchlight doctor`.
#[derive(clap::Args)]
pub struct Args {
    /// ImageFolder root with `train/` and optional `val/`, `test/` (config `data.root`); with
    /// `--task text`, a TextFolder root (`train/<class>/*.txt`).
    #[arg(long)]
    data: PathBuf,
    /// What the config trains (config `train.task`): `image` (the default) or `text`, whose
    /// checklist adds duplicate documents across splits, lengths against `text.max_len` and
    /// unknown tokens.
    #[arg(long, value_name = "image|text")]
    task: Option<String>,
    /// A TOML config file (the one `train` would use).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Architecture (config `model.name`): any `train --model`, e.g. resnet18; with
    /// `--task text`: fasttext, textcnn, bilstm, transformer.
    #[arg(long)]
    model: Option<String>,
    /// Any other config value, as `section.key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Steps of the overfit-one-batch check.
    #[arg(long, default_value_t = DoctorOptions::default().overfit_steps)]
    overfit_steps: usize,
    /// Steps of the short real run.
    #[arg(long, default_value_t = DoctorOptions::default().run_steps)]
    run_steps: usize,
    /// Print the findings as JSON.
    #[arg(long)]
    json: bool,
    /// Report folder (made if missing): the image checklist draws `augmented_samples.png`
    /// there, 8 views of 8 training images through the run's own train transform.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    let mut config = match &args.config {
        Some(path) => TrainConfig::from_toml_file(path)?,
        None => TrainConfig::default(),
    };
    config.set("data.root", &args.data.display().to_string())?;
    if let Some(task) = &args.task {
        config.set("train.task", task)?;
    }
    if let Some(model) = &args.model {
        config.set("model.name", model)?;
    }
    for pair in &args.set {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("--set {pair}: expected KEY=VALUE, e.g. --set train.batch_size=16");
        };
        config.set(key.trim(), value.trim())?;
    }
    let text = config.train.task == TaskKind::Text;
    if !config.data.train_dir().is_dir() {
        let (folder, files) =
            if text { ("a TextFolder", "train/<class>/*.txt") } else { ("an ImageFolder", "train/<class>/") };
        bail!("{}: no train/ folder; --data must name {folder} root holding {files}", args.data.display());
    }
    let options = DoctorOptions {
        overfit_steps: args.overfit_steps,
        run_steps: args.run_steps,
        out: args.out.clone(),
        ..DoctorOptions::default()
    };
    let report = doctor(&config, &options)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        if !text {
            // Which decoder turns the JPEGs into pixels: libjpeg-turbo decodes exactly as PIL does.
            println!("JPEG decoder: {}", torchlight_vision::jpeg_decoder());
        }
        print!("{}", report.to_text());
    }
    let failed = report.findings.iter().filter(|f| f.status == Status::Fail).count();
    if failed > 0 {
        bail!("doctor found {failed} failing check(s)");
    }
    Ok(())
}
