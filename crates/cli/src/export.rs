//! `torchlight export`.

use crate::loaded::{load, load_hub};
use crate::outln;
use anyhow::Result;
use std::path::PathBuf;
use tch::{Device, Kind, Tensor};
use torchlight_export::{
    export_onnx, export_torchscript, export_torchscript_calibrated, export_torchscript_hflip_tta, OnnxOptions,
};
use torchlight_recipes::image::{eval_preprocessing, Tta};

/// The formats `torchlight export` writes.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    /// ONNX opset 17 with a dynamic batch axis and the preprocessing in its metadata; for a
    /// checkpoint `eval --calibrate` calibrated, the graph divides the logits by the temperature
    /// and the metadata records it as `temperature`.
    Onnx,
    /// Traced TorchScript (`torch.jit.load`), with a `.json` sidecar of classes and preprocessing
    /// (and `temperature`, which the graph already divides the logits by, for a checkpoint
    /// `eval --calibrate` calibrated).
    Torchscript,
    /// The weights alone as safetensors, under PyTorch `state_dict` keys.
    Safetensors,
}

/// Options of `torchlight export`.
#[derive(clap::Args)]
pub struct Args {
    /// A checkpoint folder, or a run folder (its best checkpoint is used, `best_ema` when the run
    /// selected its EMA weights).
    #[arg(long, required_unless_present = "weights", conflicts_with = "weights")]
    checkpoint: Option<PathBuf>,
    /// A Hugging Face Hub model folder (timm's `config.json` + `model.safetensors` or
    /// `pytorch_model.bin`) to export as it is, head included, with no training run: the
    /// preprocessing is its `pretrained_cfg`'s, as training would resolve it.
    #[arg(long, value_name = "DIR")]
    weights: Option<PathBuf>,
    /// With --weights: the architecture, which must be the folder's `architecture` or an alias
    /// of it (`vit_s_16` for `vit_small_patch16_224`; `train --help` lists them) (default: the
    /// folder's).
    #[arg(long, requires = "weights")]
    model: Option<String>,
    /// With --weights: a config value as `section.key=value` (repeatable), e.g.
    /// `--set data.crop_pct=1.0`; it wins over the folder's `pretrained_cfg`.
    #[arg(long = "set", value_name = "KEY=VALUE", requires = "weights")]
    set: Vec<String>,
    /// What to write: `onnx`, `torchscript`, or `safetensors` (the weights alone).
    #[arg(long, value_enum)]
    format: Format,
    /// The file to write (`model.onnx`, `model.pt`, `model.safetensors`); its folder must exist.
    #[arg(long)]
    out: PathBuf,
    /// ONNX: fold BatchNorm into the convolutions.
    #[arg(long)]
    fold_batch_norm: bool,
    /// Test-time augmentation inside the graph: `hflip` runs the model on the image and its
    /// mirror image and outputs the mean of their softmax probabilities (after any stored
    /// temperature), as `predict --tta hflip` computes them; the output is then class
    /// probabilities, not logits (ONNX metadata and the TorchScript sidecar: `tta` = `hflip`,
    /// `output` = `probabilities`). The crop views (`five_crop`, `ten_crop`, `multi_scale`) come
    /// from the image before the crop, so only `eval`/`predict --tta` make them.
    #[arg(long, value_name = "hflip")]
    tta: Option<String>,
}

pub fn run(args: Args) -> Result<()> {
    let hflip_tta = match args.tta.as_deref().map(Tta::parse).transpose().map_err(anyhow::Error::msg)? {
        None => false,
        Some(Tta::HFlip) if matches!(args.format, Format::Safetensors) => {
            anyhow::bail!("--tta hflip goes into an ONNX or TorchScript graph; --format safetensors writes weights alone")
        }
        Some(Tta::HFlip) => true,
        Some(other) => anyhow::bail!(
            "--tta {}: only hflip can go into an exported graph (its views are of the model's input); the crop \
             views are cut from the image before the crop: use `torchlight predict --tta {}` for them",
            other.name(),
            other.name()
        ),
    };
    let loaded = match (&args.checkpoint, &args.weights) {
        (Some(checkpoint), _) => load(checkpoint, Device::Cpu)?,
        (None, Some(dir)) => load_hub(args.model.as_deref(), dir, &args.set, Device::Cpu)?,
        (None, None) => anyhow::bail!("--checkpoint RUN or --weights HUB_FOLDER: what to export"),
    };
    if loaded.tokenizer.is_some() && hflip_tta {
        anyhow::bail!(
            "--tta: {} is a text checkpoint; test-time augmentation makes views of images (image checkpoints only)",
            loaded.from.dir.display()
        );
    }
    if loaded.tokenizer.is_some() && !matches!(args.format, Format::Safetensors) {
        export_text(&loaded, args.format, &args.out)?;
        outln!("wrote {} from {}", args.out.display(), loaded.from)?;
        return Ok(());
    }
    let data = &loaded.card.config.data;
    // The side evaluation uses (timm's test_input_size when the weights came with one).
    let size = data.eval_image_size();
    let classes = &loaded.card.classes;
    // What evaluation applied: the same description the recipe builds its transform from.
    let recipe = eval_preprocessing(&loaded.card.config);
    let side = i64::from(size);
    // The temperature `eval --calibrate` stored: the graph divides the logits by it.
    let temperature = loaded.card.temperature;
    match args.format {
        Format::Onnx => {
            let mut options = OnnxOptions::new(&[3, side, side])
                .with_fold_batch_norm(args.fold_batch_norm)
                .with_class_names(classes)
                .with_preprocessing(&recipe);
            if let Some(t) = temperature {
                options = options.with_temperature(t);
            }
            export_onnx(loaded.model.as_ref(), &options.with_hflip_tta(hflip_tta), &args.out)?;
        }
        Format::Torchscript => {
            let example = Tensor::zeros([2, 3, side, side], (Kind::Float, Device::Cpu));
            match temperature {
                _ if hflip_tta => {
                    export_torchscript_hflip_tta(loaded.model.as_ref(), &example, temperature, &args.out)?
                }
                Some(t) => export_torchscript_calibrated(loaded.model.as_ref(), &example, t, &args.out)?,
                None => export_torchscript(loaded.model.as_ref(), &example, &args.out)?,
            }
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
            if let Some(t) = temperature {
                sidecar["temperature"] = serde_json::json!(t);
            }
            if hflip_tta {
                sidecar["tta"] = serde_json::json!("hflip");
                sidecar["output"] = serde_json::json!("probabilities");
            }
            let path = args.out.with_extension("json");
            std::fs::write(&path, serde_json::to_string_pretty(&sidecar)?)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        }
        // A Hub folder's weights under Torchlight's keys (timm's ViT/ConvNeXt keys mapped).
        Format::Safetensors if loaded.from.hub.is_some() => {
            torchlight_nn::save_safetensors(loaded.model.as_ref(), &args.out)?;
        }
        Format::Safetensors => {
            torchlight_checkpoint::export_weights(&loaded.from.dir, &args.out)?;
        }
    }
    outln!("wrote {} from {}", args.out.display(), loaded.from)?;
    Ok(())
}

/// A text model: ONNX with inputs `ids` [batch, length] and `lengths` [batch], or TorchScript
/// whose forward takes `(ids, lengths)`; the tokenizer the checkpoint carries is written beside
/// the model (`<out stem>.tokenizer.json`, the run's `vocab.json` or Hugging Face
/// `tokenizer.json` content), and the ONNX metadata (and TorchScript's `.json` sidecar) name it
/// with the classes and `text.max_len`, so a deployer tokenizes and cuts exactly as training did.
fn export_text(loaded: &crate::loaded::Loaded, format: Format, out: &std::path::Path) -> Result<()> {
    let card = &loaded.card;
    let tokenizer = card.tokenizer.as_ref().ok_or_else(|| {
        anyhow::anyhow!("{}: the checkpoint carries no tokenizer", loaded.from.dir.display())
    })?;
    let stem = out.file_stem().map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    let tokenizer_path = out.with_file_name(format!("{stem}.tokenizer.json"));
    std::fs::write(&tokenizer_path, serde_json::to_string(&tokenizer.json)?)
        .map_err(|e| anyhow::anyhow!("{}: {e}", tokenizer_path.display()))?;
    let tokenizer_name =
        tokenizer_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let max_len = card.config.text.max_len;
    let kind = if tokenizer.file == torchlight_recipes::text::VOCAB_FILE {
        "torchlight-word-vocab"
    } else {
        "huggingface"
    };
    match format {
        Format::Onnx => {
            let mut options = torchlight_export::TextOnnxOptions::new()
                .with_class_names(&card.classes)
                .with_metadata("tokenizer_file", tokenizer_name)
                .with_metadata("tokenizer_kind", kind)
                .with_metadata("max_len", max_len.to_string())
                .with_metadata("model", card.config.model.name.clone());
            if let Some(t) = card.temperature {
                options = options.with_temperature(t);
            }
            torchlight_export::export_text_onnx(loaded.model.as_ref(), &options, out)?;
        }
        Format::Torchscript => {
            let model = torchlight_recipes::text::as_multi_input(loaded.model.as_ref())
                .ok_or_else(|| anyhow::anyhow!("{}: not a text model", loaded.from.dir.display()))?;
            let example = torchlight_nn::Inputs::new()
                .with("ids", Tensor::ones([2, 8], (Kind::Int64, Device::Cpu)))
                .with("lengths", Tensor::from_slice(&[8i64, 5]));
            match card.temperature {
                Some(t) => torchlight_export::export_torchscript_inputs_calibrated(model, &example, t, out)?,
                None => torchlight_export::export_torchscript_inputs(model, &example, out)?,
            }
            let mut sidecar = serde_json::json!({
                "task": "text",
                "classes": card.classes,
                "model": card.config.model.name,
                "tokenizer_file": tokenizer_name,
                "tokenizer_kind": kind,
                "max_len": max_len,
                "input": "forward(ids [N, T] int64 padded with 0, lengths [N] int64), T <= max_len; returns logits [N, classes]",
            });
            if let Some(t) = card.temperature {
                sidecar["temperature"] = serde_json::json!(t);
            }
            let path = out.with_extension("json");
            std::fs::write(&path, serde_json::to_string_pretty(&sidecar)?)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        }
        Format::Safetensors => unreachable!("weights export the same for every task"),
    }
    Ok(())
}
