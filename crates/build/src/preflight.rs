//! Whether `LIBTORCH` names a libtorch, with the one-line message that says what to run when it
//! does not. Shared by this crate's build script, which runs before torch-sys's C++ build (so a
//! missing libtorch stops the build at once, in one line) and by `find_libtorch`.
//!
//! Standard library only: the build script includes this file and has no dependencies.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// `Err(message)` when the environment (read through `var`) names no usable libtorch:
/// `LIBTORCH` unset with no system libtorch, or a `LIBTORCH` (or `LIBTORCH_LIB`) without `lib/`.
/// `LIBTORCH_USE_PYTORCH` (torch-sys asks Python) is accepted unchecked.
pub(crate) fn check_libtorch_env(var: impl Fn(&str) -> Option<OsString>) -> Result<(), String> {
    if var("LIBTORCH_USE_PYTORCH").is_some() {
        return Ok(());
    }
    let Some(libtorch) = var("LIBTORCH").map(PathBuf::from) else {
        if Path::new("/usr/lib/libtorch.so").exists() {
            return Ok(());
        }
        return Err(format!(
            "LIBTORCH is not set, so the tch crate has no libtorch to compile against. Run `torchlight-setup` \
             in your project once (`cargo install torchlight-setup`): it installs libtorch {VERSION} into a \
             per-user cache and writes LIBTORCH into .cargo/config.toml. Or set LIBTORCH to a libtorch \
             {VERSION} folder (one holding lib/ and include/)"
        ));
    };
    let lib_root = var("LIBTORCH_LIB").map(PathBuf::from).unwrap_or_else(|| libtorch.clone());
    for (name, dir) in [("LIBTORCH", &libtorch), ("LIBTORCH_LIB", &lib_root)] {
        if dir.join("lib").is_dir() {
            continue;
        }
        if let Some(root) = torchlight_checkout(dir) {
            return Err(format!(
                "libtorch is not installed in this Torchlight checkout yet: {name}={} (set by {}) does not \
                 exist. Run `cargo xtask setup` once: it installs libtorch {VERSION}, which the tch crate \
                 compiles and links against, into a per-user cache and links it there",
                dir.display(),
                root.join(".cargo/config.toml").display()
            ));
        }
        return Err(format!(
            "{name}={} is not a libtorch folder (no lib/ inside), so the tch crate cannot compile. Run \
             `torchlight-setup` in your project (`cargo install torchlight-setup`): it installs libtorch \
             {VERSION} into a per-user cache and writes LIBTORCH into .cargo/config.toml. Or point {name} \
             at a libtorch {VERSION} folder (one holding lib/ and include/)",
            dir.display()
        ));
    }
    Ok(())
}

/// The libtorch version tch 0.24.0 needs (kept equal to `torchlight_setup::TORCH_VERSION`).
const VERSION: &str = "2.11.0";

/// The root of a Torchlight checkout when `dir` is its `.libtorch/torch` link target path.
fn torchlight_checkout(dir: &Path) -> Option<&Path> {
    let link = dir.parent().filter(|p| p.file_name().is_some_and(|n| n == ".libtorch"))?;
    let root = link.parent()?;
    root.join("xtask/Cargo.toml").is_file().then_some(root)
}
