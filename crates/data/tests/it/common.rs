//! Datasets the tests load: random-augmenting, failing, panicking, slow and gated ones.

use rand::Rng as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;
use tch::Tensor;
use torchlight_data::{Array, DataError, Dataset, Result};
use torchlight_tensor::seed::Rng;

/// Sample `i`: an F32 `[2, 3]` image of `i + noise` (noise uniform in [0, 1) from the sample's
/// generator, i.e. a random augmentation) and label `i`.
pub struct Noisy {
    pub len: usize,
}

impl Dataset for Noisy {
    type Item = (Array, i64);

    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, index: usize, rng: &mut Rng) -> Result<(Array, i64)> {
        let values = (0..6).map(|_| index as f32 + rng.random::<f32>()).collect();
        Ok((Array::from_f32(values, vec![2, 3])?, index as i64))
    }
}

/// [`Noisy`] that records the index of every sample it loads.
pub struct Recording {
    pub inner: Noisy,
    pub loaded: Mutex<Vec<usize>>,
}

impl Recording {
    pub fn new(len: usize) -> Self {
        Recording { inner: Noisy { len }, loaded: Mutex::new(Vec::new()) }
    }

    /// The indices loaded so far, sorted.
    pub fn loaded(&self) -> Vec<usize> {
        let mut loaded = self.loaded.lock().unwrap().clone();
        loaded.sort_unstable();
        loaded
    }
}

impl Dataset for Recording {
    type Item = (Array, i64);

    fn len(&self) -> usize {
        self.inner.len
    }

    fn get(&self, index: usize, rng: &mut Rng) -> Result<(Array, i64)> {
        self.loaded.lock().unwrap().push(index);
        self.inner.get(index, rng)
    }
}

/// Like [`Noisy`] without noise, but sample `bad` fails as an unreadable file would, and
/// sample `panic_at` panics.
pub struct Faulty {
    pub len: usize,
    pub bad: Option<usize>,
    pub panic_at: Option<usize>,
}

impl Dataset for Faulty {
    type Item = (Array, i64);

    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, index: usize, _rng: &mut Rng) -> Result<(Array, i64)> {
        if Some(index) == self.bad {
            return Err(DataError::Sample {
                index,
                path: Some(PathBuf::from(format!("images/cat/{index}.png"))),
                message: "unexpected end of file".to_string(),
            });
        }
        if Some(index) == self.panic_at {
            panic!("decoder blew up on sample {index}");
        }
        Ok((Array::from_f32(vec![index as f32; 4], vec![4])?, index as i64))
    }
}

/// Each `get` sleeps `delay`; counts the gets started and those in progress.
pub struct Slow {
    pub len: usize,
    pub delay: Duration,
    pub started: AtomicUsize,
    pub in_flight: AtomicUsize,
}

impl Slow {
    pub fn new(len: usize, delay: Duration) -> Self {
        Slow { len, delay, started: AtomicUsize::new(0), in_flight: AtomicUsize::new(0) }
    }
}

impl Dataset for Slow {
    type Item = (Array, i64);

    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, index: usize, _rng: &mut Rng) -> Result<(Array, i64)> {
        self.started.fetch_add(1, Ordering::SeqCst);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok((Array::from_f32(vec![index as f32], vec![1])?, index as i64))
    }
}

/// Sample 0 blocks until the gate is opened; the others load at once.
pub struct Gated {
    pub open: Mutex<bool>,
    pub opened: Condvar,
}

impl Gated {
    pub fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

impl Dataset for Gated {
    type Item = (Array, i64);

    fn len(&self) -> usize {
        2
    }

    fn get(&self, index: usize, _rng: &mut Rng) -> Result<(Array, i64)> {
        if index == 0 {
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.opened.wait(open).unwrap();
            }
        }
        Ok((Array::from_f32(vec![index as f32], vec![1])?, index as i64))
    }
}

pub fn f32s(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()
}

pub fn i64s(t: &Tensor) -> Vec<i64> {
    Vec::<i64>::try_from(t.flatten(0, -1)).unwrap()
}
