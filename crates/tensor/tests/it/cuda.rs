//! GPU tests (feature `cuda-tests`): run on a machine with an NVIDIA GPU and the full install.

use tch::{Device, Kind, Tensor};
use torchlight_tensor::*;

#[test]
fn auto_detects_cuda() {
    let status = cuda_status();
    assert!(status.available, "CUDA not detected: {:?}", status.reason);
    assert_eq!(device("auto").unwrap(), Device::Cuda(0));
    assert!(status.device_count >= 1);
}

#[test]
fn cuda_autocast_fp16_conv_outputs_half() {
    let d = Device::Cuda(0);
    let x = Tensor::ones([2, 3, 16, 16], (Kind::Float, d));
    let w = Tensor::ones([8, 3, 3, 3], (Kind::Float, d));
    let _amp = autocast(d, Kind::Half).unwrap();
    let y = x.conv2d(&w, None::<Tensor>, [1, 1], [1, 1], [1, 1], 1);
    assert_eq!(y.kind(), Kind::Half);
    assert_eq!(y.log_softmax(1, None).kind(), Kind::Float, "softmax is on CUDA's float32 list");
}

#[test]
fn pinned_non_blocking_round_trip_is_bit_exact_on_gpu() {
    let mut host = empty_pinned(&[1 << 16], Kind::Float).unwrap();
    assert!(is_pinned(&host));
    let _lock = crate::torch_rng_lock();
    host.copy_(&Tensor::randn([1 << 16], (Kind::Float, Device::Cpu)));
    let gpu = to_device_non_blocking(&host, Device::Cuda(0));
    let back = to_device_non_blocking(&gpu, Device::Cpu);
    tch::Cuda::synchronize(0);
    assert!(back.equal(&host));
}

#[test]
fn amp_unscale_kernel_runs_on_gpu() {
    let d = Device::Cuda(0);
    let grads = [Tensor::from_slice(&[2.0f32, f32::NAN]).to_device(d)];
    let found_inf = Tensor::zeros([1], (Kind::Float, d));
    let inv = Tensor::from_slice(&[0.5f32]).to_device(d);
    non_finite_check_and_unscale(&grads, &found_inf, &inv).unwrap();
    assert_eq!(found_inf.double_value(&[0]), 1.0);
}
