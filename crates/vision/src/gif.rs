//! A GIF's first frame as Pillow's `GifImagePlugin` loads it and `convert("RGB")` turns it into
//! RGB: a palette image the size of the logical screen (grown to hold a frame that reaches
//! past it), filled with the frame's transparent index where it has one (else index 0), the
//! frame's indices written inside its rectangle, transparent ones included, then every index
//! looked up in the frame's palette (its local one, else the global one; an index past the
//! palette's end is black). A palette that is the gray ramp (entry `i` is `(i, i, i)`) is no
//! palette to Pillow: the indices are then gray values. Disposal methods concern later frames
//! only, so they do not change this one. Checked by `tests/it/variants.rs`.

use crate::decode_options::{check_pixel_limit, DecodeOptions};
use crate::error::{Result, VisionError};
use crate::image::Image;
use std::path::Path;

/// Whether a palette (RGB triples) is Pillow's "no palette needed": entry `i` is `(i, i, i)`.
fn is_gray_ramp(palette: &[u8]) -> bool {
    palette.chunks(3).enumerate().all(|(i, e)| e.len() == 3 && e.iter().all(|&v| usize::from(v) == i))
}

/// Decodes the first frame of a GIF file as PIL's `convert("RGB")` of it, refusing a screen
/// (grown to the frame, as Pillow grows it) over the pixel limit.
///
/// # Errors
/// [`VisionError::Decode`] for a corrupt or truncated file, or one without a frame;
/// [`VisionError::TooManyPixels`] over the limit.
pub(crate) fn decode(bytes: &[u8], path: &Path, options: &DecodeOptions) -> Result<Image> {
    let decode_err = |message: String| VisionError::Decode { path: path.to_path_buf(), message };
    let mut gif_options = gif::DecodeOptions::new();
    gif_options.set_color_output(gif::ColorOutput::Indexed);
    let mut decoder =
        gif_options.read_info(std::io::Cursor::new(bytes)).map_err(|e| decode_err(e.to_string()))?;
    let (screen_w, screen_h) = (usize::from(decoder.width()), usize::from(decoder.height()));
    check_pixel_limit(options, path, screen_w as u32, screen_h as u32)?;
    let global = decoder.global_palette().map(<[u8]>::to_vec);
    let frame = decoder
        .read_next_frame()
        .map_err(|e| decode_err(e.to_string()))?
        .ok_or_else(|| decode_err("a GIF without an image".into()))?;
    let (left, top) = (usize::from(frame.left), usize::from(frame.top));
    let (fw, fh) = (usize::from(frame.width), usize::from(frame.height));
    let (w, h) = (screen_w.max(left + fw), screen_h.max(top + fh));
    if (w, h) != (screen_w, screen_h) {
        check_pixel_limit(options, path, w as u32, h as u32)?;
    }
    let fill = frame.transparent.unwrap_or(0);
    let mut indices = vec![fill; w * h];
    for y in 0..fh {
        let row = &frame.buffer[y * fw..(y + 1) * fw];
        indices[(top + y) * w + left..(top + y) * w + left + fw].copy_from_slice(row);
    }
    let palette = frame.palette.clone().or(global).filter(|p| !is_gray_ramp(p));
    let mut out = Vec::with_capacity(w * h * 3);
    for &i in &indices {
        match &palette {
            None => out.extend([i; 3]),
            Some(p) => match p.get(usize::from(i) * 3..usize::from(i) * 3 + 3) {
                Some(rgb) => out.extend_from_slice(rgb),
                None => out.extend([0; 3]),
            },
        }
    }
    Ok(Image::new(w, h, 3, out))
}
