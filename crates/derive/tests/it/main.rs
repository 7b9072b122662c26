//! The compile errors of `#[derive(Module)]` on bad uses, checked with trybuild against the
//! expected messages in `tests/ui/*.stderr`. The expansions themselves are tested at run time
//! in torchlight-nn's integration tests (`tests/it/derive.rs`), where `Module` exists.

#[test]
fn bad_uses_are_compile_errors_that_say_what_to_do() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
