//! A hand-written training loop that borrows the hard parts: the `StepRunner` (autocast with a
//! GradScaler on CUDA, gradient accumulation, clipping, the NaN/Inf guard, the out-of-memory
//! report), on-device metrics and a checkpoint, without the Trainer.
//!
//! `cargo run --example custom_loop`

use torchlight::prelude::*;
use torchlight::train::{MetricSet, StepConfig, StepRunner};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    seed_everything(0);
    let device = "auto".parse::<DeviceSpec>()?.resolve()?;
    // A linear classifier on two Gaussian blobs, made in memory.
    let n = 256;
    let labels = Tensor::arange(n, (Kind::Int64, Device::Cpu)).remainder(2);
    let x =
        Tensor::randn([n, 2], (Kind::Float, Device::Cpu)) + labels.unsqueeze(1).to_kind(Kind::Float) * 3.0;
    let model = Linear::new_on(2, 2, true, LayerOptions::new(Kind::Float, device));
    let mut optimizer =
        AdamW::new(vec![ParamGroup::new(named_parameters(&model), AdamConfig::adamw().with_lr(0.05))])?;
    let step =
        StepConfig { amp: device.is_cuda(), accumulation: 2, grad_clip: Some(1.0), ..StepConfig::default() };
    let mut runner = StepRunner::new(step, device)?;
    let task = Classification::new(2);

    for epoch in 0..5 {
        let mut metrics = MetricSet::new(vec![Box::new(torchlight::train::Accuracy::new())]);
        let order = Tensor::randperm(n, (Kind::Int64, Device::Cpu));
        let batches = (n / 32) as usize;
        for b in 0..batches {
            let idx = order.narrow(0, (b * 32) as i64, 32);
            let batch =
                (x.index_select(0, &idx).to_device(device), labels.index_select(0, &idx).to_device(device));
            // Forward + backward; the optimizer steps every second batch (and on the last).
            let (_loss, ready) = runner.step(&model, &task, &batch, &mut optimizer, b + 1 == batches)?;
            for out in ready {
                metrics.update(&out.loss, &out.output, &out.target)?;
            }
        }
        let values = metrics.compute();
        println!("epoch {}: {values:?} ({} optimizer steps)", epoch + 1, runner.global_step());
    }
    let dir = std::env::temp_dir().join("tl-custom-loop/last");
    torchlight::checkpoint::save(
        &dir,
        &Snapshot {
            optimizer: Some(&optimizer),
            grad_scaler: Some(runner.scaler()),
            ..Snapshot::model(&model)
        },
    )?;
    println!("checkpoint: {}", dir.display());
    Ok(())
}
