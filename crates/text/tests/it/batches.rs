//! Batches through a real DataLoader: padding, mask, lengths, offsets, truncation, bucketing.

use std::sync::Arc;
use torchlight_data::{Buffer, DataLoaderBuilder, Dataset, Sampler};
use torchlight_text::{
    read_json_lines, BagCollate, BucketSampler, Columns, PadCollate, TextRecords, Tokenized, Tokenizer,
    Truncation, WordVocab, WordVocabConfig,
};

/// 23 documents of 1..=23 words (`w0 w1 ...`), labels alternating.
fn records(dir: &std::path::Path) -> TextRecords {
    let lines: Vec<String> = (1..=23)
        .map(|n| {
            let words: Vec<String> = (0..n).map(|w| format!("w{w}")).collect();
            format!("{{\"text\": \"{}\", \"label\": \"{}\"}}", words.join(" "), ["neg", "pos"][n % 2])
        })
        .collect();
    crate::write(dir, "d.jsonl", lines.join("\n"));
    read_json_lines(dir.join("d.jsonl"), &Columns::default()).unwrap()
}

fn tokenized(dir: &std::path::Path) -> Tokenized<TextRecords, Arc<WordVocab>> {
    let records = records(dir);
    let vocab = Arc::new(WordVocab::build(records.texts(), &WordVocabConfig::default()).unwrap());
    Tokenized::new(records, vocab)
}

#[test]
fn padded_batches_have_shapes_padding_mask_and_truncation_counts() {
    let dir = tempfile::tempdir().unwrap();
    let data = tokenized(dir.path());
    let lengths = data.lengths();
    assert_eq!(lengths, (1..=23).collect::<Vec<_>>());
    let collate = PadCollate::for_tokenizer(data.tokenizer(), Some(10)).unwrap();
    let mut loader =
        DataLoaderBuilder::new(data).collate(collate).batch_size(4).num_workers(2).build().unwrap();
    let mut total = Truncation::default();
    let batches: Vec<_> = loader.epoch(0).collect::<Result<_, _>>().unwrap();
    assert_eq!(batches.len(), 6);
    for (b, batch) in batches.iter().enumerate() {
        let rows = if b == 5 { 3 } else { 4 };
        // Sequential order: the batch's longest document is its last, cut at 10.
        let t = (4 * b + rows).min(10);
        assert_eq!(batch.ids.shape, [rows, t]);
        assert_eq!(batch.mask.shape, [rows, t]);
        assert_eq!(batch.lengths.shape, [rows]);
        assert_eq!(batch.labels.shape, [rows]);
        let (Buffer::I64(ids), Buffer::U8(mask), Buffer::I64(lens)) =
            (&batch.ids.buffer, &batch.mask.buffer, &batch.lengths.buffer)
        else {
            panic!("element types: ids and lengths int64, mask u8");
        };
        for r in 0..rows {
            let len = lens[r] as usize;
            assert_eq!(len, (4 * b + r + 1).min(10));
            for c in 0..t {
                assert_eq!(mask[r * t + c], u8::from(c < len));
                assert_eq!(ids[r * t + c] == 0, c >= len, "padding is exactly where the mask is 0");
            }
        }
        total += batch.truncation;
    }
    assert_eq!(total, Truncation::of_lengths(lengths, Some(10)));
    assert_eq!(total.truncated, 13);
    assert!((total.share() - 13.0 / 23.0).abs() < 1e-12);
}

#[test]
fn bag_batches_have_flat_ids_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let data = tokenized(dir.path());
    let vocab = Arc::clone(data.tokenizer());
    let mut loader = DataLoaderBuilder::new(data)
        .collate(BagCollate::new(Some(3)).unwrap())
        .batch_size(5)
        .build()
        .unwrap();
    let first = loader.epoch(0).next().unwrap().unwrap();
    // Documents of 1..=5 words cut at 3: 1 + 2 + 3 + 3 + 3 ids.
    assert_eq!(first.offsets.buffer, Buffer::I64(vec![0, 1, 3, 6, 9]));
    assert_eq!(first.ids.shape, [12]);
    let w0 = vocab.encode("w0").unwrap()[0] as i64;
    let Buffer::I64(ids) = &first.ids.buffer else { panic!("int64 ids") };
    assert_eq!([ids[0], ids[1], ids[3], ids[6], ids[9]], [w0; 5], "every bag starts with its first word");
    assert_eq!(first.truncation, Truncation { documents: 5, truncated: 2, dropped_tokens: 3 });
}

#[test]
fn bucketing_is_deterministic_covers_every_index_and_matches_across_workers() {
    let dir = tempfile::tempdir().unwrap();
    let data = tokenized(dir.path());
    let lengths = data.lengths();
    let sampler = BucketSampler::new(lengths.clone(), 4, 11).unwrap().with_pool_batches(2).unwrap();
    for epoch in 0..4 {
        let batches = sampler.batches(epoch);
        assert_eq!(batches, sampler.batches(epoch), "a pure function of the epoch");
        assert_eq!(
            batches.iter().map(Vec::len).collect::<Vec<_>>(),
            [4, 4, 4, 4, 4, 3],
            "the short batch last"
        );
        let mut all = batches.concat();
        all.sort_unstable();
        assert_eq!(all, (0..23).collect::<Vec<_>>(), "every index once");
        assert_eq!(sampler.indices(epoch), batches.concat());
    }
    assert_ne!(sampler.batches(0), sampler.batches(1));
    assert_eq!(
        BucketSampler::new(lengths.clone(), 4, 11).unwrap().with_pool_batches(2).unwrap().batches(3),
        sampler.batches(3)
    );

    // Bucketed batches carry less padding than the same documents in random order.
    let padding = |batches: &[Vec<usize>]| -> usize {
        batches
            .iter()
            .map(|b| {
                b.iter().map(|&i| b.iter().map(|&j| lengths[j]).max().unwrap() - lengths[i]).sum::<usize>()
            })
            .sum()
    };
    let random = torchlight_data::RandomSampler::new(23, 11).indices(0);
    let random: Vec<Vec<usize>> = random.chunks(4).map(<[usize]>::to_vec).collect();
    assert!(padding(&sampler.batches(0)) < padding(&random));

    // Through the loader, with 0 and 3 workers: the same batches, in the sampler's order.
    let labels: Vec<Vec<i64>> = [0, 3]
        .into_iter()
        .map(|workers| {
            let data = tokenized(dir.path());
            let collate = PadCollate::new(0, None).unwrap();
            let mut loader = DataLoaderBuilder::new(data)
                .collate(collate)
                .batch_size(4)
                .sampler(sampler.clone())
                .num_workers(workers)
                .build()
                .unwrap();
            let batches: Vec<_> = loader.epoch(2).collect::<Result<_, _>>().unwrap();
            for (batch, want) in batches.iter().zip(sampler.batches(2)) {
                let Buffer::I64(lens) = &batch.lengths.buffer else { panic!("int64 lengths") };
                let want: Vec<i64> = want.iter().map(|&i| lengths[i] as i64).collect();
                assert_eq!(lens, &want);
            }
            batches
                .iter()
                .flat_map(|b| match &b.labels.buffer {
                    Buffer::I64(v) => v.clone(),
                    _ => panic!("int64 labels"),
                })
                .collect()
        })
        .collect();
    assert_eq!(labels[0], labels[1]);
    assert_eq!(labels[0].len(), 23);
    let _ = Dataset::len(&tokenized(dir.path()));
}
