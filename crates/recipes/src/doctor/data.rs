//! Stage 1 of the doctor: the data (class balance, unreadable files, leaks between splits,
//! image sizes and channel statistics, labels against the model's outputs).

use super::{DoctorOptions, Finding, Status};
use crate::config::TrainConfig;
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
/// model's outputs (`model.num_classes`, or the class count when unset).
pub fn check_data(config: &TrainConfig, options: &DoctorOptions) -> Result<Vec<Finding>> {
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
    if classes.len() < 2 {
        findings.push(
            Finding::new(
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
            .fix("put each class's images in its own folder under train/ (train/<class>/*.jpg)")
            .data(json!({ "classes": classes })),
        );
        return Ok(findings);
    }
    findings.push(Finding::new(1, "class_count", Status::Pass, format!("{} classes", classes.len())));

    // Class balance.
    let mut worst_ratio = 1.0f64;
    let mut worst_split = "";
    let mut counts_data = serde_json::Map::new();
    let mut figure = Vec::new();
    for (name, folder) in &splits {
        let mut counts: BTreeMap<i64, usize> = (0..classes.len() as i64).map(|c| (c, 0)).collect();
        for t in folder.targets() {
            *counts.entry(t).or_insert(0) += 1;
        }
        let (min, max) = (*counts.values().min().unwrap_or(&0), *counts.values().max().unwrap_or(&0));
        let ratio = if min == 0 { f64::INFINITY } else { max as f64 / min as f64 };
        if ratio > worst_ratio {
            (worst_ratio, worst_split) = (ratio, name);
        }
        let per: Vec<String> = counts.iter().map(|(c, n)| format!("{} {n}", classes[*c as usize])).collect();
        figure.push(format!("{name}: {}", per.join(", ")));
        counts_data.insert(
            name.to_string(),
            json!(counts.iter().map(|(c, n)| (classes[*c as usize].clone(), *n)).collect::<BTreeMap<_, _>>()),
        );
    }
    let status = if worst_ratio > options.imbalance_ratio { Status::Warn } else { Status::Pass };
    let mut text = figure.join("; ");
    if status == Status::Warn {
        let _ = write!(text, " (largest/smallest class {worst_ratio:.1}x in {worst_split})");
    }
    findings.push(
        Finding::new(1, "class_balance", status, text)
            .fix("set data.sampler = \"weighted\" (class-balanced sampling) or train.class_weights = \"balanced\", or collect more of the rare classes")
            .data(json!({ "counts": counts_data, "max_ratio": worst_ratio })),
    );

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
        let size = config.data.image_size as usize;
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
    let status = match outputs.cmp(&classes.len()) {
        std::cmp::Ordering::Less => Status::Fail,
        std::cmp::Ordering::Greater => Status::Warn,
        std::cmp::Ordering::Equal => Status::Pass,
    };
    findings.push(
        Finding::new(
            1,
            "label_range",
            status,
            format!(
                "labels 0..={} ({} classes); the model has {outputs} outputs",
                classes.len() as i64 - 1,
                classes.len()
            ),
        )
        .fix(format!("set model.num_classes = {} (or leave it unset)", classes.len()))
        .data(json!({ "classes": classes.len(), "outputs": outputs })),
    );
    Ok(findings)
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
