//! `torchlight-build`: one build-script line that makes a crate's binaries, tests and examples
//! find libtorch when they run, with nothing set by hand.
//!
//! tch links libtorch dynamically, and Cargo passes linker flags from a dependency's build
//! script to nobody else, so a program that uses Torchlight starts only if its own build bakes
//! libtorch's `lib/` folder into it as an rpath. In a package with binaries or tests:
//!
//! ```toml
//! [build-dependencies]
//! torchlight-build = "0.1"
//! ```
//!
//! ```no_run
//! // build.rs
//! fn main() {
//!     torchlight_build::link_libtorch();
//! }
//! ```
//!
//! [`link_libtorch`] finds the libtorch torch-sys builds against, exactly as torch-sys does
//! (`LIBTORCH_USE_PYTORCH`, else `LIBTORCH_LIB` / `LIBTORCH`, else `/usr/lib`), or the one
//! torchlight-tensor reported to a crate that depends on it directly, checks its version,
//! and emits the rpath. `torchlight setup` writes `LIBTORCH` into the project's
//! `.cargo/config.toml`, so none of these variables needs setting by hand.
//!
//! This crate's own build script is a preflight: when `LIBTORCH` names no libtorch it stops
//! the build in one line saying what to run, before torch-sys's C++ build fails in two screens
//! of compiler errors.

// The example is a build script: its `fn main` is the point.
#![allow(clippy::needless_doctest_main)]

mod preflight;

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How [`find_libtorch`] found libtorch.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FoundBy {
    /// Reported by the build script of torchlight-tensor (`DEP_TORCHLIGHT_SHIM_LIBTORCH_LIB`) or
    /// torch-sys (`DEP_TCH_LIBTORCH_LIB`), for a crate that depends on one of them directly:
    /// exactly the folder they linked.
    Reported,
    /// `LIBTORCH_USE_PYTORCH`: the `lib/` folder of the Python environment's torch package.
    Python,
    /// `LIBTORCH_LIB`, else `LIBTORCH`, with `/lib` appended (torch-sys's rule).
    Env,
    /// The system install (`/usr/lib/libtorch.so`), which needs no rpath.
    System,
}

/// The libtorch a build links against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibtorchLib {
    /// The folder holding `libtorch_cpu.so` and the other libraries.
    pub lib_dir: PathBuf,
    /// How it was found.
    pub found_by: FoundBy,
}

impl LibtorchLib {
    /// The libtorch folder (holding `lib/` and `include/`).
    pub fn root(&self) -> &Path {
        self.lib_dir.parent().unwrap_or(&self.lib_dir)
    }
}

/// Why no usable libtorch was found. Each message says what to run or set.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The environment names no libtorch (the preflight's one-line message).
    #[error("{0}")]
    NotFound(String),
    /// `LIBTORCH_USE_PYTORCH` is set but Python did not say where torch is.
    #[error("LIBTORCH_USE_PYTORCH is set, but `{python} -c 'import torch'` failed: {reason}. Install torch {} in that Python, or unset LIBTORCH_USE_PYTORCH and run `torchlight-setup`", torchlight_setup::TORCH_VERSION)]
    Python {
        /// The interpreter run.
        python: String,
        /// What went wrong.
        reason: String,
    },
    /// The lib folder has no `libtorch_cpu`.
    #[error("{} holds no libtorch_cpu library; LIBTORCH must name a libtorch {} folder (one holding lib/ and include/)", lib_dir.display(), torchlight_setup::TORCH_VERSION)]
    NoLibrary {
        /// The folder searched.
        lib_dir: PathBuf,
    },
    /// A libtorch of another version than tch 0.24.0 needs.
    #[error(transparent)]
    Version(#[from] torchlight_setup::SetupError),
}

/// Finds the libtorch this build links against (see the crate docs for the order), reading
/// only the environment Cargo gives a build script, and checks its version when it is
/// recorded (`build-version`, or `version.py` in a PyPI torch package).
pub fn find_libtorch() -> Result<LibtorchLib, BuildError> {
    find_with(|name| env::var_os(name))
}

fn find_with(var: impl Fn(&str) -> Option<OsString>) -> Result<LibtorchLib, BuildError> {
    let found = if let Some(lib) =
        var("DEP_TORCHLIGHT_SHIM_LIBTORCH_LIB").or_else(|| var("DEP_TCH_LIBTORCH_LIB"))
    {
        LibtorchLib { lib_dir: PathBuf::from(lib), found_by: FoundBy::Reported }
    } else if var("LIBTORCH_USE_PYTORCH").is_some() {
        // torch-sys runs `python` inside a virtual environment, `python3` otherwise.
        let python = if var("VIRTUAL_ENV").is_some() { "python" } else { "python3" };
        LibtorchLib { lib_dir: python_torch_lib(python)?, found_by: FoundBy::Python }
    } else {
        preflight::check_libtorch_env(&var).map_err(BuildError::NotFound)?;
        match var("LIBTORCH_LIB").or_else(|| var("LIBTORCH")) {
            Some(root) => LibtorchLib { lib_dir: PathBuf::from(root).join("lib"), found_by: FoundBy::Env },
            None => LibtorchLib { lib_dir: PathBuf::from("/usr/lib"), found_by: FoundBy::System },
        }
    };
    let has_cpu_lib = ["libtorch_cpu.so", "libtorch_cpu.dylib", "torch_cpu.dll"]
        .iter()
        .any(|name| found.lib_dir.join(name).is_file());
    if !has_cpu_lib {
        return Err(BuildError::NoLibrary { lib_dir: found.lib_dir });
    }
    match torchlight_setup::libtorch_version(found.root()) {
        Ok(version) => torchlight_setup::check_version(&version, found.root())?,
        // Not every libtorch records its version (a system install); torch-sys links it anyway.
        Err(
            torchlight_setup::SetupError::UnknownVersion { .. }
            | torchlight_setup::SetupError::NotLibtorch { .. },
        ) => {}
        Err(other) => return Err(other.into()),
    }
    Ok(found)
}

fn python_torch_lib(python: &str) -> Result<PathBuf, BuildError> {
    let fail = |reason: String| BuildError::Python { python: python.to_string(), reason };
    let out = Command::new(python)
        .args(["-c", "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))"])
        .output()
        .map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        return Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().lines().last().unwrap_or("").to_string(),
        ));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// For a build script: finds libtorch ([`find_libtorch`]) and bakes its `lib/` folder into
/// this package's binaries, tests, examples and benches as an rpath, so they start with no
/// `LD_LIBRARY_PATH`; asks Cargo to rerun when the variables it read change. On failure the
/// build stops with the error's one-line message. Returns what it found, e.g. for a build
/// script that compiles C++ against libtorch's headers (`root()/include`).
pub fn link_libtorch() -> LibtorchLib {
    for var in ["LIBTORCH", "LIBTORCH_LIB", "LIBTORCH_USE_PYTORCH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let found = match find_libtorch() {
        Ok(found) => found,
        Err(err) => {
            println!("cargo::error={err}");
            std::process::exit(0);
        }
    };
    if found.found_by != FoundBy::System {
        match env::var("CARGO_CFG_TARGET_OS").as_deref() {
            Ok("windows") => println!(
                "cargo:warning=Windows has no rpath: put {} on PATH to run this package's binaries",
                found.lib_dir.display()
            ),
            _ => println!("cargo:rustc-link-arg=-Wl,-rpath,{}", found.lib_dir.display()),
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::fs;

    fn env_of(pairs: &[(&str, &Path)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.as_os_str().to_os_string())).collect();
        move |name| map.get(name).cloned()
    }

    /// A fake libtorch: `lib/libtorch_cpu.so` and a `version.py` saying `version`.
    fn fake_libtorch(tag: &str, version: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("torchlight-build-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("lib")).unwrap();
        fs::write(root.join("lib/libtorch_cpu.so"), b"").unwrap();
        fs::write(root.join("version.py"), format!("__version__ = '{version}'\n")).unwrap();
        root
    }

    #[test]
    fn libtorch_from_the_environment_gives_its_lib_folder() {
        let root = fake_libtorch("env", "2.11.0+cpu");
        let found = find_with(env_of(&[("LIBTORCH", &root)])).unwrap();
        assert_eq!(found, LibtorchLib { lib_dir: root.join("lib"), found_by: FoundBy::Env });
        assert_eq!(found.root(), root);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_reported_lib_folder_wins_over_the_environment() {
        let reported = fake_libtorch("reported", "2.11.0");
        let env = fake_libtorch("ignored", "2.11.0");
        let found = find_with(env_of(&[("DEP_TCH_LIBTORCH_LIB", &reported.join("lib")), ("LIBTORCH", &env)]));
        assert_eq!(found.unwrap().lib_dir, reported.join("lib"));
        fs::remove_dir_all(&reported).unwrap();
        fs::remove_dir_all(&env).unwrap();
    }

    #[test]
    fn a_wrong_version_is_refused_with_both_versions() {
        let root = fake_libtorch("old", "2.4.1");
        let err = find_with(env_of(&[("LIBTORCH", &root)])).unwrap_err().to_string();
        assert!(err.contains("2.4.1") && err.contains("2.11.0"), "{err}");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_missing_libtorch_says_what_to_run_in_one_line() {
        let nowhere = std::env::temp_dir().join("torchlight-build-no-such-libtorch");
        let err = find_with(env_of(&[("LIBTORCH", &nowhere)])).unwrap_err().to_string();
        assert!(err.contains("torchlight-setup") && err.contains(&nowhere.display().to_string()), "{err}");
        assert!(!err.contains('\n'), "one line: {err}");
        let empty = fake_libtorch("empty-lib", "2.11.0");
        fs::remove_file(empty.join("lib/libtorch_cpu.so")).unwrap();
        let err = find_with(env_of(&[("LIBTORCH", &empty)])).unwrap_err();
        assert!(matches!(err, BuildError::NoLibrary { .. }), "{err}");
        fs::remove_dir_all(&empty).unwrap();
    }

    #[test]
    fn in_a_torchlight_checkout_the_message_says_cargo_xtask_setup() {
        let root = std::env::temp_dir().join(format!("torchlight-build-checkout-{}", std::process::id()));
        fs::create_dir_all(root.join("xtask")).unwrap();
        fs::write(root.join("xtask/Cargo.toml"), "").unwrap();
        let err = find_with(env_of(&[("LIBTORCH", &root.join(".libtorch/torch"))])).unwrap_err().to_string();
        assert!(err.contains("cargo xtask setup") && err.contains(".cargo/config.toml"), "{err}");
        fs::remove_dir_all(&root).unwrap();
    }
}

/// The README's example, compiled as a doc test so it cannot drift from the code.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
