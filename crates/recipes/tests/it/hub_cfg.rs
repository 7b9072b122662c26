//! A Hub model folder's `pretrained_cfg` as the run's preprocessing
//! (`torchlight_recipes::image::apply_pretrained_cfg`): the eval transform it gives is timm's
//! (`tests/fixtures/make_hub_preprocessing.py`), a key the config sets wins, config.toml
//! keeps the values in effect (`input_size`, `test_input_size`, `test_crop_pct` and
//! `crop_mode` `squash` included), and timm's `border` crop is refused.

use crate::temp_dir;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tch::{Kind, Tensor};
use torchlight_recipes::image::{apply_pretrained_cfg, eval_preprocessing, train_transform_for};
use torchlight_recipes::{Interpolation, TrainConfig};
use torchlight_vision::{
    CropMode, EvalPreprocessing, Image, InterpolationMode, Normalize, Sample, Transform,
};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A Hub folder in `parent` whose config.json is `hub_cfg/<name>.json` (the weights file only
/// needs to be there: nothing here loads it).
fn hub_folder(parent: &Path, name: &str) -> PathBuf {
    let dir = parent.join(format!("resnet18.{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fixtures().join(format!("hub_cfg/{name}.json")), dir.join("config.json")).unwrap();
    std::fs::write(dir.join("model.safetensors"), b"").unwrap();
    dir
}

fn config_for(dir: &Path) -> TrainConfig {
    let mut c = TrainConfig::default();
    c.data.image_size = Some(32);
    c.model.pretrained = Some(dir.to_path_buf());
    c
}

fn apply(t: &dyn Transform, image: Image) -> Tensor {
    let t =
        t.apply(Sample::Image(image), &mut torchlight_data::rng_from_seed(0)).unwrap().into_tensor().unwrap();
    Tensor::from_slice(&t.data).reshape([t.channels as i64, t.height as i64, t.width as i64])
}

/// The recipe's eval transform for a folder whose config.json says bilinear, crop_pct 0.875
/// and ImageNet's statistics, and for one that says bicubic, crop_pct 0.95 and CLIP's
/// statistics, equals timm 1.0.31's `create_transform(**resolve_data_config({},
/// pretrained_cfg=...), is_training=False)` on three images (a photo crop and seeded noise,
/// downscaled and upscaled), element for element (tolerance 0: the resize is Pillow's, and
/// ToTensor and Normalize are float32 as in torchvision). Without the folder the bicubic case
/// differs (the test can fail).
#[test]
fn the_eval_transform_of_a_hub_folder_is_timms() {
    let tensors: HashMap<String, Tensor> =
        Tensor::read_safetensors(fixtures().join("hub_preprocessing.safetensors"))
            .unwrap()
            .into_iter()
            .collect();
    let image = |key: &str| {
        let t = &tensors[key];
        let shape: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
        let bytes = Vec::<u8>::try_from(t.to_kind(Kind::Uint8).flatten(0, -1)).unwrap();
        Image::new(shape[1], shape[0], shape[2], bytes)
    };
    let tmp = temp_dir();
    for (name, resize, mode) in
        [("bilinear", 36, InterpolationMode::Bilinear), ("bicubic", 33, InterpolationMode::Bicubic)]
    {
        let mut c = config_for(&hub_folder(tmp.path(), name));
        let line = apply_pretrained_cfg(&mut c).unwrap().expect("the folder has a pretrained_cfg");
        assert!(line.contains("pretrained_cfg") && line.contains("data.crop_pct"), "{line}");
        c.validate().unwrap();
        let eval = eval_preprocessing(&c);
        assert_eq!((eval.resize, eval.crop, eval.interpolation), (resize, 32, mode), "{name}");
        for img in ["chelsea", "noise", "small"] {
            let got = apply(&eval.transform(), image(&format!("input/{img}")));
            let want = &tensors[&format!("{name}/{img}")];
            assert_eq!(got.size(), want.size(), "{name}/{img}");
            let diff = (&got - want).abs().max().double_value(&[]);
            assert_eq!(diff, 0.0, "{name}/{img}: max |diff| {diff}");
        }
    }
    let default = EvalPreprocessing::classification(32);
    let got = apply(&default.transform(), image("input/chelsea"));
    assert!(!got.equal(&tensors["bicubic/chelsea"]), "the default preprocessing is not the bicubic folder's");
    // The bilinear folder at 0.875 is torchvision's preset: the defaults' own numbers.
    assert_eq!(apply(&default.transform(), image("input/noise")), tensors["bilinear/noise"]);
}

/// timm's evaluation sizes and crops: a folder with `test_input_size` and `test_crop_pct`
/// (timm's `resolve_data_config(..., use_test_size=True)`, what its validate.py uses) squashed
/// and bilinear, one centre-cropped and bicubic, and one with `crop_pct` 1.15 (timm allows
/// above 1: the resize is smaller than the crop, which pads with zeros). For a config that sets
/// no size the recipe's eval transform equals timm's `create_transform(is_training=False)` on
/// the three images, element for element (tolerance 0, as above; the fixture
/// `hub_eval_sizes.safetensors`); config.toml keeps the values; a config that sets
/// `data.image_size` evaluates at it, as timm keeps an `img_size` given.
#[test]
fn test_input_size_test_crop_pct_and_crop_mode_are_timms() {
    let inputs: HashMap<String, Tensor> =
        Tensor::read_safetensors(fixtures().join("hub_preprocessing.safetensors"))
            .unwrap()
            .into_iter()
            .collect();
    let want: HashMap<String, Tensor> =
        Tensor::read_safetensors(fixtures().join("hub_eval_sizes.safetensors"))
            .unwrap()
            .into_iter()
            .collect();
    let image = |key: &str| {
        let t = &inputs[key];
        let shape: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
        let bytes = Vec::<u8>::try_from(t.to_kind(Kind::Uint8).flatten(0, -1)).unwrap();
        Image::new(shape[1], shape[0], shape[2], bytes)
    };
    let tmp = temp_dir();
    // (folder, eval side, resize, crop_mode, interpolation)
    let cases = [
        ("bilinear_squash", 40, 42, CropMode::Squash, InterpolationMode::Bilinear),
        ("bicubic_test", 36, 36, CropMode::Center, InterpolationMode::Bicubic),
        ("bicubic_wide", 32, 27, CropMode::Center, InterpolationMode::Bicubic),
    ];
    for (name, side, resize, mode, interpolation) in cases {
        let mut c = config_for(&hub_folder(tmp.path(), name));
        c.data.image_size = None;
        let line = apply_pretrained_cfg(&mut c).unwrap().unwrap();
        c.validate().unwrap();
        assert_eq!(c.data.image_size, Some(32), "{name}: {line}");
        let eval = eval_preprocessing(&c);
        assert_eq!(
            (eval.crop, eval.resize, eval.crop_mode, eval.interpolation),
            (side, resize, mode, interpolation),
            "{name}"
        );
        for img in ["chelsea", "noise", "small"] {
            let got = apply(&eval.transform(), image(&format!("input/{img}")));
            let want = &want[&format!("{name}/{img}")];
            assert_eq!(got.size(), want.size(), "{name}/{img}");
            let diff = (&got - want).abs().max().double_value(&[]);
            assert_eq!(diff, 0.0, "{name}/{img}: max |diff| {diff}");
        }
        let text = c.to_toml();
        let back = TrainConfig::from_toml_str(&text).unwrap();
        assert_eq!(eval_preprocessing(&back), eval, "{name}: config.toml keeps it\n{text}");
        if name == "bilinear_squash" {
            assert!(
                line.contains("data.eval_image_size = 40") && line.contains("data.crop_mode = \"squash\""),
                "{line}"
            );
            assert!(
                text.contains("eval_image_size = 40") && text.contains("crop_mode = \"squash\""),
                "{text}"
            );
            // The squash transform is not the centre one (the test can fail).
            let center = EvalPreprocessing { crop_mode: torchlight_vision::CropMode::Center, ..eval };
            let got = apply(&center.transform(), image("input/chelsea"));
            assert!(!got.equal(&want["bilinear_squash/chelsea"]));
        }
    }
    // A size the config gives is the evaluation size too, and its crop_pct the evaluation crop.
    let mut c = config_for(&hub_folder(tmp.path(), "bicubic_test"));
    c.set("data.crop_pct", "0.9").unwrap();
    let line = apply_pretrained_cfg(&mut c).unwrap().unwrap();
    assert!(
        line.contains("data.image_size (also for evaluation)")
            && line.contains("data.crop_pct (also for evaluation)"),
        "{line}"
    );
    assert_eq!((eval_preprocessing(&c).crop, eval_preprocessing(&c).resize), (32, 35));
    // A ViT cannot evaluate at another size than it is built for.
    let mut vit = TrainConfig::default();
    vit.set("model.name", "vit_s_16").unwrap();
    vit.set("data.image_size", "32").unwrap();
    vit.set("data.eval_image_size", "48").unwrap();
    let err = torchlight_recipes::check_eval_size(&vit).unwrap_err().to_string();
    assert!(err.contains("data.eval_image_size") && err.contains("position embedding"), "{err}");
    vit.set("model.name", "resnet18").unwrap();
    torchlight_recipes::check_eval_size(&vit).unwrap();
    // timm's `border` is refused in one line naming it, unless data.crop_mode is set.
    let dir = hub_folder(tmp.path(), "bilinear_squash");
    let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    std::fs::write(dir.join("config.json"), text.replace("\"squash\"", "\"border\"")).unwrap();
    let err = apply_pretrained_cfg(&mut config_for(&dir)).unwrap_err().to_string();
    assert!(
        err.contains("pretrained_cfg.crop_mode") && err.contains("border") && err.lines().count() == 1,
        "{err}"
    );
    let mut c = config_for(&dir);
    c.set("data.crop_mode", "center").unwrap();
    let line = apply_pretrained_cfg(&mut c).unwrap().unwrap();
    assert!(line.contains("the config's own") && line.contains("data.crop_mode"), "{line}");
}

/// Keys the config sets win over `pretrained_cfg`, the others take its values (train
/// transform too: its crop's interpolation and its normalisation), the line says which; the
/// saved config.toml holds the values in effect and reads back equal; a config without a
/// folder is left as it is.
#[test]
fn the_configs_own_keys_win_and_config_toml_holds_the_values_in_effect() {
    let tmp = temp_dir();
    let dir = hub_folder(tmp.path(), "bicubic");
    let mut c = config_for(&dir);
    c.set("data.interpolation", "bilinear").unwrap();
    c.set("data.mean", "[0.5, 0.5, 0.5]").unwrap();
    let line = apply_pretrained_cfg(&mut c).unwrap().unwrap();
    assert!(line.contains("data.crop_pct = 0.95") && line.contains("data.std = [0.26862954"), "{line}");
    assert!(line.contains("the config's own data.interpolation, data.mean kept"), "{line}");
    assert!(!line.contains("input_size"), "32x32 is data.image_size: {line}");
    assert_eq!(c.data.interpolation, Some(Interpolation::Bilinear));
    assert_eq!(c.data.mean, Some([0.5; 3]));
    assert_eq!(c.data.crop_pct, Some(0.95));
    assert_eq!(c.data.std, Some([0.26862954, 0.26130258, 0.27577711]));
    let eval = eval_preprocessing(&c);
    assert_eq!((eval.resize, eval.interpolation, eval.mean), (33, InterpolationMode::Bilinear, [0.5; 3]));
    assert_eq!(eval.std, [0.26862954f64, 0.26130258, 0.27577711].map(|x| x as f32));
    let train = train_transform_for(&c.data);
    let norm = train.transforms().iter().find_map(|t| t.as_any().downcast_ref::<Normalize>()).unwrap();
    assert_eq!((norm.mean(), norm.std()), (&[0.5f32; 3][..], &eval.std[..]));

    let out = tmp.path().join("config.toml");
    c.write_toml_file(&out).unwrap();
    let text = std::fs::read_to_string(&out).unwrap();
    for want in
        ["interpolation = \"bilinear\"", "crop_pct = 0.95", "mean = [0.5, 0.5, 0.5]", "std = [0.26862954"]
    {
        assert!(text.contains(want), "{want} in\n{text}");
    }
    let back = TrainConfig::from_toml_file(&out).unwrap();
    assert_eq!(back, c);
    assert_eq!(eval_preprocessing(&back), eval);
    // Read back, every key is the config's own: applying again changes nothing.
    let mut again = back.clone();
    let line = apply_pretrained_cfg(&mut again).unwrap().unwrap();
    assert!(line.contains(": nothing;"), "{line}");
    assert_eq!(again, back);

    // No folder: nothing to apply, the defaults stay unset (today's preprocessing).
    let mut plain = TrainConfig::default();
    assert_eq!(apply_pretrained_cfg(&mut plain).unwrap(), None);
    assert_eq!(plain, TrainConfig::default());
    assert_eq!(eval_preprocessing(&plain), EvalPreprocessing::classification(224));
    assert!(!plain.to_toml().contains("crop_pct"));
}

/// timm's `border` evaluation crop is refused in one line naming
/// `pretrained_cfg.crop_mode` and the file; an interpolation Torchlight lacks is refused
/// unless `data.interpolation` is set; `input_size` sets `data.image_size` unless the config
/// sets it.
#[test]
fn unsupported_pretrained_cfg_values_are_named() {
    let tmp = temp_dir();
    let dir = hub_folder(tmp.path(), "bicubic");
    let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    std::fs::write(dir.join("config.json"), text.replace("\"center\"", "\"border\"")).unwrap();
    let err = apply_pretrained_cfg(&mut config_for(&dir)).unwrap_err().to_string();
    assert!(
        err.contains("pretrained_cfg.crop_mode") && err.contains("border") && err.contains("config.json"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let lanczos = text.replace("\"bicubic\"", "\"lanczos\"");
    std::fs::write(dir.join("config.json"), &lanczos).unwrap();
    let err = apply_pretrained_cfg(&mut config_for(&dir)).unwrap_err().to_string();
    assert!(err.contains("pretrained_cfg.interpolation") && err.contains("set data.interpolation"), "{err}");
    let mut c = config_for(&dir);
    c.set("interpolation", "bicubic").unwrap();
    apply_pretrained_cfg(&mut c).unwrap();

    std::fs::write(
        dir.join("config.json"),
        text.replace("[\n      3,\n      32,\n      32\n    ]", "[3, 48, 48]"),
    )
    .unwrap();
    let line = apply_pretrained_cfg(&mut config_for(&dir)).unwrap().unwrap();
    assert!(line.contains("the config's own data.image_size kept"), "{line}");
    // Unset, data.image_size takes input_size, as timm's resolve_data_config does.
    let mut c = config_for(&dir);
    c.data.image_size = None;
    let line = apply_pretrained_cfg(&mut c).unwrap().unwrap();
    assert!(line.contains("data.image_size = 48"), "{line}");
    assert_eq!(
        (c.data.image_size, eval_preprocessing(&c).crop, eval_preprocessing(&c).resize),
        (Some(48), 48, 50)
    );
    // A config file that leaves it out gets it; one that names it (any value) keeps its own.
    let toml = format!("[model]\npretrained = {:?}\n", dir.display().to_string());
    let mut c = TrainConfig::from_toml_str(&toml).unwrap();
    apply_pretrained_cfg(&mut c).unwrap();
    assert_eq!(c.data.image_size, Some(48));
    let mut c = TrainConfig::from_toml_str(&format!("[data]\nimage_size = 224\n{toml}")).unwrap();
    apply_pretrained_cfg(&mut c).unwrap();
    assert_eq!(c.data.image_size, Some(224));
    std::fs::write(
        dir.join("config.json"),
        text.replace("[\n      3,\n      32,\n      32\n    ]", "[3, 48, 40]"),
    )
    .unwrap();
    let mut c = config_for(&dir);
    c.data.image_size = None;
    let err = apply_pretrained_cfg(&mut c).unwrap_err().to_string();
    assert!(err.contains("pretrained_cfg.input_size") && err.contains("[3, 48, 40]"), "{err}");

    // Bad values of the new keys name them.
    let mut c = TrainConfig::default();
    c.set("data.std", "[0.2, 0, 0.2]").unwrap();
    assert!(c.validate().unwrap_err().to_string().contains("data.std"));
    let mut c = TrainConfig::default();
    c.set("data.crop_pct", "0").unwrap();
    assert!(c.validate().unwrap_err().to_string().contains("data.crop_pct"));
    c.set("data.crop_pct", "none").unwrap();
    c.validate().unwrap();
}

/// `augment_files` shows the run's train transform: with a Hub folder as `model.pretrained`
/// its views are those of a config that sets the folder's values itself (bicubic crop, CLIP's
/// mean/std), bit for bit, and not those of the defaults.
#[test]
fn augment_shows_the_train_transform_with_the_folders_preprocessing() {
    use torchlight_recipes::image::{augment_files, Draws};
    let tmp = temp_dir();
    let image = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../vision/tests/fixtures/inputs/chelsea.png");
    let views = |c: &TrainConfig| {
        let out = augment_files(c, std::slice::from_ref(&image), 2, Draws::Loader).unwrap();
        out[0].tensors.iter().map(|t| t.data.clone()).collect::<Vec<_>>()
    };
    let with_folder = config_for(&hub_folder(tmp.path(), "bicubic"));
    let mut by_hand = config_for(Path::new("none"));
    by_hand.model.pretrained = None;
    by_hand.set("data.interpolation", "bicubic").unwrap();
    by_hand.set("data.mean", "[0.48145466, 0.4578275, 0.40821073]").unwrap();
    by_hand.set("data.std", "[0.26862954, 0.26130258, 0.27577711]").unwrap();
    let got = views(&with_folder);
    assert_eq!(got, views(&by_hand));
    by_hand.data = TrainConfig::default().data;
    by_hand.data.image_size = Some(32);
    assert_ne!(got, views(&by_hand));
}
