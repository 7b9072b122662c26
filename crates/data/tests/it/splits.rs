//! Seeded splits: pinned indices (stable across runs and machines), stratification and
//! per-class counts.

use crate::common::Noisy;
use std::collections::BTreeMap;
use std::sync::Arc;
use torchlight_data::{
    class_counts, random_split, random_split_indices, stratified_split, stratified_split_indices, Dataset,
};

#[test]
fn random_split_indices_are_pinned_for_a_seed() {
    // Part of the contract: changing these changes every user's validation set.
    let parts = random_split_indices(10, [0.7, 0.3], 42).unwrap();
    assert_eq!(parts, PINNED_42);
    assert_eq!(random_split_indices(10, [7usize, 3], 42).unwrap(), PINNED_42);
    assert_ne!(random_split_indices(10, [0.7, 0.3], 43).unwrap(), PINNED_42);
}

const PINNED_42: [&[usize]; 2] = [&[2, 4, 7, 0, 1, 3, 8], &[9, 5, 6]];

#[test]
fn random_split_gives_subsets_of_the_dataset() {
    let dataset = Arc::new(Noisy { len: 10 });
    let parts = random_split(&dataset, [0.7, 0.3], 42).unwrap();
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0].indices(), PINNED_42[0]);
    assert_eq!(parts[1].len(), 3);
    assert!(random_split(&dataset, [0.7, 0.2], 42).is_err());
    assert!(random_split(&dataset, [7usize, 2], 42).is_err());
}

#[test]
fn stratified_split_is_pinned_and_proportional() {
    let labels: Vec<i64> = (0..12).map(|i| i % 3).collect();
    let parts = stratified_split_indices(&labels, [0.5, 0.5], 7).unwrap();
    assert_eq!(parts, PINNED_STRATIFIED_7);
    for part in &parts {
        assert_eq!(class_counts(&labels, part).unwrap(), BTreeMap::from([(0, 2), (1, 2), (2, 2)]));
    }
    let dataset = Arc::new(Noisy { len: 12 });
    let subsets = stratified_split(&dataset, &labels, [0.5, 0.5], 7).unwrap();
    assert_eq!(subsets[1].indices(), PINNED_STRATIFIED_7[1]);
    assert_eq!(subsets[0].class_counts(&labels).unwrap()[&1], 2);
    assert!(stratified_split(&dataset, &labels[..11], [0.5, 0.5], 7).is_err());
}

const PINNED_STRATIFIED_7: [&[usize]; 2] = [&[4, 11, 10, 5, 0, 9], &[2, 8, 3, 1, 7, 6]];
