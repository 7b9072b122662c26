//! The `Transform` contract: a transform of a user's own takes part in crop-box decoding and
//! fusion through the trait's hooks alone, and every built-in transform keeps the invariants
//! the trait states (a leading crop's box and rest equal `apply`; a fused step equals the two
//! steps), same pixels and same draws.

use crate::{fixture, TempDir};
use rand::{Rng as _, RngCore as _};
use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use torchlight_base::seed::{rng_from_seed, Rng};
use torchlight_data::Dataset;
use torchlight_vision::{
    decode_file, hflip, AugMix, AutoAugment, AutoAugmentPolicy, CenterCrop, ColorJitter, Compose, CropBox,
    Grayscale, Image, ImageFolder, InterpolationMode, LeadingCrop, Normalize, RandAugment, RandomCrop,
    RandomErasing, RandomHorizontalFlip, RandomResizedCrop, RandomVerticalFlip, Resize, Result, Sample,
    TensorImage, ToTensor, Transform, TrivialAugmentWide, VisionError, IMAGENET_MEAN, IMAGENET_STD,
};

/// A user's crop: a square patch (side uniform in `1..=min(h, w)`, position uniform), then
/// mirrored on a coin toss. It counts the calls of its `apply_cropped`, to show the dataset
/// went through it.
#[derive(Debug, Default)]
struct RandomPatch {
    cropped: Arc<AtomicUsize>,
}

impl RandomPatch {
    fn draw_box(height: usize, width: usize, rng: &mut Rng) -> CropBox {
        let side = rng.random_range(1..=height.min(width));
        let top = rng.random_range(0..=height - side);
        let left = rng.random_range(0..=width - side);
        CropBox { top, left, height: side, width: side }
    }

    fn finish(mut patch: Image, rng: &mut Rng) -> Sample {
        if rng.random::<bool>() {
            hflip(&mut patch);
        }
        Sample::Image(patch)
    }
}

impl Transform for RandomPatch {
    fn apply(&self, input: Sample, rng: &mut Rng) -> Result<Sample> {
        let Sample::Image(image) = input else {
            return Err(VisionError::Transform {
                transform: "RandomPatch",
                message: "wants an image".into(),
            });
        };
        let b = Self::draw_box(image.height(), image.width(), rng);
        Ok(Self::finish(image.crop(b.left, b.top, b.width, b.height), rng))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn leading_crop(&self) -> Option<&dyn LeadingCrop> {
        Some(self)
    }
}

impl LeadingCrop for RandomPatch {
    fn crop_box(&self, height: usize, width: usize, rng: &mut Rng) -> CropBox {
        Self::draw_box(height, width, rng)
    }

    fn apply_cropped(&self, region: Image, rng: &mut Rng) -> Result<Sample> {
        self.cropped.fetch_add(1, Ordering::SeqCst);
        Ok(Self::finish(region, rng))
    }
}

/// A folder of every fixture JPEG (31 upright ones), an EXIF-rotated JPEG and a PNG.
fn jpeg_folder(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    std::fs::create_dir_all(dir.0.join("a")).unwrap();
    for (name, ..) in crate::jpeg::expected() {
        std::fs::copy(fixture(&format!("jpeg/{name}.jpg")), dir.0.join(format!("a/{name}.jpg"))).unwrap();
    }
    std::fs::copy(fixture("inputs/chelsea_exif6.jpg"), dir.0.join("a/zz_exif6.jpg")).unwrap();
    std::fs::copy(fixture("inputs/astronaut.png"), dir.0.join("a/zz_astronaut.png")).unwrap();
    dir
}

/// A transform defined outside the crate, alone and at the head of a Compose, is decoded by
/// its own box through `Transform::leading_crop`: every upright JPEG goes through its
/// `apply_cropped`, and each sample and the draws after it equal decoding the whole file and
/// calling `apply`.
#[test]
fn a_users_crop_takes_part_in_crop_box_decoding_with_the_same_samples_and_draws() {
    let dir = jpeg_folder("usercrop");
    type Make = fn(&RandomPatch) -> Box<dyn Transform>;
    let makes: [Make; 2] = [
        |p| Box::new(RandomPatch { cropped: p.cropped.clone() }),
        |p| {
            Box::new(
                Compose::default()
                    .then(RandomPatch { cropped: p.cropped.clone() })
                    .then(Resize::exact(9, 11))
                    .then(RandomHorizontalFlip::default())
                    .then(ToTensor)
                    .then(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD)),
            )
        },
    ];
    let seeds = 4;
    for make in makes {
        let patch = RandomPatch::default();
        let folder = ImageFolder::new(&dir.0).unwrap().with_transform(Boxed(make(&patch)));
        let reference = make(&RandomPatch::default());
        assert_eq!(folder.len(), 33);
        for index in 0..folder.len() {
            for seed in 0..seeds {
                let (mut rng_a, mut rng_b) = (rng_from_seed(seed), rng_from_seed(seed));
                let (got, _) = folder.get(index, &mut rng_a).unwrap();
                let image = decode_file(&folder.samples()[index].0).unwrap();
                let want = reference.apply(Sample::Image(image), &mut rng_b).unwrap().into_array();
                assert!(got == want, "sample {index} ({:?}), seed {seed}", folder.samples()[index].0);
                assert_eq!(rng_a.next_u64(), rng_b.next_u64(), "sample {index}: the draws differ");
            }
        }
        // The 31 upright JPEGs decode by the box; the EXIF-rotated one and the PNG whole.
        let by_box = if cfg!(feature = "libjpeg-turbo") { 31 * seeds as usize } else { 0 };
        assert_eq!(patch.cropped.load(Ordering::SeqCst), by_box);
    }
}

/// A boxed transform as a `Transform` (what `with_transform` takes), forwarding every hook.
#[derive(Debug)]
struct Boxed(Box<dyn Transform>);

impl Transform for Boxed {
    fn apply(&self, input: Sample, rng: &mut Rng) -> Result<Sample> {
        self.0.apply(input, rng)
    }

    fn as_any(&self) -> &dyn Any {
        self.0.as_any()
    }

    fn leading_crop(&self) -> Option<&dyn LeadingCrop> {
        self.0.leading_crop()
    }
}

/// A user's step that offers to fuse: `AddValue(a)` then `AddValue(b)` is `AddValue(a + b)`
/// (each saturating at 255, so the sum saturates too).
#[derive(Debug, Clone, Copy)]
struct AddValue(u8);

impl Transform for AddValue {
    fn apply(&self, input: Sample, _rng: &mut Rng) -> Result<Sample> {
        let Sample::Image(mut image) = input else {
            return Err(VisionError::Transform { transform: "AddValue", message: "wants an image".into() });
        };
        image.pixels_mut().iter_mut().for_each(|v| *v = v.saturating_add(self.0));
        Ok(Sample::Image(image))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn fuse(&self, next: &dyn Transform) -> Option<Box<dyn Transform>> {
        let next = next.as_any().downcast_ref::<AddValue>()?;
        Some(Box::new(AddValue(self.0.saturating_add(next.0))))
    }
}

/// Compose offers each step the next through `Transform::fuse`, and the fused result the one
/// after: three `AddValue`s of a user's own run as one step, with the same pixels; a built-in
/// pair after them still fuses.
#[test]
fn a_users_step_fuses_through_the_hook() {
    let steps = Compose::default()
        .then(AddValue(10))
        .then(AddValue(20))
        .then(AddValue(200))
        .then(Resize::new(40))
        .then(CenterCrop::new(32));
    assert_eq!((steps.transforms().len(), steps.fused_len()), (5, 2));
    let image = decode_file(fixture("inputs/astronaut.png")).unwrap();
    let mut rng = rng_from_seed(0);
    let mut one_by_one = Sample::Image(image.clone());
    for t in steps.transforms() {
        one_by_one = t.apply(one_by_one, &mut rng).unwrap();
    }
    let fused = steps.apply(Sample::Image(image), &mut rng).unwrap();
    assert!(fused == one_by_one, "the fused steps differ from the steps one by one");
}

/// Every built-in transform (and Compose shapes), labelled.
fn built_ins() -> Vec<(&'static str, Box<dyn Transform>)> {
    let rrc_flip = || {
        Compose::default()
            .then(RandomResizedCrop::new(16).with_scale(0.3, 1.0))
            .then(RandomHorizontalFlip::default())
    };
    vec![
        ("RandomResizedCrop(16)", Box::new(RandomResizedCrop::new(16))),
        ("RandomResizedCrop(12x20, ratio)", Box::new(RandomResizedCrop::rect(12, 20).with_ratio(0.5, 2.0))),
        ("CenterCrop(40)", Box::new(CenterCrop::new(40))),
        ("CenterCrop(50x20)", Box::new(CenterCrop::rect(50, 20))),
        ("CenterCrop(160, pads)", Box::new(CenterCrop::new(160))),
        ("CenterCrop(1x300, pads width)", Box::new(CenterCrop::rect(1, 300))),
        ("Resize(40)", Box::new(Resize::new(40))),
        ("Resize(20x30)", Box::new(Resize::exact(20, 30))),
        ("RandomCrop(8)", Box::new(RandomCrop::new(8).with_pad_if_needed(true))),
        ("RandomCrop(8, padding 2)", Box::new(RandomCrop::new(8).with_padding(2).with_pad_if_needed(true))),
        ("RandomHorizontalFlip", Box::new(RandomHorizontalFlip::default())),
        ("RandomVerticalFlip", Box::new(RandomVerticalFlip::default())),
        ("ColorJitter", Box::new(ColorJitter::new(0.4, 0.4, 0.4, 0.1))),
        ("Grayscale(3)", Box::new(Grayscale::new(3))),
        ("RandomGrayscale(0.5)", Box::new(torchlight_vision::RandomGrayscale::new(0.5))),
        (
            "RandomRotation(30, expand)",
            Box::new(torchlight_vision::RandomRotation::new(30.0).with_expand(true)),
        ),
        (
            "RandomAffine(10, translate, scale, shear)",
            Box::new(
                torchlight_vision::RandomAffine::new(10.0)
                    .with_translate(0.1, 0.1)
                    .with_scale(0.8, 1.2)
                    .with_shear(5.0),
            ),
        ),
        ("RandomPerspective", Box::new(torchlight_vision::RandomPerspective::default())),
        ("GaussianBlur(3)", Box::new(torchlight_vision::GaussianBlur::new(3))),
        (
            "RandomApply(ColorJitter, RandomRotation)",
            Box::new(torchlight_vision::RandomApply::new(
                vec![
                    Box::new(ColorJitter::new(0.4, 0.4, 0.4, 0.1)),
                    Box::new(torchlight_vision::RandomRotation::new(10.0)),
                ],
                0.5,
            )),
        ),
        (
            "RandomChoice(flip, Grayscale)",
            Box::new(torchlight_vision::RandomChoice::new(vec![
                Box::new(RandomVerticalFlip::new(1.0)),
                Box::new(Grayscale::new(3)),
            ])),
        ),
        (
            "RandomOrder(flip, ColorJitter)",
            Box::new(torchlight_vision::RandomOrder::new(vec![
                Box::new(RandomVerticalFlip::new(1.0)),
                Box::new(ColorJitter::new(0.4, 0.0, 0.0, 0.0)),
            ])),
        ),
        ("TrivialAugmentWide", Box::new(TrivialAugmentWide::default())),
        ("RandAugment", Box::new(RandAugment::default())),
        (
            "AutoAugment(svhn, bilinear)",
            Box::new(
                AutoAugment::new(AutoAugmentPolicy::Svhn).with_interpolation(InterpolationMode::Bilinear),
            ),
        ),
        ("AugMix", Box::new(AugMix::default())),
        ("RandomErasing(1.0)", Box::new(RandomErasing::new(1.0))),
        (
            "Compose(RandomResizedCrop, flip, TrivialAugmentWide, ToTensor, Normalize, RandomErasing)",
            Box::new(
                rrc_flip()
                    .then(TrivialAugmentWide::default())
                    .then(ToTensor)
                    .then(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD))
                    .then(RandomErasing::new(0.5)),
            ),
        ),
        ("ToTensor", Box::new(ToTensor)),
        ("Normalize", Box::new(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD))),
        ("Compose()", Box::new(Compose::default())),
        (
            "Compose(RandomResizedCrop, flip, ToTensor, Normalize)",
            Box::new(rrc_flip().then(ToTensor).then(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD))),
        ),
        (
            "Compose(CenterCrop, flip)",
            Box::new(Compose::default().then(CenterCrop::rect(50, 20)).then(RandomHorizontalFlip::default())),
        ),
        (
            "Compose(Compose(RandomResizedCrop, flip), ColorJitter)",
            Box::new(Compose::default().then(rrc_flip()).then(ColorJitter::new(0.4, 0.4, 0.4, 0.1))),
        ),
        (
            "Compose(Resize, CenterCrop, ToTensor, Normalize)",
            Box::new(
                Compose::default()
                    .then(Resize::new(40))
                    .then(CenterCrop::new(32))
                    .then(ToTensor)
                    .then(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD)),
            ),
        ),
        (
            "Compose(flip, RandomResizedCrop)",
            Box::new(Compose::default().then(RandomVerticalFlip::default()).then(RandomResizedCrop::new(16))),
        ),
    ]
}

/// Images of every shape the crops meet: landscape, portrait (grayscale source), a 1-pixel
/// column and a 3-pixel strip (RandomResizedCrop's fallback, CenterCrop's padding).
fn images() -> Vec<(&'static str, Image)> {
    ["astronaut.png", "camera_gray.png", "chelsea.png", "thin_column.png", "wide_strip.png"]
        .into_iter()
        .map(|name| (name, decode_file(fixture(&format!("inputs/{name}"))).unwrap()))
        .collect()
}

/// What a result is, for comparing: the sample, or the error's message.
fn outcome(result: Result<Sample>) -> std::result::Result<Sample, String> {
    result.map_err(|e| e.to_string())
}

/// Each built-in transform that has a leading crop agrees with its `apply`: the box drawn by
/// `crop_box` is inside the image, and `apply_cropped` on its pixels gives the same sample and
/// leaves the generator where `apply` leaves it (tolerance 0), on every image shape and several
/// seeds. The transforms that claim one are exactly the crops and the Composes starting with one.
#[test]
fn every_built_in_leading_crop_agrees_with_apply() {
    let claimants: Vec<&str> =
        built_ins().into_iter().filter(|(_, t)| t.leading_crop().is_some()).map(|(label, _)| label).collect();
    assert_eq!(
        claimants,
        [
            "RandomResizedCrop(16)",
            "RandomResizedCrop(12x20, ratio)",
            "CenterCrop(40)",
            "CenterCrop(50x20)",
            "CenterCrop(160, pads)",
            "CenterCrop(1x300, pads width)",
            "Compose(RandomResizedCrop, flip, TrivialAugmentWide, ToTensor, Normalize, RandomErasing)",
            "Compose(RandomResizedCrop, flip, ToTensor, Normalize)",
            "Compose(CenterCrop, flip)",
            "Compose(Compose(RandomResizedCrop, flip), ColorJitter)",
        ]
    );
    let mut checked = 0;
    for (label, t) in built_ins() {
        let Some(crop) = t.leading_crop() else { continue };
        for (name, image) in images() {
            let (h, w) = (image.height(), image.width());
            for seed in 0..16 {
                let (mut rng_a, mut rng_b) = (rng_from_seed(seed), rng_from_seed(seed));
                let want = outcome(t.apply(Sample::Image(image.clone()), &mut rng_a));
                let b = crop.crop_box(h, w, &mut rng_b);
                assert!(
                    b.width > 0 && b.height > 0 && b.left + b.width <= w && b.top + b.height <= h,
                    "{label} on {name}: box {b:?} leaves the {w}x{h} image"
                );
                let got =
                    outcome(crop.apply_cropped(image.crop(b.left, b.top, b.width, b.height), &mut rng_b));
                assert!(got == want, "{label} on {name}, seed {seed}: the cropped path differs from apply");
                assert_eq!(
                    rng_a.next_u64(),
                    rng_b.next_u64(),
                    "{label} on {name}, seed {seed}: the draws differ"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 10 * 5 * 16);
}

/// Every pair of built-in steps that fuses gives what the two steps give one after the other
/// (tolerance 0, same draws), on images and on a tensor (where both fail alike); the pairs that
/// fuse are Resize then CenterCrop and ToTensor then Normalize.
#[test]
fn every_built_in_fusion_equals_its_two_steps() {
    let tensor =
        TensorImage { channels: 3, height: 2, width: 2, data: (0..12).map(|v| v as f32 / 12.0).collect() };
    let mut fused_pairs = Vec::new();
    for (first_label, first) in built_ins() {
        for (next_label, next) in built_ins() {
            let Some(fused) = first.fuse(next.as_ref()) else { continue };
            fused_pairs.push(format!("{first_label} + {next_label}"));
            let mut inputs: Vec<Sample> =
                images().into_iter().map(|(_, image)| Sample::Image(image)).collect();
            inputs.push(Sample::Tensor(tensor.clone()));
            for input in inputs {
                for seed in 0..4 {
                    let (mut rng_a, mut rng_b) = (rng_from_seed(seed), rng_from_seed(seed));
                    let want = outcome(
                        first.apply(input.clone(), &mut rng_a).and_then(|s| next.apply(s, &mut rng_a)),
                    );
                    let got = outcome(fused.apply(input.clone(), &mut rng_b));
                    assert!(got == want, "{first_label} + {next_label}, seed {seed}: the fused step differs");
                    assert_eq!(
                        rng_a.next_u64(),
                        rng_b.next_u64(),
                        "{first_label} + {next_label}: the draws differ"
                    );
                }
            }
        }
    }
    let mut want = Vec::new();
    for resize in ["Resize(40)", "Resize(20x30)"] {
        for crop in
            ["CenterCrop(40)", "CenterCrop(50x20)", "CenterCrop(160, pads)", "CenterCrop(1x300, pads width)"]
        {
            want.push(format!("{resize} + {crop}"));
        }
    }
    want.push("ToTensor + Normalize".to_string());
    assert_eq!(fused_pairs, want);
}
