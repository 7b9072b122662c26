//! Memory-layout helpers that always return contiguous tensors.
//!
//! `permute` and `transpose` return strided views; a later `view` on them fails, and code
//! that reads raw data (`data_ptr`, `copy_data`, export) sees the old element order. These
//! helpers make the copy explicit so the result is safe for both.

use crate::error::{Result, TensorError};
use tch::Tensor;

fn expect_rank(name: &str, tensor: &Tensor, rank: usize, expected: &str) -> Result<()> {
    if tensor.dim() == rank {
        Ok(())
    } else {
        Err(TensorError::Shape {
            name: name.to_string(),
            shape: tensor.size(),
            expected: expected.to_string(),
        })
    }
}

/// `[N, C, H, W]` -> `[N, H, W, C]`, contiguous.
pub fn nchw_to_nhwc(tensor: &Tensor) -> Result<Tensor> {
    expect_rank("input", tensor, 4, "4 dims [N, C, H, W]")?;
    Ok(tensor.permute([0, 2, 3, 1]).contiguous())
}

/// `[N, H, W, C]` -> `[N, C, H, W]`, contiguous.
pub fn nhwc_to_nchw(tensor: &Tensor) -> Result<Tensor> {
    expect_rank("input", tensor, 4, "4 dims [N, H, W, C]")?;
    Ok(tensor.permute([0, 3, 1, 2]).contiguous())
}

/// `[H, W, C]` (image crates' order) -> `[C, H, W]` (PyTorch's order), contiguous.
pub fn hwc_to_chw(tensor: &Tensor) -> Result<Tensor> {
    expect_rank("image", tensor, 3, "3 dims [H, W, C]")?;
    Ok(tensor.permute([2, 0, 1]).contiguous())
}

/// `[C, H, W]` -> `[H, W, C]`, contiguous.
pub fn chw_to_hwc(tensor: &Tensor) -> Result<Tensor> {
    expect_rank("image", tensor, 3, "3 dims [C, H, W]")?;
    Ok(tensor.permute([1, 2, 0]).contiguous())
}
