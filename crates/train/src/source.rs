//! `BatchSource`: where the Trainer gets an epoch's batches, from any batch on; implemented for
//! the DataLoader, and open to loaders of a user's own.

use crate::error::{Result, TrainError};
use std::time::Duration;
use torchlight_data::{Collate, DataLoader, Dataset, Epoch};

/// One epoch's batches, with the time the consumer spent waiting for them.
pub trait EpochBatches<B>: Iterator<Item = Result<B>> {
    /// Time spent inside `next()` so far: the data stall.
    fn stall(&self) -> Duration;

    /// The epoch's batches consumed so far, counting the source's first batch and those it
    /// left out entirely (a DataLoader under `ErrorPolicy::Skip` yields no batch whose samples
    /// all failed): the `first_batch` that resumes after the last batch yielded. The Trainer
    /// saves it as a mid-epoch checkpoint's position and gives it to a batch transform as the
    /// batch's index. `None` (the default) for a source that yields every batch, whose
    /// position is then its first batch plus the batches it yielded.
    fn consumed(&self) -> Option<usize> {
        None
    }
}

/// A source of training or validation batches.
pub trait BatchSource<B> {
    /// Batches per epoch.
    fn len(&self) -> usize;

    /// Whether an epoch has no batch.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Epoch `epoch` from batch `first_batch` on (0 for a whole epoch): the same batches a
    /// whole epoch yields after its first `first_batch`, which are not loaded. This is how a run
    /// resumes mid-epoch at the exact batch.
    fn batches(&mut self, epoch: u64, first_batch: usize) -> Box<dyn EpochBatches<B> + '_>;
}

struct LoaderEpoch<'a, D: Dataset + 'static, C: Collate<D::Item>>(Epoch<'a, D, C>);

impl<D: Dataset + 'static, C: Collate<D::Item>> Iterator for LoaderEpoch<'_, D, C> {
    type Item = Result<C::Batch>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|b| b.map_err(TrainError::from))
    }
}

impl<D: Dataset + 'static, C: Collate<D::Item>> EpochBatches<C::Batch> for LoaderEpoch<'_, D, C> {
    fn stall(&self) -> Duration {
        self.0.stats().stall
    }

    fn consumed(&self) -> Option<usize> {
        Some(self.0.consumed())
    }
}

impl<D: Dataset + 'static, C: Collate<D::Item>> BatchSource<C::Batch> for DataLoader<D, C> {
    fn len(&self) -> usize {
        DataLoader::len(self)
    }

    fn batches(&mut self, epoch: u64, first_batch: usize) -> Box<dyn EpochBatches<C::Batch> + '_> {
        Box::new(LoaderEpoch(self.epoch_from(epoch, first_batch)))
    }
}
