//! Deleted tables: gone at once, `TableBeingDeleted` while their data is reclaimed, and a
//! reclamation interrupted by a crash finishes at the next start with nothing half-deleted visible.

mod support;

use std::time::{Duration, Instant};

use support::fill;
use trestle_server::engine::Waiting;
use trestle_server::error::{ErrorCode, TableError};
use trestle_server::model::EntityKey;
use trestle_server::storage::{EntityView, StoreConfig};
use trestle_server::Engine;

fn store(dir: &std::path::Path, reclaim: bool) -> StoreConfig {
    let mut store = StoreConfig::embedded(dir);
    store.set_reclaim_deleted_tables(reclaim);
    store
}

fn code(result: Result<impl std::fmt::Debug, TableError>) -> ErrorCode {
    result.expect_err("expected an error").code()
}

#[test]
fn recreating_a_table_while_it_is_reclaimed_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(&store(dir.path(), false)).unwrap();
    engine.create_table("Events").unwrap();
    fill(&engine, "Events", 1_000);
    engine.delete_table("events").unwrap();
    assert_eq!(
        code(
            engine
                .get(
                    "Events",
                    &EntityKey::new("p".into(), "0000-000".into()).unwrap(),
                    &[],
                    |entity| Ok(entity.row_key.to_owned()),
                    Waiting::Allowed,
                )
                .map(|attempt| attempt.ran())
        ),
        ErrorCode::TableNotFound
    );
    assert_eq!(
        code(engine.create_table("EVENTS")),
        ErrorCode::TableBeingDeleted
    );
    assert_eq!(
        code(engine.delete_table("Events")),
        ErrorCode::TableNotFound
    );
    assert!(engine.list_tables("", 0, "").unwrap().tables.is_empty());
}

#[test]
fn a_reclamation_cut_short_by_a_crash_finishes_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = Engine::open(&store(dir.path(), false)).unwrap();
        engine.create_table("Events").unwrap();
        engine.create_table("Kept").unwrap();
        fill(&engine, "Events", 2_000);
        fill(&engine, "Kept", 10);
        engine.delete_table("Events").unwrap();
        // Dropped here without reclaiming: as if the process died mid-reclamation.
    }
    let engine = Engine::open(&store(dir.path(), true)).unwrap();
    let names: Vec<_> = engine
        .list_tables("", 0, "")
        .unwrap()
        .tables
        .iter()
        .map(|t| t.to_string())
        .collect();
    assert_eq!(names, ["Kept"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match engine.create_table("Events") {
            Ok(_) => break,
            Err(error)
                if error.code() == ErrorCode::TableBeingDeleted && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(error) => panic!("{error}"),
        }
    }
    assert_eq!(count(&engine, "Events"), 0);
    assert_eq!(count(&engine, "Kept"), 10);
}

/// How many entities `table` holds, read through a scan.
fn count(engine: &Engine, table: &str) -> u64 {
    let spec = trestle_server::query::QuerySpec::default();
    let mut cursor = engine.open_scan(table, spec, "").unwrap();
    let mut count = 0;
    let mut counting = |_: &EntityView<'_>| {
        count += 1;
        Ok(0)
    };
    while cursor.read_chunk(usize::MAX, &mut counting).unwrap() {}
    count
}
