//! The fuzz targets for a bounded number of cases (by count, not time), as `cargo xtask test`
//! runs them: no panic may escape the `.pth` reader, safetensors loading or image decoding.

use torchlight_fuzz::{corpus, run, Finding, Report, Target};

/// Cases per target in the test suite: a few seconds in a debug build.
const CASES: u64 = 1000;

fn fuzz(target: Target) -> Report {
    let seeds = corpus(target).unwrap();
    assert!(seeds.len() >= 3, "{}: the corpus holds {} seeds", target.name(), seeds.len());
    let work = std::env::temp_dir().join(format!("tl-fuzz-{}-{}", target.name(), std::process::id()));
    let report = run(target, &seeds, CASES, 2026, &work).unwrap();
    let _ = std::fs::remove_dir_all(&work);
    eprintln!(
        "{}: {} cases, {} accepted, {} refused, {} panicked",
        target.name(),
        report.cases,
        report.accepted,
        report.rejected,
        report.failures.len()
    );
    for failure in &report.failures {
        eprintln!("  case {}: {:?}", failure.case, failure.finding);
    }
    let escaped: Vec<u64> = report.escaped().map(|f| f.case).collect();
    assert!(escaped.is_empty(), "{}: panics escaped the API in cases {escaped:?}", target.name());
    assert_eq!(report.cases, CASES);
    // The mutations must still exercise both outcomes, or the fuzzer tests nothing.
    assert!(report.accepted > 0 && report.rejected > 0, "{report:?}");
    report
}

#[test]
fn the_pth_reader_never_panics_on_mutated_files() {
    let report = fuzz(Target::Pth);
    assert!(report.failures.is_empty(), "the .pth reader is ours: no panic at all");
}

#[test]
fn safetensors_loading_never_panics_on_mutated_files() {
    let report = fuzz(Target::Safetensors);
    assert!(
        report.failures.is_empty(),
        "{:?}",
        report.failures.iter().map(|f| &f.finding).collect::<Vec<_>>()
    );
}

#[test]
fn image_decoding_never_panics_on_mutated_files() {
    let report = fuzz(Target::Image);
    // Decoder panics (third-party code) are contained as errors; they are listed above.
    assert!(report.failures.iter().all(|f| matches!(f.finding, Finding::Contained(_))));
}

#[test]
fn a_case_replays_from_its_number() {
    let seeds = corpus(Target::Image).unwrap();
    let work = std::env::temp_dir().join(format!("tl-fuzz-replay-{}", std::process::id()));
    let all = torchlight_fuzz::run_range(Target::Image, &seeds, 0..20, 9, &work).unwrap();
    let again = torchlight_fuzz::run_range(Target::Image, &seeds, 0..20, 9, &work).unwrap();
    let _ = std::fs::remove_dir_all(&work);
    assert_eq!((all.accepted, all.rejected), (again.accepted, again.rejected));
}
