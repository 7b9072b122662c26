use tch::{Kind, Tensor};
use torchlight_tensor::{non_finite_check_and_unscale, TensorError};

fn scalar(v: f32) -> Tensor {
    Tensor::from_slice(&[v])
}

#[test]
fn unscales_in_place_and_flags_non_finite_gradients() {
    let grads = [Tensor::from_slice(&[2.0f32, 4.0, -8.0]), Tensor::from_slice(&[1.0f32, f32::INFINITY])];
    let found_inf = scalar(0.0);
    non_finite_check_and_unscale(&grads, &found_inf, &scalar(0.5)).unwrap();
    assert_eq!(Vec::<f32>::try_from(&grads[0]).unwrap(), [1.0, 2.0, -4.0]);
    assert_eq!(found_inf.double_value(&[0]), 1.0);
}

#[test]
fn finite_gradients_leave_found_inf_at_zero() {
    let grads = [Tensor::from_slice(&[3.0f32, 6.0])];
    let found_inf = scalar(0.0);
    non_finite_check_and_unscale(&grads, &found_inf, &scalar(1.0 / 3.0)).unwrap();
    assert_eq!(found_inf.double_value(&[0]), 0.0);
    assert!((grads[0].double_value(&[1]) - 2.0).abs() < 1e-6);
}

#[test]
fn a_libtorch_exception_becomes_an_error_with_its_message() {
    let grads = [Tensor::from_slice(&[1.0f32])];
    let wrong = Tensor::from_slice(&[0i64]).to_kind(Kind::Int64);
    let err = non_finite_check_and_unscale(&grads, &wrong, &scalar(1.0)).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, TensorError::Torch { op: "non_finite_check_and_unscale", .. }), "{text}");
    assert!(text.contains("found_inf"), "{text}");
}
