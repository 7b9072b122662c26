//! A callback of your own: it logs the gradient norm before every optimizer step (to
//! TensorBoard, next to the built-in logs), stops training once the validation loss is low
//! enough, and keeps its state in checkpoints.
//!
//! `cargo run --example user_callback`

use torchlight::prelude::*;
use torchlight::train::{BatchEnd, Callback, Context, EpochRecord};

struct GradNormAndTarget {
    target_loss: f64,
    steps_seen: u64,
}

impl Callback for GradNormAndTarget {
    fn name(&self) -> String {
        "GradNormAndTarget".into()
    }

    fn on_before_optimizer_step(&mut self, ctx: &mut Context<'_>) -> torchlight::train::Result<()> {
        let norm: f64 = ctx
            .optimizer
            .named_parameters()
            .iter()
            .filter(|(_, p)| p.grad().defined())
            .map(|(_, p)| p.grad().square().sum(Kind::Double).double_value(&[]))
            .sum::<f64>()
            .sqrt();
        let step = ctx.position.global_step as i64 + 1;
        ctx.log_scalar("grad_norm", norm, step);
        Ok(())
    }

    fn on_train_batch_end(
        &mut self,
        _ctx: &mut Context<'_>,
        batch: &BatchEnd,
    ) -> torchlight::train::Result<()> {
        self.steps_seen += u64::from(batch.stepped);
        Ok(())
    }

    fn on_train_epoch_end(
        &mut self,
        ctx: &mut Context<'_>,
        record: &EpochRecord,
    ) -> torchlight::train::Result<()> {
        if record.get("val_loss").is_some_and(|l| l < self.target_loss) {
            ctx.request_stop(format!("val_loss below {} after {} steps", self.target_loss, self.steps_seen));
        }
        Ok(())
    }

    fn state_dict(&self) -> serde_json::Value {
        serde_json::json!({ "steps_seen": self.steps_seen })
    }

    fn load_state_dict(&mut self, state: &serde_json::Value) -> torchlight::train::Result<()> {
        self.steps_seen = state["steps_seen"].as_u64().unwrap_or(0);
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    seed_everything(0);
    let n = 200;
    let y = Tensor::arange(n, (Kind::Int64, Device::Cpu)).remainder(2);
    let x = Tensor::randn([n, 3], (Kind::Float, Device::Cpu)) + y.unsqueeze(1).to_kind(Kind::Float) * 4.0;
    let batches = |from: i64, len: i64| -> Vec<(Tensor, Tensor)> {
        (0..len / 20).map(|b| (x.narrow(0, from + b * 20, 20), y.narrow(0, from + b * 20, 20))).collect()
    };
    let mut model = Linear::new(3, 2, true);
    let mut optimizer =
        AdamW::new(vec![ParamGroup::new(named_parameters(&model), AdamConfig::adamw().with_lr(0.05))])?;
    let dir = std::env::temp_dir().join("tl-user-callback");
    let _ = std::fs::remove_dir_all(&dir);
    let mut trainer = Trainer::builder()
        .epochs(50)
        .run_dir(&dir)
        .callback(GradNormAndTarget { target_loss: 0.05, steps_seen: 0 })
        .build()?;
    let mut train = InMemory(batches(0, 160));
    let mut val = InMemory(batches(160, 40));
    let summary =
        trainer.fit(&mut model, &Classification::new(2), &mut optimizer, &mut train, Some(&mut val))?;
    println!("stopped after {} epochs: {:?}", summary.epochs, summary.stopped_early);
    println!("TensorBoard: tensorboard --logdir {}", dir.display());
    Ok(())
}

/// Batches already in memory are a `BatchSource` too: any loader of your own can feed the
/// Trainer by implementing it.
struct InMemory(Vec<(Tensor, Tensor)>);

struct Iter<'a> {
    batches: std::slice::Iter<'a, (Tensor, Tensor)>,
}

impl Iterator for Iter<'_> {
    type Item = torchlight::train::Result<(Tensor, Tensor)>;
    fn next(&mut self) -> Option<Self::Item> {
        self.batches.next().map(|(x, y)| Ok((x.shallow_clone(), y.shallow_clone())))
    }
}

impl torchlight::train::EpochBatches<(Tensor, Tensor)> for Iter<'_> {
    fn stall(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

impl torchlight::train::BatchSource<(Tensor, Tensor)> for InMemory {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn batches(
        &mut self,
        _epoch: u64,
        first_batch: usize,
    ) -> Box<dyn torchlight::train::EpochBatches<(Tensor, Tensor)> + '_> {
        Box::new(Iter { batches: self.0[first_batch.min(self.0.len())..].iter() })
    }
}
