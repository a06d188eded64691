//! Access tokens and key files on arbitrary text.
#![no_main]

use std::sync::OnceLock;
use std::time::SystemTime;

use libfuzzer_sys::fuzz_target;
use trestle_proto::access::{verify, KeyRing};

fuzz_target!(|text: &str| {
    static KEYS: OnceLock<KeyRing> = OnceLock::new();
    let keys = KEYS.get_or_init(|| KeyRing::generate().unwrap());
    assert!(verify(keys, text, SystemTime::now()).is_err());
    let _ = KeyRing::parse(text);
});
