//! `Architecture::layer_ids` of every built-in architecture against the layers timm 1.0.31's
//! `param_groups_layer_decay` gives the same architecture, parameter by parameter (fixture:
//! `tests/fixtures/make_layer_groups.py`, which pairs torchvision's and timm's parameters and
//! runs timm's own `group_matcher` on timm's own model). Exact: ids are integers.

use crate::fixture;
use serde_json::Value;
use torchlight_nn::{architecture, architecture_names, named_parameters, LayerOptions, ModelSpec};

fn fixture_models() -> Value {
    let path = fixture("layer_groups.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str::<Value>(&text).unwrap()["models"].clone()
}

#[test]
fn every_built_in_numbers_its_layers_as_timm_does_for_the_same_model() {
    let models = fixture_models();
    let built_in: Vec<&str> = architecture_names().into_iter().filter(|n| !n.starts_with("test-")).collect();
    for name in built_in {
        let f = models
            .get(name)
            .unwrap_or_else(|| panic!("{name} has no fixture: add it to make_layer_groups.py"));
        let arch = architecture(name).unwrap();
        let model = arch.build(ModelSpec::new(10, 224), LayerOptions::default().skip_init()).unwrap();
        let names: Vec<String> = named_parameters(model.as_ref()).into_iter().map(|(n, _)| n).collect();
        let expected: Vec<&str> =
            f["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
        assert_eq!(names, expected, "{name}: torchvision's keys in its order");
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let ids = arch.layer_ids(&names).unwrap_or_else(|| panic!("{name} has no layer groups"));
        let timm: Vec<usize> =
            f["layers"].as_array().unwrap().iter().map(|l| l.as_u64().unwrap() as usize).collect();
        for ((n, ours), theirs) in names.iter().zip(&ids).zip(&timm) {
            assert_eq!(ours, theirs, "{name}: layer of {n} ({})", f["timm_model"]);
        }
        assert_eq!(ids.iter().max().map(|m| m + 1), f["num_layers"].as_u64().map(|n| n as usize), "{name}");
    }
}

#[test]
fn an_architecture_without_layer_groups_says_so() {
    let arch =
        torchlight_nn::Architecture::new("test-no-layers", "", |_, _| Ok(Box::new(torchlight_nn::Identity)));
    assert!(arch.layer_ids(&["a.weight"]).is_none() && !arch.has_layer_groups());
    let with = arch.with_layer_groups(torchlight_nn::resnet_layer_ids);
    assert_eq!(with.layer_ids(&["conv1.weight", "fc.weight"]), Some(vec![0, 1]));
}
