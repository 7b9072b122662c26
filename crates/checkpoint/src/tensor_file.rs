//! Checkpoint tensor files: safetensors written straight from tensor memory and read straight
//! into fresh tensors, with the file's CRC-32 computed on the way in both directions.
//!
//! The files are plain safetensors (8-byte little-endian header length, a JSON header padded
//! with spaces to a multiple of 8, then the tensors' bytes back to back), so PyTorch's
//! `safetensors.torch.load_file` reads them and files written by earlier Torchlight versions
//! (through the `safetensors` crate) read here. Going through the crate would cost a copy of
//! every tensor into a `Vec` on save and a whole-file buffer plus a zero-filled tensor and a
//! copy on load; here each byte is touched once by the CPU for the checksum and once by the
//! kernel for the transfer, in cache-sized chunks.

use crate::error::{io, CheckpointError, Result};
use crate::meta::FileRecord;
use serde_json::{Map, Value};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use tch::{Device, Kind, Tensor};

/// Bytes hashed and moved at a time: small enough to stay in cache between the checksum and
/// the copy, large enough to keep system calls rare.
const CHUNK: usize = 1 << 20;

/// The largest header read: the safetensors crate's own limit.
const MAX_HEADER: u64 = 100_000_000;

/// safetensors' name for `kind`, or `None` for a dtype it has no name for.
fn dtype_name(kind: Kind) -> Option<&'static str> {
    Some(match kind {
        Kind::Bool => "BOOL",
        Kind::Uint8 => "U8",
        Kind::Int8 => "I8",
        Kind::Int16 => "I16",
        Kind::Int => "I32",
        Kind::Int64 => "I64",
        Kind::Half => "F16",
        Kind::BFloat16 => "BF16",
        Kind::Float => "F32",
        Kind::Double => "F64",
        _ => return None,
    })
}

fn kind_of(name: &str) -> Option<Kind> {
    Some(match name {
        "BOOL" => Kind::Bool,
        "U8" => Kind::Uint8,
        "I8" => Kind::Int8,
        "I16" => Kind::Int16,
        "I32" => Kind::Int,
        "I64" => Kind::Int64,
        "F16" => Kind::Half,
        "BF16" => Kind::BFloat16,
        "F32" => Kind::Float,
        "F64" => Kind::Double,
        _ => return None,
    })
}

/// The bytes of a contiguous CPU tensor.
fn bytes_of(t: &Tensor) -> &[u8] {
    let len = t.numel() * t.kind().elt_size_in_bytes();
    if len == 0 {
        return &[];
    }
    // SAFETY: `t` is a contiguous CPU tensor (the callers make it one), so its `len` bytes
    // start at `data_ptr` and stay alive and unmoved while `t` is borrowed; nothing writes to
    // them meanwhile (saving runs under no-grad, on the thread that owns the tensors).
    unsafe { std::slice::from_raw_parts(t.data_ptr() as *const u8, len) }
}

/// The bytes of a fresh contiguous CPU tensor, to fill.
fn bytes_of_mut(t: &mut Tensor) -> &mut [u8] {
    let len = t.numel() * t.kind().elt_size_in_bytes();
    if len == 0 {
        return &mut [];
    }
    // SAFETY: `t` was just made by `Tensor::empty` on the CPU (contiguous, `len` bytes, owned
    // by this tensor alone), and the exclusive borrow keeps anything else from touching it.
    unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut u8, len) }
}

/// Writes `tensors` as a safetensors file at `path` and returns the open file (not yet
/// synced) with its size and CRC-32.
///
/// The checksum is computed over the very bytes handed to the kernel, so no read-back pass
/// follows. A read-back right after writing would come from the page cache, not the disk, so
/// it could not catch more than this does; what the checksum is for (a file damaged or cut
/// short at rest, or by a copy) is checked on every load.
pub(crate) fn write(path: &Path, tensors: &[(String, Tensor)]) -> Result<(File, FileRecord)> {
    let cpu: Vec<(&str, Tensor)> =
        tensors.iter().map(|(k, t)| (k.as_str(), t.detach().to_device(Device::Cpu).contiguous())).collect();
    let mut header = Map::new();
    let mut offset = 0usize;
    let mut order: Vec<usize> = (0..cpu.len()).collect();
    order.sort_by(|&a, &b| cpu[a].0.cmp(cpu[b].0));
    for &i in &order {
        let (key, t) = &cpu[i];
        let dtype = dtype_name(t.kind()).ok_or_else(|| CheckpointError::Torch {
            path: path.to_path_buf(),
            message: format!("tensor `{key}`: safetensors cannot store dtype {:?}", t.kind()),
        })?;
        let len = t.numel() * t.kind().elt_size_in_bytes();
        let mut entry = Map::new();
        entry.insert("dtype".into(), dtype.into());
        entry.insert("shape".into(), t.size().into());
        entry.insert("data_offsets".into(), vec![offset, offset + len].into());
        header.insert((*key).to_string(), Value::Object(entry));
        offset += len;
    }
    let mut json =
        serde_json::to_vec(&Value::Object(header)).expect("a map of strings and numbers serialises");
    // The data starts 8-aligned, as the safetensors crate writes it.
    json.resize(json.len().next_multiple_of(8), b' ');

    let file = File::create(path).map_err(io(path))?;
    let mut out =
        HashingWriter { out: BufWriter::with_capacity(CHUNK, file), hasher: crc32fast::Hasher::new() };
    out.put(&(json.len() as u64).to_le_bytes()).map_err(io(path))?;
    out.put(&json).map_err(io(path))?;
    for &i in &order {
        for chunk in bytes_of(&cpu[i].1).chunks(CHUNK) {
            out.put(chunk).map_err(io(path))?;
        }
    }
    let HashingWriter { out, hasher } = out;
    let file = out
        .into_inner()
        .map_err(|e| CheckpointError::Io { path: path.to_path_buf(), error: e.into_error() })?;
    let bytes = 8 + json.len() as u64 + offset as u64;
    Ok((file, FileRecord { bytes, crc32: format!("{:08x}", hasher.finalize()) }))
}

/// A buffered file writer that hashes what it is given.
struct HashingWriter {
    out: BufWriter<File>,
    hasher: crc32fast::Hasher,
}

impl HashingWriter {
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.hasher.update(bytes);
        self.out.write_all(bytes)
    }
}

/// Size and CRC-32 of the file at `path`, read in full.
pub(crate) fn record_of(path: &Path) -> Result<FileRecord> {
    let mut file = File::open(path).map_err(io(path))?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok(FileRecord { bytes, crc32: format!("{:08x}", hasher.finalize()) })
}

/// One tensor as the header describes it.
#[derive(Debug)]
struct Entry {
    key: String,
    kind: Kind,
    shape: Vec<i64>,
    begin: u64,
    end: u64,
}

/// Why a file is malformed: the header, or a read that came up short.
enum Malformed {
    Reason(String),
    Io(std::io::Error),
}

/// Reads the safetensors file at `path` into fresh CPU tensors sorted by key, checking its
/// size and CRC-32 against `record` (computed during the read).
///
/// # Errors
/// [`CheckpointError::Truncated`] for a size other than recorded, [`CheckpointError::Corrupt`]
/// for a checksum mismatch (reported ahead of anything else a damaged file would cause) or a
/// malformed header, [`CheckpointError::Io`] when the file cannot be read.
pub(crate) fn read_verified(path: &Path, record: &FileRecord) -> Result<Vec<(String, Tensor)>> {
    let mut file = File::open(path).map_err(io(path))?;
    let found = file.metadata().map_err(io(path))?.len();
    if found != record.bytes {
        return Err(CheckpointError::Truncated { path: path.to_path_buf(), expected: record.bytes, found });
    }
    let mut hasher = crc32fast::Hasher::new();
    let read = read_tensors(&mut file, found, &mut hasher);
    let crc = match &read {
        Ok(_) => format!("{:08x}", hasher.finalize()),
        // A damaged file is reported as such even where the damage broke the header.
        Err(_) => record_of(path)?.crc32,
    };
    if crc != record.crc32 {
        return Err(CheckpointError::Corrupt {
            path: path.to_path_buf(),
            reason: format!("CRC-32 {crc} does not match the recorded {}", record.crc32),
        });
    }
    match read {
        Ok(mut tensors) => {
            tensors.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(tensors)
        }
        Err(Malformed::Io(error)) => Err(CheckpointError::Io { path: path.to_path_buf(), error }),
        Err(Malformed::Reason(reason)) => Err(CheckpointError::Corrupt { path: path.to_path_buf(), reason }),
    }
}

fn read_tensors(
    file: &mut File,
    size: u64,
    hasher: &mut crc32fast::Hasher,
) -> std::result::Result<Vec<(String, Tensor)>, Malformed> {
    let bad = |reason: String| Malformed::Reason(reason);
    let mut read = |buf: &mut [u8], hasher: &mut crc32fast::Hasher| {
        for chunk in buf.chunks_mut(CHUNK) {
            file.read_exact(chunk).map_err(Malformed::Io)?;
            hasher.update(chunk);
        }
        Ok::<(), Malformed>(())
    };
    if size < 8 {
        return Err(bad(format!("the file has {size} bytes, fewer than the 8-byte header length")));
    }
    let mut len = [0u8; 8];
    read(&mut len, hasher)?;
    let header_len = u64::from_le_bytes(len);
    if header_len > MAX_HEADER || header_len > size - 8 {
        return Err(bad(format!(
            "not a safetensors file, or a truncated one: the header does not fit in the file's {size} bytes \
             (its first 8 bytes declare a header of {header_len} bytes)"
        )));
    }
    let mut json = vec![0u8; header_len as usize];
    read(&mut json, hasher)?;
    let entries = parse_header(&json, size - 8 - header_len).map_err(bad)?;
    let mut tensors = Vec::with_capacity(entries.len());
    for entry in entries {
        let mut t = Tensor::empty(entry.shape.as_slice(), (entry.kind, Device::Cpu));
        let dst = bytes_of_mut(&mut t);
        debug_assert_eq!(dst.len() as u64, entry.end - entry.begin);
        read(dst, hasher)?;
        tensors.push((entry.key, t));
    }
    Ok(tensors)
}

/// The header's tensors in file order, checked to cover the `data` bytes exactly.
fn parse_header(json: &[u8], data: u64) -> std::result::Result<Vec<Entry>, String> {
    let header: Map<String, Value> =
        serde_json::from_slice(json).map_err(|e| format!("the header is not valid JSON: {e}"))?;
    let mut entries = Vec::with_capacity(header.len());
    for (key, value) in header {
        if key == "__metadata__" {
            continue;
        }
        let field = |name: &str| value.get(name).ok_or_else(|| format!("tensor `{key}` has no `{name}`"));
        let dtype = field("dtype")?.as_str().unwrap_or("");
        let kind = kind_of(dtype).ok_or_else(|| format!("tensor `{key}`: unknown dtype `{dtype}`"))?;
        let shape: Vec<i64> = serde_json::from_value(field("shape")?.clone())
            .map_err(|_| format!("tensor `{key}`: the shape is not a list of sizes"))?;
        let [begin, end]: [u64; 2] = serde_json::from_value(field("data_offsets")?.clone())
            .map_err(|_| format!("tensor `{key}`: data_offsets is not two offsets"))?;
        let numel = shape
            .iter()
            .try_fold(1u64, |n, &d| u64::try_from(d).ok().and_then(|d| n.checked_mul(d)))
            .ok_or_else(|| format!("tensor `{key}`: the shape {shape:?} is negative or overflows"))?;
        let bytes = numel.checked_mul(kind.elt_size_in_bytes() as u64);
        if end < begin || bytes != Some(end - begin) {
            return Err(format!(
                "tensor `{key}`: {} bytes cannot hold a {dtype} tensor of shape {shape:?}",
                end.saturating_sub(begin)
            ));
        }
        entries.push(Entry { key, kind, shape, begin, end });
    }
    entries.sort_by_key(|e| (e.begin, e.end));
    // A tensor placed past the data, when the others do not line up to it (a truncated file
    // does), is the one at fault, not the tensor the gap it left is found before.
    let total = entries.iter().fold(0u64, |n, e| n.saturating_add(e.end - e.begin));
    if entries.last().is_some_and(|e| e.end != total) {
        if let Some(e) = entries.iter().find(|e| e.end > data) {
            return Err(format!(
                "tensor `{}`: data_offsets [{}, {}] run past the data section's {data} bytes",
                e.key, e.begin, e.end
            ));
        }
    }
    for pair in entries.windows(2) {
        let (p, e) = (&pair[0], &pair[1]);
        if e.begin < p.end {
            return Err(format!(
                "the bytes of tensors `{}` [{}, {}] and `{}` [{}, {}] overlap",
                p.key, p.begin, p.end, e.key, e.begin, e.end
            ));
        }
    }
    let mut at = 0;
    for e in &entries {
        if e.begin != at {
            return Err(format!("the byte offsets of tensor `{}` are invalid", e.key));
        }
        at = e.end;
    }
    if at != data {
        return Err("the tensors do not cover the data section exactly (truncated, or extra bytes)".into());
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("tl-tensor-file-{}-{name}", std::process::id()))
    }

    #[test]
    fn a_written_file_reads_back_and_the_safetensors_crate_agrees() {
        let path = temp("roundtrip.safetensors");
        let tensors = vec![
            ("b.weight".to_string(), Tensor::from_slice(&[1.5f32, -2.0, 3.25, 0.0, 7.0, 8.0]).view([2, 3])),
            ("a.steps".to_string(), Tensor::from_slice(&[7i64])),
            ("empty".to_string(), Tensor::from_slice::<f32>(&[])),
            ("rng".to_string(), Tensor::from_slice(&[1u8, 2, 3])),
            ("half".to_string(), Tensor::from_slice(&[0.5f32, 1.0]).to_kind(Kind::Half)),
        ];
        let (_, record) = write(&path, &tensors).unwrap();
        assert_eq!(record, record_of(&path).unwrap(), "the CRC while writing is the file's CRC");
        let back = read_verified(&path, &record).unwrap();
        let keys: Vec<&str> = back.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a.steps", "b.weight", "empty", "half", "rng"]);
        for (key, t) in &back {
            let (_, original) = tensors.iter().find(|(k, _)| k == key).unwrap();
            assert_eq!(t.kind(), original.kind(), "{key}");
            assert_eq!(t.size(), original.size(), "{key}");
            assert!(t.equal(original), "{key}");
        }
        // The crate's own reader (what tch and PyTorch's safetensors use) reads the same file.
        let crate_read = torchlight_nn::read_safetensors(&path).unwrap();
        assert_eq!(crate_read.len(), tensors.len());
        for (key, t) in crate_read {
            assert!(back.iter().any(|(k, b)| *k == key && b.equal(&t)), "{key}");
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn files_from_the_safetensors_crate_read_here() {
        let path = temp("crate.safetensors");
        let tensors = vec![
            ("w".to_string(), Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0]).view([2, 2])),
            ("n".to_string(), Tensor::from_slice(&[3i64])),
        ];
        torchlight_nn::write_safetensors(&tensors, &path).unwrap();
        let back = read_verified(&path, &record_of(&path).unwrap()).unwrap();
        assert_eq!(back.len(), 2);
        assert!(back[0].0 == "n" && back[0].1.equal(&tensors[1].1));
        assert!(back[1].0 == "w" && back[1].1.equal(&tensors[0].1));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_damaged_header_is_reported_by_its_checksum_and_a_bad_one_by_its_fault() {
        let path = temp("damaged.safetensors");
        let (_, record) = write(&path, &[("w".to_string(), Tensor::from_slice(&[1f32, 2.0]))]).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[9] = b'#';
        std::fs::write(&path, &bytes).unwrap();
        let err = read_verified(&path, &record).unwrap_err().to_string();
        assert!(err.contains("CRC-32") && err.contains("does not match"), "{err}");
        // With a matching record the header's own fault is named.
        let err = read_verified(&path, &record_of(&path).unwrap()).unwrap_err().to_string();
        assert!(err.contains("the header is not valid JSON"), "{err}");
        assert!(parse_header(br#"{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#, 8)
            .unwrap_err()
            .contains("8 bytes cannot hold a F32 tensor of shape [3]"));
        assert!(parse_header(br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#, 12)
            .unwrap_err()
            .contains("do not cover the data section"));
        std::fs::remove_file(&path).unwrap();
    }

    /// A bad offset is reported against the tensor that has it, not the neighbour whose
    /// start the gap it left is found at.
    #[test]
    fn a_bad_offset_is_blamed_on_its_tensor() {
        let fc = |bias: &str| {
            format!(
                r#"{{"fc.bias":{{"dtype":"F32","shape":[2],"data_offsets":{bias}}},"fc.weight":{{"dtype":"F32","shape":[2,5],"data_offsets":[8,48]}}}}"#
            )
        };
        assert_eq!(parse_header(fc("[0,8]").as_bytes(), 48).unwrap().len(), 2);
        let err = parse_header(fc("[100,108]").as_bytes(), 48).unwrap_err();
        assert!(err.contains("tensor `fc.bias`: data_offsets [100, 108] run past"), "{err}");
        let err = parse_header(fc("[4,12]").as_bytes(), 48).unwrap_err();
        assert!(err.contains("`fc.bias` [4, 12] and `fc.weight` [8, 48] overlap"), "{err}");
        // Sizes that add up past u64 are an error, not an overflow.
        let big = |k: &str| {
            format!(
                r#""{k}":{{"dtype":"U8","shape":[9223372036854775807],"data_offsets":[0,9223372036854775807]}}"#
            )
        };
        let huge = format!("{{{},{},{}}}", big("a"), big("b"), big("c"));
        assert!(parse_header(huge.as_bytes(), 8).is_err());
        let err = parse_header(fc("[48,56]").as_bytes(), 56).unwrap_err();
        assert!(err.contains("the byte offsets of tensor `fc.weight` are invalid"), "a gap before: {err}");
    }
}
