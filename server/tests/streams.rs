//! Streamed scans in the engine: a scan whose reader went away stops within a chunk, also when
//! its chunks find no match and so never end a batch.

mod support;

use std::cell::Cell;

use support::fill;
use trestle_server::engine::MatchSink;
use trestle_server::query::QuerySpec;
use trestle_server::storage::{EntityView, StorageError, StoreConfig};
use trestle_server::Engine;

/// A reader that counts how often the scan asks whether it is still there.
struct Reader {
    waiting: bool,
    asked: Cell<usize>,
}

impl MatchSink for Reader {
    fn take(&mut self, _: &EntityView<'_>) -> Result<usize, StorageError> {
        panic!("the filter matches nothing");
    }

    fn reader_waiting(&self) -> bool {
        self.asked.set(self.asked.get() + 1);
        self.waiting
    }
}

/// How often a scan of 25,000 entities in one partition, with a filter that matches none, asks
/// whether its reader is still there before it ends, when the reader answers `waiting`. A chunk
/// examines at most 10,000 entities of one partition, so the whole scan takes three chunks.
fn asks_when(waiting: bool) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(&StoreConfig::embedded(dir.path())).unwrap();
    engine.create_table("Events").unwrap();
    fill(&engine, "Events", 25_000);
    let spec = QuerySpec {
        filter: "V lt 0".into(),
        page_size: 1000,
        ..QuerySpec::default()
    };
    let mut reader = Reader {
        waiting,
        asked: Cell::new(0),
    };
    engine.stream("Events", spec, "", &mut reader).unwrap();
    reader.asked.get()
}

#[test]
fn a_scan_without_matches_asks_after_every_chunk_whether_its_reader_is_there() {
    assert_eq!(asks_when(true), 3);
}

#[test]
fn a_scan_without_matches_stops_after_one_chunk_once_its_reader_is_gone() {
    assert_eq!(asks_when(false), 1);
}
