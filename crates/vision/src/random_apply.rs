//! `RandomApply`, `RandomChoice` and `RandomOrder`: torchvision's containers of transforms,
//! with its draws (`torch.rand` for RandomApply; Python's `random` for the other two).

use crate::error::Result;
use crate::py_random::{py_choice_index, py_shuffle};
use crate::torch_draws::rand_f32;
use crate::transform::{Sample, Transform};
use rand::RngCore;
use std::any::Any;
use std::sync::Arc;
use torchlight_base::seed::Rng;

/// Runs `steps` one after the other through their `apply_torch`.
fn run_torch(
    steps: &[&Arc<dyn Transform>],
    mut input: Sample,
    g: &mut dyn RngCore,
) -> Option<Result<Sample>> {
    for t in steps {
        input = match t.apply_torch(input, g)? {
            Ok(sample) => sample,
            Err(e) => return Some(Err(e)),
        };
    }
    Some(Ok(input))
}

/// `torchvision.transforms.RandomApply(transforms, p=0.5)`: the transforms in order when
/// `not (p < torch.rand(1))` (one float32 draw, so `p = 1` always applies), else the input.
#[derive(Debug, Clone)]
pub struct RandomApply {
    transforms: Vec<Arc<dyn Transform>>,
    p: f64,
}

impl RandomApply {
    /// Applies `transforms` with probability `p`.
    ///
    /// # Panics
    /// If `p` is outside `[0, 1]`.
    pub fn new(transforms: Vec<Box<dyn Transform>>, p: f64) -> Self {
        assert!((0.0..=1.0).contains(&p), "RandomApply p must be in [0, 1], got {p}");
        RandomApply { transforms: transforms.into_iter().map(Arc::from).collect(), p }
    }

    /// The transforms.
    pub fn transforms(&self) -> &[Arc<dyn Transform>] {
        &self.transforms
    }

    /// Whether this draw applies the transforms: `not (p < torch.rand(1))`, compared in
    /// float32 as torch compares a float tensor with a Python float.
    pub fn draw<R: RngCore + ?Sized>(&self, rng: &mut R) -> bool {
        (self.p as f32) >= rand_f32(rng)
    }
}

impl Transform for RandomApply {
    /// Draws with torchvision's rule from `rng`, then the transforms' own `apply`.
    fn apply(&self, mut input: Sample, rng: &mut Rng) -> Result<Sample> {
        if self.draw(rng) {
            for t in &self.transforms {
                input = t.apply(input, rng)?;
            }
        }
        Ok(input)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    /// `None` when a transform without a torch-draw path would run.
    fn apply_torch(&self, input: Sample, g: &mut dyn RngCore) -> Option<Result<Sample>> {
        if !self.draw(g) {
            return Some(Ok(input));
        }
        run_torch(&self.transforms.iter().collect::<Vec<_>>(), input, g)
    }
}

/// `torchvision.transforms.RandomChoice(transforms, p=None)`: one of the transforms, picked by
/// `random.choices(transforms, weights=p)` from Python's `random` module, which
/// `torch.manual_seed` does not seed: [`RandomChoice::apply_with`] takes that generator apart
/// (a [`crate::PyRandom`] seeded as `random.seed(s)`).
#[derive(Debug, Clone)]
pub struct RandomChoice {
    transforms: Vec<Arc<dyn Transform>>,
    weights: Option<Vec<f64>>,
}

impl RandomChoice {
    /// Picks uniformly among `transforms`.
    ///
    /// # Panics
    /// If `transforms` is empty.
    pub fn new(transforms: Vec<Box<dyn Transform>>) -> Self {
        assert!(!transforms.is_empty(), "RandomChoice needs at least one transform");
        RandomChoice { transforms: transforms.into_iter().map(Arc::from).collect(), weights: None }
    }

    /// Picks with relative `weights` (torchvision's `p`), one per transform.
    ///
    /// # Panics
    /// If the count differs, a weight is negative or not finite, or they sum to 0.
    pub fn with_weights(mut self, weights: &[f64]) -> Self {
        assert_eq!(weights.len(), self.transforms.len(), "RandomChoice needs one weight per transform");
        assert!(
            weights.iter().all(|w| *w >= 0.0 && w.is_finite()),
            "RandomChoice weights must be non-negative"
        );
        assert!(weights.iter().sum::<f64>() > 0.0, "RandomChoice weights must not all be 0");
        self.weights = Some(weights.to_vec());
        self
    }

    /// The transforms.
    pub fn transforms(&self) -> &[Arc<dyn Transform>] {
        &self.transforms
    }

    /// The index `random.choices` picks from `py`.
    pub fn draw<R: RngCore + ?Sized>(&self, py: &mut R) -> usize {
        py_choice_index(py, self.transforms.len(), self.weights.as_deref())
    }

    /// torchvision's output with the pick drawn from `py` (Python's `random`) and the chosen
    /// transform's draws from `g` (torch's generator, through its `apply_torch`); `None` when
    /// the chosen transform has no torch-draw path.
    pub fn apply_with(
        &self,
        input: Sample,
        g: &mut dyn RngCore,
        py: &mut dyn RngCore,
    ) -> Option<Result<Sample>> {
        let i = self.draw(py);
        self.transforms[i].apply_torch(input, g)
    }
}

impl Transform for RandomChoice {
    /// The pick with Python's rule from `rng`, then the transform's own `apply`.
    fn apply(&self, input: Sample, rng: &mut Rng) -> Result<Sample> {
        let i = self.draw(rng);
        self.transforms[i].apply(input, rng)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// `torchvision.transforms.RandomOrder(transforms)`: every transform, in the order
/// `random.shuffle` gives from Python's `random` module (not seeded by `torch.manual_seed`:
/// [`RandomOrder::apply_with`] takes that generator apart).
#[derive(Debug, Clone)]
pub struct RandomOrder {
    transforms: Vec<Arc<dyn Transform>>,
}

impl RandomOrder {
    /// Runs `transforms` in a random order.
    pub fn new(transforms: Vec<Box<dyn Transform>>) -> Self {
        RandomOrder { transforms: transforms.into_iter().map(Arc::from).collect() }
    }

    /// The transforms.
    pub fn transforms(&self) -> &[Arc<dyn Transform>] {
        &self.transforms
    }

    /// The order `random.shuffle(list(range(n)))` gives from `py`.
    pub fn draw<R: RngCore + ?Sized>(&self, py: &mut R) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.transforms.len()).collect();
        py_shuffle(py, &mut order);
        order
    }

    /// torchvision's output with the order drawn from `py` (Python's `random`) and each
    /// transform's draws from `g` (through its `apply_torch`); `None` when one has no
    /// torch-draw path.
    pub fn apply_with(
        &self,
        input: Sample,
        g: &mut dyn RngCore,
        py: &mut dyn RngCore,
    ) -> Option<Result<Sample>> {
        let order = self.draw(py);
        run_torch(&order.iter().map(|&i| &self.transforms[i]).collect::<Vec<_>>(), input, g)
    }
}

impl Transform for RandomOrder {
    /// The order with Python's rule from `rng`, then each transform's own `apply`.
    fn apply(&self, mut input: Sample, rng: &mut Rng) -> Result<Sample> {
        for i in self.draw(rng) {
            input = self.transforms[i].apply(input, rng)?;
        }
        Ok(input)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
