//! Commits of any operations on one partition of a table without indexes, or on several
//! partitions of such tables ([`PostgresStore::commit_across_pipelined`]), over an awaited
//! connection in two round trips, holding no thread while the database answers: the first begins
//! the transaction, takes the table's lock (shared) and the partition's, and reads the rows the
//! operations act on with whether the table is still live with the catalog the commit is planned
//! by; the commit is planned here (`model::plan_commit`, as every commit is); the second writes
//! and removes the rows, writes the change records if the table keeps a feed, and commits. Each
//! round trip is a pipeline of statements sent together ([`Borrowed::pipeline`]).
//!
//! A refusal rolls back and is the commit's answer. If a table's catalog changed or a table is
//! gone, or the database asks for the transaction to be run again (a deadlock, which the
//! partitions' locks taken in one order leave to engines without advisory locks), nothing is
//! written and the blocking path (`table.rs`, `across.rs`) decides. A call dropped between its round trips leaves
//! its connection inside the transaction: that connection is closed, not lent again, and the
//! database rolls the transaction back.

use std::collections::HashMap;

use tokio_postgres::Row;

use super::across::{
    self, in_lock_order, lock_keys, plan_parts, rows_of, table_gone, Part, RowKeys,
};
use super::awaited_pool::{Borrowed, Pipelined};
use super::pool::{database_error, is_retryable};
use super::records::{numbered_records, WRITE_RECORDS};
use super::rows::planned_rows;
use super::sql::partition_lock;
use super::table::{current_entities_of, PostgresTable, DELETE_ROWS, WRITE_ROWS};
use super::PostgresStore;
use crate::model::{plan_commit, CommitPlan, Operation, Ticks};
use crate::storage::{CommitOutcome, Committed, IndexCatalog, PartitionBatch, StorageError};

const BEGIN: &str = "BEGIN";
const LOCK: &str = concat!(
    "SELECT pg_advisory_xact_lock_shared(",
    table_lock_class!(),
    ", ($1::bigint % 2147483647)::int4), pg_advisory_xact_lock($2)"
);
/// Whether the table is live with the catalog the commit is planned by (read after the locks: a
/// later snapshot; an index declared or dropped takes the table's lock exclusively), and the rows
/// the commit acts on.
const READ_ROWS: &str = "SELECT t.live AND t.indexes = $2, e.rk, e.record FROM trestle_tables t
    LEFT JOIN trestle_entities e ON e.table_id = t.id AND e.pk = $3 AND e.rk = ANY($4)
    WHERE t.id = $1";
/// The tables' locks (shared), in the order of their ids as given.
const LOCK_TABLES: &str = concat!(
    "SELECT pg_advisory_xact_lock_shared(",
    table_lock_class!(),
    ", (t % 2147483647)::int4) FROM unnest($1::bigint[]) AS t"
);
/// The partitions' locks, in the order of their keys as given.
const LOCK_PARTITIONS: &str = "SELECT pg_advisory_xact_lock(k) FROM unnest($1::bigint[]) AS k";
/// The live tables' catalogs, read under their locks.
const CATALOGS: &str = "SELECT id, indexes FROM trestle_tables WHERE live AND id = ANY($1)";
const COMMIT: &str = "COMMIT";
const ROLLBACK: &str = "ROLLBACK";

impl PostgresTable {
    /// Commits `operations` (on partition `partition_key`) over `connection` in two round trips
    /// if the table's catalog as last read is plain (no index): what they stored, or the
    /// operation refused; `None` (nothing written) if the commit must go the full path.
    pub(super) async fn commit_pipelined(
        &self,
        connection: &mut Borrowed<'_>,
        partition_key: &str,
        operations: &[Operation],
    ) -> Result<Option<CommitOutcome>, StorageError> {
        let Some(catalog) = self.plain_catalog() else {
            return Ok(None);
        };
        let pk = partition_key.as_bytes();
        let lock = partition_lock(self.id, partition_key);
        let row_keys: Vec<&[u8]> = operations.iter().map(|o| o.row_key().as_bytes()).collect();
        connection.in_transaction = true;
        let read = connection
            .pipeline(&[
                (BEGIN, Vec::new()),
                (LOCK, vec![&self.id, &lock]),
                (READ_ROWS, vec![&self.id, catalog.stored(), &pk, &row_keys]),
            ])
            .await?;
        let rows = match first_error(read) {
            Ok(mut answers) => answers.pop().unwrap_or_default(),
            Err(error) => return rolled_back(connection, error).await,
        };
        let Some(current) = current_entities_of(&rows, operations, catalog.reads_rows_whole())?
        else {
            // The catalog changed or the table is gone: the full path reads it afresh.
            self.forget_plain_catalog();
            connection.end(ROLLBACK).await?;
            return Ok(None);
        };
        let now = Ticks::next_commit();
        let rules = catalog.plan_rules();
        let plan = match plan_commit(partition_key, operations.to_vec(), current, now, rules) {
            Ok(plan) => plan,
            Err(refused) => {
                connection.end(ROLLBACK).await?;
                return Ok(Some(Err(refused.into())));
            }
        };
        let rows = planned_rows(&plan);
        let (numbers, records) = match catalog.keeps_change_feed() {
            true => numbered_records(&plan, partition_key, 0),
            false => Default::default(),
        };
        let at = plan.stamped.0;
        let mut write: Vec<Pipelined<'_>> = Vec::new();
        if !rows.written.is_empty() {
            write.push((
                WRITE_ROWS,
                vec![&self.id, &pk, &rows.written, &rows.records],
            ));
        }
        if !rows.deleted.is_empty() {
            write.push((DELETE_ROWS, vec![&self.id, &pk, &rows.deleted]));
        }
        if !records.is_empty() {
            write.push((WRITE_RECORDS, vec![&self.id, &numbers, &records, &at]));
        }
        write.push((COMMIT, Vec::new()));
        let outcome = commit_written(connection, &write).await?;
        Ok(outcome.map(|()| {
            Ok(Committed {
                stored: plan.results,
                ticket: None,
            })
        }))
    }
}

impl PostgresStore {
    /// A commit ([`crate::storage::Store::commit`]) of `batches` (each of its own partition) over an
    /// awaited connection in two round trips, if every table is one the store knows and has no
    /// index: all the locks in the blocking path's order, the catalogs and every part's rows,
    /// then every part's rows written and removed in one statement each, the change records and
    /// `COMMIT`. `None` (nothing written) if the commit must go the blocking way.
    pub(super) async fn commit_across_pipelined(
        &self,
        batches: &[PartitionBatch],
        operations: usize,
    ) -> Result<Option<CommitOutcome>, StorageError> {
        let mut parts = Vec::with_capacity(batches.len());
        for batch in batches {
            match self.known_table(&batch.table) {
                Some(table) if table.plain_catalog().is_some() => parts.push(Part { table, batch }),
                _ => return Ok(None),
            }
        }
        in_lock_order(&mut parts);
        let (tables, locks) = lock_keys(&parts);
        let keys = RowKeys::of(&parts);
        let mut connection = self.awaited.borrow().await?;
        let connection = &mut connection;
        connection.in_transaction = true;
        let read = connection
            .pipeline(&[
                (BEGIN, Vec::new()),
                (LOCK_TABLES, vec![&tables]),
                (LOCK_PARTITIONS, vec![&locks]),
                (CATALOGS, vec![&tables]),
                (across::READ_ROWS, keys.params().to_vec()),
            ])
            .await?;
        let (catalog_rows, rows) = match first_error(read) {
            Ok(mut answers) => {
                let rows = answers.pop().unwrap_or_default();
                (answers.pop().unwrap_or_default(), rows)
            }
            Err(error) => return rolled_back(connection, error).await,
        };
        let catalogs = catalogs_of(&catalog_rows)?;
        let plain = catalogs
            .values()
            .all(|c| c.indexes.is_empty() && c.dropped.is_empty());
        if table_gone(&parts, &catalogs).is_some() || !plain {
            // A table known here was deleted (its name may be another's now) or took an index:
            // the blocking path looks the tables up afresh.
            connection.end(ROLLBACK).await?;
            return Ok(None);
        }
        let mut plans = match plan_parts(&parts, &rows, &catalogs)? {
            Ok(plans) => plans,
            Err(rejection) => {
                connection.end(ROLLBACK).await?;
                return Ok(Some(Err(rejection)));
            }
        };
        across::seal_plans(&parts, &mut plans, operations);
        let (written, removed) = rows_of(&parts, &plans);
        let records = feed_records(&parts, &plans, &catalogs);
        let mut write: Vec<Pipelined<'_>> = Vec::new();
        if !written.tables.is_empty() {
            write.push((across::WRITE_ROWS, written.params().to_vec()));
        }
        if !removed.tables.is_empty() {
            write.push((across::DELETE_ROWS, removed.params()[..3].to_vec()));
        }
        for part in &records {
            if !part.records.is_empty() {
                let PartRecords {
                    table,
                    numbers,
                    records,
                    at,
                } = part;
                write.push((WRITE_RECORDS, vec![table, numbers, records, at]));
            }
        }
        write.push((COMMIT, Vec::new()));
        let outcome = commit_written(connection, &write).await?;
        Ok(outcome.map(|()| Ok(across::committed(&parts, plans, operations))))
    }
}

/// The live tables' catalogs, by id, from the rows of [`CATALOGS`].
fn catalogs_of(rows: &[Row]) -> Result<HashMap<i64, IndexCatalog>, StorageError> {
    let mut catalogs = HashMap::with_capacity(rows.len());
    for row in rows {
        catalogs.insert(row.get::<_, i64>(0), IndexCatalog::decode(row.get(1))?);
    }
    Ok(catalogs)
}

/// One part's change records: [`WRITE_RECORDS`]'s parameters.
struct PartRecords {
    table: i64,
    numbers: Vec<i32>,
    records: Vec<Vec<u8>>,
    at: i64,
}

/// The change records of the parts whose tables keep a feed, numbered through the whole
/// transaction.
fn feed_records(
    parts: &[Part<'_>],
    plans: &[CommitPlan],
    catalogs: &HashMap<i64, IndexCatalog>,
) -> Vec<PartRecords> {
    let mut records = Vec::new();
    let mut first = 0;
    for (part, plan) in parts.iter().zip(plans) {
        if catalogs[&part.table.id].change_feed.is_some() {
            let (numbers, part_records) = numbered_records(plan, &part.batch.partition_key, first);
            first += numbers.len() as i32;
            records.push(PartRecords {
                table: part.table.id,
                numbers,
                records: part_records,
                at: plan.stamped.0,
            });
        }
    }
    records
}

/// Sends a commit's second round trip, `write` (ending in `COMMIT`): `Some` once committed,
/// `None` (nothing written) if the database asked for the transaction to be run again.
async fn commit_written(
    connection: &mut Borrowed<'_>,
    write: &[Pipelined<'_>],
) -> Result<Option<()>, StorageError> {
    let written = connection.pipeline(write).await?;
    // After a failed statement the `COMMIT` rolls back: the transaction has ended if it
    // answered.
    connection.in_transaction = written.last().is_none_or(Result::is_err);
    match first_error(written) {
        Ok(_) => Ok(Some(())),
        Err(error) if database_error(&error).is_some_and(is_retryable) => Ok(None),
        Err(error) => Err(error),
    }
}

/// The answers of a pipeline, or the first error among them (the later ones follow from it).
fn first_error<T>(answers: Vec<Result<T, StorageError>>) -> Result<Vec<T>, StorageError> {
    answers.into_iter().collect()
}

/// The answer to a commit whose first round trip failed with `error`: rolled back, and then
/// `None` (the full path runs it again) if the database asked for that, else the error.
async fn rolled_back(
    connection: &mut Borrowed<'_>,
    error: StorageError,
) -> Result<Option<CommitOutcome>, StorageError> {
    connection.end(ROLLBACK).await?;
    match database_error(&error).is_some_and(is_retryable) {
        true => Ok(None),
        false => Err(error),
    }
}
