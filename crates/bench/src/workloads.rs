//! The Torchlight side of each workload, built once and then run on request; each mirrors a
//! function of the same name in `pytorch_bench.py`.

pub use crate::common::Workload;
use crate::common::{adamw, inputs};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use tch::{Kind, Tensor};
use torchlight_checkpoint::{Checkpoint, Snapshot};
use torchlight_data::DataLoader;
use torchlight_nn::{
    architecture, named_parameters, resnet18, resnet34, resnet50, CrossEntropyLoss, LayerOptions, ModelSpec,
    Module, ModuleT, ResNet,
};
use torchlight_optim::{AdamW, Optimizer};
use torchlight_vision::{
    decode_file, CenterCrop, Compose, ImageFolder, Normalize, RandomErasing, RandomHorizontalFlip,
    RandomResizedCrop, Resize, ToTensor, TrivialAugmentWide, IMAGENET_MEAN, IMAGENET_STD,
};

/// Where a workload finds its inputs and scratch space.
pub struct Env {
    /// The generated ImageFolder.
    pub data: PathBuf,
    /// Scratch folder for checkpoint files.
    pub scratch: PathBuf,
    /// The generated text corpus (a TextFolder, `text.rs`).
    pub text: PathBuf,
}

/// Builds the workload called `name` (the names `cargo xtask bench` uses).
pub fn build(name: &str, env: &Env) -> Result<Box<dyn Workload>> {
    if let Some(workload) = crate::text::build(name, &env.text) {
        return workload;
    }
    Ok(match name {
        "decode" => Box::new(Decode::new(&env.data)?),
        "pipeline_w0" => Box::new(Pipeline::new(&env.data, 0, Pipeline::train_transform())?),
        "pipeline_w2" => Box::new(Pipeline::new(&env.data, 2, Pipeline::train_transform())?),
        "pipeline_eval_w0" => Box::new(Pipeline::new(&env.data, 0, Pipeline::eval_transform())?),
        "pipeline_policy_w0" => Box::new(Pipeline::new(&env.data, 0, Pipeline::policy_transform())?),
        "pipeline_policy_w2" => Box::new(Pipeline::new(&env.data, 2, Pipeline::policy_transform())?),
        "train_resnet18_64_b32" => Box::new(TrainStep::new(resnet18(10), 32, 64)?),
        "train_resnet34_224_b8" => Box::new(TrainStep::new(resnet34(10), 8, 224)?),
        "train_mobilenet_v3_large_224_b8" => {
            Box::new(TrainStep::new(backbone("mobilenet_v3_large")?, 8, 224)?)
        }
        "train_efficientnet_b0_224_b8" => Box::new(TrainStep::new(backbone("efficientnet_b0")?, 8, 224)?),
        "train_convnext_tiny_224_b4" => Box::new(TrainStep::new(backbone("convnext_tiny")?, 4, 224)?),
        "train_vit_b_16_224_b4" => Box::new(TrainStep::new(backbone("vit_b_16")?, 4, 224)?),
        "adamw_resnet34_vs_fused" | "adamw_resnet34_vs_default" => Box::new(AdamWStep::new()?),
        "eval_resnet34_224_b32" => Box::new(Eval::new()?),
        "checkpoint_resnet50" => Box::new(CheckpointIo::new(&env.scratch)?),
        "ema_resnet50" => Box::new(EmaUpdate::new()?),
        "mixup_cutmix_64_b32" => Box::new(MixBatch::new()?),
        "train_e2e_resnet18_32_w2" => Box::new(EndToEnd::new(env, Recipe::Plain)?),
        "train_e2e_modern_resnet18_32_w2" => Box::new(EndToEnd::new(env, Recipe::Modern)?),
        other => match crate::allreduce::ALLREDUCE_WORKLOADS.iter().find(|w| w.0 == other) {
            Some(&(_, elements, count)) => crate::allreduce::build(elements, count)?,
            None => match crate::allreduce::DDP_WORKLOADS.iter().position(|w| w.0 == other) {
                Some(row) => crate::allreduce::build_ddp(row)?,
                None => bail!("unknown workload `{other}`"),
            },
        },
    })
}

/// Decode-only: every image of the folder to RGB `u8`, on one thread.
struct Decode {
    paths: Vec<PathBuf>,
}

impl Decode {
    fn new(data: &Path) -> Result<Self> {
        let folder = ImageFolder::new(data)?;
        Ok(Decode { paths: folder.samples().iter().map(|(p, _)| p.clone()).collect() })
    }
}

impl Workload for Decode {
    fn run(&mut self) -> Result<()> {
        let mut pixels = 0usize;
        for path in &self.paths {
            pixels += decode_file(path)?.pixels().len();
        }
        std::hint::black_box(pixels);
        Ok(())
    }
}

/// One epoch of a torchvision pipeline through the DataLoader, batch 32, shuffled.
struct Pipeline {
    loader: DataLoader<ImageFolder>,
    epoch: u64,
}

impl Pipeline {
    /// torchvision's ImageNet training transform: RandomResizedCrop(224) + hflip + ToTensor +
    /// Normalize.
    fn train_transform() -> Compose {
        Compose::default()
            .then(RandomResizedCrop::new(224))
            .then(RandomHorizontalFlip::default())
            .then(ToTensor)
            .then(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD))
    }

    /// torchvision's classification preset with `--auto-augment ta_wide --random-erase 0.25`:
    /// RandomResizedCrop(224) + hflip + TrivialAugmentWide + ToTensor + Normalize +
    /// RandomErasing(0.25).
    fn policy_transform() -> Compose {
        Compose::default()
            .then(RandomResizedCrop::new(224))
            .then(RandomHorizontalFlip::default())
            .then(TrivialAugmentWide::default())
            .then(ToTensor)
            .then(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD))
            .then(RandomErasing::new(0.25))
    }

    /// torchvision's ImageNet evaluation transform: Resize(256) + CenterCrop(224) + ToTensor +
    /// Normalize.
    fn eval_transform() -> Compose {
        Compose::default()
            .then(Resize::new(256))
            .then(CenterCrop::new(224))
            .then(ToTensor)
            .then(Normalize::new(&IMAGENET_MEAN, &IMAGENET_STD))
    }

    fn new(data: &Path, workers: usize, transform: Compose) -> Result<Self> {
        let dataset = ImageFolder::new(data)?.with_transform(transform);
        let loader =
            DataLoader::builder(dataset).batch_size(32).shuffle(true).num_workers(workers).seed(0).build()?;
        Ok(Pipeline { loader, epoch: 0 })
    }
}

impl Workload for Pipeline {
    fn run(&mut self) -> Result<()> {
        self.epoch += 1;
        let mut seen = 0;
        for batch in self.loader.epoch(self.epoch) {
            let (images, _targets) = batch?;
            seen += images.size()[0];
        }
        if seen as usize != self.loader.dataset().samples().len() {
            bail!("the epoch yielded {seen} images");
        }
        Ok(())
    }
}

/// A registered architecture with 10 classes for 224-pixel images, initialised as torchvision.
fn backbone(name: &str) -> Result<Box<dyn Module>> {
    let arch = architecture(name).with_context(|| format!("{name} is not registered"))?;
    Ok(arch.build(ModelSpec::new(10, 224), LayerOptions::default())?)
}

/// Forward + cross-entropy + backward + AdamW step, train mode.
struct TrainStep<M> {
    model: M,
    optimizer: AdamW,
    loss: CrossEntropyLoss,
    x: Tensor,
    y: Tensor,
}

impl<M: Module> TrainStep<M> {
    fn new(model: M, batch: i64, size: i64) -> Result<Self> {
        let optimizer = adamw(&model)?;
        let (x, y) = inputs(batch, size);
        Ok(TrainStep { model, optimizer, loss: CrossEntropyLoss::new(), x, y })
    }
}

impl<M: Module> Workload for TrainStep<M> {
    fn run(&mut self) -> Result<()> {
        self.optimizer.zero_grad()?;
        let logits = self.model.forward_t(&self.x, true);
        let loss = self.loss.forward(&logits, &self.y)?;
        loss.backward();
        self.optimizer.step()?;
        Ok(())
    }
}

/// Gives every parameter a gradient (all ones) without a forward pass.
fn ones_grads(model: &dyn Module) {
    let params = named_parameters(model);
    let total = params.iter().map(|(_, p)| p.sum(Kind::Float)).reduce(|a, b| a + b).expect("parameters");
    total.backward();
}

/// The AdamW step alone over resnet34's parameters (gradients fixed).
struct AdamWStep {
    _model: ResNet,
    optimizer: AdamW,
}

impl AdamWStep {
    fn new() -> Result<Self> {
        let model = resnet34(1000);
        ones_grads(&model);
        let optimizer = adamw(&model)?;
        Ok(AdamWStep { _model: model, optimizer })
    }
}

impl Workload for AdamWStep {
    fn run(&mut self) -> Result<()> {
        Ok(self.optimizer.step()?)
    }
}

/// One model-EMA update over resnet50's parameters and buffers (timm's `ModelEmaV3` rule, a
/// decay of 0.9999 from the second update on): `ModelEma::update`, one `_foreach_lerp_` over
/// the floating tensors and a `_foreach_copy_` of the integer ones.
struct EmaUpdate {
    model: ResNet,
    ema: torchlight_train::ModelEma,
    step: u64,
}

impl EmaUpdate {
    fn new() -> Result<Self> {
        let model = resnet50(1000);
        let mut ema = torchlight_train::ModelEma::timm(0.9999)?;
        ema.init(&model);
        Ok(EmaUpdate { model, ema, step: 0 })
    }
}

impl Workload for EmaUpdate {
    fn run(&mut self) -> Result<()> {
        self.step += 1;
        Ok(self.ema.update(&self.model, self.step)?)
    }
}

/// Mixup/CutMix of one batch of 32 64x64 images over 10 classes (`MixupCutMix::new(10, 0.2,
/// 1.0)`, torchvision's `RandomChoice([MixUp(0.2), CutMix(1.0)])`), draws from torch's
/// generator included.
struct MixBatch {
    mix: torchlight_train::MixupCutMix,
    x: Tensor,
    y: Tensor,
}

impl MixBatch {
    fn new() -> Result<Self> {
        let (x, y) = inputs(32, 64);
        Ok(MixBatch { mix: torchlight_train::MixupCutMix::new(10, 0.2, 1.0)?, x, y })
    }
}

impl Workload for MixBatch {
    fn run(&mut self) -> Result<()> {
        let _ = std::hint::black_box(self.mix.mix(&self.x, &self.y, 0)?);
        Ok(())
    }
}

/// resnet34 eval forward, 224x224, batch 32, under no-grad.
struct Eval {
    model: ResNet,
    x: Tensor,
}

impl Eval {
    fn new() -> Result<Self> {
        Ok(Eval { model: resnet34(1000), x: inputs(32, 224).0 })
    }
}

impl Workload for Eval {
    fn run(&mut self) -> Result<()> {
        let _guard = torchlight_tensor::no_grad();
        let _ = std::hint::black_box(self.model.forward_t(&self.x, false));
        Ok(())
    }
}

/// Save + load + restore of resnet50 with AdamW state (one step taken, so moments exist).
struct CheckpointIo {
    model: ResNet,
    optimizer: AdamW,
    dir: PathBuf,
}

impl CheckpointIo {
    fn new(scratch: &Path) -> Result<Self> {
        let model = resnet50(1000);
        ones_grads(&model);
        let mut optimizer = adamw(&model)?;
        optimizer.step()?;
        std::fs::create_dir_all(scratch).with_context(|| format!("{}", scratch.display()))?;
        Ok(CheckpointIo { model, optimizer, dir: scratch.join("torchlight_ckpt") })
    }
}

impl Workload for CheckpointIo {
    fn run(&mut self) -> Result<()> {
        let mut snapshot = Snapshot::model(&self.model);
        snapshot.optimizer = Some(&self.optimizer);
        torchlight_checkpoint::save(&self.dir, &snapshot)?;
        let mut checkpoint = Checkpoint::load(&self.dir)?;
        checkpoint.restore_model(&self.model)?;
        checkpoint.restore_optimizer(&mut self.optimizer)?;
        Ok(())
    }
}

/// Epochs of the end-to-end run (the image count already differs between quick and full mode).
const E2E_EPOCHS: usize = 2;

/// Which recipe the end-to-end row runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Recipe {
    /// `TrainConfig::default()` with the row's sizes: RandomResizedCrop + flip, AdamW + cosine.
    Plain,
    /// `docs/recipes/modern.toml` with the row's sizes: TrivialAugmentWide, RandomErasing,
    /// Mixup/CutMix, label smoothing, the model EMA validated each epoch, a warm-up epoch.
    Modern,
}

/// The modern recipe's file, as users copy it.
const MODERN_TOML: &str = include_str!("../../../docs/recipes/modern.toml");

/// A whole `torchlight train` run (the recipe behind the CLI, `torchlight_recipes::image::fit`):
/// resnet18 at 32 px, 2 loader workers, batch 32, AdamW + cosine, a seeded 10% validation split
/// evaluated every epoch, checkpoints, logs and curves written, for [`E2E_EPOCHS`] epochs; with
/// [`Recipe::Modern`], `docs/recipes/modern.toml` at those sizes. The small images make the
/// loader and the per-step overhead, not the model, the cost.
struct EndToEnd {
    config: torchlight_recipes::TrainConfig,
}

impl EndToEnd {
    fn new(env: &Env, recipe: Recipe) -> Result<Self> {
        // The recipe reads `<root>/train`; the bench's ImageFolder is linked there.
        let root = env.scratch.join("e2e_data");
        std::fs::create_dir_all(&root).with_context(|| format!("{}", root.display()))?;
        let train = root.join("train");
        if std::fs::read_link(&train).ok().as_deref() != Some(env.data.as_path()) {
            let _ = std::fs::remove_file(&train);
            std::os::unix::fs::symlink(&env.data, &train).with_context(|| format!("{}", train.display()))?;
        }
        let mut config = match recipe {
            Recipe::Plain => torchlight_recipes::TrainConfig::default(),
            Recipe::Modern => torchlight_recipes::TrainConfig::from_toml_str(MODERN_TOML)
                .context("docs/recipes/modern.toml")?,
        };
        config.data.root = root;
        config.data.image_size = Some(32);
        config.data.workers = 2;
        config.model.name = "resnet18".into();
        config.train.epochs = E2E_EPOCHS;
        config.train.batch_size = 32;
        config.train.device = "cpu".into();
        config.train.out_dir = env.scratch.join(match recipe {
            Recipe::Plain => "e2e_runs",
            Recipe::Modern => "e2e_modern_runs",
        });
        Ok(EndToEnd { config })
    }
}

impl Workload for EndToEnd {
    fn run(&mut self) -> Result<()> {
        let summary =
            torchlight_recipes::image::fit(self.config.clone(), &torchlight_train::Progress::quiet())?;
        // Each repetition is a new run folder; keep the scratch space from growing.
        std::fs::remove_dir_all(&summary.run_dir)
            .with_context(|| format!("{}", summary.run_dir.display()))?;
        if summary.epochs != E2E_EPOCHS as u64 {
            bail!("the run stopped after {} epochs", summary.epochs);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlight_recipes::{AutoAugmentKind, OptimizerKind, SchedulerConfig};

    /// `pytorch_bench.py`'s `EndToEnd(modern=True)` writes these values out by hand: the row's
    /// config must be `docs/recipes/modern.toml` with exactly them, at the row's sizes.
    #[test]
    fn the_modern_end_to_end_row_is_modern_toml_with_the_values_the_pytorch_side_writes() {
        let dir = tempfile::tempdir().unwrap();
        let env = Env {
            data: dir.path().join("images"),
            scratch: dir.path().join("scratch"),
            text: dir.path().into(),
        };
        let c = EndToEnd::new(&env, Recipe::Modern).unwrap().config;
        c.validate().unwrap();
        let (d, o, t) = (&c.data, &c.optim, &c.train);
        assert_eq!((d.image_size(), d.workers, d.val_fraction), (32, 2, 0.1));
        assert_eq!((t.epochs, t.batch_size, t.seed), (E2E_EPOCHS, 32, 0));
        assert_eq!(c.model.name, "resnet18");
        assert!(c.model.pretrained.is_none());
        assert_eq!((d.auto_augment, d.random_erase), (AutoAugmentKind::TaWide, 0.25));
        assert_eq!(
            (o.optimizer, o.lr, o.weight_decay, o.warmup_epochs),
            (OptimizerKind::AdamW, 1e-3, 0.05, 1)
        );
        // Norm weights and (by the 1-D rule) biases undecayed: the script's `p.ndim > 1` split.
        assert_eq!((o.norm_weight_decay, o.bias_weight_decay, o.layer_decay), (Some(0.0), None, None));
        assert!(matches!(c.scheduler, SchedulerConfig::Cosine { eta_min } if eta_min == 0.0));
        assert_eq!((t.label_smoothing, t.mixup_alpha, t.cutmix_alpha), (0.1, 0.2, 1.0));
        assert_eq!((t.mixup_prob, t.mixup_switch_prob, t.mixup_off_epoch), (1.0, 0.5, None));
        assert!(t.model_ema && !t.model_ema_warmup);
        assert_eq!((t.model_ema_steps, t.model_ema_decay), (32, 0.99998));
        assert!(!t.amp && !t.bce_loss && t.accumulation_steps == 1 && t.grad_clip.is_none());

        let plain = EndToEnd::new(&env, Recipe::Plain).unwrap().config;
        assert!(!plain.train.model_ema && plain.train.mixup_alpha == 0.0 && plain.optim.warmup_epochs == 0);
        assert_ne!(plain.train.out_dir, c.train.out_dir);
    }
}
