//! torchlight-text's integration tests, on tiny datasets each test writes into its own
//! temporary folder: folder layouts and splits (`folder.rs`), CSV/TSV and JSON lines
//! (`records.rs`), tokenizers and their files (`tokenizers.rs`), batches and bucketing through
//! a real `DataLoader` (`batches.rs`). No libtorch, no downloads.

mod batches;
mod folder;
mod records;
mod tokenizers;

use std::path::Path;

/// Writes `bytes` at `root/rel`, making its folders.
pub fn write(root: &Path, rel: &str, bytes: impl AsRef<[u8]>) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// A tiny aclImdb: `train/{neg,pos,unsup}` with `n` reviews per labelled class, `test/{neg,pos}`.
pub fn tiny_imdb(root: &Path, n: usize) {
    for i in 0..n {
        write(root, &format!("train/pos/{i}_9.txt"), format!("A great film, truly great! I loved it {i}."));
        write(root, &format!("train/neg/{i}_2.txt"), format!("A dull film. I hated it, so boring {i}."));
        write(root, &format!("train/unsup/{i}_0.txt"), "An unlabelled review.");
    }
    write(root, "train/labeledBow.feat", "0 0:1\n");
    write(root, "test/pos/0_10.txt", "Great acting, loved it.");
    write(root, "test/neg/0_1.txt", "Boring and dull.");
}
