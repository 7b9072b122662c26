//! ImageFolder and SplitFolders on folders made in a temp dir: torchvision's class and sample
//! order, hidden files, errors naming paths, decoding through the Dataset trait.

use crate::{fixture, TempDir};
use std::path::Path;
use torchlight_base::seed::rng_from_seed;
use torchlight_data::{Buffer, DataError, Dataset};
use torchlight_vision::{
    decode_file, CenterCrop, Compose, Image, ImageFolder, Normalize, Resize, SplitFolders, ToTensor,
    VisionError,
};

/// torchvision 0.26's `IMG_EXTENSIONS` (torchlight's default adds `.gif`).
const TORCHVISION_EXTENSIONS: &[&str] =
    &[".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"];

fn touch(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, b"").unwrap();
}

fn write_png(path: &Path, w: u32, h: u32, value: u8) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    image::RgbImage::from_pixel(w, h, image::Rgb([value, value / 2, 255 - value])).save(path).unwrap();
}

#[test]
fn classes_and_sample_order_match_torchvision() {
    let dir = TempDir::new("order");
    let tree = std::fs::read_to_string(fixture("folder_tree.txt")).unwrap();
    for rel in tree.lines().filter(|l| !l.is_empty()) {
        touch(&dir.0.join(rel));
    }
    // Hidden entries torchlight ignores (torchvision would take `.ipynb_checkpoints` as a class).
    touch(&dir.0.join(".ipynb_checkpoints/x.png"));
    touch(&dir.0.join("apple/._x.jpeg"));
    touch(&dir.0.join("apple/.cache/y.png"));
    let ds = ImageFolder::with_extensions(&dir.0, TORCHVISION_EXTENSIONS).unwrap();
    let expected = std::fs::read_to_string(fixture("folder_samples.txt")).unwrap();
    let mut want_samples = Vec::new();
    let mut want_classes = Vec::new();
    for line in expected.lines() {
        let (head, rest) = line.split_once(' ').unwrap();
        if head == "classes" {
            want_classes = rest.split('|').map(str::to_owned).collect();
        } else {
            want_samples.push((rest.to_owned(), head.parse::<i64>().unwrap()));
        }
    }
    assert_eq!(ds.classes(), want_classes, "classes in torchvision's order");
    let got: Vec<(String, i64)> = ds
        .samples()
        .iter()
        .map(|(p, c)| (p.strip_prefix(&dir.0).unwrap().to_string_lossy().into_owned(), *c))
        .collect();
    assert_eq!(got, want_samples, "samples in torchvision's order");
    assert_eq!(ds.class_to_idx()["b c"], 2);
    assert_eq!(ds.targets(), want_samples.iter().map(|s| s.1).collect::<Vec<_>>());
    // The default extensions add .gif.
    let with_gif = ImageFolder::new(&dir.0).unwrap();
    assert_eq!(with_gif.len(), ds.len() + 1);
}

#[test]
fn get_decodes_and_transforms_through_the_dataset_trait() {
    let dir = TempDir::new("get");
    write_png(&dir.0.join("cat/a.png"), 40, 30, 10);
    write_png(&dir.0.join("dog/b.PNG"), 30, 40, 200);
    let raw = ImageFolder::new(&dir.0).unwrap();
    let mut rng = rng_from_seed(0);
    let (array, label) = raw.get(1, &mut rng).unwrap();
    assert_eq!((array.shape.as_slice(), label), (&[40usize, 30, 3][..], 1));
    assert!(matches!(&array.buffer, Buffer::U8(v) if v[..3] == [200, 100, 55]));
    let ds = raw.with_transform(
        Compose::default()
            .then(Resize::new(20))
            .then(CenterCrop::new(16))
            .then(ToTensor)
            .then(Normalize::imagenet()),
    );
    let (array, label) = ds.get(0, &mut rng).unwrap();
    assert_eq!((array.shape.as_slice(), label), (&[3usize, 16, 16][..], 0));
    let Buffer::F32(v) = &array.buffer else { panic!("F32 after Normalize") };
    let want = (10.0f32 / 255.0 - 0.485) / 0.229;
    assert!((v[0] - want).abs() < 1e-6, "{} vs {want}", v[0]);
    assert!(matches!(ds.get(2, &mut rng), Err(DataError::IndexOutOfRange { index: 2, len: 2 })));
}

#[test]
fn errors_name_the_path_at_fault() {
    let dir = TempDir::new("errors");
    let missing = dir.0.join("nope");
    let err = ImageFolder::new(&missing).unwrap_err();
    assert!(matches!(err, VisionError::MissingRoot { .. }) && err.to_string().contains("nope"), "{err}");

    let err = ImageFolder::new(&dir.0).unwrap_err();
    assert!(matches!(err, VisionError::NoClasses { .. }), "{err}");

    write_png(&dir.0.join("cat/a.png"), 4, 4, 1);
    touch(&dir.0.join("dog/readme.txt"));
    let err = ImageFolder::new(&dir.0).unwrap_err();
    assert!(matches!(&err, VisionError::EmptyClass { class, .. } if class == "dog"), "{err}");
    assert!(err.to_string().contains("dog"), "{err}");

    // Truncated and garbage files fail at `get`, as DataError::Sample with the path.
    let png = std::fs::read(dir.0.join("cat/a.png")).unwrap();
    std::fs::write(dir.0.join("dog/truncated.png"), &png[..png.len() / 2]).unwrap();
    let jpeg = std::fs::read(fixture("inputs/astronaut_jpeg.jpg")).unwrap();
    std::fs::write(dir.0.join("dog/truncated_2.jpg"), &jpeg[..jpeg.len() - 10]).unwrap();
    std::fs::write(dir.0.join("dog/zz_garbage.jpg"), b"this is not a jpeg").unwrap();
    let ds = ImageFolder::new(&dir.0).unwrap();
    assert!(ds.load(0).is_ok(), "the good image still loads");
    for index in [1, 2, 3] {
        match ds.get(index, &mut rng_from_seed(0)) {
            Err(DataError::Sample { index: i, path: Some(p), message }) => {
                assert_eq!(i, index);
                assert!(message.contains(p.to_str().unwrap()), "{message}");
            }
            other => panic!("expected a sample error for {:?}, got {other:?}", ds.samples()[index].0),
        }
    }
}

#[test]
fn split_folders_share_one_class_map_and_reject_different_classes() {
    let dir = TempDir::new("splits");
    for split in ["train", "val", "test"] {
        for (i, class) in ["ant", "bee", "cat"].iter().enumerate() {
            write_png(&dir.0.join(split).join(class).join(format!("{split}{i}.png")), 3, 3, i as u8);
        }
    }
    let splits = SplitFolders::open(&dir.0).unwrap();
    assert_eq!(splits.classes(), ["ant", "bee", "cat"]);
    let val = splits.val.as_ref().unwrap();
    assert_eq!(val.targets(), [0, 1, 2]);
    assert_eq!(splits.test.as_ref().unwrap().classes(), splits.train.classes());

    std::fs::remove_dir_all(dir.0.join("test/bee")).unwrap();
    write_png(&dir.0.join("test/bat/x.png"), 3, 3, 0);
    let err = SplitFolders::open(&dir.0).unwrap_err();
    match &err {
        VisionError::ClassMismatch { path, missing, extra } => {
            assert!(path.ends_with("test"), "{err}");
            assert_eq!(
                (missing.as_slice(), extra.as_slice()),
                (&["bee".to_owned()][..], &["bat".to_owned()][..])
            );
        }
        other => panic!("expected ClassMismatch, got {other}"),
    }
    std::fs::remove_dir_all(dir.0.join("train")).unwrap();
    assert!(matches!(SplitFolders::open(&dir.0), Err(VisionError::MissingSplit { .. })));
}

#[test]
fn decodes_odd_formats_to_rgb_and_applies_exif_orientation() {
    // Gray, 16-bit and alpha images made here (the PIL-made ones are in cases.txt).
    let dir = TempDir::new("formats");
    let gray16 = image::ImageBuffer::<image::Luma<u16>, _>::from_fn(3, 2, |x, y| {
        image::Luma([(x * 20000 + y * 3) as u16])
    });
    gray16.save(dir.0.join("g16.png")).unwrap();
    let img = decode_file(dir.0.join("g16.png")).unwrap();
    assert_eq!((img.width(), img.height(), img.channels()), (3, 2, 3));
    assert_eq!(img.pixel(1, 0), [255, 255, 255], "16-bit gray clipped to 255 as PIL's I;16 -> RGB does");
    assert_eq!(img.pixel(0, 1), [3, 3, 3], "not scaled: 3 stays 3");
    let la = image::ImageBuffer::<image::LumaA<u8>, _>::from_pixel(2, 2, image::LumaA([90, 0]));
    la.save(dir.0.join("la.png")).unwrap();
    assert_eq!(
        decode_file(dir.0.join("la.png")).unwrap(),
        Image::filled(2, 2, 3, 90),
        "alpha dropped, not composited"
    );

    // EXIF orientation 6: stored 64x48, shown (and decoded) 48x64.
    let img = decode_file(fixture("inputs/chelsea_exif6.jpg")).unwrap();
    assert_eq!((img.width(), img.height()), (48, 64), "EXIF orientation applied");
}

/// Directory symlinks inside a class folder (torchvision follows them with
/// `os.walk(followlinks=True)`, and loops on a cycle): a link back to an ancestor (a cycle) or
/// into another part of the dataset (another class, another split) is an error naming the link
/// and its target; a link to a folder outside the dataset, or within the same class, is
/// followed, and a folder reached twice is read once.
#[test]
fn symlinks_that_would_mislabel_or_loop_are_errors_naming_them() {
    use std::os::unix::fs::symlink;
    let dir = TempDir::new("links");
    let root = dir.0.join("data/train");
    touch(&root.join("cat/a.png"));
    touch(&root.join("cat/sub/b.png"));
    touch(&root.join("dog/c.png"));
    touch(&dir.0.join("data/val/cat/v.png"));
    touch(&dir.0.join("data/val/dog/w.png"));
    touch(&dir.0.join("elsewhere/more/d.png"));
    let ok = ImageFolder::new(&root).unwrap();
    assert_eq!(ok.samples().len(), 3);

    // Allowed: a folder outside the dataset, and a second way into a folder of the same class.
    symlink(dir.0.join("elsewhere/more"), root.join("cat/more")).unwrap();
    symlink("sub", root.join("cat/again")).unwrap();
    let ds = ImageFolder::new(&root).unwrap();
    let names: Vec<String> = ds
        .samples()
        .iter()
        .map(|(p, c)| format!("{c}:{}", p.strip_prefix(&root).unwrap().display()))
        .collect();
    assert_eq!(names, ["0:cat/a.png", "0:cat/again/b.png", "0:cat/more/d.png", "1:dog/c.png"]);
    std::fs::remove_file(root.join("cat/again")).unwrap();

    let refused = [
        ("loop", "..", "leads back to"),
        ("self", ".", "leads back to"),
        ("dogs", "../../dog", "another part of the dataset"),
    ];
    for (name, target, reason) in refused {
        let link = root.join("cat/sub").join(name);
        symlink(target, &link).unwrap();
        let err = ImageFolder::new(&root).map(|_| name).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, VisionError::Symlink { .. }), "{name}: {err:?}");
        assert!(text.contains(&link.display().to_string()) && text.contains(reason), "{name}: {text}");
        std::fs::remove_file(&link).unwrap();
    }
    // A link from train into val: outside a lone ImageFolder's root, but the split layout
    // guards the whole data root.
    let link = root.join("cat/sub/up");
    symlink("../../../val/dog", &link).unwrap();
    assert!(ImageFolder::new(&root).is_ok());
    let err = SplitFolders::open(dir.0.join("data")).unwrap_err().to_string();
    assert!(
        err.contains(&link.display().to_string()) && err.contains("another part of the dataset"),
        "{err}"
    );
    std::fs::remove_file(&link).unwrap();

    // A class folder that is a link to another class's folder would label dog images twice.
    symlink("dog", root.join("kitten")).unwrap();
    let err = ImageFolder::new(&root).unwrap_err().to_string();
    assert!(err.contains("kitten") && err.contains("another part of the dataset"), "{err}");
}
