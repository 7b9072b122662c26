//! `torchlight predict`.

use crate::loaded::load;
use crate::outln;
use crate::sidecar::Sidecar;
use anyhow::{anyhow, bail, Result};
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};
use torchlight_export::load_torchscript;
use torchlight_recipes::image::eval_preprocessing;
use torchlight_tensor::{no_grad, seed::rng_from_seed, DeviceSpec};
use torchlight_vision::{decode_file_with, DecodeOptions, Sample, Transform, DEFAULT_MAX_IMAGE_PIXELS};

/// Options of `torchlight predict`.
#[derive(clap::Args)]
pub struct Args {
    /// A checkpoint or run folder, or a TorchScript file from `torchlight export` (with its
    /// `.json` sidecar naming the classes and input size).
    #[arg(long)]
    checkpoint: PathBuf,
    /// Images to classify. Each is reported on its own; the exit status is non-zero if any
    /// could not be classified.
    #[arg(required = true)]
    images: Vec<PathBuf>,
    /// How many classes to list per image (at least 1; more than the model has lists all).
    #[arg(long, default_value_t = 3)]
    top_k: usize,
    /// `auto`, `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "auto")]
    device: String,
    /// The most pixels an image may declare before it is refused unread (a decompression bomb
    /// guard; 0 lifts it). Default: the checkpoint's `data.max_image_pixels`, else Pillow's
    /// 178956970.
    #[arg(long)]
    max_image_pixels: Option<u64>,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

enum Runner {
    Native(Box<crate::loaded::Loaded>),
    Script(tch::CModule),
}

/// One image's outcome: its top classes, or why it could not be classified.
type Outcome = std::result::Result<Vec<(String, f64)>, String>;

pub fn run(args: Args) -> Result<()> {
    if args.top_k == 0 {
        bail!("--top-k 0: give how many classes to list per image, at least 1");
    }
    let device = args.device.parse::<DeviceSpec>()?.resolve()?;
    // A file is an exported TorchScript module; a folder is a checkpoint or run folder.
    let (runner, classes, preprocessing, run_limit, exif, source) = if args.checkpoint.is_file() {
        let mut module = load_torchscript(&args.checkpoint)?;
        let sidecar = Sidecar::of(&args.checkpoint)?;
        module.to(device, Kind::Float, false);
        check_outputs(&module, &sidecar, &args.checkpoint, device)?;
        let exif = sidecar.exif_transpose.unwrap_or(true);
        let source = serde_json::json!({ "path": args.checkpoint });
        (
            Runner::Script(module),
            sidecar.classes,
            sidecar.preprocessing,
            sidecar.max_image_pixels,
            exif,
            source,
        )
    } else {
        let loaded = load(&args.checkpoint, device)?;
        let config = &loaded.card.config;
        let (classes, preprocessing, limit) =
            (loaded.card.classes.clone(), eval_preprocessing(config), config.data.max_image_pixels);
        let exif = config.data.exif_transpose;
        if !args.json {
            // On stderr: standard output keeps one line per image.
            eprintln!("checkpoint {}", loaded.from);
        }
        let source = loaded.from.to_json();
        (Runner::Native(Box::new(loaded)), classes, preprocessing, Some(limit), exif, source)
    };
    if classes.is_empty() {
        bail!("{}: the model has no class names", args.checkpoint.display());
    }
    let limit = args.max_image_pixels.or(run_limit).unwrap_or(DEFAULT_MAX_IMAGE_PIXELS);
    let decode =
        DecodeOptions::default().with_max_pixels((limit > 0).then_some(limit)).with_exif_transpose(exif);
    let transform = preprocessing.transform();
    let k = args.top_k.clamp(1, classes.len()) as i64;
    let classify = |path: &Path| -> Result<Vec<(String, f64)>> {
        let x = preprocess(&transform, path, &decode)?.to_device(device);
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
        let (p, i) = probs.topk(k, 0, true, true);
        Ok(Vec::<i64>::try_from(&i)?
            .into_iter()
            .zip(Vec::<f64>::try_from(&p.to_kind(Kind::Double))?)
            .map(|(i, p)| (classes[i as usize].clone(), p))
            .collect())
    };
    let mut failed = 0;
    let mut results: Vec<(PathBuf, Outcome)> = Vec::new();
    for path in &args.images {
        let outcome = classify(path).map_err(|e| format!("{e:#}"));
        if let Err(e) = &outcome {
            failed += 1;
            // Reported as it happens (stderr), so a long list shows progress on its failures.
            eprintln!("error: {e}");
        }
        if !args.json {
            if let Ok(top) = &outcome {
                let list: Vec<String> = top.iter().map(|(c, p)| format!("{c} {:.1}%", p * 100.0)).collect();
                outln!("{}: {}", path.display(), list.join(", "))?;
            }
        }
        results.push((path.clone(), outcome));
    }
    if args.json {
        let json: Vec<_> = results
            .iter()
            .map(|(path, outcome)| match outcome {
                Ok(top) => serde_json::json!({
                    "image": path,
                    "checkpoint": source,
                    "top": top.iter().map(|(c, p)| serde_json::json!({"class": c, "probability": p})).collect::<Vec<_>>(),
                }),
                Err(e) => serde_json::json!({"image": path, "checkpoint": source, "error": e}),
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&json)?)?;
    }
    if failed > 0 {
        bail!("{failed} of {} images could not be classified", args.images.len());
    }
    Ok(())
}

/// Runs the TorchScript `module` once on a zero `[1, 3, S, S]` input (S the sidecar's
/// `image_size`) and checks that it gives one score per class the sidecar names, so an edited
/// sidecar is one error naming it, not an index out of range per image.
fn check_outputs(module: &tch::CModule, sidecar: &Sidecar, model: &Path, device: Device) -> Result<()> {
    let side = sidecar.image_size() as i64;
    let x = Tensor::zeros([1, 3, side, side], (Kind::Float, device));
    let y = {
        let _g = no_grad();
        module.forward_ts(&[x]).map_err(|e| {
            let e = e.to_string();
            let first = e.lines().next().unwrap_or_default();
            anyhow!(
                "{}: the model does not take the [1, 3, {side}, {side}] input its sidecar {} describes (field `image_size`): {first}",
                model.display(),
                sidecar.path.display()
            )
        })?
    };
    let outputs = y.size();
    match outputs[..] {
        [1, n] if n as usize == sidecar.classes.len() => Ok(()),
        [1, n] => bail!(
            "{}: field `classes` names {} classes but {} outputs {n} scores",
            sidecar.path.display(),
            sidecar.classes.len(),
            model.display()
        ),
        _ => bail!(
            "{}: outputs a {outputs:?} tensor for one image, not [1, classes]: not an image classifier",
            model.display()
        ),
    }
}

/// Decodes `path` and applies the evaluation transform: `[1, 3, S, S]`.
fn preprocess(transform: &dyn Transform, path: &Path, decode: &DecodeOptions) -> Result<Tensor> {
    let image = decode_file_with(path, decode)?;
    let sample = transform.apply(Sample::Image(image), &mut rng_from_seed(0))?;
    let t = sample
        .into_tensor()
        .ok_or_else(|| anyhow!("{}: the transform did not produce a tensor", path.display()))?;
    Ok(Tensor::from_slice(&t.data).view([1, t.channels as i64, t.height as i64, t.width as i64]))
}
