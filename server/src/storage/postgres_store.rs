//! The PostgreSQL store: the storage contract kept in a PostgreSQL database, reached over its wire
//! protocol, so that several Trestle servers can share one store. (A first cut: see the
//! limitations below.)
//!
//! Layout: `trestle_tables (id, folded, name, live)`, `trestle_entities (table_id, pk, rk,
//! record)` with `pk`/`rk` as `bytea` (so that they sort by their UTF-8 bytes, as keys must) and
//! `record` in the stored-entity format of `storage/codec.rs`, and `trestle_meta` holding the
//! store's secret. A commit runs in one database transaction under a transaction-scoped advisory
//! lock on its partition (the sled store's partition lock), with the table's row locked shared
//! against a concurrent deletion. Every commit is durable when it returns: no tickets.
//!
//! A scan reads its ranges in batches of [`SCAN_BATCH`] rows, all in one read-only
//! `REPEATABLE READ` transaction, so that it sees every partition at one instant.
//!
//! Limitations of this first cut: a table's rows are purged inside `delete_table` (not in the
//! background); no schema version; no retries of serialization failures; no TLS.

use std::sync::{Arc, Condvar, Mutex, PoisonError};

use postgres::types::ToSql;
use postgres::{Client, GenericClient, IsolationLevel, NoTls};

use super::{
    codec, in_scan_order, Attempt, Committed, CreateRefusal, EntityView, RejectReason, Rejection,
    StorageError, Store, StoreSecret, Table, Visit, Visitor, Waiting,
};
use crate::model::{
    Effect, EntityKey, KeyPosition, KeyRange, Operation, RowPosition, TableName, Ticks,
};

/// The schema this build creates and reads. A database records its version in `trestle_meta`;
/// one of an older version is upgraded (none exists yet), one of a newer is refused.
pub const SCHEMA_VERSION: u32 = 1;

/// Rows a scan reads with one statement.
pub(crate) const SCAN_BATCH: i64 = 256;

/// The schema, created under an advisory lock: servers starting together over a new database
/// would otherwise race in `CREATE ... IF NOT EXISTS`.
const SCHEMA: &str = "
BEGIN;
SELECT pg_advisory_xact_lock(7461626);
CREATE TABLE IF NOT EXISTS trestle_meta (key text PRIMARY KEY, value bytea NOT NULL);
CREATE TABLE IF NOT EXISTS trestle_tables (
    id bigserial PRIMARY KEY, folded text NOT NULL, name text NOT NULL, live boolean NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS trestle_tables_live ON trestle_tables (folded) WHERE live;
CREATE TABLE IF NOT EXISTS trestle_entities (
    table_id bigint NOT NULL, pk bytea NOT NULL, rk bytea NOT NULL, record bytea NOT NULL,
    PRIMARY KEY (table_id, pk, rk));
COMMIT;
";

/// A fixed set of connections, each lent to one call at a time.
struct Pool {
    idle: Mutex<Vec<Client>>,
    returned: Condvar,
}

impl Pool {
    /// Runs `f` with a connection, waiting for one to be free.
    fn with<R>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<R, StorageError>,
    ) -> Result<R, StorageError> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let mut client = loop {
            match idle.pop() {
                Some(client) => break client,
                None => {
                    idle = self
                        .returned
                        .wait(idle)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        };
        drop(idle);
        let outcome = f(&mut client);
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(client);
        self.returned.notify_one();
        outcome
    }
}

impl Drop for Pool {
    /// Closes the connections on a thread of its own: closing blocks, which a runtime worker
    /// (where the last handle on the store may go) must not.
    fn drop(&mut self) {
        let clients = std::mem::take(self.idle.get_mut().unwrap_or_else(PoisonError::into_inner));
        std::thread::spawn(move || drop(clients));
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pool")
    }
}

/// The PostgreSQL store.
#[derive(Debug)]
pub struct PostgresStore {
    pool: Arc<Pool>,
    secret: StoreSecret,
}

impl PostgresStore {
    /// Connects `connections` times to the database at `url` (a libpq connection string or a
    /// `postgres://` URL), creates the schema if it is missing, and reads (or makes) the store's
    /// secret.
    pub fn open(url: &str, connections: usize) -> Result<PostgresStore, StorageError> {
        let mut clients = Vec::new();
        for _ in 0..connections.max(1) {
            clients.push(Client::connect(url, NoTls)?);
        }
        let first = &mut clients[0];
        first.batch_execute(SCHEMA)?;
        check_schema_version(first)?;
        let mut secret = [0u8; super::SECRET_BYTES];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
            .map_err(|_| std::io::Error::other("the system's random source failed"))?;
        first.execute(
            "INSERT INTO trestle_meta VALUES ('token_secret', $1) ON CONFLICT DO NOTHING",
            &[&secret.as_slice()],
        )?;
        let row = first.query_one(
            "SELECT value FROM trestle_meta WHERE key = 'token_secret'",
            &[],
        )?;
        let stored: Vec<u8> = row.get(0);
        let secret = StoreSecret::from_bytes(&stored)?;
        Ok(PostgresStore {
            pool: Arc::new(Pool {
                idle: Mutex::new(clients),
                returned: Condvar::new(),
            }),
            secret,
        })
    }

    fn table_record(&self, name: &TableName) -> Result<Option<Arc<PostgresTable>>, StorageError> {
        let found = self.pool.with(|client| {
            Ok(client.query_opt(
                "SELECT id, name FROM trestle_tables WHERE folded = $1 AND live",
                &[&name.folded()],
            )?)
        })?;
        let Some(row) = found else { return Ok(None) };
        let name = TableName::parse(row.get::<_, &str>(1))
            .map_err(|_| StorageError::Corrupt("a table name in the catalog is invalid".into()))?;
        Ok(Some(Arc::new(PostgresTable {
            id: row.get(0),
            name,
            pool: self.pool.clone(),
        })))
    }
}

/// Records this build's schema version in a new database; refuses a database of a newer one.
fn check_schema_version(client: &mut Client) -> Result<(), StorageError> {
    client.execute(
        "INSERT INTO trestle_meta VALUES ('schema_version', $1) ON CONFLICT DO NOTHING",
        &[&SCHEMA_VERSION.to_be_bytes().as_slice()],
    )?;
    let row = client.query_one(
        "SELECT value FROM trestle_meta WHERE key = 'schema_version'",
        &[],
    )?;
    let stored: &[u8] = row.get(0);
    let found = <[u8; 4]>::try_from(stored)
        .map(u32::from_be_bytes)
        .map_err(|_| StorageError::Corrupt("the schema version is not 4 bytes".into()))?;
    if found > SCHEMA_VERSION {
        return Err(StorageError::UnsupportedSchema {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

impl Store for PostgresStore {
    fn table(&self, name: &TableName) -> Option<Arc<dyn Table>> {
        match self.table_record(name) {
            Ok(table) => table.map(|table| table as Arc<dyn Table>),
            Err(error) => {
                tracing::error!(%error, "reading the catalog failed");
                None
            }
        }
    }

    /// One query over the live tables, in byte order of their folded names.
    fn list_tables(
        &self,
        folded_prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<TableName>, bool), StorageError> {
        let rows = self.pool.with(|client| {
            Ok(client.query(
                "SELECT name FROM trestle_tables
                 WHERE live AND folded >= $1 AND folded > $2 AND starts_with(folded, $1)
                 ORDER BY folded COLLATE \"C\" LIMIT $3",
                &[&folded_prefix, &after.unwrap_or(""), &(limit as i64 + 1)],
            )?)
        })?;
        let mut names: Vec<TableName> = rows
            .iter()
            .filter_map(|row| TableName::parse(row.get::<_, &str>(0)).ok())
            .collect();
        let more = names.len() > limit;
        names.truncate(limit);
        Ok((names, more))
    }

    fn create_table(
        &self,
        name: &TableName,
    ) -> Result<Result<Arc<dyn Table>, CreateRefusal>, StorageError> {
        let created = self.pool.with(|client| {
            let inserted = client.query_opt(
                "INSERT INTO trestle_tables (folded, name, live) VALUES ($1, $2, true)
                 ON CONFLICT (folded) WHERE live DO NOTHING RETURNING id",
                &[&name.folded(), &name.as_str()],
            )?;
            Ok(inserted.map(|row| row.get::<_, i64>(0)))
        })?;
        Ok(match created {
            Some(id) => Ok(Arc::new(PostgresTable {
                id,
                name: name.clone(),
                pool: self.pool.clone(),
            })),
            None => Err(CreateRefusal::AlreadyExists),
        })
    }

    fn delete_table(&self, name: &TableName) -> Result<bool, StorageError> {
        self.pool.with(|client| {
            let mut tx = client.transaction()?;
            let deleted = tx.query_opt(
                "UPDATE trestle_tables SET live = false WHERE folded = $1 AND live RETURNING id",
                &[&name.folded()],
            )?;
            let Some(row) = deleted else {
                return Ok(false);
            };
            let id: i64 = row.get(0);
            tx.execute("DELETE FROM trestle_entities WHERE table_id = $1", &[&id])?;
            tx.commit()?;
            Ok(true)
        })
    }

    fn secret(&self) -> &StoreSecret {
        &self.secret
    }

    fn calls_are_local(&self) -> bool {
        false
    }
}

/// A live table of the PostgreSQL store.
#[derive(Debug)]
pub struct PostgresTable {
    id: i64,
    name: TableName,
    pool: Arc<Pool>,
}

/// The advisory-lock key of a partition: 64 bits of FNV-1a over the table id and the key.
fn partition_lock(table_id: i64, partition_key: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in table_id
        .to_be_bytes()
        .iter()
        .chain(partition_key.as_bytes())
    {
        hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash as i64
}

impl Table for PostgresTable {
    fn name(&self) -> &TableName {
        &self.name
    }

    fn id(&self) -> u64 {
        self.id as u64
    }

    /// One database transaction ([`PostgresTable::commit_with`]); a remote store's call never
    /// runs inline, so `Waiting` does not apply.
    fn commit(
        &self,
        partition_key: &str,
        operations: Vec<Operation>,
        _: Waiting,
    ) -> Result<Attempt<Result<Committed, Rejection>, Vec<Operation>>, StorageError> {
        self.pool
            .with(|client| self.commit_with(client, partition_key, operations))
            .map(Attempt::Done)
    }

    fn get(
        &self,
        key: &EntityKey,
        read: &mut dyn FnMut(EntityView<'_>) -> Result<(), StorageError>,
        _: Waiting,
    ) -> Result<Attempt<bool, ()>, StorageError> {
        let row = self.pool.with(|client| {
            Ok(client.query_one(
                "SELECT t.live, e.record FROM trestle_tables t
                 LEFT JOIN trestle_entities e ON e.table_id = t.id AND e.pk = $2 AND e.rk = $3
                 WHERE t.id = $1",
                &[
                    &self.id,
                    &key.partition_key.as_bytes(),
                    &key.row_key.as_bytes(),
                ],
            )?)
        })?;
        let live: bool = row.get(0);
        let record: Option<Vec<u8>> = row.get(1);
        match record {
            Some(record) if live => {
                read(EntityView::parse(
                    &key.partition_key,
                    &key.row_key,
                    &record,
                )?)?;
                Ok(Attempt::Done(true))
            }
            _ => Ok(Attempt::Done(false)),
        }
    }

    fn visit(
        &self,
        ranges: &[KeyRange],
        reverse: bool,
        visitor: &mut Visitor<'_>,
    ) -> Result<Option<KeyPosition>, StorageError> {
        self.pool.with(|client| {
            // One snapshot for the whole call: every partition is seen at one instant, never
            // half a commit, however many statements its rows take.
            let mut snapshot = client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let live = snapshot.query_opt(
                "SELECT 1 FROM trestle_tables WHERE id = $1 AND live",
                &[&self.id],
            )?;
            if live.is_none() {
                return Ok(None);
            }
            for range in in_scan_order(ranges, reverse) {
                if let Some(stop) = self.visit_range(&mut snapshot, range, reverse, visitor)? {
                    return Ok(Some(stop));
                }
            }
            Ok(None)
        })
    }
}

impl PostgresTable {
    fn commit_with(
        &self,
        client: &mut Client,
        partition_key: &str,
        operations: Vec<Operation>,
    ) -> Result<Result<Committed, Rejection>, StorageError> {
        let mut tx = client.transaction()?;
        let live = tx.query_opt(
            "SELECT 1 FROM trestle_tables WHERE id = $1 AND live FOR SHARE",
            &[&self.id],
        )?;
        if live.is_none() {
            return Ok(Err(Rejection {
                index: 0,
                reason: RejectReason::TableGone,
            }));
        }
        tx.execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&partition_lock(self.id, partition_key)],
        )?;
        let now = Ticks::now();
        let mut stored = Vec::with_capacity(operations.len());
        let mut effects = Vec::with_capacity(operations.len());
        for (index, operation) in operations.into_iter().enumerate() {
            let row_key = operation.row_key().to_owned();
            let current = tx
                .query_opt(
                    "SELECT record FROM trestle_entities WHERE table_id = $1 AND pk = $2 AND rk = $3",
                    &[&self.id, &partition_key.as_bytes(), &row_key.as_bytes()],
                )?
                .map(|row| {
                    let record: Vec<u8> = row.get(0);
                    let key = EntityKey {
                        partition_key: partition_key.to_owned(),
                        row_key: row_key.clone(),
                    };
                    codec::decode_selected(key, &record, None)
                })
                .transpose()?;
            match operation.resolve(current, now) {
                Err(refusal) => {
                    return Ok(Err(Rejection {
                        index,
                        reason: RejectReason::Refused { row_key, refusal },
                    }))
                }
                Ok(Effect::Put(entity)) => {
                    effects.push((
                        row_key,
                        Some(codec::encode(entity.timestamp, &entity.properties)),
                    ));
                    stored.push(Some(entity));
                }
                Ok(Effect::Remove) => {
                    effects.push((row_key, None));
                    stored.push(None);
                }
                Ok(Effect::Nothing) => stored.push(None),
            }
        }
        for (row_key, record) in effects {
            match record {
                Some(record) => tx.execute(
                    "INSERT INTO trestle_entities VALUES ($1, $2, $3, $4)
                     ON CONFLICT (table_id, pk, rk) DO UPDATE SET record = EXCLUDED.record",
                    &[
                        &self.id,
                        &partition_key.as_bytes(),
                        &row_key.as_bytes(),
                        &record,
                    ],
                )?,
                None => tx.execute(
                    "DELETE FROM trestle_entities WHERE table_id = $1 AND pk = $2 AND rk = $3",
                    &[&self.id, &partition_key.as_bytes(), &row_key.as_bytes()],
                )?,
            };
        }
        tx.commit()?;
        Ok(Ok(Committed {
            stored,
            ticket: None,
        }))
    }

    /// Visits one range, a batch of rows at a time, each batch starting past the last row seen.
    fn visit_range(
        &self,
        client: &mut impl GenericClient,
        range: &KeyRange,
        reverse: bool,
        visitor: &mut Visitor<'_>,
    ) -> Result<Option<KeyPosition>, StorageError> {
        let mut remaining = range.clone();
        loop {
            if remaining.is_empty() {
                return Ok(None);
            }
            let mut params: Vec<Box<dyn ToSql + Sync>> = vec![Box::new(self.id)];
            let mut conditions = vec!["table_id = $1".to_owned()];
            bound_condition(&remaining.start, true, &mut conditions, &mut params);
            bound_condition(&remaining.end, false, &mut conditions, &mut params);
            let order = if reverse { "DESC" } else { "ASC" };
            let sql = format!(
                "SELECT pk, rk, record FROM trestle_entities WHERE {} ORDER BY pk {order}, rk {order} LIMIT {SCAN_BATCH}",
                conditions.join(" AND ")
            );
            let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref()).collect();
            let rows = client.query(&sql, &refs)?;
            let mut last = None;
            for row in &rows {
                let (pk, rk, record): (&[u8], &[u8], &[u8]) = (row.get(0), row.get(1), row.get(2));
                let corrupt = || StorageError::Corrupt("a stored key is not UTF-8".into());
                let pk = std::str::from_utf8(pk).map_err(|_| corrupt())?;
                let rk = std::str::from_utf8(rk).map_err(|_| corrupt())?;
                let entity = EntityView::parse(pk, rk, record)?;
                if visitor(&entity)? == Visit::Stop {
                    return Ok(Some(KeyPosition::row(pk, rk)));
                }
                last = Some(KeyPosition::row(pk, rk));
            }
            let Some(last) = last else { return Ok(None) };
            if (rows.len() as i64) < SCAN_BATCH {
                return Ok(None);
            }
            if reverse {
                remaining.end = std::ops::Bound::Excluded(last);
            } else {
                remaining.start = std::ops::Bound::Excluded(last);
            }
        }
    }
}

/// Adds the SQL condition of one bound of a range of positions.
fn bound_condition(
    bound: &std::ops::Bound<KeyPosition>,
    is_start: bool,
    conditions: &mut Vec<String>,
    params: &mut Vec<Box<dyn ToSql + Sync>>,
) {
    use std::ops::Bound;
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
