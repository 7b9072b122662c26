//! `torchlight predict`.

use crate::loaded::load;
use anyhow::{anyhow, Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};
use torchlight_export::load_torchscript;
use torchlight_tensor::{no_grad, seed::rng_from_seed, DeviceSpec};
use torchlight_train::eval_transform;
use torchlight_vision::{decode_file, Sample, Transform};

/// Options of `torchlight predict`.
#[derive(clap::Args)]
pub struct Args {
    /// A checkpoint or run folder, or a TorchScript file from `torchlight export` (with its
    /// `.json` sidecar naming the classes and input size).
    #[arg(long)]
    checkpoint: PathBuf,
    /// Images to classify.
    #[arg(required = true)]
    images: Vec<PathBuf>,
    /// How many classes to list per image.
    #[arg(long, default_value_t = 3)]
    top_k: usize,
    /// `auto`, `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

/// The sidecar `torchlight export` writes next to a TorchScript file.
#[derive(Deserialize)]
pub struct Sidecar {
    pub classes: Vec<String>,
    pub image_size: usize,
}

enum Runner {
    Native(Box<crate::loaded::Loaded>),
    Script(tch::CModule),
}

pub fn run(args: Args) -> Result<()> {
    let device = args.device.parse::<DeviceSpec>()?.resolve()?;
    let (runner, classes, size) = if args.checkpoint.extension().is_some_and(|e| e == "pt") {
        let sidecar_path = args.checkpoint.with_extension("json");
        let text = std::fs::read_to_string(&sidecar_path).with_context(|| {
            format!("{}: the TorchScript file's sidecar is needed for class names", sidecar_path.display())
        })?;
        let sidecar: Sidecar =
            serde_json::from_str(&text).with_context(|| format!("{}", sidecar_path.display()))?;
        let mut module = load_torchscript(&args.checkpoint)?;
        module.to(device, Kind::Float, false);
        (Runner::Script(module), sidecar.classes, sidecar.image_size)
    } else {
        let loaded = load(&args.checkpoint, device)?;
        let (classes, size) = (loaded.card.classes.clone(), loaded.card.config.data.image_size as usize);
        (Runner::Native(Box::new(loaded)), classes, size)
    };
    let transform = eval_transform(size);
    let mut results = Vec::new();
    for path in &args.images {
        let x = preprocess(&transform, path)?.to_device(device);
        let logits = {
            let _g = no_grad();
            match &runner {
                Runner::Native(l) => l.model.forward_t(&x, false),
                Runner::Script(m) => {
                    m.forward_ts(&[x]).map_err(|e| anyhow!("{}: {e}", args.checkpoint.display()))?
                }
            }
        };
        let probs = logits.softmax(-1, Kind::Float).squeeze_dim(0).to_device(Device::Cpu);
        let k = args.top_k.clamp(1, classes.len()) as i64;
        let (p, i) = probs.topk(k, 0, true, true);
        let top: Vec<(String, f64)> = Vec::<i64>::try_from(&i)?
            .into_iter()
            .zip(Vec::<f64>::try_from(&p.to_kind(Kind::Double))?)
            .map(|(i, p)| (classes[i as usize].clone(), p))
            .collect();
        results.push((path.clone(), top));
    }
    if args.json {
        let json: Vec<_> = results
            .iter()
            .map(|(path, top)| {
                serde_json::json!({
                    "image": path,
                    "top": top.iter().map(|(c, p)| serde_json::json!({"class": c, "probability": p})).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        for (path, top) in results {
            let list: Vec<String> = top.iter().map(|(c, p)| format!("{c} {:.1}%", p * 100.0)).collect();
            println!("{}: {}", path.display(), list.join(", "));
        }
    }
    Ok(())
}

/// Decodes `path` and applies the evaluation transform: `[1, 3, S, S]`.
fn preprocess(transform: &dyn Transform, path: &Path) -> Result<Tensor> {
    let image = decode_file(path)?;
    let sample = transform.apply(Sample::Image(image), &mut rng_from_seed(0))?;
    let t = sample
        .into_tensor()
        .ok_or_else(|| anyhow!("{}: the transform did not produce a tensor", path.display()))?;
    Ok(Tensor::from_slice(&t.data).view([1, t.channels as i64, t.height as i64, t.width as i64]))
}
