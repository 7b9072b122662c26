//! AutoAugment against torchvision 0.26 on PIL images (`tests/fixtures/make_auto_augment.py`):
//! every op of its space at every magnitude bin and sign through `_apply_op` (nearest, and
//! bilinear for the geometric ops), its magnitudes bit for bit, and the ImageNet, CIFAR10 and
//! SVHN policies seeded as `torch.manual_seed(seed)`, each output byte for byte (tolerance 0:
//! the path is Pillow's integer arithmetic).

use crate::{read_safetensors, FixtureTensor};
use torchlight_vision::{
    apply_op_with, AugmentOp, AutoAugment, AutoAugmentPolicy, Image, InterpolationMode, TorchGenerator,
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
        "Invert" => Invert,
        other => panic!("unknown op {other}"),
    }
}

fn policy_named(name: &str) -> AutoAugmentPolicy {
    match name {
        "imagenet" => AutoAugmentPolicy::ImageNet,
        "cifar10" => AutoAugmentPolicy::Cifar10,
        "svhn" => AutoAugmentPolicy::Svhn,
        other => panic!("unknown policy {other}"),
    }
}

#[test]
fn every_op_at_every_bin_and_sign_equals_torchvisions() {
    let fx = read_safetensors("auto_augment_ops.safetensors");
    let input = image(&fx["input"]);
    let (mut ops, mut mags, mut changed) = (0, 0, 0);
    for (key, want) in &fx {
        let parts: Vec<&str> = key.split('/').collect();
        match parts[0] {
            "mag" => {
                let (h, w) = parts[2].split_once('x').unwrap();
                let (got, _) =
                    AutoAugment::magnitudes(op_named(parts[1]), h.parse().unwrap(), w.parse().unwrap());
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want.f32s), "{key}");
                mags += 1;
            }
            "op" => {
                let interp = match parts[1] {
                    "nearest" => InterpolationMode::Nearest,
                    "bilinear" => InterpolationMode::Bilinear,
                    other => panic!("{other}"),
                };
                let op = op_named(parts[2]);
                let (m, signed) = AutoAugment::magnitudes(op, input.height(), input.width());
                let mut magnitude =
                    if parts[3] == "none" { 0.0 } else { f64::from(m[parts[3].parse::<usize>().unwrap()]) };
                if parts[4] == "-" {
                    assert!(signed, "{key}");
                    magnitude = -magnitude;
                }
                let got = apply_op_with(input.clone(), op, magnitude, interp, &[]).unwrap();
                assert_eq!(got.pixels(), &want.u8s[..], "{key}: differs from torchvision's _apply_op");
                changed += usize::from(got.pixels() != input.pixels());
                ops += 1;
            }
            _ => {}
        }
    }
    // 9 signed ops x 10 bins x 2 signs, 5 geometric again bilinear, posterize and solarize x
    // 10 bins, autocontrast, equalize, invert.
    assert_eq!(ops, 180 + 100 + 20 + 3, "ops checked");
    assert_eq!(mags, 3 * 11, "magnitude tables checked");
    println!("{ops} op outputs equal torchvision ({changed} changed the image)");
}

fn check_seeded(file: &str, prefix: Option<&str>, interp: InterpolationMode, seeds: usize) -> usize {
    let fx = read_safetensors(file);
    let mut checked = 0;
    for (key, want) in &fx {
        let key_rest = match prefix {
            Some(p) => match key.strip_prefix(p) {
                Some(rest) => rest,
                None => continue,
            },
            None => key.as_str(),
        };
        let Some((policy, name)) = key_rest.split_once('/') else { continue };
        if !["imagenet", "cifar10", "svhn"].contains(&policy) {
            continue;
        }
        let input = image(&read_safetensors("auto_augment.safetensors")[&format!("input/{name}")]);
        let t = AutoAugment::new(policy_named(policy)).with_interpolation(interp);
        let n = input.pixels().len();
        assert_eq!(want.shape[0], seeds, "{key}");
        let mut changed = 0;
        for (seed, want) in want.u8s.chunks_exact(n).enumerate() {
            let got = t.apply_with(input.clone(), &mut TorchGenerator::new(seed as u64)).unwrap();
            let diffs = got.pixels().iter().zip(want).filter(|(a, b)| a != b).count();
            assert_eq!(diffs, 0, "{key} seed {seed}: {diffs} of {n} bytes differ from torchvision");
            changed += usize::from(got.pixels() != input.pixels());
            checked += 1;
        }
        println!("{key}: {seeds} seeds equal torchvision, {changed} changed the image");
    }
    checked
}

#[test]
fn seeded_policies_equal_torchvisions_images() {
    let checked = check_seeded("auto_augment.safetensors", None, InterpolationMode::Nearest, 100);
    assert_eq!(checked, 3 * 2 * 100, "outputs checked");
}

#[test]
fn seeded_policies_with_bilinear_equal_torchvisions_images() {
    let checked =
        check_seeded("auto_augment_ops.safetensors", Some("bilinear/"), InterpolationMode::Bilinear, 40);
    assert_eq!(checked, 3 * 2 * 40, "outputs checked");
}

/// As torchvision's reference script builds them with `--interpolation`: TrivialAugmentWide
/// and RandAugment with bilinear and bicubic, AutoAugment's policies with bicubic, over 30
/// seeds each, and the geometric ops of the sweep with bicubic: byte for byte (tolerance 0).
#[test]
fn policies_with_pils_other_filters_equal_torchvisions_images() {
    use torchlight_vision::{RandAugment, TrivialAugmentWide};
    let fx = read_safetensors("auto_augment_interp.safetensors");
    let inputs = read_safetensors("auto_augment.safetensors");
    let op_input = image(&read_safetensors("auto_augment_ops.safetensors")["input"]);
    let (mut seeds, mut ops) = (0, 0);
    for (key, want) in &fx {
        let parts: Vec<&str> = key.split('/').collect();
        if parts[0] == "op" {
            let op = op_named(parts[2]);
            let (m, _) = AutoAugment::magnitudes(op, op_input.height(), op_input.width());
            let sign = if parts[4] == "-" { -1.0 } else { 1.0 };
            let magnitude = sign * f64::from(m[parts[3].parse::<usize>().unwrap()]);
            let got =
                apply_op_with(op_input.clone(), op, magnitude, InterpolationMode::Bicubic, &[]).unwrap();
            assert_eq!(got.pixels(), &want.u8s[..], "{key}");
            ops += 1;
            continue;
        }
        let interp = match parts[0] {
            "bilinear" => InterpolationMode::Bilinear,
            "bicubic" => InterpolationMode::Bicubic,
            other => panic!("{other}"),
        };
        let input = image(&inputs[&format!("input/{}", parts[2])]);
        let n = input.pixels().len();
        for (seed, want) in want.u8s.chunks_exact(n).enumerate() {
            let mut g = TorchGenerator::new(seed as u64);
            let got = match parts[1] {
                "ta_wide" => {
                    TrivialAugmentWide::default().with_interpolation(interp).apply_with(input.clone(), &mut g)
                }
                "ra" => RandAugment::default().with_interpolation(interp).apply_with(input.clone(), &mut g),
                policy => AutoAugment::new(policy_named(policy))
                    .with_interpolation(interp)
                    .apply_with(input.clone(), &mut g),
            }
            .unwrap();
            assert_eq!(got.pixels(), want, "{key} seed {seed}");
            seeds += 1;
        }
    }
    assert_eq!(ops, 5 * 10 * 2, "bicubic ops checked");
    assert_eq!(seeds, 2 * 30 * (2 * 2 + 3), "seeded outputs checked");
}
