//! `ImageFolder`: a dataset of `root/<class>/<image>` files labelled by folder, like
//! `torchvision.datasets.ImageFolder`, and `SplitFolders` for a `train/ val/ test/` layout.

use crate::crop_decode::load_transformed;
use crate::decode::{decode_file_with, IMG_EXTENSIONS};
use crate::decode_options::DecodeOptions;
use crate::error::{Result, VisionError};
use crate::image::Image;
use crate::transform::Transform;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use torchlight_base::seed::Rng;
use torchlight_data::{Array, DataError, Dataset};

/// Images labelled by the folder they sit in: `root/<class>/**/<image>`.
///
/// Matches `torchvision.datasets.ImageFolder`:
/// - classes are the sub-folders of `root` (symlinks followed), sorted by name in code-point
///   order, and numbered from 0 in that order (`class_to_idx`);
/// - a class's images are every file under its folder, recursively, whose name ends in one of
///   the extensions (case-insensitive, [`IMG_EXTENSIONS`] by default), ordered as torchvision's
///   `sorted(os.walk(...))` orders them: by folder path, then by file name.
///
/// Departures, all deliberate: names starting with `.` (`.DS_Store`, `._x.jpg` AppleDouble
/// files, `.ipynb_checkpoints/`) are ignored, as class folders and as files; decoding applies
/// the EXIF orientation by default ([`with_exif_transpose`](ImageFolder::with_exif_transpose)
/// `(false)` gives torchvision's bytes; see [`decode_file`](crate::decode_file)); a TIFF in a
/// variant PIL reads and this crate does not (LZMA, CIELab, ...) is refused by the scan,
/// naming file and feature; and directory symlinks are
/// followed only where they cannot loop or mislabel: a link back to its own folder or an
/// ancestor (a cycle, which torchvision's `os.walk(followlinks=True)` goes round until the
/// path is too long) or into another class of the dataset (or another split, for
/// [`SplitFolders`]) is a [`VisionError::Symlink`] naming it, while links to folders outside
/// the dataset are followed. A folder reachable by several paths is read once, under the
/// first path in sorted order (torchvision lists its files once per path).
///
/// As a [`Dataset`], `get` yields `(Array, class_index)`: without a transform the Array is the
/// decoded image as U8 `[H, W, 3]`; with one it is whatever the transform ends with (F32
/// `[C, H, W]` after `ToTensor`/`Normalize`, U8 `[H, W, C]` otherwise). A file that cannot be
/// decoded becomes `DataError::Sample` with its index and path. When the transform has a
/// [`leading_crop`](crate::Transform::leading_crop) (a crop whose box follows from the image
/// size and the draws: [`RandomResizedCrop`](crate::RandomResizedCrop) or
/// [`CenterCrop`](crate::CenterCrop), alone or first in a [`Compose`](crate::Compose), or a
/// transform of your own) and the file is a JPEG that libjpeg-turbo decodes upright, only the
/// box is decoded (see [`decode_bytes_crop`](crate::decode_bytes_crop)): the sample and the
/// random draws are the same as decoding the whole file.
#[derive(Clone)]
pub struct ImageFolder {
    root: PathBuf,
    classes: Arc<Vec<String>>,
    samples: Vec<(PathBuf, i64)>,
    transform: Option<Arc<dyn Transform>>,
    decode: DecodeOptions,
}

impl fmt::Debug for ImageFolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImageFolder")
            .field("root", &self.root)
            .field("classes", &self.classes)
            .field("len", &self.samples.len())
            .field("transform", &self.transform)
            .field("decode", &self.decode)
            .finish()
    }
}

impl ImageFolder {
    /// Scans `root` with the default [`IMG_EXTENSIONS`].
    ///
    /// # Errors
    /// [`VisionError::MissingRoot`] if `root` is not a folder, [`VisionError::NoClasses`] if it
    /// has no class folders, [`VisionError::EmptyClass`] naming the first class folder without
    /// images, [`VisionError::Io`] for an unreadable folder, [`VisionError::Unsupported`] for a
    /// TIFF in a variant PIL reads and this crate does not (naming the file and the feature).
    pub fn new(root: impl AsRef<Path>) -> Result<Self> {
        Self::with_extensions(root, IMG_EXTENSIONS)
    }

    /// Scans `root`, keeping files whose names end in one of `extensions` (e.g. `".jpg"`,
    /// compared case-insensitively).
    pub fn with_extensions(root: impl AsRef<Path>, extensions: &[&str]) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        Self::scan(root.clone(), &root, extensions)
    }

    /// Scans `root`, refusing directory symlinks that lead elsewhere inside `guard` (the
    /// dataset: `root` itself, or the data root of a split layout).
    fn scan(root: PathBuf, guard: &Path, extensions: &[&str]) -> Result<Self> {
        let classes = find_classes(&root)?;
        let samples = make_dataset(&root, guard, &classes, extensions)?;
        Ok(ImageFolder {
            root,
            classes: Arc::new(classes),
            samples,
            transform: None,
            decode: DecodeOptions::default(),
        })
    }

    /// Scans `root` against a given class list (used by [`SplitFolders`], so all splits share
    /// one numbering). `root`'s class folders must be exactly `classes`.
    fn with_classes(
        root: PathBuf,
        guard: &Path,
        classes: Arc<Vec<String>>,
        extensions: &[&str],
    ) -> Result<Self> {
        let found = find_classes(&root)?;
        if found != *classes {
            let have: HashSet<&String> = found.iter().collect();
            let want: HashSet<&String> = classes.iter().collect();
            let missing = classes.iter().filter(|c| !have.contains(c)).cloned().collect();
            let extra = found.iter().filter(|c| !want.contains(c)).cloned().collect();
            return Err(VisionError::ClassMismatch { path: root, missing, extra });
        }
        let samples = make_dataset(&root, guard, &classes, extensions)?;
        Ok(ImageFolder { root, classes, samples, transform: None, decode: DecodeOptions::default() })
    }

    /// The same dataset with `transform` applied to each decoded image (torchvision's
    /// `transform=` argument), replacing any previous one.
    pub fn with_transform(mut self, transform: impl Transform + 'static) -> Self {
        self.transform = Some(Arc::new(transform));
        self
    }

    /// The same dataset with another pixel limit for decoding (see [`DecodeOptions`]; the
    /// default refuses images over [`DEFAULT_MAX_IMAGE_PIXELS`](crate::DEFAULT_MAX_IMAGE_PIXELS),
    /// `None` lifts the limit). A refused file fails its sample like a corrupt one.
    pub fn with_max_pixels(mut self, max_pixels: Option<u64>) -> Self {
        self.decode = self.decode.with_max_pixels(max_pixels);
        self
    }

    /// The same dataset decoding with the EXIF orientation applied (`true`, the default) or
    /// ignored as torchvision's loader ignores it (`false`, bit-identical to
    /// `Image.open(f).convert("RGB")`); see [`DecodeOptions::exif_transpose`].
    pub fn with_exif_transpose(mut self, exif_transpose: bool) -> Self {
        self.decode = self.decode.with_exif_transpose(exif_transpose);
        self
    }

    /// How the files are decoded.
    pub fn decode_options(&self) -> &DecodeOptions {
        &self.decode
    }

    /// The folder scanned.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The class names, sorted; a class's index is its position here.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// Class name to index, like torchvision's `class_to_idx`.
    pub fn class_to_idx(&self) -> BTreeMap<String, i64> {
        self.classes.iter().enumerate().map(|(i, c)| (c.clone(), i as i64)).collect()
    }

    /// Every `(path, class_index)`, in torchvision's order (its `samples`).
    pub fn samples(&self) -> &[(PathBuf, i64)] {
        &self.samples
    }

    /// The class index of every sample (torchvision's `targets`).
    pub fn targets(&self) -> Vec<i64> {
        self.samples.iter().map(|(_, t)| *t).collect()
    }

    /// Decodes sample `index` without the transform.
    ///
    /// # Errors
    /// [`VisionError::Decode`] or [`VisionError::Io`] naming the file.
    ///
    /// # Panics
    /// If `index >= len()`.
    pub fn load(&self, index: usize) -> Result<(Image, i64)> {
        let (path, target) = &self.samples[index];
        Ok((decode_file_with(path, &self.decode)?, *target))
    }
}

impl Dataset for ImageFolder {
    type Item = (Array, i64);

    fn len(&self) -> usize {
        self.samples.len()
    }

    fn get(&self, index: usize, rng: &mut Rng) -> torchlight_data::Result<(Array, i64)> {
        let Some((path, target)) = self.samples.get(index) else {
            return Err(DataError::IndexOutOfRange { index, len: self.samples.len() });
        };
        let to_sample_error =
            |e: VisionError| DataError::Sample { index, path: Some(path.clone()), message: e.to_string() };
        let array = match &self.transform {
            None => decode_file_with(path, &self.decode).map_err(to_sample_error)?.into_array(),
            // Decodes only the crop box when the transform has a leading crop.
            Some(t) => {
                load_transformed(path, &self.decode, t.as_ref(), rng).map_err(to_sample_error)?.into_array()
            }
        };
        Ok((array, *target))
    }
}

/// A `root/{train,val,test}/<class>/<image>` layout loaded as datasets that share one class
/// numbering (the `train` split's).
#[derive(Debug, Clone)]
pub struct SplitFolders {
    /// `root/train`.
    pub train: ImageFolder,
    /// `root/val`, when present.
    pub val: Option<ImageFolder>,
    /// `root/test`, when present.
    pub test: Option<ImageFolder>,
}

impl SplitFolders {
    /// Loads `root/train` (required), `root/val` and `root/test` (each optional) with the
    /// default extensions.
    ///
    /// # Errors
    /// [`VisionError::MissingRoot`] for `root`, [`VisionError::MissingSplit`] without
    /// `root/train`, [`VisionError::ClassMismatch`] when `val` or `test` has other class
    /// folders than `train` (naming the missing and extra ones), and anything
    /// [`ImageFolder::new`] reports for a split.
    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        Self::open_with_extensions(root, IMG_EXTENSIONS)
    }

    /// [`SplitFolders::open`] with the given extensions.
    pub fn open_with_extensions(root: impl AsRef<Path>, extensions: &[&str]) -> Result<Self> {
        let root = root.as_ref();
        if !root.is_dir() {
            return Err(VisionError::MissingRoot { path: root.to_path_buf() });
        }
        let train_root = root.join("train");
        if !train_root.is_dir() {
            return Err(VisionError::MissingSplit { path: train_root });
        }
        let train = ImageFolder::scan(train_root, root, extensions)?;
        let other = |name: &str| -> Result<Option<ImageFolder>> {
            let dir = root.join(name);
            if !dir.is_dir() {
                return Ok(None);
            }
            ImageFolder::with_classes(dir, root, train.classes.clone(), extensions).map(Some)
        };
        let val = other("val")?;
        let test = other("test")?;
        Ok(SplitFolders { train, val, test })
    }

    /// The class names all splits share.
    pub fn classes(&self) -> &[String] {
        self.train.classes()
    }

    /// Every split applying the EXIF orientation or not (see
    /// [`ImageFolder::with_exif_transpose`]).
    pub fn with_exif_transpose(self, exif_transpose: bool) -> Self {
        SplitFolders {
            train: self.train.with_exif_transpose(exif_transpose),
            val: self.val.map(|f| f.with_exif_transpose(exif_transpose)),
            test: self.test.map(|f| f.with_exif_transpose(exif_transpose)),
        }
    }

    /// Every split with the pixel limit `max_pixels` (see [`ImageFolder::with_max_pixels`]).
    pub fn with_max_pixels(self, max_pixels: Option<u64>) -> Self {
        SplitFolders {
            train: self.train.with_max_pixels(max_pixels),
            val: self.val.map(|f| f.with_max_pixels(max_pixels)),
            test: self.test.map(|f| f.with_max_pixels(max_pixels)),
        }
    }
}

fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().first() == Some(&b'.')
}

fn read_dir(dir: &Path) -> Result<Vec<std::fs::DirEntry>> {
    let io = |error| VisionError::Io { path: dir.to_path_buf(), error };
    std::fs::read_dir(dir).map_err(io)?.collect::<std::io::Result<Vec<_>>>().map_err(io)
}

/// torchvision's `find_classes`: the sorted names of `root`'s sub-folders (not hidden).
fn find_classes(root: &Path) -> Result<Vec<String>> {
    if !root.is_dir() {
        return Err(VisionError::MissingRoot { path: root.to_path_buf() });
    }
    let mut classes = Vec::new();
    for entry in read_dir(root)? {
        let path = entry.path();
        // `Path::is_dir` follows symlinks, as Python's `DirEntry.is_dir()` does.
        if is_hidden(&entry.file_name()) || !path.is_dir() {
            continue;
        }
        let name = entry.file_name().into_string().map_err(|_| VisionError::NonUtf8Name { path })?;
        classes.push(name);
    }
    if classes.is_empty() {
        return Err(VisionError::NoClasses { root: root.to_path_buf() });
    }
    // Rust orders `String`s by UTF-8 bytes, which is Python's code-point order.
    classes.sort();
    Ok(classes)
}

/// Refuses, at the scan, an image file in a variant PIL reads but this crate does not decode,
/// so the dataset fails before epoch 1 rather than at a sample: TIFFs (named `.tif`/`.tiff`)
/// are read and checked (see [`VisionError::Unsupported`]); other formats decode everything
/// PIL does.
fn refuse_unsupported(path: &Path) -> Result<()> {
    let lower = path.extension().map(|e| e.to_string_lossy().to_lowercase());
    if !matches!(lower.as_deref(), Some("tif" | "tiff")) {
        return Ok(());
    }
    let bytes = std::fs::read(path).map_err(|error| VisionError::Io { path: path.to_path_buf(), error })?;
    match crate::tiff::unsupported_feature(&bytes) {
        Some(feature) => Err(VisionError::Unsupported { path: path.to_path_buf(), feature }),
        None => Ok(()),
    }
}

fn has_extension(name: &std::ffi::OsStr, extensions: &[String]) -> bool {
    let lower = name.to_string_lossy().to_lowercase();
    extensions.iter().any(|e| lower.ends_with(e.as_str()))
}

/// torchvision's `make_dataset`: for each class in order, its files in `sorted(os.walk)` order.
///
/// Folders are visited in increasing path order, so when symlinks make one real folder
/// reachable by several paths it is read once, under its first path in that order (os.walk
/// would list its files once per path). Directory symlinks are checked against `guard`, the
/// dataset's root, by [`check_link`].
fn make_dataset(
    root: &Path,
    guard: &Path,
    classes: &[String],
    extensions: &[&str],
) -> Result<Vec<(PathBuf, i64)>> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let extensions: Vec<String> = extensions.iter().map(|e| e.to_lowercase()).collect();
    let real = |p: &Path| p.canonicalize().map_err(|error| VisionError::Io { path: p.to_path_buf(), error });
    let guard_real = real(guard)?;
    let root_real = real(root)?;
    let mut samples = Vec::new();
    for (index, class) in classes.iter().enumerate() {
        let class_dir = root.join(class);
        let class_real = real(&class_dir)?;
        if class_real != root_real.join(class) {
            check_link(&class_dir, &class_real, &root_real, &root_real.join(class), &guard_real)?;
        }
        // (folder, its image files) for every folder under the class, like os.walk.
        let mut folders: Vec<(PathBuf, Vec<PathBuf>)> = Vec::new();
        let mut queue = BinaryHeap::from([Reverse(class_dir.clone())]);
        let mut seen = HashSet::new();
        while let Some(Reverse(dir)) = queue.pop() {
            let dir_real = real(&dir)?;
            if !seen.insert(dir_real.clone()) {
                continue;
            }
            let mut files = Vec::new();
            for entry in read_dir(&dir)? {
                let name = entry.file_name();
                if is_hidden(&name) {
                    continue;
                }
                let path = entry.path();
                // `Path::is_dir` follows symlinks, as os.walk(followlinks=True) does.
                if path.is_dir() {
                    if entry.file_type().is_ok_and(|t| t.is_symlink()) {
                        check_link(&path, &real(&path)?, &dir_real, &class_real, &guard_real)?;
                    }
                    queue.push(Reverse(path));
                } else if has_extension(&name, &extensions) {
                    refuse_unsupported(&path)?;
                    files.push(path);
                }
            }
            files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
            folders.push((dir, files));
        }
        folders.sort_by(|a, b| a.0.as_os_str().cmp(b.0.as_os_str()));
        let before = samples.len();
        samples.extend(folders.into_iter().flat_map(|(_, files)| files).map(|p| (p, index as i64)));
        if samples.len() == before {
            return Err(VisionError::EmptyClass { class: class.clone(), path: class_dir, extensions });
        }
    }
    Ok(samples)
}

/// A directory symlink `link` (resolving to `target`) in the folder `parent`, under `home`
/// (its class folder; for a class folder that is itself a link, where that folder would be):
/// following it is refused when it leads back to `parent` or one of its ancestors (a cycle,
/// which os.walk would go round until the path is too long, and which from a class folder's
/// ancestor would take in the other classes too) or anywhere else inside the dataset `guard`
/// (another class or split, whose images would get this class's label). A link to elsewhere
/// inside `home`, or out of the dataset entirely (assembling a dataset from folders
/// elsewhere), is followed.
fn check_link(link: &Path, target: &Path, parent: &Path, home: &Path, guard: &Path) -> Result<()> {
    let reason = if parent.starts_with(target) {
        format!("leads back to {}, which contains it: a cycle", target.display())
    } else if target.starts_with(guard) && !target.starts_with(home) {
        format!(
            "leads into another part of the dataset ({}), whose images would get this folder's label",
            target.display()
        )
    } else {
        return Ok(());
    };
    let shown = std::fs::read_link(link).unwrap_or_else(|_| target.to_path_buf());
    Err(VisionError::Symlink { link: link.to_path_buf(), target: shown, reason })
}
