//! Commits of any operations on one partition of a table without indexes, over an awaited
//! connection in two round trips, holding no thread while the database answers: the first begins
//! the transaction, takes the table's lock (shared) and the partition's, and reads the rows the
//! operations act on with whether the table is still live with the catalog the commit is planned
//! by; the commit is planned here (`model::plan_commit`, as every commit is); the second writes
//! and removes the rows, writes the change records if the table keeps a feed, and commits. Each
//! round trip is a pipeline of statements sent together ([`Borrowed::pipeline`]).
//!
//! A refusal rolls back and is the commit's answer. If the table's catalog changed or the table
//! is gone, or the database asks for the transaction to be run again (a deadlock, which the
//! partitions' locks taken in one order leave to engines without advisory locks), nothing is
//! written and the full path (`table.rs`) decides. A call dropped between its round trips leaves
//! its connection inside the transaction: that connection is closed, not lent again, and the
//! database rolls the transaction back.

use super::awaited::{Borrowed, Pipelined};
use super::changes::{numbered_records, WRITE_RECORDS};
use super::pool::{database_error, is_retryable};
use super::sql::partition_lock;
use super::table::{current_entities_of, planned_rows, PostgresTable, DELETE_ROWS, WRITE_ROWS};
use crate::model::{plan_commit, Operation, Ticks};
use crate::storage::{CommitOutcome, Committed, StorageError};

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
            end(connection, ROLLBACK).await?;
            return Ok(None);
        };
        let now = Ticks::next_commit();
        let rules = catalog.plan_rules();
        let plan = match plan_commit(partition_key, operations.to_vec(), current, now, rules) {
            Ok(plan) => plan,
            Err(refused) => {
                end(connection, ROLLBACK).await?;
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
        let written = connection.pipeline(&write).await?;
        // After a failed statement the `COMMIT` rolls back: the transaction has ended if it
        // answered.
        connection.in_transaction = written.last().is_none_or(Result::is_err);
        match first_error(written) {
            Ok(_) => Ok(Some(Ok(Committed {
                stored: plan.results,
                ticket: None,
            }))),
            Err(error) if database_error(&error).is_some_and(is_retryable) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

/// The answers of a pipeline, or the first error among them (the later ones follow from it).
fn first_error<T>(answers: Vec<Result<T, StorageError>>) -> Result<Vec<T>, StorageError> {
    answers.into_iter().collect()
}

/// Ends the transaction of `connection` with `sql` (`COMMIT` or `ROLLBACK`).
async fn end(connection: &mut Borrowed<'_>, sql: &'static str) -> Result<(), StorageError> {
    first_error(connection.pipeline(&[(sql, Vec::new())]).await?)?;
    connection.in_transaction = false;
    Ok(())
}

/// The answer to a commit whose first round trip failed with `error`: rolled back, and then
/// `None` (the full path runs it again) if the database asked for that, else the error.
async fn rolled_back(
    connection: &mut Borrowed<'_>,
    error: StorageError,
) -> Result<Option<CommitOutcome>, StorageError> {
    end(connection, ROLLBACK).await?;
    match database_error(&error).is_some_and(is_retryable) {
        true => Ok(None),
        false => Err(error),
    }
}
