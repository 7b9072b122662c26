//! A trained text classifier used after training, as `torchlight eval` and `predict` do: a
//! TextFolder evaluated through the Trainer's evaluation loop with the recipe's loader, and
//! single documents turned into the same `ids`/`lengths` inputs and classified.

use super::data::{check_documents, loader, open_splits, TextCollate, TextLoader};
use super::model::as_multi_input;
use crate::config::TrainConfig;
use crate::error::{RecipeError, Result};
use crate::image::Evaluated;
use std::sync::Arc;
use tch::{Device, Tensor};
use torchlight_data::{Collate, Subset};
use torchlight_nn::{BiLstmClassifier, FastText, Inputs, Module, MultiInput, TextCnn, TransformerClassifier};
use torchlight_tensor::no_grad;
use torchlight_text::{
    is_empty_document, read_records, records_files, Columns, PadCollate, TextFolder, Tokenized, Tokenizer,
};
use torchlight_train::{BatchSource, Classification, MetricSet, MetricsSummary, Progress, Stage};

/// The documents to evaluate at `dir`, every one read once first (an unreadable, non-UTF-8 or
/// empty one is an error naming the file, as for training): a TextFolder (`dir/<class>/*.txt`);
/// or records, read by `config`'s `text.text_column`/`text.label_column` with `classes` (the
/// checkpoint's) fixed, so that a label the model does not know is an error naming file and
/// line: `dir` itself when it is a `.csv`, `.tsv` or `.jsonl` file, or the `test.<ext>` of a
/// records folder (one without `test.<ext>` is an error naming the file to pass instead).
pub fn open_eval_folder(
    dir: &std::path::Path,
    config: &TrainConfig,
    classes: &[String],
) -> Result<TextFolder> {
    let folder = match records_files(dir) {
        None => TextFolder::new(dir)?,
        Some((train, val, test)) => {
            let file = if dir.is_file() {
                train
            } else {
                test.ok_or_else(|| RecipeError::InvalidConfig {
                    field: "--data".into(),
                    value: dir.display().to_string(),
                    reason: format!(
                        "holds {} but no test.<ext> to evaluate; pass the file to evaluate as --data, e.g. --data {}",
                        train.file_name().unwrap_or_default().to_string_lossy(),
                        val.as_ref().unwrap_or(&train).display()
                    ),
                })?
            };
            let columns = Columns::new(&config.text.text_column, &config.text.label_column)
                .with_classes(classes.iter().cloned());
            TextFolder::from_records(read_records(&file, &columns)?)
        }
    };
    check_documents(&folder.check())?;
    Ok(folder)
}

/// The loader of a whole TextFolder, in order, tokenized with `tokenizer` and cut to
/// `text.max_len` in `data.workers` threads: the recipe's [`loader`] over every document.
pub fn eval_loader(
    folder: TextFolder,
    tokenizer: Arc<dyn Tokenizer>,
    config: &TrainConfig,
    device: Device,
) -> Result<TextLoader> {
    let n = torchlight_data::Dataset::len(&folder);
    let all = Subset::new(Arc::new(folder), (0..n).collect())?;
    loader(Tokenized::new(all, tokenizer), config, false, device)
}

/// Runs a text classifier (one [`build_text_model`](super::build_text_model) built) over
/// `loader` in evaluation mode through the Trainer's evaluation loop (no-grad, no dropout,
/// `train.amp`) and returns loss, top-1/top-`train.top_k` accuracy and the confusion matrix,
/// as the recipe's test split is evaluated (plain cross-entropy, as the image `evaluate`).
pub fn evaluate(
    model: &dyn Module,
    loader: &mut TextLoader,
    device: Device,
    config: &TrainConfig,
    num_classes: usize,
    progress: &Progress,
) -> Result<MetricsSummary> {
    let metrics = dispatch(model, loader, device, config, num_classes, false, progress)?;
    Ok(MetricsSummary::from_metrics(&metrics)?)
}

/// [`evaluate`], also keeping every document's logits and label (for calibration: ECE,
/// temperature scaling), as the image recipe's
/// [`evaluate_with_logits`](crate::image::evaluate_with_logits) does.
pub fn evaluate_with_logits(
    model: &dyn Module,
    loader: &mut TextLoader,
    device: Device,
    config: &TrainConfig,
    num_classes: usize,
    progress: &Progress,
) -> Result<Evaluated> {
    let metrics = dispatch(model, loader, device, config, num_classes, true, progress)?;
    Evaluated::from_metrics(&metrics, "documents")
}

/// The loader of the validation split of the text data at `config.data.root` (`val/`,
/// `val.<ext>` or the seeded held-out part of the training data, exactly as training split
/// it), tokenized with `tokenizer` (the checkpoint's) and cut to `text.max_len`, in order;
/// and the data's class names.
pub fn val_loader(
    config: &TrainConfig,
    tokenizer: Arc<dyn Tokenizer>,
    device: Device,
) -> Result<(TextLoader, Vec<String>)> {
    let splits = open_splits(config)?;
    Ok((loader(Tokenized::new(splits.val, tokenizer), config, false, device)?, splits.classes))
}

fn dispatch(
    model: &dyn Module,
    loader: &mut TextLoader,
    device: Device,
    config: &TrainConfig,
    num_classes: usize,
    calibration: bool,
    progress: &Progress,
) -> Result<MetricSet> {
    let task = Classification::new(num_classes).with_top_k(config.train.top_k).with_calibration(calibration);
    let any = model.as_any();
    if let Some(m) = any.downcast_ref::<FastText>() {
        run(m, &task, loader, device, config, progress)
    } else if let Some(m) = any.downcast_ref::<TextCnn>() {
        run(m, &task, loader, device, config, progress)
    } else if let Some(m) = any.downcast_ref::<BiLstmClassifier>() {
        run(m, &task, loader, device, config, progress)
    } else if let Some(m) = any.downcast_ref::<TransformerClassifier>() {
        run(m, &task, loader, device, config, progress)
    } else {
        Err(not_text(model))
    }
}

fn run<M: Module + MultiInput>(
    model: &M,
    task: &Classification,
    loader: &mut dyn BatchSource<(Inputs, Tensor)>,
    device: Device,
    config: &TrainConfig,
    progress: &Progress,
) -> Result<MetricSet> {
    let step = crate::doctor::step_config(config);
    Ok(torchlight_train::evaluate(model, task, loader, device, &step, Stage::Test, progress)?)
}

fn not_text(model: &dyn Module) -> RecipeError {
    RecipeError::InvalidConfig {
        field: "model".into(),
        value: model.kind().to_string(),
        reason:
            "not one of the text classifiers (FastText, TextCnn, BiLstmClassifier, TransformerClassifier)"
                .into(),
    }
}

/// One document as a batch of one: `Inputs { ids [1, T], lengths [1] }` (int64, CPU), its ids
/// cut to `max_len` exactly as the recipe's loaders cut them. A document of white space only,
/// or one that encodes to no tokens, is an error.
pub fn document_inputs(tokenizer: &dyn Tokenizer, text: &str, max_len: usize) -> Result<Inputs> {
    let empty = |reason: &str| RecipeError::Document { reason: reason.into() };
    if is_empty_document(text) {
        return Err(empty("an empty text (white space only): nothing to classify"));
    }
    let ids = tokenizer.encode(text)?;
    if ids.is_empty() {
        return Err(empty("the text encodes to no tokens"));
    }
    let collate = TextCollate(PadCollate::new(0, Some(max_len))?);
    let staged = collate.stage(vec![(0, (ids, 0))])?;
    Ok(collate.finish(staged, false)?.0)
}

/// The logits `[N, C]` of a text classifier on `inputs` (moved to `device`), in evaluation
/// mode without gradients: what `torchlight predict` applies softmax to.
pub fn text_logits(model: &dyn Module, inputs: &Inputs, device: Device) -> Result<Tensor> {
    let m = as_multi_input(model).ok_or_else(|| not_text(model))?;
    let inputs = inputs.map(|t| t.to_device(device));
    let _g = no_grad();
    Ok(m.forward_inputs(&inputs, false)?)
}
