use tch::{Device, Kind, Tensor};
use torchlight_tensor::{autocast, autocast_if, autocast_state, no_grad, TensorError};

fn ones(shape: &[i64]) -> Tensor {
    Tensor::ones(shape, (Kind::Float, Device::Cpu))
}

#[test]
fn no_grad_stops_tracking_until_dropped() {
    let w = ones(&[3]).set_requires_grad(true);
    {
        let _guard = no_grad();
        assert!(!(&w * 2.0).requires_grad());
    }
    assert!((&w * 2.0).requires_grad());
}

#[test]
fn cpu_autocast_runs_matmul_and_conv_in_bfloat16_and_restores_on_drop() {
    let x = ones(&[1, 3, 8, 8]);
    let w = ones(&[4, 3, 3, 3]);
    let a = ones(&[4, 4]);
    {
        let _amp = autocast(Device::Cpu, Kind::BFloat16).unwrap();
        assert_eq!(autocast_state(Device::Cpu).unwrap(), (true, Kind::BFloat16));
        assert_eq!(a.matmul(&a).kind(), Kind::BFloat16);
        let y = x.conv2d(&w, None::<Tensor>, [1, 1], [0, 0], [1, 1], 1);
        assert_eq!(y.kind(), Kind::BFloat16);
        // Ops on PyTorch's CPU float32 list (losses among them) run in float32 under autocast.
        let loss = y.mse_loss(&y.zeros_like(), tch::Reduction::Mean);
        assert_eq!(loss.kind(), Kind::Float);
    }
    assert!(!autocast_state(Device::Cpu).unwrap().0);
    assert_eq!(a.matmul(&a).kind(), Kind::Float);
}

#[test]
fn autocast_guards_nest_and_a_disabled_one_turns_it_off_inside() {
    let a = ones(&[2, 2]);
    let _outer = autocast(Device::Cpu, Kind::BFloat16).unwrap();
    {
        let _inner = autocast_if(false, Device::Cpu, Kind::BFloat16).unwrap();
        assert_eq!(a.matmul(&a).kind(), Kind::Float);
    }
    assert_eq!(a.matmul(&a).kind(), Kind::BFloat16);
}

#[test]
fn autocast_state_is_per_thread() {
    let _amp = autocast(Device::Cpu, Kind::BFloat16).unwrap();
    let other = std::thread::spawn(|| {
        let a = ones(&[2, 2]);
        a.matmul(&a).kind()
    })
    .join()
    .unwrap();
    assert_eq!(other, Kind::Float);
}

#[test]
fn unsupported_autocast_requests_are_errors() {
    let err = autocast(Device::Cpu, Kind::Double).err().unwrap();
    assert!(matches!(err, TensorError::UnsupportedAutocast { kind: Kind::Double, .. }), "{err}");
    if !torchlight_tensor::cuda_is_available() {
        let err = autocast(Device::Cuda(0), Kind::Half).err().unwrap();
        assert!(matches!(err, TensorError::CudaUnavailable { .. }), "{err}");
        // Switched off, it is a no-op anywhere, as config-driven code needs.
        assert!(autocast_if(false, Device::Cuda(0), Kind::Half).is_ok());
    }
}
