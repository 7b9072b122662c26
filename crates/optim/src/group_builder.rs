//! One parameter-group builder: weight decay, lr and layer-wise lr decay set by rules
//! (torchvision's reference `set_weight_decay`, timm's `param_groups_weight_decay` and
//! `param_groups_layer_decay`, an lr by name prefix for a head and its backbone).

use crate::error::{OptimError, Result};
use crate::fnmatch::fnmatch;
use crate::param_group::{NamedTensors, ParamGroup};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;
use tch::Tensor;

/// A parameter with what the rules of [`ParamGroupBuilder`] look at: its `state_dict` name,
/// the tensor (its dimension) and the kind of the module that owns it (`"BatchNorm2d"`,
/// `"LayerNorm"`, `"Linear"`, as `torchlight_nn::Module::kind` says; `""` when unknown).
///
/// `torchlight_nn::named_parameters_with_kind(model)` lists a model's parameters as
/// `(name, tensor, kind)` triples, which convert with `From`; `(name, tensor)` pairs convert
/// with an unknown kind (no norm rule applies to them).
#[derive(Debug)]
pub struct NamedParam {
    /// The `state_dict` key (`layer1.0.bn1.weight`).
    pub name: String,
    /// The parameter, sharing storage with the model's.
    pub tensor: Tensor,
    /// The owning module's kind, `""` if not known.
    pub module_kind: &'static str,
}

impl NamedParam {
    /// A parameter named `name` owned by a module of kind `module_kind`.
    pub fn new(name: impl Into<String>, tensor: Tensor, module_kind: &'static str) -> Self {
        NamedParam { name: name.into(), tensor, module_kind }
    }
}

impl From<(String, Tensor, &'static str)> for NamedParam {
    fn from((name, tensor, module_kind): (String, Tensor, &'static str)) -> Self {
        NamedParam { name, tensor, module_kind }
    }
}

impl From<(String, Tensor)> for NamedParam {
    fn from((name, tensor): (String, Tensor)) -> Self {
        NamedParam { name, tensor, module_kind: "" }
    }
}

/// Whether a module kind is a normalisation layer for
/// [`ParamGroupBuilder::with_norm_weight_decay`]: the kinds of torchvision's default
/// `norm_classes` (`_BatchNorm`, `LayerNorm`, `GroupNorm`, `_InstanceNorm`,
/// `LocalResponseNorm`, subclasses included), i.e. `BatchNorm*`, `SyncBatchNorm`,
/// `InstanceNorm*`, `LayerNorm`, `LayerNorm2d` (torchvision's ConvNeXt norm, a `LayerNorm`
/// subclass), `GroupNorm` and `LocalResponseNorm`.
pub fn is_norm_kind(kind: &str) -> bool {
    ["BatchNorm", "SyncBatchNorm", "InstanceNorm"].iter().any(|p| kind.starts_with(p))
        || matches!(kind, "LayerNorm" | "LayerNorm2d" | "GroupNorm" | "LocalResponseNorm")
}

/// How [`ParamGroupBuilder::with_layer_decay`] finds each parameter's layer.
///
/// Both variants give each parameter an ordinal: a number that grows from the input side
/// of the model to its output; parameters with equal ordinals share a layer. The distinct
/// ordinals are then numbered 0, 1, ... in ascending order, so the layer ids are
/// consecutive whatever numbers the ordinals use, as timm numbers the ordinals of a
/// model's `group_matcher`.
#[derive(Clone)]
pub enum LayerIds {
    /// Torchlight's (torchvision's) Vision Transformer keys, grouped as timm groups its
    /// ViTs: the stem (`class_token`, `conv_proj.*`, `encoder.pos_embedding`) is layer 0,
    /// `encoder.layers.encoder_layer_{i}.*` is layer `i + 1`, the final norm `encoder.ln.*`
    /// joins the last block's layer (timm's `MATCH_PREV_GROUP`), and everything else (the
    /// head `heads.head.*`) is the top layer. ViT-B/16: layers 0..=13, the head at 13.
    VisionTransformer,
    /// The caller's ordinal for each `state_dict` name.
    ByName(Arc<dyn Fn(&str) -> u64 + Send + Sync>),
}

impl LayerIds {
    /// Layers from the caller's ordinal of each name (see the type's documentation), e.g.
    /// for a ResNet: 0 for the stem, one ordinal per block, `u64::MAX` for the head.
    pub fn by_name(ordinal: impl Fn(&str) -> u64 + Send + Sync + 'static) -> Self {
        LayerIds::ByName(Arc::new(ordinal))
    }

    /// The layer id of each name (indices as `names`) and the largest id.
    fn assign(&self, names: &[&str]) -> (Vec<usize>, usize) {
        let ordinals: Vec<u64> = match self {
            LayerIds::VisionTransformer => {
                let last_block = names.iter().filter_map(|n| vit_block(n)).max();
                names.iter().map(|n| vit_ordinal(n, last_block)).collect()
            }
            LayerIds::ByName(ordinal) => names.iter().map(|n| ordinal(n)).collect(),
        };
        let distinct: BTreeSet<u64> = ordinals.iter().copied().collect();
        let id_of: HashMap<u64, usize> = distinct.iter().enumerate().map(|(id, &o)| (o, id)).collect();
        (ordinals.iter().map(|o| id_of[o]).collect(), distinct.len().saturating_sub(1))
    }
}

impl fmt::Debug for LayerIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayerIds::VisionTransformer => f.write_str("VisionTransformer"),
            LayerIds::ByName(_) => f.write_str("ByName(..)"),
        }
    }
}

/// The encoder block of a ViT key (`encoder.layers.encoder_layer_3.mlp.0.weight` -> 3).
fn vit_block(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("encoder.layers.encoder_layer_")?;
    rest.split_once('.')?.0.parse().ok()
}

/// A ViT key's ordinal for [`LayerIds::VisionTransformer`].
fn vit_ordinal(name: &str, last_block: Option<u64>) -> u64 {
    if name == "class_token" || name == "encoder.pos_embedding" || name.starts_with("conv_proj.") {
        0
    } else if let Some(block) = vit_block(name) {
        block.saturating_add(1)
    } else if name.starts_with("encoder.ln.") {
        last_block.map_or(0, |b| b.saturating_add(1))
    } else {
        u64::MAX
    }
}

/// Which weight-decay rule placed a parameter (see [`ParamGroupBuilder`]).
#[derive(Debug, Clone, PartialEq)]
pub enum DecayClass {
    /// No rule matched: [`ParamGroupBuilder::with_weight_decay`] (torchvision's "other"
    /// group, timm's decay group).
    Default,
    /// A 1-D parameter or a no-weight-decay pattern (timm's no-decay group): weight decay 0.
    NoDecay,
    /// A parameter of a normalisation layer: [`ParamGroupBuilder::with_norm_weight_decay`].
    Norm,
    /// A custom key's weight decay ([`ParamGroupBuilder::with_custom_key_weight_decay`]).
    Key(String),
}

/// One group that [`ParamGroupBuilder::build`] made: its parameters, its hyperparameters,
/// and the rules that put them together.
#[derive(Debug)]
pub struct GroupSpec {
    /// The group's parameters in the input's order.
    pub params: NamedTensors,
    /// The group's lr: the base lr or its prefix rule's, times `layer_scale`.
    pub lr: f64,
    /// The group's weight decay.
    pub weight_decay: f64,
    /// The layer-wise lr decay scale folded into `lr` (1 without layer decay).
    pub layer_scale: f64,
    /// The prefix of the lr rule that matched, `None` for the base lr.
    pub prefix: Option<String>,
    /// The layer id under layer decay.
    pub layer: Option<usize>,
    /// The weight-decay rule that matched.
    pub decay: DecayClass,
}

impl GroupSpec {
    /// The parameters' names.
    pub fn names(&self) -> Vec<&str> {
        self.params.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The rules of the group in words (`prefix `fc.`, layer 3, no weight decay`), for logs.
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if let Some(prefix) = &self.prefix {
            parts.push(format!("prefix `{prefix}`"));
        }
        if let Some(layer) = self.layer {
            parts.push(format!("layer {layer}"));
        }
        parts.push(match &self.decay {
            DecayClass::Default => "weight decay".to_string(),
            DecayClass::NoDecay => "no weight decay".to_string(),
            DecayClass::Norm => "norm".to_string(),
            DecayClass::Key(key) => format!("key `{key}`"),
        });
        parts.join(", ")
    }
}

/// The groups of [`ParamGroupBuilder::build`], in its documented order, none empty.
#[derive(Debug)]
pub struct ParamGroups {
    groups: Vec<GroupSpec>,
}

impl ParamGroups {
    /// The groups.
    pub fn groups(&self) -> &[GroupSpec] {
        &self.groups
    }

    /// The groups, owned.
    pub fn into_groups(self) -> Vec<GroupSpec> {
        self.groups
    }

    /// The number of groups.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether there are no groups (no parameters were given).
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The optimizer's groups, each with the config `config(lr, weight_decay)` makes, e.g.
    /// `|lr, wd| AdamConfig::adamw().with_lr(lr).with_weight_decay(wd)` or
    /// `|lr, wd| SgdConfig::new(lr).with_momentum(0.9).with_weight_decay(wd)`.
    pub fn into_param_groups<C>(self, mut config: impl FnMut(f64, f64) -> C) -> Vec<ParamGroup<C>> {
        self.groups.into_iter().map(|g| ParamGroup::new(g.params, config(g.lr, g.weight_decay))).collect()
    }
}

/// An lr rule for names with a prefix.
#[derive(Debug, Clone, Copy)]
enum PrefixLr {
    Set(f64),
    Scale(f64),
}

/// Builds an optimizer's parameter groups from rules, the way practitioners set them up:
/// torchvision's reference recipe (`norm_weight_decay`, `bias_weight_decay`,
/// `custom_keys_weight_decay`), timm's no-decay rule (1-D parameters, `no_weight_decay`
/// names) and layer-wise lr decay, and a separate lr for a head (by `state_dict` prefix).
///
/// # How a parameter is placed
/// Every parameter given to [`build`](Self::build) ends in exactly one group, whatever its
/// `requires_grad` (the optimizers skip a parameter without a gradient, so a frozen
/// backbone needs no rebuild when it is unfrozen; torchvision and timm leave frozen
/// parameters out). The rules apply in this order:
/// 1. **lr**: the first prefix rule, in the order added, whose prefix starts the name sets
///    the lr ([`with_prefix_lr`](Self::with_prefix_lr)) or scales the base lr
///    ([`with_prefix_lr_scale`](Self::with_prefix_lr_scale)); otherwise the base lr of
///    [`new`](Self::new).
/// 2. **layer decay** ([`with_layer_decay`](Self::with_layer_decay)) multiplies that lr by
///    the parameter's layer scale.
/// 3. **weight decay**: the first of these that matches:
///    1. a custom key, in the order added ([`with_custom_key_weight_decay`](Self::with_custom_key_weight_decay),
///       [`with_bias_weight_decay`](Self::with_bias_weight_decay)): a key containing `.` is
///       compared with the full name, a key without one with the parameter's own name in
///       its module (the part after the last `.`), as torchvision compares them;
///    2. the norm rule ([`with_norm_weight_decay`](Self::with_norm_weight_decay)), when
///       set, if the owning module's kind is a norm ([`is_norm_kind`]);
///    3. the no-decay rules, weight decay 0: a 1-D parameter
///       ([`with_no_weight_decay_1d`](Self::with_no_weight_decay_1d)) or a name matching a
///       pattern ([`with_no_weight_decay`](Self::with_no_weight_decay));
///    4. otherwise [`with_weight_decay`](Self::with_weight_decay) (0 unless set).
///
/// Parameters placed by the same rules share a group: one group per (lr rule, layer,
/// weight-decay rule), even where two groups' values are equal, so the layout depends on
/// the rules and the model, never on the numbers (a checkpoint's optimizer state keeps
/// fitting when an lr changes). Groups with no parameters do not exist.
///
/// # Group order
/// Groups are ordered by lr rule (the base lr first, then the prefix rules in the order
/// added), then by layer (from the input side), then by weight-decay rule (default, no
/// decay, norm, then the custom keys in the order added); parameters within a group keep
/// the input's order. torchvision's `set_weight_decay` order (other, norm, custom keys) is
/// this order. timm lists its no-decay group before its decay group, and orders
/// `param_groups_layer_decay`'s groups by first use; the groups themselves are the same.
///
/// ```
/// use tch::{Device, Kind, Tensor};
/// use torchlight_optim::{AdamConfig, AdamW, ParamGroupBuilder};
///
/// # fn main() -> torchlight_optim::Result<()> {
/// let t = |shape: &[i64]| Tensor::zeros(shape, (Kind::Float, Device::Cpu));
/// // What torchlight_nn::named_parameters_with_kind(model) lists.
/// let params = vec![
///     ("conv1.weight".to_string(), t(&[8, 3, 3, 3]), "Conv2d"),
///     ("bn1.weight".to_string(), t(&[8]), "BatchNorm2d"),
///     ("bn1.bias".to_string(), t(&[8]), "BatchNorm2d"),
///     ("fc.weight".to_string(), t(&[2, 8]), "Linear"),
///     ("fc.bias".to_string(), t(&[2]), "Linear"),
/// ];
/// // A fine-tune's four groups: backbone and head, each with and without weight decay.
/// let groups = ParamGroupBuilder::new(1e-4)
///     .with_weight_decay(0.05)
///     .with_no_weight_decay_1d()
///     .with_prefix_lr("fc.", 1e-3)
///     .build(params)?;
/// let layout: Vec<_> = groups.groups().iter().map(|g| (g.names(), g.lr, g.weight_decay)).collect();
/// assert_eq!(layout, [
///     (vec!["conv1.weight"], 1e-4, 0.05),
///     (vec!["bn1.weight", "bn1.bias"], 1e-4, 0.0),
///     (vec!["fc.weight"], 1e-3, 0.05),
///     (vec!["fc.bias"], 1e-3, 0.0),
/// ]);
/// let opt = AdamW::new(groups.into_param_groups(|lr, wd| AdamConfig::adamw().with_lr(lr).with_weight_decay(wd)))?;
/// # let _ = opt;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ParamGroupBuilder {
    lr: f64,
    weight_decay: f64,
    norm_weight_decay: Option<f64>,
    norm_kinds: Option<Vec<String>>,
    custom_keys: Vec<(String, f64)>,
    no_decay_1d: bool,
    no_decay_patterns: Vec<String>,
    prefixes: Vec<(String, PrefixLr)>,
    layer_decay: Option<(f64, LayerIds)>,
}

impl ParamGroupBuilder {
    /// Every parameter at `lr` with no weight decay, until rules say otherwise.
    pub fn new(lr: f64) -> Self {
        ParamGroupBuilder {
            lr,
            weight_decay: 0.0,
            norm_weight_decay: None,
            norm_kinds: None,
            custom_keys: Vec::new(),
            no_decay_1d: false,
            no_decay_patterns: Vec::new(),
            prefixes: Vec::new(),
            layer_decay: None,
        }
    }

    /// The weight decay of parameters no other weight-decay rule claims (torchvision's
    /// `weight_decay`, timm's `weight_decay`). Default 0.
    pub fn with_weight_decay(mut self, weight_decay: f64) -> Self {
        self.weight_decay = weight_decay;
        self
    }

    /// torchvision's `norm_weight_decay`: parameters owned by a normalisation layer
    /// ([`is_norm_kind`], or the kinds of [`with_norm_kinds`](Self::with_norm_kinds)) get
    /// `weight_decay`, in a group of their own.
    pub fn with_norm_weight_decay(mut self, weight_decay: f64) -> Self {
        self.norm_weight_decay = Some(weight_decay);
        self
    }

    /// torchvision's `norm_classes`: the module kinds, compared exactly, that count as
    /// normalisation layers, in place of [`is_norm_kind`] (e.g. to add a model's own
    /// `RMSNorm`).
    pub fn with_norm_kinds<S: Into<String>>(mut self, kinds: impl IntoIterator<Item = S>) -> Self {
        self.norm_kinds = Some(kinds.into_iter().map(Into::into).collect());
        self
    }

    /// torchvision's `bias_weight_decay`: the custom key `bias` (every parameter named
    /// `bias` in its module), as torchvision's `train.py` passes it; call it before other
    /// custom keys to put its group first among them, as `train.py` does.
    pub fn with_bias_weight_decay(self, weight_decay: f64) -> Self {
        self.with_custom_key_weight_decay("bias", weight_decay)
    }

    /// One entry of torchvision's `custom_keys_weight_decay`, e.g. `("class_token", 0.0)`
    /// or `("encoder.pos_embedding", 0.0)`: a key with a `.` matches the parameter whose
    /// full name it is, a key without one every parameter with that name in its module
    /// (`pos_embedding` matches `encoder.pos_embedding`; `ln_1.weight` matches no
    /// `encoder.layers.encoder_layer_0.ln_1.weight`, since it is not a full name). Each key
    /// is its own group; the first matching key, in the order added, wins.
    pub fn with_custom_key_weight_decay(mut self, key: impl Into<String>, weight_decay: f64) -> Self {
        self.custom_keys.push((key.into(), weight_decay));
        self
    }

    /// timm's default exclusion (`weight_decay_exclude_1d`): no weight decay on parameters
    /// with at most one dimension (biases, norm weights and biases). timm's
    /// `param_groups_weight_decay` also excludes names ending in `.bias`; add the pattern
    /// `*.bias` with [`with_no_weight_decay`](Self::with_no_weight_decay) for that (every
    /// bias of Torchlight's layers is 1-D anyway).
    pub fn with_no_weight_decay_1d(mut self) -> Self {
        self.no_decay_1d = true;
        self
    }

    /// timm's `no_weight_decay_list`: no weight decay on parameters whose full name matches
    /// one of `patterns`, read as Python's `fnmatch` reads them (`*` any characters, `?` one,
    /// `[seq]`, `[!seq]`; a name without wildcards matches only itself), e.g.
    /// `["class_token", "encoder.pos_embedding"]` for a ViT (timm's ViT `no_weight_decay()`).
    pub fn with_no_weight_decay<S: Into<String>>(mut self, patterns: impl IntoIterator<Item = S>) -> Self {
        self.no_decay_patterns.extend(patterns.into_iter().map(Into::into));
        self
    }

    /// Parameters whose name starts with `prefix` (e.g. the head, `fc.`) train at `lr`
    /// instead of the base lr, in groups of their own.
    pub fn with_prefix_lr(mut self, prefix: impl Into<String>, lr: f64) -> Self {
        self.prefixes.push((prefix.into(), PrefixLr::Set(lr)));
        self
    }

    /// Parameters whose name starts with `prefix` train at the base lr times `factor`, in
    /// groups of their own.
    pub fn with_prefix_lr_scale(mut self, prefix: impl Into<String>, factor: f64) -> Self {
        self.prefixes.push((prefix.into(), PrefixLr::Scale(factor)));
        self
    }

    /// timm's layer-wise lr decay (`param_groups_layer_decay`, after BEiT): each parameter
    /// gets a layer id from `layers`, and its lr is multiplied by
    /// `decay ^ (max_id - layer_id)`: the top layer (normally the head) keeps the full lr,
    /// each layer below it `decay` times its upper neighbour's. (BEiT writes this
    /// `decay ^ (num_layers - layer_id)` with `num_layers` the top id.) Each layer has its
    /// own groups. timm uses the same weight-decay rule alongside, without the `*.bias`
    /// pattern: [`with_no_weight_decay_1d`](Self::with_no_weight_decay_1d) and
    /// [`with_no_weight_decay`](Self::with_no_weight_decay).
    ///
    /// The scale is folded into each group's lr, so an lr scheduler treats it as that
    /// group's initial lr; timm instead multiplies each step's scheduled lr by it. The two
    /// agree for schedules proportional to the initial lr (warm-up, step, exponential,
    /// cosine to 0).
    pub fn with_layer_decay(mut self, decay: f64, layers: LayerIds) -> Self {
        self.layer_decay = Some((decay, layers));
        self
    }

    /// Places every parameter of `params` (the model's parameters in `state_dict` order,
    /// e.g. `torchlight_nn::named_parameters_with_kind(model)`) in its group; see the
    /// type's documentation for the rules and the order. Names must be unique, as the
    /// optimizers require (they report a repeated name as `OptimError::DuplicateParameter`).
    ///
    /// # Errors
    /// [`OptimError::InvalidHyperparameter`] for an lr, factor or weight decay that is
    /// negative or not finite, or a layer decay that is not positive and finite;
    /// [`OptimError::GroupRule`] for an empty or repeated custom key or prefix.
    pub fn build<P: Into<NamedParam>>(&self, params: impl IntoIterator<Item = P>) -> Result<ParamGroups> {
        self.check()?;
        let params: Vec<NamedParam> = params.into_iter().map(Into::into).collect();
        let layers = self.layer_decay.as_ref().map(|(decay, ids)| {
            let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
            let (ids, max) = ids.assign(&names);
            (*decay, ids, max)
        });
        let mut groups: BTreeMap<(usize, usize, usize), GroupSpec> = BTreeMap::new();
        for (index, p) in params.into_iter().enumerate() {
            let prefix_rule =
                self.prefixes.iter().position(|(prefix, _)| p.name.starts_with(prefix.as_str()));
            let lr = match prefix_rule.map(|r| self.prefixes[r].1) {
                Some(PrefixLr::Set(lr)) => lr,
                Some(PrefixLr::Scale(factor)) => self.lr * factor,
                None => self.lr,
            };
            let (layer, layer_scale) = match &layers {
                Some((decay, ids, max)) => (Some(ids[index]), decay.powf((max - ids[index]) as f64)),
                None => (None, 1.0),
            };
            let (rank, class, weight_decay) = self.weight_decay_of(&p);
            let key = (prefix_rule.map_or(0, |r| r + 1), layer.unwrap_or(0), rank);
            groups
                .entry(key)
                .or_insert_with(|| GroupSpec {
                    params: Vec::new(),
                    lr: lr * layer_scale,
                    weight_decay,
                    layer_scale,
                    prefix: prefix_rule.map(|r| self.prefixes[r].0.clone()),
                    layer,
                    decay: class,
                })
                .params
                .push((p.name, p.tensor));
        }
        Ok(ParamGroups { groups: groups.into_values().collect() })
    }

    /// The weight-decay rule that places `p`: its rank in the group order, its class and
    /// its weight decay.
    fn weight_decay_of(&self, p: &NamedParam) -> (usize, DecayClass, f64) {
        let own_name = p.name.rsplit('.').next().unwrap_or(&p.name);
        let key = self.custom_keys.iter().position(|(key, _)| {
            if key.contains('.') {
                p.name == *key
            } else {
                own_name == key
            }
        });
        if let Some(k) = key {
            let (key, weight_decay) = &self.custom_keys[k];
            return (3 + k, DecayClass::Key(key.clone()), *weight_decay);
        }
        if let Some(weight_decay) = self.norm_weight_decay {
            let is_norm = match &self.norm_kinds {
                Some(kinds) => kinds.iter().any(|k| k == p.module_kind),
                None => is_norm_kind(p.module_kind),
            };
            if is_norm {
                return (2, DecayClass::Norm, weight_decay);
            }
        }
        if (self.no_decay_1d && p.tensor.dim() <= 1)
            || self.no_decay_patterns.iter().any(|pat| fnmatch(&p.name, pat))
        {
            return (1, DecayClass::NoDecay, 0.0);
        }
        (0, DecayClass::Default, self.weight_decay)
    }

    /// Checks every value and key before anything is grouped.
    fn check(&self) -> Result<()> {
        const OWNER: &str = "param group rules";
        let non_negative = |owner: String, field: &'static str, value: f64| {
            if value.is_finite() && value >= 0.0 {
                Ok(())
            } else {
                Err(OptimError::invalid(owner, field, value, "must be finite and >= 0"))
            }
        };
        non_negative(OWNER.into(), "lr", self.lr)?;
        non_negative(OWNER.into(), "weight_decay", self.weight_decay)?;
        if let Some(wd) = self.norm_weight_decay {
            non_negative(OWNER.into(), "norm_weight_decay", wd)?;
        }
        for (i, (key, wd)) in self.custom_keys.iter().enumerate() {
            if key.is_empty() {
                return Err(OptimError::rule("custom key", key, "is empty, so it matches no parameter"));
            }
            if self.custom_keys[..i].iter().any(|(k, _)| k == key) {
                return Err(OptimError::rule("custom key", key, "is given twice"));
            }
            non_negative(format!("{OWNER}, custom key `{key}`"), "weight_decay", *wd)?;
        }
        for (i, (prefix, rule)) in self.prefixes.iter().enumerate() {
            if prefix.is_empty() {
                return Err(OptimError::rule(
                    "lr prefix",
                    prefix,
                    "is empty, so it would match every parameter: set the base lr instead",
                ));
            }
            if self.prefixes[..i].iter().any(|(p, _)| p == prefix) {
                return Err(OptimError::rule("lr prefix", prefix, "is given twice"));
            }
            let owner = format!("{OWNER}, prefix `{prefix}`");
            match *rule {
                PrefixLr::Set(lr) => non_negative(owner, "lr", lr)?,
                PrefixLr::Scale(factor) => non_negative(owner, "lr_scale", factor)?,
            }
        }
        if let Some((decay, _)) = &self.layer_decay {
            if !(decay.is_finite() && *decay > 0.0) {
                return Err(OptimError::invalid(OWNER, "layer_decay", *decay, "must be finite and > 0"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    /// Parameters from `(name, dimensions, owning kind)`.
    fn params(spec: &[(&str, usize, &'static str)]) -> Vec<NamedParam> {
        spec.iter()
            .map(|&(name, dims, kind)| {
                NamedParam::new(name, Tensor::zeros(vec![2; dims], (Kind::Float, Device::Cpu)), kind)
            })
            .collect()
    }

    /// A small ResNet-like model: stem, one block, head.
    fn resnet_like() -> Vec<NamedParam> {
        params(&[
            ("conv1.weight", 4, "Conv2d"),
            ("bn1.weight", 1, "BatchNorm2d"),
            ("bn1.bias", 1, "BatchNorm2d"),
            ("layer1.0.conv1.weight", 4, "Conv2d"),
            ("layer1.0.bn1.weight", 1, "BatchNorm2d"),
            ("layer1.0.bn1.bias", 1, "BatchNorm2d"),
            ("fc.weight", 2, "Linear"),
            ("fc.bias", 1, "Linear"),
        ])
    }

    /// A two-block ViT with torchvision's keys.
    fn vit_like() -> Vec<NamedParam> {
        let mut spec = vec![
            ("class_token", 3, "VisionTransformer"),
            ("conv_proj.weight", 4, "Conv2d"),
            ("conv_proj.bias", 1, "Conv2d"),
            ("encoder.pos_embedding", 3, "Encoder"),
        ];
        for block in ["encoder.layers.encoder_layer_0", "encoder.layers.encoder_layer_1"] {
            for (leaf, dims, kind) in [
                ("ln_1.weight", 1, "LayerNorm"),
                ("ln_1.bias", 1, "LayerNorm"),
                ("self_attention.in_proj_weight", 2, "MultiheadAttention"),
                ("mlp.0.weight", 2, "Linear"),
                ("mlp.0.bias", 1, "Linear"),
            ] {
                spec.push((Box::leak(format!("{block}.{leaf}").into_boxed_str()), dims, kind));
            }
        }
        spec.extend([
            ("encoder.ln.weight", 1, "LayerNorm"),
            ("encoder.ln.bias", 1, "LayerNorm"),
            ("heads.head.weight", 2, "Linear"),
            ("heads.head.bias", 1, "Linear"),
        ]);
        params(&spec)
    }

    /// Each group as (names, lr, weight decay).
    fn layout(groups: &ParamGroups) -> Vec<(Vec<&str>, f64, f64)> {
        groups.groups().iter().map(|g| (g.names(), g.lr, g.weight_decay)).collect()
    }

    /// Every input name is in exactly one group.
    fn assert_partition(groups: &ParamGroups, input: &[&str]) {
        let mut seen: Vec<&str> = groups.groups().iter().flat_map(|g| g.names()).collect();
        assert_eq!(seen.len(), input.len(), "every parameter once");
        seen.sort_unstable();
        let mut expected = input.to_vec();
        expected.sort_unstable();
        assert_eq!(seen, expected);
        assert!(groups.groups().iter().all(|g| !g.params.is_empty()), "no empty group");
    }

    #[test]
    fn without_rules_everything_is_one_group_at_the_base_lr() {
        let groups = ParamGroupBuilder::new(0.1).with_weight_decay(1e-4).build(resnet_like()).unwrap();
        assert_eq!(groups.len(), 1);
        assert_eq!(groups.groups()[0].names().len(), 8);
        assert_eq!((groups.groups()[0].lr, groups.groups()[0].weight_decay), (0.1, 1e-4));
        assert_eq!(groups.groups()[0].decay, DecayClass::Default);
        assert!(ParamGroupBuilder::new(0.1).build(Vec::<NamedParam>::new()).unwrap().is_empty());
    }

    #[test]
    fn one_d_parameters_get_no_decay() {
        let groups = ParamGroupBuilder::new(0.1).with_weight_decay(0.05).with_no_weight_decay_1d();
        let groups = groups.build(resnet_like()).unwrap();
        assert_eq!(
            layout(&groups),
            [
                (vec!["conv1.weight", "layer1.0.conv1.weight", "fc.weight"], 0.1, 0.05),
                (
                    vec!["bn1.weight", "bn1.bias", "layer1.0.bn1.weight", "layer1.0.bn1.bias", "fc.bias"],
                    0.1,
                    0.0
                ),
            ]
        );
        // The layout follows the rules, not the values: no decay at all still gives two groups.
        let zero = ParamGroupBuilder::new(0.1).with_no_weight_decay_1d().build(resnet_like()).unwrap();
        assert_eq!(zero.len(), 2);
    }

    #[test]
    fn no_weight_decay_patterns_match_full_names_as_fnmatch() {
        let groups = ParamGroupBuilder::new(0.1)
            .with_weight_decay(0.05)
            .with_no_weight_decay(["class_token", "encoder.*.mlp.0.weight", "pos_embedding"])
            .build(vit_like())
            .unwrap();
        let no_decay = &groups.groups()[1];
        assert_eq!(no_decay.decay, DecayClass::NoDecay);
        assert_eq!(
            no_decay.names(),
            [
                "class_token",
                "encoder.layers.encoder_layer_0.mlp.0.weight",
                "encoder.layers.encoder_layer_1.mlp.0.weight"
            ],
            "`pos_embedding` has no wildcard, so it is not `encoder.pos_embedding`"
        );
    }

    #[test]
    fn norm_parameters_get_the_norm_weight_decay_by_owning_kind() {
        let groups = ParamGroupBuilder::new(0.1)
            .with_weight_decay(1e-4)
            .with_norm_weight_decay(0.0)
            .build(resnet_like())
            .unwrap();
        assert_eq!(
            layout(&groups),
            [
                (vec!["conv1.weight", "layer1.0.conv1.weight", "fc.weight", "fc.bias"], 0.1, 1e-4),
                (vec!["bn1.weight", "bn1.bias", "layer1.0.bn1.weight", "layer1.0.bn1.bias"], 0.1, 0.0),
            ]
        );
        assert_eq!(groups.groups()[1].decay, DecayClass::Norm);
        // LayerNorm counts; an unknown kind does not; the kinds can be replaced.
        let vit = ParamGroupBuilder::new(0.1).with_norm_weight_decay(0.0).build(vit_like()).unwrap();
        assert_eq!(vit.groups()[1].names().len(), 6);
        let mut unknown = resnet_like();
        unknown.iter_mut().for_each(|p| p.module_kind = "");
        assert_eq!(ParamGroupBuilder::new(0.1).with_norm_weight_decay(0.0).build(unknown).unwrap().len(), 1);
        let linear_only = ParamGroupBuilder::new(0.1)
            .with_norm_weight_decay(0.0)
            .with_norm_kinds(["Linear"])
            .build(resnet_like());
        assert_eq!(linear_only.unwrap().groups()[1].names(), ["fc.weight", "fc.bias"]);
        for kind in
            ["BatchNorm1d", "BatchNorm2d", "SyncBatchNorm", "InstanceNorm2d", "LayerNorm2d", "GroupNorm"]
        {
            assert!(is_norm_kind(kind), "{kind}");
        }
        for kind in ["Linear", "Conv2d", "RMSNorm", "", "MultiheadAttention"] {
            assert!(!is_norm_kind(kind), "{kind}");
        }
    }

    #[test]
    fn custom_keys_match_own_names_or_full_names_and_come_first() {
        let groups = ParamGroupBuilder::new(0.1)
            .with_weight_decay(1e-4)
            .with_norm_weight_decay(1e-5)
            .with_bias_weight_decay(0.0)
            .with_custom_key_weight_decay("bn1.weight", 2e-5)
            .with_custom_key_weight_decay("conv1.weight", 3e-5)
            .build(resnet_like())
            .unwrap();
        assert_eq!(
            layout(&groups),
            [
                (vec!["layer1.0.conv1.weight", "fc.weight"], 0.1, 1e-4),
                (vec!["layer1.0.bn1.weight"], 0.1, 1e-5),
                // `bias` matches every bias, a norm's too: custom keys come before the norm rule.
                (vec!["bn1.bias", "layer1.0.bn1.bias", "fc.bias"], 0.1, 0.0),
                // A dotted key is a full name: the top-level `bn1.weight` only.
                (vec!["bn1.weight"], 0.1, 2e-5),
                (vec!["conv1.weight"], 0.1, 3e-5),
            ]
        );
        assert_eq!(groups.groups()[2].decay, DecayClass::Key("bias".into()));
        // A key without a dot matches a parameter's own name at any depth, the model's too.
        let vit = ParamGroupBuilder::new(0.1)
            .with_custom_key_weight_decay("class_token", 0.0)
            .with_custom_key_weight_decay("pos_embedding", 0.0)
            .with_custom_key_weight_decay("ln_1.weight", 0.5)
            .build(vit_like())
            .unwrap();
        let names: Vec<Vec<&str>> = vit.groups().iter().skip(1).map(|g| g.names()).collect();
        assert_eq!(
            names,
            [vec!["class_token"], vec!["encoder.pos_embedding"]],
            "`ln_1.weight` is no full name"
        );
    }

    #[test]
    fn a_prefix_sets_or_scales_the_lr_and_its_groups_come_after_the_base_lr() {
        let groups = ParamGroupBuilder::new(0.01)
            .with_weight_decay(0.05)
            .with_no_weight_decay_1d()
            .with_prefix_lr("fc.", 0.1)
            .build(resnet_like())
            .unwrap();
        assert_eq!(
            layout(&groups),
            [
                (vec!["conv1.weight", "layer1.0.conv1.weight"], 0.01, 0.05),
                (vec!["bn1.weight", "bn1.bias", "layer1.0.bn1.weight", "layer1.0.bn1.bias"], 0.01, 0.0),
                (vec!["fc.weight"], 0.1, 0.05),
                (vec!["fc.bias"], 0.1, 0.0),
            ]
        );
        assert_eq!(groups.groups()[2].prefix.as_deref(), Some("fc."));
        assert_eq!(groups.groups()[2].label(), "prefix `fc.`, weight decay");
        // The first matching prefix wins; a scale multiplies the base lr.
        let groups = ParamGroupBuilder::new(0.01)
            .with_prefix_lr_scale("layer1.0.bn1.", 0.5)
            .with_prefix_lr("layer1.", 1.0)
            .build(resnet_like())
            .unwrap();
        assert_eq!(
            layout(&groups),
            [
                (vec!["conv1.weight", "bn1.weight", "bn1.bias", "fc.weight", "fc.bias"], 0.01, 0.0),
                (vec!["layer1.0.bn1.weight", "layer1.0.bn1.bias"], 0.005, 0.0),
                (vec!["layer1.0.conv1.weight"], 1.0, 0.0),
            ]
        );
    }

    #[test]
    fn layer_decay_numbers_the_ordinals_and_scales_down_from_the_top() {
        // Ordinals with gaps become consecutive ids; the head (largest ordinal) keeps the lr.
        let ordinal = |name: &str| match name.split('.').next() {
            Some("conv1" | "bn1") => 10,
            Some("layer1") => 500,
            _ => u64::MAX,
        };
        let groups = ParamGroupBuilder::new(1.0)
            .with_weight_decay(0.05)
            .with_no_weight_decay_1d()
            .with_layer_decay(0.5, LayerIds::by_name(ordinal))
            .build(resnet_like())
            .unwrap();
        let got: Vec<_> =
            groups.groups().iter().map(|g| (g.layer, g.layer_scale, g.lr, g.weight_decay)).collect();
        assert_eq!(
            got,
            [
                (Some(0), 0.25, 0.25, 0.05),
                (Some(0), 0.25, 0.25, 0.0),
                (Some(1), 0.5, 0.5, 0.05),
                (Some(1), 0.5, 0.5, 0.0),
                (Some(2), 1.0, 1.0, 0.05),
                (Some(2), 1.0, 1.0, 0.0),
            ]
        );
        assert_eq!(groups.groups()[3].label(), "layer 1, no weight decay");
        // With a head lr the layer scale multiplies the prefix's lr.
        let groups = ParamGroupBuilder::new(1.0)
            .with_prefix_lr("layer1.", 4.0)
            .with_layer_decay(0.5, LayerIds::by_name(ordinal))
            .build(resnet_like())
            .unwrap();
        let got: Vec<_> = groups.groups().iter().map(|g| (g.names().len(), g.lr)).collect();
        assert_eq!(got, [(3, 0.25), (2, 1.0), (3, 2.0)]);
    }

    #[test]
    fn vit_layers_are_timms_stem_blocks_final_norm_with_the_last_block_and_head() {
        let groups = ParamGroupBuilder::new(1.0)
            .with_no_weight_decay_1d()
            .with_layer_decay(0.5, LayerIds::VisionTransformer)
            .build(vit_like())
            .unwrap();
        let layer_of = |name: &str| {
            groups
                .groups()
                .iter()
                .find(|g| g.names().contains(&name))
                .map(|g| (g.layer.unwrap(), g.layer_scale))
        };
        assert_eq!(layer_of("class_token"), Some((0, 0.125)));
        assert_eq!(layer_of("conv_proj.bias"), Some((0, 0.125)));
        assert_eq!(layer_of("encoder.pos_embedding"), Some((0, 0.125)));
        assert_eq!(layer_of("encoder.layers.encoder_layer_0.ln_1.weight"), Some((1, 0.25)));
        assert_eq!(layer_of("encoder.layers.encoder_layer_1.mlp.0.weight"), Some((2, 0.5)));
        assert_eq!(layer_of("encoder.ln.weight"), Some((2, 0.5)));
        assert_eq!(layer_of("heads.head.weight"), Some((3, 1.0)));
        assert_eq!(groups.len(), 8, "decay and no-decay in each of 4 layers");
    }

    #[test]
    fn every_parameter_is_in_exactly_one_group_whatever_the_rules() {
        let input = vit_like();
        let names: Vec<String> = input.iter().map(|p| p.name.clone()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let builders = [
            ParamGroupBuilder::new(0.1),
            ParamGroupBuilder::new(0.1).with_no_weight_decay_1d().with_norm_weight_decay(0.0),
            ParamGroupBuilder::new(0.1)
                .with_weight_decay(0.3)
                .with_norm_weight_decay(0.0)
                .with_bias_weight_decay(0.0)
                .with_custom_key_weight_decay("class_token", 0.0)
                .with_custom_key_weight_decay("encoder.pos_embedding", 0.0)
                .with_no_weight_decay_1d()
                .with_no_weight_decay(["*.in_proj_weight", "class_token"])
                .with_prefix_lr("heads.", 1.0)
                .with_prefix_lr_scale("encoder.layers.encoder_layer_0.", 0.1)
                .with_layer_decay(0.75, LayerIds::VisionTransformer),
        ];
        for builder in builders {
            let groups = builder.build(vit_like()).unwrap();
            assert_partition(&groups, &names);
        }
    }

    #[test]
    fn bad_rules_are_errors_naming_the_rule() {
        let err = |b: ParamGroupBuilder| b.build(resnet_like()).unwrap_err().to_string();
        assert_eq!(
            err(ParamGroupBuilder::new(-1.0)),
            "invalid lr = -1 in param group rules: must be finite and >= 0"
        );
        assert!(err(ParamGroupBuilder::new(0.1).with_weight_decay(f64::NAN)).contains("weight_decay = NaN"));
        assert!(err(ParamGroupBuilder::new(0.1).with_norm_weight_decay(-0.1)).contains("norm_weight_decay"));
        assert_eq!(
            err(ParamGroupBuilder::new(0.1).with_custom_key_weight_decay("bias", -1.0)),
            "invalid weight_decay = -1 in param group rules, custom key `bias`: must be finite and >= 0"
        );
        assert_eq!(
            err(ParamGroupBuilder::new(0.1)
                .with_bias_weight_decay(0.0)
                .with_custom_key_weight_decay("bias", 0.1)),
            "param group rule: custom key `bias` is given twice"
        );
        assert!(err(ParamGroupBuilder::new(0.1).with_custom_key_weight_decay("", 0.0)).contains("is empty"));
        assert!(err(ParamGroupBuilder::new(0.1).with_prefix_lr("", 0.1)).contains("lr prefix `` is empty"));
        assert!(err(ParamGroupBuilder::new(0.1).with_prefix_lr("fc.", 0.1).with_prefix_lr_scale("fc.", 2.0))
            .contains("lr prefix `fc.` is given twice"));
        assert!(err(ParamGroupBuilder::new(0.1).with_prefix_lr_scale("fc.", f64::INFINITY))
            .contains("lr_scale = inf"));
        assert!(err(ParamGroupBuilder::new(0.1).with_layer_decay(0.0, LayerIds::VisionTransformer))
            .contains("layer_decay = 0"));
    }
}
