//! The two resampling passes with x86_64 SIMD (AVX2, SSE4.1): the scalar passes' integer arithmetic lane for lane.
//!
//! Every lane computes what the scalar code computes for one channel of one pixel: the
//! `1 << 21` rounding term plus `pixel * weight` over the taps in `i32`, then an arithmetic
//! shift by 22 and a clamp to `0..=255`. The sums never overflow `i32` (the weights of an
//! output position sum to about `1 << 22`, the pixels are at most 255), and integer addition
//! is exact in any order, so the results equal the scalar ones byte for byte. The shift-then-
//! saturate of `packs_epi32` + `packus_epi16` is `clip8`: `v >= 1 << 30` shifts to 256 or more
//! (255), `v <= 0` shifts to 0 or -1 (0), anything between shifts into `0..=255`.
//!
//! Loads never leave the slice: vector loads run while a whole vector fits and the rest of a
//! row (or a pixel whose taps end within a few bytes of the buffer's end) takes the scalar
//! arithmetic.

use super::{clip8, Coeffs, View, HALF, PRECISION_BITS};
use std::arch::x86_64::*;

/// The taps of one vertical output row: the byte offset of the first tap row's column 0,
/// the distance between tap rows, and the weights.
pub(super) struct VerticalTaps<'a> {
    pub first: usize,
    pub step: usize,
    pub weights: &'a [i32],
}

/// The scalar vertical arithmetic for output bytes `from..` of `out`.
#[inline]
fn vertical_tail(pixels: &[u8], taps: &VerticalTaps, out: &mut [u8], from: usize) {
    for (j, o) in out.iter_mut().enumerate().skip(from) {
        let mut s = HALF;
        for (i, &w) in taps.weights.iter().enumerate() {
            s += pixels[taps.first + i * taps.step + j] as i32 * w;
        }
        *o = clip8(s);
    }
}

/// Checks that every tap row of `taps` holds `len` bytes of `pixels` (the vector loads rely
/// on it).
fn check_rows(pixels: &[u8], taps: &VerticalTaps, len: usize) {
    let n = taps.weights.len();
    assert!(n > 0 && taps.first + (n - 1) * taps.step + len <= pixels.len(), "tap rows leave the buffer");
}

/// One output row of the vertical pass with AVX2: 32 bytes (four vectors of 8 `i32` lanes)
/// at a time across the row, then 8, then the scalar arithmetic.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn vertical_row_avx2(pixels: &[u8], taps: &VerticalTaps, out: &mut [u8]) {
    let len = out.len();
    check_rows(pixels, taps, len);
    let p = pixels.as_ptr();
    let q = out.as_mut_ptr();
    let half = _mm256_set1_epi32(HALF);
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let mut x = 0;
    // SAFETY (all the loads and stores below): `check_rows` holds, so byte `x + 31` (or
    // `x + 7`) of every tap row is in `pixels` while `x + 32 <= len` (or `x + 8 <= len`), and
    // the same bytes of `out` exist.
    while x + 32 <= len {
        let (mut a0, mut a1, mut a2, mut a3) = (half, half, half, half);
        for (i, &w) in taps.weights.iter().enumerate() {
            let w = _mm256_set1_epi32(w);
            let r = unsafe { p.add(taps.first + i * taps.step + x) };
            let load =
                |at: usize| unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(r.add(at) as *const __m128i)) };
            a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(load(0), w));
            a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(load(8), w));
            a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(load(16), w));
            a3 = _mm256_add_epi32(a3, _mm256_mullo_epi32(load(24), w));
        }
        let s01 = _mm256_packs_epi32(
            _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(a0),
            _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(a1),
        );
        let s23 = _mm256_packs_epi32(
            _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(a2),
            _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(a3),
        );
        // Per 128-bit lane: a0, a1, a2, a3 (4 bytes each) of the low then the high half.
        let bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(s01, s23), order);
        unsafe { _mm256_storeu_si256(q.add(x) as *mut __m256i, bytes) };
        x += 32;
    }
    while x + 8 <= len {
        let mut a = half;
        for (i, &w) in taps.weights.iter().enumerate() {
            let r = unsafe { p.add(taps.first + i * taps.step + x) };
            let v = unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(r as *const __m128i)) };
            a = _mm256_add_epi32(a, _mm256_mullo_epi32(v, _mm256_set1_epi32(w)));
        }
        let a = _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(a);
        let s = _mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256::<1>(a));
        unsafe { _mm_storel_epi64(q.add(x) as *mut __m128i, _mm_packus_epi16(s, s)) };
        x += 8;
    }
    vertical_tail(pixels, taps, out, x);
}

/// Four bytes at `p` zero-extended to four `i32` lanes.
///
/// # Safety
/// `p..p + 4` must be readable; the CPU must support SSE4.1.
#[inline]
#[target_feature(enable = "sse4.1")]
unsafe fn load4(p: *const u8) -> __m128i {
    _mm_cvtepu8_epi32(_mm_cvtsi32_si128(unsafe { (p as *const i32).read_unaligned() }))
}

/// One output row of the vertical pass with SSE4.1: 16 bytes (four vectors of 4 `i32`
/// lanes) at a time, then 4, then the scalar arithmetic.
///
/// # Safety
/// The CPU must support SSE4.1.
#[target_feature(enable = "sse4.1")]
pub(super) unsafe fn vertical_row_sse41(pixels: &[u8], taps: &VerticalTaps, out: &mut [u8]) {
    let len = out.len();
    check_rows(pixels, taps, len);
    let p = pixels.as_ptr();
    let q = out.as_mut_ptr();
    let half = _mm_set1_epi32(HALF);
    let mut x = 0;
    // SAFETY: as in `vertical_row_avx2`, with 16 (or 4) bytes.
    while x + 16 <= len {
        let (mut a0, mut a1, mut a2, mut a3) = (half, half, half, half);
        for (i, &w) in taps.weights.iter().enumerate() {
            let w = _mm_set1_epi32(w);
            let r = unsafe { p.add(taps.first + i * taps.step + x) };
            a0 = _mm_add_epi32(a0, _mm_mullo_epi32(unsafe { load4(r) }, w));
            a1 = _mm_add_epi32(a1, _mm_mullo_epi32(unsafe { load4(r.add(4)) }, w));
            a2 = _mm_add_epi32(a2, _mm_mullo_epi32(unsafe { load4(r.add(8)) }, w));
            a3 = _mm_add_epi32(a3, _mm_mullo_epi32(unsafe { load4(r.add(12)) }, w));
        }
        let s01 = _mm_packs_epi32(
            _mm_srai_epi32::<{ PRECISION_BITS as i32 }>(a0),
            _mm_srai_epi32::<{ PRECISION_BITS as i32 }>(a1),
        );
        let s23 = _mm_packs_epi32(
            _mm_srai_epi32::<{ PRECISION_BITS as i32 }>(a2),
            _mm_srai_epi32::<{ PRECISION_BITS as i32 }>(a3),
        );
        unsafe { _mm_storeu_si128(q.add(x) as *mut __m128i, _mm_packus_epi16(s01, s23)) };
        x += 16;
    }
    while x + 4 <= len {
        let mut a = half;
        for (i, &w) in taps.weights.iter().enumerate() {
            let r = unsafe { p.add(taps.first + i * taps.step + x) };
            a = _mm_add_epi32(a, _mm_mullo_epi32(unsafe { load4(r) }, _mm_set1_epi32(w)));
        }
        let s = _mm_packs_epi32(_mm_srai_epi32::<{ PRECISION_BITS as i32 }>(a), _mm_setzero_si128());
        let b = _mm_cvtsi128_si32(_mm_packus_epi16(s, s)) as u32;
        out[x..x + 4].copy_from_slice(&b.to_le_bytes());
        x += 4;
    }
    vertical_tail(pixels, taps, out, x);
}

/// Four `i32` lanes shifted by `PRECISION_BITS` and clamped to `u8`, lane 0 in the low byte.
#[inline]
#[target_feature(enable = "sse4.1")]
fn clip8x4(a: __m128i) -> u32 {
    let s = _mm_packs_epi32(_mm_srai_epi32::<{ PRECISION_BITS as i32 }>(a), _mm_setzero_si128());
    _mm_cvtsi128_si32(_mm_packus_epi16(s, s)) as u32
}

/// A grayscale output pixel from the four lane sums `s4` of its first `from` taps, adding the
/// rounding term and the remaining taps with the scalar arithmetic.
#[inline]
#[target_feature(enable = "sse4.1")]
fn gray_finish(s4: __m128i, pixels: &[u8], base: usize, k: &[i32], from: usize) -> u8 {
    let s2 = _mm_add_epi32(s4, _mm_shuffle_epi32::<0b01_00_11_10>(s4));
    let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32::<0b10_11_00_01>(s2));
    let mut s = HALF.wrapping_add(_mm_cvtsi128_si32(s1));
    for (j, &w) in k.iter().enumerate().skip(from) {
        s = s.wrapping_add(pixels[base + j] as i32 * w);
    }
    clip8(s)
}

/// One output row of the horizontal pass with AVX2. RGB: per output pixel, two taps a step
/// (`r g b` of each in 4 of the 8 lanes, the fourth lane zero); grayscale: eight taps a step,
/// summed across the lanes at the end.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn horizontal_row_avx2(
    src: &View,
    y: usize,
    h: &Coeffs,
    cols: std::ops::Range<usize>,
    out: &mut [u8],
) {
    let pixels = src.pixels;
    let p = pixels.as_ptr();
    if src.channels == 3 {
        // Bytes 0..6 (two RGB pixels) to [r0 g0 b0 0 r1 g1 b1 0].
        let spread = _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, -1, -1, -1, -1, -1, -1, -1, -1);
        for (tx, xx) in cols.enumerate() {
            let (xmin, k) = h.taps(xx);
            let n = k.len();
            let base = src.at(xmin, y);
            // A pair load reads 8 bytes from tap i, the last single tap 4 bytes.
            if base + 3 * n + 2 > pixels.len() {
                super::horizontal_pixel_scalar(pixels, base, 3, k, &mut out[tx * 3..tx * 3 + 3]);
                continue;
            }
            let mut acc = _mm256_setr_epi32(HALF, HALF, HALF, 0, 0, 0, 0, 0);
            let mut i = 0;
            // SAFETY: tap i's 8-byte load ends at base + 3i + 8 <= base + 3n + 2 (i + 2 <= n).
            while i + 2 <= n {
                let two = unsafe { _mm_loadl_epi64(p.add(base + 3 * i) as *const __m128i) };
                let v = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(two, spread));
                let w = _mm256_set_m128i(_mm_set1_epi32(k[i + 1]), _mm_set1_epi32(k[i]));
                acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(v, w));
                i += 2;
            }
            let mut sum = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256::<1>(acc));
            if i < n {
                // SAFETY: base + 3i + 4 <= base + 3n + 1. Lane 3 (the next pixel's red) is dropped.
                let v = unsafe { load4(p.add(base + 3 * i)) };
                sum = _mm_add_epi32(sum, _mm_mullo_epi32(v, _mm_set1_epi32(k[i])));
            }
            let b = clip8x4(sum).to_le_bytes();
            out[tx * 3..tx * 3 + 3].copy_from_slice(&b[..3]);
        }
    } else {
        for (tx, xx) in cols.enumerate() {
            let (xmin, k) = h.taps(xx);
            let n = k.len();
            let base = src.at(xmin, y);
            let mut acc = _mm256_setzero_si256();
            let mut i = 0;
            // SAFETY: bytes base + i .. base + i + 8 are taps of this pixel (i + 8 <= n), and
            // weights i .. i + 8 are in `k`.
            while i + 8 <= n {
                let v = unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(base + i) as *const __m128i)) };
                let w = unsafe { _mm256_loadu_si256(k.as_ptr().add(i) as *const __m256i) };
                acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(v, w));
                i += 8;
            }
            let s4 = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256::<1>(acc));
            out[tx] = gray_finish(s4, pixels, base, k, i);
        }
    }
}

/// Two output rows of the horizontal pass with AVX2, RGB only: per output pixel and tap, the
/// `r g b` of row `ys[0]` in lanes 0..3 and of row `ys[1]` in lanes 4..7 (the fourth lane of
/// each, the next pixel's red, is dropped), so the weights are set up once for both rows and
/// no lanes need adding up at the end.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn horizontal_rows2_rgb_avx2(
    src: &View,
    ys: [usize; 2],
    h: &Coeffs,
    cols: std::ops::Range<usize>,
    out: [&mut [u8]; 2],
) {
    debug_assert_eq!(src.channels, 3);
    let pixels = src.pixels;
    let p = pixels.as_ptr();
    let [out0, out1] = out;
    for (tx, xx) in cols.enumerate() {
        let (xmin, k) = h.taps(xx);
        let n = k.len();
        let (b0, b1) = (src.at(xmin, ys[0]), src.at(xmin, ys[1]));
        let (o0, o1) = (&mut out0[tx * 3..tx * 3 + 3], &mut out1[tx * 3..tx * 3 + 3]);
        // Tap i's 4-byte loads end at b + 3i + 4 <= b + 3n + 1.
        if b0.max(b1) + 3 * n + 1 > pixels.len() {
            super::horizontal_pixel_scalar(pixels, b0, 3, k, o0);
            super::horizontal_pixel_scalar(pixels, b1, 3, k, o1);
            continue;
        }
        let mut acc = _mm256_setr_epi32(HALF, HALF, HALF, 0, HALF, HALF, HALF, 0);
        for (i, &w) in k.iter().enumerate() {
            // SAFETY: b + 3i + 4 <= b + 3n + 1 <= pixels.len() for both rows.
            let (v0, v1) = unsafe {
                (
                    (p.add(b0 + 3 * i) as *const i32).read_unaligned(),
                    (p.add(b1 + 3 * i) as *const i32).read_unaligned(),
                )
            };
            let v = _mm256_cvtepu8_epi32(_mm_insert_epi32::<1>(_mm_cvtsi32_si128(v0), v1));
            acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(v, _mm256_set1_epi32(w)));
        }
        let a = _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(acc);
        let s = _mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256::<1>(a));
        let b = _mm_packus_epi16(s, s);
        let bytes = (_mm_cvtsi128_si64(b) as u64).to_le_bytes();
        o0.copy_from_slice(&bytes[..3]);
        o1.copy_from_slice(&bytes[4..7]);
    }
}

/// One output row of the horizontal pass with SSE4.1. RGB: per output pixel, one tap a step
/// (`r g b` in 3 of the 4 lanes); grayscale: four taps a step, summed across the lanes.
///
/// # Safety
/// The CPU must support SSE4.1.
#[target_feature(enable = "sse4.1")]
pub(super) unsafe fn horizontal_row_sse41(
    src: &View,
    y: usize,
    h: &Coeffs,
    cols: std::ops::Range<usize>,
    out: &mut [u8],
) {
    let pixels = src.pixels;
    let p = pixels.as_ptr();
    if src.channels == 3 {
        for (tx, xx) in cols.enumerate() {
            let (xmin, k) = h.taps(xx);
            let n = k.len();
            let base = src.at(xmin, y);
            // Tap i's 4-byte load ends at base + 3i + 4.
            if base + 3 * n + 1 > pixels.len() {
                super::horizontal_pixel_scalar(pixels, base, 3, k, &mut out[tx * 3..tx * 3 + 3]);
                continue;
            }
            let mut acc = _mm_setr_epi32(HALF, HALF, HALF, 0);
            for (i, &w) in k.iter().enumerate() {
                // SAFETY: base + 3i + 4 <= base + 3n + 1. Lane 3 (the next pixel's red) is dropped.
                let v = unsafe { load4(p.add(base + 3 * i)) };
                acc = _mm_add_epi32(acc, _mm_mullo_epi32(v, _mm_set1_epi32(w)));
            }
            let b = clip8x4(acc).to_le_bytes();
            out[tx * 3..tx * 3 + 3].copy_from_slice(&b[..3]);
        }
    } else {
        for (tx, xx) in cols.enumerate() {
            let (xmin, k) = h.taps(xx);
            let n = k.len();
            let base = src.at(xmin, y);
            let mut acc = _mm_setzero_si128();
            let mut i = 0;
            // SAFETY: bytes base + i .. base + i + 4 are taps of this pixel (i + 4 <= n), and
            // weights i .. i + 4 are in `k`.
            while i + 4 <= n {
                let v = unsafe { load4(p.add(base + i)) };
                let w = unsafe { _mm_loadu_si128(k.as_ptr().add(i) as *const __m128i) };
                acc = _mm_add_epi32(acc, _mm_mullo_epi32(v, w));
                i += 4;
            }
            out[tx] = gray_finish(acc, pixels, base, k, i);
        }
    }
}
