//! The doctor's augmentation restraint checks on generated ImageFolders: the distortion of the
//! recipe's own train transform with its grid (`augmentation_strength`, `augmented_samples.png`)
//! and the A/B of the short run with and without augmentation (`augmentation_ab`).

use crate::{temp_dir, torch_rng_lock};
use std::path::Path;
use torchlight_recipes::doctor::*;
use torchlight_recipes::synthetic::{write_image_folder, Shape, SyntheticSpec};
use torchlight_recipes::*;

fn dataset(root: &Path, per_class: [usize; 3], size_range: (u32, u32)) {
    let spec = SyntheticSpec {
        shapes: vec![Shape::Circle, Shape::Cross, Shape::Bar],
        per_class,
        size_range,
        seed: 5,
    };
    write_image_folder(root, &spec).unwrap();
}

fn config(root: &Path, sets: &[(&str, &str)]) -> TrainConfig {
    let mut c = TrainConfig::default();
    c.data.root = root.to_path_buf();
    c.data.image_size = Some(32);
    c.data.workers = 0;
    c.train.batch_size = 8;
    c.train.device = "cpu".into();
    // As the doctor tests: the backbone at a tenth of the lr.
    c.optim.backbone_lr = Some(1e-4);
    for (key, value) in sets {
        c.set(key, value).unwrap();
    }
    c
}

const TOO_STRONG: &[(&str, &str)] =
    &[("data.auto_augment", "ta_wide"), ("data.random_erase", "1.0"), ("data.min_crop_scale", "0.02")];

/// The distortion tells a usual policy from a destructive one (figures in
/// `check_augmentation`'s docs; the augmentation ops are integer-exact, so they hold on every
/// CPU), and the grid shows 8 views of 8 images beside their originals.
#[test]
fn the_distortion_separates_a_usual_policy_from_a_destructive_one_and_draws_the_grid() {
    let tmp = temp_dir();
    dataset(tmp.path(), [16, 16, 16], (72, 96));
    let out = tmp.path().join("report");
    let options = DoctorOptions { out: Some(out.clone()), ..DoctorOptions::default() };
    let plain = check_augmentation(&config(tmp.path(), &[]), &options).unwrap();
    assert_eq!((plain.stage, plain.status), (1, Status::Pass), "{plain:?}");
    assert_eq!(plain.data["distortion"], 0.0, "crop and flip alone distort nothing: {plain:?}");
    assert_eq!((plain.data["views"].as_u64(), plain.data["images"].as_u64()), (Some(64), Some(8)));
    let png = out.join(AUGMENTED_SAMPLES);
    assert!(plain.figure.ends_with(&format!("grid in {}", png.display())), "{plain:?}");
    // 8 rows of the original and 8 views, 32 px tiles with 4 px gaps.
    let size = ::image::image_dimensions(&png).unwrap();
    assert_eq!(size, (9 * 32 + 10 * 4, 8 * 32 + 9 * 4));

    let figure = |sets: &[(&str, &str)]| {
        let f = check_augmentation(&config(tmp.path(), sets), &DoctorOptions::default()).unwrap();
        (f.status, f.data["distortion"].as_f64().unwrap(), f)
    };
    let (status, ta_wide, f) = figure(&[("data.auto_augment", "ta_wide")]);
    assert_eq!(status, Status::Pass, "{f:?}");
    assert!(f.figure.starts_with("TrivialAugmentWide: mean distortion"), "{f:?}");
    let (status, ra_erase, f) = figure(&[("data.auto_augment", "ra"), ("data.random_erase", "1.0")]);
    assert_eq!(status, Status::Warn, "{f:?}");
    assert!(f.figure.starts_with("RandAugment, RandomErasing:"), "{f:?}");
    assert!(f.fix.as_deref().unwrap().contains("lower data.random_erase (now 1;"), "{f:?}");
    assert!(ra_erase > ta_wide + 0.1, "TrivialAugmentWide {ta_wide:.3}, RandAugment + erasing {ra_erase:.3}");
    // No --out: nothing is written, and the figure says how to get the grid.
    assert!(f.figure.ends_with("--out DIR draws them"), "{f:?}");
}

/// The test: on a small set, a deliberately too-strong policy stops the loss falling
/// while the same run on the eval transform learns; the default recipe falls in both runs.
#[test]
fn a_too_strong_policy_on_a_small_set_fails_the_ab_and_the_default_recipe_passes() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    dataset(tmp.path(), [16, 8, 8], (36, 44));
    let options = DoctorOptions { run_steps: 12, ..DoctorOptions::default() };

    let report = doctor(&config(tmp.path(), &[]), &options).unwrap();
    let ab = report.get("augmentation_ab").unwrap_or_else(|| panic!("{}", report.to_text()));
    assert_eq!((ab.stage, ab.status), (4, Status::Pass), "{}", report.to_text());
    let (plain, augmented) =
        (ab.data["plain"]["fall"].as_f64().unwrap(), ab.data["augmented"]["fall"].as_f64().unwrap());
    assert!(plain > options.ab_min_fall, "the plain run learns, so the PASS is not vacuous: {ab:?}");
    assert!(augmented >= options.ab_ratio * plain, "{ab:?}");
    assert_eq!(report.get("augmentation_strength").unwrap().status, Status::Pass);
    // Same initialisation and batch order: the augmented run is the short run itself.
    assert_eq!(report.get("loss_trend").unwrap().data["losses"], ab.data["augmented"]["losses"]);

    let report = doctor(&config(tmp.path(), TOO_STRONG), &options).unwrap();
    let text = report.to_text();
    let ab = report.get("augmentation_ab").unwrap();
    assert_eq!(ab.status, Status::Fail, "{text}");
    assert!(ab.figure.contains("the loss falls without augmentation but not with it"), "{text}");
    let fix = ab.fix.as_deref().unwrap();
    for key in ["data.random_erase (now 1;", "data.auto_augment", "data.min_crop_scale (now 0.02;"] {
        assert!(fix.contains(key), "`{key}` in {fix}");
    }
    // The plain run is the same in both reports: only the train transform changed.
    assert!(ab.data["plain"]["fall"].as_f64().unwrap() > 2.0 * options.ab_min_fall, "{ab:?}");
    assert_eq!(report.get("augmentation_strength").unwrap().status, Status::Warn, "{text}");
}
