//! The built-in callbacks: logging (`metrics.csv`, TensorBoard, `curves.png`), checkpoints,
//! early stopping, lr monitoring, the progress display, staged fine-tuning and a model EMA.

mod checkpoint;
mod csv;
mod curves;
mod early_stopping;
mod ema;
mod finetuning;
mod lr_monitor;
mod progress_bar;
mod tensorboard;

pub use checkpoint::ModelCheckpoint;
pub use csv::CsvLogging;
pub use curves::CurvesPlot;
pub use early_stopping::EarlyStopping;
pub use ema::ModelEma;
pub use finetuning::BackboneFinetuning;
pub use lr_monitor::LearningRateMonitor;
pub use progress_bar::ProgressBar;
pub use tensorboard::TensorBoardLogging;
