//! The integer point ops against torchvision 0.26 on PIL images (`ImageOps`, Pillow 13;
//! `tests/fixtures/make_point_ops.py`): odd sizes, 1 and 3 channels, held to 0; and the
//! `ImageEnhance` ops (sharpness, brightness, contrast, saturation), also held to 0.

use crate::read_safetensors;
use torchlight_vision::{
    adjust_brightness, adjust_contrast, adjust_saturation, adjust_sharpness, autocontrast, equalize, invert,
    posterize, solarize, Image,
};

#[test]
fn point_ops_equal_pillows_bytes() {
    let fixtures = read_safetensors("point_ops.safetensors");
    let mut checked = 0;
    for (key, want) in &fixtures {
        let parts: Vec<&str> = key.split('/').collect();
        if parts[0] == "input" {
            continue;
        }
        let (op, arg, name) = (parts[0], parts[1], parts[2]);
        let input = &fixtures[&format!("input/{name}")];
        let (h, w, c) = (input.shape[0], input.shape[1], input.shape[2]);
        let mut image = Image::new(w, h, c, input.u8s.clone());
        match op {
            "invert" => invert(&mut image),
            "autocontrast" => autocontrast(&mut image),
            "equalize" => equalize(&mut image),
            "posterize" => posterize(&mut image, arg.parse().unwrap()).unwrap(),
            "solarize" => solarize(&mut image, arg.parse().unwrap()),
            "sharpness" => adjust_sharpness(&mut image, arg.parse().unwrap()),
            "brightness" => adjust_brightness(&mut image, arg.parse().unwrap()),
            "contrast" => adjust_contrast(&mut image, arg.parse().unwrap()),
            "saturation" => adjust_saturation(&mut image, arg.parse().unwrap()),
            other => panic!("unknown op {other}"),
        }
        let diffs = image.pixels().iter().zip(&want.u8s).filter(|(a, b)| a != b).count();
        assert_eq!(diffs, 0, "{key}: {diffs} of {} bytes differ from torchvision", want.u8s.len());
        checked += 1;
    }
    assert_eq!(checked, 9 * (18 + 4 * 7));
}

#[test]
fn posterize_refuses_bits_pillow_refuses() {
    let mut image = Image::filled(3, 3, 3, 9);
    for bits in [0, 9] {
        let err = posterize(&mut image, bits).unwrap_err();
        assert!(err.to_string().contains("bits must be between 1 and 8"), "{err}");
    }
}
