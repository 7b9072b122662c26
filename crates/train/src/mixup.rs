//! `MixupCutMix`: torchvision v2's `MixUp`, `CutMix` and their `RandomChoice` as a
//! [`BatchTransform`] of `(images, labels)` batches, with timm's switches (`mixup_prob`,
//! `switch_prob`, `mixup_off_epoch`, label smoothing folded into the soft targets).

use crate::batch_transform::{BatchContext, BatchTransform};
use crate::error::{Result, TrainError};
use tch::{Device, Kind, Tensor};

/// Mixup and/or CutMix of a batch `(images [N, C, H, W], labels [N])` into `(mixed images,
/// soft targets [N, num_classes])`, drawing from torch's generator exactly as torchvision v2
/// does, so a batch mixed under a given torch seed equals torchvision's:
///
/// - Mixup alone is `v2.MixUp(alpha=mixup_alpha)`, CutMix alone `v2.CutMix(alpha=cutmix_alpha)`,
///   both `v2.RandomChoice([MixUp, CutMix], p=[1 - switch_prob, switch_prob])` (timm's
///   `switch_prob`, default 0.5: torchvision's equal choice).
/// - `mixup_prob` < 1 (timm's `mixup_prob`, default 1) wraps that in
///   `v2.RandomApply([...], p=mixup_prob)`; at 1 nothing is drawn for it, as in torchvision's
///   reference script, which applies the choice to every batch.
/// - From epoch `mixup_off_epoch` on (0-based, timm's `mixup_off_epoch`) nothing is mixed.
///
/// A batch that is not mixed (the `RandomApply` draw said no, or past the off epoch) still gets
/// soft targets: the one-hot labels, so the loss sees one kind of target all run. Label
/// smoothing `s` (timm folds it into the targets) is applied last, to every target:
/// `target * (1 - s) + s / num_classes`, which is what PyTorch's `cross_entropy` with
/// `label_smoothing = s` does to probability targets, so set it here *or* on the loss.
///
/// Pairs are consecutive samples (`roll(1, 0)`, torchvision's pairing; the loader shuffles).
/// Any batch size works, an odd last batch included: a batch of one sample is paired with
/// itself, so its image and target are unchanged (up to rounding in Mixup's sum). Labels may
/// also be probabilities `[N, num_classes]` already (torchvision accepts both).
///
/// As a [`BatchTransform`] the draws come from the batch's seeded torch generator
/// ([`BatchContext::with_torch_generator`]), so a run resumed mid-epoch mixes the rest of the
/// epoch as the uninterrupted run did. The draws are on the CPU generator (torchvision keeps
/// its Beta distribution there) whatever the device; the mixing runs on the batch's device,
/// with no read back of device memory. It also hands the Trainer the labels before mixing
/// ([`BatchContext::set_metric_target`]), so the training accuracy counts each prediction
/// against the sample's true label (the larger share of its image or not); a step on soft
/// targets outside the Trainer counts against their largest class (see `Classification`).
#[derive(Debug, Clone)]
pub struct MixupCutMix {
    num_classes: i64,
    mixup_alpha: f64,
    cutmix_alpha: f64,
    prob: f64,
    switch_prob: f64,
    off_epoch: Option<u64>,
    label_smoothing: f64,
}

/// Which mix a batch got.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mixed {
    /// Not mixed (one-hot targets).
    None,
    /// Mixup with this weight of the batch's own images.
    Mixup(f64),
    /// CutMix with this box `(x1, y1, x2, y2)` pasted from the paired image and the adjusted
    /// weight of the own image (its share of the area).
    CutMix((i64, i64, i64, i64), f64),
}

fn setting(setting: &str, value: impl ToString, reason: &str) -> TrainError {
    TrainError::InvalidSetting { setting: setting.into(), value: value.to_string(), reason: reason.into() }
}

impl MixupCutMix {
    /// Mixup with `mixup_alpha` and CutMix with `cutmix_alpha` over `num_classes` classes; an
    /// alpha of 0 turns that one off (timm's and torchvision's flags), and at least one must be
    /// positive.
    pub fn new(num_classes: usize, mixup_alpha: f64, cutmix_alpha: f64) -> Result<Self> {
        if num_classes == 0 {
            return Err(setting("mixup num_classes", 0, "must be at least 1"));
        }
        for (name, a) in [("mixup_alpha", mixup_alpha), ("cutmix_alpha", cutmix_alpha)] {
            if !(a.is_finite() && a >= 0.0) {
                return Err(setting(name, a, "must be a finite number >= 0 (0 turns it off)"));
            }
        }
        if mixup_alpha == 0.0 && cutmix_alpha == 0.0 {
            return Err(setting("mixup_alpha/cutmix_alpha", "0 and 0", "one of them must be positive"));
        }
        Ok(MixupCutMix {
            num_classes: num_classes as i64,
            mixup_alpha,
            cutmix_alpha,
            prob: 1.0,
            switch_prob: 0.5,
            off_epoch: None,
            label_smoothing: 0.0,
        })
    }

    /// torchvision's `v2.MixUp(alpha)`.
    pub fn mixup(num_classes: usize, alpha: f64) -> Result<Self> {
        Self::new(num_classes, alpha, 0.0)
    }

    /// torchvision's `v2.CutMix(alpha)`.
    pub fn cutmix(num_classes: usize, alpha: f64) -> Result<Self> {
        Self::new(num_classes, 0.0, alpha)
    }

    /// The probability of mixing a batch at all (timm's `mixup_prob`), in `[0, 1]`.
    pub fn with_prob(mut self, prob: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&prob) {
            return Err(setting("mixup_prob", prob, "must be in [0, 1]"));
        }
        self.prob = prob;
        Ok(self)
    }

    /// The probability of CutMix rather than Mixup when both are on (timm's `switch_prob`), in
    /// `[0, 1]`.
    pub fn with_switch_prob(mut self, switch_prob: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&switch_prob) {
            return Err(setting("mixup_switch_prob", switch_prob, "must be in [0, 1]"));
        }
        self.switch_prob = switch_prob;
        Ok(self)
    }

    /// Stop mixing from this 0-based epoch on (timm's `mixup_off_epoch`).
    pub fn with_off_epoch(mut self, epoch: u64) -> Self {
        self.off_epoch = Some(epoch);
        self
    }

    /// Label smoothing folded into the soft targets, in `[0, 1)`.
    pub fn with_label_smoothing(mut self, smoothing: f64) -> Result<Self> {
        if !(0.0..1.0).contains(&smoothing) {
            return Err(setting("label_smoothing", smoothing, "must be in [0, 1)"));
        }
        self.label_smoothing = smoothing;
        Ok(self)
    }

    /// The number of classes of the soft targets.
    pub fn num_classes(&self) -> usize {
        self.num_classes as usize
    }

    /// Whether batches of 0-based `epoch` are mixed (before `mixup_off_epoch`).
    pub fn active(&self, epoch: u64) -> bool {
        self.off_epoch.is_none_or(|off| epoch < off)
    }

    /// Mixes one batch of 0-based `epoch`, drawing from torch's default generators as they
    /// stand (wrap it in `torchlight_tensor::with_torch_seed` to seed them, as the
    /// [`BatchTransform`] does); returns the images, the soft targets and which mix it was.
    pub fn mix(&self, images: &Tensor, labels: &Tensor, epoch: u64) -> Result<(Tensor, Tensor, Mixed)> {
        self.check(images, labels)?;
        let _guard = torchlight_tensor::no_grad();
        let targets = self.one_hot(labels)?;
        let mut choice = Mixed::None;
        // torchvision's draws, in its order: RandomApply's `torch.rand(1)`, RandomChoice's
        // `torch.multinomial`, then the chosen transform's own.
        let apply = self.active(epoch) && (self.prob >= 1.0 || draw_uniform() < self.prob as f32);
        if apply {
            let cutmix = match (self.mixup_alpha > 0.0, self.cutmix_alpha > 0.0) {
                (true, true) => self.draw_choice(),
                (_, cutmix_only) => cutmix_only,
            };
            choice = if cutmix {
                let lam = draw_beta(self.cutmix_alpha);
                let size = images.size();
                let (h, w) = (size[size.len() - 2], size[size.len() - 1]);
                let r_x = Tensor::randint(w, [1], (Kind::Int64, Device::Cpu)).int64_value(&[0]);
                let r_y = Tensor::randint(h, [1], (Kind::Int64, Device::Cpu)).int64_value(&[0]);
                let r = 0.5 * (1.0 - lam).sqrt();
                let (rw, rh) = ((r * w as f64) as i64, (r * h as f64) as i64);
                let (x1, y1) = ((r_x - rw).max(0), (r_y - rh).max(0));
                let (x2, y2) = ((r_x + rw).min(w), (r_y + rh).min(h));
                let lam_adjusted = 1.0 - ((x2 - x1) * (y2 - y1)) as f64 / (w * h) as f64;
                Mixed::CutMix((x1, y1, x2, y2), lam_adjusted)
            } else {
                Mixed::Mixup(draw_beta(self.mixup_alpha))
            };
        }
        let (images, targets) = match choice {
            Mixed::None => (images.shallow_clone(), targets),
            Mixed::Mixup(lam) => (mix_lerp(images, lam), mix_lerp(&targets, lam)),
            Mixed::CutMix((x1, y1, x2, y2), lam) => {
                let out = images.copy();
                if x2 > x1 && y2 > y1 {
                    let rolled = images.roll([1], [0]);
                    let dims = images.dim() as i64;
                    let window = |t: &Tensor| t.narrow(dims - 2, y1, y2 - y1).narrow(dims - 1, x1, x2 - x1);
                    window(&out).copy_(&window(&rolled));
                }
                (out, mix_lerp(&targets, lam))
            }
        };
        let targets = if self.label_smoothing > 0.0 {
            let s = self.label_smoothing;
            targets.g_mul_scalar(1.0 - s).g_add_scalar(s / self.num_classes as f64)
        } else {
            targets
        };
        Ok((images, targets, choice))
    }

    /// An error naming what of the batch does not fit.
    fn check(&self, images: &Tensor, labels: &Tensor) -> Result<()> {
        let bad = |reason: String| TrainError::Task { task: "MixupCutMix".into(), reason };
        let dims = images.dim();
        if !(4..=5).contains(&dims) {
            return Err(bad(format!(
                "images must be a batch [N, C, H, W] (or videos [N, T, C, H, W]), got {:?}",
                images.size()
            )));
        }
        let n = images.size()[0];
        if self.mixup_alpha > 0.0 && !images.is_floating_point() {
            return Err(bad(format!(
                "Mixup needs floating-point images (after ToDtype/Normalize), got {:?}",
                images.kind()
            )));
        }
        let ls = labels.size();
        match ls.as_slice() {
            [m] if *m == n && !labels.is_floating_point() => Ok(()),
            [m, c] if *m == n && *c == self.num_classes && labels.is_floating_point() => Ok(()),
            _ => Err(bad(format!(
                "labels must be class indices [{n}] or probabilities [{n}, {}] for images {:?}, got {:?} {:?}",
                self.num_classes,
                images.size(),
                ls,
                labels.kind()
            ))),
        }
    }

    /// One-hot float32 targets of class indices (torchvision's `one_hot(...).float()`), or the
    /// probabilities given; an error naming a class outside `[0, num_classes)`.
    fn one_hot(&self, labels: &Tensor) -> Result<Tensor> {
        if labels.is_floating_point() {
            return Ok(labels.shallow_clone());
        }
        let hot = labels.to_kind(Kind::Int64).f_one_hot(self.num_classes).map_err(|e| TrainError::Task {
            task: "MixupCutMix".into(),
            reason: format!(
                "labels must be class indices in [0, {}): {}",
                self.num_classes,
                e.to_string().lines().next().unwrap_or("")
            ),
        })?;
        Ok(hot.to_kind(Kind::Float))
    }

    /// `v2.RandomChoice([MixUp, CutMix], p)`'s draw: whether CutMix was picked.
    fn draw_choice(&self) -> bool {
        let total = (1.0 - self.switch_prob) + self.switch_prob;
        let p = [((1.0 - self.switch_prob) / total) as f32, (self.switch_prob / total) as f32];
        Tensor::from_slice(&p).multinomial(1, false).int64_value(&[0]) == 1
    }
}

/// `torch.rand(1)`, as a float32.
fn draw_uniform() -> f32 {
    Tensor::rand([1], (Kind::Float, Device::Cpu)).double_value(&[0]) as f32
}

/// `float(torch.distributions.Beta(torch.tensor([alpha]), torch.tensor([alpha])).sample(()))`:
/// a float32 Dirichlet draw over `[[alpha, alpha]]`, its first component.
fn draw_beta(alpha: f64) -> f64 {
    let a = alpha as f32;
    Tensor::from_slice(&[a, a]).view([1, 2]).internal_sample_dirichlet().double_value(&[0, 0])
}

/// torchvision's mix of a batch with its roll: `x.roll(1, 0) * (1 - lam) + x * lam`.
fn mix_lerp(x: &Tensor, lam: f64) -> Tensor {
    x.roll([1], [0]).g_mul_scalar(1.0 - lam) + x.g_mul_scalar(lam)
}

impl BatchTransform<(Tensor, Tensor)> for MixupCutMix {
    fn apply(
        &mut self,
        (images, labels): (Tensor, Tensor),
        ctx: &mut BatchContext,
    ) -> Result<(Tensor, Tensor)> {
        let epoch = ctx.epoch;
        let (images, targets, _) = ctx.with_torch_generator(|| self.mix(&images, &labels, epoch))??;
        // Training accuracy counts against the labels before mixing (the largest class of
        // probability labels), not against the mixed target's largest class.
        let truth = if labels.is_floating_point() { labels.argmax(1, false) } else { labels };
        ctx.set_metric_target(truth);
        Ok((images, targets))
    }
}
