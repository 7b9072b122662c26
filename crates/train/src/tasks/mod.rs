//! The built-in tasks: single-label classification, multi-label classification and regression.

mod classification;
mod multilabel;
mod regression;

pub use classification::Classification;
pub use multilabel::MultiLabel;
pub use regression::{Regression, RegressionLoss};
