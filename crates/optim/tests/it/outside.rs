//! The generic core from outside the crate: an optimizer defined here (Signum: SGD on the
//! sign of a momentum buffer) trains, saves and resumes exactly like the built-in ones; and
//! states saved before the core (checkpoint format 1's first group-config form) still load.

use crate::common::{fixture, max_rel_err, tensors};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use tch::{Device, Kind, Tensor};
use torchlight_optim::{
    Adam, AdamConfig, AdamW, Hyperparameters, LrScheduler, OptimError, Optimizer, OptimizerCore,
    OptimizerState, ParamGroup, Result, SavedState, Sgd, SgdConfig, StepLR, UpdateRule,
};

/// Signum's hyperparameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct SignumConfig {
    lr: f64,
    beta: f64,
}

impl Hyperparameters for SignumConfig {
    const KIND: &'static str = "Signum";
    fn lr(&self) -> f64 {
        self.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
    fn momentum(&self) -> f64 {
        self.beta
    }
    fn set_momentum(&mut self, beta: f64) {
        self.beta = beta;
    }
    fn validate(&self, owner: &str) -> Result<()> {
        if !(0.0..1.0).contains(&self.beta) {
            return Err(OptimError::InvalidHyperparameter {
                owner: owner.to_string(),
                field: "beta",
                value: self.beta,
                reason: "must be in [0, 1)",
            });
        }
        Ok(())
    }
}

/// Signum: `m = beta * m + (1 - beta) * g`, `p -= lr * sign(m)`.
#[derive(Debug, Default)]
struct Signum;

impl UpdateRule for Signum {
    type Config = SignumConfig;
    type State = Tensor;

    fn name(&self) -> &str {
        "Signum"
    }

    fn step(&self, c: &SignumConfig, p: &Tensor, g: &Tensor, m: &mut Option<Tensor>) -> Result<()> {
        let m = m.get_or_insert_with(|| p.zeros_like());
        let _ = m.g_mul_scalar_(c.beta).g_add_(&(g * (1.0 - c.beta)));
        let _ = p.shallow_clone().g_add_(&(m.sign() * -c.lr));
        Ok(())
    }

    fn save_state(&self, m: &Tensor, out: &mut Vec<(&'static str, Tensor)>) {
        out.push(("momentum", m.shallow_clone()));
    }

    fn load_state(
        &self,
        _: &SignumConfig,
        p: &Tensor,
        saved: &mut SavedState<'_, '_>,
    ) -> Result<Option<Tensor>> {
        match saved.get("momentum") {
            Some(_) => Ok(Some(saved.like("momentum", p)?)),
            None => Ok(None),
        }
    }
}

fn params() -> Vec<(String, Tensor)> {
    let w = Tensor::from_slice(&[1.0f32, -1.0, 0.5, 2.0]).reshape([2, 2]);
    let b = Tensor::from_slice(&[0.0f32, 0.25]);
    vec![("fc.weight".into(), w.set_requires_grad(true)), ("fc.bias".into(), b.set_requires_grad(true))]
}

/// A deterministic quadratic: the gradient of step `k` is `p - target_k`.
fn train(opt: &mut dyn Optimizer, params: &[(String, Tensor)], steps: std::ops::Range<i64>) {
    for k in steps {
        opt.zero_grad().unwrap();
        let mut loss = Tensor::zeros([], (Kind::Float, Device::Cpu));
        for (_, p) in params {
            let target = Tensor::full(p.size(), (k % 3) as f64 - 1.0, (Kind::Float, Device::Cpu));
            loss += (p - target).square().sum(Kind::Float) * 0.5;
        }
        loss.backward();
        opt.step().unwrap();
    }
}

fn signum(params: &[(String, Tensor)]) -> OptimizerCore<Signum> {
    let shared = |i: usize| vec![(params[i].0.clone(), params[i].1.shallow_clone())];
    OptimizerCore::new(vec![
        ParamGroup::new(shared(0), SignumConfig { lr: 0.1, beta: 0.9 }),
        ParamGroup::new(shared(1), SignumConfig { lr: 0.05, beta: 0.5 }),
    ])
    .unwrap()
}

/// The forms a checkpoint writes: JSON for the meta, safetensors for the tensors.
fn through_files(state: OptimizerState, tag: &str) -> OptimizerState {
    let json = serde_json::to_string(&state.meta).unwrap();
    let path =
        std::env::temp_dir().join(format!("tl-optim-outside-{}-{tag}.safetensors", std::process::id()));
    Tensor::write_safetensors(&state.tensors, &path).unwrap();
    let tensors = Tensor::read_safetensors(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    OptimizerState { meta: serde_json::from_str(&json).unwrap(), tensors }
}

#[test]
fn an_optimizer_defined_outside_the_crate_steps_saves_and_resumes_exactly() {
    let ps = params();
    let mut opt = signum(&ps);
    let before = ps[0].1.detach().copy();
    train(&mut opt, &ps, 0..1);
    // First step: m = 0.1 * g, so each weight moves by lr = 0.1 against the sign of p - (-1).
    let g = &before + 1.0;
    let expected = &before - g.sign() * 0.1;
    assert!(ps[0].1.detach().equal(&expected), "one Signum step is p - lr * sign(m)");

    // A scheduler drives its lr like any optimizer's.
    let mut sched = StepLR::new(&mut opt, 2, 0.5).unwrap();
    train(&mut opt, &ps, 1..4);
    sched.step(&mut opt).unwrap();
    sched.step(&mut opt).unwrap();
    assert_eq!(opt.lrs(), [0.05, 0.025]);

    let state = opt.state_dict();
    assert_eq!(state.meta.optimizer, "Signum");
    let group = serde_json::to_value(&state.meta.groups[1]).unwrap();
    assert_eq!(
        group,
        serde_json::json!({"params": ["fc.bias"], "config": {"kind": "Signum", "values": {"lr": 0.025, "beta": 0.5}}})
    );
    let names: Vec<&str> = state.tensors.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["fc.weight.momentum", "fc.bias.momentum"]);

    // Resume in a "new process": fresh parameters and optimizer from the saved state.
    let saved = through_files(state, "signum");
    let resumed: Vec<(String, Tensor)> =
        ps.iter().map(|(n, p)| (n.clone(), p.detach().copy().set_requires_grad(true))).collect();
    let mut again = signum(&resumed);
    again.load_state_dict(&saved).unwrap();
    assert_eq!(again.lrs(), [0.05, 0.025], "hyperparameters come back with the state");
    train(&mut opt, &ps, 4..9);
    train(&mut again, &resumed, 4..9);
    for ((n, a), (_, b)) in ps.iter().zip(&resumed) {
        assert!(a.equal(b), "`{n}` differs after resuming (tolerance: exact)");
    }

    // Its state cannot go into another optimizer, nor another's into it.
    let err = Sgd::new(vec![ParamGroup::new(params(), SgdConfig::new(0.1))])
        .unwrap()
        .load_state_dict(&opt.state_dict())
        .unwrap_err();
    assert!(matches!(&err, OptimError::KindMismatch { found, .. } if found == "Signum"), "{err}");
    let mut bad = opt.state_dict();
    bad.meta.groups[0].config.values = serde_json::json!({"lr": "fast", "beta": 0.9});
    let err = opt.load_state_dict(&bad).unwrap_err();
    assert!(matches!(err, OptimError::GroupConfig { group: 0, .. }), "{err}");
    assert!(err.to_string().contains("Signum"), "{err}");
    let err =
        OptimizerCore::<Signum>::new(vec![ParamGroup::new(params(), SignumConfig { lr: 0.1, beta: 1.0 })])
            .unwrap_err();
    assert!(err.to_string().contains("beta") && err.to_string().contains("Signum param group 0"), "{err}");
}

/// States written before the generic core, whose group configs read
/// `{"optimizer": "Adam", "lr": ...}` (see `tests/fixtures/legacy_v1/README.md`), load into
/// today's optimizers and continue as the old code did: exactly on the AVX2/AVX-512 dispatch
/// level that wrote the fixture, and within the optimizer parity bound elsewhere (under
/// ATEN_CPU_CAPABILITY=default the SGD update rounds otherwise: measured 2.4e-7).
#[test]
fn states_saved_in_the_first_group_config_form_still_load_and_resume_exactly() {
    for kind in ["adamw", "sgd"] {
        let dir = fixture("legacy_v1");
        let meta = std::fs::read_to_string(dir.join(format!("{kind}.json"))).unwrap();
        assert!(meta.contains("\"optimizer\": \"Adam\"") || meta.contains("\"optimizer\": \"SGD\""));
        let state = OptimizerState {
            meta: serde_json::from_str(&meta).unwrap(),
            tensors: Tensor::read_safetensors(dir.join(format!("{kind}.safetensors"))).unwrap(),
        };
        let start: HashMap<String, Tensor> = tensors(&format!("legacy_v1/{kind}.params.safetensors"));
        let expected: HashMap<String, Tensor> = tensors(&format!("legacy_v1/{kind}.after10.safetensors"));
        let grads = tensors("optimizers.safetensors");
        let p = |n: &str| (n.to_string(), start[n].copy().set_requires_grad(true));
        let groups = [vec![p("g0.w"), p("g0.b")], vec![p("g1.w")]];
        let all: Vec<(String, Tensor)> =
            groups.iter().flatten().map(|(n, t)| (n.clone(), t.shallow_clone())).collect();
        let shallow =
            |g: &[(String, Tensor)]| g.iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect();
        // Any hyperparameters: loading restores the saved ones.
        let mut opt: Box<dyn Optimizer> = if kind == "adamw" {
            Box::new(
                AdamW::new(vec![
                    ParamGroup::new(shallow(&groups[0]), AdamConfig::adamw()),
                    ParamGroup::new(shallow(&groups[1]), AdamConfig::adamw()),
                ])
                .unwrap(),
            )
        } else {
            Box::new(
                Sgd::new(vec![
                    ParamGroup::new(shallow(&groups[0]), SgdConfig::new(1.0)),
                    ParamGroup::new(shallow(&groups[1]), SgdConfig::new(1.0)),
                ])
                .unwrap(),
            )
        };
        opt.load_state_dict(&state).unwrap();
        for k in 5..10 {
            opt.zero_grad().unwrap();
            let mut loss = Tensor::zeros([], (Kind::Float, Device::Cpu));
            for (n, t) in &all {
                loss += (t * grads[&format!("grads.{n}")].get(k)).sum(Kind::Float);
            }
            loss.backward();
            opt.step().unwrap();
        }
        for (n, t) in &all {
            let err = max_rel_err(t, &expected[n], 1.0);
            assert!(
                err <= 2e-6,
                "{kind}: `{n}` after resuming from a format-1 state differs by {err:e} \
                 (relative to max(|x|, 1); tolerance 2e-6)"
            );
        }
        // Resaved, the groups take the `{kind, values}` form and load back.
        let resaved = serde_json::to_value(&opt.state_dict().meta).unwrap();
        assert!(resaved["groups"][0]["config"]["values"]["lr"].is_number(), "{resaved}");
        if kind == "adamw" {
            let mut adam = Adam::new(vec![
                ParamGroup::new(shallow(&groups[0]), AdamConfig::default()),
                ParamGroup::new(shallow(&groups[1]), AdamConfig::default()),
            ])
            .unwrap();
            let err = adam.load_state_dict(&state).unwrap_err();
            assert!(matches!(&err, OptimError::KindMismatch { found, .. } if found == "AdamW"), "{err}");
        }
    }
}
