//! `RandomErasing`: a random box of the normalised tensor set to a value, with torchvision's
//! draws in torchvision's order.

use crate::error::{Result, VisionError};
use crate::torch_draws::{bernoulli, normal_f32, randint, uniform_f32};
use crate::transform::{Sample, TensorImage, Transform};
use rand::RngCore;
use std::any::Any;
use torchlight_base::seed::Rng;

/// What [`RandomErasing`] writes into the box (torchvision's `value`).
#[derive(Debug, Clone, PartialEq)]
pub enum EraseValue {
    /// One value for every channel (torchvision's number; `0` by default), or one per channel.
    Constant(Vec<f32>),
    /// Standard normal values, one per erased element (torchvision's `'random'`).
    Random,
}

/// The box and values one [`RandomErasing`] draw chose (torchvision's `get_params` result).
#[derive(Debug, Clone, PartialEq)]
pub struct ErasingParams {
    /// First row (`i`).
    pub top: usize,
    /// First column (`j`).
    pub left: usize,
    /// Rows (`h`, possibly 0).
    pub height: usize,
    /// Columns (`w`, possibly 0).
    pub width: usize,
    /// `channels * height * width` normals for [`EraseValue::Random`], else empty.
    pub random: Vec<f32>,
}

/// `torchvision.transforms.RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0)`
/// on a float `[C, H, W]` tensor (after `ToTensor`/`Normalize`).
///
/// The draws are torchvision's, in its order: `torch.rand(1) < p`; then up to 10 tries of an
/// area fraction `uniform_(scale)` and a log-ratio `uniform_(log(ratio))` (float32 logs and
/// exp), `h = round(sqrt(area * ratio))`, `w = round(sqrt(area / ratio))` (half to even),
/// accepted when `h < H` and `w < W`; for `'random'` the normals of the box, then
/// `randint(0, H - h + 1)` and `randint(0, W - w + 1)`. When no try fits the image is returned
/// as it was. With a [`torchlight_data::TorchGenerator`] seeded as `torch.manual_seed(s)`,
/// [`RandomErasing::apply_with`] gives torchvision's tensor exactly (for `'random'`, the box
/// exactly and the normals up to the last bits: see [`crate::torch_draws::normal_f32`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RandomErasing {
    p: f64,
    scale: (f64, f64),
    ratio: (f64, f64),
    value: EraseValue,
}

impl Default for RandomErasing {
    fn default() -> Self {
        RandomErasing {
            p: 0.5,
            scale: (0.02, 0.33),
            ratio: (0.3, 3.3),
            value: EraseValue::Constant(vec![0.0]),
        }
    }
}

impl RandomErasing {
    /// Erasing with probability `p` and torchvision's default scale, ratio and value 0.
    ///
    /// # Panics
    /// If `p` is outside `[0, 1]` (torchvision raises).
    pub fn new(p: f64) -> Self {
        assert!((0.0..=1.0).contains(&p), "RandomErasing probability {p} must be in [0, 1]");
        RandomErasing { p, ..Self::default() }
    }

    /// Sets the range of the erased area as a fraction of the image's (default `(0.02, 0.33)`).
    ///
    /// # Panics
    /// If the range is outside `[0, 1]` (torchvision raises).
    pub fn with_scale(mut self, min: f64, max: f64) -> Self {
        assert!(
            min >= 0.0 && max <= 1.0 && min <= max,
            "RandomErasing scale ({min}, {max}) must lie in [0, 1]"
        );
        self.scale = (min, max);
        self
    }

    /// Sets the range of the box's aspect ratio `h / w` (default `(0.3, 3.3)`).
    ///
    /// # Panics
    /// If the range is empty or not positive.
    pub fn with_ratio(mut self, min: f64, max: f64) -> Self {
        assert!(0.0 < min && min <= max, "RandomErasing ratio ({min}, {max}) must be positive and ordered");
        self.ratio = (min, max);
        self
    }

    /// Sets the value written into the box.
    pub fn with_value(mut self, value: EraseValue) -> Self {
        self.value = value;
        self
    }

    /// The probability of erasing.
    pub fn p(&self) -> f64 {
        self.p
    }

    /// torchvision's `get_params` for a `[channels, height, width]` tensor: the box, or `None`
    /// when no try fits (the image is kept).
    pub fn get_params<R: RngCore + ?Sized>(
        &self,
        channels: usize,
        height: usize,
        width: usize,
        rng: &mut R,
    ) -> Option<ErasingParams> {
        let area = (height * width) as f64;
        let (log_lo, log_hi) = ((self.ratio.0 as f32).ln(), (self.ratio.1 as f32).ln());
        for _ in 0..10 {
            let erase_area = area * f64::from(uniform_f32(rng, self.scale.0, self.scale.1));
            let aspect = f64::from(uniform_f32(rng, f64::from(log_lo), f64::from(log_hi)).exp());
            let h = (erase_area * aspect).sqrt().round_ties_even() as usize;
            let w = (erase_area / aspect).sqrt().round_ties_even() as usize;
            if !(h < height && w < width) {
                continue;
            }
            let random = match self.value {
                EraseValue::Random => normal_f32(rng, channels * h * w),
                EraseValue::Constant(_) => Vec::new(),
            };
            let top = randint(rng, 0, (height - h + 1) as i64) as usize;
            let left = randint(rng, 0, (width - w + 1) as i64) as usize;
            return Some(ErasingParams { top, left, height: h, width: w, random });
        }
        None
    }

    /// The transform with draws from any generator (a [`torchlight_data::TorchGenerator`] for
    /// torchvision's exact draws); [`Transform::apply`] is this with the sample's generator.
    ///
    /// # Errors
    /// When the value has neither 1 nor `channels` entries (torchvision's `ValueError`), checked
    /// only when the draw erases, as torchvision checks it.
    pub fn apply_with<R: RngCore + ?Sized>(
        &self,
        mut image: TensorImage,
        rng: &mut R,
    ) -> Result<TensorImage> {
        if !bernoulli(rng, self.p) {
            return Ok(image);
        }
        if let EraseValue::Constant(v) = &self.value {
            if v.len() != 1 && v.len() != image.channels {
                return Err(VisionError::Transform {
                    transform: "RandomErasing",
                    message: format!(
                        "{} values for a {}-channel tensor: give 1 or {}",
                        v.len(),
                        image.channels,
                        image.channels
                    ),
                });
            }
        }
        let (c, h, w) = (image.channels, image.height, image.width);
        let Some(p) = self.get_params(c, h, w, rng) else {
            return Ok(image);
        };
        for ch in 0..c {
            for y in 0..p.height {
                let row = (ch * h + p.top + y) * w + p.left;
                let dst = &mut image.data[row..row + p.width];
                match &self.value {
                    EraseValue::Constant(v) => dst.fill(v[if v.len() == 1 { 0 } else { ch }]),
                    EraseValue::Random => {
                        let src = (ch * p.height + y) * p.width;
                        dst.copy_from_slice(&p.random[src..src + p.width]);
                    }
                }
            }
        }
        Ok(image)
    }
}

impl Transform for RandomErasing {
    fn apply(&self, input: Sample, rng: &mut Rng) -> Result<Sample> {
        match input {
            Sample::Tensor(t) => Ok(Sample::Tensor(self.apply_with(t, rng)?)),
            Sample::Image(_) => Err(VisionError::Transform {
                transform: "RandomErasing",
                message: "works on tensors; place it after ToTensor (and Normalize)".into(),
            }),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, input: Sample, g: &mut dyn RngCore) -> Option<Result<Sample>> {
        Some(match input {
            Sample::Tensor(t) => self.apply_with(t, g).map(Sample::Tensor),
            image => self.apply(image, &mut torchlight_base::seed::rng_from_seed(0)),
        })
    }
}
