//! `PyRandom`: Python's `random` module (CPython's MT19937 and its seeding), which
//! torchvision's `RandomChoice` and `RandomOrder` draw from instead of torch's generator.

use rand::RngCore;

const N: usize = 624;
const M: usize = 397;

/// CPython's `random.Random` generator: `PyRandom::new(s)` is `random.seed(s)` for an integer
/// `s` (`init_by_array` of its 32-bit words), and `next_u32` is `getrandbits(32)`, so
/// [`py_random`], [`py_shuffle`] and [`py_choice_index`] on it draw what Python's do.
#[derive(Debug, Clone)]
pub struct PyRandom {
    mt: Box<[u32; N]>,
    index: usize,
}

impl PyRandom {
    /// `random.seed(seed)`.
    pub fn new(seed: u64) -> Self {
        let key: Vec<u32> =
            if seed >> 32 == 0 { vec![seed as u32] } else { vec![seed as u32, (seed >> 32) as u32] };
        let mut r = PyRandom { mt: Box::new([0; N]), index: N };
        r.init_genrand(19_650_218);
        let mt = &mut r.mt;
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            let prev = mt[i - 1] ^ (mt[i - 1] >> 30);
            mt[i] = (mt[i] ^ prev.wrapping_mul(1_664_525)).wrapping_add(key[j]).wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = mt[i - 1] ^ (mt[i - 1] >> 30);
            mt[i] = (mt[i] ^ prev.wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
        }
        mt[0] = 0x8000_0000;
        r
    }

    fn init_genrand(&mut self, s: u32) {
        self.mt[0] = s;
        for i in 1..N {
            let prev = self.mt[i - 1];
            self.mt[i] = 1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)).wrapping_add(i as u32);
        }
        self.index = N;
    }

    fn genrand_u32(&mut self) -> u32 {
        if self.index >= N {
            let mt = &mut self.mt;
            for k in 0..N {
                let y = (mt[k] & 0x8000_0000) | (mt[(k + 1) % N] & 0x7fff_ffff);
                let mag = if y & 1 == 1 { 0x9908_b0df } else { 0 };
                mt[k] = mt[(k + M) % N] ^ (y >> 1) ^ mag;
            }
            self.index = 0;
        }
        let mut y = self.mt[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }
}

/// `random.random()` drawn from `rng` (with a [`PyRandom`], CPython's): 53 bits from two
/// 32-bit draws.
pub fn py_random<R: RngCore + ?Sized>(rng: &mut R) -> f64 {
    let a = f64::from(rng.next_u32() >> 5);
    let b = f64::from(rng.next_u32() >> 6);
    (a * 67_108_864.0 + b) * (1.0 / 9_007_199_254_740_992.0)
}

/// `random.getrandbits(k)` for `k <= 32`.
///
/// # Panics
/// If `k > 32`.
pub fn py_getrandbits<R: RngCore + ?Sized>(rng: &mut R, k: u32) -> u32 {
    assert!(k <= 32, "getrandbits takes at most 32 bits here");
    if k == 0 {
        0
    } else {
        rng.next_u32() >> (32 - k)
    }
}

/// `random._randbelow(n)`: `getrandbits(n.bit_length())` until below `n`.
///
/// # Panics
/// If `n` is 0 or at least `2^32`.
pub fn py_randbelow<R: RngCore + ?Sized>(rng: &mut R, n: usize) -> usize {
    let n = u32::try_from(n).expect("randbelow takes n < 2^32");
    assert!(n > 0, "randbelow(0)");
    let k = 32 - n.leading_zeros();
    loop {
        let r = py_getrandbits(rng, k);
        if r < n {
            return r as usize;
        }
    }
}

/// `random.shuffle(x)`.
pub fn py_shuffle<R: RngCore + ?Sized, T>(rng: &mut R, x: &mut [T]) {
    for i in (1..x.len()).rev() {
        let j = py_randbelow(rng, i + 1);
        x.swap(i, j);
    }
}

/// The index `random.choices(range(n), weights)[0]` picks: `floor(random() * n)` without
/// weights, else `bisect_right` of `random() * total` in the running sums (`hi = n - 1`).
///
/// # Panics
/// If `n` is 0 or `weights` has another length.
pub fn py_choice_index<R: RngCore + ?Sized>(rng: &mut R, n: usize, weights: Option<&[f64]>) -> usize {
    assert!(n > 0, "choices from an empty population");
    let Some(weights) = weights else {
        return (py_random(rng) * n as f64).floor() as usize;
    };
    assert_eq!(weights.len(), n, "one weight per choice");
    let cum: Vec<f64> = weights
        .iter()
        .scan(0.0, |s, w| {
            *s += w;
            Some(*s)
        })
        .collect();
    let x = py_random(rng) * cum[n - 1];
    cum[..n - 1].partition_point(|&c| c <= x)
}

impl RngCore for PyRandom {
    fn next_u32(&mut self) -> u32 {
        self.genrand_u32()
    }

    fn next_u64(&mut self) -> u64 {
        u64::from(self.genrand_u32()) | (u64::from(self.genrand_u32()) << 32)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(4) {
            let v = self.genrand_u32().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_equal_cpythons() {
        // Python 3.11: random.seed(0); random.random(), random.getrandbits(32)
        let mut r = PyRandom::new(0);
        assert_eq!(py_random(&mut r), 0.8444218515250481);
        assert_eq!(py_getrandbits(&mut r, 32), 3_255_389_356);
        // random.seed(42); x = list(range(6)); random.shuffle(x)
        let mut r = PyRandom::new(42);
        let mut x: Vec<usize> = (0..6).collect();
        py_shuffle(&mut r, &mut x);
        assert_eq!(x, [3, 1, 2, 4, 0, 5]);
        // random.seed(2**40 + 5): a two-word key.
        assert_eq!(py_random(&mut PyRandom::new((1 << 40) + 5)), 0.5043802970418443);
        // random.seed(7); random.choices(range(4), weights=[1, 2, 3, 4])[0], random.choices(range(5))[0]
        let mut r = PyRandom::new(7);
        assert_eq!(py_choice_index(&mut r, 4, Some(&[1.0, 2.0, 3.0, 4.0])), 2);
        assert_eq!(py_choice_index(&mut r, 5, None), 0);
    }
}
