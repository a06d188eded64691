//! Continuation and table-listing tokens on arbitrary text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trestle_server::query::{ContinuationToken, TablesToken};

fuzz_target!(|text: &str| {
    let _ = ContinuationToken::decode(text, 1, 2);
    let _ = TablesToken::decode(text);
});
