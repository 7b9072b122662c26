//! Pointing a Cargo project at libtorch: `[env] LIBTORCH` in its `.cargo/config.toml`.
//!
//! torch-sys finds libtorch only through the `LIBTORCH` environment variable, and Cargo sets
//! variables for every build script and `cargo run` from a project's `.cargo/config.toml`
//! `[env]` table, so one line there makes `cargo build`, `cargo test` and `cargo run` work with
//! nothing set by hand. A `LIBTORCH` in the shell's environment still wins (Cargo never
//! overrides an existing variable from `[env]`).
//!
//! The file is edited line by line, so the user's comments and layout stay as they were.

use crate::error::{Result, SetupError};
use std::fs;
use std::path::{Path, PathBuf};

/// What [`write_cargo_config`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigChange {
    /// The file did not exist and was written.
    Created(PathBuf),
    /// The file existed and its `LIBTORCH` was added or replaced.
    Updated(PathBuf),
    /// The file already named this libtorch.
    Unchanged(PathBuf),
}

impl ConfigChange {
    /// The config file.
    pub fn path(&self) -> &Path {
        match self {
            ConfigChange::Created(p) | ConfigChange::Updated(p) | ConfigChange::Unchanged(p) => p,
        }
    }
}

/// The Cargo project around `start`: the nearest folder at or above it holding a `Cargo.toml`,
/// or the workspace root above that one when its `Cargo.toml` has a `[workspace]` table.
pub fn find_project(start: &Path) -> Option<PathBuf> {
    let nearest = start.ancestors().find(|dir| dir.join("Cargo.toml").is_file())?;
    let workspace = nearest.ancestors().find(|dir| {
        fs::read_to_string(dir.join("Cargo.toml"))
            .is_ok_and(|text| text.lines().any(|line| line.trim() == "[workspace]"))
    });
    Some(workspace.unwrap_or(nearest).to_path_buf())
}

/// Sets `[env] LIBTORCH = "<libtorch>"` in `<project>/.cargo/config.toml` (or the legacy
/// `.cargo/config` when only that exists), creating the file if needed and keeping every other
/// line as it was.
pub fn write_cargo_config(project: &Path, libtorch: &Path) -> Result<ConfigChange> {
    let dir = project.join(".cargo");
    let legacy = dir.join("config");
    let path =
        if legacy.is_file() && !dir.join("config.toml").exists() { legacy } else { dir.join("config.toml") };
    let value = libtorch.to_str().ok_or_else(|| SetupError::NonUtf8Path { path: libtorch.to_path_buf() })?;
    let io = |error| SetupError::Io { path: path.clone(), error };
    let old = match fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(e)),
    };
    let new = set_env_libtorch(old.as_deref().unwrap_or(""), value)
        .map_err(|reason| SetupError::CargoConfig { path: path.clone(), reason })?;
    if old.as_deref() == Some(new.as_str()) {
        return Ok(ConfigChange::Unchanged(path));
    }
    fs::create_dir_all(&dir).map_err(|error| SetupError::Io { path: dir.clone(), error })?;
    // Write beside and rename, so an interrupted write never leaves half a config.
    let tmp = path.with_extension("torchlight-tmp");
    fs::write(&tmp, &new).map_err(|error| SetupError::Io { path: tmp.clone(), error })?;
    fs::rename(&tmp, &path).map_err(io)?;
    Ok(if old.is_some() { ConfigChange::Updated(path) } else { ConfigChange::Created(path) })
}

const COMMENT: &str = "# The libtorch that torch-sys builds against (written by `torchlight setup`).";

/// `text` with `[env] LIBTORCH = "<value>"` set; `Err(reason)` when `LIBTORCH` is set there in
/// a form this line editor does not rewrite (a dotted key, an inline `env` table, a value over
/// several lines), so the user edits it by hand.
fn set_env_libtorch(text: &str, value: &str) -> std::result::Result<String, String> {
    let entry = format!("LIBTORCH = {}", toml_string(value));
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut table: Option<String> = None;
    let mut env_header = None;
    let mut found = None;
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            table = Some(trimmed.trim_matches(['[', ']']).trim().to_string());
            if table.as_deref() == Some("env") && !trimmed.starts_with("[[") {
                env_header = Some(i);
            }
            continue;
        }
        let key = trimmed.split('=').next().unwrap_or("").trim().trim_matches('"');
        let in_env = table.as_deref() == Some("env");
        if in_env && key == "LIBTORCH" {
            let value = trimmed.split_once('=').map(|(_, v)| v.trim()).unwrap_or("");
            if value.starts_with('{') && !value.ends_with('}') {
                return Err(format!("its LIBTORCH entry spans several lines (line {})", i + 1));
            }
            found = Some(i);
        } else if (table.is_none() && key.starts_with("env")) && line.contains("LIBTORCH") {
            return Err(format!("line {} sets LIBTORCH outside an `[env]` table", i + 1));
        }
    }
    match (found, env_header) {
        (Some(i), _) => {
            if lines[i].trim() == entry {
                return Ok(text.to_string());
            }
            lines[i] = entry;
        }
        (None, Some(h)) => {
            lines.insert(h + 1, entry);
            lines.insert(h + 1, COMMENT.to_string());
        }
        (None, None) => {
            if lines.last().is_some_and(|l| !l.trim().is_empty()) {
                lines.push(String::new());
            }
            lines.extend(["[env]".to_string(), COMMENT.to_string(), entry]);
        }
    }
    Ok(lines.join("\n") + "\n")
}

/// A TOML basic string.
fn toml_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_config_gets_an_env_table() {
        let out = set_env_libtorch("", "/c/libtorch/torch").unwrap();
        assert_eq!(out, format!("[env]\n{COMMENT}\nLIBTORCH = \"/c/libtorch/torch\"\n"));
    }

    #[test]
    fn other_tables_and_comments_are_kept() {
        let text = "# mine\n[alias]\nb = \"build\"\n\n[env]\nFOO = \"1\"\n\n[net]\noffline = true\n";
        let out = set_env_libtorch(text, "/t").unwrap();
        assert_eq!(
            out,
            format!("# mine\n[alias]\nb = \"build\"\n\n[env]\n{COMMENT}\nLIBTORCH = \"/t\"\nFOO = \"1\"\n\n[net]\noffline = true\n")
        );
        let appended = set_env_libtorch("[alias]\nb = \"build\"", "/t").unwrap();
        assert_eq!(appended, format!("[alias]\nb = \"build\"\n\n[env]\n{COMMENT}\nLIBTORCH = \"/t\"\n"));
    }

    #[test]
    fn an_existing_libtorch_is_replaced_in_place_and_a_second_run_changes_nothing() {
        let text = "[env]\nLIBTORCH = { value = \"old\", relative = true }\nX = \"y\"\n";
        let out = set_env_libtorch(text, "/new").unwrap();
        assert_eq!(out, "[env]\nLIBTORCH = \"/new\"\nX = \"y\"\n");
        assert_eq!(set_env_libtorch(&out, "/new").unwrap(), out);
    }

    #[test]
    fn forms_it_cannot_rewrite_are_refused_with_the_line() {
        let err = set_env_libtorch("env.LIBTORCH = \"/x\"\n", "/t").unwrap_err();
        assert!(err.contains("line 1"), "{err}");
        let err =
            set_env_libtorch("[env]\nLIBTORCH = { value = \"/x\",\n relative = true }\n", "/t").unwrap_err();
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn paths_are_escaped_as_toml_strings() {
        assert_eq!(toml_string(r#"C:\lib "x""#), r#""C:\\lib \"x\"""#);
    }

    #[test]
    fn the_config_file_is_created_then_left_alone() {
        let dir = std::env::temp_dir().join(format!("setup-cargo-config-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let first = write_cargo_config(&dir, Path::new("/opt/libtorch")).unwrap();
        assert_eq!(first, ConfigChange::Created(dir.join(".cargo/config.toml")));
        let second = write_cargo_config(&dir, Path::new("/opt/libtorch")).unwrap();
        assert!(matches!(second, ConfigChange::Unchanged(_)), "{second:?}");
        let third = write_cargo_config(&dir, Path::new("/opt/other")).unwrap();
        assert!(matches!(third, ConfigChange::Updated(_)), "{third:?}");
        let text = fs::read_to_string(third.path()).unwrap();
        assert!(text.contains("LIBTORCH = \"/opt/other\"") && !text.contains("/opt/libtorch"), "{text}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_project_is_the_workspace_root_above_a_member() {
        let root = std::env::temp_dir().join(format!("setup-find-project-{}", std::process::id()));
        let member = root.join("crates/app/src");
        fs::create_dir_all(&member).unwrap();
        fs::write(root.join("crates/app/Cargo.toml"), "[package]\nname = \"app\"\n").unwrap();
        assert_eq!(find_project(&member), Some(root.join("crates/app")));
        fs::write(root.join("Cargo.toml"), "[workspace]\nmembers = [\"crates/*\"]\n").unwrap();
        assert_eq!(find_project(&member), Some(root.clone()));
        fs::remove_dir_all(&root).unwrap();
    }
}
