//! The model of a config: the architecture from nn's registry, its pretrained backbone and a
//! new head, on the training device.

use crate::config::TrainConfig;
use crate::error::{RecipeError, Result};
use std::collections::HashSet;
use std::path::Path;
use tch::{Device, Kind};
use torchlight_nn::{
    architecture, freeze_batch_norm, hub_weights_file, load_weights, state_dict, to_device, Architecture,
    KeyRewrite, LayerOptions, LoadOptions, LoadReport, ModelSpec, Module,
};

/// The registered architecture `config.model.name` names.
pub fn model_architecture(config: &TrainConfig) -> Result<Architecture> {
    let name = &config.model.name;
    architecture(name).ok_or_else(|| RecipeError::InvalidConfig {
        field: "model.name".into(),
        value: name.clone(),
        reason: format!("not a known architecture; expected one of {}", torchlight_nn::architecture_list()),
    })
}

/// The model of `config` with `num_classes` outputs for `data.image_size` images, its starting
/// weights loaded (everything but the head, which is new; see [`pretrained_load_options`]), on
/// `device`, its BatchNorms frozen when `model.freeze_bn` says so; starting weights holding
/// NaN or Inf are an error naming the file and the tensor. Random initialisation runs on the CPU, as in
/// torchvision (so a seed gives the same weights whatever the device), then moves.
pub fn build_model(config: &TrainConfig, num_classes: usize, device: Device) -> Result<Box<dyn Module>> {
    let arch = model_architecture(config)?;
    let mut model = arch.build(model_spec(config, num_classes), LayerOptions::default())?;
    if config.model.freeze_bn {
        freeze_batch_norm(model.as_mut());
    }
    if let Some(weights) = &config.model.pretrained {
        let report = load_weights(model.as_ref(), weights, &pretrained_load_options(config, arch.head())?)?;
        check_finite(model.as_ref(), &report, weights)?;
    }
    to_device(model.as_ref(), device);
    Ok(model)
}

/// Starting weights with NaN or Inf would stop the first step with a non-finite loss or
/// gradient and the loop's advice to lower the lr; they are named here instead, file and
/// tensor, before training. Only loaded tensors are read (the new head's init is finite).
pub(crate) fn check_finite(model: &dyn Module, report: &LoadReport, weights: &Path) -> Result<()> {
    let loaded: HashSet<&str> = report.loaded.iter().map(String::as_str).collect();
    for (key, t) in state_dict(model) {
        if !loaded.contains(key.as_str()) || !t.is_floating_point() {
            continue;
        }
        let bad = t.isfinite().logical_not().sum(Kind::Int64).int64_value(&[]);
        if bad > 0 {
            let file = if weights.is_dir() {
                hub_weights_file(weights).unwrap_or_else(|_| weights.to_path_buf())
            } else {
                weights.to_path_buf()
            };
            let renamed = if report.rewrites.is_empty() { "" } else { " (its name after the key rewrites)" };
            return Err(RecipeError::InvalidConfig {
                field: "model.pretrained".into(),
                value: file.display().to_string(),
                reason: format!(
                    "the starting weights hold NaN or Inf: tensor `{key}`{renamed} has {bad} non-finite of {} values; the file is broken, not the training: fetch or export it again",
                    t.numel()
                ),
            });
        }
    }
    Ok(())
}

/// Refuses a run whose smallest training batch, `smallest_batch` images, is one and leaves a
/// BatchNorm of `config`'s model one value per channel at `data.image_size` (a 1x1 feature map:
/// ResNets below 33 px): PyTorch refuses that batch ("Expected more than 1 value per channel
/// when training"), and without the check its running statistics turn NaN while the run ends
/// as if nothing happened. Probed with one training-mode forward pass of a throwaway,
/// uninitialised model; nothing runs when no batch of one can occur or `model.freeze_bn` holds
/// the statistics fixed.
pub fn check_batch_norm_batches(config: &TrainConfig, smallest_batch: usize) -> Result<()> {
    if smallest_batch != 1 || config.model.freeze_bn {
        return Ok(());
    }
    let arch = model_architecture(config)?;
    let model = arch.build(model_spec(config, 2), LayerOptions::default().skip_init())?;
    let size = i64::from(config.data.image_size());
    let input = tch::Tensor::zeros([1, 3, size, size], (tch::Kind::Float, Device::Cpu));
    let seen = torchlight_nn::probe_single_value_batch_norm(|| {
        let _guard = torchlight_tensor::no_grad();
        drop(model.forward_t(&input, true));
    });
    let Some(shape) = seen else { return Ok(()) };
    let (field, value, batch) = if config.train.batch_size == 1 {
        ("train.batch_size", "1".to_string(), "train.batch_size = 1".to_string())
    } else {
        ("data.root", config.data.root.display().to_string(), "a training split of one image".to_string())
    };
    Err(RecipeError::InvalidConfig {
        field: field.into(),
        value,
        reason: format!(
            "with {batch} and data.image_size = {size}, a BatchNorm of {} gets one value per channel (its input {shape:?}), which PyTorch refuses (\"Expected more than 1 value per channel when training\") and which would turn its running statistics NaN: use train.batch_size of 2 or more, a larger data.image_size, or model.freeze_bn = true",
            config.model.name
        ),
    })
}

/// Refuses `data.eval_image_size` other than `data.image_size` for an architecture whose
/// parameters depend on the size (a ViT's position embedding): the model built at one size
/// cannot run at the other. Two uninitialised builds are compared, shape by shape; nothing
/// runs when the sizes are equal.
pub fn check_eval_size(config: &TrainConfig) -> Result<()> {
    let (train, eval) = (config.data.image_size(), config.data.eval_image_size());
    if train == eval {
        return Ok(());
    }
    let arch = model_architecture(config)?;
    let options = LayerOptions::default().skip_init();
    let shapes = |size: u32| -> Option<Vec<Vec<i64>>> {
        let model = arch.build(ModelSpec::new(2, i64::from(size)), options).ok()?;
        Some(state_dict(model.as_ref()).iter().map(|(_, t)| t.size()).collect())
    };
    if shapes(train).is_some() && shapes(train) == shapes(eval) {
        return Ok(());
    }
    Err(RecipeError::InvalidConfig {
        field: "data.eval_image_size".into(),
        value: eval.to_string(),
        reason: format!(
            "{}'s parameters depend on the image size (a ViT's position embedding), so it evaluates at data.image_size = {train} only: set data.eval_image_size = {train}",
            config.model.name
        ),
    })
}

/// How the pretrained file loads: strictly, except the head (new), after the config's key
/// rewrites and with wrapper prefixes (`module.`, `model.`) stripped.
pub fn pretrained_load_options(config: &TrainConfig, head: &str) -> Result<LoadOptions> {
    let mut options = LoadOptions::strict().skip(head).strip_wrappers();
    for rewrite in &config.model.key_rewrite {
        options = options.rewrite(KeyRewrite::parse(rewrite)?);
    }
    Ok(options)
}

/// What the model of `config` is built for: `num_classes` outputs, `data.image_size` pixels.
pub(crate) fn model_spec(config: &TrainConfig, num_classes: usize) -> ModelSpec {
    ModelSpec::new(num_classes as i64, i64::from(config.data.image_size()))
}
