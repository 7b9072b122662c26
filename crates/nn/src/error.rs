//! The nn crate's error type.

use std::path::PathBuf;

/// What can go wrong in `torchlight-nn`. Every variant names the file, key or value at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NnError {
    /// A weights file could not be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error (in the message, so not also a `source()`).
        error: std::io::Error,
    },
    /// A PyTorch `.pth` file that is malformed or holds more than a state_dict of tensors.
    #[error("{}: cannot read as a PyTorch state_dict: {reason}", path.display())]
    Pth {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the entry, opcode or global.
        reason: String,
    },
    /// A safetensors file that is malformed.
    #[error("{}: cannot read as safetensors: {reason}", path.display())]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Weights that do not fit the model, like PyTorch's `load_state_dict` errors.
    #[error("state_dict does not match the model: {}{}", describe(.missing, .unexpected, .mismatched), hint_text(.hint))]
    StateDict {
        /// Model keys absent from the weights.
        missing: Vec<String>,
        /// Weight keys the model does not have.
        unexpected: Vec<String>,
        /// Keys present in both with different shapes: (key, weights' shape, model's shape).
        mismatched: Vec<(String, Vec<i64>, Vec<i64>)>,
        /// A key rewrite that would match most unexpected keys to missing ones, when one does.
        hint: Option<String>,
    },
    /// A Hub model folder whose `config.json` is malformed or lacks a field, or that has no
    /// weights file.
    #[error("{}: {reason}", path.display())]
    HubConfig {
        /// The `config.json` (or the folder).
        path: PathBuf,
        /// What is wrong, naming the field or the files looked for.
        reason: String,
    },
    /// A key rewrite that cannot be read (`FROM=TO` expected).
    #[error("key rewrite `{spec}`: {reason}")]
    KeyRewrite {
        /// The rewrite as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A class index outside `[0, num_classes)` given to a classification loss.
    #[error("target {value} at batch position {position} is outside [0, {num_classes}) for logits with {num_classes} classes")]
    InvalidTarget {
        /// The offending label.
        value: i64,
        /// Its position in the target tensor (flattened).
        position: i64,
        /// The number of classes (the logits' dim 1).
        num_classes: i64,
    },
    /// A child name given at run time that cannot be a state_dict path segment.
    #[error("{container}: child name \"{name}\" {reason}")]
    ModuleName {
        /// The container (`Sequential`, `ModuleDict`).
        container: &'static str,
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An architecture asked for at a size it cannot be built at.
    #[error("{name}: {reason}")]
    Architecture {
        /// The architecture's name.
        name: String,
        /// What does not fit.
        reason: String,
    },
    /// A Hub folder's timm architecture whose timm weights Torchlight does not load (see
    /// [`TIMM_ARCHITECTURES`](crate::TIMM_ARCHITECTURES)), found before any weights are read.
    #[error("`{name}` is not a supported architecture for timm weights{note}; supported: {}", supported.join(", "))]
    UnsupportedTimmArchitecture {
        /// The architecture as the folder names it.
        name: String,
        /// Why, when more can be said (a registry name whose timm layout differs).
        note: String,
        /// The timm architectures that load.
        supported: Vec<&'static str>,
    },
    /// Tensors of shapes that cannot go together.
    #[error("{what}: {detail}")]
    Shape {
        /// The operation (`"CrossEntropyLoss"`).
        what: &'static str,
        /// The shapes and what was expected.
        detail: String,
    },
    /// A model with several inputs was not given one it needs.
    #[error("the batch has no input `{name}`; it has {}", if available.is_empty() { "none".to_string() } else { available.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ") })]
    MissingInput {
        /// The input asked for.
        name: String,
        /// The inputs the batch has.
        available: Vec<String>,
    },
}

fn hint_text(hint: &Option<String>) -> String {
    hint.as_ref().map(|h| format!("; {h}")).unwrap_or_default()
}

fn describe(
    missing: &[String],
    unexpected: &[String],
    mismatched: &[(String, Vec<i64>, Vec<i64>)],
) -> String {
    fn list(items: &[String]) -> String {
        let shown: Vec<&str> = items.iter().take(8).map(String::as_str).collect();
        let more = if items.len() > 8 { format!(" and {} more", items.len() - 8) } else { String::new() };
        format!("{}{more}", shown.join(", "))
    }
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("{} missing key(s): {}", missing.len(), list(missing)));
    }
    if !unexpected.is_empty() {
        parts.push(format!("{} unexpected key(s): {}", unexpected.len(), list(unexpected)));
    }
    if !mismatched.is_empty() {
        let items: Vec<String> =
            mismatched.iter().map(|(k, w, m)| format!("{k} (weights {w:?}, model {m:?})")).collect();
        parts.push(format!("{} shape mismatch(es): {}", mismatched.len(), list(&items)));
    }
    parts.join("; ")
}

/// `Result` with [`NnError`].
pub type Result<T, E = NnError> = std::result::Result<T, E>;
