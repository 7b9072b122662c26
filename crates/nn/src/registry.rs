//! The architecture registry: model names (`resnet18`, `efficientnet_b0`, `vit_b_16`, ...) to
//! constructors and head names, so configs, checkpoints (their model card) and the command
//! line can name a model, and a program can add its own.

use crate::classifier::{classifier_of, Classifier};
use crate::convnext::{convnext_base_on, convnext_small_on, convnext_tiny_on, ConvNeXt};
use crate::efficientnet::{
    efficientnet_b0_on, efficientnet_b1_on, efficientnet_b2_on, efficientnet_b3_on, efficientnet_v2_s_on,
    EfficientNet,
};
use crate::error::{NnError, Result};
use crate::layer_groups::{
    convnext_layer_ids, efficientnet_layer_ids, mobilenet_v2_layer_ids, mobilenet_v3_layer_ids,
    resnet_layer_ids, vit_layer_ids, LayerGroupsFn,
};
use crate::mobilenetv2::{mobilenet_v2_on, MobileNetV2};
use crate::mobilenetv3::{
    mobilenet_v3_large_on, mobilenet_v3_small_on, mobilenetv3_large_100_on, mobilenetv3_small_100_on,
    MobileNetV3,
};
use crate::module::Module;
use crate::options::LayerOptions;
use crate::resnet::{
    resnet101_on, resnet101d_on, resnet152_on, resnet152d_on, resnet18_on, resnet18d_on, resnet34_on,
    resnet34d_on, resnet50_on, resnet50d_on, ResNet,
};
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

/// How an architecture builds its model for a [`ModelSpec`]: tensors created on the options'
/// dtype and device, randomly initialised unless the options skip it (for weights loaded right
/// after); an error when the architecture cannot take the spec (a ViT's image size that is not
/// a multiple of its patch size).
pub type BuildFn = fn(spec: ModelSpec, options: LayerOptions) -> Result<Box<dyn Module>>;

/// How an architecture's model is seen as a [`Classifier`] (see [`classifier_of`]).
pub type ClassifierFn = fn(model: &dyn Module) -> Option<&dyn Classifier>;

/// A named architecture: how to build it for a [`ModelSpec`], which parameters form its
/// classification head (torchvision's `fc.` for ResNets, the last Linear of `classifier` or
/// `heads.head.` for the others), the part a fine-tune replaces and trains first, and, when
/// known, how its model splits into features and head ([`Classifier`]).
///
/// ```
/// use torchlight_nn::{register_architecture, Architecture, Identity};
/// let arch = Architecture::new("my-identity", "", |_, _| Ok(Box::new(Identity)));
/// register_architecture(arch);
/// assert_eq!(torchlight_nn::architecture("my-identity").unwrap().head(), "");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Architecture {
    name: &'static str,
    head: &'static str,
    build: BuildFn,
    classifier: Option<ClassifierFn>,
    layers: Option<LayerGroupsFn>,
}

impl Architecture {
    /// The architecture `name`, whose head's `state_dict` keys start with `head` (with its
    /// trailing dot, `fc.`; empty when it has none), built by `build`.
    pub const fn new(name: &'static str, head: &'static str, build: BuildFn) -> Self {
        Architecture { name, head, build, classifier: None, layers: None }
    }

    /// The same, with its model seen as a [`Classifier`] through `classifier` (usually
    /// `classifier_of::<MyModel>`).
    pub const fn with_classifier(mut self, classifier: ClassifierFn) -> Self {
        self.classifier = Some(classifier);
        self
    }

    /// The same, with `layers` numbering its parameters' layers for layer-wise lr decay
    /// (see [`layer_ids`](Self::layer_ids)).
    pub const fn with_layer_groups(mut self, layers: LayerGroupsFn) -> Self {
        self.layers = Some(layers);
        self
    }

    /// The layer id of each of `names` (the model's parameter names in `state_dict` order),
    /// for layer-wise lr decay: from 0 at the stem up to the head, as timm's
    /// `param_groups_layer_decay` numbers the same model's layers with its
    /// `group_matcher(coarse=False)` (one layer per residual/inverted-residual/ConvNeXt/ViT
    /// block; see [`resnet_layer_ids`](crate::resnet_layer_ids) and its siblings). `None` when
    /// the architecture does not say ([`with_layer_groups`](Self::with_layer_groups)).
    pub fn layer_ids(&self, names: &[&str]) -> Option<Vec<usize>> {
        self.layers.map(|f| f(names))
    }

    /// Whether [`layer_ids`](Self::layer_ids) numbers this architecture's layers.
    pub fn has_layer_groups(&self) -> bool {
        self.layers.is_some()
    }

    /// The name configs and the command line use.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The `state_dict` key prefix of the head, with its trailing dot (`fc.`, `classifier.1.`).
    pub fn head(&self) -> &'static str {
        self.head
    }

    /// Builds the model for `spec` (see [`BuildFn`]).
    pub fn build(&self, spec: ModelSpec, options: LayerOptions) -> Result<Box<dyn Module>> {
        (self.build)(spec, options)
    }

    /// Builds it for 224-pixel images on the CPU in float32, randomly initialised (as
    /// `torchvision.models.NAME(num_classes=...)`).
    pub fn build_default(&self, num_classes: i64) -> Result<Box<dyn Module>> {
        self.build(ModelSpec::new(num_classes, 224), LayerOptions::default())
    }

    /// `model` (built by this architecture) as features and head, when the architecture says
    /// how; `None` otherwise.
    pub fn classifier<'m>(&self, model: &'m dyn Module) -> Option<&'m dyn Classifier> {
        self.classifier.and_then(|f| f(model))
    }
}

/// A built-in architecture that does not depend on the image size.
macro_rules! fixed_size {
    ($name:literal, $head:literal, $build:path, $ty:ty, $layers:path) => {
        Architecture::new($name, $head, |s, o| Ok(Box::new($build(s.num_classes, o))))
            .with_classifier(classifier_of::<$ty>)
            .with_layer_groups($layers)
    };
}

/// A ViT at the spec's image size, or an error naming the architecture.
fn vit(name: &str, config: VitConfig, spec: ModelSpec, o: LayerOptions) -> Result<Box<dyn Module>> {
    config.check().map_err(|reason| NnError::Architecture { name: name.to_string(), reason })?;
    Ok(Box::new(VisionTransformer::new_on(config, spec.num_classes, o)))
}

/// A timm ViT/DeiT name (timm's weights load into it through
/// [`timm_to_torchvision`](crate::timm_to_torchvision)), at the spec's image size.
macro_rules! timm_vit {
    ($name:literal, $config:ident) => {
        Architecture::new($name, "heads.head.", |s, o| vit($name, VitConfig::$config(s.image_size), s, o))
            .with_classifier(classifier_of::<VisionTransformer>)
            .with_layer_groups(vit_layer_ids)
    };
}

const BUILT_IN: &[Architecture] = &[
    fixed_size!("resnet18", "fc.", resnet18_on, ResNet, resnet_layer_ids),
    fixed_size!("resnet34", "fc.", resnet34_on, ResNet, resnet_layer_ids),
    fixed_size!("resnet50", "fc.", resnet50_on, ResNet, resnet_layer_ids),
    fixed_size!("resnet101", "fc.", resnet101_on, ResNet, resnet_layer_ids),
    fixed_size!("resnet152", "fc.", resnet152_on, ResNet, resnet_layer_ids),
    fixed_size!("resnet18d", "fc.", resnet18d_on, ResNet, resnet_layer_ids),
    fixed_size!("resnet34d", "fc.", resnet34d_on, ResNet, resnet_layer_ids),
    fixed_size!("resnet50d", "fc.", resnet50d_on, ResNet, resnet_layer_ids),
    fixed_size!("resnet101d", "fc.", resnet101d_on, ResNet, resnet_layer_ids),
    fixed_size!("resnet152d", "fc.", resnet152d_on, ResNet, resnet_layer_ids),
    fixed_size!("mobilenet_v2", "classifier.1.", mobilenet_v2_on, MobileNetV2, mobilenet_v2_layer_ids),
    fixed_size!(
        "mobilenet_v3_small",
        "classifier.3.",
        mobilenet_v3_small_on,
        MobileNetV3,
        mobilenet_v3_layer_ids
    ),
    fixed_size!(
        "mobilenet_v3_large",
        "classifier.3.",
        mobilenet_v3_large_on,
        MobileNetV3,
        mobilenet_v3_layer_ids
    ),
    // timm's MobileNetV3s: torchvision's module with timm's BatchNorm eps (1e-5).
    fixed_size!(
        "mobilenetv3_small_100",
        "classifier.3.",
        mobilenetv3_small_100_on,
        MobileNetV3,
        mobilenet_v3_layer_ids
    ),
    fixed_size!(
        "mobilenetv3_large_100",
        "classifier.3.",
        mobilenetv3_large_100_on,
        MobileNetV3,
        mobilenet_v3_layer_ids
    ),
    fixed_size!("efficientnet_b0", "classifier.1.", efficientnet_b0_on, EfficientNet, efficientnet_layer_ids),
    fixed_size!("efficientnet_b1", "classifier.1.", efficientnet_b1_on, EfficientNet, efficientnet_layer_ids),
    fixed_size!("efficientnet_b2", "classifier.1.", efficientnet_b2_on, EfficientNet, efficientnet_layer_ids),
    fixed_size!("efficientnet_b3", "classifier.1.", efficientnet_b3_on, EfficientNet, efficientnet_layer_ids),
    fixed_size!(
        "efficientnet_v2_s",
        "classifier.1.",
        efficientnet_v2_s_on,
        EfficientNet,
        efficientnet_layer_ids
    ),
    fixed_size!("convnext_tiny", "classifier.2.", convnext_tiny_on, ConvNeXt, convnext_layer_ids),
    fixed_size!("convnext_small", "classifier.2.", convnext_small_on, ConvNeXt, convnext_layer_ids),
    fixed_size!("convnext_base", "classifier.2.", convnext_base_on, ConvNeXt, convnext_layer_ids),
    Architecture::new("vit_b_16", "heads.head.", |s, o| vit("vit_b_16", VitConfig::b_16(s.image_size), s, o))
        .with_classifier(classifier_of::<VisionTransformer>)
        .with_layer_groups(vit_layer_ids),
    Architecture::new("vit_s_16", "heads.head.", |s, o| vit("vit_s_16", VitConfig::s_16(s.image_size), s, o))
        .with_classifier(classifier_of::<VisionTransformer>)
        .with_layer_groups(vit_layer_ids),
    timm_vit!("vit_tiny_patch16_224", ti_16),
    timm_vit!("vit_small_patch16_224", s_16),
    timm_vit!("vit_base_patch16_224", b_16),
    timm_vit!("deit_tiny_patch16_224", ti_16),
    timm_vit!("deit_small_patch16_224", s_16),
    timm_vit!("deit_base_patch16_224", b_16),
    // The `_384` names: the same modules, which load the 384-pixel weights at any image size
    // (the position embedding resampled as timm does, `resample_abs_pos_embed`).
    timm_vit!("vit_tiny_patch16_384", ti_16),
    timm_vit!("vit_small_patch16_384", s_16),
    timm_vit!("vit_base_patch16_384", b_16),
    timm_vit!("deit_base_patch16_384", b_16),
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

/// Registry names that build the same module as another (timm's and torchvision's names for one
/// architecture), as `(alias, name)`: a config, a checkpoint or a Hub folder may use either,
/// and `--model`'s help lists the name with its aliases ([`architecture_list`]).
pub const ARCHITECTURE_ALIASES: &[(&str, &str)] = &[
    ("vit_small_patch16_224", "vit_s_16"),
    ("deit_small_patch16_224", "vit_s_16"),
    ("vit_base_patch16_224", "vit_b_16"),
    ("deit_base_patch16_224", "vit_b_16"),
    ("deit_tiny_patch16_224", "vit_tiny_patch16_224"),
    ("vit_tiny_patch16_384", "vit_tiny_patch16_224"),
    ("vit_small_patch16_384", "vit_s_16"),
    ("vit_base_patch16_384", "vit_b_16"),
    ("deit_base_patch16_384", "vit_b_16"),
];

/// The name `name` is an alias of ([`ARCHITECTURE_ALIASES`]), else `name` itself: two names
/// build the same module exactly when their canonical names are equal.
pub fn canonical_architecture(name: &str) -> &str {
    ARCHITECTURE_ALIASES.iter().find(|(alias, _)| *alias == name).map_or(name, |(_, to)| to)
}

/// Every architecture once, in registry order, each with its aliases in parentheses
/// (`vit_s_16 (alias vit_small_patch16_224, deit_small_patch16_224)`), comma-separated: the
/// text `--model`'s help shows.
pub fn architecture_list() -> String {
    architecture_names()
        .into_iter()
        .filter(|n| canonical_architecture(n) == *n)
        .map(|name| {
            let aliases: Vec<&str> =
                ARCHITECTURE_ALIASES.iter().filter(|(_, to)| *to == name).map(|(alias, _)| *alias).collect();
            if aliases.is_empty() {
                name.to_string()
            } else {
                format!("{name} (alias {})", aliases.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flatten::Identity;
    use tch::nn::ModuleT;

    #[test]
    fn built_ins_and_registered_architectures_are_found_by_name() {
        assert_eq!(architecture("resnet34").map(|a| a.head()), Some("fc."));
        assert!(architecture("nope").is_none());
        let tiny = Architecture::new("test-identity", "", |_, _| Ok(Box::new(Identity)));
        assert!(register_architecture(tiny));
        assert!(!register_architecture(tiny), "a second registration replaces");
        assert!(architecture_names().contains(&"test-identity"));
        let shadow = Architecture::new("resnet18", "", |_, _| Ok(Box::new(Identity)));
        assert!(!register_architecture(shadow), "built-ins stay");
        let identity = architecture("test-identity").unwrap().build_default(3).unwrap();
        assert_eq!(identity.kind(), "Identity");
        assert!(architecture("test-identity").unwrap().classifier(identity.as_ref()).is_none());
    }

    #[test]
    fn every_built_in_splits_into_features_and_a_head_that_give_its_logits() {
        let _guard = tch::no_grad_guard();
        for arch in BUILT_IN {
            let model = arch.build(ModelSpec::new(4, 32), LayerOptions::default().skip_init()).unwrap();
            assert!(arch.classifier(model.as_ref()).is_some(), "{} has no split", arch.name());
        }
        // One of each family, initialised: the head on the features is the model's forward.
        let families = [
            "resnet18",
            "resnet18d",
            "mobilenet_v2",
            "mobilenet_v3_small",
            "efficientnet_b0",
            "convnext_tiny",
            "vit_s_16",
        ];
        for name in families {
            let arch = architecture(name).unwrap();
            let model = arch.build(ModelSpec::new(4, 32), LayerOptions::default()).unwrap();
            let classifier = arch.classifier(model.as_ref()).unwrap();
            let x = tch::Tensor::randn([2, 3, 32, 32], (tch::Kind::Float, tch::Device::Cpu));
            let logits = classifier.logits_t(&classifier.features_t(&x, false), false);
            assert!(logits.equal(&model.forward_t(&x, false)), "{name}: head(features) is its forward");
            assert_eq!(logits.size(), [2, 4], "{name}");
        }
    }

    /// Each alias builds the module its name does: the same type and `state_dict` keys and
    /// shapes (at 32 pixels), and the list shows every name once, aliases only in parentheses.
    #[test]
    fn aliases_build_the_same_module_and_are_listed_as_aliases() {
        for (alias, name) in ARCHITECTURE_ALIASES {
            let build = |n: &str| {
                architecture(n)
                    .unwrap()
                    .build(ModelSpec::new(3, 32), LayerOptions::default().skip_init())
                    .unwrap()
            };
            let (a, b) = (build(alias), build(name));
            assert_eq!(a.kind(), b.kind(), "{alias}");
            let shapes = |m: &dyn Module| -> Vec<(String, Vec<i64>)> {
                crate::module::state_dict(m).into_iter().map(|(k, t)| (k, t.size())).collect()
            };
            assert_eq!(shapes(a.as_ref()), shapes(b.as_ref()), "{alias} vs {name}");
            assert_eq!(architecture(alias).unwrap().head(), architecture(name).unwrap().head());
            assert_eq!(canonical_architecture(alias), *name);
        }
        let list = architecture_list();
        assert!(
            list.contains(
                "vit_s_16 (alias vit_small_patch16_224, deit_small_patch16_224, vit_small_patch16_384)"
            ),
            "{list}"
        );
        assert!(
            list.contains("vit_tiny_patch16_224 (alias deit_tiny_patch16_224, vit_tiny_patch16_384)"),
            "{list}"
        );
        for name in architecture_names() {
            assert_eq!(
                list.matches(&format!("{name},")).count()
                    + list.matches(&format!("{name})")).count()
                    + usize::from(list.ends_with(name))
                    + list.matches(&format!("{name} (")).count(),
                1,
                "{name} once in {list}"
            );
        }
    }
}
