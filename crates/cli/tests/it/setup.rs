//! `torchlight setup` runs the shared installer: with a complete (fake) install in the cache and
//! no LIBTORCH, it names that install and writes it into the project's Cargo config.

use crate::temp;
use std::fs;
use std::process::Command;

#[test]
fn setup_names_the_cached_install_and_configures_the_project() {
    let dir = temp("setup");
    let install = dir.join("cache/libtorch-2.11.0-full");
    fs::create_dir_all(install.join("torch/lib")).unwrap();
    fs::write(install.join("torch/lib/libtorch_cpu.so"), b"").unwrap();
    fs::write(install.join("torch/version.py"), "__version__ = '2.11.0'\n").unwrap();
    fs::write(install.join(".torchlight-complete"), "torch 2.11.0\nvariant full\n").unwrap();
    fs::create_dir_all(dir.join("app")).unwrap();
    fs::write(
        dir.join("app/Cargo.toml"),
        "[package]\nname = \"app\"\n[build-dependencies]\ntorchlight-build = \"0.1\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_torchlight"))
        .args(["setup", "--project"])
        .arg(dir.join("app"))
        .env_remove("LIBTORCH")
        .env("TORCHLIGHT_CACHE", dir.join("cache"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let config = fs::read_to_string(dir.join("app/.cargo/config.toml")).unwrap();
    assert!(config.contains(&format!("LIBTORCH = \"{}\"", install.join("torch").display())), "{config}");
    assert!(said.contains("wrote LIBTORCH into"), "{said}");
    assert!(!said.contains("link_libtorch"), "a project with torchlight-build needs no hint: {said}");
    fs::remove_dir_all(&dir).unwrap();
}
