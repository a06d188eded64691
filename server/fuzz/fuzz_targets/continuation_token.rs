//! Continuation and table-listing tokens on arbitrary text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trestle_server::query::{ContinuationToken, TablesToken, TokenSeal};

fuzz_target!(|text: &str| {
    let seal = TokenSeal::new(b"store secret");
    let _ = ContinuationToken::decode(text, &seal, 1, 2);
    let _ = TablesToken::decode(text, &seal);
});
