//! GPU tests (feature `cuda-tests`): the fused kernels and GradScaler on CUDA, including a
//! real fp16 overflow under autocast.

use crate::common::max_rel_err;
use tch::{Device, Kind, Tensor};
use torchlight_optim::{
    AdamConfig, AdamW, GradScaler, GradScalerConfig, Optimizer, ParamGroup, Sgd, SgdConfig,
};
use torchlight_tensor::autocast;

fn cuda() -> Device {
    let status = torchlight_tensor::cuda_status();
    assert!(status.available, "CUDA not available: {:?}", status.reason);
    Device::Cuda(0)
}

/// Parameters and 50 steps of gradients, drawn on the CPU so that both runs see the same ones.
fn data() -> (Vec<Tensor>, Vec<Vec<Tensor>>) {
    let _lock = crate::torch_rng_lock();
    tch::manual_seed(11);
    let shapes: [&[i64]; 3] = [&[64, 32, 3, 3], &[64], &[10, 64]];
    let init = shapes.iter().map(|s| Tensor::randn(*s, (Kind::Float, Device::Cpu))).collect();
    let grads = (0..50)
        .map(|_| shapes.iter().map(|s| Tensor::randn(*s, (Kind::Float, Device::Cpu))).collect())
        .collect();
    (init, grads)
}

fn run(opt: &mut dyn Optimizer, params: &[Tensor], grads: &[Vec<Tensor>]) {
    for step in grads {
        opt.zero_grad().unwrap();
        let mut loss = Tensor::zeros([], (Kind::Float, params[0].device()));
        for (p, g) in params.iter().zip(step) {
            loss += (p * g.to_device(p.device())).sum(Kind::Float);
        }
        loss.backward();
        opt.step().unwrap();
    }
}

fn named(params: &[Tensor]) -> Vec<(String, Tensor)> {
    params.iter().enumerate().map(|(i, p)| (format!("p{i}"), p.shallow_clone())).collect()
}

#[test]
fn fused_adamw_on_cuda_matches_the_cpu_plain_reference() {
    let d = cuda();
    let (init, grads) = data();
    let cpu: Vec<Tensor> = init.iter().map(|t| t.copy().set_requires_grad(true)).collect();
    let gpu: Vec<Tensor> = init.iter().map(|t| t.to_device(d).set_requires_grad(true)).collect();
    let cfg = AdamConfig::adamw().with_lr(1e-2).with_amsgrad(true);
    run(&mut AdamW::new(vec![ParamGroup::new(named(&cpu), cfg.with_fused(false))]).unwrap(), &cpu, &grads);
    run(&mut AdamW::new(vec![ParamGroup::new(named(&gpu), cfg.with_fused(true))]).unwrap(), &gpu, &grads);
    let err =
        cpu.iter().zip(&gpu).map(|(c, g)| max_rel_err(&g.to_device(Device::Cpu), c, 1.0)).fold(0.0, f64::max);
    assert!(
        err <= 1e-5,
        "CUDA fused AdamW vs CPU plain: max error {err:e} (relative to max(|x|, 1)), tolerance 1e-5"
    );
}

#[test]
fn fused_sgd_on_cuda_matches_the_cpu_plain_reference() {
    let d = cuda();
    let (init, grads) = data();
    let cpu: Vec<Tensor> = init.iter().map(|t| t.copy().set_requires_grad(true)).collect();
    let gpu: Vec<Tensor> = init.iter().map(|t| t.to_device(d).set_requires_grad(true)).collect();
    let cfg = SgdConfig::new(0.01).with_momentum(0.9).with_nesterov(true).with_weight_decay(1e-4);
    run(&mut Sgd::new(vec![ParamGroup::new(named(&cpu), cfg.with_fused(false))]).unwrap(), &cpu, &grads);
    run(&mut Sgd::new(vec![ParamGroup::new(named(&gpu), cfg.with_fused(true))]).unwrap(), &gpu, &grads);
    let err =
        cpu.iter().zip(&gpu).map(|(c, g)| max_rel_err(&g.to_device(Device::Cpu), c, 1.0)).fold(0.0, f64::max);
    assert!(
        err <= 1e-5,
        "CUDA fused SGD vs CPU plain: max error {err:e} (relative to max(|x|, 1)), tolerance 1e-5"
    );
}

#[test]
fn grad_scaler_on_cuda_skips_an_inf_step_and_backs_off() {
    let d = cuda();
    let w = Tensor::from_slice(&[1.0f32, -2.0, 3.0]).to_device(d).set_requires_grad(true);
    let mut opt =
        AdamW::new(vec![ParamGroup::new(vec![("w".into(), w.shallow_clone())], AdamConfig::adamw())])
            .unwrap();
    let mut scaler = GradScaler::new(GradScalerConfig::default()).unwrap();
    for (k, c) in [[1.0f32, 1.0, 1.0], [1.0, f32::INFINITY, 1.0], [0.5, 0.5, 0.5]].iter().enumerate() {
        let before = w.detach().copy();
        opt.zero_grad().unwrap();
        let loss = (&w * Tensor::from_slice(c).to_device(d)).sum(Kind::Float);
        scaler.scale(&loss).backward();
        scaler.step(&mut opt).unwrap();
        scaler.update().unwrap();
        let moved = max_rel_err(&w, &before, 1.0) > 0.0;
        assert_eq!(moved, k != 1, "step {k}: only the finite steps update the weights");
    }
    assert_eq!(scaler.get_scale(), 32768.0, "one Inf step halves the default scale");
    let step = opt.state_dict().tensors.into_iter().find(|(k, _)| k == "w.step").unwrap().1;
    assert_eq!(step.double_value(&[]), 2.0, "the skipped step does not count");
}

/// What one iteration of [`real_fp16_overflow`] saw: the scale after `update`, and whether the
/// weights moved.
#[derive(Debug, PartialEq)]
struct Iteration {
    scale_after: f64,
    moved: bool,
}

/// Twelve AMP iterations where the fp16 gradients really overflow: `y = x @ w.T` under fp16
/// autocast with `x` all 4s (`[64, 256]`), loss `y.sum()` in float32. The weight gradient is
/// `256 * scale` per entry, computed in fp16 (largest finite value 65504, and 65536 itself
/// rounds to Inf), so every scale from 2^16 down to 256 overflows and the first finite step
/// comes at scale 128. Returns each iteration, the final weights and AdamW's step count.
fn real_fp16_overflow(fused: bool) -> (Vec<Iteration>, Tensor, f64) {
    let d = cuda();
    let w = Tensor::full([8, 256], 0.01, (Kind::Float, d)).set_requires_grad(true);
    let x = Tensor::full([64, 256], 4.0, (Kind::Float, d));
    let cfg = AdamConfig::adamw().with_lr(1e-3).with_fused(fused);
    let mut opt = AdamW::new(vec![ParamGroup::new(vec![("w".into(), w.shallow_clone())], cfg)]).unwrap();
    let mut scaler = GradScaler::new(GradScalerConfig::default()).unwrap();
    let mut seen = Vec::new();
    for _ in 0..12 {
        let before = w.detach().copy();
        opt.zero_grad().unwrap();
        let y = {
            let _amp = autocast(d, Kind::Half).unwrap();
            x.linear(&w, None::<Tensor>)
        };
        assert_eq!(y.kind(), Kind::Half, "the linear layer runs in fp16 under autocast");
        let loss = y.to_kind(Kind::Float).sum(Kind::Float);
        scaler.scale(&loss).backward();
        assert_eq!(w.grad().kind(), Kind::Float, "the parameter's gradient is float32");
        scaler.step(&mut opt).unwrap();
        scaler.update().unwrap();
        seen.push(Iteration { scale_after: scaler.get_scale(), moved: !w.equal(&before) });
    }
    let step = opt.state_dict().tensors.into_iter().find(|(k, _)| k == "w.step").unwrap().1;
    (seen, w.detach().to_device(Device::Cpu), step.double_value(&[]))
}

#[test]
fn grad_scaler_skips_steps_on_a_real_fp16_overflow_and_finds_a_scale_that_fits() {
    let mut expected = Vec::new();
    let mut scale = 65536.0;
    for _ in 0..12 {
        // 256 * scale >= 65520 rounds to Inf in fp16: the step is skipped and the scale halves.
        let overflow = 256.0 * scale >= 65520.0;
        if overflow {
            scale /= 2.0;
        }
        expected.push(Iteration { scale_after: scale, moved: !overflow });
    }
    assert_eq!(expected.iter().filter(|i| !i.moved).count(), 9, "scales 2^16 .. 2^8 overflow");
    let (fused, w_fused, steps_fused) = real_fp16_overflow(true);
    let (plain, w_plain, steps_plain) = real_fp16_overflow(false);
    assert_eq!(fused, expected, "fused AdamW: skipped steps and scales");
    assert_eq!(plain, expected, "plain AdamW: skipped steps and scales");
    assert_eq!((steps_fused, steps_plain), (3.0, 3.0), "only the three finite steps count");
    let err = max_rel_err(&w_fused, &w_plain, 1.0);
    assert!(err <= 1e-6, "fused vs plain AdamW after the overflow: max error {err:e}, tolerance 1e-6");
    assert!(
        bool::try_from(w_fused.isfinite().all()).unwrap(),
        "no Inf reached the weights through the skipped steps"
    );
}
