//! Inserts in one round trip: a commit of inserts only into a table without indexes is one
//! prepared call of `trestle_insert_rows` (a function the schema declares) in a transaction of
//! its own. The function takes the table's and the partition's locks, then inserts the rows (and
//! their change records, if the table keeps a feed) if the table's catalog is still the one the
//! commit was planned by; each of its statements reads the database as it is when the statement
//! starts, so the catalog is checked with the locks held, as the full path (`table.rs`, three
//! round trips) reads it. The transaction holds its id only inside the database, never across a
//! round trip: feed readers, who read below the oldest transaction running, wait less. Served
//! awaited, single-entity inserts go together instead (`insert_batches.rs`).

use std::sync::Arc;

use postgres::types::ToSql;

use super::rows::PlannedRows;
use super::sql::partition_lock;
use crate::model::{plan_commit, ChangeFeed, CommitPlan, Operation, PlanRules, Ticks, TimeToLive};
use crate::storage::{changes, seal_record, Committed, IndexCatalog, PartitionBatch};

/// Calls the schema's function: its transaction is the statement's own.
pub(super) const INSERT_ROWS: &str = "SELECT trestle_insert_rows($1, $2, $3, $4, $5, $6, $7, $8)";

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

    /// The catalog's bytes as stored (a commit planned by it checks the database still has them).
    pub(super) fn stored(&self) -> &Vec<u8> {
        &self.stored
    }

    /// What a commit is planned by.
    pub(super) fn plan_rules(&self) -> PlanRules<'static> {
        PlanRules {
            indexes: &[],
            time_to_live: self.time_to_live,
            before_images: self.change_feed.is_some_and(|feed| feed.before_images),
        }
    }

    /// Whether a commit reads its rows' properties whole (to see their expiry, or to keep them
    /// in its change records), as [`IndexCatalog::reads_rows_whole`].
    pub(super) fn reads_rows_whole(&self) -> bool {
        let rules = self.plan_rules();
        rules.time_to_live.is_some() || rules.before_images
    }

    /// Whether the table keeps a change feed.
    pub(super) fn keeps_change_feed(&self) -> bool {
        self.change_feed.is_some()
    }
}

/// The change records of `plan` (on `partition_key`), if `catalog` keeps a feed.
fn changes_of(catalog: &PlainCatalog, plan: &CommitPlan, partition_key: &str) -> Vec<Vec<u8>> {
    match catalog.change_feed {
        Some(_) => changes::records_of(plan, partition_key),
        None => Vec::new(),
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

/// A one-trip insert planned, ready to be sent ([`OneTripInsert::params`], [`INSERT_ROWS`]).
pub(super) struct OneTripInsert {
    catalog: Arc<PlainCatalog>,
    partition_lock: i64,
    partition_key: Vec<u8>,
    plan: CommitPlan,
    changes: Vec<Vec<u8>>,
}

impl OneTripInsert {
    /// The one-trip insert of `operations` into table `table_id` if they are inserts only and the
    /// plan by `catalog` (the table's, as last read) takes them.
    pub(super) fn planned(
        table_id: i64,
        catalog: Arc<PlainCatalog>,
        partition_key: &str,
        operations: &[Operation],
    ) -> Option<OneTripInsert> {
        if !operations.iter().all(|o| matches!(o, Operation::Insert(_))) {
            return None;
        }
        let rules = catalog.plan_rules();
        let current = operations.iter().map(|_| None).collect();
        // Refused by the catalog as last read, which may be stale (another server may have turned
        // expiry off): the full path plans again by the catalog under the lock.
        let plan = plan_commit(
            partition_key,
            operations.to_vec(),
            current,
            Ticks::next_commit(),
            rules,
        )
        .ok()?;
        let changes = changes_of(&catalog, &plan, partition_key);
        Some(OneTripInsert {
            partition_lock: partition_lock(table_id, partition_key),
            partition_key: partition_key.as_bytes().to_vec(),
            catalog,
            plan,
            changes,
        })
    }

    /// Seals the outcome of the commit of `inserts` (its every batch, each with its insert
    /// planned) into its idempotency record ([`crate::storage::seal_record`]), and makes the
    /// record's change records again.
    pub(super) fn seal(inserts: [(&PartitionBatch, &mut OneTripInsert); 2], operations: usize) {
        let [(first_batch, first), (second_batch, second)] = inserts;
        let mut plans = [
            (first_batch, &mut first.plan),
            (second_batch, &mut second.plan),
        ];
        let (sealed, batch) = match seal_record(&mut plans, operations) {
            Some(0) => (first, first_batch),
            Some(_) => (second, second_batch),
            None => return,
        };
        sealed.changes = changes_of(&sealed.catalog, &sealed.plan, &batch.partition_key);
    }

    /// The commit's plan.
    pub(super) fn plan(&self) -> &CommitPlan {
        &self.plan
    }

    /// The catalog the commit was planned by.
    pub(super) fn catalog(&self) -> &Arc<PlainCatalog> {
        &self.catalog
    }

    /// The partition's lock key.
    pub(super) fn partition_lock(&self) -> i64 {
        self.partition_lock
    }

    /// The partition's key, as stored.
    pub(super) fn partition_key(&self) -> &[u8] {
        &self.partition_key
    }

    /// Whether the commit inserts one entity: such inserts are sent together
    /// (`insert_batches.rs`).
    pub(super) fn is_single(&self) -> bool {
        self.plan.changes.len() == 1
    }

    /// The entity of a single insert: its partition and row keys.
    pub(super) fn key(&self) -> (&[u8], &[u8]) {
        let row_key = self
            .plan
            .changes
            .first()
            .map_or("", |change| &change.row_key);
        (&self.partition_key, row_key.as_bytes())
    }

    /// The change record of a single insert, if the table keeps a feed.
    pub(super) fn change(&self) -> Option<&[u8]> {
        self.changes.first().map(Vec::as_slice)
    }

    /// What the commit stored, once done.
    pub(super) fn committed(self) -> Committed {
        Committed {
            stored: self.plan.results,
            ticket: None,
        }
    }

    /// The parameters of [`INSERT_ROWS`] for table `table_id`, the plan's `rows` given.
    pub(super) fn params<'a>(
        &'a self,
        table_id: &'a i64,
        rows: &'a PlannedRows<'a>,
    ) -> [&'a (dyn ToSql + Sync); 8] {
        [
            table_id,
            &self.partition_lock,
            &self.catalog.stored,
            &self.partition_key,
            &rows.written,
            &rows.records,
            &self.plan.stamped.0,
            &self.changes,
        ]
    }
}
