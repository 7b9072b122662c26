//! AugMix against torchvision 0.26 on PIL images (`tests/fixtures/make_augmix.py`): every op of
//! its space at every magnitude bin and sign through torchvision's tensor path (nearest, and
//! bilinear for the geometric ops), its magnitudes and `torch._sample_dirichlet`'s draws bit
//! for bit, and seeded AugMix outputs byte for byte (tolerance 0: the integer and float32 steps
//! are torchvision's, `grid_sample` as libtorch's AVX2/AVX-512 kernel computes it).

use crate::{read_safetensors, FixtureTensor};
use torchlight_vision::{
    apply_op_tensor, sample_dirichlet, AugMix, AugmentOp, Image, InterpolationMode, TorchGenerator,
};

fn image(t: &FixtureTensor) -> Image {
    Image::new(t.shape[1], t.shape[0], t.shape[2], t.u8s.clone())
}

fn op_named(name: &str) -> AugmentOp {
    use AugmentOp::*;
    match name {
        "ShearX" => ShearX,
        "ShearY" => ShearY,
        "TranslateX" => TranslateX,
        "TranslateY" => TranslateY,
        "Rotate" => Rotate,
        "Brightness" => Brightness,
        "Color" => Color,
        "Contrast" => Contrast,
        "Sharpness" => Sharpness,
        "Posterize" => Posterize,
        "Solarize" => Solarize,
        "AutoContrast" => AutoContrast,
        "Equalize" => Equalize,
        other => panic!("unknown op {other}"),
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn every_tensor_op_at_every_bin_and_sign_equals_torchvisions() {
    let fx = read_safetensors("augmix_ops.safetensors");
    let input = image(&fx["op_input"]);
    let (mut ops, mut mags, mut changed) = (0, 0, 0);
    for (key, want) in &fx {
        let parts: Vec<&str> = key.split('/').collect();
        match parts[0] {
            "mag" => {
                let (h, w) = parts[2].split_once('x').unwrap();
                let space = AugMix::space(true, h.parse().unwrap(), w.parse().unwrap());
                let op = op_named(parts[1]);
                let (_, got, _) = space.iter().find(|(o, _, _)| *o == op).unwrap();
                assert_eq!(bits(got), bits(&want.f32s), "{key}");
                mags += 1;
            }
            "op" => {
                let interp = match parts[1] {
                    "nearest" => InterpolationMode::Nearest,
                    "bilinear" => InterpolationMode::Bilinear,
                    other => panic!("{other}"),
                };
                let op = op_named(parts[2]);
                let space = AugMix::space(true, input.height(), input.width());
                let (_, m, signed) = space.iter().find(|(o, _, _)| *o == op).unwrap();
                let mut magnitude =
                    if parts[3] == "none" { 0.0 } else { f64::from(m[parts[3].parse::<usize>().unwrap()]) };
                if parts[4] == "-" {
                    assert!(signed, "{key}");
                    magnitude = -magnitude;
                }
                let got = apply_op_tensor(input.clone(), op, magnitude, interp).unwrap();
                let diffs = got.pixels().iter().zip(&want.u8s).filter(|(a, b)| a != b).count();
                assert_eq!(diffs, 0, "{key}: {diffs} bytes differ from torchvision's tensor _apply_op");
                changed += usize::from(got.pixels() != input.pixels());
                ops += 1;
            }
            _ => {}
        }
    }
    // 9 signed ops x 10 bins x 2 signs, the 5 geometric again bilinear, posterize and
    // solarize x 10 bins, autocontrast and equalize.
    assert_eq!(ops, 180 + 100 + 20 + 2, "ops checked");
    assert_eq!(mags, 3 * 11, "magnitude tables checked");
    println!("{ops} tensor-op outputs equal torchvision ({changed} changed the image)");
}

#[test]
fn dirichlet_draws_equal_torchs() {
    let fx = read_safetensors("augmix.safetensors");
    let mut checked = 0;
    for (key, want) in &fx {
        let parts: Vec<&str> = key.split('/').collect();
        let alpha: f32 = match parts[0] {
            "dirichlet" | "dirichlet_pair" => parts[1].parse().unwrap(),
            _ => continue,
        };
        let k = want.shape[1];
        for (seed, want) in want.f32s.chunks_exact(k).enumerate() {
            let mut g = TorchGenerator::new(seed as u64);
            let mut cached = None;
            let got = if parts[0] == "dirichlet" {
                sample_dirichlet(&mut g, &vec![alpha; k], &mut cached)
            } else {
                let mut m = sample_dirichlet(&mut g, &[alpha, alpha], &mut cached);
                m.extend(sample_dirichlet(&mut g, &[alpha; 3], &mut cached));
                m
            };
            assert_eq!(bits(&got), bits(want), "{key} seed {seed}: {got:?} vs {want:?}");
            checked += 1;
        }
    }
    assert_eq!(checked, 4 * 4 * 200, "draws checked");
}

#[test]
fn seeded_augmix_equals_torchvisions_images() {
    let fx = read_safetensors("augmix.safetensors");
    let mut checked = 0;
    for (key, want) in &fx {
        let (variant, name) = key.split_once('/').unwrap();
        let t = match variant {
            "default" => AugMix::default(),
            "nearest" => AugMix::new(10)
                .unwrap()
                .with_mixture_width(2)
                .with_chain_depth(2)
                .with_alpha(0.5)
                .with_interpolation(InterpolationMode::Nearest),
            "few_ops" => AugMix::new(6).unwrap().with_mixture_width(4).with_alpha(2.0).with_all_ops(false),
            _ => continue,
        };
        let input = image(&fx[&format!("input/{name}")]);
        let n = input.pixels().len();
        for (seed, want) in want.u8s.chunks_exact(n).enumerate() {
            let got = t.apply_with(input.clone(), &mut TorchGenerator::new(seed as u64)).unwrap();
            let diffs = got.pixels().iter().zip(want).filter(|(a, b)| a != b).count();
            assert_eq!(diffs, 0, "{key} seed {seed}: {diffs} of {n} bytes differ from torchvision");
            checked += 1;
        }
        println!("{key}: {} seeds equal torchvision", want.shape[0]);
    }
    assert_eq!(checked, 2 * (100 + 60 + 40), "outputs checked");
}

#[test]
fn augmix_refuses_what_torchvision_refuses() {
    assert!(AugMix::new(0).unwrap_err().to_string().contains("severity"));
    assert!(AugMix::new(11).is_err());
    // Bicubic fails when a geometric op runs (torchvision raises then), not before.
    let t = AugMix::default().with_interpolation(InterpolationMode::Bicubic);
    let image = Image::new(6, 5, 3, (0..90).map(|v| v as u8 * 2).collect());
    let results: Vec<_> = (0..20).map(|s| t.apply_with(image.clone(), &mut TorchGenerator::new(s))).collect();
    let err = results.iter().find_map(|r| r.as_ref().err()).expect("a seed draws a geometric op").to_string();
    assert!(err.contains("AugMix") && err.contains("nearest or bilinear"), "{err}");
    assert!(results.iter().any(|r| r.is_ok()), "seeds without a geometric op run");
}

/// Torch's generator keeps the spare normal of a Box-Muller pair between calls: four AugMix
/// calls in turn after one `manual_seed` equal torchvision's four, through
/// `Compose::apply_like_torch_rng` on one `TorchRng` and through `apply_with_spare`; starting
/// each call without the spare (`apply_with`) differs from the second call on for some seeds.
#[test]
fn consecutive_calls_carry_torchs_spare_normal() {
    use torchlight_vision::{Compose, Sample, TorchRng};
    let fx = read_safetensors("augmix_ops.safetensors");
    let inputs = read_safetensors("augmix.safetensors");
    let (mut checked, mut without_spare_differs) = (0, 0);
    for name in ["chelsea", "noise_l"] {
        let input = image(&inputs[&format!("input/{name}")]);
        let want = &fx[&format!("consecutive/{name}")];
        let n = input.pixels().len();
        let compose = Compose::default().then(AugMix::default());
        for (seed, runs) in want.u8s.chunks_exact(4 * n).enumerate() {
            let mut g = TorchRng::new(seed as u64);
            let (mut plain, mut spare) = (TorchGenerator::new(seed as u64), None);
            let mut fresh = TorchGenerator::new(seed as u64);
            for (k, want) in runs.chunks_exact(n).enumerate() {
                let got = compose.apply_like_torch_rng(Sample::Image(input.clone()), &mut g).unwrap();
                assert_eq!(got.into_image().unwrap().pixels(), want, "{name} seed {seed} call {k}");
                let got = AugMix::default().apply_with_spare(input.clone(), &mut plain, &mut spare).unwrap();
                assert_eq!(got.pixels(), want, "{name} seed {seed} call {k} (apply_with_spare)");
                let got = AugMix::default().apply_with(input.clone(), &mut fresh).unwrap();
                without_spare_differs += usize::from(got.pixels() != want);
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * 25 * 4);
    assert!(without_spare_differs > 0, "the spare normal never mattered: the test would not see it");
    println!(
        "{checked} consecutive calls equal torchvision; {without_spare_differs} differ without the spare"
    );
}
