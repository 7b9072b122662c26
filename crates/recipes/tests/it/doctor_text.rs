//! `doctor` on text configs: a clean generated TextFolder passes every check through all four
//! stages; a copied document, long documents, unseen validation words and an empty document
//! are each found and named; the generic overfit check trains a tiny FastText on `Inputs`.

use crate::text::write_corpus;
use crate::{temp_dir, torch_rng_lock};
use std::path::Path;
use tch::Device;
use torchlight_nn::{FastText, Inputs, TextClassifierConfig};
use torchlight_recipes::doctor::*;
use torchlight_recipes::text::{loader, new_tokenizer, open_splits};
use torchlight_recipes::*;
use torchlight_tensor::seed_everything;
use torchlight_text::Tokenized;

/// A tiny FastText config over `root` (33-token documents, so `text.max_len` 40 cuts none).
fn config(root: &Path) -> TrainConfig {
    let mut c = TrainConfig::default();
    c.train.task = TaskKind::Text;
    c.model.name = "fasttext".into();
    c.data.root = root.to_path_buf();
    c.data.workers = 0;
    c.text.max_len = 40;
    c.text.embed_dim = 16;
    c.optim.lr = 5e-2;
    c.train.batch_size = 8;
    c.train.device = "cpu".into();
    c
}

fn options() -> DoctorOptions {
    DoctorOptions { run_steps: 8, ..DoctorOptions::default() }
}

fn find<'a>(report: &'a [Finding], check: &str) -> &'a Finding {
    report.iter().find(|f| f.check == check).unwrap_or_else(|| panic!("no `{check}` in {report:#?}"))
}

#[test]
fn a_clean_corpus_passes_every_text_check_through_all_four_stages() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    write_corpus(tmp.path(), &[("train", 8), ("val", 4)], 1);
    let report = doctor(&config(tmp.path()), &options()).unwrap();
    let text = report.to_text();
    assert_eq!(report.worst(), Status::Pass, "{text}");
    for check in [
        "class_count",
        "unreadable_documents",
        "class_balance",
        "split_duplicates",
        "length_truncation",
        "unknown_tokens",
        "label_range",
        "batch_inputs",
        "batch_labels",
        "output_shape",
        "finite_activations",
        "initial_loss",
        "overfit_one_batch",
        "trainable_parameters",
        "lr_sanity",
        "loss_trend",
        "grad_flow",
        "data_stall",
    ] {
        assert!(report.get(check).is_some(), "`{check}` ran: {text}");
    }
    assert!(
        text.contains("[1] PASS  class_balance: train: fruit 8, metal 8, water 8; val: fruit 4"),
        "{text}"
    );
    assert!(
        text.contains("[1] PASS  length_truncation: tokens per training document: min 33, median 33, p95 33, max 33; text.max_len 40 cuts 0 of 24 (0.0%)"),
        "{text}"
    );
    let loss = report.get("initial_loss").unwrap().data["loss"].as_f64().unwrap();
    assert!((loss - 3f64.ln()).abs() < 0.3, "loss at init {loss} is near ln 3: {text}");
    let json = serde_json::to_value(&report).unwrap();
    let checks: Vec<&str> =
        json["findings"].as_array().unwrap().iter().map(|f| f["check"].as_str().unwrap()).collect();
    assert!(checks.contains(&"split_duplicates") && checks.contains(&"unknown_tokens"), "{checks:?}");
}

#[test]
fn a_document_copied_from_train_into_val_is_named_with_its_copy() {
    let tmp = temp_dir();
    write_corpus(tmp.path(), &[("train", 6), ("val", 3), ("test", 3)], 2);
    let original = tmp.path().join("train/fruit/002.txt");
    // The same words, other white space: still the same document.
    let text = std::fs::read_to_string(&original).unwrap().replace(' ', "  \n");
    let copy = tmp.path().join("val/water/copy.txt");
    std::fs::write(&copy, format!("\t{text}\n\n")).unwrap();
    std::fs::copy(tmp.path().join("train/metal/000.txt"), tmp.path().join("test/metal/again.txt")).unwrap();
    let found = check_data(&config(tmp.path()), &options()).unwrap();
    let dup = find(&found, "split_duplicates");
    assert_eq!(dup.status, Status::Warn, "{dup:?}");
    assert_eq!(
        dup.figure,
        format!(
            "1 val document is in train; 1 test document is in train, e.g. {} = {}",
            original.display(),
            copy.display()
        )
    );
    assert!(dup.fix.as_deref().unwrap().contains("remove the copies"), "{dup:?}");
    assert_eq!(
        dup.data["train_test"]["pairs"][0][1],
        tmp.path().join("test/metal/again.txt").display().to_string()
    );
    assert_eq!(dup.data["train_val"]["count"], 1);

    // A held-out val split is checked as training splits it: a document twice in train/ is a
    // leak when the seed puts one copy on each side, and a within-split duplicate otherwise.
    let tmp = temp_dir();
    write_corpus(tmp.path(), &[("train", 8)], 3);
    for i in 0..8 {
        std::fs::copy(
            tmp.path().join("train/fruit/000.txt"),
            tmp.path().join(format!("train/fruit/dup{i}.txt")),
        )
        .unwrap();
    }
    let mut c = config(tmp.path());
    c.data.val_fraction = 0.5;
    let found = check_data(&c, &options()).unwrap();
    let dup = find(&found, "split_duplicates");
    assert_eq!(dup.status, Status::Warn, "half of 9 copies land in val: {dup:?}");
    assert!(dup.figure.contains(" val document") && dup.figure.contains(" in train, e.g. "), "{dup:?}");
    assert!(dup.data["within_splits"].as_u64().unwrap() > 0, "{dup:?}");
    assert!(find(&found, "class_balance").figure.contains("(val: 50% of train/ held out, seed 0)"));
}

#[test]
fn long_documents_under_a_small_max_len_warn_with_the_share_and_a_max_len() {
    let tmp = temp_dir();
    write_corpus(tmp.path(), &[("train", 6), ("val", 2)], 4);
    // Two documents a class grow to 83 tokens; text.max_len 36 cuts them.
    for class in ["fruit", "metal", "water"] {
        for i in 0..2 {
            let path = tmp.path().join(format!("train/{class}/{i:03}.txt"));
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, format!("{text} {}", vec!["w1"; 50].join(" "))).unwrap();
        }
    }
    let mut c = config(tmp.path());
    c.text.max_len = 36;
    let found = check_data(&c, &options()).unwrap();
    let cut = find(&found, "length_truncation");
    assert_eq!(cut.status, Status::Warn, "{cut:?}");
    assert_eq!(
        cut.figure,
        "tokens per training document: min 33, median 33, p95 83, max 83; text.max_len 36 cuts 6 of 18 (33.3%), 282 tokens dropped"
    );
    assert_eq!(
        cut.fix.as_deref(),
        Some("set text.max_len = 83 (the 95th percentile), so the model reads the whole of most documents")
    );
    assert_eq!(cut.data["share"].as_f64().unwrap(), 6.0 / 18.0);
    // The suggested value is a valid setting that cuts nothing.
    c.set("text.max_len", "83").unwrap();
    c.validate().unwrap();
    assert_eq!(find(&check_data(&c, &options()).unwrap(), "length_truncation").status, Status::Pass);
}

#[test]
fn a_val_split_of_unseen_words_warns_on_unknown_tokens_and_names_them() {
    let tmp = temp_dir();
    write_corpus(tmp.path(), &[("train", 6)], 5);
    for class in ["fruit", "metal", "water"] {
        let dir = tmp.path().join("val").join(class);
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..2 {
            // 10 words: the class's keyword, "w3" (seen in train) and 8 words never seen.
            let unseen: Vec<String> = (0..8).map(|j| format!("novel{}", (i + j) % 3)).collect();
            std::fs::write(dir.join(format!("{i}.txt")), format!("w3 {} apple", unseen.join(" "))).unwrap();
        }
    }
    let c = config(tmp.path());
    let found = check_data(&c, &options()).unwrap();
    let unk = find(&found, "unknown_tokens");
    assert_eq!(unk.status, Status::Warn, "{unk:?}");
    assert!(
        unk.figure.starts_with("val: 48 of 60 tokens (80.0%) are unknown to the training vocabulary of"),
        "{unk:?}"
    );
    assert!(
        unk.figure.contains("(train 0.0%); most frequent: novel1 (18), novel0 (15), novel2 (15)"),
        "{unk:?}"
    );
    assert!(
        unk.fix.as_deref().unwrap().starts_with("every training word is in the vocabulary already"),
        "{unk:?}"
    );
    // A vocabulary that drops training words says which keys to change.
    let mut capped = c.clone();
    capped.text.min_freq = 1000;
    let unk = find(&check_data(&capped, &options()).unwrap(), "unknown_tokens").clone();
    assert!(unk.fix.as_deref().unwrap().contains("lower text.min_freq (now 1000) toward 1"), "{unk:?}");
    assert!(unk.data["train_share"].as_f64().unwrap() > 0.99, "{unk:?}");
}

#[test]
fn an_empty_and_a_non_utf8_document_fail_by_name_and_skip_the_later_stages() {
    let tmp = temp_dir();
    write_corpus(tmp.path(), &[("train", 6), ("val", 2)], 6);
    let empty = tmp.path().join("train/metal/empty.txt");
    std::fs::write(&empty, " \n\t").unwrap();
    let latin1 = tmp.path().join("val/fruit/latin1.txt");
    std::fs::write(&latin1, b"caf\xe9").unwrap();
    let report = doctor(&config(tmp.path()), &options()).unwrap();
    let bad = report.get("unreadable_documents").unwrap();
    assert_eq!(bad.status, Status::Fail, "{}", report.to_text());
    assert!(bad.figure.contains(&format!("{}: not UTF-8", latin1.display())), "{bad:?}");
    assert!(bad.figure.contains(&format!("is empty ({})", empty.display())), "{bad:?}");
    assert_eq!(report.findings.last().unwrap().status, Status::Skip, "{}", report.to_text());
    assert!(report.get("overfit_one_batch").is_none());
}

#[test]
fn the_generic_stages_take_text_batches_overfit_a_fasttext_and_catch_bad_ids() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    write_corpus(tmp.path(), &[("train", 8), ("val", 2)], 7);
    let c = config(tmp.path());
    let splits = open_splits(&c).unwrap();
    let (tokenizer, _) = new_tokenizer(&c, &splits).unwrap();
    let vocab = tokenizer.vocab_size();
    let mut l = loader(Tokenized::new(splits.train, tokenizer), &c, true, Device::Cpu).unwrap();
    let batch: (Inputs, tch::Tensor) = l.epoch(0).next().unwrap().unwrap();
    seed_everything(0);
    let model = FastText::new(&TextClassifierConfig::new(vocab as i64, 3).with_embed_dim(16));
    let ok = overfit_batch(&model, "fc", &batch, &c, &options()).unwrap();
    assert_eq!(ok.status, Status::Pass, "{ok:?}");
    assert!(ok.figure.contains("on 8 documents (target < 0.1)"), "{ok:?}");
    let none =
        overfit_batch(&model, "fc", &batch, &c, &DoctorOptions { overfit_steps: 0, ..options() }).unwrap();
    assert_eq!(none.status, Status::Skip, "0 steps is no verdict (and no panic): {none:?}");
    // At AdamW's 1e-3 FastText learns the batch, but too slowly for 60 steps: a WARN about the
    // lr, not a FAIL that blames the labels.
    let mut slow = c.clone();
    slow.optim.lr = 1e-3;
    seed_everything(0);
    let model = FastText::new(&TextClassifierConfig::new(vocab as i64, 3).with_embed_dim(128));
    let warn = overfit_batch(&model, "fc", &batch, &slow, &options()).unwrap();
    assert_eq!(warn.status, Status::Warn, "{warn:?}");
    assert!(
        warn.fix
            .as_deref()
            .unwrap()
            .starts_with("the loss is still falling: raise the lr (try optim.lr = 1.0e-2)"),
        "{warn:?}"
    );

    seed_everything(0);
    let model = FastText::new(&TextClassifierConfig::new(vocab as i64, 3).with_embed_dim(16));
    let found = check_text_batch(&model, &batch.0, &batch.1, 3, vocab);
    assert!(found.iter().all(|f| f.status == Status::Pass), "{found:#?}");
    // Ids from a bigger vocabulary than the model's embeddings: a FAIL before any forward.
    let found = check_text_batch(&model, &batch.0, &batch.1, 3, 5);
    let inputs = find(&found, "batch_inputs");
    assert_eq!(inputs.status, Status::Fail, "{found:#?}");
    assert!(inputs.fix.as_deref().unwrap().starts_with("token ids must lie in [0, 4]"), "{inputs:?}");
    assert!(found.iter().all(|f| f.check != "initial_loss"), "{found:#?}");
}

#[test]
fn text_imbalance_suggests_a_setting_text_runs_take_and_extra_outputs_fail() {
    let tmp = temp_dir();
    write_corpus(tmp.path(), &[("train", 8), ("val", 2)], 8);
    for i in 2..8 {
        std::fs::remove_file(tmp.path().join(format!("train/metal/{i:03}.txt"))).unwrap();
    }
    let mut c = config(tmp.path());
    c.model.num_classes = Some(4);
    let found = check_data(&c, &options()).unwrap();
    let balance = find(&found, "class_balance");
    assert_eq!(balance.status, Status::Warn, "{balance:?}");
    assert!(
        balance.figure.contains("train: fruit 8, metal 2, water 8")
            && balance.figure.contains("4.0x in train")
    );
    let fix = balance.fix.as_deref().unwrap();
    assert!(fix.contains("train.class_weights = \"balanced\"") && !fix.contains("data.sampler"), "{fix}");
    let mut fixed = config(tmp.path());
    fixed.set("train.class_weights", "balanced").unwrap();
    fixed.validate().unwrap();
    // The text recipe refuses more outputs than classes, so the doctor fails it too.
    let labels = find(&found, "label_range");
    assert_eq!(labels.status, Status::Fail, "{labels:?}");
    assert_eq!(labels.fix.as_deref(), Some("set model.num_classes = 3 (or leave it unset)"));
}
