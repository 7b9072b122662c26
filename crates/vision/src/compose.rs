//! `Compose`: transforms in sequence, with adjacent steps fused where a step offers it.

use crate::crop_box::CropBox;
use crate::error::{Result, VisionError};
use crate::image::Image;
use crate::transform::{LeadingCrop, Sample, Transform};
use std::any::Any;
use std::sync::Arc;
use torchlight_base::seed::Rng;

/// `torchvision.transforms.Compose([...])`: applies its transforms in order.
///
/// Adjacent steps with a cheaper joint form run fused, with bit-identical results: each step
/// is offered the next through [`Transform::fuse`] (the fused result is offered the one after
/// that), so these run as one:
/// - `Resize` then `CenterCrop` computes only the pixels the crop keeps;
/// - `ToTensor` then `Normalize` maps each `u8` through a per-channel table of the normalized
///   value in one pass.
///
/// (`RandomResizedCrop` already resizes its box in place, without copying the crop.) A
/// `Compose` whose first step (after fusion) has a [`Transform::leading_crop`] has one too: the
/// first step's box, then the first step on the box's pixels and the other steps after it.
#[derive(Debug, Clone, Default)]
pub struct Compose {
    transforms: Vec<Arc<dyn Transform>>,
    plan: Vec<Arc<dyn Transform>>,
}

impl Compose {
    /// Composes `transforms`, applied first to last.
    pub fn new(transforms: Vec<Box<dyn Transform>>) -> Self {
        let transforms: Vec<Arc<dyn Transform>> = transforms.into_iter().map(Arc::from).collect();
        let plan = fuse(&transforms);
        Compose { transforms, plan }
    }

    /// This pipeline followed by `transform`.
    pub fn then(mut self, transform: impl Transform + 'static) -> Self {
        self.transforms.push(Arc::new(transform));
        self.plan = fuse(&self.transforms);
        self
    }

    /// The transforms as given (before fusion).
    pub fn transforms(&self) -> &[Arc<dyn Transform>] {
        &self.transforms
    }

    /// How many steps run after fusion (fewer than [`Compose::transforms`] when pairs fused).
    pub fn fused_len(&self) -> usize {
        self.plan.len()
    }

    /// The first step's crop, when it has one.
    /// The steps with torchvision's draws from `g` ([`Transform::apply_torch`]): with a
    /// [`crate::TorchGenerator`] seeded as `torch.manual_seed(s)`, torchvision's output for the
    /// same steps after that call.
    ///
    /// # Errors
    /// A step's own error, or [`VisionError::Transform`] naming the first step that has no
    /// torch-draw path.
    pub fn apply_like_torch(&self, mut input: Sample, g: &mut dyn rand::RngCore) -> Result<Sample> {
        for (i, t) in self.transforms.iter().enumerate() {
            input = match t.as_any().downcast_ref::<Compose>() {
                Some(inner) => inner.apply_like_torch(input, g)?,
                None => t.apply_torch(input, g).ok_or_else(|| VisionError::Transform {
                    transform: "Compose",
                    message: format!(
                        "step {} ({}) has no torch-draw path (Transform::apply_torch), so torchvision's draws cannot be repeated through it",
                        i + 1,
                        step_name(t.as_ref())
                    ),
                })??,
            };
        }
        Ok(input)
    }

    /// [`Compose::apply_like_torch`] on torch's whole generator state: each step's
    /// [`Transform::apply_torch_rng`], so a run of calls on one [`crate::TorchRng`] repeats a
    /// run of torchvision calls after one `torch.manual_seed`, the spare normal carried from
    /// one call to the next as torch carries it.
    ///
    /// # Errors
    /// As [`Compose::apply_like_torch`].
    pub fn apply_like_torch_rng(&self, mut input: Sample, g: &mut crate::TorchRng) -> Result<Sample> {
        for (i, t) in self.transforms.iter().enumerate() {
            input = match t.as_any().downcast_ref::<Compose>() {
                Some(inner) => inner.apply_like_torch_rng(input, g)?,
                None => t.apply_torch_rng(input, g).ok_or_else(|| VisionError::Transform {
                    transform: "Compose",
                    message: format!(
                        "step {} ({}) has no torch-draw path (Transform::apply_torch), so torchvision's draws cannot be repeated through it",
                        i + 1,
                        step_name(t.as_ref())
                    ),
                })??,
            };
        }
        Ok(input)
    }

    fn head_crop(&self) -> Option<&dyn LeadingCrop> {
        self.plan.first().and_then(|t| t.leading_crop())
    }
}

impl Transform for Compose {
    fn apply(&self, mut input: Sample, rng: &mut Rng) -> Result<Sample> {
        for t in &self.plan {
            input = t.apply(input, rng)?;
        }
        Ok(input)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn leading_crop(&self) -> Option<&dyn LeadingCrop> {
        self.head_crop()?;
        Some(self)
    }

    /// The steps one after the other, unfused (a fused step equals its pair bit for bit and
    /// makes the same draws), each through its own `apply_torch`; `None` when a step has none.
    fn apply_torch(&self, mut input: Sample, g: &mut dyn rand::RngCore) -> Option<Result<Sample>> {
        for t in &self.transforms {
            input = match t.apply_torch(input, g)? {
                Ok(sample) => sample,
                Err(e) => return Some(Err(e)),
            };
        }
        Some(Ok(input))
    }
}

/// The first step's box, then the first step on its pixels and the rest after. (Only reached
/// through [`Transform::leading_crop`], which is `None` without a first crop; called directly
/// on such a `Compose`, the box is the whole image and the steps run as [`Transform::apply`],
/// which keeps the invariant too.)
impl LeadingCrop for Compose {
    fn crop_box(&self, height: usize, width: usize, rng: &mut Rng) -> CropBox {
        match self.head_crop() {
            Some(crop) => crop.crop_box(height, width, rng),
            None => CropBox { top: 0, left: 0, height, width },
        }
    }

    fn apply_cropped(&self, region: Image, rng: &mut Rng) -> Result<Sample> {
        let Some(crop) = self.head_crop() else { return self.apply(Sample::Image(region), rng) };
        let mut sample = crop.apply_cropped(region, rng)?;
        for t in &self.plan[1..] {
            sample = t.apply(sample, rng)?;
        }
        Ok(sample)
    }
}

/// The steps that run: left to right, each step offered the next through [`Transform::fuse`].
/// A step's type name as its `Debug` form starts (`RandomResizedCrop { .. }` -> `RandomResizedCrop`).
fn step_name(t: &dyn Transform) -> String {
    let debug = format!("{t:?}");
    debug.split([' ', '(', '{']).next().unwrap_or_default().to_string()
}

fn fuse(transforms: &[Arc<dyn Transform>]) -> Vec<Arc<dyn Transform>> {
    let mut plan: Vec<Arc<dyn Transform>> = Vec::with_capacity(transforms.len());
    for t in transforms {
        if let Some(last) = plan.last_mut() {
            if let Some(fused) = last.fuse(t.as_ref()) {
                *last = Arc::from(fused);
                continue;
            }
        }
        plan.push(t.clone());
    }
    plan
}
