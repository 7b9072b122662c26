//! The input pipelines stage by stage: milliseconds per image for each step of the train, eval
//! and policy transforms on one thread, mirrored by `stage_timings` in `pytorch_bench.py`.
//!
//! `cargo xtask bench` asks both servers for `stages <pipeline> <images>` and the report turns
//! the answers into the per-stage tables of `docs/benchmarks.md`.

use anyhow::{bail, Result};
use std::path::Path;
use std::time::Instant;
use tch::Tensor;
use torchlight_data::seed::rng_from_seed;
use torchlight_data::{Array, Collate, DefaultCollate};
use torchlight_vision::{
    decode_bytes, decode_bytes_crop, hflip, image_dimensions_of_bytes, CenterCrop, Compose, CropBox,
    DecodeOptions, Image, ImageFolder, Normalize, RandomErasing, RandomResizedCrop, Resize, Sample,
    Transform, TrivialAugmentWide, IMAGENET_MEAN, IMAGENET_STD,
};

/// The stages a pipeline reports, in order; `pytorch_bench.py` reports `to_tensor` and
/// `normalize` apart where Torchlight has one fused `to_tensor_normalize`.
pub const STAGES: &[&str] = &[
    "read",
    "decode",
    "crop_resize",
    "flip",
    "policy",
    "to_tensor",
    "normalize",
    "to_tensor_normalize",
    "erase",
    "batch",
];

/// The pipelines with a stage table: `policy` is `train` with TrivialAugmentWide after the
/// flip and RandomErasing(0.25) after Normalize (torchvision's classification preset with
/// `--auto-augment ta_wide --random-erase 0.25`).
pub const PIPELINES: &[&str] = &["train", "eval", "policy"];

/// Batch size of the `batch` stage (the pipeline workloads' batch size).
const BATCH: usize = 32;

/// Milliseconds per image of each stage of `pipeline` (one of [`PIPELINES`]) over `images`
/// files of the folder at `data` spread evenly over it, one thread: `(stage, ms)` in
/// [`STAGES`] order, the stages the pipeline has (eval has no flip; only policy has `policy`
/// and `erase`).
pub fn measure(data: &Path, pipeline: &str, images: usize) -> Result<Vec<(&'static str, f64)>> {
    let (train, policy) = match pipeline {
        "train" => (true, false),
        "eval" => (false, false),
        "policy" => (true, true),
        other => bail!("no pipeline `{other}`; the pipelines are {}", PIPELINES.join(", ")),
    };
    let folder = ImageFolder::new(data)?;
    let samples = folder.samples();
    let n = images.min(samples.len());
    if n == 0 {
        bail!("{} has no images", data.display());
    }
    let threads = tch::get_num_threads();
    tch::set_num_threads(1);
    let result = run(samples, n, train, policy);
    tch::set_num_threads(threads);
    result
}

fn run(
    samples: &[(std::path::PathBuf, i64)],
    n: usize,
    train: bool,
    policy: bool,
) -> Result<Vec<(&'static str, f64)>> {
    // Train: as ImageFolder loads a file under a leading RandomResizedCrop, the size comes from
    // the header, the box is drawn, and only the box is decoded ("decode"), then resized
    // ("crop_resize"). Eval: the whole image is decoded, then Resize + CenterCrop, fused so only
    // the centre window is resampled, as in the eval workload.
    let random_crop = RandomResizedCrop::new(224);
    let eval_crop = Compose::default().then(Resize::new(256)).then(CenterCrop::new(224));
    let options = DecodeOptions::default();
    let normalize = Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD);
    let (augment, erasing) = (TrivialAugmentWide::default(), RandomErasing::new(0.25));
    let mut rng = rng_from_seed(0);
    let mut seconds = [0f64; 7];
    let mut batch_s = 0f64;
    let mut pending = Vec::with_capacity(BATCH);
    for i in 0..n {
        let (path, target) = &samples[i * samples.len() / n];
        let t0 = Instant::now();
        let bytes = std::fs::read(path)?;
        let t1 = Instant::now();
        let (decoded, crop) = if train {
            let (width, height) = image_dimensions_of_bytes(&bytes, path)?;
            let crop = random_crop.get_params(height as usize, width as usize, &mut rng);
            (decode_bytes_crop(&bytes, path, &options, crop)?, Some(crop))
        } else {
            (decode_bytes(&bytes, path)?, None)
        };
        let t2 = Instant::now();
        let mut image: Image = match crop {
            Some(crop) => random_crop
                .crop_resize(&decoded, CropBox { top: 0, left: 0, height: crop.height, width: crop.width }),
            None => match eval_crop.apply(Sample::Image(decoded), &mut rng)?.into_image() {
                Some(image) => image,
                None => bail!("the crop gave a tensor"),
            },
        };
        let t3 = Instant::now();
        // RandomHorizontalFlip(0.5): every other image, so both sides flip the same number.
        if train && i % 2 == 0 {
            hflip(&mut image);
        }
        let t4 = Instant::now();
        if policy {
            image = augment.apply_with(image, &mut rng)?;
        }
        let t5 = Instant::now();
        let mut tensor = normalize.to_tensor_normalized(&image)?;
        let t6 = Instant::now();
        if policy {
            tensor = erasing.apply_with(tensor, &mut rng)?;
        }
        let t7 = Instant::now();
        let spans = [(t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5), (t5, t6), (t6, t7)];
        for (s, (a, b)) in seconds.iter_mut().zip(spans) {
            *s += (b - a).as_secs_f64();
        }
        pending.push((i, (tensor.into_array(), *target)));
        if pending.len() == BATCH || i + 1 == n {
            let items = std::mem::replace(&mut pending, Vec::with_capacity(BATCH));
            let start = Instant::now();
            let collate: &dyn Collate<(Array, i64), Staged = _, Batch = (Tensor, Tensor)> = &DefaultCollate;
            let (images, _labels) = collate.finish(collate.stage(items)?, false)?;
            batch_s += start.elapsed().as_secs_f64();
            std::hint::black_box(&images);
        }
    }
    let ms = |s: f64| s * 1e3 / n as f64;
    let mut out = vec![("read", ms(seconds[0])), ("decode", ms(seconds[1])), ("crop_resize", ms(seconds[2]))];
    if train {
        out.push(("flip", ms(seconds[3])));
    }
    if policy {
        out.push(("policy", ms(seconds[4])));
    }
    out.push(("to_tensor_normalize", ms(seconds[5])));
    if policy {
        out.push(("erase", ms(seconds[6])));
    }
    out.push(("batch", ms(batch_s)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pipeline_reports_its_stages() {
        let dir = tempfile::tempdir().unwrap();
        crate::imagegen::write_photo_folder(dir.path(), 6, 2).unwrap();
        let train = measure(dir.path(), "train", 5).unwrap();
        let names: Vec<&str> = train.iter().map(|s| s.0).collect();
        assert_eq!(names, ["read", "decode", "crop_resize", "flip", "to_tensor_normalize", "batch"]);
        assert!(train.iter().all(|(_, ms)| ms.is_finite() && *ms >= 0.0), "{train:?}");
        assert!(train.iter().all(|(s, _)| STAGES.contains(s)));
        let eval: Vec<&str> = measure(dir.path(), "eval", 3).unwrap().iter().map(|s| s.0).collect();
        assert_eq!(eval, ["read", "decode", "crop_resize", "to_tensor_normalize", "batch"]);
        let policy = measure(dir.path(), "policy", 5).unwrap();
        let names: Vec<&str> = policy.iter().map(|s| s.0).collect();
        assert_eq!(
            names,
            ["read", "decode", "crop_resize", "flip", "policy", "to_tensor_normalize", "erase", "batch"]
        );
        assert!(policy.iter().all(|(s, ms)| ms.is_finite() && *ms >= 0.0 && STAGES.contains(s)));
        assert!(measure(dir.path(), "test", 3).unwrap_err().to_string().contains("no pipeline `test`"));
    }
}
