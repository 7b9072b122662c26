//! The recipes crate's error type.

use std::path::PathBuf;
use torchlight_train::TrainError;

/// What can go wrong in a recipe: its config (parsing, overrides, validation), its data and
/// run folders, and everything the loop under it reports ([`TrainError`]). Every variant names
/// the file, key, field or value at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecipeError {
    /// A file or folder could not be read, written or created.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The OS error (in the message, so not also a `source()`).
        error: std::io::Error,
    },
    /// A TOML config that does not parse or does not fit [`TrainConfig`](crate::TrainConfig)
    /// (unknown fields, wrong types).
    #[error("{}{}: {message}", path.display(), location(*line, *column))]
    ConfigParse {
        /// The config file (`<string>` for configs parsed from text).
        path: PathBuf,
        /// 1-based line of the offending text, where the TOML parser knows it.
        line: Option<usize>,
        /// 1-based column of the offending text, where the TOML parser knows it.
        column: Option<usize>,
        /// The parser's message, naming the field.
        message: String,
    },
    /// A config that parses but holds a value training cannot use.
    #[error("config field `{field}` = {value}: {reason}")]
    InvalidConfig {
        /// The dotted field name (`train.batch_size`).
        field: String,
        /// The value as written.
        value: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A `key=value` override naming no config field.
    #[error("unknown config key `{key}`{}", hint(.suggestions))]
    UnknownKey {
        /// The key as given.
        key: String,
        /// Known keys that end the same way or share its leaf name.
        suggestions: Vec<String>,
    },
    /// A `key=value` override whose value does not fit the field's type.
    #[error("config key `{key}`: cannot use `{value}`: {reason}")]
    InvalidOverride {
        /// The dotted key.
        key: String,
        /// The value as given.
        value: String,
        /// What the field expects.
        reason: String,
    },
    /// A run folder that cannot be opened for resume.
    #[error("{}: {reason}", path.display())]
    RunDir {
        /// The folder.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A document given to classify that gives the model nothing to read (white space only,
    /// or no tokens); the caller names the document.
    #[error("{reason}")]
    Document {
        /// What is wrong with it.
        reason: String,
    },
    /// The training loop, its metrics, callbacks or writers failed (boxed: the loop's errors
    /// are large, and a recipe's `Result` stays small).
    #[error(transparent)]
    Train(Box<TrainError>),
    /// Loading data failed (a bad image, a loader setting).
    #[error(transparent)]
    Data(#[from] torchlight_data::DataError),
    /// Opening the image folders failed.
    #[error(transparent)]
    Vision(#[from] torchlight_vision::VisionError),
    /// Opening the text folders or building, loading or saving a tokenizer failed.
    #[error(transparent)]
    Text(#[from] torchlight_text::TextError),
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
}

impl From<TrainError> for RecipeError {
    fn from(e: TrainError) -> Self {
        RecipeError::Train(Box::new(e))
    }
}

/// `Result` with [`RecipeError`].
pub type Result<T, E = RecipeError> = std::result::Result<T, E>;

impl RecipeError {
    pub(crate) fn io(path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        RecipeError::Io { path: path.into(), error }
    }

    /// The loop's error, when this is one (to match on [`TrainError`]'s variants).
    pub fn as_train(&self) -> Option<&TrainError> {
        match self {
            RecipeError::Train(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

fn location(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(":{l}:{c}"),
        (Some(l), None) => format!(":{l}"),
        _ => String::new(),
    }
}

fn hint(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        String::new()
    } else {
        format!(
            " (did you mean {}?)",
            suggestions.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(" or ")
        )
    }
}
