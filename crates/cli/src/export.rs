//! `torchlight export`.

use crate::loaded::load;
use crate::outln;
use anyhow::Result;
use std::path::PathBuf;
use tch::{Device, Kind, Tensor};
use torchlight_export::{export_onnx, export_torchscript, OnnxOptions};
use torchlight_recipes::image::eval_preprocessing;

/// The formats `torchlight export` writes.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    /// ONNX opset 17 with a dynamic batch axis and the preprocessing in its metadata.
    Onnx,
    /// Traced TorchScript (`torch.jit.load`), with a `.json` sidecar of classes and preprocessing.
    Torchscript,
    /// The weights alone as safetensors, under PyTorch `state_dict` keys.
    Safetensors,
}

/// Options of `torchlight export`.
#[derive(clap::Args)]
pub struct Args {
    /// A checkpoint folder, or a run folder (its best checkpoint is used, `best_ema` when the run
    /// selected its EMA weights).
    #[arg(long)]
    checkpoint: PathBuf,
    /// What to write: `onnx`, `torchscript`, or `safetensors` (the weights alone).
    #[arg(long, value_enum)]
    format: Format,
    /// The file to write (`model.onnx`, `model.pt`, `model.safetensors`); its folder must exist.
    #[arg(long)]
    out: PathBuf,
    /// ONNX: fold BatchNorm into the convolutions.
    #[arg(long)]
    fold_batch_norm: bool,
}

pub fn run(args: Args) -> Result<()> {
    let loaded = load(&args.checkpoint, Device::Cpu)?;
    if loaded.tokenizer.is_some() && !matches!(args.format, Format::Safetensors) {
        anyhow::bail!(
            "{}: a text model, which exports only as --format safetensors (its weights) for now",
            loaded.from.dir.display()
        );
    }
    let data = &loaded.card.config.data;
    let size = data.image_size;
    let classes = &loaded.card.classes;
    // What evaluation applied: the same description the recipe builds its transform from.
    let recipe = eval_preprocessing(&loaded.card.config);
    let side = i64::from(size);
    match args.format {
        Format::Onnx => {
            let options = OnnxOptions::new(&[3, side, side])
                .with_fold_batch_norm(args.fold_batch_norm)
                .with_class_names(classes)
                .with_preprocessing(&recipe);
            export_onnx(loaded.model.as_ref(), &options, &args.out)?;
        }
        Format::Torchscript => {
            let example = Tensor::zeros([2, 3, side, side], (Kind::Float, Device::Cpu));
            export_torchscript(loaded.model.as_ref(), &example, &args.out)?;
            let mut sidecar = serde_json::json!({
                "classes": classes,
                "image_size": size,
                "max_image_pixels": data.max_image_pixels,
                "exif_transpose": data.exif_transpose,
                "input": "[N, 3, S, S] float32, RGB in [0, 1] normalised with mean/std",
            });
            for (key, value) in recipe.metadata() {
                // Numbers and lists as JSON values, words as strings.
                sidecar[key] = serde_json::from_str(&value).unwrap_or(serde_json::Value::String(value));
            }
            let path = args.out.with_extension("json");
            std::fs::write(&path, serde_json::to_string_pretty(&sidecar)?)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        }
        Format::Safetensors => {
            torchlight_checkpoint::export_weights(&loaded.from.dir, &args.out)?;
        }
    }
    outln!("wrote {} from checkpoint {}", args.out.display(), loaded.from)?;
    Ok(())
}
