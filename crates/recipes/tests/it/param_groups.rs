//! The recipe's parameter groups (`optim.norm_weight_decay`, `optim.bias_weight_decay`,
//! `optim.layer_decay`): layer-wise decay against timm 1.0.31's `param_groups_layer_decay` for
//! the same model (nn's fixture `layer_groups.json`, made by
//! `crates/nn/tests/fixtures/make_layer_groups.py`), parameter by parameter with lrs compared
//! bit for bit, and torchvision's norm and bias rules.

use crate::torch_rng_lock;
use serde_json::Value;
use std::collections::BTreeSet;
use torchlight_nn::{
    architecture, register_architecture, Architecture, LayerOptions, Linear, ModelSpec, Module,
};
use torchlight_recipes::{param_groups, ParamGroupSummary, RecipeError, TrainConfig};

fn timm_fixture() -> Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../nn/tests/fixtures/layer_groups.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn model(name: &str) -> Box<dyn Module> {
    architecture(name).unwrap().build(ModelSpec::new(10, 224), LayerOptions::default().skip_init()).unwrap()
}

fn config(name: &str) -> TrainConfig {
    let mut c = TrainConfig::default();
    c.set("model.name", name).unwrap();
    c
}

#[test]
fn layer_decay_gives_each_parameter_timms_lr_scale_and_weight_decay() {
    let _lock = torch_rng_lock();
    let fixture = timm_fixture();
    let mut checked = 0;
    for (name, f) in fixture["models"].as_object().unwrap() {
        let Some(groups) = f["groups"].as_array() else { continue };
        let names: Vec<&str> = f["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
        // timm's (lr scale bits, weight decay) of each parameter.
        let mut theirs = vec![None; names.len()];
        for g in groups {
            for i in g["params"].as_array().unwrap() {
                let i = i.as_u64().unwrap() as usize;
                theirs[i] = Some((g["lr_scale_bits"].as_u64().unwrap(), g["weight_decay"].as_f64().unwrap()));
            }
        }
        // One base lr of 1, so each lr is the scale. Two departures in weight decay, both
        // decayed by the recipe and not by timm: a ViT's embeddings (timm's `no_weight_decay()`;
        // torchvision's recipe decays them by default), and ConvNeXt's layer scale, which is
        // `[C, 1, 1]` in torchvision's model (so not 1-D) where timm's `gamma` is `[C]`.
        let mut c = config(name);
        for (key, value) in [
            ("optim.lr", "1"),
            ("optim.backbone_lr", "1"),
            ("optim.weight_decay", "0.05"),
            ("optim.layer_decay", "0.75"),
        ] {
            c.set(key, value).unwrap();
        }
        c.validate().unwrap();
        let m = model(name);
        let ours = param_groups(&c, m.as_ref(), architecture(name).unwrap().head()).unwrap();
        let no_wd: Vec<&str> =
            f["no_weight_decay"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
        let mut seen = 0;
        for g in ours.groups() {
            for n in g.names() {
                let i = names.iter().position(|m| *m == n).unwrap();
                let (scale, wd) = theirs[i].unwrap_or_else(|| panic!("{name}: {n} is in no timm group"));
                assert_eq!(
                    g.lr.to_bits(),
                    scale,
                    "{name}: lr of {n} ({} vs {})",
                    g.lr,
                    f64::from_bits(scale)
                );
                if no_wd.contains(&n) || n.ends_with(".layer_scale") {
                    assert_eq!((wd, g.weight_decay), (0.0, 0.05), "{name}: {n}");
                } else {
                    assert_eq!(g.weight_decay, wd, "{name}: weight decay of {n}");
                }
                seen += 1;
            }
        }
        assert_eq!(seen, names.len(), "{name}: every parameter in a group");
        // Where the head prefix is timm's whole top layer, the groups are timm's groups.
        if ["resnet18", "efficientnet_b0", "mobilenet_v2"].contains(&name.as_str()) {
            let as_sets = |v: Vec<Vec<usize>>| {
                v.into_iter().map(|g| g.into_iter().collect::<BTreeSet<_>>()).collect::<BTreeSet<_>>()
            };
            let mine = ours
                .groups()
                .iter()
                .map(|g| g.names().iter().map(|n| names.iter().position(|m| m == n).unwrap()).collect())
                .collect();
            let timm = groups
                .iter()
                .map(|g| {
                    g["params"].as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as usize).collect()
                })
                .collect();
            assert_eq!(as_sets(mine), as_sets(timm), "{name}: the same groups");
        }
        checked += 1;
    }
    assert_eq!(checked, 6, "one model per family");
}

#[test]
fn norm_and_bias_weight_decay_follow_torchvisions_rules() {
    let _lock = torch_rng_lock();
    let m = model("resnet18");
    let mut c = config("resnet18");
    c.set("optim.weight_decay", "1e-4").unwrap();
    c.set("optim.norm_weight_decay", "1e-5").unwrap();
    let groups = param_groups(&c, m.as_ref(), "fc.").unwrap();
    let wd_of = |groups: &torchlight_optim::ParamGroups, n: &str| {
        groups.groups().iter().find(|g| g.names().contains(&n)).map(|g| g.weight_decay).unwrap()
    };
    assert_eq!(wd_of(&groups, "layer1.0.bn1.weight"), 1e-5);
    assert_eq!(wd_of(&groups, "layer1.0.bn1.bias"), 1e-5, "a norm's bias is a norm parameter");
    assert_eq!(wd_of(&groups, "fc.bias"), 0.0, "other 1-D parameters keep no decay");
    assert_eq!(wd_of(&groups, "layer1.0.conv1.weight"), 1e-4);
    // The bias key comes first: every bias, a norm's too.
    c.set("optim.bias_weight_decay", "2e-5").unwrap();
    let groups = param_groups(&c, m.as_ref(), "fc.").unwrap();
    assert_eq!(wd_of(&groups, "layer1.0.bn1.bias"), 2e-5);
    assert_eq!(wd_of(&groups, "fc.bias"), 2e-5);
    assert_eq!(wd_of(&groups, "layer1.0.bn1.weight"), 1e-5);
    let labels: Vec<String> = ParamGroupSummary::of(&groups).into_iter().map(|g| g.rules).collect();
    assert_eq!(
        labels,
        ["weight decay", "norm", "key `bias`", "prefix `fc.`, weight decay", "prefix `fc.`, key `bias`"]
    );
    // Without the keys: the recipe's four groups.
    assert_eq!(param_groups(&config("resnet18"), m.as_ref(), "fc.").unwrap().len(), 4);
}

#[test]
fn layer_decay_on_a_model_without_layer_ids_is_a_config_error() {
    let _lock = torch_rng_lock();
    register_architecture(Architecture::new("test-linear", "", |_, _| Ok(Box::new(Linear::new(4, 2, true)))));
    let mut c = config("test-linear");
    c.set("optim.layer_decay", "0.75").unwrap();
    let err = c.validate().unwrap_err();
    assert!(
        matches!(&err, RecipeError::InvalidConfig { field, .. } if field == "optim.layer_decay"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("test-linear") && err.to_string().contains("with_layer_groups"),
        "{err}"
    );
    let m = architecture("test-linear").unwrap().build_default(2).unwrap();
    assert!(matches!(param_groups(&c, m.as_ref(), ""), Err(RecipeError::InvalidConfig { .. })));
}

/// From scratch every group trains at `optim.lr`, as one `torch.optim` lr trains every
/// parameter (the backbone once trained at a fixed 1e-4 whatever the run, a tenth of the
/// default lr); fine-tuning pretrained weights puts the backbone at a tenth of it, and a set
/// `optim.backbone_lr` wins either way.
#[test]
fn the_backbone_lr_is_the_lr_from_scratch_and_a_tenth_of_it_when_fine_tuning() {
    let name = "resnet18";
    let m = model(name);
    let head = architecture(name).unwrap().head();
    // (in the head, lr bits) of every parameter.
    let lrs = |c: &TrainConfig| -> BTreeSet<(bool, u64)> {
        c.validate().unwrap();
        let groups = param_groups(c, m.as_ref(), head).unwrap();
        groups
            .groups()
            .iter()
            .flat_map(|g| g.names().into_iter().map(|n| (n.starts_with(head), g.lr.to_bits())))
            .collect()
    };
    let rates = |head_lr: f64, backbone_lr: f64| {
        BTreeSet::from([(true, head_lr.to_bits()), (false, backbone_lr.to_bits())])
    };
    let mut scratch = config(name);
    scratch.set("optim.lr", "0.02").unwrap();
    assert_eq!(lrs(&scratch), rates(0.02, 0.02), "from scratch");
    assert_eq!(
        scratch.backbone_lr_rule(),
        "optim.lr, training from scratch; set optim.backbone_lr to change it"
    );

    let mut tuned = scratch.clone();
    tuned.set("model.pretrained", "weights.pth").unwrap();
    assert_eq!(lrs(&tuned), rates(0.02, 0.02 / 10.0), "fine-tuning");

    for mut c in [scratch, tuned] {
        c.set("optim.backbone_lr", "0.003").unwrap();
        assert_eq!(lrs(&c), rates(0.02, 0.003), "optim.backbone_lr set");
        c.set("optim.backbone_lr", "none").unwrap();
        assert_eq!(c.optim.backbone_lr, None);
    }
}
