//! Multi-label classification: several labels per sample, sigmoid outputs, BCE-with-logits,
//! macro F1 and mean average precision.
//!
//! `cargo run --example multilabel`

use torchlight::prelude::*;

/// Each sample has 6 features; label `j` is on when feature `j` is above 0.3 (so zero, one or
/// several labels per sample). Targets are `[L]` floats of 0/1.
struct Tags {
    x: Vec<[f32; 6]>,
}

impl Dataset for Tags {
    type Item = (Array, Array);
    fn len(&self) -> usize {
        self.x.len()
    }
    fn get(&self, i: usize, _rng: &mut Rng) -> torchlight::data::Result<(Array, Array)> {
        let x = self.x[i];
        let tags: Vec<f32> = x[..4].iter().map(|v| if *v > 0.3 { 1.0 } else { 0.0 }).collect();
        Ok((Array::from_f32(x.to_vec(), vec![6])?, Array::from_f32(tags, vec![4])?))
    }
}

fn data(n: usize, seed: u64) -> Tags {
    let mut rng = rng_from_seed(seed);
    Tags {
        x: (0..n).map(|_| std::array::from_fn(|_| rand::Rng::random_range(&mut rng, -1.0..1.0))).collect(),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    seed_everything(0);
    let mut model = Sequential::new().add(Linear::new(6, 32, true)).add(ReLU).add(Linear::new(32, 4, true));
    let mut optimizer =
        AdamW::new(vec![ParamGroup::new(named_parameters(&model), AdamConfig::adamw().with_lr(1e-2))])?;
    let loader = |tags, train| -> Result<_, torchlight::data::DataError> {
        DataLoader::builder(tags).batch_size(32).shuffle(train).seed(1).build()
    };
    let (mut train, mut val) = (loader(data(512, 1), true)?, loader(data(128, 2), false)?);
    let mut trainer = Trainer::builder().epochs(12).build()?;
    let summary = trainer.fit(&mut model, &MultiLabel::new(), &mut optimizer, &mut train, Some(&mut val))?;
    let last = summary.history.last().expect("trained");
    let (f1, map) = (last.get("val_f1").unwrap_or(f64::NAN), last.get("val_map").unwrap_or(f64::NAN));
    println!("val F1 {f1:.3}, mAP {map:.3}");
    if map < 0.9 {
        return Err(format!("the model should learn the tags (val mAP {map:.3})").into());
    }
    Ok(())
}
