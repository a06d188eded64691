//! Skipped tests, reported where a passing run shows them.

use std::io::Write as _;

/// Says that `test` skipped, and why: straight to the process's standard error, which the test
/// harness does not capture (an `eprintln!` in a passing test is swallowed with its output), so
/// the skip shows in the summary of `cargo test`.
pub fn skipped(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}
