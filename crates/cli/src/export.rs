//! `torchlight export`.

use crate::loaded::load;
use anyhow::{bail, Result};
use std::path::PathBuf;
use tch::{Device, Kind, Tensor};
use torchlight_export::{export_onnx, export_torchscript, OnnxOptions};
use torchlight_vision::{IMAGENET_MEAN, IMAGENET_STD};

/// Options of `torchlight export`.
#[derive(clap::Args)]
pub struct Args {
    /// A checkpoint folder, or a run folder (its best checkpoint is used).
    #[arg(long)]
    checkpoint: PathBuf,
    /// `onnx`, `torchscript`, or `safetensors` (the weights alone, PyTorch state_dict keys).
    #[arg(long)]
    format: String,
    /// The file to write (`model.onnx`, `model.pt`).
    #[arg(long)]
    out: PathBuf,
    /// ONNX: fold BatchNorm into the convolutions.
    #[arg(long)]
    fold_batch_norm: bool,
}

pub fn run(args: Args) -> Result<()> {
    let loaded = load(&args.checkpoint, Device::Cpu)?;
    let size = loaded.card.config.data.image_size as i64;
    let classes = &loaded.card.classes;
    match args.format.as_str() {
        "onnx" => {
            let options = OnnxOptions::new(&[3, size, size])
                .with_fold_batch_norm(args.fold_batch_norm)
                .with_class_names(classes)
                .with_normalization(&IMAGENET_MEAN, &IMAGENET_STD);
            export_onnx(loaded.model.as_ref(), &options, &args.out)?;
        }
        "torchscript" => {
            let example = Tensor::zeros([2, 3, size, size], (Kind::Float, Device::Cpu));
            export_torchscript(loaded.model.as_ref(), &example, &args.out)?;
            let sidecar = serde_json::json!({
                "classes": classes,
                "image_size": size,
                "mean": IMAGENET_MEAN,
                "std": IMAGENET_STD,
                "input": "[N, 3, S, S] float32, RGB in [0, 1] normalised with mean/std",
            });
            std::fs::write(args.out.with_extension("json"), serde_json::to_string_pretty(&sidecar)?)?;
        }
        "safetensors" => {
            let dir = if args.checkpoint.join("checkpoints/best").is_dir() {
                args.checkpoint.join("checkpoints/best")
            } else {
                args.checkpoint.clone()
            };
            torchlight_checkpoint::export_weights(&dir, &args.out)?;
        }
        other => bail!("--format {other}: expected `onnx`, `torchscript` or `safetensors`"),
    }
    println!("wrote {}", args.out.display());
    Ok(())
}
