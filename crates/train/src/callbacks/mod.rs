//! The built-in callbacks: logging (`metrics.csv`, TensorBoard, `curves.png`), checkpoints,
//! early stopping, lr monitoring, the progress display and staged fine-tuning.

mod checkpoint;
mod csv;
mod curves;
mod early_stopping;
mod finetuning;
mod lr_monitor;
mod progress_bar;
mod tensorboard;

pub use checkpoint::ModelCheckpoint;
pub use csv::CsvLogging;
pub use curves::CurvesPlot;
pub use early_stopping::EarlyStopping;
pub use finetuning::BackboneFinetuning;
pub use lr_monitor::LearningRateMonitor;
pub use progress_bar::ProgressBar;
pub use tensorboard::TensorBoardLogging;
