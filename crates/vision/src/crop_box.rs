//! `CropBox`: the box a crop keeps, which the crops draw and the `Transform` contract
//! (`LeadingCrop`) and crop-box decoding pass around.

/// A crop box: `top`, `left`, `height`, `width` in pixels (torchvision's `i, j, h, w`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CropBox {
    /// First row.
    pub top: usize,
    /// First column.
    pub left: usize,
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
}
