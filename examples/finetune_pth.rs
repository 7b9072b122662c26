//! Fine-tuning a torchvision ResNet-18 from its `.pth` file on a folder of images: the
//! pretrained backbone with a new 3-class head, the backbone frozen for the first epoch and
//! trained at a lower learning rate after, torchvision's transforms, a run folder.
//!
//! `cargo run --example finetune_pth -- [resnet18.pth [IMAGE_FOLDER]]`
//!
//! The `.pth` is what `torch.save(torchvision.models.resnet18(weights="DEFAULT").state_dict(),
//! "resnet18.pth")` writes; it is read by Torchlight's safe reader (no pickle code runs). Without
//! one, the program writes a randomly initialised ResNet-18 in that format (`save_pth`) and
//! fine-tunes that, as a download-free demonstration; without an image folder, a small
//! synthetic one is generated.

use std::path::PathBuf;
use std::sync::Arc;
use torchlight::nn::save_pth;
use torchlight::prelude::*;
use torchlight::recipes::image::train_transform;
use torchlight::recipes::synthetic::{write_image_folder, Shape, SyntheticSpec};
use torchlight::train::BackboneFinetuning;
use torchlight::vision::{EvalPreprocessing, SplitFolders};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let work = std::env::temp_dir().join("tl-finetune-pth");
    let weights = match args.next() {
        Some(path) => PathBuf::from(path),
        None => {
            // No download: a randomly initialised ResNet-18 written as torch.save writes it, so
            // the program shows the whole path; pass a real torchvision .pth to fine-tune one.
            std::fs::create_dir_all(&work)?;
            let path = work.join("resnet18-random.pth");
            seed_everything(0);
            save_pth(&resnet18(1000), &path)?;
            println!("no .pth given: wrote a randomly initialised ResNet-18 to {}", path.display());
            path
        }
    };
    let data = match args.next() {
        Some(folder) => PathBuf::from(folder),
        None => {
            let root = work.join("data");
            let spec = SyntheticSpec {
                shapes: vec![Shape::Circle, Shape::Cross, Shape::Bar],
                per_class: [24, 8, 8],
                size_range: (40, 56),
                seed: 1,
            };
            write_image_folder(&root, &spec)?;
            root
        }
    };
    seed_everything(0);
    let device = "auto".parse::<DeviceSpec>()?.resolve()?;
    let size = 64;

    // The pretrained backbone and a new head: every key but `fc.*` must load.
    let mut model = resnet18(3);
    let report = load_weights(&model, &weights, &LoadOptions::strict().skip("fc."))?;
    println!("loaded {} tensors from {}", report.loaded.len(), weights.display());
    torchlight::nn::to_device(&model, device);

    let folders = SplitFolders::open(&data)?;
    let subset = |f: torchlight::vision::ImageFolder| -> Result<_, torchlight::data::DataError> {
        let n = f.len();
        torchlight::data::Subset::new(Arc::new(f), (0..n).collect())
    };
    let train = subset(folders.train.with_transform(train_transform(size, 0.5)))?;
    let val = subset(
        folders
            .val
            .ok_or("the image folder needs val/")?
            .with_transform(EvalPreprocessing::classification(size).transform()),
    )?;
    let mut train = DataLoader::builder(train).batch_size(16).shuffle(true).num_workers(2).seed(0).build()?;
    let mut val = DataLoader::builder(val).batch_size(16).build()?;

    // Two groups: the head at 1e-3, the backbone at a tenth of it once unfrozen.
    let (head, backbone): (Vec<_>, Vec<_>) =
        named_parameters(&model).into_iter().partition(|(name, _)| name.starts_with("fc."));
    let mut optimizer = AdamW::new(vec![
        ParamGroup::new(backbone, AdamConfig::adamw().with_lr(1e-4)),
        ParamGroup::new(head, AdamConfig::adamw().with_lr(1e-3)),
    ])?;
    let _ = std::fs::remove_dir_all(work.join("run"));
    let mut trainer = Trainer::builder()
        .device(device)
        .epochs(3)
        .amp(device.is_cuda())
        .run_dir(work.join("run"))
        .callback(BackboneFinetuning::new(1, "fc."))
        .build()?;
    let summary =
        trainer.fit(&mut model, &Classification::new(3), &mut optimizer, &mut train, Some(&mut val))?;
    if let Some((acc, epoch)) = summary.best {
        println!("best val_acc {acc:.3} at epoch {epoch}; run folder {}", work.join("run").display());
    }
    Ok(())
}
