//! `TrainConfig`: every hyperparameter of a run, read from one TOML file, overridable by key.
//!
//! A config file has six sections (`[text]` is read only when `train.task = "text"`); every
//! field has a default, so a file holds only what it changes:
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
//! lr = 1e-3                  # the backbone fine-tunes at lr / 10 (optim.backbone_lr)
//!
//! [scheduler]
//! kind = "cosine"
//!
//! [train]
//! epochs = 10
//! batch_size = 32
//! # task = "text"          # a TextFolder instead, with the [text] section
//! ```
//!
//! Unknown fields anywhere are errors naming them; [`TrainConfig::validate`] rejects values
//! training cannot use, naming the field. Overrides from the command line go through
//! [`TrainConfig::set`], by dotted key (`train.epochs`) or by a leaf name that is unique
//! (`epochs`, `image-size`).

mod edit;
mod overrides;
mod validate;

pub use edit::{format_lr, set_toml_value};
pub(crate) use validate::MAX_TEXT_LEN;
pub use validate::{MAX_CLASSES, MAX_IMAGE_SIZE};

use crate::error::{RecipeError, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use torchlight_tensor::DeviceSpec;
use torchlight_train::NonFiniteAction;

/// `data.image_size` when neither the config nor a Hub folder's `pretrained_cfg` sets it:
/// torchvision's 224.
pub const DEFAULT_IMAGE_SIZE: u32 = 224;

/// Every key [`TrainConfig::set`] accepts, as `section.field`. A unit test checks it against
/// the fields serde sees, so it cannot drift from the structs.
pub const CONFIG_KEYS: &[&str] = &[
    "data.root",
    "data.image_size",
    "data.workers",
    "data.val_fraction",
    "data.min_crop_scale",
    "data.sampler",
    "data.max_image_pixels",
    "data.exif_transpose",
    "data.ra_reps",
    "data.auto_augment",
    "data.ra_magnitude",
    "data.augmix_severity",
    "data.random_erase",
    "data.hflip",
    "data.color_jitter",
    "data.rotation",
    "data.interpolation",
    "data.crop_pct",
    "data.eval_image_size",
    "data.eval_crop_pct",
    "data.crop_mode",
    "data.mean",
    "data.std",
    "model.name",
    "model.pretrained",
    "model.key_rewrite",
    "model.num_classes",
    "model.freeze_epochs",
    "model.freeze_bn",
    "model.freeze_bn_while_frozen",
    "optim.optimizer",
    "optim.lr",
    "optim.backbone_lr",
    "optim.weight_decay",
    "optim.momentum",
    "optim.betas",
    "optim.warmup_epochs",
    "optim.norm_weight_decay",
    "optim.bias_weight_decay",
    "optim.layer_decay",
    "scheduler.kind",
    "scheduler.step_size",
    "scheduler.milestones",
    "scheduler.gamma",
    "scheduler.eta_min",
    "scheduler.pct_start",
    "scheduler.div_factor",
    "scheduler.final_div_factor",
    "scheduler.monitor",
    "scheduler.mode",
    "scheduler.factor",
    "scheduler.patience",
    "scheduler.threshold",
    "scheduler.threshold_mode",
    "scheduler.cooldown",
    "scheduler.min_lr",
    "scheduler.eps",
    "train.epochs",
    "train.batch_size",
    "train.seed",
    "train.amp",
    "train.label_smoothing",
    "train.mixup_alpha",
    "train.cutmix_alpha",
    "train.mixup_prob",
    "train.mixup_switch_prob",
    "train.mixup_off_epoch",
    "train.bce_loss",
    "train.bce_target_thresh",
    "train.model_ema",
    "train.model_ema_decay",
    "train.model_ema_steps",
    "train.model_ema_warmup",
    "train.sync_bn",
    "train.grad_clip",
    "train.accumulation_steps",
    "train.early_stopping_patience",
    "train.top_k",
    "train.log_interval",
    "train.on_nonfinite",
    "train.allow_nonfinite_val",
    "train.class_weights",
    "train.checkpoint_every_steps",
    "train.extend_schedule",
    "train.device",
    "train.out_dir",
    "train.task",
    "text.max_len",
    "text.min_freq",
    "text.max_vocab",
    "text.lowercase",
    "text.tokenizer",
    "text.text_column",
    "text.label_column",
    "text.bucket",
    "text.embed_dim",
    "text.dropout",
    "text.num_filters",
    "text.hidden_size",
    "text.nhead",
    "text.encoder_layers",
    "text.dim_feedforward",
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
    /// `[text]`: the tokenizer, the document length and the text models' sizes
    /// (`train.task = "text"` only).
    pub text: TextConfig,
}

/// What a run trains on (`train.task`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    /// Image classification from an ImageFolder (the default).
    #[default]
    Image,
    /// Text classification from a TextFolder (`train/<class>/*.txt`).
    Text,
}

impl TaskKind {
    /// The word as written in TOML (`text`).
    pub fn name(self) -> &'static str {
        match self {
            TaskKind::Image => "image",
            TaskKind::Text => "text",
        }
    }
}

/// The text models `model.name` may name when `train.task = "text"`.
pub const TEXT_MODELS: &[&str] = &["fasttext", "textcnn", "bilstm", "transformer"];

/// The `[text]` section, read when `train.task = "text"`: the tokenizer, the longest document
/// the models see and the sizes of the text models (`torchlight_nn::TextClassifierConfig`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TextConfig {
    /// Documents are cut to this many tokens in the batches (the share cut is printed at the
    /// start of a run); also the transformer's positional table. 256.
    pub max_len: usize,
    /// The word vocabulary keeps words seen at least this often in the training split; 1.
    pub min_freq: usize,
    /// The most entries of the word vocabulary, `[PAD]` and `[UNK]` included; 30000.
    pub max_vocab: usize,
    /// Lower-case words before counting and looking them up; true.
    pub lowercase: bool,
    /// A Hugging Face `tokenizer.json` to use instead of a word vocabulary built from the
    /// training split; its padding token must have id 0 (`[PAD]` in BERT's). `None` (the
    /// default) builds the word vocabulary.
    pub tokenizer: Option<PathBuf>,
    /// The column (CSV/TSV header name, JSON-lines key) holding a record's text when
    /// `data.root` is a records file or folder; `"text"`.
    pub text_column: String,
    /// The column holding a record's label (a class name; JSON integers are read as their
    /// decimal text); `"label"`.
    pub label_column: String,
    /// Batch training documents of similar length (torchlight_text's `BucketSampler`: a seeded
    /// shuffle per epoch, pools of 100 batches sorted by length, full batches shuffled), so
    /// less of each batch is padding; validation and test stay unbucketed. false.
    pub bucket: bool,
    /// Token embedding width (the transformer's `d_model`); 128.
    pub embed_dim: usize,
    /// Dropout before the classifier (TextCnn, BiLSTM); Kim (2014)'s 0.5.
    pub dropout: f64,
    /// TextCnn's filters per width (widths 3, 4, 5); 100.
    pub num_filters: usize,
    /// The BiLSTM's hidden size per direction; 128.
    pub hidden_size: usize,
    /// The transformer's attention heads (`embed_dim` must divide by it); 4.
    pub nhead: usize,
    /// The transformer's encoder layers; 2.
    pub encoder_layers: usize,
    /// The transformer's feed-forward width; 512.
    pub dim_feedforward: usize,
}

impl Default for TextConfig {
    fn default() -> Self {
        TextConfig {
            max_len: 256,
            min_freq: 1,
            max_vocab: 30_000,
            lowercase: true,
            tokenizer: None,
            text_column: "text".to_string(),
            label_column: "label".to_string(),
            bucket: false,
            embed_dim: 128,
            dropout: 0.5,
            num_filters: 100,
            hidden_size: 128,
            nhead: 4,
            encoder_layers: 2,
            dim_feedforward: 512,
        }
    }
}

/// The `[data]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// An ImageFolder root holding `train/`, and optionally `val/` and `test/`. Default `data`.
    pub root: PathBuf,
    /// Side of the square images fed to the model. Unset, a Hub model folder's
    /// `pretrained_cfg.input_size` decides, else torchvision's 224
    /// ([`DataConfig::image_size`]); a run's config.toml records the value in effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_size: Option<u32>,
    /// Loader worker threads, like `DataLoader(num_workers=4)`. 0 loads on the training thread.
    pub workers: usize,
    /// Fraction of `train/` held out (seeded, stratified) as validation when there is no
    /// `val/`. Default 0.1.
    pub val_fraction: f64,
    /// RandomResizedCrop's smallest crop, as a fraction of the image area: torchvision's 0.08.
    /// Raise it when the object fills little of the image and small crops would miss it.
    pub min_crop_scale: f64,
    /// How training batches are drawn: `random` (a shuffle per epoch, the default) or
    /// `weighted` (`WeightedRandomSampler` with each image weighted by the inverse of its
    /// class's count, so every class is drawn equally often: the fix for class imbalance).
    #[serde(deserialize_with = "word")]
    pub sampler: SamplerKind,
    /// The most pixels an image file may declare in its header; larger ones are refused before
    /// decoding (a decompression bomb guard, and half of it warns). Pillow's limit by default,
    /// [`DEFAULT_MAX_IMAGE_PIXELS`](torchlight_vision::DEFAULT_MAX_IMAGE_PIXELS) = 178956970;
    /// 0 lifts the limit.
    pub max_image_pixels: u64,
    /// Turn each image by its EXIF orientation (`PIL.ImageOps.exif_transpose`), so a phone photo
    /// taken on its side is upright: the default. `false` decodes as torchvision's loader
    /// does (`Image.open(f).convert("RGB")`, no turning), byte for byte.
    pub exif_transpose: bool,
    /// torchvision's `--ra-reps` with `--ra-sampler`: above 1, training batches come from its
    /// repeated-augmentation `RASampler`, each image listed this many times in a row and the
    /// copies dealt to consecutive ranks (each copy augmented anew), the epoch as long as
    /// without repeats (`ceil(images / ranks)` per rank; torchvision rounds it down to a
    /// multiple of 256 images, which would empty an epoch of a small set). 1 (the default)
    /// draws each image once.
    pub ra_reps: usize,
    /// torchvision's `--auto-augment`: `none` (the default), `ta_wide` (`TrivialAugmentWide`),
    /// `ra` (`RandAugment(magnitude=data.ra_magnitude)`), `augmix`
    /// (`AugMix(severity=data.augmix_severity)`), or AutoAugment with the `imagenet`, `cifar10`
    /// or `svhn` policy, applied after the crop and flip as torchvision's preset does, with
    /// `interpolation=data.interpolation` as its reference script passes it (`augmix` takes
    /// `bilinear` or `nearest` only, as torchvision's tensor ops).
    #[serde(deserialize_with = "word")]
    pub auto_augment: AutoAugmentKind,
    /// torchvision's `--ra-magnitude`: RandAugment's magnitude bin (of 31, so 0 to 30) with
    /// `data.auto_augment = "ra"`; 9 by default.
    pub ra_magnitude: usize,
    /// torchvision's `--augmix-severity`: AugMix's severity (1 to 10) with
    /// `data.auto_augment = "augmix"`; 3 by default.
    pub augmix_severity: usize,
    /// torchvision's `--random-erase`: the probability of `RandomErasing` on the normalised
    /// tensor, the last step. 0 (the default) leaves it out.
    pub random_erase: f64,
    /// torchvision's `--hflip-prob`: the probability of `RandomHorizontalFlip` after the crop,
    /// 0.5 by default; 0 leaves the step out (torchvision's preset then makes no draw for it).
    #[serde(skip_serializing_if = "is_default_hflip")]
    pub hflip: f64,
    /// timm's `--color-jitter`: `ColorJitter(c, c, c)` (brightness, contrast and saturation
    /// factors in `[max(0, 1 - c), 1 + c]`, no hue) after the flip and rotation, 0.4 being timm's
    /// usual value. 0 (the default) leaves it out.
    #[serde(skip_serializing_if = "is_zero")]
    pub color_jitter: f64,
    /// `RandomRotation(degrees)` after the flip: an angle uniform in `(-degrees, degrees)`,
    /// nearest sampling, corners filled with 0, the image's size kept. 0 (the default) leaves
    /// it out.
    #[serde(skip_serializing_if = "is_zero")]
    pub rotation: f64,
    /// torchvision's `--interpolation`: how the train crop (RandomResizedCrop) and the
    /// evaluation resize sample images, `bilinear`, `bicubic` or `nearest`, each PIL's
    /// (antialiased when shrinking, nearest aside). Exported models and `predict` resize the
    /// same way. Unset, a Hub model folder's `pretrained_cfg.interpolation` decides, else
    /// `bilinear` ([`DataConfig::interpolation`]).
    #[serde(deserialize_with = "optional_word", skip_serializing_if = "Option::is_none")]
    pub interpolation: Option<Interpolation>,
    /// timm's `crop_pct`: the evaluation resize is `floor(image_size / crop_pct)` before the
    /// centre crop of `image_size` (above 1, as timm allows, the crop pads with zeros). Unset, a Hub model folder's `pretrained_cfg.crop_pct`
    /// decides, else torchvision's `image_size * 256 / 224` (the same as 0.875).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crop_pct: Option<f64>,
    /// timm's `test_input_size`: the side evaluation (validation, test, eval, predict and the
    /// exported model) uses. Unset, a Hub model folder's `pretrained_cfg.test_input_size`
    /// decides when `data.image_size` is unset too (timm's `resolve_data_config(...,
    /// use_test_size=True)`), else `data.image_size` ([`DataConfig::eval_image_size`]). An
    /// architecture whose parameters depend on the size (a ViT) needs both equal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval_image_size: Option<u32>,
    /// timm's `test_crop_pct`: `crop_pct` at evaluation. Unset, a Hub model folder's
    /// `pretrained_cfg.test_crop_pct` decides when `data.crop_pct` is unset too, else
    /// `data.crop_pct`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval_crop_pct: Option<f64>,
    /// timm's evaluation `crop_mode`: `center` (resize the shorter side, then the centre crop;
    /// torchvision's preset) or `squash` (both sides resized to `floor(size / crop_pct)`, the
    /// aspect ratio not kept, then the centre crop). Unset, a Hub model folder's
    /// `pretrained_cfg.crop_mode` decides, else `center`. timm's `border` is not built.
    #[serde(deserialize_with = "optional_word", skip_serializing_if = "Option::is_none")]
    pub crop_mode: Option<CropMode>,
    /// The per-channel RGB mean both transforms normalise with. Unset, a Hub model folder's
    /// `pretrained_cfg.mean` decides, else ImageNet's `[0.485, 0.456, 0.406]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean: Option<[f64; 3]>,
    /// The per-channel RGB standard deviation both transforms normalise with. Unset, a Hub
    /// model folder's `pretrained_cfg.std` decides, else ImageNet's `[0.229, 0.224, 0.225]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub std: Option<[f64; 3]>,
}

/// `data.hflip` at its default, left out of written configs so they stay as they were.
fn is_default_hflip(p: &f64) -> bool {
    *p == 0.5
}

/// A strength at 0 (off), left out of written configs so they stay as they were.
fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// timm's evaluation crop mode (`data.crop_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CropMode {
    /// Resize the shorter side, keep the aspect ratio, centre crop.
    #[default]
    Center,
    /// Resize both sides to the same size, then centre crop.
    Squash,
}

impl CropMode {
    /// The vision crate's mode.
    pub fn mode(self) -> torchlight_vision::CropMode {
        match self {
            CropMode::Center => torchlight_vision::CropMode::Center,
            CropMode::Squash => torchlight_vision::CropMode::Squash,
        }
    }
}

/// How images are resized (`data.interpolation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interpolation {
    /// `InterpolationMode.BILINEAR`, torchvision's default.
    #[default]
    Bilinear,
    /// `InterpolationMode.BICUBIC` (timm's usual choice).
    Bicubic,
    /// `InterpolationMode.NEAREST`.
    Nearest,
}

impl Interpolation {
    /// The vision crate's mode.
    pub fn mode(self) -> torchlight_vision::InterpolationMode {
        match self {
            Interpolation::Bilinear => torchlight_vision::InterpolationMode::Bilinear,
            Interpolation::Bicubic => torchlight_vision::InterpolationMode::Bicubic,
            Interpolation::Nearest => torchlight_vision::InterpolationMode::Nearest,
        }
    }
}

/// The automatic augmentation policy of the train transform (`data.auto_augment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AutoAugmentKind {
    /// No policy.
    #[default]
    None,
    /// `TrivialAugmentWide()`.
    TaWide,
    /// `RandAugment(magnitude=data.ra_magnitude)` (2 ops at that bin of 31).
    Ra,
    /// `AugMix(severity=data.augmix_severity)`.
    Augmix,
    /// `AutoAugment(AutoAugmentPolicy.IMAGENET)`.
    Imagenet,
    /// `AutoAugment(AutoAugmentPolicy.CIFAR10)`.
    Cifar10,
    /// `AutoAugment(AutoAugmentPolicy.SVHN)`.
    Svhn,
}

/// How training samples are drawn (`data.sampler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SamplerKind {
    /// A new random order every epoch.
    #[default]
    Random,
    /// `WeightedRandomSampler` with replacement, class-balanced weights.
    Weighted,
}

/// Per-class weights of the training loss (`train.class_weights`; with `train.bce_loss`, timm's
/// `BinaryCrossEntropy(weight=)`): `"none"` (the
/// default), `"balanced"` (scikit-learn's `n_samples / (n_classes * count)` per class, from the
/// training split) or a list with one weight per class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ClassWeights {
    /// `"none"` or `"balanced"`.
    Named(ClassWeightsKind),
    /// One weight per class, in class order.
    Given(Vec<f64>),
}

/// The named choices of [`ClassWeights`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClassWeightsKind {
    /// Every class weighs 1.
    None,
    /// Inverse class frequency.
    Balanced,
}

impl Default for ClassWeights {
    fn default() -> Self {
        ClassWeights::Named(ClassWeightsKind::None)
    }
}

/// What the lr schedule does when a finished run is resumed with more epochs
/// (`train.extend_schedule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExtendSchedule {
    /// The schedule is rebuilt for the new epoch count and continues from the epoch reached
    /// (a cosine schedule is stretched), the default.
    #[default]
    Continue,
    /// A fresh schedule (warm-up included) over the added epochs, starting again from the
    /// configured learning rates: a warm restart.
    Restart,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            root: PathBuf::from("data"),
            image_size: None,
            workers: 4,
            val_fraction: 0.1,
            min_crop_scale: 0.08,
            sampler: SamplerKind::Random,
            max_image_pixels: torchlight_vision::DEFAULT_MAX_IMAGE_PIXELS,
            exif_transpose: true,
            ra_reps: 1,
            auto_augment: AutoAugmentKind::None,
            ra_magnitude: 9,
            augmix_severity: 3,
            random_erase: 0.0,
            hflip: 0.5,
            color_jitter: 0.0,
            rotation: 0.0,
            interpolation: None,
            crop_pct: None,
            eval_image_size: None,
            eval_crop_pct: None,
            crop_mode: None,
            mean: None,
            std: None,
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
    /// The image side in effect: [`image_size`](Self::image_size), [`DEFAULT_IMAGE_SIZE`]
    /// when unset.
    pub fn image_size(&self) -> u32 {
        self.image_size.unwrap_or(DEFAULT_IMAGE_SIZE)
    }
    /// The evaluation side in effect: [`eval_image_size`](Self::eval_image_size), else
    /// [`image_size()`](Self::image_size).
    pub fn eval_image_size(&self) -> u32 {
        self.eval_image_size.unwrap_or_else(|| self.image_size())
    }
    /// The evaluation `crop_pct` in effect: [`eval_crop_pct`](Self::eval_crop_pct), else
    /// [`crop_pct`](Self::crop_pct) (`None`: torchvision's `size * 256 / 224`).
    pub fn eval_crop_pct(&self) -> Option<f64> {
        self.eval_crop_pct.or(self.crop_pct)
    }
    /// The resize sampling in effect: [`interpolation`](Self::interpolation), `bilinear` when unset.
    pub fn interpolation(&self) -> Interpolation {
        self.interpolation.unwrap_or_default()
    }
    /// The normalisation mean in effect: [`mean`](Self::mean), ImageNet's when unset.
    pub fn mean(&self) -> [f32; 3] {
        self.mean.map_or(torchlight_vision::IMAGENET_MEAN, |m| m.map(|x| x as f32))
    }
    /// The normalisation std in effect: [`std`](Self::std), ImageNet's when unset.
    pub fn std(&self) -> [f32; 3] {
        self.std.map_or(torchlight_vision::IMAGENET_STD, |m| m.map(|x| x as f32))
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
    /// Architecture, a name of the registry (`torchlight_nn::architecture_names()`: the ResNet
    /// family with timm's `d` variants, MobileNetV2/V3, EfficientNet, ConvNeXt, ViT and any registered by the program;
    /// timm's ViT/DeiT names are aliases of the same modules, `torchlight_nn::ARCHITECTURE_ALIASES`).
    /// Default `resnet18`.
    pub name: String,
    /// Starting weights: a torchvision `.pth`, a safetensors file, a PyTorch Lightning `.ckpt`
    /// or any checkpoint holding a state_dict under `state_dict` / `model_state_dict` /
    /// `model`; wrapper prefixes every key has (DDP's `module.`, Lightning's `model.`) are
    /// stripped. `None` starts from torchvision's initialisation.
    pub pretrained: Option<PathBuf>,
    /// Rewrites of the pretrained file's keys before they are matched, `"FROM=TO"` prefix
    /// replacements tried in order (`"backbone.="` strips `backbone.`); empty by default. A
    /// strict load that still does not match names the keys and suggests a rewrite.
    pub key_rewrite: Vec<String>,
    /// Classes of the new head; `None` takes the number of class folders in the data.
    pub num_classes: Option<usize>,
    /// Epochs during which only the head trains (backbone frozen); 0 trains everything from
    /// the start.
    pub freeze_epochs: usize,
    /// Keep every BatchNorm fixed for the whole run (timm's `freeze_batch_norm_2d`,
    /// Lightning's `BaseFinetuning.freeze(train_bn=False)`): running statistics used and never
    /// updated, weight and bias not trained, also once `freeze_epochs` unfreeze the backbone.
    /// The fix for fine-tuning with batches too small for good batch statistics. Default off.
    pub freeze_bn: bool,
    /// Keep the BatchNorms of the frozen backbone fixed during the `freeze_epochs` too
    /// (running statistics used, not updated), as Lightning's `BackboneFinetuning(train_bn=False)`;
    /// they train again with the backbone. Off by default (Lightning's `train_bn=True`: the
    /// statistics adapt to the new data while the weights are frozen). Needs `freeze_epochs`;
    /// refused beside `freeze_bn`, which already keeps them fixed for the whole run. Not
    /// changeable on resume (it changes what the run learns).
    pub freeze_bn_while_frozen: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            name: "resnet18".to_string(),
            pretrained: None,
            key_rewrite: Vec::new(),
            num_classes: None,
            freeze_epochs: 0,
            freeze_bn: false,
            freeze_bn_while_frozen: false,
        }
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

/// The `[optim]` section. The parameter groups (optim's `ParamGroupBuilder`): the new head at
/// `lr`, the backbone at [`TrainConfig::backbone_lr`] (after any frozen epochs: `lr` from
/// scratch, a tenth of it when fine-tuning pretrained weights), each with `weight_decay`
/// except 1-D parameters (biases, norm weights), which get none; `norm_weight_decay`,
/// `bias_weight_decay` and `layer_decay` refine this as torchvision's reference recipe and
/// timm do. `torchlight summary --config FILE` prints the groups a model gets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimConfig {
    /// `adamw` (default), `adam` or `sgd`.
    #[serde(deserialize_with = "word")]
    pub optimizer: OptimizerKind,
    /// Learning rate of the head (and of everything when the model has no separate head);
    /// AdamW's default 1e-3.
    pub lr: f64,
    /// Learning rate of the backbone once unfrozen. Unset (the default), it follows the run:
    /// `lr` when the model trains from scratch (no `model.pretrained`), as a PyTorch script
    /// with one optimizer lr trains every parameter, and `lr / 10`, the usual fine-tuning
    /// ratio, when pretrained weights are loaded ([`TrainConfig::backbone_lr`]). Set, it is
    /// the backbone's rate either way.
    pub backbone_lr: Option<f64>,
    /// Weight decay; AdamW's default 0.01.
    pub weight_decay: f64,
    /// SGD momentum (ignored by Adam/AdamW); 0.9.
    pub momentum: f64,
    /// Adam/AdamW `betas`; PyTorch's `(0.9, 0.999)`.
    pub betas: [f64; 2],
    /// Epochs of linear warm-up from 0 to the group lrs before the scheduler takes over.
    pub warmup_epochs: usize,
    /// torchvision's `--norm-weight-decay`: the weight decay of every normalisation layer's
    /// parameters (BatchNorm, LayerNorm, GroupNorm, ...), in groups of their own; `None` (the
    /// default) leaves them to the 1-D rule (no decay).
    pub norm_weight_decay: Option<f64>,
    /// torchvision's `--bias-weight-decay`: the weight decay of every parameter named `bias`
    /// (norms' too; it wins over `norm_weight_decay`), in groups of their own; `None` (the
    /// default) leaves them to the other rules.
    pub bias_weight_decay: Option<f64>,
    /// timm's `--layer-decay`: layer-wise lr decay in (0, 1]; each layer's lr (the head's
    /// `lr`, the backbone's `backbone_lr`) is multiplied by `layer_decay ^ (top - layer)`,
    /// the layers numbered as timm numbers the same model's (one per ResNet, MobileNet,
    /// EfficientNet, ConvNeXt or ViT block, the stem at 0, the head on top;
    /// `torchlight_nn::Architecture::layer_ids`). `None` (the default): no layer decay.
    pub layer_decay: Option<f64>,
}

impl Default for OptimConfig {
    fn default() -> Self {
        OptimConfig {
            optimizer: OptimizerKind::AdamW,
            lr: 1e-3,
            backbone_lr: None,
            weight_decay: 0.01,
            momentum: 0.9,
            betas: [0.9, 0.999],
            warmup_epochs: 0,
            norm_weight_decay: None,
            bias_weight_decay: None,
            layer_decay: None,
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
    /// `ReduceLROnPlateau`: multiply every group's lr by `factor` once `monitor` has not
    /// improved for more than `patience` epochs, stepped after each validation. The
    /// parameters are torch's, with its defaults; `monitor` is Lightning's.
    Plateau {
        /// The metric it watches: `val_loss` (the default), `val_acc`, `val_top<k>`,
        /// `train_loss` or `train_acc`.
        #[serde(default = "default_monitor")]
        monitor: String,
        /// `min` (lower is better, the default) or `max`.
        #[serde(default = "default_plateau_mode")]
        mode: String,
        /// The lr is multiplied by this; 0.1, in (0, 1).
        #[serde(default = "default_gamma")]
        factor: f64,
        /// Epochs without improvement tolerated before a cut; 10.
        #[serde(default = "default_patience")]
        patience: usize,
        /// What counts as an improvement (see `threshold_mode`); 1e-4.
        #[serde(default = "default_threshold")]
        threshold: f64,
        /// `rel` (better than `best * (1 -/+ threshold)`, the default) or `abs`.
        #[serde(default = "default_threshold_mode")]
        threshold_mode: String,
        /// Epochs to wait after a cut before counting again; 0.
        #[serde(default)]
        cooldown: usize,
        /// Lower bound of every group's lr; 0.
        #[serde(default)]
        min_lr: f64,
        /// A cut smaller than this is not applied; 1e-8.
        #[serde(default = "default_plateau_eps")]
        eps: f64,
    },
}

fn default_monitor() -> String {
    "val_loss".into()
}
fn default_plateau_mode() -> String {
    "min".into()
}
fn default_patience() -> usize {
    10
}
fn default_threshold() -> f64 {
    1e-4
}
fn default_threshold_mode() -> String {
    "rel".into()
}
fn default_plateau_eps() -> f64 {
    1e-8
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
            SchedulerConfig::Plateau { .. } => "plateau",
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
    /// Seed for `seed_everything`, the split, shuffling and augmentation; 0. At most
    /// 9223372036854775807 (`i64::MAX`: TOML integers are 64-bit signed), as `--seed` takes.
    pub seed: u64,
    /// Mixed precision: fp16 autocast with a GradScaler on CUDA, bf16 autocast on CPU.
    pub amp: bool,
    /// `CrossEntropyLoss(label_smoothing=...)`; 0. With Mixup/CutMix on it is folded into
    /// their soft targets (timm's way, the same loss).
    pub label_smoothing: f64,
    /// Mixup's Beta(alpha, alpha) (torchvision's `--mixup-alpha`, `v2.MixUp`); 0 is off.
    pub mixup_alpha: f64,
    /// CutMix's Beta(alpha, alpha) (torchvision's `--cutmix-alpha`, `v2.CutMix`); 0 is off.
    /// With both on, each batch gets one of the two (`v2.RandomChoice`).
    pub cutmix_alpha: f64,
    /// The probability of mixing a batch at all (timm's `--mixup-prob`); 1.
    pub mixup_prob: f64,
    /// The probability of CutMix rather than Mixup when both are on (timm's
    /// `--mixup-switch-prob`); 0.5, torchvision's even choice.
    pub mixup_switch_prob: f64,
    /// Stop mixing after this many epochs (timm's `--mixup-off-epoch`: 8 mixes epochs 1-8 and
    /// not the later ones); `None` mixes every epoch.
    pub mixup_off_epoch: Option<usize>,
    /// Train with timm's binary cross-entropy (`--bce-loss`): `binary_cross_entropy_with_logits`
    /// over every logit against the soft targets (Mixup/CutMix's) or the one-hot labels
    /// smoothed by `label_smoothing` as timm smooths them, `class_weights` scaling each class's
    /// column (timm's `weight=`); off (cross-entropy). Validation is plain cross-entropy either
    /// way.
    pub bce_loss: bool,
    /// timm's `--bce-target-thresh`: with `bce_loss`, every target becomes 1 above this and 0
    /// otherwise (in [0, 1)); `None` keeps the soft targets.
    pub bce_target_thresh: Option<f64>,
    /// Keep an exponential moving average of the weights (torchvision's `--model-ema`),
    /// validated each epoch beside the raw model (`ema_val_*` in metrics.csv); off.
    pub model_ema: bool,
    /// The EMA decay (torchvision's `--model-ema-decay`, 0.99998), adjusted as its script does
    /// for the batch size, world size, `model_ema_steps` and epochs.
    pub model_ema_decay: f64,
    /// Update the EMA every this many optimizer steps of an epoch (torchvision's
    /// `--model-ema-steps`, 32); during `optim.warmup_epochs` the EMA copies the weights.
    pub model_ema_steps: u64,
    /// timm's EMA instead (`ModelEmaV3` with `--model-ema-warmup`): updated after every
    /// optimizer step with the warm-up decay `1 - (1 + step)^(-2/3)`, capped at
    /// `model_ema_decay` (not adjusted); needs `model_ema`.
    pub model_ema_warmup: bool,
    /// Synchronised BatchNorm in a data-parallel run (`torch.nn.SyncBatchNorm.
    /// convert_sync_batchnorm`, torchvision's `--sync-bn`): each BatchNorm normalises a
    /// training batch with the mean and variance of every rank's batch together, and its
    /// running statistics follow the global batch, at the cost of a collective per BatchNorm
    /// in each forward and backward pass; off. A single process trains with plain BatchNorm
    /// (the same thing) and says so; frozen BatchNorms (`model.freeze_bn`) stay plain.
    /// Checkpoints and exports are unchanged. Image runs only (the text models have no
    /// BatchNorm).
    pub sync_bn: bool,
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
    #[serde(deserialize_with = "word")]
    pub on_nonfinite: NonFiniteAction,
    /// Finish with success even when a validation figure (loss, accuracy, also of the EMA
    /// weights) was NaN or Inf. Off by default: such a run says so at the end and fails (exit
    /// status 1), after saving everything; its non-finite epochs are never `best`.
    pub allow_nonfinite_val: bool,
    /// Class weights of the training loss (the cross-entropy's, or the BCE's with `bce_loss`):
    /// `"none"`, `"balanced"` or one weight per class; validation is unweighted.
    pub class_weights: ClassWeights,
    /// Also save `checkpoints/last` every this many optimizer steps, mid-epoch (a run killed
    /// or interrupted resumes at the exact batch); `None` saves after every epoch only.
    pub checkpoint_every_steps: Option<u64>,
    /// When a finished run is resumed with more epochs: `continue` the schedule over the new
    /// length (the default) or `restart` it over the added epochs.
    #[serde(deserialize_with = "word")]
    pub extend_schedule: ExtendSchedule,
    /// `auto`, `cpu`, `cuda` or `cuda:N`.
    pub device: String,
    /// Parent folder of the run folders (`runs/exp_001`, ...).
    pub out_dir: PathBuf,
    /// What the run trains: `image` (the default, an ImageFolder) or `text` (a TextFolder, a
    /// tokenizer and a text model from `[text]`; `model.name` one of `fasttext`, `textcnn`,
    /// `bilstm`, `transformer`).
    #[serde(deserialize_with = "word")]
    pub task: TaskKind,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            epochs: 10,
            batch_size: 32,
            seed: 0,
            amp: false,
            label_smoothing: 0.0,
            mixup_alpha: 0.0,
            cutmix_alpha: 0.0,
            mixup_prob: 1.0,
            mixup_switch_prob: 0.5,
            mixup_off_epoch: None,
            bce_loss: false,
            bce_target_thresh: None,
            model_ema: false,
            model_ema_decay: 0.99998,
            model_ema_steps: 32,
            model_ema_warmup: false,
            sync_bn: false,
            grad_clip: None,
            accumulation_steps: 1,
            early_stopping_patience: None,
            top_k: 5,
            log_interval: 50,
            on_nonfinite: NonFiniteAction::Stop,
            allow_nonfinite_val: false,
            class_weights: ClassWeights::default(),
            checkpoint_every_steps: None,
            extend_schedule: ExtendSchedule::Continue,
            device: "auto".to_string(),
            out_dir: PathBuf::from("runs"),
            task: TaskKind::Image,
        }
    }
}

impl LoopConfig {
    /// [`device`](Self::device) parsed (`auto` is resolved later, by
    /// [`DeviceSpec::resolve`]); an error naming `train.device` when it does not parse.
    pub fn device_spec(&self) -> Result<DeviceSpec> {
        self.device.parse::<DeviceSpec>().map_err(|e| RecipeError::InvalidConfig {
            field: "train.device".to_string(),
            value: format!("{:?}", self.device),
            reason: e.to_string(),
        })
    }
}

impl TrainConfig {
    /// The learning rate the backbone trains at once unfrozen: `optim.backbone_lr` when set;
    /// otherwise `optim.lr` from scratch (every parameter at the lr the user asked for, as one
    /// `torch.optim` lr does) and `optim.lr / 10` when `model.pretrained` loads weights to
    /// fine-tune.
    pub fn backbone_lr(&self) -> f64 {
        let o = &self.optim;
        o.backbone_lr.unwrap_or(if self.model.pretrained.is_some() { o.lr / 10.0 } else { o.lr })
    }

    /// Where [`backbone_lr`](Self::backbone_lr) comes from, as the start of a run says it.
    pub fn backbone_lr_rule(&self) -> &'static str {
        match (self.optim.backbone_lr, self.model.pretrained.is_some()) {
            (Some(_), _) => "optim.backbone_lr",
            (None, true) => "optim.lr / 10, fine-tuning model.pretrained; set optim.backbone_lr to change it",
            (None, false) => "optim.lr, training from scratch; set optim.backbone_lr to change it",
        }
    }

    /// Reads a TOML config file. Does not [`validate`](Self::validate): apply overrides first.
    /// Errors name the file, and the line and column where the parser knows them; a path that
    /// is not a regular file (a FIFO, a device) is refused before it is opened.
    pub fn from_toml_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        // Checked before opening: opening a FIFO blocks, and a device like /dev/zero never ends.
        let meta = std::fs::metadata(path).map_err(|e| RecipeError::io(path, e))?;
        if !meta.is_file() {
            let what =
                if meta.is_dir() { "a folder" } else { "not a regular file (a FIFO, socket or device)" };
            let e = std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("is {what}, not a TOML config file"),
            );
            return Err(RecipeError::io(path, e));
        }
        let text = std::fs::read_to_string(path).map_err(|e| RecipeError::io(path, e))?;
        Self::parse(&text, path)
    }

    /// Parses TOML text (errors name `<string>` as the file).
    pub fn from_toml_str(text: &str) -> Result<Self> {
        Self::parse(text, Path::new("<string>"))
    }

    fn parse(text: &str, path: &Path) -> Result<Self> {
        toml::from_str(text).map_err(|e| {
            let mut message = one_line(e.message());
            let (line, column) = match e.span() {
                Some(span) => {
                    let before = &text[..span.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                    if let Some(key) = key_of_value_at(before) {
                        message = format!("`{key}`: {message}");
                    }
                    (Some(line), Some(column))
                }
                None => (None, None),
            };
            RecipeError::ConfigParse { path: path.to_path_buf(), line, column, message }
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
        std::fs::write(path, self.to_toml()).map_err(|e| RecipeError::io(path, e))
    }
}

/// The dotted key (`data.interpolation`) whose value starts where `before` (the config text
/// up to an error's position) ends, when that is the value of a `key = value` line: serde's
/// messages about a value ("unknown variant", "invalid type") do not name the key.
fn key_of_value_at(before: &str) -> Option<String> {
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let key = before[line_start..].trim_end().strip_suffix('=')?.trim();
    if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return None;
    }
    let section = before[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find_map(|l| l.strip_prefix('[').and_then(|l| l.strip_suffix(']')))
        .map(str::trim);
    Some(match section {
        Some(section) if !section.is_empty() => format!("{section}.{key}"),
        _ => key.to_string(),
    })
}

/// Deserializes a field that is one word of a unit enum (`data.auto_augment = "ra"`): anything
/// but a string is "expected a string" with the words listed, where serde's derived enum would
/// say "unit variant" or TOML "wanted string or table".
fn word<'de, D, T>(deserializer: D) -> std::result::Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    struct Word<T>(std::marker::PhantomData<T>);
    impl<T: serde::de::DeserializeOwned> serde::de::Visitor<'_> for Word<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "a string: {}", words::<T>())
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<T, E> {
            T::deserialize(serde::de::value::StrDeserializer::<E>::new(v))
        }
    }
    deserializer.deserialize_str(Word(std::marker::PhantomData))
}

/// [`word`] for an optional field: a word is `Some`, JSON's `null` (a model card) `None`.
fn optional_word<'de, D, T>(deserializer: D) -> std::result::Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    struct Maybe<T>(std::marker::PhantomData<T>);
    impl<'de, T: serde::de::DeserializeOwned> serde::de::Visitor<'de> for Maybe<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "a string: {}", words::<T>())
        }
        fn visit_none<E: serde::de::Error>(self) -> std::result::Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_some<D2: serde::Deserializer<'de>>(
            self,
            d: D2,
        ) -> std::result::Result<Option<T>, D2::Error> {
            word(d).map(Some)
        }
    }
    deserializer.deserialize_option(Maybe(std::marker::PhantomData))
}

/// The words a unit enum takes, as serde lists them when refusing one (`` `a`, `b` or `c` ``).
fn words<T: serde::de::DeserializeOwned>() -> String {
    let probe = serde::de::value::StrDeserializer::<serde::de::value::Error>::new("\u{0}");
    match T::deserialize(probe) {
        Err(e) => {
            let text = e.to_string();
            let list = text.split_once("expected ").map_or(text.as_str(), |(_, l)| l);
            list.strip_prefix("one of ").unwrap_or(list).to_string()
        }
        Ok(_) => String::new(),
    }
}

/// A parser message on one line (TOML's syntax errors span several), with serde's Rust type
/// names in words: "expected usize" is "expected a whole number (0 or more)".
pub(crate) fn one_line(message: &str) -> String {
    let line = message.trim().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
    plain_types(&line)
}

/// `expected u64` (and the other integer and float types serde names) in words.
fn plain_types(message: &str) -> String {
    const WORDS: &[(&str, &str)] = &[
        ("usize", "a whole number (0 or more)"),
        ("u64", "a whole number (0 or more)"),
        ("u32", "a whole number (0 or more)"),
        ("u16", "a whole number (0 or more)"),
        ("u8", "a whole number (0 or more)"),
        ("i64", "a whole number"),
        ("i32", "a whole number"),
        ("f64", "a number"),
        ("f32", "a number"),
    ];
    let mut out = message.to_string();
    for (rust, words) in WORDS {
        let pattern = format!("expected {rust}");
        let mut from = 0;
        while let Some(i) = out[from..].find(&pattern).map(|i| i + from) {
            let end = i + pattern.len();
            if out[end..].chars().next().is_some_and(|c| c.is_alphanumeric() || c == '_') {
                from = end;
                continue;
            }
            let replacement = format!("expected {words}");
            out.replace_range(i..end, &replacement);
            from = i + replacement.len();
        }
    }
    out
}
