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
//! With no insert on its way, an insert is sent at once; at most [`IN_FLIGHT`] calls of a table
//! are on their way at a time, each taking every insert waiting (at most [`MOST`]). A call runs
//! in a task of its own, so an insert whose caller gave up still gets its answer told to the
//! others sent with it.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;
use tokio_postgres::types::ToSql;

use super::awaited::AwaitedPool;
use super::one_trip::{OneTrip, OneTripInsert};
use super::table::{planned_rows, PostgresTable};
use crate::storage::{Fault, StorageError};

/// Calls the schema's function: its transaction is the statement's own.
const INSERT_EACH: &str = "SELECT trestle_insert_each($1, $2, $3, $4, $5, $6, $7, $8)";

/// How many calls of one table may be on their way at once.
const IN_FLIGHT: usize = 4;
/// The most inserts one call carries.
const MOST: usize = 100;

/// A table's inserts waiting to be sent, and how many calls are on their way.
#[derive(Default)]
pub(super) struct InsertBatches {
    queue: Arc<Mutex<Queue>>,
}

#[derive(Default)]
struct Queue {
    in_flight: usize,
    waiting: VecDeque<Pending>,
}

impl std::fmt::Debug for InsertBatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InsertBatches")
    }
}

/// An insert waiting to be sent, and where its answer goes.
struct Pending {
    insert: OneTripInsert,
    answer: oneshot::Sender<(OneTripInsert, Result<Sent, StorageError>)>,
}

/// What the database did with one insert of a call.
enum Sent {
    Inserted,
    RowExists,
    /// The table's catalog is not the one the insert was planned by (or the table is gone):
    /// nothing of the call was written.
    CatalogChanged,
}

impl InsertBatches {
    /// Sends `insert` (one entity, planned by `table`'s plain catalog) with the others waiting,
    /// over `pool`: how it went.
    pub(super) async fn send(
        &self,
        pool: &Arc<AwaitedPool>,
        table: &PostgresTable,
        insert: OneTripInsert,
    ) -> Result<OneTrip, StorageError> {
        let (answer, answered) = oneshot::channel();
        let start = {
            let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            queue.waiting.push_back(Pending { insert, answer });
            let start = queue.in_flight < IN_FLIGHT;
            queue.in_flight += usize::from(start);
            start
        };
        if start {
            tokio::spawn(send_waiting(self.queue.clone(), pool.clone(), table.id));
        }
        let (insert, sent) = answered.await.map_err(|_| {
            StorageError::backend(
                Fault::Failed,
                Lost("the insert's call ended without an answer".into()),
            )
        })?;
        Ok(match sent? {
            Sent::Inserted => OneTrip::Done(insert.committed()),
            Sent::RowExists => OneTrip::RowExists,
            Sent::CatalogChanged => {
                table.forget_plain_catalog();
                OneTrip::NotTaken
            }
        })
    }
}

/// Sends the inserts waiting in `queue`, a call at a time, until none is left.
async fn send_waiting(queue: Arc<Mutex<Queue>>, pool: Arc<AwaitedPool>, table_id: i64) {
    loop {
        let batch = {
            let mut queue = queue.lock().unwrap_or_else(PoisonError::into_inner);
            let batch = take_batch(&mut queue.waiting);
            if batch.is_empty() {
                queue.in_flight -= 1;
                return;
            }
            batch
        };
        let sent = call(&pool, table_id, &batch).await;
        answer(batch, sent);
    }
}

/// The first waiting inserts that can go in one call: planned by the first one's catalog, each
/// entity once, at most [`MOST`]; the others keep their places.
fn take_batch(waiting: &mut VecDeque<Pending>) -> Vec<Pending> {
    let Some(first) = waiting.front() else {
        return Vec::new();
    };
    let catalog = first.insert.catalog().clone();
    let mut keys = HashSet::new();
    let mut batch = Vec::new();
    let mut left = VecDeque::with_capacity(waiting.len());
    for pending in waiting.drain(..) {
        let fits = batch.len() < MOST
            && Arc::ptr_eq(pending.insert.catalog(), &catalog)
            && keys.insert(owned(pending.insert.key()));
        match fits {
            true => batch.push(pending),
            false => left.push_back(pending),
        }
    }
    *waiting = left;
    batch
}

/// An entity's keys, owned.
fn owned((partition_key, row_key): (&[u8], &[u8])) -> (Vec<u8>, Vec<u8>) {
    (partition_key.to_vec(), row_key.to_vec())
}

/// Calls `trestle_insert_each` with `batch`: the inserts' places (from 1) it inserted, or `None`
/// if the catalog changed.
async fn call(
    pool: &AwaitedPool,
    table_id: i64,
    batch: &[Pending],
) -> Result<Option<Vec<i32>>, StorageError> {
    let mut locks: Vec<i64> = batch.iter().map(|p| p.insert.partition_lock()).collect();
    locks.sort_unstable();
    locks.dedup();
    let rows: Vec<_> = batch
        .iter()
        .map(|p| planned_rows(p.insert.plan()))
        .collect();
    let pks: Vec<&[u8]> = batch.iter().map(|p| p.insert.partition_key()).collect();
    let rks: Vec<&[u8]> = rows.iter().map(|rows| rows.written[0]).collect();
    let records: Vec<&[u8]> = rows.iter().map(|rows| rows.records[0].as_slice()).collect();
    let ats: Vec<i64> = batch.iter().map(|p| p.insert.plan().stamped.0).collect();
    let changes: Vec<Option<&[u8]>> = batch.iter().map(|p| p.insert.change()).collect();
    let catalog = batch[0].insert.catalog().stored();
    let params: [&(dyn ToSql + Sync); 8] = [
        &table_id, &locks, catalog, &pks, &rks, &records, &ats, &changes,
    ];
    let rows = pool.query(INSERT_EACH, &params).await?;
    Ok(rows.first().and_then(|row| row.get(0)))
}

/// Tells each insert of `batch` what `sent` says of it (a fault, to each).
fn answer(batch: Vec<Pending>, sent: Result<Option<Vec<i32>>, StorageError>) {
    let sent = sent.map_err(|error| (fault_of(&error), error.to_string()));
    for (at, pending) in batch.into_iter().enumerate() {
        let place = at as i32 + 1;
        let told = match &sent {
            Ok(Some(places)) if places.binary_search(&place).is_ok() => Ok(Sent::Inserted),
            Ok(Some(_)) => Ok(Sent::RowExists),
            Ok(None) => Ok(Sent::CatalogChanged),
            Err((fault, text)) => Err(StorageError::backend(*fault, Lost(text.clone()))),
        };
        let _ = pending.answer.send((pending.insert, told));
    }
}

/// The kind of `error`'s fault.
fn fault_of(error: &StorageError) -> Fault {
    match error {
        StorageError::Backend { fault, .. } => *fault,
        _ if error.is_disk_full() => Fault::DiskFull,
        _ => Fault::Failed,
    }
}

/// A fault told to every insert of a call.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Lost(String);
