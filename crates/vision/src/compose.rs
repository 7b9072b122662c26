//! `Compose`: transforms in sequence, with adjacent pairs fused where that saves passes.

use crate::center_crop::{center_axis, CenterCrop};
use crate::error::Result;
use crate::normalize::Normalize;
use crate::resample::{resize_bilinear, Rect};
use crate::resize::Resize;
use crate::to_tensor::ToTensor;
use crate::transform::{expect_image, Sample, Transform};
use std::any::Any;
use std::sync::Arc;
use torchlight_base::seed::Rng;

/// `torchvision.transforms.Compose([...])`: applies its transforms in order.
///
/// Adjacent pairs with a cheaper joint form run fused, with bit-identical results:
/// - `Resize` then `CenterCrop` computes only the pixels the crop keeps;
/// - `ToTensor` then `Normalize` maps each `u8` through a per-channel table of the normalized
///   value in one pass.
///
/// (`RandomResizedCrop` already resizes its box in place, without copying the crop.)
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

    /// The steps that run, after fusion (what [`Transform::apply`] applies in order).
    #[cfg(feature = "libjpeg-turbo")]
    pub(crate) fn plan(&self) -> &[Arc<dyn Transform>] {
        &self.plan
    }

    /// How many steps run after fusion (fewer than [`Compose::transforms`] when pairs fused).
    pub fn fused_len(&self) -> usize {
        self.plan.len()
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
}

fn fuse(transforms: &[Arc<dyn Transform>]) -> Vec<Arc<dyn Transform>> {
    let mut plan: Vec<Arc<dyn Transform>> = Vec::with_capacity(transforms.len());
    let mut i = 0;
    while i < transforms.len() {
        let (a, b) = (transforms[i].as_any(), transforms.get(i + 1).map(|t| t.as_any()));
        if let (Some(resize), Some(crop)) =
            (a.downcast_ref::<Resize>(), b.and_then(|b| b.downcast_ref::<CenterCrop>()))
        {
            plan.push(Arc::new(ResizeCenterCrop { resize: *resize, crop: *crop }));
            i += 2;
        } else if let (Some(_), Some(norm)) =
            (a.downcast_ref::<ToTensor>(), b.and_then(|b| b.downcast_ref::<Normalize>()))
        {
            plan.push(Arc::new(ToTensorNormalize(norm.clone())));
            i += 2;
        } else {
            plan.push(transforms[i].clone());
            i += 1;
        }
    }
    plan
}

/// `Resize` then `CenterCrop`, resampling only the kept window.
#[derive(Debug)]
struct ResizeCenterCrop {
    resize: Resize,
    crop: CenterCrop,
}

impl Transform for ResizeCenterCrop {
    fn apply(&self, input: Sample, _rng: &mut Rng) -> Result<Sample> {
        let image = expect_image(input, "Resize")?;
        let (rh, rw) = self.resize.output_size(image.height(), image.width());
        let (ch, cw) = self.crop.size();
        if ch > rh || cw > rw || (rh, rw) == (image.height(), image.width()) {
            // Padding needed, or no resize at all: the plain steps are as cheap.
            return Ok(Sample::Image(self.crop.crop(&self.resize.resize(image))));
        }
        let (left, _, _) = center_axis(rw, cw);
        let (top, _, _) = center_axis(rh, ch);
        let full = Rect::new(0, 0, image.width(), image.height());
        Ok(Sample::Image(resize_bilinear(&image, full, rw, rh, Rect::new(left, top, cw, ch))))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// `ToTensor` then `Normalize` through one lookup table.
#[derive(Debug)]
struct ToTensorNormalize(Normalize);

impl Transform for ToTensorNormalize {
    fn apply(&self, input: Sample, _rng: &mut Rng) -> Result<Sample> {
        let image = expect_image(input, "ToTensor")?;
        Ok(Sample::Tensor(self.0.to_tensor_normalized(&image)?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
