//! What `torchlight augment` shows: the recipe's train transform (not a copy of it) with
//! torchvision's draws after `torch.manual_seed(S)`, equal bit for bit to torchvision's preset
//! on PIL for every `data.auto_augment` policy (`tests/fixtures/make_augment.py`: six views in
//! turn, AugMix's spare normal carried between them), and with the loader's draws, equal to what the
//! training loader yields in each epoch.

use crate::temp_dir;
use std::path::{Path, PathBuf};
use tch::Tensor;
use torchlight_data::DataLoaderBuilder;
use torchlight_recipes::image::{augment_files, augment_split, to_u8, Draws};
use torchlight_recipes::TrainConfig;
use torchlight_vision::{Image, Normalize};

fn fixtures() -> Vec<(String, Tensor)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/augment.safetensors");
    Tensor::read_safetensors(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn get<'a>(f: &'a [(String, Tensor)], name: &str) -> &'a Tensor {
    &f.iter().find(|(k, _)| k == name).unwrap_or_else(|| panic!("no {name} in augment.safetensors")).1
}

/// The fixture's input image written as a PNG, which decodes back to the same pixels.
fn input_png(dir: &Path, f: &[(String, Tensor)]) -> PathBuf {
    let t = get(f, "input");
    let (h, w) = (t.size()[0] as usize, t.size()[1] as usize);
    let pixels = Vec::<u8>::try_from(t.flatten(0, -1)).unwrap();
    let path = dir.join("chelsea.png");
    torchlight_recipes::image::save_png(&Image::new(w, h, 3, pixels), &path).unwrap();
    path
}

#[test]
fn torch_seeded_views_equal_torchvisions_preset_bit_for_bit() {
    let dir = temp_dir();
    let f = fixtures();
    let png = input_png(dir.path(), &f);
    // (fixture, settings): each policy built as torchvision's reference script builds it.
    let presets: [(&str, &[(&str, &str)]); 9] = [
        ("ta_wide_erase", &[("data.auto_augment", "ta_wide"), ("data.random_erase", "0.25")]),
        ("ra", &[("data.auto_augment", "ra")]),
        ("ra_m15", &[("data.auto_augment", "ra"), ("data.ra_magnitude", "15")]),
        ("augmix", &[("data.auto_augment", "augmix")]),
        (
            "augmix_s6_nearest",
            &[
                ("data.auto_augment", "augmix"),
                ("data.augmix_severity", "6"),
                ("data.interpolation", "nearest"),
            ],
        ),
        ("imagenet", &[("data.auto_augment", "imagenet")]),
        ("cifar10", &[("data.auto_augment", "cifar10")]),
        ("svhn", &[("data.auto_augment", "svhn")]),
        ("svhn_bicubic", &[("data.auto_augment", "svhn"), ("data.interpolation", "bicubic")]),
    ];
    for (name, settings) in presets {
        let mut config = TrainConfig::default();
        config.set("data.image_size", "10").unwrap();
        for (key, value) in settings {
            config.set(key, value).unwrap();
        }
        config.validate().unwrap();
        let got = augment_files(&config, std::slice::from_ref(&png), 6, Draws::Torch(7)).unwrap();
        let want = get(&f, name);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].tensors.len(), 6);
        for (k, t) in got[0].tensors.iter().enumerate() {
            assert_eq!((t.channels, t.height, t.width), (3, 10, 10), "{name} view {k}");
            let want = Vec::<f32>::try_from(want.get(k as i64).flatten(0, -1)).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&t.data), bits(&want), "{name} view {k} differs from torchvision's");
            assert_eq!(
                got[0].views[k],
                to_u8(t, Some(&Normalize::imagenet())),
                "{name} view {k}: the PNG's pixels"
            );
        }
    }
}

/// `data.hflip`, `data.rotation` and `data.color_jitter` shown by `torchlight augment
/// --torch-seed` through the recipe's transform: torchvision's `Compose` of the same steps,
/// bit for bit (`rot_jitter`); `data.hflip = 0` leaves the flip (and its draw) out, as
/// torchvision's `hflip_prob=0` does (`no_flip`).
#[test]
fn torch_seeded_views_with_flip_rotation_and_jitter_keys_equal_torchvisions() {
    let dir = temp_dir();
    let f = fixtures();
    let png = input_png(dir.path(), &f);
    for (name, keys) in [
        ("rot_jitter", &[("data.hflip", "0.3"), ("data.rotation", "15"), ("data.color_jitter", "0.4")][..]),
        ("no_flip", &[("data.hflip", "0")][..]),
    ] {
        let mut config = TrainConfig::default();
        config.set("data.image_size", "10").unwrap();
        for (key, value) in keys {
            config.set(key, value).unwrap();
        }
        config.validate().unwrap();
        let got = augment_files(&config, std::slice::from_ref(&png), 6, Draws::Torch(7)).unwrap();
        let want = get(&f, name);
        for (k, t) in got[0].tensors.iter().enumerate() {
            let want = Vec::<f32>::try_from(want.get(k as i64).flatten(0, -1)).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&t.data), bits(&want), "{name} view {k} differs from torchvision's");
        }
    }
}

/// A tiny ImageFolder: `train/<class>/<i>.png`, 3 classes of 4 noise images of 20x16.
fn folder(root: &Path) {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for class in ["a", "b", "c"] {
        let dir = root.join("train").join(class);
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..4 {
            let pixels: Vec<u8> = (0..20 * 16 * 3)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 24) as u8
                })
                .collect();
            torchlight_recipes::image::save_png(
                &Image::new(20, 16, 3, pixels),
                &dir.join(format!("{i}.png")),
            )
            .unwrap();
        }
    }
}

#[test]
fn loader_views_are_what_the_training_loader_yields_in_each_epoch() {
    let dir = temp_dir();
    folder(dir.path());
    let mut config = TrainConfig::default();
    config.set("data.root", &dir.path().display().to_string()).unwrap();
    config.set("data.image_size", "12").unwrap();
    config.set("data.auto_augment", "ta_wide").unwrap();
    config.set("data.random_erase", "0.5").unwrap();
    config.set("train.seed", "5").unwrap();
    let got = augment_split(&config, 4, 3, Draws::Loader).unwrap();
    // One class after the other: a, b, c, then a's second image.
    let classes: Vec<String> = got
        .iter()
        .map(|a| a.path.parent().unwrap().file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(classes, ["a", "b", "c", "a"]);
    // The split as the run makes it, loaded in order one sample a batch with the run's seed:
    // epoch k's sample i is drawn from the same per-sample seed as view k of image i.
    let splits = torchlight_recipes::image::open_splits(&config).unwrap();
    let paths: Vec<PathBuf> = {
        let samples = splits.train.dataset().samples();
        splits.train.indices().iter().map(|&i| samples[i].0.clone()).collect()
    };
    let mut loader = DataLoaderBuilder::new(splits.train).batch_size(1).seed(5).build().unwrap();
    for k in 0..3u64 {
        let batches: Vec<(Tensor, Tensor)> = loader.epoch(k).map(|b| b.unwrap()).collect();
        for a in &got {
            let index = paths.iter().position(|p| *p == a.path).unwrap();
            let want = Vec::<f32>::try_from(batches[index].0.flatten(0, -1)).unwrap();
            assert_eq!(a.tensors[k as usize].data, want, "{} epoch {k}", a.path.display());
        }
    }
    // Views differ from epoch to epoch.
    assert_ne!(got[0].tensors[0].data, got[0].tensors[1].data);
}
