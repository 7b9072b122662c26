//! The `torchlight-setup` command on a fake per-user cache: it finds the install there with no
//! LIBTORCH set, writes the project's `.cargo/config.toml`, says what the project still needs,
//! and a second run changes nothing. Nothing is downloaded: the cache holds a complete (fake)
//! full install, which setup prefers on every machine.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temp folder holding `cache/` (a fake complete full install) and `app/` (a Cargo project).
struct Scene {
    root: PathBuf,
}

impl Scene {
    fn new(tag: &str) -> Scene {
        let root = std::env::temp_dir().join(format!("torchlight-setup-it-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let install = root.join("cache/libtorch-2.11.0-full");
        fs::create_dir_all(install.join("torch/lib")).unwrap();
        fs::write(install.join("torch/lib/libtorch_cpu.so"), b"").unwrap();
        fs::write(install.join("torch/version.py"), "__version__ = '2.11.0+cu130'\n").unwrap();
        fs::write(install.join(".torchlight-complete"), "torch 2.11.0+cu130\nvariant full\n").unwrap();
        fs::create_dir_all(root.join("app/src")).unwrap();
        fs::write(root.join("app/Cargo.toml"), "[package]\nname = \"app\"\nversion = \"0.1.0\"\n").unwrap();
        Scene { root }
    }

    fn libtorch(&self) -> PathBuf {
        self.root.join("cache/libtorch-2.11.0-full/torch")
    }

    /// Runs `torchlight-setup args` in `dir` with only the fake cache in its environment.
    fn run(&self, dir: &Path, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_torchlight-setup"))
            .args(args)
            .current_dir(dir)
            .env_remove("LIBTORCH")
            .env("TORCHLIGHT_CACHE", self.root.join("cache"))
            .output()
            .expect("torchlight-setup runs")
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn setup_points_the_project_at_the_cached_libtorch() {
    let scene = Scene::new("project");
    let out = scene.run(&scene.root.join("app/src"), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let config = fs::read_to_string(scene.root.join("app/.cargo/config.toml")).unwrap();
    assert!(config.contains(&format!("LIBTORCH = \"{}\"", scene.libtorch().display())), "{config}");
    let said = stderr(&out);
    assert!(said.contains("2.11.0+cu130") && said.contains("full install in the per-user cache"), "{said}");
    assert!(
        said.contains("torchlight_build::link_libtorch()"),
        "the build-script step is spelled out: {said}"
    );

    let again = scene.run(&scene.root.join("app"), &[]);
    assert!(stderr(&again).contains("already names it"), "{}", stderr(&again));
    assert_eq!(fs::read_to_string(scene.root.join("app/.cargo/config.toml")).unwrap(), config);
}

#[test]
fn setup_outside_a_project_says_what_to_do_and_no_project_only_installs() {
    let scene = Scene::new("outside");
    let out = scene.run(&scene.root, &[]);
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(said.contains("no Cargo.toml") && said.contains("--project"), "{said}");
    let out = scene.run(&scene.root, &["--no-project"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("set LIBTORCH={}", scene.libtorch().display())),
        "{}",
        stderr(&out)
    );
    assert!(!scene.root.join(".cargo").exists());
}

#[test]
fn a_libtorch_of_another_version_is_refused() {
    let scene = Scene::new("version");
    let old = scene.root.join("old");
    fs::create_dir_all(old.join("lib")).unwrap();
    fs::write(old.join("build-version"), "2.4.1+cpu\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_torchlight-setup"))
        .args(["--no-project"])
        .env("LIBTORCH", &old)
        .env("TORCHLIGHT_CACHE", scene.root.join("cache"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(
        said.contains("2.4.1+cpu") && said.contains("2.11.0") && said.contains(&old.display().to_string()),
        "{said}"
    );
}

/// Runs `torchlight-setup --no-project` in `dir` with `TORCHLIGHT_CACHE` (and `XDG_CACHE_HOME`)
/// as given. pip is kept off the network (`PIP_NO_INDEX`), so a setup that wrongly goes on to
/// install fails instead of downloading.
fn setup_with(dir: &Path, cache: &std::ffi::OsStr, xdg: Option<&Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_torchlight-setup"));
    command.arg("--no-project").current_dir(dir).env("PIP_NO_INDEX", "1");
    command.env_remove("LIBTORCH").env("TORCHLIGHT_CACHE", cache);
    match xdg {
        Some(dir) => command.env("XDG_CACHE_HOME", dir),
        None => command.env_remove("XDG_CACHE_HOME"),
    };
    command.output().expect("torchlight-setup runs")
}

/// `TORCHLIGHT_CACHE=` (empty) is unset, not the current folder: the XDG cache is used.
#[test]
fn an_empty_torchlight_cache_counts_as_unset() {
    let scene = Scene::new("empty-var");
    let xdg = scene.root.join("xdg");
    fs::create_dir_all(&xdg).unwrap();
    fs::rename(scene.root.join("cache"), xdg.join("torchlight")).unwrap();
    let out = setup_with(&scene.root, "".as_ref(), Some(&xdg));
    let said = stderr(&out);
    assert!(out.status.success(), "{said}");
    let libtorch = xdg.join("torchlight/libtorch-2.11.0-full/torch");
    assert!(said.contains(&format!("set LIBTORCH={}", libtorch.display())), "{said}");
}

/// A cache that is a file, or a folder nobody may write, is one line saying so, before pip
/// runs (nothing is downloaded).
#[test]
fn a_cache_that_is_a_file_or_read_only_is_refused_before_downloading() {
    let scene = Scene::new("bad-cache");
    let file = scene.root.join("a-file");
    fs::write(&file, b"").unwrap();
    for cache in [file.clone(), file.join("below")] {
        let out = setup_with(&scene.root, cache.as_os_str(), None);
        let said = stderr(&out);
        assert!(!out.status.success(), "{said}");
        assert!(said.contains(&format!("{} is a file, not a folder", file.display())), "{said}");
        assert!(said.contains("TORCHLIGHT_CACHE") && !said.contains("os error 17"), "{said}");
    }
    // A read-only folder; as root permissions do not hold, so /sys (where even root makes no
    // file) stands in for one.
    let read_only = scene.root.join("read-only");
    fs::create_dir_all(&read_only).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&read_only, fs::Permissions::from_mode(0o555)).unwrap();
    let read_only = match fs::File::create(read_only.join("probe")) {
        Ok(_) => PathBuf::from("/sys"),
        Err(_) => read_only,
    };
    let out = setup_with(&scene.root, read_only.as_os_str(), None);
    let said = stderr(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains(&format!("cannot write into the cache folder {}", read_only.display())), "{said}");
    assert!(!said.contains("installing libtorch"), "nothing is downloaded: {said}");
    let _ = fs::set_permissions(scene.root.join("read-only"), fs::Permissions::from_mode(0o755));
}
