//! The stored-entity codec on arbitrary key and record bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trestle_server::storage::{decode_entity, EntityView};

fuzz_target!(|input: (&[u8], &[u8])| {
    let (key, record) = input;
    let _ = decode_entity(key, record, None);
    let _ = decode_entity(key, record, Some(&["Name".to_owned()]));
    if let Ok(view) = EntityView::parse(key, record) {
        view.properties().for_each(drop);
    }
});
