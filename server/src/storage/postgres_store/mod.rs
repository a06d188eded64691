//! The PostgreSQL store: the storage contract kept in a PostgreSQL database, reached over its wire
//! protocol, so that several Trestle servers can serve one store (`docs/scale-out.md`).
//!
//! Layout: `trestle_tables (id, folded, name, live)`, `trestle_entities (table_id, pk, rk,
//! record)` with `pk`/`rk` as `bytea` (so that they sort by their UTF-8 bytes, as keys must) and
//! `record` in the stored-entity format of `storage/codec.rs`, and `trestle_meta` holding the
//! schema version and the store's secret. A commit runs in one database transaction under a
//! transaction-scoped advisory lock on its partition (the sled store's partition lock), with the
//! table held (a shared advisory lock) against a concurrent deletion; it is durable when it returns (no
//! tickets). A scan reads in one read-only `REPEATABLE READ` transaction, so that it sees every
//! partition at one instant. A deleted table's rows are purged in the background (`purge.rs`).
//!
//! The SQL keeps to what PostgreSQL, YugabyteDB (YSQL) and Citus all run.

/// The table lock's class: the first of its two advisory-lock keys (the second is the table id
/// modulo 2^31-1). One literal for the Rust code (`sql::table_lock`, `sql::LOCK_TABLE`) and the
/// schema's functions, which take the same lock and look for its holders.
macro_rules! table_lock_class {
    () => {
        "29810"
    };
}

mod across;
mod awaited;
mod awaited_pool;
mod changes;
mod commit;
mod indexes;
mod insert_batches;
mod keyed_inserts;
mod lease;
mod many_keys;
mod one_trip;
mod pipelined;
mod point_reads;
mod pool;
mod purge;
mod records;
mod rows;
mod scan_batches;
mod snapshot;
mod sql;
mod table;
mod table_inserts;
mod tls;
mod together;

use scan_batches::ScanBatches;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use postgres::config::SslMode;
use postgres::Client;

use self::awaited_pool::AwaitedPool;
use self::insert_batches::{InsertBatches, InsertEach};
use self::keyed_inserts::{KeyedInsertBatches, KeyedInsertEach};
use self::one_trip::PlainCatalog;
use self::point_reads::{PointReads, WaitingReads};
use self::pool::Pool;
pub use self::table::PostgresTable;
use super::{
    build_in_background, AwaitedCalls, CommitOutcome, CreateRefusal, EntityView, FeedBatch,
    FeedPosition, FeedRead, FoundVisitor, IndexCatalog, NamedGetVisitor, SettingsChange,
    StorageError, Store, StoreSecret, Table, TableKey, TendedTable,
};
use crate::model::{EntityKey, IndexDefinition, IndexState, TableName};
use crate::storage::{Commit, StoreFuture, TableListing};

pub use self::purge::PURGE_BATCH;

/// The schema this build creates and reads. A database records its version in `trestle_meta`;
/// one of an older version is upgraded (version 2 added the indexes: a column of
/// `trestle_tables` and three relations, created by `SCHEMA` where missing), one of a newer is
/// refused (an older server would write entities without their index entries).
pub const SCHEMA_VERSION: u32 = 3;

/// The schema, created under an advisory lock: servers starting together over a new database
/// would otherwise race in `CREATE ... IF NOT EXISTS`.
const SCHEMA: &str = concat!(
    "
BEGIN;
SELECT pg_advisory_xact_lock(7461626);
CREATE TABLE IF NOT EXISTS trestle_meta (key text PRIMARY KEY, value bytea NOT NULL);
CREATE TABLE IF NOT EXISTS trestle_tables (
    id bigserial PRIMARY KEY, folded text NOT NULL, name text NOT NULL, live boolean NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS trestle_tables_live ON trestle_tables (folded) WHERE live;
CREATE TABLE IF NOT EXISTS trestle_entities (
    table_id bigint NOT NULL, pk bytea NOT NULL, rk bytea NOT NULL, record bytea NOT NULL,
    PRIMARY KEY (table_id, pk, rk));
ALTER TABLE trestle_tables ADD COLUMN IF NOT EXISTS indexes bytea NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS trestle_index_entries (
    index_id bigint NOT NULL, sort_key bytea NOT NULL, pk bytea NOT NULL, rk bytea NOT NULL,
    PRIMARY KEY (index_id, sort_key));
CREATE SEQUENCE IF NOT EXISTS trestle_index_ids;
CREATE TABLE IF NOT EXISTS trestle_dropped_indexes (index_id bigint PRIMARY KEY);
CREATE TABLE IF NOT EXISTS trestle_changes (
    table_id bigint NOT NULL, xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    record int4 NOT NULL, at int8 NOT NULL, change bytea NOT NULL,
    PRIMARY KEY (table_id, xid, record));
CREATE TABLE IF NOT EXISTS trestle_feed_trims (
    table_id bigint PRIMARY KEY, xid xid8 NOT NULL, record int4 NOT NULL);
CREATE OR REPLACE FUNCTION trestle_insert_rows(t bigint, partition_lock bigint,
    catalog bytea, p bytea, rks bytea[], records bytea[], at int8, changes bytea[])
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE inserted bigint;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(",
    table_lock_class!(),
    ", (t % 2147483647)::int4),
        pg_advisory_xact_lock(partition_lock);
    INSERT INTO trestle_entities (table_id, pk, rk, record)
        SELECT t, p, w.rk, w.record FROM unnest(rks, records) AS w(rk, record)
        WHERE EXISTS (SELECT 1 FROM trestle_tables WHERE id = t AND live AND indexes = catalog);
    GET DIAGNOSTICS inserted = ROW_COUNT;
    IF inserted > 0 AND cardinality(changes) > 0 THEN
        INSERT INTO trestle_changes (table_id, record, at, change)
            SELECT t, c.n - 1, at, c.change FROM unnest(changes) WITH ORDINALITY AS c(change, n);
    END IF;
    RETURN inserted;
END $$;
CREATE OR REPLACE FUNCTION trestle_insert_each(t bigint, partition_locks bigint[],
    catalog bytea, pks bytea[], rks bytea[], records bytea[], ats int8[], changes bytea[])
RETURNS int4[] LANGUAGE plpgsql AS $$
DECLARE
    partition_lock bigint;
    inserted int4[];
BEGIN
    PERFORM pg_advisory_xact_lock_shared(",
    table_lock_class!(),
    ", (t % 2147483647)::int4);
    FOREACH partition_lock IN ARRAY partition_locks LOOP
        PERFORM pg_advisory_xact_lock(partition_lock);
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM trestle_tables WHERE id = t AND live AND indexes = catalog) THEN
        RETURN NULL;
    END IF;
    WITH w AS (
        SELECT * FROM unnest(pks, rks, records, ats, changes) WITH ORDINALITY
            AS w(pk, rk, record, at, change, n)),
    ins AS (
        INSERT INTO trestle_entities (table_id, pk, rk, record)
        SELECT t, pk, rk, record FROM w ORDER BY n ON CONFLICT DO NOTHING RETURNING pk, rk),
    done AS (SELECT w.n, w.at, w.change FROM w JOIN ins ON ins.pk = w.pk AND ins.rk = w.rk),
    recorded AS (
        INSERT INTO trestle_changes (table_id, record, at, change)
        SELECT t, (row_number() OVER (ORDER BY n) - 1)::int4, at, change FROM done
        WHERE change IS NOT NULL)
    SELECT coalesce(array_agg(n::int4 ORDER BY n), '{}') INTO inserted FROM done;
    RETURN inserted;
END $$;
CREATE OR REPLACE FUNCTION trestle_insert_keyed_each(t bigint, rt bigint, tables bigint[],
    partition_locks bigint[], catalog bytea, record_catalog bytea, pks bytea[], rks bytea[],
    records bytea[], ats int8[], changes bytea[], record_pks bytea[], record_rks bytea[],
    record_records bytea[])
RETURNS int4[] LANGUAGE plpgsql AS $$
DECLARE
    lock_key bigint;
    kept int4[];
    inserted int4[];
BEGIN
    FOREACH lock_key IN ARRAY tables LOOP
        PERFORM pg_advisory_xact_lock_shared(",
    table_lock_class!(),
    ", (lock_key % 2147483647)::int4);
    END LOOP;
    FOREACH lock_key IN ARRAY partition_locks LOOP
        PERFORM pg_advisory_xact_lock(lock_key);
    END LOOP;
    IF (SELECT count(*) FROM trestle_tables WHERE live
            AND ((id = t AND indexes = catalog) OR (id = rt AND indexes = record_catalog))) < 2 THEN
        RETURN NULL;
    END IF;
    WITH w AS (
        SELECT * FROM unnest(record_pks, record_rks, record_records) WITH ORDINALITY
            AS w(pk, rk, record, n)),
    ins AS (
        INSERT INTO trestle_entities (table_id, pk, rk, record)
        SELECT rt, pk, rk, record FROM w ORDER BY n ON CONFLICT DO NOTHING RETURNING pk, rk)
    SELECT coalesce(array_agg(w.n::int4), '{}') INTO kept
        FROM w JOIN ins ON ins.pk = w.pk AND ins.rk = w.rk;
    WITH w AS (
        SELECT * FROM unnest(pks, rks, records, ats, changes) WITH ORDINALITY
            AS w(pk, rk, record, at, change, n) WHERE n::int4 = ANY(kept)),
    ins AS (
        INSERT INTO trestle_entities (table_id, pk, rk, record)
        SELECT t, pk, rk, record FROM w ORDER BY n ON CONFLICT DO NOTHING RETURNING pk, rk),
    done AS (SELECT w.n, w.at, w.change FROM w JOIN ins ON ins.pk = w.pk AND ins.rk = w.rk),
    recorded AS (
        INSERT INTO trestle_changes (table_id, record, at, change)
        SELECT t, (row_number() OVER (ORDER BY n) - 1)::int4, at, change FROM done
        WHERE change IS NOT NULL)
    SELECT coalesce(array_agg(n::int4 ORDER BY n), '{}') INTO inserted FROM done;
    IF cardinality(inserted) < cardinality(kept) THEN
        DELETE FROM trestle_entities WHERE table_id = rt AND (pk, rk) IN (
            SELECT pk, rk FROM unnest(record_pks, record_rks) WITH ORDINALITY AS w(pk, rk, n)
            WHERE n::int4 = ANY(kept) AND NOT n::int4 = ANY(inserted));
    END IF;
    RETURN inserted;
END $$;
CREATE OR REPLACE FUNCTION trestle_feed_horizon(t bigint) RETURNS int8
LANGUAGE plpgsql STABLE AS $$
DECLARE
    snapshot pg_snapshot := pg_current_snapshot();
    xmax int8 := pg_snapshot_xmax(snapshot)::text::int8;
    here oid := (SELECT oid FROM pg_database WHERE datname = current_database());
    holders int8;
    running int8[];
    ended int8;
BEGIN
    SELECT min(v.xid) FILTER (WHERE v.holds), array_agg(v.xid) FILTER (WHERE v.xid IS NOT NULL)
    INTO holders, running
    FROM (SELECT bool_or(locktype = 'advisory' AND database = here AND classid = ",
    table_lock_class!(),
    "
                    AND objid = (t % 2147483647)::oid AND objsubid = 2) AS holds,
                xmax + ((min(transactionid::text::int8) FILTER (WHERE locktype = 'transactionid'
                    AND mode = 'ExclusiveLock' AND granted) - xmax % 4294967296 + 6442450944)
                    % 4294967296 - 2147483648) AS xid
          FROM pg_locks GROUP BY coalesce(pid::text, virtualtransaction)) v;
    SELECT min(x::text::int8) INTO ended FROM pg_snapshot_xip(snapshot) AS x
        WHERE x::text::int8 <> ALL (coalesce(running, '{}'));
    RETURN LEAST(xmax, holders, ended);
END $$;
COMMIT;
"
);

pub(super) const FIND_TABLE: &str =
    "SELECT id, name, indexes FROM trestle_tables WHERE folded = $1 AND live";
const BUILDING_TABLES: &str = "SELECT id, name, indexes FROM trestle_tables
    WHERE live AND indexes <> ''::bytea";
/// The indexes of a table being deleted, for the purger.
const DROP_TABLE_INDEXES: &str = "INSERT INTO trestle_dropped_indexes
    SELECT unnest($1::bigint[]) ON CONFLICT DO NOTHING";
const CREATE_TABLE: &str = "INSERT INTO trestle_tables (folded, name, live, indexes)
    SELECT $1, $2, true, $3 WHERE NOT EXISTS
        (SELECT 1 FROM trestle_tables WHERE folded = $1 AND NOT live)
    ON CONFLICT (folded) WHERE live DO NOTHING RETURNING id";
const NAME_TAKEN_BY_LIVE: &str = "SELECT bool_or(live) FROM trestle_tables WHERE folded = $1";
const DELETE_TABLE: &str = "UPDATE trestle_tables SET live = false WHERE id = $1 AND live";
/// A point read by the table's name: the table's catalog (none: no such live table) and the row.
const GET_NAMED: &str = "SELECT t.indexes, e.record FROM trestle_tables t
    LEFT JOIN trestle_entities e ON e.table_id = t.id AND e.pk = $2 AND e.rk = $3
    WHERE t.folded = $1 AND t.live";
const LIVE_TABLES: &str = "SELECT id, name, indexes FROM trestle_tables WHERE live";
const LIST_TABLES: &str = "SELECT name FROM trestle_tables
    WHERE live AND folded >= $1 AND folded > $2 AND starts_with(folded, $1)
    ORDER BY folded COLLATE \"C\" LIMIT $3";

/// How the PostgreSQL store runs.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The CA certificates (PEM) that verify the database's certificate when the URL says
    /// `sslmode=require`; the system's roots if `None`.
    pub ca_pem: Option<Vec<u8>>,
    /// Connections held to the database for blocking calls, and as many for awaited calls
    /// (point reads and one-trip inserts): at most this many calls of each kind at once.
    pub pool_size: usize,
    /// Purge deleted tables in the background (off only in tests that observe a table being
    /// deleted).
    pub purge_deleted_tables: bool,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            ca_pem: None,
            pool_size: crate::storage::DEFAULT_STORE_POOL_SIZE,
            purge_deleted_tables: true,
        }
    }
}

/// How many tables [`PostgresStore`] keeps for commits by name; past that it forgets them all.
const KNOWN_TABLES_AT_MOST: usize = 4_096;

/// The PostgreSQL store.
#[derive(Debug)]
pub struct PostgresStore {
    pool: Arc<Pool>,
    /// The connections of the calls served awaited (point reads, one-trip inserts).
    awaited: Arc<AwaitedPool>,
    /// Point reads served awaited, waiting to go together.
    point_reads: WaitingReads,
    secret: StoreSecret,
    wake_purger: Arc<purge::Wake>,
    /// Deleted tables are purged (off only in tests that observe a table being deleted).
    purges: bool,
    /// The tables commits went to, by folded name (`commit.rs`): possibly deleted
    /// since, which the next commit to one finds under its lock.
    known: Mutex<HashMap<String, Arc<PostgresTable>>>,
    /// How many rows scans ask each table for at a time.
    scan_batches: Arc<ScanBatches>,
    /// Whether this server tends the tables ([`Store::tables_to_tend`]).
    lease: lease::Lease,
}

impl PostgresStore {
    /// Connects to the database at `url` (a libpq connection string or a `postgres://` URL),
    /// creates the schema if it is missing, reads (or makes) the store's secret and starts the
    /// purger. A database that cannot be reached, or refuses what Trestle needs, is a clear
    /// error naming it.
    pub fn open(url: &str, options: PostgresOptions) -> Result<PostgresStore, StorageError> {
        let config: postgres::Config = url.parse().map_err(|error| {
            StorageError::from(error)
                .during("the store's URL is not a PostgreSQL connection string")
        })?;
        let place = describe(&config);
        let tls = tls::Rustls::trusting(options.ca_pem.as_deref())?;
        let awaited_tls = (config.get_ssl_mode() == SslMode::Require).then(|| tls.clone());
        let awaited = Arc::new(AwaitedPool::new(
            url.parse().map_err(StorageError::from)?,
            options.pool_size,
            awaited_tls,
        ));
        let pool = Pool::connect(config, options.pool_size, tls).map_err(|error| {
            StorageError::from(error).during(format!("cannot connect to {place}"))
        })?;
        let secret = pool.with(|connection| {
            let client = &mut connection.client;
            client
                .batch_execute(SCHEMA)
                .map_err(|error| {
                    StorageError::from(error).during(format!(
                        "cannot create Trestle's tables in {place} (the user needs CREATE on the schema it uses)"
                    ))
                })?;
            check_schema_version(client)?;
            read_or_make_secret(client)
        })?;
        let pool = Arc::new(pool);
        let wake_purger = Arc::new(purge::Wake::default());
        if options.purge_deleted_tables {
            purge::start(&pool, wake_purger.clone());
        }
        let store = PostgresStore {
            pool,
            awaited,
            point_reads: WaitingReads::new(PointReads),
            secret,
            wake_purger,
            purges: options.purge_deleted_tables,
            known: Mutex::default(),
            scan_batches: Arc::default(),
            lease: lease::Lease::new()?,
        };
        store.resume_builds()?;
        Ok(store)
    }

    /// The table commits to `name` went to last, if the store keeps it.
    fn known_table(&self, name: &TableName) -> Option<Arc<PostgresTable>> {
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.get(name.folded()).cloned()
    }

    /// Keeps `table` as the live table called `name`, for the awaited strategies' next commits
    /// (at most [`KNOWN_TABLES_AT_MOST`]: past them, the tables kept are forgotten).
    fn keep_known(&self, name: &TableName, table: &Arc<PostgresTable>) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        if known.len() >= KNOWN_TABLES_AT_MOST {
            known.clear();
        }
        known.insert(name.folded().to_owned(), table.clone());
    }

    /// The table `id` whose catalog is stored as `stored`.
    fn table_of(
        &self,
        id: i64,
        name: TableName,
        stored: &[u8],
    ) -> Result<Arc<PostgresTable>, StorageError> {
        let catalog = IndexCatalog::decode(stored)?;
        Ok(Arc::new(PostgresTable {
            id,
            name,
            pool: self.pool.clone(),
            scan_batches: self.scan_batches.clone(),
            plain: Mutex::new(PlainCatalog::of(stored, &catalog).map(Arc::new)),
            insert_batches: InsertBatches::new(InsertEach { table_id: id }),
            keyed_insert_batches: KeyedInsertBatches::new(KeyedInsertEach { table_id: id }),
            catalog,
        }))
    }

    /// The live table called `name` (ignoring case), if any.
    fn postgres_table(&self, name: &TableName) -> Result<Option<Arc<PostgresTable>>, StorageError> {
        let found = self.pool.query_opt(FIND_TABLE, &[&name.folded()])?;
        found.map(|row| self.table_of_row(&row)).transpose()
    }

    /// The table of a catalog row `(id, name, indexes)`.
    pub(super) fn table_of_row(
        &self,
        row: &postgres::Row,
    ) -> Result<Arc<PostgresTable>, StorageError> {
        let name = TableName::stored(row.get::<_, &str>(1))
            .map_err(|_| StorageError::Corrupt("a table name in the catalog is invalid".into()))?;
        self.table_of(row.get(0), name, row.get(2))
    }

    /// Starts the builds of every index still `Building` (their builder stopped, or is another
    /// server's: a second builder adds the same entries).
    fn resume_builds(&self) -> Result<(), StorageError> {
        for row in self.pool.query(BUILDING_TABLES, &[])? {
            let table = self.table_of_row(&row)?;
            for index in &table.catalog.indexes {
                if index.state == IndexState::Building {
                    build_in_background(table.clone(), index.id);
                }
            }
        }
        Ok(())
    }
}

/// "database D as user U at H:P", for errors at start.
fn describe(config: &postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(host)) => host.clone(),
        Some(postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "PostgreSQL database {:?} as user {:?} at {host}:{port}",
        config.get_dbname().unwrap_or("(the user's)"),
        config.get_user().unwrap_or("(the login's)")
    )
}

/// Records this build's schema version in a new database, or in an older one [`SCHEMA`] upgraded;
/// refuses a database of a newer one.
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
    if found < SCHEMA_VERSION {
        // `SCHEMA` has just added what the newer versions need; record that it did.
        client.execute(
            "UPDATE trestle_meta SET value = $1 WHERE key = 'schema_version'",
            &[&SCHEMA_VERSION.to_be_bytes().as_slice()],
        )?;
        tracing::info!(
            from = found,
            to = SCHEMA_VERSION,
            "upgraded the database's schema"
        );
    }
    Ok(())
}

/// The store's secret: the one a server made first, shared by every server over the database.
fn read_or_make_secret(client: &mut Client) -> Result<StoreSecret, StorageError> {
    let secret = StoreSecret::generate()?;
    client.execute(
        "INSERT INTO trestle_meta VALUES ('token_secret', $1) ON CONFLICT DO NOTHING",
        &[&secret.bytes()],
    )?;
    let row = client.query_one(
        "SELECT value FROM trestle_meta WHERE key = 'token_secret'",
        &[],
    )?;
    StoreSecret::from_bytes(row.get::<_, &[u8]>(0))
}

/// A setting, in `trestle_meta` beside the schema version and the secret.
const SETTING: &str = "SELECT value FROM trestle_meta WHERE key = 'setting.' || $1";
const PUT_SETTING: &str = "INSERT INTO trestle_meta VALUES ('setting.' || $1, $2)
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value";
const REMOVE_SETTING: &str = "DELETE FROM trestle_meta WHERE key = 'setting.' || $1";

impl Store for PostgresStore {
    fn setting(&self, name: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let row = self.pool.query_opt(SETTING, &[&name])?;
        Ok(row.map(|row| row.get(0)))
    }

    fn put_setting(&self, name: &str, value: Option<&[u8]>) -> Result<(), StorageError> {
        match value {
            Some(value) => self.pool.query(PUT_SETTING, &[&name, &value])?,
            None => self.pool.query(REMOVE_SETTING, &[&name])?,
        };
        Ok(())
    }

    fn table(&self, name: &TableName) -> Result<Option<Arc<dyn Table>>, StorageError> {
        Ok(self
            .postgres_table(name)?
            .map(|table| table as Arc<dyn Table>))
    }

    fn read_changes_named(
        &self,
        name: &TableName,
        after: Option<FeedPosition>,
        limit: FeedBatch,
    ) -> Result<Option<FeedRead>, StorageError> {
        self.read_feed_named(name, after, limit)
    }

    fn commit(self: Arc<Self>, commit: Commit) -> StoreFuture<'static, CommitOutcome> {
        Box::pin(self.apply(commit))
    }

    fn get_many(
        &self,
        keys: &[TableKey],
        found: &mut FoundVisitor<'_>,
    ) -> Result<(), StorageError> {
        self.read_across(keys, found)
    }

    /// One query over the live tables, in byte order of their folded names.
    fn list_tables(&self, page: TableListing<'_>) -> Result<(Vec<TableName>, bool), StorageError> {
        let TableListing {
            folded_prefix,
            after,
            limit,
        } = page;
        let rows = self.pool.query(
            LIST_TABLES,
            &[&folded_prefix, &after.unwrap_or(""), &(limit as i64 + 1)],
        )?;
        let mut names: Vec<TableName> = rows
            .iter()
            .filter_map(|row| TableName::stored(row.get::<_, &str>(0)).ok())
            .collect();
        let more = names.len() > limit;
        names.truncate(limit);
        Ok((names, more))
    }

    /// One statement: the table's lookup and the row's read together.
    fn get_named(
        &self,
        name: &TableName,
        key: &EntityKey,
        read: &mut NamedGetVisitor<'_>,
    ) -> Result<Option<bool>, StorageError> {
        let (pk, rk) = (key.partition_key.as_bytes(), key.row_key.as_bytes());
        let row = self
            .pool
            .query_opt(GET_NAMED, &[&name.folded(), &pk, &rk])?;
        let found = row.as_ref().map(|row| (row.get(0), row.get(1)));
        named_entity(found, key, read)
    }

    fn awaited(&self) -> Option<&dyn AwaitedCalls> {
        Some(self)
    }

    /// One query over every live table's catalog; the tables that need upkeep go only to the
    /// server that holds the housekeeping lease (`lease.rs`), which is taken or renewed only
    /// while there is such a table: a store with no feed and no time to live writes nothing each
    /// second.
    fn tables_to_tend(&self) -> Result<Vec<TendedTable>, StorageError> {
        let mut tended = Vec::new();
        for row in self.pool.query(LIVE_TABLES, &[])? {
            let table = self.table_of_row(&row)?;
            if table.catalog.needs_upkeep() {
                let catalog = table.catalog.clone();
                tended.push((table as Arc<dyn Table>, catalog));
            }
        }
        if tended.is_empty() || !self.lease.held(&self.pool)? {
            return Ok(Vec::new());
        }
        Ok(tended)
    }

    /// Refused while a table of the name is still being purged (`BeingDeleted`).
    fn create_table(
        &self,
        name: &TableName,
        indexes: &[IndexDefinition],
        settings: SettingsChange,
    ) -> Result<Result<Arc<dyn Table>, CreateRefusal>, StorageError> {
        let created = self.pool.with(|connection| {
            let (client, mut prepared) = connection.parts();
            let mut catalog = IndexCatalog::default();
            settings.apply(&mut catalog);
            for definition in indexes {
                let id: i64 = client
                    .query_one("SELECT nextval('trestle_index_ids')", &[])?
                    .get(0);
                catalog
                    .declare(id as u64, definition.clone(), IndexState::Ready)
                    .map_err(|refusal| {
                        StorageError::Corrupt(format!("unchecked index definitions: {refusal:?}"))
                    })?;
            }
            let create_table = prepared.get(client, CREATE_TABLE)?;
            let row = client.query_opt(
                &create_table,
                &[&name.folded(), &name.as_str(), &catalog.encode()],
            )?;
            if let Some(row) = row {
                return Ok(Ok((row.get::<_, i64>(0), catalog.encode())));
            }
            let name_taken = prepared.get(client, NAME_TAKEN_BY_LIVE)?;
            let live: Option<bool> = client.query_one(&name_taken, &[&name.folded()])?.get(0);
            // No live row: one of the name is being purged (or was, an instant ago).
            Ok(Err(if live == Some(true) {
                CreateRefusal::AlreadyExists
            } else {
                CreateRefusal::BeingDeleted
            }))
        })?;
        Ok(match created {
            Ok((id, stored)) => Ok(self.table_of(id, name.clone(), &stored)? as Arc<dyn Table>),
            Err(refusal) => Err(refusal),
        })
    }

    /// Marks the table deleted (at once, for every server, once the commits under way on it are
    /// done) and wakes the purger.
    fn delete_table(&self, name: &TableName) -> Result<bool, StorageError> {
        let deleted = self.pool.with(|connection| {
            let (client, mut prepared) = connection.parts();
            let mut tx = client.transaction()?;
            let find_table = prepared.get(&mut tx, FIND_TABLE)?;
            let Some(found) = tx.query_opt(&find_table, &[&name.folded()])? else {
                return Ok(false);
            };
            let id: i64 = found.get(0);
            let lock_table = prepared.get(&mut tx, sql::LOCK_TABLE)?;
            tx.execute(&lock_table, &[&id])?;
            let delete_table = prepared.get(&mut tx, DELETE_TABLE)?;
            let deleted = tx.execute(&delete_table, &[&id])? == 1;
            if deleted && self.purges {
                purge::purge_if_small(&mut tx, id)?;
            }
            let catalog = IndexCatalog::decode(found.get(2))?;
            if deleted && !catalog.indexes.is_empty() {
                let ids: Vec<i64> = catalog.indexes.iter().map(|i| i.id as i64).collect();
                let drop_indexes = prepared.get(&mut tx, DROP_TABLE_INDEXES)?;
                tx.execute(&drop_indexes, &[&ids])?;
            }
            tx.commit()?;
            Ok(deleted)
        })?;
        if deleted {
            self.wake_purger.now();
        }
        Ok(deleted)
    }

    fn secret(&self) -> &StoreSecret {
        &self.secret
    }
}

/// What a read of the table's catalog and the entity's record (`found`: `None` if there is no such
/// live table) says of the entity at `key` (`read` is shown it with the table's time to live):
/// `None` if there is no table, else whether the entity is there.
fn named_entity(
    found: Option<(&[u8], Option<&[u8]>)>,
    key: &EntityKey,
    read: &mut NamedGetVisitor<'_>,
) -> Result<Option<bool>, StorageError> {
    let Some((catalog, record)) = found else {
        return Ok(None);
    };
    let Some(record) = record else {
        return Ok(Some(false));
    };
    let ttl = IndexCatalog::decode(catalog)?.time_to_live;
    read(
        ttl,
        EntityView::parse(&key.partition_key, &key.row_key, record)?,
    )?;
    Ok(Some(true))
}
