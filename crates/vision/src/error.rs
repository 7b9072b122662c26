//! The vision crate's error type.

use std::path::PathBuf;

/// What can go wrong while finding, decoding or transforming images. Every variant names the
/// path, class, split or transform at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VisionError {
    /// A file or folder could not be read.
    #[error("cannot read {}: {error}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The operating system's error (in the message, so not also a `source()`).
        error: std::io::Error,
    },
    /// The dataset root does not exist or is not a folder.
    #[error("dataset root {} does not exist or is not a folder", path.display())]
    MissingRoot {
        /// The root asked for.
        path: PathBuf,
    },
    /// The root has no class sub-folders.
    #[error("no class folders found in {} (expected root/<class>/<image>)", root.display())]
    NoClasses {
        /// The root searched.
        root: PathBuf,
    },
    /// A class folder holds no file with an allowed extension.
    #[error("class folder {} holds no image with an allowed extension ({})", path.display(), extensions.join(", "))]
    EmptyClass {
        /// The class's name.
        class: String,
        /// The class folder.
        path: PathBuf,
        /// The extensions looked for.
        extensions: Vec<String>,
    },
    /// A file or folder name that is not valid UTF-8 where a class name is needed.
    #[error("folder name of {} is not valid UTF-8", path.display())]
    NonUtf8Name {
        /// The folder.
        path: PathBuf,
    },
    /// A file that could not be decoded as an image (unknown format, truncated, corrupt).
    #[error("cannot decode image {}: {message}", path.display())]
    Decode {
        /// The file.
        path: PathBuf,
        /// The decoder's message.
        message: String,
    },
    /// An image file in a variant that PIL reads but this crate does not decode (a TIFF with
    /// LZMA compression or CIELab colour, ...): refused by `ImageFolder`'s scan, before
    /// training starts, and when decoding.
    #[error("{}: {feature} is not supported (PIL reads it; convert the file to PNG)", path.display())]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// What it uses, e.g. "TIFF with LZMA compression".
        feature: String,
    },
    /// An image whose header declares more pixels than the limit (a decompression bomb, or a
    /// genuinely huge image): refused before decoding, as Pillow refuses it.
    #[error(
        "{}: the image declares {width}x{height} = {pixels} pixels, more than the limit of {limit} \
         (a decompression bomb?); raise the limit (`data.max_image_pixels` in a training config, \
         `--max-image-pixels` for predict) if the image is genuine",
        path.display()
    )]
    TooManyPixels {
        /// The file.
        path: PathBuf,
        /// Width declared in the header.
        width: u32,
        /// Height declared in the header.
        height: u32,
        /// `width * height`.
        pixels: u64,
        /// The limit in force.
        limit: u64,
    },
    /// A directory symlink in a dataset that would loop or mislabel images: one leading back to
    /// its own folder or an ancestor (a cycle), or into another class or split of the dataset.
    #[error("{} is a symlink to {}, which {reason}; remove it, or copy the images in", link.display(), target.display())]
    Symlink {
        /// The link.
        link: PathBuf,
        /// Where it points (as written in the link).
        target: PathBuf,
        /// Why it is refused.
        reason: String,
    },
    /// A split folder (`train`, `val`, `test`) is missing from a split layout.
    #[error("split folder {} is missing", path.display())]
    MissingSplit {
        /// The missing folder.
        path: PathBuf,
    },
    /// A split's class folders differ from the `train` split's.
    #[error("split {} has different classes from train: missing [{}], extra [{}]", path.display(), missing.join(", "), extra.join(", "))]
    ClassMismatch {
        /// The split folder.
        path: PathBuf,
        /// Classes in `train` that this split lacks.
        missing: Vec<String>,
        /// Classes in this split that `train` lacks.
        extra: Vec<String>,
    },
    /// A transform got an input it cannot handle (a spatial transform after `ToTensor`, a crop
    /// larger than the image, ...).
    #[error("{transform}: {message}")]
    Transform {
        /// The transform's torchvision name, e.g. `RandomCrop`.
        transform: &'static str,
        /// What went wrong.
        message: String,
    },
    /// A dataset sample that could not be loaded (e.g. while computing statistics).
    #[error(transparent)]
    Data(#[from] torchlight_data::DataError),
    /// A transform or dataset parameter that cannot work.
    #[error("invalid `{field}`: {reason}")]
    Config {
        /// The parameter's name.
        field: &'static str,
        /// Why it is invalid.
        reason: String,
    },
}

/// `Result` with [`VisionError`].
pub type Result<T, E = VisionError> = std::result::Result<T, E>;

/// An inconsistent `Array` (from `torchlight-base`) is a data error, as it was when `Array`
/// lived in torchlight-data: `Array::from_u8(..)?` works in functions returning [`Result`].
impl From<torchlight_base::ArrayError> for VisionError {
    fn from(error: torchlight_base::ArrayError) -> Self {
        VisionError::Data(error.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlight_base::{Array, ArrayError};
    use torchlight_data::DataError;

    #[test]
    fn an_inconsistent_array_is_a_data_error_naming_its_shape() {
        let err: VisionError = Array::from_u8(vec![1], vec![2]).unwrap_err().into();
        assert!(matches!(
            err,
            VisionError::Data(DataError::Array(ArrayError::Length { expected: 2, len: 1, .. }))
        ));
        assert!(err.to_string().contains("[2]"), "{err}");
    }
}
