//! Installing libtorch 2.11.0 from PyPI's torch wheel into the per-user cache, once.
//!
//! The install lives in a per-user cache (`$TORCHLIGHT_CACHE`, else
//! `$XDG_CACHE_HOME/torchlight`, else `~/.cache/torchlight`), never in a project, so every
//! project and every clone of Torchlight shares it. A `LIBTORCH` the user names is honoured
//! instead, after a version check.

use crate::error::{Result, SetupError};
use crate::version::{check_version, libtorch_version, TORCH_VERSION};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// Which libtorch install: the cache holds at most one of each.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Variant {
    /// CPU machines: ~1.2 GB, enough to link and run on CPU.
    Lean,
    /// Machines with an NVIDIA GPU: torch with all its CUDA dependencies (~4.7 GB).
    Full,
}

impl Variant {
    /// `lean` or `full`, as in the cache folder's name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Lean => "lean",
            Variant::Full => "full",
        }
    }
}

/// Where the libtorch in use came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The `LIBTORCH` the caller passed in ([`SetupOptions::libtorch`]).
    User,
    /// The per-user cache, already complete before this call.
    Cached(Variant),
    /// The per-user cache, installed by this call.
    Installed(Variant),
}

/// What [`ensure_libtorch`] should do.
#[derive(Clone, Debug)]
pub struct SetupOptions {
    /// Force the full CUDA install even without a GPU (`--cuda`).
    pub cuda: bool,
    /// A libtorch the user chose (their `LIBTORCH`): checked and used instead of the cache.
    pub libtorch: Option<PathBuf>,
    /// The command to suggest in messages that say "run ... again", e.g. `cargo xtask setup`.
    pub command: &'static str,
}

impl SetupOptions {
    /// Lean on CPU machines, full with a GPU; no libtorch of the user's; messages name `command`.
    pub fn new(command: &'static str) -> Self {
        SetupOptions { cuda: false, libtorch: None, command }
    }
}

/// A libtorch ready to build against.
#[derive(Clone, Debug)]
pub struct Libtorch {
    /// The folder holding `lib/` and `include/`: the value `LIBTORCH` must have.
    pub path: PathBuf,
    /// Its version, e.g. `2.11.0+cu130`.
    pub version: String,
    /// Where it came from.
    pub origin: Origin,
    /// Whether it has CUDA (`lib/libtorch_cuda.so`).
    pub cuda: bool,
}

/// The per-user cache: `$TORCHLIGHT_CACHE`, else `$XDG_CACHE_HOME/torchlight`, else
/// `~/.cache/torchlight`. A variable set to the empty string counts as unset (as the XDG
/// specification says of `XDG_CACHE_HOME`), not as the current folder.
///
/// # Errors
/// [`SetupError::NoCacheDir`] when none of the three is set; [`SetupError::NotAFolder`] when
/// the cache, or a folder above it, is a file.
pub fn cache_root() -> Result<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let (root, variable) = if let Some(dir) = var("TORCHLIGHT_CACHE") {
        (dir, "TORCHLIGHT_CACHE")
    } else if let Some(dir) = var("XDG_CACHE_HOME") {
        (dir.join("torchlight"), "XDG_CACHE_HOME")
    } else {
        (var("HOME").ok_or(SetupError::NoCacheDir)?.join(".cache").join("torchlight"), "HOME")
    };
    if let Some(file) = root.ancestors().find(|p| p.is_file()) {
        return Err(SetupError::NotAFolder { path: file.to_path_buf(), variable });
    }
    Ok(root)
}

/// The cache folder of `variant`; libtorch itself is its `torch/` subfolder.
pub fn cache_dir(variant: Variant) -> Result<PathBuf> {
    Ok(cache_root()?.join(format!("libtorch-{TORCH_VERSION}-{}", variant.name())))
}

/// Makes libtorch 2.11.0 available and says where it is: the user's `LIBTORCH` after a version
/// check, else the cache's install, installing it first when missing (lean on CPU machines,
/// full where an NVIDIA driver is loaded or `cuda` is set). A second call is a no-op.
pub fn ensure_libtorch(options: &SetupOptions) -> Result<Libtorch> {
    if let Some(user) = &options.libtorch {
        return checked(user.clone(), Origin::User);
    }
    let full_dir = cache_dir(Variant::Full)?;
    // The full install is a superset of the lean one, so it serves CPU machines too.
    let variant =
        if options.cuda || gpu_present() || is_complete(&full_dir) { Variant::Full } else { Variant::Lean };
    let dir = cache_dir(variant)?;
    let origin = if is_complete(&dir) {
        Origin::Cached(variant)
    } else {
        install(&dir, variant, options.command)?;
        Origin::Installed(variant)
    };
    checked(dir.join("torch"), origin)
}

fn checked(path: PathBuf, origin: Origin) -> Result<Libtorch> {
    let version = libtorch_version(&path)?;
    check_version(&version, &path)?;
    let cuda = path.join("lib/libtorch_cuda.so").exists();
    Ok(Libtorch { path, version, origin, cuda })
}

/// An NVIDIA driver is loaded (the same signal PyTorch's CUDA build relies on).
pub fn gpu_present() -> bool {
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

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SetupError + '_ {
    move |error| SetupError::Io { path: path.to_path_buf(), error }
}

fn install(dir: &Path, variant: Variant, command: &'static str) -> Result<()> {
    let parent = dir.parent().ok_or(SetupError::NoCacheDir)?;
    fs::create_dir_all(parent).map_err(io(parent))?;
    check_writable(parent)?;
    check_python(command)?;
    let needed = match variant {
        Variant::Lean => LEAN_BYTES_NEEDED,
        Variant::Full => FULL_BYTES_NEEDED,
    };
    check_free_space(parent, needed)?;

    // Install next to the final place, then rename: an interrupted install never looks complete.
    let partial = dir.with_extension("partial");
    if partial.exists() {
        fs::remove_dir_all(&partial).map_err(io(&partial))?;
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
    let status = pip.status().map_err(|_| SetupError::NoPython { command })?;
    if !status.success() {
        return Err(SetupError::Pip { packages: packages.join(" "), status: status.to_string(), command });
    }
    let version = libtorch_version(&partial.join("torch"))?;
    check_version(&version, &partial)?;
    let marker = partial.join(COMPLETE_MARKER);
    fs::write(&marker, format!("torch {version}\nvariant {}\n", variant.name())).map_err(io(&marker))?;
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(io(dir))?;
    }
    fs::rename(&partial, dir).map_err(io(dir))
}

/// Fails unless a file can be made in `dir` (a read-only cache is told before anything is
/// downloaded, not by pip after): the probe file is made and removed at once.
pub fn check_writable(dir: &Path) -> Result<()> {
    let probe = dir.join(format!(".torchlight-write-probe-{}", std::process::id()));
    match fs::File::create(&probe) {
        Ok(_) => {
            let _ = fs::remove_file(&probe);
            Ok(())
        }
        Err(error) => Err(SetupError::NotWritable { dir: dir.to_path_buf(), error }),
    }
}

/// Fails unless `python3 -m pip` runs; `command` is what the message says to run afterwards.
pub fn check_python(command: &'static str) -> Result<()> {
    let ok = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(SetupError::NoPython { command })
    }
}

/// Fails when the file system holding `dir` has less than `needed` bytes free; goes ahead
/// (with a note) when the free space cannot be read.
pub fn check_free_space(dir: &Path, needed: u64) -> Result<()> {
    let Some(available) = free_bytes(dir) else {
        eprintln!("setup: could not read the free space of {} (df failed); going ahead", dir.display());
        return Ok(());
    };
    if available < needed {
        return Err(SetupError::DiskSpace {
            dir: dir.to_path_buf(),
            needed_mib: needed >> 20,
            free_mib: available >> 20,
        });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_of_the_temp_dir_is_readable() {
        assert!(free_bytes(&std::env::temp_dir()).is_some_and(|b| b > 0));
    }

    #[test]
    fn a_disk_short_of_space_is_refused_with_both_figures() {
        let err = check_free_space(&std::env::temp_dir(), u64::MAX >> 1).unwrap_err().to_string();
        assert!(err.contains("MiB is free") && err.contains("TORCHLIGHT_CACHE"), "{err}");
    }
}
