//! `torch.randperm(n, generator=torch.Generator().manual_seed(seed))` on the CPU, bit for bit:
//! libtorch's MT19937 (`at::mt19937`, seeded as `CPUGeneratorImpl::set_current_seed` does) and
//! the two shuffles of `randperm_cpu`. Used where PyTorch's exact order is the contract
//! (`DistributedSampler`); other samplers use Torchlight's own generator.

/// MT19937 state size.
const N: usize = 624;
/// MT19937 middle word offset.
const M: usize = 397;

/// `at::mt19937`: the 32-bit Mersenne Twister PyTorch's CPU generator wraps, exported as
/// [`crate::TorchGenerator`]. As a [`rand::RngCore`], `next_u32` is `CPUGeneratorImpl::random()`
/// and `next_u64` its `random64()`, so code drawing through torch's rules (e.g. the vision
/// crate's `torch_draws`) reproduces `torch.manual_seed(seed)`'s draws on the CPU.
#[derive(Clone)]
pub struct Mt19937 {
    state: [u32; N],
    index: usize,
}

impl Mt19937 {
    /// `torch.Generator().manual_seed(seed)` (and `torch.manual_seed(seed)` for the default CPU
    /// generator): the state is initialised from the seed's low 32 bits, as
    /// `at::mt19937::init_with_uint32` does.
    pub fn new(seed: u64) -> Self {
        let mut state = [0u32; N];
        state[0] = seed as u32;
        for j in 1..N {
            state[j] =
                1_812_433_253u32.wrapping_mul(state[j - 1] ^ (state[j - 1] >> 30)).wrapping_add(j as u32);
        }
        Mt19937 { state, index: N }
    }

    fn twist(&mut self) {
        for i in 0..N {
            let y = (self.state[i] & 0x8000_0000) | (self.state[(i + 1) % N] & 0x7fff_ffff);
            let mut next = self.state[(i + M) % N] ^ (y >> 1);
            if y & 1 != 0 {
                next ^= 0x9908_b0df;
            }
            self.state[i] = next;
        }
        self.index = 0;
    }

    /// `CPUGeneratorImpl::random()`: the next 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `CPUGeneratorImpl::random64()`: two outputs, the first as the high half.
    pub fn next_u64(&mut self) -> u64 {
        let hi = u64::from(self.next_u32());
        let lo = u64::from(self.next_u32());
        (hi << 32) | lo
    }
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TorchGenerator").field("index", &self.index).finish_non_exhaustive()
    }
}

impl rand::RngCore for Mt19937 {
    fn next_u32(&mut self) -> u32 {
        Mt19937::next_u32(self)
    }

    fn next_u64(&mut self) -> u64 {
        Mt19937::next_u64(self)
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for chunk in dst.chunks_mut(4) {
            let bytes = Mt19937::next_u32(self).to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// Below this length `randperm_cpu` keeps its original swap-forward shuffle on 32-bit draws;
/// from it on, an inside-out Fisher-Yates on 64-bit draws (`uint32 max / 20`).
///
/// The 64-bit branch was checked once against torch 2.11 for n = 214,748,364, seed 5 (first
/// and last 8 values and a weighted checksum equal; `make_distributed_sampler.py --large`); it
/// is not in the test suite because it needs 1.7 GB and minutes. Its generator half
/// (`next_u64`) is tested against torch's draws.
const SMALL_N: usize = (u32::MAX / 20) as usize;

/// `torch.randperm(n, generator=g)` for a CPU generator `g` seeded with `seed`.
pub(crate) fn torch_randperm(n: usize, seed: u64) -> Vec<usize> {
    let mut gen = Mt19937::new(seed);
    if n < SMALL_N {
        let mut perm: Vec<usize> = (0..n).collect();
        for i in 0..n.saturating_sub(1) {
            let z = gen.next_u32() as usize % (n - i);
            perm.swap(i, z + i);
        }
        perm
    } else {
        let mut perm = vec![0usize; n];
        for i in 0..n {
            let z = (gen.next_u64() % (i as u64 + 1)) as usize;
            perm[i] = perm[z];
            perm[z] = i;
        }
        perm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_mt19937() {
        // The C++ standard's check: the 10000th output of std::mt19937 seeded 5489.
        let mut gen = Mt19937::new(5489);
        let last = (0..10_000).map(|_| gen.next_u32()).last();
        assert_eq!(last, Some(4_123_659_995));
    }

    fn fixture(name: &str) -> serde_json::Value {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("JSON")
    }

    #[test]
    fn draws_equal_torchs_cpu_generator() {
        // torch.randint takes `random() % range` for small ranges and `random64() % range` from
        // 2**32 on (tests/fixtures/make_distributed_sampler.py).
        let data = fixture("distributed_sampler.json");
        for case in data["generator"].as_array().unwrap() {
            let seed = case["seed"].as_u64().unwrap();
            let mut gen = Mt19937::new(seed);
            let r32: Vec<u64> = (0..5).map(|_| u64::from(gen.next_u32()) % 1000).collect();
            let want32: Vec<u64> =
                case["random_mod_1000"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
            assert_eq!(r32, want32, "seed {seed}");
            let mut gen = Mt19937::new(seed);
            let r64: Vec<u64> = (0..5).map(|_| gen.next_u64() % (1 << 62)).collect();
            let want64: Vec<u64> =
                case["random64_mod_2_62"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
            assert_eq!(r64, want64, "seed {seed}");
        }
    }

    #[test]
    fn permutes() {
        for n in [0, 1, 2, 17] {
            let mut p = torch_randperm(n, 3);
            p.sort_unstable();
            assert_eq!(p, (0..n).collect::<Vec<_>>());
        }
    }
}
