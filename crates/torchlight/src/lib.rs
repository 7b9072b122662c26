//! Torchlight: train image models the PyTorch way, in Rust, on libtorch.
//!
//! This facade re-exports each Torchlight crate as a module (`torchlight::tensor`, ...) and
//! gathers the names a hand-written training program needs in [`prelude`], including
//! `#[derive(Module)]` for models of your own (a crate that depends on `torchlight` alone can
//! use it).
//!
//! # Features
//! One per crate, all on by default; each turns on the crates it builds on:
//! `tensor` (libtorch through tch), `nn`, `optim`, `data`, `vision`, `checkpoint`, `export`,
//! `train` (the loop), `recipes` (what `torchlight train` runs: the TOML config, image
//! classification, the doctor; `train` alone pulls none of it). `default-features = false, features = ["vision"]` gives ImageFolder, the
//! transforms and the DataLoader with no libtorch in the build (`data` batches are then
//! plain `Array`s; with `tensor` on too they are tch tensors). `torchlight::distributed`
//! (data-parallel training on c10d) comes with the `distributed` feature, off by default.
//!
//! ```
//! # #[cfg(feature = "nn")] {
//! use torchlight::prelude::*;
//!
//! fn main() -> Result<(), TensorError> {
//!     seed_everything(42); // torch CPU + CUDA and Torchlight's RNGs
//!     let device = "auto".parse::<DeviceSpec>()?.resolve()?; // cuda:0 when available, else cpu
//!     let model = resnet18(3); // torchvision's keys: conv1.weight, fc.bias, ...
//!     torchlight::nn::to_device(&model, device);
//!     let x = Tensor::randn([8, 3, 64, 64], (Kind::Float, device));
//!     let logits = {
//!         let _grad = no_grad();
//!         let amp = if device.is_cuda() { Kind::Half } else { Kind::BFloat16 };
//!         let _amp = autocast(device, amp)?; // torch.autocast(device, dtype)
//!         model.forward_t(&x, false) // false: eval mode, explicitly
//!     };
//!     assert_eq!(logits.size(), [8, 3]);
//!     println!("{}", summary(&logits));
//!     Ok(())
//! }
//! # main().unwrap();
//! # }
//! ```

#[cfg(feature = "tensor")]
pub use tch;
pub use torchlight_base as base;
#[cfg(feature = "checkpoint")]
pub use torchlight_checkpoint as checkpoint;
#[cfg(feature = "data")]
pub use torchlight_data as data;
#[cfg(feature = "distributed")]
pub use torchlight_distributed as distributed;
#[cfg(feature = "export")]
pub use torchlight_export as export;
#[cfg(feature = "nn")]
pub use torchlight_nn as nn;
#[cfg(feature = "optim")]
pub use torchlight_optim as optim;
#[cfg(feature = "recipes")]
pub use torchlight_recipes as recipes;
#[cfg(feature = "tensor")]
pub use torchlight_tensor as tensor;
#[cfg(feature = "train")]
pub use torchlight_train as train;
#[cfg(feature = "vision")]
pub use torchlight_vision as vision;

/// The names a hand-written training program uses, for `use torchlight::prelude::*`: a
/// model from layers, a dataset (your own, or tensors in memory), a DataLoader, a loss, an
/// optimizer and its schedule, seeding, devices, no-grad, autocast and checkpoints. Each group
/// is there when its feature is on.
pub mod prelude {
    /// `rng.random::<f32>()` and friends on the [`Rng`] a `Dataset::get` receives.
    pub use torchlight_base::rand::Rng as _;
    pub use torchlight_base::{rng_from_seed, Array, Rng};

    #[cfg(feature = "tensor")]
    pub use tch::nn::ModuleT;
    #[cfg(feature = "tensor")]
    pub use tch::{Device, Kind, Tensor};
    #[cfg(feature = "tensor")]
    pub use torchlight_tensor::{
        autocast, no_grad, seed_everything, summary, to_device_non_blocking, AutocastGuard, DeviceSpec,
        TensorError,
    };

    #[cfg(feature = "nn")]
    pub use torchlight_nn::{
        count_parameters, freeze_all_but, load_weights, named_parameters, resnet18, resnet34, resnet50,
        unfreeze, BCEWithLogitsLoss, BatchNorm2d, Conv2d, Conv2dConfig, CrossEntropyLoss, Dropout, Flatten,
        LayerOptions, Linear, LoadOptions, MSELoss, Module, NnError, ReLU, Sequential, Tanh,
    };

    #[cfg(feature = "optim")]
    pub use torchlight_optim::{
        clip_grad_norm, Adam, AdamConfig, AdamW, GradScaler, LrScheduler, OptimError, Optimizer, ParamGroup,
        Sgd, SgdConfig,
    };

    #[cfg(feature = "data")]
    pub use torchlight_data::{
        random_split, ArrayCollate, DataError, DataLoader, Dataset, DatasetExt, DefaultCollate, Subset,
    };
    #[cfg(all(feature = "data", feature = "tensor"))]
    pub use torchlight_data::{HostTensor, TensorDataset};

    #[cfg(feature = "vision")]
    pub use torchlight_vision::{Compose, ImageFolder, Normalize, ToTensor, Transform};

    #[cfg(feature = "checkpoint")]
    pub use torchlight_checkpoint::{Checkpoint, CheckpointManager, MetricMode, Snapshot};

    #[cfg(feature = "train")]
    pub use torchlight_train::{
        Batch, Classification, FitSummary, Interval, Monitor, MultiLabel, Regression, RegressionLoss, Stage,
        StepOutput, Task, Trainer,
    };
}

/// The README examples of the crates that use libtorch and those of
/// `docs/using-the-crates.md`, compiled (and run, unless marked `no_run`) as doc tests, so the
/// examples cannot drift from the code. (base, build and setup test their own READMEs.)
#[cfg(all(doctest, feature = "recipes", feature = "export"))]
mod readme_examples {
    #[doc = include_str!("../README.md")]
    struct Torchlight;
    #[doc = include_str!("../../tensor/README.md")]
    struct Tensor;
    #[doc = include_str!("../../nn/README.md")]
    struct Nn;
    #[doc = include_str!("../../derive/README.md")]
    struct Derive;
    #[doc = include_str!("../../optim/README.md")]
    struct Optim;
    #[doc = include_str!("../../data/README.md")]
    struct Data;
    #[doc = include_str!("../../vision/README.md")]
    struct Vision;
    #[doc = include_str!("../../checkpoint/README.md")]
    struct Checkpoint;
    #[doc = include_str!("../../export/README.md")]
    struct Export;
    #[doc = include_str!("../../train/README.md")]
    struct Train;
    #[doc = include_str!("../../recipes/README.md")]
    struct Recipes;
    #[doc = include_str!("../../../docs/using-the-crates.md")]
    struct UsingTheCrates;
}

#[cfg(all(test, feature = "nn"))]
mod tests {
    #[test]
    fn the_prelude_reaches_the_tensor_crate() {
        use crate::prelude::*;
        let t = Tensor::from_slice(&[1.0f32, 2.0]);
        assert_eq!(summary(&t).mean, Some(1.5));
        assert_eq!("cpu".parse::<DeviceSpec>().unwrap().resolve().unwrap(), Device::Cpu);
        let model = resnet18(3);
        assert_eq!(count_parameters(&model).total, 11_178_051);
    }
}
