//! `Snapshot`: what the tuners (`lr_find`, `batch_size_find`) change, copied before they run
//! and put back after: the model's parameters and buffers, the optimizer's state and lrs,
//! torch's generators and Torchlight's process-wide one. Kept in memory (Lightning writes a
//! checkpoint file and reads it back, and once restored too little: its bug #6675).

use crate::error::{Result, TrainError};
use tch::{Device, Tensor};
use torchlight_nn::{named_tensors, Module, Role};
use torchlight_optim::{Optimizer, OptimizerState};
use torchlight_tensor::seed::{with_global_rng, Rng};
use torchlight_tensor::{no_grad, set_grad_none, set_torch_rng_state, torch_rng_state, TorchRngState};

/// Where a [`Snapshot`] keeps its copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SnapshotPlace {
    /// Beside the tensors (fast to put back; on a GPU it takes a second copy of the weights
    /// and the optimizer state there).
    Device,
    /// In host memory, so that the device holds during the tuner what a run holds (the
    /// batch-size search, whose tries measure the device's memory).
    Host,
}

/// A copy of everything a tuner changes.
pub(super) struct Snapshot {
    /// Every parameter and buffer: the live tensor and a copy of its values.
    tensors: Vec<(Tensor, Tensor)>,
    /// The parameters, whose gradients are cleared on restore as they were when taken.
    params: Vec<Tensor>,
    optimizer: OptimizerState,
    lrs: Vec<f64>,
    torch_rng: TorchRngState,
    global_rng: Rng,
}

impl Snapshot {
    /// Copies the state of `model`, `optimizer` and the generators into `place`. `what` (the
    /// tuner's name) goes into the error when a parameter still holds a gradient, which a
    /// restore would drop.
    pub(super) fn take(
        model: &dyn Module,
        optimizer: &dyn Optimizer,
        what: &str,
        place: SnapshotPlace,
    ) -> Result<Self> {
        let copy = |t: &Tensor| match place {
            SnapshotPlace::Device => t.detach().copy(),
            // A copy even for CPU tensors, which `to_device` alone would return as they are.
            SnapshotPlace::Host => t.detach().to_device_(Device::Cpu, t.kind(), false, true),
        };
        let mut tensors = Vec::new();
        let mut params = Vec::new();
        for (name, t, role) in named_tensors(model) {
            if role == Role::Parameter {
                if t.grad().defined() {
                    return Err(TrainError::InvalidSetting {
                        setting: what.into(),
                        value: format!("parameter {name} holds a gradient"),
                        reason: format!(
                            "{what} starts from a model without pending gradients (call the optimizer's \
                             zero_grad first)"
                        ),
                    });
                }
                params.push(t.shallow_clone());
            }
            let saved = copy(&t);
            tensors.push((t, saved));
        }
        let state = optimizer.state_dict();
        // The state's tensors alias the live ones (as PyTorch's do): copy them.
        let optimizer_state = OptimizerState {
            meta: state.meta.clone(),
            tensors: state.tensors.iter().map(|(k, t)| (k.clone(), copy(t))).collect(),
        };
        Ok(Snapshot {
            tensors,
            params,
            optimizer: optimizer_state,
            lrs: optimizer.lrs(),
            torch_rng: torch_rng_state()?,
            global_rng: with_global_rng(|r| r.clone()),
        })
    }

    /// Puts everything back and keeps the snapshot for another restore: the optimizer's state
    /// is copied in (onto its parameters' devices), the state a tuner step made dropped.
    pub(super) fn restore(&self, optimizer: &mut dyn Optimizer) -> Result<()> {
        self.restore_tensors()?;
        optimizer.load_state_dict(&self.optimizer)?;
        restore_lrs_and_rng(optimizer, &self.lrs, &self.torch_rng, self.global_rng.clone())
    }

    /// [`restore`](Self::restore) for the last time: the optimizer takes the saved state's
    /// tensors as they are (no second copy).
    pub(super) fn restore_owned(self, optimizer: &mut dyn Optimizer) -> Result<()> {
        self.restore_tensors()?;
        let Snapshot { optimizer: state, lrs, torch_rng, global_rng, .. } = self;
        optimizer.load_state_dict_owned(state)?;
        restore_lrs_and_rng(optimizer, &lrs, &torch_rng, global_rng)
    }

    fn restore_tensors(&self) -> Result<()> {
        {
            let _guard = no_grad();
            for (live, saved) in &self.tensors {
                let mut live = live.shallow_clone();
                live.copy_(saved);
            }
        }
        for p in &self.params {
            set_grad_none(p)?;
        }
        Ok(())
    }
}

fn restore_lrs_and_rng(
    optimizer: &mut dyn Optimizer,
    lrs: &[f64],
    torch_rng: &TorchRngState,
    global_rng: Rng,
) -> Result<()> {
    optimizer.set_lrs(lrs)?;
    set_torch_rng_state(torch_rng)?;
    with_global_rng(move |r| *r = global_rng);
    Ok(())
}
