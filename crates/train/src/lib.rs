//! `torchlight-train`: the training loop as a library, and the recipe `torchlight train` runs.
//!
//! - [`Trainer`]: trains any [`Module`](torchlight_nn::Module) on any [`BatchSource`] (a
//!   DataLoader) for a [`Task`] (built in: [`Classification`], [`MultiLabel`],
//!   [`Regression`]), with AMP, accumulation, clipping, the NaN/device/out-of-memory guards,
//!   [`Callback`]s, checkpoints every epoch or N steps, exact mid-epoch resume and a graceful
//!   stop on SIGINT/SIGTERM. [`StepRunner`] is its optimisation step, for hand-written loops.
//! - [`Metric`]s on the device (accuracy, top-k, confusion matrix, F1, mAP, MAE, RMSE).
//! - Callbacks ([`callbacks`]): `metrics.csv`, TensorBoard events, `curves.png`, checkpoints,
//!   early stopping, lr monitoring, progress, staged fine-tuning.
//! - The recipe ([`fit`], [`resume`]): an ImageFolder, a registered architecture with a
//!   pretrained backbone and a new head, a [`TrainConfig`] from TOML, a run folder
//!   (`runs/exp_001`: `config.toml`, `metrics.csv`, events, `curves.png`, `checkpoints/`,
//!   `confusion_matrix.png`, `summary.json`); and [`doctor`], the "why does it not train"
//!   checklist.

pub mod callbacks;
mod config;
mod csv_log;
mod doctor;
mod error;
pub mod guard;
mod metrics;
mod plot;
mod progress;
mod recipe;
mod run_dir;
pub mod synthetic;
mod tasks;
pub mod tfevents;
mod trainer;

pub use callbacks::{
    BackboneFinetuning, CsvLogging, CurvesPlot, EarlyStopping, LearningRateMonitor, ModelCheckpoint,
    ProgressBar, TensorBoardLogging,
};
pub use config::{
    ClassWeights, ClassWeightsKind, DataConfig, ExtendSchedule, LoopConfig, ModelConfig, NonFiniteAction,
    OptimConfig, OptimizerKind, SamplerKind, SchedulerConfig, TrainConfig, CONFIG_KEYS,
};
pub use csv_log::{read_metrics_csv, CsvLogger, EpochRecord};
pub use doctor::{
    check_batch, check_data, doctor, overfit_batch, short_run, stall_finding, DoctorOptions, DoctorReport,
    Finding, Status,
};
pub use error::{Result, TrainError};
pub use metrics::{
    Accuracy, ClassificationMetrics, ConfusionMatrix, ConfusionMatrixMetric, MeanAbsoluteError,
    MeanAveragePrecision, Metric, MetricSet, MetricsSummary, MultiLabelF1, Reduction, RootMeanSquaredError,
    TopKAccuracy,
};
pub use plot::{confusion_matrix_size, plot_confusion_matrix, plot_curves, CURVES_SIZE};
pub use progress::Progress;
pub use recipe::{
    build_model, build_optimizer, build_scheduler, class_weights, eval_resize, eval_transform, evaluate, fit,
    fit_distributed, loader, model_architecture, open_splits, pretrained_load_options, resume,
    resume_distributed, sharded_loader, train_transform, Loader, ModelCard, RunSummary, Split, Splits,
    RESUME_CHANGEABLE,
};
pub use run_dir::RunDir;
pub use tasks::{Classification, MultiLabel, Regression, RegressionLoss};
pub use tfevents::EventWriter;
pub use trainer::{
    best_of, evaluate as evaluate_task, AsDynModule, Batch, BatchEnd, BatchSource, Callback, Context,
    Distributed, EpochBatches, FitSummary, GuardRead, Interval, LoopPosition, MicroStep, Monitor,
    OptimizerStep, Stage, StepConfig, StepOutput, StepRunner, Task, Trainer, TrainerBuilder,
};
