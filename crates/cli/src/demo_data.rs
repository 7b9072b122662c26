//! `torchlight demo-data`: the synthetic sets of the transfer-learning demo.

use anyhow::{bail, Result};
use std::path::PathBuf;
use torchlight_recipes::synthetic::{write_image_folder, Shape, SyntheticSpec};

/// Options of `torchlight demo-data`.
#[derive(clap::Args)]
pub struct Args {
    /// Folder to write `source/` (five shapes, for pre-training a backbone) and `target/`
    /// (three other shapes, the task to fine-tune on) into.
    #[arg(long)]
    out: PathBuf,
    /// Images per class in source/train (val gets a quarter); target/train gets a third of it.
    #[arg(long, default_value_t = 240)]
    per_class: usize,
    /// Seed of the whole set.
    #[arg(long, default_value_t = 2026)]
    seed: u64,
}

pub fn run(args: Args) -> Result<()> {
    if let Some(file) = args.out.ancestors().find(|p| p.is_file()) {
        bail!(
            "{}: is a file, not a folder; --out names the folder to write the image sets into",
            file.display()
        );
    }
    let n = args.per_class;
    let source = SyntheticSpec {
        shapes: vec![Shape::Circle, Shape::Square, Shape::Triangle, Shape::Cross, Shape::Bar],
        per_class: [n, n / 4, 0],
        size_range: (56, 96),
        seed: args.seed,
    };
    let target = SyntheticSpec {
        shapes: vec![Shape::Ring, Shape::Star, Shape::Frame],
        per_class: [n / 3, n / 6, n / 3],
        size_range: (56, 96),
        seed: args.seed + 1,
    };
    let a = write_image_folder(&args.out.join("source"), &source)?;
    let b = write_image_folder(&args.out.join("target"), &target)?;
    println!("wrote {} source and {} target images under {}", a.len(), b.len(), args.out.display());
    Ok(())
}
