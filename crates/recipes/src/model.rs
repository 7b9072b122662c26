//! The model of a config: the architecture from nn's registry, its pretrained backbone and a
//! new head, on the training device.

use crate::config::TrainConfig;
use crate::error::{RecipeError, Result};
use tch::Device;
use torchlight_nn::{
    architecture, freeze_batch_norm, load_weights, to_device, Architecture, KeyRewrite, LayerOptions,
    LoadOptions, ModelSpec, Module,
};

/// The registered architecture `config.model.name` names.
pub fn model_architecture(config: &TrainConfig) -> Result<Architecture> {
    let name = &config.model.name;
    architecture(name).ok_or_else(|| RecipeError::InvalidConfig {
        field: "model.name".into(),
        value: name.clone(),
        reason: format!(
            "not a known architecture; expected one of {}",
            torchlight_nn::architecture_names().join(", ")
        ),
    })
}

/// The model of `config` with `num_classes` outputs for `data.image_size` images, its starting
/// weights loaded (everything but the head, which is new; see [`pretrained_load_options`]), on
/// `device`, its BatchNorms frozen when `model.freeze_bn` says so. Random initialisation runs on the CPU, as in
/// torchvision (so a seed gives the same weights whatever the device), then moves.
pub fn build_model(config: &TrainConfig, num_classes: usize, device: Device) -> Result<Box<dyn Module>> {
    let arch = model_architecture(config)?;
    let mut model = arch.build(model_spec(config, num_classes), LayerOptions::default())?;
    if config.model.freeze_bn {
        freeze_batch_norm(model.as_mut());
    }
    if let Some(weights) = &config.model.pretrained {
        load_weights(model.as_ref(), weights, &pretrained_load_options(config, arch.head())?)?;
    }
    to_device(model.as_ref(), device);
    Ok(model)
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
    ModelSpec::new(num_classes as i64, i64::from(config.data.image_size))
}
