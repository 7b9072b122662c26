//! JPEG decoding against PIL, byte for byte (`tests/fixtures/make_jpegs.py`): every chroma
//! subsampling, grayscale, RGB, progressive, restart markers, odd sizes.

use crate::fixture;
use torchlight_vision::{decode_file, jpeg_decoder};

/// `(name, width, height, sha256 of PIL's RGB bytes)` for every fixture JPEG.
pub fn expected() -> Vec<(String, usize, usize, String)> {
    let text = std::fs::read_to_string(fixture("jpeg/expected.txt")).expect("read expected.txt");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(f.len(), 4, "expected.txt: {line}");
            (f[0].to_string(), f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].to_string())
        })
        .collect()
}

/// The SHA-256 of `bytes` in lowercase hex, as Python's `hexdigest()`.
#[cfg(feature = "libjpeg-turbo")]
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// With libjpeg-turbo (the default build), each file decodes to exactly PIL's bytes
/// (tolerance 0): Pillow 13's libjpeg-turbo 3.2 and the system's 2.1.5 agree on all of them.
#[cfg(feature = "libjpeg-turbo")]
#[test]
fn jpegs_decode_byte_for_byte_as_pil_does() {
    assert!(jpeg_decoder().starts_with("libjpeg-turbo "), "{}", jpeg_decoder());
    let cases = expected();
    assert_eq!(cases.len(), 31);
    let mut differ = Vec::new();
    for (name, width, height, sha) in &cases {
        let image =
            decode_file(fixture(&format!("jpeg/{name}.jpg"))).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((image.width(), image.height(), image.channels()), (*width, *height, 3), "{name}");
        if sha256_hex(image.pixels()) != *sha {
            differ.push(name.as_str());
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} files decode differently from PIL: {differ:?}",
        differ.len(),
        cases.len()
    );
}

/// Without libjpeg-turbo, zune-jpeg decodes every file to the right size (its bytes differ
/// from PIL's by a few units).
#[cfg(not(feature = "libjpeg-turbo"))]
#[test]
fn jpegs_decode_to_the_right_size_with_zune_jpeg() {
    assert_eq!(jpeg_decoder(), "zune-jpeg");
    for (name, width, height, _) in expected() {
        let image =
            decode_file(fixture(&format!("jpeg/{name}.jpg"))).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((image.width(), image.height()), (width, height), "{name}");
    }
}

/// The fixture `name`'s bytes.
fn jpeg_bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixture(&format!("jpeg/{name}.jpg"))).expect("read the fixture")
}

/// Where the start-of-frame marker (`FF C0`/`FF C2`) is.
fn sof_at(bytes: &[u8]) -> usize {
    bytes.windows(2).position(|w| w == [0xFF, 0xC0] || w == [0xFF, 0xC2]).expect("a SOF marker")
}

/// libjpeg's errors come back as `VisionError::Decode` naming the file (its default handler
/// would end the process), and a header declaring a huge image is refused before decoding.
#[test]
fn libjpeg_errors_and_the_pixel_limit_name_the_file() {
    use torchlight_vision::{decode_bytes, VisionError};
    // An unsupported process (lossless, SOF3): libjpeg 2.1 raises an error.
    let mut lossless = jpeg_bytes("s420_q95");
    let at = sof_at(&lossless);
    lossless[at + 1] = 0xC3;
    let err = decode_bytes(&lossless, "cats/lossless.jpg").unwrap_err();
    assert!(matches!(err, VisionError::Decode { .. }), "{err:?}");
    assert!(err.to_string().contains("cats/lossless.jpg"), "{err}");
    // A frame header declaring 40000x40000 pixels (the data stays 131x97's).
    let mut bomb = jpeg_bytes("s420_q95");
    let at = sof_at(&bomb);
    bomb[at + 5..at + 9].copy_from_slice(&[0x9C, 0x40, 0x9C, 0x40]);
    let err = decode_bytes(&bomb, "cats/bomb.jpg").unwrap_err();
    assert!(matches!(err, VisionError::TooManyPixels { width: 40_000, height: 40_000, .. }), "{err:?}");
    assert!(err.to_string().contains("cats/bomb.jpg"), "{err}");
    // Cut short: refused as PIL refuses it ("image file is truncated").
    let whole = jpeg_bytes("progressive_s420_q90");
    let err = decode_bytes(&whole[..whole.len() / 2], "cats/cut.jpg").unwrap_err();
    assert!(err.to_string().contains("cats/cut.jpg") && err.to_string().contains("truncated"), "{err}");
}
