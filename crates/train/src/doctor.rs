//! `torchlight doctor`: the seed documents' "why does my model not train" checklist, run in
//! order, cheapest first: (1) the data, (2) one batch through the model, (3) overfitting one
//! batch, (4) a short real run. Each check gives a [`Finding`]: PASS / WARN / FAIL, the figure
//! it measured and one suggested fix.

use crate::config::TrainConfig;
use crate::error::{Result, TrainError};
use crate::fit::{build_model, build_optimizer, eval_transform, loader, open_splits};
use crate::guard;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::hash::Hasher;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tch::nn::ModuleT;
use tch::{Device, Kind, Tensor};
use torchlight_data::Subset;
use torchlight_nn::{count_parameters, named_parameters, CrossEntropyLoss, ResNet};
use torchlight_tensor::{no_grad, seed_everything, summary, to_device_non_blocking};
use torchlight_vision::{decode_bytes, ImageFolder, SplitFolders};

/// The verdict of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    /// Nothing wrong.
    Pass,
    /// Not run, because an earlier check failed.
    Skip,
    /// Suspicious; training may still work.
    Warn,
    /// Training will not work as set up.
    Fail,
}

impl Status {
    /// `PASS`, `SKIP`, `WARN`, `FAIL`.
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Skip => "SKIP",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// 1 data, 2 one batch, 3 overfit one batch, 4 short run.
    pub stage: u8,
    /// A stable name (`class_balance`, `split_leak`, `grad_flow`, ...).
    pub check: &'static str,
    /// The verdict.
    pub status: Status,
    /// What was measured, in words and numbers.
    pub figure: String,
    /// One suggested fix, when the status is not PASS.
    pub fix: Option<String>,
    /// The measurements as data (for `--json`).
    pub data: Value,
}

impl Finding {
    fn new(stage: u8, check: &'static str, status: Status, figure: impl Into<String>) -> Self {
        Finding { stage, check, status, figure: figure.into(), fix: None, data: Value::Null }
    }

    fn fix(mut self, fix: impl Into<String>) -> Self {
        if self.status != Status::Pass {
            self.fix = Some(fix.into());
        }
        self
    }

    fn data(mut self, data: Value) -> Self {
        self.data = data;
        self
    }
}

/// Every finding of a doctor run, in checklist order.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DoctorReport {
    /// The findings.
    pub findings: Vec<Finding>,
}

impl DoctorReport {
    /// The finding of `check` (the first, if several).
    pub fn get(&self, check: &str) -> Option<&Finding> {
        self.findings.iter().find(|f| f.check == check)
    }

    /// The worst status of all findings (PASS for an empty report).
    pub fn worst(&self) -> Status {
        self.findings.iter().map(|f| f.status).max().unwrap_or(Status::Pass)
    }

    /// One block per finding: `[stage] STATUS check: figure`, then `fix: ...`.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            let _ = writeln!(out, "[{}] {:4}  {}: {}", f.stage, f.status.label(), f.check, f.figure);
            if let Some(fix) = &f.fix {
                let _ = writeln!(out, "          fix: {fix}");
            }
        }
        out
    }
}

/// Bounds and thresholds of a doctor run.
#[derive(Debug, Clone)]
pub struct DoctorOptions {
    /// Optimizer steps of the overfit-one-batch check; 60.
    pub overfit_steps: usize,
    /// The overfit check passes once the batch's loss is below this; 0.1.
    pub overfit_loss: f64,
    /// Steps of the short real run; 30.
    pub run_steps: usize,
    /// Largest-to-smallest class count ratio above which a split is imbalanced; 3.
    pub imbalance_ratio: f64,
    /// Share of step time spent waiting for data above which the run is data-starved; 0.6
    /// (the seed's "accelerator below 40% busy").
    pub stall_share: f64,
    /// A layer whose gradient norm stays below this vanishes; 1e-7.
    pub vanishing_norm: f64,
    /// A layer whose gradient norm exceeds this explodes; 1e3.
    pub exploding_norm: f64,
}

impl Default for DoctorOptions {
    fn default() -> Self {
        DoctorOptions {
            overfit_steps: 60,
            overfit_loss: 0.1,
            run_steps: 30,
            imbalance_ratio: 3.0,
            stall_share: 0.6,
            vanishing_norm: 1e-7,
            exploding_norm: 1e3,
        }
    }
}

/// Runs the whole checklist for `config` (its data root, model, optimizer, batch and image
/// size, device). Later stages are SKIPped when an earlier one failed in a way that would make
/// them meaningless (unreadable files, labels out of range, non-finite forward).
pub fn doctor(config: &TrainConfig, options: &DoctorOptions) -> Result<DoctorReport> {
    config.validate()?;
    let device = config.train.device_spec()?.resolve()?;
    let mut report = DoctorReport { findings: check_data(config, options)? };
    if report.worst() == Status::Fail {
        report.findings.push(skipped(2, "one batch, overfit and short run not run: fix the data first"));
        return Ok(report);
    }
    let splits = open_splits(config)?;
    let num_classes = config.model.num_classes.unwrap_or(splits.classes.len());
    // One fixed batch without augmentation: the training images through the eval transform.
    let size = config.data.image_size as usize;
    let plain = ImageFolder::new(config.data.train_dir())?.with_transform(eval_transform(size));
    let n = torchlight_data::Dataset::len(&plain);
    let plain = Subset::new(Arc::new(plain), (0..n).collect())?;
    let mut plain_loader = loader(plain, config, true, device)?;
    let (x, y) = plain_loader.epoch(0).next().ok_or_else(|| TrainError::InvalidConfig {
        field: "data.root".into(),
        value: config.data.root.display().to_string(),
        reason: "train/ yields no batch".into(),
    })??;
    let (x, y) = (to_device_non_blocking(&x, device), to_device_non_blocking(&y, device));

    seed_everything(config.train.seed);
    let model = build_model(config, num_classes, device)?;
    let batch = check_batch(&model, &x, &y, num_classes);
    let fatal = batch.iter().any(|f| f.status == Status::Fail);
    report.findings.extend(batch);
    if fatal {
        report.findings.push(skipped(3, "overfit and short run not run: fix the batch first"));
        return Ok(report);
    }

    seed_everything(config.train.seed);
    let model = build_model(config, num_classes, device)?;
    report.findings.push(overfit_batch(&model, &x, &y, config, options)?);

    seed_everything(config.train.seed);
    let model = build_model(config, num_classes, device)?;
    // Enough epochs for `run_steps` batches, each from its own loader so the batches stream
    // lazily and the wait for each one is measured as training sees it.
    let first = loader(splits.train, config, true, device)?;
    let epochs = options.run_steps.div_ceil(first.len().max(1)).max(1);
    let mut loaders = vec![first];
    for _ in 1..epochs {
        loaders.push(loader(open_splits(config)?.train, config, true, device)?);
    }
    let batches = loaders.iter_mut().enumerate().flat_map(|(e, l)| l.epoch(e as u64));
    let batches = batches.map(|b| b.map_err(TrainError::from));
    report.findings.extend(short_run(&model, batches, config, device, options)?);
    Ok(report)
}

fn skipped(stage: u8, why: &str) -> Finding {
    Finding::new(stage, "skipped", Status::Skip, why)
}

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
            .fix("oversample the rare classes (WeightedRandomSampler) or weight the loss, or collect more of them")
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

/// Stage 2: one batch `x` `[N, 3, S, S]`, `y` `[N]` through `model` at initialisation (training
/// mode, no grad): finite inputs, labels in range, output shape `[N, num_classes]`, finite
/// features and logits, and a loss near ln(num_classes).
pub fn check_batch(model: &ResNet, x: &Tensor, y: &Tensor, num_classes: usize) -> Vec<Finding> {
    let mut findings = Vec::new();
    let s = summary(x);
    findings.push(if s.nan + s.inf > 0 {
        Finding::new(
            2,
            "finite_inputs",
            Status::Fail,
            format!("the batch {:?} holds {} NaN and {} Inf values", s.shape, s.nan, s.inf),
        )
        .fix("check the files and the transforms (a Normalize std of 0, a bad decode)")
    } else {
        Finding::new(
            2,
            "finite_inputs",
            Status::Pass,
            format!(
                "batch {:?}: min {:.3} max {:.3} mean {:.3}",
                s.shape,
                s.min.unwrap_or(0.0),
                s.max.unwrap_or(0.0),
                s.mean.unwrap_or(0.0)
            ),
        )
    });
    let (lo, hi) = (y.min().int64_value(&[]), y.max().int64_value(&[]));
    let bad_labels = lo < 0 || hi >= num_classes as i64;
    findings.push(
        Finding::new(
            2,
            "batch_labels",
            if bad_labels { Status::Fail } else { Status::Pass },
            format!("labels in [{lo}, {hi}] for {num_classes} outputs"),
        )
        .fix(format!(
            "labels must lie in [0, {}]: set model.num_classes to the class count",
            num_classes as i64 - 1
        )),
    );
    if bad_labels {
        return findings;
    }
    let _guard = no_grad();
    let features = model.features_t(x, true);
    let logits = model.fc.forward_t(&features, true).to_kind(Kind::Float);
    let shape = logits.size();
    let n = x.size()[0];
    findings.push(
        Finding::new(
            2,
            "output_shape",
            if shape == [n, num_classes as i64] { Status::Pass } else { Status::Fail },
            format!("logits {shape:?}, expected [{n}, {num_classes}]"),
        )
        .fix("replace the head with num_classes outputs (ResNet::replace_fc)"),
    );
    let (f_ok, l_ok) = (guard::is_all_finite(&features), guard::is_all_finite(&logits));
    findings.push(
        Finding::new(
            2,
            "finite_activations",
            if f_ok && l_ok { Status::Pass } else { Status::Fail },
            match (f_ok, l_ok) {
                (true, true) => "backbone features and logits are finite".to_string(),
                (false, _) => "the backbone features hold NaN/Inf".to_string(),
                (true, false) => "the logits hold NaN/Inf (the head)".to_string(),
            },
        )
        .fix("check the weights (a NaN in a checkpoint) and the input scale"),
    );
    if !(f_ok && l_ok) {
        return findings;
    }
    let loss = CrossEntropyLoss::new().forward(&logits, y).map(|l| l.double_value(&[])).unwrap_or(f64::NAN);
    let expected = (num_classes as f64).ln();
    let status = if !loss.is_finite() {
        Status::Fail
    } else if (loss - expected).abs() > (0.5 * expected).max(0.5) {
        Status::Warn
    } else {
        Status::Pass
    };
    findings.push(
        Finding::new(
            2,
            "initial_loss",
            status,
            format!("loss {loss:.4} at init, ln({num_classes}) = {expected:.4}"),
        )
        .fix("the new head starts too confident: initialise it with small weights and a zero bias")
        .data(json!({ "loss": loss, "expected": expected })),
    );
    findings
}

/// Stage 3: trains `model` on the one batch `(x, y)` for `options.overfit_steps` steps with
/// the configured optimizer; PASS once the loss drops below `options.overfit_loss`.
pub fn overfit_batch(
    model: &ResNet,
    x: &Tensor,
    y: &Tensor,
    config: &TrainConfig,
    options: &DoctorOptions,
) -> Result<Finding> {
    let count = count_parameters(model);
    if count.trainable == 0 {
        return Ok(Finding::new(
            3,
            "overfit_one_batch",
            Status::Fail,
            format!("no parameter trains (0 of {})", count.total),
        )
        .fix("unfreeze the model (model.freeze_epochs, unfreeze)"));
    }
    let mut optimizer = build_optimizer(config, model)?;
    let loss_fn = CrossEntropyLoss::new();
    let mut losses = Vec::new();
    for _ in 0..options.overfit_steps {
        let loss = loss_fn.forward(&model.forward_t(x, true).to_kind(Kind::Float), y)?;
        loss.backward();
        optimizer.step()?;
        optimizer.zero_grad()?;
        let l = loss.double_value(&[]);
        losses.push(l);
        if !l.is_finite() || l < options.overfit_loss {
            break;
        }
    }
    let (first, last) = (losses[0], *losses.last().expect("at least one step"));
    let status = if last < options.overfit_loss { Status::Pass } else { Status::Fail };
    Ok(Finding::new(
        3,
        "overfit_one_batch",
        status,
        format!("loss {first:.4} -> {last:.4} in {} steps on {} images (target < {})", losses.len(), x.size()[0], options.overfit_loss),
    )
    .fix("the model cannot memorise one batch: check that labels match images, that gradients reach the weights, and the lr")
    .data(json!({ "losses": losses })))
}

/// Per-layer gradient norms over a run (layer = parameter key without its last part).
#[derive(Default)]
struct GradFlow {
    layers: Vec<String>,
    norms: Vec<Vec<f64>>,
}

impl GradFlow {
    fn record(&mut self, model: &ResNet) {
        let mut per_layer: BTreeMap<String, f64> = BTreeMap::new();
        let mut order = Vec::new();
        for (name, p) in named_parameters(model) {
            let g = p.grad();
            if !p.requires_grad() || !g.defined() {
                continue;
            }
            let layer = name.rsplit_once('.').map_or(name.as_str(), |(l, _)| l).to_string();
            let sq = g.to_kind(Kind::Double).square().sum(Kind::Double).double_value(&[]);
            if !per_layer.contains_key(&layer) {
                order.push(layer.clone());
            }
            *per_layer.entry(layer).or_insert(0.0) += sq;
        }
        if self.layers.is_empty() {
            self.layers = order;
            self.norms = vec![Vec::new(); self.layers.len()];
        }
        for (layer, norms) in self.layers.iter().zip(&mut self.norms) {
            norms.push(per_layer.get(layer).copied().unwrap_or(0.0).sqrt());
        }
    }
}

/// Stage 4: `options.run_steps` real training steps of `model` on `batches` (with
/// augmentation, the configured optimizer): loss trend, lr sanity (divergence), gradient flow
/// per layer (norm at the first step, mean and std over the run; vanishing and exploding
/// layers), trainable against total parameters, and the share of step time spent waiting for
/// `batches` (the data stall).
pub fn short_run(
    model: &ResNet,
    mut batches: impl Iterator<Item = Result<(Tensor, Tensor)>>,
    config: &TrainConfig,
    device: Device,
    options: &DoctorOptions,
) -> Result<Vec<Finding>> {
    let mut findings = Vec::new();
    let count = count_parameters(model);
    let share = count.trainable as f64 / count.total.max(1) as f64;
    let status = if count.trainable == 0 {
        Status::Fail
    } else if share < 0.1 {
        Status::Warn
    } else {
        Status::Pass
    };
    findings.push(
        Finding::new(
            4,
            "trainable_parameters",
            status,
            format!("{} of {} parameters train ({:.1}%)", count.trainable, count.total, 100.0 * share),
        )
        .fix("the model is (mostly) frozen: unfreeze the backbone (model.freeze_epochs, unfreeze)")
        .data(json!({ "trainable": count.trainable, "total": count.total })),
    );
    if count.trainable == 0 {
        return Ok(findings);
    }
    let zero_weights: Vec<String> = named_parameters(model)
        .into_iter()
        .filter(|(n, p)| {
            n.ends_with("weight") && p.dim() > 1 && bool::try_from(p.eq(0.0).all()).unwrap_or(false)
        })
        .map(|(n, _)| n)
        .collect();
    let mut optimizer = build_optimizer(config, model)?;
    let loss_fn = CrossEntropyLoss::new().with_label_smoothing(config.train.label_smoothing);
    let (mut losses, mut flow) = (Vec::new(), GradFlow::default());
    let (mut stall, started) = (Duration::ZERO, Instant::now());
    for _ in 0..options.run_steps {
        let waited = Instant::now();
        let Some(batch) = batches.next() else { break };
        stall += waited.elapsed();
        let (x, y) = batch?;
        let (x, y) = (to_device_non_blocking(&x, device), to_device_non_blocking(&y, device));
        let loss = loss_fn.forward(&model.forward_t(&x, true).to_kind(Kind::Float), &y)?;
        let l = loss.double_value(&[]);
        losses.push(l);
        if !l.is_finite() {
            break;
        }
        loss.backward();
        flow.record(model);
        optimizer.step()?;
        optimizer.zero_grad()?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let lrs = optimizer.lrs();
    let lr = lrs.last().copied().unwrap_or(0.0);
    let k = (losses.len() / 4).max(1);
    let head: f64 = losses.iter().take(k).sum::<f64>() / k as f64;
    let tail: f64 = losses.iter().rev().take(k).sum::<f64>() / k as f64;
    let diverged_at = losses.iter().position(|l| !l.is_finite());
    // Divergence shows against the loss at initialisation: a too-high lr throws the loss far
    // above it within a step or two, after which it may drift down again.
    let initial = losses.first().copied().unwrap_or(f64::NAN);
    let rising = tail > 1.5 * initial;
    findings.push(
        match (diverged_at, rising) {
            (Some(step), _) => Finding::new(
                4,
                "lr_sanity",
                Status::Fail,
                format!("loss became {} at step {} with lr {lr:.3e}", losses[step], step + 1),
            )
            .fix(format!("training diverges: lower the lr (try optim.lr = {:.1e})", lr / 10.0)),
            (None, true) => Finding::new(
                4,
                "lr_sanity",
                Status::Fail,
                format!("loss rose from {initial:.4} at step 1 to {tail:.4} (mean of the last {k} steps) with lr {lr:.3e}"),
            )
            .fix(format!("training diverges: lower the lr (try optim.lr = {:.1e})", lr / 10.0)),
            (None, false) => {
                Finding::new(4, "lr_sanity", Status::Pass, format!("no divergence at lr {lr:.3e}"))
            }
        }
        .data(json!({ "lrs": lrs })),
    );
    let trend = if diverged_at.is_some() || rising {
        Status::Fail
    } else if tail < head {
        Status::Pass
    } else {
        Status::Warn
    };
    findings.push(
        Finding::new(
            4,
            "loss_trend",
            trend,
            format!(
                "mean loss of the first {k} steps {head:.4}, of the last {k} {tail:.4} ({} steps)",
                losses.len()
            ),
        )
        .fix(if trend == Status::Warn {
            "the loss is flat: raise the lr or check the labels"
        } else {
            "see lr_sanity"
        })
        .data(json!({ "losses": losses })),
    );

    // Gradient flow per layer.
    let mut layers = Vec::new();
    let (mut dead, mut vanishing, mut exploding) = (Vec::new(), Vec::new(), Vec::new());
    for (layer, norms) in flow.layers.iter().zip(&flow.norms) {
        let mean = norms.iter().sum::<f64>() / norms.len().max(1) as f64;
        let std = (norms.iter().map(|n| (n - mean).powi(2)).sum::<f64>() / norms.len().max(1) as f64).sqrt();
        let first = norms.first().copied().unwrap_or(0.0);
        if !first.is_finite() || norms.iter().any(|n| !n.is_finite() || *n > options.exploding_norm) {
            exploding.push(layer.clone());
        } else if mean < options.vanishing_norm {
            vanishing.push(layer.clone());
        } else if first < options.vanishing_norm {
            dead.push(layer.clone());
        }
        layers.push(json!({ "layer": layer, "first": first, "mean": mean, "std": std }));
    }
    let n_layers = flow.layers.len();
    let few = |v: &[String]| v.iter().take(4).cloned().collect::<Vec<_>>().join(", ");
    let grad_flow = if !exploding.is_empty() {
        Finding::new(
            4,
            "grad_flow",
            Status::Fail,
            format!(
                "{} of {n_layers} layers have exploding gradients (> {:e}): {}",
                exploding.len(),
                options.exploding_norm,
                few(&exploding)
            ),
        )
        .fix("lower the lr or set train.grad_clip = 1.0")
    } else if !vanishing.is_empty() || !dead.is_empty() {
        let mut text = Vec::new();
        if !dead.is_empty() {
            text.push(format!(
                "{} of {n_layers} layers get no gradient at step 1: {}",
                dead.len(),
                few(&dead)
            ));
        }
        if !vanishing.is_empty() {
            text.push(format!(
                "{} of {n_layers} layers have vanishing gradients (< {:e}): {}",
                vanishing.len(),
                options.vanishing_norm,
                few(&vanishing)
            ));
        }
        let fix = if zero_weights.is_empty() {
            "check the init and for saturating activations; use a residual model with BatchNorm".to_string()
        } else {
            format!("{} is all zeros at init and blocks the gradient: initialise it randomly (kaiming/PyTorch default)", zero_weights.join(", "))
        };
        Finding::new(4, "grad_flow", Status::Warn, text.join("; ")).fix(fix)
    } else {
        Finding::new(4, "grad_flow", Status::Pass, format!("gradients reach all {n_layers} trainable layers"))
    };
    findings.push(grad_flow.data(json!({ "layers": layers, "zero_weights": zero_weights })));

    let share = stall.as_secs_f64() / seconds.max(1e-9);
    findings.push(
        Finding::new(
            4,
            "data_stall",
            if share > options.stall_share { Status::Warn } else { Status::Pass },
            format!("{:.0}% of step time waiting for data ({:.2} s of {seconds:.2} s)", 100.0 * share, stall.as_secs_f64()),
        )
        .fix("the input pipeline starves the model: raise data.workers, pre-resize the images, or use faster storage")
        .data(json!({ "stall_s": stall.as_secs_f64(), "total_s": seconds, "share": share })),
    );
    Ok(findings)
}
