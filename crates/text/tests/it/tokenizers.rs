//! Tokenizers: the word vocabulary's rules, Hugging Face training, and both files' round trips.

use crate::{tiny_imdb, write};
use std::path::Path;
use torchlight_text::{
    load_tokenizer, tokenizer_from_json, HfModel, HfTokenizer, HfTrainConfig, TextError, TextFolderOptions,
    TextSplitFolders, Tokenizer, WordVocab, WordVocabConfig, PAD_ID, UNK_ID,
};

const CORPUS: [&str; 6] = [
    "The movie was great, truly great!",
    "The movie was boring; the plot was thin.",
    "Great acting and a great story.",
    "A boring story, boring acting.",
    "The plot twists were great.",
    "Thin characters and a thin plot.",
];

#[test]
fn word_vocab_from_the_training_split_only() {
    let dir = tempfile::tempdir().unwrap();
    tiny_imdb(dir.path(), 4);
    write(dir.path(), "val/pos/a.txt", "Zebra zebra zebra.");
    write(dir.path(), "val/neg/a.txt", "Zebra.");
    let options = TextFolderOptions::default().with_classes(["neg", "pos"]);
    let splits = TextSplitFolders::open_with(dir.path(), &options).unwrap().split(0.5, 0).unwrap();
    let vocab = WordVocab::build(splits.train_texts(), &WordVocabConfig::default().with_min_freq(2)).unwrap();
    assert_eq!(vocab.token_to_id("zebra"), None, "validation words must not leak into the vocabulary");
    // 4 reviews per class (val/ exists, so train/ is all training data): "." once per positive
    // and twice per negative (12); ",", "a", "film", "i", "it" once in each (8); "great" twice
    // per positive (8); the rest 4; numbers 0..3 once per class (2). Ties in code-point order.
    assert_eq!(&vocab.tokens()[..9], ["[PAD]", "[UNK]", ".", ",", "a", "film", "great", "i", "it"]);
    assert_eq!(vocab.token_to_id("0"), Some(vocab.tokens().iter().position(|t| t == "0").unwrap() as u32));
    assert_eq!((vocab.pad_id(), vocab.unk_id()), (PAD_ID, Some(UNK_ID)));
    let ids = vocab.encode("GREAT film, Zebra!").unwrap();
    assert_eq!(ids, [6, 5, 3, UNK_ID, vocab.token_to_id("!").unwrap()]);
}

#[test]
fn word_vocab_file_round_trip_and_bad_files_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = WordVocabConfig::default().with_max_size(Some(12)).with_lowercase(false);
    let vocab = WordVocab::build(CORPUS, &config).unwrap();
    assert_eq!(vocab.vocab_size(), 12);
    let path = dir.path().join("vocab.json");
    vocab.save(&path).unwrap();
    let back = WordVocab::load(&path).unwrap();
    assert_eq!(back, vocab);
    let any = load_tokenizer(&path).unwrap();
    assert_eq!(any.encode(CORPUS[1]).unwrap(), vocab.encode(CORPUS[1]).unwrap());
    assert_eq!(any.vocab_size(), 12);
    let held = tokenizer_from_json(&std::fs::read_to_string(&path).unwrap(), None).unwrap();
    assert_eq!(held.encode(CORPUS[1]).unwrap(), vocab.encode(CORPUS[1]).unwrap());
    let err = tokenizer_from_json("[1, 2", Some(Path::new("ckpt/meta.json"))).err().unwrap();
    assert!(err.to_string().contains("ckpt/meta.json: not JSON"), "{err}");

    let text = std::fs::read_to_string(&path).unwrap().replace("\"[UNK]\"", "\"[PAD]\"");
    write(dir.path(), "vocab.json", text);
    let err = WordVocab::load(&path).unwrap_err();
    assert!(matches!(err, TextError::Tokenizer { .. }), "{err}");
    assert!(
        err.to_string().contains("vocab.json") && err.to_string().contains("must start with [PAD] and [UNK]"),
        "{err}"
    );
    write(dir.path(), "junk.json", "[1, 2");
    let err = load_tokenizer(dir.path().join("junk.json")).err().unwrap();
    assert!(err.to_string().contains("junk.json: not JSON"), "{err}");
}

fn train(model: HfModel) -> HfTokenizer {
    let config = HfTrainConfig::default().with_model(model).with_vocab_size(120).with_min_frequency(1);
    HfTokenizer::train(CORPUS, &config).unwrap()
}

#[test]
fn hugging_face_training_and_tokenizer_json_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    for model in [HfModel::WordPiece, HfModel::Bpe] {
        let tokenizer = train(model);
        assert_eq!((tokenizer.pad_id(), tokenizer.unk_id()), (0, Some(1)), "{model:?}");
        assert!(
            tokenizer.vocab_size() > 20 && tokenizer.vocab_size() <= 120,
            "{model:?}: {}",
            tokenizer.vocab_size()
        );
        let ids = tokenizer.encode("The plot was great!").unwrap();
        assert!(!ids.is_empty() && !ids.contains(&1), "{model:?}: {ids:?}");
        assert_eq!(tokenizer.decode(&ids).unwrap().replace(' ', ""), "theplotwasgreat!", "{model:?}");
        // An unseen character is unknown.
        assert!(tokenizer.encode("great ☃").unwrap().contains(&1), "{model:?}");

        let path = dir.path().join(format!("{model:?}-tokenizer.json"));
        tokenizer.save(&path).unwrap();
        let loaded = HfTokenizer::from_file(&path).unwrap();
        let any = load_tokenizer(&path).unwrap();
        for text in CORPUS.iter().chain(&["Unseen words: zebra, quokka."]) {
            let want = tokenizer.encode(text).unwrap();
            assert_eq!(loaded.encode(text).unwrap(), want, "{model:?}: {text}");
            assert_eq!(any.encode(text).unwrap(), want, "{model:?}: {text}");
        }
        assert_eq!((any.pad_id(), any.unk_id(), any.vocab_size()), (0, Some(1), tokenizer.vocab_size()));
        // The same JSON held in memory (parsed to a value and written back, as a checkpoint
        // carries it) gives the same tokenizer with nothing read from disk.
        let value: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let held = tokenizer_from_json(&value.to_string(), None).unwrap();
        for text in CORPUS.iter().chain(&["Unseen words: zebra, quokka."]) {
            assert_eq!(held.encode(text).unwrap(), tokenizer.encode(text).unwrap(), "{model:?}: {text}");
        }
        assert_eq!(held.vocab_size(), tokenizer.vocab_size());
        // Retraining is not asserted equal: tokenizers 0.23.2 numbers its `##`/`</w>` symbols in
        // hash-map order, so ties between merges can resolve differently from run to run
        // (huggingface/tokenizers#1794). The saved file is what a run reloads.
    }
}

#[test]
fn a_tokenizer_json_without_padding_token_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let json = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
        "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
        "model":{"type":"WordLevel","vocab":{"<unk>":0,"hello":1,"world":2,"<eos>":3},"unk_token":"<unk>"}}"#;
    write(dir.path(), "tokenizer.json", json);
    let path = dir.path().join("tokenizer.json");
    let err = HfTokenizer::from_file(&path).unwrap_err();
    assert!(err.to_string().contains("tokenizer.json: no padding token"), "{err}");
    let tokenizer = HfTokenizer::from_file_with_pad_token(&path, "<eos>").unwrap();
    assert_eq!((tokenizer.pad_id(), tokenizer.unk_id()), (3, Some(0)));
    assert_eq!(tokenizer.encode("hello there world").unwrap(), [1, 0, 2]);
    write(dir.path(), "broken.json", r#"{"model": {"type": "Nope"}}"#);
    let err = HfTokenizer::from_file(dir.path().join("broken.json")).unwrap_err();
    assert!(err.to_string().contains("broken.json: not a Hugging Face tokenizer"), "{err}");
    assert!(!err.to_string().contains('\n'));
}
