//! Background purging of deleted tables and dropped indexes: a deleted table's catalog row stays
//! (not live) until its entities are gone, deleted in bounded batches by a thread of every server
//! over the database, so that a purge a server did not finish (it stopped, it died) is finished by
//! another, or by itself after a restart. While the row stays, the name answers
//! `TableBeingDeleted`. Servers purging the same table at once take batches the others have not
//! locked, and a table (or an index) is forgotten only by a statement that finds none of its rows
//! left, so none is ever left behind by a purger that found the others' batch gone.

use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::Duration;

use super::pool::Pool;
use crate::storage::StorageError;

/// Entities one statement of a purge deletes.
pub const PURGE_BATCH: i64 = 2_000;

/// How often a purger looks for deleted tables when nobody wakes it (tables another server
/// deleted, a purge left by a server that died).
const LOOK_EVERY: Duration = Duration::from_secs(5);

const DELETED_TABLE: &str = "SELECT id FROM trestle_tables WHERE NOT live ORDER BY id LIMIT 1";
const PURGE_ROWS: &str = "DELETE FROM trestle_entities WHERE (table_id, pk, rk) IN
    (SELECT table_id, pk, rk FROM trestle_entities WHERE table_id = $1
     LIMIT $2 FOR UPDATE SKIP LOCKED)";
const PURGE_CHANGES: &str = "DELETE FROM trestle_changes WHERE (table_id, xid, record) IN
    (SELECT table_id, xid, record FROM trestle_changes WHERE table_id = $1
     LIMIT $2 FOR UPDATE SKIP LOCKED)";
/// Forgets a deleted table if none of its entities and records is left (rows another purger is
/// deleting still count, until it commits).
const FORGET_TABLE: &str = "WITH gone AS (
        DELETE FROM trestle_tables WHERE id = $1 AND NOT live
        AND NOT EXISTS (SELECT 1 FROM trestle_entities WHERE table_id = $1)
        AND NOT EXISTS (SELECT 1 FROM trestle_changes WHERE table_id = $1)
        RETURNING id),
    trims AS (DELETE FROM trestle_feed_trims WHERE table_id IN (SELECT id FROM gone))
    SELECT count(*) FROM gone";
const DROPPED_INDEX: &str = "SELECT index_id FROM trestle_dropped_indexes LIMIT 1";
const PURGE_ENTRIES: &str = "DELETE FROM trestle_index_entries WHERE (index_id, sort_key) IN
    (SELECT index_id, sort_key FROM trestle_index_entries WHERE index_id = $1
     LIMIT $2 FOR UPDATE SKIP LOCKED)";
/// Forgets a dropped index if none of its entries is left.
const FORGET_INDEX: &str = "DELETE FROM trestle_dropped_indexes WHERE index_id = $1
    AND NOT EXISTS (SELECT 1 FROM trestle_index_entries WHERE index_id = $1)";

/// Purges the table `id` its deletion has just hidden, in the deletion's own transaction `tx`,
/// if one batch of its entities and one of its change records is all it holds: then its catalog
/// row goes too, and its name is free once `tx` commits, as on the embedded store, rather than
/// after the background purger's next pass. Whether it did; a larger table is left to the
/// purger, which finishes it.
pub(super) fn purge_if_small(
    tx: &mut postgres::Transaction<'_>,
    id: i64,
) -> Result<bool, StorageError> {
    tx.execute(PURGE_ROWS, &[&id, &PURGE_BATCH])?;
    tx.execute(PURGE_CHANGES, &[&id, &PURGE_BATCH])?;
    let forgotten: i64 = tx.query_one(FORGET_TABLE, &[&id])?.get(0);
    if forgotten > 0 {
        // Counted as the purger's batches are: the table's purge is done.
        crate::telemetry::background_done("purge_batch");
    }
    Ok(forgotten > 0)
}

/// Wakes the purger (after a deletion); it stops once the store is gone.
#[derive(Debug, Default)]
pub(super) struct Wake {
    pending: Mutex<bool>,
    signal: Condvar,
}

impl Wake {
    pub(super) fn now(&self) {
        *self.pending.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.signal.notify_one();
    }

    /// Waits for a wake-up or `LOOK_EVERY`.
    fn wait(&self) {
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut pending, _) = self
            .signal
            .wait_timeout_while(pending, LOOK_EVERY, |pending| !*pending)
            .unwrap_or_else(PoisonError::into_inner);
        *pending = false;
    }
}

/// Starts the purger of a store over `pool`; it ends when the pool is dropped.
pub(super) fn start(pool: &Arc<Pool>, wake: Arc<Wake>) {
    let pool = Arc::downgrade(pool);
    std::thread::Builder::new()
        .name("trestle-purge".into())
        .spawn(move || run(&pool, &wake))
        .expect("spawning the purge thread");
}

fn run(pool: &Weak<Pool>, wake: &Wake) {
    loop {
        let Some(pool) = pool.upgrade() else { return };
        loop {
            match purge_one_batch(&pool) {
                Ok(true) => crate::telemetry::background_done("purge_batch"),
                Ok(false) => break,
                Err(error) => {
                    tracing::warn!(%error, "purging a deleted table failed; trying again later");
                    break;
                }
            }
        }
        drop(pool);
        wake.wait();
    }
}

/// Deletes one batch of a dropped index's entries (an index of a deleted table, too), or, when
/// none is left, forgets the index; else one batch of a deleted table's entities, or, when none
/// is left, the table's catalog row. `false` when nothing is left to purge, or what is left is
/// being deleted by another purger (a look later finishes it if that one stops).
fn purge_one_batch(pool: &Pool) -> Result<bool, StorageError> {
    pool.with(|connection| {
        let (client, mut prepared) = connection.parts();
        let dropped_index = prepared.get(client, DROPPED_INDEX)?;
        if let Some(index) = client.query_opt(&dropped_index, &[])? {
            let id: i64 = index.get(0);
            let purge_entries = prepared.get(client, PURGE_ENTRIES)?;
            if client.execute(&purge_entries, &[&id, &PURGE_BATCH])? > 0 {
                return Ok(true);
            }
            let forget_index = prepared.get(client, FORGET_INDEX)?;
            let forgotten = client.execute(&forget_index, &[&id])? > 0;
            if forgotten {
                tracing::info!(index_id = id, "a dropped index is purged");
            }
            return Ok(forgotten);
        }
        let deleted_table = prepared.get(client, DELETED_TABLE)?;
        let Some(table) = client.query_opt(&deleted_table, &[])? else {
            return Ok(false);
        };
        let id: i64 = table.get(0);
        let purge_rows = prepared.get(client, PURGE_ROWS)?;
        let mut purged = client.execute(&purge_rows, &[&id, &PURGE_BATCH])?;
        if purged == 0 {
            let purge_changes = prepared.get(client, PURGE_CHANGES)?;
            purged = client.execute(&purge_changes, &[&id, &PURGE_BATCH])?;
        }
        if purged > 0 {
            return Ok(true);
        }
        let forget_table = prepared.get(client, FORGET_TABLE)?;
        let forgotten = client.query_one(&forget_table, &[&id])?.get::<_, i64>(0) > 0;
        if forgotten {
            tracing::info!(table_id = id, "a deleted table is purged");
        }
        Ok(forgotten)
    })
}
