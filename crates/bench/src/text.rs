//! The text rows: a generated corpus of `.txt` documents (`gen-text`), the training step of nn's
//! four text classifiers on a padded batch, and the text input pipeline (read, tokenize, pad)
//! with the word-level `WordVocab` and with a Hugging Face WordPiece tokenizer (`tokenizer.json`,
//! trained on the corpus by `gen-text`). Each workload mirrors a class of the same name in
//! `pytorch_text_bench.py`.

use crate::common::Workload;
use anyhow::{bail, Context, Result};
use std::path::Path;
use tch::{Device, Kind, Tensor};
use torchlight_data::{DataLoader, DataLoaderBuilder, Dataset};
use torchlight_nn::{
    named_parameters, BiLstmClassifier, CrossEntropyLoss, FastText, Inputs, MultiInput, TextClassifierConfig,
    TextCnn, TransformerClassifier,
};
use torchlight_optim::{Adam, AdamConfig, Optimizer, ParamGroup};
use torchlight_recipes::text::TextCollate;
use torchlight_text::{
    HfTokenizer, HfTrainConfig, PadCollate, TextFolder, Tokenized, Tokenizer, WordVocab, WordVocabConfig,
};

/// Documents per class of the generated corpus.
const DOCS_PER_CLASS: usize = 500;
/// Classes of the generated corpus (and of the train-step models).
const CLASSES: usize = 4;
/// Distinct words the corpus draws from.
const WORDS: usize = 5000;
/// Vocabulary of the train-step rows: the default `text.max_vocab`.
const VOCAB: i64 = 30_000;
/// Batch of the train-step rows and the pipeline rows.
const BATCH: usize = 64;
/// `text.max_len`'s default: the pipeline rows cut documents to it.
const MAX_LEN: usize = 256;

/// The WordPiece vocabulary of the tokenizer `gen-text` trains on the corpus.
const HF_VOCAB: usize = 8000;
/// The Hugging Face tokenizer's file inside the corpus folder (beside the class folders, which
/// TextFolder and the PyTorch side read; a file there is not a class).
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// SplitMix64, as in `imagegen.rs`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A pronounceable lower-case word made of 1 to 4 syllables.
fn word(rng: &mut Rng) -> String {
    const ONSETS: &[&str] =
        &["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr"];
    const VOWELS: &[&str] = &["a", "e", "i", "o", "u", "ea", "ou"];
    let syllables = 1 + rng.below(4);
    (0..syllables)
        .map(|_| format!("{}{}", ONSETS[rng.below(ONSETS.len())], VOWELS[rng.below(VOWELS.len())]))
        .collect()
}

/// Writes the text corpus to `out` once (cached: a `.complete` file marks it): a TextFolder
/// of [`CLASSES`] classes (`out/class_<k>/<i>.txt`), [`DOCS_PER_CLASS`] documents each, 20 to
/// 400 words a document (uniform) drawn from [`WORDS`] distinct words, in sentences of 5 to 20
/// words that start with a capital letter and end with `.`, commas between some words.
pub fn write_corpus(out: &Path) -> Result<()> {
    let marker = out.join(".complete");
    if !marker.is_file() {
        write_documents(out)?;
        std::fs::write(&marker, "").with_context(|| format!("{}", marker.display()))?;
    }
    write_tokenizer(out)
}

/// Trains the WordPiece tokenizer of the `text_pipeline_hf_*` rows on every document of the
/// corpus at `out` ([`HF_VOCAB`] entries, lower-cased, BERT's pre-tokenizer) and saves it as
/// [`TOKENIZER_FILE`] there, once (written to a temporary name, then renamed).
fn write_tokenizer(out: &Path) -> Result<()> {
    let path = out.join(TOKENIZER_FILE);
    if path.is_file() {
        return Ok(());
    }
    let folder = TextFolder::new(out)?;
    let texts = (0..folder.samples().len()).map(|i| folder.read(i)).collect::<Result<Vec<_>, _>>()?;
    let tokenizer = HfTokenizer::train(&texts, &HfTrainConfig::default().with_vocab_size(HF_VOCAB))?;
    let partial = out.join(format!("{TOKENIZER_FILE}.partial"));
    tokenizer.save(&partial)?;
    std::fs::rename(&partial, &path).with_context(|| format!("{}", path.display()))?;
    Ok(())
}

/// The documents of [`write_corpus`].
fn write_documents(out: &Path) -> Result<()> {
    let mut rng = Rng(31);
    let words: Vec<String> = (0..WORDS).map(|_| word(&mut rng)).collect();
    for class in 0..CLASSES {
        let dir = out.join(format!("class_{class}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
        for doc in 0..DOCS_PER_CLASS {
            let count = 20 + rng.below(381);
            let mut text = String::new();
            let mut sentence_left = 0;
            for i in 0..count {
                if sentence_left == 0 {
                    if i > 0 {
                        text.push_str(". ");
                    }
                    sentence_left = 5 + rng.below(16);
                    let w = &words[rng.below(WORDS)];
                    let mut chars = w.chars();
                    let first = chars.next().expect("words are not empty");
                    text.extend(first.to_uppercase());
                    text.push_str(chars.as_str());
                } else {
                    text.push_str(if rng.below(8) == 0 { ", " } else { " " });
                    text.push_str(&words[rng.below(WORDS)]);
                }
                sentence_left -= 1;
            }
            text.push_str(".\n");
            let path = dir.join(format!("{doc:04}.txt"));
            std::fs::write(&path, text).with_context(|| format!("{}", path.display()))?;
        }
    }
    Ok(())
}

/// The text workload called `name`, or `None` when it is not a text row.
pub fn build(name: &str, corpus: &Path) -> Option<Result<Box<dyn Workload>>> {
    let config = || {
        // The default `[text]` sizes; the positional table 512 long (nn's default), since the
        // batch's documents run to 400 tokens, past `text.max_len`'s 256.
        TextClassifierConfig::new(VOCAB, CLASSES as i64)
            .with_embed_dim(128)
            .with_dropout(0.5)
            .with_num_filters(100)
            .with_hidden_size(128)
            .with_nhead(4)
            .with_encoder_layers(2)
            .with_dim_feedforward(512)
            .with_max_len(512)
    };
    fn boxed<M: MultiInput + 'static>(model: M) -> Result<Box<dyn Workload>> {
        Ok(Box::new(TextTrainStep::new(model)?))
    }
    Some(match name {
        "train_text_fasttext_b64" => boxed(FastText::new(&config())),
        "train_text_textcnn_b64" => boxed(TextCnn::new(&config())),
        "train_text_bilstm_b64" => boxed(BiLstmClassifier::new(&config())),
        "train_text_transformer_b64" => boxed(TransformerClassifier::new(&config())),
        "text_pipeline_w0" => TextPipeline::word_level(corpus, 0),
        "text_pipeline_w2" => TextPipeline::word_level(corpus, 2),
        "text_pipeline_hf_w0" => TextPipeline::hugging_face(corpus, 0),
        "text_pipeline_hf_w2" => TextPipeline::hugging_face(corpus, 2),
        _ => return None,
    })
}

/// The lengths of the train-step batch: [`BATCH`] values spread over `20..=400` (the same
/// formula in `pytorch_bench.py`).
fn batch_lengths() -> Vec<i64> {
    (0..BATCH as i64).map(|i| 20 + (i * 7919 + 13) % 381).collect()
}

/// Forward over padded ids and lengths, cross-entropy, backward and an Adam step (lr 1e-3),
/// train mode, on one batch of [`BATCH`] documents of 20 to 400 tokens.
struct TextTrainStep<M> {
    model: M,
    optimizer: Adam,
    loss: CrossEntropyLoss,
    inputs: Inputs,
    y: Tensor,
}

impl<M: MultiInput> TextTrainStep<M> {
    fn new(model: M) -> Result<Self> {
        let optimizer = Adam::new(vec![ParamGroup::new(named_parameters(&model), AdamConfig::new(1e-3))])?;
        let lengths = batch_lengths();
        let longest = *lengths.iter().max().expect("a batch");
        tch::manual_seed(0);
        let cpu = (Kind::Int64, Device::Cpu);
        let ids = Tensor::randint_low(1, VOCAB, [BATCH as i64, longest], cpu);
        let lengths = Tensor::from_slice(&lengths);
        let pad = Tensor::arange(longest, cpu).unsqueeze(0).ge_tensor(&lengths.unsqueeze(1));
        let ids = ids.masked_fill(&pad, 0);
        let y = Tensor::randint(CLASSES as i64, [BATCH as i64], cpu);
        let inputs = Inputs::new().with("ids", ids).with("lengths", lengths);
        Ok(TextTrainStep { model, optimizer, loss: CrossEntropyLoss::new(), inputs, y })
    }
}

impl<M: MultiInput> Workload for TextTrainStep<M> {
    fn run(&mut self) -> Result<()> {
        self.optimizer.zero_grad()?;
        let logits = self.model.forward_inputs(&self.inputs, true)?;
        let loss = self.loss.forward(&logits, &self.y)?;
        loss.backward();
        self.optimizer.step()?;
        Ok(())
    }
}

/// One epoch of the text input pipeline: a TextFolder read file by file, each document
/// tokenized by `T` in the loader's workers (a [`WordVocab`] of the corpus: lower-cased, split
/// at white space and punctuation, looked up; or the corpus's Hugging Face WordPiece
/// tokenizer), padded to the batch's longest (cut at [`MAX_LEN`]) into `ids` + `lengths`
/// tensors by the recipe's collate; batch [`BATCH`], shuffled.
struct TextPipeline<T: Tokenizer> {
    loader: DataLoader<Tokenized<TextFolder, T>, TextCollate>,
    epoch: u64,
}

impl TextPipeline<WordVocab> {
    fn word_level(corpus: &Path, workers: usize) -> Result<Box<dyn Workload>> {
        let folder = TextFolder::new(corpus)?;
        let texts = (0..folder.samples().len()).map(|i| folder.read(i)).collect::<Result<Vec<_>, _>>()?;
        let vocab = WordVocab::build(&texts, &WordVocabConfig::default())?;
        Ok(Box::new(Self::new(folder, vocab, workers)?))
    }
}

impl TextPipeline<HfTokenizer> {
    fn hugging_face(corpus: &Path, workers: usize) -> Result<Box<dyn Workload>> {
        let tokenizer = HfTokenizer::from_file(corpus.join(TOKENIZER_FILE))?;
        Ok(Box::new(Self::new(TextFolder::new(corpus)?, tokenizer, workers)?))
    }
}

impl<T: Tokenizer + Send + Sync + 'static> TextPipeline<T> {
    fn new(folder: TextFolder, tokenizer: T, workers: usize) -> Result<Self> {
        let collate = TextCollate(PadCollate::new(tokenizer.pad_id(), Some(MAX_LEN))?);
        let loader = DataLoaderBuilder::new(Tokenized::new(folder, tokenizer))
            .collate(collate)
            .batch_size(BATCH)
            .shuffle(true)
            .num_workers(workers)
            .seed(0)
            .build()?;
        Ok(TextPipeline { loader, epoch: 0 })
    }
}

impl<T: Tokenizer + Send + Sync + 'static> Workload for TextPipeline<T> {
    fn run(&mut self) -> Result<()> {
        self.epoch += 1;
        let mut seen = 0;
        for batch in self.loader.epoch(self.epoch) {
            let (inputs, _labels) = batch?;
            seen += inputs.get("lengths")?.size()[0];
        }
        if seen as usize != self.loader.dataset().len() {
            bail!("the epoch yielded {seen} documents");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlight_text::Tokenizer;

    #[test]
    fn both_sides_tokenize_the_corpus_alike_word_level_and_with_hugging_face() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("corpus");
        write_corpus(&root).unwrap();
        let first = root.join("class_0/0000.txt");
        let modified = std::fs::metadata(&first).unwrap().modified().unwrap();
        write_corpus(&root).unwrap();
        assert_eq!(std::fs::metadata(&first).unwrap().modified().unwrap(), modified, "written once");

        let folder = TextFolder::new(&root).unwrap();
        assert_eq!(folder.samples().len(), CLASSES * DOCS_PER_CLASS);
        let texts: Vec<String> = (0..folder.samples().len()).map(|i| folder.read(i).unwrap()).collect();
        let vocab = WordVocab::build(&texts, &WordVocabConfig::default()).unwrap();
        let words: Vec<usize> = texts.iter().map(|t| torchlight_text::split_words(t, true).len()).collect();
        assert!(words.iter().all(|&n| n > 20) && words.iter().any(|&n| n > 400), "punctuation adds tokens");

        // The PyTorch side's vocabulary (in id order) and the ids of documents 0 and 1999.
        let check = "import sys, pytorch_text_bench as b\n\
                     ds = b.TextFiles(sys.argv[1])\n\
                     print(' '.join(ds.vocab))\n\
                     print(' '.join(str(i) for i in ds[0][0].tolist()))\n\
                     print(' '.join(str(i) for i in ds[1999][0].tolist()))\n\
                     hf = b.HfTextFiles(sys.argv[1])\n\
                     print(' '.join(str(i) for i in hf[0][0].tolist()))\n\
                     print(' '.join(str(i) for i in hf[1999][0].tolist()))\n";
        let python = torchlight_testing::reference_python().unwrap();
        let output = std::process::Command::new(&python)
            .current_dir(torchlight_testing::workspace_root().join("crates/bench"))
            .args(["-c", check])
            .arg(&root)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let stdout = String::from_utf8(output.stdout).unwrap();
        let lines: Vec<&str> = stdout.lines().collect();
        let theirs: Vec<&str> = lines[0].split(' ').collect();
        assert_eq!(theirs, vocab.tokens(), "the same vocabulary in the same order");
        for (line, doc) in [(lines[1], 0), (lines[2], 1999)] {
            let ids: Vec<u32> = line.split(' ').map(|i| i.parse().unwrap()).collect();
            assert_eq!(ids, vocab.encode(&texts[doc]).unwrap(), "document {doc}");
        }
        // The `tokenizers` package (0.23.2, in the reference environment) and the crate on the
        // same `tokenizer.json`: the same ids, exactly.
        let hf = HfTokenizer::from_file(root.join(TOKENIZER_FILE)).unwrap();
        assert!(hf.vocab_size() > 5000 && hf.vocab_size() <= HF_VOCAB, "{}", hf.vocab_size());
        for (line, doc) in [(lines[3], 0), (lines[4], 1999)] {
            let ids: Vec<u32> = line.split(' ').map(|i| i.parse().unwrap()).collect();
            let ours = hf.encode(&texts[doc]).unwrap();
            assert!(ours.len() > 20 && !ours.contains(&hf.unk_id().unwrap()), "document {doc}: {ours:?}");
            assert_eq!(ids, ours, "document {doc}, Hugging Face");
        }
    }

    #[test]
    fn a_text_train_step_runs_on_lengths_20_to_400() {
        let lengths = batch_lengths();
        assert!(lengths.iter().all(|l| (20..=400).contains(l)));
        assert!(*lengths.iter().min().unwrap() < 40 && *lengths.iter().max().unwrap() > 380);
        let model = FastText::new(&TextClassifierConfig::new(VOCAB, CLASSES as i64).with_embed_dim(8));
        let mut step = TextTrainStep::new(model).unwrap();
        let before = step.model.fc.weight.copy();
        step.run().unwrap();
        assert!(!step.model.fc.weight.equal(&before), "the Adam step moved the weights");
    }
}
