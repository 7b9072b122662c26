//! Mutations of a seed file: blind byte-level ones, and structure-aware ones that keep a
//! container valid (zip entries re-packed, safetensors header length and PNG chunk CRCs
//! recomputed) so that mutated content reaches the parser behind the container.

use rand::seq::IndexedRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::io::{Cursor, Read, Write};

/// Values that sit on the edges parsers get wrong: zero, one, signs, powers of two around
/// 8/16/32/64-bit limits.
const INTERESTING: &[i64] = &[
    0,
    1,
    -1,
    2,
    0x7f,
    0x80,
    0xff,
    0x100,
    0x7fff,
    0x8000,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    1 << 40,
    1 << 62,
    i64::MAX,
    i64::MIN,
];

/// Applies 1 to 4 blind mutations to `data`, using `other` (another seed) for splices.
pub fn bytes(data: &mut Vec<u8>, other: &[u8], rng: &mut ChaCha8Rng) {
    for _ in 0..rng.random_range(1..=4) {
        one(data, other, rng);
    }
}

fn one(data: &mut Vec<u8>, other: &[u8], rng: &mut ChaCha8Rng) {
    if data.is_empty() {
        data.push(rng.random());
        return;
    }
    let len = data.len();
    let at = rng.random_range(0..len);
    match rng.random_range(0..9) {
        // Flip one bit.
        0 => data[at] ^= 1 << rng.random_range(0..8),
        // An interesting byte.
        1 => data[at] = *[0u8, 1, 0x7f, 0x80, 0xff].choose(rng).expect("not empty"),
        // An interesting 2, 4 or 8-byte integer, either byte order.
        2 => {
            let width = *[2usize, 4, 8].choose(rng).expect("not empty");
            let value = INTERESTING.choose(rng).expect("not empty").to_le_bytes();
            let mut bytes = value[..width].to_vec();
            if rng.random_bool(0.5) {
                bytes.reverse();
            }
            let end = (at + width).min(len);
            data[at..end].copy_from_slice(&bytes[..end - at]);
        }
        // Delete a range.
        3 => {
            let n = rng.random_range(1..=(len - at).min(64));
            data.drain(at..at + n);
        }
        // Duplicate a range in place.
        4 => {
            let n = rng.random_range(1..=(len - at).min(64));
            let copy = data[at..at + n].to_vec();
            data.splice(at..at, copy);
        }
        // Truncate.
        5 => data.truncate(at),
        // Random bytes.
        6 => {
            let n = rng.random_range(1..=16);
            let noise: Vec<u8> = (0..n).map(|_| rng.random()).collect();
            data.splice(at..at, noise);
        }
        // Splice in a range of another seed.
        7 if !other.is_empty() => {
            let from = rng.random_range(0..other.len());
            let n = rng.random_range(1..=(other.len() - from).min(64));
            let end = (at + n).min(len);
            data.splice(at..end, other[from..from + n].iter().copied());
        }
        // Overwrite a range with one byte value.
        _ => {
            let n = rng.random_range(1..=(len - at).min(32));
            let v = rng.random();
            data[at..at + n].fill(v);
        }
    }
}

/// The entries of a zip archive, in order.
pub type Entries = Vec<(String, Vec<u8>)>;

/// Reads every entry of a zip archive (a `.pth` seed).
pub fn unzip(data: &[u8]) -> Option<Entries> {
    let mut archive = zip::ZipArchive::new(Cursor::new(data)).ok()?;
    let mut entries = Vec::new();
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).ok()?;
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).ok()?;
        entries.push((entry.name().to_string(), bytes));
    }
    Some(entries)
}

/// Packs entries into a zip archive of stored (uncompressed) entries, as torch.save writes.
pub fn zip(entries: &Entries) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in entries {
        writer.start_file(name.as_str(), options).expect("writing to memory");
        writer.write_all(bytes).expect("writing to memory");
    }
    writer.finish().expect("writing to memory").into_inner()
}

/// A `.pth` mutation inside the archive: the pickle (more often) or a storage record is
/// mutated, and the archive re-packed with valid CRCs, so the mutation reaches the reader.
/// In the pickle, the arguments of integer opcodes (sizes, strides, offsets, element counts)
/// are a favoured target.
pub fn pth(entries: &Entries, other: &[u8], rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut entries = entries.clone();
    let pickle = entries.iter().position(|(n, _)| n.ends_with("data.pkl"));
    let index = match pickle {
        Some(p) if rng.random_bool(0.75) => p,
        _ => rng.random_range(0..entries.len().max(1)).min(entries.len().saturating_sub(1)),
    };
    if let Some((name, data)) = entries.get_mut(index) {
        if name.ends_with("data.pkl") && rng.random_bool(0.5) {
            pickle_integers(data, rng);
        } else {
            bytes(data, other, rng);
        }
    }
    if rng.random_bool(0.1) && !entries.is_empty() {
        // Now and then an entry goes missing.
        let gone = rng.random_range(0..entries.len());
        entries.remove(gone);
    }
    zip(&entries)
}

/// Rewrites a few integer opcodes (BININT1 `K`, BININT2 `M`, BININT `J`, LONG1 `0x8a`) of a
/// pickle to hold interesting values, negative ones included: either in place (same width) or
/// re-encoded as an 8-byte LONG1, which can hold any `i64`. Opcodes are found by their byte,
/// so some hits land in other data: that is a mutation too.
fn pickle_integers(data: &mut Vec<u8>, rng: &mut ChaCha8Rng) {
    for _ in 0..rng.random_range(1..=3) {
        let sites: Vec<usize> = data
            .iter()
            .enumerate()
            .filter(|(_, &b)| matches!(b, b'K' | b'M' | b'J' | 0x8a))
            .map(|(i, _)| i)
            .collect();
        let Some(&at) = sites.choose(rng) else { return };
        let value = *INTERESTING.choose(rng).expect("not empty");
        let value = if rng.random_bool(0.3) { value.wrapping_neg() } else { value };
        let width = match data[at] {
            b'K' => 1,
            b'M' => 2,
            b'J' => 4,
            _ => 1 + usize::from(*data.get(at + 1).unwrap_or(&0)),
        };
        let end = (at + 1 + width).min(data.len());
        if rng.random_bool(0.6) {
            let mut long = vec![0x8a, 8];
            long.extend(value.to_le_bytes());
            data.splice(at..end, long);
        } else {
            let bytes = value.to_le_bytes();
            let start = if data[at] == 0x8a { at + 2 } else { at + 1 };
            let n = end.saturating_sub(start).min(8);
            data[start..start + n].copy_from_slice(&bytes[..n]);
        }
    }
}

/// A safetensors mutation inside the JSON header (numbers swapped for interesting ones,
/// or bytes mutated), with the 8-byte header length recomputed so the parser reads it.
pub fn safetensors(data: &[u8], other: &[u8], rng: &mut ChaCha8Rng) -> Vec<u8> {
    let declared = data.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize);
    let Some(n) = declared.filter(|&n| 8 + n <= data.len()) else {
        let mut copy = data.to_vec();
        bytes(&mut copy, other, rng);
        return copy;
    };
    let mut header = data[8..8 + n].to_vec();
    if rng.random_bool(0.6) {
        // Replace a run of digits (a shape entry or an offset) with an interesting number.
        let digits: Vec<usize> = (0..header.len()).filter(|&i| header[i].is_ascii_digit()).collect();
        if let Some(&at) = digits.choose(rng) {
            let end = (at..header.len()).find(|&i| !header[i].is_ascii_digit()).unwrap_or(header.len());
            let value = INTERESTING.choose(rng).expect("not empty").to_string();
            header.splice(at..end, value.into_bytes());
        }
    } else {
        bytes(&mut header, other, rng);
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header);
    out.extend(&data[8 + n..]);
    out
}

/// Recomputes the CRC of every PNG chunk that fits in `data`, so a mutated chunk reaches the
/// decoder instead of failing its checksum.
pub fn fix_png_crcs(data: &mut [u8]) {
    let mut at = 8;
    while at + 12 <= data.len() {
        let len = u32::from_be_bytes(data[at..at + 4].try_into().expect("4 bytes")) as usize;
        let Some(end) = at.checked_add(8 + len).filter(|&e| e + 4 <= data.len()) else { return };
        let crc = crc32fast::hash(&data[at + 4..end]);
        data[end..end + 4].copy_from_slice(&crc.to_be_bytes());
        at = end + 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn zip_round_trips_and_png_crcs_are_recomputed() {
        let entries =
            vec![("a/data.pkl".to_string(), b"\x80\x02K\x05.".to_vec()), ("a/x".into(), vec![1, 2, 3])];
        assert_eq!(unzip(&zip(&entries)).unwrap(), entries);
        // IHDR of a 1x1 image with a wrong CRC.
        let mut png =
            b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00XXXX"
                .to_vec();
        fix_png_crcs(&mut png);
        assert_eq!(&png[29..33], &crc32fast::hash(&png[12..29]).to_be_bytes());
    }

    #[test]
    fn mutations_are_a_function_of_the_seed() {
        let run = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut data = b"0123456789abcdef".to_vec();
            bytes(&mut data, b"XYZ", &mut rng);
            data
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }
}
