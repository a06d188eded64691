//! The PostgreSQL store's one apply ([`crate::storage::Store::commit`]): which strategy a commit
//! takes, and where it runs.
//!
//! Awaited first, holding no thread, through the tables the store keeps by name whose catalog as
//! last read has no index: a commit on one partition of inserts only in one round trip
//! (`one_trip.rs`; lone inserts waiting together in one, `insert_batches.rs`), a lone insert with
//! its idempotency record likewise (`keyed_inserts.rs`), any other commit (or inserts that found
//! a row there) in two (`pipelined.rs`, on one partition or across several). Everything else (a table not kept yet or with indexes) runs in one database
//! transaction on the blocking pool (`PostgresTable::commit_operations`, `across.rs`), which
//! keeps the table for the next commit. Every strategy keeps the same rules: the plan of
//! `model::plan`, the partitions' advisory locks in one order, the table's shared lock (what the
//! feed's horizon waits for, `changes.rs`), and the change records of `records.rs`.

use std::sync::{Arc, PoisonError};

use tracing::Instrument;

use super::insert_batches::Sent;
use super::keyed_inserts::KeyedInsert;
use super::one_trip::{OneTrip, OneTripInsert, INSERT_ROWS};
use super::rows::planned_rows;
use super::table::PostgresTable;
use super::PostgresStore;
use crate::model::{Operation, TableName};
use crate::storage::{
    on_blocking_pool, Commit, CommitOutcome, Committed, PartitionBatch, RejectReason, Rejection,
    StorageError,
};

impl PostgresStore {
    /// Applies `commit`: awaited if a strategy there takes it, else on the blocking pool.
    pub(super) async fn apply(
        self: Arc<Self>,
        commit: Commit,
    ) -> Result<CommitOutcome, StorageError> {
        let awaited = async {
            match commit.single_partition() {
                Some(batch) => {
                    let (name, partition_key) = (&batch.table, &batch.partition_key);
                    self.commit_one_awaited(name, partition_key, &batch.operations)
                        .await
                }
                None => match self.insert_keyed_together(&commit).await? {
                    Some(outcome) => Ok(Some(outcome)),
                    None => {
                        self.commit_across_pipelined(&commit.batches, commit.operations)
                            .await
                    }
                },
            }
        };
        let awaited = awaited
            .instrument(crate::traces::store_span("awaited"))
            .await?;
        if let Some(outcome) = awaited {
            return Ok(outcome);
        }
        on_blocking_pool(move || match commit.single_partition() {
            Some(batch) => {
                let committed =
                    self.commit_named(&batch.table, &batch.partition_key, &batch.operations)?;
                Ok(committed.unwrap_or(Err(Rejection {
                    index: batch.positions[0],
                    reason: RejectReason::TableGone,
                })))
            }
            None => self.commit_batches_across(commit.batches, commit.operations),
        })
        .await
    }

    /// A commit on one partition, awaited, through the table kept for `name` if there is one
    /// and its catalog as last read has no index: `None` (nothing written) if it must go the
    /// blocking way.
    async fn commit_one_awaited(
        &self,
        name: &TableName,
        partition_key: &str,
        operations: &[Operation],
    ) -> Result<Option<CommitOutcome>, StorageError> {
        let Some(table) = self.known_table(name) else {
            return Ok(None);
        };
        if let Some(insert) = table.plan_one_trip(partition_key, operations) {
            let outcome = match insert.is_single() {
                true => table.insert_together(&self.awaited, insert).await?,
                false => {
                    let rows = planned_rows(insert.plan());
                    let sent = self
                        .awaited
                        .query(INSERT_ROWS, &insert.params(&table.id, &rows))
                        .await
                        .map(|rows| rows.first().map_or(0, |row| row.get::<_, i64>(0)));
                    table.one_trip_outcome(insert, sent)?
                }
            };
            match outcome {
                OneTrip::Done(committed) => return Ok(Some(Ok(committed))),
                OneTrip::NotTaken => return Ok(None),
                // Read the rows, to refuse the right operation.
                OneTrip::RowExists => {}
            }
        }
        let mut connection = self.awaited.borrow().await?;
        table
            .commit_pipelined(&mut connection, partition_key, operations)
            .await
    }

    /// A commit on one partition in one database transaction, through the table kept for `name`
    /// if there is one; if the commit finds it gone, through the live table of that name looked
    /// up afresh (kept from then on): `None` if there is none.
    fn commit_named(
        &self,
        name: &TableName,
        partition_key: &str,
        operations: &[Operation],
    ) -> Result<Option<CommitOutcome>, StorageError> {
        let known = || self.known.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = known().get(name.folded()).cloned();
        if let Some(table) = kept {
            match table.commit_operations(partition_key, operations)? {
                Err(Rejection {
                    reason: RejectReason::TableGone,
                    ..
                }) => {
                    known().remove(name.folded());
                }
                outcome => return Ok(Some(outcome)),
            }
        }
        let Some(table) = self.postgres_table(name)? else {
            return Ok(None);
        };
        self.keep_known(name, &table);
        table.commit_operations(partition_key, operations).map(Some)
    }

    /// Commits `commit` with the keyed inserts of its table, awaited, if it is one (a single
    /// entity's insert and its idempotency record, both into tables the store keeps whose
    /// catalogs as last read are plain): `None` (nothing written) if it must go another way.
    pub(super) async fn insert_keyed_together(
        &self,
        commit: &Commit,
    ) -> Result<Option<CommitOutcome>, StorageError> {
        let [first, second] = commit.batches.as_slice() else {
            return Ok(None);
        };
        let (record_batch, entity_batch) = match (first.seals_outcome, second.seals_outcome) {
            (true, false) => (first, second),
            (false, true) => (second, first),
            _ => return Ok(None),
        };
        let (Some(records_table), Some(table)) = (
            self.known_table(&record_batch.table),
            self.known_table(&entity_batch.table),
        ) else {
            return Ok(None);
        };
        let (Some(mut record), Some(mut entity)) = (
            lone_insert(&records_table, record_batch),
            lone_insert(&table, entity_batch),
        ) else {
            return Ok(None);
        };
        OneTripInsert::seal(
            [(record_batch, &mut record), (entity_batch, &mut entity)],
            commit.operations,
        );
        let insert = KeyedInsert {
            records_table: records_table.id,
            record,
            entity,
        };
        let (insert, sent) = table
            .keyed_insert_batches
            .send(&self.awaited, insert)
            .await?;
        match sent? {
            Sent::Inserted => {
                let mut stored = vec![None; commit.operations];
                stored[record_batch.positions[0]] =
                    insert.record.committed().stored.pop().flatten();
                stored[entity_batch.positions[0]] =
                    insert.entity.committed().stored.pop().flatten();
                let ticket = None;
                Ok(Some(Ok(Committed { stored, ticket })))
            }
            Sent::RowExists => Ok(None),
            Sent::CatalogChanged => {
                table.forget_plain_catalog();
                records_table.forget_plain_catalog();
                Ok(None)
            }
        }
    }
}

/// The one-trip insert of `batch` into `table`, if it is a single insert the table's plain
/// catalog plans.
fn lone_insert(table: &PostgresTable, batch: &PartitionBatch) -> Option<OneTripInsert> {
    match batch.operations.as_slice() {
        [Operation::Insert(_)] => table.plan_one_trip(&batch.partition_key, &batch.operations),
        _ => None,
    }
}
