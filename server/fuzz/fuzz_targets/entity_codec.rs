//! The stored-entity codec on arbitrary key and record bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trestle_server::storage::EntityView;

fuzz_target!(|input: (&[u8], &[u8])| {
    let (key, record) = input;
    if let Ok(view) = EntityView::parse(key, record) {
        view.properties().for_each(drop);
        let _ = view.property("Name");
        let select = ["Name".to_owned()];
        view.selecting(&select).properties().for_each(drop);
    }
});
