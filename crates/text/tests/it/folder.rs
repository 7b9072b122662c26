//! `TextFolder` and the split layout: classes, order, splits, and bad documents named.

use crate::{tiny_imdb, write};
use std::collections::BTreeMap;
use torchlight_data::{class_counts, DataLoaderBuilder, Dataset, ErrorPolicy};
use torchlight_text::{
    TextError, TextFolder, TextFolderOptions, TextSplitFolders, Tokenized, WordVocab, WordVocabConfig,
};

fn imdb_options() -> TextFolderOptions {
    TextFolderOptions::default().with_classes(["pos", "neg"])
}

#[test]
fn imdb_layout_with_chosen_classes_and_a_seeded_stratified_val_split() {
    let dir = tempfile::tempdir().unwrap();
    tiny_imdb(dir.path(), 10);
    let folders = TextSplitFolders::open_with(dir.path(), &imdb_options()).unwrap();
    assert_eq!(folders.classes(), ["neg", "pos"]);
    assert_eq!(folders.train.len(), 20);
    assert!(folders.val.is_none());
    assert_eq!(folders.test.as_ref().unwrap().len(), 2);
    assert!(folders.check().is_clean(), "{}", folders.check().summary());

    let splits = folders.clone().split(0.2, 7).unwrap();
    assert_eq!((splits.train.len(), splits.val.len()), (16, 4));
    let targets = splits.train.dataset().targets();
    // Stratified: each class keeps its share in validation.
    assert_eq!(class_counts(&targets, splits.val.indices()).unwrap(), BTreeMap::from([(0, 2), (1, 2)]));
    let mut all: Vec<usize> = splits.train.indices().iter().chain(splits.val.indices()).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..20).collect::<Vec<_>>());
    // The same seed holds out the same documents; another seed others.
    let again = folders.clone().split(0.2, 7).unwrap();
    assert_eq!(again.val.indices(), splits.val.indices());
    let other = folders.clone().split(0.2, 8).unwrap();
    assert_ne!(other.val.indices(), splits.val.indices());
    assert_eq!(splits.train_texts().count(), 16);
    let err = folders.split(1.0, 7).err().unwrap();
    assert!(err.to_string().starts_with("invalid `val_fraction`"), "{err}");
}

#[test]
fn a_val_folder_is_used_and_other_classes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    tiny_imdb(dir.path(), 3);
    write(dir.path(), "val/pos/a.txt", "fine");
    write(dir.path(), "val/neg/b.txt", "awful");
    let splits = TextSplitFolders::open_with(dir.path(), &imdb_options()).unwrap().split(0.5, 0).unwrap();
    assert_eq!((splits.train.len(), splits.val.len()), (6, 2));
    assert_eq!(splits.val.dataset().root(), dir.path().join("val"));
    // Without choosing classes, train/unsup/ is a third class test/ lacks: named, with the fix.
    let err = TextSplitFolders::open(dir.path()).unwrap_err();
    assert!(matches!(&err, TextError::ClassMismatch { missing, .. } if missing == &["unsup"]), "{err}");
    assert!(err.to_string().contains("with_classes"), "{err}");
    let err = TextSplitFolders::open(dir.path().join("nothing")).unwrap_err();
    assert!(matches!(err, TextError::MissingRoot { .. }), "{err}");
}

#[test]
fn unreadable_and_empty_documents_are_named_and_skippable() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "pos/good.txt", "good");
    write(root, "pos/latin1.txt", b"caf\xe9 au lait");
    write(root, "neg/bad.txt", "bad");
    write(root, "neg/blank.txt", " \n\n");
    let folder = TextFolder::new(root).unwrap();
    let report = folder.check();
    assert_eq!(report.documents, 4);
    assert_eq!(report.unreadable.len(), 1);
    assert!(report.unreadable[0].0.path.ends_with("pos/latin1.txt"));
    assert_eq!(report.empty.len(), 1);
    assert!(report.empty[0].path.ends_with("neg/blank.txt"));
    let summary = report.summary();
    assert!(summary.contains("latin1.txt: not UTF-8 text (invalid byte at offset 3)"), "{summary}");
    assert!(summary.contains("blank.txt"), "{summary}");

    let mut rng = torchlight_data::rng_from_seed(0);
    let order: Vec<String> =
        folder.samples().iter().map(|(p, _)| p.file_name().unwrap().to_string_lossy().into()).collect();
    assert_eq!(order, ["bad.txt", "blank.txt", "good.txt", "latin1.txt"]);
    let err = folder.get(3, &mut rng).unwrap_err().to_string();
    assert!(err.contains("latin1.txt") && err.contains("not UTF-8"), "{err}");
    let err = folder.get(1, &mut rng).unwrap_err().to_string();
    assert!(err.contains("blank.txt") && err.contains("empty document"), "{err}");

    // Through a loader: the default policy fails the batches holding them, Skip leaves them out
    // and counts them.
    let vocab = WordVocab::build(["good bad"], &WordVocabConfig::default()).unwrap();
    let collate = torchlight_text::PadCollate::new(0, None).unwrap();
    let mut failing = DataLoaderBuilder::new(Tokenized::new(folder.clone(), vocab.clone()))
        .collate(collate)
        .batch_size(1)
        .build()
        .unwrap();
    assert_eq!(failing.epoch(0).filter(Result::is_err).count(), 2);
    let mut skipping = DataLoaderBuilder::new(Tokenized::new(folder, vocab))
        .collate(collate)
        .batch_size(4)
        .on_error(ErrorPolicy::Skip)
        .build()
        .unwrap();
    let batches: Vec<_> = skipping.epoch(0).collect::<Result<_, _>>().unwrap();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].labels.shape, [2]);
    let stats = skipping.last_epoch_stats().unwrap();
    let skipped: Vec<usize> = stats.skipped.iter().map(|s| s.index).collect();
    assert_eq!(skipped, [1, 3]);
    assert!(stats.skipped[0].error.contains("blank.txt"), "{}", stats.skipped[0].error);
}
