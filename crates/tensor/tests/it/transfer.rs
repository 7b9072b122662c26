use tch::{Device, Kind, Tensor};
use torchlight_tensor::{
    cuda_is_available, empty_pinned, is_pinned, pin_memory, pinning_supported, to_device_non_blocking,
};

#[test]
fn pinning_is_supported_exactly_when_cuda_is() {
    assert_eq!(pinning_supported(), cuda_is_available());
}

#[test]
fn pinned_buffers_have_the_requested_shape_and_kind() {
    let t = empty_pinned(&[4, 3, 8, 8], Kind::Uint8).unwrap();
    assert_eq!((t.size(), t.kind(), t.device()), (vec![4, 3, 8, 8], Kind::Uint8, Device::Cpu));
    assert_eq!(is_pinned(&t), pinning_supported());
    let src = Tensor::arange(10, (Kind::Float, Device::Cpu));
    let pinned = pin_memory(&src);
    assert!(pinned.equal(&src));
    assert_eq!(is_pinned(&pinned), pinning_supported());
}

#[test]
fn non_blocking_round_trip_is_bit_exact() {
    // NaN payloads and signed zeros included: a bit-exact copy keeps all of them.
    let bits: Vec<i32> = vec![0x7fc0_0001, i32::MIN, 0, 0x3f80_0000, 0x0000_0001, -1];
    let src = Tensor::from_slice(&bits).view_dtype(Kind::Float);
    let target = if cuda_is_available() { Device::Cuda(0) } else { Device::Cpu };
    let moved = to_device_non_blocking(&pin_memory(&src), target);
    assert_eq!(moved.device(), target);
    let back = to_device_non_blocking(&moved, Device::Cpu).view_dtype(Kind::Int);
    assert_eq!(Vec::<i32>::try_from(&back).unwrap(), bits);
}
