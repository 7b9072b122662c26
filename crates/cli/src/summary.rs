//! `torchlight summary`.

use crate::outln;
use anyhow::{anyhow, Result};
use torchlight_nn::{count_parameters, resnet_by_name, summary_table};

/// Options of `torchlight summary`.
#[derive(clap::Args)]
pub struct Args {
    /// Architecture: resnet18, resnet34, resnet50, resnet101, resnet152.
    #[arg(long, default_value = "resnet18")]
    model: String,
    /// Classes of the head (at least 1).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(i64).range(1..))]
    num_classes: i64,
    /// Freeze everything but the head first, as the first stage of a fine-tune.
    #[arg(long)]
    frozen_backbone: bool,
}

pub fn run(args: Args) -> Result<()> {
    let model = resnet_by_name(&args.model, args.num_classes).ok_or_else(|| {
        anyhow!("unknown model `{}`; one of resnet18, resnet34, resnet50, resnet101, resnet152", args.model)
    })?;
    if args.frozen_backbone {
        torchlight_nn::freeze_all_but(&model, "fc.");
    }
    outln!("{}", summary_table(&model).trim_end_matches('\n'))?;
    let count = count_parameters(&model);
    outln!(
        "{} with {} classes: {} parameters ({} trainable)",
        args.model,
        args.num_classes,
        count.total,
        count.trainable
    )?;
    Ok(())
}
