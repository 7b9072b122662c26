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

/// When an epoch is both the best and the last, `best` is an independent copy: a file of
/// `last` damaged in place (a bad sector, a stray write) leaves `best` loadable.
#[test]
fn best_and_last_share_no_file() {
    use std::io::{Seek, SeekFrom, Write};
    let _lock = torch_rng_lock();
    let dir = temp_dir("manager-copies");
    let model = Linear::new(3, 2, true);
    let mut manager =
        CheckpointManager::new(dir.join("checkpoints"), "val_acc", MetricMode::Max).keep_epochs(1);
    let snapshot =
        Snapshot { progress: Progress { epoch: 1, global_step: 1, batch: 0 }, ..Snapshot::model(&model) };
    assert!(manager.save(snapshot, 0.5).unwrap().best);
    let epoch = dir.join("checkpoints/epoch_0001");
    for name in ["model.safetensors", "meta.json"] {
        let mut file = std::fs::OpenOptions::new().write(true).open(manager.last().join(name)).unwrap();
        let len = file.metadata().unwrap().len();
        file.seek(SeekFrom::Start(len - 2)).unwrap();
        file.write_all(b"!!").unwrap();
    }
    assert!(Checkpoint::load(manager.last()).is_err(), "the damage is seen");
    for intact in [manager.best(), epoch] {
        let checkpoint = Checkpoint::load(&intact).unwrap();
        assert_eq!(checkpoint.meta.progress.epoch, 1, "{}", intact.display());
    }
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

#[test]
fn exporting_into_a_missing_folder_names_the_file_asked_for() {
    let _lock = torch_rng_lock();
    let dir = temp_dir("export-missing");
    save(dir.join("ck"), &Snapshot::model(&Linear::new(3, 2, true))).unwrap();
    let out = dir.join("no/such/folder/model.safetensors");
    let err = export_weights(dir.join("ck"), &out).unwrap_err().to_string();
    assert!(err.contains(&out.display().to_string()) && err.contains("does not exist"), "{err}");
    assert!(!err.contains(".tmp"), "no temporary file is named: {err}");
}
