//! `torchlight summary`.

use crate::loaded::checkpoint_dir;
use crate::outln;
use anyhow::{anyhow, bail, Result};
use std::path::PathBuf;
use torchlight_checkpoint::Checkpoint;
use torchlight_nn::{
    architecture, architecture_list, count_parameters, freeze_all_but, freeze_batch_norm, summary_table,
    LayerOptions, ModelSpec,
};
use torchlight_recipes::text::{build_text_model, TEXT_HEAD};
use torchlight_recipes::{
    param_groups, ModelCard, ParamGroupSummary, TaskKind, TrainConfig, MAX_CLASSES, MAX_IMAGE_SIZE,
    TEXT_MODELS,
};

/// Options of `torchlight summary`.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, conflicts_with = "checkpoint", help = crate::model_help(
        "Architecture",
        "(default: the config's `model.name`, else resnet18); or a text model: fasttext, textcnn, bilstm, \
         transformer (sized by the config's `[text]` section and --vocab-size)"
    ))]
    model: Option<String>,
    /// `image` or `text` (config `train.task`); a text model name implies `text`.
    #[arg(long, value_name = "image|text", conflicts_with = "checkpoint")]
    task: Option<String>,
    /// A text model's vocabulary: the rows of its embedding table (2 to 16777216). Default:
    /// the ids of the config's `text.tokenizer`, when it names one.
    #[arg(long, value_parser = clap::value_parser!(i64).range(2..=1 << 24))]
    vocab_size: Option<i64>,
    /// The model of a checkpoint or run folder instead: its architecture, classes, config and,
    /// for a text model, the vocabulary of the tokenizer it carries.
    #[arg(long, conflicts_with_all = ["num_classes", "image_size", "config", "vocab_size", "weights"])]
    checkpoint: Option<PathBuf>,
    /// A Hugging Face Hub model folder (timm's `config.json` + weights): what loads from it, the
    /// table, the parameter count, the head's shape and the preprocessing its `pretrained_cfg`
    /// gives (`--set data.KEY=VALUE` wins over it, as in training); `--model`, when given, must
    /// be the folder's architecture or an alias of it.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["num_classes", "image_size", "config", "vocab_size", "task"])]
    weights: Option<PathBuf>,
    /// Classes of the head (1 to 1000000, the bound `model.num_classes` has in training).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(i64).range(1..=MAX_CLASSES as i64))]
    num_classes: i64,
    /// Side of the square input (a ViT's position embedding depends on it; default: the
    /// config's `data.image_size`, else 224); 1 to 8192, the bound of `data.image_size`.
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=i64::from(MAX_IMAGE_SIZE)))]
    image_size: Option<i64>,
    /// Freeze everything but the head first, as the first stage of a fine-tune.
    #[arg(long)]
    frozen_backbone: bool,
    /// A training config whose `[optim]` rules make the parameter groups shown (defaults
    /// otherwise).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Any config value, as `section.key=value` (repeatable), e.g. `--set optim.layer_decay=0.75`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

pub fn run(args: Args) -> Result<()> {
    if let Some(dir) = &args.weights {
        return hub_summary(&args, dir);
    }
    let mut config = match &args.config {
        Some(path) => TrainConfig::from_toml_file(path)?,
        None => TrainConfig::default(),
    };
    let mut num_classes = args.num_classes;
    // A checkpoint's model: its card's config, classes and (text) vocabulary.
    let card = match &args.checkpoint {
        Some(path) => {
            let dir = checkpoint_dir(path)?;
            let card = ModelCard::from_checkpoint(&Checkpoint::load(&dir)?)?;
            if card.task() == TaskKind::Text {
                card.text_tokenizer(&dir)?;
            }
            config = card.config.clone();
            num_classes = card.classes.len() as i64;
            Some(card)
        }
        None => None,
    };
    if let Some(task) = &args.task {
        config.set("train.task", task)?;
    } else if args.model.as_deref().is_some_and(|m| TEXT_MODELS.contains(&m)) {
        config.train.task = TaskKind::Text;
    }
    if let Some(model) = &args.model {
        config.set("model.name", model)?;
    }
    for pair in &args.set {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("--set {pair}: expected KEY=VALUE, e.g. --set optim.layer_decay=0.75");
        };
        config.set(key.trim(), value.trim())?;
    }
    let name = config.model.name.clone();
    if config.train.task == TaskKind::Text {
        return text_summary(&args, config, card, num_classes);
    }
    let arch = architecture(&name)
        .ok_or_else(|| anyhow!("unknown model `{name}`; one of {}", architecture_list()))?;
    config.validate()?;
    let image_size = args.image_size.unwrap_or(i64::from(config.data.image_size()));
    let model = arch.build(ModelSpec::new(num_classes, image_size), LayerOptions::default())?;
    let mut model = model;
    if args.frozen_backbone {
        freeze_all_but(model.as_ref(), arch.head());
    }
    let frozen_bn = if config.model.freeze_bn { freeze_batch_norm(model.as_mut()) } else { 0 };
    outln!("{}", summary_table(model.as_ref()).trim_end_matches('\n'))?;
    let count = count_parameters(model.as_ref());
    outln!("{name} with {num_classes} classes: {} parameters ({} trainable)", count.total, count.trainable)?;
    if config.model.freeze_bn {
        outln!("model.freeze_bn: {frozen_bn} BatchNorm layers frozen (running statistics fixed, weight and bias not trained)")?;
    }
    let groups = ParamGroupSummary::of(&param_groups(&config, model.as_ref(), arch.head())?);
    outln!("{} parameter groups:", groups.len())?;
    for (i, g) in groups.iter().enumerate() {
        outln!("  {i}: {g}")?;
    }
    Ok(())
}

/// The summary of a text model: the per-layer table, the count and the parameter groups, with
/// the vocabulary of the checkpoint's tokenizer, of --vocab-size, or of `text.tokenizer`.
fn text_summary(args: &Args, config: TrainConfig, card: Option<ModelCard>, num_classes: i64) -> Result<()> {
    config.validate()?;
    let vocab_size = match (&card, args.vocab_size, &config.text.tokenizer) {
        (Some(card), _, _) => card.tokenizer.as_ref().map_or(0, |t| t.vocab_size),
        (None, Some(v), _) => v as usize,
        (None, None, Some(path)) => torchlight_text::load_tokenizer(path)?.vocab_size(),
        (None, None, None) => bail!(
            "--vocab-size: a text model's embedding table has one row per token id; give --vocab-size N, a config whose text.tokenizer names a tokenizer, or --checkpoint RUN"
        ),
    };
    let model = build_text_model(&config, vocab_size, num_classes as usize, LayerOptions::default())?;
    if args.frozen_backbone {
        freeze_all_but(model.as_ref(), TEXT_HEAD);
    }
    outln!("{}", summary_table(model.as_ref()).trim_end_matches('\n'))?;
    let count = count_parameters(model.as_ref());
    outln!(
        "{} with {num_classes} classes and a vocabulary of {vocab_size} ids (text.max_len {}): {} parameters ({} trainable)",
        config.model.name,
        config.text.max_len,
        count.total,
        count.trainable
    )?;
    let groups = ParamGroupSummary::of(&param_groups(&config, model.as_ref(), TEXT_HEAD)?);
    outln!("{} parameter groups:", groups.len())?;
    for (i, g) in groups.iter().enumerate() {
        outln!("  {i}: {g}")?;
    }
    Ok(())
}

/// The summary of a Hub folder's model as it loaded: the table, the count, the head and the
/// evaluation preprocessing an export would carry.
fn hub_summary(args: &Args, dir: &std::path::Path) -> Result<()> {
    let loaded = crate::loaded::load_hub(args.model.as_deref(), dir, &args.set, tch::Device::Cpu)?;
    let (model, card) = (loaded.model.as_ref(), &loaded.card);
    let name = &card.config.model.name;
    let arch = architecture(name).ok_or_else(|| anyhow!("unknown model `{name}`"))?;
    if args.frozen_backbone {
        freeze_all_but(model, arch.head());
    }
    outln!("{}", summary_table(model).trim_end_matches('\n'))?;
    let count = count_parameters(model);
    outln!(
        "{} from {}: {} parameters ({} trainable), every tensor loaded",
        name,
        loaded.from,
        count.total,
        count.trainable
    )?;
    let head: Vec<String> = torchlight_nn::state_dict(model)
        .into_iter()
        .filter(|(k, _)| k.starts_with(arch.head()))
        .map(|(k, t)| format!("{k} {:?}", t.size()))
        .collect();
    let classes = &card.classes;
    let shown: Vec<&str> = classes.iter().take(5).map(String::as_str).collect();
    let more = if classes.len() > 5 { ", ..." } else { "" };
    outln!("head: {} ({} classes: {}{more})", head.join(", "), classes.len(), shown.join(", "))?;
    let recipe = torchlight_recipes::image::eval_preprocessing(&card.config);
    let meta: std::collections::HashMap<String, String> = recipe.metadata().into_iter().collect();
    let d = &card.config.data;
    outln!(
        "input: [N, 3, {0}, {0}] (data.eval_image_size {0}; data.image_size {1} for fine-tuning)",
        d.eval_image_size(),
        d.image_size()
    )?;
    outln!("preprocessing: {}", meta["preprocessing"])?;
    Ok(())
}
