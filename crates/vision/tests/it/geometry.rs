//! `rotate` and `affine` against torchvision 0.26 on PIL images (Pillow 13): nearest
//! (`tests/fixtures/make_geometry.py`) and bilinear and bicubic
//! (`tests/fixtures/make_geometry_filters.py`): angles with and without Pillow's exact turns,
//! `expand`, `center`, fills (none, one value, per channel), shears, translations, scales, odd
//! sizes, 1 and 3 channels, held to 0.

use crate::read_safetensors;
use torchlight_vision::{affine, affine_with, rotate, rotate_with, Image, InterpolationMode};

fn pair(s: &str) -> Option<[f64; 2]> {
    if s == "none" {
        return None;
    }
    let (a, b) = s.split_once(',').unwrap();
    Some([a.parse().unwrap(), b.parse().unwrap()])
}

fn fill(s: &str) -> Vec<u8> {
    if s == "none" {
        return vec![];
    }
    s.split(',').map(|v| v.parse().unwrap()).collect()
}

#[test]
fn rotate_and_affine_equal_pillows_bytes() {
    let fixtures = read_safetensors("geometry.safetensors");
    let (mut rotations, mut affines) = (0, 0);
    for (key, want) in &fixtures {
        let parts: Vec<&str> = key.split('|').collect();
        if parts.len() == 1 {
            continue;
        }
        let name = parts[parts.len() - 1];
        let input = &fixtures[&format!("input/{name}")];
        let image = Image::new(input.shape[1], input.shape[0], input.shape[2], input.u8s.clone());
        let got = match parts[0] {
            "rotate" => {
                rotations += 1;
                rotate(&image, parts[1].parse().unwrap(), parts[2] == "1", pair(parts[3]), &fill(parts[4]))
                    .unwrap()
            }
            "affine" => {
                affines += 1;
                affine(
                    &image,
                    parts[1].parse().unwrap(),
                    pair(parts[2]).unwrap(),
                    parts[3].parse().unwrap(),
                    pair(parts[4]).unwrap(),
                    pair(parts[5]),
                    &fill(parts[6]),
                )
                .unwrap()
            }
            other => panic!("unknown op {other}"),
        };
        assert_eq!(
            [got.height(), got.width(), got.channels()],
            [want.shape[0], want.shape[1], want.shape[2]],
            "{key}: shape"
        );
        let diffs = got.pixels().iter().zip(&want.u8s).filter(|(a, b)| a != b).count();
        assert_eq!(diffs, 0, "{key}: {diffs} of {} bytes differ from torchvision", want.u8s.len());
    }
    // 11 (input, fill) pairs: three fills on each of the three RGB inputs, two on the gray one.
    assert_eq!((rotations, affines), (11 * 2 * 2 * 11, 12 * 11));
}

#[test]
fn bilinear_and_bicubic_rotate_and_affine_equal_pillows_bytes() {
    let fixtures = read_safetensors("geometry_filters.safetensors");
    let (mut rotations, mut affines) = (0, 0);
    for (key, want) in &fixtures {
        let parts: Vec<&str> = key.split('|').collect();
        if parts.len() == 1 {
            continue;
        }
        let mode = InterpolationMode::from_name(parts[1]).unwrap();
        let name = parts[parts.len() - 1];
        let input = &fixtures[&format!("input/{name}")];
        let image = Image::new(input.shape[1], input.shape[0], input.shape[2], input.u8s.clone());
        let got = match parts[0] {
            "rotate" => {
                rotations += 1;
                let angle = parts[2].parse().unwrap();
                rotate_with(&image, angle, mode, parts[3] == "1", pair(parts[4]), &fill(parts[5])).unwrap()
            }
            "affine" => {
                affines += 1;
                affine_with(
                    &image,
                    parts[2].parse().unwrap(),
                    pair(parts[3]).unwrap(),
                    parts[4].parse().unwrap(),
                    pair(parts[5]).unwrap(),
                    pair(parts[6]),
                    &fill(parts[7]),
                    mode,
                )
                .unwrap()
            }
            other => panic!("unknown op {other}"),
        };
        assert_eq!(
            [got.height(), got.width(), got.channels()],
            [want.shape[0], want.shape[1], want.shape[2]],
            "{key}: shape"
        );
        let diffs = got.pixels().iter().zip(&want.u8s).filter(|(a, b)| a != b).count();
        assert_eq!(diffs, 0, "{key}: {diffs} of {} bytes differ from torchvision", want.u8s.len());
    }
    // 3 inputs x 2 modes x 2 fills: 6 angles x 3 (expand, center) rotations, 5 affines.
    assert_eq!((rotations, affines), (3 * 2 * 2 * 6 * 3, 3 * 2 * 2 * 5));
}

#[test]
fn geometry_refuses_bad_fill_and_scale() {
    let image = Image::filled(4, 3, 3, 9);
    let err = rotate(&image, 10.0, false, None, &[1, 2]).unwrap_err();
    assert!(err.to_string().contains("2 fill values for a 3-channel image"), "{err}");
    let err = affine(&image, 0.0, [0.0, 0.0], 0.0, [0.0, 0.0], None, &[]).unwrap_err();
    assert!(err.to_string().contains("scale 0 must be positive"), "{err}");
    let err = rotate_with(&image, 10.0, InterpolationMode::Lanczos, false, None, &[]).unwrap_err();
    assert!(err.to_string().contains("interpolation lanczos"), "{err}");
}
