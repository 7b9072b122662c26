//! `torchlight summary`.

use crate::outln;
use anyhow::{anyhow, bail, Result};
use std::path::PathBuf;
use torchlight_nn::{
    architecture, architecture_names, count_parameters, freeze_all_but, freeze_batch_norm, summary_table,
    LayerOptions, ModelSpec,
};
use torchlight_recipes::{param_groups, ParamGroupSummary, TrainConfig, MAX_CLASSES, MAX_IMAGE_SIZE};

/// Options of `torchlight summary`.
#[derive(clap::Args)]
pub struct Args {
    /// Architecture: resnet18 ... resnet152, mobilenet_v2, mobilenet_v3_small/large,
    /// efficientnet_b0 ... b3, efficientnet_v2_s, convnext_tiny/small, vit_b_16, vit_s_16
    /// (default: the config's `model.name`, else resnet18).
    #[arg(long)]
    model: Option<String>,
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
    let mut config = match &args.config {
        Some(path) => TrainConfig::from_toml_file(path)?,
        None => TrainConfig::default(),
    };
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
    let arch = architecture(&name)
        .ok_or_else(|| anyhow!("unknown model `{name}`; one of {}", architecture_names().join(", ")))?;
    config.validate()?;
    let image_size = args.image_size.unwrap_or(i64::from(config.data.image_size));
    let model = arch.build(ModelSpec::new(args.num_classes, image_size), LayerOptions::default())?;
    let mut model = model;
    if args.frozen_backbone {
        freeze_all_but(model.as_ref(), arch.head());
    }
    let frozen_bn = if config.model.freeze_bn { freeze_batch_norm(model.as_mut()) } else { 0 };
    outln!("{}", summary_table(model.as_ref()).trim_end_matches('\n'))?;
    let count = count_parameters(model.as_ref());
    outln!(
        "{name} with {} classes: {} parameters ({} trainable)",
        args.num_classes,
        count.total,
        count.trainable
    )?;
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
