//! `RandomHorizontalFlip` and `RandomVerticalFlip`, and the plain `hflip` / `vflip`.

use crate::error::Result;
use crate::image::Image;
use crate::transform::{Sample, TensorImage, Transform};
use rand::Rng as _;
use std::any::Any;
use torchlight_base::seed::Rng;

/// Mirrors `image` left to right in place (`torchvision.transforms.functional.hflip`).
pub fn hflip(image: &mut Image) {
    let (w, c) = (image.width(), image.channels());
    if w == 0 {
        return;
    }
    for row in image.pixels_mut().chunks_exact_mut(w * c) {
        // Whole pixels swapped end for end, three bytes at a time; an `Image` has 1 or 3
        // channels.
        if c == 3 {
            for x in 0..w / 2 {
                let (left, right) = row.split_at_mut((w - 1 - x) * 3);
                left[x * 3..x * 3 + 3].swap_with_slice(&mut right[..3]);
            }
        } else {
            row.reverse();
        }
    }
}

/// Mirrors `image` top to bottom in place (`torchvision.transforms.functional.vflip`).
pub fn vflip(image: &mut Image) {
    let row = image.width() * image.channels();
    let h = image.height();
    let pixels = image.pixels_mut();
    for y in 0..h / 2 {
        let (top, bottom) = pixels.split_at_mut((h - 1 - y) * row);
        top[y * row..(y + 1) * row].swap_with_slice(&mut bottom[..row]);
    }
}

fn hflip_tensor(t: &mut TensorImage) {
    for row in t.data.chunks_exact_mut(t.width) {
        row.reverse();
    }
}

fn vflip_tensor(t: &mut TensorImage) {
    let (w, h) = (t.width, t.height);
    for plane in t.data.chunks_exact_mut(w * h) {
        for y in 0..h / 2 {
            let (top, bottom) = plane.split_at_mut((h - 1 - y) * w);
            top[y * w..(y + 1) * w].swap_with_slice(&mut bottom[..w]);
        }
    }
}

/// `torchvision.transforms.RandomHorizontalFlip(p=0.5)`: mirrors left to right when a uniform
/// draw from the sample's generator is below `p`. Works on images and tensors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomHorizontalFlip {
    p: f64,
}

/// `torchvision.transforms.RandomVerticalFlip(p=0.5)`: mirrors top to bottom when a uniform
/// draw from the sample's generator is below `p`. Works on images and tensors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomVerticalFlip {
    p: f64,
}

impl Default for RandomHorizontalFlip {
    fn default() -> Self {
        Self::new(0.5)
    }
}

impl Default for RandomVerticalFlip {
    fn default() -> Self {
        Self::new(0.5)
    }
}

impl RandomHorizontalFlip {
    /// Flips with probability `p`.
    ///
    /// # Panics
    /// If `p` is outside `[0, 1]`.
    pub fn new(p: f64) -> Self {
        assert!((0.0..=1.0).contains(&p), "flip probability must be in [0, 1], got {p}");
        RandomHorizontalFlip { p }
    }

    /// Whether this draw flips (one uniform draw from `rng`, like torchvision's `torch.rand(1) < p`).
    pub fn draw(&self, rng: &mut Rng) -> bool {
        rng.random::<f64>() < self.p
    }
}

impl RandomVerticalFlip {
    /// Flips with probability `p`.
    ///
    /// # Panics
    /// If `p` is outside `[0, 1]`.
    pub fn new(p: f64) -> Self {
        assert!((0.0..=1.0).contains(&p), "flip probability must be in [0, 1], got {p}");
        RandomVerticalFlip { p }
    }

    /// Whether this draw flips (one uniform draw from `rng`).
    pub fn draw(&self, rng: &mut Rng) -> bool {
        rng.random::<f64>() < self.p
    }
}

impl RandomHorizontalFlip {
    /// The flip of a `u8` image with torchvision's draw (`torch.rand(1) < p`) from any
    /// generator: with a [`crate::TorchGenerator`], torchvision's choice for that seed.
    pub fn apply_with<R: rand::RngCore + ?Sized>(&self, mut image: Image, rng: &mut R) -> Image {
        if crate::torch_draws::bernoulli(rng, self.p) {
            hflip(&mut image);
        }
        image
    }
}

impl Transform for RandomHorizontalFlip {
    fn apply(&self, mut input: Sample, rng: &mut Rng) -> Result<Sample> {
        if self.draw(rng) {
            match &mut input {
                Sample::Image(image) => hflip(image),
                Sample::Tensor(tensor) => hflip_tensor(tensor),
            }
        }
        Ok(input)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, mut input: Sample, g: &mut dyn rand::RngCore) -> Option<Result<Sample>> {
        if crate::torch_draws::bernoulli(g, self.p) {
            match &mut input {
                Sample::Image(image) => hflip(image),
                Sample::Tensor(tensor) => hflip_tensor(tensor),
            }
        }
        Some(Ok(input))
    }
}

impl Transform for RandomVerticalFlip {
    fn apply(&self, mut input: Sample, rng: &mut Rng) -> Result<Sample> {
        if self.draw(rng) {
            match &mut input {
                Sample::Image(image) => vflip(image),
                Sample::Tensor(tensor) => vflip_tensor(tensor),
            }
        }
        Ok(input)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn apply_torch(&self, mut input: Sample, g: &mut dyn rand::RngCore) -> Option<Result<Sample>> {
        if crate::torch_draws::bernoulli(g, self.p) {
            match &mut input {
                Sample::Image(image) => vflip(image),
                Sample::Tensor(tensor) => vflip_tensor(tensor),
            }
        }
        Some(Ok(input))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flips_mirror_pixels() {
        let img = Image::new(3, 2, 1, vec![1, 2, 3, 4, 5, 6]);
        let mut h = img.clone();
        hflip(&mut h);
        assert_eq!(h.pixels(), [3, 2, 1, 6, 5, 4]);
        let mut v = img.clone();
        vflip(&mut v);
        assert_eq!(v.pixels(), [4, 5, 6, 1, 2, 3]);
        let mut t = TensorImage { channels: 1, height: 2, width: 3, data: vec![1., 2., 3., 4., 5., 6.] };
        hflip_tensor(&mut t);
        assert_eq!(t.data, [3., 2., 1., 6., 5., 4.]);
        vflip_tensor(&mut t);
        assert_eq!(t.data, [6., 5., 4., 3., 2., 1.]);
    }
}
