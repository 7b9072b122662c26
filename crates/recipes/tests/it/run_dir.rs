//! Run folders: sequential names, atomic claims under contention, reopening for resume.

use std::collections::HashSet;
use torchlight_recipes::{RecipeError, RunDir};

#[test]
fn folders_are_numbered_after_the_highest_existing_one() {
    let tmp = crate::temp_dir();
    let runs = tmp.path().join("runs");
    let a = RunDir::create_next(&runs).unwrap();
    let b = RunDir::create_next(&runs).unwrap();
    assert_eq!(a.path(), runs.join("exp_001"));
    assert_eq!(b.path(), runs.join("exp_002"));
    assert!(a.path().is_dir() && b.path().is_dir());
    std::fs::create_dir(runs.join("exp_010")).unwrap();
    std::fs::create_dir(runs.join("exp_notes")).unwrap();
    std::fs::create_dir(runs.join("other_050")).unwrap();
    assert_eq!(RunDir::create_next(&runs).unwrap().path(), runs.join("exp_011"));
    let custom = RunDir::create_next_with_prefix(&runs, "finetune").unwrap();
    assert_eq!(custom.path(), runs.join("finetune_001"));
    assert_eq!(a.metrics_csv_path(), runs.join("exp_001/metrics.csv"));
    assert_eq!(a.config_path(), runs.join("exp_001/config.toml"));
    let ckpt = a.checkpoints_dir().unwrap();
    assert!(ckpt.is_dir() && ckpt.ends_with("exp_001/checkpoints"));
}

#[test]
fn concurrent_creators_never_share_a_folder() {
    let tmp = crate::temp_dir();
    let runs = tmp.path().join("runs");
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let runs = runs.clone();
            std::thread::spawn(move || {
                (0..5).map(|_| RunDir::create_next(&runs).unwrap()).collect::<Vec<_>>()
            })
        })
        .collect();
    let all: Vec<RunDir> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let unique: HashSet<_> = all.iter().map(|r| r.path().to_path_buf()).collect();
    assert_eq!(unique.len(), 40, "every claim got its own folder");
    let on_disk = std::fs::read_dir(&runs).unwrap().count();
    assert_eq!(on_disk, 40);
    for i in 1..=40 {
        assert!(runs.join(format!("exp_{i:03}")).is_dir(), "exp_{i:03} exists (numbers are dense)");
    }
}

#[test]
fn open_takes_existing_folders_only() {
    let tmp = crate::temp_dir();
    let run = RunDir::create_next(tmp.path()).unwrap();
    assert_eq!(RunDir::open(run.path()).unwrap(), run);
    let missing = tmp.path().join("exp_099");
    let err = RunDir::open(&missing).unwrap_err();
    assert!(matches!(err, RecipeError::RunDir { .. }));
    assert!(err.to_string().contains("exp_099"), "{err}");
    let file = tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    assert!(RunDir::open(&file).unwrap_err().to_string().contains("not a folder"));
}
