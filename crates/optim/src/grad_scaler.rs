//! GradScaler: dynamic loss scaling for mixed-precision training (`torch.amp.GradScaler`).

use crate::error::{OptimError, Result};
use crate::optimizer::Optimizer;
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

/// GradScaler's settings, with PyTorch's defaults: `init_scale = 2^16`, `growth_factor = 2`,
/// `backoff_factor = 0.5`, `growth_interval = 2000`, `enabled = true`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GradScalerConfig {
    /// The first loss scale.
    pub init_scale: f64,
    /// Factor the scale grows by after `growth_interval` steps without Inf/NaN.
    pub growth_factor: f64,
    /// Factor the scale shrinks by on a step with Inf/NaN gradients.
    pub backoff_factor: f64,
    /// Consecutive finite steps before the scale grows.
    pub growth_interval: i64,
    /// Off makes every method a pass-through (`scale` returns the loss, `step` steps).
    pub enabled: bool,
}

impl Default for GradScalerConfig {
    fn default() -> Self {
        GradScalerConfig {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            enabled: true,
        }
    }
}

impl GradScalerConfig {
    /// Sets `init_scale`.
    pub fn with_init_scale(self, init_scale: f64) -> Self {
        GradScalerConfig { init_scale, ..self }
    }
    /// Sets `growth_factor`.
    pub fn with_growth_factor(self, growth_factor: f64) -> Self {
        GradScalerConfig { growth_factor, ..self }
    }
    /// Sets `backoff_factor`.
    pub fn with_backoff_factor(self, backoff_factor: f64) -> Self {
        GradScalerConfig { backoff_factor, ..self }
    }
    /// Sets `growth_interval`.
    pub fn with_growth_interval(self, growth_interval: i64) -> Self {
        GradScalerConfig { growth_interval, ..self }
    }
    /// Sets `enabled` (e.g. `config.amp && device.is_cuda()`).
    pub fn with_enabled(self, enabled: bool) -> Self {
        GradScalerConfig { enabled, ..self }
    }
}

/// GradScaler's saveable state, PyTorch's `state_dict()` keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GradScalerState {
    /// The current loss scale.
    pub scale: f64,
    /// See [`GradScalerConfig`].
    pub growth_factor: f64,
    /// See [`GradScalerConfig`].
    pub backoff_factor: f64,
    /// See [`GradScalerConfig`].
    pub growth_interval: i64,
    /// Consecutive finite steps since the scale last changed.
    #[serde(rename = "_growth_tracker")]
    pub growth_tracker: i64,
}

/// Where the current iteration is (PyTorch's `OptState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Ready,
    Unscaled,
    Stepped,
}

/// `torch.amp.GradScaler` for one optimizer whose parameters share one device.
///
/// The loop: `scaler.scale(&loss).backward()`, optionally `scaler.unscale_(&opt)` and
/// `clip_grad_norm`, then `scaler.step(&mut opt)` and `scaler.update()`. `step` is skipped when
/// any gradient holds Inf/NaN, and `update` then multiplies the scale by `backoff_factor`;
/// after `growth_interval` finite steps it multiplies it by `growth_factor`. Unscaling and the
/// Inf check use the fused `_amp_foreach_non_finite_check_and_unscale_` kernel and the scale
/// update `_amp_update_scale_`, both on the device. With an optimizer whose groups are all
/// fused, the scale and the Inf flag go to the kernels and nothing is read back to the host;
/// otherwise `step` reads the Inf flag once, as PyTorch does.
#[derive(Debug)]
pub struct GradScaler {
    config: GradScalerConfig,
    growth_tracker_init: i64,
    scale: Option<Tensor>,
    growth_tracker: Option<Tensor>,
    stage: Stage,
    found_inf: Option<Tensor>,
}

impl GradScaler {
    /// A scaler with `config`; its tensors are made on the loss's device at the first `scale`.
    pub fn new(config: GradScalerConfig) -> Result<Self> {
        let owner = "GradScaler";
        if config.init_scale.is_nan() || config.init_scale <= 0.0 {
            return Err(OptimError::invalid(owner, "init_scale", config.init_scale, "must be > 0"));
        }
        if config.growth_factor.is_nan() || config.growth_factor <= 1.0 {
            return Err(OptimError::invalid(owner, "growth_factor", config.growth_factor, "must be > 1"));
        }
        if !(config.backoff_factor > 0.0 && config.backoff_factor < 1.0) {
            return Err(OptimError::invalid(
                owner,
                "backoff_factor",
                config.backoff_factor,
                "must be in (0, 1)",
            ));
        }
        if config.growth_interval <= 0 {
            return Err(OptimError::invalid(
                owner,
                "growth_interval",
                config.growth_interval as f64,
                "must be > 0",
            ));
        }
        Ok(GradScaler {
            config,
            growth_tracker_init: 0,
            scale: None,
            growth_tracker: None,
            stage: Stage::Ready,
            found_inf: None,
        })
    }

    /// Whether scaling is on.
    pub fn is_enabled(&self) -> bool {
        self.config.enabled
    }

    fn scale_tensor(&mut self, device: Device) -> &Tensor {
        let (init, tracker) = (self.config.init_scale, self.growth_tracker_init);
        self.growth_tracker.get_or_insert_with(|| Tensor::full([], tracker, (Kind::Int, device)));
        self.scale.get_or_insert_with(|| Tensor::full([], init, (Kind::Float, device)))
    }

    /// `loss * scale` (the loss itself when disabled), to call `backward` on.
    pub fn scale(&mut self, loss: &Tensor) -> Tensor {
        if !self.config.enabled {
            return loss.shallow_clone();
        }
        let device = loss.device();
        let scale = self.scale_tensor(device);
        loss * scale.to_device(device)
    }

    /// The gradients of `optimizer`'s parameters, checked to be unscalable and on `device`.
    fn grads(optimizer: &dyn Optimizer, device: Device) -> Result<Vec<Tensor>> {
        let mut grads = Vec::new();
        for (name, p) in optimizer.named_parameters() {
            let g = p.grad();
            if !g.defined() {
                continue;
            }
            if g.kind() == Kind::Half {
                return Err(OptimError::ScalerGradKind { name: name.to_string(), kind: g.kind() });
            }
            if g.device() != device {
                return Err(OptimError::MixedDevices {
                    what: "GradScaler",
                    expected: device,
                    name: name.to_string(),
                    found: g.device(),
                });
            }
            grads.push(g);
        }
        Ok(grads)
    }

    /// Multiplies the gradients by `inv_scale` and records whether any is Inf/NaN in a fresh
    /// `found_inf`, one fused kernel call per dtype.
    fn check_and_unscale(&mut self, optimizer: &dyn Optimizer, inv_scale: &Tensor) -> Result<()> {
        let device = inv_scale.device();
        let grads = Self::grads(optimizer, device)?;
        let found_inf = Tensor::zeros([], (Kind::Float, device));
        let _guard = torchlight_tensor::no_grad();
        let mut kinds: Vec<Kind> = Vec::new();
        for g in &grads {
            if !kinds.contains(&g.kind()) {
                kinds.push(g.kind());
            }
        }
        for kind in kinds {
            let same: Vec<Tensor> =
                grads.iter().filter(|g| g.kind() == kind).map(Tensor::shallow_clone).collect();
            torchlight_tensor::non_finite_check_and_unscale(&same, &found_inf, inv_scale)?;
        }
        self.found_inf = Some(found_inf);
        Ok(())
    }

    fn device(&self) -> Result<Device> {
        self.scale
            .as_ref()
            .map(Tensor::device)
            .ok_or(OptimError::ScalerOrder("scale() must be called on a loss before unscale_() or step()"))
    }

    /// Divides `optimizer`'s gradients by the scale in place (`scaler.unscale_(optimizer)`),
    /// before clipping them. At most once per iteration; `step` then does not unscale again.
    pub fn unscale_(&mut self, optimizer: &dyn Optimizer) -> Result<()> {
        if !self.config.enabled {
            return Ok(());
        }
        match self.stage {
            Stage::Unscaled => {
                return Err(OptimError::ScalerOrder(
                    "unscale_() has already been called since the last update()",
                ))
            }
            Stage::Stepped => return Err(OptimError::ScalerOrder("unscale_() is being called after step()")),
            Stage::Ready => {}
        }
        let device = self.device()?;
        let scale = self.scale_tensor(device);
        // As PyTorch: the reciprocal in double, then float32.
        let inv_scale = scale.to_kind(Kind::Double).reciprocal().to_kind(Kind::Float);
        self.check_and_unscale(optimizer, &inv_scale)?;
        self.stage = Stage::Unscaled;
        Ok(())
    }

    /// `scaler.step(optimizer)`: unscales if `unscale_` was not called, then steps unless a
    /// gradient is Inf/NaN. See the type's documentation for when this syncs.
    pub fn step(&mut self, optimizer: &mut dyn Optimizer) -> Result<()> {
        if !self.config.enabled {
            return optimizer.step();
        }
        if self.stage == Stage::Stepped {
            return Err(OptimError::ScalerOrder("step() has already been called since the last update()"));
        }
        let device = self.device()?;
        if optimizer.supports_amp_scaling() {
            // The fused kernels unscale and skip by themselves; only the Inf flag is needed.
            let grad_scale = match self.stage {
                Stage::Ready => {
                    let one = Tensor::ones([], (Kind::Float, device));
                    self.check_and_unscale(optimizer, &one)?;
                    Some(self.scale_tensor(device).shallow_clone())
                }
                _ => None,
            };
            let found_inf = self.found_inf.as_ref().expect("recorded above or by unscale_");
            optimizer.step_amp(grad_scale.as_ref(), found_inf)?;
        } else {
            if self.stage == Stage::Ready {
                self.unscale_(optimizer)?;
            }
            let found_inf = self.found_inf.as_ref().expect("recorded by unscale_");
            // The one host sync of the non-fused path, as PyTorch's `found_inf.item()`.
            if found_inf.double_value(&[]) == 0.0 {
                optimizer.step()?;
            }
        }
        self.stage = Stage::Stepped;
        Ok(())
    }

    /// `scaler.update()`: backs the scale off if this iteration found Inf/NaN, grows it after
    /// `growth_interval` finite iterations, on the device; then starts a new iteration.
    pub fn update(&mut self) -> Result<()> {
        if !self.config.enabled {
            return Ok(());
        }
        let found_inf = self.found_inf.take().ok_or(OptimError::ScalerOrder(
            "no inf checks were recorded prior to update(): call step() first",
        ))?;
        let c = self.config;
        let tracker = self.growth_tracker.as_ref().expect("made with the scale").shallow_clone();
        let scale = self.scale.as_mut().expect("a recorded step had a scale");
        let _ = scale
            .f_internal_amp_update_scale_(
                &tracker,
                &found_inf,
                c.growth_factor,
                c.backoff_factor,
                c.growth_interval,
            )
            .map_err(OptimError::torch("amp_update_scale_"))?;
        self.stage = Stage::Ready;
        Ok(())
    }

    /// The current scale (a host sync); 1.0 when disabled.
    pub fn get_scale(&self) -> f64 {
        if !self.config.enabled {
            return 1.0;
        }
        self.scale.as_ref().map_or(self.config.init_scale, |s| s.double_value(&[]))
    }

    /// The scaler's state (reads the scale and growth tracker: a host sync, at checkpoint time).
    pub fn state_dict(&self) -> GradScalerState {
        GradScalerState {
            scale: self.get_scale(),
            growth_factor: self.config.growth_factor,
            backoff_factor: self.config.backoff_factor,
            growth_interval: self.config.growth_interval,
            growth_tracker: self
                .growth_tracker
                .as_ref()
                .map_or(self.growth_tracker_init, |t| t.int64_value(&[])),
        }
    }

    /// Restores a saved state: scale, growth tracker and factors.
    pub fn load_state_dict(&mut self, state: &GradScalerState) -> Result<()> {
        let config = GradScalerConfig {
            init_scale: state.scale,
            growth_factor: state.growth_factor,
            backoff_factor: state.backoff_factor,
            growth_interval: state.growth_interval,
            enabled: self.config.enabled,
        };
        let mut fresh = GradScaler::new(config)?;
        fresh.growth_tracker_init = state.growth_tracker;
        if let Some(device) = self.scale.as_ref().map(Tensor::device) {
            fresh.scale_tensor(device);
        }
        *self = fresh;
        Ok(())
    }
}
