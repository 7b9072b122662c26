//! Which libtorch version a folder holds, and the one version `tch` 0.24.0 accepts.

use crate::error::{Result, SetupError};
use std::fs;
use std::path::Path;

/// The libtorch version `tch` 0.24.0 is built against, exactly.
pub const TORCH_VERSION: &str = "2.11.0";

/// The version of the libtorch at `libtorch` (the folder holding `lib/` and `include/`):
/// `build-version` in a libtorch zip, `version.py` in a PyPI torch package.
pub fn libtorch_version(libtorch: &Path) -> Result<String> {
    let build_version = libtorch.join("build-version");
    if let Ok(text) = fs::read_to_string(&build_version) {
        return Ok(text.trim().to_string());
    }
    let version_py = libtorch.join("version.py");
    if let Ok(text) = fs::read_to_string(&version_py) {
        return parse_version_py(&text).ok_or(SetupError::UnknownVersion { path: version_py });
    }
    if !libtorch.join("lib").is_dir() {
        return Err(SetupError::NotLibtorch { path: libtorch.to_path_buf() });
    }
    Err(SetupError::UnknownVersion { path: libtorch.to_path_buf() })
}

fn parse_version_py(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("__version__")?.trim().strip_prefix('=')?;
        Some(rest.trim().trim_matches(['\'', '"']).to_string())
    })
}

/// Accepts `2.11.0` with any local tag (`+cpu`, `+cu130`); names `place` otherwise.
pub fn check_version(version: &str, place: &Path) -> Result<()> {
    let base = version.split('+').next().unwrap_or(version);
    if base == TORCH_VERSION {
        Ok(())
    } else {
        Err(SetupError::WrongVersion { path: place.to_path_buf(), version: version.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_version_of_a_pypi_torch_package() {
        let text = "from typing import Optional\n__version__ = '2.11.0+cu130'\ndebug = False\n";
        assert_eq!(parse_version_py(text).as_deref(), Some("2.11.0+cu130"));
        assert_eq!(parse_version_py("debug = False\n"), None);
    }

    #[test]
    fn accepts_local_build_tags_and_rejects_other_versions() {
        let here = Path::new("/x");
        assert!(check_version("2.11.0+cpu", here).is_ok());
        assert!(check_version("2.11.0", here).is_ok());
        let err = check_version("2.10.1+cu128", here).unwrap_err().to_string();
        assert!(err.contains("2.10.1+cu128") && err.contains("2.11.0") && err.contains("/x"), "{err}");
    }

    #[test]
    fn a_folder_without_libtorch_is_named_in_the_error() {
        let dir = std::env::temp_dir().join(format!("setup-not-libtorch-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let err = libtorch_version(&dir).unwrap_err().to_string();
        assert!(err.contains(&dir.display().to_string()) && err.contains("lib/"), "{err}");
        fs::write(dir.join("build-version"), "2.4.1\n").unwrap();
        assert_eq!(libtorch_version(&dir).unwrap(), "2.4.1");
        fs::remove_dir_all(&dir).unwrap();
    }
}
