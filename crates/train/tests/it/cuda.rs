//! GPU tests (feature `cuda-tests`): the out-of-memory guard on a real CUDA allocation failure.
//!
//! The test fills the GPU with ballast (it owns the device while it runs; it is the only CUDA
//! test of this binary), so it also runs on GPUs of any size.

use crate::{temp_dir, torch_rng_lock};
use std::path::Path;
use std::sync::Arc;
use tch::{Device, Kind, Tensor};
use torchlight_data::Subset;
use torchlight_nn::ModuleT;
use torchlight_optim::{GradScaler, GradScalerConfig, Optimizer};
use torchlight_tensor::{cuda_status, seed_everything};
use torchlight_train::synthetic::{write_image_folder, Shape, SyntheticSpec};
use torchlight_train::*;
use torchlight_vision::{CenterCrop, Compose, ImageFolder, Resize, ToTensor};

/// Images in the training set, all in one batch at first.
const IMAGES: usize = 1024;
/// Free device memory left beside the ballast, in 64 MiB chunks (512 MiB): far less than a
/// batch of 1024 64-px images needs through resnet18 (about 2 GiB of activations), and far
/// more than one image needs.
const HEADROOM_CHUNKS: usize = 8;

fn config(root: &Path, batch_size: usize) -> TrainConfig {
    let mut c = TrainConfig::default();
    c.data.root = root.to_path_buf();
    c.data.image_size = 64;
    c.data.workers = 4;
    c.train.batch_size = batch_size;
    c.train.device = "cuda".into();
    c
}

fn image_loader(root: &Path, c: &TrainConfig) -> Loader {
    let t = Compose::default().then(Resize::new(64)).then(CenterCrop::new(64)).then(ToTensor);
    let folder = ImageFolder::new(root.join("train")).unwrap().with_transform(t);
    let split = Subset::new(Arc::new(folder), (0..IMAGES).collect()).unwrap();
    loader(split, c, true, Device::Cuda(0)).unwrap()
}

fn one_epoch(
    c: &TrainConfig,
    l: &mut Loader,
    model: &dyn torchlight_nn::Module,
    optimizer: &mut dyn Optimizer,
) -> Result<EpochTrain> {
    let mut scaler = GradScaler::new(GradScalerConfig::default().with_enabled(false))?;
    let mut step = 0;
    train_one_epoch(
        model,
        optimizer,
        None,
        &mut scaler,
        l,
        c,
        Device::Cuda(0),
        2,
        0,
        &mut step,
        &Progress::quiet(),
    )
}

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
    let tmp = temp_dir();
    let spec = SyntheticSpec {
        shapes: vec![Shape::Circle, Shape::Cross],
        per_class: [IMAGES / 2, 0, 0],
        size_range: (64, 72),
        seed: 21,
    };
    write_image_folder(tmp.path(), &spec).unwrap();
    seed_everything(0);
    let c = config(tmp.path(), IMAGES);
    let model = build_model(&c, 2, d).unwrap();
    let mut optimizer = build_optimizer(&c, &model).unwrap();
    // One small step first, so that cuDNN, cuBLAS and the optimizer state are set up before
    // the device is full, as they are when a real run runs out of memory mid-epoch.
    let x = Tensor::zeros([2, 3, 64, 64], (Kind::Float, d));
    let y = Tensor::zeros([2], (Kind::Int64, d));
    model.forward_t(&x, true).cross_entropy_for_logits(&y).backward();
    optimizer.step().unwrap();
    optimizer.zero_grad().unwrap();

    let ballast = fill_the_device(d);
    let mut l = image_loader(tmp.path(), &c);
    let err = one_epoch(&c, &mut l, &model, optimizer.as_mut()).unwrap_err();
    let fits = match &err {
        TrainError::OutOfMemory { device, batch_size, image_size, fits } => {
            assert_eq!((device.as_str(), *batch_size, *image_size), ("cuda:0", IMAGES, 64));
            fits.unwrap_or_else(|| panic!("the guard found no batch that fits: {err}"))
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    };
    // IMAGES is a power of two, and so is every halving of it.
    assert!(fits < IMAGES && fits.is_power_of_two(), "{fits} is not a halving of {IMAGES}");
    let text = err.to_string();
    assert!(text.contains(&format!("set train.batch_size = {fits}")), "{text}");

    // The advice holds: with the ballast still in place, an epoch at that batch size trains.
    let c = config(tmp.path(), fits);
    let mut l = image_loader(tmp.path(), &c);
    let epoch = one_epoch(&c, &mut l, &model, optimizer.as_mut())
        .unwrap_or_else(|e| panic!("the suggested batch size {fits} did not train: {e}"));
    assert_eq!(epoch.images, IMAGES as u64);
    assert!(epoch.metrics.loss.is_finite(), "{}", epoch.metrics.loss);
    drop(ballast);
}
