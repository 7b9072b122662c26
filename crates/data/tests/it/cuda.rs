//! GPU tests (feature `cuda-tests`): pinned batches on a machine with an NVIDIA GPU.

use crate::common::{f32s, Noisy};
use std::collections::BTreeSet;
use tch::Device;
use torchlight_data::DataLoader;
use torchlight_tensor::{cuda_status, is_pinned, to_device_non_blocking};

#[test]
fn pinned_batches_copy_to_the_gpu_without_blocking() {
    assert!(cuda_status().available, "CUDA not detected");
    let mut loader =
        DataLoader::builder(Noisy { len: 24 }).batch_size(4).num_workers(2).pin_memory(true).build().unwrap();
    let mut blocks = BTreeSet::new();
    for batch in loader.epoch(0) {
        let (images, labels) = batch.unwrap();
        assert!(is_pinned(&images) && is_pinned(&labels));
        blocks.insert(images.data_ptr() as usize);
        let on_gpu = to_device_non_blocking(&images, Device::Cuda(0));
        let back = on_gpu.to_device(Device::Cpu);
        assert_eq!(f32s(&back), f32s(&images));
        // `images` drops here; its pinned block goes back to libtorch's caching host allocator.
    }
    // Six batches of the same size: the allocator hands a freed block out again.
    assert!(blocks.len() < 6, "{} distinct pinned blocks for 6 batches", blocks.len());
}
