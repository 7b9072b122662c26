//! The distributed Trainer (2 Gloo ranks on loopback, as processes): the ranks end with
//! identical weights, equal to one process training on the concatenated batches, with the
//! validation metrics reduced over the ranks; only rank 0 writes a run folder or prints; a
//! resumed 2-rank run continues exactly; a mid-epoch checkpoint holds the partial training
//! metrics of every rank, so the resumed epoch reports the straight run's; AMP keeps the
//! replicas identical; metric states of different lengths (mAP's kept scores) gather into the
//! whole set's.

use crate::common::{conv_mlp, data, describe, init_deterministic, launch, max_diff, output_of, state};
use anyhow::{ensure, Context, Result};
use std::path::Path;
use tch::Tensor;
use torchlight_data::{DataLoader, DefaultCollate, DistributedSampler, Sampler, TensorDataset};
use torchlight_distributed::{DataParallel, DdpConfig, ProcessGroup};
use torchlight_nn::Sequential;
use torchlight_optim::{Optimizer, ParamGroup, Sgd, SgdConfig};
use torchlight_train::{
    BatchEnd, Callback, Classification, Context as HookContext, Distributed, FitSummary, LrFindConfig,
    LrFinder, MeanAveragePrecision, Metric, MetricSet, MultiLabelF1, Progress, TrainError, Trainer,
    TrainerBuilder,
};

const WORLD: usize = 2;
const PER_RANK_BATCH: usize = 2;
const ACCUMULATION: usize = 2;
const EPOCHS: u64 = 2;
const TRAIN_SAMPLES: usize = 16;
const VAL_SAMPLES: usize = 6;
const SEED: u64 = 7;

type Loader = DataLoader<TensorDataset, DefaultCollate>;

fn dataset(seed: u64, n: usize) -> TensorDataset {
    let (xs, ys) = data(seed, n, [2, 4, 4], 3);
    TensorDataset::new((xs, ys)).expect("a tensor dataset")
}

fn loader(dataset: TensorDataset, sampler: impl Sampler + 'static, batch: usize) -> Result<Loader> {
    Ok(DataLoader::builder(dataset).batch_size(batch).sampler(sampler).build()?)
}

/// The model (initialised from `init_seed`) and its SGD with momentum.
fn model_and_optimizer(init_seed: u64) -> Result<(Sequential, Sgd)> {
    model_and_optimizer_on(init_seed, tch::Device::Cpu)
}

/// [`model_and_optimizer`] with the model on `device` before its SGD is made.
fn model_and_optimizer_on(init_seed: u64, device: tch::Device) -> Result<(Sequential, Sgd)> {
    let model = conv_mlp();
    init_deterministic(&model, init_seed);
    torchlight_nn::to_device(&model, device);
    let params = torchlight_nn::named_parameters(&model);
    Ok((model, Sgd::new(vec![ParamGroup::new(params, SgdConfig::new(0.1).with_momentum(0.9))])?))
}

fn rank_sampler(rank: usize) -> Result<DistributedSampler> {
    Ok(DistributedSampler::new(TRAIN_SAMPLES, WORLD, rank)?.with_seed(SEED))
}

/// Every rank's batches of one step, concatenated: what one process sees when it trains on
/// the ranks' batches together.
struct Concatenated(Vec<DistributedSampler>);

impl Sampler for Concatenated {
    fn len(&self) -> usize {
        self.0.iter().map(Sampler::len).sum()
    }

    fn indices(&self, epoch: u64) -> Vec<usize> {
        let per_rank: Vec<Vec<usize>> = self.0.iter().map(|s| s.indices(epoch)).collect();
        let mut out = Vec::new();
        for start in (0..per_rank[0].len()).step_by(PER_RANK_BATCH) {
            for indices in &per_rank {
                out.extend(&indices[start..(start + PER_RANK_BATCH).min(indices.len())]);
            }
        }
        out
    }
}

/// One distributed `fit` on this rank: its own initial weights (only the broadcast makes the
/// replicas equal), its shards of the training and validation sets.
fn fit_rank(
    pg: &ProcessGroup,
    epochs: u64,
    run_dir: &Path,
    resume: Option<&Path>,
    amp: bool,
) -> Result<(Sequential, FitSummary)> {
    fit_rank_with(pg, epochs, run_dir, resume, amp, None)
}

/// Fails the run at optimizer step `at`, after the step's hooks of earlier callbacks and
/// before the run folder's checkpoint (as a crash between two saves would).
struct CrashAt(u64);

impl Callback for CrashAt {
    fn name(&self) -> String {
        "CrashAt".into()
    }
    fn on_train_batch_end(
        &mut self,
        ctx: &mut HookContext<'_>,
        batch: &BatchEnd,
    ) -> torchlight_train::Result<()> {
        if batch.stepped && ctx.position.global_step == self.0 {
            return Err(TrainError::Training {
                epoch: ctx.position.epoch + 1,
                reason: "simulated crash".into(),
            });
        }
        Ok(())
    }
}

/// [`fit_rank`] with `last` saved after every optimizer step, and `crash` stopping it at that
/// step.
fn fit_rank_with(
    pg: &ProcessGroup,
    epochs: u64,
    run_dir: &Path,
    resume: Option<&Path>,
    amp: bool,
    crash: Option<u64>,
) -> Result<(Sequential, FitSummary)> {
    let rank = pg.rank();
    let (mut model, mut sgd) = model_and_optimizer(3 + rank as u64)?;
    let (mut train, mut val) = rank_loaders(rank)?;
    let mut builder = rank_trainer(pg, epochs, run_dir, amp);
    if let Some(at) = crash {
        builder = builder.checkpoint_every_n_steps(1).callback(CrashAt(at));
    }
    if let Some(checkpoint) = resume {
        builder = builder.resume_from(checkpoint);
    }
    let summary =
        builder.build()?.fit(&mut model, &Classification::new(3), &mut sgd, &mut train, Some(&mut val))?;
    Ok((model, summary))
}

/// This rank's shards of the training and validation sets.
fn rank_loaders(rank: usize) -> Result<(Loader, Loader)> {
    let train = loader(dataset(11, TRAIN_SAMPLES), rank_sampler(rank)?, PER_RANK_BATCH)?;
    let val_sampler = DistributedSampler::new(VAL_SAMPLES, WORLD, rank)?.with_shuffle(false);
    Ok((train, loader(dataset(12, VAL_SAMPLES), val_sampler, PER_RANK_BATCH)?))
}

/// The distributed Trainer of every scenario here, writing `run_dir` (rank 0 alone).
fn rank_trainer(pg: &ProcessGroup, epochs: u64, run_dir: &Path, amp: bool) -> TrainerBuilder {
    Trainer::builder()
        .epochs(epochs)
        .accumulation(ACCUMULATION)
        .amp(amp)
        .seed(SEED)
        .graceful_shutdown(false)
        .progress(Progress::auto())
        .run_dir(run_dir)
        .distributed(Box::new(DataParallel::new(pg, DdpConfig::default())))
}

/// The range test of the `lr_find` scenario: 12 steps (3 epochs of 4 batches, 2 accumulated)
/// from 1e-3 to 1e4, far enough for SGD to diverge.
fn sweep() -> LrFindConfig {
    LrFindConfig { min_lr: 1e-3, max_lr: 1e4, num_training: 12, skip_begin: 2, ..LrFindConfig::default() }
}

/// A range test's points, one `lr loss raw` line each (exact, as `{:?}` prints f64), then
/// whether it stopped early.
fn curve_text(f: &LrFinder) -> String {
    let mut lines: Vec<String> =
        (0..f.lrs.len()).map(|i| format!("{:?} {:?} {:?}", f.lrs[i], f.losses[i], f.raw_losses[i])).collect();
    lines.push(format!("stopped_early {}", f.stopped_early));
    lines.join("\n")
}

/// `TL_LR_FIND_DEVICE=cuda` (the GPU tests) runs the `lr_find` scenario's sweep on a GPU.
pub const LR_FIND_DEVICE: &str = "TL_LR_FIND_DEVICE";

/// The `lr_find` scenario on one rank: a straight `fit`, then a fresh model and Trainer whose
/// `lr_find` runs before the same `fit`. Writes the curve, the weights after each fit, and
/// checks `lr_find` put back this rank's own (not rank 0's) weights. On CUDA
/// ([`LR_FIND_DEVICE`]) the sweep alone, on the GPU of the rank (the loss all-reduced as a
/// CUDA tensor).
pub fn lr_find_rank(pg: &ProcessGroup, out: &Path) -> Result<()> {
    let r = pg.rank();
    if std::env::var(LR_FIND_DEVICE).as_deref() == Ok("cuda") {
        // Loads libtorch's CUDA backend, which this binary does not link.
        let status = torchlight_tensor::cuda_status();
        ensure!(status.available, "CUDA not available: {:?}", status.reason);
        let device = tch::Device::Cuda(r % status.device_count.max(1));
        let curve = sweep_on(pg, device, &out.join(format!("tuned_{r}")))?;
        return Ok(std::fs::write(out.join(format!("rank{r}_curve.txt")), curve)?);
    }
    let (model, _) = fit_rank(pg, EPOCHS, &out.join(format!("straight_{r}")), None, false)?;
    save(&model, &out.join(format!("rank{r}_straight.safetensors")))?;

    let (mut model, mut sgd) = model_and_optimizer(3 + r as u64)?;
    let own = state(&model);
    let (mut train, mut val) = rank_loaders(r)?;
    let mut trainer = rank_trainer(pg, EPOCHS, &out.join(format!("tuned_{r}")), false).build()?;
    let task = Classification::new(3);
    let found = trainer.lr_find(&mut model, &task, &mut sgd, &mut train, &sweep())?;
    std::fs::write(out.join(format!("rank{r}_curve.txt")), curve_text(&found))?;
    ensure!(max_diff(&own, &state(&model)) == 0.0, "rank {r}: lr_find did not put back this rank's weights");
    ensure!(sgd.lrs() == vec![0.1], "rank {r}: lr_find left the lr at {:?}", sgd.lrs());
    trainer.fit(&mut model, &task, &mut sgd, &mut train, Some(&mut val))?;
    save(&model, &out.join(format!("rank{r}_tuned.safetensors")))
}

/// The scenario's sweep alone on `device`: this rank's model (on the device before its SGD is
/// made), its shard, a distributed Trainer on the device. Returns the curve as text, once the
/// rank's own weights are checked to be back.
fn sweep_on(pg: &ProcessGroup, device: tch::Device, run_dir: &Path) -> Result<String> {
    let r = pg.rank();
    let (mut model, mut sgd) = model_and_optimizer_on(3 + r as u64, device)?;
    let own = state(&model);
    let (mut train, _) = rank_loaders(r)?;
    let mut trainer = rank_trainer(pg, EPOCHS, run_dir, false).device(device).build()?;
    let found = trainer.lr_find(&mut model, &Classification::new(3), &mut sgd, &mut train, &sweep())?;
    ensure!(max_diff(&own, &state(&model)) == 0.0, "rank {r}: lr_find did not put back this rank's weights");
    Ok(curve_text(&found))
}

/// One process's sweep on the ranks' batches together from rank 0's initial weights, on
/// `device`: what a 2-rank sweep's curve must equal.
pub fn one_process_sweep(device: tch::Device) -> Result<LrFinder> {
    let (mut model, mut sgd) = model_and_optimizer_on(3, device)?;
    let samplers = (0..WORLD).map(rank_sampler).collect::<Result<Vec<_>>>()?;
    let mut train = loader(dataset(11, TRAIN_SAMPLES), Concatenated(samplers), PER_RANK_BATCH * WORLD)?;
    let mut trainer = Trainer::builder()
        .accumulation(ACCUMULATION)
        .seed(SEED)
        .graceful_shutdown(false)
        .progress(Progress::quiet())
        .device(device)
        .build()?;
    Ok(trainer.lr_find(&mut model, &Classification::new(3), &mut sgd, &mut train, &sweep())?)
}

/// Checks the 2-rank curve (as [`curve_text`] wrote it) against one process's `want`: the same
/// lrs and stop, the losses within `tolerance` relative.
pub fn assert_curve_matches(curve: &str, want: &LrFinder, tolerance: f64) {
    let got: Vec<Vec<f64>> = curve
        .lines()
        .filter(|l| !l.starts_with("stopped_early"))
        .map(|l| l.split(' ').map(|v| v.parse().expect("a number")).collect())
        .collect();
    assert_eq!(got.len(), want.lrs.len(), "steps: 2 ranks {curve}\nvs one process {want:?}");
    assert!(curve.ends_with(&format!("stopped_early {}", want.stopped_early)), "{curve}\nvs {want:?}");
    assert!(want.stopped_early, "the sweep did not reach divergence: {want:?}");
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g[0], want.lrs[i], "lr of step {i}");
        for (name, a, b) in [("smoothed", g[1], want.losses[i]), ("raw", g[2], want.raw_losses[i])] {
            // Two per-rank means averaged against one mean; NaN past divergence on both sides.
            let close = (a.is_nan() && b.is_nan()) || (a - b).abs() <= tolerance * b.abs().max(1.0);
            assert!(close, "step {i}: {name} loss {a} on 2 ranks vs {b} in one process");
        }
    }
}

fn save(model: &Sequential, path: &Path) -> Result<()> {
    Ok(Tensor::write_safetensors(&state(model), path)?)
}

fn load(path: &Path) -> Result<Vec<(String, Tensor)>> {
    Tensor::read_safetensors(path).with_context(|| format!("reading {}", path.display()))
}

/// The `trainer` scenario on one rank: a straight run into `run_<rank>`, then one epoch into
/// `resume_<rank>` and a resume of it (from rank 0's checkpoint on every rank) to the end.
pub fn rank(pg: &ProcessGroup, out: &Path) -> Result<()> {
    let r = pg.rank();
    let (model, summary) = fit_rank(pg, EPOCHS, &out.join(format!("run_{r}")), None, false)?;
    save(&model, &out.join(format!("rank{r}_straight.safetensors")))?;
    let val: Vec<String> = summary.history.iter().map(|e| format!("{:?}", e.get("val_loss"))).collect();
    std::fs::write(out.join(format!("rank{r}_val.txt")), val.join("\n"))?;
    let train =
        |s: &FitSummary| format!("{:?} {:?}", s.history[0].get("train_loss"), s.history[0].get("train_acc"));
    std::fs::write(out.join(format!("rank{r}_train_straight.txt")), train(&summary))?;

    // A crash at step 2 (epoch 1's last), after the step-1 save (batch 2 of 4), and a resume
    // from it: the epoch's training metrics are the straight run's.
    let crash_dir = |rank: usize| out.join(format!("crash_{rank}"));
    let crashed = fit_rank_with(pg, 1, &crash_dir(r), None, false, Some(2));
    ensure!(crashed.is_err(), "the run did not crash");
    let last = crash_dir(0).join("checkpoints").join("last");
    if r == 0 {
        // Only rank 0 writes it, after this read.
        let saved = torchlight_checkpoint::Checkpoint::load(&last)?;
        let samples = saved.loop_tensors().into_iter().find(|(k, _)| k == "train_metrics.samples");
        let p = saved.meta.progress;
        let samples = samples.map(|(_, t)| t.int64_value(&[]));
        std::fs::write(
            out.join("crash_checkpoint.txt"),
            format!("{} {} {samples:?}", p.global_step, p.batch),
        )?;
    }
    let (_, summary) = fit_rank_with(pg, 1, &crash_dir(r), Some(&last), false, Some(99))?;
    std::fs::write(out.join(format!("rank{r}_train_resumed.txt")), train(&summary))?;

    let resume_dir = |rank: usize| out.join(format!("resume_{rank}"));
    fit_rank(pg, 1, &resume_dir(r), None, false)?;
    let last = resume_dir(0).join("checkpoints").join("last");
    let (model, summary) = fit_rank(pg, EPOCHS, &resume_dir(r), Some(&last), false)?;
    ensure!(summary.epochs == EPOCHS && summary.world_size == WORLD, "resumed run: {summary:?}");
    save(&model, &out.join(format!("rank{r}_resumed.safetensors")))?;

    // Mixed precision (bfloat16 autocast on the CPU) with accumulation.
    let (model, _) = fit_rank(pg, 1, &out.join(format!("amp_{r}")), None, true)?;
    save(&model, &out.join(format!("rank{r}_amp.safetensors")))?;

    reduce_uneven_metrics(pg)
}

/// Rank r holds 3 - r rows of multi-label scores: the reduced mAP (gathered rows) and F1
/// (summed counts) are those of one set holding every rank's rows, on every rank.
fn reduce_uneven_metrics(pg: &ProcessGroup) -> Result<()> {
    let rows = |rank: usize| -> (Tensor, Tensor) {
        let n = 3 - rank;
        let (scores, _) = data(40 + rank as u64, n, [4, 1, 1], 2);
        let targets: Vec<f32> = (0..n * 4).map(|k| ((k / 4 + k % 4 + rank) % 2) as f32).collect();
        (scores.view([n as i64, 4]), Tensor::from_slice(&targets).view([n as i64, 4]))
    };
    let set = || {
        let metrics: Vec<Box<dyn Metric>> =
            vec![Box::new(MeanAveragePrecision::new()), Box::new(MultiLabelF1::new(0.0))];
        MetricSet::new(metrics)
    };
    let loss = Tensor::from(0.5f32);
    let mut mine = set();
    let (x, y) = rows(pg.rank());
    mine.update(&loss, &x, &y)?;
    let world = DataParallel::new(pg, DdpConfig::default());
    mine.reduce(&world as &dyn Distributed)?;
    let mut whole = set();
    for r in 0..pg.world_size() {
        let (x, y) = rows(r);
        whole.update(&loss, &x, &y)?;
    }
    ensure!(mine.samples() == whole.samples(), "samples {} vs {}", mine.samples(), whole.samples());
    let (got, want) = (mine.compute(), whole.compute());
    ensure!(got.len() == want.len() && got.len() > 2, "values {got:?} vs {want:?}");
    for ((name, g), (_, w)) in got.iter().zip(&want) {
        ensure!(g.is_finite() && (g - w).abs() <= 1e-9, "{name}: reduced {g} vs the whole set's {w}");
    }
    Ok(())
}

/// One process on the concatenated batches, from rank 0's initial weights.
fn reference() -> Result<(Sequential, FitSummary)> {
    let (mut model, mut sgd) = model_and_optimizer(3)?;
    let samplers = (0..WORLD).map(rank_sampler).collect::<Result<Vec<_>>>()?;
    let mut train = loader(dataset(11, TRAIN_SAMPLES), Concatenated(samplers), PER_RANK_BATCH * WORLD)?;
    let mut val = DataLoader::builder(dataset(12, VAL_SAMPLES)).batch_size(4).build()?;
    let summary = Trainer::builder()
        .epochs(EPOCHS)
        .accumulation(ACCUMULATION)
        .seed(SEED)
        .graceful_shutdown(false)
        .progress(Progress::quiet())
        .build()?
        .fit(&mut model, &Classification::new(3), &mut sgd, &mut train, Some(&mut val))?;
    Ok((model, summary))
}

#[test]
fn two_ranks_train_like_one_process_on_the_concatenated_batch_and_resume() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let outcome = launch("trainer", WORLD, dir.path());
    ensure!(outcome.success(), "the ranks failed:\n{}", describe(&outcome));

    let rank0 = load(&dir.path().join("rank0_straight.safetensors"))?;
    let rank1 = load(&dir.path().join("rank1_straight.safetensors"))?;
    // The same averaged gradients and the same optimizer step on every rank: bit for bit.
    assert_eq!(max_diff(&rank0, &rank1), 0.0, "the ranks' weights differ");

    let (model, summary) = reference()?;
    let diff = max_diff(&rank0, &state(&model));
    // Only the order of float sums differs (two per-rank means averaged against one mean).
    assert!(diff <= 1e-5, "2 ranks vs one process on the concatenated batch: max |diff| {diff:e} > 1e-5");

    // Validation metrics are reduced over the shards: every rank reports the whole set's.
    let want: Vec<f64> = summary.history.iter().map(|e| e.get("val_loss").expect("val_loss")).collect();
    for r in 0..WORLD {
        let text = std::fs::read_to_string(dir.path().join(format!("rank{r}_val.txt")))?;
        let got: Vec<f64> = text
            .lines()
            .map(|l| l.trim_start_matches("Some(").trim_end_matches(')').parse().expect("a number"))
            .collect();
        assert_eq!(got.len(), want.len(), "rank {r}: epochs of val_loss");
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-5, "rank {r}: val_loss {g} vs one process {w} (tolerance 1e-5)");
        }
    }

    // Only rank 0 keeps a run folder and prints.
    let run0 = dir.path().join("run_0");
    assert!(run0.join("metrics.csv").is_file(), "rank 0 wrote no metrics.csv");
    assert!(run0.join("checkpoints/last/meta.json").is_file(), "rank 0 wrote no checkpoint");
    assert!(!dir.path().join("run_1").exists(), "rank 1 wrote a run folder");
    assert!(!dir.path().join("resume_1").exists(), "rank 1 wrote a run folder");
    let line = "distributed: 2 ranks; batch 2 per rank, 4 global, 8 per optimizer step (2 accumulated)";
    assert!(output_of(&outcome, 0).contains(line), "rank 0 did not print `{line}`:\n{}", describe(&outcome));
    assert!(!output_of(&outcome, 1).contains("distributed:"), "rank 1 printed progress");

    let amp0 = load(&dir.path().join("rank0_amp.safetensors"))?;
    let amp1 = load(&dir.path().join("rank1_amp.safetensors"))?;
    assert_eq!(max_diff(&amp0, &amp1), 0.0, "under AMP the ranks' weights differ");
    assert!(max_diff(&amp0, &rank0) > 0.0, "the AMP run trained");

    // The step-1 checkpoint holds both ranks' partial metrics (2 batches of 2 on each rank),
    // and the resumed epoch's training figures are the straight run's on every rank.
    let saved = std::fs::read_to_string(dir.path().join("crash_checkpoint.txt"))?;
    let want = format!("1 2 Some({})", WORLD * 2 * PER_RANK_BATCH);
    assert_eq!(saved, want, "the step-1 checkpoint: step, batch and the world's samples so far");
    let figures = |name: &str| -> Result<Vec<f64>> {
        let text = std::fs::read_to_string(dir.path().join(name))?;
        Ok(text
            .split(' ')
            .map(|v| v.trim_start_matches("Some(").trim_end_matches(')').parse().expect("a number"))
            .collect())
    };
    for r in 0..WORLD {
        let (want, got) = (
            figures(&format!("rank{r}_train_straight.txt"))?,
            figures(&format!("rank{r}_train_resumed.txt"))?,
        );
        for (g, w) in got.iter().zip(&want) {
            // Only the order of the float sums differs (the saved partial sum plus the rest).
            assert!(
                (g - w).abs() <= 1e-6,
                "rank {r}: resumed epoch's train figures {got:?} vs straight {want:?}"
            );
        }
    }

    // One epoch, then a resume to the end from rank 0's checkpoint: the straight run's weights.
    for r in 0..WORLD {
        let resumed = load(&dir.path().join(format!("rank{r}_resumed.safetensors")))?;
        let diff = max_diff(&resumed, &rank0);
        assert!(diff <= 1e-6, "rank {r}: resumed vs straight run, max |diff| {diff:e} > 1e-6");
    }
    Ok(())
}

/// The range test under DDP: both ranks draw the same curve, equal (to the order of float sums)
/// to one process's sweep on the ranks' batches together from rank 0's weights, stopping at the
/// same step; each rank gets its own weights back, and `lr_find` then `fit` ends with the
/// weights of `fit` alone, bit for bit.
#[test]
fn two_ranks_lr_find_sweeps_the_global_batch_and_leaves_fit_unchanged() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let outcome = launch("lr_find", WORLD, dir.path());
    ensure!(outcome.success(), "the ranks failed:\n{}", describe(&outcome));
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name));
    let curve = read("rank0_curve.txt")?;
    assert_eq!(curve, read("rank1_curve.txt")?, "the ranks' curves differ");

    // One process on the concatenated batches, from rank 0's initial weights.
    assert_curve_matches(&curve, &one_process_sweep(tch::Device::Cpu)?, 1e-5);

    for r in 0..WORLD {
        let straight = load(&dir.path().join(format!("rank{r}_straight.safetensors")))?;
        let tuned = load(&dir.path().join(format!("rank{r}_tuned.safetensors")))?;
        assert_eq!(max_diff(&straight, &tuned), 0.0, "rank {r}: lr_find then fit differs from fit alone");
    }
    let rank0 = output_of(&outcome, 0);
    assert!(rank0.contains("on 2 ranks (losses averaged over them)"), "{}", describe(&outcome));
    assert!(!output_of(&outcome, 1).contains("lr_find:"), "rank 1 printed: {}", describe(&outcome));
    Ok(())
}
