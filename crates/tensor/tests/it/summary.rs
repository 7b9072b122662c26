use tch::{Kind, Tensor};
use torchlight_tensor::{ensure_finite, summary, TensorError};

#[test]
fn summary_counts_nan_and_inf_and_describes_the_finite_rest() {
    let t = Tensor::from_slice(&[1.0f32, f32::NAN, 3.0, f32::INFINITY, f32::NEG_INFINITY, 5.0]).view([2, 3]);
    let s = summary(&t);
    assert_eq!(s.shape, [2, 3]);
    assert_eq!(s.kind, Kind::Float);
    assert_eq!((s.numel, s.nan, s.inf), (6, 1, 2));
    assert_eq!((s.min, s.max, s.mean), (Some(1.0), Some(5.0), Some(3.0)));
    assert_eq!(s.std, Some(2.0));
    let line = s.to_string();
    assert!(line.starts_with("[2, 3] Float cpu"), "{line}");
    assert!(line.contains("NaN 1 Inf 2"), "{line}");
}

#[test]
fn summary_handles_empty_integer_and_grad_tensors() {
    let empty = summary(&Tensor::zeros([0, 4], (Kind::Float, tch::Device::Cpu)));
    assert_eq!((empty.numel, empty.min, empty.std), (0, None, None));
    assert!(empty.to_string().contains("min - max -"), "{empty}");
    let ints = summary(&Tensor::from_slice(&[3i64, -1, 7]));
    assert_eq!((ints.min, ints.max, ints.nan), (Some(-1.0), Some(7.0), 0));
    let w = Tensor::from_slice(&[1.0f64, 2.0]).set_requires_grad(true);
    let s = summary(&w);
    assert!(s.requires_grad && s.to_string().contains("requires_grad"));
}

#[test]
fn ensure_finite_names_the_tensor_and_counts_the_bad_values() {
    assert!(ensure_finite("weights", &Tensor::from_slice(&[0.5f32, -2.0])).is_ok());
    assert!(ensure_finite("labels", &Tensor::from_slice(&[1i64, 2])).is_ok());
    let bad = Tensor::from_slice(&[f32::NAN, 1.0, f32::NAN, f32::INFINITY]).to_kind(Kind::BFloat16);
    let err = ensure_finite("loss", &bad).unwrap_err();
    match &err {
        TensorError::NonFinite { name, nan, inf, numel, .. } => {
            assert_eq!((name.as_str(), *nan, *inf, *numel), ("loss", 2, 1, 4));
        }
        other => panic!("unexpected error {other}"),
    }
    assert!(err.to_string().contains("`loss`"), "{err}");
}
