//! GPU tests (feature `cuda-tests`): the `StepRunner`'s out-of-memory guard on a real CUDA
//! allocation failure.
//!
//! The test fills the GPU with ballast, so it runs the same on GPUs of any size; it owns the
//! device while it runs, being the only CUDA test of this binary.

use crate::torch_rng_lock;
use tch::{Device, Kind, Tensor};
use torchlight_nn::{named_parameters, resnet18_on, LayerOptions};
use torchlight_optim::{AdamConfig, AdamW, ParamGroup};
use torchlight_tensor::{cuda_status, seed_everything};
use torchlight_train::{Classification, StepConfig, StepRunner, TrainError};

/// Images in the batch that does not fit.
const BATCH: i64 = 1024;
/// Free device memory left beside the ballast, in 64 MiB chunks (512 MiB): far less than a
/// batch of 1024 64-px images needs through resnet18 (about 2 GiB of activations), and far
/// more than one image needs.
const HEADROOM_CHUNKS: usize = 8;

/// Allocates device memory in 64 MiB chunks until an allocation fails, and gives
/// `HEADROOM_CHUNKS` of them back (to libtorch's caching allocator), leaving between 512 and
/// 576 MiB free whatever the GPU's size.
fn fill_the_device(d: Device) -> Vec<Tensor> {
    let mut ballast = Vec::new();
    while let Ok(t) = Tensor::f_empty([64i64 << 20], (Kind::Uint8, d)) {
        ballast.push(t);
    }
    assert!(ballast.len() >= HEADROOM_CHUNKS, "the device filled with {} 64 MiB chunks", ballast.len());
    ballast.truncate(ballast.len() - HEADROOM_CHUNKS);
    ballast
}

#[test]
fn out_of_memory_names_the_largest_batch_that_fits_and_that_batch_trains() {
    assert!(cuda_status().available, "CUDA not detected: {:?}", cuda_status().reason);
    let d = Device::Cuda(0);
    let _lock = torch_rng_lock();
    seed_everything(0);
    let model = resnet18_on(2, LayerOptions::new(Kind::Float, d));
    let mut optimizer =
        AdamW::new(vec![ParamGroup::new(named_parameters(&model), AdamConfig::adamw())]).unwrap();
    let task = Classification::new(2);
    let mut runner = StepRunner::new(StepConfig::default(), d).unwrap();
    let batch =
        |n: i64| (Tensor::randn([n, 3, 64, 64], (Kind::Float, d)), Tensor::randint(2, [n], (Kind::Int64, d)));
    // One small step first, so that cuDNN, cuBLAS and the optimizer state are set up before the
    // device is full, as they are when a real run runs out of memory mid-epoch.
    let _ = runner.step(&model, &task, &batch(2), &mut optimizer, true).unwrap();
    let big = batch(BATCH);

    let ballast = fill_the_device(d);
    let err = runner.forward_backward(&model, &task, &big).unwrap_err();
    let fits = match &err {
        TrainError::OutOfMemory { device, batch_size, input_shape, fits } => {
            assert_eq!((device.as_str(), *batch_size), ("cuda:0", BATCH as usize));
            assert_eq!(input_shape.as_slice(), &[BATCH, 3, 64, 64]);
            fits.unwrap_or_else(|| panic!("the guard found no batch that fits: {err}"))
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    };
    // BATCH is a power of two, and so is every halving of it.
    assert!(fits < BATCH as usize && fits.is_power_of_two(), "{fits} is not a halving of {BATCH}");
    let text = err.to_string();
    assert!(text.contains(&format!("set train.batch_size = {fits}")), "{text}");
    assert!(!model.fc.weight.grad().defined(), "the failed step left no gradient behind");

    // The advice holds: with the ballast still in place, a whole step at that batch size runs.
    let part = (big.0.narrow(0, 0, fits as i64), big.1.narrow(0, 0, fits as i64));
    let (loss, _) = runner
        .step(&model, &task, &part, &mut optimizer, true)
        .unwrap_or_else(|e| panic!("a step at the suggested batch size {fits} failed: {e}"));
    assert!(loss.double_value(&[]).is_finite(), "{loss}");
    drop(ballast);
}
