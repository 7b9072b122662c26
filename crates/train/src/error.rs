//! The train crate's error type.

use std::path::PathBuf;

/// What can go wrong in `torchlight-train`'s loop and its parts. Every variant names the file, key, field or value
/// at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// A file or folder could not be read, written or created.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The OS error (in the message, so not also a `source()`).
        error: std::io::Error,
    },
    /// A Trainer or step setting that cannot be used (an accumulation of 0, a clip value that
    /// is not a positive number, two callbacks with one name).
    #[error("trainer setting `{setting}` = {value}: {reason}")]
    InvalidSetting {
        /// The setting, by its builder or `StepConfig` name (`accumulation`, `grad_clip`).
        setting: String,
        /// The value given.
        value: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A `metrics.csv` that does not hold what [`CsvLogger`](crate::CsvLogger) writes.
    #[error("{}:{line}: {reason}", path.display())]
    Csv {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A plot that could not be drawn or encoded.
    #[error("{}: cannot draw the plot: {reason}", path.display())]
    Plot {
        /// The image file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// Training went wrong: a non-finite loss, unfreezing that changed nothing.
    #[error("epoch {epoch}: {reason}")]
    Training {
        /// The (1-based) epoch.
        epoch: u64,
        /// What happened and what to try.
        reason: String,
    },
    /// A loss or gradient held NaN or Inf (the training guard, `train.on_nonfinite = "stop"`).
    #[error("{}", describe_non_finite(*epoch, *step, *lr, *loss, *inputs_finite, parameter.as_deref()))]
    NonFinite {
        /// The (1-based) epoch.
        epoch: u64,
        /// The (1-based) optimizer step, counted over the whole run.
        step: u64,
        /// The head's learning rate at that step.
        lr: f64,
        /// The loss of the last batch before the step (NaN or Inf when the loss itself went bad).
        loss: f64,
        /// Whether that batch's inputs were all finite.
        inputs_finite: bool,
        /// The first parameter (`state_dict` key) whose gradient is not finite; `None` when
        /// only the loss is.
        parameter: Option<String>,
    },
    /// The model and a batch are on different devices.
    #[error("the model is on {model} but the batch is on {batch}: move both to one device (train.device)")]
    DeviceMismatch {
        /// The device of the model's parameters.
        model: String,
        /// The device the batch was put on.
        batch: String,
    },
    /// The device ran out of memory during a training step.
    #[error("{}", describe_out_of_memory(device, *batch_size, input_shape, *fits, *searched))]
    OutOfMemory {
        /// The device, as libtorch names it.
        device: String,
        /// The batch size in use.
        batch_size: usize,
        /// The shape of the batch's first tensor (the inputs), batch dimension first.
        input_shape: Vec<i64>,
        /// The largest batch size, found by halving, whose forward and backward fit; `None`
        /// when even one image does not, or when it was not searched.
        fits: Option<usize>,
        /// Whether `fits` was searched: not under a distributed Trainer, whose probe would run
        /// on one rank alone while the others wait in a collective, nor in the batch-size
        /// finder's tries (which are that search).
        searched: bool,
    },
    /// A training batch left a BatchNorm layer one value per channel (a batch of one whose
    /// feature map there is 1x1), which PyTorch refuses: its statistics would turn NaN.
    #[error(
        "a training batch of {batch_size} (inputs {input_shape:?}) leaves a BatchNorm layer one value per channel (its input {layer_input:?}); PyTorch refuses this (\"Expected more than 1 value per channel when training\"): train with batches of 2 or more, larger inputs, or the BatchNorm layers frozen"
    )]
    BatchNormSingleValue {
        /// The batch size in use.
        batch_size: usize,
        /// The shape of the batch's first tensor (the inputs).
        input_shape: Vec<i64>,
        /// The BatchNorm layer's input, `[1, C, 1, 1]`.
        layer_input: Vec<i64>,
    },
    /// A metric was given outputs or targets it cannot use.
    #[error("{metric}: {reason}")]
    Metric {
        /// The metric.
        metric: String,
        /// What was wrong with its inputs.
        reason: String,
    },
    /// A task could not compute its step (e.g. an output that does not fit the targets).
    #[error("{task} task: {reason}")]
    Task {
        /// The task.
        task: String,
        /// What went wrong.
        reason: String,
    },
    /// A saved state (of a metric, a callback or the loop) that cannot be restored.
    #[error("cannot restore the state of {what}: {reason}")]
    State {
        /// Whose state.
        what: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Training stopped on SIGINT/SIGTERM after finishing its step.
    #[error("interrupted by {signal} at epoch {epoch}, step {step}{}", saved_to(checkpoint.as_deref()))]
    Interrupted {
        /// `SIGINT` or `SIGTERM`.
        signal: String,
        /// The (1-based) epoch it stopped in.
        epoch: u64,
        /// Optimizer steps taken.
        step: u64,
        /// The checkpoint saved on the way out, to resume from.
        checkpoint: Option<PathBuf>,
    },
    /// Loading data failed (a bad image, a loader setting).
    #[error(transparent)]
    Data(#[from] torchlight_data::DataError),
    /// Building the model or loading its weights failed.
    #[error(transparent)]
    Nn(#[from] torchlight_nn::NnError),
    /// Building the optimizer or scheduler failed.
    #[error(transparent)]
    Optim(#[from] torchlight_optim::OptimError),
    /// Saving or loading a checkpoint failed.
    #[error(transparent)]
    Checkpoint(#[from] torchlight_checkpoint::CheckpointError),
    /// A device or tensor operation failed.
    #[error(transparent)]
    Tensor(#[from] torchlight_tensor::TensorError),
    /// A collective of a distributed run failed (a peer rank died, a timeout passed); the
    /// error names the rank and the operation.
    #[error(transparent)]
    Distributed(Box<dyn std::error::Error + Send + Sync + 'static>),
}

/// `Result` with [`TrainError`].
pub type Result<T, E = TrainError> = std::result::Result<T, E>;

impl TrainError {
    pub(crate) fn io(path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        TrainError::Io { path: path.into(), error }
    }
}

fn saved_to(checkpoint: Option<&std::path::Path>) -> String {
    match checkpoint {
        Some(p) => format!("; saved {}, resume from there", p.display()),
        None => "; nothing was saved (no checkpoint callback)".to_string(),
    }
}

/// The message of [`TrainError::NonFinite`].
pub(crate) fn describe_non_finite(
    epoch: u64,
    step: u64,
    lr: f64,
    loss: f64,
    inputs_finite: bool,
    parameter: Option<&str>,
) -> String {
    let what = match parameter {
        Some(p) => {
            let layer = p.rsplit_once('.').map_or(p, |(l, _)| l);
            format!("non-finite gradient in `{p}` (layer `{layer}`)")
        }
        None => "non-finite loss".to_string(),
    };
    let fix = if inputs_finite {
        "lower the lr or set train.grad_clip (or train.on_nonfinite = \"skip\")"
    } else {
        "the batch holds NaN/Inf inputs: check the data and its transforms"
    };
    format!(
        "epoch {epoch}, step {step}: {what}; loss {loss}, lr {lr:.3e}, batch inputs {}; {fix}",
        if inputs_finite { "finite" } else { "NOT finite" }
    )
}

/// The message of [`TrainError::OutOfMemory`].
pub(crate) fn describe_out_of_memory(
    device: &str,
    batch_size: usize,
    input_shape: &[i64],
    fits: Option<usize>,
    searched: bool,
) -> String {
    let sample: Vec<i64> = input_shape.iter().skip(1).copied().collect();
    let hint = match fits {
        None if !searched => "the largest batch that fits was not searched, as every rank would have to search it \
            together: find it on one process (`torchlight tune batch-size`, or `Trainer::batch_size_find`), then set \
            train.batch_size to it (and train.accumulation_steps to keep the effective batch)"
            .to_string(),
        Some(b) => format!(
            "the largest batch that fits is {b}: set train.batch_size = {b} (and train.accumulation_steps = {} to keep the effective batch)",
            batch_size.div_ceil(b)
        ),
        None => format!(
            "not even one sample of shape {sample:?} fits: lower data.image_size or use a smaller model"
        ),
    };
    format!("{device} ran out of memory at batch size {batch_size} (inputs {input_shape:?}); {hint}")
}
