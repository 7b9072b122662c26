//! Text classification end to end: a small three-class corpus written as a TextFolder
//! (`train/<class>/*.txt`, `test/<class>/*.txt`), a TextCNN trained by the text recipe (the
//! one behind `torchlight train --task text`), then the best checkpoint loaded back with the
//! run's own tokenizer to classify two new sentences, and exported to ONNX (inputs `ids` and
//! `lengths`).
//!
//! `cargo run --example text_classification`

use std::path::Path;
use torchlight::export::{export_text_onnx, TextOnnxOptions};
use torchlight::nn::{Inputs, MultiInput, TextCnn};
use torchlight::prelude::*;
use torchlight::recipes::text::{fit, run_tokenizer, text_classifier_config};
use torchlight::recipes::{selected_checkpoint, TaskKind, TrainConfig};
use torchlight::train::Progress;

const CLASSES: [&str; 3] = ["sport", "weather", "cooking"];
/// The words that give each class away; every document holds a few of its class's among filler.
const KEYWORDS: [[&str; 4]; 3] = [
    ["goal", "match", "team", "score"],
    ["rain", "cloud", "wind", "storm"],
    ["oven", "recipe", "butter", "flour"],
];
const FILLER: [&str; 12] =
    ["the", "a", "today", "was", "very", "we", "saw", "again", "and", "then", "some", "later"];

/// Writes `root/<split>/<class>/<i>.txt`, `per_class` 16-word documents a class, from a
/// seeded xorshift generator.
fn write_corpus(root: &Path, split: &str, per_class: usize, seed: u64) -> std::io::Result<()> {
    let mut state = seed | 1;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    for (c, class) in CLASSES.iter().enumerate() {
        let dir = root.join(split).join(class);
        std::fs::create_dir_all(&dir)?;
        for i in 0..per_class {
            let mut words: Vec<&str> = (0..12).map(|_| FILLER[next(FILLER.len())]).collect();
            for _ in 0..4 {
                let at = next(words.len() + 1);
                words.insert(at, KEYWORDS[c][next(4)]);
            }
            std::fs::write(dir.join(format!("{i:03}.txt")), words.join(" ") + ".\n")?;
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let work = std::env::temp_dir().join("tl-text-classification");
    let _ = std::fs::remove_dir_all(&work);
    let data = work.join("data");
    write_corpus(&data, "train", 40, 7)?;
    write_corpus(&data, "test", 10, 11)?;

    // `torchlight train --task text --model textcnn` with a config of tiny sizes.
    let mut config = TrainConfig::default();
    config.train.task = TaskKind::Text;
    config.model.name = "textcnn".into();
    config.data.root = data.clone();
    config.data.workers = 0;
    config.data.val_fraction = 0.25;
    config.text.max_len = 32;
    config.text.embed_dim = 16;
    config.text.num_filters = 16;
    config.text.dropout = 0.1;
    config.optim.lr = 1e-2;
    config.train.epochs = 3;
    config.train.batch_size = 16;
    config.train.device = "cpu".into();
    config.train.seed = 0;
    config.train.out_dir = work.join("runs");
    let summary = fit(config, &Progress::quiet())?;
    println!(
        "trained {} epochs in {:.1} s: best val acc {:.3} at epoch {}, test acc {}",
        summary.epochs,
        summary.seconds,
        summary.best_val_acc,
        summary.best_epoch,
        summary.test_acc.map_or("-".into(), |a| format!("{a:.3}"))
    );

    // Load the best checkpoint back: the run's config sizes the model, the run's tokenizer
    // (vocab.json in the run folder) gives the ids the weights learnt.
    let run = &summary.run_dir;
    let config = TrainConfig::from_toml_file(run.join("config.toml"))?;
    let (tokenizer, vocab_path) = run_tokenizer(run)?;
    let model = TextCnn::new(&text_classifier_config(&config, tokenizer.vocab_size(), summary.classes.len()));
    let checkpoint = Checkpoint::load(selected_checkpoint(run))?;
    checkpoint.restore_model(&model)?;
    println!("loaded {} with the tokenizer {}", selected_checkpoint(run).display(), vocab_path.display());

    let sentences = ["The team scored a late goal in the match", "Heavy rain and wind again today"];
    let encoded: Vec<Vec<i64>> = sentences
        .iter()
        .map(|s| Ok(tokenizer.encode(s)?.into_iter().map(i64::from).collect()))
        .collect::<Result<_, Box<dyn std::error::Error>>>()?;
    let longest = encoded.iter().map(Vec::len).max().unwrap_or(1);
    let mut ids = vec![0i64; encoded.len() * longest];
    for (row, doc) in encoded.iter().enumerate() {
        ids[row * longest..row * longest + doc.len()].copy_from_slice(doc);
    }
    let lengths: Vec<i64> = encoded.iter().map(|d| d.len() as i64).collect();
    let inputs = Inputs::new()
        .with("ids", Tensor::from_slice(&ids).view([encoded.len() as i64, longest as i64]))
        .with("lengths", Tensor::from_slice(&lengths));
    let probs = {
        let _guard = no_grad();
        model.forward_inputs(&inputs, false)?.softmax(-1, Kind::Float)
    };
    let mut predicted = Vec::new();
    for (row, sentence) in sentences.iter().enumerate() {
        let p = probs.get(row as i64);
        let class = p.argmax(0, false).int64_value(&[]) as usize;
        println!("{sentence:?} -> {} ({:.3})", summary.classes[class], p.double_value(&[class as i64]));
        predicted.push(summary.classes[class].clone());
    }

    let onnx = work.join("textcnn.onnx");
    let options = TextOnnxOptions::new()
        .with_class_names(&summary.classes)
        .with_metadata("text.max_len", config.text.max_len.to_string());
    export_text_onnx(&model, &options, &onnx)?;
    println!("exported {} (inputs ids [batch, length] and lengths [batch])", onnx.display());

    if predicted != ["sport", "weather"] {
        return Err(format!("the model should tell the sentences apart (predicted {predicted:?})").into());
    }
    Ok(())
}
