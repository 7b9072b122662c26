//! What the model sees: the recipe's own train transform ([`train_transform_for`]) applied to a
//! few images several times, as `u8` images a person can look at (`torchlight augment`, and
//! the doctor's grid of augmented samples).
//!
//! Two sources of draws:
//! - [`Draws::Loader`]: the training loader's, so view `k` of an image of the training split
//!   is exactly what the run's epoch `k + 1` feeds the model for it (the split's own
//!   `Dataset::get`, crop-box decoding included, with the loader's per-sample generator
//!   `sample_seed(train.seed, k, index)`); a file outside the split gets the draws of the
//!   index it is given at.
//! - [`Draws::Torch`]: torchvision's, from a [`TorchRng`] (torch's generator with its spare
//!   normal) seeded as `torch.manual_seed(s)` once per image, then the views in turn, as Python's
//!   `torch.manual_seed(s); [preset(img) for _ in range(n)]` on the same decoded image.
//!
//! A view is the transform's float tensor turned back into `u8` pixels through the
//! transform's `Normalize` (`round((x * std + mean) * 255)`, clamped), which gives back the
//! exact pixels before `ToTensor` wherever `RandomErasing` left them alone.

use super::data::train_transform_for;
use crate::config::TrainConfig;
use crate::error::{RecipeError, Result};
use std::path::{Path, PathBuf};
use torchlight_data::Dataset;
use torchlight_tensor::seed::{rng_from_seed, sample_seed};
use torchlight_vision::{
    decode_file_with, CenterCrop, Compose, DecodeOptions, Image, Normalize, Resize, Sample, TensorImage,
    TorchRng, Transform,
};

/// Where the random draws of the views come from (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Draws {
    /// The training loader's per-sample generator: view `k` is epoch `k + 1`'s.
    Loader,
    /// torchvision's draws after `torch.manual_seed(seed)`, once per image.
    Torch(u64),
}

/// One image and what the train transform made of it.
#[derive(Debug, Clone)]
pub struct Augmented {
    /// The file.
    pub path: PathBuf,
    /// The decoded image resized (shorter side) and centre-cropped to `data.image_size`, the
    /// contact sheet's first column.
    pub original: Image,
    /// The transform's outputs as float tensors, one per view.
    pub tensors: Vec<TensorImage>,
    /// The same views as `u8` images.
    pub views: Vec<Image>,
}

/// `n` views of each file in `paths` through `config`'s train transform, with `draws`; the
/// files decode as the run decodes them (`data.max_image_pixels`, `data.exif_transpose`).
/// File `i` takes the loader's draws of index `i`.
///
/// # Errors
/// A file that cannot be read or decoded, named; a transform error.
pub fn augment_files(
    config: &TrainConfig,
    paths: &[PathBuf],
    n: usize,
    draws: Draws,
) -> Result<Vec<Augmented>> {
    // The run's train transform, a Hub folder's pretrained_cfg applied as `fit` applies it.
    let resolved = super::with_pretrained_cfg(config)?;
    let config = &resolved;
    let transform = train_transform_for(&config.data);
    let decode = DecodeOptions::default()
        .with_max_pixels(config.data.pixel_limit())
        .with_exif_transpose(config.data.exif_transpose);
    paths
        .iter()
        .enumerate()
        .map(|(i, path)| {
            let image = decode_file_with(path, &decode)?;
            let tensors = (0..n)
                .scan(draws_for(draws), |g, k| {
                    Some(view(
                        &transform,
                        image.clone(),
                        g,
                        sample_seed(config.train.seed, k as u64, i as u64),
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            finish(config, &transform, path, &image, tensors)
        })
        .collect()
}

/// `n` views of `count` images of the training split of `config`'s data root, taken in turn
/// from each class (its first image, then its second, ...), through the split itself: with
/// [`Draws::Loader`] each view is the very sample the loader gives in that epoch.
///
/// # Errors
/// As [`open_splits`](super::open_splits); a sample that cannot be loaded, named.
pub fn augment_split(config: &TrainConfig, count: usize, n: usize, draws: Draws) -> Result<Vec<Augmented>> {
    let resolved = super::with_pretrained_cfg(config)?;
    let config = &resolved;
    let splits = super::open_splits(config)?;
    let transform = train_transform_for(&config.data);
    let samples = splits.train.dataset().samples();
    let targets: Vec<i64> = splits.train.indices().iter().map(|&i| samples[i].1).collect();
    let decode = splits.train.dataset().decode_options();
    let mut out = Vec::new();
    for index in round_robin(&targets, count) {
        let path = &samples[splits.train.indices()[index]].0;
        let image = decode_file_with(path, decode)?;
        let tensors = match draws {
            Draws::Loader => (0..n)
                .map(|k| {
                    let mut rng = rng_from_seed(sample_seed(config.train.seed, k as u64, index as u64));
                    let (array, _) = splits.train.get(index, &mut rng)?;
                    tensor_of(array, path)
                })
                .collect::<Result<Vec<_>>>()?,
            Draws::Torch(seed) => {
                let mut g = TorchRng::new(seed);
                (0..n).map(|_| torch_view(&transform, image.clone(), &mut g)).collect::<Result<Vec<_>>>()?
            }
        };
        out.push(finish(config, &transform, path, &image, tensors)?);
    }
    Ok(out)
}

/// The positions (in `targets`' order) of up to `count` samples, one class after the other:
/// the first sample of each class, then the second, ...
pub(crate) fn round_robin(targets: &[i64], count: usize) -> Vec<usize> {
    let mut classes: Vec<i64> = targets.to_vec();
    classes.sort_unstable();
    classes.dedup();
    let by_class: Vec<Vec<usize>> =
        classes.iter().map(|c| (0..targets.len()).filter(|&i| targets[i] == *c).collect()).collect();
    let mut out = Vec::new();
    let longest = by_class.iter().map(Vec::len).max().unwrap_or(0);
    for rank in 0..longest {
        for members in &by_class {
            if out.len() == count {
                return out;
            }
            if let Some(&i) = members.get(rank) {
                out.push(i);
            }
        }
    }
    out
}

/// A generator per image: torch's seeded once, or none (the loader's is made per view).
fn draws_for(draws: Draws) -> Option<TorchRng> {
    match draws {
        Draws::Loader => None,
        Draws::Torch(seed) => Some(TorchRng::new(seed)),
    }
}

fn view(transform: &Compose, image: Image, g: &mut Option<TorchRng>, seed: u64) -> Result<TensorImage> {
    match g {
        Some(g) => torch_view(transform, image, g),
        None => expect_tensor(transform.apply(Sample::Image(image), &mut rng_from_seed(seed))?),
    }
}

/// One view with torch's draws, the generator's spare normal carried to the next view as
/// torch's generator carries it (AugMix's Dirichlet weights use it).
fn torch_view(transform: &Compose, image: Image, g: &mut TorchRng) -> Result<TensorImage> {
    expect_tensor(transform.apply_like_torch_rng(Sample::Image(image), g)?)
}

fn expect_tensor(sample: Sample) -> Result<TensorImage> {
    sample.into_tensor().ok_or_else(|| RecipeError::InvalidConfig {
        field: "data".into(),
        value: "train transform".into(),
        reason: "the train transform does not end in a tensor (no ToTensor)".into(),
    })
}

fn tensor_of(array: torchlight_data::Array, path: &Path) -> Result<TensorImage> {
    match (array.shape.as_slice(), array.buffer) {
        (&[channels, height, width], torchlight_data::Buffer::F32(data)) => {
            Ok(TensorImage { channels, height, width, data })
        }
        (shape, _) => Err(RecipeError::io(
            path,
            std::io::Error::other(format!(
                "the train transform gave {shape:?}, not a float [C, H, W] tensor"
            )),
        )),
    }
}

pub(crate) fn finish(
    config: &TrainConfig,
    transform: &Compose,
    path: &Path,
    image: &Image,
    tensors: Vec<TensorImage>,
) -> Result<Augmented> {
    let normalize =
        transform.transforms().iter().find_map(|t| t.as_any().downcast_ref::<Normalize>().cloned());
    let views = tensors.iter().map(|t| to_u8(t, normalize.as_ref())).collect();
    let size = config.data.image_size() as usize;
    let original = CenterCrop::new(size).crop(&Resize::new(size).resize(image.clone()));
    Ok(Augmented { path: path.to_path_buf(), original, tensors, views })
}

/// `t` as `u8` pixels: `round((x * std + mean) * 255)` clamped to 0..=255, with `normalize`'s
/// statistics (none: `round(x * 255)`).
pub fn to_u8(t: &TensorImage, normalize: Option<&Normalize>) -> Image {
    let plane = t.height * t.width;
    let stat = |v: Option<&[f32]>, c: usize, default: f32| {
        v.map_or(default, |v| if v.len() == 1 { v[0] } else { v[c.min(v.len() - 1)] })
    };
    let mut pixels = vec![0u8; plane * t.channels];
    for c in 0..t.channels {
        let (m, s) =
            (stat(normalize.map(Normalize::mean), c, 0.0), stat(normalize.map(Normalize::std), c, 1.0));
        for (i, &x) in t.data[c * plane..(c + 1) * plane].iter().enumerate() {
            let v = ((f64::from(x) * f64::from(s) + f64::from(m)) * 255.0).round().clamp(0.0, 255.0);
            pixels[i * t.channels + c] = v as u8;
        }
    }
    Image::new(t.width, t.height, t.channels, pixels)
}

/// One image of all the views: a row per image, its original first, then its views, `size`
/// pixels square each (views of another size are placed at the top left), 4 px white gaps.
pub fn contact_sheet(items: &[Augmented], size: usize) -> Image {
    const GAP: usize = 4;
    let columns = 1 + items.iter().map(|a| a.views.len()).max().unwrap_or(0);
    let (w, h) = (columns * size + (columns + 1) * GAP, items.len() * size + (items.len() + 1) * GAP);
    let mut pixels = vec![255u8; w * h * 3];
    for (row, item) in items.iter().enumerate() {
        for (col, tile) in std::iter::once(&item.original).chain(&item.views).enumerate() {
            let (x0, y0) = (GAP + col * (size + GAP), GAP + row * (size + GAP));
            for y in 0..tile.height().min(size) {
                for x in 0..tile.width().min(size) {
                    let src = (y * tile.width() + x) * tile.channels();
                    let rgb = if tile.channels() == 1 {
                        [tile.pixels()[src]; 3]
                    } else {
                        [tile.pixels()[src], tile.pixels()[src + 1], tile.pixels()[src + 2]]
                    };
                    let dst = ((y0 + y) * w + x0 + x) * 3;
                    pixels[dst..dst + 3].copy_from_slice(&rgb);
                }
            }
        }
    }
    Image::new(w, h, 3, pixels)
}

/// Writes `image` as a PNG file.
///
/// # Errors
/// The file cannot be written, named.
pub fn save_png(image: &Image, path: &Path) -> Result<()> {
    use image::ImageEncoder as _;
    let color =
        if image.channels() == 1 { image::ExtendedColorType::L8 } else { image::ExtendedColorType::Rgb8 };
    let mut bytes = Vec::new();
    image::codecs::png::PngEncoder::new(&mut bytes)
        .write_image(image.pixels(), image.width() as u32, image.height() as u32, color)
        .map_err(|e| RecipeError::io(path, std::io::Error::other(e.to_string())))?;
    std::fs::write(path, bytes).map_err(|e| RecipeError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_takes_each_class_in_turn() {
        assert_eq!(round_robin(&[0, 0, 0, 1, 2, 2], 5), vec![0, 3, 4, 1, 5]);
        assert_eq!(round_robin(&[1, 0], 9), vec![1, 0]);
        assert_eq!(round_robin(&[], 3), Vec::<usize>::new());
    }

    #[test]
    fn to_u8_undoes_to_tensor_and_normalize_exactly() {
        let pixels: Vec<u8> = (0..=255).flat_map(|v| [v, 255 - v, v / 2]).collect();
        let image = Image::new(16, 16, 3, pixels.clone());
        let n = Normalize::imagenet();
        let t = n.to_tensor_normalized(&image).unwrap();
        assert_eq!(to_u8(&t, Some(&n)).pixels(), pixels.as_slice());
    }
}
