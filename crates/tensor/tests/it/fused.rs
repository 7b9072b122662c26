use tch::{Kind, Tensor};
use torchlight_tensor::{
    add_scaled_, fused_adam_, fused_sgd_, set_grad_none, FusedAdamArgs, FusedSgdArgs, TensorError,
};

fn t(v: &[f32]) -> Tensor {
    Tensor::from_slice(v)
}

fn close(a: &Tensor, b: &[f64], tol: f64) {
    let a = Vec::<f64>::try_from(&a.to_kind(Kind::Double)).unwrap();
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol * y.abs().max(1.0), "{x} vs {y} (tolerance {tol})");
    }
}

#[test]
fn fused_adamw_first_step_matches_the_closed_form_and_counts_the_step() {
    let p = t(&[1.0, -2.0]);
    let g = t(&[0.5, 0.25]);
    let (m, v, step) = (p.zeros_like(), p.zeros_like(), Tensor::from(0.0f32));
    let args = FusedAdamArgs {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.999,
        weight_decay: 0.01,
        eps: 1e-8,
        amsgrad: false,
        maximize: false,
        decoupled: true,
    };
    fused_adam_(&[&p], &[&g], &[&m], &[&v], &[], &[&step], &args, None, None).unwrap();
    // Step 1: decay by (1 - lr * wd), then the bias-corrected update is lr * sign(g).
    let expect = [1.0 * (1.0 - 0.001) - 0.1, -2.0 * (1.0 - 0.001) - 0.1];
    close(&p, &expect, 1e-6);
    close(&m, &[0.05, 0.025], 1e-6);
    assert_eq!(step.double_value(&[]), 1.0);
}

#[test]
fn fused_adam_skips_the_update_and_the_step_count_when_found_inf_is_set() {
    let p = t(&[1.0, 2.0]);
    let g = t(&[0.5, 0.25]);
    let (m, v, vmax, step) = (p.zeros_like(), p.zeros_like(), p.zeros_like(), Tensor::from(3.0f32));
    let args = FusedAdamArgs {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.999,
        weight_decay: 0.0,
        eps: 1e-8,
        amsgrad: true,
        maximize: false,
        decoupled: false,
    };
    let found_inf = t(&[1.0]);
    let scale = t(&[4.0]);
    fused_adam_(&[&p], &[&g], &[&m], &[&v], &[&vmax], &[&step], &args, Some(&scale), Some(&found_inf))
        .unwrap();
    close(&p, &[1.0, 2.0], 0.0);
    assert_eq!(step.double_value(&[]), 3.0);
}

#[test]
fn fused_sgd_first_step_initialises_the_momentum_buffer_to_the_gradient() {
    let p = t(&[1.0, 2.0]);
    let g = t(&[0.5, -1.0]);
    let buf = p.zeros_like();
    let args = FusedSgdArgs {
        lr: 0.1,
        momentum: 0.9,
        dampening: 0.0,
        weight_decay: 0.0,
        nesterov: false,
        maximize: false,
    };
    fused_sgd_(&[&p], &[&g], &[&buf], &args, true, None, None).unwrap();
    close(&buf, &[0.5, -1.0], 0.0);
    close(&p, &[0.95, 2.1], 1e-6);
    // Second step: buf = 0.9 * buf + g.
    fused_sgd_(&[&p], &[&g], &[&buf], &args, false, None, None).unwrap();
    close(&buf, &[0.95, -1.9], 1e-6);
    close(&p, &[0.855, 2.29], 1e-6);
}

#[test]
fn mismatched_lists_are_an_error_naming_the_list() {
    let p = t(&[1.0]);
    let args = FusedSgdArgs {
        lr: 0.1,
        momentum: 0.9,
        dampening: 0.0,
        weight_decay: 0.0,
        nesterov: false,
        maximize: false,
    };
    let err = fused_sgd_(&[&p], &[&p], &[], &args, true, None, None).unwrap_err();
    assert!(matches!(err, TensorError::Torch { op: "fused_sgd_", .. }), "{err}");
    assert!(err.to_string().contains("momentum_buffers"), "{err}");
}

#[test]
fn set_grad_none_drops_the_gradient() {
    let w = t(&[1.0, 2.0]).set_requires_grad(true);
    (&w * 3.0).sum(Kind::Float).backward();
    assert!(w.grad().defined());
    set_grad_none(&w).unwrap();
    assert!(!w.grad().defined());
    (&w * 2.0).sum(Kind::Float).backward();
    close(&w.grad(), &[2.0, 2.0], 0.0);
}

#[test]
fn add_scaled_adds_alpha_times_other_in_place() {
    let a = t(&[1.0, 2.0]);
    add_scaled_(&a, &t(&[4.0, -2.0]), 0.5).unwrap();
    close(&a, &[3.0, 1.0], 0.0);
    let err = add_scaled_(&a, &t(&[1.0, 2.0, 3.0]), 1.0).unwrap_err();
    assert!(matches!(err, TensorError::Torch { op: "add_scaled_", .. }), "{err}");
}
