//! `Trainer::batch_size_find`: the batch-size search (`batch_size_finder.rs`) with each try run
//! as real training steps through the Trainer's own step (`StepRunner`: autocast, GradScaler,
//! clipping) and batch transform, inside `catch_unwind`, with everything a try touched put
//! back after it and the device's cached memory released.
//!
//! The snapshot is kept in host memory, so that during the tries the device holds what a run
//! holds (weights, gradients, optimizer state, activations) and no second copy of the weights.
//! After every try the gradients are dropped, the weights, buffers, optimizer state, lrs and
//! generators are put back, the try's batch and step are dropped, and on CUDA the caching
//! allocator's unused blocks are handed back to the driver (`torch.cuda.empty_cache()`).

use super::snapshot::{Snapshot, SnapshotPlace};
use super::{AsDynModule, StepConfig, StepRunner, Trainer};
use crate::batch::Batch;
use crate::batch_size_finder::{
    format_bytes, search_batch_size, BatchSizeFindConfig, BatchSizeFinder, BatchSizeTry,
};
use crate::batch_transform::{BatchContext, BatchTransform};
use crate::error::{Result, TrainError};
use crate::guard;
use crate::task::Task;
use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use tch::Device;
use torchlight_optim::Optimizer;
use torchlight_tensor::{cuda_empty_cache, cuda_memory, cuda_reset_peak_memory_stats};

/// How a try ended.
enum Outcome {
    /// Its steps ran.
    Fits,
    /// It ran out of memory.
    OutOfMemory,
    /// It failed otherwise: the error goes to the caller once everything is put back.
    Failed(TrainError),
    /// It panicked otherwise: the panic resumes once everything is put back.
    Panicked(Box<dyn Any + Send>),
}

impl Trainer {
    /// The largest batch that trains, as PyTorch Lightning's `Tuner.scale_batch_size` finds it
    /// in its `binsearch` mode (see [`search_batch_size`] for the search and where it departs
    /// from Lightning): batch sizes double from `config.init_batch_size` until a try runs out of
    /// memory or `config.max_batch_size` fitted, then the sizes in between are bisected.
    ///
    /// A try of size `b` takes `batches(b)` (a batch of `b` samples, on any device: real
    /// samples, or `|b| Ok(example.probe(b))` for zeros shaped like an example batch), moves it
    /// to the Trainer's device, and runs `config.steps_per_try` whole training steps on it
    /// through this Trainer's step (AMP with its GradScaler, clipping; accumulation 1, since
    /// a micro-batch's memory does not depend on it) and its batch transform, inside
    /// `catch_unwind`. An out-of-memory failure, a panic or an error whose message says so
    /// ([`guard::is_out_of_memory`]), means "does not fit"; any other error or panic ends the
    /// search (after the restore) and comes back as it was. A try measures memory, not
    /// learning: the non-finite guard is off (a NaN loss still fits).
    ///
    /// After every try, and so after the search, the model's parameters and buffers, the
    /// optimizer's state and lrs and the random generators are exactly as they were, so
    /// `batch_size_find` then `fit` trains as `fit` alone does, bit for bit on the CPU; the
    /// schedulers and callbacks are never called. On CUDA the try's memory is handed back to
    /// the driver after each try, and [`BatchSizeFinder`] reports each try's peak and the
    /// memory held before and after the search.
    ///
    /// The memory a try measures is the step's; what a run holds besides (a model EMA's copy of
    /// the weights, the loader's pinned batches, another process on the GPU) is the caller's
    /// to hold during the search or leave room for. A distributed Trainer refuses it: run the
    /// search in one process on one of the devices, and give each rank the batch it found.
    pub fn batch_size_find<M, B, T>(
        &mut self,
        model: &mut M,
        task: &T,
        optimizer: &mut dyn Optimizer,
        batches: &mut dyn FnMut(usize) -> Result<B>,
        config: &BatchSizeFindConfig,
    ) -> Result<BatchSizeFinder>
    where
        M: AsDynModule + ?Sized,
        B: Batch + 'static,
        T: Task<M, B> + ?Sized,
    {
        config.validate()?;
        if self.distributed.is_some() {
            return Err(TrainError::InvalidSetting {
                setting: "batch_size_find".into(),
                value: format!("{} ranks", self.world_size()),
                reason: "the batch-size search runs in one process on one device (each rank's batch is its \
                         own): run it before launching the ranks and give every rank the batch it finds"
                    .into(),
            });
        }
        guard::check_device(model.as_dyn(), self.device)?;
        let cuda = match self.device {
            Device::Cuda(i) => Some(i),
            _ => None,
        };
        cuda_empty_cache()?;
        let before = cuda.map(cuda_memory).transpose()?.map(|m| m.allocated);
        let snapshot = Snapshot::take(model.as_dyn(), optimizer, "batch_size_find", SnapshotPlace::Host)?;
        let mut transform = self.batch_transform.take();
        // A try's panic other than out-of-memory, resumed once everything is put back.
        let mut panicked: Option<Box<dyn Any + Send>> = None;
        let searched = (|| {
            let mut transform = super::typed_batch_transform::<B>(transform.as_mut(), "batch_size_find")?;
            let transform_seed = if transform.is_some() { self.batch_transform_seed()? } else { 0 };
            let step = StepConfig { accumulation: 1, guard_nonfinite: false, ..self.step.clone() };
            search_batch_size(config, |size| {
                let batch = batches(size)?;
                if batch.len() != size {
                    return Err(TrainError::InvalidSetting {
                        setting: "batch_size_find".into(),
                        value: format!("a batch of {} samples for a try of {size}", batch.len()),
                        reason: "the batch maker must return exactly the samples asked for".into(),
                    });
                }
                if let Some(i) = cuda {
                    cuda_reset_peak_memory_stats(i)?;
                }
                let outcome = self.try_batch(
                    &*model,
                    task,
                    optimizer,
                    batch,
                    transform.as_deref_mut(),
                    transform_seed,
                    &step,
                    config.steps_per_try,
                );
                let peak_bytes = cuda.map(cuda_memory).transpose()?.map(|m| m.peak_allocated);
                snapshot.restore(optimizer)?;
                cuda_empty_cache()?;
                let fits = match outcome {
                    Outcome::Fits => true,
                    Outcome::OutOfMemory => false,
                    Outcome::Failed(e) => return Err(e),
                    Outcome::Panicked(payload) => {
                        let message = guard::panic_message(payload.as_ref());
                        panicked = Some(payload);
                        // Never seen: the panic resumes instead.
                        return Err(TrainError::InvalidSetting {
                            setting: "batch_size_find".into(),
                            value: format!("the try of {size}"),
                            reason: format!("it panicked: {message}"),
                        });
                    }
                };
                self.progress.line(&format!(
                    "batch_size_find: batch {size} {}{}",
                    if fits { "trains" } else { "runs out of memory" },
                    peak_bytes.map_or(String::new(), |b| format!(" (peak {})", format_bytes(b)))
                ));
                Ok(BatchSizeTry { batch_size: size, fits, peak_bytes })
            })
        })();
        self.batch_transform = transform;
        let restored = snapshot.restore_owned(optimizer);
        let released = cuda_empty_cache();
        if let Some(payload) = panicked {
            resume_unwind(payload);
        }
        let mut found = searched?;
        restored?;
        released?;
        let after = cuda.map(cuda_memory).transpose()?.map(|m| m.allocated);
        found.allocated_bytes = before.zip(after);
        self.progress.line(&format!(
            "batch_size_find: {} tries; the largest batch that trains is {}{}; model and optimizer restored",
            found.tries.len(),
            found.largest.map_or("none (not even 1)".to_string(), |b| b.to_string()),
            if found.hit_ceiling() { " (the ceiling: larger batches were not tried)" } else { "" },
        ));
        Ok(found)
    }

    /// One try: `steps` training steps on `batch`, each on a fresh copy on the device through
    /// the batch transform. The caller restores what it changed.
    #[allow(clippy::too_many_arguments)]
    fn try_batch<M, B, T>(
        &self,
        model: &M,
        task: &T,
        optimizer: &mut dyn Optimizer,
        batch: B,
        mut transform: Option<&mut Box<dyn BatchTransform<B>>>,
        transform_seed: u64,
        step: &StepConfig,
        steps: usize,
    ) -> Outcome
    where
        M: AsDynModule + ?Sized,
        B: Batch,
        T: Task<M, B> + ?Sized,
    {
        let ran = catch_unwind(AssertUnwindSafe(|| -> Result<()> {
            let mut runner = StepRunner::new(step.clone(), self.device)?.without_oom_probe();
            for s in 0..steps {
                let mut b = batch.to_device(self.device);
                if let Some(t) = transform.as_deref_mut() {
                    let mut ctx = BatchContext::new(transform_seed, 0, 0, s as u64);
                    b = t.apply(b, &mut ctx)?;
                }
                runner.forward_backward(model, task, &b)?;
                runner.optimizer_step(model.as_dyn(), optimizer)?;
                runner.settle(model.as_dyn(), optimizer)?;
            }
            Ok(())
        }));
        drop(batch);
        match ran {
            Ok(Ok(())) => Outcome::Fits,
            Ok(Err(e))
                if matches!(e, TrainError::OutOfMemory { .. }) || guard::is_out_of_memory(&e.to_string()) =>
            {
                Outcome::OutOfMemory
            }
            Ok(Err(e)) => Outcome::Failed(e),
            Err(payload) if guard::is_out_of_memory(&guard::panic_message(payload.as_ref())) => {
                Outcome::OutOfMemory
            }
            Err(payload) => Outcome::Panicked(payload),
        }
    }
}
