//! `EvalPreprocessing`: its transform is the evaluation pipeline the recipe always built, its
//! `from_crop_pct` sizes are timm's (`tests/fixtures/timm_eval_sizes.py`).

use crate::fixture;
use torchlight_base::seed::rng_from_seed;
use torchlight_vision::{
    decode_file, CenterCrop, Compose, EvalPreprocessing, InterpolationMode, Normalize, Resize, Sample,
    ToTensor, Transform, VisionError, IMAGENET_MEAN, IMAGENET_STD,
};

/// The evaluation transform as the training recipe wrote it out before `EvalPreprocessing`
/// (`eval_transform` in torchlight-train: `Resize(size * 256 / 224)`, `CenterCrop(size)`,
/// `ToTensor`, ImageNet's `Normalize`).
fn recipe_eval_transform(image_size: usize) -> Compose {
    Compose::default()
        .then(Resize::new(image_size * 256 / 224))
        .then(CenterCrop::new(image_size))
        .then(ToTensor)
        .then(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD))
}

/// torchvision's preset gives the recipe's pipeline bit for bit (tolerance 0), fused the same
/// way, on landscape, portrait, grayscale, 1-pixel-wide and 3-pixel-high images, at sizes that
/// downscale and upscale.
#[test]
fn the_classification_preset_is_the_recipes_eval_transform() {
    let names = ["astronaut.png", "chelsea.png", "camera_gray.png", "thin_column.png", "wide_strip.png"];
    for image_size in [224, 32, 64, 100, 130] {
        let preset = EvalPreprocessing::classification(image_size);
        assert_eq!((preset.resize, preset.crop), (image_size * 256 / 224, image_size));
        assert_eq!(preset.interpolation, InterpolationMode::Bilinear);
        assert_eq!((preset.mean, preset.std), (IMAGENET_MEAN, IMAGENET_STD));
        let (ours, theirs) = (preset.transform(), recipe_eval_transform(image_size));
        assert_eq!((ours.transforms().len(), ours.fused_len()), (4, 2), "resize+crop, then the tensor");
        for name in names {
            let image = decode_file(fixture(&format!("inputs/{name}"))).unwrap();
            let mut rng = rng_from_seed(0);
            let got = ours.apply(Sample::Image(image.clone()), &mut rng).unwrap().into_tensor().unwrap();
            let want = theirs.apply(Sample::Image(image), &mut rng).unwrap().into_tensor().unwrap();
            assert_eq!((got.channels, got.height, got.width), (3, image_size, image_size), "{name}");
            let same_bits = got.data.iter().zip(&want.data).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same_bits && got.data.len() == want.data.len(), "{name} at {image_size}: outputs differ");
        }
    }
    assert_eq!(EvalPreprocessing::classification(224).resize, 256);
    assert_eq!(EvalPreprocessing::classification(32).resize, 36);
}

/// `from_crop_pct` resizes to timm 1.0.31's `scale_size = floor(image_size / crop_pct)` (the
/// table printed by `tests/fixtures/timm_eval_sizes.py`, `transforms_imagenet_eval` with the
/// default crop mode), with the crop, interpolation and normalisation of its defaults; 0.875
/// is torchvision's preset at 224. A crop_pct that cannot work is an error naming it.
#[test]
fn from_crop_pct_sizes_the_resize_as_timm_does() {
    let timm = [
        (224, 0.875, 256),
        (224, 0.95, 235),
        (288, 1.0, 288),
        (384, 1.0, 384),
        (224, 0.9, 248),
        (288, 0.9, 320),
        (256, 0.95, 269),
        (240, 0.875, 274),
        (320, 0.95, 336),
        (380, 0.922, 412),
        (224, 1.15, 194),
    ];
    for (image_size, crop_pct, resize) in timm {
        let p = EvalPreprocessing::from_crop_pct(image_size, crop_pct).unwrap();
        let want = EvalPreprocessing { resize, ..EvalPreprocessing::classification(image_size) };
        assert_eq!(p, want, "{image_size} at crop_pct {crop_pct}");
    }
    assert_eq!(EvalPreprocessing::from_crop_pct(224, 0.875).unwrap(), EvalPreprocessing::classification(224));
    for (image_size, crop_pct, field) in [
        (224, 0.0, "crop_pct"),
        (224, -0.5, "crop_pct"),
        (224, f64::NAN, "crop_pct"),
        (224, f64::INFINITY, "crop_pct"),
        (1, 3.0, "crop_pct"),
        (0, 0.875, "image_size"),
    ] {
        let err = EvalPreprocessing::from_crop_pct(image_size, crop_pct).unwrap_err();
        assert!(
            matches!(err, VisionError::Config { field: f, .. } if f == field),
            "{image_size} at {crop_pct}: {err}"
        );
        assert!(err.to_string().contains(field), "{err}");
    }
}
