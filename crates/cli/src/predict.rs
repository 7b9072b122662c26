//! `torchlight predict`.

use crate::loaded::load;
use crate::outln;
use crate::sidecar::Sidecar;
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};
use torchlight_export::load_torchscript;
use torchlight_recipes::image::{
    average_softmax, eval_preprocessing, view_batch, Tta, TTA_AVERAGES, TTA_NAMES,
};
use torchlight_recipes::text;
use torchlight_tensor::{no_grad, seed::rng_from_seed, DeviceSpec};
use torchlight_vision::{decode_file_with, DecodeOptions, Sample, Transform, DEFAULT_MAX_IMAGE_PIXELS};

/// Options of `torchlight predict`.
#[derive(clap::Args)]
pub struct Args {
    /// A checkpoint or run folder, or a TorchScript file from `torchlight export` (with its
    /// `.json` sidecar naming the classes and input size).
    #[arg(long, required_unless_present = "weights", conflicts_with = "weights")]
    checkpoint: Option<PathBuf>,
    /// A Hugging Face Hub model folder (timm's `config.json` + weights) instead: its model as it
    /// is, head included, with its `pretrained_cfg`'s preprocessing (`--model`, when given,
    /// must be the folder's architecture or an alias of it).
    #[arg(long, value_name = "DIR")]
    weights: Option<PathBuf>,
    /// With --weights: the architecture, the folder's `architecture` or an alias of it
    /// (`train --help` lists them) (default: the folder's `architecture`).
    #[arg(long, requires = "weights")]
    model: Option<String>,
    /// Images to classify; with a text checkpoint, UTF-8 text files (`.txt`), each read whole
    /// as one document. Each is reported on its own; the exit status is non-zero if any
    /// could not be classified.
    #[arg(required_unless_present = "text")]
    images: Vec<PathBuf>,
    /// A text to classify with a text checkpoint (repeatable): tokenized with the tokenizer the
    /// checkpoint carries and cut to its `text.max_len`, as in training. The texts are reported
    /// first, then the files, each on its line (the text quoted); in `--json` each result names
    /// its text or file under `input`. An empty text fails on its own, like an unreadable image.
    #[arg(long, value_name = "TEXT")]
    text: Vec<String>,
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
    /// Test-time augmentation (image models): classify every view of each image in one batch
    /// and report the mean of their softmax probabilities (not logits); the views are
    /// `torchlight eval --tta`'s (`hflip`, `five_crop`, `ten_crop`, `multi_scale`).
    #[arg(long, value_name = "VIEWS", value_parser = clap::builder::PossibleValuesParser::new(TTA_NAMES))]
    tta: Option<String>,
    /// Print the results as JSON (with --tta, each result's `tta` names the augmentation and
    /// its views).
    #[arg(long)]
    json: bool,
}

impl Args {
    /// The checkpoint, run folder, TorchScript file or Hub folder given.
    fn path(&self) -> &Path {
        self.checkpoint.as_deref().or(self.weights.as_deref()).unwrap_or(Path::new(""))
    }
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
    if args.path().is_file() && !args.text.is_empty() {
        bail!(
            "--text needs a text checkpoint or run folder; {} is an exported file, which classifies images here",
            args.path().display()
        );
    }
    // Whether the model's outputs are already class probabilities (an `export --tta hflip`
    // module), which are then not passed through softmax again.
    let mut outputs_probabilities = false;
    let (runner, classes, preprocessing, run_limit, exif, source) = if args.path().is_file() {
        let mut module = load_torchscript(args.path())?;
        let sidecar = Sidecar::of(args.path())?;
        if sidecar.probabilities && args.tta.is_some() {
            bail!(
                "--tta: {} already averages test-time views in its graph (its sidecar {} says `output` = \
                 \"probabilities\"); predict with it as it is, or export without --tta",
                args.path().display(),
                sidecar.path.display()
            );
        }
        outputs_probabilities = sidecar.probabilities;
        module.to(device, Kind::Float, false);
        check_outputs(&module, &sidecar, args.path(), device)?;
        let exif = sidecar.exif_transpose.unwrap_or(true);
        let source = serde_json::json!({ "path": args.path() });
        (
            Runner::Script(module),
            sidecar.classes,
            sidecar.preprocessing,
            sidecar.max_image_pixels,
            exif,
            source,
        )
    } else {
        let loaded = match &args.weights {
            Some(dir) => crate::loaded::load_hub(args.model.as_deref(), dir, &[], device)?,
            None => load(args.path(), device)?,
        };
        if loaded.tokenizer.is_some() {
            if args.tta.is_some() {
                bail!(
                    "--tta: {} is a text checkpoint; test-time augmentation makes views of images (image checkpoints only)",
                    loaded.from.dir.display()
                );
            }
            return run_text(&args, loaded, device);
        }
        if !args.text.is_empty() {
            bail!(
                "--text: {} is a checkpoint of an {} model (train.task = {:?}); --text needs a text model",
                loaded.from.dir.display(),
                loaded.card.task().name(),
                loaded.card.task().name()
            );
        }
        let config = &loaded.card.config;
        let (classes, preprocessing, limit) =
            (loaded.card.classes.clone(), eval_preprocessing(config), config.data.max_image_pixels);
        let exif = config.data.exif_transpose;
        if !args.json {
            // On stderr: standard output keeps one line per image.
            eprintln!("{}", loaded.from);
        }
        let mut source = loaded.from.to_json();
        if let Some(t) = loaded.card.temperature {
            note_temperature(&mut source, t, args.json);
        }
        (Runner::Native(Box::new(loaded)), classes, preprocessing, Some(limit), exif, source)
    };
    if classes.is_empty() {
        bail!("{}: the model has no class names", args.path().display());
    }
    let limit = args.max_image_pixels.or(run_limit).unwrap_or(DEFAULT_MAX_IMAGE_PIXELS);
    let decode =
        DecodeOptions::default().with_max_pixels((limit > 0).then_some(limit)).with_exif_transpose(exif);
    let transform = preprocessing.transform();
    let tta = args.tta.as_deref().map(Tta::parse).transpose().map_err(anyhow::Error::msg)?;
    let views = tta.map(|t| t.views(&preprocessing)).transpose()?;
    let tta_json = tta.zip(views.as_ref()).map(|(t, views)| {
        let names: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
        if !args.json {
            eprintln!(
                "test-time augmentation {}: {TTA_AVERAGES} averaged over {} views ({})",
                t.name(),
                names.len(),
                names.join(", ")
            );
        }
        serde_json::json!({ "mode": t.name(), "averages": TTA_AVERAGES, "views": names })
    });
    let k = args.top_k.clamp(1, classes.len()) as i64;
    let forward = |x: Tensor| -> Result<Tensor> {
        let _g = no_grad();
        Ok(match &runner {
            Runner::Native(l) => scaled(l.model.forward_t(&x, false), l.card.temperature),
            // An exported module (its graph divides by a stored temperature itself) was traced on one image: the views go through one at a time.
            Runner::Script(m) => {
                let outputs = x
                    .split(1, 0)
                    .into_iter()
                    .map(|x| m.forward_ts(&[x]).map_err(|e| anyhow!("{}: {e}", args.path().display())))
                    .collect::<Result<Vec<_>>>()?;
                Tensor::cat(&outputs, 0)
            }
        })
    };
    let classify = |path: &Path| -> Result<Vec<(String, f64)>> {
        let probabilities = match &views {
            None if outputs_probabilities => {
                forward(preprocess(&transform, path, &decode)?.to_device(device))?
            }
            None => {
                forward(preprocess(&transform, path, &decode)?.to_device(device))?.softmax(-1, Kind::Float)
            }
            Some(views) => {
                let image = decode_file_with(path, &decode)?;
                let logits = forward(view_batch(&image, views)?.to_device(device))?;
                average_softmax(&logits).unsqueeze(0)
            }
        };
        top_classes(&probabilities, k, &classes)
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
            .map(|mut result| {
                if let Some(t) = &tta_json {
                    result["tta"] = t.clone();
                }
                result
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&json)?)?;
    }
    if failed > 0 {
        bail!("{failed} of {} images could not be classified", args.images.len());
    }
    Ok(())
}

/// The logits divided by the temperature `eval --calibrate` stored in the checkpoint, when
/// there is one; the logits as they are otherwise.
fn scaled(logits: Tensor, temperature: Option<f64>) -> Tensor {
    match temperature {
        Some(t) => logits / t,
        None => logits,
    }
}

/// Says that the probabilities are temperature-scaled: on stderr (standard output keeps one
/// line per input), and as `temperature` in the JSON's `checkpoint`.
fn note_temperature(source: &mut serde_json::Value, temperature: f64, json: bool) {
    if !json {
        eprintln!("probabilities are softmax(logits / T), T = {temperature} (stored by eval --calibrate)");
    }
    source["temperature"] = serde_json::json!(temperature);
}

/// The `k` most probable classes of one input's probabilities `[1, C]`, most probable first.
fn top_classes(probabilities: &Tensor, k: i64, classes: &[String]) -> Result<Vec<(String, f64)>> {
    let probs = probabilities.squeeze_dim(0).to_device(Device::Cpu);
    let (p, i) = probs.topk(k, 0, true, true);
    Ok(Vec::<i64>::try_from(&i)?
        .into_iter()
        .zip(Vec::<f64>::try_from(&p.to_kind(Kind::Double))?)
        .map(|(i, p)| (classes[i as usize].clone(), p))
        .collect())
}

/// One input of a text model: a `--text` string or a text file.
enum TextInput<'a> {
    Text(&'a str),
    File(&'a Path),
}

impl TextInput<'_> {
    /// How the input is named: the file's path, or the text itself (quoted on a line).
    fn name(&self, quoted: bool) -> String {
        match self {
            TextInput::Text(t) if quoted => format!("{t:?}"),
            TextInput::Text(t) => t.to_string(),
            TextInput::File(p) => p.display().to_string(),
        }
    }
}

/// `predict` with a text checkpoint: every `--text`, then every file, classified with the
/// tokenizer its card carries; the output is the image form's, each input named by its text
/// or path.
fn run_text(args: &Args, loaded: crate::loaded::Loaded, device: Device) -> Result<()> {
    let tokenizer = loaded.tokenizer.as_deref().expect("a text checkpoint has its tokenizer");
    let classes = &loaded.card.classes;
    let max_len = loaded.card.config.text.max_len;
    if classes.is_empty() {
        bail!("{}: the model has no class names", args.path().display());
    }
    if !args.json {
        eprintln!("{}", loaded.from);
    }
    let mut source = loaded.from.to_json();
    let temperature = loaded.card.temperature;
    if let Some(t) = temperature {
        note_temperature(&mut source, t, args.json);
    }
    let k = args.top_k.clamp(1, classes.len()) as i64;
    let classify = |input: &TextInput| -> Result<Vec<(String, f64)>> {
        let text = match input {
            TextInput::Text(t) => t.to_string(),
            TextInput::File(p) => torchlight_text::read_document(p)?,
        };
        let inputs = text::document_inputs(tokenizer, &text, max_len).with_context(|| input.name(true))?;
        let logits = scaled(text::text_logits(loaded.model.as_ref(), &inputs, device)?, temperature);
        top_classes(&logits.softmax(-1, Kind::Float), k, classes)
    };
    let inputs: Vec<TextInput> = args
        .text
        .iter()
        .map(|t| TextInput::Text(t))
        .chain(args.images.iter().map(|p| TextInput::File(p)))
        .collect();
    let mut failed = 0;
    let mut json = Vec::new();
    for input in &inputs {
        let outcome: Outcome = classify(input).map_err(|e| format!("{e:#}"));
        match &outcome {
            Err(e) => {
                failed += 1;
                eprintln!("error: {e}");
            }
            Ok(top) if !args.json => {
                let list: Vec<String> = top.iter().map(|(c, p)| format!("{c} {:.1}%", p * 100.0)).collect();
                outln!("{}: {}", input.name(true), list.join(", "))?;
            }
            Ok(_) => {}
        }
        let name = input.name(false);
        json.push(match outcome {
            Ok(top) => serde_json::json!({
                "input": name,
                "checkpoint": source,
                "top": top.iter().map(|(c, p)| serde_json::json!({"class": c, "probability": p})).collect::<Vec<_>>(),
            }),
            Err(e) => serde_json::json!({"input": name, "checkpoint": source, "error": e}),
        });
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&json)?)?;
    }
    if failed > 0 {
        bail!("{failed} of {} texts could not be classified", inputs.len());
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
