//! Stage 1 of the doctor for text (`train.task = "text"`): documents per class and class
//! balance, unreadable and empty documents, the same document in two splits, the length
//! distribution in tokens against `text.max_len`, the unknown-token rate of the validation
//! split under the training vocabulary, and the labels against the model's outputs.

use super::data::{class_balance, class_count, label_range};
use super::{DoctorOptions, Finding, Status};
use crate::config::TrainConfig;
use crate::error::Result;
use crate::text::new_tokenizer;
use serde_json::json;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use torchlight_data::Subset;
use torchlight_text::{split_words, TextFolder, TextSplitFolders, Tokenizer, Truncation};

/// How many pairs of duplicated documents the `split_duplicates` finding names in its data.
const NAMED_PAIRS: usize = 20;

/// The tokenizer the stages share.
type SharedTokenizer = Arc<dyn Tokenizer>;

/// One document of a split, read once.
struct Doc {
    path: PathBuf,
    /// `None` when it cannot be read (the `unreadable_documents` finding names it).
    text: Option<String>,
}

/// The documents of a split, in split order.
fn read_split(subset: &Subset<TextFolder>) -> Vec<Doc> {
    let folder = subset.dataset();
    let samples = folder.samples();
    subset.indices().iter().map(|&i| Doc { path: samples[i].0.clone(), text: folder.read(i).ok() }).collect()
}

/// The document with its white space runs made one space and its ends trimmed: two documents
/// are duplicates when these are equal.
fn normalise(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The `q` quantile of sorted `values` by nearest rank (the smallest value at least `q` of
/// them do not exceed); 0 for none.
fn nearest_rank(sorted: &[usize], q: f64) -> usize {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Stage 1 for text: the class count; documents per class and split (imbalance); unreadable
/// and empty documents (`unreadable_documents`, FAIL naming the files); documents that appear
/// in two splits after white-space normalisation (`split_duplicates`: train/val, train/test and
/// val/test pairs, the first pairs named); the training documents' length in tokens (min,
/// median, p95, max) and the share `text.max_len` cuts (`length_truncation`, WARN above
/// [`DoctorOptions::truncation_share`]); the share of the validation split's tokens that the
/// training vocabulary does not know (`unknown_tokens`, WARN above
/// [`DoctorOptions::unknown_share`]); and the labels against the model's outputs. The splits
/// are the ones training uses: `val/`, or the seeded held-out part of `train/`.
pub fn check_text_data(config: &TrainConfig, options: &DoctorOptions) -> Result<Vec<Finding>> {
    Ok(text_data(config, options)?.0)
}

/// [`check_text_data`], and the tokenizer it built from the training split (`None` when it
/// stopped before, with fewer than 2 classes), which the later stages use.
pub(crate) fn text_data(
    config: &TrainConfig,
    options: &DoctorOptions,
) -> Result<(Vec<Finding>, Option<SharedTokenizer>)> {
    let folders = TextSplitFolders::open(&config.data.root)?;
    let classes = folders.classes().to_vec();
    let held_out = folders.val.is_none();
    let mut findings = Vec::new();

    findings.push(class_count(
        &classes,
        "put each class's documents in its own folder under train/ (train/<class>/*.txt)",
    ));
    if classes.len() < 2 {
        return Ok((findings, None));
    }

    // Unreadable and empty documents: open_splits refuses them before a run; here they are a
    // finding, and the other checks run on the rest.
    let report = folders.check();
    let mut bad: Vec<String> = report.unreadable.iter().map(|(at, _)| at.to_string()).collect();
    bad.extend(report.empty.iter().map(ToString::to_string));
    findings.push(if report.is_clean() {
        Finding::new(
            1,
            "unreadable_documents",
            Status::Pass,
            format!("all {} documents are readable UTF-8 text, none empty", report.documents),
        )
    } else {
        Finding::new(1, "unreadable_documents", Status::Fail, report.summary())
            .fix("re-save these files as UTF-8 text, or delete them (an empty document teaches nothing)")
            .data(json!(bad))
    });

    let splits = folders.split(config.data.val_fraction, config.train.seed)?;
    let mut named: Vec<(&str, &Subset<TextFolder>)> = vec![("train", &splits.train), ("val", &splits.val)];
    if let Some(test) = &splits.test {
        named.push(("test", test));
    }
    let targets: Vec<(&str, Vec<i64>)> = named
        .iter()
        .map(|(name, subset)| {
            let samples = subset.dataset().samples();
            (*name, subset.indices().iter().map(|&i| samples[i].1).collect())
        })
        .collect();
    let mut balance = class_balance(
        &targets,
        &classes,
        options.imbalance_ratio,
        "set train.class_weights = \"balanced\" (the loss weighs each class by its rarity), or collect more documents of the rare classes",
    );
    if held_out {
        balance.figure.push_str(&format!(
            " (val: {:.0}% of train/ held out, seed {})",
            100.0 * config.data.val_fraction,
            config.train.seed
        ));
    }
    findings.push(balance);

    let docs: Vec<(&str, Vec<Doc>)> =
        named.iter().map(|(name, subset)| (*name, read_split(subset))).collect();
    findings.push(split_duplicates(&docs));

    let (tokenizer, _) = new_tokenizer(config, &splits)?;
    let encode = |doc: &Doc| doc.text.as_deref().and_then(|t| tokenizer.encode(t).ok());
    let train_ids: Vec<Vec<u32>> = docs[0].1.iter().filter_map(encode).collect();
    let val_docs: Vec<(&Doc, Vec<u32>)> = docs[1].1.iter().filter_map(|d| Some((d, encode(d)?))).collect();
    findings.push(length_truncation(&train_ids, config.text.max_len, options.truncation_share));
    findings.push(unknown_tokens(config, tokenizer.as_ref(), &train_ids, &val_docs, options.unknown_share));

    // The text recipe refuses any other output count than the class count.
    let outputs = config.model.num_classes.unwrap_or(classes.len());
    findings.push(label_range(classes.len(), outputs, true));
    Ok((findings, Some(tokenizer)))
}

/// The same document (after white-space normalisation) in two splits: how many val documents
/// are copies of train documents, test of train and test of val, with the first pairs named.
fn split_duplicates(docs: &[(&str, Vec<Doc>)]) -> Finding {
    let mut by_hash: HashMap<u64, Vec<(usize, usize)>> = HashMap::new();
    let mut normalised: Vec<Vec<Option<String>>> = Vec::new();
    for (s, (_, split)) in docs.iter().enumerate() {
        let mut texts = Vec::with_capacity(split.len());
        for (d, doc) in split.iter().enumerate() {
            let text = doc.text.as_deref().map(normalise).filter(|t| !t.is_empty());
            if let Some(t) = &text {
                let mut h = DefaultHasher::new();
                t.hash(&mut h);
                by_hash.entry(h.finish()).or_default().push((s, d));
            }
            texts.push(text);
        }
        normalised.push(texts);
    }
    // For each pair of splits (a, b), a < b: the documents of b with a copy in a, each with
    // the first such copy.
    let mut pairs: BTreeMap<(usize, usize), Vec<(usize, usize)>> = BTreeMap::new();
    let mut within = 0usize;
    for group in by_hash.values().filter(|g| g.len() > 1) {
        // Equal hashes, equal text: split the group by the text itself (a hash collision).
        let mut exact: Vec<Vec<(usize, usize)>> = Vec::new();
        for &(s, d) in group {
            let text = &normalised[s][d];
            match exact.iter_mut().find(|e| normalised[e[0].0][e[0].1] == *text) {
                Some(e) => e.push((s, d)),
                None => exact.push(vec![(s, d)]),
            }
        }
        for members in exact.iter().filter(|e| e.len() > 1) {
            for (i, &(sb, db)) in members.iter().enumerate() {
                let earlier = &members[..i];
                if earlier.iter().any(|&(sa, _)| sa == sb) {
                    within += 1;
                }
                // The first copy in each earlier split.
                for sa in 0..sb {
                    if let Some(&(_, da)) = earlier.iter().find(|&&(s, _)| s == sa) {
                        pairs.entry((sa, sb)).or_default().push((da, db));
                    }
                }
            }
        }
    }
    let path = |s: usize, d: usize| docs[s].1[d].path.display().to_string();
    let mut data = serde_json::Map::new();
    let mut parts = Vec::new();
    let mut first_pair = None;
    for ((sa, sb), list) in &mut pairs {
        list.sort();
        let (a, b) = (docs[*sa].0, docs[*sb].0);
        let named: Vec<[String; 2]> =
            list.iter().take(NAMED_PAIRS).map(|&(da, db)| [path(*sa, da), path(*sb, db)]).collect();
        parts.push(format!(
            "{} {b} document{} in {a}",
            list.len(),
            if list.len() == 1 { " is" } else { "s are" }
        ));
        if first_pair.is_none() {
            first_pair = Some(format!("{} = {}", named[0][0], named[0][1]));
        }
        data.insert(format!("{a}_{b}"), json!({ "count": list.len(), "pairs": named }));
    }
    data.insert("within_splits".into(), json!(within));
    let data = serde_json::Value::Object(data);
    match first_pair {
        Some(first) => Finding::new(
            1,
            "split_duplicates",
            Status::Warn,
            format!("{}, e.g. {first}", parts.join("; ")),
        )
        .fix(
            "remove the copies from val/ and test/ (or from train/), so validation measures unseen documents",
        )
        .data(data),
        None => Finding::new(
            1,
            "split_duplicates",
            Status::Pass,
            if within == 0 {
                "no document in two splits".to_string()
            } else {
                format!("no document in two splits ({within} duplicates within a split)")
            },
        )
        .data(data),
    }
}

/// The training documents' lengths in tokens and the share `max_len` cuts: WARN above `share`,
/// suggesting a `text.max_len` that covers the 95th percentile.
fn length_truncation(train_ids: &[Vec<u32>], max_len: usize, share: f64) -> Finding {
    let mut lengths: Vec<usize> = train_ids.iter().map(Vec::len).collect();
    lengths.sort_unstable();
    let cut = Truncation::of_lengths(lengths.iter().copied(), Some(max_len));
    let (min, median, p95, max) = (
        lengths.first().copied().unwrap_or(0),
        nearest_rank(&lengths, 0.5),
        nearest_rank(&lengths, 0.95),
        lengths.last().copied().unwrap_or(0),
    );
    let status = if cut.share() > share { Status::Warn } else { Status::Pass };
    let suggested = p95.min(crate::config::MAX_TEXT_LEN);
    Finding::new(
        1,
        "length_truncation",
        status,
        format!(
            "tokens per training document: min {min}, median {median}, p95 {p95}, max {max}; text.max_len {max_len} cuts {} of {} ({:.1}%), {} tokens dropped",
            cut.truncated,
            cut.documents,
            100.0 * cut.share(),
            cut.dropped_tokens
        ),
    )
    .fix(format!(
        "set text.max_len = {suggested} (the 95th percentile), so the model reads the whole of most documents"
    ))
    .data(json!({
        "min": min, "median": median, "p95": p95, "max": max, "max_len": max_len,
        "documents": cut.documents, "truncated": cut.truncated, "share": cut.share(),
        "dropped_tokens": cut.dropped_tokens, "threshold": share,
    }))
}

/// The share of the validation documents' tokens the training vocabulary encodes as unknown
/// (and the training documents', for comparison): WARN above `share`. For a word vocabulary
/// the most frequent unknown words are named, and the fix says whether `text.min_freq` and
/// `text.max_vocab` dropped words or the words were never in train/.
fn unknown_tokens(
    config: &TrainConfig,
    tokenizer: &dyn Tokenizer,
    train_ids: &[Vec<u32>],
    val: &[(&Doc, Vec<u32>)],
    share: f64,
) -> Finding {
    let Some(unk) = tokenizer.unk_id() else {
        return Finding::new(
            1,
            "unknown_tokens",
            Status::Pass,
            "the tokenizer has no unknown token: it encodes any text",
        );
    };
    let rate = |docs: &mut dyn Iterator<Item = &Vec<u32>>| {
        let (mut unknown, mut total) = (0usize, 0usize);
        for ids in docs {
            total += ids.len();
            unknown += ids.iter().filter(|&&id| id == unk).count();
        }
        (unknown, total)
    };
    let (train_unknown, train_total) = rate(&mut train_ids.iter());
    let (val_unknown, val_total) = rate(&mut val.iter().map(|(_, ids)| ids));
    if val_total == 0 {
        return Finding::new(1, "unknown_tokens", Status::Pass, "no validation documents to measure");
    }
    let of = |u: usize, t: usize| if t == 0 { 0.0 } else { u as f64 / t as f64 };
    let (val_share, train_share) = (of(val_unknown, val_total), of(train_unknown, train_total));
    // A word vocabulary encodes word by word: the unknown words are the words at the [UNK] ids.
    let x = &config.text;
    let mut words: BTreeMap<String, usize> = BTreeMap::new();
    if x.tokenizer.is_none() {
        for (doc, ids) in val {
            let split = split_words(doc.text.as_deref().unwrap_or(""), x.lowercase);
            if split.len() == ids.len() {
                for (w, _) in split.into_iter().zip(ids).filter(|(_, &id)| id == unk) {
                    *words.entry(w).or_insert(0) += 1;
                }
            }
        }
    }
    let mut top: Vec<(String, usize)> = words.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    top.truncate(5);
    let status = if val_share > share { Status::Warn } else { Status::Pass };
    let mut figure = format!(
        "val: {val_unknown} of {val_total} tokens ({:.1}%) are unknown to the training vocabulary of {} ids (train {:.1}%)",
        100.0 * val_share,
        tokenizer.vocab_size(),
        100.0 * train_share
    );
    if status == Status::Warn && !top.is_empty() {
        let list: Vec<String> = top.iter().map(|(w, n)| format!("{w} ({n})")).collect();
        figure.push_str(&format!("; most frequent: {}", list.join(", ")));
    }
    let capped = tokenizer.vocab_size() >= x.max_vocab;
    let fix = if x.tokenizer.is_some() {
        "the tokenizer does not cover this text: use one trained on text like it (text.tokenizer)".to_string()
    } else if x.min_freq > 1 || capped {
        let mut keys = Vec::new();
        if x.min_freq > 1 {
            keys.push(format!("lower text.min_freq (now {}) toward 1", x.min_freq));
        }
        if capped {
            keys.push(format!("raise text.max_vocab (now {}, all used)", x.max_vocab));
        }
        format!("the vocabulary leaves out training words: {}", keys.join(" and "))
    } else {
        format!(
            "every training word is in the vocabulary already (text.min_freq {}, text.max_vocab {} not reached): the validation text uses other words; train on more text like it, or use a subword tokenizer (text.tokenizer)",
            x.min_freq, x.max_vocab
        )
    };
    Finding::new(1, "unknown_tokens", status, figure).fix(fix).data(json!({
        "val_unknown": val_unknown, "val_tokens": val_total, "val_share": val_share,
        "train_unknown": train_unknown, "train_tokens": train_total, "train_share": train_share,
        "vocab_size": tokenizer.vocab_size(), "threshold": share,
        "top_unknown": top.iter().map(|(w, n)| json!([w, n])).collect::<Vec<_>>(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles_and_normalised_text() {
        let v: Vec<usize> = (1..=20).collect();
        assert_eq!((nearest_rank(&v, 0.5), nearest_rank(&v, 0.95), nearest_rank(&v, 1.0)), (10, 19, 20));
        assert_eq!(nearest_rank(&[7], 0.95), 7);
        assert_eq!(nearest_rank(&[], 0.5), 0);
        assert_eq!(normalise("  a\tb\n\n c  "), "a b c");
    }
}
