//! `FiveCrop`, `TenCrop` and their `CropView`s against torchvision 0.26 on PIL images
//! (`tests/fixtures/make_five_crop.py`), tolerance 0: every crop's bytes.

use crate::{fixture, read_safetensors};
use torchlight_base::seed::rng_from_seed;
use torchlight_vision::{decode_file, FiveCrop, Image, Resize, Sample, TenCrop, Transform};

/// The crops a fixture key's pipeline makes here, and the same crops through `CropView`s.
fn ours(pipeline: &str, mut image: Image) -> (Vec<Image>, Vec<Image>) {
    let num = |s: &str| s.parse::<usize>().unwrap();
    for step in pipeline.split(';') {
        let words: Vec<&str> = step.split_whitespace().collect();
        match words[..] {
            ["resize", s] => {
                let out = Resize::new(num(s)).apply(Sample::Image(image), &mut rng_from_seed(0)).unwrap();
                image = out.into_image().unwrap();
            }
            ["five", h, w] => {
                let five = FiveCrop::rect(num(h), num(w));
                let views = (0..5).map(|i| view(&five.view(i), &image)).collect();
                return (five.crops(&image).unwrap(), views);
            }
            ["ten", h, w, flip] => {
                let ten = TenCrop::rect(num(h), num(w)).with_vertical_flip(flip == "v");
                let views = (0..10).map(|i| view(&ten.view(i), &image)).collect();
                return (ten.crops(&image).unwrap(), views);
            }
            _ => panic!("unknown step {step}"),
        }
    }
    panic!("{pipeline} makes no crops")
}

fn view(t: &dyn Transform, image: &Image) -> Image {
    t.apply(Sample::Image(image.clone()), &mut rng_from_seed(0)).unwrap().into_image().unwrap()
}

#[test]
fn five_crop_and_ten_crop_equal_torchvision_on_pil_images() {
    let fixtures = read_safetensors("five_crop.safetensors");
    assert_eq!(fixtures.len(), 7);
    for (key, want) in &fixtures {
        let (name, pipeline) = key.split_once('|').unwrap();
        let image = decode_file(fixture(&format!("inputs/{name}"))).unwrap();
        let (crops, views) = ours(pipeline, image);
        let [v, h, w, c] = want.shape[..] else { panic!("{key}: shape {:?}", want.shape) };
        assert_eq!(crops.len(), v, "{key}");
        for (i, (crop, view)) in crops.iter().zip(&views).enumerate() {
            assert_eq!((crop.height(), crop.width(), crop.channels()), (h, w, c), "{key} crop {i}");
            let n = h * w * c;
            assert!(
                crop.pixels() == &want.u8s[i * n..(i + 1) * n],
                "{key}: crop {i} differs from torchvision's"
            );
            assert_eq!(view, crop, "{key}: CropView {i} is not crop {i}");
        }
    }
}

#[test]
fn five_crop_larger_than_the_image_fails_with_torchvisions_message() {
    let bytes = std::fs::read(fixture("five_crop.safetensors")).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let want = &meta.metadata().as_ref().unwrap()["error"];
    let image = Image::filled(64, 48, 3, 0);
    for err in [
        FiveCrop::new(49).crops(&image).unwrap_err(),
        TenCrop::new(49).crops(&image).unwrap_err(),
        FiveCrop::new(49).view(4).apply(Sample::Image(image.clone()), &mut rng_from_seed(0)).unwrap_err(),
    ] {
        let text = err.to_string();
        assert!(text.ends_with(&format!(": {want}")), "{text} is not torchvision's {want}");
    }
}
