//! `torchlight summary`.

use anyhow::{anyhow, Result};
use torchlight_nn::{architecture, architecture_names, count_parameters, freeze_all_but, summary_table};

/// Options of `torchlight summary`.
#[derive(clap::Args)]
pub struct Args {
    /// Architecture: resnet18, resnet34, resnet50, resnet101, resnet152.
    #[arg(long, default_value = "resnet18")]
    model: String,
    /// Classes of the head.
    #[arg(long, default_value_t = 1000)]
    num_classes: i64,
    /// Freeze everything but the head first, as the first stage of a fine-tune.
    #[arg(long)]
    frozen_backbone: bool,
}

pub fn run(args: Args) -> Result<()> {
    let arch = architecture(&args.model).ok_or_else(|| {
        anyhow!("unknown model `{}`; one of {}", args.model, architecture_names().join(", "))
    })?;
    let model = arch.build_default(args.num_classes);
    if args.frozen_backbone {
        freeze_all_but(model.as_ref(), arch.head);
    }
    print!("{}", summary_table(model.as_ref()));
    let count = count_parameters(model.as_ref());
    println!(
        "{} with {} classes: {} parameters ({} trainable)",
        args.model, args.num_classes, count.total, count.trainable
    );
    Ok(())
}
