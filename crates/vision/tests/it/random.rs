//! The random transforms' statistics: RandomResizedCrop's boxes against torchvision 0.26's
//! `get_params` boxes (`rrc_boxes.safetensors`), flips half the time, per-sample seeding.

use crate::read_safetensors;
use torchlight_base::seed::{rng_from_seed, sample_seed};
use torchlight_vision::{
    hflip, vflip, CropBox, Image, RandomHorizontalFlip, RandomResizedCrop, RandomVerticalFlip, Sample,
    Transform,
};

/// The two-sample Kolmogorov-Smirnov statistic: the largest gap between empirical CDFs.
fn ks(mut a: Vec<f64>, mut b: Vec<f64>) -> f64 {
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let (mut i, mut j, mut d) = (0, 0, 0f64);
    while i < a.len() && j < b.len() {
        let x = a[i].min(b[j]);
        while i < a.len() && a[i] <= x {
            i += 1;
        }
        while j < b.len() && b[j] <= x {
            j += 1;
        }
        d = d.max((i as f64 / a.len() as f64 - j as f64 / b.len() as f64).abs());
    }
    d
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn std(v: &[f64]) -> f64 {
    let m = mean(v);
    (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// Area fraction, log aspect ratio, and relative top/left position of each box.
fn features(boxes: &[CropBox], height: usize, width: usize) -> [Vec<f64>; 4] {
    let area = (height * width) as f64;
    let rel = |p: usize, room: usize| if room == 0 { 0.5 } else { p as f64 / room as f64 };
    [
        boxes.iter().map(|b| (b.height * b.width) as f64 / area).collect(),
        boxes.iter().map(|b| (b.width as f64 / b.height as f64).ln()).collect(),
        boxes.iter().map(|b| rel(b.top, height - b.height)).collect(),
        boxes.iter().map(|b| rel(b.left, width - b.width)).collect(),
    ]
}

#[test]
fn random_resized_crop_boxes_follow_torchvision_distribution() {
    let fixtures = read_safetensors("rrc_boxes.safetensors");
    let t = RandomResizedCrop::new(224);
    let mut checked = 0;
    for (key, tensor) in fixtures {
        let (h, w) = key.split_once('x').unwrap();
        let (height, width): (usize, usize) = (h.parse().unwrap(), w.parse().unwrap());
        let torch: Vec<CropBox> = tensor
            .i64s
            .chunks_exact(4)
            .map(|b| CropBox {
                top: b[0] as usize,
                left: b[1] as usize,
                height: b[2] as usize,
                width: b[3] as usize,
            })
            .collect();
        let n = torch.len();
        let ours: Vec<CropBox> = (0..n as u64)
            .map(|i| t.get_params(height, width, &mut rng_from_seed(sample_seed(42, 0, i))))
            .collect();
        for b in &ours {
            assert!(
                b.top + b.height <= height && b.left + b.width <= width,
                "{key}: box {b:?} leaves the image"
            );
        }
        // KS critical value at alpha = 0.001 for two samples of n: 1.949 * sqrt(2 / n).
        let critical = 1.949 * (2.0 / n as f64).sqrt();
        let names = ["area fraction", "log aspect ratio", "relative top", "relative left"];
        for ((name, a), b) in
            names.iter().zip(features(&ours, height, width)).zip(features(&torch, height, width))
        {
            let d = ks(a.clone(), b.clone());
            let se = ((std(&a).powi(2) + std(&b).powi(2)) / n as f64).sqrt();
            let gap = (mean(&a) - mean(&b)).abs();
            println!(
                "{key} {name}: KS {d:.4} (critical {critical:.4}); mean ours {:.4} torch {:.4} (gap {:.2} SE)",
                mean(&a),
                mean(&b),
                if se > 0.0 { gap / se } else { 0.0 }
            );
            assert!(
                d <= critical,
                "{key} {name}: KS statistic {d:.4} over the alpha=0.001 critical value {critical:.4}"
            );
            assert!(
                gap <= 4.5 * se + 1e-12,
                "{key} {name}: means differ by {gap:.5}, over 4.5 standard errors ({se:.5})"
            );
        }
        // The central fallback: how often it is taken must match too.
        // An area twice the image's never fits, so this reads off the fallback box.
        let fallback = t.with_scale(2.0, 2.0).get_params(height, width, &mut rng_from_seed(0));
        let rate = |v: &[CropBox]| v.iter().filter(|b| **b == fallback).count() as f64 / n as f64;
        let (p1, p2) = (rate(&ours), rate(&torch));
        let se = ((p1 * (1.0 - p1) + p2 * (1.0 - p2)) / n as f64).sqrt();
        println!("{key}: fallback box {fallback:?} rate ours {p1:.4} torch {p2:.4}");
        assert!(
            (p1 - p2).abs() <= 4.5 * se + 1e-12,
            "{key}: fallback rate {p1} vs torchvision {p2}, over 4.5 SE"
        );
        checked += 1;
    }
    assert_eq!(checked, 4, "expected four image sizes in the fixture");
}

#[test]
fn thin_image_always_takes_torchvisions_fallback_box() {
    let fixtures = read_safetensors("rrc_boxes.safetensors");
    let torch = &fixtures["300x1"].i64s;
    assert!(
        torch.chunks_exact(4).all(|b| b == [149, 0, 1, 1]),
        "torchvision's boxes for 300x1 are all (149, 0, 1, 1)"
    );
    let t = RandomResizedCrop::new(224);
    for i in 0..200 {
        let b = t.get_params(300, 1, &mut rng_from_seed(sample_seed(1, 0, i)));
        assert_eq!(b, CropBox { top: 149, left: 0, height: 1, width: 1 });
    }
}

fn gradient(w: usize, h: usize) -> Image {
    Image::new(w, h, 3, (0..w * h * 3).map(|v| (v * 7 % 251) as u8).collect())
}

/// `hflip` puts pixel `(x, y)` at `(w - 1 - x, y)` with its channels in order, for every
/// channel count (odd and even widths).
#[test]
fn hflip_mirrors_every_pixel_for_any_channel_count() {
    for (w, h, c) in [(5, 4, 3), (6, 3, 3), (7, 2, 1), (4, 2, 1), (1, 3, 3), (1, 2, 1)] {
        let image = Image::new(w, h, c, (0..w * h * c).map(|v| (v * 7 % 251) as u8).collect());
        let mut mirrored = image.clone();
        hflip(&mut mirrored);
        let (a, b) = (image.pixels(), mirrored.pixels());
        for y in 0..h {
            for x in 0..w {
                for ch in 0..c {
                    let at = |x: usize| (y * w + x) * c + ch;
                    assert_eq!(b[at(w - 1 - x)], a[at(x)], "{w}x{h}x{c} at ({x}, {y}) channel {ch}");
                }
            }
        }
    }
}

#[test]
fn flips_happen_half_the_time_and_mirror_exactly() {
    let image = gradient(5, 4);
    let (mut mirrored, mut flipped_v) = (image.clone(), image.clone());
    hflip(&mut mirrored);
    vflip(&mut flipped_v);
    let n = 10_000u64;
    let h = RandomHorizontalFlip::default();
    let v = RandomVerticalFlip::default();
    let (mut hcount, mut vcount) = (0, 0);
    for i in 0..n {
        let mut rng = rng_from_seed(sample_seed(3, 1, i));
        let out = h.apply(Sample::Image(image.clone()), &mut rng).unwrap().into_image().unwrap();
        if out == mirrored {
            hcount += 1;
        } else {
            assert_eq!(out, image, "an unflipped sample is unchanged");
        }
        let out = v.apply(Sample::Image(image.clone()), &mut rng).unwrap().into_image().unwrap();
        if out == flipped_v {
            vcount += 1;
        } else {
            assert_eq!(out, image, "an unflipped sample is unchanged");
        }
    }
    // Binomial(10000, 0.5): sd 50; 4.5 sd = 225.
    for (name, count) in [("horizontal", hcount), ("vertical", vcount)] {
        println!("{name} flips: {count} of {n}");
        assert!(
            (count as i64 - 5000).abs() <= 225,
            "{name}: {count} flips of {n}, tolerance 5000 +- 225 (4.5 sd)"
        );
    }
    assert!(!RandomHorizontalFlip::new(0.0).draw(&mut rng_from_seed(1)));
    assert!(RandomHorizontalFlip::new(1.0).draw(&mut rng_from_seed(1)));
}

#[test]
fn random_transforms_depend_only_on_the_sample_seed() {
    let image = gradient(64, 48);
    let pipeline = torchlight_vision::Compose::default()
        .then(RandomResizedCrop::new(16))
        .then(RandomHorizontalFlip::default());
    let run = |seed| pipeline.apply(Sample::Image(image.clone()), &mut rng_from_seed(seed)).unwrap();
    assert_eq!(run(sample_seed(5, 2, 9)), run(sample_seed(5, 2, 9)), "same seed, same output");
    let distinct: std::collections::HashSet<Vec<u8>> =
        (0..20).map(|i| run(sample_seed(5, 2, i)).into_image().unwrap().into_pixels()).collect();
    assert!(distinct.len() >= 15, "20 seeds gave only {} distinct crops", distinct.len());
}

#[test]
fn fused_training_pipeline_equals_the_steps_one_by_one() {
    use torchlight_vision::{Normalize, ToTensor};
    let image = gradient(97, 61);
    let crop = RandomResizedCrop::new(24);
    let flip = RandomHorizontalFlip::default();
    let fused = torchlight_vision::Compose::default()
        .then(crop)
        .then(flip)
        .then(ToTensor)
        .then(Normalize::imagenet());
    assert_eq!(fused.fused_len(), 3, "ToTensor + Normalize fuse");
    for i in 0..30 {
        let seed = sample_seed(11, 0, i);
        let got = fused.apply(Sample::Image(image.clone()), &mut rng_from_seed(seed)).unwrap();
        let mut rng = rng_from_seed(seed);
        let mut step = crop.apply(Sample::Image(image.clone()), &mut rng).unwrap();
        step = flip.apply(step, &mut rng).unwrap();
        step = ToTensor.apply(step, &mut rng).unwrap();
        step = Normalize::imagenet().apply(step, &mut rng).unwrap();
        assert_eq!(got, step, "seed {seed}: fused and step-by-step differ");
    }
}
