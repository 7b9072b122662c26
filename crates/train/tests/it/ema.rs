//! `ModelEma`: 50-step trajectories against torchvision's `ExponentialMovingAverage` and timm's
//! `ModelEmaV3` update with warm-up (`tests/fixtures/make_ema.py`); in the Trainer, the update
//! schedule, `ema_val_*` metrics next to the raw model's, and a mid-epoch interrupt + resume
//! of a run with Mixup/CutMix that ends with the EMA (and the weights) bit for bit as a
//! straight run.

use crate::trainer::{adamw, assert_same_weights, blob_loader, Mlp, StopAt};
use crate::{temp_dir, torch_rng_lock};
use std::collections::HashMap;
use std::path::Path;
use tch::Tensor;
use torchlight_nn::{BatchNorm2d, BatchNormConfig, Linear, Module, Sequential};
use torchlight_tensor::seed_everything;
use torchlight_train::*;

fn load_fixture() -> HashMap<String, Tensor> {
    let dir = torchlight_testing::generated_fixture("crates/train/tests/fixtures/make_ema.py", &[])
        .expect("the reference PyTorch makes the EMA fixture");
    Tensor::read_safetensors(dir.join("ema.safetensors")).unwrap().into_iter().collect()
}

/// `nn.Sequential(nn.Linear(4, 3), nn.BatchNorm2d(3))`: parameters, float buffers and the
/// integer `num_batches_tracked`.
fn small_model() -> Sequential {
    Sequential::new().add(Linear::new(4, 3, true)).add(BatchNorm2d::new(3, BatchNormConfig::default()))
}

fn set_state(model: &dyn Module, f: &HashMap<String, Tensor>, t: usize) {
    let _g = torchlight_tensor::no_grad();
    for (k, mut v) in torchlight_nn::state_dict(model) {
        v.copy_(&f[&format!("state.{t}.{k}")]);
    }
}

/// Tolerance 1e-6 of max(|x|, 1): torchvision's class averages as `decay * ema + (1 - decay)
/// times w` per tensor, Torchlight (as torch's `get_ema_multi_avg_fn`) with one
/// `_foreach_lerp_`, which rounds differently; measured at most 3.9e-7 over 50 steps (3.6e-7
/// under ATEN_CPU_CAPABILITY=default). timm's rule is the same `_foreach_lerp_`, so its EMA is
/// equal bit for bit; integer buffers (torch's truncated average for torchvision, a copy for
/// timm) are equal exactly.
fn check(ema: &ModelEma, f: &HashMap<String, Tensor>, prefix: &str, t: usize) {
    assert_eq!(ema.weights().len(), 7);
    for (k, v) in ema.weights() {
        let want = &f[&format!("{prefix}.{t}.{k}")];
        if !v.is_floating_point() || prefix == "timm" {
            assert!(v.equal(want), "{prefix} step {t} {k}: {v} vs {want}");
            continue;
        }
        let diff = (v - want).abs().max().double_value(&[]);
        let scale = want.abs().max().double_value(&[]).max(1.0);
        assert!(diff <= 1e-6 * scale, "{prefix} step {t} {k}: max difference {diff}");
    }
}

#[test]
fn fifty_steps_equal_torchvision_and_timm() {
    let _lock = torch_rng_lock();
    let f = load_fixture();
    let model = small_model();
    set_state(&model, &f, 0);
    let mut tv = ModelEma::torchvision(0.9, 1).unwrap();
    let mut timm = ModelEma::timm(0.95).unwrap().with_warmup(1.0, 2.0 / 3.0).unwrap();
    tv.init(&model);
    timm.init(&model);
    for t in 1..=50 {
        set_state(&model, &f, t);
        tv.update(&model, t as u64).unwrap();
        timm.update(&model, t as u64).unwrap();
        check(&tv, &f, "tv", t);
        check(&timm, &f, "timm", t);
    }
    assert_eq!((tv.updates(), timm.updates()), (50, 50));
    // The warm-up decay is timm's: 0 at the first step, then 1 - (1 + s)^(-2/3), capped.
    assert_eq!(timm.timm_decay(1), 0.0);
    assert!((timm.timm_decay(2) - (1.0 - 2f64.powf(-2.0 / 3.0))).abs() < 1e-15);
    assert_eq!(timm.timm_decay(100_000), 0.95);
}

#[test]
fn the_decay_follows_torchvisions_script_and_bad_settings_are_named() {
    let _lock = torch_rng_lock();
    // train.py: adjust = world * batch * steps / epochs; alpha = min(1, (1 - decay) * adjust).
    let d = ModelEma::torchvision_decay(0.99998, 32, 32, 8, 600);
    assert!((d - (1.0 - 0.00002 * (8.0 * 32.0 * 32.0 / 600.0))).abs() < 1e-15, "{d}");
    assert_eq!(ModelEma::torchvision_decay(0.5, 32, 256, 8, 1), 0.0, "alpha is capped at 1");
    let e = ModelEma::torchvision(1.5, 32).unwrap_err().to_string();
    assert!(e.contains("model_ema_decay"), "{e}");
    let e = ModelEma::torchvision(0.9, 0).unwrap_err().to_string();
    assert!(e.contains("model_ema_steps"), "{e}");
    let e = ModelEma::timm(0.9).unwrap().with_warmup(0.0, 1.0).unwrap_err().to_string();
    assert!(e.contains("model_ema_warmup"), "{e}");
    // A model that changed under the EMA is named, not a libtorch abort.
    let mut ema = ModelEma::timm(0.9).unwrap();
    ema.init(&small_model());
    let err = ema.update(&Linear::new(4, 3, true), 1).unwrap_err().to_string();
    assert!(err.contains("the model changed"), "{err}");
}

/// Mixup/CutMix of the blob batches (`[N, 4]` features seen as `[N, 1, 2, 2]` images), so
/// the resumed run must also mix the rest of its epoch as the straight run did.
fn mixed_blobs((x, y): (Tensor, Tensor), ctx: &mut BatchContext) -> Result<(Tensor, Tensor)> {
    let mut mix = MixupCutMix::new(3, 0.4, 1.0)?.with_label_smoothing(0.1)?;
    let n = x.size()[0];
    let (x, y) = mix.apply((x.view([n, 1, 2, 2]), y), ctx)?;
    Ok((x.view([n, 4]), y))
}

/// Tensors by state_dict key.
type Weights = Vec<(String, Tensor)>;

/// Trains the blob Mlp for 3 epochs (3 optimizer steps each) with a torchvision-style EMA
/// updated every 2 steps of an epoch, checkpoints every 2 steps; returns the fit and the
/// final `last` checkpoint's EMA tensors and the model's weights.
fn ema_run(run: &Path, stop: Option<StopAt>, resume: bool) -> (Result<FitSummary>, Weights, Weights) {
    ema_run_with(run, stop, resume, true)
}

fn ema_run_with(
    run: &Path,
    stop: Option<StopAt>,
    resume: bool,
    with_ema: bool,
) -> (Result<FitSummary>, Weights, Weights) {
    seed_everything(11);
    let mut model = Mlp::new(4, 16, 3);
    let mut optimizer = adamw(&model, 1e-2);
    let mut train = blob_loader(40, true, 2);
    let mut val = blob_loader(24, false, 0);
    let mut builder = Trainer::builder()
        .epochs(3)
        .accumulation(2)
        .seed(11)
        .progress(Progress::quiet())
        .run_dir(run)
        .checkpoint_every_n_steps(2)
        .config(serde_json::json!({ "model": "mlp" }))
        .batch_transform(mixed_blobs);
    if with_ema {
        let ema = ModelEma::torchvision(0.7, 2)
            .unwrap()
            // A monitor that improves every epoch: best_ema then holds the final EMA.
            .with_best_checkpoint(run.join("checkpoints/best_ema"), Monitor::max("epoch"));
        builder = builder.callback(ema);
    }
    if let Some(stop) = stop {
        builder = builder.callback(stop);
    }
    if resume {
        builder = builder.resume_from(run.join("checkpoints/last"));
    }
    let mut trainer = builder.build().unwrap();
    let result = trainer.fit(
        &mut model,
        &Classification::new(3).with_top_k(2),
        &mut optimizer,
        &mut train,
        Some(&mut val),
    );
    let saved = torchlight_checkpoint::Checkpoint::load(run.join("checkpoints/last")).unwrap();
    let ema = saved
        .loop_tensors()
        .into_iter()
        .filter_map(|(k, t)| k.strip_prefix("callbacks.ModelEma.").map(|k| (k.to_string(), t)))
        .collect();
    (result, ema, crate::trainer::weights(&model))
}

#[test]
fn the_ema_resumes_mid_epoch_bit_for_bit_and_is_validated_next_to_the_model() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    let (straight, want, want_raw) = ema_run(&tmp.path().join("straight"), None, false);
    let straight = straight.unwrap();
    assert_eq!(straight.global_step, 9);
    assert_eq!(
        want.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    );
    let saved =
        torchlight_checkpoint::Checkpoint::load(tmp.path().join("straight/checkpoints/last")).unwrap();
    let state = &saved.meta.loop_state["callbacks"]["ModelEma"];
    // Steps 0 and 2 of each 3-step epoch: 2 updates an epoch.
    assert_eq!(state["updates"], 6, "{state}");
    for r in &straight.history {
        let (raw, ema) = (r.get("val_acc").unwrap(), r.get("ema_val_acc").unwrap());
        assert!((0.0..=1.0).contains(&raw) && (0.0..=1.0).contains(&ema));
        assert!(r.get("ema_val_loss").unwrap().is_finite());
    }
    let last = straight.history.last().unwrap();
    assert_ne!(last.get("val_loss"), last.get("ema_val_loss"), "the EMA's weights are not the model's");
    let csv = std::fs::read_to_string(tmp.path().join("straight/metrics.csv")).unwrap();
    assert!(csv.lines().next().unwrap().contains(",ema_val_loss,ema_val_acc,ema_val_top2,"), "{csv}");
    let back = read_metrics_csv(tmp.path().join("straight/metrics.csv")).unwrap();
    assert_eq!(back[2].ema_val, straight.history[2].ema_val);
    // The EMA's best epoch is saved with the EMA weights as the model's, and the config.
    let best_ema =
        torchlight_checkpoint::Checkpoint::load(tmp.path().join("straight/checkpoints/best_ema")).unwrap();
    let metric = best_ema.meta.metric.clone().unwrap();
    assert_eq!((metric.name.as_str(), metric.value, metric.epoch), ("epoch", 3.0, 3));
    let mut model: Weights =
        best_ema.model_state().iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect();
    model.sort_by(|a, b| a.0.cmp(&b.0));
    assert_same_weights(&want, &model);
    assert_eq!(best_ema.meta.config, serde_json::json!({ "model": "mlp" }), "the run's config, for eval");
    // Observing the weights changes nothing of the training: the raw model ends as without it.
    let (plain, _, plain_raw) = ema_run_with(&tmp.path().join("plain"), None, false, false);
    plain.unwrap();
    assert_same_weights(&want_raw, &plain_raw);

    // Ctrl-C at step 4 (mid epoch 2), resume: the EMA ends bit for bit as the straight run's,
    // and the EMA metrics of every epoch are the same.
    let run = tmp.path().join("interrupted");
    let (err, _, _) = ema_run(&run, Some(StopAt { at: 4, signal: true }), false);
    assert!(matches!(err.unwrap_err(), TrainError::Interrupted { .. }));
    let (resumed, got, got_raw) = ema_run(&run, None, true);
    let resumed = resumed.unwrap();
    assert_same_weights(&want_raw, &got_raw);
    assert_same_weights(&want, &got);
    for (a, b) in straight.history.iter().zip(&resumed.history) {
        assert_eq!(a.ema_val, b.ema_val, "epoch {}", a.epoch);
    }
}

/// `ModelCheckpoint` picks `best` by the EMA's metric as by any other.
#[test]
fn a_model_checkpoint_can_monitor_the_emas_metric() {
    let _lock = torch_rng_lock();
    let tmp = temp_dir();
    seed_everything(11);
    let mut model = Mlp::new(4, 16, 3);
    let mut optimizer = adamw(&model, 1e-2);
    let (mut train, mut val) = (blob_loader(40, true, 0), blob_loader(24, false, 0));
    let dir = tmp.path().join("checkpoints");
    let mut trainer = Trainer::builder()
        .epochs(3)
        .seed(11)
        .progress(Progress::quiet())
        .callback(ModelEma::timm(0.5).unwrap())
        .callback(ModelCheckpoint::new(&dir).monitor(Monitor::min("ema_val_loss")))
        .build()
        .unwrap();
    let fitted =
        trainer.fit(&mut model, &Classification::new(3), &mut optimizer, &mut train, Some(&mut val)).unwrap();
    let best = best_of(&fitted.history, &Monitor::min("ema_val_loss")).unwrap();
    let saved = torchlight_checkpoint::Checkpoint::load(dir.join("best")).unwrap();
    let metric = saved.meta.metric.unwrap();
    assert_eq!((metric.name.as_str(), metric.value, metric.epoch), ("ema_val_loss", best.0, best.1));
}
