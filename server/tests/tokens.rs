//! Continuation tokens are sealed with the store's own secret: a token resumes its query after a
//! restart, and a token with any byte changed, or from another store, is refused.

mod support;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use support::fill;
use trestle_server::engine::MatchSink;
use trestle_server::error::ErrorCode;
use trestle_server::query::QuerySpec;
use trestle_server::storage::{EntityView, StorageError, StoreConfig};
use trestle_server::Engine;

/// Counts the matches of a page.
#[derive(Default)]
struct Count(usize);

impl MatchSink for Count {
    fn take(&mut self, _: &EntityView<'_>) -> Result<usize, StorageError> {
        self.0 += 1;
        Ok(1)
    }
}

fn page(engine: &Engine, continuation: &str) -> Result<(usize, Option<String>), ErrorCode> {
    let spec = QuerySpec {
        page_size: 10,
        ..QuerySpec::default()
    };
    let mut count = Count::default();
    let info = engine
        .query("Events", spec, continuation, &mut count)
        .map_err(|error| error.code())?;
    Ok((count.0, info.continuation_token))
}

#[test]
fn a_token_resumes_after_a_restart_and_a_changed_or_foreign_token_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let token = {
        let engine = Engine::open(&StoreConfig::embedded(dir.path())).unwrap();
        engine.create_table("Events").unwrap();
        fill(&engine, "Events", 25);
        page(&engine, "").unwrap().1.expect("a continuation")
    };
    let engine = Engine::open(&StoreConfig::embedded(dir.path())).unwrap();
    assert_eq!(page(&engine, &token).unwrap().0, 10);

    let bytes = URL_SAFE_NO_PAD.decode(&token).unwrap();
    for at in 0..bytes.len() {
        let mut changed = bytes.clone();
        changed[at] ^= 0x80;
        let changed = URL_SAFE_NO_PAD.encode(&changed);
        assert_eq!(
            page(&engine, &changed),
            Err(ErrorCode::InvalidInput),
            "byte {at}"
        );
    }

    let other_dir = tempfile::tempdir().unwrap();
    let other = Engine::open(&StoreConfig::embedded(other_dir.path())).unwrap();
    other.create_table("Events").unwrap();
    fill(&other, "Events", 25);
    assert_eq!(page(&other, &token), Err(ErrorCode::InvalidInput));
}
