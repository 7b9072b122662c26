//! The loader's worker threads, and the loading of one batch that they (or, with
//! `num_workers = 0`, the consumer thread) do.

use crate::collate::Collate;
use crate::dataset::Dataset;
use crate::error::{DataError, Result};
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;
use torchlight_base::seed::{repeat_sample_seed, rng_from_seed};

/// A sample left out under [`ErrorPolicy::Skip`](crate::ErrorPolicy::Skip).
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedSample {
    /// The sample's index in the loader's dataset.
    pub index: usize,
    /// Why it failed (the error's message, naming the file when there is one).
    pub error: String,
}

/// What loader threads share: the dataset, the collation and the loading settings.
pub(crate) struct Shared<D, C> {
    pub dataset: D,
    pub collate: C,
    pub seed: u64,
    pub skip_errors: bool,
    /// The current epoch's generation; a batch of another generation is abandoned between
    /// samples, which is how dropping an epoch (or the loader) stops work promptly.
    pub generation: AtomicU64,
}

/// What a loader hands each of its epochs: the state its threads share, the worker settings,
/// and the pool kept between epochs under `persistent_workers`. The loader owns it; an epoch
/// borrows it mutably while it runs.
pub(crate) struct Workers<D: Dataset, C: Collate<D::Item>> {
    /// Declared first so that it drops (joining the workers) before anything else.
    pub persistent_pool: Option<WorkerPool<D, C>>,
    pub shared: Arc<Shared<D, C>>,
    pub num_workers: usize,
    /// Batches in flight per worker.
    pub prefetch: usize,
    /// Keep the pool between epochs (`persistent_workers`).
    pub persistent: bool,
    pub pin_memory: bool,
    pub timeout: Option<Duration>,
}

/// One batch to load: its position `seq` in epoch `epoch`, its dataset indices, and for each
/// how many times the epoch listed that index before it (0 unless the sampler repeats it).
pub(crate) struct Task {
    pub generation: u64,
    pub seq: usize,
    pub epoch: u64,
    pub indices: Vec<usize>,
    pub repeats: Vec<u32>,
}

/// A loaded batch before tensors: `None` when every sample was skipped.
pub(crate) struct Loaded<S> {
    pub staged: Option<S>,
    pub samples: usize,
    pub skipped: Vec<SkippedSample>,
}

pub(crate) struct Message<S> {
    pub generation: u64,
    pub seq: usize,
    pub result: Result<Loaded<S>>,
}

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".to_string())
}

/// Makes sure a sample's error names the sample: `Sample` errors (which carry the index and
/// file the dataset knows) pass through, others are wrapped with the loader's index.
fn attribute(error: DataError, index: usize) -> DataError {
    match error {
        DataError::Sample { .. } | DataError::Panic { .. } => error,
        other => DataError::Sample { index, path: None, message: other.to_string() },
    }
}

/// Loads and stages one batch. `None` when the task's generation was cancelled.
///
/// Each sample's generator is seeded from (seed, epoch, index) alone, so the batch is the same
/// whichever thread loads it.
pub(crate) fn load_batch<D, C>(shared: &Shared<D, C>, task: &Task) -> Option<Result<Loaded<C::Staged>>>
where
    D: Dataset,
    C: Collate<D::Item>,
{
    let len = shared.dataset.len();
    let mut items = Vec::with_capacity(task.indices.len());
    let mut skipped = Vec::new();
    for (&index, &repeat) in task.indices.iter().zip(&task.repeats) {
        if shared.generation.load(Ordering::Acquire) != task.generation {
            return None;
        }
        if index >= len {
            return Some(Err(DataError::IndexOutOfRange { index, len }));
        }
        let mut rng =
            rng_from_seed(repeat_sample_seed(shared.seed, task.epoch, index as u64, u64::from(repeat)));
        let result = catch_unwind(AssertUnwindSafe(|| shared.dataset.get(index, &mut rng))).unwrap_or_else(
            |payload| Err(DataError::Panic { index: Some(index), message: panic_message(&*payload) }),
        );
        match result.map_err(|e| attribute(e, index)) {
            Ok(item) => items.push((index, item)),
            // A panic is a bug, not a bad file: it is never skipped.
            Err(e @ DataError::Panic { .. }) => return Some(Err(e)),
            Err(e) if shared.skip_errors => skipped.push(SkippedSample { index, error: e.to_string() }),
            Err(e) => return Some(Err(e)),
        }
    }
    let samples = items.len();
    if items.is_empty() {
        return Some(Ok(Loaded { staged: None, samples, skipped }));
    }
    let staged = catch_unwind(AssertUnwindSafe(|| shared.collate.stage(items)))
        .unwrap_or_else(|payload| Err(DataError::Panic { index: None, message: panic_message(&*payload) }));
    Some(staged.map(|staged| Loaded { staged: Some(staged), samples, skipped }))
}

/// `num_workers` threads taking tasks from one queue and sending results back. Dropping the
/// pool cancels the current generation, closes the queue and joins every thread.
pub(crate) struct WorkerPool<D, C: Collate<D::Item>>
where
    D: Dataset,
{
    shared: Arc<Shared<D, C>>,
    tasks: Option<Sender<Task>>,
    pub results: Receiver<Message<C::Staged>>,
    handles: Vec<JoinHandle<()>>,
}

impl<D, C> WorkerPool<D, C>
where
    D: Dataset + 'static,
    C: Collate<D::Item>,
{
    pub fn spawn(shared: &Arc<Shared<D, C>>, num_workers: usize) -> Result<Self> {
        let (task_tx, task_rx) = mpsc::channel::<Task>();
        let (result_tx, results) = mpsc::channel();
        let task_rx = Arc::new(Mutex::new(task_rx));
        let mut pool = WorkerPool {
            shared: Arc::clone(shared),
            tasks: Some(task_tx),
            results,
            handles: Vec::with_capacity(num_workers),
        };
        for worker in 0..num_workers {
            let shared = Arc::clone(shared);
            let task_rx = Arc::clone(&task_rx);
            let result_tx: Sender<Message<C::Staged>> = result_tx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("torchlight-data-{worker}"))
                .spawn(move || loop {
                    // The lock is held while waiting, so idle workers queue on the mutex; the
                    // queue closing wakes them one after the other.
                    let task = task_rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    let Ok(task) = task else { break };
                    if let Some(result) = load_batch(&shared, &task) {
                        let message = Message { generation: task.generation, seq: task.seq, result };
                        if result_tx.send(message).is_err() {
                            break;
                        }
                    }
                })
                // On failure `pool` drops here, joining the workers already started.
                .map_err(DataError::Spawn)?;
            pool.handles.push(handle);
        }
        Ok(pool)
    }

    /// Queues a task; `false` when no worker is left to take it.
    pub fn send(&self, task: Task) -> bool {
        self.tasks.as_ref().is_some_and(|tx| tx.send(task).is_ok())
    }
}

impl<D, C> Drop for WorkerPool<D, C>
where
    D: Dataset,
    C: Collate<D::Item>,
{
    fn drop(&mut self) {
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        self.tasks = None;
        for handle in self.handles.drain(..) {
            // Worker bodies catch sample and collate panics, so a join error cannot carry
            // anything the consumer has not already seen.
            let _ = handle.join();
        }
    }
}
