//! Regression: real-valued targets, a Huber loss, MAE and RMSE; the best checkpoint is the one
//! of lowest validation MAE.
//!
//! `cargo run --example regression`

use torchlight::prelude::*;

/// `y = sin(3 x0) + 0.5 x1^2`, with noise drawn per sample.
struct Curve {
    n: usize,
    offset: usize,
}

impl Dataset for Curve {
    type Item = (Array, Array);
    fn len(&self) -> usize {
        self.n
    }
    fn get(&self, i: usize, rng: &mut Rng) -> torchlight::data::Result<(Array, Array)> {
        let t = (i + self.offset) as f32;
        let (x0, x1) = ((t * 0.37).sin(), (t * 0.61).cos());
        let noise: f32 = rand::Rng::random_range(rng, -0.02..0.02);
        let y = (3.0 * x0).sin() + 0.5 * x1 * x1 + noise;
        Ok((Array::from_f32(vec![x0, x1], vec![2])?, Array::from_f32(vec![y], vec![1])?))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    seed_everything(0);
    let mut model = Sequential::new().add(Linear::new(2, 64, true)).add(Tanh).add(Linear::new(64, 1, true));
    let mut optimizer =
        AdamW::new(vec![ParamGroup::new(named_parameters(&model), AdamConfig::adamw().with_lr(1e-2))])?;
    let loader = |n, offset, train| -> Result<_, torchlight::data::DataError> {
        DataLoader::builder(Curve { n, offset }).batch_size(32).shuffle(train).seed(3).build()
    };
    let (mut train, mut val) = (loader(640, 0, true)?, loader(160, 10_000, false)?);
    let dir = std::env::temp_dir().join("tl-regression");
    let _ = std::fs::remove_dir_all(&dir);
    let mut trainer = Trainer::builder().epochs(30).run_dir(&dir).build()?;
    let task = Regression::new(RegressionLoss::Huber { delta: 0.5 });
    let summary = trainer.fit(&mut model, &task, &mut optimizer, &mut train, Some(&mut val))?;
    let (mae, epoch) = summary.best.expect("validation ran");
    println!("best val MAE {mae:.4} at epoch {epoch}; curves in {}", dir.join("curves.png").display());
    if mae > 0.1 {
        return Err(format!("the model should fit the curve (val MAE {mae:.4})").into());
    }
    Ok(())
}
