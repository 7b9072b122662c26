//! `torchlight-optim`: optimizers, lr schedulers, gradient clipping and accumulation, and
//! mixed-precision loss scaling, matching `torch.optim` / `torch.amp` step for step.
//!
//! - Optimizers over named parameter groups ([`ParamGroup`]): [`Sgd`], [`Adam`], [`AdamW`],
//!   updating tch tensors in place under no-grad, with PyTorch's fused kernels by default and
//!   a plain-op reference path. Each is the generic [`OptimizerCore`] with its
//!   [`UpdateRule`] (the per-parameter math); an optimizer defined elsewhere plugs in the
//!   same way. All implement [`Optimizer`]; their state is saved by parameter name
//!   ([`OptimizerState`]).
//! - Lr schedulers ([`LrScheduler`]): [`StepLR`], [`MultiStepLR`], [`ExponentialLR`],
//!   [`CosineAnnealingLR`], [`OneCycleLR`], [`LinearLR`] (warmup), [`SequentialLR`], and
//!   [`ReduceLROnPlateau`].
//! - Parameter groups by rule: [`ParamGroupBuilder`] (torchvision's reference
//!   `set_weight_decay`: norm, bias and custom-key weight decay; timm's no-decay rule and
//!   layer-wise lr decay; an lr by name prefix for a head), whose [`ParamGroups`] become any
//!   optimizer's [`ParamGroup`]s.
//! - Gradients: [`clip_grad_norm`], [`clip_grad_value`], [`GradAccumulation`].
//! - Mixed precision: [`GradScaler`], with fused unscaling and no host sync with fused optimizers.
//!
//! ```
//! use tch::{Device, Kind, Tensor};
//! use torchlight_optim::*;
//!
//! # fn main() -> torchlight_optim::Result<()> {
//! // Named parameters as the nn crate gives them.
//! let w = Tensor::randn([4, 3], (Kind::Float, Device::Cpu)).set_requires_grad(true);
//! let b = Tensor::zeros([4], (Kind::Float, Device::Cpu)).set_requires_grad(true);
//! // Weight decay on the matrix, none on the bias: two groups.
//! let groups = ParamGroupBuilder::new(1e-3)
//!     .with_weight_decay(0.01)
//!     .with_no_weight_decay_1d()
//!     .build(vec![("fc.weight".to_string(), w.shallow_clone()), ("fc.bias".to_string(), b)])?;
//! let mut opt =
//!     AdamW::new(groups.into_param_groups(|lr, wd| AdamConfig::adamw().with_lr(lr).with_weight_decay(wd)))?;
//! let warmup = LinearLR::new(&mut opt, LinearLRConfig::warmup(0.1, 2))?;
//! let cosine = CosineAnnealingLR::new(&mut opt, 8, 0.0)?;
//! let mut sched = SequentialLR::new(&mut opt, vec![Box::new(warmup), Box::new(cosine)], vec![2])?;
//! let mut scaler = GradScaler::new(GradScalerConfig::default())?;
//! let x = Tensor::randn([2, 3], (Kind::Float, Device::Cpu));
//! for _epoch in 0..3 {
//!     opt.zero_grad()?;
//!     let loss = x.matmul(&w.tr()).square().mean(Kind::Float);
//!     scaler.scale(&loss).backward();
//!     scaler.unscale_(&opt)?;
//!     clip_grad_norm(opt.named_parameters().into_iter().map(|(_, p)| p), 1.0, 2.0, false)?;
//!     scaler.step(&mut opt)?;
//!     scaler.update()?;
//!     sched.step(&mut opt)?;
//! }
//! let (meta, tensors) = { let s = opt.state_dict(); (s.meta, s.tensors) };
//! assert_eq!(meta.optimizer, "AdamW");
//! assert!(tensors.iter().any(|(name, _)| name == "fc.weight.exp_avg"));
//! # Ok(())
//! # }
//! ```
//!
//! Every behaviour here is checked against fixtures produced by PyTorch 2.11 (the scripts
//! are in `tests/fixtures/`).

mod accumulate;
mod adam;
mod adamw;
mod clip;
mod core;
mod cosine_annealing_lr;
mod error;
mod exponential_lr;
mod fnmatch;
mod grad_scaler;
mod group_builder;
mod linear_lr;
mod multi_step_lr;
mod one_cycle_lr;
mod optimizer;
mod param_group;
mod reduce_lr_on_plateau;
mod scheduler;
mod sequential_lr;
mod sgd;
mod step_lr;

pub use accumulate::GradAccumulation;
pub use adam::{Adam, AdamConfig, AdamRule, AdamState};
pub use adamw::AdamW;
pub use clip::{clip_grad_norm, clip_grad_value};
pub use core::{AmpArgs, Hyperparameters, OptimizerCore, SavedState, UpdateRule};
pub use cosine_annealing_lr::CosineAnnealingLR;
pub use error::{OptimError, Result};
pub use exponential_lr::ExponentialLR;
pub use grad_scaler::{GradScaler, GradScalerConfig, GradScalerState};
pub use group_builder::{
    is_norm_kind, DecayClass, GroupSpec, LayerIds, NamedParam, ParamGroupBuilder, ParamGroups,
};
pub use linear_lr::{LinearLR, LinearLRConfig};
pub use multi_step_lr::MultiStepLR;
pub use one_cycle_lr::{AnnealStrategy, OneCycleLR, OneCycleLRConfig};
pub use optimizer::{GroupConfig, GroupState, Optimizer, OptimizerMeta, OptimizerState};
pub use param_group::{NamedTensors, ParamGroup};
pub use reduce_lr_on_plateau::{
    PlateauMode, ReduceLROnPlateau, ReduceLROnPlateauConfig, ReduceLROnPlateauState, ThresholdMode,
};
pub use scheduler::{LrScheduler, SchedulerState};
pub use sequential_lr::SequentialLR;
pub use sgd::{Sgd, SgdConfig, SgdRule};
pub use step_lr::StepLR;
