//! `torchlight`: train, tune, evaluate, predict with, summarise and export image classifiers.

mod augment;
mod calibrate;
mod demo_data;
mod distributed;
mod doctor;
mod eval;
mod export;
mod loaded;
mod out;
mod predict;
mod setup;
mod sidecar;
mod summary;
mod train;
mod tune;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Train image classifiers the PyTorch way, from a folder of images.
#[derive(Parser)]
#[command(name = "torchlight", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train on an ImageFolder (`DIR/train/<class>/*.jpg`, optional `val/` and `test/`).
    Train(Box<train::Args>),
    /// Evaluate a checkpoint on an ImageFolder (a TextFolder for a text model): accuracy,
    /// per-class table, confusion matrix.
    Eval(eval::Args),
    /// Classify images (or texts, with a text model) with a checkpoint folder or an exported
    /// TorchScript file.
    Predict(predict::Args),
    /// Print a model's per-layer parameter table.
    Summary(summary::Args),
    /// Export a checkpoint to ONNX, TorchScript, or its weights alone as safetensors.
    Export(export::Args),
    /// Write what the model sees: the run's train transform applied to a few images several
    /// times, as PNGs and one contact sheet.
    Augment(augment::Args),
    /// Check data, model and training set-up, cheapest first: PASS / WARN / FAIL with fixes.
    Doctor(doctor::Args),
    /// Tune hyperparameters before training: `tune lr`, the learning-rate range test; `tune
    /// batch-size`, the largest batch that trains.
    Tune {
        #[command(subcommand)]
        command: tune::Command,
    },
    /// Write the synthetic demo image set (what `cargo xtask train-demo` trains on).
    DemoData(demo_data::Args),
    /// Install libtorch 2.11.0 (once per machine) and point a Cargo project at it.
    Setup(setup::Args),
}

/// `--model`'s help: `before`, every registered architecture once with its aliases as aliases
/// (`vit_s_16 (alias vit_small_patch16_224, ...)`, the same module under timm's name), `after`.
fn model_help(before: &str, after: &str) -> String {
    format!("{before}: {} {after}", torchlight_nn::architecture_list())
}

/// `torchlight --version`'s text: the version, then the JPEG decoder in use (which decides
/// whether JPEGs decode exactly as PIL does) and whether `train --nproc` is built in.
fn long_version() -> &'static str {
    let text = format!(
        "{}\nJPEG decoder: {}\ndistributed: {}",
        env!("CARGO_PKG_VERSION"),
        torchlight_vision::jpeg_decoder(),
        distributed::BUILT_IN
    );
    Box::leak(text.into_boxed_str())
}

fn main() {
    out::quiet_on_closed_pipe();
    let matches = Cli::command().long_version(long_version()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Command::Train(args) => train::run(*args),
        Command::Eval(args) => eval::run(args),
        Command::Predict(args) => predict::run(args),
        Command::Summary(args) => summary::run(args),
        Command::Export(args) => export::run(args),
        Command::DemoData(args) => demo_data::run(args),
        Command::Doctor(args) => doctor::run(args),
        Command::Augment(args) => augment::run(args),
        Command::Setup(args) => setup::run(args),
        Command::Tune { command } => tune::run(command),
    };
    if let Err(err) = result {
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
