//! `torchlight-train`: the building blocks of a training run: the TOML [`TrainConfig`],
//! on-device classification metrics, run folders, `metrics.csv`, TensorBoard event files,
//! and training-curve and confusion-matrix plots.
//!
//! A run folder (`runs/exp_001`, [`RunDir`]) holds `config.toml` ([`TrainConfig::to_toml`]),
//! `metrics.csv` ([`CsvLogger`]), `events.out.tfevents.*` ([`EventWriter`]), `curves.png`
//! ([`plot_curves`]), `confusion_matrix.png` ([`plot_confusion_matrix`]), `summary.json`
//! and `checkpoints/`.

mod config;
mod csv_log;
mod doctor;
mod error;
mod fit;
pub mod guard;
mod metrics;
mod plot;
mod progress;
mod run_dir;
pub mod synthetic;
pub mod tfevents;

pub use config::{
    DataConfig, LoopConfig, ModelConfig, NonFiniteAction, OptimConfig, OptimizerKind, SchedulerConfig,
    TrainConfig, CONFIG_KEYS, MODEL_NAMES,
};
pub use csv_log::{read_metrics_csv, CsvLogger, EpochRecord, CSV_HEADER};
pub use doctor::{
    check_batch, check_data, doctor, overfit_batch, short_run, DoctorOptions, DoctorReport, Finding, Status,
};
pub use error::{Result, TrainError};
pub use fit::{
    build_model, build_optimizer, build_scheduler, eval_transform, evaluate, fit, loader, open_splits,
    train_one_epoch, train_transform, EpochTrain, Loader, ModelCard, RunSummary, Split, Splits,
};
pub use metrics::{ClassificationMetrics, ConfusionMatrix, MetricsSummary};
pub use plot::{confusion_matrix_size, plot_confusion_matrix, plot_curves, CURVES_SIZE};
pub use progress::Progress;
pub use run_dir::RunDir;
pub use tfevents::EventWriter;
