//! The text recipe's data: the TextFolder splits (every document checked before training), the
//! tokenizer of a run (built, loaded, saved in and read back from its folder) and the loaders,
//! which tokenize in their workers and collate into `(Inputs { ids, lengths }, labels)`.

use crate::config::TrainConfig;
use crate::error::{RecipeError, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tch::{Device, Tensor};
use torchlight_data::{
    ArrayToTensor, Collate, DataLoader, DataLoaderBuilder, DistributedSampler, Sampler, Subset,
};
use torchlight_nn::Inputs;
use torchlight_text::{
    load_tokenizer, BucketSampler, Columns, DocumentReport, PadCollate, PaddedBatch, TextFolder,
    TextSplitFolders, TextSplits, Tokenized, Tokenizer, Truncation, WordVocab, WordVocabConfig,
};

/// The file a run's word vocabulary is saved to in its run folder.
pub const VOCAB_FILE: &str = "vocab.json";
/// The file a run's given tokenizer (`text.tokenizer`) is saved to in its run folder.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// A split as the loaders see it: documents tokenized on read, in the loader's workers.
pub type TextDataset = Tokenized<Subset<TextFolder>, Arc<dyn Tokenizer>>;
/// The loader of a text split: `(Inputs { ids [B, T], lengths [B] }, labels [B])` batches.
pub type TextLoader = DataLoader<TextDataset, TextCollate>;

/// The splits of `data.root`: `train/`, `val/` (or a seeded stratified `data.val_fraction` of
/// train) and `test/` when present; or records (`torchlight_text::records_files`): a `.csv`,
/// `.tsv` or `.jsonl` file, or a folder with `train.<ext>` and optional `val.<ext>`,
/// `test.<ext>`, their `text.text_column` and `text.label_column` read. Every document is
/// read once first: an unreadable, non-UTF-8 or empty one (or a bad row) is an error naming
/// the file (and the line of a record), before a run folder exists.
pub fn open_splits(config: &TrainConfig) -> Result<TextSplits> {
    let columns = Columns::new(&config.text.text_column, &config.text.label_column);
    let folders = TextSplitFolders::open_data(&config.data.root, &columns)?;
    check_documents(&folders.check())?;
    Ok(folders.split(config.data.val_fraction, config.train.seed)?)
}

/// Refuses documents a [`DocumentReport`] found unreadable (or not UTF-8) or empty: an error
/// naming the first such file and how many there are.
pub fn check_documents(report: &DocumentReport) -> Result<()> {
    if let Some((location, reason)) = report.unreadable.first() {
        let e = std::io::Error::other(format!(
            "{reason} ({} of {} documents cannot be read)",
            report.unreadable.len(),
            report.documents
        ));
        return Err(RecipeError::io(&location.path, e));
    }
    if let Some(location) = report.empty.first() {
        let at = location.line.map_or_else(String::new, |line| format!("line {line}: "));
        let e = std::io::Error::other(format!(
            "{at}the document is empty ({} of {} documents are): remove it or give it text",
            report.empty.len(),
            report.documents
        ));
        return Err(RecipeError::io(&location.path, e));
    }
    Ok(())
}

/// The tokenizer of a new run and where it is saved in the run folder: `text.tokenizer` when
/// set (loaded, saved as [`TOKENIZER_FILE`]), else a [`WordVocab`] of the training split with
/// `text.min_freq`, `text.max_vocab` and `text.lowercase` (saved as [`VOCAB_FILE`]). The
/// models' padding is id 0, so a tokenizer padding with another id is refused.
pub fn new_tokenizer(
    config: &TrainConfig,
    splits: &TextSplits,
) -> Result<(Arc<dyn Tokenizer>, &'static str)> {
    let x = &config.text;
    let (tokenizer, file): (Arc<dyn Tokenizer>, _) = match &x.tokenizer {
        Some(path) => (Arc::from(load_tokenizer(path)?), TOKENIZER_FILE),
        None => {
            let vocab = WordVocabConfig::default()
                .with_min_freq(x.min_freq)
                .with_max_size(Some(x.max_vocab))
                .with_lowercase(x.lowercase);
            (Arc::new(WordVocab::build(splits.train_texts(), &vocab)?), VOCAB_FILE)
        }
    };
    if tokenizer.pad_id() != 0 {
        return Err(RecipeError::InvalidConfig {
            field: "text.tokenizer".into(),
            value: x.tokenizer.as_ref().map_or_else(String::new, |p| p.display().to_string()),
            reason: format!(
                "its padding token has id {}; the text models pad with id 0 (a BERT-style `[PAD]` first)",
                tokenizer.pad_id()
            ),
        });
    }
    Ok((tokenizer, file))
}

/// The tokenizer saved in `run_dir` ([`TOKENIZER_FILE`] or [`VOCAB_FILE`]), which a resumed run
/// (and anything reading the run folder) uses, so the ids are the ones the weights learnt.
pub fn run_tokenizer(run_dir: &Path) -> Result<(Arc<dyn Tokenizer>, PathBuf)> {
    let path =
        [TOKENIZER_FILE, VOCAB_FILE].iter().map(|f| run_dir.join(f)).find(|p| p.is_file()).ok_or_else(
            || RecipeError::RunDir {
                path: run_dir.to_path_buf(),
                reason: format!(
                    "has neither {TOKENIZER_FILE} nor {VOCAB_FILE}: the text run's tokenizer is missing"
                ),
            },
        )?;
    Ok((Arc::from(load_tokenizer(&path)?), path))
}

/// How many training documents `text.max_len` cuts (each document tokenized once).
pub fn truncation_of(dataset: &TextDataset, max_len: usize) -> Truncation {
    Truncation::of_lengths(dataset.lengths(), Some(max_len))
}

/// [`PadCollate`] into tensors: the worker pads and cuts to `text.max_len`; the consuming
/// thread turns the batch into `(Inputs { ids [B, T] int64, lengths [B] int64 }, labels [B])`,
/// the inputs of nn's text classifiers (lengths stay int64, as `pack_padded_sequence` wants).
#[derive(Debug, Clone, Copy)]
pub struct TextCollate(pub PadCollate);

impl Collate<(Vec<u32>, i64)> for TextCollate {
    type Staged = PaddedBatch;
    type Batch = (Inputs, Tensor);

    fn stage(&self, items: Vec<(usize, (Vec<u32>, i64))>) -> torchlight_data::Result<PaddedBatch> {
        self.0.stage(items)
    }

    fn finish(&self, staged: PaddedBatch, pin_memory: bool) -> torchlight_data::Result<(Inputs, Tensor)> {
        let inputs = Inputs::new()
            .with("ids", staged.ids.to_tensor(pin_memory)?)
            .with("lengths", staged.lengths.to_tensor(false)?);
        Ok((inputs, staged.labels.to_tensor(pin_memory)?))
    }
}

/// The loader of one split: shuffled per epoch from `train.seed` when `train` (with
/// `text.bucket`, in batches of similar length by [`BucketSampler`], its order a function of
/// `train.seed` and the epoch alone, so the same at any worker count and on a mid-epoch
/// resume), in order otherwise; `train.batch_size` documents a batch, `data.workers` threads
/// tokenizing.
pub fn loader(dataset: TextDataset, config: &TrainConfig, train: bool, device: Device) -> Result<TextLoader> {
    sharded_loader(dataset, config, train, device, None)
}

/// [`loader`] for one rank of a data-parallel run: with `shard = Some((rank, world_size))` it
/// loads that rank's shard, `train.batch_size` documents a batch. Without `text.bucket` (and
/// for validation and test) a `DistributedSampler` deals out the documents (reshuffled each
/// epoch from `train.seed` when `train`, padded by repeating its start so every rank runs as
/// many steps); with it, every rank draws the same bucketed batches and takes every
/// `world_size`-th of them ([`BucketSampler::with_shard`]).
pub fn sharded_loader(
    dataset: TextDataset,
    config: &TrainConfig,
    train: bool,
    device: Device,
    shard: Option<(usize, usize)>,
) -> Result<TextLoader> {
    let max_len = config.text.max_len;
    let collate = TextCollate(PadCollate::new(0, Some(max_len))?);
    let n = torchlight_data::Dataset::len(&dataset);
    let sampler: Option<Box<dyn Sampler>> = match (train && config.text.bucket, shard) {
        (true, _) => {
            // Lengths as the batches see them: cut to text.max_len.
            let lengths = dataset.lengths().into_iter().map(|n| n.min(max_len)).collect();
            let mut sampler = BucketSampler::new(lengths, config.train.batch_size, config.train.seed)?;
            if let Some((rank, world)) = shard {
                sampler = sampler.with_shard(rank, world)?;
            }
            Some(Box::new(sampler))
        }
        (false, Some((rank, world))) => Some(Box::new(
            DistributedSampler::new(n, world, rank)?.with_seed(config.train.seed).with_shuffle(train),
        )),
        (false, None) => None,
    };
    let builder = DataLoaderBuilder::new(dataset)
        .collate(collate)
        .batch_size(config.train.batch_size)
        .num_workers(config.data.workers)
        .persistent_workers(config.data.workers > 0)
        .pin_memory(device.is_cuda())
        .seed(config.train.seed);
    let builder = match sampler {
        Some(sampler) => builder.sampler(sampler),
        None => builder.shuffle(train),
    };
    Ok(builder.build()?)
}
