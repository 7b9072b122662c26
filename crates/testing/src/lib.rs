//! Test support: runs real PyTorch (the reference interpreter `cargo xtask setup` installs) to
//! generate parity fixtures too large to commit, caching them by the script's content.
//!
//! Small fixtures are committed beside the script that made them; this is for the large ones
//! (torchvision-saved ResNet weights, their gradients). A fixture folder is keyed by a hash of
//! the generating script, its arguments and the variables that choose libtorch's kernels
//! ([`KERNEL_ENV`]), so editing the script or forcing a dispatch level regenerates it, and lives
//! in the system temp dir, so every clone on a machine shares it.
//!
//! Also [`alone_in_a_process`], for a test that must see only its own draws from torch's
//! global generator.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The reference Python (torch 2.11.0, torchvision 0.26.0): `$TORCHLIGHT_PYTHON`, else the
/// workspace's `.pyref/bin/python` that `cargo xtask setup` links.
pub fn reference_python() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("TORCHLIGHT_PYTHON") {
        return Ok(PathBuf::from(p));
    }
    let linked = workspace_root().join(".pyref/bin/python");
    if linked.exists() {
        Ok(linked)
    } else {
        Err(format!(
            "the reference PyTorch interpreter {} is missing: run `cargo xtask setup` (or set TORCHLIGHT_PYTHON)",
            linked.display()
        ))
    }
}

/// The workspace root (this crate lives in `<root>/crates/testing`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root exists")
}

fn fnv1a(bytes: &[u8], mut hash: u64) -> u64 {
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The environment variables that choose which kernels libtorch runs, and so the last bits of
/// float results: ATen's CPU dispatch level, oneDNN's instruction set (both spellings), MKL's
/// instruction set and its conditional numerical reproducibility. The reference Python inherits
/// them, so they are part of a generated fixture's cache key: a run under
/// `ATEN_CPU_CAPABILITY=default` compares against fixtures made at that level, never against
/// ones cached by an earlier run at the machine's best level.
pub const KERNEL_ENV: &[&str] =
    &["ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR"];

/// The cache key of a generated fixture: a hash of the script's content, its arguments and the
/// [`KERNEL_ENV`] variables that `env` reports set.
fn cache_key(source: &[u8], args: &[&str], env: impl Fn(&str) -> Option<std::ffi::OsString>) -> u64 {
    let mut hash = fnv1a(source, 0xcbf2_9ce4_8422_2325);
    for a in args {
        hash = fnv1a(a.as_bytes(), fnv1a(b"\0", hash));
    }
    for name in KERNEL_ENV {
        if let Some(value) = env(name) {
            hash = fnv1a(value.as_encoded_bytes(), fnv1a(name.as_bytes(), fnv1a(b"\0env\0", hash)));
        }
    }
    hash
}

/// Runs `script` (a path relative to the workspace root) with the reference Python as
/// `python script OUT_DIR ARGS...` unless its output for this script content, these
/// arguments and this process's [`KERNEL_ENV`] is already cached, and returns OUT_DIR. Safe to
/// call from parallel tests and processes: output is written to a temporary folder and renamed
/// into place.
pub fn generated_fixture(script: &str, args: &[&str]) -> Result<PathBuf, String> {
    let script_path = workspace_root().join(script);
    let source = std::fs::read(&script_path).map_err(|e| format!("{}: {e}", script_path.display()))?;
    let hash = cache_key(&source, args, |name| std::env::var_os(name));
    let stem = script_path.file_stem().and_then(|s| s.to_str()).unwrap_or("fixture");
    let cache = std::env::temp_dir().join("torchlight-fixtures");
    let out = cache.join(format!("{stem}-{hash:016x}"));
    if out.join(".done").exists() {
        return Ok(out);
    }
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let tmp = cache.join(format!(
        "{stem}-{hash:016x}.tmp-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let python = reference_python()?;
    let output = Command::new(&python)
        .arg(&script_path)
        .arg(&tmp)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !output.status.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(format!(
            "{} {} failed ({}):\n{}",
            python.display(),
            script,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    std::fs::write(tmp.join(".done"), b"").map_err(|e| e.to_string())?;
    // Another process may have finished first; either copy is equally good.
    if std::fs::rename(&tmp, &out).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    if out.join(".done").exists() {
        Ok(out)
    } else {
        Err(format!("fixture folder {} did not appear", out.display()))
    }
}

/// Runs `script` (relative to the workspace root) with the reference Python and `args`, and
/// returns its standard output; an error carrying its standard error when it fails. For checks
/// that must see this run's files (exported models), so nothing is cached.
pub fn run_reference_script(script: &str, args: &[&str]) -> Result<String, String> {
    let python = reference_python()?;
    let script_path = workspace_root().join(script);
    let output = Command::new(&python)
        .arg(&script_path)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "{script} failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Runs the test `path` (e.g. `module::test_name`) alone in a child process of the running test
/// binary, for a test that must see exactly the draws it seeded from torch's process-wide
/// generator: a lock orders only the tests that take it, and random init or dropout in any
/// other test of the binary draws too. Returns `true` in the child, where the test's body runs;
/// in the parent it waits for the child, fails with its output if it failed, and returns
/// `false`. Use it as `if !alone_in_a_process("module::test") { return; }`.
///
/// # Panics
/// In the parent, when the child fails or does not run exactly that one test.
pub fn alone_in_a_process(path: &str) -> bool {
    const CHILD: &str = "TORCHLIGHT_TEST_ALONE";
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args(["--exact", path, "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .expect("the test binary runs again");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("1 passed"), "{path} alone in a process:\n{text}");
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn a_forced_dispatch_level_gets_fixtures_of_its_own() {
        let none = |_: &str| None;
        let level = |value: &'static str| {
            move |name: &str| (name == "ATEN_CPU_CAPABILITY").then(|| OsString::from(value))
        };
        let base = cache_key(b"script", &["2", "vit_s_16"], none);
        assert_eq!(base, cache_key(b"script", &["2", "vit_s_16"], none), "a pure function");
        assert_ne!(base, cache_key(b"script", &["2", "vit_s_16"], level("default")));
        assert_ne!(
            cache_key(b"script", &["2"], level("default")),
            cache_key(b"script", &["2"], level("avx2"))
        );
        let other = |name: &str| (name == "PATH").then(|| OsString::from("/bin"));
        assert_eq!(base, cache_key(b"script", &["2", "vit_s_16"], other), "other variables do not count");
        let isa = |name: &str| (name == "ONEDNN_MAX_CPU_ISA").then(|| OsString::from("AVX2"));
        assert_ne!(base, cache_key(b"script", &["2", "vit_s_16"], isa));
        assert_ne!(base, cache_key(b"script", &["2vit_s_16"], none), "arguments stay apart");
    }
}
