//! The architecture registry: model names (`resnet18`, `efficientnet_b0`, `vit_b_16`, ...) to
//! constructors and head names, so configs, checkpoints (their model card) and the command
//! line can name a model, and a program can add its own.

use crate::convnext::{convnext_small_on, convnext_tiny_on};
use crate::efficientnet::{
    efficientnet_b0_on, efficientnet_b1_on, efficientnet_b2_on, efficientnet_b3_on, efficientnet_v2_s_on,
};
use crate::error::{NnError, Result};
use crate::mobilenetv2::mobilenet_v2_on;
use crate::mobilenetv3::{mobilenet_v3_large_on, mobilenet_v3_small_on};
use crate::module::Module;
use crate::options::LayerOptions;
use crate::resnet::{resnet101_on, resnet152_on, resnet18_on, resnet34_on, resnet50_on};
use crate::vision_transformer::{VisionTransformer, VitConfig};
use std::sync::RwLock;

/// What an architecture is built for: the classes of its head and the side of the square
/// images it will see (only models whose shapes depend on it, like the ViT's position
/// embedding, use the size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSpec {
    /// Outputs of the head.
    pub num_classes: i64,
    /// Side of the square input images.
    pub image_size: i64,
}

impl ModelSpec {
    /// `num_classes` outputs for `image_size`-pixel images.
    pub fn new(num_classes: i64, image_size: i64) -> Self {
        ModelSpec { num_classes, image_size }
    }
}

/// A named architecture: how to build it for a [`ModelSpec`], and which parameters form its
/// classification head (torchvision's `fc.` for ResNets, the last Linear of `classifier` or
/// `heads.head.` for the others), the part a fine-tune replaces and trains first.
#[derive(Debug, Clone, Copy)]
pub struct Architecture {
    /// The name configs and the command line use.
    pub name: &'static str,
    /// The `state_dict` key prefix of the head, with its trailing dot (`fc.`, `classifier.1.`).
    pub head: &'static str,
    /// Builds the model for the spec, its tensors created on the options' dtype and device,
    /// randomly initialised unless the options skip it (for weights loaded right after); an
    /// error when the architecture cannot take the spec (a ViT's image size that is not a
    /// multiple of its patch size).
    pub build: fn(spec: ModelSpec, options: LayerOptions) -> Result<Box<dyn Module>>,
}

impl Architecture {
    /// Builds it for 224-pixel images on the CPU in float32, randomly initialised (as
    /// `torchvision.models.NAME(num_classes=...)`).
    pub fn build_default(&self, num_classes: i64) -> Result<Box<dyn Module>> {
        (self.build)(ModelSpec::new(num_classes, 224), LayerOptions::default())
    }
}

/// A built-in architecture that does not depend on the image size.
macro_rules! fixed_size {
    ($name:literal, $head:literal, $build:path) => {
        Architecture { name: $name, head: $head, build: |s, o| Ok(Box::new($build(s.num_classes, o))) }
    };
}

/// A ViT at the spec's image size, or an error naming the architecture.
fn vit(name: &str, config: VitConfig, spec: ModelSpec, o: LayerOptions) -> Result<Box<dyn Module>> {
    config.check().map_err(|reason| NnError::Architecture { name: name.to_string(), reason })?;
    Ok(Box::new(VisionTransformer::new_on(config, spec.num_classes, o)))
}

const BUILT_IN: &[Architecture] = &[
    fixed_size!("resnet18", "fc.", resnet18_on),
    fixed_size!("resnet34", "fc.", resnet34_on),
    fixed_size!("resnet50", "fc.", resnet50_on),
    fixed_size!("resnet101", "fc.", resnet101_on),
    fixed_size!("resnet152", "fc.", resnet152_on),
    fixed_size!("mobilenet_v2", "classifier.1.", mobilenet_v2_on),
    fixed_size!("mobilenet_v3_small", "classifier.3.", mobilenet_v3_small_on),
    fixed_size!("mobilenet_v3_large", "classifier.3.", mobilenet_v3_large_on),
    fixed_size!("efficientnet_b0", "classifier.1.", efficientnet_b0_on),
    fixed_size!("efficientnet_b1", "classifier.1.", efficientnet_b1_on),
    fixed_size!("efficientnet_b2", "classifier.1.", efficientnet_b2_on),
    fixed_size!("efficientnet_b3", "classifier.1.", efficientnet_b3_on),
    fixed_size!("efficientnet_v2_s", "classifier.1.", efficientnet_v2_s_on),
    fixed_size!("convnext_tiny", "classifier.2.", convnext_tiny_on),
    fixed_size!("convnext_small", "classifier.2.", convnext_small_on),
    Architecture {
        name: "vit_b_16",
        head: "heads.head.",
        build: |s, o| vit("vit_b_16", VitConfig::b_16(s.image_size), s, o),
    },
    Architecture {
        name: "vit_s_16",
        head: "heads.head.",
        build: |s, o| vit("vit_s_16", VitConfig::s_16(s.image_size), s, o),
    },
];

static REGISTERED: RwLock<Vec<Architecture>> = RwLock::new(Vec::new());

/// Adds `arch` to the registry, so that `model.name = "<name>"` in a config, a checkpoint's
/// model card and `torchlight_train`'s eval/predict/export rebuild it. A name already taken
/// (built in or registered) is replaced only for registered ones; built-ins cannot be shadowed.
/// Returns whether the name was new.
pub fn register_architecture(arch: Architecture) -> bool {
    if BUILT_IN.iter().any(|a| a.name == arch.name) {
        return false;
    }
    let mut registered = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    match registered.iter_mut().find(|a| a.name == arch.name) {
        Some(slot) => {
            *slot = arch;
            false
        }
        None => {
            registered.push(arch);
            true
        }
    }
}

/// The architecture called `name`, built in or registered.
pub fn architecture(name: &str) -> Option<Architecture> {
    BUILT_IN.iter().find(|a| a.name == name).copied().or_else(|| {
        REGISTERED.read().unwrap_or_else(|e| e.into_inner()).iter().find(|a| a.name == name).copied()
    })
}

/// Every known architecture name: the built-ins, then those registered, in order.
pub fn architecture_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = BUILT_IN.iter().map(|a| a.name).collect();
    names.extend(REGISTERED.read().unwrap_or_else(|e| e.into_inner()).iter().map(|a| a.name));
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flatten::Identity;

    #[test]
    fn built_ins_and_registered_architectures_are_found_by_name() {
        assert_eq!(architecture("resnet34").map(|a| a.head), Some("fc."));
        assert!(architecture("nope").is_none());
        let tiny = Architecture { name: "test-identity", head: "", build: |_, _| Ok(Box::new(Identity)) };
        assert!(register_architecture(tiny));
        assert!(!register_architecture(tiny), "a second registration replaces");
        assert!(architecture_names().contains(&"test-identity"));
        assert!(!register_architecture(Architecture { name: "resnet18", ..tiny }), "built-ins stay");
        assert_eq!(architecture("test-identity").unwrap().build_default(3).unwrap().kind(), "Identity");
    }
}
