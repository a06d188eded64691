//! One table's entities in its own sled tree: point reads, the single commit path, and scans that
//! see each partition at one instant.

use std::ops::Bound;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use super::feed;
use super::key;
use super::locks::PartitionGuard;
use super::snapshot::Writing;
use super::undo::{self, RowChange, MAX_UNDO_RECORD_BYTES};
use super::{codec, EntityView, RejectReason, Rejection, Shared, StorageError, Table};
use crate::model::{plan_commit, CommitPlan, EntityKey, Operation, Refusal, TableName, Ticks};
use crate::model::{KeyPosition, KeyRange};
use crate::storage::{
    CommitOutcome, Committed, FeedBatch, FeedEnd, FeedPosition, IndexCatalog, KeyScan,
    StoredChange, Visit, Visitor,
};

/// A live table of the sled store: its identity, its tree, and a gate that deletion closes.
#[derive(Debug)]
pub struct SledTable {
    pub(super) id: u64,
    name: TableName,
    pub(super) tree: sled::Tree,
    /// `true` once the table is deleted: every operation holds the read side while it touches the
    /// tree, so after deletion takes the write side no write can land in the dropped tree.
    retired: RwLock<bool>,
    pub(super) shared: Arc<Shared>,
    /// The table's indexes: a commit reads them under its partition's lock.
    pub(super) indexes: RwLock<Arc<IndexCatalog>>,
    /// Serialises changes to the index catalog.
    pub(super) index_catalog_writes: Mutex<()>,
}

/// Held while an operation touches the table's tree: deletion waits for it.
pub(super) type Gate<'a> = RwLockReadGuard<'a, bool>;

/// From how many operations a commit reads the current rows in one pass over their span
/// ([`SledTable::current_rows`]) rather than one point read each.
const SPAN_READ_MIN_KEYS: usize = 4;

impl SledTable {
    pub(super) fn new(
        id: u64,
        name: TableName,
        tree: sled::Tree,
        shared: Arc<Shared>,
    ) -> Result<SledTable, StorageError> {
        let indexes = match tree.get(key::INDEX_CATALOG)? {
            Some(bytes) => IndexCatalog::decode(&bytes)?,
            None => IndexCatalog::default(),
        };
        Ok(SledTable {
            id,
            name,
            tree,
            retired: RwLock::new(false),
            shared,
            indexes: RwLock::new(Arc::new(indexes)),
            index_catalog_writes: Mutex::new(()),
        })
    }

    pub(super) fn tree_name(id: u64) -> String {
        format!("t/{id:016x}")
    }

    /// Closes the gate: waits for operations in flight, then refuses all others.
    pub(super) fn retire(&self) {
        *self.retired.write().unwrap_or_else(|e| e.into_inner()) = true;
    }

    pub(super) fn gate(&self) -> Option<Gate<'_>> {
        let gate = self.retired.read().unwrap_or_else(|e| e.into_inner());
        (!*gate).then_some(gate)
    }

    /// The gate, waiting for it if `wait` or if it is free now: `Err` when it is not (a
    /// deletion is retiring the table), `Ok(None)` once the table is retired.
    pub(super) fn gate_when(&self, wait: bool) -> Result<Option<Gate<'_>>, ()> {
        if wait {
            return Ok(self.gate());
        }
        match self.retired.try_read() {
            Ok(gate) => Ok((!*gate).then_some(gate)),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => {
                let gate = poisoned.into_inner();
                Ok((!*gate).then_some(gate))
            }
            Err(std::sync::TryLockError::WouldBlock) => Err(()),
        }
    }

    /// [`Table::get`]: waits while a commit is writing several rows of the entity's partition,
    /// so that a reader who saw one row of a commit never finds another of its rows unwritten;
    /// unless `wait`, it reads nothing (`None`) rather than wait.
    fn get_waiting(
        &self,
        key: &EntityKey,
        read: &mut dyn FnMut(EntityView<'_>) -> Result<(), StorageError>,
        wait: bool,
    ) -> Result<Option<bool>, StorageError> {
        let Ok(gate) = self.gate_when(wait) else {
            return Ok(None);
        };
        let Some(_gate) = gate else {
            return Ok(Some(false));
        };
        let partition_key = key.partition_key.as_bytes();
        if wait {
            self.shared.locks.wait_for_writer(self.id, partition_key);
        } else if self.shared.locks.writer_busy(self.id, partition_key) {
            return Ok(None);
        }
        let encoded = key::encode(&key.partition_key, &key.row_key);
        match self.tree.get(&encoded)? {
            Some(bytes) => {
                read(EntityView::parse(&key.partition_key, &key.row_key, &bytes)?)?;
                Ok(Some(true))
            }
            None => Ok(Some(false)),
        }
    }

    /// The partition path of the store's one apply (`super::commit`): applies `operations` on
    /// one partition atomically; unless `wait`, gives them back rather than wait for the
    /// partition.
    ///
    /// Under the partition's lock every operation's precondition is checked against the current
    /// rows, then all effects are written, atomically across a crash (`SledTable::apply`), before
    /// the lock is released; scans hold the lock's shared side and point reads wait while rows
    /// are written, so readers see all of them or none. A lone insert checks and writes in one
    /// step (`SledTable::insert_alone`). The ticket becomes durable with the next group commit
    /// (`GroupCommit::record_write`); no ticket when nothing was written.
    pub(super) fn commit_waiting(
        &self,
        partition_key: &str,
        operations: Vec<Operation>,
        wait: bool,
    ) -> Result<Result<CommitOutcome, Vec<Operation>>, StorageError> {
        let Ok(gate) = self.gate_when(wait) else {
            return Ok(Err(operations));
        };
        let Some(_gate) = gate else {
            return Ok(Ok(Err(Rejection {
                index: 0,
                reason: RejectReason::TableGone,
            })));
        };
        self.shared.space.check()?;
        let partition_id = partition_key.as_bytes();
        let partition = if wait {
            self.shared.locks.lock(self.id, partition_id)
        } else {
            match self.shared.locks.try_lock(self.id, partition_id) {
                Some(partition) => partition,
                None => return Ok(Err(operations)),
            }
        };
        self.commit_locked(&partition, partition_key, operations)
            .map(Ok)
    }

    /// A lone insert (the commonest write) as one compare-and-swap that stores the entity only
    /// where no row is: one descent of the tree instead of a read and then a write. With a
    /// change feed, its record is written first (unreadable until the commit is durable) and
    /// removed again if a row is there; a crash between the record and the row leaves a record
    /// that the next open removes ([`feed::drop_unfinished`]). Called by [`SledTable::commit_waiting`] under
    /// the partition's lock and the table's gate.
    fn insert_alone(
        &self,
        writing: &Writing<'_>,
        partition_key: &str,
        insert: Operation,
        now: Ticks,
        catalog: &IndexCatalog,
    ) -> Result<CommitOutcome, StorageError> {
        let encoded_key = key::encode(partition_key, insert.row_key());
        let rules = catalog.plan_rules();
        let plan = match plan_commit(partition_key, vec![insert], vec![None], now, rules) {
            Ok(plan) => plan,
            Err(refused) => return Ok(Err(refused.into())),
        };
        let Some(entity) = &plan.results[0] else {
            unreachable!("an insert where no row is stores its entity");
        };
        let value = codec::encode(entity.timestamp, &entity.properties);
        let applying = self.shared.applying([partition_key.as_bytes()]);
        writing.preserve(self.id, &self.tree, [encoded_key.as_slice()])?;
        let turn = catalog.change_feed.map(|_| self.shared.feed.take());
        let record = turn
            .as_ref()
            .map(|turn| feed::insert_record_row(&plan, partition_key, turn.transaction, &value));
        if let Some(record) = &record {
            record.write(&self.tree)?;
        }
        if self
            .tree
            .compare_and_swap(&encoded_key, None::<&[u8]>, Some(value))?
            .is_err()
        {
            if let Some(record) = record {
                self.tree.remove(record.key)?;
            }
            return Ok(Err(Rejection {
                index: 0,
                reason: RejectReason::Refused {
                    row_key: entity.key.row_key.clone(),
                    refusal: Refusal::AlreadyExists,
                },
            }));
        }
        let ticket = self.shared.written(applying, turn);
        Ok(Ok(Committed {
            stored: plan.results,
            ticket,
        }))
    }

    /// The stored bytes of each of `keys` (rows of one partition, each at most once), in order.
    ///
    /// Many keys are read in one ordered pass over the span they cover, one descent of the tree
    /// instead of one per key: a transaction filling a new or sparse partition finds nothing
    /// there at the cost of a single read. Once the span shows more other rows than there are
    /// keys, the rest are read one by one, so a few keys spread over a large partition never
    /// cost a scan of it.
    fn current_rows(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<sled::IVec>>, StorageError> {
        let mut rows = vec![None; keys.len()];
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_unstable_by(|&a, &b| keys[a].cmp(&keys[b]));
        let mut unread = order.as_slice();
        if let (true, Some(&first), Some(&last)) = (
            keys.len() >= SPAN_READ_MIN_KEYS,
            order.first(),
            order.last(),
        ) {
            let mut other_rows = 0;
            for item in self
                .tree
                .range(keys[first].as_slice()..=keys[last].as_slice())
            {
                let (stored_key, bytes) = item?;
                // Keys before the stored one are not stored.
                while let Some((&next, rest)) = unread.split_first() {
                    if keys[next].as_slice() >= &*stored_key {
                        break;
                    }
                    unread = rest;
                }
                match unread.split_first() {
                    Some((&next, rest)) if keys[next].as_slice() == &*stored_key => {
                        rows[next] = Some(bytes);
                        unread = rest;
                    }
                    _ => other_rows += 1,
                }
                if other_rows > keys.len() {
                    break;
                }
            }
            if other_rows <= keys.len() {
                // The whole span was read: the keys still unread are not stored.
                return Ok(rows);
            }
        }
        for &index in unread {
            rows[index] = self.tree.get(&keys[index])?;
        }
        Ok(rows)
    }

    /// Writes a commit's rows so that a crash leaves all of them or none, under the partition's
    /// lock (`partition`), so that no reader sees some of them without the others.
    ///
    /// One row is a plain insert or remove. Several rows make point reads of the partition wait
    /// ([`PartitionGuard::writing_rows`]) and go one by one under an undo record
    /// ([`UndoLog::write_atomically`]), not as a sled batch: sled applies a batch under a
    /// process-wide exclusive lock that first waits out any flush in progress, stalling every
    /// reader and writer meanwhile. Only a commit whose undo record would exceed
    /// [`MAX_UNDO_RECORD_BYTES`] (it replaces many large rows) uses a batch.
    ///
    /// [`UndoLog::write_atomically`]: super::undo::UndoLog::write_atomically
    pub(super) fn apply(
        &self,
        partition: &PartitionGuard<'_>,
        partition_key: &str,
        changes: Vec<RowChange>,
    ) -> Result<(), StorageError> {
        if let [change] = changes.as_slice() {
            change.write(&self.tree)?;
        } else if undo::record_len(&changes) <= MAX_UNDO_RECORD_BYTES {
            partition.writing_rows();
            self.shared.undo.write_atomically(
                &self.tree,
                self.id,
                partition_key.as_bytes(),
                &changes,
            )?;
        } else {
            let mut batch = sled::Batch::default();
            for RowChange { key, after, .. } in changes {
                match after {
                    Some(value) => batch.insert(key, value),
                    None => batch.remove(key),
                }
            }
            self.tree.apply_batch(batch)?;
        }
        Ok(())
    }

    /// [`SledTable::commit_waiting`] once the partition is held (by `partition`) and the table's gate too:
    /// reads the rows, plans the commit and writes the plan.
    fn commit_locked(
        &self,
        partition: &PartitionGuard<'_>,
        partition_key: &str,
        mut operations: Vec<Operation>,
    ) -> Result<CommitOutcome, StorageError> {
        let now = Ticks::next_commit();
        let catalog = self.index_catalog();
        let writing = self.shared.snapshots.writing();
        // (An expired row where an insert goes reads as missing: that needs the row.)
        let alone = !catalog.reads_rows_whole();
        if let (true, [Operation::Insert(_)]) = (alone, operations.as_slice()) {
            let insert = operations.pop().expect("one operation");
            return self.insert_alone(&writing, partition_key, insert, now, &catalog);
        }
        let (plan, mut changes) = match self.plan_rows(partition_key, operations, now, &catalog)? {
            Ok(planned) => planned,
            Err(rejection) => return Ok(Err(rejection)),
        };
        if changes.is_empty() {
            return Ok(Ok(Committed {
                stored: plan.results,
                ticket: None,
            }));
        }
        // Unique values stay claimed (their stripes held) until the entries are written.
        let _claims = self.shared.claims.hold(plan.unique_values_added());
        let several = changes.len() > 1;
        let entries = match self.entry_changes(&catalog, partition_key, &plan, several, &[])? {
            Ok(entries) => entries,
            Err(rejection) => return Ok(Err(rejection)),
        };
        let keys = changes.iter().map(|change| change.key.as_slice());
        let applying = self.shared.applying([partition_key.as_bytes()]);
        writing.preserve(self.id, &self.tree, keys)?;
        // The change records go with the rows, under the same undo record.
        let turn = catalog.change_feed.map(|_| self.shared.feed.take());
        if let Some(turn) = &turn {
            let records = feed::record_rows(&plan, partition_key, turn.transaction, 0);
            changes.extend(records);
        }
        if let ([_], false) = (changes.as_slice(), entries.is_empty()) {
            let entity = changes.pop().expect("one row");
            self.apply_one_with_entries(entity, entries)?;
        } else {
            changes.extend(entries);
            self.apply(partition, partition_key, changes)?;
        }
        let ticket = self.shared.written(applying, turn);
        Ok(Ok(Committed {
            stored: plan.results,
            ticket,
        }))
    }

    /// Reads the rows `operations` (of one partition, held by the caller) act on and plans their
    /// commit stamped `now`: the plan and the entity rows it changes (with their before images),
    /// or the operation refused.
    pub(super) fn plan_rows(
        &self,
        partition_key: &str,
        operations: Vec<Operation>,
        now: Ticks,
        catalog: &IndexCatalog,
    ) -> Result<Result<(CommitPlan, Vec<RowChange>), Rejection>, StorageError> {
        let mut encoded_keys: Vec<Vec<u8>> = operations
            .iter()
            .map(|operation| key::encode(partition_key, operation.row_key()))
            .collect();
        let mut rows = self.current_rows(&encoded_keys)?;
        let current = codec::current_entities(
            &operations,
            |at, _| rows[at].as_deref(),
            catalog.reads_rows_whole(),
        )?;
        let plan = match plan_commit(
            partition_key,
            operations,
            current,
            now,
            catalog.plan_rules(),
        ) {
            Ok(plan) => plan,
            Err(refused) => return Ok(Err(refused.into())),
        };
        let changes = plan
            .changes
            .iter()
            .map(|change| RowChange {
                key: std::mem::take(&mut encoded_keys[change.operation]),
                after: plan.results[change.operation]
                    .as_ref()
                    .filter(|_| change.writes)
                    .map(|entity| codec::encode(entity.timestamp, &entity.properties)),
                before: rows[change.operation].take(),
            })
            .collect();
        Ok(Ok((plan, changes)))
    }

    pub(super) fn visit_range(
        &self,
        range: &KeyRange,
        reverse: bool,
        visitor: &mut Visitor<'_>,
    ) -> Result<Option<KeyPosition>, StorageError> {
        let mut remaining = range.clone();
        while let Some(next_key) = self.first_key(&remaining, reverse)? {
            let (partition_key, _) = key::split(&next_key)?;
            let partition_key = partition_key.to_owned();
            let part = remaining.within_partition(&partition_key);
            let _partition = self
                .shared
                .locks
                .lock_for_scan(self.id, partition_key.as_bytes());
            for item in self.iter(&part, reverse) {
                let (encoded_key, value) = item?;
                let (partition_key, row_key) = key::split(&encoded_key)?;
                let entity = EntityView::parse(partition_key, row_key, &value)?;
                match visitor(&entity)? {
                    Visit::Next => {}
                    Visit::Stop => {
                        return Ok(Some(KeyPosition::row(entity.partition_key, entity.row_key)))
                    }
                    Visit::SkipPartition => break,
                }
            }
            if reverse {
                remaining.end = Bound::Excluded(KeyPosition::row(partition_key, ""));
            } else {
                remaining.start = Bound::Included(KeyPosition::after_rows(partition_key));
            }
        }
        Ok(None)
    }

    fn first_key(&self, range: &KeyRange, reverse: bool) -> Result<Option<Vec<u8>>, StorageError> {
        match self.iter(range, reverse).next() {
            Some(item) => Ok(Some(item?.0.to_vec())),
            None => Ok(None),
        }
    }

    fn iter(
        &self,
        range: &KeyRange,
        reverse: bool,
    ) -> Box<dyn Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>> + '_> {
        if range.is_empty() {
            return Box::new(std::iter::empty());
        }
        let iter = self.tree.range(key::bounds(range));
        if reverse {
            Box::new(iter.rev())
        } else {
            Box::new(iter)
        }
    }
}

impl Table for SledTable {
    fn read_changes(
        &self,
        after: Option<FeedPosition>,
        limit: FeedBatch,
    ) -> Result<Vec<StoredChange>, StorageError> {
        let horizon = self.shared.feed.horizon(self.shared.durability.durable());
        self.changes_below(after, horizon, limit)
    }

    fn trim_changes(&self, before: Ticks, limit: usize) -> Result<usize, StorageError> {
        let horizon = self.shared.feed.horizon(self.shared.durability.durable());
        self.trim_below(before, horizon, limit)
    }

    fn feed_trimmed_to(&self) -> Result<Option<FeedPosition>, StorageError> {
        self.trimmed_to()
    }

    fn feed_end(&self) -> Result<FeedEnd, StorageError> {
        let next = self.shared.feed.next();
        let horizon = self.shared.feed.horizon(self.shared.durability.durable());
        Ok(FeedEnd::new(horizon, next))
    }

    /// The table's name as created.
    fn name(&self) -> &TableName {
        &self.name
    }

    /// A number that identifies this incarnation of the table (a re-created table gets a new one).
    fn id(&self) -> u64 {
        self.id
    }

    fn get(
        &self,
        key: &EntityKey,
        read: &mut dyn FnMut(EntityView<'_>) -> Result<(), StorageError>,
    ) -> Result<bool, StorageError> {
        Ok(self
            .get_waiting(key, read, true)?
            .expect("a read allowed to wait"))
    }

    fn try_get(
        &self,
        key: &EntityKey,
        read: &mut dyn FnMut(EntityView<'_>) -> Result<(), StorageError>,
    ) -> Result<Option<bool>, StorageError> {
        self.get_waiting(key, read, false)
    }

    /// Visits the entities of `ranges` (ascending and disjoint) in key order, descending if
    /// `reverse`, until the visitor says [`Visit::Stop`]; returns the key it stopped at (to resume
    /// from, inclusive), or `None` when every range is exhausted.
    ///
    /// The visitor gets each entity's encoded key and stored bytes ([`super::EntityView`] reads them),
    /// and runs under the shared side of that entity's partition lock: each partition's part of a
    /// scan sees the partition at one instant, never half a transaction, while other scans read it
    /// too. A commit of the partition waits for the visitor, so keep it short.
    fn visit(
        &self,
        scan: KeyScan<'_>,
        visitor: &mut Visitor<'_>,
    ) -> Result<Option<KeyPosition>, StorageError> {
        let Some(_gate) = self.gate() else {
            return Ok(None);
        };
        for range in scan.ranges_in_order() {
            if let Some(resume_at) = self.visit_range(range, scan.reverse, visitor)? {
                return Ok(Some(resume_at));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
impl SledTable {
    /// The partition path allowed to wait, for the store's own tests.
    pub(super) fn commit(
        &self,
        partition_key: &str,
        operations: Vec<Operation>,
    ) -> Result<CommitOutcome, StorageError> {
        match self.commit_waiting(partition_key, operations, true)? {
            Ok(outcome) => Ok(outcome),
            Err(_) => unreachable!("a commit allowed to wait runs"),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::model::ChangeKind;
    use crate::model::{
        EntityKey, IfMatch, NewEntity, Properties, UpsertMode, Value, MAX_VALUE_BYTES,
    };
    use crate::storage::{
        read_entity, Indexed, KeyScan, SettingsChange, SledStore, Store, StoreOptions,
    };

    /// A table whose partition `p` holds rows `r000`, `r002`, … `r198`.
    pub(in crate::storage::sled_store) fn table_with_even_rows(
        dir: &std::path::Path,
    ) -> (SledStore, Arc<SledTable>) {
        let store = SledStore::open(dir, StoreOptions::default()).unwrap();
        let name = TableName::parse("Rows").unwrap();
        store
            .create_table(&name, &[], SettingsChange::default())
            .unwrap()
            .unwrap();
        let table = store.sled_table(&name).unwrap();
        let inserts = (0..200)
            .step_by(2)
            .map(|row| insert(&format!("r{row:03}"), row))
            .collect();
        table.commit("p", inserts).unwrap().unwrap();
        (store, table)
    }

    /// The store in `dir`, opened again once the dropped one's background threads have released
    /// the directory's lock (they do as they exit).
    pub(in crate::storage::sled_store) fn reopen(dir: &std::path::Path) -> SledStore {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match SledStore::open(dir, StoreOptions::default()) {
                Ok(store) => return store,
                Err(error) if std::time::Instant::now() < deadline => {
                    assert!(error.to_string().contains("lock"), "{error}");
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(error) => panic!("{error}"),
            }
        }
    }

    /// Row `row` of partition `p` with `N` = `n`.
    pub(in crate::storage::sled_store) fn row(row: &str, n: i32) -> NewEntity {
        let key = EntityKey::new("p".into(), row.into()).unwrap();
        let properties = Properties::from([("N".to_owned(), Value::Int32(n))]);
        NewEntity::new(key, properties).unwrap()
    }

    pub(in crate::storage::sled_store) fn insert(row_key: &str, n: i32) -> Operation {
        Operation::Insert(row(row_key, n))
    }

    /// How many entities a whole-table scan of `table` visits.
    fn count_all(table: &SledTable) -> usize {
        let mut seen = 0;
        table
            .visit(KeyScan::forward(&[KeyRange::all()]), &mut |_| {
                seen += 1;
                Ok(Visit::Next)
            })
            .unwrap();
        seen
    }

    #[test]
    fn scans_of_one_partition_run_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let (_store, table) = table_with_even_rows(dir.path());
        let mut seen = 0;
        table
            .visit(KeyScan::forward(&[KeyRange::all()]), &mut |_| {
                if seen == 0 {
                    // A second scan of the partition while this one holds it runs to its end.
                    let (other, done) = std::sync::mpsc::channel();
                    let table = table.clone();
                    std::thread::spawn(move || other.send(count_all(&table)));
                    let other_saw = done.recv_timeout(std::time::Duration::from_secs(10));
                    assert_eq!(other_saw, Ok(100), "the second scan was held back");
                }
                seen += 1;
                Ok(Visit::Next)
            })
            .unwrap();
        assert_eq!(seen, 100);
    }

    #[test]
    fn a_commit_not_allowed_to_wait_gives_its_operations_back_while_the_partition_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let (_store, table) = table_with_even_rows(dir.path());
        let held = table.shared.locks.lock_for_scan(table.id, b"p");
        let attempt = table
            .commit_waiting("p", vec![insert("r001", 1)], false)
            .unwrap();
        assert!(matches!(&attempt, Err(operations) if operations.len() == 1));
        // Another partition is free.
        let other = table
            .commit_waiting("q", vec![insert("r001", 1)], false)
            .unwrap();
        assert!(matches!(other, Ok(Ok(_))));
        drop(held);
        let after = table
            .commit_waiting("p", vec![insert("r001", 1)], false)
            .unwrap();
        assert!(matches!(after, Ok(Ok(_))));
        assert_eq!(count_all(&table), 102);
    }

    #[test]
    fn a_lone_insert_stores_only_where_no_row_is() {
        let dir = tempfile::tempdir().unwrap();
        let (_store, table) = table_with_even_rows(dir.path());
        let existing = key::encode("p", "r010");
        let before = table.tree.get(&existing).unwrap();
        let refused = table.commit("p", vec![insert("r010", -1)]).unwrap();
        match refused {
            Err(Rejection {
                index: 0,
                reason: RejectReason::Refused { row_key, refusal },
            }) => assert_eq!(
                (row_key.as_str(), refusal),
                ("r010", Refusal::AlreadyExists)
            ),
            other => panic!("expected an AlreadyExists refusal, got {other:?}"),
        }
        assert_eq!(
            table.tree.get(&existing).unwrap(),
            before,
            "the row is unchanged"
        );

        let stored = table
            .commit("p", vec![insert("r011", 11)])
            .unwrap()
            .unwrap();
        let entity = stored.stored[0].as_ref().expect("the stored entity");
        assert_eq!(entity.key.row_key, "r011");
        let read = read_entity(table.as_ref(), &entity.key, |view| Ok(view.timestamp))
            .unwrap()
            .expect("the row is stored");
        assert_eq!(read, entity.timestamp);
    }

    fn point_reads(table: &SledTable, keys: &[Vec<u8>]) -> Vec<Option<sled::IVec>> {
        keys.iter().map(|k| table.tree.get(k).unwrap()).collect()
    }

    fn keys(partition: &str, rows: &[u32]) -> Vec<Vec<u8>> {
        rows.iter()
            .map(|row| key::encode(partition, &format!("r{row:03}")))
            .collect()
    }

    #[test]
    fn current_rows_read_in_one_pass_agree_with_point_reads() {
        let dir = tempfile::tempdir().unwrap();
        let (_store, table) = table_with_even_rows(dir.path());
        let cases: [&[u32]; 6] = [
            // A dense span, out of order: half stored, one pass reads it all.
            &[17, 10, 11, 12, 13, 14, 15, 16, 30, 29, 20],
            // Spread over the partition: the pass gives up and reads the rest one by one.
            &[199, 1, 50, 100, 150, 198, 3],
            // The span's first and last keys stored, nothing between.
            &[40, 42, 44, 46],
            // Nothing stored.
            &[201, 203, 205, 207, 209],
            // Too few keys for a pass.
            &[0, 1, 2],
            // Beyond the last row.
            &[198, 199, 250, 251, 252],
        ];
        for rows in cases {
            let keys = keys("p", rows);
            assert_eq!(
                table.current_rows(&keys).unwrap(),
                point_reads(&table, &keys),
                "rows {rows:?}"
            );
        }
        let elsewhere = keys("q", &[0, 2, 4, 6, 8]);
        assert!(table
            .current_rows(&elsewhere)
            .unwrap()
            .iter()
            .all(Option::is_none));
    }

    #[test]
    fn a_commit_replacing_rows_too_large_to_record_for_undo_still_applies_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (store, table) = table_with_even_rows(dir.path());
        // Five rows of 15 maximal binaries each: their before images exceed an undo record.
        let large = |row_key: &str| {
            let key = EntityKey::new("p".into(), row_key.into()).unwrap();
            let properties = (0..15)
                .map(|i| (format!("B{i}"), Value::Binary(vec![7; MAX_VALUE_BYTES])))
                .collect();
            NewEntity::new(key, properties).unwrap()
        };
        let rows = ["r000", "r002", "r004", "r006", "r008"];
        assert!(rows.len() * 15 * MAX_VALUE_BYTES > MAX_UNDO_RECORD_BYTES);
        for row_key in rows {
            let replace = Operation::Upsert(large(row_key), UpsertMode::Replace);
            table.commit("p", vec![replace]).unwrap().unwrap();
        }
        let shrink = rows
            .iter()
            .map(|row_key| Operation::Update(row(row_key, -1), IfMatch::Any))
            .collect();
        table.commit("p", shrink).unwrap().unwrap();
        for row_key in rows {
            let stored = table.tree.get(key::encode("p", row_key)).unwrap().unwrap();
            assert!(stored.len() < 64, "{row_key} was not replaced");
        }
        assert!(store.shared.undo.is_empty());
    }

    #[test]
    fn opening_the_store_rolls_back_a_commit_a_crash_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let (r000, r001) = (key::encode("p", "r000"), key::encode("p", "r001"));
        let before = {
            let (store, table) = table_with_even_rows(dir.path());
            let before = table.tree.get(&r000).unwrap();
            let new_row = || Some(codec::encode(Ticks(1), &Properties::new()));
            let changes = [
                RowChange {
                    key: r000.clone(),
                    after: new_row(),
                    before: before.clone(),
                },
                RowChange {
                    key: r001.clone(),
                    after: new_row(),
                    before: None,
                },
            ];
            // The record and both rows are written; the record's removal is not.
            store.shared.undo.record_only(table.id(), b"p", &changes);
            for change in &changes {
                table
                    .tree
                    .insert(&change.key, change.after.clone().unwrap())
                    .unwrap();
            }
            store.flush().unwrap();
            before
        };
        let store = reopen(dir.path());
        let table = store
            .sled_table(&TableName::parse("Rows").unwrap())
            .unwrap();
        assert_eq!(table.tree.get(&r000).unwrap(), before, "r000 is back");
        assert_eq!(table.tree.get(&r001).unwrap(), None, "r001 is gone again");
        assert!(store.shared.undo.is_empty());
    }

    #[test]
    fn opening_the_store_removes_the_record_of_an_insert_a_crash_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (store, table) = table_with_even_rows(dir.path());
            let feed = crate::model::ChangeFeed::new(0, false).unwrap();
            let change = SettingsChange {
                change_feed: Some(Some(feed)),
                ..SettingsChange::default()
            };
            assert!(table.set_settings(change).unwrap());
            table.commit("p", vec![insert("r001", 1)]).unwrap().unwrap();
            table.commit("p", vec![insert("r003", 3)]).unwrap().unwrap();
            let refused = table.commit("p", vec![insert("r003", 4)]).unwrap();
            assert!(refused.is_err(), "r003 exists: no record");
            let delete = Operation::Delete {
                key: EntityKey::new("p".into(), "r003".into()).unwrap(),
                if_match: IfMatch::Any,
            };
            table.commit("p", vec![delete]).unwrap().unwrap();
            // A crash after a lone insert's record, before its row.
            let plan = plan_commit(
                "p",
                vec![insert("r005", 5)],
                vec![None],
                Ticks::next_commit(),
                table.index_catalog().plan_rules(),
            )
            .unwrap();
            let transaction = store.shared.feed.take().transaction;
            for record in feed::record_rows(&plan, "p", transaction, 0) {
                record.write(&table.tree).unwrap();
            }
            store.flush().unwrap();
        }
        let store = reopen(dir.path());
        let table = store
            .sled_table(&TableName::parse("Rows").unwrap())
            .unwrap();
        let changes: Vec<(String, ChangeKind)> = table
            .read_changes(None, FeedBatch::records(100))
            .unwrap()
            .into_iter()
            .map(|change| (change.key.row_key, change.kind))
            .collect();
        let expected = [
            ("r001", ChangeKind::Insert),
            ("r003", ChangeKind::Insert),
            ("r003", ChangeKind::Delete),
        ]
        .map(|(row, kind)| (row.to_owned(), kind));
        assert_eq!(changes, expected, "the record without its row is gone");
    }
}
