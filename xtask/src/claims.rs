//! Tests that hold claims the README, the guide and the facade's manifest make, checked
//! without building anything (`cargo tree` resolves features only; the rest reads files).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask sits in the workspace").to_path_buf()
}

/// The features cargo resolves for torchlight-vision when the facade is built with `features`
/// and no defaults, or `None` when vision is not in the tree.
fn vision_features(features: &str) -> Option<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root())
        .args(["tree", "--offline", "--quiet", "-p", "torchlight", "--no-default-features", "-e", "normal"])
        .args(["--prefix", "none", "-f", "{p} [{f}]", "--features", features])
        .output()
        .expect("cargo tree starts");
    assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text.lines().find(|l| l.starts_with("torchlight-vision "))?;
    Some(
        line.rsplit_once('[')
            .map_or("", |(_, f)| f.trim_end_matches(" (*)").trim_end_matches(']'))
            .to_string(),
    )
}

#[test]
fn the_facade_switches_visions_libjpeg_turbo_on_and_off() {
    assert_eq!(vision_features("vision").as_deref(), Some(""), "off without the facade's feature");
    assert_eq!(vision_features("vision,recipes").as_deref(), Some(""), "the recipes do not turn it on");
    assert_eq!(vision_features("vision,libjpeg-turbo").as_deref(), Some("libjpeg-turbo"));
    assert_eq!(vision_features("recipes,libjpeg-turbo").as_deref(), Some("libjpeg-turbo"));
    assert_eq!(vision_features("libjpeg-turbo"), None, "the decoder feature alone pulls no vision");
    let manifest = std::fs::read_to_string(root().join("crates/torchlight/Cargo.toml")).unwrap();
    let default = manifest.lines().find(|l| l.starts_with("default = ")).expect("a default feature list");
    assert!(default.contains("\"libjpeg-turbo\""), "on by default, as vision's is: {default}");
}

/// What a fresh clone does before `cargo xtask setup` (measured on one, with a per-user
/// libtorch cache present and no `.libtorch` link: `cargo test -p torchlight-tensor` fails in
/// torch-sys's build script with `torch/torch.h: No such file or directory` before
/// torchlight-build's one-line check runs): the README says that, and not that the build stops
/// in one line.
#[test]
fn the_readme_says_what_plain_cargo_test_does_before_setup() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let flat = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(!flat.contains("Before setup, plain `cargo test` stops at once"), "the old claim is back");
    let start = flat.find("Before setup, plain `cargo test` fails").expect("the README says what happens");
    let said = &flat[start..start + 400];
    for part in ["torch/torch.h: No such file or directory", "`cargo xtask setup` first"] {
        assert!(said.contains(part), "the README should name {part:?}: {said}");
    }
}

/// The guide describes the recipe as it is: any registered architecture, not ResNets only.
#[test]
fn the_guide_does_not_limit_the_recipe_to_resnets() {
    let guide = std::fs::read_to_string(root().join("docs/guide.md")).unwrap();
    let flat = guide.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(!flat.contains("ResNet-family"), "docs/guide.md limits the recipe to ResNets");
    assert!(flat.contains(
        "`torchlight train` is one recipe (`torchlight_recipes::image`): any registered architecture"
    ));
}
