//! Torchlight: train image models the PyTorch way, in Rust, on libtorch.
//!
//! This facade re-exports each Torchlight crate as a module (`torchlight::tensor`, ...) and
//! gathers the names most programs need in [`prelude`], including `#[derive(Module)]` for
//! models of your own (a crate that depends on `torchlight` alone can use it).
//! `torchlight::distributed` (data-parallel training on c10d) comes with the `distributed`
//! feature.
//!
//! ```
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
//! ```

pub use tch;
pub use torchlight_checkpoint as checkpoint;
pub use torchlight_data as data;
#[cfg(feature = "distributed")]
pub use torchlight_distributed as distributed;
pub use torchlight_export as export;
pub use torchlight_nn as nn;
pub use torchlight_optim as optim;
pub use torchlight_tensor as tensor;
pub use torchlight_train as train;
pub use torchlight_vision as vision;

/// The names most training programs use, for `use torchlight::prelude::*`.
pub mod prelude {
    pub use tch::nn::ModuleT;
    pub use tch::{Device, Kind, Tensor};
    pub use torchlight_checkpoint::{Checkpoint, CheckpointManager, MetricMode, Snapshot};
    pub use torchlight_data::{DataLoader, Dataset, DatasetExt};
    pub use torchlight_nn::{
        count_parameters, freeze_all_but, load_weights, named_parameters, resnet18, resnet34, resnet50,
        unfreeze, CrossEntropyLoss, LayerOptions, LoadOptions, Module,
    };
    pub use torchlight_optim::{AdamConfig, AdamW, GradScaler, LrScheduler, Optimizer, ParamGroup};
    pub use torchlight_tensor::{
        autocast, no_grad, seed_everything, summary, AutocastGuard, DeviceSpec, TensorError,
    };
}

#[cfg(test)]
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
