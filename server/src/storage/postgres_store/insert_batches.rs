//! Single-entity inserts into one table, sent together: PostgreSQL's cost of an insert is mostly
//! its transaction's (a function call, the locks, the catalog check, the commit's wait for the
//! log), so while a table's inserts are on their way to the database the next ones wait, and go
//! together in one call of the schema's `trestle_insert_each`: one database transaction that
//! takes the table's lock and every partition's (in lock-key order, as commits across partitions
//! take them), checks the table's catalog is the one they were planned by, and inserts each
//! entity whose row does not exist, with its change record. An entity whose row exists is left
//! out of the transaction, and its insert goes the full way (`pipelined.rs`), which refuses it or
//! replaces an expired row; the others commit. Each insert keeps its own stamp; if the table
//! keeps a change feed, the records of the inserts sent together share a transaction id (they
//! committed in one database transaction).
//!
//! At most four calls of a table are on their way at once (`together.rs`).

use std::sync::Arc;

use tokio_postgres::types::ToSql;

use super::awaited_pool::AwaitedPool;
use super::one_trip::OneTripInsert;
use super::rows::planned_rows;
use super::together::{SharedFault, Together, Waiting};
use crate::storage::StorageError;

/// Calls the schema's function: its transaction is the statement's own.
const INSERT_EACH: &str = "SELECT trestle_insert_each($1, $2, $3, $4, $5, $6, $7, $8)";

/// A table's single-entity inserts, sent together.
pub(super) type InsertBatches = Waiting<InsertEach>;

/// Single-entity inserts into the table `table_id`, as one call of `trestle_insert_each`.
pub(super) struct InsertEach {
    pub(super) table_id: i64,
}

/// What the database did with one insert of a call.
pub(super) enum Sent {
    Inserted,
    RowExists,
    /// The table's catalog is not the one the insert was planned by (or the table is gone):
    /// nothing of the call was written.
    CatalogChanged,
}

impl Together for InsertEach {
    type Job = OneTripInsert;
    type Answer = (OneTripInsert, Result<Sent, StorageError>);
    const IN_FLIGHT: usize = 4;
    const MOST: usize = 100;

    /// Planned by the first one's catalog, each entity once.
    fn fits(&self, taken: &[OneTripInsert], insert: &OneTripInsert) -> bool {
        Arc::ptr_eq(taken[0].catalog(), insert.catalog())
            && taken.iter().all(|other| other.key() != insert.key())
    }

    async fn send(&self, pool: &AwaitedPool, batch: Vec<OneTripInsert>) -> Vec<Self::Answer> {
        let sent = call(pool, self.table_id, &batch).await;
        told_each(batch, sent)
    }
}

/// Each insert of `batch` with what the database did with it, given what the call answered (the
/// places, from 1, of those it inserted, or `None` if the catalog changed).
pub(super) fn told_each<T>(
    batch: Vec<T>,
    sent: Result<Option<Vec<i32>>, StorageError>,
) -> Vec<(T, Result<Sent, StorageError>)> {
    let sent = sent.map_err(|error| SharedFault::of(&error));
    batch
        .into_iter()
        .enumerate()
        .map(|(at, insert)| {
            let place = at as i32 + 1;
            let told = match &sent {
                Ok(Some(places)) if places.binary_search(&place).is_ok() => Ok(Sent::Inserted),
                Ok(Some(_)) => Ok(Sent::RowExists),
                Ok(None) => Ok(Sent::CatalogChanged),
                Err(fault) => Err(fault.error()),
            };
            (insert, told)
        })
        .collect()
}

/// Calls `trestle_insert_each` with `batch`: the inserts' places (from 1) it inserted, or `None`
/// if the catalog changed.
async fn call(
    pool: &AwaitedPool,
    table_id: i64,
    batch: &[OneTripInsert],
) -> Result<Option<Vec<i32>>, StorageError> {
    let mut locks: Vec<i64> = batch.iter().map(OneTripInsert::partition_lock).collect();
    locks.sort_unstable();
    locks.dedup();
    let rows: Vec<_> = batch
        .iter()
        .map(|insert| planned_rows(insert.plan()))
        .collect();
    let pks: Vec<&[u8]> = batch.iter().map(OneTripInsert::partition_key).collect();
    let rks: Vec<&[u8]> = rows.iter().map(|rows| rows.written[0]).collect();
    let records: Vec<&[u8]> = rows.iter().map(|rows| rows.records[0].as_slice()).collect();
    let ats: Vec<i64> = batch.iter().map(|insert| insert.plan().stamped.0).collect();
    let changes: Vec<Option<&[u8]>> = batch.iter().map(OneTripInsert::change).collect();
    let catalog = batch[0].catalog().stored();
    let params: [&(dyn ToSql + Sync); 8] = [
        &table_id, &locks, catalog, &pks, &rks, &records, &ats, &changes,
    ];
    let rows = pool.query(INSERT_EACH, &params).await?;
    Ok(rows.first().and_then(|row| row.get(0)))
}
