//! A model and a dataset of your own, trained by the Trainer: `#[derive(Module)]` and a
//! hand-written forward, an in-memory `Dataset`, validation, a run folder with checkpoints and
//! logs, an exact resume, and a TorchScript export.
//!
//! `cargo run --example custom_model [-- OUT_DIR]`

use std::path::PathBuf;
use torchlight::prelude::*;

/// A small CNN for 1x16x16 images, written as a PyTorch user writes an `nn.Module`: the
/// sub-modules are fields (their names become `state_dict` keys), `forward` is yours.
#[derive(Debug, Module)]
struct SmallCnn {
    conv1: Conv2d,
    conv2: Conv2d,
    head: Linear,
}

impl SmallCnn {
    fn new(classes: i64) -> Self {
        let conv = |i, o| Conv2d::new(i, o, 3, Conv2dConfig::default().with_padding(1));
        SmallCnn { conv1: conv(1, 8), conv2: conv(8, 16), head: Linear::new(16, classes, true) }
    }
}

impl ModuleT for SmallCnn {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let x = self.conv1.forward_t(x, train).relu().max_pool2d_default(2);
        let x = self.conv2.forward_t(&x, train).relu().adaptive_avg_pool2d([1, 1]).flatten(1, -1);
        self.head.forward_t(&x, train)
    }
}

/// Bars: a horizontal, a vertical or a diagonal stripe on noise; the label is its direction.
/// A `Dataset` is any type with a length and an indexed `get`; randomness comes from `rng`, seeded
/// per sample by the loader, so augmentation is the same at any worker count and after a resume.
struct Stripes {
    len: usize,
}

impl Dataset for Stripes {
    type Item = (Array, i64);

    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, index: usize, rng: &mut Rng) -> torchlight::data::Result<(Array, i64)> {
        let label = (index % 3) as i64;
        let at = 4 + index / 3 % 8;
        let mut pixels = vec![0f32; 16 * 16];
        for (i, p) in pixels.iter_mut().enumerate() {
            let (y, x) = (i / 16, i % 16);
            let on = match label {
                0 => y == at,
                1 => x == at,
                _ => x == y,
            };
            let noise: f32 = rand::Rng::random_range(rng, -0.3..0.3);
            *p = if on { 1.0 } else { 0.0 } + noise;
        }
        Ok((Array::from_f32(pixels, vec![1, 16, 16])?, label))
    }
}

fn loader(len: usize, train: bool) -> Result<DataLoader<Stripes>, Box<dyn std::error::Error>> {
    Ok(DataLoader::builder(Stripes { len }).batch_size(16).shuffle(train).num_workers(2).seed(7).build()?)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("tl-custom-model"));
    let _ = std::fs::remove_dir_all(&out);
    seed_everything(0);
    let mut model = SmallCnn::new(3);
    println!("{}", torchlight::nn::summary_table(&model));

    let mut train_with = |epochs: u64, resume: bool| -> Result<FitSummary, Box<dyn std::error::Error>> {
        let mut optimizer =
            AdamW::new(vec![ParamGroup::new(named_parameters(&model), AdamConfig::adamw().with_lr(1e-2))])?;
        let mut builder = Trainer::builder().epochs(epochs).run_dir(&out).seed(0);
        if resume {
            builder = builder.resume_from(out.join("checkpoints/last"));
        }
        let mut trainer = builder.build()?;
        let (mut train, mut val) = (loader(384, true)?, loader(48, false)?);
        Ok(trainer.fit(&mut model, &Classification::new(3), &mut optimizer, &mut train, Some(&mut val))?)
    };
    // Three epochs, then three more resumed from the run folder's `last` checkpoint.
    train_with(3, false)?;
    let summary = train_with(6, true)?;
    let (acc, epoch) = summary.best.expect("validation ran");
    println!("best val_acc {acc:.3} at epoch {epoch}; run folder {}", out.display());

    let x = Tensor::randn([2, 1, 16, 16], (Kind::Float, Device::Cpu));
    torchlight::export::export_torchscript(&model, &x, out.join("small_cnn.pt"))?;
    println!("TorchScript: {}", out.join("small_cnn.pt").display());
    if acc < 0.9 {
        return Err(format!("the model should learn the stripes (val_acc {acc:.3})").into());
    }
    Ok(())
}
