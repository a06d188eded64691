//! A table's inserts in one round trip (`one_trip.rs`): over a blocking connection, or awaited,
//! a single-entity insert waiting with the others to go together (`insert_batches.rs`); and how
//! each went, which sends the commit the full way when the table's catalog changed or a row
//! exists.

use std::sync::Arc;

use postgres::Client;

use super::awaited_pool::AwaitedPool;
use super::insert_batches::Sent;
use super::one_trip::{OneTrip, OneTripInsert, INSERT_ROWS};
use super::pool::{is_unique_violation, Prepared};
use super::rows::planned_rows;
use super::table::PostgresTable;
use crate::model::Operation;
use crate::storage::StorageError;

impl PostgresTable {
    /// Commits `operations`, inserts only, in one round trip over `client` if the table's
    /// catalog as last read is plain.
    pub(super) fn insert_in_one_trip(
        &self,
        client: &mut Client,
        prepared: &mut Prepared<'_>,
        partition_key: &str,
        operations: &[Operation],
    ) -> Result<OneTrip, StorageError> {
        let Some(insert) = self.plan_one_trip(partition_key, operations) else {
            return Ok(OneTrip::NotTaken);
        };
        let sent = (|| {
            let insert_rows = prepared.get(client, INSERT_ROWS)?;
            let rows = planned_rows(insert.plan());
            let params = insert.params(&self.id, &rows);
            Ok(client.query_one(&insert_rows, &params)?.get(0))
        })();
        self.one_trip_outcome(insert, sent)
    }

    /// The one-trip insert of `operations` if they are inserts only, the table's catalog as last
    /// read is plain and the plan by it takes them.
    pub(super) fn plan_one_trip(
        &self,
        partition_key: &str,
        operations: &[Operation],
    ) -> Option<OneTripInsert> {
        OneTripInsert::planned(self.id, self.plain_catalog()?, partition_key, operations)
    }

    /// How `insert` went, given what [`INSERT_ROWS`] answered (the rows it inserted).
    pub(super) fn one_trip_outcome(
        &self,
        insert: OneTripInsert,
        sent: Result<i64, StorageError>,
    ) -> Result<OneTrip, StorageError> {
        let inserted = match sent {
            Ok(inserted) => inserted,
            Err(error) if is_unique_violation(&error) => return Ok(OneTrip::RowExists),
            Err(error) => return Err(error),
        };
        let written = insert.plan().changes.iter().filter(|change| change.writes);
        if inserted != written.count() as i64 {
            // The catalog changed (or the table is gone): nothing was written.
            self.forget_plain_catalog();
            return Ok(OneTrip::NotTaken);
        }
        Ok(OneTrip::Done(insert.committed()))
    }

    /// Sends `insert` (one entity, planned by the table's plain catalog) with the others
    /// waiting, over `pool`: how it went.
    pub(super) async fn insert_together(
        &self,
        pool: &Arc<AwaitedPool>,
        insert: OneTripInsert,
    ) -> Result<OneTrip, StorageError> {
        let (insert, sent) = self.insert_batches.send(pool, insert).await?;
        Ok(match sent? {
            Sent::Inserted => OneTrip::Done(insert.committed()),
            Sent::RowExists => OneTrip::RowExists,
            Sent::CatalogChanged => {
                self.forget_plain_catalog();
                OneTrip::NotTaken
            }
        })
    }
}
