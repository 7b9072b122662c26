//! `cargo xtask setup`: libtorch 2.11.0 from PyPI's torch wheel, installed once per user.
//!
//! The install lives in a per-user cache (`$TORCHLIGHT_CACHE`, else `$XDG_CACHE_HOME/torchlight`,
//! else `~/.cache/torchlight`), never in the clone, so fresh clones (and CI) reuse it. The
//! workspace's `.libtorch` link points at it and `.cargo/config.toml` sets `LIBTORCH` to
//! `.libtorch/torch`, which is how torch-sys finds headers and libraries with no environment
//! set by hand. A `LIBTORCH` set by the user is honoured instead, after a version check.

use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The libtorch version `tch` 0.24.0 is built against.
pub const TORCH_VERSION: &str = "2.11.0";

/// The lean set: the torch wheel alone plus the two CUDA runtime wheels `libtorch_cpu.so`
/// links to (libcudart, libcupti). The versions are the ones torch 2.11.0's own
/// `cuda-toolkit[cudart,cupti]==13.0.2` requirement resolves to.
const LEAN_PACKAGES: &[&str] =
    &["torch==2.11.0", "nvidia-cuda-runtime==13.0.96", "nvidia-cuda-cupti==13.0.85"];
const FULL_PACKAGES: &[&str] = &["torch==2.11.0"];

/// Free space asked for before installing: download, unpacked tree and pip's cache.
const LEAN_BYTES_NEEDED: u64 = 4 << 30;
const FULL_BYTES_NEEDED: u64 = 12 << 30;

const COMPLETE_MARKER: &str = ".torchlight-complete";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    /// CPU machines: ~1.2 GB, enough to link and run on CPU.
    Lean,
    /// Machines with an NVIDIA GPU: torch with all its CUDA dependencies (~4.7 GB).
    Full,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Lean => "lean",
            Variant::Full => "full",
        }
    }
}

/// What `setup` left in place.
pub struct Installed {
    /// Whether the GPU test suite can run here (an NVIDIA GPU and a CUDA-capable install).
    pub gpu_tests: bool,
}

/// Makes libtorch available to the workspace at `root`; a no-op when it already is.
pub fn setup(root: &Path, force_cuda: bool) -> Result<Installed> {
    let link = root.join(".libtorch");
    if let Some(user) = user_libtorch(root) {
        let version = libtorch_version(&user)?;
        check_version(&version, &user)?;
        eprintln!("setup: using your LIBTORCH={} (libtorch {version})", user.display());
        return Ok(Installed { gpu_tests: gpu_present() && user.join("lib/libtorch_cuda.so").exists() });
    }
    let gpu = gpu_present();
    let cache = cache_root()?;
    let full_dir = cache.join(format!("libtorch-{TORCH_VERSION}-full"));
    let lean_dir = cache.join(format!("libtorch-{TORCH_VERSION}-lean"));
    // The full install is a superset of the lean one, so it serves CPU machines too.
    let (variant, dir) = if force_cuda || gpu || is_complete(&full_dir) {
        (Variant::Full, full_dir)
    } else {
        (Variant::Lean, lean_dir)
    };
    if !is_complete(&dir) {
        install(&dir, variant)?;
    }
    let version = libtorch_version(&dir.join("torch"))?;
    check_version(&version, &dir)?;
    point_link(&link, &dir)?;
    eprintln!(
        "setup: libtorch {version} ({} install) ready at {}\nsetup: linked from {}",
        variant.name(),
        dir.display(),
        link.display()
    );
    Ok(Installed { gpu_tests: gpu && variant == Variant::Full })
}

/// A `LIBTORCH` from the user's environment, as opposed to the one `.cargo/config.toml` sets
/// (cargo passes that one to `cargo xtask` too).
fn user_libtorch(root: &Path) -> Option<PathBuf> {
    let value = PathBuf::from(std::env::var_os("LIBTORCH")?);
    (value != root.join(".libtorch").join("torch")).then_some(value)
}

pub(crate) fn cache_root() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("TORCHLIGHT_CACHE") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(dir).join("torchlight"));
    }
    let home = std::env::var_os("HOME").context("neither TORCHLIGHT_CACHE nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cache").join("torchlight"))
}

/// An NVIDIA driver is loaded (the same signal PyTorch's CUDA build relies on).
fn gpu_present() -> bool {
    if Path::new("/proc/driver/nvidia/version").exists() {
        return true;
    }
    Command::new("nvidia-smi")
        .arg("-L")
        .output()
        .map(|o| o.status.success() && !o.stdout.is_empty())
        .unwrap_or(false)
}

fn is_complete(dir: &Path) -> bool {
    dir.join(COMPLETE_MARKER).is_file() && dir.join("torch/lib/libtorch_cpu.so").is_file()
}

fn install(dir: &Path, variant: Variant) -> Result<()> {
    let parent = dir.parent().context("cache directory has no parent")?;
    fs::create_dir_all(parent)
        .with_context(|| format!("cannot create the cache directory {}", parent.display()))?;
    check_python()?;
    let needed = match variant {
        Variant::Lean => LEAN_BYTES_NEEDED,
        Variant::Full => FULL_BYTES_NEEDED,
    };
    check_free_space(parent, needed)?;

    // Install next to the final place, then rename: an interrupted install never looks complete.
    let partial = dir.with_extension("partial");
    if partial.exists() {
        fs::remove_dir_all(&partial)
            .with_context(|| format!("cannot remove the stale {}", partial.display()))?;
    }
    let packages = match variant {
        Variant::Lean => LEAN_PACKAGES,
        Variant::Full => FULL_PACKAGES,
    };
    eprintln!(
        "setup: installing libtorch {TORCH_VERSION} ({} install, {}) into {}\nsetup: this happens once per machine; pip shows the download progress",
        variant.name(),
        match variant {
            Variant::Lean => "about 1.2 GB, CPU only",
            Variant::Full => "about 4.7 GB, with CUDA",
        },
        dir.display()
    );
    let mut pip = Command::new("python3");
    pip.args(["-m", "pip", "install", "--disable-pip-version-check", "--no-warn-script-location"])
        .args(["--progress-bar", "on", "--target"])
        .arg(&partial)
        .env("PIP_ROOT_USER_ACTION", "ignore");
    if variant == Variant::Lean {
        pip.arg("--no-deps");
    }
    pip.args(packages);
    let status = pip.status().context("could not start python3 -m pip")?;
    if !status.success() {
        bail!(
            "pip could not install {} ({status}); see its output above. \
             Check that PyPI is reachable and that the disk has room, then run `cargo xtask setup` again",
            packages.join(" ")
        );
    }
    let version = libtorch_version(&partial.join("torch"))?;
    check_version(&version, &partial)?;
    fs::write(partial.join(COMPLETE_MARKER), format!("torch {version}\nvariant {}\n", variant.name()))?;
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("cannot replace {}", dir.display()))?;
    }
    fs::rename(&partial, dir)
        .with_context(|| format!("cannot move {} to {}", partial.display(), dir.display()))?;
    Ok(())
}

pub(crate) fn check_python() -> Result<()> {
    let ok = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        bail!(
            "python3 with pip is needed to fetch libtorch {TORCH_VERSION} from PyPI, and `python3 -m pip` \
             does not run here. Install them (Debian/Ubuntu: `apt-get install python3 python3-pip`), \
             or point LIBTORCH at an existing libtorch {TORCH_VERSION}, then run `cargo xtask setup` again"
        );
    }
    Ok(())
}

pub(crate) fn check_free_space(dir: &Path, needed: u64) -> Result<()> {
    let Some(available) = free_bytes(dir) else {
        eprintln!("setup: could not read the free space of {} (df failed); going ahead", dir.display());
        return Ok(());
    };
    if available < needed {
        bail!(
            "not enough disk space in {}: libtorch needs about {} MiB, {} MiB is free. \
             Free some space, or set TORCHLIGHT_CACHE to a directory on a larger disk",
            dir.display(),
            needed >> 20,
            available >> 20
        );
    }
    Ok(())
}

/// Free bytes on the file system holding `dir`, from POSIX `df -Pk`.
fn free_bytes(dir: &Path) -> Option<u64> {
    let out = Command::new("df").arg("-Pk").arg(dir).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let kib: u64 = text.lines().nth(1)?.split_whitespace().nth(3)?.parse().ok()?;
    Some(kib * 1024)
}

/// The version of the libtorch at `libtorch` (the folder holding `lib/` and `include/`):
/// `build-version` in a libtorch zip, `version.py` in a PyPI torch package.
fn libtorch_version(libtorch: &Path) -> Result<String> {
    let build_version = libtorch.join("build-version");
    if let Ok(text) = fs::read_to_string(&build_version) {
        return Ok(text.trim().to_string());
    }
    let version_py = libtorch.join("version.py");
    if let Ok(text) = fs::read_to_string(&version_py) {
        if let Some(v) = parse_version_py(&text) {
            return Ok(v);
        }
        bail!("{} has no __version__ line", version_py.display());
    }
    if !libtorch.join("lib").is_dir() {
        bail!(
            "{} is not a libtorch folder (no lib/ inside). LIBTORCH must name the folder that holds \
             lib/ and include/",
            libtorch.display()
        );
    }
    bail!(
        "cannot tell the version of the libtorch at {}: neither build-version nor version.py is there",
        libtorch.display()
    )
}

fn parse_version_py(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("__version__")?.trim().strip_prefix('=')?;
        Some(rest.trim().trim_matches(['\'', '"']).to_string())
    })
}

fn check_version(version: &str, place: &Path) -> Result<()> {
    let base = version.split('+').next().unwrap_or(version);
    if base != TORCH_VERSION {
        bail!(
            "the libtorch at {} is version {version}, but tch 0.24.0 needs exactly {TORCH_VERSION}. \
             Unset LIBTORCH to let `cargo xtask setup` install {TORCH_VERSION}, or point it at a {TORCH_VERSION} install",
            place.display()
        );
    }
    Ok(())
}

/// Points the workspace's `.libtorch` symlink at `target`, replacing a stale link.
pub(crate) fn point_link(link: &Path, target: &Path) -> Result<()> {
    if let Ok(current) = fs::read_link(link) {
        if current == target {
            return Ok(());
        }
        fs::remove_file(link).with_context(|| format!("cannot replace {}", link.display()))?;
    } else if link.exists() {
        bail!("{} exists and is not a symlink; remove it so setup can link libtorch there", link.display());
    }
    std::os::unix::fs::symlink(target, link)
        .with_context(|| format!("cannot link {} -> {}", link.display(), target.display()))
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
        assert!(err.contains("2.10.1+cu128") && err.contains("2.11.0"), "{err}");
    }

    #[test]
    fn a_folder_without_libtorch_is_named_in_the_error() {
        let dir = std::env::temp_dir().join(format!("xtask-not-libtorch-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let err = libtorch_version(&dir).unwrap_err().to_string();
        assert!(err.contains(&dir.display().to_string()) && err.contains("lib/"), "{err}");
        fs::write(dir.join("build-version"), "2.4.1\n").unwrap();
        assert_eq!(libtorch_version(&dir).unwrap(), "2.4.1");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn free_space_of_the_temp_dir_is_readable() {
        assert!(free_bytes(&std::env::temp_dir()).is_some_and(|b| b > 0));
    }
}
