//! Every `InterpolationMode` against torchvision 0.26 on PIL images (Pillow 13;
//! `tests/fixtures/make_interpolation.py`): `Resize` to exact sizes (down, up, mixed, one axis,
//! a sliver) and to a shorter side, `RandomResizedCrop`'s crop and resize for a fixed box,
//! `Resize` + `CenterCrop` (the fused evaluation step, and `EvalPreprocessing`'s transform),
//! on odd-sized RGB and grayscale photos and noise, every SIMD kernel the CPU has: held to 0.

use crate::read_safetensors;
use std::collections::HashMap;
use torchlight_vision::__resample::{resize_with, Kernel, Rect};
use torchlight_vision::{
    CenterCrop, Compose, CropBox, EvalPreprocessing, Image, InterpolationMode, Normalize, RandomResizedCrop,
    Resize, Sample, ToTensor, Transform,
};

fn pair(s: &str) -> (usize, usize) {
    let (a, b) = s.split_once(',').unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

fn image_of(t: &crate::FixtureTensor) -> Image {
    Image::new(t.shape[1], t.shape[0], t.shape[2], t.u8s.clone())
}

fn run(transform: &dyn Transform, image: Image) -> Image {
    let mut rng = torchlight_base::seed::rng_from_seed(0);
    match transform.apply(Sample::Image(image), &mut rng).unwrap() {
        Sample::Image(image) => image,
        Sample::Tensor(_) => panic!("an image transform returned a tensor"),
    }
}

fn assert_same(key: &str, got: &Image, want: &crate::FixtureTensor) {
    assert_eq!(
        [got.height(), got.width(), got.channels()],
        [want.shape[0], want.shape[1], want.shape[2]],
        "{key}: shape"
    );
    let diffs = got.pixels().iter().zip(&want.u8s).filter(|(a, b)| a != b).count();
    assert_eq!(diffs, 0, "{key}: {diffs} of {} bytes differ from torchvision", want.u8s.len());
}

#[test]
fn every_mode_equals_pillows_bytes() {
    let fixtures = read_safetensors("interpolation.safetensors");
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (key, want) in &fixtures {
        let parts: Vec<&str> = key.split('|').collect();
        if parts.len() == 1 {
            continue;
        }
        let mode = InterpolationMode::from_name(parts[1]).unwrap_or_else(|| panic!("{key}: mode"));
        let input = image_of(&fixtures[&format!("input/{}", parts[parts.len() - 1])]);
        let got = match parts[0] {
            "resize" => {
                let (h, w) = pair(parts[2]);
                // Every kernel on the convolution passes, the scalar reference included.
                let full = Rect::new(0, 0, input.width(), input.height());
                for kernel in Kernel::available() {
                    let got = resize_with(kernel, mode, &input, full, w, h, Rect::new(0, 0, w, h));
                    assert_same(&format!("{key} ({})", kernel.name()), &got, want);
                }
                run(&Resize::exact(h, w).with_interpolation(mode), input)
            }
            "short" => run(&Resize::new(parts[2].parse().unwrap()).with_interpolation(mode), input),
            "crop" => {
                let b: Vec<usize> = parts[2].split(',').map(|v| v.parse().unwrap()).collect();
                let (top, left, height, width) = (b[0], b[1], b[2], b[3]);
                let (oh, ow) = pair(parts[3]);
                let rrc = RandomResizedCrop::rect(oh, ow).with_interpolation(mode);
                assert_eq!(rrc.interpolation(), mode);
                rrc.crop_resize(&input, CropBox { top, left, height, width })
            }
            "eval" => {
                let (s, c) = (parts[2].parse().unwrap(), parts[3].parse().unwrap());
                // Compose fuses the two steps; the plain steps one after the other give the same.
                let fused =
                    Compose::default().then(Resize::new(s).with_interpolation(mode)).then(CenterCrop::new(c));
                let plain =
                    CenterCrop::new(c).crop(&Resize::new(s).with_interpolation(mode).resize(input.clone()));
                assert_same(&format!("{key} (unfused)"), &plain, want);
                run(&fused, input)
            }
            other => panic!("unknown op {other}"),
        };
        assert_same(key, &got, want);
        *counts.entry(parts[0]).or_default() += 1;
    }
    // 4 inputs x 6 modes, per op: 6 exact sizes, 2 shorter sides, 2 boxes, 2 eval sizes.
    let want: HashMap<&str, usize> = [("resize", 144), ("short", 48), ("crop", 48), ("eval", 48)].into();
    assert_eq!(counts, want);
}

/// `EvalPreprocessing` with another interpolation resizes with it: its transform's tensor is
/// `ToTensor` + `Normalize` of the fixture's resized and cropped bytes.
#[test]
fn eval_preprocessing_resizes_with_its_interpolation() {
    let fixtures = read_safetensors("interpolation.safetensors");
    let input = image_of(&fixtures["input/chelsea"]);
    for mode in [InterpolationMode::Bicubic, InterpolationMode::Nearest] {
        let want = image_of(&fixtures[&format!("eval|{}|16|14|chelsea", mode.name())]);
        let p =
            EvalPreprocessing { resize: 16, interpolation: mode, ..EvalPreprocessing::classification(14) };
        let tensor = |t: &dyn Transform, image: Image| {
            let mut rng = torchlight_base::seed::rng_from_seed(0);
            t.apply(Sample::Image(image), &mut rng).unwrap().into_tensor().unwrap()
        };
        let normalise = Compose::default().then(ToTensor).then(Normalize::new(&p.mean, &p.std));
        assert_eq!(tensor(&p.transform(), input.clone()), tensor(&normalise, want), "{mode:?}");
        let bilinear = EvalPreprocessing { interpolation: InterpolationMode::Bilinear, ..p };
        assert_ne!(tensor(&bilinear.transform(), input.clone()), tensor(&p.transform(), input.clone()));
    }
}
