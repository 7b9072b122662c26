//! `gaussian_blur` and `GaussianBlur`: torchvision's float32 kernel, reflect padding and
//! rounding, which it applies to PIL images through a float tensor.

use crate::auto_augment::torch_linspace_f32;
use crate::error::{Result, VisionError};
use crate::image::Image;
use crate::random_affine::image_transform_with_torch_draws;
use crate::torch_draws::uniform_f32;
use rand::RngCore;

/// torchvision's `_get_gaussian_kernel1d(k, sigma, float32)`: `x = linspace(-(k-1)/2,
/// (k-1)/2, k)`, `pdf = exp(-0.5 * (x / sigma)^2)`, `pdf / pdf.sum()`, each step in `f32`.
fn kernel1d(k: usize, sigma: f32) -> Vec<f32> {
    let half = (k - 1) as f64 * 0.5;
    let pdf: Vec<f32> = torch_linspace_f32(-half, half, k)
        .into_iter()
        .map(|x| {
            let t = x / sigma;
            (-0.5f32 * (t * t)).exp()
        })
        .collect();
    let sum: f32 = pdf.iter().sum();
    pdf.iter().map(|p| p / sum).collect()
}

/// torch's `reflect` padding index: `-1 -> 1`, `n -> n - 2` (the edge not repeated).
fn reflect(i: isize, n: isize) -> usize {
    let i = if i < 0 { -i } else { i };
    (if i >= n { 2 * (n - 1) - i } else { i }) as usize
}

/// `F.gaussian_blur(img, [kx, ky], [sigma_x, sigma_y])` on a PIL image, as torchvision runs it:
/// the image to a float32 tensor, the `ky x kx` kernel (the outer product of the two float32
/// 1-D kernels), reflect padding of `kx / 2` and `ky / 2`, the convolution, `torch.round`
/// (half to even) and back to `u8`.
///
/// The kernel is torchvision's in `f32`; the convolution sums in `f64` where libtorch sums in
/// `f32` in its own order (which depends on the CPU's kernels), so a value within float32
/// rounding of `x.5` could round the other way: within 1 of torchvision's, and measured equal on
/// every byte (`tests/it/random_transforms.rs`: 150 seeds, 96 630 bytes).
///
/// # Errors
/// When a kernel size is even or 0, a sigma is not positive, or the image is not larger than
/// half the kernel on each side (torch's reflect padding needs that).
pub fn gaussian_blur(image: &Image, kernel_size: [usize; 2], sigma: [f64; 2]) -> Result<Image> {
    let err = |message: String| VisionError::Transform { transform: "gaussian_blur", message };
    let [kx, ky] = kernel_size;
    if kx % 2 == 0 || ky % 2 == 0 {
        return Err(err(format!("kernel_size must be odd and positive, got {kernel_size:?}")));
    }
    if !sigma.iter().all(|s| *s > 0.0 && s.is_finite()) {
        return Err(err(format!("sigma must be positive, got {sigma:?}")));
    }
    let (w, h, c) = (image.width(), image.height(), image.channels());
    let (px, py) = (kx / 2, ky / 2);
    if px >= w.max(1) || py >= h.max(1) {
        return Err(err(format!(
            "a {kx}x{ky} kernel pads {px} and {py} pixels, which must be less than the {w}x{h} image's sides"
        )));
    }
    let (wx, wy) = (kernel1d(kx, sigma[0] as f32), kernel1d(ky, sigma[1] as f32));
    let kernel: Vec<f64> = wy.iter().flat_map(|a| wx.iter().map(move |b| f64::from(a * b))).collect();
    let src = image.pixels();
    let cols: Vec<Vec<usize>> = (0..w)
        .map(|x| (0..kx).map(|j| reflect(x as isize + j as isize - px as isize, w as isize)).collect())
        .collect();
    let mut out = vec![0u8; src.len()];
    for y in 0..h {
        let rows: Vec<usize> =
            (0..ky).map(|i| reflect(y as isize + i as isize - py as isize, h as isize)).collect();
        for (x, cols) in cols.iter().enumerate() {
            for ch in 0..c {
                let mut acc = 0.0f64;
                for (i, &r) in rows.iter().enumerate() {
                    let krow = &kernel[i * kx..(i + 1) * kx];
                    for (k, &col) in krow.iter().zip(cols) {
                        acc += k * f64::from(src[(r * w + col) * c + ch]);
                    }
                }
                out[(y * w + x) * c + ch] = (acc as f32).round_ties_even().clamp(0.0, 255.0) as u8;
            }
        }
    }
    Ok(Image::new(w, h, c, out))
}

/// `torchvision.transforms.GaussianBlur(kernel_size, sigma=(0.1, 2.0))` on a PIL image: a sigma
/// `torch.empty(1).uniform_(lo, hi)` (float32, drawn even for a fixed sigma), then
/// [`gaussian_blur`] with it on both axes.
#[derive(Debug, Clone, PartialEq)]
pub struct GaussianBlur {
    kernel_size: [usize; 2],
    sigma: (f64, f64),
}

impl GaussianBlur {
    /// A `kernel_size x kernel_size` kernel, sigma in `(0.1, 2.0)`.
    ///
    /// # Panics
    /// If `kernel_size` is even or 0.
    pub fn new(kernel_size: usize) -> Self {
        Self::rect(kernel_size, kernel_size)
    }

    /// A kernel `kx` wide and `ky` high (torchvision's `kernel_size=(kx, ky)`: its first value
    /// is the horizontal size).
    ///
    /// # Panics
    /// If a size is even or 0.
    pub fn rect(kx: usize, ky: usize) -> Self {
        assert!(
            kx % 2 == 1 && ky % 2 == 1,
            "GaussianBlur kernel sizes must be odd and positive, got ({kx}, {ky})"
        );
        GaussianBlur { kernel_size: [kx, ky], sigma: (0.1, 2.0) }
    }

    /// Sigma drawn in `[min, max]` (`sigma=(min, max)`; equal bounds for a fixed sigma).
    ///
    /// # Panics
    /// Unless `0 < min <= max`.
    pub fn with_sigma(mut self, min: f64, max: f64) -> Self {
        assert!(
            0.0 < min && min <= max && max.is_finite(),
            "GaussianBlur sigma ({min}, {max}) must satisfy 0 < min <= max"
        );
        self.sigma = (min, max);
        self
    }

    /// torchvision's `get_params`: `torch.empty(1).uniform_(min, max).item()`.
    pub fn get_params<R: RngCore + ?Sized>(&self, rng: &mut R) -> f64 {
        f64::from(uniform_f32(rng, self.sigma.0, self.sigma.1))
    }

    /// The transform with draws from any generator (a [`crate::TorchGenerator`] seeded as
    /// `torch.manual_seed(s)` draws torchvision's sigma for that seed).
    ///
    /// # Errors
    /// As [`gaussian_blur`].
    pub fn apply_with<R: RngCore + ?Sized>(&self, image: Image, rng: &mut R) -> Result<Image> {
        let sigma = self.get_params(rng);
        gaussian_blur(&image, self.kernel_size, [sigma, sigma])
    }
}

image_transform_with_torch_draws!(GaussianBlur, "GaussianBlur");
