//! TIFF decoding as Pillow reads a TIFF (`TiffImagePlugin`, libtiff for compressed files) and
//! `convert("RGB")` turns it into RGB, for the first image of the file.
//!
//! The pixel layouts are Pillow's `OPEN_INFO` table: bilevel, 2-, 4-, 8- and 16-bit grayscale
//! (black- or white-is-zero; signed 8-bit bytes read as they are, signed 16-bit clipped),
//! palettes (16-bit colour map entries, high byte), RGB and CMYK of 8 or 16 bits (16-bit
//! samples by their high byte) with extra samples, associated (premultiplied) alpha undone as
//! Pillow's `RGBa` unpacker does (`v * 255 / a`, truncating, on 8-bit values), CMYK converted by
//! Pillow's `cmyk2rgb`. Strips or tiles, contiguous or planar, classic TIFF or BigTIFF, either
//! byte order; no compression, LZW, deflate, PackBits (with the horizontal predictor), and JPEG
//! (each strip or tile decoded by libjpeg-turbo as libtiff's codec does: YCbCr converted to RGB,
//! other photometrics' components taken as stored). The orientation tag is applied, because
//! Pillow's TIFF reader applies it on load (`exif_transpose` in `load_end`), whatever the
//! caller asks for other formats.
//!
//! What Pillow reads but this does not is refused with [`Unsupported`] naming the feature
//! (CIELab, YCbCr without JPEG compression, old-style JPEG, LZMA, Zstandard, WebP, CCITT fax
//! and the other rare codecs, float and 32-bit samples), which `ImageFolder`'s scan reports
//! before training starts.

use crate::image::Image;
use std::collections::BTreeMap;

/// Why a TIFF is not decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TiffError {
    /// PIL reads it, Torchlight does not: the feature, e.g. "TIFF with LZMA compression".
    Unsupported(String),
    /// PIL cannot read it either (or it is corrupt): what is wrong.
    Invalid(String),
}

impl TiffError {
    /// The vision error for the file at `path`.
    pub(crate) fn into_error(self, path: &std::path::Path) -> crate::error::VisionError {
        use crate::error::VisionError;
        match self {
            TiffError::Unsupported(feature) => VisionError::Unsupported { path: path.to_path_buf(), feature },
            TiffError::Invalid(message) => VisionError::Decode { path: path.to_path_buf(), message },
        }
    }

    fn message(&self) -> String {
        match self {
            TiffError::Unsupported(feature) => format!("{feature} is not supported"),
            TiffError::Invalid(m) => m.clone(),
        }
    }
}

use TiffError::{Invalid, Unsupported};

type Result<T> = std::result::Result<T, TiffError>;

/// Whether `bytes` start like a TIFF file (Pillow's prefixes: classic and BigTIFF in either
/// byte order, and the two byte-swapped classic magics Pillow also accepts).
pub(crate) fn is_tiff(bytes: &[u8]) -> bool {
    [b"MM\x00\x2a", b"II\x2a\x00", b"MM\x2a\x00", b"II\x00\x2a", b"MM\x00\x2b", b"II\x2b\x00"]
        .iter()
        .any(|p| bytes.starts_with(*p))
}

/// One IFD entry: its type, count and value bytes (inline or pointed to).
struct Entry<'a> {
    kind: u16,
    count: u64,
    data: &'a [u8],
}

/// The first IFD's tags.
struct Ifd<'a> {
    le: bool,
    tags: BTreeMap<u16, Entry<'a>>,
}

impl<'a> Ifd<'a> {
    fn parse(bytes: &'a [u8]) -> Result<Self> {
        let cut = || Invalid("TIFF header or first IFD cut short".into());
        let le = bytes.starts_with(b"II");
        let big = bytes.get(2..4) == Some(if le { b"\x2b\x00" } else { b"\x00\x2b" });
        let rd = |at: usize, n: usize| -> Option<u64> {
            let b = bytes.get(at..at.checked_add(n)?)?;
            let mut v = 0u64;
            for i in 0..n {
                let byte = if le { b[n - 1 - i] } else { b[i] };
                v = (v << 8) | u64::from(byte);
            }
            Some(v)
        };
        let ifd = if big { rd(8, 8) } else { rd(4, 4) }.ok_or_else(cut)? as usize;
        let (count_size, entry_size, inline) = if big { (8, 20, 8) } else { (2, 12, 4) };
        let count = rd(ifd, count_size).ok_or_else(cut)?;
        if count > 4096 {
            return Err(Invalid(format!("TIFF IFD with {count} entries")));
        }
        let mut tags = BTreeMap::new();
        for i in 0..count as usize {
            let at = ifd + count_size + i * entry_size;
            let tag = rd(at, 2).ok_or_else(cut)? as u16;
            let kind = rd(at + 2, 2).ok_or_else(cut)? as u16;
            let n = rd(at + 4, if big { 8 } else { 4 }).ok_or_else(cut)?;
            let value_at = at + if big { 12 } else { 8 };
            let size = match kind {
                1 | 2 | 6 | 7 => 1,
                3 | 8 => 2,
                4 | 9 | 11 | 13 => 4,
                5 | 10 | 12 | 16..=18 => 8,
                _ => continue,
            };
            let Some(len) = n.checked_mul(size).filter(|&l| l < (1 << 32)) else { continue };
            let len = len as usize;
            let data = if len <= inline {
                bytes.get(value_at..value_at + len)
            } else {
                let offset = rd(value_at, inline).ok_or_else(cut)? as usize;
                bytes.get(offset..offset.saturating_add(len))
            };
            // Pillow skips what it cannot read too.
            if let Some(data) = data {
                tags.insert(tag, Entry { kind, count: n, data });
            }
        }
        Ok(Ifd { le, tags })
    }

    /// A tag's values as integers (unsigned and signed integer types).
    fn values(&self, tag: u16) -> Option<Vec<i64>> {
        let e = self.tags.get(&tag)?;
        let size = match e.kind {
            1 | 6 | 7 => 1,
            3 | 8 => 2,
            4 | 9 | 13 => 4,
            16..=18 => 8,
            _ => return None,
        };
        let signed = matches!(e.kind, 6 | 8 | 9 | 17);
        Some(
            e.data
                .chunks_exact(size)
                .map(|b| {
                    let mut v = 0u64;
                    for i in 0..size {
                        v = (v << 8) | u64::from(if self.le { b[size - 1 - i] } else { b[i] });
                    }
                    if signed {
                        let shift = 64 - 8 * size as u32;
                        ((v << shift) as i64) >> shift
                    } else {
                        v as i64
                    }
                })
                .collect(),
        )
    }

    /// A tag with exactly one value, as Pillow's `tag_v2` holds it (a scalar).
    fn one(&self, tag: u16) -> Option<i64> {
        let v = self.values(tag)?;
        (self.tags[&tag].count == 1).then(|| v[0])
    }
}

/// How samples become RGB (Pillow's mode for the layout, and its `convert("RGB")`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// 1, 2, 4 or 8 bits of gray, scaled to 8 bits; `invert` for white-is-zero.
    Gray { invert: bool },
    /// 16-bit gray, clipped to 255 (`I;16` and `I;16S` to RGB).
    Gray16 { signed: bool },
    /// Palette indices (colour map), the first sample.
    Palette,
    /// R, G, B (then extra samples); `premultiplied` for associated alpha in the fourth.
    Rgb { premultiplied: bool },
    /// C, M, Y, K (then extra samples).
    Cmyk,
}

/// Everything needed to decode the first image.
struct Plan<'a> {
    width: usize,
    height: usize,
    kind: Kind,
    bits: usize,
    /// Samples per pixel (as stored, after Pillow drops unused planar extra samples: those
    /// planes are not read).
    spp: usize,
    compression: i64,
    predictor: i64,
    planar: bool,
    reverse_bits: bool,
    /// `(chunk width, chunk height)`: the tile size, or the width and rows per strip.
    chunk: (usize, usize),
    tiled: bool,
    chunks: Vec<&'a [u8]>,
    colormap: Vec<[u8; 3]>,
    /// `JPEGTables`, and whether JPEG chunks are YCbCr (read by the libjpeg-turbo path only).
    #[cfg_attr(not(feature = "libjpeg-turbo"), allow(dead_code))]
    jpeg_tables: Option<&'a [u8]>,
    #[cfg_attr(not(feature = "libjpeg-turbo"), allow(dead_code))]
    ycbcr: bool,
    orientation: u32,
    le: bool,
}

/// The size of the first image as decoded, which is Pillow's `size`: width and height swapped
/// when its orientation tag turns it a quarter (5 to 8).
pub(crate) fn dimensions(bytes: &[u8]) -> std::result::Result<(u32, u32), String> {
    let ifd = Ifd::parse(bytes).map_err(|e| e.message())?;
    let (w, h) = stored_size(&ifd)?;
    Ok(if matches!(ifd.one(274), Some(5..=8)) { (h, w) } else { (w, h) })
}

/// The width and height tags.
fn stored_size(ifd: &Ifd) -> std::result::Result<(u32, u32), String> {
    match (ifd.one(256), ifd.one(257)) {
        (Some(w), Some(h)) if (0..=u32::MAX as i64).contains(&w) && (0..=u32::MAX as i64).contains(&h) => {
            Ok((w as u32, h as u32))
        }
        _ => Err("TIFF without valid dimensions".into()),
    }
}

/// The feature that makes Torchlight refuse a TIFF PIL reads, if any: what `ImageFolder`'s
/// scan checks from the file's first bytes. Files whose headers cannot be read are left to
/// decoding, which names the problem.
pub(crate) fn unsupported_feature(bytes: &[u8]) -> Option<String> {
    match plan(bytes) {
        Err(Unsupported(feature)) => Some(feature),
        _ => None,
    }
}

fn plan(bytes: &[u8]) -> Result<Plan<'_>> {
    let ifd = Ifd::parse(bytes)?;
    let (width, height) = stored_size(&ifd).map_err(Invalid)?;
    let (width, height) = (width as usize, height as usize);
    let compression = ifd.one(259).unwrap_or(1);
    let codec = match compression {
        1 | 5 | 7 | 8 | 32946 | 32773 => None,
        2 => Some("CCITT modified Huffman (fax) compression"),
        3 => Some("CCITT group 3 (fax) compression"),
        4 => Some("CCITT group 4 (fax) compression"),
        6 => Some("old-style JPEG compression (compression 6)"),
        32771 => Some("16-bit padded raw data (compression 32771)"),
        32809 => Some("ThunderScan compression"),
        34676 | 34677 => Some("SGI LogLuv compression"),
        34925 => Some("LZMA compression"),
        50000 => Some("Zstandard compression"),
        50001 => Some("WebP compression"),
        other => return Err(Invalid(format!("TIFF compression {other}, which PIL cannot read either"))),
    };
    let photo = if compression == 6 { 6 } else { ifd.one(262).unwrap_or(0) };
    let planar = ifd.one(284).unwrap_or(1) == 2;
    let fill_order = ifd.one(266).unwrap_or(1);
    let mut formats = ifd.values(339).unwrap_or_else(|| vec![1]);
    if formats.len() > 1 && formats.iter().all(|&f| f == formats[0]) {
        formats.truncate(1);
    }
    let mut bps = ifd.values(258).unwrap_or_else(|| vec![1]);
    let mut extra = ifd.values(338).unwrap_or_default();
    let default_spp = if compression == 6 && matches!(photo, 2 | 6) { 3 } else { 1 };
    let mut spp = ifd.one(277).unwrap_or(default_spp).max(0) as usize;
    if planar && !extra.is_empty() && extra.iter().all(|&e| e == 0) {
        bps.truncate(bps.len().saturating_sub(extra.len()));
        spp = spp.saturating_sub(extra.len());
        extra.clear();
    }
    if spp > 6 {
        return Err(Invalid(format!("TIFF with {spp} samples per pixel")));
    }
    if spp < bps.len() {
        bps.truncate(spp);
    } else if spp > bps.len() && bps.len() == 1 {
        bps = vec![bps[0]; spp];
    }
    if bps.len() != spp || spp == 0 {
        return Err(Invalid("TIFF samples per pixel and bits per sample disagree".into()));
    }
    let bits = bps[0];
    let same = bps.iter().all(|&b| b == bits);
    let unknown = || {
        Invalid(format!(
            "TIFF pixel layout PIL cannot read either (photometric {photo}, bits {bps:?}, sample format \
             {formats:?}, extra samples {extra:?})"
        ))
    };
    if !same {
        return Err(unknown());
    }
    let format = formats[0];
    let ex: &[i64] = &extra;
    let le = ifd.le;
    let kind = match (photo, format, bits, spp, ex) {
        (8, ..) => return Err(Unsupported("TIFF with CIELab colour".into())),
        (6, 1, 8, 3, []) if compression == 7 && !planar => None,
        (6, ..) => {
            return Err(Unsupported("TIFF with YCbCr colour that is not JPEG-compressed in one plane".into()))
        }
        (0 | 1, 3, 32, 1, []) => return Err(Unsupported("TIFF with floating-point samples".into())),
        (1, 1 | 2, 32, 1, []) => return Err(Unsupported("TIFF with 32-bit integer samples".into())),
        (1, 1, 12, 1, []) if le => return Err(Unsupported("TIFF with 12-bit samples".into())),
        (1, 1, 8, 2, [1]) => return Err(Unsupported("TIFF grayscale with premultiplied alpha".into())),
        (0 | 1, 1, 1 | 2 | 4 | 8, 1, []) => Some(Kind::Gray { invert: photo == 0 }),
        (1, 2, 8, 1, []) => Some(Kind::Gray { invert: false }),
        (1, 1, 8, 2, [0] | [2]) => Some(Kind::Gray { invert: false }),
        (1, 1, 16, 1, []) | (0, 1, 16, 1, []) if le || photo == 1 => Some(Kind::Gray16 { signed: false }),
        (1, 2, 16, 1, []) => Some(Kind::Gray16 { signed: true }),
        (2, 1, 8, 3, [])
        | (2, 1, 8, 4, [] | [0] | [2] | [999])
        | (2, 1, 8, 5, [0, 0] | [2, 0])
        | (2, 1, 8, 6, [0, 0, 0] | [2, 0, 0])
        | (2, 1, 16, 3, [])
        | (2, 1, 16, 4, [] | [0] | [2]) => Some(Kind::Rgb { premultiplied: false }),
        (2, 1, 8, 4, [1]) | (2, 1, 8, 5, [1, 0]) | (2, 1, 8, 6, [1, 0, 0]) | (2, 1, 16, 4, [1]) => {
            Some(Kind::Rgb { premultiplied: true })
        }
        (3, 1, 1 | 2 | 4 | 8, 1, []) | (3, 1, 8, 2, [0] | [2]) => Some(Kind::Palette),
        (5, 1, 8, 4, []) | (5, 1, 8, 5, [0]) | (5, 1, 8, 6, [0, 0]) | (5, 1, 16, 4, []) => Some(Kind::Cmyk),
        _ => return Err(unknown()),
    };
    if let Some(codec) = codec {
        return Err(Unsupported(format!("TIFF with {codec}")));
    }
    if compression == 7 && cfg!(not(feature = "libjpeg-turbo")) {
        return Err(Unsupported(
            "TIFF with JPEG compression in a build without the `libjpeg-turbo` feature".into(),
        ));
    }
    let predictor = ifd.one(317).unwrap_or(1);
    if compression != 1 && predictor == 3 {
        return Err(Unsupported("TIFF with the floating-point predictor".into()));
    }
    // Fill order 2 (bits reversed in each byte) is undone by Pillow's raw modes or by libtiff
    // before decompression; libtiff's JPEG codec ignores it.
    let reverse_bits = fill_order == 2 && compression != 7;
    if fill_order == 2 && !(matches!(bits, 1 | 2 | 4 | 8) || (bits == 16 && le && photo == 1 && format == 1))
    {
        return Err(unknown());
    }
    let tiled = ifd.tags.contains_key(&324);
    let (offsets_tag, counts_tag) = if tiled { (324, 325) } else { (273, 279) };
    let chunk = if tiled {
        match (ifd.one(322), ifd.one(323)) {
            (Some(w), Some(h)) if w > 0 && h > 0 && w <= 1 << 16 && h <= 1 << 16 => (w as usize, h as usize),
            _ => return Err(Invalid("TIFF with invalid tile dimensions".into())),
        }
    } else {
        let rows = ifd.one(278).unwrap_or(height as i64);
        (width.max(1), (rows.max(1) as usize).min(height.max(1)))
    };
    let offsets =
        ifd.values(offsets_tag).ok_or_else(|| Invalid("TIFF without strip or tile offsets".into()))?;
    let counts =
        ifd.values(counts_tag).ok_or_else(|| Invalid("TIFF without strip or tile byte counts".into()))?;
    let per_plane = width.div_ceil(chunk.0) * height.div_ceil(chunk.1);
    let planes = if planar { spp } else { 1 };
    if offsets.len() < per_plane * planes || counts.len() < per_plane * planes {
        return Err(Invalid(format!(
            "TIFF lists {} strips or tiles where {} are needed",
            offsets.len().min(counts.len()),
            per_plane * planes
        )));
    }
    let chunks = (0..per_plane * planes)
        .map(|i| {
            let (o, n) = (offsets[i].max(0) as usize, counts[i].max(0) as usize);
            bytes
                .get(o..o.saturating_add(n))
                .ok_or_else(|| Invalid("TIFF strip or tile past the end of the file".into()))
        })
        .collect::<Result<Vec<_>>>()?;
    let colormap = if kind == Some(Kind::Palette) {
        let map = ifd.values(320).ok_or_else(|| Invalid("palette TIFF without a colour map".into()))?;
        let n = map.len() / 3;
        (0..n)
            .map(|i| [(map[i] / 256) as u8, (map[n + i] / 256) as u8, (map[2 * n + i] / 256) as u8])
            .collect()
    } else {
        Vec::new()
    };
    let orientation = ifd.one(274).map(|o| o as u32).or_else(|| {
        let xmp = ifd.tags.get(&700)?;
        crate::orientation::xmp_tag(xmp.data)
    });
    Ok(Plan {
        width,
        height,
        kind: kind.unwrap_or(Kind::Rgb { premultiplied: false }),
        bits: bits as usize,
        spp,
        compression,
        predictor,
        planar,
        reverse_bits,
        chunk,
        tiled,
        chunks,
        colormap,
        jpeg_tables: ifd.tags.get(&347).map(|e| e.data),
        ycbcr: kind.is_none(),
        orientation: orientation.unwrap_or(1),
        le,
    })
}

/// Inflates, expands or copies one strip or tile to `expected` bytes at most.
fn decompress(plan: &Plan, data: &[u8], expected: usize) -> Result<Vec<u8>> {
    let owned;
    let data = if plan.reverse_bits {
        owned = data.iter().map(|b| b.reverse_bits()).collect::<Vec<u8>>();
        &owned[..]
    } else {
        data
    };
    let corrupt = |what: String| Invalid(format!("corrupt TIFF strip or tile: {what}"));
    match plan.compression {
        1 => Ok(data[..data.len().min(expected)].to_vec()),
        5 => {
            // Into a buffer of the expected size, so a crafted stream cannot expand further.
            let mut out = vec![0u8; expected];
            let mut decoder = weezl::decode::Decoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8);
            let (mut read, mut written) = (0, 0);
            while written < expected {
                let r = decoder.decode_bytes(&data[read..], &mut out[written..]);
                read += r.consumed_in;
                written += r.consumed_out;
                match r.status {
                    Ok(weezl::LzwStatus::Ok) if r.consumed_in + r.consumed_out > 0 => {}
                    Ok(_) => break,
                    Err(e) => return Err(corrupt(format!("LZW: {e}"))),
                }
            }
            out.truncate(written);
            Ok(out)
        }
        8 | 32946 => {
            let mut out = miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(data, expected)
                .or_else(|e| {
                    if e.status == miniz_oxide::inflate::TINFLStatus::HasMoreOutput {
                        Ok(e.output)
                    } else {
                        Err(e)
                    }
                })
                .map_err(|e| corrupt(format!("deflate: {:?}", e.status)))?;
            out.truncate(expected);
            Ok(out)
        }
        32773 => {
            let mut out = Vec::with_capacity(expected);
            let mut at = 0;
            while at < data.len() && out.len() < expected {
                let n = data[at] as i8;
                at += 1;
                if n >= 0 {
                    let len = n as usize + 1;
                    out.extend_from_slice(&data[at.min(data.len())..(at + len).min(data.len())]);
                    at += len;
                } else if n != -128 {
                    if let Some(&b) = data.get(at) {
                        out.extend(std::iter::repeat_n(b, (1 - i32::from(n)) as usize));
                    }
                    at += 1;
                }
            }
            out.truncate(expected);
            Ok(out)
        }
        _ => unreachable!("plan() admits only these codecs"),
    }
}

/// Decodes the first image of a TIFF file to RGB as PIL's `convert("RGB")` of it, turned by
/// its orientation tag as Pillow's TIFF reader turns it.
///
/// # Errors
/// [`TiffError::Unsupported`] for what PIL reads and this does not, [`TiffError::Invalid`]
/// for what PIL cannot read either, corrupt data, or a file cut short.
pub(crate) fn decode(bytes: &[u8]) -> Result<Image> {
    let plan = plan(bytes)?;
    let (w, h, spp) = (plan.width, plan.height, plan.spp);
    let planes = if plan.planar { spp } else { 1 };
    let per_chunk = if plan.planar { 1 } else { spp };
    let (cw, ch) = plan.chunk;
    let across = w.div_ceil(cw);
    let per_plane = across * h.div_ceil(ch);
    // Every sample of the image, at its bit depth, pixel-interleaved.
    let size = w
        .checked_mul(h)
        .and_then(|p| p.checked_mul(spp))
        .ok_or_else(|| Invalid("TIFF dimensions overflow".into()))?;
    let mut samples = vec![0u16; size];
    let row_bytes = (cw * per_chunk * plan.bits).div_ceil(8);
    for (index, data) in plan.chunks.iter().enumerate() {
        let (plane, i) = (index / per_plane, index % per_plane);
        if plane >= planes {
            break;
        }
        let (x0, y0) = ((i % across) * cw, (i / across) * ch);
        // A strip holds the rows left when it is the last one; a tile is always whole.
        let rows = if plan.tiled { ch } else { ch.min(h - y0) };
        if plan.compression == 7 {
            jpeg_chunk(&plan, data, (x0, y0), rows, plane, &mut samples)?;
            continue;
        }
        let mut raw = decompress(&plan, data, row_bytes * rows)?;
        if plan.compression != 1 && plan.predictor == 2 {
            undo_predictor(&mut raw, row_bytes, per_chunk, plan.bits, plan.le)?;
        }
        let complete = raw.len() / row_bytes.max(1);
        let needed = if plan.tiled { (h - y0).min(ch) } else { rows };
        if complete < needed {
            return Err(Invalid(format!(
                "TIFF strip or tile cut short: {} of {} bytes",
                raw.len(),
                row_bytes * needed
            )));
        }
        for r in 0..needed {
            let row = &raw[r * row_bytes..(r + 1) * row_bytes];
            let y = y0 + r;
            for c in 0..cw.min(w - x0) {
                for s in 0..per_chunk {
                    let value = sample(row, c * per_chunk + s, plan.bits, plan.le);
                    samples[(y * w + x0 + c) * spp + plane + s] = value;
                }
            }
        }
    }
    let image = to_rgb(&plan, &samples);
    Ok(crate::orientation::apply(image, plan.orientation))
}

/// Sample `n` of a row of `bits`-bit samples (MSB first below 8 bits; 16-bit in the file's
/// byte order).
fn sample(row: &[u8], n: usize, bits: usize, le: bool) -> u16 {
    match bits {
        8 => u16::from(row[n]),
        16 => {
            let b = [row[2 * n], row[2 * n + 1]];
            if le {
                u16::from_le_bytes(b)
            } else {
                u16::from_be_bytes(b)
            }
        }
        _ => {
            let first = n * bits;
            u16::from((row[first / 8] >> (8 - bits - first % 8)) & ((1u16 << bits) - 1) as u8)
        }
    }
}

/// libtiff's horizontal predictor: each sample adds the one `stride` samples before it in
/// its row (8- and 16-bit samples, wrapping).
fn undo_predictor(raw: &mut [u8], row_bytes: usize, stride: usize, bits: usize, le: bool) -> Result<()> {
    match bits {
        8 => {
            for row in raw.chunks_mut(row_bytes) {
                for i in stride..row.len() {
                    row[i] = row[i].wrapping_add(row[i - stride]);
                }
            }
        }
        16 => {
            for row in raw.chunks_mut(row_bytes) {
                let n = row.len() / 2;
                for i in stride..n {
                    let get = |r: &[u8], k: usize| {
                        let b = [r[2 * k], r[2 * k + 1]];
                        if le {
                            u16::from_le_bytes(b)
                        } else {
                            u16::from_be_bytes(b)
                        }
                    };
                    let v = get(row, i).wrapping_add(get(row, i - stride));
                    let b = if le { v.to_le_bytes() } else { v.to_be_bytes() };
                    row[2 * i..2 * i + 2].copy_from_slice(&b);
                }
            }
        }
        other => {
            return Err(Unsupported(format!("TIFF with the horizontal predictor on {other}-bit samples")))
        }
    }
    Ok(())
}

/// Decodes a JPEG strip or tile with libjpeg-turbo and writes its samples.
#[cfg(feature = "libjpeg-turbo")]
fn jpeg_chunk(
    plan: &Plan,
    data: &[u8],
    (x0, y0): (usize, usize),
    rows: usize,
    plane: usize,
    samples: &mut [u16],
) -> Result<()> {
    // The tables, when kept apart in JPEGTables, go before the strip's own segments.
    let spliced;
    let stream = match plan.jpeg_tables {
        Some(t) if t.len() > 4 && t.ends_with(&[0xFF, 0xD9]) && data.starts_with(&[0xFF, 0xD8]) => {
            spliced = [&t[..t.len() - 2], &data[2..]].concat();
            &spliced[..]
        }
        _ => data,
    };
    let (jw, jh, comps, pixels) = crate::libjpeg::decode_tiff_chunk(stream, plan.ycbcr)
        .map_err(|e| Invalid(format!("JPEG strip or tile in a TIFF: {e}")))?;
    let per_chunk = if plan.planar { 1 } else { plan.spp };
    if comps != per_chunk || plan.bits != 8 {
        return Err(Invalid(format!(
            "a JPEG strip or tile with {comps} components where the TIFF has {per_chunk} of {} bits",
            plan.bits
        )));
    }
    let (w, h, spp) = (plan.width, plan.height, plan.spp);
    for r in 0..rows.min(jh).min(h - y0) {
        for c in 0..jw.min(plan.chunk.0).min(w - x0) {
            for s in 0..comps {
                samples[((y0 + r) * w + x0 + c) * spp + plane + s] =
                    u16::from(pixels[(r * jw + c) * comps + s]);
            }
        }
    }
    Ok(())
}

/// Without libjpeg-turbo, JPEG-compressed TIFFs are refused.
#[cfg(not(feature = "libjpeg-turbo"))]
fn jpeg_chunk(_: &Plan, _: &[u8], _: (usize, usize), _: usize, _: usize, _: &mut [u16]) -> Result<()> {
    Err(Unsupported("TIFF with JPEG compression in a build without the `libjpeg-turbo` feature".into()))
}

/// Pillow's `(a * b) / 255`, rounded (`MULDIV255`).
fn muldiv255(a: u32, b: u32) -> u32 {
    let t = a * b + 128;
    ((t >> 8) + t) >> 8
}

/// The samples as RGB, as Pillow's unpacker and `convert("RGB")` make them.
fn to_rgb(plan: &Plan, samples: &[u16]) -> Image {
    let (w, h, spp, bits) = (plan.width, plan.height, plan.spp, plan.bits);
    let mut out = Vec::with_capacity(w * h * 3);
    // 16-bit colour keeps the high byte; below 8 bits, gray is spread over 0..=255.
    let to8 = |v: u16| if bits == 16 { (v >> 8) as u8 } else { v as u8 };
    for p in samples.chunks_exact(spp) {
        match plan.kind {
            Plan::GRAY_PLAIN | Plan::GRAY_INVERTED => {
                let scale = match bits {
                    1 => 255,
                    2 => 0x55,
                    4 => 0x11,
                    _ => 1,
                };
                let v = (p[0] * scale) as u8;
                let v = if plan.kind == Plan::GRAY_INVERTED { 255 - v } else { v };
                out.extend([v; 3]);
            }
            Kind::Gray16 { signed } => {
                let v = if signed { (p[0] as i16).clamp(0, 255) as u8 } else { p[0].min(255) as u8 };
                out.extend([v; 3]);
            }
            Kind::Palette => out.extend(plan.colormap.get(usize::from(p[0])).copied().unwrap_or([0; 3])),
            Kind::Rgb { premultiplied: false } => out.extend([to8(p[0]), to8(p[1]), to8(p[2])]),
            Kind::Rgb { premultiplied: true } => {
                let a = u32::from(to8(p[3]));
                for &v in &p[..3] {
                    let v = u32::from(to8(v));
                    out.push(match a {
                        0 => 0,
                        255 => v as u8,
                        a => (v * 255 / a).min(255) as u8,
                    });
                }
            }
            Kind::Cmyk => {
                let nk = 255 - u32::from(to8(p[3]));
                for &c in &p[..3] {
                    out.push((nk as i32 - muldiv255(u32::from(to8(c)), nk) as i32).clamp(0, 255) as u8);
                }
            }
        }
    }
    Image::new(w, h, 3, out)
}

impl Plan<'_> {
    const GRAY_PLAIN: Kind = Kind::Gray { invert: false };
    const GRAY_INVERTED: Kind = Kind::Gray { invert: true };
}
