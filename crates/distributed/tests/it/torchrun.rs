//! `torchrun --standalone --nproc-per-node=2 --no-python` runs Torchlight ranks unchanged:
//! its agent hosts the store (TORCHELASTIC_USE_AGENT_STORE=True) and every rank connects.

use crate::common::{rank_args, OUT, SCENARIO};
use std::process::Command;

#[test]
fn torchrun_launches_torchlight_ranks() {
    let python = torchlight_testing::reference_python().expect("reference PyTorch (cargo xtask setup)");
    let torchrun = python.with_file_name("torchrun");
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(&torchrun)
        .args(["--standalone", "--nproc-per-node=2", "--no-python"])
        .arg(std::env::current_exe().unwrap())
        .args(rank_args())
        .env(SCENARIO, "collectives")
        .env(OUT, out.path())
        // torchrun is Python; `cargo test` puts libtorch's folder on LD_LIBRARY_PATH, which is
        // not the reference environment's.
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", torchrun.display()));
    assert!(
        output.status.success(),
        "torchrun failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
