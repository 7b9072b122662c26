//! The `cargo package` metadata check: every crate meant for publishing has what crates.io shows.
//!
//! `cargo metadata` resolves workspace inheritance (`license.workspace = true`), so the check
//! reads its output rather than the manifests. A crate is meant for publishing unless its
//! manifest says `publish = false` (metadata's `"publish": []`). Such a crate needs a
//! `description`, `license`, `repository`, a `readme` that exists beside its manifest, and at
//! least one of `keywords` and of `categories`; a missing one fails naming the manifest, the
//! crate and every missing field. `cargo xtask test` and `cargo xtask crates` run it first,
//! since it takes a second.

use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The string fields a published crate must set.
const TEXT_FIELDS: &[&str] = &["description", "license", "repository"];
/// The list fields a published crate must set to a non-empty list.
const LIST_FIELDS: &[&str] = &["keywords", "categories"];

/// Runs `cargo metadata` in `root` and fails naming every publishable crate with incomplete
/// metadata (see the module docs).
pub fn check(root: &Path, cargo: fn() -> Command) -> Result<()> {
    let out = cargo()
        .current_dir(root)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .output()
        .context("could not start cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    let metadata: Value = serde_json::from_slice(&out.stdout).context("cargo metadata printed no JSON")?;
    let problems = incomplete(&metadata)?;
    if !problems.is_empty() {
        bail!("crates meant for publishing lack `cargo package` metadata:\n  {}", problems.join("\n  "));
    }
    Ok(())
}

/// One line per publishable package of `metadata` (`cargo metadata` output) that lacks a
/// field: `<manifest> (<crate>): missing `a`, `b``. Empty when all is well.
fn incomplete(metadata: &Value) -> Result<Vec<String>> {
    let packages = metadata["packages"].as_array().context("cargo metadata has no `packages` list")?;
    let mut problems = Vec::new();
    for package in packages {
        // `publish = false` is `[]`; absent (`null`) or a list of registries means publishable.
        if package["publish"].as_array().is_some_and(Vec::is_empty) {
            continue;
        }
        let name = package["name"].as_str().unwrap_or("?");
        let manifest = package["manifest_path"].as_str().unwrap_or("?");
        let mut missing: Vec<String> = Vec::new();
        for field in TEXT_FIELDS {
            if package[*field].as_str().is_none_or(|s| s.trim().is_empty()) {
                missing.push(format!("`{field}`"));
            }
        }
        match package["readme"].as_str() {
            None => missing.push("`readme`".into()),
            Some(readme) => {
                let dir = Path::new(manifest).parent().unwrap_or(Path::new("."));
                if !dir.join(readme).is_file() {
                    missing.push(format!("`readme` (`{readme}` is not a file beside the manifest)"));
                }
            }
        }
        for field in LIST_FIELDS {
            if package[*field].as_array().is_none_or(Vec::is_empty) {
                missing.push(format!("`{field}`"));
            }
        }
        if !missing.is_empty() {
            problems.push(format!("{manifest} ({name}): missing {}", missing.join(", ")));
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A package as `cargo metadata` prints it, complete, its manifest in this crate's folder
    /// (whose README.md does not exist: xtask has none) or `dir`.
    fn package(name: &str, dir: &Path) -> Value {
        json!({
            "name": name,
            "manifest_path": dir.join("Cargo.toml").to_str().unwrap(),
            "description": "d",
            "license": "MIT",
            "repository": "https://example.org/r",
            "readme": "README.md",
            "keywords": ["k"],
            "categories": ["science"],
            "publish": null,
        })
    }

    #[test]
    fn a_missing_field_is_named_with_its_crate_and_manifest() {
        let dir = std::env::temp_dir().join(format!("xtask-packaging-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("README.md"), "# r\n").unwrap();
        let complete = package("complete", &dir);
        let mut no_readme = package("no-readme", &dir);
        no_readme["readme"] = Value::Null;
        no_readme["keywords"] = json!([]);
        let mut unpublished = package("unpublished", &dir);
        unpublished["publish"] = json!([]);
        unpublished["description"] = Value::Null;
        let absent_file = package("absent-file", Path::new(env!("CARGO_MANIFEST_DIR")));
        let metadata = json!({ "packages": [complete, no_readme, unpublished, absent_file] });
        let problems = incomplete(&metadata).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(problems.len(), 2, "{problems:?}");
        let manifest = dir.join("Cargo.toml");
        assert_eq!(problems[0], format!("{} (no-readme): missing `readme`, `keywords`", manifest.display()));
        assert!(
            problems[1].contains("(absent-file): missing `readme` (`README.md` is not a file"),
            "{problems:?}"
        );
    }

    #[test]
    fn every_publishable_crate_of_this_workspace_is_complete() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        check(root, crate::cargo).unwrap();
    }
}
