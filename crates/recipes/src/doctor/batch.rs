//! Stage 2 of the doctor: one batch through the model at initialisation.

use super::{Finding, Status};
use serde_json::json;
use tch::{Kind, Tensor};
use torchlight_nn::{Classifier, CrossEntropyLoss, Inputs, Module, MultiInput};
use torchlight_tensor::{no_grad, summary};
use torchlight_train::guard;

/// Stage 2: one batch `x` `[N, 3, S, S]`, `y` `[N]` through `model` at initialisation (training
/// mode, no grad): finite inputs, labels in range, output shape `[N, num_classes]`, finite
/// features and logits, and a loss near ln(num_classes). With `split` (the model as a
/// [`Classifier`], which the registry gives every built-in architecture:
/// `Architecture::classifier`) the backbone's features are checked apart from the head's
/// logits; without, the outputs end to end.
pub fn check_batch(
    model: &dyn Module,
    split: Option<&dyn Classifier>,
    x: &Tensor,
    y: &Tensor,
    num_classes: usize,
) -> Vec<Finding> {
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
    let labels = labels_finding(y, num_classes);
    let bad_labels = labels.status == Status::Fail;
    findings.push(labels);
    if bad_labels {
        return findings;
    }
    let _guard = no_grad();
    let (features, logits) = match split {
        Some(classifier) => {
            let features = classifier.features_t(x, true);
            let logits = classifier.logits_t(&features, true);
            (Some(features), logits)
        }
        None => (None, model.forward_t(x, true)),
    };
    findings.extend(check_logits(features.as_ref(), &logits, y, num_classes));
    findings
}

/// Stage 2 for a text model: one batch of `inputs` (`ids [N, T]`, `lengths [N]`) and labels
/// `y [N]` through `model` at initialisation (training mode, no grad): token ids in
/// `[0, vocab_size)` and lengths in `[1, T]` (`batch_inputs`), labels in range, then the
/// forward pass (an input the model cannot take is a FAIL naming it, `forward`) and the
/// checks of [`check_batch`] on its logits: shape `[N, num_classes]`, finite, and a loss near
/// ln(num_classes).
pub fn check_text_batch<M: MultiInput + ?Sized>(
    model: &M,
    inputs: &Inputs,
    y: &Tensor,
    num_classes: usize,
    vocab_size: usize,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let (ids, lengths) = match (inputs.get("ids"), inputs.get("lengths")) {
        (Ok(ids), Ok(lengths)) => (ids, lengths),
        (Err(e), _) | (_, Err(e)) => {
            findings.push(
                Finding::new(2, "batch_inputs", Status::Fail, e.to_string())
                    .fix("the text loader gives `ids` and `lengths`: build the batches with torchlight_recipes::text::loader"),
            );
            return findings;
        }
    };
    let shape = ids.size();
    let (lo, hi) = (ids.min().int64_value(&[]), ids.max().int64_value(&[]));
    let (short, long) = (lengths.min().int64_value(&[]), lengths.max().int64_value(&[]));
    let width = shape.get(1).copied().unwrap_or(0);
    let ids_ok = lo >= 0 && hi < vocab_size as i64;
    let lengths_ok = short >= 1 && long <= width;
    findings.push(
        Finding::new(
            2,
            "batch_inputs",
            if ids_ok && lengths_ok { Status::Pass } else { Status::Fail },
            format!(
                "ids {shape:?} in [{lo}, {hi}] for {vocab_size} embeddings; lengths {short}-{long} tokens"
            ),
        )
        .fix(if ids_ok {
            "a document has no token (or a length beyond the padded width): check the tokenizer and text.max_len"
                .to_string()
        } else {
            format!(
                "token ids must lie in [0, {}]: the embeddings are sized by the tokenizer's vocabulary; use the tokenizer the model was built for",
                vocab_size as i64 - 1
            )
        })
        .data(json!({ "shape": shape, "min_id": lo, "max_id": hi, "vocab_size": vocab_size, "min_length": short, "max_length": long })),
    );
    let labels = labels_finding(y, num_classes);
    let bad = !ids_ok || labels.status == Status::Fail;
    findings.push(labels);
    if bad {
        return findings;
    }
    let _guard = no_grad();
    let logits = match model.forward_inputs(inputs, true) {
        Ok(logits) => logits,
        Err(e) => {
            findings.push(
                Finding::new(2, "forward", Status::Fail, format!("the model refuses the batch: {e}"))
                    .fix("give the model the inputs it names (the text models take `ids` and `lengths`)"),
            );
            return findings;
        }
    };
    findings.extend(check_logits(None, &logits, y, num_classes));
    findings
}

/// The label range of `y` against `num_classes` outputs: FAIL naming the range when a label
/// lies outside `[0, num_classes)`.
pub(crate) fn labels_finding(y: &Tensor, num_classes: usize) -> Finding {
    let (lo, hi) = (y.min().int64_value(&[]), y.max().int64_value(&[]));
    let bad_labels = lo < 0 || hi >= num_classes as i64;
    Finding::new(
        2,
        "batch_labels",
        if bad_labels { Status::Fail } else { Status::Pass },
        format!("labels in [{lo}, {hi}] for {num_classes} outputs"),
    )
    .fix(format!(
        "labels must lie in [0, {}]: set model.num_classes to the class count",
        num_classes as i64 - 1
    ))
}

/// What every model's first forward pass is checked for, whatever its inputs: the logits'
/// shape `[N, num_classes]` for the `N` labels of `y`, finite features (when the model was
/// split) and logits, and a loss near ln(num_classes).
pub(crate) fn check_logits(
    features: Option<&Tensor>,
    logits: &Tensor,
    y: &Tensor,
    num_classes: usize,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let logits = logits.to_kind(Kind::Float);
    let shape = logits.size();
    let n = y.size()[0];
    findings.push(
        Finding::new(
            2,
            "output_shape",
            if shape == [n, num_classes as i64] { Status::Pass } else { Status::Fail },
            format!("logits {shape:?}, expected [{n}, {num_classes}]"),
        )
        .fix(
            "replace the head with num_classes outputs (set model.num_classes, or build the model for them)",
        ),
    );
    let f_ok = features.is_none_or(guard::is_all_finite);
    let l_ok = guard::is_all_finite(&logits);
    findings.push(
        Finding::new(
            2,
            "finite_activations",
            if f_ok && l_ok { Status::Pass } else { Status::Fail },
            match (f_ok, l_ok) {
                (true, true) if features.is_some() => "backbone features and logits are finite".to_string(),
                (true, true) => "the outputs are finite".to_string(),
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
