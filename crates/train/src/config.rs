//! `TrainConfig`: every hyperparameter of a run, read from one TOML file, overridable by key.
//!
//! A config file has five sections; every field has a default, so a file holds only what it
//! changes:
//!
//! ```toml
//! [data]
//! root = "data/flowers"      # holds train/, val/ (optional) and test/ (optional)
//! image_size = 224
//!
//! [model]
//! name = "resnet18"
//! pretrained = "weights/resnet18.pth"
//! freeze_epochs = 2
//!
//! [optim]
//! lr = 1e-3
//! backbone_lr = 1e-4
//!
//! [scheduler]
//! kind = "cosine"
//!
//! [train]
//! epochs = 10
//! batch_size = 32
//! ```
//!
//! Unknown fields anywhere are errors naming them; [`TrainConfig::validate`] rejects values
//! training cannot use, naming the field. Overrides from the command line go through
//! [`TrainConfig::set`], by dotted key (`train.epochs`) or by a leaf name that is unique
//! (`epochs`, `image-size`).

use crate::error::{Result, TrainError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use torchlight_tensor::DeviceSpec;

/// Model names [`TrainConfig::validate`] accepts: torchvision's ResNet family.
pub const MODEL_NAMES: &[&str] = &["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"];

/// Every key [`TrainConfig::set`] accepts, as `section.field`. A unit test checks it against
/// the fields serde sees, so it cannot drift from the structs.
pub const CONFIG_KEYS: &[&str] = &[
    "data.root",
    "data.image_size",
    "data.workers",
    "data.val_fraction",
    "data.min_crop_scale",
    "data.max_image_pixels",
    "model.name",
    "model.pretrained",
    "model.num_classes",
    "model.freeze_epochs",
    "optim.optimizer",
    "optim.lr",
    "optim.backbone_lr",
    "optim.weight_decay",
    "optim.momentum",
    "optim.betas",
    "optim.warmup_epochs",
    "scheduler.kind",
    "scheduler.step_size",
    "scheduler.milestones",
    "scheduler.gamma",
    "scheduler.eta_min",
    "scheduler.pct_start",
    "scheduler.div_factor",
    "scheduler.final_div_factor",
    "train.epochs",
    "train.batch_size",
    "train.seed",
    "train.amp",
    "train.label_smoothing",
    "train.grad_clip",
    "train.accumulation_steps",
    "train.early_stopping_patience",
    "train.top_k",
    "train.log_interval",
    "train.on_nonfinite",
    "train.device",
    "train.out_dir",
];

/// Every hyperparameter of a training run. `Default` holds the defaults a PyTorch user would
/// reach for (AdamW at `lr = 1e-3`, `weight_decay = 0.01`, cosine annealing to 0, 224-pixel
/// images, batches of 32); the run folder gets the effective config through [`to_toml`](Self::to_toml),
/// so any run can be repeated from its folder alone.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// `[data]`: where the images are and how they are loaded.
    pub data: DataConfig,
    /// `[model]`: the architecture, its starting weights and staged fine-tuning.
    pub model: ModelConfig,
    /// `[optim]`: optimizer and learning rates per parameter group.
    pub optim: OptimConfig,
    /// `[scheduler]`: the learning-rate schedule after warm-up.
    pub scheduler: SchedulerConfig,
    /// `[train]`: the loop itself.
    pub train: LoopConfig,
}

/// The `[data]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// An ImageFolder root holding `train/`, and optionally `val/` and `test/`. Default `data`.
    pub root: PathBuf,
    /// Side of the square images fed to the model, torchvision's 224 by default.
    pub image_size: u32,
    /// Loader worker threads, like `DataLoader(num_workers=4)`. 0 loads on the training thread.
    pub workers: usize,
    /// Fraction of `train/` held out (seeded, stratified) as validation when there is no
    /// `val/`. Default 0.1.
    pub val_fraction: f64,
    /// RandomResizedCrop's smallest crop, as a fraction of the image area: torchvision's 0.08.
    /// Raise it when the object fills little of the image and small crops would miss it.
    pub min_crop_scale: f64,
    /// The most pixels an image file may declare in its header; larger ones are refused before
    /// decoding (a decompression bomb guard, and half of it warns). Pillow's limit by default,
    /// [`DEFAULT_MAX_IMAGE_PIXELS`](torchlight_vision::DEFAULT_MAX_IMAGE_PIXELS) = 178956970;
    /// 0 lifts the limit.
    pub max_image_pixels: u64,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            root: PathBuf::from("data"),
            image_size: 224,
            workers: 4,
            val_fraction: 0.1,
            min_crop_scale: 0.08,
            max_image_pixels: torchlight_vision::DEFAULT_MAX_IMAGE_PIXELS,
        }
    }
}

impl DataConfig {
    /// `root/train`.
    pub fn train_dir(&self) -> PathBuf {
        self.root.join("train")
    }
    /// `root/val` (may not exist: then [`val_fraction`](Self::val_fraction) of train is used).
    pub fn val_dir(&self) -> PathBuf {
        self.root.join("val")
    }
    /// `root/test` (optional).
    pub fn test_dir(&self) -> PathBuf {
        self.root.join("test")
    }
    /// [`max_image_pixels`](Self::max_image_pixels) as the vision crate takes it (`None`: no limit).
    pub fn pixel_limit(&self) -> Option<u64> {
        (self.max_image_pixels > 0).then_some(self.max_image_pixels)
    }
}

/// The `[model]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// Architecture, one of [`MODEL_NAMES`]. Default `resnet18`.
    pub name: String,
    /// Starting weights (`.pth` or `.safetensors`, torchvision key names); `None` starts
    /// from torchvision's initialisation.
    pub pretrained: Option<PathBuf>,
    /// Classes of the new head; `None` takes the number of class folders in the data.
    pub num_classes: Option<usize>,
    /// Epochs during which only the head trains (backbone frozen); 0 trains everything from
    /// the start.
    pub freeze_epochs: usize,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig { name: "resnet18".to_string(), pretrained: None, num_classes: None, freeze_epochs: 0 }
    }
}

/// Which optimizer to build, in PyTorch's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// `torch.optim.AdamW` (decoupled weight decay), the default.
    #[default]
    AdamW,
    /// `torch.optim.Adam` (L2 weight decay added to the gradient).
    Adam,
    /// `torch.optim.SGD` with momentum.
    Sgd,
}

/// What the training guard does when a loss or gradient holds NaN or Inf (`train.on_nonfinite`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NonFiniteAction {
    /// Stop with [`TrainError::NonFinite`](crate::TrainError::NonFinite), the default.
    #[default]
    Stop,
    /// Skip that optimizer step (gradients dropped, weights untouched) and go on.
    Skip,
}

/// The `[optim]` section. Two parameter groups: the new head at `lr`, the backbone at
/// `backbone_lr` (after any frozen epochs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimConfig {
    /// `adamw` (default), `adam` or `sgd`.
    pub optimizer: OptimizerKind,
    /// Learning rate of the head (and of everything when the model has no separate head);
    /// AdamW's default 1e-3.
    pub lr: f64,
    /// Learning rate of the backbone once unfrozen, 1e-4 by default (a tenth of the head's,
    /// the usual fine-tuning ratio).
    pub backbone_lr: f64,
    /// Weight decay; AdamW's default 0.01.
    pub weight_decay: f64,
    /// SGD momentum (ignored by Adam/AdamW); 0.9.
    pub momentum: f64,
    /// Adam/AdamW `betas`; PyTorch's `(0.9, 0.999)`.
    pub betas: [f64; 2],
    /// Epochs of linear warm-up from 0 to the group lrs before the scheduler takes over.
    pub warmup_epochs: usize,
}

impl Default for OptimConfig {
    fn default() -> Self {
        OptimConfig {
            optimizer: OptimizerKind::AdamW,
            lr: 1e-3,
            backbone_lr: 1e-4,
            weight_decay: 0.01,
            momentum: 0.9,
            betas: [0.9, 0.999],
            warmup_epochs: 0,
        }
    }
}

/// The `[scheduler]` section: `kind` picks the schedule, the other fields are its parameters
/// with `torch.optim.lr_scheduler`'s defaults. Parameters of another kind are unknown fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum SchedulerConfig {
    /// Constant learning rate.
    None,
    /// `StepLR`: multiply by `gamma` every `step_size` epochs.
    Step {
        /// Epochs between decays; 30 (torchvision's classification recipe).
        #[serde(default = "default_step_size")]
        step_size: usize,
        /// Decay factor; 0.1.
        #[serde(default = "default_gamma")]
        gamma: f64,
    },
    /// `MultiStepLR`: multiply by `gamma` at each epoch in `milestones`.
    MultiStep {
        /// Increasing epochs at which to decay (at least one).
        #[serde(default)]
        milestones: Vec<usize>,
        /// Decay factor; 0.1.
        #[serde(default = "default_gamma")]
        gamma: f64,
    },
    /// `CosineAnnealingLR` with `T_max` = the epochs after warm-up, down to `eta_min`. The default.
    Cosine {
        /// Final learning rate; 0.
        #[serde(default)]
        eta_min: f64,
    },
    /// `OneCycleLR` stepped per batch, peaking at the group lrs; it has its own warm-up.
    OneCycle {
        /// Fraction of the steps spent rising; 0.3.
        #[serde(default = "default_pct_start")]
        pct_start: f64,
        /// Initial lr = max lr / `div_factor`; 25.
        #[serde(default = "default_div_factor")]
        div_factor: f64,
        /// Final lr = initial lr / `final_div_factor`; 1e4.
        #[serde(default = "default_final_div_factor")]
        final_div_factor: f64,
    },
}

fn default_step_size() -> usize {
    30
}
fn default_gamma() -> f64 {
    0.1
}
fn default_pct_start() -> f64 {
    0.3
}
fn default_div_factor() -> f64 {
    25.0
}
fn default_final_div_factor() -> f64 {
    1e4
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig::Cosine { eta_min: 0.0 }
    }
}

impl SchedulerConfig {
    /// The `kind` string as written in TOML (`cosine`).
    pub fn kind(&self) -> &'static str {
        match self {
            SchedulerConfig::None => "none",
            SchedulerConfig::Step { .. } => "step",
            SchedulerConfig::MultiStep { .. } => "multistep",
            SchedulerConfig::Cosine { .. } => "cosine",
            SchedulerConfig::OneCycle { .. } => "onecycle",
        }
    }
}

/// The `[train]` section: the loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoopConfig {
    /// Epochs to train; 10.
    pub epochs: usize,
    /// Images per batch (per optimizer step divided by `accumulation_steps`); 32.
    pub batch_size: usize,
    /// Seed for `seed_everything`, the split, shuffling and augmentation; 0.
    pub seed: u64,
    /// Mixed precision: fp16 autocast with a GradScaler on CUDA, bf16 autocast on CPU.
    pub amp: bool,
    /// `CrossEntropyLoss(label_smoothing=...)`; 0.
    pub label_smoothing: f64,
    /// Max total gradient norm (`clip_grad_norm_`); `None` does not clip.
    pub grad_clip: Option<f64>,
    /// Batches whose gradients add up before each optimizer step; 1.
    pub accumulation_steps: usize,
    /// Stop after this many epochs without a better validation accuracy; `None` never stops early.
    pub early_stopping_patience: Option<usize>,
    /// The k of the top-k accuracy reported beside top-1; 5 (clamped to the class count).
    pub top_k: usize,
    /// Steps between reads of the running loss back to the host (progress display); 50.
    pub log_interval: usize,
    /// What a non-finite loss or gradient does: `stop` training with an error naming the step,
    /// lr and parameter (the default), or `skip` that optimizer step.
    pub on_nonfinite: NonFiniteAction,
    /// `auto`, `cpu`, `cuda` or `cuda:N`.
    pub device: String,
    /// Parent folder of the run folders (`runs/exp_001`, ...).
    pub out_dir: PathBuf,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            epochs: 10,
            batch_size: 32,
            seed: 0,
            amp: false,
            label_smoothing: 0.0,
            grad_clip: None,
            accumulation_steps: 1,
            early_stopping_patience: None,
            top_k: 5,
            log_interval: 50,
            on_nonfinite: NonFiniteAction::Stop,
            device: "auto".to_string(),
            out_dir: PathBuf::from("runs"),
        }
    }
}

impl LoopConfig {
    /// [`device`](Self::device) parsed (`auto` is resolved later, by
    /// [`DeviceSpec::resolve`]); an error naming `train.device` when it does not parse.
    pub fn device_spec(&self) -> Result<DeviceSpec> {
        self.device.parse::<DeviceSpec>().map_err(|e| TrainError::InvalidConfig {
            field: "train.device".to_string(),
            value: format!("{:?}", self.device),
            reason: e.to_string(),
        })
    }
}

impl TrainConfig {
    /// Reads a TOML config file. Does not [`validate`](Self::validate): apply overrides first.
    /// Errors name the file, and the line and column where the parser knows them.
    pub fn from_toml_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| TrainError::io(path, e))?;
        Self::parse(&text, path)
    }

    /// Parses TOML text (errors name `<string>` as the file).
    pub fn from_toml_str(text: &str) -> Result<Self> {
        Self::parse(text, Path::new("<string>"))
    }

    fn parse(text: &str, path: &Path) -> Result<Self> {
        toml::from_str(text).map_err(|e| {
            let (line, column) = match e.span() {
                Some(span) => {
                    let before = &text[..span.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                    (Some(line), Some(column))
                }
                None => (None, None),
            };
            TrainError::ConfigParse { path: path.to_path_buf(), line, column, message: one_line(e.message()) }
        })
    }

    /// The config as TOML, every field written out (a `None` is left out), for `config.toml`
    /// in the run folder. [`from_toml_str`](Self::from_toml_str) reads it back to an equal config.
    ///
    /// # Panics
    /// When a path is not valid UTF-8 (TOML has no way to write it); [`validate`](Self::validate)
    /// rejects such configs.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a TrainConfig always serializes to TOML")
    }

    /// Writes [`to_toml`](Self::to_toml) to `path`.
    pub fn write_toml_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_toml()).map_err(|e| TrainError::io(path, e))
    }

    /// Sets one field from a command-line style `key` and `value`, e.g. `set("epochs", "5")`,
    /// `set("optim.lr", "3e-4")`, `set("model.pretrained", "w.pth")`, `set("grad_clip", "none")`.
    ///
    /// `key` is a dotted `section.field` from [`CONFIG_KEYS`] or a field name that is unique
    /// across sections; `-` may stand for `_` (`image-size`). `value` is read as a TOML value
    /// (`5`, `3e-4`, `true`, `[10, 20]`) and otherwise as a string; `none` clears an optional
    /// field. Setting `scheduler.kind` resets the scheduler's parameters to that kind's
    /// defaults. Does not [`validate`](Self::validate).
    ///
    /// ```
    /// use torchlight_train::{TrainConfig, TrainError};
    /// let mut config = TrainConfig::from_toml_str("[train]\nepochs = 30\n")?;
    /// config.set("epochs", "5")?; // like `--epochs 5`
    /// config.set("optim.lr", "3e-4")?;
    /// assert_eq!((config.train.epochs, config.optim.lr), (5, 3e-4));
    /// assert!(matches!(config.set("epoch", "5"), Err(TrainError::UnknownKey { .. })));
    /// config.validate()?;
    /// # Ok::<(), TrainError>(())
    /// ```
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let full = resolve_key(key)?;
        let (section, field) = full.split_once('.').expect("CONFIG_KEYS are section.field");
        self.check_paths_are_utf8()?;
        let mut root =
            toml::Table::try_from(&*self).expect("a TrainConfig with UTF-8 paths serializes to TOML");
        let table = root
            .entry(section)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .expect("sections are tables");
        let bad = |reason: String| TrainError::InvalidOverride {
            key: full.to_string(),
            value: value.to_string(),
            reason,
        };
        if full == "scheduler.kind" {
            table.clear();
        }
        let trimmed = value.trim();
        let result = if trimmed.eq_ignore_ascii_case("none") && is_optional(full) {
            table.remove(field);
            toml::Value::Table(root).try_into::<TrainConfig>()
        } else {
            let parsed = parse_value(trimmed);
            table.insert(field.to_string(), parsed.clone());
            let first = toml::Value::Table(root.clone()).try_into::<TrainConfig>();
            match first {
                Err(_) if !parsed.is_str() => {
                    // `123` given for a string field (a folder name): try it as text.
                    let table = root.get_mut(section).and_then(|s| s.as_table_mut()).expect("inserted above");
                    table.insert(field.to_string(), toml::Value::String(trimmed.to_string()));
                    toml::Value::Table(root).try_into::<TrainConfig>().or(first)
                }
                other => other,
            }
        };
        *self = result.map_err(|e| {
            let mut reason = one_line(e.message());
            if section == "scheduler" && reason.starts_with("unknown field") {
                let kind = self.scheduler.kind();
                reason.push_str(&format!(
                    " (the `{kind}` scheduler has no `{field}`: set scheduler.kind first)"
                ));
            }
            bad(reason)
        })?;
        Ok(())
    }

    /// Checks every value training depends on; the error names the first invalid field,
    /// its value and why. Call after all overrides.
    pub fn validate(&self) -> Result<()> {
        fn invalid(field: &str, value: impl ToString, reason: &str) -> Result<()> {
            Err(TrainError::InvalidConfig {
                field: field.to_string(),
                value: value.to_string(),
                reason: reason.to_string(),
            })
        }
        fn positive(field: &str, v: f64) -> Result<()> {
            if v > 0.0 && v.is_finite() {
                Ok(())
            } else {
                invalid(field, v, "must be a finite number greater than 0")
            }
        }
        fn non_negative(field: &str, v: f64) -> Result<()> {
            if v >= 0.0 && v.is_finite() {
                Ok(())
            } else {
                invalid(field, v, "must be a finite number of at least 0")
            }
        }
        fn fraction(field: &str, v: f64) -> Result<()> {
            if (0.0..1.0).contains(&v) {
                Ok(())
            } else {
                invalid(field, v, "must be in [0, 1)")
            }
        }
        let (d, m, o, t) = (&self.data, &self.model, &self.optim, &self.train);
        self.check_paths_are_utf8()?;

        if d.root.as_os_str().is_empty() {
            invalid("data.root", "\"\"", "must name the dataset folder")?;
        }
        if d.image_size == 0 {
            invalid("data.image_size", 0, "must be at least 1 pixel")?;
        }
        if !(d.val_fraction > 0.0 && d.val_fraction < 1.0) {
            invalid("data.val_fraction", d.val_fraction, "must be in (0, 1)")?;
        }
        if !(d.min_crop_scale > 0.0 && d.min_crop_scale <= 1.0) {
            invalid("data.min_crop_scale", d.min_crop_scale, "must be in (0, 1]")?;
        }

        if !MODEL_NAMES.contains(&m.name.as_str()) {
            invalid(
                "model.name",
                &m.name,
                &format!("unknown model; expected one of {}", MODEL_NAMES.join(", ")),
            )?;
        }
        if let Some(n) = m.num_classes {
            if n < 2 {
                invalid("model.num_classes", n, "a classifier needs at least 2 classes")?;
            }
        }
        if m.freeze_epochs > t.epochs {
            invalid(
                "model.freeze_epochs",
                m.freeze_epochs,
                &format!("is more than train.epochs ({}), so the backbone would never unfreeze", t.epochs),
            )?;
        }

        positive("optim.lr", o.lr)?;
        positive("optim.backbone_lr", o.backbone_lr)?;
        non_negative("optim.weight_decay", o.weight_decay)?;
        fraction("optim.momentum", o.momentum)?;
        for b in o.betas {
            if !(0.0..1.0).contains(&b) {
                invalid("optim.betas", format!("{:?}", o.betas), "each beta must be in [0, 1)")?;
            }
        }
        if o.warmup_epochs >= t.epochs && o.warmup_epochs > 0 {
            invalid(
                "optim.warmup_epochs",
                o.warmup_epochs,
                &format!("must be less than train.epochs ({})", t.epochs),
            )?;
        }

        match &self.scheduler {
            SchedulerConfig::None => {}
            SchedulerConfig::Step { step_size, gamma } => {
                if *step_size == 0 {
                    invalid("scheduler.step_size", step_size, "must be at least 1 epoch")?;
                }
                decay("scheduler.gamma", *gamma)?;
            }
            SchedulerConfig::MultiStep { milestones, gamma } => {
                if milestones.is_empty() {
                    invalid("scheduler.milestones", "[]", "must list at least one epoch")?;
                }
                if milestones.windows(2).any(|w| w[0] >= w[1]) {
                    invalid(
                        "scheduler.milestones",
                        format!("{milestones:?}"),
                        "must be strictly increasing",
                    )?;
                }
                decay("scheduler.gamma", *gamma)?;
            }
            SchedulerConfig::Cosine { eta_min } => non_negative("scheduler.eta_min", *eta_min)?,
            SchedulerConfig::OneCycle { pct_start, div_factor, final_div_factor } => {
                if !(*pct_start > 0.0 && *pct_start < 1.0) {
                    invalid("scheduler.pct_start", pct_start, "must be in (0, 1)")?;
                }
                positive("scheduler.div_factor", *div_factor)?;
                positive("scheduler.final_div_factor", *final_div_factor)?;
                if o.warmup_epochs > 0 {
                    invalid(
                        "optim.warmup_epochs",
                        o.warmup_epochs,
                        "must be 0 with the onecycle scheduler, which warms up by itself (pct_start)",
                    )?;
                }
            }
        }

        if t.epochs == 0 {
            invalid("train.epochs", 0, "must be at least 1")?;
        }
        if t.batch_size == 0 {
            invalid("train.batch_size", 0, "must be at least 1")?;
        }
        fraction("train.label_smoothing", t.label_smoothing)?;
        if let Some(c) = t.grad_clip {
            positive("train.grad_clip", c)?;
        }
        if t.accumulation_steps == 0 {
            invalid("train.accumulation_steps", 0, "must be at least 1")?;
        }
        if t.early_stopping_patience == Some(0) {
            invalid(
                "train.early_stopping_patience",
                0,
                "must be at least 1 epoch (leave it out to never stop early)",
            )?;
        }
        if t.top_k == 0 {
            invalid("train.top_k", 0, "must be at least 1")?;
        }
        if t.log_interval == 0 {
            invalid("train.log_interval", 0, "must be at least 1 step")?;
        }
        t.device_spec()?;
        if t.out_dir.as_os_str().is_empty() {
            invalid("train.out_dir", "\"\"", "must name the folder that holds run folders")?;
        }
        Ok(())
    }
}

impl TrainConfig {
    /// TOML strings are UTF-8, so a path that is not cannot be written to `config.toml`.
    fn check_paths_are_utf8(&self) -> Result<()> {
        let paths = [
            ("data.root", Some(&self.data.root)),
            ("model.pretrained", self.model.pretrained.as_ref()),
            ("train.out_dir", Some(&self.train.out_dir)),
        ];
        for (field, path) in paths {
            if let Some(p) = path.filter(|p| p.to_str().is_none()) {
                return Err(TrainError::InvalidConfig {
                    field: field.to_string(),
                    value: format!("{p:?}"),
                    reason: "is not valid UTF-8, so config.toml cannot record it".to_string(),
                });
            }
        }
        Ok(())
    }
}

fn decay(field: &str, gamma: f64) -> Result<()> {
    if gamma > 0.0 && gamma <= 1.0 {
        Ok(())
    } else {
        Err(TrainError::InvalidConfig {
            field: field.to_string(),
            value: gamma.to_string(),
            reason: "must be in (0, 1]".to_string(),
        })
    }
}

/// A parser message on one line (TOML's syntax errors span several).
fn one_line(message: &str) -> String {
    message.trim().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ")
}

fn is_optional(key: &str) -> bool {
    matches!(
        key,
        "model.pretrained" | "model.num_classes" | "train.grad_clip" | "train.early_stopping_patience"
    )
}

/// Reads `text` as a TOML value (`5`, `1e-3`, `true`, `[1, 2]`, `"quoted"`), else as a string.
fn parse_value(text: &str) -> toml::Value {
    match format!("v = {text}").parse::<toml::Table>() {
        Ok(mut t) => t.remove("v").expect("parsed a table with key v"),
        Err(_) => toml::Value::String(text.to_string()),
    }
}

/// The dotted key a user's `key` names: itself when dotted, else the unique key with that leaf.
fn resolve_key(key: &str) -> Result<&'static str> {
    let normalized = key.trim().trim_start_matches("--").replace('-', "_");
    if let Some(k) = CONFIG_KEYS.iter().find(|k| **k == normalized) {
        return Ok(k);
    }
    let by_leaf: Vec<&'static str> =
        CONFIG_KEYS.iter().copied().filter(|k| k.rsplit('.').next() == Some(normalized.as_str())).collect();
    if by_leaf.len() == 1 {
        return Ok(by_leaf[0]);
    }
    let leaf = normalized.rsplit('.').next().unwrap_or_default().to_string();
    let suggestions = if by_leaf.is_empty() {
        let leaf_of = |k: &&&str| k.rsplit('.').next().unwrap_or_default().to_string();
        // Prefer keys the user's word begins (`epoch` -> `epochs`), then any that share it.
        let starting: Vec<String> = CONFIG_KEYS
            .iter()
            .filter(|k| !leaf.is_empty() && leaf_of(k).starts_with(leaf.as_str()))
            .map(|k| k.to_string())
            .collect();
        if !starting.is_empty() {
            starting
        } else {
            CONFIG_KEYS
                .iter()
                .filter(|k| {
                    !leaf.is_empty() && (leaf_of(k).contains(leaf.as_str()) || leaf.contains(&leaf_of(k)))
                })
                .map(|k| k.to_string())
                .collect()
        }
    } else {
        by_leaf.iter().map(|k| k.to_string()).collect()
    };
    Err(TrainError::UnknownKey { key: key.to_string(), suggestions })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// A config with every optional field set and every scheduler parameter present somewhere.
    fn all_keys_seen() -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let schedulers = [
            SchedulerConfig::None,
            SchedulerConfig::Step { step_size: 3, gamma: 0.5 },
            SchedulerConfig::MultiStep { milestones: vec![1, 2], gamma: 0.5 },
            SchedulerConfig::Cosine { eta_min: 0.0 },
            SchedulerConfig::OneCycle { pct_start: 0.3, div_factor: 25.0, final_div_factor: 1e4 },
        ];
        for s in schedulers {
            let mut c = TrainConfig::default();
            c.model.pretrained = Some("w.pth".into());
            c.model.num_classes = Some(3);
            c.train.grad_clip = Some(1.0);
            c.train.early_stopping_patience = Some(3);
            c.scheduler = s;
            let t = toml::Table::try_from(&c).unwrap();
            for (section, v) in t {
                for field in v.as_table().unwrap().keys() {
                    seen.insert(format!("{section}.{field}"));
                }
            }
        }
        seen
    }

    #[test]
    fn config_keys_match_the_structs() {
        let listed: BTreeSet<String> = CONFIG_KEYS.iter().map(|s| s.to_string()).collect();
        assert_eq!(listed, all_keys_seen());
    }

    #[test]
    fn defaults_are_valid_and_pytorch_like() {
        let c = TrainConfig::default();
        c.validate().unwrap();
        assert_eq!(c.optim.optimizer, OptimizerKind::AdamW);
        assert_eq!((c.optim.lr, c.optim.weight_decay, c.optim.betas), (1e-3, 0.01, [0.9, 0.999]));
        assert_eq!(c.scheduler, SchedulerConfig::Cosine { eta_min: 0.0 });
        assert_eq!((c.data.image_size, c.train.batch_size, c.train.label_smoothing), (224, 32, 0.0));
        assert_eq!(c.data.train_dir(), PathBuf::from("data/train"));
        assert_eq!(c.train.device_spec().unwrap(), DeviceSpec::Auto);
    }

    #[test]
    fn empty_text_is_the_default_config() {
        assert_eq!(TrainConfig::from_toml_str("").unwrap(), TrainConfig::default());
    }

    #[test]
    fn to_toml_round_trips_every_scheduler() {
        for kind in ["none", "step", "cosine", "onecycle"] {
            let mut c = TrainConfig::default();
            c.set("scheduler.kind", kind).unwrap();
            c.set("grad_clip", "2.5").unwrap();
            c.set("pretrained", "weights/r18.pth").unwrap();
            let text = c.to_toml();
            assert_eq!(TrainConfig::from_toml_str(&text).unwrap(), c, "{text}");
        }
    }

    #[test]
    fn scheduler_parameters_get_pytorch_defaults() {
        let c = TrainConfig::from_toml_str("[scheduler]\nkind = \"step\"\n").unwrap();
        assert_eq!(c.scheduler, SchedulerConfig::Step { step_size: 30, gamma: 0.1 });
        let c = TrainConfig::from_toml_str("[scheduler]\nkind = \"onecycle\"\n").unwrap();
        assert_eq!(
            c.scheduler,
            SchedulerConfig::OneCycle { pct_start: 0.3, div_factor: 25.0, final_div_factor: 1e4 }
        );
        assert_eq!(c.scheduler.kind(), "onecycle");
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_paths_are_errors_not_panics() {
        use std::os::unix::ffi::OsStrExt;
        let mut c = TrainConfig::default();
        c.data.root = PathBuf::from(std::ffi::OsStr::from_bytes(b"data\xff"));
        for err in [c.validate().unwrap_err(), c.clone().set("epochs", "3").unwrap_err()] {
            assert!(
                matches!(&err, TrainError::InvalidConfig { field, .. } if field == "data.root"),
                "{err:?}"
            );
        }
    }

    #[test]
    fn parse_value_reads_toml_else_text() {
        assert_eq!(parse_value("5"), toml::Value::Integer(5));
        assert_eq!(parse_value("3e-4"), toml::Value::Float(3e-4));
        assert_eq!(parse_value("true"), toml::Value::Boolean(true));
        assert_eq!(parse_value("runs/a b"), toml::Value::String("runs/a b".into()));
    }

    #[test]
    fn resolve_key_takes_unique_leaves_and_dashes() {
        assert_eq!(resolve_key("epochs").unwrap(), "train.epochs");
        assert_eq!(resolve_key("--image-size").unwrap(), "data.image_size");
        assert_eq!(resolve_key("optim.lr").unwrap(), "optim.lr");
        match resolve_key("lr_backbone") {
            Err(TrainError::UnknownKey { key, .. }) => assert_eq!(key, "lr_backbone"),
            other => panic!("expected UnknownKey, got {other:?}"),
        }
    }

    #[test]
    fn the_pixel_limit_is_pillows_by_default_and_settable() {
        let mut config = TrainConfig::default();
        assert_eq!(config.data.pixel_limit(), Some(178_956_970));
        config.set("data.max_image_pixels", "1000000").unwrap();
        assert_eq!(config.data.pixel_limit(), Some(1_000_000));
        config.set("max-image-pixels", "0").unwrap();
        assert_eq!(config.data.pixel_limit(), None, "0 lifts the limit");
        assert_eq!(TrainConfig::from_toml_str(&config.to_toml()).unwrap(), config);
    }
}
