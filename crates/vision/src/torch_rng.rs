//! `TorchRng`: torch's CPU generator whole, the MT19937 stream and the spare normal that
//! ATen's `normal_distribution<double>` keeps in the generator between calls.

use rand::RngCore;
use torchlight_data::TorchGenerator;

/// The state of torch's CPU generator after `torch.manual_seed(seed)`: the MT19937 stream
/// ([`TorchGenerator`]) and `next_double_normal_sample`, the second value of the last
/// Box-Muller pair, which the next double normal draw returns without drawing (AugMix's
/// Dirichlet weights use it). A run of calls on one `TorchRng` repeats a run of torchvision
/// calls after one `manual_seed`, spare included ([`crate::Compose::apply_like_torch_rng`]);
/// as a plain [`RngCore`] it is the stream alone.
#[derive(Debug, Clone)]
pub struct TorchRng {
    generator: TorchGenerator,
    spare_normal: Option<f64>,
}

impl TorchRng {
    /// `torch.manual_seed(seed)`: the stream seeded, no spare normal.
    pub fn new(seed: u64) -> Self {
        TorchRng { generator: TorchGenerator::new(seed), spare_normal: None }
    }

    /// The stream and the spare normal, borrowed together.
    pub fn parts(&mut self) -> (&mut TorchGenerator, &mut Option<f64>) {
        (&mut self.generator, &mut self.spare_normal)
    }
}

impl RngCore for TorchRng {
    fn next_u32(&mut self) -> u32 {
        self.generator.next_u32()
    }

    fn next_u64(&mut self) -> u64 {
        self.generator.next_u64()
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.generator.fill_bytes(dest)
    }
}
