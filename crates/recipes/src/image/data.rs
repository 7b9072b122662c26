//! The recipe's data: torchvision's train/eval transforms, the ImageFolder splits (checked
//! before training starts), and their loaders.

use crate::config::{AutoAugmentKind, ClassWeights, ClassWeightsKind, DataConfig, SamplerKind, TrainConfig};
use crate::error::{RecipeError, Result};
use std::path::PathBuf;
use std::sync::Arc;
use tch::{Device, Kind, Tensor};
use torchlight_data::{
    DataLoader, DefaultCollate, DistributedSampler, RASampler, Sampler, Subset, WeightedRandomSampler,
};
use torchlight_tensor::seed::derive_seed;
use torchlight_vision::{
    AugMix, AutoAugment, AutoAugmentPolicy, ColorJitter, Compose, EvalPreprocessing, ImageFolder, Normalize,
    PixelCheck, RandAugment, RandomErasing, RandomHorizontalFlip, RandomResizedCrop, RandomRotation,
    SplitFolders, ToTensor, TrivialAugmentWide, VisionError, IMAGENET_MEAN, IMAGENET_STD,
};

/// An image split as the loaders see it.
pub type Split = Subset<ImageFolder>;
/// The loader of an image split: `(images [N, 3, S, S], labels [N])` batches.
pub type Loader = DataLoader<Split, DefaultCollate>;

/// torchvision's training preset: RandomResizedCrop, horizontal flip, ToTensor, ImageNet
/// normalisation. `min_scale` is RandomResizedCrop's lower area bound (torchvision: 0.08).
pub fn train_transform(image_size: usize, min_scale: f64) -> Compose {
    Compose::default()
        .then(RandomResizedCrop::new(image_size).with_scale(min_scale, 1.0))
        .then(RandomHorizontalFlip::default())
        .then(ToTensor)
        .then(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD))
}

/// The recipe's train transform for `data`, in torchvision's preset order: RandomResizedCrop
/// (`data.min_crop_scale`, `data.interpolation`), `RandomHorizontalFlip(data.hflip)` unless
/// that is 0, `RandomRotation(data.rotation)` and `ColorJitter(c, c, c)` for
/// `data.color_jitter` when above 0, the `data.auto_augment` policy (sampling with
/// `data.interpolation`, as torchvision's reference script passes it; `data.ra_magnitude`,
/// `data.augmix_severity`), ToTensor, normalisation (`data.mean`/`data.std`, ImageNet's by
/// default), then `RandomErasing(data.random_erase)` when that is above 0. With the defaults
/// (flip 0.5, nothing else) it is [`train_transform`]. `validate` refuses the values the
/// steps' constructors would panic on.
pub fn train_transform_for(data: &DataConfig) -> Compose {
    let mode = data.interpolation().mode();
    let mut t = Compose::default().then(
        RandomResizedCrop::new(data.image_size() as usize)
            .with_scale(data.min_crop_scale, 1.0)
            .with_interpolation(mode),
    );
    if data.hflip > 0.0 {
        t = t.then(RandomHorizontalFlip::new(data.hflip));
    }
    if data.rotation > 0.0 {
        t = t.then(RandomRotation::new(data.rotation));
    }
    if data.color_jitter > 0.0 {
        let c = data.color_jitter;
        t = t.then(ColorJitter::new(c, c, c, 0.0));
    }
    t = match data.auto_augment {
        AutoAugmentKind::None => t,
        AutoAugmentKind::TaWide => t.then(TrivialAugmentWide::default().with_interpolation(mode)),
        // `validate` refuses a magnitude above 30 and a severity outside 1..=10.
        AutoAugmentKind::Ra => {
            t.then(RandAugment::new(2, data.ra_magnitude.min(30), 31).with_interpolation(mode))
        }
        AutoAugmentKind::Augmix => {
            t.then(AugMix::new(data.augmix_severity).unwrap_or_default().with_interpolation(mode))
        }
        AutoAugmentKind::Imagenet => {
            t.then(AutoAugment::new(AutoAugmentPolicy::ImageNet).with_interpolation(mode))
        }
        AutoAugmentKind::Cifar10 => {
            t.then(AutoAugment::new(AutoAugmentPolicy::Cifar10).with_interpolation(mode))
        }
        AutoAugmentKind::Svhn => t.then(AutoAugment::new(AutoAugmentPolicy::Svhn).with_interpolation(mode)),
    };
    t = t.then(ToTensor).then(Normalize::new(&data.mean(), &data.std()));
    if data.random_erase > 0.0 {
        t = t.then(RandomErasing::new(data.random_erase));
    }
    t
}

/// The evaluation preprocessing of `config` at the evaluation side `S`
/// ([`DataConfig::eval_image_size`](crate::DataConfig::eval_image_size)): resize the shorter side
/// (both sides under `data.crop_mode = "squash"`) with `data.interpolation` to
/// `floor(S / crop_pct)` (timm's rule, `data.eval_crop_pct`, else `data.crop_pct`; unset,
/// torchvision's classification preset `S * 256 / 224`), centre crop `S`, ToTensor, normalise with
/// `data.mean`/`data.std` (ImageNet's by default). A Hub folder's `pretrained_cfg` fills the
/// unset keys before a run ([`apply_pretrained_cfg`](super::apply_pretrained_cfg)). Validation,
/// test, `torchlight eval`, `predict` and the export metadata all build from it
/// (`.transform()`, `.metadata()`).
pub fn eval_preprocessing(config: &TrainConfig) -> EvalPreprocessing {
    let d = &config.data;
    let size = d.eval_image_size() as usize;
    let base = EvalPreprocessing::classification(size);
    // `validate` refuses a crop_pct from_crop_pct refuses.
    let base = d.eval_crop_pct().and_then(|p| EvalPreprocessing::from_crop_pct(size, p).ok()).unwrap_or(base);
    EvalPreprocessing {
        interpolation: d.interpolation().mode(),
        mean: d.mean(),
        std: d.std(),
        crop_mode: d.crop_mode.unwrap_or_default().mode(),
        ..base
    }
}

/// The splits of a data root and their class names: `train/`, `val/` (or a seeded stratified
/// part of `train/` when there is no `val/`) and the optional `test/`.
pub struct Splits {
    /// Training images, with the augmenting transform.
    pub train: Split,
    /// Validation images, with the evaluation transform.
    pub val: Split,
    /// Test images, with the evaluation transform.
    pub test: Option<Split>,
    /// Class names, sorted as torchvision's ImageFolder sorts them.
    pub classes: Vec<String>,
}

impl Splits {
    /// The class index of every training image, in split order.
    pub fn train_targets(&self) -> Vec<i64> {
        let samples = self.train.dataset().samples();
        self.train.indices().iter().map(|&i| samples[i].1).collect()
    }
}

fn all(folder: ImageFolder) -> Result<Split> {
    let n = torchlight_data::Dataset::len(&folder);
    Ok(Subset::new(Arc::new(folder), (0..n).collect())?)
}

/// Opens the data root of `config` as [`Splits`]. Refuses data a classifier cannot learn from
/// (fewer than two classes) and checks the header of every image of every split, so that a
/// bad file stops the run before its first epoch (naming the files), not after it.
pub fn open_splits(config: &TrainConfig) -> Result<Splits> {
    let root = &config.data.root;
    let pixels = config.data.pixel_limit();
    let exif = config.data.exif_transpose;
    let folders = SplitFolders::open(root)?.with_max_pixels(pixels).with_exif_transpose(exif);
    let classes = folders.train.classes().to_vec();
    if classes.len() < 2 {
        return Err(RecipeError::InvalidConfig {
            field: "data.root".into(),
            value: root.display().to_string(),
            reason: format!(
                "train/ has {} class folder{} ({}): a classifier needs at least 2 classes",
                classes.len(),
                if classes.len() == 1 { "" } else { "s" },
                classes.join(", ")
            ),
        });
    }
    let mut bad = Vec::new();
    for folder in [Some(&folders.train), folders.val.as_ref(), folders.test.as_ref()].into_iter().flatten() {
        bad.extend(unreadable_headers(folder));
    }
    if !bad.is_empty() {
        let shown: Vec<String> = bad.iter().take(5).map(|(p, e)| format!("{} ({e})", p.display())).collect();
        return Err(RecipeError::InvalidConfig {
            field: "data.root".into(),
            value: root.display().to_string(),
            reason: format!(
                "{} image{} cannot be read: {}{}; delete or re-export them (torchlight doctor lists them all)",
                bad.len(),
                if bad.len() == 1 { "" } else { "s" },
                shown.join("; "),
                if bad.len() > 5 { "; ..." } else { "" }
            ),
        });
    }
    let eval = eval_preprocessing(config);
    let test = folders.test.map(|t| all(t.with_transform(eval.transform()))).transpose()?;
    let (train, val) = match folders.val {
        Some(val) => (
            all(folders.train.with_transform(train_transform_for(&config.data)))?,
            all(val.with_transform(eval.transform()))?,
        ),
        None => {
            let targets = folders.train.targets();
            let fraction = config.data.val_fraction;
            let parts = torchlight_data::stratified_split_indices(
                &targets,
                &[1.0 - fraction, fraction][..],
                config.train.seed,
            )?;
            let train_dir = config.data.train_dir();
            let train = ImageFolder::new(&train_dir)?
                .with_max_pixels(pixels)
                .with_exif_transpose(exif)
                .with_transform(train_transform_for(&config.data));
            let val = ImageFolder::new(&train_dir)?
                .with_max_pixels(pixels)
                .with_exif_transpose(exif)
                .with_transform(eval.transform());
            (Subset::new(Arc::new(train), parts[0].clone())?, Subset::new(Arc::new(val), parts[1].clone())?)
        }
    };
    Ok(Splits { train, val, test, classes })
}

/// The files of `folder` whose image header cannot be read (format and size), or declares
/// more pixels than the folder's limit (`data.max_image_pixels`), with why.
fn unreadable_headers(folder: &ImageFolder) -> Vec<(PathBuf, String)> {
    let options = folder.decode_options();
    folder
        .samples()
        .iter()
        .filter_map(|(path, _)| {
            let problem = match torchlight_vision::image_dimensions(path) {
                Ok((w, h)) => match options.check_pixels(w, h) {
                    PixelCheck::TooMany { pixels, limit } => Some(format!(
                        "{w}x{h} = {pixels} pixels, over the limit of {limit} (data.max_image_pixels)"
                    )),
                    _ => None,
                },
                // The caller names the file: keep the reason alone.
                Err(VisionError::Decode { message, .. }) => Some(message),
                Err(VisionError::Io { error, .. }) => Some(error.to_string()),
                Err(other) => Some(other.to_string()),
            };
            problem.map(|e| (path.clone(), e))
        })
        .collect()
}

/// A loader over `split`: shuffled (or class-balanced with `data.sampler = "weighted"`) with
/// the ragged last batch dropped for training, in order for evaluation; pinned memory on CUDA.
pub fn loader(split: Split, config: &TrainConfig, train: bool, device: Device) -> Result<Loader> {
    sharded_loader(split, config, train, device, None)
}

/// [`loader`] for one rank of a data-parallel run: with `shard = Some((rank, world_size))` it
/// loads that rank's shard through a `DistributedSampler` (reshuffled each epoch from the seed
/// for training, in order for evaluation; padded like PyTorch's, so every rank runs as many
/// batches), `train.batch_size` images per rank per batch.
pub fn sharded_loader(
    split: Split,
    config: &TrainConfig,
    train: bool,
    device: Device,
    shard: Option<(usize, usize)>,
) -> Result<Loader> {
    let batch = config.train.batch_size;
    let mut n = torchlight_data::Dataset::len(&split);
    let weighted = train && config.data.sampler == SamplerKind::Weighted;
    if let (true, Some((_, world))) = (weighted, shard) {
        return Err(RecipeError::InvalidConfig {
            field: "data.sampler".into(),
            value: "\"weighted\"".into(),
            reason: format!(
                "a data-parallel run ({world} ranks) shards the data with a DistributedSampler and cannot \
                 also draw class-balanced samples; use train.class_weights = \"balanced\" instead"
            ),
        });
    }
    let reps = config.data.ra_reps;
    let mut loader_seed = config.train.seed;
    let distributed: Option<Box<dyn Sampler>> = match shard {
        _ if train && reps > 1 => {
            // torchvision's RASampler, its epoch as long as a DistributedSampler's.
            let (rank, world) = shard.unwrap_or((0, 1));
            let sampler = RASampler::new(n, world, rank)?
                .with_repetitions(reps)?
                .with_seed(config.train.seed)
                .with_selected_round(0);
            n = sampler.len();
            if rank > 0 {
                // Each rank augments its copies of a sample differently.
                loader_seed = derive_seed(config.train.seed, &[rank as u64]);
            }
            Some(Box::new(sampler))
        }
        Some((rank, world)) => {
            let sampler =
                DistributedSampler::new(n, world, rank)?.with_seed(config.train.seed).with_shuffle(train);
            n = sampler.num_samples();
            Some(Box::new(sampler))
        }
        None => None,
    };
    let sampler = if weighted {
        let samples = split.dataset().samples();
        let labels: Vec<i64> = split.indices().iter().map(|&i| samples[i].1).collect();
        let weights = WeightedRandomSampler::balancing_weights(&labels);
        Some(WeightedRandomSampler::new(&weights, n, config.train.seed)?)
    } else {
        None
    };
    let mut builder = DataLoader::builder(split)
        .batch_size(batch)
        // A last batch of one image breaks BatchNorm in training mode, as in PyTorch.
        .drop_last(train && n > batch)
        .num_workers(config.data.workers)
        .persistent_workers(config.data.workers > 0)
        .pin_memory(device.is_cuda())
        .seed(loader_seed);
    builder = match (sampler, distributed) {
        (Some(s), _) => builder.sampler(s),
        (None, Some(s)) => builder.sampler(s),
        (None, None) => builder.shuffle(train),
    };
    Ok(builder.build()?)
}

/// The cross-entropy class weights `train.class_weights` asks for, on `device`: none, the
/// inverse class frequency of the training split (`n / (C * count)`, scikit-learn's
/// "balanced"), or the given list, which must have one weight per class.
pub fn class_weights(config: &TrainConfig, splits: &Splits, device: Device) -> Result<Option<Tensor>> {
    class_weights_of(config, &splits.train_targets(), &splits.classes, device)
}

/// [`class_weights`] of any recipe's training split: its `targets` and `classes`.
pub(crate) fn class_weights_of(
    config: &TrainConfig,
    targets: &[i64],
    classes: &[String],
    device: Device,
) -> Result<Option<Tensor>> {
    let c = classes.len();
    let weights = match &config.train.class_weights {
        ClassWeights::Named(ClassWeightsKind::None) => return Ok(None),
        ClassWeights::Named(ClassWeightsKind::Balanced) => {
            let mut counts = vec![0usize; c];
            for t in targets {
                counts[*t as usize] += 1;
            }
            let n = targets.len() as f64;
            counts.iter().map(|&k| if k == 0 { 0.0 } else { n / (c as f64 * k as f64) }).collect()
        }
        ClassWeights::Given(w) => {
            if w.len() != c {
                return Err(RecipeError::InvalidConfig {
                    field: "train.class_weights".into(),
                    value: format!("{w:?}"),
                    reason: format!("has {} weights for {c} classes ({})", w.len(), classes.join(", ")),
                });
            }
            w.clone()
        }
    };
    let w: Vec<f32> = weights.iter().map(|&v| v as f32).collect();
    Ok(Some(Tensor::from_slice(&w).to_kind(Kind::Float).to_device(device)))
}
