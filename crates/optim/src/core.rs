//! The generic optimizer core: group iteration, state keyed by parameter name, save/load and
//! fused-kernel dispatch per device and dtype, around an [`UpdateRule`]'s per-parameter math.
//!
//! [`Sgd`](crate::Sgd), [`Adam`](crate::Adam) and [`AdamW`](crate::AdamW) are this core with
//! their rules; an optimizer defined outside the crate plugs in the same way and gets
//! schedulers, GradScaler, clipping and checkpoints for free:
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use tch::{Device, Kind, Tensor};
//! use torchlight_optim::{Hyperparameters, Optimizer, OptimizerCore, ParamGroup, SavedState, UpdateRule};
//!
//! /// signSGD: `p -= lr * sign(g)`, no state.
//! #[derive(Debug, Clone, Copy, Serialize, Deserialize)]
//! struct SignConfig { lr: f64 }
//!
//! impl Hyperparameters for SignConfig {
//!     const KIND: &'static str = "SignSGD";
//!     fn lr(&self) -> f64 { self.lr }
//!     fn set_lr(&mut self, lr: f64) { self.lr = lr }
//!     fn momentum(&self) -> f64 { 0.0 }
//!     fn set_momentum(&mut self, _: f64) {}
//! }
//!
//! #[derive(Debug, Default)]
//! struct SignSgd;
//!
//! impl UpdateRule for SignSgd {
//!     type Config = SignConfig;
//!     type State = ();
//!     fn name(&self) -> &str { "SignSGD" }
//!     fn step(&self, c: &SignConfig, p: &Tensor, g: &Tensor, _: &mut Option<()>) -> torchlight_optim::Result<()> {
//!         let _ = p.shallow_clone().g_add_(&(g.sign() * -c.lr));
//!         Ok(())
//!     }
//!     fn save_state(&self, _: &(), _: &mut Vec<(&'static str, Tensor)>) {}
//!     fn load_state(&self, _: &SignConfig, _: &Tensor, _: &mut SavedState<'_, '_>) -> torchlight_optim::Result<Option<()>> {
//!         Ok(None)
//!     }
//! }
//!
//! # fn main() -> torchlight_optim::Result<()> {
//! let w = Tensor::ones([3], (Kind::Float, Device::Cpu)).set_requires_grad(true);
//! let mut opt = OptimizerCore::<SignSgd>::new(vec![ParamGroup::new(vec![("w".into(), w.shallow_clone())], SignConfig { lr: 0.5 })])?;
//! (&w * Tensor::from_slice(&[1.0f32, -2.0, 3.0])).sum(Kind::Float).backward();
//! opt.step()?;
//! assert_eq!(Vec::<f32>::try_from(&w.detach()).unwrap(), [0.5, 1.5, 0.5]);
//! assert_eq!(opt.state_dict().meta.groups[0].config.kind, "SignSGD");
//! # Ok(())
//! # }
//! ```

use crate::error::{OptimError, Result};
use crate::optimizer::{check_count, GroupConfig, GroupState, Optimizer, OptimizerMeta, OptimizerState};
use crate::param_group::ParamGroup;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use tch::{Device, Kind, Tensor};

/// The hyperparameters of one param group of an optimizer built on [`OptimizerCore`]
/// (`SgdConfig`, `AdamConfig`): what schedulers read and write, and how the group is saved.
pub trait Hyperparameters: Clone + Debug + Serialize + DeserializeOwned {
    /// The `kind` of the saved group config (`"SGD"`, `"Adam"`), checked when loading.
    const KIND: &'static str;

    /// The learning rate.
    fn lr(&self) -> f64;

    /// Sets the learning rate (what an lr scheduler does).
    fn set_lr(&mut self, lr: f64);

    /// The momentum a scheduler cycles (SGD's `momentum`, Adam's `betas.0`).
    fn momentum(&self) -> f64;

    /// Sets that momentum (OneCycleLR's `cycle_momentum`).
    fn set_momentum(&mut self, momentum: f64);

    /// Whether the group runs [`UpdateRule::fused_step`] (default `false`).
    fn fused(&self) -> bool {
        false
    }

    /// Checks the values, naming `owner` (`"AdamW param group 1"`) and the field at fault.
    fn validate(&self, _owner: &str) -> Result<()> {
        Ok(())
    }
}

/// What a fused kernel is handed by GradScaler, already on the bucket's device: the scale
/// to divide the gradients by, and the one-element float32 Inf flag that makes the kernel skip
/// the update. Both `None` outside mixed precision.
#[derive(Debug, Clone, Copy, Default)]
pub struct AmpArgs<'a> {
    /// Divide the gradients by this scale (GradScaler did not unscale them yet).
    pub grad_scale: Option<&'a Tensor>,
    /// Skip the step where this flag is non-zero.
    pub found_inf: Option<&'a Tensor>,
}

/// An optimizer's per-parameter math, plugged into [`OptimizerCore`]: the core walks the
/// groups, skips parameters without a gradient, keeps each parameter's `State` under its
/// name, buckets fused groups by device and dtype, and saves and loads; the rule updates.
///
/// Every call runs under no-grad.
pub trait UpdateRule: Debug {
    /// A group's hyperparameters.
    type Config: Hyperparameters;
    /// One parameter's state (Adam's moments, SGD's momentum buffer); created by the rule on
    /// the parameter's first step with a gradient.
    type State: Debug;

    /// The optimizer's name in saved states (`"SGD"`, `"Adam"`, `"AdamW"`), checked when loading.
    fn name(&self) -> &str;

    /// Adjusts a group's config before validation, at construction and load (AdamW turns
    /// on decoupled weight decay). The default keeps it.
    fn prepare(&self, config: Self::Config) -> Self::Config {
        config
    }

    /// Updates one parameter in place from its gradient (the plain-op reference path).
    /// `state` is `None` before the parameter's first step; the rule fills it as needed.
    fn step(
        &self,
        config: &Self::Config,
        param: &Tensor,
        grad: &Tensor,
        state: &mut Option<Self::State>,
    ) -> Result<()>;

    /// Updates the parameters of one device and dtype in one kernel call, handing `amp` to
    /// the kernel (so GradScaler needs no host sync). Called only for groups whose config is
    /// [`Hyperparameters::fused`]. The default runs [`UpdateRule::step`] per parameter,
    /// reading `found_inf` once and dividing the gradients by `grad_scale` first.
    fn fused_step(
        &self,
        config: &Self::Config,
        params: &[&Tensor],
        grads: &[&Tensor],
        states: &mut [&mut Option<Self::State>],
        amp: AmpArgs<'_>,
    ) -> Result<()> {
        if let Some(found_inf) = amp.found_inf {
            if found_inf_is_set(found_inf)? {
                return Ok(());
            }
        }
        if let Some(scale) = amp.grad_scale {
            unscale_grads(grads.iter().copied(), scale)?;
        }
        for ((p, g), st) in params.iter().zip(grads).zip(states.iter_mut()) {
            self.step(config, p, g, st)?;
        }
        Ok(())
    }

    /// A parameter's state tensors with their field names (`("exp_avg", ..)`), saved as
    /// `"<param>.<field>"`. They may alias the live state.
    fn save_state(&self, state: &Self::State, out: &mut Vec<(&'static str, Tensor)>);

    /// Rebuilds a parameter's state from a saved one (`None`: the parameter had none, e.g.
    /// it was frozen). Take the fields through `saved`; a saved field nobody takes is an error.
    fn load_state(
        &self,
        config: &Self::Config,
        param: &Tensor,
        saved: &mut SavedState<'_, '_>,
    ) -> Result<Option<Self::State>>;
}

/// An optimizer: [`ParamGroup`]s, the per-parameter state of an [`UpdateRule`], and the
/// [`Optimizer`] interface schedulers, GradScaler and checkpoints use.
///
/// [`Sgd`](crate::Sgd), [`Adam`](crate::Adam) and [`AdamW`](crate::AdamW) are aliases of
/// this type.
#[derive(Debug)]
pub struct OptimizerCore<R: UpdateRule> {
    rule: R,
    groups: Vec<ParamGroup<R::Config>>,
    /// `states[g][i]`: the state of `groups[g].params[i]`, saved under that parameter's name.
    states: Vec<Vec<Option<R::State>>>,
    /// The `(group, index)` slots whose state the last [`Optimizer::step_amp`] created in a
    /// fused group, for [`Optimizer::forget_skipped_step`].
    created: Vec<(usize, usize)>,
}

impl<R: UpdateRule + Default> OptimizerCore<R> {
    /// An optimizer over `groups`; fails on an invalid hyperparameter (naming group and
    /// field) or a parameter name given twice.
    pub fn new(groups: Vec<ParamGroup<R::Config>>) -> Result<Self> {
        Self::with_rule(R::default(), groups)
    }
}

impl<R: UpdateRule> OptimizerCore<R> {
    /// An optimizer with an explicit rule value, for rules that carry settings of their own.
    pub fn with_rule(rule: R, groups: Vec<ParamGroup<R::Config>>) -> Result<Self> {
        let groups: Vec<ParamGroup<R::Config>> = groups
            .into_iter()
            .map(|g| ParamGroup { params: g.params, config: rule.prepare(g.config) })
            .collect();
        for (gi, g) in groups.iter().enumerate() {
            g.config.validate(&owner(rule.name(), gi))?;
            to_values(&g.config, gi)?;
        }
        check_unique(&groups)?;
        let states = groups.iter().map(|g| g.params.iter().map(|_| None).collect()).collect();
        Ok(OptimizerCore { rule, groups, states, created: Vec::new() })
    }

    /// The param groups.
    pub fn groups(&self) -> &[ParamGroup<R::Config>] {
        &self.groups
    }

    /// The config of group `group`, for changing a hyperparameter mid-run
    /// (`optimizer.param_groups[i]["weight_decay"] = ...`).
    ///
    /// # Panics
    /// If `group` is out of range.
    pub fn config_mut(&mut self, group: usize) -> &mut R::Config {
        &mut self.groups[group].config
    }

    /// The update rule.
    pub fn rule(&self) -> &R {
        &self.rule
    }

    /// The state of parameter `name`, if it has taken a step.
    pub fn state(&self, name: &str) -> Option<&R::State> {
        self.slots().find(|(n, _, _)| *n == name).and_then(|(_, _, s)| s.as_ref())
    }

    /// Every parameter with its name and state slot, in group order.
    fn slots(&self) -> impl Iterator<Item = (&str, &Tensor, &Option<R::State>)> {
        self.groups
            .iter()
            .zip(&self.states)
            .flat_map(|(g, s)| g.params.iter().zip(s).map(|((n, p), st)| (n.as_str(), p, st)))
    }

    fn step_impl(&mut self, amp: Option<(Option<&Tensor>, &Tensor)>) -> Result<()> {
        let _guard = torchlight_tensor::no_grad();
        // Non-fused groups read GradScaler's Inf flag once per step, on the first need.
        let mut skip_plain: Option<bool> = None;
        self.created.clear();
        for (gi, (group, states)) in self.groups.iter().zip(&mut self.states).enumerate() {
            let live: Vec<(usize, Tensor)> = group
                .params
                .iter()
                .enumerate()
                .map(|(i, (_, p))| (i, p.grad()))
                .filter(|(_, g)| g.defined())
                .collect();
            if live.is_empty() {
                continue;
            }
            if group.config.fused() {
                let fresh: Vec<usize> =
                    live.iter().map(|(i, _)| *i).filter(|&i| states[i].is_none()).collect();
                fused_group(&self.rule, group, states, &live, amp)?;
                if amp.is_some() {
                    self.created.extend(fresh.into_iter().filter(|&i| states[i].is_some()).map(|i| (gi, i)));
                }
                continue;
            }
            if let Some((scale, found_inf)) = amp {
                let skip = match skip_plain {
                    Some(skip) => skip,
                    None => *skip_plain.insert(found_inf_is_set(found_inf)?),
                };
                if skip {
                    continue;
                }
                if let Some(scale) = scale {
                    unscale_grads(live.iter().map(|(_, g)| g), scale)?;
                }
            }
            for (i, grad) in &live {
                self.rule.step(&group.config, &group.params[*i].1, grad, &mut states[*i])?;
            }
        }
        Ok(())
    }
}

/// One fused group: a kernel call per (device, dtype) bucket, in first-seen order.
fn fused_group<R: UpdateRule>(
    rule: &R,
    group: &ParamGroup<R::Config>,
    states: &mut [Option<R::State>],
    live: &[(usize, Tensor)],
    amp: Option<(Option<&Tensor>, &Tensor)>,
) -> Result<()> {
    let keys: Vec<(Device, Kind)> = live.iter().map(|(i, _)| device_kind(&group.params[*i].1)).collect();
    let mut slots: Vec<Option<&mut Option<R::State>>> = states.iter_mut().map(Some).collect();
    for bucket in buckets(&keys) {
        let device = keys[bucket[0]].0;
        let scale = amp.and_then(|(s, _)| s).map(|s| s.to_device(device));
        let inf = amp.map(|(_, f)| f.to_device(device));
        let params: Vec<&Tensor> = bucket.iter().map(|&b| &group.params[live[b].0].1).collect();
        let grads: Vec<&Tensor> = bucket.iter().map(|&b| &live[b].1).collect();
        let mut bucket_states: Vec<&mut Option<R::State>> = bucket
            .iter()
            .map(|&b| slots[live[b].0].take().expect("each parameter is in one bucket"))
            .collect();
        let amp = AmpArgs { grad_scale: scale.as_ref(), found_inf: inf.as_ref() };
        rule.fused_step(&group.config, &params, &grads, &mut bucket_states, amp)?;
    }
    Ok(())
}

fn device_kind(t: &Tensor) -> (Device, Kind) {
    (t.device(), t.kind())
}

fn owner(name: &str, group: usize) -> String {
    format!("{name} param group {group}")
}

fn to_values<C: Hyperparameters>(config: &C, group: usize) -> Result<serde_json::Value> {
    serde_json::to_value(config).map_err(|e| OptimError::GroupConfig {
        group,
        kind: C::KIND.to_string(),
        reason: format!("does not serialize: {e}"),
    })
}

impl<R: UpdateRule> Optimizer for OptimizerCore<R> {
    fn step(&mut self) -> Result<()> {
        self.step_impl(None)
    }

    fn step_amp(&mut self, grad_scale: Option<&Tensor>, found_inf: &Tensor) -> Result<()> {
        self.step_impl(Some((grad_scale, found_inf)))
    }

    fn supports_amp_scaling(&self) -> bool {
        self.groups.iter().all(|g| g.config.fused())
    }

    fn forget_skipped_step(&mut self) -> Result<()> {
        for (g, i) in self.created.drain(..) {
            self.states[g][i] = None;
        }
        Ok(())
    }

    fn zero_grad(&mut self) -> Result<()> {
        for (_, p, _) in self.slots() {
            torchlight_tensor::set_grad_none(p)?;
        }
        Ok(())
    }

    fn named_parameters(&self) -> Vec<(&str, &Tensor)> {
        self.slots().map(|(n, p, _)| (n, p)).collect()
    }

    fn lrs(&self) -> Vec<f64> {
        self.groups.iter().map(|g| g.config.lr()).collect()
    }

    fn set_lrs(&mut self, lrs: &[f64]) -> Result<()> {
        check_count("lrs", self.groups.len(), lrs.len())?;
        self.groups.iter_mut().zip(lrs).for_each(|(g, lr)| g.config.set_lr(*lr));
        Ok(())
    }

    fn momenta(&self) -> Vec<f64> {
        self.groups.iter().map(|g| g.config.momentum()).collect()
    }

    fn set_momenta(&mut self, momenta: &[f64]) -> Result<()> {
        check_count("momenta", self.groups.len(), momenta.len())?;
        self.groups.iter_mut().zip(momenta).for_each(|(g, m)| g.config.set_momentum(*m));
        Ok(())
    }

    /// # Panics
    /// If a group's config no longer serializes to JSON; construction checked that it does,
    /// so only a config type whose serialization depends on its values can get here.
    fn state_dict(&self) -> OptimizerState {
        let groups = self
            .groups
            .iter()
            .enumerate()
            .map(|(gi, g)| GroupState {
                params: g.params.iter().map(|(n, _)| n.clone()).collect(),
                config: GroupConfig {
                    kind: R::Config::KIND.to_string(),
                    values: to_values(&g.config, gi).unwrap_or_else(|e| panic!("{e}")),
                },
            })
            .collect();
        let mut tensors = Vec::new();
        let mut fields = Vec::new();
        for (name, _, state) in self.slots() {
            if let Some(state) = state {
                fields.clear();
                self.rule.save_state(state, &mut fields);
                tensors.extend(fields.drain(..).map(|(field, t)| (format!("{name}.{field}"), t)));
            }
        }
        OptimizerState { meta: OptimizerMeta { optimizer: self.rule.name().to_string(), groups }, tensors }
    }

    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()> {
        self.load_impl(&state.meta, StateTensors::borrowed(&state.tensors))
    }

    fn load_state_dict_owned(&mut self, state: OptimizerState) -> Result<()> {
        let OptimizerState { meta, tensors } = state;
        self.load_impl(&meta, StateTensors::owned(tensors))
    }
}

impl<R: UpdateRule> OptimizerCore<R> {
    /// Both loads: checks the saved groups against this optimizer's, then rebuilds every
    /// parameter's state from `tensors` (copied or taken, as `tensors` holds them). Nothing
    /// changes on error.
    fn load_impl(&mut self, meta: &OptimizerMeta, mut tensors: StateTensors<'_>) -> Result<()> {
        let name = self.rule.name();
        if meta.optimizer != name {
            return Err(OptimError::KindMismatch {
                expected: name.to_string(),
                found: meta.optimizer.clone(),
            });
        }
        check_count("state dict groups", self.groups.len(), meta.groups.len())?;
        let mut configs = Vec::with_capacity(self.groups.len());
        for (gi, (group, saved)) in self.groups.iter().zip(&meta.groups).enumerate() {
            let names: Vec<String> = group.params.iter().map(|(n, _)| n.clone()).collect();
            if names != saved.params {
                return Err(OptimError::GroupMismatch {
                    group: gi,
                    expected: names,
                    found: saved.params.clone(),
                });
            }
            if saved.config.kind != R::Config::KIND {
                return Err(OptimError::KindMismatch {
                    expected: format!("{name} (param group {gi} config of kind {})", R::Config::KIND),
                    found: format!("a param group config of kind {}", saved.config.kind),
                });
            }
            let config: R::Config = serde_json::from_value(saved.config.values.clone()).map_err(|e| {
                OptimError::GroupConfig { group: gi, kind: saved.config.kind.clone(), reason: e.to_string() }
            })?;
            let config = self.rule.prepare(config);
            config.validate(&owner(name, gi))?;
            configs.push(config);
        }
        let mut loaded = Vec::with_capacity(self.groups.len());
        for (group, config) in self.groups.iter().zip(&configs) {
            let mut states = Vec::with_capacity(group.params.len());
            for (pname, p) in &group.params {
                let mut saved = SavedState { param: pname, tensors: &mut tensors };
                states.push(self.rule.load_state(config, p, &mut saved)?);
            }
            loaded.push(states);
        }
        tensors.finish()?;
        self.groups.iter_mut().zip(configs).for_each(|(g, c)| g.config = c);
        self.states = loaded;
        self.created.clear();
        Ok(())
    }
}

/// The saved state tensors of one parameter, handed to [`UpdateRule::load_state`].
pub struct SavedState<'a, 'b> {
    param: &'b str,
    tensors: &'b mut StateTensors<'a>,
}

impl SavedState<'_, '_> {
    /// The parameter's name.
    pub fn param(&self) -> &str {
        self.param
    }

    /// The saved tensor `"<param>.<field>"`, if present (as saved: take it with
    /// [`like`](Self::like) or [`copy`](Self::copy) to keep it).
    pub fn get(&mut self, field: &str) -> Option<&Tensor> {
        self.tensors.get(self.param, field)
    }

    /// The saved tensor `"<param>.<field>"` on `like`'s device and dtype, after checking that it
    /// has `like`'s shape; an error naming the key when it is absent or mis-shaped. From
    /// [`Optimizer::load_state_dict`] it is a fresh copy; from
    /// [`Optimizer::load_state_dict_owned`] it is the loaded tensor itself when it already has
    /// that device and dtype (no copy), else the loaded tensor moved there.
    pub fn like(&mut self, field: &str, like: &Tensor) -> Result<Tensor> {
        let key = format!("{}.{field}", self.param);
        let t = self.get(field).ok_or_else(|| OptimError::MissingState { key: key.clone() })?;
        if t.size() != like.size() {
            return Err(OptimError::StateShape { key, expected: like.size(), found: t.size() });
        }
        Ok(self.tensors.take(self.param, field, like.device(), like.kind()).expect("present: just read"))
    }

    /// The saved tensor `"<param>.<field>"` on `device` in `kind`, if present (for state that
    /// does not follow its parameter, such as Adam's float32 step counter): a fresh copy, or
    /// the loaded tensor itself as [`like`](Self::like) says.
    pub fn copy(&mut self, field: &str, device: Device, kind: Kind) -> Option<Tensor> {
        self.tensors.take(self.param, field, device, kind)
    }
}

/// A saved state tensor: borrowed from the caller's state (copied when kept) or owned (kept
/// as it is where its device and dtype fit).
enum Held<'a> {
    Borrowed(&'a Tensor),
    Owned(Tensor),
    /// Owned, and already taken by a parameter's state.
    Moved,
}

/// The state tensors of a state dict, looked up by parameter and field; reports unused ones.
struct StateTensors<'a> {
    map: HashMap<String, Held<'a>>,
    used: HashSet<String>,
}

impl<'a> StateTensors<'a> {
    fn borrowed(tensors: &'a [(String, Tensor)]) -> Self {
        let map = tensors.iter().map(|(k, t)| (k.clone(), Held::Borrowed(t))).collect();
        StateTensors { map, used: HashSet::new() }
    }

    fn owned(tensors: Vec<(String, Tensor)>) -> Self {
        let map = tensors.into_iter().map(|(k, t)| (k, Held::Owned(t))).collect();
        StateTensors { map, used: HashSet::new() }
    }

    fn get(&mut self, param: &str, field: &str) -> Option<&Tensor> {
        let key = format!("{param}.{field}");
        let t = match self.map.get(key.as_str())? {
            Held::Borrowed(t) => *t,
            Held::Owned(t) => t,
            Held::Moved => return None,
        };
        self.used.insert(key);
        Some(t)
    }

    /// The tensor to keep for `"<param>.<field>"` on `device` in `kind`: a copy of a borrowed
    /// one, an owned one as it is (or converted when its device or dtype differ).
    fn take(&mut self, param: &str, field: &str, device: Device, kind: Kind) -> Option<Tensor> {
        let key = format!("{param}.{field}");
        let held = self.map.get_mut(key.as_str())?;
        let kept = match std::mem::replace(held, Held::Moved) {
            Held::Borrowed(t) => {
                *held = Held::Borrowed(t);
                copy_to(t, device, kind)
            }
            Held::Owned(t) if t.device() == device && t.kind() == kind => t.detach(),
            Held::Owned(t) => {
                let _guard = torchlight_tensor::no_grad();
                t.to_device_(device, kind, false, false).detach()
            }
            Held::Moved => return None,
        };
        self.used.insert(key);
        Some(kept)
    }

    /// Errors on the first tensor no parameter claimed.
    fn finish(self) -> Result<()> {
        let mut unused: Vec<&String> = self.map.keys().filter(|k| !self.used.contains(*k)).collect();
        unused.sort();
        match unused.first() {
            Some(key) => Err(OptimError::UnexpectedState { key: key.to_string() }),
            None => Ok(()),
        }
    }
}

/// A fresh copy of `t` on `device` in `kind`, sharing nothing with the caller's tensor.
fn copy_to(t: &Tensor, device: Device, kind: Kind) -> Tensor {
    let _guard = torchlight_tensor::no_grad();
    // One `at::to(.., copy=true)`: a single uninitialised allocation and copy (a zero-filled
    // tensor and a `copy_` cost a second pass over every byte of the state).
    t.to_device_(device, kind, false, true).detach()
}

/// Checks that parameter names are unique across groups.
fn check_unique<C>(groups: &[ParamGroup<C>]) -> Result<()> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (gi, group) in groups.iter().enumerate() {
        for (name, _) in &group.params {
            if let Some(first) = seen.insert(name, gi) {
                return Err(OptimError::DuplicateParameter { name: name.clone(), first, second: gi });
            }
        }
    }
    Ok(())
}

/// Groups indices by (device, kind), keeping first-seen order: each fused kernel call takes
/// tensors of one device and dtype.
fn buckets(keys: &[(Device, Kind)]) -> Vec<Vec<usize>> {
    let mut order: Vec<(Device, Kind)> = Vec::new();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        match order.iter().position(|k| k == key) {
            Some(b) => out[b].push(i),
            None => {
                order.push(*key);
                out.push(vec![i]);
            }
        }
    }
    out
}

/// For non-fused groups under GradScaler: reads `found_inf` once per step (the one host sync
/// of the plain path, as PyTorch's `found_inf.item()`). Returns whether any gradient was
/// non-finite, i.e. whether to skip the step.
fn found_inf_is_set(found_inf: &Tensor) -> Result<bool> {
    let flat = found_inf.reshape([-1]);
    Ok(flat.f_double_value(&[0]).map_err(OptimError::torch("read found_inf"))? != 0.0)
}

/// Divides gradients in place by `grad_scale` (a one-element tensor), for non-fused groups
/// handed a scale by GradScaler.
fn unscale_grads<'a>(grads: impl Iterator<Item = &'a Tensor>, grad_scale: &Tensor) -> Result<()> {
    let _guard = torchlight_tensor::no_grad();
    for g in grads {
        let mut g = g.shallow_clone();
        let scale = grad_scale.to_device(g.device()).reshape(Vec::<i64>::new());
        let _ = g.f_div_(&scale).map_err(OptimError::torch("unscale gradient"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_keep_first_seen_order() {
        let (f, h) = ((Device::Cpu, Kind::Float), (Device::Cpu, Kind::Half));
        assert_eq!(buckets(&[f, h, f, h, f]), [vec![0, 2, 4], vec![1, 3]]);
    }
}
