use crate::{assert_identical, temp_dir, torch_rng_lock, Run};
use tch::{Kind, Tensor};
use torchlight_checkpoint::*;
use torchlight_optim::{LrScheduler, Optimizer};
use torchlight_tensor::seed_everything;

#[test]
fn four_epochs_straight_equal_two_then_resume_then_two_bit_for_bit() {
    // Bit-for-bit needs exactly the draws seeded here (init, dropout): other tests of this
    // binary create models without the lock (the kill tests' resnets), so it runs alone.
    if !torchlight_testing::alone_in_a_process(
        "resume::four_epochs_straight_equal_two_then_resume_then_two_bit_for_bit",
    ) {
        return;
    }
    let _lock = torch_rng_lock();
    seed_everything(0);
    let mut straight = Run::new(0);
    for e in 0..4 {
        straight.train_epoch(e);
    }

    let dir = temp_dir("resume");
    seed_everything(0);
    let mut first = Run::new(2);
    for e in 0..2 {
        first.train_epoch(e);
    }
    let config = serde_json::json!({"lr": 0.01, "epochs": 4});
    let snapshot = Snapshot {
        model: &first.model,
        optimizer: Some(&first.optimizer),
        scheduler: Some(&first.scheduler),
        grad_scaler: Some(&first.scaler),
        progress: Progress { epoch: 2, global_step: first.step, batch: 0 },
        metric: None,
        best: None,
        data_seed: Some(first.loader.seed()),
        rng: true,
        config: config.clone(),
        loop_state: serde_json::json!({"history": [1, 2]}),
        loop_tensors: vec![("metric.sum".into(), Tensor::from_slice(&[2.5f64]))],
    };
    save(dir.join("last"), &snapshot).unwrap();
    drop(first);

    // A fresh process would start from other random state: simulate it.
    seed_everything(12345);
    let _ = Tensor::randn([1000], (Kind::Float, tch::Device::Cpu));
    let mut resumed = Run::new(3);
    let mut checkpoint = Checkpoint::load(dir.join("last")).unwrap();
    assert_eq!(checkpoint.meta.config, config);
    assert_eq!(checkpoint.meta.loop_state, serde_json::json!({"history": [1, 2]}));
    let loop_tensors = checkpoint.loop_tensors();
    assert_eq!(loop_tensors.len(), 1);
    assert_eq!((loop_tensors[0].0.as_str(), loop_tensors[0].1.double_value(&[0])), ("metric.sum", 2.5));
    assert_eq!(checkpoint.meta.data_seed, Some(7));
    let progress = checkpoint
        .restore(
            &resumed.model,
            Some(&mut resumed.optimizer),
            Some(&mut resumed.scheduler),
            Some(&mut resumed.scaler),
        )
        .unwrap();
    assert_eq!(progress.epoch, 2);
    // The optimizer took the loaded tensors: the checkpoint holds them no more.
    assert!(checkpoint.optimizer_state().is_none());
    let err = checkpoint.restore_optimizer(&mut resumed.optimizer).unwrap_err().to_string();
    assert!(
        err.contains("holds no optimizer state (moved into an optimizer by an earlier restore)"),
        "{err}"
    );
    resumed.step = progress.global_step;
    assert_eq!(resumed.scheduler.last_epoch(), 2);
    assert_eq!(resumed.optimizer.lrs(), straight_lrs_after(2));
    for e in progress.epoch..4 {
        resumed.train_epoch(e);
    }
    assert_eq!(resumed.step, straight.step);
    assert_identical(&straight.tensors(), &resumed.tensors());
    assert_eq!(resumed.scaler.get_scale(), straight.scaler.get_scale());
    std::fs::remove_dir_all(&dir).unwrap();
}

fn straight_lrs_after(epochs: i32) -> Vec<f64> {
    vec![0.01 * 0.7f64.powi(epochs)]
}
