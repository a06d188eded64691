//! Online snapshots of the sled store: every live table's entities as they were at one instant,
//! read while reads and writes go on (sled keeps no versions of its own).
//!
//! Starting a snapshot takes [`Snapshots`]' gate exclusively for a moment: every commit holds it
//! shared from before it writes until its rows are written ([`Snapshots::writing`]), so the
//! instant falls between commits. From then on a commit, before it writes an entity row of a
//! table the snapshot has not read past, keeps that row's bytes as they were (its before image,
//! read from the tree under the partition's lock) unless an earlier commit kept them already. The
//! reader walks each table's entity rows in key order and, under the same mutex, takes a kept
//! before image instead of what it read, and marks the row read; rows removed since the instant
//! come from their before images at the end of the table. So each row is given once, as it was at
//! the instant, and a table deleted since waits for the reader to finish with it before it is
//! reclaimed. Index entries and change records are not part of a snapshot: a restore builds the
//! indexes anew, and starts the feed empty.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard};

use super::key;
use super::{SledStore, StorageError, Table};
use crate::model::IndexState;
use crate::storage::{SnapshotItem, SnapshotTable};

/// The snapshots being read (at most one at a time) and the gate that puts their instant between
/// commits.
#[derive(Debug, Default)]
pub(super) struct Snapshots {
    /// `Some` while a snapshot is read; commits hold it shared while they write.
    gate: RwLock<Option<Arc<Capture>>>,
    /// Serialises snapshots.
    one_at_a_time: Mutex<()>,
}

/// What a snapshot keeps of the rows commits change, by table id.
#[derive(Debug, Default)]
struct Capture {
    tables: Mutex<HashMap<u64, TableCapture>>,
    /// Signalled whenever the reader finishes a table.
    finished: Condvar,
}

/// One table's part of a capture.
#[derive(Debug, Default)]
struct TableCapture {
    /// The last key the reader has given (every key up to it is done), if any.
    read_up_to: Option<Vec<u8>>,
    /// The reader is done with the table.
    finished: bool,
    /// The bytes at the instant of each row changed since and not yet read (`None`: no row).
    before: HashMap<Vec<u8>, Option<sled::IVec>>,
}

impl TableCapture {
    fn keeps(&self, key: &[u8]) -> bool {
        !self.finished
            && key < key::ENTITIES_END
            && self.read_up_to.as_deref().is_none_or(|read| key > read)
            && !self.before.contains_key(key)
    }
}

/// A commit's shared hold of the gate, from before it writes until its rows are written.
pub(super) struct Writing<'a>(RwLockReadGuard<'a, Option<Arc<Capture>>>);

impl Writing<'_> {
    /// Keeps the current bytes of the rows at `keys` of table `table_id` (in `tree`) for the
    /// snapshot being read, if any: call it before writing them, holding their partitions.
    pub(super) fn preserve<'k>(
        &self,
        table_id: u64,
        tree: &sled::Tree,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<(), StorageError> {
        let Some(capture) = self.0.as_ref() else {
            return Ok(());
        };
        let mut tables = capture.tables();
        let Some(table) = tables.get_mut(&table_id) else {
            return Ok(());
        };
        for key in keys {
            if table.keeps(key) {
                table.before.insert(key.to_vec(), tree.get(key)?);
            }
        }
        Ok(())
    }
}

impl Capture {
    fn tables(&self) -> MutexGuard<'_, HashMap<u64, TableCapture>> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Snapshots {
    /// The gate, held shared by a commit while it writes.
    pub(super) fn writing(&self) -> Writing<'_> {
        Writing(self.gate.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Waits until no snapshot is reading table `table_id` (a deleted table is reclaimed only
    /// then).
    pub(super) fn wait_until_read(&self, table_id: u64) {
        let Some(capture) = self
            .gate
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            return;
        };
        let mut tables = capture.tables();
        while tables.get(&table_id).is_some_and(|table| !table.finished) {
            tables = capture
                .finished
                .wait(tables)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl SledStore {
    /// Gives every live table, then each one's entity rows as they were at one instant, to
    /// `sink`, while reads and writes go on (see the module's comment).
    pub(super) fn read_snapshot(
        &self,
        sink: &mut dyn FnMut(SnapshotItem<'_>) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        let snapshots = &self.shared.snapshots;
        let _one = snapshots
            .one_at_a_time
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let capture = Arc::new(Capture::default());
        let tables = {
            let mut gate = snapshots
                .gate
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            let live = self.tables.read().unwrap_or_else(PoisonError::into_inner);
            let mut tables: Vec<_> = live.values().cloned().collect();
            tables.sort_by(|a, b| a.name().folded().cmp(b.name().folded()));
            let mut captured = capture.tables();
            for table in &tables {
                captured.insert(table.id(), TableCapture::default());
            }
            drop(captured);
            *gate = Some(capture.clone());
            tables
        };
        let read = (|| {
            let described: Vec<SnapshotTable> = tables
                .iter()
                .map(|table| {
                    let catalog = table.index_catalog();
                    SnapshotTable {
                        id: table.id(),
                        name: table.name().clone(),
                        indexes: catalog
                            .indexes
                            .iter()
                            .filter(|index| !matches!(index.state, IndexState::Failed(_)))
                            .map(|index| index.definition.clone())
                            .collect(),
                        change_feed: catalog.change_feed,
                        time_to_live: catalog.time_to_live,
                    }
                })
                .collect();
            sink(SnapshotItem::Tables(&described))?;
            for (at, table) in tables.iter().enumerate() {
                read_table(&capture, table.id(), &table.tree, at, sink)?;
            }
            Ok(())
        })();
        *snapshots
            .gate
            .write()
            .unwrap_or_else(PoisonError::into_inner) = None;
        for table in capture.tables().values_mut() {
            table.finished = true;
        }
        capture.finished.notify_all();
        read
    }
}

/// Gives the entity rows of table `table_id` (the `at`th of the snapshot) as they were at the
/// capture's instant.
fn read_table(
    capture: &Capture,
    table_id: u64,
    tree: &sled::Tree,
    at: usize,
    sink: &mut dyn FnMut(SnapshotItem<'_>) -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    let mut give = |stored_key: &[u8], bytes: &[u8]| {
        let (partition_key, row_key) = key::split(stored_key)?;
        sink(SnapshotItem::Row {
            table: at,
            partition_key,
            row_key,
            record: bytes,
        })
    };
    for item in tree.range(..key::ENTITIES_END) {
        let (stored_key, bytes) = item?;
        let row = {
            let mut tables = capture.tables();
            let table = tables.entry(table_id).or_default();
            let kept = table.before.remove(&*stored_key);
            table.read_up_to = Some(stored_key.to_vec());
            match kept {
                Some(kept) => kept,
                None => Some(bytes),
            }
        };
        if let Some(bytes) = row {
            give(&stored_key, &bytes)?;
        }
    }
    let removed_since = {
        let mut tables = capture.tables();
        let table = tables.entry(table_id).or_default();
        table.finished = true;
        std::mem::take(&mut table.before)
    };
    capture.finished.notify_all();
    for (stored_key, bytes) in removed_since {
        if let Some(bytes) = bytes {
            give(&stored_key, &bytes)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::table::tests::{insert, row, table_with_even_rows};
    use super::*;
    use crate::model::{EntityKey, IfMatch, Operation};
    use crate::storage::{EntityView, KeyScan, Table};

    /// Every (RowKey, N) of partition `p`, as a scan sees them now.
    fn contents(table: &dyn Table) -> BTreeMap<String, i64> {
        let mut rows = BTreeMap::new();
        table
            .visit(
                KeyScan::forward(&[crate::model::KeyRange::all()]),
                &mut |entity| {
                    rows.insert(entity.row_key.to_owned(), n_of(entity));
                    Ok(crate::storage::Visit::Next)
                },
            )
            .unwrap();
        rows
    }

    fn n_of(entity: &EntityView<'_>) -> i64 {
        match entity.property("N").unwrap() {
            Some(crate::model::ValueRef::Int32(n)) => i64::from(n),
            other => panic!("N is {other:?}"),
        }
    }

    #[test]
    fn a_snapshot_sees_the_rows_of_its_instant_whatever_commits_do_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let (store, table) = table_with_even_rows(dir.path());
        let at_instant = contents(table.as_ref());
        let delete = |row_key: &str| Operation::Delete {
            key: EntityKey::new("p".into(), row_key.into()).unwrap(),
            if_match: IfMatch::Any,
        };
        let replace = |row_key: &str| Operation::Update(row(row_key, -1), IfMatch::Any);
        let mut seen = BTreeMap::new();
        let mut commits_done = false;
        store
            .read_snapshot(&mut |item| {
                let SnapshotItem::Row {
                    row_key, record, ..
                } = item
                else {
                    return Ok(());
                };
                let view = EntityView::parse("p", row_key, record)?;
                seen.insert(row_key.to_owned(), n_of(&view));
                if !commits_done {
                    commits_done = true;
                    // Rows behind the reader, ahead of it, new ones and removed ones, alone
                    // (the insert's fast path) and in transactions of several rows.
                    table.commit("p", vec![replace("r000")]).unwrap().unwrap();
                    table.commit("p", vec![insert("r001", 7)]).unwrap().unwrap();
                    table.commit("p", vec![replace("r100")]).unwrap().unwrap();
                    table.commit("p", vec![delete("r150")]).unwrap().unwrap();
                    let several = vec![delete("r198"), insert("r199", 7), replace("r050")];
                    table.commit("p", several).unwrap().unwrap();
                    table.commit("p", vec![replace("r050")]).unwrap().unwrap();
                }
                Ok(())
            })
            .unwrap();
        assert!(commits_done);
        assert_eq!(seen, at_instant, "the snapshot is the table at its instant");
        let now = contents(table.as_ref());
        assert_eq!(now["r100"], -1);
        assert!(!now.contains_key("r150") && now.contains_key("r199"));
        // Once the snapshot ends, commits keep nothing.
        table.commit("p", vec![replace("r002")]).unwrap().unwrap();
        let writing = store.shared.snapshots.writing();
        assert!(writing.0.is_none());
    }
}
