//! Queries read awaited ([`crate::storage::AwaitedCalls::read_snapshot`]): a read-only
//! `REPEATABLE READ` transaction over an awaited connection, begun in the same round trip as the
//! table's lookup by name, so that the table read is the one live at the snapshot's instant (one
//! deleted and created again by another server is the new one, never a stale id); a chunk of a
//! streamed query begins one without a lookup, reading the table the stream looked up. Each range
//! is read in key order, as many rows a statement as [`ScanBatches`] says, each statement starting
//! past the last row of the one before: the rows of one snapshot, as the blocking path's portal
//! reads them.
//! Rows are shown as they arrive, never collected first: a page holds the rows it uses, not its
//! batch. A snapshot ends with a `COMMIT` sent, not waited for (`Borrowed::end_unanswered`).
//! Snapshots hold at most half of the awaited connections (`AwaitedPool::borrow_for_query`):
//! the rest stay for point reads and commits, however many queries run.

use std::sync::Arc;

use futures_util::TryStreamExt;
use tokio::sync::SemaphorePermit;
use tokio_postgres::types::ToSql;

use super::awaited_pool::Borrowed;
use super::scan_batches::{BatchTally, ScanBatches, TableBatches};
use super::sql::show_row;
use super::table::{range_query, PostgresTable};
use super::{PostgresStore, FIND_TABLE};
use crate::model::{KeyPosition, KeyRange, TableName};
use crate::storage::{AwaitedSnapshot, KeyScan, SendVisitor, StorageError, StoreFuture, Visit};

const BEGIN_SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
/// Rows are read in an index's order, never sorted (see `sql::read_snapshot`).
const NO_SORT: &str = "SET LOCAL enable_sort = off";
const COMMIT: &str = "COMMIT";

/// The store at one instant, over a connection borrowed for it.
pub(super) struct ReadSnapshot<'a> {
    connection: Borrowed<'a>,
    _query: SemaphorePermit<'a>,
    batches: &'a ScanBatches,
}

impl PostgresStore {
    /// Begins a snapshot and, if `name` is given, looks the live table `name` up in it, in one
    /// round trip: the snapshot and the table (`None` if there is none: the snapshot ended).
    pub(super) async fn open_snapshot(
        &self,
        name: Option<&TableName>,
    ) -> Result<(ReadSnapshot<'_>, Option<Arc<PostgresTable>>), StorageError> {
        let (query, mut connection) = self.awaited.borrow_for_query().await?;
        connection.in_transaction = true;
        let folded = name.map(TableName::folded);
        let mut statements = vec![(BEGIN_SNAPSHOT, Vec::new()), (NO_SORT, Vec::new())];
        if let Some(folded) = &folded {
            statements.push((FIND_TABLE, vec![folded as _]));
        }
        let answers = connection.pipeline(&statements).await?;
        let mut answers = answers.into_iter().collect::<Result<Vec<_>, _>>()?;
        let mut snapshot = ReadSnapshot {
            connection,
            _query: query,
            batches: &self.scan_batches,
        };
        if name.is_none() {
            return Ok((snapshot, None));
        }
        let Some(row) = answers.pop().unwrap_or_default().into_iter().next() else {
            snapshot.connection.end(COMMIT).await?;
            return Ok((snapshot, None));
        };
        Ok((snapshot, Some(self.table_of_row(&row)?)))
    }
}

impl ReadSnapshot<'_> {
    /// Visits `range` of table `table_id` a batch at a time, each row as it arrives; where the
    /// visitor stopped, if it did.
    async fn visit_range(
        &mut self,
        table_id: i64,
        range: &KeyRange,
        reverse: bool,
        batches: &mut TableBatches<'_>,
        visitor: &mut SendVisitor<'_>,
    ) -> Result<Option<KeyPosition>, StorageError> {
        let mut rest = range.clone();
        while !rest.is_empty() {
            let asked = batches.rows();
            let (sql, params) = range_query(table_id, &rest, reverse, &format!(" LIMIT {asked}"));
            let params: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref() as _).collect();
            let rows = self.connection.query_rows(&sql, &params).await?;
            let mut rows = std::pin::pin!(rows);
            let (mut tally, mut last) = (BatchTally::default(), None);
            while let Some(row) = rows.try_next().await? {
                let (partition_key, row_key, visit) = show_row(&row, visitor, &mut tally)?;
                if visit == Visit::Stop {
                    batches.observe(&tally);
                    return Ok(Some(KeyPosition::row(partition_key, row_key)));
                }
                if tally.rows == asked as usize {
                    last = Some(KeyPosition::row(partition_key, row_key));
                }
            }
            batches.observe(&tally);
            // A batch cut short by its limit goes on past its last row; a shorter one was all.
            let Some(last) = last else {
                break;
            };
            rest = rest.past(&last, reverse);
        }
        Ok(None)
    }
}

impl AwaitedSnapshot for ReadSnapshot<'_> {
    fn visit<'a>(
        &'a mut self,
        table_id: u64,
        scan: KeyScan<'a>,
        visitor: &'a mut SendVisitor<'_>,
    ) -> StoreFuture<'a, Option<KeyPosition>> {
        Box::pin(async move {
            let ranges: Vec<&KeyRange> = scan.ranges_in_order().collect();
            let mut batches = TableBatches::new(self.batches, table_id as i64, scan.expected_rows);
            for range in ranges {
                let stopped = self
                    .visit_range(table_id as i64, range, scan.reverse, &mut batches, visitor)
                    .await?;
                if stopped.is_some() {
                    return Ok(stopped);
                }
            }
            Ok(None)
        })
    }

    fn end(&mut self) -> StoreFuture<'_, ()> {
        self.connection.end_unanswered(COMMIT);
        Box::pin(std::future::ready(Ok(())))
    }
}
