//! Fine-tuning a Hub model folder of each timm family through `torchlight train --weights DIR`:
//! the folder's head (10 classes, under timm's name) is replaced by one for the data's 3
//! classes, staged freezing keeps timm's backbone exactly as it loaded, and layer-wise lr decay
//! numbers the layers as timm numbers the same model.
//!
//! The folders are the timm fixtures (`hub_folder`: timm 1.0.31's keys and config.json, formula
//! weights). The backbone is compared under Torchlight's keys, as `export --weights DIR --format
//! safetensors` maps the folder (the same loader `train` uses).

use super::hub_folder::{case, hub_folder};
use super::{ok, s, temp};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use tch::Tensor;

/// One timm family's folder and where its parts land in Torchlight's module.
struct Family {
    /// The timm fixture (its architecture).
    case: &'static str,
    /// The head's name in timm's `state_dict` (the folder's `pretrained_cfg.classifier`).
    timm_head: &'static str,
    /// The head's key prefix in Torchlight's module (`Architecture::head`).
    head: &'static str,
    /// The stem's first parameter under Torchlight's keys: layer 0.
    stem: &'static str,
    /// How many layers timm's `param_groups_layer_decay` numbers (`group_matcher`), the head's
    /// on top.
    layers: usize,
}

fn read(path: &Path) -> HashMap<String, Tensor> {
    Tensor::read_safetensors(path).unwrap().into_iter().collect()
}

/// `torchlight train` on one intra-op thread: the five families' runs go side by side, and on a
/// shared two-core machine libtorch's OpenMP threads, spinning at their barriers, slowed a
/// run of a few seconds by ten times and more (efficientnet_b0's staged run: 25-40 s at two
/// threads beside a busy build, 1.5 s at one).
fn train(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_torchlight"))
        .arg("train")
        .args(args)
        .env("OMP_NUM_THREADS", "1")
        .output()
        .expect("the torchlight binary runs");
    assert!(
        out.status.success(),
        "torchlight train {} failed:\n{}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Fine-tunes `family`'s Hub folder on 3 classes (6 training images of 32 px, batches of 3):
///
/// 1. With the backbone frozen for the whole run (`--freeze-epochs 1 --epochs 1`,
///    `model.freeze_bn_while_frozen`), every backbone tensor of the checkpoint (BatchNorm
///    statistics included) is the folder's, bit for bit, and the head is new: the data's 3
///    classes under Torchlight's head name where the folder had 10 under timm's, and trained:
///    it ends away from its initialisation, which the same run at lr 1e-30 leaves it at (the
///    seed gives both runs the same new head; steps of 1e-30 change no weight above 1e-22).
/// 2. `--freeze-epochs 1 --epochs 2` moves the backbone once it unfreezes, with
///    `optim.layer_decay = 0.5`: summary.json's groups hold timm's number of layers, each at
///    its base lr (the head's `optim.lr` 1e-3, the backbone's a tenth of it) times
///    `0.5 ^ (top - layer)`, the head on top at 1e-3 and the stem at layer 0 the lowest.
fn fine_tunes(family: &Family) {
    let dir = temp(&format!("hub_ft_{}", family.case));
    let hub = hub_folder(&dir, &case(family.case), |_| {});
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "8"]);
    let data = s(&dir.join("data/target"));
    let mapped_file = dir.join("hub.safetensors");
    ok(&["export", "--weights", &s(&hub), "--format", "safetensors", "--out", &s(&mapped_file)]);
    let folder = read(&hub.join("model.safetensors"));
    let mapped = read(&mapped_file);
    let (head_weight, head_bias) = (format!("{}weight", family.head), format!("{}bias", family.head));
    let features = folder[&format!("{}.weight", family.timm_head)].size()[1];
    assert_eq!(folder[&format!("{}.weight", family.timm_head)].size(), [10, features]);
    assert_eq!(mapped[&head_weight].size(), [10, features], "{}", family.case);

    let run = |out: &str, extra: &[&str]| -> PathBuf {
        let runs = dir.join(out);
        let (hub, runs_s) = (s(&hub), s(&runs));
        let mut args = vec!["--data", &data, "--model", family.case, "--weights", &hub, "--image-size", "32"];
        args.extend(["--batch-size", "3", "--workers", "0", "--device", "cpu", "--out", &runs_s]);
        args.extend(extra);
        train(&args);
        runs.join("exp_001")
    };
    let checkpoint = |run: &Path| read(&run.join("checkpoints/last/model.safetensors"));

    // 1. The backbone frozen for the whole run.
    let frozen_args = ["--epochs", "1", "--freeze-epochs", "1", "--set", "model.freeze_bn_while_frozen=true"];
    let frozen = checkpoint(&run("frozen", &frozen_args));
    let keys = |m: &HashMap<String, Tensor>| m.keys().cloned().collect::<BTreeSet<_>>();
    assert_eq!(keys(&frozen), keys(&mapped), "{}: the checkpoint's keys are the folder's", family.case);
    assert_eq!(frozen[&head_weight].size(), [3, features], "{}", family.case);
    assert_eq!(frozen[&head_bias].size(), [3], "{}", family.case);
    for (key, t) in &frozen {
        if !key.starts_with(family.head) {
            let hub = &mapped[key];
            assert!(t.kind() == hub.kind() && t.equal(hub), "{}: {key} is not the folder's", family.case);
        }
    }
    let mut still_args = frozen_args.to_vec();
    still_args.extend(["--set", "optim.lr=1e-30"]);
    let still = checkpoint(&run("still", &still_args));
    for key in [&head_weight, &head_bias] {
        let moved = (&frozen[key] - &still[key]).abs().max().double_value(&[]);
        assert!(moved > 1e-4, "{}: {key} did not train (moved {moved})", family.case);
    }

    // 2. Unfrozen after one epoch, under layer decay.
    let staged = run("staged", &["--epochs", "2", "--freeze-epochs", "1", "--set", "optim.layer_decay=0.5"]);
    let trained = checkpoint(&staged);
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(staged.join("summary.json")).unwrap()).unwrap();
    let groups = summary["param_groups"].as_array().unwrap();
    let layer_of = |group: &Value| -> usize {
        let layer = group["layer"].as_u64();
        layer.unwrap_or_else(|| panic!("{}: a group without a layer: {group}", family.case)) as usize
    };
    let top = family.layers - 1;
    let mut lrs: Vec<f64> = Vec::new();
    let mut stem_lr = None;
    for group in groups {
        let (lr, layer) = (group["lr"].as_f64().unwrap(), layer_of(group));
        let params: Vec<&str> =
            group["params"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
        let is_head = params.iter().all(|p| p.starts_with(family.head));
        assert!(is_head || params.iter().all(|p| !p.starts_with(family.head)), "{group}");
        let base = if is_head { 1e-3 } else { 1e-4 };
        let decayed = base * 0.5f64.powi((top - layer) as i32);
        assert!(
            (lr - decayed).abs() <= 1e-12 * decayed,
            "{}: lr {lr}, expected {decayed} in {group}",
            family.case
        );
        if is_head {
            assert_eq!((lr, layer), (1e-3, top), "{}: {group}", family.case);
        }
        if params.contains(&family.stem) {
            assert_eq!(layer, 0, "{}: {group}", family.case);
            stem_lr = Some(lr);
        }
        lrs.push(lr);
    }
    let layers: BTreeSet<usize> = groups.iter().map(layer_of).collect();
    assert_eq!(layers, (0..family.layers).collect(), "{}: timm's layers", family.case);
    let lowest = lrs.iter().copied().fold(f64::INFINITY, f64::min);
    assert_eq!(stem_lr, Some(lowest), "{}: the stem trains at the lowest lr", family.case);
    // The backbone's top layer (lr 1e-4 * 0.5^(top - layer), its tensors' steps far above a
    // float32 ulp of theirs) moved, every tensor; lower layers' lrs go down to 1e-10.
    let backbone_top = groups
        .iter()
        .filter(|g| !g["params"][0].as_str().unwrap().starts_with(family.head))
        .map(layer_of)
        .max()
        .unwrap();
    let mut checked = 0;
    for group in groups.iter().filter(|g| layer_of(g) == backbone_top) {
        for key in group["params"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()) {
            if !key.starts_with(family.head) {
                assert!(!trained[key].equal(&mapped[key]), "{}: {key} did not train", family.case);
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "{}", family.case);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_resnet_hub_folder_fine_tunes_with_a_new_fc_staged_freezing_and_layer_decay() {
    fine_tunes(&Family { case: "resnet18", timm_head: "fc", head: "fc.", stem: "conv1.weight", layers: 10 });
}

#[test]
fn a_deit_hub_folder_fine_tunes_with_a_new_head_staged_freezing_and_layer_decay() {
    fine_tunes(&Family {
        case: "deit_tiny_patch16_224",
        timm_head: "head",
        head: "heads.head.",
        stem: "conv_proj.weight",
        layers: 14,
    });
}

#[test]
fn a_convnext_hub_folder_fine_tunes_with_a_new_head_fc_staged_freezing_and_layer_decay() {
    fine_tunes(&Family {
        case: "convnext_tiny",
        timm_head: "head.fc",
        head: "classifier.2.",
        stem: "features.0.0.weight",
        layers: 20,
    });
}

#[test]
fn an_efficientnet_hub_folder_fine_tunes_with_a_new_classifier_staged_freezing_and_layer_decay() {
    fine_tunes(&Family {
        case: "efficientnet_b0",
        timm_head: "classifier",
        head: "classifier.1.",
        stem: "features.0.0.weight",
        layers: 18,
    });
}

#[test]
fn a_mobilenetv3_hub_folder_fine_tunes_with_a_new_classifier_staged_freezing_and_layer_decay() {
    fine_tunes(&Family {
        case: "mobilenetv3_small_100",
        timm_head: "classifier",
        head: "classifier.3.",
        stem: "features.0.0.weight",
        layers: 14,
    });
}
