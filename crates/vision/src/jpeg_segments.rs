//! `JpegSegments`: a JPEG's header segments, which the decoder (truncation checks) and the EXIF
//! orientation reader both walk.

/// A JPEG's header segments, `(marker, payload)`, walked from the start-of-image marker (each
/// `FF xx` followed by its 2-byte big-endian length) up to and including the first
/// start-of-scan (yielded with an empty payload). The walk ends early at anything it does not
/// understand: no start-of-image marker, an end-of-image marker, a length running past the end.
pub(crate) struct JpegSegments<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> JpegSegments<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        let at = if bytes.starts_with(&[0xFF, 0xD8]) { 2 } else { bytes.len() };
        JpegSegments { bytes, at }
    }
}

impl<'a> Iterator for JpegSegments<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let [0xFF, marker, ..] = self.bytes[self.at.min(self.bytes.len())..] else { return None };
            match marker {
                // Fill bytes before a marker.
                0xFF => self.at += 1,
                // Markers without a length: TEM, RSTn.
                0x01 | 0xD0..=0xD7 => self.at += 2,
                // SOI/EOI cannot come before a scan.
                0x00 | 0xD8 | 0xD9 => return None,
                0xDA => {
                    self.at = self.bytes.len();
                    return Some((0xDA, &[]));
                }
                _ => {
                    let len = match self.bytes.get(self.at + 2..self.at + 4) {
                        Some(&[hi, lo]) if u16::from_be_bytes([hi, lo]) >= 2 => {
                            usize::from(u16::from_be_bytes([hi, lo]))
                        }
                        _ => return None,
                    };
                    let payload = self.bytes.get(self.at + 4..self.at + 2 + len)?;
                    self.at += 2 + len;
                    return Some((marker, payload));
                }
            }
        }
    }
}
