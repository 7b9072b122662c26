//! The architecture registry: model names (`resnet18`, ...) to constructors and head names, so
//! configs, checkpoints (their model card) and the command line can name a model, and a
//! program can add its own.

use crate::module::Module;
use crate::options::LayerOptions;
use crate::resnet::{resnet101_on, resnet152_on, resnet18_on, resnet34_on, resnet50_on};
use std::sync::RwLock;

/// A named architecture: how to build it with `num_classes` outputs, and which parameters form
/// its classification head (torchvision's `fc.` for ResNets, `classifier.` or `heads.` for
/// others), the part a fine-tune replaces and trains first.
#[derive(Debug, Clone, Copy)]
pub struct Architecture {
    /// The name configs and the command line use.
    pub name: &'static str,
    /// The `state_dict` key prefix of the head, with its trailing dot (`fc.`).
    pub head: &'static str,
    /// Builds the model with a `num_classes`-way head, its tensors created on the options'
    /// dtype and device, randomly initialised unless the options skip it (for weights loaded
    /// right after).
    pub build: fn(num_classes: i64, options: LayerOptions) -> Box<dyn Module>,
}

impl Architecture {
    /// Builds it on the CPU in float32, randomly initialised (as `torchvision.models.NAME(
    /// num_classes=...)`).
    pub fn build_default(&self, num_classes: i64) -> Box<dyn Module> {
        (self.build)(num_classes, LayerOptions::default())
    }
}

const BUILT_IN: &[Architecture] = &[
    Architecture { name: "resnet18", head: "fc.", build: |c, o| Box::new(resnet18_on(c, o)) },
    Architecture { name: "resnet34", head: "fc.", build: |c, o| Box::new(resnet34_on(c, o)) },
    Architecture { name: "resnet50", head: "fc.", build: |c, o| Box::new(resnet50_on(c, o)) },
    Architecture { name: "resnet101", head: "fc.", build: |c, o| Box::new(resnet101_on(c, o)) },
    Architecture { name: "resnet152", head: "fc.", build: |c, o| Box::new(resnet152_on(c, o)) },
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
        let tiny = Architecture { name: "test-identity", head: "", build: |_, _| Box::new(Identity) };
        assert!(register_architecture(tiny));
        assert!(!register_architecture(tiny), "a second registration replaces");
        assert!(architecture_names().contains(&"test-identity"));
        assert!(!register_architecture(Architecture { name: "resnet18", ..tiny }), "built-ins stay");
        assert_eq!(architecture("test-identity").unwrap().build_default(3).kind(), "Identity");
    }
}
