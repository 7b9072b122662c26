//! `Epoch`: the iterator over one epoch's batches, with its reorder buffer and statistics.

use crate::collate::Collate;
use crate::dataset::Dataset;
use crate::error::{DataError, Result};
use crate::worker::{load_batch, panic_message, Loaded, SkippedSample, Task, WorkerPool, Workers};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// What one epoch took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpochStats {
    /// The epoch number.
    pub epoch: u64,
    /// Batches yielded without error.
    pub batches: usize,
    /// Samples in those batches.
    pub samples: usize,
    /// Batches yielded as errors.
    pub failed_batches: usize,
    /// Samples left out under [`ErrorPolicy::Skip`](crate::ErrorPolicy::Skip), in batch order.
    pub skipped: Vec<SkippedSample>,
    /// Data-stall time: how long the consumer spent inside `next()` waiting for batches (with
    /// `num_workers = 0` this is all the loading time). Compare with `wall` to see whether the
    /// training step is waiting on data.
    pub stall: Duration,
    /// From the start of the epoch's iteration to the end of its last `next()` (or its drop).
    pub wall: Duration,
}

/// The batches of one epoch, in sampler order (see [`DataLoader::epoch`] and
/// [`DataLoader::epoch_from`]).
///
/// After an error the iterator goes on with the next batch; stop iterating to abort the epoch.
/// Dropping it early cancels the batches in flight: the workers stop between samples and,
/// unless they are persistent, are joined before the drop returns.
///
/// [`DataLoader::epoch`]: crate::DataLoader::epoch
/// [`DataLoader::epoch_from`]: crate::DataLoader::epoch_from
pub struct Epoch<'a, D: Dataset + 'static, C: Collate<D::Item>> {
    /// Declared first so that the workers are joined before the loader is released.
    own_pool: Option<WorkerPool<D, C>>,
    workers: &'a mut Workers<D, C>,
    /// Where the statistics go when the epoch is dropped (the loader's `last_epoch_stats`).
    stats_out: &'a mut Option<EpochStats>,
    epoch: u64,
    generation: u64,
    /// The epoch's batches; those before `first_batch` stay unloaded.
    batches: Vec<Vec<usize>>,
    /// For each index of `batches`, how many times the epoch listed it before (counted from
    /// the epoch's start, the skipped batches included, so a resumed epoch draws alike).
    repeats: Vec<Vec<u32>>,
    next_seq: usize,
    next_dispatch: usize,
    reorder: BTreeMap<usize, Result<Loaded<C::Staged>>>,
    pending_error: Option<DataError>,
    stats: EpochStats,
    started: Instant,
}

impl<'a, D: Dataset + 'static, C: Collate<D::Item>> Epoch<'a, D, C> {
    /// Epoch `epoch` of `batches` (its sampler's batches), starting at batch `first_batch`.
    pub(crate) fn new(
        workers: &'a mut Workers<D, C>,
        stats_out: &'a mut Option<EpochStats>,
        epoch: u64,
        batches: Vec<Vec<usize>>,
        first_batch: usize,
    ) -> Self {
        let started = Instant::now();
        let generation = workers.shared.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let mut own_pool = None;
        let mut pending_error = None;
        if first_batch > batches.len() {
            pending_error = Some(DataError::Config {
                field: "first_batch",
                reason: format!("is {first_batch}, past the {} batches of epoch {epoch}", batches.len()),
            });
        } else if workers.num_workers > 0 && first_batch < batches.len() {
            let spawned = if workers.persistent && workers.persistent_pool.is_some() {
                Ok(None)
            } else {
                WorkerPool::spawn(&workers.shared, workers.num_workers).map(Some)
            };
            match spawned {
                Ok(Some(pool)) if workers.persistent => workers.persistent_pool = Some(pool),
                Ok(pool) => own_pool = pool,
                Err(e) => pending_error = Some(e),
            }
        }
        let first_batch = first_batch.min(batches.len());
        let mut seen: std::collections::HashMap<usize, u32> = std::collections::HashMap::new();
        let repeats = batches
            .iter()
            .map(|b| {
                b.iter()
                    .map(|&i| {
                        let count = seen.entry(i).or_insert(0);
                        *count += 1;
                        *count - 1
                    })
                    .collect()
            })
            .collect();
        Epoch {
            own_pool,
            workers,
            stats_out,
            epoch,
            generation,
            batches,
            repeats,
            next_seq: first_batch,
            next_dispatch: first_batch,
            reorder: BTreeMap::new(),
            pending_error,
            stats: EpochStats { epoch, ..EpochStats::default() },
            started,
        }
    }

    /// The statistics so far.
    pub fn stats(&self) -> &EpochStats {
        &self.stats
    }

    /// Batches not yet yielded (after the first batch of [`DataLoader::epoch_from`]).
    ///
    /// [`DataLoader::epoch_from`]: crate::DataLoader::epoch_from
    pub fn remaining(&self) -> usize {
        self.batches.len() - self.next_seq
    }

    /// The sampler index of the next batch to load: after a batch is yielded, the epoch's
    /// batches consumed so far, counting those left out entirely under
    /// [`ErrorPolicy::Skip`](crate::ErrorPolicy::Skip) before it (and the first `first_batch`
    /// of [`DataLoader::epoch_from`]). This, not the count of batches received, is the
    /// `first_batch` that resumes the epoch after the last batch received.
    ///
    /// [`DataLoader::epoch_from`]: crate::DataLoader::epoch_from
    pub fn consumed(&self) -> usize {
        self.next_seq
    }

    fn task(&mut self, seq: usize) -> Task {
        Task {
            generation: self.generation,
            seq,
            epoch: self.epoch,
            indices: std::mem::take(&mut self.batches[seq]),
            repeats: std::mem::take(&mut self.repeats[seq]),
        }
    }

    /// Batch `seq`, loaded here or received from the workers.
    fn fetch(&mut self, seq: usize) -> Result<Loaded<C::Staged>> {
        if self.workers.num_workers == 0 {
            let task = self.task(seq);
            return load_batch(&self.workers.shared, &task)
                .unwrap_or(Err(DataError::WorkersExited { batch: seq }));
        }
        // Keep `prefetch * num_workers` batches in flight, counting the one awaited.
        let window = self.workers.prefetch * self.workers.num_workers;
        while self.next_dispatch < self.batches.len() && self.next_dispatch < seq + window {
            let task = self.task(self.next_dispatch);
            self.next_dispatch += 1;
            let pool = self.own_pool.as_ref().or(self.workers.persistent_pool.as_ref());
            if !pool.is_some_and(|pool| pool.send(task)) {
                return Err(DataError::WorkersExited { batch: seq });
            }
        }
        let deadline = self.workers.timeout.map(|t| (Instant::now() + t, t));
        loop {
            if let Some(result) = self.reorder.remove(&seq) {
                return result;
            }
            let pool = self.own_pool.as_ref().or(self.workers.persistent_pool.as_ref());
            let Some(pool) = pool else {
                return Err(DataError::WorkersExited { batch: seq });
            };
            let message = match deadline {
                None => pool.results.recv().map_err(|_| DataError::WorkersExited { batch: seq })?,
                Some((at, waited)) => {
                    match pool.results.recv_timeout(at.saturating_duration_since(Instant::now())) {
                        Ok(message) => message,
                        Err(RecvTimeoutError::Timeout) => {
                            return Err(DataError::Timeout { batch: seq, waited })
                        }
                        Err(RecvTimeoutError::Disconnected) => {
                            return Err(DataError::WorkersExited { batch: seq })
                        }
                    }
                }
            };
            // Results of an earlier epoch, or of a batch given up on after a timeout, are stale.
            if message.generation == self.generation && message.seq >= seq {
                self.reorder.insert(message.seq, message.result);
            }
        }
    }

    fn next_batch(&mut self) -> Option<Result<C::Batch>> {
        if let Some(error) = self.pending_error.take() {
            self.next_seq = self.batches.len();
            return Some(Err(error));
        }
        while self.next_seq < self.batches.len() {
            let seq = self.next_seq;
            let fetched = self.fetch(seq);
            self.next_seq += 1;
            let loaded = match fetched {
                Ok(loaded) => loaded,
                Err(error) => {
                    self.stats.failed_batches += 1;
                    return Some(Err(error));
                }
            };
            self.stats.skipped.extend(loaded.skipped);
            let Some(staged) = loaded.staged else { continue };
            let pin = self.workers.pin_memory;
            let collate = &self.workers.shared.collate;
            let batch =
                catch_unwind(AssertUnwindSafe(|| collate.finish(staged, pin))).unwrap_or_else(|payload| {
                    Err(DataError::Panic { index: None, message: panic_message(&*payload) })
                });
            match batch {
                Ok(_) => {
                    self.stats.batches += 1;
                    self.stats.samples += loaded.samples;
                }
                Err(_) => self.stats.failed_batches += 1,
            }
            return Some(batch);
        }
        None
    }
}

impl<D: Dataset + 'static, C: Collate<D::Item>> Iterator for Epoch<'_, D, C> {
    type Item = Result<C::Batch>;

    fn next(&mut self) -> Option<Self::Item> {
        let start = Instant::now();
        let batch = self.next_batch();
        self.stats.stall += start.elapsed();
        self.stats.wall = self.started.elapsed();
        batch
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // Batches whose samples are all skipped are not yielded.
        let remaining = self.remaining() + usize::from(self.pending_error.is_some());
        (0, Some(remaining))
    }
}

impl<D: Dataset + 'static, C: Collate<D::Item>> Drop for Epoch<'_, D, C> {
    fn drop(&mut self) {
        // Cancel whatever is in flight: workers drop stale batches between samples.
        self.workers.shared.generation.fetch_add(1, Ordering::AcqRel);
        if self.next_seq < self.batches.len() {
            self.stats.wall = self.started.elapsed();
        }
        *self.stats_out = Some(std::mem::take(&mut self.stats));
        // `own_pool` drops after this body, joining non-persistent workers.
    }
}
