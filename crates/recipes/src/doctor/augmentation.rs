//! The doctor's two augmentation restraint checks: what the recipe's own train transform
//! leaves of the training images (`augmentation_strength`, stage 1, with the grid
//! `augmented_samples.png`), and an A/B of the short run with and without it
//! (`augmentation_ab`, stage 4).
//!
//! Both run the train transform the run trains with ([`train_transform_for`], through the
//! split for the A/B), never a copy of it, so a transform added to the recipe is measured and
//! A/B-tested without a change here.

use super::{DoctorOptions, Finding, Status};
use crate::config::{AutoAugmentKind, TrainConfig};
use crate::error::{RecipeError, Result};
use crate::image::{contact_sheet, finish, open_splits, round_robin, save_png, to_u8, train_transform_for};
use serde_json::json;
use std::sync::Arc;
use torchlight_tensor::seed::{rng_from_seed, sample_seed};
use torchlight_vision::{
    decode_file_with, CenterCrop, Compose, Image, Normalize, RandomHorizontalFlip, RandomResizedCrop,
    RandomVerticalFlip, Resize, Sample, TensorImage, ToTensor, Transform,
};

/// The file [`check_augmentation`] writes into `DoctorOptions::out`.
pub const AUGMENTED_SAMPLES: &str = "augmented_samples.png";

/// What one view of the train transform did to one image.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ViewMeasure {
    /// The share of the decoded image's area the leading crop kept (1 without one).
    crop_kept: f64,
    /// `1 - max(0, r)`, `r` the Pearson correlation of the view's luminance with the framed
    /// view's (same crop and flips, no other step); `None` when the framed view is flat.
    distortion: Option<f64>,
    /// The share of pixels the other steps moved by more than [`MOVED`] in some channel.
    moved: f64,
}

/// A pixel whose `u8` value changed by more than this (of 255) in a channel counts as moved.
const MOVED: i32 = 32;

/// A step that only frames the image (where and how large, which way round, as a tensor):
/// the crop, the flips, resizing, ToTensor and Normalize. Every other step (the
/// `data.auto_augment` policy, RandomErasing, any step added later) is augmentation proper,
/// whose effect [`check_augmentation`] measures.
fn frames(t: &dyn Transform) -> bool {
    let a = t.as_any();
    a.is::<RandomResizedCrop>()
        || a.is::<CenterCrop>()
        || a.is::<Resize>()
        || a.is::<RandomHorizontalFlip>()
        || a.is::<RandomVerticalFlip>()
        || a.is::<ToTensor>()
        || a.is::<Normalize>()
}

/// The steps of `compose`, nested `Compose`s flattened, in order.
fn steps(compose: &Compose) -> Vec<Arc<dyn Transform>> {
    let mut out = Vec::new();
    for t in compose.transforms() {
        match t.as_any().downcast_ref::<Compose>() {
            Some(inner) => out.extend(steps(inner)),
            None => out.push(Arc::clone(t)),
        }
    }
    out
}

/// One view: the train transform's steps applied in turn with `seed`'s generator (so the
/// output is exactly the loader's view: a fused pair equals its steps bit for bit with the
/// same draws), and beside it the framed view, which takes only the framing steps, each with
/// the very draws the view's step made.
fn view(steps: &[Arc<dyn Transform>], image: &Image, seed: u64) -> Result<(TensorImage, TensorImage, f64)> {
    let mut rng = rng_from_seed(seed);
    let crop_kept = steps.first().and_then(|t| t.leading_crop()).map_or(1.0, |c| {
        let b = c.crop_box(image.height(), image.width(), &mut rng.clone());
        (b.height * b.width) as f64 / (image.height() * image.width()).max(1) as f64
    });
    let (mut out, mut framed) = (Sample::Image(image.clone()), Sample::Image(image.clone()));
    for t in steps {
        if frames(t.as_ref()) {
            framed = t.apply(framed, &mut rng.clone())?;
        }
        out = t.apply(out, &mut rng)?;
    }
    let tensor = |s: Sample| {
        s.into_tensor().ok_or_else(|| RecipeError::InvalidConfig {
            field: "data".into(),
            value: "train transform".into(),
            reason: "the train transform does not end in a tensor (no ToTensor)".into(),
        })
    };
    Ok((tensor(out)?, tensor(framed)?, crop_kept))
}

fn luminance(image: &Image) -> Vec<f64> {
    let c = image.channels();
    image
        .pixels()
        .chunks(c)
        .map(|p| {
            if c >= 3 {
                0.299 * f64::from(p[0]) + 0.587 * f64::from(p[1]) + 0.114 * f64::from(p[2])
            } else {
                f64::from(p[0])
            }
        })
        .collect()
}

fn measure(view: &Image, framed: &Image, crop_kept: f64) -> ViewMeasure {
    let moved = if view.width() == framed.width() && view.height() == framed.height() {
        let c = view.channels().min(framed.channels());
        let n = view.width() * view.height();
        let changed = (0..n)
            .filter(|&i| {
                (0..c).any(|k| {
                    let a = i32::from(view.pixels()[i * view.channels() + k]);
                    let b = i32::from(framed.pixels()[i * framed.channels() + k]);
                    (a - b).abs() > MOVED
                })
            })
            .count();
        changed as f64 / n.max(1) as f64
    } else {
        1.0
    };
    let (a, b) = (luminance(view), luminance(framed));
    let distortion = if a.len() != b.len() || a.is_empty() {
        Some(1.0)
    } else {
        let n = a.len() as f64;
        let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
        let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
        for (x, y) in a.iter().zip(&b) {
            sab += (x - ma) * (y - mb);
            saa += (x - ma) * (x - ma);
            sbb += (y - mb) * (y - mb);
        }
        // A framed view of one flat colour (a crop of background) holds nothing to keep.
        if sbb / n < 1.0 {
            None
        } else if saa / n < 1e-9 {
            Some(1.0)
        } else {
            Some(1.0 - (sab / (saa * sbb).sqrt()).max(0.0))
        }
    };
    ViewMeasure { crop_kept, distortion, moved }
}

/// Stage 1, `augmentation_strength`: `options.augment_views` views of each of
/// `options.augment_images` training images (taken a class at a time) through the recipe's
/// train transform, with the training loader's draws (view `k` is what epoch `k + 1` feeds the
/// model), each held against its framed view: the same image through the same crop and flips
/// alone. Measured per view:
/// - the distortion, `1 - max(0, r)` with `r` the Pearson correlation of the two views'
///   luminance: what the policy, RandomErasing and any other non-framing step did to the
///   content (0: kept as it was, up to brightness and contrast; 1: nothing of it is left);
/// - the share of pixels those steps moved by more than 32 of 255 in some channel;
/// - the share of the image's area the crop kept.
///
/// WARN when the mean distortion is above `options.augment_distortion` (0.35), or above
/// `options.augment_distortion_small` (0.3) while the smallest class has fewer than
/// `options.small_set` (100) training images (a strong policy on a small set). Measured on
/// generated shapes (circle, cross, bar; 72-96 px files; 8 images x 8 views, `train.seed` 0),
/// at 64 px (32 px in brackets): the default recipe (crop, flip) 0.00 (0.00), `min_crop_scale
/// = 0.02` 0.00 (0.00: the crop frames, it is not measured here), `ta_wide` 0.25 (0.28),
/// `ta_wide` with `random_erase = 0.25` 0.29 (0.33), `ra` 0.33 (0.32), `ta_wide` with
/// `random_erase = 1` 0.37 (0.41), `ra` with `random_erase = 1` 0.42 (0.41), `augmix` 0.04
/// (0.04: the original stays in the mix), AutoAugment's `cifar10` 0.15 (0.15), `imagenet` 0.28
/// (0.28) and `svhn` 0.60 (0.59: its inversions leave no positive correlation). The policies
/// sample with `data.interpolation` (bilinear here; `nearest`, the crop's included, moves
/// `ta_wide` and `ra` by 0.02 at most). The
/// crop's kept area is reported beside it (mean 42% at `min_crop_scale` 0.08, 39% at 0.02).
///
/// With `options.out`, the views are drawn there as [`AUGMENTED_SAMPLES`] (a row per image,
/// the resized and centre-cropped original first).
///
/// # Errors
/// As [`open_splits`]; an image that cannot be decoded, named; the grid cannot be written.
pub fn check_augmentation(config: &TrainConfig, options: &DoctorOptions) -> Result<Finding> {
    let splits = open_splits(config)?;
    let transform = train_transform_for(&config.data);
    let steps = steps(&transform);
    let samples = splits.train.dataset().samples();
    let targets = splits.train_targets();
    let decode = splits.train.dataset().decode_options();
    let normalize = steps.iter().find_map(|t| t.as_any().downcast_ref::<Normalize>().cloned());
    let mut measures = Vec::new();
    let mut items = Vec::new();
    for index in round_robin(&targets, options.augment_images) {
        let path = &samples[splits.train.indices()[index]].0;
        let image = decode_file_with(path, decode)?;
        let mut tensors = Vec::new();
        for k in 0..options.augment_views {
            let (t, framed, crop) =
                view(&steps, &image, sample_seed(config.train.seed, k as u64, index as u64))?;
            measures.push(measure(&to_u8(&t, normalize.as_ref()), &to_u8(&framed, normalize.as_ref()), crop));
            tensors.push(t);
        }
        items.push(finish(config, &transform, path, &image, tensors)?);
    }
    let written = match &options.out {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| RecipeError::io(dir, e))?;
            let path = dir.join(AUGMENTED_SAMPLES);
            save_png(&contact_sheet(&items, config.data.image_size() as usize), &path)?;
            Some(path)
        }
        None => None,
    };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let distortions: Vec<f64> = measures.iter().filter_map(|m| m.distortion).collect();
    let distortion = mean(&distortions);
    let moved = mean(&measures.iter().map(|m| m.moved).collect::<Vec<_>>());
    let crop = mean(&measures.iter().map(|m| m.crop_kept).collect::<Vec<_>>());
    let mut counts = vec![0usize; splits.classes.len()];
    for &t in &targets {
        counts[t as usize] += 1;
    }
    let smallest = counts.iter().copied().min().unwrap_or(0);
    let augmenting: Vec<String> =
        steps.iter().filter(|t| !frames(t.as_ref())).map(|t| step_name(t.as_ref())).collect();
    let small = smallest < options.small_set;
    let status = if distortion > options.augment_distortion
        || (small && distortion > options.augment_distortion_small)
    {
        Status::Warn
    } else {
        Status::Pass
    };
    let policy = if augmenting.is_empty() {
        "no step beyond crop and flip".to_string()
    } else {
        augmenting.join(", ")
    };
    let mut figure = format!(
        "{policy}: mean distortion {distortion:.2} (1 - correlation with the same crop and flip), \
         {:.0}% of pixels moved, the crop keeps {:.0}% of the image, over {} views of {} training images",
        100.0 * moved,
        100.0 * crop,
        measures.len(),
        items.len()
    );
    if status == Status::Warn {
        let limit = if distortion > options.augment_distortion {
            format!("above {}", options.augment_distortion)
        } else {
            format!(
                "above {} with {smallest} images in the smallest class (< {})",
                options.augment_distortion_small, options.small_set
            )
        };
        figure.push_str(&format!(" ({limit})"));
    }
    match &written {
        Some(path) => figure.push_str(&format!("; grid in {}", path.display())),
        None => figure.push_str("; --out DIR draws them"),
    }
    Ok(Finding::new(1, "augmentation_strength", status, figure)
        .fix(format!(
            "the augmentation erases or distorts much of what the model must learn from{}: {}",
            if small {
                format!(" for a set this small ({smallest} images in the smallest class)")
            } else {
                String::new()
            },
            lower_keys(config)
        ))
        .data(json!({
            "distortion": distortion,
            "moved": moved,
            "crop_kept": crop,
            "views": measures.len(),
            "images": items.len(),
            "smallest_class": smallest,
            "steps": augmenting,
            "per_view": measures.iter().map(|m| json!({
                "distortion": m.distortion, "moved": m.moved, "crop_kept": m.crop_kept
            })).collect::<Vec<_>>(),
            "samples_png": written.map(|p| p.display().to_string()),
        })))
}

/// A step's type name (`TrivialAugmentWide`), from its `Debug` form.
fn step_name(t: &dyn Transform) -> String {
    format!("{t:?}").split([' ', '(', '{']).next().unwrap_or_default().to_string()
}

/// The config keys that weaken the train transform, strongest first, at their values now.
fn lower_keys(config: &TrainConfig) -> String {
    let d = &config.data;
    let mut keys = Vec::new();
    if d.random_erase > 0.0 {
        keys.push(format!(
            "lower data.random_erase (now {}; 0.1 to 0.25 is usual, 0 is off)",
            d.random_erase
        ));
    }
    if d.rotation > 0.0 {
        keys.push(format!("lower data.rotation (now {}; 0 is off)", d.rotation));
    }
    if d.color_jitter > 0.0 {
        keys.push(format!("lower data.color_jitter (now {}; 0.4 is usual, 0 is off)", d.color_jitter));
    }
    match d.auto_augment {
        AutoAugmentKind::None => {}
        AutoAugmentKind::TaWide => {
            // RandAugment (2 ops at magnitude 9) measured stronger than TrivialAugmentWide
            // (distortion 0.33 against 0.25), so the one milder setting is none.
            keys.push("set data.auto_augment = \"none\" (now \"ta_wide\")".into())
        }
        AutoAugmentKind::Ra => keys.push("set data.auto_augment = \"none\" (now \"ra\")".into()),
        AutoAugmentKind::Augmix => {
            if d.augmix_severity > 1 {
                keys.push(format!("lower data.augmix_severity (now {})", d.augmix_severity));
            }
            keys.push("set data.auto_augment = \"none\" (now \"augmix\")".into())
        }
        AutoAugmentKind::Imagenet | AutoAugmentKind::Cifar10 | AutoAugmentKind::Svhn => {
            let name = toml::Value::try_from(d.auto_augment).map(|v| v.to_string()).unwrap_or_default();
            keys.push(format!("set data.auto_augment = \"none\" (now {name})"))
        }
    }
    if d.min_crop_scale < 0.35 {
        keys.push(format!("raise data.min_crop_scale (now {}; try 0.35)", d.min_crop_scale));
    }
    if keys.is_empty() {
        "the transform is already the weakest the config offers: check that a flip or a crop does not change the class".into()
    } else {
        keys.join(", or ")
    }
}

/// Stage 4, `augmentation_ab`: the short run's losses on augmented batches (`augmented`, the
/// train transform) against the same run on the same images through the eval transform
/// (`plain`): same model initialisation, same steps, same batch order. Each run's fall is
/// `(head - tail) / head`, the means of its first and last quarter of steps, as `loss_trend`.
///
/// - PASS when the plain run's loss does not fall by `options.ab_min_fall` (10%): then the
///   augmentation is not what holds training back (`loss_trend` says more);
/// - PASS when the augmented run falls by at least `options.ab_ratio` (1/4) of the plain
///   run's fall;
/// - FAIL when the augmented loss does not fall at all while the plain one falls by twice
///   `ab_min_fall` or more; WARN otherwise. The fix names the augmentation keys to lower (or
///   the labels, when what the transform changes is what decides the class).
///
/// SKIP when the runs are shorter than 8 steps (too noisy to compare) or either has a
/// non-finite loss (see `lr_sanity`). Measured with resnet18 on 48 generated 32 px training
/// images (batch 8, 12 steps, `optim.backbone_lr = 1e-4`): the plain run falls 41%; with the
/// default recipe's augmentation 15% (PASS), `ta_wide` 6% (WARN), `ra` with `random_erase = 1`
/// it rises 7% (FAIL), `ta_wide`, `random_erase = 1`, `min_crop_scale = 0.02` it rises 12%
/// (FAIL).
pub fn augmentation_ab(
    augmented: &[f64],
    plain: &[f64],
    config: &TrainConfig,
    options: &DoctorOptions,
) -> Finding {
    let fall = |l: &[f64]| {
        let k = (l.len() / 4).max(1);
        let head = l.iter().take(k).sum::<f64>() / k as f64;
        let tail = l.iter().rev().take(k).sum::<f64>() / k as f64;
        (head, tail, (head - tail) / head.abs().max(1e-12))
    };
    let steps = augmented.len().min(plain.len());
    if steps < 8 {
        return Finding::new(
            4,
            "augmentation_ab",
            Status::Skip,
            format!("not compared: {steps} steps are too few to compare two runs (--run-steps 8 or more)"),
        );
    }
    if augmented.iter().chain(plain).any(|x| !x.is_finite()) {
        return Finding::new(
            4,
            "augmentation_ab",
            Status::Skip,
            "not compared: a run's loss is not finite (see lr_sanity)",
        );
    }
    let (ah, at, af) = fall(augmented);
    let (ph, pt, pf) = fall(plain);
    let k = (augmented.len() / 4).max(1);
    let runs = format!(
        "{} steps each, mean of the first and last {k}: with augmentation {ah:.4} -> {at:.4} ({:+.0}%), \
         without (eval transform) {ph:.4} -> {pt:.4} ({:+.0}%)",
        augmented.len(),
        -100.0 * af,
        -100.0 * pf
    );
    let status = if pf < options.ab_min_fall || af >= options.ab_ratio * pf {
        Status::Pass
    } else if af <= 0.0 && pf >= 2.0 * options.ab_min_fall {
        Status::Fail
    } else {
        Status::Warn
    };
    let figure = match status {
        Status::Pass if pf < options.ab_min_fall => {
            format!("{runs}: the loss does not fall without augmentation either, so it is not the cause")
        }
        Status::Pass => format!("{runs}: the loss falls with augmentation too"),
        Status::Fail => format!("{runs}: the loss falls without augmentation but not with it"),
        _ => format!(
            "{runs}: with augmentation the loss falls less than {:.0}% as far",
            100.0 * options.ab_ratio
        ),
    };
    Finding::new(4, "augmentation_ab", status, figure)
        .fix(format!(
            "the augmentation is too strong for this set (or it changes what the labels depend on, e.g. a flip or a colour): {}",
            lower_keys(config)
        ))
        .data(json!({
            "augmented": { "losses": augmented, "head": ah, "tail": at, "fall": af },
            "plain": { "losses": plain, "head": ph, "tail": pt, "fall": pf },
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> DoctorOptions {
        DoctorOptions::default()
    }

    #[test]
    fn the_ab_verdict_follows_the_two_falls() {
        let c = TrainConfig::default();
        let falling = [2.0, 1.8, 1.5, 1.0, 0.8, 0.5, 0.4, 0.3];
        let flat = [1.1, 1.1, 1.2, 1.1, 1.2, 1.1, 1.2, 1.2];
        let slow = [1.1, 1.1, 1.05, 1.05, 1.0, 1.0, 1.0, 1.0];
        assert_eq!(augmentation_ab(&falling, &falling, &c, &options()).status, Status::Pass);
        let fail = augmentation_ab(&flat, &falling, &c, &options());
        assert_eq!(fail.status, Status::Fail, "{fail:?}");
        assert!(fail.figure.contains("falls without augmentation but not with it"), "{fail:?}");
        assert!(fail.fix.as_deref().unwrap().contains("data.min_crop_scale (now 0.08"), "{fail:?}");
        assert_eq!(augmentation_ab(&slow, &falling, &c, &options()).status, Status::Warn);
        let still = [1.1, 1.2, 1.1, 1.2, 1.1, 1.2, 1.1, 1.15];
        let neither = augmentation_ab(&still, &flat, &c, &options());
        assert_eq!(neither.status, Status::Pass, "{neither:?}");
        assert!(neither.figure.contains("not the cause"));
        let mut nan = falling;
        nan[3] = f64::NAN;
        assert_eq!(augmentation_ab(&nan, &falling, &c, &options()).status, Status::Skip);
        assert_eq!(augmentation_ab(&falling[..7], &falling[..7], &c, &options()).status, Status::Skip);
        // A plain run that only just falls makes a flat augmented run a WARN, not a FAIL.
        let gentle = [1.2, 1.2, 1.1, 1.1, 1.0, 1.0, 1.0, 1.0];
        assert_eq!(augmentation_ab(&flat, &gentle, &c, &options()).status, Status::Warn);
    }

    #[test]
    fn the_fix_names_the_active_keys_strongest_first() {
        let mut c = TrainConfig::default();
        c.set("data.auto_augment", "ta_wide").unwrap();
        c.set("data.random_erase", "1.0").unwrap();
        let keys = lower_keys(&c);
        let (erase, policy, crop) = (
            keys.find("data.random_erase (now 1;").unwrap(),
            keys.find("data.auto_augment").unwrap(),
            keys.find("data.min_crop_scale").unwrap(),
        );
        assert!(erase < policy && policy < crop, "{keys}");
        c.set("data.min_crop_scale", "0.5").unwrap();
        assert!(!lower_keys(&c).contains("min_crop_scale"));
        // The values it suggests are ones the config takes.
        for (key, value) in [
            ("data.random_erase", "0.25"),
            ("data.auto_augment", "ra"),
            ("data.auto_augment", "none"),
            ("data.min_crop_scale", "0.35"),
        ] {
            c.set(key, value).unwrap();
            c.validate().unwrap();
        }
        // AugMix: its severity first, then none; AutoAugment's policies: none, named.
        c.set("data.auto_augment", "augmix").unwrap();
        let keys = lower_keys(&c);
        let (severity, none) = (
            keys.find("lower data.augmix_severity (now 3)").unwrap(),
            keys.find("set data.auto_augment = \"none\" (now \"augmix\")").unwrap(),
        );
        assert!(severity < none, "{keys}");
        c.set("data.augmix_severity", "1").unwrap();
        assert!(!lower_keys(&c).contains("augmix_severity"));
        c.set("data.auto_augment", "svhn").unwrap();
        assert!(
            lower_keys(&c).contains("set data.auto_augment = \"none\" (now \"svhn\")"),
            "{}",
            lower_keys(&c)
        );
    }

    #[test]
    fn a_framed_view_equals_the_view_without_a_policy() {
        let pixels: Vec<u8> = (0..24 * 20 * 3).map(|i| (i * 7 % 251) as u8).collect();
        let image = Image::new(24, 20, 3, pixels);
        let mut c = TrainConfig::default();
        c.data.image_size = Some(16);
        let plain = train_transform_for(&c.data);
        for seed in 0..8 {
            let (t, framed, crop) = view(&steps(&plain), &image, seed).unwrap();
            assert_eq!(t, framed, "no step beyond framing: the two are one view");
            let loader = plain.apply(Sample::Image(image.clone()), &mut rng_from_seed(seed)).unwrap();
            assert_eq!(Some(t), loader.into_tensor(), "the loader's view, draw for draw");
            assert!(crop > 0.0 && crop <= 1.0);
        }
        c.data.random_erase = 1.0;
        let erasing = train_transform_for(&c.data);
        let (t, framed, _) = view(&steps(&erasing), &image, 3).unwrap();
        let want = erasing.apply(Sample::Image(image.clone()), &mut rng_from_seed(3)).unwrap();
        assert_eq!(Some(t.clone()), want.into_tensor());
        assert_ne!(t, framed, "erasing changed the view, not the framed one");
        let n = Normalize::imagenet();
        let m = measure(&to_u8(&t, Some(&n)), &to_u8(&framed, Some(&n)), 1.0);
        assert!(m.moved > 0.0 && m.distortion.unwrap() > 0.0, "{m:?}");
    }

    /// A step the recipe does not know yet counts as augmentation, unchanged code.
    #[test]
    fn a_step_added_to_the_transform_is_measured_without_a_change() {
        let pixels: Vec<u8> = (0..24 * 20 * 3).map(|i| (i * 7 % 251) as u8).collect();
        let image = Image::new(24, 20, 3, pixels);
        let jitter = Compose::default()
            .then(RandomResizedCrop::new(16))
            .then(RandomHorizontalFlip::default())
            .then(torchlight_vision::ColorJitter::new(0.0, 0.0, 0.0, 0.5))
            .then(ToTensor)
            .then(Normalize::imagenet());
        let steps = steps(&Compose::default().then(jitter));
        assert_eq!(steps.len(), 5, "a nested Compose is flattened");
        let names: Vec<String> =
            steps.iter().filter(|t| !frames(t.as_ref())).map(|t| step_name(t.as_ref())).collect();
        assert_eq!(names, ["ColorJitter"]);
        let (t, framed, _) = view(&steps, &image, 1).unwrap();
        assert_ne!(t, framed);
    }
}
