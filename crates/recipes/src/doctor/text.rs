//! The checklist for a text config (`train.task = "text"`): stage 1 from `text_data.rs`, then
//! stages 2 to 4 on the text recipe's own loaders, tokenizer and models, through the same
//! generic overfit and short-run checks as images.

use super::{
    check_text_batch, overfit_batch, short_run, skipped, text_data, DoctorOptions, DoctorReport, Status,
};
use crate::config::TrainConfig;
use crate::error::{RecipeError, Result};
use crate::text::{loader, open_splits, text_classifier_config, TextDataset, HEAD};
use std::sync::Arc;
use tch::Device;
use torchlight_data::Subset;
use torchlight_nn::{
    to_device, BiLstmClassifier, FastText, Module, MultiInput, TextCnn, TransformerClassifier,
};
use torchlight_tensor::seed_everything;
use torchlight_text::{TextSplits, Tokenized, Tokenizer};
use torchlight_train::Batch;

/// The whole checklist for a text config. Later stages are SKIPped when stage 1 fails (too few
/// classes, unreadable or empty documents, labels out of range) or the batch check does.
pub(crate) fn doctor_text(
    config: &TrainConfig,
    options: &DoctorOptions,
    device: Device,
) -> Result<DoctorReport> {
    let (findings, tokenizer) = text_data(config, options)?;
    let mut report = DoctorReport { findings };
    let Some(tokenizer) = tokenizer.filter(|_| report.worst() != Status::Fail) else {
        report.findings.push(skipped(2, "one batch, overfit and short run not run: fix the data first"));
        return Ok(report);
    };
    let splits = open_splits(config)?;
    let num_classes = config.model.num_classes.unwrap_or(splits.classes.len());
    let c = text_classifier_config(config, tokenizer.vocab_size(), num_classes);
    let run = TextRun { config, options, device, splits, tokenizer, num_classes };
    match config.model.name.as_str() {
        "fasttext" => run.stages(|| FastText::new(&c), &mut report)?,
        "textcnn" => run.stages(|| TextCnn::new(&c), &mut report)?,
        "bilstm" => run.stages(|| BiLstmClassifier::new(&c), &mut report)?,
        "transformer" => run.stages(|| TransformerClassifier::new(&c), &mut report)?,
        other => {
            return Err(RecipeError::InvalidConfig {
                field: "model.name".into(),
                value: other.to_string(),
                reason: format!(
                    "not a text model; expected one of {}",
                    crate::config::TEXT_MODELS.join(", ")
                ),
            })
        }
    }
    Ok(report)
}

/// What stages 2 to 4 share for one text config.
struct TextRun<'a> {
    config: &'a TrainConfig,
    options: &'a DoctorOptions,
    device: Device,
    splits: TextSplits,
    tokenizer: Arc<dyn Tokenizer>,
    num_classes: usize,
}

impl TextRun<'_> {
    /// The training split, tokenized (a new subset over the same folder, so each loader owns one).
    fn train_set(&self) -> Result<TextDataset> {
        let train = &self.splits.train;
        let subset = Subset::new(Arc::clone(train.dataset()), train.indices().to_vec())?;
        Ok(Tokenized::new(subset, Arc::clone(&self.tokenizer)))
    }

    /// A fresh model of `build`, seeded with `train.seed` and built on the CPU (so a seed gives
    /// the same weights on any device, as the recipe builds it), on the device.
    fn model<M: Module>(&self, build: &impl Fn() -> M) -> M {
        seed_everything(self.config.train.seed);
        let model = build();
        to_device(&model, self.device);
        model
    }

    /// Stages 2 (one batch), 3 (overfit it) and 4 (a short run) for the model `build` makes.
    fn stages<M: Module + MultiInput>(&self, build: impl Fn() -> M, report: &mut DoctorReport) -> Result<()> {
        let (config, options, device) = (self.config, self.options, self.device);
        // One fixed batch: the first of the shuffled training loader (text has no augmentation).
        let mut first = loader(self.train_set()?, config, true, device)?;
        let batch = first.epoch(0).next().ok_or_else(|| RecipeError::InvalidConfig {
            field: "data.root".into(),
            value: config.data.root.display().to_string(),
            reason: "train/ yields no batch".into(),
        })??;
        drop(first);
        let batch = batch.to_device(device);

        let model = self.model(&build);
        let found =
            check_text_batch(&model, &batch.0, &batch.1, self.num_classes, self.tokenizer.vocab_size());
        let fatal = found.iter().any(|f| f.status == Status::Fail);
        report.findings.extend(found);
        if fatal {
            report.findings.push(skipped(3, "overfit and short run not run: fix the batch first"));
            return Ok(());
        }

        let model = self.model(&build);
        report.findings.push(overfit_batch(&model, HEAD, &batch, config, options)?);

        let model = self.model(&build);
        // Enough epochs for `run_steps` batches, each from its own loader so the batches stream
        // lazily and the wait for each one is measured as training sees it.
        let first = loader(self.train_set()?, config, true, device)?;
        let epochs = options.run_steps.div_ceil(first.len().max(1)).max(1);
        let mut loaders = vec![first];
        for _ in 1..epochs {
            loaders.push(loader(self.train_set()?, config, true, device)?);
        }
        let batches = loaders.iter_mut().enumerate().flat_map(|(e, l)| l.epoch(e as u64));
        let batches = batches.map(|b| b.map_err(RecipeError::from));
        report.findings.extend(short_run(&model, HEAD, batches, config, device, options)?);
        Ok(())
    }
}
