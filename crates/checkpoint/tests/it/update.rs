//! `update_config`: a saved checkpoint's config replaced atomically, its tensors untouched, and
//! refused when the checkpoint changed since it was read.

use crate::{temp_dir, torch_rng_lock};
use torchlight_checkpoint::*;
use torchlight_nn::{resnet18, state_dict};

#[test]
fn update_config_replaces_the_config_alone_and_refuses_a_checkpoint_saved_over_since() {
    let dir = temp_dir("update_config");
    let target = dir.join("best");
    let model = {
        let _lock = torch_rng_lock();
        resnet18(3)
    };
    let snapshot = Snapshot {
        progress: Progress { epoch: 4, global_step: 40, batch: 0 },
        metric: Some(Metric { name: "val_acc".into(), value: 0.75, mode: MetricMode::Max, epoch: 4 }),
        config: serde_json::json!({ "classes": ["a", "b", "c"] }),
        ..Snapshot::model(&model)
    };
    save(&target, &snapshot).unwrap();
    let before = Checkpoint::load(&target).unwrap();
    let config = serde_json::json!({ "classes": ["a", "b", "c"], "temperature": 1.5 });
    update_config(&target, &before.meta, config.clone()).unwrap();
    finish_removals();
    let after = Checkpoint::load(&target).unwrap();
    assert_eq!(after.dir, target);
    assert_eq!(after.meta.config, config);
    // Everything else in meta.json, and the tensors, as they were.
    let mut expected = before.meta.clone();
    expected.config = config.clone();
    assert_eq!(after.meta, expected);
    for ((k1, t1), (k2, t2)) in before.model_state().iter().zip(after.model_state()) {
        assert_eq!(k1, k2);
        assert!(t1.equal(t2), "{k1}");
    }
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["best"], "no staging or old folder left");

    // Saved over since `after` was read (other weights): nothing is written.
    let other = {
        let _lock = torch_rng_lock();
        resnet18(3)
    };
    save(&target, &Snapshot { config: serde_json::json!({ "classes": [] }), ..Snapshot::model(&other) })
        .unwrap();
    let err = update_config(&target, &after.meta, config).unwrap_err();
    assert!(matches!(err, CheckpointError::Changed { .. }), "{err}");
    assert!(err.to_string().contains("changed on disk since it was read"), "{err}");
    let now = Checkpoint::load(&target).unwrap();
    assert_eq!(now.meta.config, serde_json::json!({ "classes": [] }));
    let mut saved = state_dict(&other);
    saved.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(saved.iter().zip(now.model_state()).all(|((k1, a), (k2, b))| k1 == k2 && a.equal(b)));
}
