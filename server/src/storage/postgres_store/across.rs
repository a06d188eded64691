//! Commits and reads across partitions and tables in the PostgreSQL store.
//!
//! A commit across partitions is one database transaction: it takes the tables' shared locks in
//! table-id order and the partitions' advisory locks in the order of their lock keys (a
//! single-partition commit takes one of each, in the same order), reads every part's rows in one
//! statement, plans each part with the commit planner, writes and removes every part's rows in
//! one statement each, then removes every index entry the parts give up and adds the entries
//! they take (so a unique value may move from an entity of one partition to one of another): five
//! round trips however many partitions. It is durable when the transaction commits. Over tables
//! without indexes it is served awaited in two round trips (`pipelined.rs`), from the same pieces:
//! [`RowKeys`], [`plan_parts`], [`rows_of`] and [`committed`].
//!
//! A read across partitions is one statement: PostgreSQL shows a statement one snapshot, in which
//! every transaction, this store's commits across partitions included, is whole or absent.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use postgres::types::ToSql;

use super::many_keys::{ManyKeys, ManyRow, GET_MANY};
use super::pool::{retrying, Prepared};
use super::records;
use super::sql::{from_hex, partition_lock, table_lock};
use super::table::{end_transaction, PostgresTable};
use super::PostgresStore;
use crate::model::{plan_commit, CommitPlan, Operation, Ticks, MAX_TRANSACTION_OPERATIONS};
use crate::storage::{
    at_position, codec, first_by_position, CommitOutcome, Committed, EntityView, FoundVisitor,
    IndexCatalog, PartitionBatch, RejectReason, Rejection, StorageError, TableKey,
};

/// The rows a commit's operations act on, each named by its slot (part, operation).
pub(super) const READ_ROWS: &str = "SELECT k.slot, e.record
    FROM unnest($1::bigint[], $2::bytea[], $3::bytea[], $4::int4[]) AS k(t, pk, rk, slot)
    JOIN trestle_entities e ON e.table_id = k.t AND e.pk = k.pk AND e.rk = k.rk";
/// Writes rows of several tables and partitions (their tables held live under the locks).
pub(super) const WRITE_ROWS: &str = "INSERT INTO trestle_entities (table_id, pk, rk, record)
    SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bytea[], $4::bytea[])
    ON CONFLICT (table_id, pk, rk) DO UPDATE SET record = EXCLUDED.record";
pub(super) const DELETE_ROWS: &str = "DELETE FROM trestle_entities
    WHERE (table_id, pk, rk) IN (SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bytea[]))";

/// One partition's part of a commit: its table, and the batch.
pub(super) struct Part<'a> {
    pub(super) table: Arc<PostgresTable>,
    pub(super) batch: &'a PartitionBatch,
}

impl PostgresStore {
    /// A commit across partitions or tables in one database transaction (`commit.rs`).
    pub(super) fn commit_batches_across(
        &self,
        batches: Vec<PartitionBatch>,
        operations: usize,
    ) -> Result<CommitOutcome, StorageError> {
        let mut tables: HashMap<String, Arc<PostgresTable>> = HashMap::new();
        let mut parts = Vec::with_capacity(batches.len());
        for batch in &batches {
            let folded = batch.table.folded().to_owned();
            let table = match tables.get(&folded) {
                Some(table) => table.clone(),
                None => match self.postgres_table(&batch.table)? {
                    Some(table) => {
                        self.keep_known(&batch.table, &table);
                        tables.entry(folded).or_insert(table).clone()
                    }
                    None => {
                        return Ok(Err(Rejection {
                            index: batch.positions[0],
                            reason: RejectReason::TableGone,
                        }))
                    }
                },
            };
            parts.push(Part { table, batch });
        }
        in_lock_order(&mut parts);
        retrying(|| {
            self.pool.with(|connection| {
                let (client, mut prepared) = connection.parts();
                let outcome = commit_in(client, &mut prepared, &parts, operations);
                end_transaction(client, outcome)
            })
        })
    }

    /// [`crate::storage::Store::get_many`]: one statement.
    pub(super) fn read_across(
        &self,
        keys: &[TableKey],
        found: &mut FoundVisitor<'_>,
    ) -> Result<(), StorageError> {
        let asked = ManyKeys::of(keys);
        let rows = self.pool.query(GET_MANY, &asked.params())?;
        for row in &rows {
            let ManyRow {
                position, record, ..
            } = ManyRow::of(row, keys.len())?;
            if let Some(record) = record {
                let key = &keys[position].key;
                found(
                    position,
                    EntityView::parse(&key.partition_key, &key.row_key, record)?,
                )?;
            }
        }
        Ok(())
    }
}

/// The commit of `parts` (in lock order) in a transaction begun here; the caller ends it: the
/// rows of every part read in one statement, written in one and removed in one, whatever the
/// number of partitions; index entries per part, only where the plans change them.
fn commit_in(
    client: &mut postgres::Client,
    prepared: &mut Prepared<'_>,
    parts: &[Part<'_>],
    operations: usize,
) -> Result<CommitOutcome, StorageError> {
    let catalogs = begin_locked(client, parts)?;
    if let Some(gone) = table_gone(parts, &catalogs) {
        return Ok(Err(gone));
    }
    let keys = RowKeys::of(parts);
    let read_rows = prepared.get(client, READ_ROWS)?;
    let rows = client.query(&read_rows, &keys.params())?;
    let mut plans = match plan_parts(parts, &rows, &catalogs)? {
        Ok(plans) => plans,
        Err(rejection) => return Ok(Err(rejection)),
    };
    seal_plans(parts, &mut plans, operations);
    let (written, removed) = rows_of(parts, &plans);
    if !written.tables.is_empty() {
        let write = prepared.get(client, WRITE_ROWS)?;
        client.execute(&write, &written.params())?;
    }
    if !removed.tables.is_empty() {
        let delete = prepared.get(client, DELETE_ROWS)?;
        client.execute(&delete, &removed.params()[..3])?;
    }
    for (part, plan) in parts.iter().zip(&plans) {
        part.table.remove_entries(client, prepared, plan)?;
    }
    for (part, plan) in parts.iter().zip(&plans) {
        let (table, key) = (&part.table, &part.batch.partition_key);
        if let Err(rejection) = table.add_plan_entries(client, prepared, key, plan)? {
            return Ok(Err(at_position(&part.batch.positions, rejection)));
        }
    }
    let mut record = 0;
    for (part, plan) in parts.iter().zip(&plans) {
        if catalogs[&part.table.id].change_feed.is_some() {
            let (id, key) = (part.table.id, &part.batch.partition_key);
            record += records::write_records(client, prepared, id, plan, key, record)?;
        }
    }
    Ok(Ok(committed(parts, plans, operations)))
}

/// The ids of the tables of `parts` (ascending, each once) and the keys of their partitions'
/// locks (each once), in the order they are taken: tables first, then partitions in the order
/// of `parts` (in lock order).
pub(super) fn lock_keys(parts: &[Part<'_>]) -> (Vec<i64>, Vec<i64>) {
    let tables: BTreeSet<i64> = parts.iter().map(|part| part.table.id).collect();
    let mut locks: Vec<i64> = parts
        .iter()
        .map(|part| partition_lock(part.table.id, &part.batch.partition_key))
        .collect();
    locks.dedup();
    (tables.into_iter().collect(), locks)
}

/// Sorts `parts` into the order their partitions' locks are taken in (by lock key).
pub(super) fn in_lock_order(parts: &mut [Part<'_>]) {
    parts.sort_by_key(|part| partition_lock(part.table.id, &part.batch.partition_key));
}

/// The refusal of a commit one of whose tables has no catalog under the locks (deleted, or its
/// row purged): at that table's first operation.
pub(super) fn table_gone(
    parts: &[Part<'_>],
    catalogs: &HashMap<i64, IndexCatalog>,
) -> Option<Rejection> {
    let gone = parts.iter().find(|p| !catalogs.contains_key(&p.table.id))?;
    Some(Rejection {
        index: gone.batch.positions[0],
        reason: RejectReason::TableGone,
    })
}

/// What every part's plan stored, by the operations' positions in the transaction.
pub(super) fn committed(
    parts: &[Part<'_>],
    plans: Vec<CommitPlan>,
    operations: usize,
) -> Committed {
    let mut stored = vec![None; operations];
    for (part, plan) in parts.iter().zip(plans) {
        for (result, &position) in plan.results.into_iter().zip(&part.batch.positions) {
            stored[position] = result;
        }
    }
    Committed {
        stored,
        ticket: None,
    }
}

/// The keys of every operation of a commit, as [`READ_ROWS`] takes them: each named by its slot
/// (part, operation).
pub(super) struct RowKeys<'a> {
    tables: Vec<i64>,
    pks: Vec<&'a [u8]>,
    rks: Vec<&'a [u8]>,
    slots: Vec<i32>,
}

impl<'a> RowKeys<'a> {
    pub(super) fn of(parts: &[Part<'a>]) -> RowKeys<'a> {
        let mut keys = RowKeys {
            tables: Vec::new(),
            pks: Vec::new(),
            rks: Vec::new(),
            slots: Vec::new(),
        };
        for (at, part) in parts.iter().enumerate() {
            for (index, operation) in part.batch.operations.iter().enumerate() {
                keys.tables.push(part.table.id);
                keys.pks.push(part.batch.partition_key.as_bytes());
                keys.rks.push(operation.row_key().as_bytes());
                keys.slots.push(slot(at, index));
            }
        }
        keys
    }

    /// [`READ_ROWS`]'s parameters.
    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 4] {
        [&self.tables, &self.pks, &self.rks, &self.slots]
    }
}

/// The slot of operation `index` of part `at`.
fn slot(at: usize, index: usize) -> i32 {
    (at * MAX_TRANSACTION_OPERATIONS + index) as i32
}

/// Plans each part, stamped one instant, over the rows [`READ_ROWS`] read for them; or the
/// refusal of the earliest operation (by position) that cannot apply.
pub(super) fn plan_parts(
    parts: &[Part<'_>],
    rows: &[postgres::Row],
    catalogs: &HashMap<i64, IndexCatalog>,
) -> Result<Result<Vec<CommitPlan>, Rejection>, StorageError> {
    let mut records: HashMap<i32, &[u8]> = HashMap::with_capacity(rows.len());
    for row in rows {
        records.insert(row.get(0), row.get(1));
    }
    let now = Ticks::next_commit();
    let (mut plans, mut refused) = (Vec::with_capacity(parts.len()), None);
    for (at, part) in parts.iter().enumerate() {
        let catalog = &catalogs[&part.table.id];
        let record_of = |index: usize, _: &Operation| records.get(&slot(at, index)).copied();
        let ops = &part.batch.operations;
        let current = codec::current_entities(ops, record_of, catalog.reads_rows_whole())?;
        let (key, ops) = (&part.batch.partition_key, ops.clone());
        match plan_commit(key, ops, current, now, catalog.plan_rules()) {
            Ok(plan) => plans.push(plan),
            Err(refusal) => {
                let rejection = at_position(&part.batch.positions, refusal.into());
                refused = Some(first_by_position(refused, rejection));
            }
        }
    }
    Ok(match refused {
        Some(rejection) => Err(rejection),
        None => Ok(plans),
    })
}

/// Seals the commit's outcome into its idempotency record, if it has one
/// ([`crate::storage::seal_record`]), before [`rows_of`] encodes the rows.
pub(super) fn seal_plans(parts: &[Part<'_>], plans: &mut [CommitPlan], operations: usize) {
    if !parts.iter().any(|part| part.batch.seals_outcome) {
        return;
    }
    let mut pairs: Vec<_> = parts.iter().map(|part| part.batch).zip(plans).collect();
    crate::storage::seal_record(&mut pairs, operations);
}

/// The entity rows every plan writes and those it removes, each as one statement's arrays
/// ([`WRITE_ROWS`], [`DELETE_ROWS`]), whatever the number of partitions and tables.
pub(super) fn rows_of<'a>(parts: &[Part<'a>], plans: &'a [CommitPlan]) -> (RowsOf<'a>, RowsOf<'a>) {
    let (mut written, mut removed) = (RowsOf::default(), RowsOf::default());
    for (part, plan) in parts.iter().zip(plans) {
        for change in &plan.changes {
            let rows = match (&plan.results[change.operation], change.writes) {
                (Some(entity), true) => {
                    let record = codec::encode(entity.timestamp, &entity.properties);
                    written.records.push(record);
                    &mut written
                }
                _ => &mut removed,
            };
            rows.tables.push(part.table.id);
            rows.pks.push(part.batch.partition_key.as_bytes());
            rows.rks.push(change.row_key.as_bytes());
        }
    }
    (written, removed)
}

/// Rows of several tables and partitions, as the statements' arrays take them.
#[derive(Default)]
pub(super) struct RowsOf<'a> {
    pub(super) tables: Vec<i64>,
    pks: Vec<&'a [u8]>,
    rks: Vec<&'a [u8]>,
    records: Vec<Vec<u8>>,
}

impl RowsOf<'_> {
    /// [`WRITE_ROWS`]'s parameters; the first three, [`DELETE_ROWS`]'s.
    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 4] {
        [&self.tables, &self.pks, &self.rks, &self.records]
    }
}

/// Begins a transaction holding every table of `parts` (shared, in id order) and every
/// partition (in lock-key order, as `parts` are), and reads the tables' indexes as they are
/// under the locks, in one round trip. A table whose row is purged has no catalog: its commit
/// finds it gone, as does one deleted (the catalogs are of live tables only).
fn begin_locked(
    client: &mut postgres::Client,
    parts: &[Part<'_>],
) -> Result<HashMap<i64, IndexCatalog>, StorageError> {
    let (table_ids, locks) = lock_keys(parts);
    let mut sql = String::from("BEGIN;");
    for id in &table_ids {
        sql += &format!(" SELECT pg_advisory_xact_lock_shared({});", table_lock(*id));
    }
    for lock in locks {
        sql += &format!(" SELECT pg_advisory_xact_lock({lock});");
    }
    let ids: Vec<String> = table_ids.iter().map(i64::to_string).collect();
    sql += &format!(
        " SELECT id AS table_id, encode(indexes, 'hex') AS indexes FROM trestle_tables
          WHERE live AND id IN ({})",
        ids.join(", ")
    );
    let mut catalogs = HashMap::new();
    for message in client.simple_query(&sql)? {
        if let postgres::SimpleQueryMessage::Row(row) = message {
            if row
                .columns()
                .first()
                .is_some_and(|c| c.name() == "table_id")
            {
                let id = row.get(0).and_then(|id| id.parse().ok()).ok_or_else(|| {
                    StorageError::Corrupt("a table id read back is not a number".into())
                })?;
                let catalog = IndexCatalog::decode(&from_hex(row.get(1).unwrap_or(""))?)?;
                catalogs.insert(id, catalog);
            }
        }
    }
    Ok(catalogs)
}
