//! Draws made as PyTorch's CPU generator makes them, from any [`RngCore`]: with a
//! [`torchlight_data::TorchGenerator`] (libtorch's MT19937) seeded like `torch.manual_seed(s)`,
//! each function returns exactly what the torch call it names returns; with the DataLoader's
//! per-sample [`torchlight_base::seed::Rng`] the same distributions from Torchlight's generator.

use rand::RngCore;

/// `torch.rand(1).item()` (float32): 24 bits of one 32-bit draw, `(v & (2^24 - 1)) / 2^24`.
pub fn rand_f32<R: RngCore + ?Sized>(rng: &mut R) -> f32 {
    (rng.next_u32() & 0x00ff_ffff) as f32 * (1.0 / 16_777_216.0)
}

/// `torch.empty(1).uniform_(from, to).item()` (float32): the bounds are cast to `f32` and the
/// draw is `x * (to - from) + from` in `f32`, as ATen's `uniform_real_distribution<float>`.
pub fn uniform_f32<R: RngCore + ?Sized>(rng: &mut R, from: f64, to: f64) -> f32 {
    let (from, to) = (from as f32, to as f32);
    rand_f32(rng) * (to - from) + from
}

/// `torch.rand(1) < p`: the float32 draw against `p` cast to float32 (PyTorch compares a float
/// tensor with a Python scalar in the tensor's dtype).
pub fn bernoulli<R: RngCore + ?Sized>(rng: &mut R, p: f64) -> bool {
    rand_f32(rng) < p as f32
}

/// `torch.randint(low, high, (1,)).item()`: `random() % range + low`, with one 64-bit draw
/// instead from a range of `2^28` on (ATen's `uniform_int_from_to_distribution`).
///
/// # Panics
/// If `high <= low` (torch raises).
pub fn randint<R: RngCore + ?Sized>(rng: &mut R, low: i64, high: i64) -> i64 {
    assert!(high > low, "randint range [{low}, {high}) is empty");
    let range = (high - low) as u64;
    let v = if range >= 1 << 28 { rng.next_u64() } else { u64::from(rng.next_u32()) };
    (v % range) as i64 + low
}

/// `uniform_real_distribution<double>(0, 1)`: 53 bits of one 64-bit draw.
fn rand_f64<R: RngCore + ?Sized>(rng: &mut R) -> f64 {
    (rng.next_u64() & ((1 << 53) - 1)) as f64 * (1.0 / 9_007_199_254_740_992.0)
}

/// `torch.empty(n, dtype=torch.float32).normal_()` on the CPU, with its draws: under 16 values,
/// ATen's serial `normal_distribution<double>` (pairs of 64-bit draws, the second value of a
/// pair kept for the next); from 16 on, `n` float draws (and 16 more for the last 16 values
/// when `n % 16 != 0`) turned into normals by Box-Muller in blocks of 16.
///
/// The draws are torch's exactly, and so are the values under 16. From 16 on, libtorch built
/// for AVX2 computes `log`/`sin`/`cos` with `avx_mathfun`'s polynomials and here they are the
/// libm functions of `normal_fill_16` (its non-AVX2 build), so values can differ in the last
/// bits (`tests/it/erasing.rs` measures the gap).
pub fn normal_f32<R: RngCore + ?Sized>(rng: &mut R, n: usize) -> Vec<f32> {
    if n < 16 {
        let mut out = Vec::with_capacity(n);
        let mut cached: Option<f64> = None;
        for _ in 0..n {
            let v = match cached.take() {
                Some(v) => v,
                None => {
                    let u1 = rand_f64(rng);
                    let u2 = rand_f64(rng);
                    let r = (-2.0 * (-u2).ln_1p()).sqrt();
                    let theta = 2.0 * std::f64::consts::PI * u1;
                    cached = Some(r * theta.sin());
                    r * theta.cos()
                }
            };
            out.push(v as f32);
        }
        return out;
    }
    let mut data: Vec<f32> = (0..n).map(|_| rand_f32(rng)).collect();
    let fill16 = |d: &mut [f32]| {
        let two_pi = (2.0 * std::f64::consts::PI) as f32;
        for j in 0..8 {
            let u1 = 1.0 - d[j];
            let u2 = d[j + 8];
            let radius = (-2.0 * u1.ln()).sqrt();
            let theta = two_pi * u2;
            d[j] = radius * theta.cos();
            d[j + 8] = radius * theta.sin();
        }
    };
    let mut i = 0;
    while i + 16 <= n {
        fill16(&mut data[i..i + 16]);
        i += 16;
    }
    if !n.is_multiple_of(16) {
        let tail = &mut data[n - 16..];
        for v in tail.iter_mut() {
            *v = rand_f32(rng);
        }
        fill16(tail);
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchlight_data::TorchGenerator;

    #[test]
    fn randint_uses_64_bit_draws_from_2_pow_28() {
        let mut a = TorchGenerator::new(3);
        let mut b = TorchGenerator::new(3);
        assert_eq!(randint(&mut a, 0, 1 << 28), (b.next_u64() % (1 << 28)) as i64);
        let mut a = TorchGenerator::new(3);
        let mut b = TorchGenerator::new(3);
        assert_eq!(randint(&mut a, 5, 9), (b.next_u32() % 4) as i64 + 5);
    }
}
