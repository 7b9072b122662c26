//! The EXIF orientation as `PIL.ImageOps.exif_transpose` finds it (`Image.getexif()`: the EXIF
//! block's IFD0 tag 0x0112, else an XMP packet's `tiff:Orientation`), read from JPEG, PNG and
//! WebP files, and the transposition it calls for.

use crate::image::Image;

/// The EXIF orientation tag's value (1 upright; 2 to 8 a flip and/or a quarter turn, the
/// values `exif_transpose` acts on; anything else is left alone as PIL leaves it).
pub(crate) type Orientation = u32;

/// The orientation a JPEG declares, as Pillow reads it: the `APP1` `Exif` segments (Pillow
/// joins them: the first whole, later ones without their `Exif\0\0` prefix), else the XMP
/// `APP1` segment's `tiff:Orientation`; 1 when neither says.
pub(crate) fn jpeg(bytes: &[u8]) -> Orientation {
    let mut exif: Option<Vec<u8>> = None;
    let mut xmp: Option<&[u8]> = None;
    for (marker, payload) in crate::jpeg_segments::JpegSegments::new(bytes) {
        if marker != 0xE1 {
            continue;
        }
        if let Some(rest) = payload.strip_prefix(b"Exif\0\0") {
            match &mut exif {
                None => exif = Some(rest.to_vec()),
                Some(joined) => joined.extend_from_slice(rest),
            }
        } else if let Some(rest) = payload.strip_prefix(b"http://ns.adobe.com/xap/1.0/\0") {
            xmp = Some(rest);
        }
    }
    resolve(exif.as_deref(), xmp)
}

/// The orientation a PNG declares: its (last) `eXIf` chunk, or a `Raw profile type exif` text
/// chunk (ImageMagick's hex dump), else XMP (`XML:com.adobe.xmp` in a `tEXt`, `zTXt` or
/// `iTXt` chunk); chunks after the image data count too, as Pillow reads them on load.
pub(crate) fn png(bytes: &[u8]) -> Orientation {
    let mut exif: Option<Vec<u8>> = None;
    let mut raw_profile: Option<Vec<u8>> = None;
    let mut xmp: Option<Vec<u8>> = None;
    let mut at = 8;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let Some(data) = bytes.get(at + 8..(at + 8).saturating_add(len)) else { break };
        match &head[4..8] {
            b"eXIf" => exif = Some(data.to_vec()),
            b"tEXt" | b"zTXt" | b"iTXt" => {
                if let Some((key, text)) = png_text(&head[4..8], data) {
                    match key {
                        b"XML:com.adobe.xmp" => xmp = Some(text),
                        b"Raw profile type exif" => raw_profile = Some(text),
                        _ => {}
                    }
                }
            }
            b"IEND" => break,
            _ => {}
        }
        at += 12 + len;
    }
    // Pillow: "Raw profile type exif" is `\nexif\n<length>\n<hex lines>`; lines after the third.
    let profile = || {
        let text = String::from_utf8_lossy(raw_profile.as_deref()?).into_owned();
        let hex: String = text.split('\n').skip(3).collect::<Vec<_>>().concat();
        let hex = hex.as_bytes();
        let digit = |c: u8| (c as char).to_digit(16);
        hex.len()
            .is_multiple_of(2)
            .then(|| hex.chunks(2).map(|p| Some((digit(p[0])? * 16 + digit(p[1])?) as u8)).collect())
            .flatten()
    };
    let exif = exif.or_else(profile);
    resolve(exif.as_deref(), xmp.as_deref())
}

/// A PNG text chunk's keyword and text (`zTXt` and compressed `iTXt` inflated).
fn png_text<'a>(kind: &[u8], data: &'a [u8]) -> Option<(&'a [u8], Vec<u8>)> {
    let nul = data.iter().position(|&b| b == 0)?;
    let (key, rest) = (&data[..nul], &data[nul + 1..]);
    let inflate = |z: &[u8]| miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(z, 16 << 20).ok();
    let text = match kind {
        b"tEXt" => rest.to_vec(),
        b"zTXt" => inflate(rest.get(1..)?)?,
        _ => {
            // iTXt: compression flag, method, language tag\0, translated keyword\0, text.
            let (&flag, rest) = rest.split_first()?;
            let rest = rest.get(1..)?;
            let lang_end = rest.iter().position(|&b| b == 0)?;
            let rest = &rest[lang_end + 1..];
            let key_end = rest.iter().position(|&b| b == 0)?;
            let text = &rest[key_end + 1..];
            if flag == 1 {
                inflate(text)?
            } else {
                text.to_vec()
            }
        }
    };
    Some((key, text))
}

/// The orientation a WebP declares: its `EXIF` chunk, else its `XMP ` chunk.
pub(crate) fn webp(bytes: &[u8]) -> Orientation {
    let (mut exif, mut xmp) = (None, None);
    let mut at = 12;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        let Some(data) = bytes.get(at + 8..(at + 8).saturating_add(len)) else { break };
        match &head[..4] {
            b"EXIF" => exif = exif.or(Some(data)),
            b"XMP " => xmp = xmp.or(Some(data)),
            _ => {}
        }
        at += 8 + len + (len & 1);
    }
    resolve(exif, xmp)
}

/// `getexif()`'s rule: the EXIF block's tag when it has one, else XMP's.
fn resolve(exif: Option<&[u8]>, xmp: Option<&[u8]>) -> Orientation {
    exif.and_then(exif_tag).or_else(|| xmp.and_then(xmp_tag)).unwrap_or(1)
}

/// Tag 0x0112 of an EXIF block's IFD0 (the block is a TIFF header and IFDs; a leading
/// `Exif\0\0` is skipped, as Pillow's `Exif.load` skips it). `None` when absent, malformed,
/// or not one integer (Pillow keeps a multi-valued tag as a tuple, which `exif_transpose`
/// ignores).
pub(crate) fn exif_tag(data: &[u8]) -> Option<Orientation> {
    let data = data.strip_prefix(b"Exif\0\0").unwrap_or(data);
    let le = match data.get(..4)? {
        b"II*\0" => true,
        b"MM\0*" => false,
        _ => return None,
    };
    let u16_at = |at: usize| {
        let b = data.get(at..at + 2)?;
        Some(if le { u16::from_le_bytes([b[0], b[1]]) } else { u16::from_be_bytes([b[0], b[1]]) })
    };
    let u32_at = |at: usize| {
        let b: [u8; 4] = data.get(at..at + 4)?.try_into().ok()?;
        Some(if le { u32::from_le_bytes(b) } else { u32::from_be_bytes(b) })
    };
    let ifd = u32_at(4)? as usize;
    let count = u16_at(ifd)? as usize;
    for i in 0..count {
        let entry = ifd + 2 + 12 * i;
        if u16_at(entry)? != 0x0112 {
            continue;
        }
        let (kind, n) = (u16_at(entry + 2)?, u32_at(entry + 4)?);
        if n != 1 {
            return None;
        }
        let value = entry + 8;
        return match kind {
            1 => data.get(value).map(|&b| u32::from(b)),
            6 => data.get(value).map(|&b| b as i8 as i32 as u32),
            3 => u16_at(value).map(u32::from),
            8 => u16_at(value).map(|v| v as i16 as i32 as u32),
            4 | 9 => u32_at(value),
            _ => None,
        };
    }
    None
}

/// The first `tiff:Orientation="N` or `tiff:Orientation>N` in an XMP packet (Pillow's regular
/// expression `tiff:Orientation(="|>)([0-9])`).
pub(crate) fn xmp_tag(xmp: &[u8]) -> Option<Orientation> {
    const KEY: &[u8] = b"tiff:Orientation";
    let mut from = 0;
    while let Some(at) = xmp[from..].windows(KEY.len()).position(|w| w == KEY) {
        let after = &xmp[from + at + KEY.len()..];
        let digit = match after {
            [b'=', b'"', d, ..] | [b'>', d, ..] => Some(*d),
            _ => None,
        };
        if let Some(d) = digit.filter(u8::is_ascii_digit) {
            return Some(u32::from(d - b'0'));
        }
        from += at + 1;
    }
    None
}

/// `image` turned as `exif_transpose` turns it for `orientation` (2 to 8; other values leave
/// it as it is).
pub(crate) fn apply(image: Image, orientation: Orientation) -> Image {
    if !(2..=8).contains(&orientation) {
        return image;
    }
    let (w, h, c) = (image.width(), image.height(), image.channels());
    let swap = orientation >= 5;
    let (ow, oh) = if swap { (h, w) } else { (w, h) };
    let src = image.pixels();
    let mut out = vec![0u8; src.len()];
    for y in 0..oh {
        for x in 0..ow {
            // PIL's Transpose methods: FLIP_LEFT_RIGHT (2), ROTATE_180 (3), FLIP_TOP_BOTTOM (4),
            // TRANSPOSE (5), ROTATE_270 (6, a quarter turn clockwise), TRANSVERSE (7),
            // ROTATE_90 (8, anticlockwise).
            let (sx, sy) = match orientation {
                2 => (w - 1 - x, y),
                3 => (w - 1 - x, h - 1 - y),
                4 => (x, h - 1 - y),
                5 => (y, x),
                6 => (y, h - 1 - x),
                7 => (w - 1 - y, h - 1 - x),
                _ => (w - 1 - y, x),
            };
            let (o, s) = ((y * ow + x) * c, (sy * w + sx) * c);
            out[o..o + c].copy_from_slice(&src[s..s + c]);
        }
    }
    Image::new(ow, oh, c, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xmp_orientation_follows_pillows_pattern() {
        assert_eq!(xmp_tag(br#"<x tiff:Orientation="6"/>"#), Some(6));
        assert_eq!(xmp_tag(b"<tiff:Orientation>3</tiff:Orientation>"), Some(3));
        assert_eq!(xmp_tag(br#"tiff:Orientation='6' tiff:Orientation="8""#), Some(8));
        assert_eq!(xmp_tag(b"tiff:Orientation"), None);
    }

    #[test]
    fn each_orientation_moves_the_corner_pixel_where_pil_does() {
        // 3 wide, 2 high; pixel value = 10 * y + x.
        let image = Image::new(3, 2, 1, vec![0, 1, 2, 10, 11, 12]);
        let got = |o| {
            let t = apply(image.clone(), o);
            (t.width(), t.height(), t.pixels().to_vec())
        };
        assert_eq!(got(2), (3, 2, vec![2, 1, 0, 12, 11, 10]));
        assert_eq!(got(3), (3, 2, vec![12, 11, 10, 2, 1, 0]));
        assert_eq!(got(4), (3, 2, vec![10, 11, 12, 0, 1, 2]));
        assert_eq!(got(5), (2, 3, vec![0, 10, 1, 11, 2, 12]));
        assert_eq!(got(6), (2, 3, vec![10, 0, 11, 1, 12, 2]));
        assert_eq!(got(7), (2, 3, vec![12, 2, 11, 1, 10, 0]));
        assert_eq!(got(8), (2, 3, vec![2, 12, 1, 11, 0, 10]));
        assert_eq!(got(9), (3, 2, vec![0, 1, 2, 10, 11, 12]));
    }
}
