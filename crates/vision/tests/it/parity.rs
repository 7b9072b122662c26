//! Decode, Resize, CenterCrop, their fused form and RandomResizedCrop's crop+resize against
//! torchvision 0.26 on PIL images (`cases.txt`), and ToTensor / Normalize against its tensors.

use crate::{diff, fixture, read_safetensors};
use torchlight_base::seed::rng_from_seed;
use torchlight_vision::{
    adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation, decode_file, pad, CenterCrop, Compose,
    CropBox, Grayscale, Image, Normalize, PaddingMode, RandomResizedCrop, Resize, Sample, ToTensor,
    Transform, IMAGENET_MEAN, IMAGENET_STD,
};

fn num(args: &[&str], i: usize) -> usize {
    args[i].parse().expect("numeric case argument")
}

/// Runs `op` from `cases.txt` on `input`.
pub(crate) fn run(op: &str, args: &[&str], input: Image) -> Image {
    let mut rng = rng_from_seed(0);
    let t: Box<dyn Transform> = match op {
        "decode" => return input,
        "resize" => Box::new(Resize::new(num(args, 0))),
        "resize_exact" => Box::new(Resize::exact(num(args, 0), num(args, 1))),
        "center_crop" => Box::new(CenterCrop::rect(num(args, 0), num(args, 1))),
        "resize_center_crop" => {
            let c = Compose::default().then(Resize::new(num(args, 0))).then(CenterCrop::new(num(args, 1)));
            assert_eq!(c.fused_len(), 1, "Resize + CenterCrop should fuse");
            Box::new(c)
        }
        "resized_crop" => {
            let t = RandomResizedCrop::rect(num(args, 4), num(args, 5));
            let b =
                CropBox { top: num(args, 0), left: num(args, 1), height: num(args, 2), width: num(args, 3) };
            return t.crop_resize(&input, b);
        }
        "brightness" | "contrast" | "saturation" | "hue" => {
            let f: f64 = args[0].parse().unwrap();
            let mut image = input;
            match op {
                "brightness" => adjust_brightness(&mut image, f),
                "contrast" => adjust_contrast(&mut image, f),
                "saturation" => adjust_saturation(&mut image, f),
                _ => adjust_hue(&mut image, f),
            }
            return image;
        }
        "grayscale" => {
            let out = Grayscale::new(num(args, 0)).convert(&input);
            assert_eq!(out.channels(), num(args, 0));
            // The expected PNG of a 1-channel result decodes as replicated RGB.
            return Image::from_rgb_image(out.to_rgb_image());
        }
        "pad" => {
            let mode = match args[5] {
                "constant" => PaddingMode::Constant,
                "edge" => PaddingMode::Edge,
                "reflect" => PaddingMode::Reflect,
                _ => PaddingMode::Symmetric,
            };
            let fill = num(args, 4) as u8;
            return pad(&input, [num(args, 0), num(args, 1), num(args, 2), num(args, 3)], fill, mode);
        }
        other => panic!("unknown op {other}"),
    };
    t.apply(Sample::Image(input), &mut rng).unwrap().into_image().unwrap()
}

#[test]
fn u8_transforms_match_torchvision_on_pil_images() {
    let cases = std::fs::read_to_string(fixture("cases.txt")).unwrap();
    let (mut worst_max, mut worst_mean, mut count) = (0f64, 0f64, 0);
    let (mut jpeg_max, mut jpeg_mean) = (0f64, 0f64);
    for line in cases.lines().filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.split(' ').collect();
        let (input, op, args, expected) =
            (fields[0], fields[1], &fields[2..fields.len() - 1], fields[fields.len() - 1]);
        let image = decode_file(fixture("inputs").join(input)).unwrap();
        let want = decode_file(fixture("expected").join(expected)).unwrap();
        let got = run(op, args, image);
        let (max, mean) = diff(&got, &want);
        if max > 0.0 {
            println!("nonzero {line}: max {max}/255 mean {mean:.4}/255");
        }
        // With libjpeg-turbo (the default), JPEGs decode to PIL's exact bytes and every case,
        // JPEG input or not, equals torchvision's output exactly (tolerance 0); zune-jpeg differs
        // from libjpeg-turbo in IDCT and chroma upsampling rounding, so without it JPEG inputs
        // get a looser bound, and the others keep the resampling bound of 2/255.
        let zune_jpeg = input.ends_with(".jpg") && !cfg!(feature = "libjpeg-turbo");
        if zune_jpeg {
            assert!(max <= 6.0 && mean <= 0.5, "{line}: JPEG decode vs PIL max {max}/255 mean {mean:.3}/255, tolerance max 6/255 mean 0.5/255");
            jpeg_max = jpeg_max.max(max);
            jpeg_mean = jpeg_mean.max(mean);
        } else {
            if cfg!(feature = "libjpeg-turbo") {
                assert_eq!(max, 0.0, "{line}: max {max}/255 mean {mean:.4}/255, tolerance 0");
            }
            assert!(
                max <= 2.0 && mean <= 1.0,
                "{line}: max {max}/255 mean {mean:.4}/255, tolerance max 2/255 mean 1/255"
            );
            worst_max = worst_max.max(max);
            worst_mean = worst_mean.max(mean);
        }
        count += 1;
    }
    assert!(count >= 125, "cases.txt has only {count} cases");
    println!("{count} cases: worst max {worst_max}/255, worst mean {worst_mean:.4}/255; zune-jpeg JPEG decode worst max {jpeg_max}/255, mean {jpeg_mean:.4}/255");
}

#[test]
fn to_tensor_and_normalize_are_bit_identical_to_torchvision() {
    let tensors = read_safetensors("tensors.safetensors");
    for name in ["chelsea_rgba", "camera_gray"] {
        let input = &tensors[&format!("{name}.input")];
        let (h, w) = (input.shape[0], input.shape[1]);
        let image = Image::new(w, h, 3, input.u8s.clone());
        let to_tensor = ToTensor.convert(&image);
        assert_eq!((to_tensor.channels, to_tensor.height, to_tensor.width), (3, h, w));
        assert_eq!(
            to_tensor.data,
            tensors[&format!("{name}.to_tensor")].f32s,
            "{name}: ToTensor, tolerance 0 (bit-identical)"
        );
        let cases = [
            ("normalize_imagenet", Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD)),
            ("normalize_custom", Normalize::new(&[0.5, 0.25, 0.125], &[0.3, 0.7, 0.11])),
        ];
        for (key, norm) in cases {
            let want = tensors[&format!("{name}.{key}")].f32s.clone();
            let mut two_step = to_tensor.clone();
            norm.normalize(&mut two_step).unwrap();
            assert_eq!(two_step.data, want, "{name}.{key}: Normalize, tolerance 0 (bit-identical)");
            let fused = Compose::default().then(ToTensor).then(norm.clone());
            assert_eq!(fused.fused_len(), 1, "ToTensor + Normalize should fuse");
            let out = fused.apply(Sample::Image(image.clone()), &mut rng_from_seed(0)).unwrap();
            assert_eq!(
                out.into_tensor().unwrap().data,
                want,
                "{name}.{key}: fused ToTensor+Normalize, tolerance 0"
            );
        }
    }
}
