//! Collectives across processes: two and three ranks on Gloo over loopback, with the store
//! hosted by the launcher (torchrun's agent store) or by rank 0.

use crate::common::{describe, launch, launcher};
use std::net::TcpListener;

#[test]
fn two_ranks_agree_on_every_collective() {
    let out = tempfile::tempdir().unwrap();
    let outcome = launch("collectives", 2, out.path());
    assert!(outcome.success(), "{}", describe(&outcome));
}

#[test]
fn three_ranks_with_rank_0_hosting_the_store() {
    // Without the agent store, rank 0 hosts the TCPStore on MASTER_PORT, as under SLURM or a
    // PyTorchJob. A port the OS just handed out is free but for a moment; that window is the
    // only one in the suite.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = tempfile::tempdir().unwrap();
    let outcome = launcher("collectives", 3, out.path())
        .env("TORCHELASTIC_USE_AGENT_STORE", "False")
        .env("MASTER_PORT", port.to_string())
        .run()
        .unwrap();
    assert!(outcome.success(), "{}", describe(&outcome));
}
