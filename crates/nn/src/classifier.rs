//! `Classifier`: a classification model as its two parts, the backbone's pooled features and
//! the head on them, so that tools (the doctor's checks, feature extraction) can look between
//! them without knowing the architecture. Every built-in backbone implements it; an
//! architecture of one's own opts in through [`Architecture::with_classifier`].
//!
//! [`Architecture::with_classifier`]: crate::Architecture::with_classifier

use crate::module::Module;
use tch::Tensor;

/// A classifier split at its head: `forward_t(x) == head().forward_t(features_t(x))`.
pub trait Classifier {
    /// The backbone's pooled features of `xs` (`[N, F]`, or `[N, F, 1, 1]` where the head
    /// starts with a norm over channels), in the mode of `train`.
    fn features_t(&self, xs: &Tensor, train: bool) -> Tensor;

    /// The head: the layers after the features (the part a fine-tune replaces and the
    /// architecture's `head` prefix names the last Linear of).
    fn head(&self) -> &dyn Module;

    /// Logits: the head on the features.
    fn logits_t(&self, features: &Tensor, train: bool) -> Tensor {
        self.head().forward_t(features, train)
    }
}

/// `model` as a [`Classifier`] when it is a `T` (what [`Architecture::with_classifier`] takes
/// for an architecture whose model type implements the trait).
///
/// [`Architecture::with_classifier`]: crate::Architecture::with_classifier
pub fn classifier_of<T: Classifier + Module>(model: &dyn Module) -> Option<&dyn Classifier> {
    model.as_any().downcast_ref::<T>().map(|m| m as &dyn Classifier)
}
