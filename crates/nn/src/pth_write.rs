//! Writing a state_dict as `torch.save(model.state_dict(), path)` does, for `torch.load` and [`read_pth`](crate::read_pth).
//!
//! The archive is PyTorch's (format version 3): `archive/data.pkl`, a pickle (protocol 2) of an
//! `OrderedDict` whose values are `torch._utils._rebuild_tensor_v2` calls on persistent storage
//! ids, one raw little-endian storage `archive/data/<i>` per tensor (stored, not compressed),
//! `archive/byteorder` and `archive/version`. The pickle uses only the globals `torch.load`'s
//! `weights_only` unpickler allows, so PyTorch loads the file with its default settings.

use crate::error::{NnError, Result};
use crate::module::{state_dict, Module};
use std::io::Write;
use std::path::Path;
use tch::{Kind, Tensor};

/// The pickle storage type of `kind` (`torch.FloatStorage`, ...), or `None` for element types
/// the `.pth` reader does not take back.
fn storage_type(kind: Kind) -> Option<&'static str> {
    Some(match kind {
        Kind::Float => "FloatStorage",
        Kind::Double => "DoubleStorage",
        Kind::Half => "HalfStorage",
        Kind::BFloat16 => "BFloat16Storage",
        Kind::Int64 => "LongStorage",
        Kind::Int => "IntStorage",
        Kind::Int16 => "ShortStorage",
        Kind::Int8 => "CharStorage",
        Kind::Uint8 => "ByteStorage",
        Kind::Bool => "BoolStorage",
        _ => return None,
    })
}

/// A pickle (protocol 2) being written: just the opcodes a state_dict needs.
struct Pickle(Vec<u8>);

impl Pickle {
    fn global(&mut self, module: &str, name: &str) {
        self.0.push(b'c');
        self.0.extend_from_slice(format!("{module}\n{name}\n").as_bytes());
    }

    fn str(&mut self, s: &str) {
        self.0.push(b'X'); // BINUNICODE
        self.0.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
    }

    fn int(&mut self, v: i64) {
        match i32::try_from(v) {
            Ok(v) => {
                self.0.push(b'J'); // BININT
                self.0.extend_from_slice(&v.to_le_bytes());
            }
            Err(_) => {
                self.0.extend_from_slice(&[0x8a, 8]); // LONG1, 8 bytes
                self.0.extend_from_slice(&v.to_le_bytes());
            }
        }
    }

    fn int_tuple(&mut self, values: &[i64]) {
        self.0.push(b'('); // MARK
        for &v in values {
            self.int(v);
        }
        self.0.push(b't'); // TUPLE
    }

    /// `collections.OrderedDict()`.
    fn ordered_dict(&mut self) {
        self.global("collections", "OrderedDict");
        self.0.extend_from_slice(b")R"); // EMPTY_TUPLE, REDUCE
    }
}

/// The strides of a contiguous tensor of `size`.
fn contiguous_strides(size: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; size.len()];
    for d in (0..size.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * size[d + 1].max(1);
    }
    strides
}

/// Writes `tensors` under their keys, in order, as `torch.save(state_dict, path)` does (see the
/// module docs for the layout). Tensors on any device and of any layout are written as
/// contiguous CPU tensors; each gets its own storage, so views of one tensor are saved apart.
/// The file is written to a temporary name beside `path` and renamed into place.
///
/// # Errors
/// [`NnError::Pth`] naming the file and key for an element type `.pth` files here do not carry
/// (complex, quantised: float, double, half, bfloat16, int64, int32, int16, int8, uint8 and
/// bool are written) or a tensor that cannot be copied to the host; [`NnError::Io`] when the
/// file cannot be written.
pub fn write_pth(tensors: &[(String, Tensor)], path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let fail = |reason: String| NnError::Pth { path: path.to_path_buf(), reason };
    let io = |error: std::io::Error| NnError::Io { path: path.to_path_buf(), error };
    let zip_io = |e: zip::result::ZipError| io(std::io::Error::other(e));

    let mut pickle = Pickle(vec![0x80, 2]); // PROTO 2
    pickle.ordered_dict();
    let mut storages = Vec::with_capacity(tensors.len());
    for (i, (key, tensor)) in tensors.iter().enumerate() {
        let kind = tensor.f_kind().map_err(|e| fail(format!("`{key}`: {e}")))?;
        let storage = storage_type(kind).ok_or_else(|| {
            fail(format!("`{key}`: element type {kind:?} cannot be written to a .pth here"))
        })?;
        let numel = tensor.numel();
        let mut bytes = vec![0u8; numel * kind.elt_size_in_bytes()];
        tensor.f_copy_data_u8(&mut bytes, numel).map_err(|e| fail(format!("`{key}`: {e}")))?;
        let size = tensor.size();

        pickle.str(key);
        pickle.global("torch._utils", "_rebuild_tensor_v2");
        pickle.0.push(b'('); // the arguments
        pickle.0.push(b'('); // the persistent id ('storage', type, key, location, numel)
        pickle.str("storage");
        pickle.global("torch", storage);
        pickle.str(&i.to_string());
        pickle.str("cpu");
        pickle.int(numel as i64);
        pickle.0.extend_from_slice(b"tQ"); // TUPLE, BINPERSID
        pickle.int(0); // storage offset
        pickle.int_tuple(&size);
        pickle.int_tuple(&contiguous_strides(&size));
        pickle.0.push(0x89); // requires_grad = False
        pickle.ordered_dict(); // backward hooks
        pickle.0.extend_from_slice(b"tRs"); // TUPLE, REDUCE, SETITEM
        storages.push(bytes);
    }
    pickle.0.push(b'.'); // STOP

    let tmp = path.with_extension("pth.tmp");
    let file = std::fs::File::create(&tmp).map_err(io)?;
    let mut zip = zip::ZipWriter::new(std::io::BufWriter::new(file));
    let options = |len: usize| {
        zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .large_file(len as u64 >= u64::from(u32::MAX))
    };
    let mut entry = |name: &str, bytes: &[u8]| -> Result<()> {
        zip.start_file(format!("archive/{name}"), options(bytes.len())).map_err(zip_io)?;
        zip.write_all(bytes).map_err(io)
    };
    entry("data.pkl", &pickle.0)?;
    entry("byteorder", b"little")?;
    for (i, bytes) in storages.iter().enumerate() {
        entry(&format!("data/{i}"), bytes)?;
    }
    entry("version", b"3\n")?;
    let mut writer = zip.finish().map_err(zip_io)?;
    writer.flush().map_err(io)?;
    drop(writer);
    std::fs::rename(&tmp, path).map_err(io)
}

/// Writes `model`'s state_dict (parameters and buffers under their PyTorch keys) as
/// `torch.save(model.state_dict(), path)` does; see [`write_pth`].
///
/// # Errors
/// As [`write_pth`].
pub fn save_pth(model: &dyn Module, path: impl AsRef<Path>) -> Result<()> {
    write_pth(&state_dict(model), path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_are_row_major() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), [12, 4, 1]);
        assert_eq!(contiguous_strides(&[]), Vec::<i64>::new());
        assert_eq!(contiguous_strides(&[0, 3]), [3, 1]);
    }

    #[test]
    fn ints_beyond_32_bits_are_long1() {
        let mut p = Pickle(Vec::new());
        p.int(-2);
        p.int(1 << 40);
        assert_eq!(p.0[..5], [b'J', 0xfe, 0xff, 0xff, 0xff]);
        assert_eq!(p.0[5..7], [0x8a, 8]);
        assert_eq!(p.0[7..], (1i64 << 40).to_le_bytes());
    }
}
