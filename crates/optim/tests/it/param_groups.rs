//! `ParamGroupBuilder` against torchvision's reference `set_weight_decay` and timm 1.0.31's
//! `param_groups_weight_decay` and `param_groups_layer_decay(layer_decay=0.75)` on the same
//! architectures (fixture: `tests/fixtures/make_param_groups.py`), and the recipe's
//! four-group layout for every optimizer. Membership and weight decays are compared exactly;
//! layer scales bit for bit (both sides take `pow` of the same doubles).

use crate::common::json;
use serde_json::Value;
use torchlight_nn::{architecture, named_parameters_with_kind, LayerOptions, ModelSpec, Module};
use torchlight_optim::{
    Adam, AdamConfig, AdamW, LayerIds, NamedParam, Optimizer, ParamGroupBuilder, ParamGroups, Sgd, SgdConfig,
};

const MODELS: [&str; 3] = ["resnet18", "vit_b_16", "mobilenet_v3_small"];

/// The registered architecture `name`, uninitialised (only names, shapes and kinds matter).
fn model(name: &str) -> Box<dyn Module> {
    let arch = architecture(name).expect("registered");
    arch.build(ModelSpec::new(10, 224), LayerOptions::default().skip_init()).expect("builds")
}

/// The model's parameters, checked against the fixture's names (torchvision's order).
fn params(model: &dyn Module, fixture: &Value) -> Vec<NamedParam> {
    let params: Vec<NamedParam> =
        named_parameters_with_kind(model).into_iter().map(NamedParam::from).collect();
    let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
    let expected: Vec<&str> =
        fixture["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert_eq!(names, expected, "torchlight's keys are torchvision's, in its order");
    params
}

/// A group as (parameter indices into the fixture's names, weight decay, lr scale bits).
type Group = (Vec<u64>, f64, Option<u64>);

fn fixture_groups(config: &Value, with_scale: bool) -> Vec<Group> {
    config["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let params = g["params"].as_array().unwrap().iter().map(|i| i.as_u64().unwrap()).collect();
            let scale = with_scale.then(|| g["lr_scale_bits"].as_u64().unwrap());
            (params, g["weight_decay"].as_f64().unwrap(), scale)
        })
        .collect()
}

fn our_groups(groups: &ParamGroups, fixture: &Value, with_scale: bool) -> Vec<Group> {
    let names: Vec<&str> = fixture["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    groups
        .groups()
        .iter()
        .map(|g| {
            let params =
                g.names().iter().map(|n| names.iter().position(|m| m == n).unwrap() as u64).collect();
            if with_scale {
                assert_eq!(g.lr.to_bits(), g.layer_scale.to_bits(), "base lr 1: the lr is the scale");
            }
            (params, g.weight_decay, with_scale.then(|| g.layer_scale.to_bits()))
        })
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

#[test]
fn torchvision_set_weight_decay_groups_are_reproduced_in_its_order() {
    let fixture = json("param_groups.json");
    for name in MODELS {
        let f = &fixture["models"][name];
        let model = model(name);
        for config in f["torchvision"].as_array().unwrap() {
            let mut builder =
                ParamGroupBuilder::new(0.1).with_weight_decay(config["weight_decay"].as_f64().unwrap());
            if let Some(norm) = config["norm_weight_decay"].as_f64() {
                builder = builder.with_norm_weight_decay(norm);
            }
            for key in config["custom_keys"].as_array().unwrap() {
                builder =
                    builder.with_custom_key_weight_decay(key[0].as_str().unwrap(), key[1].as_f64().unwrap());
            }
            let groups = builder.build(params(model.as_ref(), f)).unwrap();
            assert_eq!(our_groups(&groups, f, false), fixture_groups(config, false), "{name}, {config}");
        }
    }
}

#[test]
fn timm_param_groups_weight_decay_groups_are_reproduced() {
    let fixture = json("param_groups.json");
    for name in MODELS {
        let f = &fixture["models"][name];
        let config = &f["timm_weight_decay"];
        let mut patterns = vec!["*.bias".to_string()];
        patterns.extend(strings(&config["no_weight_decay_list"]));
        let groups = ParamGroupBuilder::new(0.1)
            .with_weight_decay(config["weight_decay"].as_f64().unwrap())
            .with_no_weight_decay_1d()
            .with_no_weight_decay(patterns)
            .build(params(model(name).as_ref(), f))
            .unwrap();
        // timm lists the no-decay group first; the builder lists the default group first.
        let mut theirs = fixture_groups(config, false);
        theirs.reverse();
        assert_eq!(our_groups(&groups, f, false), theirs, "{name}");
    }
}

/// timm's ResNet `group_matcher` (`stem=^conv1|bn1|maxpool`, `blocks=^layer(\d+)\.(\d+)`, the
/// rest on top), as a caller's ordinal.
fn resnet_ordinal(name: &str) -> u64 {
    if name.starts_with("conv1") || name.starts_with("bn1") {
        return 0;
    }
    let block = name.strip_prefix("layer").and_then(|rest| {
        let mut parts = rest.split('.');
        Some((parts.next()?.parse::<u64>().ok()?, parts.next()?.parse::<u64>().ok()?))
    });
    block.map_or(u64::MAX, |(stage, block)| 1 + stage * 1000 + block)
}

/// The fixture's MobileNetV3 matcher: `features.0` the stem, one layer per `features.N`.
fn mobilenet_ordinal(name: &str) -> u64 {
    let index = name.strip_prefix("features.").and_then(|rest| rest.split('.').next()?.parse::<u64>().ok());
    index.unwrap_or(u64::MAX)
}

#[test]
fn timm_param_groups_layer_decay_groups_are_reproduced() {
    let fixture = json("param_groups.json");
    for name in MODELS {
        let f = &fixture["models"][name];
        let config = &f["timm_layer_decay"];
        let layers = match name {
            "resnet18" => LayerIds::by_name(resnet_ordinal),
            "mobilenet_v3_small" => LayerIds::by_name(mobilenet_ordinal),
            _ => LayerIds::VisionTransformer,
        };
        let groups = ParamGroupBuilder::new(1.0)
            .with_weight_decay(config["weight_decay"].as_f64().unwrap())
            .with_no_weight_decay_1d()
            .with_no_weight_decay(strings(&config["no_weight_decay_list"]))
            .with_layer_decay(config["layer_decay"].as_f64().unwrap(), layers)
            .build(params(model(name).as_ref(), f))
            .unwrap();
        let top = groups.groups().iter().filter_map(|g| g.layer).max().unwrap();
        assert_eq!(top as u64 + 1, config["num_layers"].as_u64().unwrap(), "{name}: number of layers");
        let fixture_layers: Vec<u64> =
            config["groups"].as_array().unwrap().iter().map(|g| g["layer"].as_u64().unwrap()).collect();
        // timm orders the groups by first use, the builder by layer then rule: compare both
        // sorted by their first parameter.
        let by_first = |mut v: Vec<(Group, u64)>| {
            v.sort_by_key(|((params, _, _), _)| params[0]);
            v
        };
        let ours: Vec<(Group, u64)> = our_groups(&groups, f, true)
            .into_iter()
            .zip(groups.groups().iter().map(|g| g.layer.unwrap() as u64))
            .collect();
        let theirs: Vec<(Group, u64)> =
            fixture_groups(config, true).into_iter().zip(fixture_layers).collect();
        assert_eq!(by_first(ours), by_first(theirs), "{name}");
    }
}

/// The recipe's groups before the builder (`build_optimizer` in the train crate): parameters
/// under the head prefix at `lr`, the rest at `backbone_lr`, each split into dim >= 2 (weight
/// decay) and the rest (none), as backbone-decay, backbone-no-decay, head-decay,
/// head-no-decay, empty ones dropped.
fn old_recipe_layout(
    model: &dyn Module,
    head: &str,
    lr: f64,
    backbone_lr: f64,
    wd: f64,
) -> Vec<(Vec<String>, f64, f64)> {
    let (head_params, backbone): (Vec<_>, Vec<_>) = named_parameters_with_kind(model)
        .into_iter()
        .map(|(n, t, _)| (n, t))
        .partition(|(n, _)| !head.is_empty() && n.starts_with(head));
    let mut parts = Vec::new();
    for (params, lr) in [(backbone, backbone_lr), (head_params, lr)] {
        let (decay, no_decay): (Vec<_>, Vec<_>) = params.into_iter().partition(|(_, t)| t.dim() >= 2);
        parts.push((decay.into_iter().map(|(n, _)| n).collect::<Vec<_>>(), lr, wd));
        parts.push((no_decay.into_iter().map(|(n, _)| n).collect(), lr, 0.0));
    }
    parts.retain(|(p, _, _)| !p.is_empty());
    parts
}

#[test]
fn the_recipes_four_groups_come_from_the_builder_for_every_optimizer() {
    for name in MODELS {
        let model = model(name);
        let head = architecture(name).unwrap().head();
        let (lr, backbone_lr, wd) = (1e-3, 1e-4, 0.05);
        let groups = || {
            ParamGroupBuilder::new(backbone_lr)
                .with_weight_decay(wd)
                .with_no_weight_decay_1d()
                .with_prefix_lr(head, lr)
                .build(named_parameters_with_kind(model.as_ref()))
                .unwrap()
        };
        let expected = old_recipe_layout(model.as_ref(), head, lr, backbone_lr, wd);
        assert_eq!(expected.len(), 4, "{name}");
        let built: Vec<_> = groups()
            .groups()
            .iter()
            .map(|g| (g.names().iter().map(|n| n.to_string()).collect(), g.lr, g.weight_decay))
            .collect();
        assert_eq!(built, expected, "{name}");

        // The same groups in each optimizer, with the values the closure gives.
        let optimizers: Vec<Box<dyn Optimizer>> = vec![
            Box::new(
                AdamW::new(
                    groups()
                        .into_param_groups(|lr, wd| AdamConfig::adamw().with_lr(lr).with_weight_decay(wd)),
                )
                .unwrap(),
            ),
            Box::new(
                Adam::new(groups().into_param_groups(|lr, wd| {
                    AdamConfig::adamw().with_lr(lr).with_weight_decay(wd).with_decoupled_weight_decay(false)
                }))
                .unwrap(),
            ),
            Box::new(
                Sgd::new(
                    groups().into_param_groups(|lr, wd| {
                        SgdConfig::new(lr).with_momentum(0.9).with_weight_decay(wd)
                    }),
                )
                .unwrap(),
            ),
        ];
        for opt in optimizers {
            let meta = opt.state_dict().meta;
            let names: Vec<Vec<String>> = meta.groups.iter().map(|g| g.params.clone()).collect();
            assert_eq!(
                names,
                expected.iter().map(|e| e.0.clone()).collect::<Vec<_>>(),
                "{name} {}",
                meta.optimizer
            );
            assert_eq!(opt.lrs(), [backbone_lr, backbone_lr, lr, lr], "{name} {}", meta.optimizer);
        }
    }
}
