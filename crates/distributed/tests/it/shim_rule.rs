//! The shim's rule: c10d's API only, never gloo's own types, whose rendezvous Store vtable in
//! the headers we compile with (Debian's gloo) differs from the one in libtorch's gloo. Checked
//! in the C++ source and in the compiled shim's symbols.

use std::path::Path;
use std::process::Command;

/// Spellings that would reach gloo's own types.
const FORBIDDEN: &[&str] = &["gloo::", "GlooStore", "rendezvous", "_getStore"];

#[test]
fn the_shim_source_names_no_gloo_type() {
    let csrc = Path::new(env!("CARGO_MANIFEST_DIR")).join("csrc");
    let mut checked = 0;
    for entry in std::fs::read_dir(&csrc).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        // The rule's own explanation may name what it forbids; code may not.
        let code: String =
            text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
        for word in FORBIDDEN {
            assert!(
                !code.contains(word),
                "{} uses `{word}`: the shim must stay on c10d's API",
                path.display()
            );
        }
        checked += 1;
    }
    assert!(checked >= 3, "found only {checked} files in {}", csrc.display());
}

#[test]
fn the_compiled_shim_defines_no_gloo_store_code() {
    let lib = env!("TL_DIST_SHIM_LIB");
    let out = Command::new("nm")
        .args(["--defined-only", "-C", lib])
        .output()
        .unwrap_or_else(|e| panic!("cannot run nm (binutils) on {lib}: {e}"));
    assert!(out.status.success(), "nm {lib}: {}", String::from_utf8_lossy(&out.stderr));
    let symbols = String::from_utf8_lossy(&out.stdout);
    assert!(symbols.contains("tl_dist_all_reduce"), "unexpected nm output for {lib}");
    for line in symbols.lines() {
        assert!(
            !line.contains("gloo::rendezvous") && !line.contains("GlooStore"),
            "the shim defines gloo store code, which must come from libtorch only: {line}"
        );
    }
}
