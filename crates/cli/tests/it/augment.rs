//! `torchlight augment`: the PNGs and the contact sheet it writes, the same files on a second
//! run, torchvision's draws with `--torch-seed`, and bad input in one line.

use crate::{fails, ok, s, temp};
use std::path::Path;

/// Width and height from a PNG's IHDR chunk.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[1..4], b"PNG", "{} is not a PNG", path.display());
    let be = |o: usize| u32::from_be_bytes(bytes[o..o + 4].try_into().unwrap());
    (be(16), be(20))
}

fn pngs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".png"))
        .collect();
    names.sort();
    names
}

#[test]
fn augment_writes_every_view_and_a_contact_sheet() {
    let dir = temp("augment");
    ok(&["demo-data", "--out", &s(&dir.join("data")), "--per-class", "6"]);
    let data = s(&dir.join("data/target"));
    let run = |out: &str, extra: &[&str]| {
        let mut args = vec!["augment", "--data", &data, "--count", "3", "--n", "4", "--out", out];
        args.extend([
            "--set",
            "data.image_size=32",
            "--set",
            "data.auto_augment=ra",
            "--set",
            "data.random_erase=0.5",
        ]);
        args.extend(extra);
        ok(&args)
    };
    let out_a = dir.join("a");
    let stdout = run(&s(&out_a), &[]);
    assert!(stdout.contains("wrote 12 views of 3 images"), "{stdout}");
    assert!(
        stdout.contains("RandAugment") && stdout.contains("RandomErasing"),
        "the transform's steps: {stdout}"
    );
    assert!(stdout.contains("view k is epoch k+1"), "{stdout}");
    let names = pngs(&out_a);
    assert_eq!(names.len(), 13, "12 views and the contact sheet: {names:?}");
    for name in names.iter().filter(|n| *n != "contact_sheet.png") {
        assert_eq!(png_size(&out_a.join(name)), (32, 32), "{name}");
    }
    // Three rows of the original and four views, 32 px tiles with 4 px gaps.
    assert_eq!(png_size(&out_a.join("contact_sheet.png")), (5 * 32 + 6 * 4, 3 * 32 + 4 * 4));

    // The same draws give the same files; torchvision's draws give others.
    let out_b = dir.join("b");
    run(&s(&out_b), &[]);
    let out_t = dir.join("t");
    let stdout = run(&s(&out_t), &["--torch-seed", "3"]);
    assert!(stdout.contains("torch.manual_seed(3)"), "{stdout}");
    let read = |d: &Path, n: &str| std::fs::read(d.join(n)).unwrap();
    let view = names.iter().find(|n| n.ends_with("_v1.png")).unwrap();
    assert_eq!(read(&out_a, view), read(&out_b, view));
    assert_ne!(read(&out_a, view), read(&out_t, view));

    // Image files: one row each.
    let image = std::fs::read_dir(dir.join("data/target/train")).unwrap().next().unwrap().unwrap().path();
    let image = std::fs::read_dir(image).unwrap().next().unwrap().unwrap().path();
    let out_f = dir.join("f");
    let stdout = ok(&["augment", &s(&image), "--n", "2", "--torch-seed", "0", "--out", &s(&out_f)]);
    assert!(stdout.contains("wrote 2 views of 1 image "), "{stdout}");
    assert_eq!(pngs(&out_f).len(), 3);

    let not_image = dir.join("notes.txt");
    std::fs::write(&not_image, "not an image").unwrap();
    let line = fails(&["augment", &s(&not_image), "--out", &s(&dir.join("x"))]);
    assert!(line.contains("notes.txt"), "{line}");
    let line = fails(&["augment", "--out", &s(&dir.join("x"))]);
    assert!(line.contains("--data"), "{line}");
    let line = fails(&["augment", &s(&image), "--n", "0", "--out", &s(&dir.join("x"))]);
    assert!(line.contains("--n 0"), "{line}");
    let line = fails(&[
        "augment",
        "--data",
        &data,
        "--set",
        "data.auto_augment=strong",
        "--out",
        &s(&dir.join("x")),
    ]);
    assert!(line.contains("data.auto_augment"), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
