//! A writer process killed with SIGKILL mid-save must leave the previous checkpoint loadable.

use crate::{kill_child_when, temp_dir};
use std::path::Path;
use torchlight_checkpoint::*;
use torchlight_nn::{named_parameters, resnet18};
use torchlight_optim::{AdamConfig, AdamW, Optimizer, ParamGroup};

const CHILD_ENV: &str = "TORCHLIGHT_CHECKPOINT_KILL_CHILD";

/// The child half of the kill test: when started by it (with the env var naming a folder),
/// saves resnet18 + AdamW checkpoints to `<folder>/last` in a loop until killed. Run
/// normally, it has nothing to do.
#[test]
fn child_process_entry_for_the_kill_test() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let model = resnet18(10);
    let mut optimizer =
        AdamW::new(vec![ParamGroup::new(named_parameters(&model), AdamConfig::new(1e-3))]).unwrap();
    let x = tch::Tensor::randn([2, 3, 32, 32], (tch::Kind::Float, tch::Device::Cpu));
    use tch::nn::ModuleT;
    model.forward_t(&x, true).sum(tch::Kind::Float).backward();
    optimizer.step().unwrap();
    for epoch in 1.. {
        let snapshot = Snapshot {
            optimizer: Some(&optimizer),
            progress: Progress { epoch, global_step: epoch, batch: 0 },
            ..Snapshot::model(&model)
        };
        save(Path::new(&dir).join("last"), &snapshot).unwrap();
    }
}

#[test]
fn a_writer_killed_mid_save_leaves_the_previous_checkpoint_loadable() {
    // Kill at several points of the save cycle (a save here takes a few hundred ms).
    for (round, delay_ms) in [40u64, 170, 330].into_iter().enumerate() {
        let dir = temp_dir(&format!("kill{round}"));
        let ready = || resolve(&dir.join("last")).is_some();
        kill_child_when("kill::child_process_entry_for_the_kill_test", CHILD_ENV, &dir, ready, delay_ms);
        let checkpoint = Checkpoint::load(dir.join("last")).unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(checkpoint.meta.progress.epoch >= 1);
        checkpoint.restore_model(&resnet18(10)).unwrap();
        let state = checkpoint.optimizer_state().unwrap();
        assert_eq!(state.tensors.len(), 3 * named_parameters(&resnet18(10)).len());
        // The next save from a new writer cleans up whatever the killed one left behind.
        let model = resnet18(10);
        save(dir.join("last"), &Snapshot::model(&model)).unwrap();
        // The version this save replaced is deleted in the background; the killed writer's
        // leftovers are gone already, and once that deletion is done only `last` is left.
        finish_removals();
        let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(leftovers, ["last"], "round {round}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
