//! `RandomRotation` and `RandomAffine`: torchvision's draws (`uniform_` in float32, `round` of
//! the translations), then the Pillow-exact [`rotate_with`] / [`affine_with`].

use crate::error::Result;
use crate::geometry::{affine_with, rotate_with};
use crate::image::Image;
use crate::resample::InterpolationMode;
use crate::torch_draws::uniform_f32;
use rand::RngCore;

/// torchvision's `_setup_angle`: a number `d` is `(-d, d)`.
fn symmetric(name: &str, d: f64) -> (f64, f64) {
    assert!(d >= 0.0 && d.is_finite(), "{name} must be a non-negative number, got {d}");
    (-d, d)
}

fn ordered(name: &str, (lo, hi): (f64, f64)) -> (f64, f64) {
    assert!(lo.is_finite() && hi.is_finite() && lo <= hi, "{name} range ({lo}, {hi}) must be ordered");
    (lo, hi)
}

/// `torchvision.transforms.RandomRotation(degrees, interpolation=NEAREST, expand=False,
/// center=None, fill=0)` on a PIL image: an angle `torch.empty(1).uniform_(lo, hi)` (float32),
/// then `F.rotate` (Pillow's `Image.rotate`, [`rotate_with`]), counter-clockwise.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomRotation {
    degrees: (f64, f64),
    interpolation: InterpolationMode,
    expand: bool,
    center: Option<[f64; 2]>,
    fill: Vec<u8>,
}

impl RandomRotation {
    /// Angles in `(-degrees, degrees)`, nearest, not expanded, about the centre, fill 0.
    ///
    /// # Panics
    /// If `degrees` is negative or not finite (torchvision raises).
    pub fn new(degrees: f64) -> Self {
        Self::range(symmetric("RandomRotation degrees", degrees))
    }

    /// Angles in `(min, max)` (torchvision's `degrees=(min, max)`).
    ///
    /// # Panics
    /// If the range is not ordered or not finite.
    pub fn range(degrees: (f64, f64)) -> Self {
        RandomRotation {
            degrees: ordered("RandomRotation degrees", degrees),
            interpolation: InterpolationMode::Nearest,
            expand: false,
            center: None,
            fill: vec![],
        }
    }

    /// Samples with `mode`: nearest (the default), bilinear or bicubic, the modes PIL's rotate
    /// has; another is an error when the transform runs.
    pub fn with_interpolation(mut self, mode: InterpolationMode) -> Self {
        self.interpolation = mode;
        self
    }

    /// Grows the output to hold the whole turned image (`expand=True`).
    pub fn with_expand(mut self, expand: bool) -> Self {
        self.expand = expand;
        self
    }

    /// Turns about `(x, y)` (torchvision's `center`, origin at the top-left corner).
    pub fn with_center(mut self, center: [f64; 2]) -> Self {
        self.center = Some(center);
        self
    }

    /// The fill outside the turned image: one value, or one per channel.
    pub fn with_fill(mut self, fill: &[u8]) -> Self {
        self.fill = fill.to_vec();
        self
    }

    /// The angle range.
    pub fn degrees(&self) -> (f64, f64) {
        self.degrees
    }

    /// torchvision's `get_params`: `float(torch.empty(1).uniform_(lo, hi).item())`.
    pub fn get_params<R: RngCore + ?Sized>(&self, rng: &mut R) -> f64 {
        f64::from(uniform_f32(rng, self.degrees.0, self.degrees.1))
    }

    /// The transform with draws from any generator (a [`crate::TorchGenerator`] seeded as
    /// `torch.manual_seed(s)` gives torchvision's image for that seed).
    ///
    /// # Errors
    /// When `fill` fits neither 1 nor the image's channels, or the mode is not nearest,
    /// bilinear or bicubic.
    pub fn apply_with<R: RngCore + ?Sized>(&self, image: Image, rng: &mut R) -> Result<Image> {
        let angle = self.get_params(rng);
        rotate_with(&image, angle, self.interpolation, self.expand, self.center, &self.fill)
    }
}

/// The parameters [`RandomAffine`] draws: torchvision's `get_params` result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AffineParams {
    /// Degrees, counter-clockwise.
    pub angle: f64,
    /// Whole pixels, `(dx, dy)`.
    pub translate: [i64; 2],
    /// The scale factor.
    pub scale: f64,
    /// Degrees, `(x, y)`.
    pub shear: [f64; 2],
}

/// `torchvision.transforms.RandomAffine(degrees, translate=None, scale=None, shear=None,
/// interpolation=NEAREST, fill=0, center=None)` on a PIL image.
///
/// Draws as torchvision's `get_params`, each `torch.empty(1).uniform_` in float32: the angle;
/// with `translate = (a, b)` a shift `round(uniform(-a * width, a * width))` then the same for
/// `b * height` (half to even); with `scale` a factor; with `shear` an x shear, and a y shear
/// when four values were given. Then `F.affine` ([`affine_with`], Pillow's engines), the output
/// the input's size.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomAffine {
    degrees: (f64, f64),
    translate: Option<(f64, f64)>,
    scale: Option<(f64, f64)>,
    shear: Option<[f64; 4]>,
    shear_y: bool,
    interpolation: InterpolationMode,
    fill: Vec<u8>,
    center: Option<[f64; 2]>,
}

impl RandomAffine {
    /// Rotation in `(-degrees, degrees)` (0 for none: the angle is still drawn, as
    /// torchvision's), no translation, scale or shear, nearest, fill 0.
    ///
    /// # Panics
    /// If `degrees` is negative or not finite.
    pub fn new(degrees: f64) -> Self {
        Self::range(symmetric("RandomAffine degrees", degrees))
    }

    /// Rotation in `(min, max)`.
    ///
    /// # Panics
    /// If the range is not ordered or not finite.
    pub fn range(degrees: (f64, f64)) -> Self {
        RandomAffine {
            degrees: ordered("RandomAffine degrees", degrees),
            translate: None,
            scale: None,
            shear: None,
            shear_y: false,
            interpolation: InterpolationMode::Nearest,
            fill: vec![],
            center: None,
        }
    }

    /// Shifts of up to `(a * width, b * height)` pixels either way (`translate=(a, b)`).
    ///
    /// # Panics
    /// If a fraction is outside `[0, 1]` (torchvision raises).
    pub fn with_translate(mut self, a: f64, b: f64) -> Self {
        assert!((0.0..=1.0).contains(&a) && (0.0..=1.0).contains(&b), "translate values must be in [0, 1]");
        self.translate = Some((a, b));
        self
    }

    /// A scale factor in `[min, max]` (`scale=(min, max)`).
    ///
    /// # Panics
    /// If a bound is not positive or the range is not ordered.
    pub fn with_scale(mut self, min: f64, max: f64) -> Self {
        assert!(min > 0.0 && max > 0.0, "scale values must be positive");
        self.scale = Some(ordered("RandomAffine scale", (min, max)));
        self
    }

    /// An x shear in `(-degrees, degrees)` (`shear=degrees`).
    ///
    /// # Panics
    /// If `degrees` is negative or not finite.
    pub fn with_shear(self, degrees: f64) -> Self {
        self.with_shear_x(symmetric("RandomAffine shear", degrees))
    }

    /// An x shear in `(min, max)` (`shear=(min, max)`).
    ///
    /// # Panics
    /// If the range is not ordered or not finite.
    pub fn with_shear_x(mut self, x: (f64, f64)) -> Self {
        let (lo, hi) = ordered("RandomAffine shear", x);
        self.shear = Some([lo, hi, 0.0, 0.0]);
        self.shear_y = false;
        self
    }

    /// An x shear in `x` and a y shear in `y` (`shear=(x0, x1, y0, y1)`).
    ///
    /// # Panics
    /// If a range is not ordered or not finite.
    pub fn with_shear_xy(mut self, x: (f64, f64), y: (f64, f64)) -> Self {
        let ((a, b), (c, d)) = (ordered("RandomAffine shear", x), ordered("RandomAffine shear", y));
        self.shear = Some([a, b, c, d]);
        self.shear_y = true;
        self
    }

    /// Samples with `mode`: nearest (the default), bilinear or bicubic.
    pub fn with_interpolation(mut self, mode: InterpolationMode) -> Self {
        self.interpolation = mode;
        self
    }

    /// The fill outside the transformed image: one value, or one per channel.
    pub fn with_fill(mut self, fill: &[u8]) -> Self {
        self.fill = fill.to_vec();
        self
    }

    /// The fixed point of rotation, scale and shear, `(x, y)` (default the image centre).
    pub fn with_center(mut self, center: [f64; 2]) -> Self {
        self.center = Some(center);
        self
    }

    /// torchvision's `get_params` for an image of `width x height`, its draws in its order.
    pub fn get_params<R: RngCore + ?Sized>(&self, width: usize, height: usize, rng: &mut R) -> AffineParams {
        let draw = |rng: &mut R, (lo, hi): (f64, f64)| f64::from(uniform_f32(rng, lo, hi));
        let angle = draw(rng, self.degrees);
        let translate = match self.translate {
            Some((a, b)) => {
                let (max_dx, max_dy) = (a * width as f64, b * height as f64);
                let tx = draw(rng, (-max_dx, max_dx)).round_ties_even() as i64;
                let ty = draw(rng, (-max_dy, max_dy)).round_ties_even() as i64;
                [tx, ty]
            }
            None => [0, 0],
        };
        let scale = self.scale.map_or(1.0, |r| draw(rng, r));
        let mut shear = [0.0, 0.0];
        if let Some([a, b, c, d]) = self.shear {
            shear[0] = draw(rng, (a, b));
            if self.shear_y {
                shear[1] = draw(rng, (c, d));
            }
        }
        AffineParams { angle, translate, scale, shear }
    }

    /// The transform with draws from any generator (a [`crate::TorchGenerator`] seeded as
    /// `torch.manual_seed(s)` gives torchvision's image for that seed).
    ///
    /// # Errors
    /// As [`affine_with`].
    pub fn apply_with<R: RngCore + ?Sized>(&self, image: Image, rng: &mut R) -> Result<Image> {
        let p = self.get_params(image.width(), image.height(), rng);
        let translate = [p.translate[0] as f64, p.translate[1] as f64];
        affine_with(&image, p.angle, translate, p.scale, p.shear, self.center, &self.fill, self.interpolation)
    }
}

macro_rules! image_transform_with_torch_draws {
    ($t:ty, $name:literal) => {
        /// [`Transform::apply`](crate::Transform::apply) draws with torchvision's rules from the
        /// sample's generator; `apply_torch` from torch's.
        impl $crate::transform::Transform for $t {
            fn apply(
                &self,
                input: $crate::transform::Sample,
                rng: &mut torchlight_base::seed::Rng,
            ) -> $crate::error::Result<$crate::transform::Sample> {
                let image = $crate::transform::expect_image(input, $name)?;
                Ok($crate::transform::Sample::Image(self.apply_with(image, rng)?))
            }

            fn as_any(&self) -> &dyn std::any::Any {
                self
            }

            fn apply_torch(
                &self,
                input: $crate::transform::Sample,
                g: &mut dyn rand::RngCore,
            ) -> Option<$crate::error::Result<$crate::transform::Sample>> {
                Some(
                    $crate::transform::expect_image(input, $name)
                        .and_then(|image| Ok($crate::transform::Sample::Image(self.apply_with(image, g)?))),
                )
            }
        }
    };
}
pub(crate) use image_transform_with_torch_draws;

image_transform_with_torch_draws!(RandomRotation, "RandomRotation");
image_transform_with_torch_draws!(RandomAffine, "RandomAffine");
