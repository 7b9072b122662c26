//! GPU tests (feature `cuda-tests`): the `StepRunner`'s out-of-memory guard on a real CUDA
//! allocation failure; Mixup/CutMix and the model EMA on device tensors.
//!
//! The out-of-memory test fills the GPU with ballast, so it runs the same on GPUs of any size;
//! every test here holds the torch generator lock, so it owns the device while it runs.

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

/// Mixup/CutMix on a CUDA batch: the draws come from the CPU generator as torchvision's do, so
/// the device batch mixes as the CPU one; the mixing itself runs on the device. Tolerance:
/// exact for CutMix (a copy) and the targets' one-hot/mix (the same float ops on both sides);
/// 1e-6 of |x| for Mixup's images (elementwise mul/add, IEEE-rounded on both; written before
/// a GPU run measured it).
#[test]
fn mixup_and_cutmix_on_the_device_mix_as_on_the_cpu() {
    assert!(cuda_status().available, "CUDA not detected: {:?}", cuda_status().reason);
    let d = Device::Cuda(0);
    let _lock = torch_rng_lock();
    let x = Tensor::randn([7, 3, 16, 16], (Kind::Float, Device::Cpu));
    let y = Tensor::from_slice(&[0i64, 1, 2, 3, 4, 0, 1]);
    let mix = torchlight_train::MixupCutMix::new(5, 0.8, 1.0).unwrap().with_label_smoothing(0.1).unwrap();
    let (mut mixups, mut cutmixes) = (0, 0);
    for seed in 0..12u64 {
        let (cx, cy, choice) =
            torchlight_tensor::with_torch_seed(seed, || mix.mix(&x, &y, 0)).unwrap().unwrap();
        let (gx, gy, gchoice) =
            torchlight_tensor::with_torch_seed(seed, || mix.mix(&x.to_device(d), &y.to_device(d), 0))
                .unwrap()
                .unwrap();
        assert_eq!(choice, gchoice, "seed {seed}: the same draws");
        assert_eq!(gx.device(), d);
        assert!(gy.to_device(Device::Cpu).equal(&cy), "seed {seed}: targets");
        let gx = gx.to_device(Device::Cpu);
        match choice {
            torchlight_train::Mixed::Mixup(_) => {
                mixups += 1;
                let diff = (&gx - &cx).abs().max().double_value(&[]);
                assert!(
                    diff <= 1e-6 * cx.abs().max().double_value(&[]),
                    "seed {seed}: Mixup differs by {diff}"
                );
            }
            _ => {
                cutmixes += 1;
                assert!(gx.equal(&cx), "seed {seed}: CutMix differs");
            }
        }
    }
    assert!(mixups > 0 && cutmixes > 0);
}

/// The model EMA on CUDA tensors (one `_foreach_lerp_` launch group per dtype) follows the CPU
/// EMA of the same weights: tolerance 1e-6 of max(|x|, 1) after 20 updates (the CUDA lerp
/// kernel may fuse its multiply-add; written before a GPU run measured it). The averaged
/// tensors stay on the device.
#[test]
fn the_model_ema_updates_on_the_device_as_on_the_cpu() {
    assert!(cuda_status().available, "CUDA not detected: {:?}", cuda_status().reason);
    let d = Device::Cuda(0);
    let _lock = torch_rng_lock();
    seed_everything(3);
    let cpu = resnet18_on(10, LayerOptions::new(Kind::Float, Device::Cpu));
    let gpu = resnet18_on(10, LayerOptions::new(Kind::Float, d));
    let copy_into = |dst: &dyn torchlight_nn::Module, src: &dyn torchlight_nn::Module| {
        let _g = torchlight_tensor::no_grad();
        for ((_, mut a), (_, b)) in
            torchlight_nn::state_dict(dst).into_iter().zip(torchlight_nn::state_dict(src))
        {
            a.copy_(&b);
        }
    };
    copy_into(&gpu, &cpu);
    let mut ema_cpu = torchlight_train::ModelEma::torchvision(0.9, 1).unwrap();
    let mut ema_gpu = torchlight_train::ModelEma::torchvision(0.9, 1).unwrap();
    ema_cpu.init(&cpu);
    ema_gpu.init(&gpu);
    for step in 1..=20u64 {
        {
            let _g = torchlight_tensor::no_grad();
            for (_, mut p) in named_parameters(&cpu) {
                let _ = p.g_add_(&(Tensor::randn_like(&p) * 0.1));
            }
        }
        copy_into(&gpu, &cpu);
        ema_cpu.update(&cpu, step).unwrap();
        ema_gpu.update(&gpu, step).unwrap();
    }
    for ((k, a), (_, b)) in ema_cpu.weights().iter().zip(ema_gpu.weights()) {
        assert_eq!(b.device(), d, "{k} stays on the device");
        let b = b.to_device(Device::Cpu);
        if !a.is_floating_point() {
            assert!(a.equal(&b), "{k}");
            continue;
        }
        let diff = (a - &b).abs().max().double_value(&[]);
        assert!(diff <= 1e-6 * a.abs().max().double_value(&[]).max(1.0), "{k}: {diff}");
    }
}
