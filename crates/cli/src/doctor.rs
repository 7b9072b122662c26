//! `torchlight doctor`.

use anyhow::{bail, Result};
use std::path::PathBuf;
use torchlight_recipes::{doctor, DoctorOptions, Status, TrainConfig};

/// Options of `torchlight doctor`.
#[derive(clap::Args)]
pub struct Args {
    /// ImageFolder root with `train/` and optional `val/`, `test/` (config `data.root`).
    #[arg(long)]
    data: PathBuf,
    /// A TOML config file (the one `train` would use).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Architecture: resnet18, resnet34, resnet50, resnet101, resnet152.
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
}

pub fn run(args: Args) -> Result<()> {
    let mut config = match &args.config {
        Some(path) => TrainConfig::from_toml_file(path)?,
        None => TrainConfig::default(),
    };
    config.set("data.root", &args.data.display().to_string())?;
    if let Some(model) = &args.model {
        config.set("model.name", model)?;
    }
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
    let options = DoctorOptions {
        overfit_steps: args.overfit_steps,
        run_steps: args.run_steps,
        ..DoctorOptions::default()
    };
    let report = doctor(&config, &options)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        // Which decoder turns the JPEGs into pixels: libjpeg-turbo decodes exactly as PIL does.
        println!("JPEG decoder: {}", torchlight_vision::jpeg_decoder());
        print!("{}", report.to_text());
    }
    let failed = report.findings.iter().filter(|f| f.status == Status::Fail).count();
    if failed > 0 {
        bail!("doctor found {failed} failing check(s)");
    }
    Ok(())
}
