use tch::Device;
use torchlight_tensor::{cuda_status, device, DeviceSpec, TensorError};

#[test]
fn auto_picks_cuda_exactly_when_it_is_available() {
    let status = cuda_status();
    let expected = if status.available { Device::Cuda(0) } else { Device::Cpu };
    assert_eq!(device("auto").unwrap(), expected);
    assert_eq!(DeviceSpec::default().resolve().unwrap(), expected);
    assert_eq!(device("cpu").unwrap(), Device::Cpu);
}

#[test]
fn the_loaded_libtorch_is_located_and_unavailability_is_explained() {
    let status = cuda_status();
    let dir = status.libtorch_lib_dir.as_ref().expect("libtorch_cpu.so is mapped into the test process");
    assert!(dir.join("libtorch_cpu.so").is_file(), "{}", dir.display());
    assert_eq!(status.available, status.reason.is_none(), "{status:?}");
    assert_eq!(status.available, tch::Cuda::is_available());
}

#[test]
fn naming_a_gpu_that_is_not_there_is_an_error_that_says_why() {
    let status = cuda_status();
    if status.available {
        let past = status.device_count;
        let err = DeviceSpec::Cuda(past).resolve().unwrap_err();
        assert!(
            matches!(err, TensorError::DeviceOutOfRange { index, count } if index == past && count == past)
        );
    } else {
        let err = device("cuda:0").unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, TensorError::CudaUnavailable { .. }), "{text}");
        assert!(text.contains("cuda:0") && text.contains(status.reason.as_deref().unwrap()), "{text}");
    }
}

#[test]
fn a_bad_device_string_is_an_error_naming_it() {
    let err = device("cuda:one").unwrap_err().to_string();
    assert!(err.contains("`cuda:one`") && err.contains("`one` is not a device number"), "{err}");
}
