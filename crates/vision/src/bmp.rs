//! BMP decoding as Pillow's `BmpImagePlugin` reads a file and `convert("RGB")` turns it into
//! RGB: its header rules (where the pixels start, colour tables, grayscale tables read as
//! grayscale), its bit expansion of 16-bit pixels (`v * 255 / 31`, truncating), and its RLE
//! decoder (skipped pixels are index 0). Checked against PIL by `tests/it/variants.rs`.

use crate::image::Image;

/// Where the pixels are and how to read them, from the headers.
struct Layout {
    width: usize,
    height: usize,
    /// Rows stored top row first (a negative height).
    top_down: bool,
    bits: u32,
    /// How a row's pixels are read (Pillow's raw mode).
    unpack: Unpack,
    /// RLE8 or RLE4 (`Some(true)` for RLE4), else raw rows.
    rle4: Option<bool>,
    /// The colour table as RGB, for [`Unpack::Index`].
    palette: Vec<[u8; 3]>,
    /// Where the pixel data starts.
    offset: usize,
}

/// How pixels are unpacked from a row (Pillow's raw modes).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unpack {
    /// Palette indices of `bits` bits, MSB first (`P;1`, `P;4`, `P`).
    Index(u32),
    /// One bit per pixel, 0 or 255 (`1`: a black-and-white colour table).
    Bilevel,
    /// One byte per pixel, gray (`L`: a colour table that is a gray ramp).
    Gray,
    /// 16 bits, 5 per channel (`BGR;15`).
    Bgr15,
    /// 16 bits, 5-6-5 (`BGR;16`).
    Bgr16,
    /// Bytes per pixel and the byte offsets of R, G and B.
    Bytes(usize, [usize; 3]),
}

fn u16_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?)))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The width and height the headers declare (Pillow's size), or why the file is refused.
pub(crate) fn dimensions(bytes: &[u8]) -> Result<(u32, u32), String> {
    let layout = layout(bytes)?;
    Ok((layout.width as u32, layout.height as u32))
}

fn layout(bytes: &[u8]) -> Result<Layout, String> {
    let short = || "BMP headers cut short".to_string();
    if !bytes.starts_with(b"BM") {
        return Err("not a BMP file".into());
    }
    let mut offset = u32_at(bytes, 10).ok_or_else(short)? as usize;
    let header_size = u32_at(bytes, 14).ok_or_else(short)? as usize;
    let header = bytes.get(18..14 + header_size.max(4)).ok_or_else(short)?;
    // The file position after the header: masks and the colour table are read from here.
    let mut at = 14 + header_size;
    let (width, height, top_down, bits, compression, mut colors, padding);
    let (mut masks, mut alpha_mask) = ([0u32; 3], 0u32);
    match header_size {
        12 => {
            width = u16_at(header, 0).ok_or_else(short)?;
            height = u16_at(header, 2).ok_or_else(short)?;
            top_down = false;
            bits = u16_at(header, 6).ok_or_else(short)?;
            compression = 0;
            colors = 0u64;
            padding = 3;
        }
        40 | 52 | 56 | 64 | 108 | 124 => {
            top_down = header.get(7) == Some(&0xFF);
            width = u32_at(header, 0).ok_or_else(short)?;
            let h = u32_at(header, 4).ok_or_else(short)?;
            height = if top_down { h.wrapping_neg() } else { h };
            bits = u16_at(header, 10).ok_or_else(short)?;
            compression = u32_at(header, 12).ok_or_else(short)?;
            colors = u64::from(u32_at(header, 28).ok_or_else(short)?);
            padding = 4;
            if compression == 3 {
                if header.len() >= 48 {
                    for (i, m) in masks.iter_mut().enumerate() {
                        *m = u32_at(header, 36 + 4 * i).ok_or_else(short)?;
                    }
                    if header.len() >= 52 {
                        alpha_mask = u32_at(header, 48).ok_or_else(short)?;
                    }
                } else {
                    for m in masks.iter_mut() {
                        *m = u32_at(bytes, at).ok_or_else(short)?;
                        at += 4;
                    }
                }
            }
        }
        other => return Err(format!("unsupported BMP header type ({other})")),
    }
    if colors == 0 {
        colors = 1u64 << bits.min(40);
    }
    if offset == 14 + header_size && bits <= 8 {
        offset += padding * colors as usize;
    }
    let mut unpack = match bits {
        1 | 4 | 8 => Unpack::Index(bits),
        16 => Unpack::Bgr15,
        24 => Unpack::Bytes(3, [2, 1, 0]),
        32 => Unpack::Bytes(4, [2, 1, 0]),
        other => return Err(format!("unsupported BMP pixel depth ({other})")),
    };
    let mut rle4 = None;
    match compression {
        0 => {}
        1 | 2 if bits <= 8 => rle4 = Some(compression == 2),
        3 => {
            let rgba = (masks[0], masks[1], masks[2], alpha_mask);
            unpack = match (bits, rgba) {
                (32, (0xFF0000, 0xFF00, 0xFF, 0) | (0xFF0000, 0xFF00, 0xFF, 0xFF000000) | (0, 0, 0, 0)) => {
                    Unpack::Bytes(4, [2, 1, 0])
                }
                (32, (0xFF000000, 0xFF0000, 0xFF00, 0) | (0xFF000000, 0xFF0000, 0xFF00, 0xFF)) => {
                    Unpack::Bytes(4, [3, 2, 1])
                }
                (32, (0xFF000000, 0xFF00, 0xFF, 0) | (0xFF000000, 0xFF00, 0xFF, 0xFF0000)) => {
                    Unpack::Bytes(4, [3, 1, 0])
                }
                (32, (0xFF, 0xFF00, 0xFF0000, 0xFF000000)) => Unpack::Bytes(4, [0, 1, 2]),
                (24, (0xFF0000, 0xFF00, 0xFF, _)) => Unpack::Bytes(3, [2, 1, 0]),
                (16, (0xF800, 0x7E0, 0x1F, _)) => Unpack::Bgr16,
                (16, (0x7C00, 0x3E0, 0x1F, _)) => Unpack::Bgr15,
                _ => {
                    return Err(format!(
                        "unsupported BMP bitfields layout ({bits} bits, masks {:#x} {:#x} {:#x} {:#x})",
                        masks[0], masks[1], masks[2], alpha_mask
                    ))
                }
            };
        }
        other => return Err(format!("unsupported BMP compression ({other})")),
    }
    let mut palette = Vec::new();
    if bits <= 8 {
        if !(1..=65536).contains(&colors) {
            return Err(format!("unsupported BMP palette size ({colors})"));
        }
        let table = &bytes[at.min(bytes.len())..(at + padding * colors as usize).min(bytes.len())];
        at += table.len();
        let entry = |i: usize| table.get(i * padding..i * padding + 3);
        // Pillow reads a table of grays whose values are their indices (or black and white for
        // two colours) as a grayscale image, and then unpacks bytes (or bits) as gray values.
        let gray = if colors == 2 {
            entry(0) == Some(&[0, 0, 0]) && entry(1) == Some(&[255, 255, 255])
        } else {
            (0..colors as usize).all(|i| entry(i) == Some(&[(i & 255) as u8; 3][..]))
        };
        if gray {
            unpack = if colors <= 2 { Unpack::Bilevel } else { Unpack::Gray };
        } else {
            palette = table.chunks_exact(padding).map(|e| [e[2], e[1], e[0]]).collect();
        }
    }
    if offset == 0 {
        offset = at;
    }
    Ok(Layout {
        width: width as usize,
        height: height as usize,
        top_down,
        bits,
        unpack,
        rle4,
        palette,
        offset,
    })
}

/// Decodes a BMP file to RGB as `Image.open(f).convert("RGB")` does.
///
/// # Errors
/// A message for headers Pillow refuses too, and for pixel data cut short.
pub(crate) fn decode(bytes: &[u8]) -> Result<Image, String> {
    let l = layout(bytes)?;
    let (w, h) = (l.width, l.height);
    let data = bytes.get(l.offset..).unwrap_or(&[]);
    let size = w.checked_mul(h).and_then(|p| p.checked_mul(3)).ok_or("BMP dimensions overflow")?;
    let lookup = |index: usize| l.palette.get(index).copied().unwrap_or([0, 0, 0]);
    let put_index = |out: &mut [u8], at: usize, v: u8| {
        let rgb = match l.unpack {
            Unpack::Bilevel => [if v != 0 { 255 } else { 0 }; 3],
            Unpack::Gray => [v; 3],
            _ => lookup(usize::from(v)),
        };
        out[at * 3..at * 3 + 3].copy_from_slice(&rgb);
    };
    if l.rle4.is_none() && data.len() < stride(&l).saturating_mul(h) {
        return Err(format!(
            "BMP pixel data cut short: {} of {} bytes ({h} rows of {})",
            data.len(),
            stride(&l).saturating_mul(h),
            stride(&l)
        ));
    }
    let mut out = vec![0u8; size];
    if let Some(rle4) = l.rle4 {
        let indices = rle(data, l.offset, w, h, rle4)?;
        for (stored_row, row) in indices.chunks(w.max(1)).enumerate() {
            let y = if l.top_down { stored_row } else { h - 1 - stored_row };
            for (x, &v) in row.iter().enumerate() {
                put_index(&mut out, y * w + x, v);
            }
        }
        return Ok(Image::new(w, h, 3, out));
    }
    let stride = stride(&l);
    for stored_row in 0..h {
        let row = &data[stored_row * stride..(stored_row + 1) * stride];
        let y = if l.top_down { stored_row } else { h - 1 - stored_row };
        for x in 0..w {
            let at = y * w + x;
            // Pillow unpacks with the raw mode, whose pixel width can differ from the file's bit
            // depth (a grayscale table read as bytes); reading past the row is cut short.
            let bit = |bits: usize| -> Result<u8, String> {
                let first = x * bits;
                let byte = *row.get(first / 8).ok_or("BMP row shorter than its pixels")?;
                Ok((byte >> (8 - bits - first % 8)) & ((1u16 << bits) - 1) as u8)
            };
            match l.unpack {
                Unpack::Index(bits) => put_index(&mut out, at, bit(bits as usize)?),
                Unpack::Bilevel => put_index(&mut out, at, bit(1)?),
                Unpack::Gray => put_index(&mut out, at, bit(8)?),
                Unpack::Bgr15 | Unpack::Bgr16 => {
                    let p = u16_at(row, 2 * x).ok_or("BMP row shorter than its pixels")?;
                    let (r, g, b) = if l.unpack == Unpack::Bgr15 {
                        (((p >> 10) & 31) * 255 / 31, ((p >> 5) & 31) * 255 / 31, (p & 31) * 255 / 31)
                    } else {
                        (((p >> 11) & 31) * 255 / 31, ((p >> 5) & 63) * 255 / 63, (p & 31) * 255 / 31)
                    };
                    out[at * 3..at * 3 + 3].copy_from_slice(&[r as u8, g as u8, b as u8]);
                }
                Unpack::Bytes(n, [r, g, b]) => {
                    let p = row.get(x * n..x * n + n).ok_or("BMP row shorter than its pixels")?;
                    out[at * 3..at * 3 + 3].copy_from_slice(&[p[r], p[g], p[b]]);
                }
            }
        }
    }
    Ok(Image::new(w, h, 3, out))
}

/// Bytes per stored row: the bits of a row rounded up to 4 bytes.
fn stride(l: &Layout) -> usize {
    (((l.width as u64).saturating_mul(u64::from(l.bits)) + 31) >> 3 & !3) as usize
}

/// Pillow's `BmpRleDecoder`: the indices of a `w x h` image in stored row order. Runs longer
/// than what is left of the row are cut; end-of-line pads the row with index 0; a delta adds
/// `right + up * width` zeros; absolute runs end on an even *file* position (`file_offset` is
/// where `data` starts). The data must fill the image, else Pillow raises "not enough image
/// data", and so does this.
fn rle(data: &[u8], file_offset: usize, w: usize, h: usize, rle4: bool) -> Result<Vec<u8>, String> {
    let total = w * h;
    let mut out: Vec<u8> = Vec::with_capacity(total);
    let (mut at, mut x) = (0usize, 0usize);
    while out.len() < total {
        let (Some(&count), Some(&byte)) = (data.get(at), data.get(at + 1)) else { break };
        at += 2;
        if count != 0 {
            let n = if x + usize::from(count) > w { w.saturating_sub(x) } else { usize::from(count) };
            for i in 0..n {
                out.push(if !rle4 {
                    byte
                } else if i % 2 == 0 {
                    byte >> 4
                } else {
                    byte & 0x0F
                });
            }
            x += n;
            continue;
        }
        match byte {
            0 => {
                while !out.len().is_multiple_of(w.max(1)) {
                    out.push(0);
                }
                x = 0;
            }
            1 => break,
            2 => {
                let (Some(&right), Some(&up)) = (data.get(at), data.get(at + 1)) else { break };
                at += 2;
                let skip = (usize::from(right) + usize::from(up) * w).min(total - out.len());
                out.resize(out.len() + skip, 0);
                x = out.len() % w.max(1);
            }
            n => {
                let n = usize::from(n);
                let count = n.min(total - out.len());
                let byte_count = if rle4 { count.div_ceil(2) } else { count };
                let read = &data[at.min(data.len())..(at + byte_count).min(data.len())];
                at += read.len();
                if rle4 {
                    for (i, &b) in read.iter().enumerate() {
                        out.push(b >> 4);
                        if i * 2 + 1 < count {
                            out.push(b & 0x0F);
                        }
                    }
                } else {
                    out.extend_from_slice(read);
                }
                if read.len() < byte_count || out.len() == total {
                    break;
                }
                x += n;
                if !(file_offset + at).is_multiple_of(2) {
                    at += 1;
                }
            }
        }
    }
    if out.len() < total {
        return Err(format!("not enough image data: the RLE data fills {} of {total} pixels", out.len()));
    }
    out.truncate(total);
    Ok(out)
}
