//! The stored-entity codec on arbitrary record bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trestle_server::storage::EntityView;

fuzz_target!(|record: &[u8]| {
    if let Ok(view) = EntityView::parse("p", "r", record) {
        view.properties().for_each(drop);
        let _ = view.property("Name");
        let select = ["Name".to_owned()];
        view.selecting(&select).properties().for_each(drop);
    }
});
