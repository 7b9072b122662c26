use tch::{Kind, Tensor};
use torchlight_tensor::layout::{chw_to_hwc, hwc_to_chw, nchw_to_nhwc, nhwc_to_nchw};

#[test]
fn nchw_and_nhwc_round_trip_contiguously() {
    let x = Tensor::arange(2 * 3 * 4 * 5, (Kind::Float, tch::Device::Cpu)).view([2, 3, 4, 5]);
    let y = nchw_to_nhwc(&x).unwrap();
    assert_eq!(y.size(), [2, 4, 5, 3]);
    assert!(y.is_contiguous());
    // Element [n, h, w, c] of the result is element [n, c, h, w] of the input.
    assert_eq!(y.double_value(&[1, 2, 3, 1]), x.double_value(&[1, 1, 2, 3]));
    // A contiguous result can be viewed, which a bare permute cannot.
    assert_eq!(y.view([-1]).size(), [120]);
    assert!(nhwc_to_nchw(&y).unwrap().equal(&x));
}

#[test]
fn hwc_and_chw_round_trip() {
    let img = Tensor::arange(4 * 6 * 3, (Kind::Uint8, tch::Device::Cpu)).view([4, 6, 3]);
    let chw = hwc_to_chw(&img).unwrap();
    assert_eq!(chw.size(), [3, 4, 6]);
    assert!(chw.is_contiguous());
    assert_eq!(chw.int64_value(&[2, 1, 5]), img.int64_value(&[1, 5, 2]));
    assert!(chw_to_hwc(&chw).unwrap().equal(&img));
}

#[test]
fn wrong_ranks_are_errors_that_say_what_was_expected() {
    let x = Tensor::zeros([3, 4, 5], (Kind::Float, tch::Device::Cpu));
    let err = nchw_to_nhwc(&x).unwrap_err().to_string();
    assert!(err.contains("[3, 4, 5]") && err.contains("[N, C, H, W]"), "{err}");
    let err = hwc_to_chw(&x.unsqueeze(0)).unwrap_err().to_string();
    assert!(err.contains("`image`") && err.contains("[H, W, C]"), "{err}");
}
