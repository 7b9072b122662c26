//! Vision's build script: links libtorch's `lib/` as an rpath for the test binaries when
//! `LIBTORCH` is set, and, with the `libjpeg-turbo` feature (on by default), compiles the C
//! shim over libjpeg (`csrc/jpeg_shim.c`) and links libjpeg-turbo.
//!
//! Vision needs no libtorch. But in this workspace's `cargo test --workspace`, Cargo unifies
//! features across members, so torchlight-data is built with `tch` and libtorch gets linked
//! into this crate's test binaries too; when `LIBTORCH` names a libtorch, give them its `lib/`
//! folder as an rpath so they start. Nothing happens without `LIBTORCH` (no libtorch anywhere).
//!
//! libjpeg-turbo is found in `TORCHLIGHT_LIBJPEG_DIR` (a prefix with `include/` and `lib/`, or
//! an unpacked Debian package tree with `usr/include` and `usr/lib/<triple>`, which is what
//! `cargo xtask setup` makes as `.libjpeg` when the system has no headers), then in the system
//! folders. The static `libjpeg.a` is preferred, so binaries built on top of vision carry the
//! decoder and need no library at run time; the shared one is linked (with an rpath for a
//! non-system folder) when there is no static one.

use std::env;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if let Some(libtorch) = env::var_os("LIBTORCH") {
        let lib = Path::new(&libtorch).join("lib");
        if lib.is_dir() {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
        }
    }
    if env::var_os("CARGO_FEATURE_LIBJPEG_TURBO").is_some() {
        build_jpeg_shim();
    }
}

/// Where libjpeg's headers and library were found.
struct Libjpeg {
    /// Folders to add to the include path (empty for the compiler's own).
    includes: Vec<PathBuf>,
    /// The folder holding `libjpeg.a` or `libjpeg.so`/`.dylib`.
    lib: PathBuf,
    /// Whether `libjpeg.a` is there.
    static_lib: bool,
    /// Whether `lib` is outside the linker's default folders (needs an rpath when shared).
    custom: bool,
}

fn build_jpeg_shim() {
    println!("cargo:rerun-if-changed=csrc/jpeg_shim.c");
    println!("cargo:rerun-if-env-changed=TORCHLIGHT_LIBJPEG_DIR");
    let found = find_libjpeg().unwrap_or_else(|searched| {
        println!(
            "cargo::error=torchlight-vision's `libjpeg-turbo` feature needs libjpeg-turbo's headers and library \
             (jpeglib.h, libjpeg), not found in {searched}: install them (Debian: `apt-get install \
             libjpeg62-turbo-dev`; Ubuntu: `apt-get install libjpeg-turbo8-dev`; macOS: `brew install \
             jpeg-turbo`), or run `cargo xtask setup` in the Torchlight workspace (fetches Debian's package \
             without root), or set TORCHLIGHT_LIBJPEG_DIR to a prefix holding include/jpeglib.h and lib/libjpeg.*, \
             or build torchlight-vision with `default-features = false` (the pure-Rust zune-jpeg decoder)"
        );
        std::process::exit(0);
    });
    let mut build = cc::Build::new();
    build.file("csrc/jpeg_shim.c").pic(true).warnings(true);
    for include in &found.includes {
        build.include(include);
    }
    build.compile("torchlight_jpeg_shim");
    // After the shim, so the linker resolves the shim's references to libjpeg.
    println!("cargo:rustc-link-search=native={}", found.lib.display());
    if found.static_lib {
        println!("cargo:rustc-link-lib=static=jpeg");
    } else {
        println!("cargo:rustc-link-lib=dylib=jpeg");
        if found.custom {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", found.lib.display());
        }
    }
}

/// The Debian multiarch folder name for the target, e.g. `x86_64-linux-gnu`.
fn multiarch() -> String {
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_env = env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let arch = match arch.as_str() {
        "x86" => "i386",
        "arm" => "arm",
        other => other,
    };
    format!("{arch}-{os}-{target_env}")
}

/// The first prefix holding both `jpeglib.h` and `libjpeg`, or a description of where it looked.
fn find_libjpeg() -> Result<Libjpeg, String> {
    let triple = multiarch();
    let mut prefixes: Vec<(PathBuf, bool)> = Vec::new();
    if let Some(dir) = env::var_os("TORCHLIGHT_LIBJPEG_DIR").map(PathBuf::from).filter(|d| d.is_dir()) {
        prefixes.push((dir.join("usr"), true));
        prefixes.push((dir, true));
    }
    for system in ["/usr", "/usr/local", "/opt/homebrew/opt/jpeg-turbo", "/usr/local/opt/jpeg-turbo"] {
        prefixes.push((PathBuf::from(system), system.contains("jpeg-turbo")));
    }
    let mut searched = Vec::new();
    for (prefix, custom) in prefixes {
        searched.push(prefix.display().to_string());
        let include = prefix.join("include");
        if !include.join("jpeglib.h").is_file() {
            continue;
        }
        let libs = [prefix.join("lib").join(&triple), prefix.join("lib"), prefix.join("lib64")];
        let names = ["libjpeg.a", "libjpeg.so", "libjpeg.dylib"];
        let Some(lib) = libs.iter().find(|l| names.iter().any(|n| l.join(n).exists())) else { continue };
        println!("cargo:rerun-if-changed={}", include.join("jpeglib.h").display());
        let mut includes = vec![include.clone()];
        if include.join(&triple).is_dir() {
            includes.push(include.join(&triple));
        }
        let system_default = prefix == Path::new("/usr");
        return Ok(Libjpeg {
            includes: if system_default { Vec::new() } else { includes },
            lib: lib.clone(),
            static_lib: lib.join("libjpeg.a").is_file(),
            custom: custom || !system_default,
        });
    }
    Err(searched.join(", "))
}
