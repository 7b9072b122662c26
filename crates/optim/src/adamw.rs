//! AdamW: Adam with decoupled weight decay (`torch.optim.AdamW`).

use crate::adam::AdamRule;
use crate::core::OptimizerCore;

/// `torch.optim.AdamW`: [`Adam`](crate::Adam) with `decoupled_weight_decay` forced on in every
/// group, so weight decay shrinks the parameters (`p *= 1 - lr * weight_decay`) instead of
/// entering the moments. Build groups with
/// [`AdamConfig::adamw`](crate::AdamConfig::adamw) for PyTorch's AdamW defaults
/// (`lr = 1e-3`, `betas = (0.9, 0.999)`, `eps = 1e-8`, `weight_decay = 1e-2`); the saved
/// state says `AdamW`.
pub type AdamW = OptimizerCore<AdamRule<true>>;
