//! The `$filter` parser and evaluator on arbitrary text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trestle_server::model::{EntityKey, Properties, StoredEntity, Ticks, Value};
use trestle_server::query::Expr;

fuzz_target!(|text: &str| {
    if let Ok(expr) = Expr::parse(text) {
        let entity = StoredEntity {
            key: EntityKey::new("p".into(), "r".into()).unwrap(),
            properties: Properties::from([
                ("Name".to_owned(), Value::String("Ada".into())),
                ("Age".to_owned(), Value::Int32(36)),
            ]),
            timestamp: Ticks(0),
        };
        let _ = expr.matches(&entity);
    }
});
