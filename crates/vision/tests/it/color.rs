//! ColorJitter's random parameters, Grayscale in a pipeline, RandomCrop, and dataset
//! statistics with `dataset_mean_std`.

use crate::TempDir;
use torchlight_base::seed::{rng_from_seed, sample_seed};
use torchlight_vision::{
    adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation, dataset_mean_std, ColorJitter,
    Compose, Grayscale, Image, ImageFolder, Sample, ToTensor, Transform,
};

fn photo_like() -> Image {
    Image::new(16, 12, 3, (0..16 * 12 * 3).map(|v| ((v * 53) % 256) as u8).collect())
}

#[test]
fn color_jitter_draws_factors_in_range_and_every_order() {
    let t = ColorJitter::new(0.4, 0.3, 0.2, 0.1);
    let mut orders = std::collections::HashSet::new();
    for i in 0..2000 {
        let (order, f) = t.get_params(&mut rng_from_seed(sample_seed(9, 0, i)));
        let mut sorted = order;
        sorted.sort();
        assert_eq!(sorted, [0, 1, 2, 3], "a permutation");
        orders.insert(order);
        let [b, c, s, h] = f.map(Option::unwrap);
        assert!(
            (0.6..1.4).contains(&b)
                && (0.7..1.3).contains(&c)
                && (0.8..1.2).contains(&s)
                && (-0.1..0.1).contains(&h)
        );
    }
    assert_eq!(orders.len(), 24, "all 24 orders drawn in 2000 tries");
    let (_, f) = ColorJitter::new(0.0, 0.5, 0.0, 0.0).get_params(&mut rng_from_seed(1));
    assert!(f[0].is_none() && f[1].is_some() && f[2].is_none() && f[3].is_none());
}

#[test]
fn color_jitter_applies_its_drawn_params_in_order() {
    let t = ColorJitter::new(0.4, 0.4, 0.4, 0.2);
    for i in 0..20 {
        let seed = sample_seed(2, 0, i);
        let (order, f) = t.get_params(&mut rng_from_seed(seed));
        let mut want = photo_like();
        for k in order {
            match k {
                0 => adjust_brightness(&mut want, f[0].unwrap()),
                1 => adjust_contrast(&mut want, f[1].unwrap()),
                2 => adjust_saturation(&mut want, f[2].unwrap()),
                _ => adjust_hue(&mut want, f[3].unwrap()),
            }
        }
        let got =
            t.apply(Sample::Image(photo_like()), &mut rng_from_seed(seed)).unwrap().into_image().unwrap();
        assert_eq!(got, want);
    }
    let identity = ColorJitter::new(0.0, 0.0, 0.0, 0.0);
    let out = identity.apply(Sample::Image(photo_like()), &mut rng_from_seed(0)).unwrap();
    assert_eq!(out.into_image().unwrap(), photo_like());
}

#[test]
fn grayscale_one_channel_flows_to_a_one_channel_tensor() {
    let pipeline = Compose::default().then(Grayscale::new(1)).then(ToTensor);
    let t =
        pipeline.apply(Sample::Image(photo_like()), &mut rng_from_seed(0)).unwrap().into_tensor().unwrap();
    assert_eq!((t.channels, t.height, t.width), (1, 12, 16));
}

#[test]
fn dataset_mean_std_matches_a_direct_computation() {
    let dir = TempDir::new("meanstd");
    // Two constant images of different sizes: per-channel values weighted by pixel count.
    let a = image::RgbImage::from_pixel(4, 5, image::Rgb([255, 0, 51]));
    let b = image::RgbImage::from_pixel(10, 3, image::Rgb([0, 0, 102]));
    std::fs::create_dir_all(dir.0.join("x")).unwrap();
    a.save(dir.0.join("x/a.png")).unwrap();
    b.save(dir.0.join("x/b.png")).unwrap();
    let (na, nb) = (20.0f64, 30.0f64);
    let stats = |va: f64, vb: f64| {
        let m = (na * va + nb * vb) / (na + nb);
        let var = (na * (va - m).powi(2) + nb * (vb - m).powi(2)) / (na + nb);
        (m, var.sqrt())
    };
    let want = [stats(1.0, 0.0), stats(0.0, 0.0), stats(0.2, 0.4)];
    let raw = ImageFolder::new(&dir.0).unwrap();
    let tensors = raw.clone().with_transform(ToTensor);
    for (mean, std) in [dataset_mean_std(&raw).unwrap(), dataset_mean_std(&tensors).unwrap()] {
        for c in 0..3 {
            assert!((mean[c] as f64 - want[c].0).abs() < 1e-6, "mean {mean:?} vs {want:?}, tolerance 1e-6");
            assert!((std[c] as f64 - want[c].1).abs() < 1e-6, "std {std:?} vs {want:?}, tolerance 1e-6");
        }
    }
}
