//! `torchlight-train`: the training loop as a library.
//!
//! - [`Trainer`]: trains any [`Module`](torchlight_nn::Module) on any [`BatchSource`] (a
//!   DataLoader) for a [`Task`] (built in: [`Classification`], [`MultiLabel`],
//!   [`Regression`]), with AMP, accumulation, clipping, the NaN/device/out-of-memory guards,
//!   a [`BatchTransform`] of training batches (Mixup, CutMix), [`Callback`]s with JSON and
//!   tensor state, checkpoints every epoch or N steps, exact mid-epoch resume and a graceful
//!   stop on SIGINT/SIGTERM; [`Trainer::lr_find`] is the lr range test through the same step
//!   ([`LrFinder`]), and [`Trainer::batch_size_find`] the largest batch that trains, by
//!   doubling then bisection through real steps ([`BatchSizeFinder`], with the batch size and
//!   accumulation steps for a target effective batch). [`StepRunner`] is its optimisation
//!   step, for hand-written loops;
//!   [`evaluate`] its evaluation loop.
//! - [`Metric`]s on the device (accuracy, top-k, confusion matrix, F1, mAP, MAE, RMSE).
//! - Callbacks ([`callbacks`]): `metrics.csv`, TensorBoard events, `curves.png`, checkpoints,
//!   early stopping, lr monitoring, progress, staged fine-tuning; and the writers under them
//!   ([`CsvLogger`], [`EventWriter`], [`plot_curves`]).
//!
//! It knows nothing of image folders, config files or the command line: the recipes behind
//! `torchlight train` (a TOML config, an ImageFolder, a run folder) are `torchlight-recipes`,
//! built on this crate's public API.
//!
//! The extension points are one file each: [`Task`] (`task.rs`), [`Batch`] (`batch.rs`),
//! [`BatchSource`] (`source.rs`), [`BatchTransform`] (`batch_transform.rs`), [`Callback`] and
//! its [`Context`] (`callback.rs`), [`Distributed`] (`distributed.rs`); the loop that calls
//! them is `trainer/`.

mod batch;
mod batch_size_finder;
mod batch_transform;
mod callback;
pub mod callbacks;
mod csv_log;
mod distributed;
mod error;
pub mod guard;
mod lr_finder;
mod metrics;
mod mixup;
mod plot;
mod progress;
mod record;
mod scheduler;
mod source;
mod task;
mod tasks;
pub mod tfevents;
mod trainer;

pub use batch::Batch;
pub use batch_size_finder::{
    format_bytes, search_batch_size, suggest_accumulation, BatchSizeFindConfig, BatchSizeFinder,
    BatchSizeTry, BatchSuggestion,
};
pub use batch_transform::{BatchContext, BatchTransform};
pub use callback::{BatchEnd, Callback, Context, LoopPosition};
pub use callbacks::{
    BackboneFinetuning, CsvLogging, CurvesPlot, EarlyStopping, LearningRateMonitor, ModelCheckpoint,
    ModelEma, ProgressBar, TensorBoardLogging,
};
pub use csv_log::{read_metrics_csv, CsvLogger};
pub use distributed::Distributed;
pub use error::{Result, TrainError};
pub use lr_finder::{gradient, suggest, LossSmoother, LrFindConfig, LrFindMode, LrFinder};
pub use metrics::{
    brier_score, calibration_scores, expected_calibration_error, fit_temperature, maximum_calibration_error,
    negative_log_likelihood, reliability_bins, worst_misclassified, Accuracy, Calibration, CalibrationScores,
    ClassScores, ClassificationMetrics, ClassificationReport, Confusion, ConfusionMatrix,
    ConfusionMatrixMetric, MeanAbsoluteError, MeanAveragePrecision, Metric, MetricSet, MetricsSummary,
    Misclassified, MultiLabelF1, Reduction, ReliabilityBin, RootMeanSquaredError, TopKAccuracy,
    CALIBRATION_BINS, TEMPERATURE_RANGE,
};
pub use mixup::{Mixed, MixupCutMix};
pub use plot::{
    confusion_matrix_size, errors_grid_size, plot_confusion_matrix, plot_curves, plot_errors,
    plot_reliability, ErrorTile, ReliabilityPanel, CURVES_SIZE, ERROR_TILE, LR_FINDER_SIZE,
    RELIABILITY_PANEL_SIZE,
};
pub use progress::Progress;
pub use record::EpochRecord;
pub use scheduler::Interval;
pub use source::{BatchSource, EpochBatches};
pub use task::{Monitor, Stage, StepOutput, Task};
pub use tasks::{Classification, MultiLabel, Regression, RegressionLoss};
pub use tfevents::EventWriter;
pub use trainer::{
    best_of, evaluate, AsDynModule, FitSummary, GuardRead, MicroStep, NonFiniteAction, OptimizerStep,
    StepConfig, StepRunner, Trainer, TrainerBuilder,
};
