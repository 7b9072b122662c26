//! Format variants against PIL, byte for byte (`tests/fixtures/make_variants.py`): EXIF and XMP
//! orientation in JPEG, PNG and WebP, CMYK JPEGs, 16-bit and RLE BMPs with odd layouts, GIF
//! first frames with transparency and offsets, and TIFF's layouts (associated alpha, CMYK, JPEG
//! strips and tiles, palettes, 2- and 4-bit gray, signed samples, BigTIFF, planar tiles, fill
//! order, predictors). With `exif_transpose` off each file decodes to torchvision's loader's
//! bytes (`Image.open(f).convert("RGB")`), with it on to `ImageOps.exif_transpose`'s; what PIL
//! reads and Torchlight refuses is refused at the ImageFolder scan, naming file and feature.

use crate::{fixture, read_safetensors, TempDir};
use std::collections::HashMap;
use torchlight_vision::{
    decode_bytes_crop, decode_bytes_with, decode_file_with, image_dimensions, CropBox, DecodeOptions,
    ImageFolder, SplitFolders, VisionError,
};

/// `(file name, feature named in the refusal)` for the files Torchlight refuses.
fn refused() -> Vec<(String, String)> {
    std::fs::read_to_string(fixture("variants/refused.txt"))
        .unwrap()
        .lines()
        .map(|l| {
            let (name, feature) = l.split_once('\t').expect("name<TAB>feature");
            (name.to_string(), feature.to_string())
        })
        .collect()
}

/// Every variant file's name and PIL's bytes: `(plain, exif-transposed)`.
fn variants() -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let mut expected = read_safetensors("variants/expected.safetensors");
    let refused: Vec<String> = refused().into_iter().map(|(n, _)| n).collect();
    let mut names: Vec<String> = expected.keys().filter(|k| !k.ends_with("#t")).cloned().collect();
    names.sort();
    names
        .into_iter()
        .filter(|n| !refused.contains(n))
        .map(|n| {
            let plain = expected.remove(&n).unwrap().u8s;
            let turned = expected.remove(&format!("{n}#t")).unwrap().u8s;
            (n, plain, turned)
        })
        .collect()
}

/// Whether `name` needs libjpeg-turbo for PIL's bytes: JPEGs (zune-jpeg is a few units off
/// without the feature) and JPEG-compressed TIFFs (refused without it).
fn needs_libjpeg(name: &str) -> bool {
    !cfg!(feature = "libjpeg-turbo")
        && (name.starts_with("jpeg_") || name.starts_with("tiff_") && name.contains("_jpeg"))
}

/// How a decode compares with PIL's bytes: `None` when equal.
fn mismatch(got: &torchlight_vision::Result<torchlight_vision::Image>, want: &[u8]) -> Option<String> {
    match got {
        Err(e) => Some(format!("error: {e}")),
        Ok(image) if image.pixels().len() != want.len() => {
            Some(format!("{}x{} image, PIL's has {} bytes", image.width(), image.height(), want.len()))
        }
        Ok(image) => {
            let differ = image.pixels().iter().zip(want).filter(|(a, b)| a != b).count();
            let max = image.pixels().iter().zip(want).map(|(a, b)| a.abs_diff(*b)).max().unwrap_or(0);
            (differ > 0).then(|| format!("{differ} of {} bytes differ, by up to {max}", want.len()))
        }
    }
}

/// Each file, by family (JPEG, PNG, WebP, BMP, GIF, TIFF), decodes to exactly PIL's bytes
/// (tolerance 0: every path is integer arithmetic, libjpeg-turbo's included): with
/// `exif_transpose` off to `convert("RGB")`'s, with it on to `exif_transpose`'s.
#[test]
fn every_variant_decodes_to_pils_bytes_with_and_without_exif_transpose() {
    let dir = fixture("variants");
    let cases = variants();
    assert!(cases.len() >= 70, "{} variants", cases.len());
    let mut failures: HashMap<&str, Vec<String>> = HashMap::new();
    for (name, plain, turned) in &cases {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        for (transpose, want) in [(false, plain), (true, turned)] {
            let options = DecodeOptions::default().with_exif_transpose(transpose);
            let got = decode_bytes_with(&bytes, name, &options);
            if needs_libjpeg(name) {
                // zune-jpeg: the size (and so the orientation) is PIL's; JPEG TIFFs are refused.
                match &got {
                    Ok(image) => assert_eq!(image.pixels().len(), want.len(), "{name}"),
                    Err(e) => assert!(matches!(e, VisionError::Unsupported { .. }), "{name}: {e}"),
                }
                continue;
            }
            if let Some(why) = mismatch(&got, want) {
                let family = name.split('_').next().unwrap();
                failures
                    .entry(family)
                    .or_default()
                    .push(format!("{name} (exif_transpose {transpose}): {why}"));
            }
        }
    }
    let report: Vec<String> =
        failures.iter().map(|(family, f)| format!("{family}: {}", f.join("; "))).collect();
    assert!(failures.is_empty(), "differ from PIL:\n{}", report.join("\n"));
}

/// The orientation tag decides only with `exif_transpose` on, and the default is on: a rotated
/// file of each format comes out turned by default and as stored when asked.
#[test]
fn exif_transpose_is_on_by_default_and_off_gives_torchvisions_bytes() {
    assert!(DecodeOptions::default().exif_transpose);
    let dir = fixture("variants");
    let expected = read_safetensors("variants/expected.safetensors");
    let names =
        ["jpeg_exif_gps_orient6.jpg", "png_exif6.png", "png_xmp_itxt8.png", "webp_exif5_lossless.webp"];
    for name in names.into_iter().filter(|n| !needs_libjpeg(n)) {
        let plain = &expected[name].u8s;
        let turned = &expected[&format!("{name}#t")].u8s;
        assert_ne!(plain, turned, "{name}: the fixture is turned");
        let default = decode_file_with(dir.join(name), &DecodeOptions::default()).unwrap();
        assert_eq!(default.pixels(), &turned[..], "{name}");
        let off =
            decode_file_with(dir.join(name), &DecodeOptions::default().with_exif_transpose(false)).unwrap();
        assert_eq!(off.pixels(), &plain[..], "{name}");
    }
    // A TIFF's orientation tag is applied either way: Pillow's TIFF reader applies it on load.
    let tiff = &expected["tiff_orient6.tif"].u8s;
    for transpose in [false, true] {
        let options = DecodeOptions::default().with_exif_transpose(transpose);
        assert_eq!(decode_file_with(dir.join("tiff_orient6.tif"), &options).unwrap().pixels(), &tiff[..]);
    }
}

/// Decoding a box equals cropping the whole decode, with either setting: for upright JPEGs
/// (libjpeg-turbo decodes only the box), rotated ones (with `exif_transpose` off they are
/// upright and decode by box too), CMYK, and other formats (decoded whole).
#[test]
fn decoding_a_box_equals_cropping_the_whole_decode_with_either_setting() {
    let dir = fixture("variants");
    let names = [
        "jpeg_exif_empty_gps.jpg",
        "jpeg_exif_gps_orient6.jpg",
        "jpeg_exif4.jpg",
        "jpeg_cmyk_adobe.jpg",
        "jpeg_xmp_orient8.jpg",
        "png_exif6.png",
        "tiff_cmyk_jpeg_tiles.tif",
    ];
    for name in names.into_iter().filter(|n| !n.starts_with("tiff_") || !needs_libjpeg(n)) {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        for transpose in [false, true] {
            let options = DecodeOptions::default().with_exif_transpose(transpose);
            let whole = decode_bytes_with(&bytes, name, &options).unwrap();
            let (w, h) = (whole.width(), whole.height());
            let boxes = [
                CropBox { top: 0, left: 0, height: h, width: w },
                CropBox { top: 1, left: 2, height: h - 3, width: w - 5 },
                CropBox { top: h / 2, left: w / 3, height: h - h / 2, width: 3 },
                CropBox { top: h - 1, left: w - 1, height: 1, width: 1 },
            ];
            for b in boxes {
                let got = decode_bytes_crop(&bytes, name, &options, b).unwrap();
                assert!(
                    got == whole.crop(b.left, b.top, b.width, b.height),
                    "{name} (exif_transpose {transpose}): box {b:?}"
                );
            }
        }
    }
}

/// What PIL reads and Torchlight refuses is refused when decoding and at the ImageFolder scan
/// (before any sample is loaded), in one line naming the file and the feature.
#[test]
fn unsupported_tiffs_are_refused_at_the_scan_naming_file_and_feature() {
    let cases = refused();
    assert!(cases.len() >= 4);
    for (name, feature) in &cases {
        let path = fixture("variants").join(name);
        let err = decode_file_with(&path, &DecodeOptions::default()).unwrap_err();
        assert!(matches!(err, VisionError::Unsupported { .. }), "{name}: {err:?}");
        let text = err.to_string();
        assert!(text.contains(name.as_str()) && text.contains(feature.as_str()), "{text}");
        assert!(!text.contains('\n'), "{text}");

        let dir = TempDir::new("refuse");
        std::fs::create_dir_all(dir.0.join("train/a")).unwrap();
        std::fs::create_dir_all(dir.0.join("train/b")).unwrap();
        std::fs::copy(fixture("variants/png_exif6.png"), dir.0.join("train/a/fine.png")).unwrap();
        std::fs::copy(&path, dir.0.join("train/b").join(name)).unwrap();
        for err in
            [ImageFolder::new(dir.0.join("train")).unwrap_err(), SplitFolders::open(&dir.0).unwrap_err()]
        {
            let text = err.to_string();
            assert!(matches!(err, VisionError::Unsupported { .. }), "{text}");
            assert!(text.contains(&format!("train/b/{name}")) && text.contains(feature.as_str()), "{text}");
        }
    }
}

/// The folder datasets carry the setting to every split, as they carry the pixel limit.
#[test]
fn folders_carry_the_exif_transpose_setting() {
    let dir = TempDir::new("exif-folders");
    for split in ["train", "val"] {
        std::fs::create_dir_all(dir.0.join(split).join("a")).unwrap();
        std::fs::copy(fixture("variants/png_exif6.png"), dir.0.join(split).join("a/x.png")).unwrap();
    }
    let expected = read_safetensors("variants/expected.safetensors");
    let splits = SplitFolders::open(&dir.0).unwrap().with_exif_transpose(false);
    assert!(!splits.train.decode_options().exif_transpose);
    let val = splits.val.unwrap();
    assert!(!val.decode_options().exif_transpose);
    assert_eq!(val.load(0).unwrap().0.pixels(), &expected["png_exif6.png"].u8s[..]);
    let folder = ImageFolder::new(dir.0.join("train")).unwrap();
    assert_eq!(folder.load(0).unwrap().0.pixels(), &expected["png_exif6.png#t"].u8s[..]);

    // With the setting off, a rotated JPEG is upright as stored, so a RandomResizedCrop first
    // decodes only its box: the same sample and draws as decoding it whole.
    use rand::RngCore as _;
    use torchlight_base::seed::rng_from_seed;
    use torchlight_data::Dataset;
    use torchlight_vision::{RandomResizedCrop, Sample, Transform};
    std::fs::create_dir_all(dir.0.join("jpegs/a")).unwrap();
    for name in ["jpeg_exif_gps_orient6.jpg", "jpeg_exif4.jpg", "jpeg_cmyk_adobe.jpg"] {
        std::fs::copy(fixture("variants").join(name), dir.0.join("jpegs/a").join(name)).unwrap();
    }
    for transpose in [false, true] {
        let folder = ImageFolder::new(dir.0.join("jpegs"))
            .unwrap()
            .with_exif_transpose(transpose)
            .with_transform(RandomResizedCrop::rect(7, 9));
        let options = DecodeOptions::default().with_exif_transpose(transpose);
        for index in 0..folder.len() {
            for seed in 0..3 {
                let (mut a, mut b) = (rng_from_seed(seed), rng_from_seed(seed));
                let (got, _) = folder.get(index, &mut a).unwrap();
                let whole = decode_file_with(&folder.samples()[index].0, &options).unwrap();
                let want =
                    RandomResizedCrop::rect(7, 9).apply(Sample::Image(whole), &mut b).unwrap().into_array();
                assert!(got == want, "sample {index}, seed {seed}, exif_transpose {transpose}");
                assert_eq!(a.next_u64(), b.next_u64());
            }
        }
    }
}

/// Header sizes of the formats read by this crate's own readers (BigTIFF, BMP) are the
/// decoded sizes (a TIFF's after its orientation tag turns it, as Pillow's `size` is).
#[test]
fn header_sizes_of_tiff_and_bmp_variants_are_their_decoded_sizes() {
    let dir = fixture("variants");
    for name in [
        "tiff_bigtiff.tif",
        "tiff_rgb_planar_tiles.tif",
        "tiff_orient6.tif",
        "bmp_rle4_delta.bmp",
        "bmp_core_pal8.bmp",
    ] {
        let image = decode_file_with(dir.join(name), &DecodeOptions::default()).unwrap();
        let (w, h) = image_dimensions(dir.join(name)).unwrap();
        assert_eq!((w as usize, h as usize), (image.width(), image.height()), "{name}");
    }
}
