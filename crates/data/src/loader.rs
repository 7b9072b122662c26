//! `DataLoader` and its builder: batches of a dataset, loaded by worker threads, in sampler order.

use crate::batch_sampler::BatchSampler;
use crate::collate::{Collate, DefaultCollate};
use crate::dataset::Dataset;
use crate::epoch::{Epoch, EpochStats};
use crate::error::{DataError, Result};
use crate::sampler::{RandomSampler, Sampler, SequentialSampler};
use crate::worker::{Shared, Workers};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use torchlight_base::seed::global_seed;

/// What the loader does with a sample whose `get` fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorPolicy {
    /// The batch holding the sample comes out as an error naming the sample (and its file);
    /// the epoch goes on with the next batch if the caller keeps iterating. The default, and
    /// PyTorch's only behaviour.
    #[default]
    Fail,
    /// The sample is left out of its batch (which comes out smaller, or not at all when every
    /// sample failed) and recorded in [`EpochStats::skipped`]. Panics and collation errors are
    /// never skipped.
    Skip,
}

/// Builds a [`DataLoader`]; every setting has PyTorch's `DataLoader` default unless stated.
pub struct DataLoaderBuilder<D, C = DefaultCollate> {
    dataset: D,
    collate: C,
    batch_size: usize,
    shuffle: bool,
    drop_last: bool,
    num_workers: usize,
    prefetch: usize,
    persistent_workers: bool,
    pin_memory: bool,
    seed: Option<u64>,
    sampler: Option<Box<dyn Sampler>>,
    on_error: ErrorPolicy,
    timeout: Option<Duration>,
}

impl<D: Dataset + 'static> DataLoaderBuilder<D, DefaultCollate> {
    /// A builder over `dataset` with the defaults below and [`DefaultCollate`].
    pub fn new(dataset: D) -> Self {
        DataLoaderBuilder {
            dataset,
            collate: DefaultCollate,
            batch_size: 1,
            shuffle: false,
            drop_last: false,
            num_workers: 0,
            prefetch: 2,
            persistent_workers: false,
            pin_memory: false,
            seed: None,
            sampler: None,
            on_error: ErrorPolicy::Fail,
            timeout: None,
        }
    }
}

impl<D: Dataset + 'static, C> DataLoaderBuilder<D, C> {
    /// The collation (`collate_fn`); default [`DefaultCollate`].
    pub fn collate<C2>(self, collate: C2) -> DataLoaderBuilder<D, C2> {
        DataLoaderBuilder {
            dataset: self.dataset,
            collate,
            batch_size: self.batch_size,
            shuffle: self.shuffle,
            drop_last: self.drop_last,
            num_workers: self.num_workers,
            prefetch: self.prefetch,
            persistent_workers: self.persistent_workers,
            pin_memory: self.pin_memory,
            seed: self.seed,
            sampler: self.sampler,
            on_error: self.on_error,
            timeout: self.timeout,
        }
    }

    /// Samples per batch; default 1, must be positive.
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// A new random order every epoch ([`RandomSampler`]); default false (in order).
    pub fn shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// Drops the last batch when it is smaller than `batch_size`; default false.
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// Worker threads; default 0, which loads every batch on the thread that iterates.
    pub fn num_workers(mut self, num_workers: usize) -> Self {
        self.num_workers = num_workers;
        self
    }

    /// Batches in flight per worker (`prefetch_factor`); default 2, must be positive. At most
    /// `prefetch * num_workers` batches are loaded ahead of the one the consumer waits for.
    pub fn prefetch(mut self, prefetch: usize) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Keeps the worker threads between epochs; default false (threads start with each epoch
    /// and are joined at its end). Needs `num_workers > 0`, as in PyTorch.
    pub fn persistent_workers(mut self, persistent: bool) -> Self {
        self.persistent_workers = persistent;
        self
    }

    /// Builds batch tensors in pinned host memory, ready for a non-blocking copy to the GPU;
    /// default false. A no-op where CUDA is not usable.
    pub fn pin_memory(mut self, pin_memory: bool) -> Self {
        self.pin_memory = pin_memory;
        self
    }

    /// The base of the shuffle and per-sample augmentation seeds; default the seed given to
    /// `seed_everything`, or 0 if it was not called. (PyTorch draws a fresh base seed from the
    /// global generator each epoch; here epoch `e` depends only on (seed, e).)
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// A custom sampler (e.g. [`WeightedRandomSampler`](crate::WeightedRandomSampler)) instead
    /// of the sequential or shuffling one; exclusive with `shuffle`, as in PyTorch.
    pub fn sampler(mut self, sampler: impl Sampler + 'static) -> Self {
        self.sampler = Some(Box::new(sampler));
        self
    }

    /// What to do with failing samples; default [`ErrorPolicy::Fail`].
    pub fn on_error(mut self, policy: ErrorPolicy) -> Self {
        self.on_error = policy;
        self
    }

    /// How long to wait for a batch from the workers before yielding [`DataError::Timeout`];
    /// default none (wait as long as loading takes). Ignored without workers.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Checks the settings and makes the loader (no thread starts before the first epoch).
    /// Errors name the field: `batch_size` 0, `prefetch` 0, `persistent_workers` without
    /// workers, `shuffle` together with a `sampler`, a zero `timeout`.
    pub fn build(self) -> Result<DataLoader<D, C>>
    where
        C: Collate<D::Item>,
    {
        let bad =
            |field: &'static str, reason: &str| Err(DataError::Config { field, reason: reason.to_string() });
        if self.batch_size == 0 {
            return bad("batch_size", "must be positive");
        }
        if self.prefetch == 0 {
            return bad("prefetch", "must be positive");
        }
        if self.persistent_workers && self.num_workers == 0 {
            return bad("persistent_workers", "needs num_workers > 0");
        }
        if self.shuffle && self.sampler.is_some() {
            return bad("shuffle", "is mutually exclusive with a custom sampler");
        }
        if self.timeout == Some(Duration::ZERO) {
            return bad("timeout", "must be positive");
        }
        let seed = self.seed.or_else(global_seed).unwrap_or(0);
        let len = self.dataset.len();
        let sampler: Box<dyn Sampler> = match self.sampler {
            Some(sampler) => sampler,
            None if self.shuffle => Box::new(RandomSampler::new(len, seed)),
            None => Box::new(SequentialSampler::new(len)),
        };
        let batch_sampler = BatchSampler::new(sampler, self.batch_size, self.drop_last)?;
        Ok(DataLoader {
            workers: Workers {
                persistent_pool: None,
                shared: Arc::new(Shared {
                    dataset: self.dataset,
                    collate: self.collate,
                    seed,
                    skip_errors: self.on_error == ErrorPolicy::Skip,
                    generation: AtomicU64::new(0),
                }),
                num_workers: self.num_workers,
                prefetch: self.prefetch,
                persistent: self.persistent_workers,
                pin_memory: self.pin_memory,
                timeout: self.timeout,
            },
            batch_sampler,
            last_stats: None,
        })
    }
}

/// `torch.utils.data.DataLoader` for a map-style [`Dataset`]: batches of `batch_size` samples
/// in sampler order, collated into tensors.
///
/// With `num_workers > 0`, worker threads load and stage batches ahead of the consumer (up to
/// `prefetch * num_workers` batches) and a reorder buffer hands them out in sampler order, so
/// the batches are identical for every worker count: sample `i` of epoch `e` draws its random
/// augmentation from `sample_seed(seed, e, i)`, and the `k`-th repeat of it in the same epoch
/// (a sampler that lists it again: `RASampler`, sampling with replacement) from
/// `repeat_sample_seed(seed, e, i, k)`, so each copy is augmented anew. Tensors are built on the iterating thread.
/// Workers share the dataset by reference (no per-worker copy, nothing pickled).
///
/// Dropping an epoch's iterator, or the loader, stops the workers between samples and joins
/// them before the drop returns.
pub struct DataLoader<D: Dataset, C: Collate<D::Item> = DefaultCollate> {
    /// Declared first so that a persistent pool drops (joining the workers) before anything else.
    workers: Workers<D, C>,
    batch_sampler: BatchSampler,
    last_stats: Option<EpochStats>,
}

impl<D: Dataset + 'static> DataLoader<D, DefaultCollate>
where
    DefaultCollate: Collate<D::Item>,
{
    /// A builder over `dataset` (see [`DataLoaderBuilder`] for the settings and defaults);
    /// for item types [`DefaultCollate`] does not handle, use
    /// `DataLoaderBuilder::new(dataset).collate(my_collate)`.
    pub fn builder(dataset: D) -> DataLoaderBuilder<D, DefaultCollate> {
        DataLoaderBuilder::new(dataset)
    }
}

impl<D: Dataset + 'static, C: Collate<D::Item>> DataLoader<D, C> {
    /// The batches of epoch `epoch`, in sampler order, as an iterator of `Result<C::Batch>`.
    /// Its statistics (data-stall time, skipped samples) are in [`Epoch::stats`] and, once it
    /// is dropped, in [`DataLoader::last_epoch_stats`].
    pub fn epoch(&mut self, epoch: u64) -> Epoch<'_, D, C> {
        self.epoch_from(epoch, 0)
    }

    /// The batches of epoch `epoch` from batch index `first_batch` on: what
    /// `epoch(epoch).skip(first_batch)` yields, except that the batches before `first_batch` are
    /// neither loaded nor yielded. A training loop resumes mid-epoch with it at the exact
    /// batch: the order and every sample's augmentation depend only on (seed, epoch, index).
    ///
    /// `first_batch` counts the sampler's batches; under [`ErrorPolicy::Skip`] a batch whose
    /// samples all failed is not yielded by `epoch`, so count the batches a run consumed
    /// ([`Epoch::consumed`]), not the items it received, if it may have skipped some. `first_batch == len()` gives
    /// an empty epoch; a larger one yields a single [`DataError::Config`] naming `first_batch`.
    pub fn epoch_from(&mut self, epoch: u64, first_batch: usize) -> Epoch<'_, D, C> {
        let batches = self.batch_sampler.batches(epoch);
        Epoch::new(&mut self.workers, &mut self.last_stats, epoch, batches, first_batch)
    }

    /// Same as [`DataLoader::epoch`].
    pub fn iter(&mut self, epoch: u64) -> Epoch<'_, D, C> {
        self.epoch(epoch)
    }

    /// Batches per epoch (`len(loader)`), counting a short last batch unless `drop_last`.
    pub fn len(&self) -> usize {
        self.batch_sampler.len()
    }

    /// Whether an epoch has no batch.
    pub fn is_empty(&self) -> bool {
        self.batch_sampler.is_empty()
    }

    /// The dataset.
    pub fn dataset(&self) -> &D {
        &self.workers.shared.dataset
    }

    /// The batch size.
    pub fn batch_size(&self) -> usize {
        self.batch_sampler.batch_size()
    }

    /// The number of worker threads (0: loading on the iterating thread).
    pub fn num_workers(&self) -> usize {
        self.workers.num_workers
    }

    /// The base seed of shuffles and augmentations.
    pub fn seed(&self) -> u64 {
        self.workers.shared.seed
    }

    /// The statistics of the last epoch iterated (complete or not), once its iterator is dropped.
    pub fn last_epoch_stats(&self) -> Option<&EpochStats> {
        self.last_stats.as_ref()
    }
}
