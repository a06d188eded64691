//! Inserts in one round trip: a commit of inserts only into a table without indexes is one
//! prepared call of `trestle_insert_rows` (a function the schema declares) in a transaction of
//! its own. The function takes the table's and the partition's locks, then inserts the rows (and
//! their change records, if the table keeps a feed) if the table's catalog is still the one the
//! commit was planned by; each of its statements reads the database as it is when the statement
//! starts, so the catalog is checked with the locks held, as the full path (`table.rs`, three
//! round trips) reads it. The transaction holds its id only inside the database, never across a
//! round trip: feed readers, who read below the oldest transaction running, wait less.

use postgres::types::ToSql;
use postgres::Client;

use super::pool::{is_unique_violation, Prepared};
use super::sql::partition_lock;
use super::table::{planned_rows, PostgresTable};
use crate::model::{plan_commit, ChangeFeed, Operation, PlanRules, Ticks, TimeToLive};
use crate::storage::{changes, Committed, IndexCatalog, StorageError};

/// Calls the schema's function: its transaction is the statement's own.
const INSERT_ROWS: &str = "SELECT trestle_insert_rows($1, $2, $3, $4, $5, $6, $7, $8)";

/// The stored catalog of a table, as a commit last read it, when it lets inserts go in one round
/// trip (no index, no index being dropped).
#[derive(Debug)]
pub(super) struct PlainCatalog {
    /// The catalog's bytes as stored: the one-trip insert checks the database still has them.
    stored: Vec<u8>,
    time_to_live: Option<TimeToLive>,
    change_feed: Option<ChangeFeed>,
}

impl PlainCatalog {
    /// The catalog stored as `stored`, if it is plain.
    pub(super) fn of(stored: &[u8], catalog: &IndexCatalog) -> Option<PlainCatalog> {
        let plain = catalog.indexes.is_empty() && catalog.dropped.is_empty();
        plain.then(|| PlainCatalog {
            stored: stored.to_vec(),
            time_to_live: catalog.time_to_live,
            change_feed: catalog.change_feed,
        })
    }
}

/// How a one-trip insert went.
pub(super) enum OneTrip {
    /// Committed.
    Done(Committed),
    /// Not tried, refused by the plan, or the table's catalog was not the one planned by (or the
    /// table is gone): nothing written; the full path decides.
    NotTaken,
    /// A row exists: rolled back; the full path reads the rows to refuse the right operation.
    RowExists,
}

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
        let Some(catalog) = self.plain_catalog() else {
            return Ok(OneTrip::NotTaken);
        };
        let rules = PlanRules {
            indexes: &[],
            time_to_live: catalog.time_to_live,
            before_images: catalog.change_feed.is_some_and(|feed| feed.before_images),
        };
        let current = operations.iter().map(|_| None).collect();
        let planned = plan_commit(
            partition_key,
            operations.to_vec(),
            current,
            Ticks::next_commit(),
            rules,
        );
        // Refused by the catalog as last read, which may be stale (another server may have turned
        // expiry off): the full path plans again by the catalog under the lock.
        let Ok(plan) = planned else {
            return Ok(OneTrip::NotTaken);
        };
        let rows = planned_rows(&plan);
        let changes = match catalog.change_feed {
            Some(_) => changes::records_of(&plan, partition_key),
            None => Vec::new(),
        };
        let insert_rows = prepared.get(client, INSERT_ROWS)?;
        let params: [&(dyn ToSql + Sync); 8] = [
            &self.id,
            &partition_lock(self.id, partition_key),
            &catalog.stored,
            &partition_key.as_bytes(),
            &rows.written,
            &rows.records,
            &plan.stamped.0,
            &changes,
        ];
        let inserted: i64 = match client.query_one(&insert_rows, &params) {
            Ok(row) => row.get(0),
            Err(error) => {
                let error = StorageError::from(error);
                if is_unique_violation(&error) {
                    return Ok(OneTrip::RowExists);
                }
                return Err(error);
            }
        };
        if inserted != rows.written.len() as i64 {
            // The catalog changed (or the table is gone): nothing was written.
            self.forget_plain_catalog();
            return Ok(OneTrip::NotTaken);
        }
        Ok(OneTrip::Done(Committed {
            stored: plan.results,
            ticket: None,
        }))
    }
}
