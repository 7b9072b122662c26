//! Retention under crashes: a run killed while `CheckpointManager` deletes an old epoch folder
//! (or while it writes one) leaves every visible checkpoint complete, and the next manager
//! deletes what the killed one left aside.

use crate::{kill_child_when, temp_dir, torch_rng_lock};
use std::path::{Path, PathBuf};
use torchlight_checkpoint::*;
use torchlight_nn::Linear;

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every visible checkpoint folder (`last`, `best`, `epoch_*`) loads and verifies.
fn assert_all_load(dir: &Path, context: &str) {
    for name in names(dir).into_iter().filter(|n| !n.starts_with('.')) {
        Checkpoint::load(dir.join(&name)).unwrap_or_else(|e| panic!("{context}: {name} does not load: {e}"));
    }
}

fn save_epochs(manager: &mut CheckpointManager, model: &Linear, epochs: std::ops::RangeInclusive<u64>) {
    for epoch in epochs {
        let snapshot =
            Snapshot { progress: Progress { epoch, global_step: epoch, batch: 0 }, ..Snapshot::model(model) };
        manager.save(snapshot, epoch as f64).unwrap();
    }
}

/// Builds the folder state a crash leaves at each point of a retention delete or an epoch
/// save, then checks that a new manager (the next start) removes the leftovers and keeps every
/// complete checkpoint.
#[test]
fn a_restart_cleans_what_a_crash_at_each_point_of_retention_left() {
    let _lock = torch_rng_lock();
    let model = Linear::new(3, 2, true);
    type Crash = fn(&Path);
    let points: [(&str, Crash); 6] = [
        ("killed before the rename aside: the old epoch is still whole", |_| {}),
        ("killed after the rename aside", |d| {
            std::fs::rename(d.join("epoch_0001"), d.join(".epoch_0001.del-4242")).unwrap()
        }),
        ("killed half-way through deleting the renamed folder", |d| {
            std::fs::rename(d.join("epoch_0001"), d.join(".epoch_0001.del-4242")).unwrap();
            std::fs::remove_file(d.join(".epoch_0001.del-4242/meta.json")).unwrap();
            std::fs::remove_file(d.join(".epoch_0001.del-4242/model.safetensors")).unwrap();
        }),
        ("killed while staging the next epoch folder", |d| {
            std::fs::create_dir(d.join(".epoch_0004.tmp-4242")).unwrap();
            std::fs::write(d.join(".epoch_0004.tmp-4242/model.safetensors"), b"half").unwrap();
        }),
        ("killed between the two renames of `last`", |d| {
            std::fs::rename(d.join("last"), d.join(".last.old-4242")).unwrap();
        }),
        ("killed after the second rename of `last`, before deleting the old one", |d| {
            copy_dir(&d.join("last"), &d.join(".last.old-4242"));
        }),
    ];
    for (round, (point, crash)) in points.into_iter().enumerate() {
        let tmp = temp_dir(&format!("retention{round}"));
        let root = tmp.join("checkpoints");
        let mut manager = CheckpointManager::new(&root, "val_acc", MetricMode::Max).keep_epochs(2);
        save_epochs(&mut manager, &model, 1..=2);
        crash(&root);
        let restarted = CheckpointManager::new(&root, "val_acc", MetricMode::Max).keep_epochs(2);
        let hidden: Vec<String> = names(&root).into_iter().filter(|n| n.starts_with('.')).collect();
        let recovering_last = !root.join("last").exists();
        if recovering_last {
            // The only complete `last` is the previous version: kept, and read in its place.
            assert_eq!(hidden, [".last.old-4242"], "{point}");
            assert_eq!(Checkpoint::load(root.join("last")).unwrap().meta.progress.epoch, 2, "{point}");
        } else {
            assert!(
                hidden.is_empty(),
                "{point}: leftovers {hidden:?} (removed {:?})",
                restarted.leftovers_removed()
            );
        }
        assert_all_load(&root, point);
        // The run goes on: the next save restores the invariant of `keep_epochs` whole epochs.
        let mut manager = restarted;
        save_epochs(&mut manager, &model, 3..=3);
        assert_eq!(names(&root), ["best", "epoch_0002", "epoch_0003", "last"], "{point}");
        assert_all_load(&root, point);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
    }
}

const CHILD_ENV: &str = "TORCHLIGHT_RETENTION_KILL_CHILD";

/// The child half of the kill test: with the env var naming a folder, saves epochs with
/// retention in a loop until killed. Run normally, it has nothing to do.
#[test]
fn child_process_entry_for_the_retention_kill_test() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let model = torchlight_nn::resnet18(10);
    let mut manager = CheckpointManager::new(PathBuf::from(dir), "val_acc", MetricMode::Max).keep_epochs(1);
    for epoch in 1.. {
        let snapshot = Snapshot {
            progress: Progress { epoch, global_step: epoch, batch: 0 },
            ..Snapshot::model(&model)
        };
        manager.save(snapshot, (epoch % 7) as f64).unwrap();
    }
}

/// A run killed (SIGKILL) at several points while it saves and prunes epochs leaves only
/// complete checkpoints in view, and the next manager clears what it left aside.
#[test]
fn a_run_killed_while_pruning_epochs_leaves_only_complete_checkpoints() {
    for (round, delay_ms) in [30u64, 150, 290].into_iter().enumerate() {
        let tmp = temp_dir(&format!("retention-kill{round}"));
        let root = tmp.join("checkpoints");
        // Killed some time after the first pruning.
        let ready = || root.join("epoch_0002").exists();
        let test = "retention::child_process_entry_for_the_retention_kill_test";
        kill_child_when(test, CHILD_ENV, &root, ready, delay_ms);
        assert_all_load(&root, &format!("round {round}, before the restart"));
        let restarted = CheckpointManager::new(&root, "val_acc", MetricMode::Max).keep_epochs(1);
        let hidden: Vec<String> = names(&root).into_iter().filter(|n| n.starts_with('.')).collect();
        assert!(
            hidden.is_empty()
                || (hidden.len() == 1 && hidden[0].starts_with(".last.old-") && !root.join("last").exists()),
            "round {round}: leftovers {hidden:?} (removed {:?})",
            restarted.leftovers_removed()
        );
        assert_all_load(&root, &format!("round {round}, after the restart"));
    }
}
