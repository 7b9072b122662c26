//! `torchlight summary`.

use crate::outln;
use anyhow::{anyhow, Result};
use torchlight_nn::{
    architecture, architecture_names, count_parameters, freeze_all_but, summary_table, LayerOptions,
    ModelSpec,
};
use torchlight_recipes::{MAX_CLASSES, MAX_IMAGE_SIZE};

/// Options of `torchlight summary`.
#[derive(clap::Args)]
pub struct Args {
    /// Architecture: resnet18 ... resnet152, mobilenet_v2, mobilenet_v3_small/large,
    /// efficientnet_b0 ... b3, efficientnet_v2_s, convnext_tiny/small, vit_b_16, vit_s_16.
    #[arg(long, default_value = "resnet18")]
    model: String,
    /// Classes of the head (1 to 1000000, the bound `model.num_classes` has in training).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(i64).range(1..=MAX_CLASSES as i64))]
    num_classes: i64,
    /// Side of the square input (a ViT's position embedding depends on it); 1 to 8192, the
    /// bound of `data.image_size`.
    #[arg(long, default_value_t = 224, value_parser = clap::value_parser!(i64).range(1..=i64::from(MAX_IMAGE_SIZE)))]
    image_size: i64,
    /// Freeze everything but the head first, as the first stage of a fine-tune.
    #[arg(long)]
    frozen_backbone: bool,
}

pub fn run(args: Args) -> Result<()> {
    let arch = architecture(&args.model).ok_or_else(|| {
        anyhow!("unknown model `{}`; one of {}", args.model, architecture_names().join(", "))
    })?;
    let model = arch.build(ModelSpec::new(args.num_classes, args.image_size), LayerOptions::default())?;
    if args.frozen_backbone {
        freeze_all_but(model.as_ref(), arch.head());
    }
    outln!("{}", summary_table(model.as_ref()).trim_end_matches('\n'))?;
    let count = count_parameters(model.as_ref());
    outln!(
        "{} with {} classes: {} parameters ({} trainable)",
        args.model,
        args.num_classes,
        count.total,
        count.trainable
    )?;
    Ok(())
}
