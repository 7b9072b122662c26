//! Stage 1 of the doctor: the data (class balance, unreadable files, leaks between splits,
//! image sizes and channel statistics, labels against the model's outputs).

use super::{DoctorOptions, Finding, Status};
use crate::config::{TaskKind, TrainConfig};
use crate::error::Result;
use serde_json::json;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::hash::Hasher;
use std::path::PathBuf;
use torchlight_vision::{decode_bytes, ImageFolder, SplitFolders};

struct FileStats {
    hash: u64,
    path: PathBuf,
}

/// Stage 1: per-class counts per split (imbalance), the same file content in two splits,
/// unreadable files, image size and channel statistics, and the label range against the
/// model's outputs (`model.num_classes`, or the class count when unset). A text config
/// (`train.task = "text"`) gets [`check_text_data`](super::check_text_data)'s checks instead.
pub fn check_data(config: &TrainConfig, options: &DoctorOptions) -> Result<Vec<Finding>> {
    if config.train.task == TaskKind::Text {
        return super::check_text_data(config, options);
    }
    let folders = SplitFolders::open(&config.data.root)?;
    let classes = folders.train.classes().to_vec();
    let mut splits: Vec<(&str, &ImageFolder)> = vec![("train", &folders.train)];
    if let Some(v) = &folders.val {
        splits.push(("val", v));
    }
    if let Some(t) = &folders.test {
        splits.push(("test", t));
    }
    let mut findings = Vec::new();

    // A classifier needs two classes; with one, every loss is 0 and every other check misleads.
    findings.push(class_count(
        &classes,
        "put each class's images in its own folder under train/ (train/<class>/*.jpg)",
    ));
    if classes.len() < 2 {
        return Ok(findings);
    }
    let targets: Vec<(&str, Vec<i64>)> = splits.iter().map(|(name, f)| (*name, f.targets())).collect();
    findings.push(class_balance(
        &targets,
        &classes,
        options.imbalance_ratio,
        "set data.sampler = \"weighted\" (class-balanced sampling) or train.class_weights = \"balanced\", or collect more of the rare classes",
    ));

    // Read every file once: content hash, decodability, size and channel statistics.
    let mut seen: HashMap<u64, Vec<(String, PathBuf)>> = HashMap::new();
    let mut unreadable: Vec<(PathBuf, String)> = Vec::new();
    let (mut min_side, mut max_side) = (usize::MAX, 0usize);
    let (mut sum, mut sum_sq, mut pixels) = ([0f64; 3], [0f64; 3], 0u64);
    let mut files = 0usize;
    for (name, folder) in &splits {
        for (path, _) in folder.samples() {
            files += 1;
            let bytes = match std::fs::read(path) {
                Ok(b) => b,
                Err(e) => {
                    unreadable.push((path.clone(), e.to_string()));
                    continue;
                }
            };
            let stats = FileStats { hash: content_hash(&bytes), path: path.clone() };
            seen.entry(stats.hash).or_default().push((name.to_string(), stats.path));
            match decode_bytes(&bytes, path) {
                Ok(image) => {
                    min_side = min_side.min(image.width().min(image.height()));
                    max_side = max_side.max(image.width().max(image.height()));
                    let c = image.channels();
                    for px in image.pixels().chunks_exact(c) {
                        for (k, v) in px.iter().take(3).enumerate() {
                            let v = *v as f64 / 255.0;
                            sum[k] += v;
                            sum_sq[k] += v * v;
                        }
                    }
                    pixels += (image.pixels().len() / c) as u64;
                }
                Err(e) => unreadable.push((path.clone(), e.to_string())),
            }
        }
    }
    let examples = |list: &[(PathBuf, String)]| {
        list.iter().take(3).map(|(p, e)| format!("{} ({e})", p.display())).collect::<Vec<_>>().join("; ")
    };
    findings.push(if unreadable.is_empty() {
        Finding::new(1, "unreadable_files", Status::Pass, format!("all {files} files decode"))
    } else {
        Finding::new(
            1,
            "unreadable_files",
            Status::Fail,
            format!("{} of {files} files do not decode: {}", unreadable.len(), examples(&unreadable)),
        )
        .fix("delete or re-export these files")
        .data(json!(unreadable.iter().map(|(p, _)| p.display().to_string()).collect::<Vec<_>>()))
    });

    // The same content in two splits (a leak) or twice in one (a duplicate).
    let (mut leaks, mut dups) = (Vec::new(), 0usize);
    for group in seen.values().filter(|g| g.len() > 1) {
        let group = same_bytes(group);
        if group.len() < 2 {
            continue;
        }
        if group.iter().any(|(s, _)| *s != group[0].0) {
            leaks.push(group.iter().map(|(_, p)| p.display().to_string()).collect::<Vec<_>>());
        } else {
            dups += group.len() - 1;
        }
    }
    leaks.sort();
    findings.push(if !leaks.is_empty() {
        Finding::new(
            1,
            "split_leak",
            Status::Fail,
            format!("{} images appear in two splits, e.g. {}", leaks.len(), leaks[0].join(" = ")),
        )
        .fix("remove the copies from val/ and test/, so validation measures unseen images")
        .data(json!(leaks))
    } else if dups > 0 {
        Finding::new(
            1,
            "split_leak",
            Status::Warn,
            format!("no image in two splits, but {dups} duplicates within a split"),
        )
        .fix("remove the duplicates; a seeded val split of train/ could put copies on both sides")
    } else {
        Finding::new(1, "split_leak", Status::Pass, "no image (by content) in two splits")
    });

    // Image sizes and channel statistics.
    if pixels > 0 {
        let mean: Vec<f64> = sum.iter().map(|s| s / pixels as f64).collect();
        let std: Vec<f64> =
            sum_sq.iter().zip(&mean).map(|(q, m)| (q / pixels as f64 - m * m).max(0.0).sqrt()).collect();
        let size = config.data.image_size() as usize;
        let flat = std.iter().any(|s| *s < 0.01);
        let status = if flat || min_side * 2 < size { Status::Warn } else { Status::Pass };
        findings.push(
            Finding::new(
                1,
                "image_stats",
                status,
                format!(
                    "sides {min_side}-{max_side} px (model input {size}); channel mean [{:.3}, {:.3}, {:.3}] std [{:.3}, {:.3}, {:.3}]",
                    mean[0], mean[1], mean[2], std[0], std[1], std[2]
                ),
            )
            .fix(if flat {
                "a channel is nearly constant: check that the images are not blank".to_string()
            } else {
                format!("images are upscaled more than 2x: lower data.image_size toward {min_side}")
            })
            .data(json!({ "min_side": min_side, "max_side": max_side, "mean": mean, "std": std })),
        );
    }

    // Labels against the model's outputs.
    let outputs = config.model.num_classes.unwrap_or(classes.len());
    findings.push(label_range(classes.len(), outputs, false));
    Ok(findings)
}

/// The class count: FAIL with `fix` under 2 classes (every loss would be 0).
pub(crate) fn class_count(classes: &[String], fix: &str) -> Finding {
    if classes.len() < 2 {
        return Finding::new(
            1,
            "class_count",
            Status::Fail,
            format!(
                "train/ has {} class folder{} ({}): a classifier needs at least 2",
                classes.len(),
                if classes.len() == 1 { "" } else { "s" },
                classes.join(", ")
            ),
        )
        .fix(fix)
        .data(json!({ "classes": classes }));
    }
    Finding::new(1, "class_count", Status::Pass, format!("{} classes", classes.len()))
}

/// Per-class counts of each `(split, targets)`: WARN with `fix` when a split's largest class
/// outnumbers its smallest more than `ratio` times (a class with none counts as infinitely
/// rarer).
pub(crate) fn class_balance(
    splits: &[(&str, Vec<i64>)],
    classes: &[String],
    ratio: f64,
    fix: &str,
) -> Finding {
    let mut worst_ratio = 1.0f64;
    let mut worst_split = "";
    let mut counts_data = serde_json::Map::new();
    let mut figure = Vec::new();
    for (name, targets) in splits {
        let mut counts: BTreeMap<i64, usize> = (0..classes.len() as i64).map(|c| (c, 0)).collect();
        for t in targets {
            *counts.entry(*t).or_insert(0) += 1;
        }
        let (min, max) = (*counts.values().min().unwrap_or(&0), *counts.values().max().unwrap_or(&0));
        let r = if min == 0 { f64::INFINITY } else { max as f64 / min as f64 };
        if r > worst_ratio {
            (worst_ratio, worst_split) = (r, name);
        }
        let name_of = |c: i64| classes.get(c as usize).cloned().unwrap_or_else(|| c.to_string());
        let per: Vec<String> = counts.iter().map(|(c, n)| format!("{} {n}", name_of(*c))).collect();
        figure.push(format!("{name}: {}", per.join(", ")));
        counts_data.insert(
            name.to_string(),
            json!(counts.iter().map(|(c, n)| (name_of(*c), *n)).collect::<BTreeMap<_, _>>()),
        );
    }
    let status = if worst_ratio > ratio { Status::Warn } else { Status::Pass };
    let mut text = figure.join("; ");
    if status == Status::Warn {
        let _ = write!(text, " (largest/smallest class {worst_ratio:.1}x in {worst_split})");
    }
    Finding::new(1, "class_balance", status, text)
        .fix(fix)
        .data(json!({ "counts": counts_data, "max_ratio": worst_ratio }))
}

/// The labels `0..classes` against the model's `outputs`: FAIL with fewer outputs, and with
/// more when `exact` (a recipe that refuses the mismatch); WARN with more otherwise.
pub(crate) fn label_range(classes: usize, outputs: usize, exact: bool) -> Finding {
    let status = match outputs.cmp(&classes) {
        std::cmp::Ordering::Less => Status::Fail,
        std::cmp::Ordering::Greater if exact => Status::Fail,
        std::cmp::Ordering::Greater => Status::Warn,
        std::cmp::Ordering::Equal => Status::Pass,
    };
    Finding::new(
        1,
        "label_range",
        status,
        format!("labels 0..={} ({classes} classes); the model has {outputs} outputs", classes as i64 - 1),
    )
    .fix(format!("set model.num_classes = {classes} (or leave it unset)"))
    .data(json!({ "classes": classes, "outputs": outputs }))
}

fn content_hash(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    h.write(bytes);
    h.finish()
}

/// The members of a hash group whose bytes equal the first member's (guards against a hash
/// collision; files that cannot be reread are left out).
fn same_bytes(group: &[(String, PathBuf)]) -> Vec<(String, PathBuf)> {
    let Ok(first) = std::fs::read(&group[0].1) else { return Vec::new() };
    group.iter().filter(|(_, p)| std::fs::read(p).is_ok_and(|b| b == first)).cloned().collect()
}
