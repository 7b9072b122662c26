//! `torchlight-fuzz`: mutation fuzzing of the readers that take untrusted files: the `.pth`
//! reader, safetensors loading and image decoding.
//!
//! Only the stable toolchain is assumed (no cargo-fuzz/libFuzzer), so this is a seeded
//! mutation fuzzer: each case takes a seed file from `corpus/` (made by real PyTorch,
//! safetensors and Pillow: `corpus/make_corpus.py`), applies blind and structure-aware
//! mutations ([`mutate`]) drawn from a generator seeded by `(seed, case)`, and feeds the result
//! to the reader. A case passes when the reader returns, `Ok` or `Err`; it fails when a panic
//! escapes the reader's public API. Panics a reader catches itself (the image decoders are
//! third-party code run under `catch_unwind`) are reported too, as contained findings.
//!
//! The number of cases bounds a run, never the clock: the same `(seed, cases)` runs the same
//! inputs everywhere, and a finding is replayed from its case number. `cargo xtask test` runs
//! a few hundred cases per target through `tests/it`; `cargo xtask fuzz --cases N` runs more.

pub mod mutate;

use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Once;
use torchlight_vision::DecodeOptions;

/// A reader under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `torchlight_nn::read_weights` on `.pth` files (zip archives with a pickle).
    Pth,
    /// `torchlight_nn::read_weights` on safetensors files.
    Safetensors,
    /// `torchlight_vision::decode_bytes_with` on image files of every supported format.
    Image,
}

impl Target {
    /// Every target.
    pub const ALL: [Target; 3] = [Target::Pth, Target::Safetensors, Target::Image];

    /// The target's name, which is also its corpus folder.
    pub fn name(self) -> &'static str {
        match self {
            Target::Pth => "pth",
            Target::Safetensors => "safetensors",
            Target::Image => "image",
        }
    }

    /// The target named `name`.
    pub fn from_name(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// The pixel limit images are decoded under: large enough for every seed, small enough that a
/// mutated header cannot make a case allocate much.
pub const FUZZ_MAX_PIXELS: u64 = 1 << 22;

/// The committed seed corpus of `target` (`corpus/<target>/*`), sorted by name.
///
/// # Errors
/// When the folder or a file in it cannot be read.
pub fn corpus(target: Target) -> std::io::Result<Vec<Vec<u8>>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target.name());
    let mut paths: Vec<PathBuf> =
        std::fs::read_dir(&dir)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
    paths.sort();
    paths.iter().map(std::fs::read).collect()
}

/// What a panic left: where it happened and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// A panic escaped the reader's public API: a bug to fix.
    Escaped(String),
    /// A panic inside a dependency that the reader caught and turned into an error.
    Contained(String),
}

/// One case that panicked, with what is needed to replay it.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The target.
    pub target: Target,
    /// The case number (replay it with the same run seed).
    pub case: u64,
    /// The mutated input.
    pub input: Vec<u8>,
    /// What happened.
    pub finding: Finding,
}

/// The outcome of a run over one target.
#[derive(Debug, Clone)]
pub struct Report {
    /// The target.
    pub target: Target,
    /// Cases run.
    pub cases: u64,
    /// Inputs the reader accepted (valid after mutation).
    pub accepted: u64,
    /// Inputs the reader refused with an error.
    pub rejected: u64,
    /// Cases that panicked, escaped or contained.
    pub failures: Vec<Failure>,
}

impl Report {
    /// The cases whose panic escaped the public API.
    pub fn escaped(&self) -> impl Iterator<Item = &Failure> {
        self.failures.iter().filter(|f| matches!(f.finding, Finding::Escaped(_)))
    }
}

thread_local! {
    /// Panic messages seen on this thread while a case runs (`None` when no case runs).
    static CAPTURED: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// Installs (once) a panic hook that records the panics of running cases instead of printing
/// them; panics outside a case are printed as before.
fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = format!("{info}");
            let recorded = CAPTURED.with(|c| match c.borrow_mut().as_mut() {
                Some(seen) => {
                    seen.push(message);
                    true
                }
                None => false,
            });
            if !recorded {
                default(info);
            }
        }));
    });
}

/// Runs `cases` cases of `target` over `seeds`, case `i` drawing its mutations from a generator
/// seeded by `(seed, i)`; files are written under `work_dir` for the readers that take paths.
///
/// # Errors
/// When a case file cannot be written under `work_dir`.
///
/// # Panics
/// If `seeds` is empty.
pub fn run(
    target: Target,
    seeds: &[Vec<u8>],
    cases: u64,
    seed: u64,
    work_dir: &Path,
) -> std::io::Result<Report> {
    run_range(target, seeds, 0..cases, seed, work_dir)
}

/// [`run`] over the case numbers `range` (to replay one case: `i..i + 1`).
///
/// # Errors
/// As [`run`].
///
/// # Panics
/// If `seeds` is empty.
pub fn run_range(
    target: Target,
    seeds: &[Vec<u8>],
    range: std::ops::Range<u64>,
    seed: u64,
    work_dir: &Path,
) -> std::io::Result<Report> {
    assert!(!seeds.is_empty(), "a fuzz run needs at least one seed file");
    install_hook();
    std::fs::create_dir_all(work_dir)?;
    let zipped: Vec<Option<mutate::Entries>> = seeds.iter().map(|s| mutate::unzip(s)).collect();
    let mut report = Report { target, cases: 0, accepted: 0, rejected: 0, failures: Vec::new() };
    for case in range {
        let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ case);
        let pick = rng.random_range(0..seeds.len());
        let other = seeds.choose(&mut rng).expect("not empty");
        let input = mutated(target, &seeds[pick], zipped[pick].as_ref(), other, &mut rng);
        CAPTURED.with(|c| *c.borrow_mut() = Some(Vec::new()));
        let outcome = std::panic::catch_unwind(|| feed(target, &input, work_dir));
        let panics = CAPTURED.with(|c| c.borrow_mut().take()).unwrap_or_default();
        report.cases += 1;
        match outcome {
            Ok(Ok(true)) => report.accepted += 1,
            Ok(Ok(false)) => report.rejected += 1,
            Ok(Err(e)) => return Err(e),
            Err(_) => {}
        }
        let escaped = outcome.is_err();
        if let Some(message) = panics.into_iter().next() {
            let finding = if escaped { Finding::Escaped(message) } else { Finding::Contained(message) };
            report.failures.push(Failure { target, case, input, finding });
        }
    }
    Ok(report)
}

fn mutated(
    target: Target,
    seed: &[u8],
    zipped: Option<&mutate::Entries>,
    other: &[u8],
    rng: &mut ChaCha8Rng,
) -> Vec<u8> {
    match target {
        Target::Pth => match zipped {
            Some(entries) if rng.random_bool(0.7) => mutate::pth(entries, other, rng),
            _ => blind(seed, other, rng),
        },
        Target::Safetensors if rng.random_bool(0.6) => mutate::safetensors(seed, other, rng),
        Target::Safetensors => blind(seed, other, rng),
        Target::Image => {
            let mut data = blind(seed, other, rng);
            if data.starts_with(b"\x89PNG") && rng.random_bool(0.7) {
                mutate::fix_png_crcs(&mut data);
            }
            data
        }
    }
}

fn blind(seed: &[u8], other: &[u8], rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut data = seed.to_vec();
    mutate::bytes(&mut data, other, rng);
    data
}

/// Runs the reader on one input: `Ok(true)` if it accepted it, `Ok(false)` if it returned an
/// error. Accepted tensors are summed, so a bad view would show.
fn feed(target: Target, input: &[u8], work_dir: &Path) -> std::io::Result<bool> {
    match target {
        Target::Pth | Target::Safetensors => {
            let path = work_dir.join(format!("case.{}", target.name()));
            std::fs::write(&path, input)?;
            Ok(match torchlight_nn::read_weights(&path) {
                Ok(tensors) => {
                    for (_, t) in &tensors {
                        let _ = t.f_sum(t.kind());
                    }
                    true
                }
                Err(_) => false,
            })
        }
        Target::Image => {
            let options = DecodeOptions::default().with_max_pixels(Some(FUZZ_MAX_PIXELS));
            Ok(torchlight_vision::decode_bytes_with(input, "case", &options).is_ok())
        }
    }
}
