//! The `$filter` parser and evaluator on arbitrary text, run on a thread with a runtime worker's
//! 2 MiB stack, so that a recursion too deep for the server is a crash here too. Run with the
//! dictionary (`-dict=fuzz/filter.dict -max_len=65536`): its nesting-heavy units reach filters
//! nested thousands deep.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trestle_server::model::{Document, EntityKey, Properties, StoredEntity, Ticks, Value};
use trestle_server::query::Expr;

/// The stack of a tokio runtime worker, where the server parses and evaluates filters.
const WORKER_STACK_BYTES: usize = 2 * 1024 * 1024;

/// A document to walk: an array holding a string, a null and an object (`Tags/any(t: t/City …)`).
fn tags() -> Value {
    let city = Document::object([("City".to_owned(), Value::String("Seattle".into()))]);
    let elements = [Value::String("x".into()), Value::Null, Value::Document(city.unwrap())];
    Value::Document(Document::array(elements).unwrap())
}

fuzz_target!(|text: &str| {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(WORKER_STACK_BYTES)
            .spawn_scoped(scope, || {
                if let Ok(expr) = Expr::parse(text) {
                    let entity = StoredEntity {
                        key: EntityKey::new("p".into(), "r".into()).unwrap(),
                        properties: Properties::from([
                            ("Name".to_owned(), Value::String("Ada".into())),
                            ("Age".to_owned(), Value::Int32(36)),
                            ("Tags".to_owned(), tags()),
                        ]),
                        timestamp: Ticks(0),
                    };
                    let _ = expr.matches(&entity);
                }
            })
            .expect("spawn")
            .join()
            .expect("the parser panicked");
    });
});
