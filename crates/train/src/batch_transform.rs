//! `BatchTransform`: a transform of whole training batches (Mixup, CutMix) that the Trainer
//! applies after a batch reaches the device and before its step, each batch with a generator
//! seeded from (seed, rank, epoch, batch index), so a resumed run transforms the same batches
//! the same way.

use crate::error::Result;
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
}

impl BatchContext {
    /// The context of batch `batch` of epoch `epoch` on `rank`, for a run seeded with `base`.
    pub fn new(base: u64, rank: usize, epoch: u64, batch: u64) -> Self {
        let seed = torchlight_tensor::seed::batch_seed(base, rank as u64, epoch, batch);
        BatchContext { epoch, batch, rank, seed, rng: rng_from_seed(seed) }
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
}

/// A transform of whole training batches, applied by the Trainer to every training batch
/// (after the move to the device, before `on_train_batch_start` and the step; never to
/// validation or test batches). The small trait for the math: the Trainer owns the plumbing
/// (when it runs, its seeding, exact resume). Closures `FnMut(B, &mut BatchContext) ->
/// Result<B>` are transforms.
///
/// Draw only from `ctx`'s generators: they depend on the batch's position alone, so a run
/// resumed mid-epoch transforms the rest of the epoch exactly as the uninterrupted run did.
pub trait BatchTransform<B> {
    /// Transforms one batch.
    fn apply(&mut self, batch: B, ctx: &mut BatchContext) -> Result<B>;
}

impl<B, F: FnMut(B, &mut BatchContext) -> Result<B>> BatchTransform<B> for F {
    fn apply(&mut self, batch: B, ctx: &mut BatchContext) -> Result<B> {
        self(batch, ctx)
    }
}
