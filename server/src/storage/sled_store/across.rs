//! Commits and reads across partitions and tables in the sled store.
//!
//! A commit across partitions holds the commit side of every partition's lock, taken in one
//! order (table id, then partition key), from its first read to its last write. Two such commits
//! over overlapping partitions so never wait for each other in a circle, a single-partition
//! commit (one lock) never closes one, and partitions the commit does not touch never wait for
//! it. Each partition's part is planned as a single-partition commit plans it
//! ([`SledTable::plan_rows`]); every unique value the parts add is claimed at once; and every row
//! of every table is written under one undo record, kept at the first partition, so that a crash
//! leaves all of the commit or none of it ([`super::undo`]). While the rows are written, point
//! reads of every partition involved wait, so a reader who saw one row of the commit never finds
//! another unwritten.
//!
//! A read across partitions holds the scan side of each partition's lock, taken in the same
//! order, while it reads: a commit to any of them waits or has finished, so the read sees every
//! commit whole or not at all.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::feed;
use super::indexes::released_entries;
use super::key;
use super::locks::PartitionGuard;
use super::table::{Gate, SledTable};
use super::undo::{RowChange, TreeRows};
use super::{codec, EntityView, RejectReason, Rejection, SledStore, StorageError};
use crate::model::{CommitPlan, EntityKey, StoredEntity, Ticks};
use crate::storage::{
    at_position, first_by_position, seal_record, CommitOutcome, Committed, FoundVisitor,
    IndexCatalog, PartitionBatch, TableKey,
};

/// One partition's part of a commit: its table, and the batch.
struct Part {
    table: Arc<SledTable>,
    batch: PartitionBatch,
}

/// What a commit across partitions holds while it runs: every table's gate and every partition's
/// commit lock.
struct Held<'a> {
    _gates: Vec<Gate<'a>>,
    partitions: Vec<PartitionGuard<'a>>,
}

/// Whether a commit across partitions got hold of everything it touches.
enum Hold<'a> {
    Held(Held<'a>),
    /// A table is deleted: the refusal names this position.
    Gone(usize),
    /// Not allowed to wait, and something is busy.
    WouldWait,
}

/// A part planned under its lock.
struct PlannedPart {
    catalog: Arc<IndexCatalog>,
    plan: CommitPlan,
    rows: Vec<RowChange>,
}

/// Plans every part stamped `now` (its partition held); or the refusal of the earliest operation
/// (by position) that cannot apply.
fn plan_parts(
    parts: &mut [Part],
    now: Ticks,
) -> Result<Result<Vec<PlannedPart>, Rejection>, StorageError> {
    let mut planned = Vec::with_capacity(parts.len());
    let mut refused: Option<Rejection> = None;
    for part in parts {
        let catalog = part.table.index_catalog();
        let operations = std::mem::take(&mut part.batch.operations);
        let partition_key = &part.batch.partition_key;
        match part
            .table
            .plan_rows(partition_key, operations, now, &catalog)?
        {
            Ok((plan, rows)) => planned.push(PlannedPart {
                catalog,
                plan,
                rows,
            }),
            Err(rejection) => {
                let rejection = at_position(&part.batch.positions, rejection);
                refused = Some(first_by_position(refused, rejection));
            }
        }
    }
    Ok(match refused {
        Some(rejection) => Err(rejection),
        None => Ok(planned),
    })
}

/// Seals the commit's outcome into its idempotency record, if it has one
/// ([`crate::storage::seal_record`]), and encodes the record's row again.
fn seal_record_row(parts: &[Part], planned: &mut [PlannedPart], operations: usize) {
    if !parts.iter().any(|part| part.batch.seals_outcome) {
        return;
    }
    let mut pairs: Vec<_> = (parts.iter().map(|part| &part.batch))
        .zip(planned.iter_mut().map(|part| &mut part.plan))
        .collect();
    let Some(at) = seal_record(&mut pairs, operations) else {
        return;
    };
    let part = &mut planned[at];
    if let (Some(record), Some(row)) = (&part.plan.results[0], part.rows.first_mut()) {
        row.after = Some(codec::encode(record.timestamp, &record.properties));
    }
}

/// The refusal of a commit naming a table that does not exist, at that table's first position.
fn table_gone(position: usize) -> Rejection {
    Rejection {
        index: position,
        reason: RejectReason::TableGone,
    }
}

impl SledStore {
    /// A commit across partitions or tables ([`crate::storage::Store::commit`]).
    /// Unless `wait`, gives the batches back rather than wait for a table or a partition.
    pub(super) fn commit_batches_across(
        &self,
        batches: Vec<PartitionBatch>,
        operations: usize,
        wait: bool,
    ) -> Result<Result<CommitOutcome, Vec<PartitionBatch>>, StorageError> {
        let mut parts = match self.parts_in_lock_order(batches) {
            Ok(parts) => parts,
            Err(rejection) => return Ok(Ok(Err(rejection))),
        };
        let tables: Vec<Arc<SledTable>> = distinct_tables(parts.iter().map(|p| &p.table));
        let guards = match self.hold_all(&tables, &parts, wait)? {
            Hold::Held(held) => held,
            Hold::Gone(position) => return Ok(Ok(Err(table_gone(position)))),
            Hold::WouldWait => return Ok(Err(parts.into_iter().map(|p| p.batch).collect())),
        };
        let now = Ticks::next_commit();
        let mut planned = match plan_parts(&mut parts, now)? {
            Ok(planned) => planned,
            Err(rejection) => return Ok(Ok(Err(rejection))),
        };
        seal_record_row(&parts, &mut planned, operations);
        let mut stored = vec![None; operations];
        if planned.iter().all(|part| part.rows.is_empty()) {
            place_results(&parts, planned, &mut stored);
            return Ok(Ok(Ok(Committed {
                stored,
                ticket: None,
            })));
        }
        // Unique values stay claimed (their stripes held) until the entries are written.
        let _claims = self.shared.claims.hold(
            planned
                .iter()
                .flat_map(|part| part.plan.unique_values_added()),
        );
        if let Some(rejection) = unique_value_added_twice(&parts, &planned) {
            return Ok(Ok(Err(rejection)));
        }
        if let Err(rejection) = add_entry_rows(&parts, &mut planned)? {
            return Ok(Ok(Err(rejection)));
        }
        let turn = planned
            .iter()
            .any(|part| part.catalog.change_feed.is_some())
            .then(|| self.shared.feed.take());
        if let Some(turn) = &turn {
            add_record_rows(&parts, &mut planned, turn.transaction);
        }
        let rows_by_table = rows_by_table(&parts, &mut planned);
        let groups: Vec<TreeRows<'_>> = tables
            .iter()
            .zip(&rows_by_table)
            .map(|(table, changes)| TreeRows {
                tree: &table.tree,
                table_id: table.id,
                changes,
            })
            .collect();
        let writing = self.shared.snapshots.writing();
        let partitions = parts.iter().map(|part| part.batch.partition_key.as_bytes());
        let applying = self.shared.applying(partitions);
        for group in &groups {
            let keys = group.changes.iter().map(|change| change.key.as_slice());
            writing.preserve(group.table_id, group.tree, keys)?;
        }
        guards
            .partitions
            .iter()
            .for_each(PartitionGuard::writing_rows);
        let first = &parts[0];
        self.shared.undo.write_atomically_across(
            first.table.id,
            first.batch.partition_key.as_bytes(),
            &groups,
        )?;
        let ticket = self.shared.written(applying, turn);
        place_results(&parts, planned, &mut stored);
        Ok(Ok(Ok(Committed { stored, ticket })))
    }

    /// Holds every table's gate (`tables` in id order) and every part's partition (`parts` in
    /// lock order); unless `wait`, nothing if any is busy now.
    fn hold_all<'a>(
        &'a self,
        tables: &'a [Arc<SledTable>],
        parts: &[Part],
        wait: bool,
    ) -> Result<Hold<'a>, StorageError> {
        let mut gates = Vec::with_capacity(tables.len());
        for table in tables {
            match table.gate_when(wait) {
                Ok(Some(gate)) => gates.push(gate),
                Ok(None) => {
                    let part = parts.iter().find(|part| part.table.id == table.id);
                    return Ok(Hold::Gone(part.map_or(0, |part| part.batch.positions[0])));
                }
                Err(()) => return Ok(Hold::WouldWait),
            }
        }
        self.shared.space.check()?;
        let mut partitions = Vec::with_capacity(parts.len());
        for part in parts {
            let (table_id, partition_key) = (part.table.id, part.batch.partition_key.as_bytes());
            if wait {
                partitions.push(self.shared.locks.lock(table_id, partition_key));
            } else {
                match self.shared.locks.try_lock(table_id, partition_key) {
                    Some(guard) => partitions.push(guard),
                    None => return Ok(Hold::WouldWait),
                }
            }
        }
        Ok(Hold::Held(Held {
            _gates: gates,
            partitions,
        }))
    }

    /// Each batch with its table, in the order their partitions are locked (table id, then
    /// partition key); or the refusal of a table that does not exist.
    fn parts_in_lock_order(&self, batches: Vec<PartitionBatch>) -> Result<Vec<Part>, Rejection> {
        let mut parts = Vec::with_capacity(batches.len());
        for batch in batches {
            match self.sled_table(&batch.table) {
                Some(table) => parts.push(Part { table, batch }),
                None => return Err(table_gone(batch.positions[0])),
            }
        }
        parts.sort_by(|a, b| {
            (a.table.id, &a.batch.partition_key).cmp(&(b.table.id, &b.batch.partition_key))
        });
        Ok(parts)
    }

    /// [`crate::storage::Store::get_many`]: the keys of tables being deleted are skipped. Unless
    /// `wait`, reads nothing (`false`) rather than wait for a table or a partition.
    pub(super) fn read_across(
        &self,
        keys: &[TableKey],
        found: &mut FoundVisitor<'_>,
        wait: bool,
    ) -> Result<bool, StorageError> {
        let resolved: Vec<Option<Arc<SledTable>>> =
            keys.iter().map(|key| self.sled_table(&key.table)).collect();
        let tables = distinct_tables(resolved.iter().flatten());
        let Ok(gates) = tables
            .iter()
            .map(|table| table.gate_when(wait))
            .collect::<Result<Vec<Option<Gate<'_>>>, ()>>()
        else {
            return Ok(false);
        };
        let is_live = |table: &SledTable| {
            let at = tables.binary_search_by_key(&table.id, |t| t.id);
            at.is_ok_and(|at| gates[at].is_some())
        };
        let live = |table: &Option<Arc<SledTable>>| table.clone().filter(|t| is_live(t));
        let mut partitions: Vec<(u64, &str)> = keys
            .iter()
            .zip(&resolved)
            .filter_map(|(key, table)| Some((live(table)?.id, key.key.partition_key.as_str())))
            .collect();
        partitions.sort_unstable();
        partitions.dedup();
        let locks = &self.shared.locks;
        let held: Option<Vec<PartitionGuard<'_>>> = partitions
            .iter()
            .map(|(table_id, partition_key)| match wait {
                true => Some(locks.lock_for_scan(*table_id, partition_key.as_bytes())),
                false => locks.try_lock_for_scan(*table_id, partition_key.as_bytes()),
            })
            .collect();
        if held.is_none() {
            return Ok(false);
        }
        for (position, (key, table)) in keys.iter().zip(&resolved).enumerate() {
            let Some(table) = live(table) else { continue };
            let EntityKey {
                partition_key,
                row_key,
            } = &key.key;
            if let Some(bytes) = table.tree.get(key::encode(partition_key, row_key))? {
                found(position, EntityView::parse(partition_key, row_key, &bytes)?)?;
            }
        }
        Ok(true)
    }
}

/// The distinct tables of `tables`, by id.
fn distinct_tables<'a>(tables: impl Iterator<Item = &'a Arc<SledTable>>) -> Vec<Arc<SledTable>> {
    let mut distinct: Vec<Arc<SledTable>> = tables.cloned().collect();
    distinct.sort_by_key(|table| table.id);
    distinct.dedup_by_key(|table| table.id);
    distinct
}

/// The refusal of an operation adding a unique value another partition's part of the commit adds
/// too (each part's plan refuses such a clash within itself).
fn unique_value_added_twice(parts: &[Part], planned: &[PlannedPart]) -> Option<Rejection> {
    let mut adders: HashMap<(u64, u64, &[u8]), EntityKey> = HashMap::new();
    for (part, planned) in parts.iter().zip(planned) {
        for added in planned.plan.added_entries.iter() {
            let entry = &added.entry;
            if !entry.unique {
                continue;
            }
            let value = (part.table.id, entry.index_id, entry.sort_key.as_slice());
            let adder = EntityKey {
                partition_key: part.batch.partition_key.clone(),
                row_key: added.row_key.clone(),
            };
            if let Some(holder) = adders.insert(value, adder) {
                let rejection: Rejection = added.taken_by(holder).into();
                return Some(at_position(&part.batch.positions, rejection));
            }
        }
    }
    None
}

/// Adds each part's index entry rows to its rows, or the operation refused because a unique
/// index holds its value for an entity outside the commit. An entry one part gives up and another
/// takes is free for the taker.
fn add_entry_rows(
    parts: &[Part],
    planned: &mut [PlannedPart],
) -> Result<Result<(), Rejection>, StorageError> {
    let mut released: HashMap<u64, Vec<Vec<u8>>> = HashMap::new();
    for (part, planned) in parts.iter().zip(planned.iter()) {
        released
            .entry(part.table.id)
            .or_default()
            .extend(released_entries(&planned.plan));
    }
    for (part, planned) in parts.iter().zip(planned.iter_mut()) {
        let (table, partition_key) = (&part.table, &part.batch.partition_key);
        let elsewhere = &released[&table.id];
        match table.entry_changes(
            &planned.catalog,
            partition_key,
            &planned.plan,
            true,
            elsewhere,
        )? {
            Ok(entries) => planned.rows.extend(entries),
            Err(rejection) => return Ok(Err(at_position(&part.batch.positions, rejection))),
        }
    }
    Ok(Ok(()))
}

/// Adds to each part of a table with a change feed the rows of its change records, numbered in
/// `transaction` in the order of the parts.
fn add_record_rows(parts: &[Part], planned: &mut [PlannedPart], transaction: u64) {
    let mut next = 0u32;
    for (part, planned) in parts.iter().zip(planned.iter_mut()) {
        if planned.catalog.change_feed.is_none() {
            continue;
        }
        let partition_key = &part.batch.partition_key;
        let records = feed::record_rows(&planned.plan, partition_key, transaction, next);
        next += records.len() as u32;
        planned.rows.extend(records);
    }
}

/// Every part's rows, one list per distinct table (in the order of [`distinct_tables`]). An index
/// entry one part removes and another writes is only written.
fn rows_by_table(parts: &[Part], planned: &mut [PlannedPart]) -> Vec<Vec<RowChange>> {
    let mut tables: Vec<(u64, Vec<RowChange>)> = Vec::new();
    for (part, planned) in parts.iter().zip(planned.iter_mut()) {
        let rows = std::mem::take(&mut planned.rows);
        match tables.last_mut() {
            Some((id, table_rows)) if *id == part.table.id => table_rows.extend(rows),
            _ => tables.push((part.table.id, rows)),
        }
    }
    tables
        .into_iter()
        .map(|(_, mut rows)| {
            let written: HashSet<Vec<u8>> = rows
                .iter()
                .filter(|row| row.after.is_some())
                .map(|row| row.key.clone())
                .collect();
            rows.retain(|row| row.after.is_some() || !written.contains(&row.key));
            rows
        })
        .collect()
}

/// Puts each part's results at their positions in the commit.
fn place_results(parts: &[Part], planned: Vec<PlannedPart>, stored: &mut [Option<StoredEntity>]) {
    for (part, planned) in parts.iter().zip(planned) {
        for (result, &position) in planned.plan.results.into_iter().zip(&part.batch.positions) {
            stored[position] = result;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EntityKey, NewEntity, Operation, Properties, TableName, Value};
    use crate::storage::{SettingsChange, Store};

    use crate::storage::sled_store::table::tests::reopen as open;

    fn name(table: &str) -> TableName {
        TableName::parse(table).unwrap()
    }

    fn insert(partition_key: &str, n: i64) -> Operation {
        let key = EntityKey::new(partition_key.into(), "r".into()).unwrap();
        let properties = Properties::from([("N".to_owned(), Value::Int64(n))]);
        Operation::Insert(NewEntity::new(key, properties).unwrap())
    }

    fn batch(table: &str, partition_key: &str, position: usize, n: i64) -> PartitionBatch {
        PartitionBatch {
            table: name(table),
            partition_key: partition_key.into(),
            operations: vec![insert(partition_key, n)],
            positions: vec![position],
            seals_outcome: false,
        }
    }

    #[test]
    fn opening_the_store_rolls_back_a_commit_across_tables_a_crash_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (key::encode("p", "r"), key::encode("q", "r"));
        {
            let store = open(dir.path());
            for table in ["One", "Two"] {
                store
                    .create_table(&name(table), &[], SettingsChange::default())
                    .unwrap()
                    .unwrap();
            }
            let (one, two) = (
                store.sled_table(&name("One")).unwrap(),
                store.sled_table(&name("Two")).unwrap(),
            );
            one.tree.insert(&a, &b"old"[..]).unwrap();
            let (first, second) = (
                [RowChange {
                    key: a.clone(),
                    after: Some(b"new".to_vec()),
                    before: Some(sled::IVec::from(&b"old"[..])),
                }],
                [RowChange {
                    key: b.clone(),
                    after: Some(b"new".to_vec()),
                    before: None,
                }],
            );
            let groups = [
                TreeRows {
                    tree: &one.tree,
                    table_id: one.id,
                    changes: &first,
                },
                TreeRows {
                    tree: &two.tree,
                    table_id: two.id,
                    changes: &second,
                },
            ];
            // The record and every row are written; the record's removal is not.
            store.shared.undo.record_only_across(one.id, b"p", &groups);
            first[0].write(&one.tree).unwrap();
            second[0].write(&two.tree).unwrap();
            store.flush().unwrap();
        }
        let store = open(dir.path());
        let one = store.sled_table(&name("One")).unwrap();
        let two = store.sled_table(&name("Two")).unwrap();
        assert_eq!(one.tree.get(&a).unwrap().as_deref(), Some(&b"old"[..]));
        assert_eq!(two.tree.get(&b).unwrap(), None);
        assert!(store.shared.undo.is_empty());
    }

    #[test]
    fn not_allowed_to_wait_a_commit_and_a_read_across_give_back_while_a_partition_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        for table in ["One", "Two"] {
            store
                .create_table(&name(table), &[], SettingsChange::default())
                .unwrap()
                .unwrap();
        }
        let two = store.sled_table(&name("Two")).unwrap();
        let held = store.shared.locks.lock(two.id, b"q");
        let batches = vec![batch("One", "p", 0, 1), batch("Two", "q", 1, 2)];
        let given_back = store
            .commit_batches_across(batches, 2, false)
            .unwrap()
            .unwrap_err();
        assert_eq!(given_back.len(), 2);
        assert_eq!(
            given_back[1].operations.len(),
            1,
            "the operations come back whole"
        );
        let keys = [TableKey {
            table: name("Two"),
            key: EntityKey::new("q".into(), "r".into()).unwrap(),
        }];
        assert!(!store.try_get_many(&keys, &mut |_, _| Ok(())).unwrap());
        drop(held);
        let committed = store
            .commit_batches_across(given_back, 2, false)
            .unwrap()
            .unwrap();
        assert!(committed.unwrap().ticket.is_some());
        let mut found = 0;
        assert!(store
            .try_get_many(&keys, &mut |position, _| {
                found += 1;
                assert_eq!(position, 0);
                Ok(())
            })
            .unwrap());
        assert_eq!(found, 1);
    }

    #[test]
    fn a_commit_across_a_deleted_table_is_refused_at_its_first_operation() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        store
            .create_table(&name("One"), &[], SettingsChange::default())
            .unwrap()
            .unwrap();
        let batches = vec![batch("One", "p", 0, 1), batch("Gone", "q", 1, 2)];
        let refused = store
            .commit_batches_across(batches, 2, true)
            .unwrap()
            .unwrap()
            .unwrap_err();
        assert_eq!(
            (refused.index, refused.reason),
            (1, RejectReason::TableGone)
        );
        let one = store.sled_table(&name("One")).unwrap();
        assert!(one.tree.get(key::encode("p", "r")).unwrap().is_none());
    }

    #[tokio::test]
    async fn the_one_commit_waits_on_the_blocking_pool_for_a_held_partition_then_applies() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(open(dir.path()));
        for table in ["One", "Two"] {
            store
                .create_table(&name(table), &[], SettingsChange::default())
                .unwrap()
                .unwrap();
        }
        let two = store.sled_table(&name("Two")).unwrap();
        let held = store.shared.locks.lock(two.id, b"q");
        let commit = crate::storage::Commit {
            batches: vec![batch("One", "p", 0, 1), batch("Two", "q", 1, 2)],
            operations: 2,
        };
        let committing = tokio::spawn(store.clone().commit(commit));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(
            !committing.is_finished(),
            "the commit waits for the partition"
        );
        drop(held);
        let committed = committing.await.unwrap().unwrap().unwrap();
        assert_eq!(committed.stored.len(), 2);
        assert!(two.tree.get(key::encode("q", "r")).unwrap().is_some());
    }
}
