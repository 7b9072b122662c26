//! Prints what Torchlight sees of this machine: libtorch's location, CUDA, the `auto` device,
//! and checks that autocast and pinned copies work there. `cargo run --example device_info`.

use torchlight::prelude::*;
use torchlight::tensor::{cuda_status, pin_memory, pinning_supported, to_device_non_blocking};

fn main() -> Result<(), TensorError> {
    let status = cuda_status();
    match &status.libtorch_lib_dir {
        Some(dir) => println!("libtorch:    {}", dir.display()),
        None => println!("libtorch:    (location unknown)"),
    }
    println!("CPU threads: {}", tch::get_num_threads());
    if status.available {
        println!("CUDA:        {} device(s), cuDNN {}", status.device_count, status.cudnn);
    } else {
        println!("CUDA:        unavailable: {}", status.reason.as_deref().unwrap_or("unknown reason"));
    }
    let device = "auto".parse::<DeviceSpec>()?.resolve()?;
    println!("auto device: {device:?}");

    seed_everything(0);
    let amp_kind = if device.is_cuda() { Kind::Half } else { Kind::BFloat16 };
    let x = Tensor::randn([8, 3, 32, 32], (Kind::Float, Device::Cpu));
    let w = Tensor::randn([16, 3, 3, 3], (Kind::Float, Device::Cpu)).to_device(device);
    let moved = to_device_non_blocking(&pin_memory(&x), device);
    let y = {
        let _grad = no_grad();
        let _amp = autocast(device, amp_kind)?;
        moved.conv2d(&w, None::<Tensor>, [1, 1], [1, 1], [1, 1], 1)
    };
    println!(
        "pinned host memory: {}",
        if pinning_supported() { "yes" } else { "no (CPU-only: plain copies)" }
    );
    println!("conv2d under autocast({amp_kind:?}): {}", summary(&y));
    Ok(())
}
