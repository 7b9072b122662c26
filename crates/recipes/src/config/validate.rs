//! [`TrainConfig::validate`]: every value training depends on, checked before any work, with
//! errors naming the field, its value and why.

use super::{
    AutoAugmentKind, ClassWeights, Interpolation, SamplerKind, SchedulerConfig, TaskKind, TrainConfig,
    TEXT_MODELS,
};

/// The largest `data.image_size`: 8K pixels a side (a 3-channel float image of 768 MiB).
pub const MAX_IMAGE_SIZE: u32 = 8192;
/// The most loader threads.
pub const MAX_WORKERS: usize = 256;
/// The most repeats of `data.ra_reps` (torchvision's default is 3).
pub const MAX_RA_REPS: usize = 64;
/// The most classes a head may have.
pub const MAX_CLASSES: usize = 1_000_000;
/// The largest batch of float32 inputs, in bytes (64 GiB): larger is a typo, not a plan.
pub const MAX_BATCH_BYTES: u128 = 64 << 30;
use crate::error::{RecipeError, Result};

impl TrainConfig {
    /// Checks every value training depends on; the error names the first invalid field,
    /// its value and why. Call after all overrides.
    pub fn validate(&self) -> Result<()> {
        fn invalid(field: &str, value: impl ToString, reason: &str) -> Result<()> {
            Err(RecipeError::InvalidConfig {
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
        if d.image_size == Some(0) {
            invalid("data.image_size", 0, "must be at least 1 pixel")?;
        }
        if d.image_size() > MAX_IMAGE_SIZE {
            invalid("data.image_size", d.image_size(), &format!("must be at most {MAX_IMAGE_SIZE} pixels"))?;
        }
        if d.workers > MAX_WORKERS {
            invalid("data.workers", d.workers, &format!("must be at most {MAX_WORKERS} threads"))?;
        }
        if !(d.val_fraction > 0.0 && d.val_fraction < 1.0) {
            invalid("data.val_fraction", d.val_fraction, "must be in (0, 1)")?;
        }
        if d.ra_reps == 0 || d.ra_reps > MAX_RA_REPS {
            invalid("data.ra_reps", d.ra_reps, &format!("must be between 1 (no repeats) and {MAX_RA_REPS}"))?;
        }
        if d.ra_reps > 1 && d.sampler == SamplerKind::Weighted {
            invalid(
                "data.ra_reps",
                d.ra_reps,
                "repeated augmentation draws its own order and cannot be combined with data.sampler = \"weighted\"",
            )?;
        }
        if d.ra_magnitude > 30 {
            invalid(
                "data.ra_magnitude",
                d.ra_magnitude,
                "is RandAugment's magnitude bin of 31, from 0 to 30",
            )?;
        }
        if !(1..=10).contains(&d.augmix_severity) {
            invalid("data.augmix_severity", d.augmix_severity, "is AugMix's severity, from 1 to 10")?;
        }
        if d.auto_augment == AutoAugmentKind::Augmix && d.interpolation() == Interpolation::Bicubic {
            invalid(
                "data.interpolation",
                "\"bicubic\"",
                "data.auto_augment = \"augmix\" runs torchvision's tensor ops, which take \"bilinear\" or \"nearest\" only",
            )?;
        }
        if !(0.0..=1.0).contains(&d.random_erase) {
            invalid("data.random_erase", d.random_erase, "is a probability, in [0, 1]")?;
        }
        if !(0.0..=1.0).contains(&d.hflip) {
            invalid("data.hflip", d.hflip, "is a probability, in [0, 1] (0 leaves the flip out)")?;
        }
        if !(d.color_jitter >= 0.0 && d.color_jitter.is_finite()) {
            invalid(
                "data.color_jitter",
                d.color_jitter,
                "must be a finite number of at least 0 (0.4 is usual, 0 is off)",
            )?;
        }
        if !(0.0..=180.0).contains(&d.rotation) {
            invalid("data.rotation", d.rotation, "must be degrees in [0, 180] (0 is off)")?;
        }
        if !(d.min_crop_scale > 0.0 && d.min_crop_scale <= 1.0) {
            invalid("data.min_crop_scale", d.min_crop_scale, "must be in (0, 1]")?;
        }
        if d.eval_image_size == Some(0) {
            invalid("data.eval_image_size", 0, "must be at least 1 pixel")?;
        }
        if d.eval_image_size() > MAX_IMAGE_SIZE {
            invalid(
                "data.eval_image_size",
                d.eval_image_size(),
                &format!("must be at most {MAX_IMAGE_SIZE} pixels"),
            )?;
        }
        for (field, pct, size) in [
            ("data.crop_pct", d.crop_pct, d.image_size()),
            ("data.eval_crop_pct", d.eval_crop_pct(), d.eval_image_size()),
        ] {
            let Some(p) = pct else { continue };
            if let Err(torchlight_vision::VisionError::Config { reason, .. }) =
                torchlight_vision::EvalPreprocessing::from_crop_pct(size.max(1) as usize, p)
            {
                invalid(
                    field,
                    p,
                    &format!(
                        "must be a positive number (timm's are 0.875 to 1; above 1 the crop pads): {reason}"
                    ),
                )?;
            }
        }
        if let Some(mean) = d.mean {
            if !mean.iter().all(|x| x.is_finite()) {
                invalid("data.mean", format!("{mean:?}"), "must be 3 finite numbers (R, G, B)")?;
            }
        }
        if let Some(std) = d.std {
            if !std.iter().all(|x| x.is_finite() && *x > 0.0) {
                invalid("data.std", format!("{std:?}"), "must be 3 finite numbers greater than 0 (R, G, B)")?;
            }
        }

        if t.task == TaskKind::Text {
            self.validate_text()?;
        } else if torchlight_nn::architecture(&m.name).is_none() {
            invalid(
                "model.name",
                &m.name,
                &format!("unknown model; expected one of {}", torchlight_nn::architecture_list()),
            )?;
        }
        if let Some(n) = m.num_classes {
            if n < 2 {
                invalid("model.num_classes", n, "a classifier needs at least 2 classes")?;
            }
            if n > MAX_CLASSES {
                invalid("model.num_classes", n, &format!("must be at most {MAX_CLASSES}"))?;
            }
        }
        for rewrite in &m.key_rewrite {
            if let Err(e) = torchlight_nn::KeyRewrite::parse(rewrite) {
                invalid("model.key_rewrite", rewrite, &e.to_string())?;
            }
        }
        if m.freeze_bn_while_frozen && m.freeze_epochs == 0 {
            invalid(
                "model.freeze_bn_while_frozen",
                true,
                "takes effect only while the backbone is frozen: set model.freeze_epochs, or leave it out",
            )?;
        }
        if m.freeze_bn_while_frozen && m.freeze_bn {
            invalid(
                "model.freeze_bn_while_frozen",
                true,
                "model.freeze_bn already keeps every BatchNorm fixed for the whole run: leave one of the two out",
            )?;
        }
        if m.freeze_epochs > t.epochs {
            invalid(
                "model.freeze_epochs",
                m.freeze_epochs,
                &format!("is more than train.epochs ({}), so the backbone would never unfreeze", t.epochs),
            )?;
        }

        positive("optim.lr", o.lr)?;
        if let Some(lr) = o.backbone_lr {
            positive("optim.backbone_lr", lr)?;
        }
        non_negative("optim.weight_decay", o.weight_decay)?;
        // Each step shrinks a weight by lr * weight_decay of itself (AdamW's `p *= 1 - lr * wd`,
        // SGD's `lr * wd * p` in the gradient): at 1 or more it zeroes or flips every weight
        // every step, which ends in NaN, whatever the lr. Refused here, so the non-finite
        // error of the loop does not blame the lr for it.
        let top_lr = o.lr.max(self.backbone_lr());
        for (field, wd) in [
            ("optim.weight_decay", Some(o.weight_decay)),
            ("optim.norm_weight_decay", o.norm_weight_decay),
            ("optim.bias_weight_decay", o.bias_weight_decay),
        ] {
            if let Some(wd) = wd.filter(|wd| wd.is_finite() && top_lr * wd >= 1.0) {
                // 1e300 as 1e300, not as its 301 digits.
                let shown = if wd >= 1e6 { format!("{wd:e}") } else { wd.to_string() };
                invalid(
                    field,
                    shown,
                    &format!(
                        "times the lr ({top_lr:e}) is {:e}, at least 1: each step would shrink every weight past zero; weight decay is usually 1e-5 to 0.1",
                        top_lr * wd
                    ),
                )?;
            }
        }
        fraction("optim.momentum", o.momentum)?;
        for b in o.betas {
            if !(0.0..1.0).contains(&b) {
                invalid("optim.betas", format!("{:?}", o.betas), "each beta must be in [0, 1)")?;
            }
        }
        if let Some(wd) = o.norm_weight_decay {
            non_negative("optim.norm_weight_decay", wd)?;
        }
        if let Some(wd) = o.bias_weight_decay {
            non_negative("optim.bias_weight_decay", wd)?;
        }
        if let Some(decay) = o.layer_decay {
            if !(decay > 0.0 && decay <= 1.0) {
                invalid(
                    "optim.layer_decay",
                    decay,
                    "must be in (0, 1]: each layer below the head trains at this fraction of the lr of the layer above",
                )?;
            }
            if let Some(arch) = torchlight_nn::architecture(&m.name) {
                if !arch.has_layer_groups() {
                    invalid(
                        "optim.layer_decay",
                        decay,
                        &format!(
                            "model {} does not number its layers (register it with Architecture::with_layer_groups)",
                            m.name
                        ),
                    )?;
                }
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
            SchedulerConfig::Plateau {
                monitor,
                mode,
                factor,
                threshold,
                threshold_mode,
                min_lr,
                eps,
                ..
            } => {
                if !["min", "max"].contains(&mode.as_str()) {
                    invalid("scheduler.mode", format!("{mode:?}"), "must be \"min\" or \"max\"")?;
                }
                if !["rel", "abs"].contains(&threshold_mode.as_str()) {
                    invalid(
                        "scheduler.threshold_mode",
                        format!("{threshold_mode:?}"),
                        "must be \"rel\" or \"abs\"",
                    )?;
                }
                // The top-k name depends on the class count (k is clipped to it), checked by
                // `validate_for_classes` once the data is open: here any k up to train.top_k.
                let top_k = monitor.strip_prefix("val_top").and_then(|k| k.parse::<usize>().ok());
                let known = ["val_loss", "val_acc", "train_loss", "train_acc"];
                if !known.contains(&monitor.as_str()) && !top_k.is_some_and(|k| k >= 1 && k <= t.top_k) {
                    invalid(
                        "scheduler.monitor",
                        format!("{monitor:?}"),
                        &format!(
                            "must be one of the metrics an epoch logs: val_loss, val_acc, val_top{} (train.top_k, clipped to the class count), train_loss, train_acc",
                            t.top_k
                        ),
                    )?;
                }
                if !(*factor > 0.0 && *factor < 1.0) {
                    invalid("scheduler.factor", factor, "must be in (0, 1): the lr is multiplied by it")?;
                }
                non_negative("scheduler.threshold", *threshold)?;
                non_negative("scheduler.min_lr", *min_lr)?;
                non_negative("scheduler.eps", *eps)?;
                if o.warmup_epochs > 0 {
                    invalid(
                        "optim.warmup_epochs",
                        o.warmup_epochs,
                        "must be 0 with the plateau scheduler (a warm-up schedule would overwrite its cuts)",
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
        // One batch of float32 images, the first allocation that grows with both settings.
        let bytes = t.batch_size as u128 * 3 * 4 * (d.image_size() as u128).pow(2);
        if bytes > MAX_BATCH_BYTES {
            invalid(
                "train.batch_size",
                t.batch_size,
                &format!(
                    "one batch of {0} images of {1}x{1} pixels would take {2:.1} GiB as float32 (the limit is {3} GiB): lower train.batch_size or data.image_size",
                    t.batch_size,
                    d.image_size(),
                    bytes as f64 / (1u64 << 30) as f64,
                    MAX_BATCH_BYTES >> 30
                ),
            )?;
        }
        if let ClassWeights::Given(w) = &t.class_weights {
            if w.is_empty() || w.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
                invalid(
                    "train.class_weights",
                    format!("{w:?}"),
                    "must be \"none\", \"balanced\" or one finite, non-negative weight per class",
                )?;
            }
        }
        if t.checkpoint_every_steps == Some(0) {
            invalid(
                "train.checkpoint_every_steps",
                0,
                "must be at least 1 step (leave it out to save after each epoch only)",
            )?;
        }
        fraction("train.label_smoothing", t.label_smoothing)?;
        non_negative("train.mixup_alpha", t.mixup_alpha)?;
        non_negative("train.cutmix_alpha", t.cutmix_alpha)?;
        for (field, p) in
            [("train.mixup_prob", t.mixup_prob), ("train.mixup_switch_prob", t.mixup_switch_prob)]
        {
            if !(0.0..=1.0).contains(&p) {
                invalid(field, p, "must be a probability in [0, 1]")?;
            }
        }
        if t.mixup_off_epoch == Some(0) {
            invalid(
                "train.mixup_off_epoch",
                0,
                "would never mix: set train.mixup_alpha and train.cutmix_alpha to 0 instead (or leave it out to mix every epoch)",
            )?;
        }
        let mixing = t.mixup_alpha > 0.0 || t.cutmix_alpha > 0.0;
        if !mixing && (t.mixup_off_epoch.is_some() || t.mixup_prob != 1.0 || t.mixup_switch_prob != 0.5) {
            invalid(
                "train.mixup_alpha",
                t.mixup_alpha,
                "train.mixup_prob, mixup_switch_prob and mixup_off_epoch need Mixup or CutMix on: set train.mixup_alpha or train.cutmix_alpha above 0",
            )?;
        }
        match (t.bce_loss, t.bce_target_thresh) {
            (_, Some(th)) if !(0.0..1.0).contains(&th) => {
                invalid("train.bce_target_thresh", th, "must be in [0, 1) (timm's --bce-target-thresh)")?;
            }
            (false, Some(th)) => invalid(
                "train.bce_target_thresh",
                th,
                "thresholds the binary cross-entropy's targets, which is off: set train.bce_loss = true (or leave the threshold out)",
            )?,
            _ => {}
        }
        if !(0.0..=1.0).contains(&t.model_ema_decay) {
            invalid("train.model_ema_decay", t.model_ema_decay, "must be in [0, 1]")?;
        }
        if t.model_ema_steps == 0 {
            invalid("train.model_ema_steps", 0, "must be at least 1 optimizer step")?;
        }
        if !t.model_ema {
            // As with Mixup's keys: a setting that would be silently ignored is refused, so a
            // config never reads as if the EMA were on when it is off.
            let defaults = super::LoopConfig::default();
            let set: Vec<(&str, String)> = [
                (
                    "train.model_ema_decay",
                    t.model_ema_decay != defaults.model_ema_decay,
                    t.model_ema_decay.to_string(),
                ),
                (
                    "train.model_ema_steps",
                    t.model_ema_steps != defaults.model_ema_steps,
                    t.model_ema_steps.to_string(),
                ),
                ("train.model_ema_warmup", t.model_ema_warmup, t.model_ema_warmup.to_string()),
            ]
            .into_iter()
            .filter_map(|(k, set, v)| set.then_some((k, v)))
            .collect();
            if let Some((field, value)) = set.first() {
                let keys: Vec<&str> = set.iter().map(|(k, _)| *k).collect();
                invalid(
                    field,
                    value,
                    &format!(
                        "{} only {} effect with the model EMA on, and train.model_ema is false: set train.model_ema = true, or leave {} out",
                        keys.join(" and "),
                        if keys.len() == 1 { "takes" } else { "take" },
                        if keys.len() == 1 { "it" } else { "them" }
                    ),
                )?;
            }
        }
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
    /// The checks that need the data's class count, made once the data is open and before a
    /// run folder is made: `scheduler.monitor` must name a metric an epoch logs, and the
    /// top-k accuracy is logged as `val_top<k>` with `k = min(train.top_k, classes)`.
    pub fn validate_for_classes(&self, classes: usize) -> Result<()> {
        if let SchedulerConfig::Plateau { monitor, .. } = &self.scheduler {
            let logged = self.train.top_k.min(classes.max(1));
            if monitor.starts_with("val_top") && *monitor != format!("val_top{logged}") {
                let why = if logged < self.train.top_k {
                    format!(
                        "with {classes} classes the top-{} accuracy is clipped to top-{logged} and logged as val_top{logged}",
                        self.train.top_k
                    )
                } else {
                    format!("the top-k accuracy is logged as val_top{logged} (train.top_k = {logged})")
                };
                return Err(RecipeError::InvalidConfig {
                    field: "scheduler.monitor".to_string(),
                    value: format!("{monitor:?}"),
                    reason: format!("{why}: monitor val_top{logged}, or set train.top_k to the k you want"),
                });
            }
        }
        Ok(())
    }

    /// TOML strings are UTF-8, so a path that is not cannot be written to `config.toml`.
    pub(crate) fn check_paths_are_utf8(&self) -> Result<()> {
        let paths = [
            ("data.root", Some(&self.data.root)),
            ("model.pretrained", self.model.pretrained.as_ref()),
            ("train.out_dir", Some(&self.train.out_dir)),
            ("text.tokenizer", self.text.tokenizer.as_ref()),
        ];
        for (field, path) in paths {
            if let Some(p) = path.filter(|p| p.to_str().is_none()) {
                return Err(RecipeError::InvalidConfig {
                    field: field.to_string(),
                    value: format!("{p:?}"),
                    reason: "is not valid UTF-8, so config.toml cannot record it".to_string(),
                });
            }
        }
        Ok(())
    }
}

/// The most tokens a document may keep (`text.max_len`).
pub const MAX_TEXT_LEN: usize = 1 << 16;
/// The largest `text.max_vocab`, `text.embed_dim`, `text.hidden_size`, `text.num_filters` and
/// `text.dim_feedforward`.
pub const MAX_TEXT_SIZE: usize = 1 << 24;

impl TrainConfig {
    /// The checks of `train.task = "text"`: the `[text]` values, `model.name` one of
    /// [`TEXT_MODELS`], and the image recipe's settings that the text recipe does not have
    /// refused rather than ignored.
    fn validate_text(&self) -> Result<()> {
        let invalid = |field: &str, value: String, reason: String| -> Result<()> {
            Err(RecipeError::InvalidConfig { field: field.to_string(), value, reason })
        };
        let (x, m, t, d) = (&self.text, &self.model, &self.train, &self.data);
        if !TEXT_MODELS.contains(&m.name.as_str()) {
            invalid(
                "model.name",
                m.name.clone(),
                format!(
                    "not a text model (train.task = \"text\"); expected one of {}",
                    TEXT_MODELS.join(", ")
                ),
            )?;
        }
        if x.max_len == 0 || x.max_len > MAX_TEXT_LEN {
            invalid(
                "text.max_len",
                x.max_len.to_string(),
                format!("must be between 1 and {MAX_TEXT_LEN} tokens"),
            )?;
        }
        if x.min_freq == 0 {
            invalid(
                "text.min_freq",
                "0".into(),
                "must be at least 1 (a word seen once has frequency 1)".into(),
            )?;
        }
        if x.max_vocab < 3 || x.max_vocab > MAX_TEXT_SIZE {
            invalid(
                "text.max_vocab",
                x.max_vocab.to_string(),
                format!("must be between 3 ([PAD], [UNK] and one word) and {MAX_TEXT_SIZE}"),
            )?;
        }
        for (field, v) in [
            ("text.embed_dim", x.embed_dim),
            ("text.num_filters", x.num_filters),
            ("text.hidden_size", x.hidden_size),
            ("text.nhead", x.nhead),
            ("text.encoder_layers", x.encoder_layers),
            ("text.dim_feedforward", x.dim_feedforward),
        ] {
            if v == 0 || v > MAX_TEXT_SIZE {
                invalid(field, v.to_string(), format!("must be between 1 and {MAX_TEXT_SIZE}"))?;
            }
        }
        if x.embed_dim % x.nhead != 0 {
            invalid(
                "text.nhead",
                x.nhead.to_string(),
                format!("text.embed_dim ({}) must divide by the number of attention heads", x.embed_dim),
            )?;
        }
        if !(0.0..1.0).contains(&x.dropout) {
            invalid("text.dropout", x.dropout.to_string(), "is a probability, in [0, 1)".into())?;
        }
        // The image recipe's settings with no meaning here, refused rather than ignored.
        let not_text = "is an image-recipe setting; the text recipe does not have it (leave it out)";
        let image_only = [
            ("model.pretrained", m.pretrained.is_some()),
            ("model.key_rewrite", !m.key_rewrite.is_empty()),
            ("model.freeze_bn", m.freeze_bn),
            ("model.freeze_bn_while_frozen", m.freeze_bn_while_frozen),
            ("optim.layer_decay", self.optim.layer_decay.is_some()),
            ("data.sampler", d.sampler != SamplerKind::Random),
            ("data.ra_reps", d.ra_reps != 1),
            ("data.auto_augment", d.auto_augment != AutoAugmentKind::None),
            ("data.ra_magnitude", d.ra_magnitude != 9),
            ("data.augmix_severity", d.augmix_severity != 3),
            ("data.random_erase", d.random_erase != 0.0),
            ("data.hflip", d.hflip != 0.5),
            ("data.color_jitter", d.color_jitter != 0.0),
            ("data.rotation", d.rotation != 0.0),
            // Runs saved before it was optional wrote `interpolation = "bilinear"`: still read.
            ("data.interpolation", d.interpolation.is_some_and(|i| i != Interpolation::Bilinear)),
            ("data.crop_pct", d.crop_pct.is_some()),
            ("data.eval_image_size", d.eval_image_size.is_some()),
            ("data.eval_crop_pct", d.eval_crop_pct.is_some()),
            ("data.crop_mode", d.crop_mode.is_some()),
            ("data.mean", d.mean.is_some()),
            ("data.std", d.std.is_some()),
            ("train.mixup_alpha", t.mixup_alpha != 0.0),
            ("train.cutmix_alpha", t.cutmix_alpha != 0.0),
            ("train.model_ema", t.model_ema),
            ("train.sync_bn", t.sync_bn),
        ];
        for (field, set) in image_only {
            if set {
                let value = toml::Table::try_from(self)
                    .ok()
                    .and_then(|c| {
                        let (section, key) = field.split_once('.')?;
                        c.get(section)?.get(key).map(|v| v.to_string())
                    })
                    .unwrap_or_default();
                invalid(field, value, format!("{not_text} (train.task = \"text\")"))?;
            }
        }
        Ok(())
    }
}

fn decay(field: &str, gamma: f64) -> Result<()> {
    if gamma > 0.0 && gamma <= 1.0 {
        Ok(())
    } else {
        Err(RecipeError::InvalidConfig {
            field: field.to_string(),
            value: gamma.to_string(),
            reason: "must be in (0, 1]".to_string(),
        })
    }
}
