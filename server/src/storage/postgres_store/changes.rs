//! The PostgreSQL store's change feeds as read: `trestle_changes`, one row per record, written
//! in the commit's own database transaction (`records.rs`) and keyed by the table, the
//! transaction's id (`xid8`) and the record's place in it.
//!
//! Transaction ids are taken in one order and commits finish in another: readers read only below
//! the table's *feed horizon*, the schema's `trestle_feed_horizon`, so that a reader on any server
//! never passes a record that appears later. Every transaction that writes a table's records
//! holds the table's advisory lock (shared) from before it takes its id until it ends, so the
//! records below the oldest id among the lock's holders are all committed (or never will be),
//! except those of transactions that ended between the reading statement's snapshot and its look
//! at the locks: the horizon is also below every transaction running at the snapshot that is gone
//! from the locks, and below the snapshot's `xmax` (ids taken later are above it). A transaction
//! that writes no record of the table, however long it runs, keeps no reader of it waiting.
//!
//! The horizon pairs a transaction's table lock with its id by the session holding both (its
//! `pid`), never by `virtualtransaction`: `pg_locks` reads each lock's virtual transaction id
//! from the session as it reads the lock, and a committing session clears it between its
//! locks, so a transaction visible to no reader yet showed as two, one holding the lock without
//! an id and one with an id but no lock, and the horizon passed it.

use postgres::types::ToSql;

use super::table::PostgresTable;
use super::PostgresStore;
use crate::model::{TableName, Ticks};
use crate::storage::changes::{self, FeedBatch, FeedEnd, FeedPosition, StoredChange};
use crate::storage::{FeedRead, IndexCatalog, StorageError};

/// Removes, from the feed's start, the records of commits before `$2` (as sled's store does): of
/// the first `$3` records of ended transactions, those before the first that is not that old, so
/// a step reads at most `$3` index entries however long the feed is. Notes the last position it
/// removes (never moving the note back), then removes the records.
const TRIM_RECORDS: &str = "WITH oldest AS (
        SELECT xid, record, at FROM trestle_changes
        WHERE table_id = $1 AND xid < pg_snapshot_xmin(pg_current_snapshot())
        ORDER BY xid, record LIMIT $3),
    kept AS (SELECT xid, record FROM oldest WHERE at >= $2 ORDER BY xid, record LIMIT 1),
    doomed AS (
        SELECT xid, record FROM oldest o
        WHERE NOT EXISTS (SELECT 1 FROM kept k WHERE (k.xid, k.record) <= (o.xid, o.record))),
    noted AS (
        INSERT INTO trestle_feed_trims (table_id, xid, record)
        SELECT $1, xid, record FROM doomed ORDER BY xid DESC, record DESC LIMIT 1
        ON CONFLICT (table_id) DO UPDATE SET xid = EXCLUDED.xid, record = EXCLUDED.record
        WHERE (trestle_feed_trims.xid, trestle_feed_trims.record)
            < (EXCLUDED.xid, EXCLUDED.record))
    DELETE FROM trestle_changes c USING doomed d
    WHERE c.table_id = $1 AND c.xid = d.xid AND c.record = d.record";
/// The table's feed horizon (every record below it is readable), and the id the next
/// transaction will take.
const ENDS: &str = "SELECT trestle_feed_horizon($1), pg_snapshot_xmax(s)::text::int8
    FROM pg_current_snapshot() s";
const TRIMMED_TO: &str =
    "SELECT xid::text::int8, record FROM trestle_feed_trims WHERE table_id = $1";
/// The records after a position below the horizon: the first `$4` after it are read by the
/// index, and the horizon is computed only if there is one (a caught-up follower of an idle feed
/// costs an index probe, not a look at `pg_locks`, which takes every lock manager partition of
/// the cluster). Those read are in order, so the ones below the horizon are a prefix of them.
const READ_RECORDS: &str = "SELECT xid::text::int8, record, change FROM (
        SELECT xid, record, change, row_number() OVER w AS n,
            sum(octet_length(change)) OVER w AS through
        FROM (SELECT xid, record, change FROM trestle_changes
            WHERE table_id = $1 AND (xid, record) > ($2::int8::text::xid8, $3)
            ORDER BY xid, record LIMIT $4) l
        WINDOW w AS (ORDER BY xid, record)) r
    WHERE xid < (SELECT trestle_feed_horizon($1))::text::xid8 AND (n = 1 OR through <= $5::int8)
    ORDER BY xid, record";

/// The table of a name, where its feed was trimmed to, and the records after a position (read as
/// [`READ_RECORDS`] reads them), at one instant (no row: no live table of the name; one row without a record: no records).
const READ_NAMED: &str = "SELECT t.name, t.indexes, tr.xid::text::int8, tr.record,
        c.xid::text::int8, c.record, c.change
    FROM trestle_tables t
    LEFT JOIN trestle_feed_trims tr ON tr.table_id = t.id
    LEFT JOIN LATERAL (SELECT xid, record, change FROM (
            SELECT xid, record, change, row_number() OVER w AS n,
                sum(octet_length(change)) OVER w AS through
            FROM (SELECT xid, record, change FROM trestle_changes
                WHERE table_id = t.id AND (xid, record) > ($2::int8::text::xid8, $3)
                ORDER BY xid, record LIMIT $4) l
            WINDOW w AS (ORDER BY xid, record)) r
        WHERE xid < (SELECT trestle_feed_horizon(t.id))::text::xid8 AND (n = 1 OR through <= $5::int8)
        ORDER BY xid, record) c ON true
    WHERE t.folded = $1 AND t.live";

impl PostgresTable {
    /// [`crate::storage::Table::trim_changes`]: one statement.
    pub(super) fn trim_before(&self, before: Ticks, limit: usize) -> Result<usize, StorageError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let removed = self.pool.with(|connection| {
            let (client, mut prepared) = connection.parts();
            let statement = prepared.get(client, TRIM_RECORDS)?;
            Ok(client.execute(&statement, &[&self.id, &before.0, &limit])?)
        })?;
        Ok(removed as usize)
    }

    /// [`crate::storage::Table::feed_end`].
    pub(super) fn end(&self) -> Result<FeedEnd, StorageError> {
        let row = &self.pool.query(ENDS, &[&self.id])?[0];
        let (horizon, next): (i64, i64) = (row.get(0), row.get(1));
        Ok(FeedEnd::new(horizon as u64, next as u64))
    }

    /// [`crate::storage::Table::feed_trimmed_to`].
    pub(super) fn trimmed_to(&self) -> Result<Option<FeedPosition>, StorageError> {
        let row = self.pool.query_opt(TRIMMED_TO, &[&self.id])?;
        Ok(row.map(|row| FeedPosition {
            transaction: row.get::<_, i64>(0) as u64,
            record: row.get::<_, i32>(1) as u32,
        }))
    }

    /// [`crate::storage::Table::read_changes`].
    pub(super) fn changes_after(
        &self,
        after: Option<FeedPosition>,
        limit: FeedBatch,
    ) -> Result<Vec<StoredChange>, StorageError> {
        let (transaction, record, records, bytes) = read_params(after, limit);
        let params: [&(dyn ToSql + Sync); 5] = [&self.id, &transaction, &record, &records, &bytes];
        let rows = self.pool.query(READ_RECORDS, &params)?;
        rows.iter().filter_map(|row| change_at(row, 0)).collect()
    }
}

impl PostgresStore {
    /// [`crate::storage::Store::read_changes_named`]: one statement.
    pub(super) fn read_feed_named(
        &self,
        name: &TableName,
        after: Option<FeedPosition>,
        limit: FeedBatch,
    ) -> Result<Option<FeedRead>, StorageError> {
        let (transaction, record, records, bytes) = read_params(after, limit);
        let folded = name.folded();
        let params: [&(dyn ToSql + Sync); 5] = [&folded, &transaction, &record, &records, &bytes];
        let rows = self.pool.query(READ_NAMED, &params)?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let name = TableName::stored(first.get::<_, &str>(0))
            .map_err(|_| StorageError::Corrupt("a table name in the catalog is invalid".into()))?;
        let trimmed_to = first
            .get::<_, Option<i64>>(2)
            .map(|transaction| FeedPosition {
                transaction: transaction as u64,
                record: first.get::<_, i32>(3) as u32,
            });
        Ok(Some(FeedRead {
            name,
            catalog: IndexCatalog::decode(first.get(1))?,
            changes: rows
                .iter()
                .filter_map(|row| change_at(row, 4))
                .collect::<Result<_, _>>()?,
            trimmed_to,
        }))
    }
}

/// The parameters of a read within `limit` after `after` (from the first when `None`): the
/// position's transaction and record, the most records and the most bytes: the statement keeps
/// the first record and each after it while the sizes summed through it are within the bytes
/// ([`FeedBatch::admits`]).
fn read_params(after: Option<FeedPosition>, limit: FeedBatch) -> (i64, i32, i64, i64) {
    let records = i64::try_from(limit.records).unwrap_or(i64::MAX);
    let bytes = i64::try_from(limit.bytes).unwrap_or(i64::MAX);
    match after {
        Some(after) => (
            i64::try_from(after.transaction).unwrap_or(i64::MAX),
            i32::try_from(after.record).unwrap_or(i32::MAX),
            records,
            bytes,
        ),
        None => (0, -1, records, bytes),
    }
}

/// The record in `row`'s columns from `first` (transaction, record, change), if there is one.
fn change_at(row: &postgres::Row, first: usize) -> Option<Result<StoredChange, StorageError>> {
    let transaction = row.get::<_, Option<i64>>(first)?;
    let position = FeedPosition {
        transaction: transaction as u64,
        record: row.get::<_, i32>(first + 1) as u32,
    };
    Some(changes::decode(position, row.get(first + 2)))
}
