//! `torchlight train --task text` on a tiny generated TextFolder: a run folder with the
//! tokenizer, a resume that continues it, and a bad `[text]` value named in one line.

use crate::{fails, ok, s, temp};
use std::path::Path;

/// `root/train/<class>/<i>.txt`: twenty-word documents whose class is the keyword they repeat.
pub(crate) fn corpus(root: &Path) {
    for (c, (class, word)) in [("pos", "good"), ("neg", "bad")].into_iter().enumerate() {
        let dir = root.join("train").join(class);
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..16 {
            let filler: Vec<String> = (0..16).map(|j| format!("w{}", (i * 7 + j * 3 + c) % 23)).collect();
            let text = format!("{word} {} {word} and {word}", filler.join(" "));
            std::fs::write(dir.join(format!("{i}.txt")), text).unwrap();
        }
    }
}

#[test]
fn train_task_text_trains_saves_the_vocabulary_and_resumes() {
    let dir = temp("text");
    let (data, out) = (dir.join("data"), dir.join("runs"));
    corpus(&data);
    let (data_s, out_s) = (s(&data), s(&out));
    let stdout = ok(&[
        "train",
        "--task",
        "text",
        "--data",
        &data_s,
        "--model",
        "fasttext",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--out",
        &out_s,
        "--set",
        "text.embed_dim=16",
        "--set",
        "text.max_len=16",
        "--workers",
        "1",
        "--device",
        "cpu",
    ]);
    let run = out.join("exp_001");
    assert!(stdout.contains(&format!("run folder:      {}", run.display())), "{stdout}");
    assert!(stdout.contains("documents/s"), "{stdout}");
    for file in ["vocab.json", "config.toml", "summary.json", "metrics.csv", "checkpoints/last"] {
        assert!(run.join(file).exists(), "no {file} in {}", run.display());
    }
    let run_s = s(&run);
    let stdout = ok(&["train", "--resume", &run_s, "--epochs", "2", "--device", "cpu", "--workers", "1"]);
    assert!(stdout.contains("epochs:          2"), "{stdout}");
    let rows = std::fs::read_to_string(run.join("metrics.csv")).unwrap().lines().count();
    assert_eq!(rows, 3, "a header and one row per epoch");

    let line = fails(&[
        "train",
        "--task",
        "text",
        "--data",
        &data_s,
        "--model",
        "textcnn",
        "--set",
        "text.max_len=0",
    ]);
    assert!(line.contains("text.max_len"), "{line}");
    let line = fails(&["train", "--task", "video", "--data", &data_s]);
    assert!(line.contains("train.task"), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
