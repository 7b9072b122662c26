//! JPEG decoding against PIL, byte for byte (`tests/fixtures/make_jpegs.py`): every chroma
//! subsampling, grayscale, RGB, progressive, restart markers, odd sizes.

use crate::fixture;
use torchlight_vision::{decode_file, image_dimensions, image_dimensions_of_bytes, jpeg_decoder};

/// `(name, width, height, sha256 of PIL's RGB bytes)` for every fixture JPEG.
pub fn expected() -> Vec<(String, usize, usize, String)> {
    let text = std::fs::read_to_string(fixture("jpeg/expected.txt")).expect("read expected.txt");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(f.len(), 4, "expected.txt: {line}");
            (f[0].to_string(), f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].to_string())
        })
        .collect()
}

/// The SHA-256 of `bytes` in lowercase hex, as Python's `hexdigest()`.
#[cfg(feature = "libjpeg-turbo")]
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// With libjpeg-turbo (the default build), each file decodes to exactly PIL's bytes
/// (tolerance 0): Pillow 13's libjpeg-turbo 3.2 and the system's 2.1.5 agree on all of them.
#[cfg(feature = "libjpeg-turbo")]
#[test]
fn jpegs_decode_byte_for_byte_as_pil_does() {
    assert!(jpeg_decoder().starts_with("libjpeg-turbo "), "{}", jpeg_decoder());
    let cases = expected();
    assert_eq!(cases.len(), 31);
    let mut differ = Vec::new();
    for (name, width, height, sha) in &cases {
        let image =
            decode_file(fixture(&format!("jpeg/{name}.jpg"))).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((image.width(), image.height(), image.channels()), (*width, *height, 3), "{name}");
        if sha256_hex(image.pixels()) != *sha {
            differ.push(name.as_str());
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} files decode differently from PIL: {differ:?}",
        differ.len(),
        cases.len()
    );
}

/// Without libjpeg-turbo, zune-jpeg decodes every file to the right size (its bytes differ
/// from PIL's by a few units).
#[cfg(not(feature = "libjpeg-turbo"))]
#[test]
fn jpegs_decode_to_the_right_size_with_zune_jpeg() {
    assert_eq!(jpeg_decoder(), "zune-jpeg");
    for (name, width, height, _) in expected() {
        let image =
            decode_file(fixture(&format!("jpeg/{name}.jpg"))).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((image.width(), image.height()), (width, height), "{name}");
    }
}

/// The header sizes read from a file and from its bytes in memory agree with the fixtures
/// (every subsampling and odd size), and bytes that are no image are an error naming the source.
#[test]
fn header_sizes_from_bytes_equal_those_from_the_file() {
    for (name, width, height, _) in expected() {
        let path = fixture(&format!("jpeg/{name}.jpg"));
        let bytes = std::fs::read(&path).unwrap();
        let expected = (width as u32, height as u32);
        assert_eq!(image_dimensions(&path).unwrap(), expected, "{name}");
        assert_eq!(image_dimensions_of_bytes(&bytes, &path).unwrap(), expected, "{name}");
    }
    let err = image_dimensions_of_bytes(b"not an image", "in/memory.jpg").unwrap_err().to_string();
    assert!(err.contains("in/memory.jpg"), "{err}");
}

/// The fixture `name`'s bytes.
fn jpeg_bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixture(&format!("jpeg/{name}.jpg"))).expect("read the fixture")
}

/// Where the start-of-frame marker (`FF C0`/`FF C2`) is.
fn sof_at(bytes: &[u8]) -> usize {
    bytes.windows(2).position(|w| w == [0xFF, 0xC0] || w == [0xFF, 0xC2]).expect("a SOF marker")
}

/// libjpeg's errors come back as `VisionError::Decode` naming the file (its default handler
/// would end the process), and a header declaring a huge image is refused before decoding.
#[test]
fn libjpeg_errors_and_the_pixel_limit_name_the_file() {
    use torchlight_vision::{decode_bytes, VisionError};
    // An unsupported process (lossless, SOF3): libjpeg 2.1 raises an error.
    let mut lossless = jpeg_bytes("s420_q95");
    let at = sof_at(&lossless);
    lossless[at + 1] = 0xC3;
    let err = decode_bytes(&lossless, "cats/lossless.jpg").unwrap_err();
    assert!(matches!(err, VisionError::Decode { .. }), "{err:?}");
    assert!(err.to_string().contains("cats/lossless.jpg"), "{err}");
    // A frame header declaring 40000x40000 pixels (the data stays 131x97's).
    let mut bomb = jpeg_bytes("s420_q95");
    let at = sof_at(&bomb);
    bomb[at + 5..at + 9].copy_from_slice(&[0x9C, 0x40, 0x9C, 0x40]);
    let err = decode_bytes(&bomb, "cats/bomb.jpg").unwrap_err();
    assert!(matches!(err, VisionError::TooManyPixels { width: 40_000, height: 40_000, .. }), "{err:?}");
    assert!(err.to_string().contains("cats/bomb.jpg"), "{err}");
    // Cut short: refused as PIL refuses it ("image file is truncated").
    let whole = jpeg_bytes("progressive_s420_q90");
    let err = decode_bytes(&whole[..whole.len() / 2], "cats/cut.jpg").unwrap_err();
    assert!(err.to_string().contains("cats/cut.jpg") && err.to_string().contains("truncated"), "{err}");
}

/// A small deterministic generator for the test's rectangles (SplitMix64).
struct Draws(u64);

impl Draws {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

/// Decoding a box equals cutting the box out of the full decode, byte for byte, for random
/// boxes (and the corners, edges and single pixels) of every fixture: each subsampling, so
/// fancy upsampling at the box's edges sees the same neighbours as in a full decode;
/// progressive files, restart markers and odd sizes too.
#[test]
fn decoding_a_box_equals_cropping_the_full_decode() {
    use torchlight_vision::{decode_bytes, decode_bytes_crop, CropBox, DecodeOptions};
    let options = DecodeOptions::default();
    let mut draws = Draws(18);
    let mut boxes = 0;
    for (name, width, height, _) in expected() {
        let bytes = jpeg_bytes(&name);
        let full = decode_bytes(&bytes, &name).unwrap();
        let mut cases = vec![
            CropBox { top: 0, left: 0, height, width },
            CropBox { top: height - 1, left: width - 1, height: 1, width: 1 },
            CropBox { top: 0, left: width / 2, height, width: width - width / 2 },
            CropBox { top: height / 2, left: 0, height: height - height / 2, width },
        ];
        for _ in 0..60 {
            let (h, w) = (1 + draws.below(height), 1 + draws.below(width));
            let (top, left) = (draws.below(height - h + 1), draws.below(width - w + 1));
            cases.push(CropBox { top, left, height: h, width: w });
        }
        for b in cases {
            let got =
                decode_bytes_crop(&bytes, &name, &options, b).unwrap_or_else(|e| panic!("{name} {b:?}: {e}"));
            let want = full.crop(b.left, b.top, b.width, b.height);
            assert!(got == want, "{name}: box {b:?} differs from the full decode's crop");
            boxes += 1;
        }
    }
    assert_eq!(boxes, 31 * 64);
    // A box leaving the image is an error naming it, not a panic.
    let bytes = jpeg_bytes("s420_q95");
    let err = decode_bytes_crop(&bytes, "a.jpg", &options, CropBox { top: 90, left: 0, height: 8, width: 4 });
    assert!(err.unwrap_err().to_string().contains("leaves the 131x97 image"));
}

/// An ImageFolder whose transform starts with a crop (RandomResizedCrop, CenterCrop) decodes
/// only the box, with the same outputs and the same random draws as decoding the whole file and
/// applying the transform: over every fixture JPEG (and an EXIF-rotated JPEG and a PNG, which
/// decode whole), several seeds, each crop alone (bilinear, bicubic, nearest) and at the head of
/// a Compose, with padding;
/// and Resize then CenterCrop (fused; decoded whole) gives the same as the plain steps.
#[test]
fn crop_box_loading_gives_the_same_samples_and_draws_as_decoding_the_whole_file() {
    use torchlight_base::seed::rng_from_seed;
    use torchlight_data::Dataset;
    use torchlight_vision::{
        CenterCrop, Compose, ImageFolder, InterpolationMode, Normalize, RandomHorizontalFlip,
        RandomResizedCrop, Resize, Sample, ToTensor, Transform, IMAGENET_MEAN, IMAGENET_STD,
    };
    let dir = crate::TempDir::new("cropbox");
    std::fs::create_dir_all(dir.0.join("a")).unwrap();
    for (name, ..) in expected() {
        std::fs::copy(fixture(&format!("jpeg/{name}.jpg")), dir.0.join(format!("a/{name}.jpg"))).unwrap();
    }
    std::fs::copy(fixture("inputs/chelsea_exif6.jpg"), dir.0.join("a/zz_exif6.jpg")).unwrap();
    std::fs::copy(fixture("inputs/astronaut.png"), dir.0.join("a/zz_astronaut.png")).unwrap();
    let transforms: Vec<Box<dyn Fn() -> Box<dyn Transform>>> = vec![
        Box::new(|| Box::new(RandomResizedCrop::rect(12, 20))),
        Box::new(|| Box::new(RandomResizedCrop::rect(17, 9).with_interpolation(InterpolationMode::Bicubic))),
        Box::new(|| Box::new(RandomResizedCrop::new(15).with_interpolation(InterpolationMode::Nearest))),
        Box::new(|| {
            Box::new(
                Compose::default()
                    .then(RandomResizedCrop::new(16).with_scale(0.3, 1.0))
                    .then(RandomHorizontalFlip::default())
                    .then(ToTensor)
                    .then(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD)),
            )
        }),
        Box::new(|| Box::new(CenterCrop::new(40))),
        Box::new(|| {
            Box::new(Compose::default().then(CenterCrop::rect(50, 20)).then(RandomHorizontalFlip::default()))
        }),
        Box::new(|| {
            Box::new(
                Compose::default()
                    .then(Resize::new(40))
                    .then(CenterCrop::new(32))
                    .then(ToTensor)
                    .then(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD)),
            )
        }),
        Box::new(|| Box::new(Compose::default().then(Resize::new(100)).then(CenterCrop::rect(90, 120)))),
        Box::new(|| Box::new(Compose::default().then(Resize::exact(61, 67)).then(CenterCrop::rect(13, 60)))),
    ];
    for make in &transforms {
        let folder = ImageFolder::new(&dir.0).unwrap().with_transform(ComposeOf(make()));
        let reference = make();
        assert_eq!(folder.len(), 33);
        for index in 0..folder.len() {
            for seed in 0..4u64 {
                let (mut rng_a, mut rng_b) = (rng_from_seed(seed), rng_from_seed(seed));
                let (got, _) = folder.get(index, &mut rng_a).unwrap();
                let image = decode_file(&folder.samples()[index].0).unwrap();
                let want = reference.apply(Sample::Image(image), &mut rng_b).unwrap().into_array();
                assert!(got == want, "sample {index} ({:?}), seed {seed}", folder.samples()[index].0);
                use rand::RngCore as _;
                assert_eq!(rng_a.next_u64(), rng_b.next_u64(), "sample {index}: the draws differ");
            }
        }
    }
}

/// A boxed transform as a `Transform` (what `with_transform` takes), forwarding the crop hook
/// so the dataset decodes by the box.
#[derive(Debug)]
struct ComposeOf(Box<dyn torchlight_vision::Transform>);

impl torchlight_vision::Transform for ComposeOf {
    fn apply(
        &self,
        input: torchlight_vision::Sample,
        rng: &mut torchlight_base::seed::Rng,
    ) -> torchlight_vision::Result<torchlight_vision::Sample> {
        self.0.apply(input, rng)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self.0.as_any()
    }

    fn leading_crop(&self) -> Option<&dyn torchlight_vision::LeadingCrop> {
        self.0.leading_crop()
    }
}
