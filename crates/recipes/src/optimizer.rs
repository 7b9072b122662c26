//! The optimisation of a config: its parameter groups (head and backbone, weight-decay rules,
//! layer-wise lr decay), AdamW/Adam/SGD over them, and the lr schedule.

use crate::config::{OptimizerKind, SchedulerConfig, TrainConfig};
use crate::error::{RecipeError, Result};
use crate::model::model_architecture;
use std::collections::HashMap;
use torchlight_nn::{named_parameters_with_kind, Module};
use torchlight_optim::{
    Adam, AdamConfig, AdamW, CosineAnnealingLR, LayerIds, LinearLR, LinearLRConfig, LrScheduler, MultiStepLR,
    OneCycleLR, OneCycleLRConfig, Optimizer, ParamGroupBuilder, ParamGroups, PlateauMode, ReduceLROnPlateau,
    ReduceLROnPlateauConfig, SequentialLR, Sgd, SgdConfig, StepLR, ThresholdMode,
};
use torchlight_train::Interval;

/// The parameter groups of `config` for `model` (built by `config.model.name`), as optim's
/// [`ParamGroupBuilder`] makes them: the head (the parameters under `head`, e.g. `fc.`) at
/// `optim.lr`, the backbone at [`TrainConfig::backbone_lr`] (`optim.lr` from scratch, a tenth
/// of it when fine-tuning, or `optim.backbone_lr` when set); weight decay `optim.weight_decay` except
/// on 1-D parameters (biases, norm weights); `optim.bias_weight_decay` for every `bias` and
/// `optim.norm_weight_decay` for normalisation layers, when set (torchvision's
/// `set_weight_decay`, bias first); `optim.layer_decay` scales each layer's lr by
/// `decay ^ (top - layer)` with the architecture's layer ids (timm's layer-wise decay).
/// These are the groups [`build_optimizer`] trains and `torchlight summary` prints.
///
/// # Errors
/// When `optim.layer_decay` is set and the architecture does not number its layers, or a
/// value is out of range (both named as their config field).
pub fn param_groups(config: &TrainConfig, model: &dyn Module, head: &str) -> Result<ParamGroups> {
    let o = &config.optim;
    let mut rules = ParamGroupBuilder::new(config.backbone_lr())
        .with_weight_decay(o.weight_decay)
        .with_no_weight_decay_1d();
    if let Some(wd) = o.bias_weight_decay {
        rules = rules.with_bias_weight_decay(wd);
    }
    if let Some(wd) = o.norm_weight_decay {
        rules = rules.with_norm_weight_decay(wd);
    }
    if !head.is_empty() {
        rules = rules.with_prefix_lr(head, o.lr);
    }
    let params = named_parameters_with_kind(model);
    if let Some(decay) = o.layer_decay {
        let arch = model_architecture(config)?;
        let names: Vec<&str> = params.iter().map(|(n, _, _)| n.as_str()).collect();
        let ids = arch.layer_ids(&names).ok_or_else(|| RecipeError::InvalidConfig {
            field: "optim.layer_decay".into(),
            value: decay.to_string(),
            reason: format!(
                "model {} does not number its layers (register it with Architecture::with_layer_groups)",
                arch.name()
            ),
        })?;
        let layer_of: HashMap<String, u64> =
            names.iter().zip(ids).map(|(n, id)| (n.to_string(), id as u64)).collect();
        rules = rules.with_layer_decay(
            decay,
            LayerIds::by_name(move |name| layer_of.get(name).copied().unwrap_or(u64::MAX)),
        );
    }
    Ok(rules.build(params)?)
}

/// AdamW/Adam/SGD over the groups of [`param_groups`].
pub fn build_optimizer(config: &TrainConfig, model: &dyn Module, head: &str) -> Result<Box<dyn Optimizer>> {
    let o = &config.optim;
    let groups = param_groups(config, model, head)?;
    Ok(match o.optimizer {
        OptimizerKind::AdamW | OptimizerKind::Adam => {
            let decoupled = o.optimizer == OptimizerKind::AdamW;
            let groups = groups.into_param_groups(|lr, wd| {
                AdamConfig::adamw()
                    .with_lr(lr)
                    .with_weight_decay(wd)
                    .with_betas(o.betas[0], o.betas[1])
                    .with_decoupled_weight_decay(decoupled)
            });
            if decoupled {
                Box::new(AdamW::new(groups)?)
            } else {
                Box::new(Adam::new(groups)?)
            }
        }
        OptimizerKind::Sgd => Box::new(Sgd::new(groups.into_param_groups(|lr, wd| {
            SgdConfig::new(lr).with_momentum(o.momentum).with_weight_decay(wd)
        }))?),
    })
}

/// The `ReduceLROnPlateau` of `scheduler.kind = "plateau"` over `optimizer`'s groups, with the
/// metric it monitors, for [`TrainerBuilder::plateau_scheduler`]; `None` for the other kinds
/// (whose schedule [`build_scheduler`] makes).
///
/// [`TrainerBuilder::plateau_scheduler`]: torchlight_train::TrainerBuilder::plateau_scheduler
pub fn build_plateau(
    config: &TrainConfig,
    optimizer: &dyn Optimizer,
) -> Result<Option<(ReduceLROnPlateau, String)>> {
    let SchedulerConfig::Plateau {
        monitor,
        mode,
        factor,
        patience,
        threshold,
        threshold_mode,
        cooldown,
        min_lr,
        eps,
    } = &config.scheduler
    else {
        return Ok(None);
    };
    // Checked by TrainConfig::validate; anything else is torch's default.
    let mode = if mode == "max" { PlateauMode::Max } else { PlateauMode::Min };
    let threshold_mode = if threshold_mode == "abs" { ThresholdMode::Abs } else { ThresholdMode::Rel };
    let c = ReduceLROnPlateauConfig::default()
        .with_mode(mode)
        .with_factor(*factor)
        .with_patience(*patience as u64)
        .with_threshold(*threshold, threshold_mode)
        .with_cooldown(*cooldown as u64)
        .with_min_lrs(vec![*min_lr])
        .with_eps(*eps);
    Ok(Some((ReduceLROnPlateau::new(optimizer, c)?, monitor.clone())))
}

/// The lr schedule of `config` over `epochs` epochs (the run's, or the added ones of a
/// restarted schedule): linear warm-up (if any) then the configured schedule, stepped per
/// epoch, or OneCycleLR stepped per optimizer step.
pub fn build_scheduler(
    config: &TrainConfig,
    optimizer: &mut dyn Optimizer,
    steps_per_epoch: usize,
    epochs: u64,
) -> Result<Option<(Box<dyn LrScheduler>, Interval)>> {
    let warmup = config.optim.warmup_epochs as u64;
    if let SchedulerConfig::OneCycle { pct_start, div_factor, final_div_factor } = config.scheduler {
        let total = (epochs * steps_per_epoch as u64).max(1);
        let c = OneCycleLRConfig {
            pct_start,
            div_factor,
            final_div_factor,
            ..OneCycleLRConfig::new(optimizer.lrs(), total)
        };
        return Ok(Some((Box::new(OneCycleLR::new(optimizer, c)?), Interval::Step)));
    }
    let main_epochs = epochs.saturating_sub(warmup).max(1);
    let main: Option<Box<dyn LrScheduler>> = match &config.scheduler {
        SchedulerConfig::None => None,
        SchedulerConfig::Step { step_size, gamma } => {
            Some(Box::new(StepLR::new(optimizer, *step_size as u64, *gamma)?))
        }
        SchedulerConfig::MultiStep { milestones, gamma } => Some(Box::new(MultiStepLR::new(
            optimizer,
            milestones.iter().map(|m| (*m as u64).saturating_sub(warmup)).collect(),
            *gamma,
        )?)),
        SchedulerConfig::Cosine { eta_min } => {
            Some(Box::new(CosineAnnealingLR::new(optimizer, main_epochs, *eta_min)?))
        }
        SchedulerConfig::OneCycle { .. } => unreachable!("handled above"),
        // Not an lr scheduler: the Trainer's plateau slot (build_plateau).
        SchedulerConfig::Plateau { .. } => None,
    };
    if warmup == 0 {
        return Ok(main.map(|m| (m, Interval::Epoch)));
    }
    let warm: Box<dyn LrScheduler> =
        Box::new(LinearLR::new(optimizer, LinearLRConfig::warmup(0.01, warmup))?);
    Ok(Some((
        match main {
            None => warm,
            Some(main) => Box::new(SequentialLR::new(optimizer, vec![warm, main], vec![warmup])?),
        },
        Interval::Epoch,
    )))
}
