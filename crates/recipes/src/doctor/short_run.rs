//! Stage 4 of the doctor: a short real run through the real training step (loss trend, lr
//! sanity, gradient flow per layer, trainable parameters, data stall).

use super::{step_config, DoctorOptions, Finding, Status};
use crate::config::TrainConfig;
use crate::error::Result;
use crate::optimizer::build_optimizer;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tch::{Device, Kind};
use torchlight_nn::{count_parameters, named_parameters, Module};
use torchlight_train::{AsDynModule, Batch, Classification, NonFiniteAction, StepConfig, StepRunner, Task};

/// Per-layer gradient norms over a run (layer = parameter key without its last part).
#[derive(Default)]
struct GradFlow {
    layers: Vec<String>,
    norms: Vec<Vec<f64>>,
}

impl GradFlow {
    fn record(&mut self, model: &dyn Module) {
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
///
/// Any model and batches the classification task takes, as [`overfit_batch`](super::overfit_batch).
pub fn short_run<M, B>(
    model: &M,
    head: &str,
    mut batches: impl Iterator<Item = Result<B>>,
    config: &TrainConfig,
    device: Device,
    options: &DoctorOptions,
) -> Result<Vec<Finding>>
where
    M: AsDynModule + ?Sized,
    B: Batch,
    Classification: Task<M, B>,
{
    let mut findings = Vec::new();
    let module = model.as_dyn();
    let count = count_parameters(module);
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
    let zero_weights: Vec<String> = named_parameters(module)
        .into_iter()
        .filter(|(n, p)| {
            n.ends_with("weight") && p.dim() > 1 && bool::try_from(p.eq(0.0).all()).unwrap_or(false)
        })
        .map(|(n, _)| n)
        .collect();
    let mut optimizer = build_optimizer(config, module, head)?;
    // The real step, but a NaN must be seen here, not stop the run: it is the finding.
    let step =
        StepConfig { on_nonfinite: NonFiniteAction::Skip, guard_nonfinite: false, ..step_config(config) };
    let mut runner = StepRunner::new(step, device)?;
    let task = Classification::new(config.model.num_classes.unwrap_or(2))
        .with_label_smoothing(config.train.label_smoothing);
    let (mut losses, mut flow) = (Vec::new(), GradFlow::default());
    let (mut stall, started) = (Duration::ZERO, Instant::now());
    for i in 0..options.run_steps {
        let waited = Instant::now();
        let Some(batch) = batches.next() else { break };
        stall += waited.elapsed();
        let batch = batch?.to_device(device);
        let micro = runner.forward_backward(model, &task, &batch)?;
        let l = micro.loss.double_value(&[]);
        losses.push(l);
        if !l.is_finite() {
            break;
        }
        if micro.window_full || i + 1 == options.run_steps {
            flow.record(module);
            runner.optimizer_step(module, optimizer.as_mut())?;
        }
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
    // The range test runs the image recipe: it measures an lr where guessing a tenth may not do.
    let measure = if config.train.task == crate::config::TaskKind::Image {
        ", or measure one with `torchlight tune lr` (the lr range test)"
    } else {
        ""
    };
    findings.push(
        match (diverged_at, rising) {
            (Some(step), _) => Finding::new(
                4,
                "lr_sanity",
                Status::Fail,
                format!("loss became {} at step {} with lr {lr:.3e}", losses[step], step + 1),
            )
            .fix(format!("training diverges: lower the lr (try optim.lr = {:.1e}){measure}", lr / 10.0)),
            (None, true) => Finding::new(
                4,
                "lr_sanity",
                Status::Fail,
                format!("loss rose from {initial:.4} at step 1 to {tail:.4} (mean of the last {k} steps) with lr {lr:.3e}"),
            )
            .fix(format!("training diverges: lower the lr (try optim.lr = {:.1e}){measure}", lr / 10.0)),
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
            format!("the loss is flat: raise the lr{measure} or check the labels")
        } else {
            "see lr_sanity".to_string()
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

    findings.push(stall_finding(stall.as_secs_f64(), seconds, options.stall_share));
    Ok(findings)
}

/// The data-stall finding from the time spent waiting for batches and the run's total time:
/// WARN when the share exceeds `threshold`. A pure function of its inputs, so it is tested
/// with given figures, never timed.
pub fn stall_finding(stall_s: f64, total_s: f64, threshold: f64) -> Finding {
    let share = stall_s / total_s.max(1e-9);
    Finding::new(
        4,
        "data_stall",
        if share > threshold { Status::Warn } else { Status::Pass },
        format!("{:.0}% of step time waiting for data ({stall_s:.2} s of {total_s:.2} s)", 100.0 * share),
    )
    .fix("the input pipeline starves the model: raise data.workers, pre-resize the images, or use faster storage")
    .data(json!({ "stall_s": stall_s, "total_s": total_s, "share": share }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stall_finding_warns_above_its_threshold_only() {
        let slow = stall_finding(7.0, 10.0, 0.6);
        assert_eq!(slow.status, Status::Warn);
        assert!(slow.figure.starts_with("70% of step time"), "{}", slow.figure);
        assert!(slow.fix.as_deref().unwrap().contains("data.workers"));
        assert_eq!(stall_finding(1.3, 10.0, 0.6).status, Status::Pass);
        assert_eq!(stall_finding(0.0, 0.0, 0.6).status, Status::Pass);
    }
}
