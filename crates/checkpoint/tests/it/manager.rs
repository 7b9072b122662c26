use crate::{temp_dir, torch_rng_lock};
use torchlight_checkpoint::*;
use torchlight_nn::Linear;

#[test]
fn keeps_last_best_by_metric_and_the_last_n_epochs() {
    let _lock = torch_rng_lock();
    let dir = temp_dir("manager");
    let model = Linear::new(3, 2, true);
    let mut manager =
        CheckpointManager::new(dir.join("checkpoints"), "val_acc", MetricMode::Max).keep_epochs(2);
    let accs = [0.5, 0.7, 0.6, 0.8, 0.75];
    let mut bests = Vec::new();
    for (epoch, acc) in accs.iter().enumerate() {
        let snapshot = Snapshot {
            progress: Progress { epoch: epoch as u64 + 1, global_step: 0, batch: 0 },
            ..Snapshot::model(&model)
        };
        bests.push(manager.save(snapshot, *acc).unwrap().best);
    }
    assert_eq!(bests, [true, true, false, true, false]);
    let best = Checkpoint::load(manager.best()).unwrap();
    assert_eq!((best.meta.progress.epoch, best.meta.metric.unwrap().value), (4, 0.8));
    let last = Checkpoint::load(manager.last()).unwrap();
    assert_eq!(last.meta.progress.epoch, 5);
    assert_eq!(last.meta.best.unwrap().value, 0.8, "last records the best so far");
    let mut kept: Vec<String> = std::fs::read_dir(dir.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    assert_eq!(kept, ["best", "epoch_0004", "epoch_0005", "last"]);
    // A resumed run's manager knows the best so far; a loss-like metric improves downwards.
    let again = CheckpointManager::new(dir.join("checkpoints"), "val_acc", MetricMode::Max);
    assert_eq!(again.best_metric().map(|m| m.value), Some(0.8));
    assert!(MetricMode::Min.improves(0.1, Some(0.2)) && !MetricMode::Min.improves(0.3, Some(0.2)));
    assert!(!MetricMode::Max.improves(f64::NAN, None));
}

#[test]
fn weights_only_export_holds_just_the_state_dict() {
    let _lock = torch_rng_lock();
    let dir = temp_dir("export");
    let model = Linear::new(3, 2, true);
    save(dir.join("ck"), &Snapshot::model(&model)).unwrap();
    export_weights(dir.join("ck"), dir.join("model.safetensors")).unwrap();
    let weights = tch::Tensor::read_safetensors(dir.join("model.safetensors")).unwrap();
    let mut keys: Vec<&str> = weights.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort();
    assert_eq!(keys, ["bias", "weight"]);
}
