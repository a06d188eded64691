//! Pages of queries read awaited ([`crate::storage::AwaitedCalls::read_snapshot`]): a read-only
//! `REPEATABLE READ` transaction over an awaited connection, begun in the same round trip as the
//! table's lookup by name, so that the table read is the one live at the snapshot's instant (one
//! deleted and created again by another server is the new one, never a stale id). Each range is
//! then read in key order, [`SCAN_BATCH`] rows a statement, each statement starting past the last
//! row of the one before: the rows of one snapshot, as the blocking path's portal reads them.

use std::sync::Arc;

use tokio_postgres::types::ToSql;

use super::awaited::Borrowed;
use super::sql::{row_keys, visit_rows, SCAN_BATCH};
use super::table::{range_query, PostgresTable};
use super::{PostgresStore, FIND_TABLE};
use crate::model::{KeyPosition, KeyRange, TableName};
use crate::storage::{
    in_scan_order, AwaitedSnapshot, SendVisitor, StorageError, StoreFuture, Table,
};

const BEGIN_SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
/// Rows are read in an index's order, never sorted (see `sql::read_snapshot`).
const NO_SORT: &str = "SET LOCAL enable_sort = off";
const COMMIT: &str = "COMMIT";

/// A table at one instant, over a connection borrowed for it.
pub(super) struct ReadSnapshot<'a> {
    connection: Borrowed<'a>,
    table: Arc<PostgresTable>,
}

impl PostgresStore {
    /// Begins a snapshot and looks the live table `name` up in it, in one round trip: `None`
    /// (the transaction ended) if there is none.
    pub(super) async fn open_snapshot(
        &self,
        name: &TableName,
    ) -> Result<Option<ReadSnapshot<'_>>, StorageError> {
        let mut connection = self.awaited.borrow().await?;
        connection.in_transaction = true;
        let folded = name.folded();
        let answers = connection
            .pipeline(&[
                (BEGIN_SNAPSHOT, Vec::new()),
                (NO_SORT, Vec::new()),
                (FIND_TABLE, vec![&folded]),
            ])
            .await?;
        let mut answers = answers.into_iter().collect::<Result<Vec<_>, _>>()?;
        let Some(row) = answers.pop().unwrap_or_default().into_iter().next() else {
            connection.end(COMMIT).await?;
            return Ok(None);
        };
        let table = self.table_of_row(&row)?;
        Ok(Some(ReadSnapshot { connection, table }))
    }
}

impl ReadSnapshot<'_> {
    /// Visits `range` a batch at a time; where the visitor stopped, if it did.
    async fn visit_range(
        &mut self,
        range: &KeyRange,
        reverse: bool,
        visitor: &mut SendVisitor<'_>,
    ) -> Result<Option<KeyPosition>, StorageError> {
        let limit = format!(" LIMIT {SCAN_BATCH}");
        let mut rest = range.clone();
        while !rest.is_empty() {
            let (sql, params) = range_query(self.table.id, &rest, reverse, &limit);
            let params: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref() as _).collect();
            let rows = self.connection.query(&sql, &params).await?;
            let full = rows.len() == SCAN_BATCH as usize;
            let last = match (full, rows.last()) {
                (true, Some(row)) => {
                    let (partition_key, row_key) = row_keys(row)?;
                    Some(KeyPosition::row(partition_key, row_key))
                }
                _ => None,
            };
            if let Some(stopped) = visit_rows(rows, visitor)? {
                return Ok(Some(KeyPosition::row(
                    stopped.partition_key,
                    stopped.row_key,
                )));
            }
            let Some(last) = last else {
                break;
            };
            rest = rest.past(&last, reverse);
        }
        Ok(None)
    }
}

impl AwaitedSnapshot for ReadSnapshot<'_> {
    fn table(&self) -> Arc<dyn Table> {
        self.table.clone()
    }

    fn visit<'a>(
        &'a mut self,
        ranges: &'a [KeyRange],
        reverse: bool,
        visitor: &'a mut SendVisitor<'_>,
    ) -> StoreFuture<'a, Option<KeyPosition>> {
        Box::pin(async move {
            let ranges: Vec<&KeyRange> = in_scan_order(ranges, reverse).collect();
            for range in ranges {
                let stopped = self.visit_range(range, reverse, visitor).await?;
                if stopped.is_some() {
                    return Ok(stopped);
                }
            }
            Ok(None)
        })
    }

    fn end(&mut self) -> StoreFuture<'_, ()> {
        Box::pin(self.connection.end(COMMIT))
    }
}
