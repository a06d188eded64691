//! A table of the PostgreSQL store: point reads (one statement), commits (one database
//! transaction under the partition's advisory lock: here, on the blocking connections, four
//! round trips whatever its size, three for inserts only; awaited, on a table without indexes,
//! one for inserts (`one_trip.rs`) and two for any other (`pipelined.rs`)) and scans (one
//! statement per range, fetched through a portal a batch at a time).

use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError};

use postgres::types::ToSql;
use postgres::Transaction;

use super::insert_batches::InsertBatches;
use super::keyed_inserts::KeyedInsertBatches;
use super::one_trip::{OneTrip, PlainCatalog};
use super::pool::{is_unique_violation, retrying, Pool, Prepared};
use super::records;
use super::rows::{planned_rows, PlannedRows};
use super::scan_batches::{ScanBatches, TableBatches};
use super::sql::{from_hex, partition_lock, read_snapshot, table_lock, visit_portal};
use crate::model::{
    plan_commit, CommitPlan, EntityKey, KeyPosition, KeyRange, Operation, RowPosition,
    StoredEntity, TableName, Ticks,
};
use crate::storage::{
    codec, CommitOutcome, Committed, EntityView, FeedBatch, FeedEnd, FeedPosition, IndexCatalog,
    KeyScan, RejectReason, Rejection, StorageError, StoredChange, Table, Visitor,
};

const GET: &str = "SELECT t.live, e.record FROM trestle_tables t
    LEFT JOIN trestle_entities e ON e.table_id = t.id AND e.pk = $2 AND e.rk = $3
    WHERE t.id = $1";

/// Whether the table is live (read after the lock: a later snapshot) and the rows the commit
/// touches.
const READ_ROWS: &str = "SELECT t.live, e.rk, e.record FROM trestle_tables t
    LEFT JOIN trestle_entities e ON e.table_id = t.id AND e.pk = $2 AND e.rk = ANY($3)
    WHERE t.id = $1";
pub(super) const WRITE_ROWS: &str = "INSERT INTO trestle_entities (table_id, pk, rk, record)
    SELECT $1, $2, w.rk, w.record FROM unnest($3::bytea[], $4::bytea[]) AS w(rk, record)
    ON CONFLICT (table_id, pk, rk) DO UPDATE SET record = EXCLUDED.record";
/// Inserts rows that must not exist (a unique violation if one does) into a live table.
const INSERT_ROWS: &str = "INSERT INTO trestle_entities (table_id, pk, rk, record)
    SELECT $1, $2, w.rk, w.record FROM unnest($3::bytea[], $4::bytea[]) AS w(rk, record)
    WHERE EXISTS (SELECT 1 FROM trestle_tables WHERE id = $1 AND live)";
pub(super) const DELETE_ROWS: &str = "DELETE FROM trestle_entities
    WHERE table_id = $1 AND pk = $2 AND rk = ANY($3)";

/// Commits the transaction `client` is in if `outcome` is a commit, rolls it back otherwise.
/// (A rollback that fails has lost the connection, which the pool replaces; the first error is
/// the one told.)
pub(super) fn end_transaction(
    client: &mut postgres::Client,
    outcome: Result<CommitOutcome, StorageError>,
) -> Result<CommitOutcome, StorageError> {
    match outcome {
        Ok(Ok(_)) => client.batch_execute("COMMIT")?,
        Ok(Err(_)) => client.batch_execute("ROLLBACK")?,
        Err(_) => {
            let _ = client.batch_execute("ROLLBACK");
        }
    }
    outcome
}

/// The refusal of a commit to a table deleted meanwhile.
fn table_gone() -> Rejection {
    Rejection {
        index: 0,
        reason: RejectReason::TableGone,
    }
}

/// A live table of the PostgreSQL store.
#[derive(Debug)]
pub struct PostgresTable {
    pub(super) id: i64,
    pub(super) name: TableName,
    pub(super) pool: Arc<Pool>,
    /// How many rows its scans ask for at a time (shared by the store's tables).
    pub(super) scan_batches: Arc<ScanBatches>,
    /// The table's indexes as of its lookup (commits read them afresh).
    pub(super) catalog: IndexCatalog,
    /// The table's catalog as a commit last read it, if it lets inserts go in one round trip.
    pub(super) plain: Mutex<Option<Arc<PlainCatalog>>>,
    /// Its single-entity inserts on their way, sent together (awaited).
    pub(super) insert_batches: InsertBatches,
    /// Its single-entity inserts with an idempotency key on their way, sent together (awaited).
    pub(super) keyed_insert_batches: KeyedInsertBatches,
}

impl Table for PostgresTable {
    fn read_changes(
        &self,
        after: Option<FeedPosition>,
        limit: FeedBatch,
    ) -> Result<Vec<StoredChange>, StorageError> {
        self.changes_after(after, limit)
    }

    fn trim_changes(&self, before: Ticks, limit: usize) -> Result<usize, StorageError> {
        self.trim_before(before, limit)
    }

    fn feed_trimmed_to(&self) -> Result<Option<FeedPosition>, StorageError> {
        self.trimmed_to()
    }

    fn feed_end(&self) -> Result<FeedEnd, StorageError> {
        self.end()
    }

    fn name(&self) -> &TableName {
        &self.name
    }

    fn id(&self) -> u64 {
        self.id as u64
    }

    fn get(
        &self,
        key: &EntityKey,
        read: &mut dyn FnMut(EntityView<'_>) -> Result<(), StorageError>,
    ) -> Result<bool, StorageError> {
        let params: [&(dyn ToSql + Sync); 3] = [
            &self.id,
            &key.partition_key.as_bytes(),
            &key.row_key.as_bytes(),
        ];
        // No row: the table is gone, its catalog row purged too.
        let Some(row) = self.pool.query_opt(GET, &params)? else {
            return Ok(false);
        };
        let live: bool = row.get(0);
        let record: Option<&[u8]> = row.get(1);
        match record {
            Some(record) if live => {
                read(EntityView::parse(&key.partition_key, &key.row_key, record)?)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn visit(
        &self,
        scan: KeyScan<'_>,
        visitor: &mut Visitor<'_>,
    ) -> Result<Option<KeyPosition>, StorageError> {
        let reverse = scan.reverse;
        self.pool.with(|connection| {
            let (client, mut prepared) = connection.parts();
            // One snapshot for the whole call: every partition is seen at one instant, never
            // half a commit, however many fetches its rows take.
            let mut snapshot = read_snapshot(client)?;
            let mut batches = self.batches(scan.expected_rows);
            for range in scan.ranges_in_order() {
                let stop = self.visit_range(
                    &mut snapshot,
                    &mut prepared,
                    range,
                    reverse,
                    &mut batches,
                    visitor,
                )?;
                if stop.is_some() {
                    return Ok(stop);
                }
            }
            Ok(None)
        })
    }
}

impl PostgresTable {
    /// A commit on one partition (`commit.rs`): one database transaction, run again (from a fresh read) after a
    /// serialization failure or a deadlock, which engines without advisory locks may raise.
    pub(super) fn commit_operations(
        &self,
        partition_key: &str,
        operations: &[Operation],
    ) -> Result<CommitOutcome, StorageError> {
        let inserts_only = operations.iter().all(|o| matches!(o, Operation::Insert(_)));
        retrying(|| {
            self.pool.with(|connection| {
                let (client, mut prepared) = connection.parts();
                let mut inserts_only = inserts_only;
                if inserts_only {
                    match self.insert_in_one_trip(
                        client,
                        &mut prepared,
                        partition_key,
                        operations,
                    )? {
                        OneTrip::Done(committed) => return Ok(Ok(committed)),
                        OneTrip::NotTaken => {}
                        OneTrip::RowExists => inserts_only = false,
                    }
                }
                let mut commit = |client: &mut postgres::Client, inserts_only| {
                    let catalog = self.begin_locked(client, partition_key)?;
                    let (tx, catalog) = (&mut *client, &catalog);
                    self.commit_in(
                        tx,
                        &mut prepared,
                        catalog,
                        partition_key,
                        operations,
                        inserts_only,
                    )
                };
                let mut outcome = commit(client, inserts_only);
                if inserts_only && outcome.as_ref().is_err_and(is_unique_violation) {
                    // A row exists: again, reading the rows, to refuse the right operation.
                    client.batch_execute("ROLLBACK")?;
                    outcome = commit(client, false);
                }
                end_transaction(client, outcome)
            })
        })
    }

    /// Begins a transaction holding the table (shared) and the partition, and reads the table's
    /// indexes as they are under the lock (an index declared or dropped takes the table's lock
    /// exclusively), in one round trip: the lock keys are numbers.
    fn begin_locked(
        &self,
        client: &mut postgres::Client,
        partition_key: &str,
    ) -> Result<IndexCatalog, StorageError> {
        let messages = client.simple_query(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock_shared({}); SELECT pg_advisory_xact_lock({});
             SELECT encode(indexes, 'hex') AS indexes FROM trestle_tables WHERE id = {}",
            table_lock(self.id),
            partition_lock(self.id, partition_key),
            self.id
        ))?;
        for message in messages {
            if let postgres::SimpleQueryMessage::Row(row) = message {
                if row.columns().first().is_some_and(|c| c.name() == "indexes") {
                    let stored = from_hex(row.get(0).unwrap_or(""))?;
                    let catalog = IndexCatalog::decode(&stored)?;
                    *self.plain.lock().unwrap_or_else(PoisonError::into_inner) =
                        PlainCatalog::of(&stored, &catalog).map(Arc::new);
                    return Ok(catalog);
                }
            }
        }
        // The table's row is purged: the commit finds the table gone.
        self.forget_plain_catalog();
        Ok(IndexCatalog::default())
    }

    /// The table's catalog as a commit last read it, if it lets inserts go in one round trip.
    pub(super) fn plain_catalog(&self) -> Option<Arc<PlainCatalog>> {
        self.plain
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Sends the next inserts by the full path, which reads the catalog afresh.
    pub(super) fn forget_plain_catalog(&self) {
        *self.plain.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Checks every operation against the partition's current rows (read in one statement) and
    /// writes every effect (in at most two, and the index entries' in two more), or refuses the
    /// first that fails. A commit of inserts only (`inserts_only`) reads nothing: it writes with a
    /// plain `INSERT`, which fails with a unique violation if a row exists (the caller then runs
    /// it again the other way).
    fn commit_in(
        &self,
        tx: &mut postgres::Client,
        prepared: &mut Prepared<'_>,
        catalog: &IndexCatalog,
        partition_key: &str,
        operations: &[Operation],
        inserts_only: bool,
    ) -> Result<CommitOutcome, StorageError> {
        let current = match inserts_only {
            true => operations.iter().map(|_| None).collect(),
            false => match self.read_rows(tx, prepared, operations, catalog.reads_rows_whole())? {
                Some(current) => current,
                None => return Ok(Err(table_gone())),
            },
        };
        let now = Ticks::next_commit();
        let planned = plan_commit(
            partition_key,
            operations.to_vec(),
            current,
            now,
            catalog.plan_rules(),
        );
        let plan = match planned {
            Ok(plan) => plan,
            Err(rejection) => return Ok(Err(rejection.into())),
        };
        if let Err(rejection) = self.write_rows(tx, prepared, partition_key, &plan, inserts_only)? {
            return Ok(Err(rejection));
        }
        self.remove_entries(tx, prepared, &plan)?;
        if let Err(rejection) = self.add_plan_entries(tx, prepared, partition_key, &plan)? {
            return Ok(Err(rejection));
        }
        if catalog.change_feed.is_some() {
            records::write_records(tx, prepared, self.id, &plan, partition_key, 0)?;
        }
        Ok(Ok(Committed {
            stored: plan.results,
            ticket: None,
        }))
    }

    /// Writes and removes the entity rows of `plan`; with `inserts_only`, by a plain `INSERT`
    /// (a unique violation if a row exists).
    pub(super) fn write_rows(
        &self,
        tx: &mut postgres::Client,
        prepared: &mut Prepared<'_>,
        partition_key: &str,
        plan: &CommitPlan,
        inserts_only: bool,
    ) -> Result<Result<(), Rejection>, StorageError> {
        let PlannedRows {
            written,
            records,
            deleted,
        } = planned_rows(plan);
        let pk = partition_key.as_bytes();
        if inserts_only {
            let insert_rows = prepared.get(tx, INSERT_ROWS)?;
            let inserted = tx.execute(&insert_rows, &[&self.id, &pk, &written, &records])?;
            // Nothing inserted (and no unique violation): the table is gone.
            if inserted < written.len() as u64 {
                return Ok(Err(table_gone()));
            }
        } else if !written.is_empty() {
            let write_rows = prepared.get(tx, WRITE_ROWS)?;
            tx.execute(&write_rows, &[&self.id, &pk, &written, &records])?;
        }
        if !deleted.is_empty() {
            let delete_rows = prepared.get(tx, DELETE_ROWS)?;
            tx.execute(&delete_rows, &[&self.id, &pk, &deleted])?;
        }
        Ok(Ok(()))
    }

    /// The entity at each operation's row (operations of one partition), read in one statement
    /// (after the partition's lock: a later snapshot than the transaction's start), its
    /// properties only where the operation or an index (`indexed`) needs them; `None` if the
    /// table is gone.
    fn read_rows(
        &self,
        tx: &mut postgres::Client,
        prepared: &mut Prepared<'_>,
        operations: &[Operation],
        indexed: bool,
    ) -> Result<Option<Vec<Option<StoredEntity>>>, StorageError> {
        let partition_key = operations[0].partition_key();
        let row_keys: Vec<&[u8]> = operations
            .iter()
            .map(|operation| operation.row_key().as_bytes())
            .collect();
        let read_rows = prepared.get(tx, READ_ROWS)?;
        let rows = tx.query(
            &read_rows,
            &[&self.id, &partition_key.as_bytes(), &row_keys],
        )?;
        current_entities_of(&rows, operations, indexed)
    }

    /// The batches of a scan expected to read `expected_rows` rows, if known ([`ScanBatches`]).
    pub(super) fn batches(&self, expected_rows: Option<usize>) -> TableBatches<'_> {
        TableBatches::new(&self.scan_batches, self.id, expected_rows)
    }

    /// Visits one range through a portal, as many rows per fetch as [`ScanBatches`] says.
    fn visit_range(
        &self,
        snapshot: &mut Transaction<'_>,
        prepared: &mut Prepared<'_>,
        range: &KeyRange,
        reverse: bool,
        batches: &mut TableBatches<'_>,
        visitor: &mut Visitor<'_>,
    ) -> Result<Option<KeyPosition>, StorageError> {
        if range.is_empty() {
            return Ok(None);
        }
        let (sql, params) = range_query(self.id, range, reverse, "");
        let statement = prepared.get(snapshot, &sql)?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref() as _).collect();
        let portal = snapshot.bind(&statement, &refs)?;
        let stopped_at = visit_portal(snapshot, &portal, batches, visitor)?;
        Ok(stopped_at.map(|entity| KeyPosition::row(entity.partition_key, entity.row_key)))
    }
}

/// The entity at each operation's row, from the rows of [`READ_ROWS`] (or a statement of the same
/// columns): `None` if the first column of the first row, the table's state, is not true.
pub(super) fn current_entities_of(
    rows: &[postgres::Row],
    operations: &[Operation],
    indexed: bool,
) -> Result<Option<Vec<Option<StoredEntity>>>, StorageError> {
    if !rows.first().is_some_and(|row| row.get::<_, bool>(0)) {
        return Ok(None);
    }
    let mut records = std::collections::HashMap::new();
    for row in rows {
        if let Some(row_key) = row.get::<_, Option<&[u8]>>(1) {
            records.insert(row_key, row.get::<_, &[u8]>(2));
        }
    }
    let record_of = |_, operation: &Operation| records.get(operation.row_key().as_bytes()).copied();
    Ok(Some(codec::current_entities(
        operations, record_of, indexed,
    )?))
}

/// Adds the SQL condition of one bound of a range of positions.
/// The statement that reads `range` of table `table_id` in key order (descending if `reverse`),
/// its rows `(pk, rk, record)`, with `limit` (a `LIMIT` clause, or nothing) after it; and its
/// parameters.
pub(super) fn range_query(
    table_id: i64,
    range: &KeyRange,
    reverse: bool,
    limit: &str,
) -> (String, Vec<Box<dyn ToSql + Sync + Send>>) {
    let mut params: Vec<Box<dyn ToSql + Sync + Send>> = vec![Box::new(table_id)];
    // A deleted table's rows, still being purged, are not there.
    let mut conditions = vec![
        "table_id = $1".to_owned(),
        "EXISTS (SELECT 1 FROM trestle_tables WHERE id = $1 AND live)".to_owned(),
    ];
    bound_condition(&range.start, true, &mut conditions, &mut params);
    bound_condition(&range.end, false, &mut conditions, &mut params);
    let order = if reverse { "DESC" } else { "ASC" };
    let sql = format!(
        "SELECT pk, rk, record FROM trestle_entities WHERE {} ORDER BY pk {order}, rk {order}{limit}",
        conditions.join(" AND ")
    );
    (sql, params)
}

fn bound_condition(
    bound: &Bound<KeyPosition>,
    is_start: bool,
    conditions: &mut Vec<String>,
    params: &mut Vec<Box<dyn ToSql + Sync + Send>>,
) {
    let (position, inclusive) = match bound {
        Bound::Included(position) => (position, true),
        Bound::Excluded(position) => (position, false),
        Bound::Unbounded => return,
    };
    let pk_param = params.len() + 1;
    params.push(Box::new(position.partition_key.as_bytes().to_vec()));
    match &position.row {
        RowPosition::Row(row_key) => {
            let rk_param = params.len() + 1;
            params.push(Box::new(row_key.as_bytes().to_vec()));
            let op = match (is_start, inclusive) {
                (true, true) => ">=",
                (true, false) => ">",
                (false, true) => "<=",
                (false, false) => "<",
            };
            conditions.push(format!("(pk, rk) {op} (${pk_param}, ${rk_param})"));
        }
        // Just past every row of the partition: as a start, the next partitions; as an end, up to
        // and with this one.
        RowPosition::AfterRows if is_start => conditions.push(format!("pk > ${pk_param}")),
        RowPosition::AfterRows => conditions.push(format!("pk <= ${pk_param}")),
    }
}
