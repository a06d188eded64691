//! Single-entity inserts with an idempotency key, sent together: such a write is a commit of two
//! inserts (its record into the records table, `crate::idempotency`, and the entity into its
//! table), and waits, as lone inserts do (`insert_batches.rs`), to go with the others of its table
//! in one call of the schema's `trestle_insert_keyed_each`: one database transaction that takes
//! both tables' locks (shared, in id order) and every partition's (in lock-key order), as commits
//! across partitions take them, checks both catalogs are the ones the inserts were planned by,
//! inserts each record whose row does not exist, then the entity of each record inserted, and
//! removes again the record of an entity whose row exists, so that each pair is written whole or
//! not at all. A pair not written (its record exists: a retry; or its entity's row does) goes the
//! full way (`pipelined.rs`), which answers the retry or refuses the insert and records the
//! refusal. Each insert's outcome is sealed into its record before it is sent
//! ([`OneTripInsert::seal`]), as every strategy seals it; the change records follow the feed's
//! rule as `insert_batches.rs`'s do (written under the table's shared lock).
//!
//! The apply (`commit.rs`) sends a commit this way when it is such a pair into tables whose
//! catalogs as last read are plain. Bounded as lone inserts: at most four calls of a table on
//! their way, each of at most 100 inserts ([`Together`]). In the system checker's workload: the
//! list-append writes' keyed inserts of absent keys (`server/tests/checker/lists.rs`), racing
//! each other to be refused.

use std::sync::Arc;

use tokio_postgres::types::ToSql;

use super::awaited_pool::AwaitedPool;
use super::insert_batches::{told_each, Sent};
use super::one_trip::OneTripInsert;
use super::rows::planned_rows;
use super::together::{Together, Waiting};
use crate::storage::StorageError;

/// Calls the schema's function: its transaction is the statement's own.
const INSERT_KEYED_EACH: &str = "SELECT trestle_insert_keyed_each($1, $2, $3, $4, $5, $6, $7, $8,
    $9, $10, $11, $12, $13, $14)";

/// A table's keyed single-entity inserts, sent together.
pub(super) type KeyedInsertBatches = Waiting<KeyedInsertEach>;

/// Keyed single-entity inserts into the table `table_id`, as one call of
/// `trestle_insert_keyed_each`.
pub(super) struct KeyedInsertEach {
    pub(super) table_id: i64,
}

/// One keyed insert: its record's insert (into the records table `records_table`) and its
/// entity's, planned and sealed ([`OneTripInsert::seal`]).
pub(super) struct KeyedInsert {
    pub(super) records_table: i64,
    pub(super) record: OneTripInsert,
    pub(super) entity: OneTripInsert,
}

impl Together for KeyedInsertEach {
    type Job = KeyedInsert;
    type Answer = (KeyedInsert, Result<Sent, StorageError>);
    const IN_FLIGHT: usize = 4;
    const MOST: usize = 100;

    /// Planned by the first one's catalogs, each entity and each record once.
    fn fits(&self, taken: &[KeyedInsert], insert: &KeyedInsert) -> bool {
        let first = &taken[0];
        first.records_table == insert.records_table
            && Arc::ptr_eq(first.entity.catalog(), insert.entity.catalog())
            && Arc::ptr_eq(first.record.catalog(), insert.record.catalog())
            && taken.iter().all(|other| {
                other.entity.key() != insert.entity.key()
                    && other.record.key() != insert.record.key()
            })
    }

    async fn send(&self, pool: &AwaitedPool, batch: Vec<KeyedInsert>) -> Vec<Self::Answer> {
        let sent = call(pool, self.table_id, &batch).await;
        told_each(batch, sent)
    }
}

/// Calls `trestle_insert_keyed_each` with `batch`: the inserts' places (from 1) it wrote whole,
/// or `None` if a catalog changed.
async fn call(
    pool: &AwaitedPool,
    table_id: i64,
    batch: &[KeyedInsert],
) -> Result<Option<Vec<i32>>, StorageError> {
    let records_table = batch[0].records_table;
    let mut tables = vec![table_id, records_table];
    tables.sort_unstable();
    let mut locks: Vec<i64> = batch
        .iter()
        .flat_map(|insert| {
            [
                insert.entity.partition_lock(),
                insert.record.partition_lock(),
            ]
        })
        .collect();
    locks.sort_unstable();
    locks.dedup();
    let entities: Vec<_> = batch
        .iter()
        .map(|i| planned_rows(i.entity.plan()))
        .collect();
    let records: Vec<_> = batch
        .iter()
        .map(|i| planned_rows(i.record.plan()))
        .collect();
    let pks: Vec<&[u8]> = batch.iter().map(|i| i.entity.partition_key()).collect();
    let rks: Vec<&[u8]> = entities.iter().map(|rows| rows.written[0]).collect();
    let rows: Vec<&[u8]> = entities
        .iter()
        .map(|rows| rows.records[0].as_slice())
        .collect();
    let ats: Vec<i64> = batch.iter().map(|i| i.entity.plan().stamped.0).collect();
    let changes: Vec<Option<&[u8]>> = batch.iter().map(|i| i.entity.change()).collect();
    let record_pks: Vec<&[u8]> = batch.iter().map(|i| i.record.partition_key()).collect();
    let record_rks: Vec<&[u8]> = records.iter().map(|rows| rows.written[0]).collect();
    let record_rows: Vec<&[u8]> = records.iter().map(|r| r.records[0].as_slice()).collect();
    let params: [&(dyn ToSql + Sync); 14] = [
        &table_id,
        &records_table,
        &tables,
        &locks,
        batch[0].entity.catalog().stored(),
        batch[0].record.catalog().stored(),
        &pks,
        &rks,
        &rows,
        &ats,
        &changes,
        &record_pks,
        &record_rks,
        &record_rows,
    ];
    let rows = pool.query(INSERT_KEYED_EACH, &params).await?;
    Ok(rows.first().and_then(|row| row.get(0)))
}
