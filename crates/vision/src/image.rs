//! `Image`: a decoded `u8` image in HWC layout, what transforms work on until `ToTensor`.

use torchlight_data::{Array, Buffer};

/// A `u8` image, row-major `[height, width, channels]` (HWC) with 3 channels (RGB) or 1
/// (grayscale, after `Grayscale(1)`), like a PIL image in mode `RGB` or `L`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    width: usize,
    height: usize,
    channels: usize,
    pixels: Vec<u8>,
}

impl Image {
    /// An image from HWC pixels.
    ///
    /// # Panics
    /// If `channels` is not 1 or 3 or `pixels.len() != height * width * channels`.
    pub fn new(width: usize, height: usize, channels: usize, pixels: Vec<u8>) -> Self {
        assert!(channels == 1 || channels == 3, "Image has 1 or 3 channels, got {channels}");
        assert_eq!(
            pixels.len(),
            width * height * channels,
            "Image of {width}x{height}x{channels} needs {} bytes",
            width * height * channels
        );
        Image { width, height, channels, pixels }
    }

    /// An image of `value` everywhere.
    pub fn filled(width: usize, height: usize, channels: usize, value: u8) -> Self {
        Image::new(width, height, channels, vec![value; width * height * channels])
    }

    /// The width in pixels.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The height in pixels.
    pub fn height(&self) -> usize {
        self.height
    }

    /// 3 for RGB, 1 for grayscale.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// The HWC pixels.
    pub fn pixels(&self) -> &[u8] {
        &self.pixels
    }

    /// The HWC pixels, mutably.
    pub fn pixels_mut(&mut self) -> &mut [u8] {
        &mut self.pixels
    }

    /// The HWC pixels, by value.
    pub fn into_pixels(self) -> Vec<u8> {
        self.pixels
    }

    /// The `[channels]` values of pixel `(x, y)`.
    pub fn pixel(&self, x: usize, y: usize) -> &[u8] {
        let at = (y * self.width + x) * self.channels;
        &self.pixels[at..at + self.channels]
    }

    /// The rectangle of `width x height` pixels whose top-left corner is `(left, top)`, like
    /// `torchvision.transforms.functional.crop` (which takes `top, left, height, width`).
    ///
    /// # Panics
    /// If the rectangle leaves the image.
    pub fn crop(&self, left: usize, top: usize, width: usize, height: usize) -> Image {
        assert!(
            left + width <= self.width && top + height <= self.height,
            "crop {width}x{height} at ({left}, {top}) leaves a {}x{} image",
            self.width,
            self.height
        );
        let c = self.channels;
        let mut pixels = Vec::with_capacity(width * height * c);
        for y in top..top + height {
            let row = (y * self.width + left) * c;
            pixels.extend_from_slice(&self.pixels[row..row + width * c]);
        }
        Image::new(width, height, c, pixels)
    }

    /// The image as a U8 `[H, W, C]` [`Array`].
    pub fn into_array(self) -> Array {
        Array { shape: vec![self.height, self.width, self.channels], buffer: Buffer::U8(self.pixels) }
    }

    /// The image as an `image::RgbImage` (grayscale is replicated to RGB), e.g. to save it.
    pub fn to_rgb_image(&self) -> image::RgbImage {
        let rgb: Vec<u8> = if self.channels == 3 {
            self.pixels.clone()
        } else {
            self.pixels.iter().flat_map(|&v| [v, v, v]).collect()
        };
        image::RgbImage::from_raw(self.width as u32, self.height as u32, rgb)
            .expect("buffer length matches the dimensions")
    }

    /// An RGB image from an `image::RgbImage`.
    pub fn from_rgb_image(image: image::RgbImage) -> Image {
        let (w, h) = image.dimensions();
        Image::new(w as usize, h as usize, 3, image.into_raw())
    }
}
