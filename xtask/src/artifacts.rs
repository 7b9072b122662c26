//! The executables a cargo build reported (`--message-format=json`), read without a JSON
//! library: the GPU kit carries them, and `cargo xtask test` runs two of them again
//! (`dispatch.rs`).

use std::path::{Path, PathBuf};

/// The executables cargo reported building.
#[derive(Debug, Default)]
pub struct Artifacts {
    /// (package, executable) of each integration-test target named `it`.
    pub tests: Vec<(String, PathBuf)>,
    /// (binary name, executable) of each binary target.
    pub bins: Vec<(String, PathBuf)>,
}

impl Artifacts {
    /// Reads cargo's `--message-format=json` lines (only `compiler-artifact` lines matter).
    pub fn parse(stdout: &str) -> Artifacts {
        let mut a = Artifacts::default();
        for line in stdout.lines().filter(|l| l.contains("\"reason\":\"compiler-artifact\"")) {
            let (Some(exe), Some(name), Some(id)) =
                (json_str(line, "executable"), json_str(line, "name"), json_str(line, "package_id"))
            else {
                continue;
            };
            if line.contains("\"kind\":[\"test\"]") && name == "it" {
                a.tests.push((package_name(&id), PathBuf::from(exe)));
            } else if line.contains("\"kind\":[\"bin\"]") {
                // `--bins` without `--tests` builds each binary once, for running.
                a.bins.push((name, PathBuf::from(exe)));
            }
        }
        a
    }

    /// The `it` test executable of `package`.
    pub fn test(&self, package: &str) -> Option<&Path> {
        self.tests.iter().find(|(p, _)| p == package).map(|(_, e)| e.as_path())
    }

    /// The executable of binary target `name`.
    pub fn bin(&self, name: &str) -> Option<&Path> {
        self.bins.iter().find(|(n, _)| n == name).map(|(_, e)| e.as_path())
    }
}

/// The first `"key":"value"` string of a JSON line, unescaped.
fn json_str(line: &str, key: &str) -> Option<String> {
    let pattern = format!("\"{key}\":\"");
    let start = line.find(&pattern)? + pattern.len();
    let mut out = String::new();
    let mut chars = line[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// The package name in a cargo package id: `path+file:///w/crates/tensor#torchlight-tensor@0.1.0`,
/// `path+file:///w/xtask#0.1.0` (the name is the folder's) or the old `name 0.1.0 (source)`.
fn package_name(id: &str) -> String {
    match id.rsplit_once('#') {
        Some((url, fragment)) => match fragment.split_once('@') {
            Some((name, _)) => name.to_string(),
            None => url.rsplit('/').next().unwrap_or(url).to_string(),
        },
        None => id.split_whitespace().next().unwrap_or(id).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_messages_give_test_and_bin_executables() {
        let lines = [
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/tensor#torchlight-tensor@0.1.0","manifest_path":"/w/crates/tensor/Cargo.toml","target":{"kind":["test"],"crate_types":["bin"],"name":"it","src_path":"/w/crates/tensor/tests/it/main.rs","test":true},"profile":{"test":true},"executable":"/w/target/release/deps/it-aa"}"#,
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/cli#torchlight-cli@0.1.0","manifest_path":"/w/crates/cli/Cargo.toml","target":{"kind":["bin"],"crate_types":["bin"],"name":"torchlight","src_path":"/w/crates/cli/src/main.rs","edition":"2021","doc":true,"doctest":false,"test":true},"profile":{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":false},"features":[],"executable":"/w/target/release/torchlight","fresh":false}"#,
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/data#torchlight-data@0.1.0","target":{"kind":["lib"],"name":"torchlight_data","test":true},"executable":null}"#,
            r#"{"reason":"build-finished","success":true}"#,
        ];
        let a = Artifacts::parse(&lines.join("\n"));
        assert_eq!(a.test("torchlight-tensor"), Some(Path::new("/w/target/release/deps/it-aa")));
        assert_eq!(a.bin("torchlight"), Some(Path::new("/w/target/release/torchlight")));
        assert_eq!((a.tests.len(), a.bins.len()), (1, 1));
        assert_eq!(package_name("path+file:///w/xtask#0.1.0"), "xtask");
        assert_eq!(package_name("torchlight-nn 0.1.0 (path+file:///w/crates/nn)"), "torchlight-nn");
        assert_eq!(json_str(r#"{"a":"x\"y\\z"}"#, "a").as_deref(), Some("x\"y\\z"));
    }
}
