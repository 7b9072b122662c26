//! GPU tests (feature `cuda-tests`): run on a machine with an NVIDIA GPU and the full install
//! (or through the GPU proof kit, `cargo xtask gpu-kit`).

use std::path::PathBuf;
use tch::{Device, Kind, Tensor};
use torchlight_tensor::*;

#[test]
fn auto_detects_cuda() {
    let status = cuda_status();
    assert!(status.available, "CUDA not detected: {:?}", status.reason);
    assert_eq!(device("auto").unwrap(), Device::Cuda(0));
    assert!(status.device_count >= 1);
}

/// The files of the shared libraries mapped into this process whose name is `name`.
fn mapped(name: &str) -> Vec<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps is readable");
    let mut paths: Vec<PathBuf> = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .map(PathBuf::from)
        .filter(|p| p.file_name().is_some_and(|n| n == name))
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

#[test]
fn cuda_comes_from_the_dlopen_of_libtorch_cuda_beside_libtorch_cpu() {
    // The linker drops libtorch_cuda.so (`--as-needed`), so CUDA can only have come through
    // `cuda_status()`'s dlopen; it must be the copy beside the libtorch_cpu.so in use, not
    // another install's.
    let status = cuda_status();
    assert!(status.available, "CUDA not detected: {:?}", status.reason);
    let dir = status.libtorch_lib_dir.clone().expect("the loaded libtorch_cpu.so is located");
    let cpu = mapped("libtorch_cpu.so");
    let cuda = mapped("libtorch_cuda.so");
    assert_eq!(cpu, vec![dir.join("libtorch_cpu.so")], "one libtorch_cpu.so, in {}", dir.display());
    assert_eq!(cuda, vec![dir.join("libtorch_cuda.so")], "libtorch_cuda.so loaded from {}", dir.display());
    assert!(status.cudnn, "cuDNN is part of the CUDA install");
}

/// A small convolutional forward: conv, batch norm (training statistics), ReLU, pooling, a
/// linear layer and log-softmax, as a classifier's forward pass runs it.
fn forward(x: &Tensor, conv: &Tensor, fc: &Tensor) -> (Kind, Tensor) {
    let h = x.conv2d(conv, None::<Tensor>, [1, 1], [1, 1], [1, 1], 1);
    let conv_kind = h.kind();
    let h = h
        .batch_norm(None::<Tensor>, None::<Tensor>, None::<Tensor>, None::<Tensor>, true, 0.1, 1e-5, false)
        .relu()
        .adaptive_avg_pool2d([1, 1])
        .flatten(1, -1);
    (conv_kind, h.linear(fc, None::<Tensor>).log_softmax(1, None))
}

/// Runs [`forward`] in float32 and under CUDA autocast with `kind`, and checks that the
/// convolution ran in `kind`, that the log-probabilities came out in float32 (log_softmax is
/// on autocast's float32 list), and that they differ from float32's, relative to their largest
/// magnitude, by more than nothing and at most `tolerance`.
fn assert_autocast_close_to_fp32(kind: Kind, tolerance: f64) {
    let d = Device::Cuda(0);
    let (x, conv, fc) = {
        let _lock = crate::torch_rng_lock();
        tch::manual_seed(5);
        (
            Tensor::randn([8, 3, 32, 32], (Kind::Float, Device::Cpu)).to_device(d),
            (Tensor::randn([16, 3, 3, 3], (Kind::Float, Device::Cpu)) * 0.2).to_device(d),
            (Tensor::randn([10, 16], (Kind::Float, Device::Cpu)) * 0.3).to_device(d),
        )
    };
    let (_, reference) = forward(&x, &conv, &fc);
    let (conv_kind, out) = {
        let _amp = autocast(d, kind).unwrap();
        forward(&x, &conv, &fc)
    };
    assert_eq!(conv_kind, kind, "convolutions run in {kind:?} under autocast");
    assert_eq!(out.kind(), Kind::Float, "log_softmax is on CUDA autocast's float32 list");
    let scale = reference.abs().max().double_value(&[]).max(1.0);
    let err = (&out - &reference).abs().max().double_value(&[]) / scale;
    assert!(
        err <= tolerance,
        "{kind:?} autocast vs fp32: error {err:e} relative to max |log p|, tolerance {tolerance:e}"
    );
    assert!(err > 0.0, "the autocast forward really ran in reduced precision");
}

#[test]
fn cuda_autocast_fp16_forward_runs_in_half_and_stays_close_to_fp32() {
    assert_autocast_close_to_fp32(Kind::Half, 1e-2);
}

#[test]
fn cuda_autocast_bf16_forward_runs_in_bfloat16_and_stays_close_to_fp32() {
    assert_autocast_close_to_fp32(Kind::BFloat16, 5e-2);
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
fn pin_memory_pins_a_pageable_tensor_and_its_copy_matches_the_pageable_copy() {
    let pageable = Tensor::arange(1 << 20, (Kind::Float, Device::Cpu));
    assert!(!is_pinned(&pageable));
    let pinned = pin_memory(&pageable);
    assert!(is_pinned(&pinned), "pin_memory on a CUDA machine gives page-locked memory");
    let a = to_device_non_blocking(&pinned, Device::Cuda(0));
    let b = pageable.to_device(Device::Cuda(0));
    assert!(a.equal(&b), "the non-blocking copy from pinned memory equals the blocking one");
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
