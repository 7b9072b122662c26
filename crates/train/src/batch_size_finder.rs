//! The batch-size search apart from its loop (PyTorch Lightning's `tuner/batch_size_scaling.py`
//! in its `binsearch` mode): double the batch from a starting size until a try does not fit or
//! the ceiling is reached, then bisect between the last size that fitted and the first that
//! did not. [`Trainer::batch_size_find`](crate::Trainer::batch_size_find) runs each try as real
//! training steps; [`search_batch_size`] is the search alone, over any "does it fit" function.
//!
//! Where it departs from Lightning: a try is a whole training step (forward, loss, backward
//! through the GradScaler, optimizer step) repeated [`BatchSizeFindConfig::steps_per_try`]
//! times, as Lightning's `steps_per_trial` are, but everything a try touched is put back after
//! it (Lightning restores only at the end, from a checkpoint file); the search refuses a
//! distributed Trainer instead of running on every rank (Lightning #20994); the ceiling is
//! required (Lightning's `max_trials` bounds the doublings instead), since on the CPU a batch
//! past the machine's memory is not an error to catch but the kernel killing the process; and
//! the device's cached memory is handed back after every try and at the end, so the run after
//! the search does not start out of memory (Lightning #8028).

use crate::error::{Result, TrainError};

/// How [`search_batch_size`] and `Trainer::batch_size_find` search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSizeFindConfig {
    /// The first batch size tried; default 2 (Lightning's `init_val`).
    pub init_batch_size: usize,
    /// The largest batch size tried: the doubling stops here (a size past it is tried as this
    /// size). Required, see the module docs.
    pub max_batch_size: usize,
    /// Training steps per try; default 2 (Lightning runs 3): the first step creates the
    /// optimizer's state (Adam's moments, SGD's momentum), the second runs with it held, as
    /// every later step of a run does, so the second is the step whose memory a run needs.
    pub steps_per_try: usize,
    /// The smallest batch size the search tries; default 1. A model whose BatchNorm trains
    /// needs 2 (a batch of one gives it one value per channel, which PyTorch refuses), so the
    /// search ends there, with nothing found, rather than on that error.
    pub min_batch_size: usize,
}

impl BatchSizeFindConfig {
    /// A search up to `max_batch_size`, from 2, with 2 steps per try.
    pub fn new(max_batch_size: usize) -> Self {
        BatchSizeFindConfig { init_batch_size: 2, max_batch_size, steps_per_try: 2, min_batch_size: 1 }
    }

    /// The smallest batch size tried (2 for a model whose BatchNorm trains).
    pub fn with_min_batch_size(mut self, size: usize) -> Self {
        self.min_batch_size = size;
        self
    }

    /// The first batch size tried.
    pub fn with_init_batch_size(mut self, size: usize) -> Self {
        self.init_batch_size = size;
        self
    }

    /// Training steps per try.
    pub fn with_steps_per_try(mut self, steps: usize) -> Self {
        self.steps_per_try = steps;
        self
    }

    /// An error naming the setting when a size or the step count is 0, or the first size is
    /// past the ceiling.
    pub fn validate(&self) -> Result<()> {
        let bad = |setting: &str, value: usize, reason: &str| {
            Err(TrainError::InvalidSetting {
                setting: setting.into(),
                value: value.to_string(),
                reason: reason.into(),
            })
        };
        if self.min_batch_size == 0 {
            return bad("min_batch_size", 0, "must be at least 1");
        }
        if self.init_batch_size < self.min_batch_size {
            return bad(
                "init_batch_size",
                self.init_batch_size,
                &format!("must be at least the smallest size tried, {}", self.min_batch_size),
            );
        }
        if self.max_batch_size < self.init_batch_size {
            return bad(
                "max_batch_size",
                self.max_batch_size,
                &format!("must be at least the first size tried, {}", self.init_batch_size),
            );
        }
        if self.steps_per_try == 0 {
            return bad("steps_per_try", 0, "must be at least 1");
        }
        Ok(())
    }
}

/// One try of the search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSizeTry {
    /// The batch size tried.
    pub batch_size: usize,
    /// Whether its training steps ran without running out of memory.
    pub fits: bool,
    /// On CUDA, the most device memory held at once during the try, in bytes
    /// (`torch.cuda.max_memory_allocated` since the try started); `None` elsewhere.
    pub peak_bytes: Option<u64>,
}

/// What the search found.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchSizeFinder {
    /// The settings it ran with.
    pub config: BatchSizeFindConfig,
    /// Every try, in the order run: the doublings, then the bisection.
    pub tries: Vec<BatchSizeTry>,
    /// The largest batch size that fitted; `None` when not even a batch of the smallest size
    /// ([`BatchSizeFindConfig::min_batch_size`]) did.
    pub largest: Option<usize>,
    /// On CUDA, the bytes held by tensors (`torch.cuda.memory_allocated`) before the search
    /// and after it (after the restore and the cache release); `None` elsewhere.
    pub allocated_bytes: Option<(u64, u64)>,
}

impl BatchSizeFinder {
    /// Whether the largest size is the ceiling: larger batches may fit too, untried.
    pub fn hit_ceiling(&self) -> bool {
        self.largest == Some(self.config.max_batch_size)
    }

    /// The batch size and accumulation steps for an effective batch of `target` samples per
    /// optimizer step ([`suggest_accumulation`] with the largest size that fitted); `None`
    /// when nothing fitted.
    pub fn suggest(&self, target: usize) -> Option<BatchSuggestion> {
        self.largest.map(|largest| suggest_accumulation(largest, target))
    }
}

/// A batch size and gradient-accumulation steps for a target effective batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSuggestion {
    /// Samples per forward/backward (`train.batch_size`).
    pub batch_size: usize,
    /// Micro-batches per optimizer step (`train.accumulation_steps`).
    pub accumulation_steps: usize,
}

impl BatchSuggestion {
    /// Samples per optimizer step: `batch_size * accumulation_steps`.
    pub fn effective(&self) -> usize {
        self.batch_size * self.accumulation_steps
    }
}

/// The fewest accumulation steps that reach an effective batch of `target` with micro-batches
/// of at most `largest` samples, `k = ceil(target / largest)`, and the smallest micro-batch
/// that reaches it in `k` steps, `ceil(target / k)` (never more than `largest`): `target` 96
/// with `largest` 64 gives 48 x 2 (not 64 x 2 = 128), `target` 32 gives 32 x 1. The
/// effective batch is `target` exactly when `k` divides it, and otherwise less than `k` above
/// it. A `target` of 0 counts as 1.
pub fn suggest_accumulation(largest: usize, target: usize) -> BatchSuggestion {
    let largest = largest.max(1);
    let target = target.max(1);
    let accumulation_steps = target.div_ceil(largest);
    BatchSuggestion { batch_size: target.div_ceil(accumulation_steps), accumulation_steps }
}

/// The search: `try_size(b)` runs a try of batch size `b` and says whether it fitted. Sizes
/// double from `init_batch_size` (the last doubling capped at `max_batch_size`) until a try
/// does not fit or the ceiling fitted; then the sizes between the last that fitted (0 when the
/// first did not) and the first that did not are bisected, so the largest size that fits is
/// found in about `2 log2(largest)` tries. An error from `try_size` ends the search with it.
///
/// Assumes that a size fits when a larger one does (memory grows with the batch); with
/// `init_batch_size` 2 and a limit of 7 the tries are 2, 4, 8 (no), 6, 7.
pub fn search_batch_size(
    config: &BatchSizeFindConfig,
    mut try_size: impl FnMut(usize) -> Result<BatchSizeTry>,
) -> Result<BatchSizeFinder> {
    config.validate()?;
    let mut tries = Vec::new();
    let mut run = |size: usize, tries: &mut Vec<BatchSizeTry>| -> Result<bool> {
        let t = try_size(size)?;
        tries.push(BatchSizeTry { batch_size: size, ..t });
        Ok(t.fits)
    };
    // The sizes below the smallest one count as fitting: the bisection never goes under it.
    let mut fitted = config.min_batch_size - 1;
    let mut failed = None;
    let mut size = config.init_batch_size;
    loop {
        if !run(size, &mut tries)? {
            failed = Some(size);
            break;
        }
        fitted = size;
        if size == config.max_batch_size {
            break;
        }
        size = size.saturating_mul(2).min(config.max_batch_size);
    }
    if let Some(mut high) = failed {
        while high - fitted > 1 {
            let mid = fitted + (high - fitted) / 2;
            if run(mid, &mut tries)? {
                fitted = mid;
            } else {
                high = mid;
            }
        }
    }
    Ok(BatchSizeFinder {
        config: config.clone(),
        tries,
        largest: (fitted >= config.min_batch_size).then_some(fitted),
        allocated_bytes: None,
    })
}

/// `1.5 GiB`, `512.0 MiB`: a byte count in binary units, as `nvidia-smi` users read it (a try's
/// peak memory).
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_in_binary_units() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(3 << 30), "3.0 GiB");
        assert_eq!(format_bytes(5 << 40), "5120.0 GiB");
    }

    /// The search over a limit: which sizes it tried, and what it found.
    fn search(init: usize, max: usize, limit: usize) -> (Vec<(usize, bool)>, Option<usize>) {
        let config = BatchSizeFindConfig::new(max).with_init_batch_size(init);
        let found = search_batch_size(&config, |b| {
            Ok(BatchSizeTry { batch_size: b, fits: b <= limit, peak_bytes: None })
        })
        .unwrap();
        (found.tries.iter().map(|t| (t.batch_size, t.fits)).collect(), found.largest)
    }

    /// With a floor of 2 (a model whose BatchNorm trains) a batch of 1 is never tried.
    #[test]
    fn the_search_never_goes_below_the_smallest_size() {
        let search_from = |init: usize, min: usize, limit: usize| {
            let config = BatchSizeFindConfig::new(64).with_init_batch_size(init).with_min_batch_size(min);
            let found = search_batch_size(&config, |b| {
                Ok(BatchSizeTry { batch_size: b, fits: b <= limit, peak_bytes: None })
            })
            .unwrap();
            (found.tries.iter().map(|t| (t.batch_size, t.fits)).collect::<Vec<_>>(), found.largest)
        };
        assert_eq!(search_from(2, 2, 1), (vec![(2, false)], None));
        assert_eq!(search_from(2, 1, 1), (vec![(2, false), (1, true)], Some(1)));
        assert_eq!(search_from(8, 2, 3), (vec![(8, false), (4, false), (2, true), (3, true)], Some(3)));
        assert_eq!(search_from(8, 2, 0), (vec![(8, false), (4, false), (2, false)], None));
        let bad = BatchSizeFindConfig::new(64).with_min_batch_size(4);
        assert!(bad.validate().unwrap_err().to_string().contains("init_batch_size"));
        assert!(BatchSizeFindConfig::new(64).with_min_batch_size(0).validate().is_err());
    }

    #[test]
    fn sizes_double_until_one_fails_then_bisect_to_the_largest_that_fits() {
        let (tries, largest) = search(2, 64, 7);
        assert_eq!(tries, [(2, true), (4, true), (8, false), (6, true), (7, true)]);
        assert_eq!(largest, Some(7));
        let (tries, largest) = search(2, 64, 12);
        assert_eq!(
            tries,
            [(2, true), (4, true), (8, true), (16, false), (12, true), (14, false), (13, false)]
        );
        assert_eq!(largest, Some(12));
        for limit in 0..=80 {
            let (tries, largest) = search(2, 64, limit);
            let expected = limit.min(64);
            assert_eq!(largest, (expected > 0).then_some(expected), "limit {limit}: {tries:?}");
            assert!(tries.len() <= 14, "limit {limit}: {} tries", tries.len());
        }
    }

    #[test]
    fn the_ceiling_stops_the_doubling_and_caps_its_last_step() {
        let (tries, largest) = search(2, 48, 1000);
        assert_eq!(tries, [(2, true), (4, true), (8, true), (16, true), (32, true), (48, true)]);
        assert_eq!(largest, Some(48));
        let (tries, largest) = search(2, 48, 40);
        assert_eq!(
            &tries[6..],
            [(40, true), (44, false), (42, false), (41, false)],
            "bisected from 32 to 48"
        );
        assert_eq!(&tries[..6], [(2, true), (4, true), (8, true), (16, true), (32, true), (48, false)]);
        assert_eq!(largest, Some(40));
        let (tries, largest) = search(5, 5, 9);
        assert_eq!((tries, largest), (vec![(5, true)], Some(5)), "one try when the start is the ceiling");
    }

    #[test]
    fn a_first_size_that_fails_is_bisected_down_to_one_or_nothing() {
        assert_eq!(search(2, 64, 1), (vec![(2, false), (1, true)], Some(1)));
        assert_eq!(search(2, 64, 0), (vec![(2, false), (1, false)], None));
        assert_eq!(search(16, 64, 5).1, Some(5));
    }

    #[test]
    fn an_error_ends_the_search_and_bad_settings_are_named() {
        let config = BatchSizeFindConfig::new(64);
        let err = search_batch_size(&config, |b| {
            if b == 8 {
                return Err(TrainError::InvalidSetting {
                    setting: "data".into(),
                    value: "8".into(),
                    reason: "unreadable".into(),
                });
            }
            Ok(BatchSizeTry { batch_size: b, fits: true, peak_bytes: None })
        })
        .unwrap_err();
        assert!(err.to_string().contains("unreadable"), "{err}");
        for (config, setting) in [
            (BatchSizeFindConfig::new(64).with_init_batch_size(0), "init_batch_size"),
            (BatchSizeFindConfig::new(1), "max_batch_size"),
            (BatchSizeFindConfig::new(64).with_steps_per_try(0), "steps_per_try"),
        ] {
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(setting), "{err}");
        }
    }

    #[test]
    fn the_suggestion_reaches_the_target_with_the_fewest_accumulation_steps() {
        let s = |largest, target| {
            let s = suggest_accumulation(largest, target);
            (s.batch_size, s.accumulation_steps)
        };
        assert_eq!(s(64, 256), (64, 4));
        assert_eq!(s(64, 96), (48, 2), "the target exactly, not 64 x 2 = 128");
        assert_eq!(s(64, 32), (32, 1), "a target under the largest batch is one batch");
        assert_eq!(s(7, 64), (7, 10), "64 is not a multiple of 10 steps: 70, the least above it");
        assert_eq!(s(1, 5), (1, 5));
        for largest in 1..40 {
            for target in 1..200 {
                let got = suggest_accumulation(largest, target);
                assert!(got.batch_size <= largest && got.batch_size >= 1, "{largest} {target}");
                assert!(got.effective() >= target && got.effective() < target + got.accumulation_steps);
                assert_eq!(got.accumulation_steps, target.div_ceil(largest));
            }
        }
    }
}
