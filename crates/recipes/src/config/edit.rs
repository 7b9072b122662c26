//! Setting values in a user's TOML config file in place (`torchlight tune lr --apply`, `tune
//! batch-size --apply`): the file's other lines, comments and order are kept, which
//! re-serialising the config would not.

use super::TrainConfig;
use crate::error::{RecipeError, Result};
use std::path::Path;

/// `text` with `section.key` set to `value` (TOML text, e.g. `3.2e-3`): the value of an
/// existing `key = ...` line under `[section]` (or of a root `section.key = ...` line) is
/// replaced, keeping its indentation and a trailing comment; otherwise `key = value` goes right
/// under the `[section]` header, or a new `[section]` table is added at the end.
pub fn set_toml_value(text: &str, section: &str, key: &str, value: &str) -> String {
    let dotted = format!("{section}.{key}");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut table: Option<String> = None;
    let mut header: Option<usize> = None;
    for (i, line) in lines.iter_mut().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            let name = trimmed.split('#').next().unwrap_or("").trim();
            table = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')).map(|n| n.trim().to_string());
            if table.as_deref() == Some(section) {
                header = Some(i);
            }
            continue;
        }
        let Some((lhs, rhs)) = line.split_once('=') else { continue };
        let name: String = lhs.split('.').map(str::trim).collect::<Vec<_>>().join(".");
        let hit = match table.as_deref() {
            None => name == dotted,
            Some(t) => t == section && name == key,
        };
        if hit {
            let comment = rhs.find('#').map(|c| format!(" {}", rhs[c..].trim_end())).unwrap_or_default();
            *line = format!("{} = {value}{comment}", lhs.trim_end());
            return join(lines, text);
        }
    }
    match header {
        Some(h) => lines.insert(h + 1, format!("{key} = {value}")),
        None => {
            if lines.last().is_some_and(|l| !l.trim().is_empty()) {
                lines.push(String::new());
            }
            lines.push(format!("[{section}]"));
            lines.push(format!("{key} = {value}"));
        }
    }
    join(lines, text)
}

fn join(lines: Vec<String>, original: &str) -> String {
    let mut out = lines.join("\n");
    if original.ends_with('\n') || !out.is_empty() {
        out.push('\n');
    }
    out
}

impl TrainConfig {
    /// Sets `optim.lr` to `lr` in the TOML config file `path`, in place ([`set_toml_value`]),
    /// after checking that the edited text reads back as a config with that lr; the file is
    /// replaced through a rename. Errors name the file.
    pub fn apply_lr_to_file(path: &Path, lr: f64) -> Result<()> {
        let value = format_lr(lr);
        let wanted: f64 = value.parse().expect("format_lr writes a float");
        edit_file(path, &[("optim", "lr", value.as_str())], |parsed| {
            (parsed.optim.lr != wanted).then(|| ("optim.lr", value.clone(), "the lr"))
        })
    }

    /// Sets `train.batch_size` and `train.accumulation_steps` in the TOML config file `path`,
    /// in place, as [`apply_lr_to_file`](Self::apply_lr_to_file) sets the lr (`torchlight tune
    /// batch-size --apply`).
    pub fn apply_batch_size_to_file(path: &Path, batch_size: usize, accumulation_steps: usize) -> Result<()> {
        let (batch, steps) = (batch_size.to_string(), accumulation_steps.to_string());
        edit_file(
            path,
            &[("train", "batch_size", batch.as_str()), ("train", "accumulation_steps", steps.as_str())],
            |parsed| {
                if parsed.train.batch_size != batch_size {
                    Some(("train.batch_size", batch.clone(), "the batch size"))
                } else if parsed.train.accumulation_steps != accumulation_steps {
                    Some(("train.accumulation_steps", steps.clone(), "the accumulation steps"))
                } else {
                    None
                }
            },
        )
    }
}

/// Sets each `(section, key, value)` in the config file `path`, checks the edited text with
/// `missed` (which names a field the edit did not reach: its name, value and what it holds), and
/// replaces the file through a rename.
fn edit_file(
    path: &Path,
    values: &[(&str, &str, &str)],
    missed: impl Fn(&TrainConfig) -> Option<(&'static str, String, &'static str)>,
) -> Result<()> {
    let text = std::fs::read_to_string(path).map_err(|e| RecipeError::io(path, e))?;
    let mut edited = text;
    for (section, key, value) in values {
        edited = set_toml_value(&edited, section, key, value);
    }
    let parsed = TrainConfig::parse(&edited, path)?;
    if let Some((field, value, what)) = missed(&parsed) {
        return Err(RecipeError::InvalidConfig {
            field: field.into(),
            value,
            reason: format!(
                "{} sets {what} in a way this edit does not follow (an inline table?): set it by hand",
                path.display()
            ),
        });
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, edited).map_err(|e| RecipeError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| RecipeError::io(path, e))
}

/// An lr as the config line writes it: three significant digits, TOML float syntax (`3.16e-3`).
pub fn format_lr(lr: f64) -> String {
    format!("{lr:.2e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_existing_line_keeps_its_comment_and_the_rest_stays() {
        let text =
            "# mine\n[train]\nepochs = 3\n\n[optim]\n  lr = 0.1   # hand-picked\nweight_decay = 0.05\n";
        let out = set_toml_value(text, "optim", "lr", "3.16e-3");
        assert_eq!(
            out,
            "# mine\n[train]\nepochs = 3\n\n[optim]\n  lr = 3.16e-3 # hand-picked\nweight_decay = 0.05\n"
        );
        // `lr` of another table is left alone.
        let text = "[scheduler]\nlr = 1\n[optim]\nweight_decay = 0.05\n";
        assert_eq!(
            set_toml_value(text, "optim", "lr", "2e-3"),
            "[scheduler]\nlr = 1\n[optim]\nlr = 2e-3\nweight_decay = 0.05\n"
        );
    }

    #[test]
    fn a_missing_table_is_added_and_a_root_dotted_key_replaced() {
        assert_eq!(
            set_toml_value("[train]\nepochs = 3\n", "optim", "lr", "1e-3"),
            "[train]\nepochs = 3\n\n[optim]\nlr = 1e-3\n"
        );
        assert_eq!(set_toml_value("", "optim", "lr", "1e-3"), "[optim]\nlr = 1e-3\n");
        assert_eq!(
            set_toml_value("optim.lr = 5\n[train]\n", "optim", "lr", "1e-3"),
            "optim.lr = 1e-3\n[train]\n"
        );
    }

    #[test]
    fn the_batch_size_and_accumulation_are_set_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "# mine\n[train]\nbatch_size = 64 # was\nepochs = 2\n").unwrap();
        TrainConfig::apply_batch_size_to_file(&path, 48, 2).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "# mine\n[train]\naccumulation_steps = 2\nbatch_size = 48 # was\nepochs = 2\n");
        let c = TrainConfig::from_toml_file(&path).unwrap();
        assert_eq!((c.train.batch_size, c.train.accumulation_steps, c.train.epochs), (48, 2, 2));
    }

    #[test]
    fn the_written_lr_reads_back_through_the_config() {
        for lr in [3.1622776e-3, 1e-8, 0.5, 1.0] {
            let text = set_toml_value("[optim]\nlr = 0.1\n", "optim", "lr", &format_lr(lr));
            let c = TrainConfig::from_toml_str(&text).unwrap();
            assert!((c.optim.lr / lr - 1.0).abs() < 5e-3, "{lr} -> {text}");
        }
    }
}
