//! A step skipped for non-finite gradients leaves the optimizer as PyTorch's GradScaler leaves
//! it when it skips `optimizer.step()` (fixture from `make_skipped_steps.py`): after a skipped
//! first step no state at all, so the next step is the parameter's first (SGD's buffer is the
//! gradient, not `(1 - dampening) * g` on a zero buffer; Adam counts from 1), and a later
//! skipped step changes no state. Checked for the immediate read and the deferred one (the
//! flag goes to the fused kernels and is read a step later), plain and fused optimizers.

use crate::fixture;
use std::collections::HashMap;
use tch::{Device, Kind, Tensor};
use torchlight_nn::{named_parameters, Linear};
use torchlight_optim::{Adam, AdamConfig, AdamW, Optimizer, ParamGroup, Sgd, SgdConfig};
use torchlight_train::*;

/// Relative to max(|x|, 1), the optimizer parity tests' bound (measured there across
/// ATEN_CPU_CAPABILITY default/avx2/avx512 at most 6.6e-7; these five-element runs are within it).
const RTOL: f64 = 2e-6;

/// loss = sum(weight * c) over a [1, 5] weight: its gradient is the batch's coefficients.
struct Dot;

impl Task<Linear, (Tensor, Tensor)> for Dot {
    fn step(&self, model: &Linear, batch: &(Tensor, Tensor), _: Stage) -> Result<StepOutput> {
        let loss = (&model.weight * &batch.0).sum(Kind::Float);
        Ok(StepOutput { output: loss.detach(), target: batch.1.shallow_clone(), loss })
    }
}

fn optimizer(case: &str, model: &Linear, fused: bool) -> Box<dyn Optimizer> {
    let params = named_parameters(model);
    match case {
        "sgd" => Box::new(
            Sgd::new(vec![ParamGroup::new(
                params,
                SgdConfig::new(0.1).with_momentum(0.9).with_dampening(0.5).with_fused(fused),
            )])
            .unwrap(),
        ),
        "sgd_nesterov" => Box::new(
            Sgd::new(vec![ParamGroup::new(
                params,
                SgdConfig::new(0.1)
                    .with_momentum(0.9)
                    .with_nesterov(true)
                    .with_weight_decay(0.01)
                    .with_fused(fused),
            )])
            .unwrap(),
        ),
        "adam" => Box::new(
            Adam::new(vec![ParamGroup::new(params, AdamConfig::new(0.05).with_fused(fused))]).unwrap(),
        ),
        _ => Box::new(
            AdamW::new(vec![ParamGroup::new(
                params,
                AdamConfig::adamw().with_lr(0.05).with_weight_decay(0.1).with_amsgrad(true).with_fused(fused),
            )])
            .unwrap(),
        ),
    }
}

fn max_rel_err(a: &Tensor, b: &Tensor) -> f64 {
    let (a, b) = (a.to_kind(Kind::Double).reshape([-1]), b.to_kind(Kind::Double).reshape([-1]));
    ((&a - &b).abs() / b.abs().clamp_min(1.0)).max().double_value(&[])
}

/// The optimizer's state as `field -> tensor` for the one parameter `weight`.
fn state_of(opt: &dyn Optimizer) -> HashMap<String, Tensor> {
    opt.state_dict()
        .tensors
        .into_iter()
        .map(|(k, t)| (k.strip_prefix("weight.").expect("the one parameter").to_string(), t.copy()))
        .collect()
}

/// Runs one case and checks the parameter after every step, and the state after every step
/// where `settle_each` (the deferred check read at once) or at the end (read by the next step).
fn check(case_name: &str, fused: bool, read: GuardRead, settle_each: bool) {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("skipped_steps.json")).unwrap()).unwrap();
    let t: HashMap<String, Tensor> =
        Tensor::read_safetensors(fixture("skipped_steps.safetensors")).unwrap().into_iter().collect();
    let case = meta["cases"].as_array().unwrap().iter().find(|c| c["name"] == case_name).unwrap();
    let steps = meta["steps"].as_u64().unwrap() as usize;
    let what = format!("{case_name} (fused {fused}, {read:?}, settled each step {settle_each})");
    let model = Linear::new(5, 1, false);
    tch::no_grad(|| model.weight.shallow_clone().copy_(&t["init"].reshape([1, 5])));
    let mut opt = optimizer(case_name, &model, fused);
    let config =
        StepConfig { on_nonfinite: NonFiniteAction::Skip, guard_read: read, ..StepConfig::default() };
    let mut runner = StepRunner::new(config, Device::Cpu).unwrap();
    let check_state = |opt: &dyn Optimizer, k: usize| {
        let state = state_of(opt);
        let mut fields: Vec<&String> = state.keys().collect();
        fields.sort();
        let want: Vec<&str> =
            case["fields"][k].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        assert_eq!(fields, want, "{what}: the state's fields after step {}", k + 1);
        for (field, value) in &state {
            if field == "step" {
                let want = case["steps"][k].as_f64().unwrap();
                assert_eq!(value.double_value(&[]), want, "{what}: Adam's step count after step {}", k + 1);
                continue;
            }
            let err = max_rel_err(value, &t[&format!("{case_name}.after{}.{field}", k + 1)]);
            assert!(err <= RTOL, "{what}: {field} after step {}: relative error {err:e} > {RTOL:e}", k + 1);
        }
    };
    for k in 0..steps {
        let batch = (t["coef"].get(k as i64).reshape([1, 5]), Tensor::zeros([1], (Kind::Float, Device::Cpu)));
        let last = k + 1 == steps;
        let _ = runner.step(&model, &Dot, &batch, opt.as_mut(), last).unwrap();
        let err = max_rel_err(&model.weight, &t[&format!("{case_name}.after{}", k + 1)]);
        assert!(err <= RTOL, "{what}: weight after step {}: relative error {err:e} > {RTOL:e}", k + 1);
        if settle_each || last {
            runner.settle(&model, opt.as_mut()).unwrap();
            check_state(opt.as_ref(), k);
        }
    }
    assert_eq!(runner.skipped_steps(), meta["inf_steps"].as_array().unwrap().len() as u64, "{what}: skips");
}

#[test]
fn a_skipped_step_leaves_the_optimizer_state_as_pytorchs_grad_scaler_skip_does() {
    for case in ["sgd", "sgd_nesterov", "adam", "adamw"] {
        for fused in [false, true] {
            check(case, fused, GuardRead::Immediate, true);
            check(case, fused, GuardRead::Deferred, true);
            check(case, fused, GuardRead::Deferred, false);
        }
    }
}

/// In-memory `(coefficients, target)` batches.
struct Held(Vec<(Tensor, Tensor)>);

struct HeldIter<'a>(std::slice::Iter<'a, (Tensor, Tensor)>);

impl Iterator for HeldIter<'_> {
    type Item = Result<(Tensor, Tensor)>;
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(x, y)| Ok((x.shallow_clone(), y.shallow_clone())))
    }
}

impl EpochBatches<(Tensor, Tensor)> for HeldIter<'_> {
    fn stall(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

impl BatchSource<(Tensor, Tensor)> for Held {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn batches(&mut self, _: u64, first: usize) -> Box<dyn EpochBatches<(Tensor, Tensor)> + '_> {
        Box::new(HeldIter(self.0[first.min(self.0.len())..].iter()))
    }
}

/// With the deferred read and `on_nonfinite = Stop`, a checkpoint due right after the bad
/// first step is not written with that step's fresh optimizer state (the zero SGD buffer a
/// resume would then treat as existing): the check is read before the save, and the run
/// stops there, at that step, as the immediate read does.
#[test]
fn a_checkpoint_due_after_a_deferred_bad_step_is_not_saved_with_its_fresh_state() {
    let t: HashMap<String, Tensor> =
        Tensor::read_safetensors(fixture("skipped_steps.safetensors")).unwrap().into_iter().collect();
    let tmp = crate::temp_dir();
    let mut model = Linear::new(5, 1, false);
    tch::no_grad(|| model.weight.shallow_clone().copy_(&t["init"].reshape([1, 5])));
    let mut opt = optimizer("sgd", &model, true);
    let target = || Tensor::zeros([1], (Kind::Float, Device::Cpu));
    let mut train = Held((0..3).map(|k| (t["coef"].get(k).reshape([1, 5]), target())).collect());
    let step = StepConfig { guard_read: GuardRead::Deferred, ..StepConfig::default() };
    let mut trainer = Trainer::builder()
        .step_config(step)
        .progress(Progress::quiet())
        .run_dir(tmp.path())
        .checkpoint_every_n_steps(1)
        .build()
        .unwrap();
    let err = trainer.fit(&mut model, &Dot, opt.as_mut(), &mut train, None).unwrap_err();
    assert!(matches!(err, TrainError::NonFinite { step: 1, .. }), "{err}");
    let last = tmp.path().join("checkpoints/last");
    if last.join("meta.json").exists() {
        let saved = torchlight_checkpoint::Checkpoint::load(&last).unwrap();
        let state = saved.optimizer_state().expect("an optimizer state");
        let keys: Vec<&String> = state.tensors.iter().map(|(k, _)| k).collect();
        assert!(keys.is_empty(), "the skipped first step's state was saved: {keys:?}");
    }
    assert!(state_of(opt.as_ref()).is_empty(), "the optimizer keeps no state of the skipped step");
}
