//! `torchlight augment`: what the model sees. The run's train transform applied to a few
//! images several times, each result a PNG, with one contact sheet of them all.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use torchlight_recipes::image::{augment_files, augment_split, contact_sheet, save_png, Augmented, Draws};
use torchlight_recipes::{TaskKind, TrainConfig};
use torchlight_train::Progress;

/// Options of `torchlight augment`.
#[derive(clap::Args)]
pub struct Args {
    /// Image files to augment. Without any, `--count` images of the training split of `--data`
    /// (or the config's `data.root`) are taken, one class after the other.
    images: Vec<PathBuf>,
    /// An ImageFolder root with `train/` (config `data.root`): its training split's images
    /// augment exactly as the run's loader augments them.
    #[arg(long)]
    data: Option<PathBuf>,
    /// A TOML config file (the one `train` would use): its `[data]` section decides the
    /// transform (image_size, min_crop_scale, interpolation, hflip, rotation, color_jitter,
    /// auto_augment, random_erase).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Any other config value, as `section.key=value` (repeatable), e.g.
    /// `--set data.auto_augment=ta_wide`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Views per image. Without `--torch-seed`, view k is what the run's epoch k+1 feeds the
    /// model (the loader's draws from `train.seed`).
    #[arg(long, default_value_t = 8)]
    n: usize,
    /// Images taken from the training split when no image file is given.
    #[arg(long, default_value_t = 8)]
    count: usize,
    /// Draw as torchvision does after `torch.manual_seed(S)`, reseeded for each image: the views
    /// are `torch.manual_seed(S); [preset(img) for _ in range(n)]` on the same decoded image.
    #[arg(long, value_name = "S")]
    torch_seed: Option<u64>,
    /// Folder to write the PNGs and `contact_sheet.png` into (made if missing).
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: Args) -> Result<()> {
    if args.n == 0 {
        bail!("--n 0: give how many views of each image to write, at least 1");
    }
    let mut config = match &args.config {
        Some(path) => TrainConfig::from_toml_file(path)?,
        None => TrainConfig::default(),
    };
    if let Some(data) = &args.data {
        config.set("data.root", &data.display().to_string())?;
    }
    for pair in &args.set {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("--set {pair}: expected KEY=VALUE, e.g. --set data.auto_augment=ta_wide");
        };
        config.set(key.trim(), value.trim())?;
    }
    config.validate()?;
    if config.train.task != TaskKind::Image {
        bail!(
            "train.task = \"{}\": torchlight augment shows image augmentation; text runs have none",
            config.train.task.name()
        );
    }
    let draws = args.torch_seed.map_or(Draws::Loader, Draws::Torch);
    let progress = Progress::auto();
    let items: Vec<Augmented> = if args.images.is_empty() {
        if args.data.is_none() && args.config.is_none() {
            bail!("give image files to augment, or --data DIR (an ImageFolder root with train/) to take --count of its training images");
        }
        if args.count == 0 {
            bail!("--count 0: give how many training images to augment, at least 1");
        }
        augment_split(&config, args.count, args.n, draws)?
    } else {
        augment_files(&config, &args.images, args.n, draws)?
    };
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let bar = progress.bar(items.len() as u64, "writing views");
    for (i, item) in items.iter().enumerate() {
        let stem = item.path.file_stem().map_or_else(|| "image".into(), |s| s.to_string_lossy().into_owned());
        for (k, view) in item.views.iter().enumerate() {
            save_png(view, &args.out.join(format!("{i:02}_{stem}_v{k}.png")))?;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let sheet = args.out.join("contact_sheet.png");
    save_png(&contact_sheet(&items, config.data.image_size() as usize), &sheet)?;
    let source = match draws {
        Draws::Loader => {
            format!("the training loader's draws (train.seed {}); view k is epoch k+1", config.train.seed)
        }
        Draws::Torch(s) => format!("torchvision's draws after torch.manual_seed({s}), per image"),
    };
    println!("transform: {}", describe(&config));
    println!("draws: {source}");
    println!(
        "wrote {} views of {} image{} and {} (originals in the first column) to {}",
        items.len() * args.n,
        items.len(),
        if items.len() == 1 { "" } else { "s" },
        sheet.display(),
        args.out.display()
    );
    Ok(())
}

/// The steps of the train transform `config` composes (the recipe's own, so a step added to
/// it shows here unchanged): each step's `Debug` form, or its name where that is long.
fn describe(config: &TrainConfig) -> String {
    torchlight_recipes::image::train_transform_for(&config.data)
        .transforms()
        .iter()
        .map(|t| {
            let debug = format!("{t:?}");
            if debug.len() <= 90 {
                debug
            } else {
                debug.split([' ', '(', '{']).next().unwrap_or_default().to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" -> ")
}
