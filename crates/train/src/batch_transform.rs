//! `BatchTransform`: a transform of whole training batches (Mixup, CutMix) that the Trainer
//! applies after a batch reaches the device and before its step, each batch with a generator
//! seeded from (seed, rank, epoch, batch index), so a resumed run transforms the same batches
//! the same way.

use crate::error::Result;
use tch::Tensor;
use torchlight_tensor::seed::{rng_from_seed, Rng};

/// Where a batch transform runs, and its random source.
///
/// Two generators, both seeded from [`seed`](Self::seed) alone (see
/// `torchlight_base::seed::batch_seed`): Torchlight's own [`rng`](Self::rng), and torch's
/// default generators inside [`with_torch_generator`](Self::with_torch_generator), for a
/// transform that must draw as a PyTorch implementation does (`torch.distributions`,
/// `torch.randint`) to give the same batch bit for bit.
#[derive(Debug)]
pub struct BatchContext {
    /// The 0-based epoch.
    pub epoch: u64,
    /// The batch's 0-based index within the epoch.
    pub batch: u64,
    /// The data-parallel rank (0 when not distributed): every rank transforms its own batch.
    pub rank: usize,
    seed: u64,
    rng: Rng,
    metric_target: Option<Tensor>,
}

impl BatchContext {
    /// The context of batch `batch` of epoch `epoch` on `rank`, for a run seeded with `base`.
    pub fn new(base: u64, rank: usize, epoch: u64, batch: u64) -> Self {
        let seed = torchlight_tensor::seed::batch_seed(base, rank as u64, epoch, batch);
        BatchContext { epoch, batch, rank, seed, rng: rng_from_seed(seed), metric_target: None }
    }

    /// This batch's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Torchlight's generator for this batch (ChaCha8, seeded from [`seed`](Self::seed)).
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// Runs `f` with torch's default generators seeded from [`seed`](Self::seed)
    /// (`torch.manual_seed(seed)` inside `torch.random.fork_rng()`), restoring their states
    /// after, so dropout and everything else drawing from them is unaffected.
    pub fn with_torch_generator<R>(&self, f: impl FnOnce() -> R) -> Result<R> {
        Ok(torchlight_tensor::with_torch_seed(self.seed, f)?)
    }

    /// Sets what the training metrics count this batch against, in place of the task's
    /// [`StepOutput::target`](crate::StepOutput::target) (the loss still sees the transformed
    /// batch): a transform that replaces the targets the loss reads hands on the ones before
    /// it. [`MixupCutMix`](crate::MixupCutMix) sets the labels before mixing, so training
    /// accuracy counts against the true labels, not the mixed target's largest class. Its
    /// first dimension must be the batch's.
    pub fn set_metric_target(&mut self, target: Tensor) {
        self.metric_target = Some(target);
    }

    /// Takes the target [`set_metric_target`](Self::set_metric_target) set, if any (the
    /// Trainer does, after the transform).
    pub fn take_metric_target(&mut self) -> Option<Tensor> {
        self.metric_target.take()
    }
}

/// A transform of whole training batches, applied by the Trainer to every training batch
/// (after the move to the device, before `on_train_batch_start` and the step; never to
/// validation or test batches). The small trait for the math: the Trainer owns the plumbing
/// (when it runs, its seeding, exact resume). Closures `FnMut(B, &mut BatchContext) ->
/// Result<B>` are transforms.
///
/// Draw only from `ctx`'s generators: they depend on the batch's position alone, so a run
/// resumed mid-epoch transforms the rest of the epoch exactly as the uninterrupted run did.
/// A transform that changes the targets can keep the metrics on the original ones with
/// [`BatchContext::set_metric_target`].
pub trait BatchTransform<B> {
    /// Transforms one batch.
    fn apply(&mut self, batch: B, ctx: &mut BatchContext) -> Result<B>;
}

impl<B, F: FnMut(B, &mut BatchContext) -> Result<B>> BatchTransform<B> for F {
    fn apply(&mut self, batch: B, ctx: &mut BatchContext) -> Result<B> {
        self(batch, ctx)
    }
}
