//! Decoding against torchvision's loader on the formats' odd corners: 16-bit samples
//! (`tests/fixtures/make_16bit.py`), and hostile headers (the pixel limit).

use crate::{fixture, read_safetensors};
use torchlight_vision::{
    decode_file, decode_file_with, image_dimensions, DecodeOptions, ImageFolder, VisionError,
};

/// Each 16-bit file decodes to exactly what `torchvision.datasets.folder.pil_loader` returns
/// (Pillow clips 16-bit grayscale, keeps the high byte of 16-bit colour PNG/TIFF, and scales
/// 16-bit PPM): tolerance 0.
#[test]
fn sixteen_bit_images_decode_bit_identically_to_pil() {
    let dir = fixture("sixteen_bit");
    let expected = read_safetensors("sixteen_bit/expected.safetensors");
    assert_eq!(expected.len(), 11);
    for (name, want) in expected {
        let image = decode_file(dir.join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = want.u8s;
        assert_eq!(want.len(), 12 * 16 * 3, "{name}: a uint8 HWC fixture");
        assert_eq!((image.height(), image.width(), image.channels()), (12, 16, 3), "{name}");
        let differ = image.pixels().iter().zip(&want).filter(|(a, b)| a != b).count();
        let first = image.pixels().iter().zip(&want).position(|(a, b)| a != b);
        assert_eq!(
            differ,
            0,
            "{name}: {differ} of {} values differ from PIL, first at {first:?}",
            want.len()
        );
    }
}

/// A PNG whose header declares `width x height` 8-bit RGB pixels but whose data holds one
/// row: a decompression bomb's header, without the bomb.
pub fn bomb_png(width: u32, height: u32) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, tag: &[u8], data: &[u8]) {
        out.extend((data.len() as u32).to_be_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(tag);
        crc.update(data);
        out.extend(tag);
        out.extend(data);
        out.extend(crc.finalize().to_be_bytes());
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend(width.to_be_bytes());
    ihdr.extend(height.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    // A stored (uncompressed) zlib stream of one filter byte and a few zero pixels.
    let row = [0u8; 16];
    let mut z = vec![0x78, 0x01, 0x01, row.len() as u8, 0, !(row.len() as u8), 0xff];
    z.extend(row);
    chunk(&mut out, b"IDAT", &z);
    chunk(&mut out, b"IEND", b"");
    out
}

/// Pillow's guard: a header declaring 40000x40000 pixels is refused from the header, before
/// any pixel is decoded, with an error naming the file and the declared size; the limit can be
/// raised or lifted.
#[test]
fn a_decompression_bomb_is_refused_from_its_header() {
    let dir = crate::TempDir::new("bomb");
    let path = dir.0.join("bomb.png");
    std::fs::write(&path, bomb_png(40_000, 40_000)).unwrap();
    let err = decode_file(&path).unwrap_err();
    assert!(matches!(err, VisionError::TooManyPixels { width: 40_000, height: 40_000, .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("bomb.png") && text.contains("40000x40000") && text.contains("178956970"),
        "{text}"
    );
    assert_eq!(image_dimensions(&path).unwrap(), (40_000, 40_000), "the header alone is read");
    // A smaller limit refuses smaller images; lifting it hands the file to the decoder, which
    // finds the data missing (and does not run out of memory on this one).
    let small = dir.0.join("small.png");
    std::fs::write(&small, bomb_png(300, 300)).unwrap();
    let limited = DecodeOptions::default().with_max_pixels(Some(50_000));
    assert!(matches!(
        decode_file_with(&small, &limited),
        Err(VisionError::TooManyPixels { pixels: 90_000, .. })
    ));
    assert!(matches!(decode_file(&small), Err(VisionError::Decode { .. })), "under the default limit");
    // An ImageFolder carries the limit to every sample.
    std::fs::create_dir_all(dir.0.join("root/a")).unwrap();
    std::fs::write(dir.0.join("root/a/x.png"), bomb_png(300, 300)).unwrap();
    let folder = ImageFolder::new(dir.0.join("root")).unwrap().with_max_pixels(Some(50_000));
    let err = folder.load(0).unwrap_err().to_string();
    assert!(err.contains("x.png") && err.contains("300x300"), "{err}");
}
