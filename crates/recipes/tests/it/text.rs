//! The text recipe end to end on generated TextFolders: each of the four models learns, a run
//! resumes, the tokenizer lands in the run folder, and bad `[text]` values are named.

use crate::{temp_dir, torch_rng_lock};
use std::path::Path;
use torchlight_recipes::text::{fit, resume, TOKENIZER_FILE, VOCAB_FILE};
use torchlight_recipes::*;
use torchlight_train::Progress;

/// The words that decide each class; every document holds five of its class's among filler.
const KEYWORDS: [[&str; 3]; 3] =
    [["apple", "pear", "plum"], ["river", "lake", "sea"], ["iron", "gold", "tin"]];

/// Writes `root/<split>/<class>/<i>.txt` for each `(split, per_class)`: 32-word documents of
/// filler words (`w0` ... `w39`) with five of the class's keywords at random places.
pub(crate) fn write_corpus(root: &Path, splits: &[(&str, usize)], seed: u64) {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) | 1;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let classes = ["fruit", "water", "metal"];
    for (split, per_class) in splits {
        for (c, class) in classes.iter().enumerate() {
            let dir = root.join(split).join(class);
            std::fs::create_dir_all(&dir).unwrap();
            for i in 0..*per_class {
                let mut words: Vec<String> = (0..27).map(|_| format!("w{}", next(40))).collect();
                for _ in 0..5 {
                    let at = next(words.len() + 1);
                    words.insert(at, KEYWORDS[c][next(3)].to_string());
                }
                std::fs::write(dir.join(format!("{i:03}.txt")), words.join(" ") + ".\n").unwrap();
            }
        }
    }
}

fn text_config(root: &Path, out: &Path, model: &str, epochs: usize) -> TrainConfig {
    let mut c = TrainConfig::default();
    c.train.task = TaskKind::Text;
    c.model.name = model.to_string();
    c.data.root = root.to_path_buf();
    c.data.workers = 1;
    c.data.val_fraction = 0.25;
    c.text.max_len = 32;
    c.text.embed_dim = 16;
    c.text.num_filters = 16;
    c.text.hidden_size = 16;
    c.text.dim_feedforward = 32;
    c.text.encoder_layers = 1;
    c.text.dropout = 0.1;
    c.optim.lr = 1e-2;
    c.train.epochs = epochs;
    c.train.batch_size = 16;
    c.train.top_k = 2;
    c.train.device = "cpu".into();
    c.train.out_dir = out.to_path_buf();
    c
}

/// Trains `model` for `epochs` on 60 documents a class (a quarter held out) and returns its
/// best validation accuracy, checking the run folder on the way.
fn learns(model: &str, epochs: usize) {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let (root, out) = (tmp.path().join("data"), tmp.path().join("runs"));
    write_corpus(&root, &[("train", 60)], 3);
    let summary = fit(text_config(&root, &out, model, epochs), &Progress::quiet()).unwrap();
    // Chance is 1/3.
    assert!(summary.best_val_acc > 0.8, "{model}: best val_acc {}", summary.best_val_acc);
    let run = &summary.run_dir;
    for file in
        [VOCAB_FILE, "config.toml", "metrics.csv", "summary.json", "checkpoints/best", "checkpoints/last"]
    {
        assert!(run.join(file).exists(), "{model}: no {file} in {}", run.display());
    }
    let config = TrainConfig::from_toml_file(run.join("config.toml")).unwrap();
    assert_eq!((config.train.task, config.model.name.as_str()), (TaskKind::Text, model));
}

#[test]
fn fasttext_learns_a_generated_corpus() {
    learns("fasttext", 10);
}

#[test]
fn textcnn_learns_a_generated_corpus() {
    learns("textcnn", 5);
}

#[test]
fn bilstm_learns_a_generated_corpus() {
    learns("bilstm", 8);
}

#[test]
fn transformer_learns_a_generated_corpus() {
    learns("transformer", 8);
}

#[test]
fn a_text_run_resumes_from_its_folder_with_its_tokenizer() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let (root, out) = (tmp.path().join("data"), tmp.path().join("runs"));
    write_corpus(&root, &[("train", 24), ("test", 6)], 5);
    let first = fit(text_config(&root, &out, "textcnn", 2), &Progress::quiet()).unwrap();
    assert_eq!(first.epochs, 2);
    let run = first.run_dir.clone();
    let vocab = std::fs::read_to_string(run.join(VOCAB_FILE)).unwrap();
    // More training data after the start must not change the run's ids: resume reads its vocabulary.
    write_corpus(&root, &[("train", 30)], 9);
    let changes = vec![("train.epochs".to_string(), "4".to_string())];
    let second = resume(&run, &changes, &Progress::quiet()).unwrap();
    assert_eq!((second.epochs, second.run_dir.as_path()), (4, run.as_path()));
    assert_eq!(std::fs::read_to_string(run.join(VOCAB_FILE)).unwrap(), vocab);
    let rows = std::fs::read_to_string(run.join("metrics.csv")).unwrap().lines().count();
    assert_eq!(rows, 1 + 4, "a header and one row per epoch");
    assert!(second.test_acc.is_some(), "the test split runs on the best checkpoint");
    // A resumed text run keeps what it learns from.
    let err = resume(&run, &[("text.max_len".into(), "16".into())], &Progress::quiet()).unwrap_err();
    assert!(err.to_string().contains("text.max_len"), "{err}");
}

#[test]
fn a_given_tokenizer_file_is_used_and_saved_in_the_run_folder() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let (root, out) = (tmp.path().join("data"), tmp.path().join("runs"));
    write_corpus(&root, &[("train", 12)], 7);
    // A vocabulary made elsewhere (a word one here: any file load_tokenizer reads will do).
    let words = "apple pear plum river lake sea iron gold tin";
    let vocab =
        torchlight_text::WordVocab::build([words], &torchlight_text::WordVocabConfig::default()).unwrap();
    let given = tmp.path().join("given.json");
    torchlight_text::Tokenizer::save(&vocab, &given).unwrap();
    let mut config = text_config(&root, &out, "fasttext", 1);
    config.text.tokenizer = Some(given.clone());
    let summary = fit(config, &Progress::quiet()).unwrap();
    let saved = summary.run_dir.join(TOKENIZER_FILE);
    assert_eq!(std::fs::read_to_string(saved).unwrap(), std::fs::read_to_string(given).unwrap());
    assert!(!summary.run_dir.join(VOCAB_FILE).exists());
    // Its checkpoints carry it under the run folder's file name.
    let best = torchlight_checkpoint::Checkpoint::load(summary.run_dir.join("checkpoints/best")).unwrap();
    let carried = ModelCard::from_checkpoint(&best).unwrap().tokenizer.unwrap();
    assert_eq!((carried.file.as_str(), carried.vocab_size), (TOKENIZER_FILE, 11));
}

#[test]
fn bad_text_config_values_are_named() {
    let tmp = temp_dir();
    let (root, out) = (tmp.path().join("data"), tmp.path().join("runs"));
    write_corpus(&root, &[("train", 4)], 1);
    let named = |edit: &dyn Fn(&mut TrainConfig), field: &str| {
        let mut c = text_config(&root, &out, "textcnn", 1);
        edit(&mut c);
        let err = fit(c, &Progress::quiet()).unwrap_err().to_string();
        assert!(err.contains(field) && !err.contains('\n'), "{field}: {err}");
    };
    named(&|c| c.text.max_len = 0, "text.max_len");
    named(&|c| c.text.min_freq = 0, "text.min_freq");
    named(&|c| c.text.nhead = 3, "text.nhead");
    named(&|c| c.text.dropout = 1.5, "text.dropout");
    named(&|c| c.model.name = "resnet18".into(), "model.name");
    named(&|c| c.train.mixup_alpha = 0.2, "train.mixup_alpha");
    named(&|c| c.text.tokenizer = Some(tmp.path().join("missing.json")), "missing.json");
    assert!(!out.exists(), "a failed start leaves no run folder");
    let mut c = TrainConfig::default();
    let err = c.set("task", "audio").unwrap_err().to_string();
    assert!(err.contains("train.task") && err.contains("image") && err.contains("text"), "{err}");
    let err = c.set("text.max_lenght", "3").unwrap_err().to_string();
    assert!(err.contains("text.max_lenght"), "{err}");
    // The image recipe refuses a text config, naming the key.
    c.set("task", "text").unwrap();
    c.model.name = "textcnn".into();
    c.data.root = root.clone();
    let err = torchlight_recipes::image::fit(c, &Progress::quiet()).unwrap_err().to_string();
    assert!(err.contains("train.task"), "{err}");
}

/// Copies the files of the checkpoint folder `from` into `to` (a checkpoint has no subfolders).
fn copy_checkpoint(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn a_checkpoint_carries_its_tokenizer_and_classifies_as_the_models_forward() {
    use tch::{Device, Tensor};
    use torchlight_checkpoint::Checkpoint;
    use torchlight_recipes::text::{as_multi_input, document_inputs, text_logits};
    use torchlight_text::Tokenizer as _;
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let (root, out) = (tmp.path().join("data"), tmp.path().join("runs"));
    write_corpus(&root, &[("train", 6), ("val", 2)], 11);
    // Longer than text.max_len (8): the cut is part of what must match.
    let text = "apple w3 pear w7 w7 plum river w1 lake w30 unseen words here";
    for model in TEXT_MODELS {
        let mut config = text_config(&root, &out, model, 1);
        config.text.max_len = 8;
        let summary = fit(config, &Progress::quiet()).unwrap();
        let run = &summary.run_dir;
        // The checkpoint folder alone, away from its run folder's vocab.json.
        let copied = tmp.path().join(format!("copied-{model}"));
        copy_checkpoint(&run.join("checkpoints/best"), &copied);
        let saved: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join(VOCAB_FILE)).unwrap()).unwrap();
        std::fs::remove_file(run.join(VOCAB_FILE)).unwrap();
        let checkpoint = Checkpoint::load(&copied).unwrap();
        let card = ModelCard::from_checkpoint(&checkpoint).unwrap();
        let carried = card.tokenizer.as_ref().expect("a text card carries its tokenizer");
        assert_eq!((carried.file.as_str(), &carried.json), (VOCAB_FILE, &saved), "{model}");
        assert_eq!(checkpoint.meta.config["tokenizer"]["json"], saved, "{model}: where export reads it");
        let tokenizer = card.text_tokenizer(&copied).unwrap();
        assert_eq!(tokenizer.vocab_size(), carried.vocab_size);
        let net = card.build_model(Device::Cpu).unwrap();
        checkpoint.restore_model(net.as_ref()).unwrap();
        assert_eq!(card.head().unwrap(), "fc");

        // What predict computes, against the model's own one-tensor forward on the same ids
        // cut by hand: equal to the bit (same process, CPU).
        let inputs = document_inputs(tokenizer.as_ref(), text, 8).unwrap();
        let logits = text_logits(net.as_ref(), &inputs, Device::Cpu).unwrap();
        let ids: Vec<i64> = tokenizer.encode(text).unwrap().into_iter().take(8).map(i64::from).collect();
        assert_eq!(ids.len(), 8, "{model}: the text is longer than max_len");
        let x = Tensor::from_slice(&ids).view([1, -1]);
        let want = tch::no_grad(|| net.forward_t(&x, false));
        assert_eq!(logits.size(), [1, 3], "{model}");
        assert!(logits.equal(&want), "{model}: {logits} vs {want}");
        let lengths = Tensor::from_slice(&[8i64]);
        let m = as_multi_input(net.as_ref()).unwrap();
        let by_inputs = tch::no_grad(|| {
            m.forward_inputs(&torchlight_nn::Inputs::new().with("ids", x).with("lengths", lengths), false)
        })
        .unwrap();
        assert!(logits.equal(&by_inputs), "{model}");

        let err = document_inputs(tokenizer.as_ref(), " \n\t", 8).unwrap_err().to_string();
        assert!(err.contains("empty text"), "{err}");
    }
}

#[test]
fn a_text_checkpoint_saved_without_its_tokenizer_takes_its_run_folders() {
    use torchlight_checkpoint::Checkpoint;
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let (root, out) = (tmp.path().join("data"), tmp.path().join("runs"));
    write_corpus(&root, &[("train", 4)], 13);
    let summary = fit(text_config(&root, &out, "fasttext", 1), &Progress::quiet()).unwrap();
    let last = summary.run_dir.join("checkpoints/last");
    let carried = ModelCard::from_checkpoint(&Checkpoint::load(&last).unwrap()).unwrap().tokenizer.unwrap();
    // As a checkpoint saved before tokenizers travelled: no `tokenizer` in its card.
    let meta_path = last.join("meta.json");
    let mut meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&meta_path).unwrap()).unwrap();
    meta["config"].as_object_mut().unwrap().remove("tokenizer").unwrap();
    std::fs::write(&meta_path, serde_json::to_string(&meta).unwrap()).unwrap();
    let card = ModelCard::from_checkpoint(&Checkpoint::load(&last).unwrap()).unwrap();
    assert_eq!(card.tokenizer.as_ref(), Some(&carried), "read from the run folder's vocab.json");
    // Outside its run folder it has none, and says what to do.
    let alone = tmp.path().join("alone");
    copy_checkpoint(&last, &alone);
    let card = ModelCard::from_checkpoint(&Checkpoint::load(&alone).unwrap()).unwrap();
    let err = card.text_tokenizer(&alone).err().unwrap().to_string();
    assert!(err.contains("without its tokenizer") && err.contains("vocab.json"), "{err}");
    assert!(card.build_model(tch::Device::Cpu).is_err());
}

/// `(text, label)` records of the three keyword classes, `per_class` each: texts with commas,
/// quotes and a line break inside, labels the class names.
fn records(per_class: usize, seed: u64) -> Vec<(String, &'static str)> {
    let mut state = seed.wrapping_mul(6364136223846793005) | 1;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut out = Vec::new();
    for i in 0..per_class {
        for (c, class) in ["fruit", "water", "metal"].into_iter().enumerate() {
            let filler: Vec<String> = (0..6 + next(10)).map(|_| format!("w{}", next(40))).collect();
            let k = |n: usize| KEYWORDS[c][n % 3];
            let text = format!("{}, \"{}\" {}\n{} {i}", k(next(3)), k(next(3)), filler.join(" "), k(next(3)));
            out.push((text, class));
        }
    }
    out
}

fn csv_field(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

fn write_csv(path: &Path, rows: &[(String, &str)]) {
    let body: String = rows.iter().map(|(t, l)| format!("{l},{}\n", csv_field(t))).collect();
    std::fs::write(path, format!("label,text\n{body}")).unwrap();
}

fn write_jsonl(path: &Path, rows: &[(String, &str)], text_key: &str) {
    let body: String =
        rows.iter().map(|(t, l)| serde_json::json!({ text_key: t, "label": l }).to_string() + "\n").collect();
    std::fs::write(path, body).unwrap();
}

#[test]
fn a_csv_file_of_records_trains_and_resumes() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let (csv, out) = (tmp.path().join("reviews.csv"), tmp.path().join("runs"));
    write_csv(&csv, &records(12, 1));
    let first = fit(text_config(&csv, &out, "textcnn", 1), &Progress::quiet()).unwrap();
    assert_eq!(first.epochs, 1);
    let changes = vec![("train.epochs".to_string(), "2".to_string())];
    let second = resume(&first.run_dir, &changes, &Progress::quiet()).unwrap();
    assert_eq!(second.epochs, 2);
    // The vocabulary holds the words of the quoted, multi-line texts.
    let vocab = std::fs::read_to_string(first.run_dir.join(VOCAB_FILE)).unwrap();
    assert!(vocab.contains("\"apple\"") && vocab.contains("\"w7\""), "{vocab}");
}

#[test]
fn a_folder_of_json_lines_files_trains_and_resumes() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let (root, out) = (tmp.path().join("data"), tmp.path().join("runs"));
    std::fs::create_dir_all(&root).unwrap();
    write_jsonl(&root.join("train.jsonl"), &records(10, 2), "review");
    write_jsonl(&root.join("val.jsonl"), &records(3, 3), "review");
    write_jsonl(&root.join("test.jsonl"), &records(2, 4), "review");
    let mut config = text_config(&root, &out, "fasttext", 1);
    config.text.text_column = "review".into();
    let first = fit(config, &Progress::quiet()).unwrap();
    assert_eq!(first.epochs, 1);
    let changes = vec![("train.epochs".to_string(), "2".to_string())];
    let second = resume(&first.run_dir, &changes, &Progress::quiet()).unwrap();
    assert_eq!(second.epochs, 2);
    assert!(second.test_acc.is_some(), "test.jsonl is the test split");
}

#[test]
fn bad_records_are_named_by_file_and_line() {
    let tmp = temp_dir();
    let out = tmp.path().join("runs");
    let fails = |name: &str, body: &str, want: &[&str]| {
        let path = tmp.path().join(name);
        std::fs::write(&path, body).unwrap();
        let err = fit(text_config(&path, &out, "fasttext", 1), &Progress::quiet()).unwrap_err().to_string();
        for part in [name].iter().chain(want) {
            assert!(err.contains(part), "{name}: {part:?} not in {err}");
        }
    };
    let ok: String = records(4, 5).iter().map(|(t, l)| format!("{l},{}\n", csv_field(t))).collect();
    // The first record spans lines 2-3, each after it two lines.
    fails("extra.csv", &format!("label,text\n{ok}fruit,apple,pear\n"), &["line 26"]);
    fails("empty.csv", &format!("label,text\n{ok}water,\"  \"\n"), &["line 26", "empty"]);
    fails(
        "nolabel.jsonl",
        "{\"text\": \"apple\", \"label\": \"fruit\"}\n{\"text\": \"sea\"}\n",
        &["line 2", "label"],
    );
    // A validation label the training file lacks.
    let root = tmp.path().join("split");
    std::fs::create_dir_all(&root).unwrap();
    write_csv(&root.join("train.csv"), &records(4, 6));
    std::fs::write(root.join("val.csv"), "label,text\nfruit,apple\nstone,rock\n").unwrap();
    let err = fit(text_config(&root, &out, "fasttext", 1), &Progress::quiet()).unwrap_err().to_string();
    assert!(err.contains("val.csv") && err.contains("line 3") && err.contains("stone"), "{err}");
    assert!(!out.exists(), "a failed start leaves no run folder");
}

/// The `lengths` of every training batch of `epoch` from `first` on, with `text.bucket` and
/// `data.workers` as given, over records of 2 to 40 words.
fn batch_lengths(csv: &Path, bucket: bool, workers: usize, epoch: u64, first: usize) -> Vec<Vec<i64>> {
    use torchlight_recipes::text::{loader, new_tokenizer, open_splits, TextDataset};
    let mut config = text_config(csv, Path::new("unused"), "fasttext", 1);
    config.text.bucket = bucket;
    config.data.workers = workers;
    config.train.batch_size = 8;
    config.train.seed = 11;
    let splits = open_splits(&config).unwrap();
    let (tokenizer, _) = new_tokenizer(&config, &splits).unwrap();
    let set: TextDataset = torchlight_text::Tokenized::new(splits.train, tokenizer);
    let mut loader = loader(set, &config, true, tch::Device::Cpu).unwrap();
    let batches: Vec<Vec<i64>> = loader
        .epoch_from(epoch, first)
        .map(|b| Vec::<i64>::try_from(b.unwrap().0.get("lengths").unwrap()).unwrap())
        .collect();
    batches
}

#[test]
fn bucketed_batches_hold_similar_lengths_at_any_worker_count_and_resume_mid_epoch() {
    let tmp = temp_dir();
    let csv = tmp.path().join("mixed.csv");
    // Measured: a mean spread (longest - shortest in a batch) of 3.2 tokens bucketed, 26.1 not.
    let rows: Vec<(String, &str)> = (0..96)
        .map(|i| {
            let words: Vec<String> = (0..2 + (i * 7) % 39).map(|w| format!("w{w}")).collect();
            (words.join(" "), ["a", "b"][i % 2])
        })
        .collect();
    write_csv(&csv, &rows);
    let spread = |batches: &[Vec<i64>]| -> f64 {
        let sum: i64 = batches.iter().map(|b| b.iter().max().unwrap() - b.iter().min().unwrap()).sum();
        sum as f64 / batches.len() as f64
    };
    let plain = batch_lengths(&csv, false, 0, 1, 0);
    let bucketed = batch_lengths(&csv, true, 0, 1, 0);
    let (plain_spread, bucket_spread) = (spread(&plain), spread(&bucketed));
    assert!(bucket_spread * 4.0 < plain_spread, "mean spread {bucket_spread} bucketed, {plain_spread} not");
    let count = |b: &[Vec<i64>]| b.iter().map(Vec::len).sum::<usize>();
    assert_eq!((count(&plain), count(&bucketed)), (72, 72), "every training document once");
    assert_eq!(batch_lengths(&csv, true, 2, 1, 0), bucketed, "the same batches with 2 workers");
    assert_ne!(batch_lengths(&csv, true, 0, 2, 0), bucketed, "another order each epoch");
    // A resume at batch 4 of the epoch (what the Trainer asks the loader for) yields the rest.
    assert_eq!(batch_lengths(&csv, true, 2, 1, 4), bucketed[4..]);
}

#[test]
fn a_bucketed_text_run_resumed_after_epoch_1_ends_where_the_straight_run_ends() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let csv = tmp.path().join("r.csv");
    write_csv(&csv, &records(8, 7));
    let run = |out: &str, epochs: usize| {
        let mut c = text_config(&csv, &tmp.path().join(out), "fasttext", epochs);
        c.text.bucket = true;
        c.train.batch_size = 4;
        c.train.checkpoint_every_steps = Some(2);
        fit(c, &Progress::quiet()).unwrap()
    };
    let straight = run("a", 2);
    let first = run("b", 1);
    let changes = vec![("train.epochs".to_string(), "2".to_string())];
    let resumed = resume(&first.run_dir, &changes, &Progress::quiet()).unwrap();
    let metrics =
        |s: &torchlight_recipes::RunSummary| std::fs::read_to_string(s.run_dir.join("metrics.csv")).unwrap();
    let last_row =
        |s: String| s.lines().last().unwrap().split(',').skip(1).take(6).collect::<Vec<_>>().join(",");
    // lr, train loss and accuracy, val loss, accuracy and top-2 of epoch 2, to every digit.
    assert_eq!(last_row(metrics(&resumed)), last_row(metrics(&straight)));
}

/// The documents (by the number of their first word, `docN`) in each batch that rank `rank` of
/// `world` loads from `split` in epoch 1: `train` (shuffled, bucketed with `bucket`) or `val`,
/// from a records folder of 32 training and 6 validation documents of 1 to 12 words.
fn rank_batches(root: &Path, split: &str, bucket: bool, shard: Option<(usize, usize)>) -> Vec<Vec<usize>> {
    use torchlight_recipes::text::{new_tokenizer, open_splits, sharded_loader};
    let mut config = text_config(root, Path::new("unused"), "fasttext", 1);
    config.text.bucket = bucket;
    config.train.batch_size = 4;
    config.data.workers = 0;
    let splits = open_splits(&config).unwrap();
    let (tokenizer, _) = new_tokenizer(&config, &splits).unwrap();
    let id_of: std::collections::HashMap<u32, usize> =
        (0..32).map(|n| (tokenizer.encode(&format!("doc{n}")).unwrap()[0], n)).collect();
    let (docs, train) = if split == "train" { (splits.train, true) } else { (splits.val, false) };
    let set = torchlight_text::Tokenized::new(docs, tokenizer);
    let mut loader = sharded_loader(set, &config, train, tch::Device::Cpu, shard).unwrap();
    loader
        .epoch_from(1, 0)
        .map(|b| {
            let ids = b.unwrap().0.get("ids").unwrap().select(1, 0);
            Vec::<i64>::try_from(ids).unwrap().iter().map(|&id| id_of[&(id as u32)]).collect()
        })
        .collect()
}

#[test]
fn two_ranks_load_disjoint_shards_of_the_documents_plain_and_bucketed() {
    let tmp = temp_dir();
    let root = tmp.path().join("records");
    std::fs::create_dir_all(&root).unwrap();
    let rows = |range: std::ops::Range<usize>| -> Vec<(String, &str)> {
        range
            .map(|n| {
                let words: Vec<String> = (0..n % 12).map(|w| format!("w{w}")).collect();
                (format!("doc{n} {}", words.join(" ")), ["a", "b"][n % 2])
            })
            .collect()
    };
    write_csv(&root.join("train.csv"), &rows(0..32));
    // The validation documents repeat the first six, so their first words are in the vocabulary.
    write_csv(&root.join("val.csv"), &rows(0..6));
    for (split, bucket, docs) in [("train", false, 32), ("train", true, 32), ("val", false, 6)] {
        let what = format!("{split}, text.bucket = {bucket}");
        let whole: Vec<usize> = rank_batches(&root, split, bucket, None).concat();
        assert_eq!(whole.len(), docs, "{what}");
        let ranks: Vec<Vec<Vec<usize>>> =
            (0..2).map(|r| rank_batches(&root, split, bucket, Some((r, 2)))).collect();
        assert_eq!(ranks[0].len(), ranks[1].len(), "{what}: as many steps on every rank");
        assert!(ranks.iter().flatten().all(|b| b.len() == 4 || (b.len() == 3 && split == "val")), "{what}");
        let mut seen: Vec<usize> = ranks.concat().concat();
        seen.sort_unstable();
        let mut expected = whole.clone();
        expected.sort_unstable();
        assert_eq!(seen, expected, "{what}: the ranks' shards are disjoint and cover the split");
    }
    // Bucketed, every rank's batch is one the whole run would have made (of similar lengths).
    let whole = rank_batches(&root, "train", true, None);
    for batch in rank_batches(&root, "train", true, Some((1, 2))) {
        assert!(whole.contains(&batch), "{batch:?} is not one of {whole:?}");
    }
}
