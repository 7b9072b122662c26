//! Failures end runs with errors naming the rank and the operation, within the timeout, never
//! a hang: a rank that dies, a rank that stops answering, ranks with different models.

use crate::common::{describe, launcher, output_of, HANG_TIMEOUT_MS, TIMEOUT_MS};
use std::time::Duration;

#[test]
fn a_dead_rank_makes_the_others_fail_naming_rank_and_operation() {
    let out = tempfile::tempdir().unwrap();
    // The survivors must see the death themselves: the launcher waits 60 s before stepping in,
    // far longer than the 20 s collective timeout.
    let outcome = launcher("dies", 2, out.path())
        .env(TIMEOUT_MS, "20000")
        .failure_grace(Duration::from_secs(60))
        .run()
        .unwrap();
    let text = describe(&outcome);
    assert_eq!(outcome.ranks[1].status.code(), Some(3), "{text}");
    assert_eq!(outcome.ranks[0].status.code(), Some(1), "{text}");
    assert!(!outcome.ranks[0].terminated, "rank 0 did not exit by itself: {text}");
    let rank0 = output_of(&outcome, 0);
    assert!(rank0.contains("rank 0: all_reduce failed") && rank0.contains("a peer rank exited"), "{text}");
    assert_eq!(outcome.first_failure, Some(1));
    let err = outcome.into_result().unwrap_err().to_string();
    assert!(err.contains("rank 1 failed first (exit status 3)") && err.contains("exits on purpose"), "{err}");
}

#[test]
fn a_silent_rank_makes_the_others_time_out_naming_rank_and_operation() {
    let out = tempfile::tempdir().unwrap();
    let outcome = launcher("hangs", 2, out.path())
        .env(HANG_TIMEOUT_MS, "2000")
        .failure_grace(Duration::from_millis(200))
        .run()
        .unwrap();
    let text = describe(&outcome);
    assert_eq!(outcome.ranks[0].status.code(), Some(1), "{text}");
    let rank0 = output_of(&outcome, 0);
    assert!(
        rank0.contains("rank 0: all_reduce failed") && rank0.to_lowercase().contains("timed out"),
        "{text}"
    );
    // The sleeping rank was terminated by the launcher once rank 0 had failed.
    assert!(outcome.ranks[1].terminated, "{text}");
    assert_eq!(outcome.first_failure, Some(0));
}

#[test]
fn ranks_with_different_models_are_refused_by_every_rank() {
    let out = tempfile::tempdir().unwrap();
    let outcome = launcher("mismatch", 2, out.path()).failure_grace(Duration::from_secs(60)).run().unwrap();
    let text = describe(&outcome);
    for rank in 0..2 {
        assert_eq!(outcome.ranks[rank].status.code(), Some(2), "{text}");
        let said = output_of(&outcome, rank);
        assert!(
            said.contains(&format!("rank {rank}: the model differs across ranks"))
                && said.contains("rank 1: 6 tensors"),
            "{text}"
        );
    }
}
