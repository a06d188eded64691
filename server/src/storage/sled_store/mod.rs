//! The sled store, the embedded default and the only module that names sled: one tree per table
//! plus a catalog, per-partition locks around the single commit path, group-committed flushes,
//! and background reclamation of deleted tables. Keys are encoded into bytes here ([`key`]) and
//! nowhere else.

mod across;
mod catalog;
mod commit;
mod durability;
mod feed;
mod format;
mod indexes;
mod key;
mod locks;
mod reclaim;
mod secret;
mod snapshot;
mod space;
mod table;
mod undo;

use std::collections::HashMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use catalog::{TableRecord, TableState};
pub use durability::Durability;
pub use format::{CURRENT_FORMAT, FORMAT_KEY};
use reclaim::{drop_orphan_trees, Reclaimer};
pub use table::SledTable;

use super::{
    codec, Commit, CommitOutcome, CreateRefusal, DurableListener, EntityView, Fault, FoundVisitor,
    RejectReason, Rejection, SettingsChange, SnapshotSink, StorageError, Store, StoreFuture,
    StoredRow, Table, TableKey, TableListing, Ticket,
};
use crate::model::{IndexDefinition, TableName};
use crate::storage::StoreSecret;

const CATALOG_TREE: &str = "catalog";
const TABLE_TREE_PREFIX: &str = "t/";

/// The default bound of sled's page cache, in MiB of stored bytes (as sled counts them): with
/// 1,000,000 small entities loaded, read at random and scanned, the server stays under 300 MiB of
/// RSS (the README's Performance section measures the choice against 64 MiB).
pub const DEFAULT_CACHE_MIB: u64 = 48;

/// How to open the store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// sled's page cache bound, in bytes.
    pub cache_bytes: u64,
    /// When writes are acknowledged.
    pub durability: Durability,
    /// Writes are refused while the disk has less free space than this (0 = no reserve).
    pub min_free_bytes: u64,
    /// Reclaim deleted tables in the background. Off only in tests that need to observe a table
    /// while it is being deleted; reclamation then waits for the next open.
    pub reclaim_deleted_tables: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            cache_bytes: DEFAULT_CACHE_MIB * 1024 * 1024,
            durability: Durability::Sync,
            min_free_bytes: 64 * 1024 * 1024,
            reclaim_deleted_tables: true,
        }
    }
}

/// State shared by every table of the store.
#[derive(Debug)]
struct Shared {
    locks: locks::PartitionLocks,
    durability: durability::GroupCommit,
    space: space::SpaceReserve,
    undo: undo::UndoLog,
    claims: indexes::UniqueClaims,
    /// The snapshot being read, if any, and the gate its commits pass.
    snapshots: Arc<snapshot::Snapshots>,
    /// Numbers transactions for the change feeds, and says how far readers may read.
    feed: feed::FeedClock,
    /// The database, for ids.
    db: sled::Db,
}

impl Shared {
    /// A commit is about to change rows of `partitions` (none: a catalog or a setting):
    /// announced to group commit, so that reads wait for it
    /// ([`durability::GroupCommit::read_fence`]). Take it before the first change.
    fn applying<'p>(
        &self,
        partitions: impl IntoIterator<Item = &'p [u8]>,
    ) -> durability::Applying<'_> {
        self.durability.applying(partitions)
    }

    /// A commit's rows are applied: records the write for group commit, and lets its feed turn
    /// (if it took one) be read once the write is durable. The ticket to wait for.
    fn written(
        &self,
        applying: durability::Applying<'_>,
        turn: Option<feed::Turn<'_>>,
    ) -> Option<Ticket> {
        let ticket = applying.written();
        if let Some(turn) = turn {
            turn.written(ticket);
        }
        ticket
    }
}

/// The sled store: one sled database holding every table.
#[derive(Debug)]
pub struct SledStore {
    db: sled::Db,
    catalog: sled::Tree,
    /// Serialises table creation and deletion.
    catalog_writes: Mutex<()>,
    /// Live tables by folded name.
    tables: RwLock<HashMap<String, Arc<SledTable>>>,
    shared: Arc<Shared>,
    reclaimer: Option<Reclaimer>,
    /// The store's secret ([`secret`]).
    secret: StoreSecret,
}

impl SledStore {
    /// Opens (or creates) the store in `path`, rolls back the commits a crash interrupted, and
    /// resumes reclaiming tables whose deletion a crash interrupted.
    pub fn open(path: &Path, options: StoreOptions) -> Result<SledStore, StorageError> {
        let mut config = sled::Config::new()
            .path(path)
            .cache_capacity(options.cache_bytes);
        if let Durability::Periodic { flush_every_ms } = options.durability {
            config = config.flush_every_ms(Some(flush_every_ms));
        }
        let db = open_when_unlocked(&config)?;
        format::check_or_mark(&db)?;
        let secret = secret::load_or_create(&db)?;
        let catalog = db.open_tree(CATALOG_TREE)?;
        let shared = Arc::new(Shared {
            locks: locks::PartitionLocks::default(),
            durability: durability::GroupCommit::new(db.clone(), options.durability),
            space: space::SpaceReserve::new(path, options.min_free_bytes),
            undo: undo::UndoLog::open(&db)?,
            claims: indexes::UniqueClaims::default(),
            snapshots: Arc::default(),
            feed: feed::FeedClock::new(db.clone()),
            db: db.clone(),
        });
        let mut tables = HashMap::new();
        let mut trees = HashMap::new();
        let mut deleting = Vec::new();
        for item in catalog.iter() {
            let (folded, bytes) = item?;
            let record = TableRecord::decode(&bytes)?;
            match record.state {
                TableState::Active => {
                    let tree = db.open_tree(SledTable::tree_name(record.id))?;
                    trees.insert(record.id, tree.clone());
                    let table = SledTable::new(record.id, record.name, tree, shared.clone())?;
                    tables.insert(
                        String::from_utf8_lossy(&folded).into_owned(),
                        Arc::new(table),
                    );
                }
                TableState::Deleting => deleting.push(record),
            }
        }
        let rolled_back = shared.undo.roll_back(&trees)?;
        if rolled_back > 0 {
            db.flush()?;
            tracing::warn!(
                commits = rolled_back,
                "rolled back the commits a crash interrupted"
            );
        }
        drop_orphan_trees(&db, &tables, &deleting)?;
        let unfinished = feed::drop_unfinished(&db, tables.values().map(|table| table.as_ref()))?;
        if unfinished > 0 {
            db.flush()?;
            tracing::warn!(
                records = unfinished,
                "removed the change records of inserts a crash interrupted"
            );
        }
        let next = feed::next_transaction(tables.values().map(|table| table.as_ref()))?;
        shared.feed.start_at(next);
        for table in tables.values() {
            indexes::resume(table)?;
        }
        let reclaimer = options
            .reclaim_deleted_tables
            .then(|| Reclaimer::start(db.clone(), catalog.clone(), shared.snapshots.clone()));
        if let Some(reclaimer) = &reclaimer {
            for record in deleting {
                reclaimer.enqueue(record);
            }
        }
        Ok(SledStore {
            db,
            catalog,
            catalog_writes: Mutex::new(()),
            tables: RwLock::new(tables),
            shared,
            reclaimer,
            secret,
        })
    }

    /// The live sled table called `name` (ignoring case), if any.
    fn sled_table(&self, name: &TableName) -> Option<Arc<SledTable>> {
        let tables = self.tables.read().unwrap_or_else(PoisonError::into_inner);
        tables.get(name.folded()).cloned()
    }
}

/// The prefix of the settings' keys in sled's default tree.
const SETTING_PREFIX: &str = "trestle.setting.";

impl Store for SledStore {
    fn commit(self: Arc<Self>, commit: Commit) -> StoreFuture<'static, CommitOutcome> {
        Box::pin(self.apply(commit))
    }

    fn get_many(
        &self,
        keys: &[TableKey],
        found: &mut FoundVisitor<'_>,
    ) -> Result<(), StorageError> {
        self.read_across(keys, found, true).map(drop)
    }

    fn try_get_many(
        &self,
        keys: &[TableKey],
        found: &mut FoundVisitor<'_>,
    ) -> Result<bool, StorageError> {
        self.read_across(keys, found, false)
    }

    fn setting(&self, name: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let value = self.db.get(format!("{SETTING_PREFIX}{name}"))?;
        Ok(value.map(|value| value.to_vec()))
    }

    /// Written to sled's default tree and flushed at once (in either durability mode): settings
    /// change seldom.
    fn put_setting(&self, name: &str, value: Option<&[u8]>) -> Result<(), StorageError> {
        let key = format!("{SETTING_PREFIX}{name}");
        let applying = self.shared.applying([]);
        match value {
            Some(value) => self.db.insert(key, value)?,
            None => self.db.remove(key)?,
        };
        self.db.flush()?;
        // Flushed already: the ticket is only for readers that may have seen it.
        let _ = applying.written();
        Ok(())
    }

    fn table(&self, name: &TableName) -> Result<Option<Arc<dyn Table>>, StorageError> {
        Ok(self.sled_table(name).map(|table| table as Arc<dyn Table>))
    }

    fn create_table(
        &self,
        name: &TableName,
        indexes: &[IndexDefinition],
        settings: SettingsChange,
    ) -> Result<Result<Arc<dyn Table>, CreateRefusal>, StorageError> {
        let _serial = self
            .catalog_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.shared.space.check()?;
        if let Some(bytes) = self.catalog.get(name.folded())? {
            return Ok(Err(match TableRecord::decode(&bytes)?.state {
                TableState::Active => CreateRefusal::AlreadyExists,
                TableState::Deleting => CreateRefusal::BeingDeleted,
            }));
        }
        let record = TableRecord {
            id: self.db.generate_id()?,
            state: TableState::Active,
            name: name.clone(),
        };
        let tree = self.db.open_tree(SledTable::tree_name(record.id))?;
        let table = Arc::new(SledTable::new(
            record.id,
            name.clone(),
            tree,
            self.shared.clone(),
        )?);
        table.declare_at_creation(indexes, settings)?;
        let applying = self.shared.applying([]);
        self.catalog.insert(name.folded(), record.encode())?;
        applying.wait_durable()?;
        self.tables
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.folded().to_owned(), table.clone());
        Ok(Ok(table))
    }

    fn delete_table(&self, name: &TableName) -> Result<bool, StorageError> {
        let _serial = self
            .catalog_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(table) = self.sled_table(name) else {
            return Ok(false);
        };
        let record = TableRecord {
            id: table.id(),
            state: TableState::Deleting,
            name: table.name().clone(),
        };
        let applying = self.shared.applying([]);
        self.catalog.insert(name.folded(), record.encode())?;
        applying.wait_durable()?;
        self.tables
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name.folded());
        table.retire();
        if let Some(reclaimer) = &self.reclaimer {
            reclaimer.enqueue(record);
        }
        Ok(true)
    }

    fn list_tables(&self, page: TableListing<'_>) -> Result<(Vec<TableName>, bool), StorageError> {
        let (folded_prefix, limit) = (page.folded_prefix, page.limit);
        let start = match page.after {
            Some(after) => Bound::Excluded(after.as_bytes().to_vec()),
            None => Bound::Included(folded_prefix.as_bytes().to_vec()),
        };
        let mut names = Vec::new();
        for item in self.catalog.range((start, Bound::Unbounded)) {
            let (folded, bytes) = item?;
            if !folded.starts_with(folded_prefix.as_bytes()) {
                break;
            }
            let record = TableRecord::decode(&bytes)?;
            if record.state == TableState::Deleting {
                continue;
            }
            if names.len() == limit {
                return Ok((names, true));
            }
            names.push(record.name);
        }
        Ok((names, false))
    }

    fn wait_for(&self, ticket: Ticket) -> Result<(), StorageError> {
        self.shared.durability.wait_durable(ticket)
    }

    fn durable(&self) -> Ticket {
        self.shared.durability.durable()
    }

    fn read_fence(&self, partitions: Option<&[&str]>) -> Ticket {
        let keys: Option<Vec<&[u8]>> =
            partitions.map(|keys| keys.iter().map(|key| key.as_bytes()).collect());
        self.shared.durability.read_fence(keys.as_deref())
    }

    fn on_durable(&self, listener: DurableListener) {
        self.shared.durability.on_durable(listener);
    }

    fn flush(&self) -> Result<(), StorageError> {
        self.db.flush()?;
        Ok(())
    }

    fn secret(&self) -> &StoreSecret {
        &self.secret
    }

    fn snapshot(&self, sink: &mut SnapshotSink<'_>) -> Result<bool, StorageError> {
        self.read_snapshot(sink).map(|()| true)
    }

    fn load(&self, name: &TableName, rows: &[StoredRow]) -> Result<bool, StorageError> {
        let table = self
            .sled_table(name)
            .ok_or_else(|| StorageError::Corrupt(format!("no table {name} to load rows into")))?;
        self.shared.space.check()?;
        for row in rows {
            let stored_key = key::encode(&row.key.partition_key, &row.key.row_key);
            table.tree.insert(stored_key, row.record.as_slice())?;
        }
        self.db.flush()?;
        Ok(true)
    }

    fn calls_are_local(&self) -> bool {
        true
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        if let Some(reclaimer) = self.reclaimer.take() {
            reclaimer.stop();
        }
    }
}

/// sled's faults, classified for the storage contract: a full disk, or a failure.
impl From<sled::Error> for StorageError {
    fn from(error: sled::Error) -> StorageError {
        let fault = match &error {
            sled::Error::Io(io) if super::io_is_disk_full(io) => Fault::DiskFull,
            _ => Fault::Failed,
        };
        StorageError::backend(fault, error).during("sled")
    }
}

/// How long opening waits for the data directory's lock.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Opens the database, waiting up to [`LOCK_WAIT`] for the data directory's lock: a store this
/// process has just dropped may hold it a little longer while its background threads end (a
/// restart in-process, as tests do, met it on a loaded machine). A lock another process holds
/// still refuses, once the wait is over.
fn open_when_unlocked(config: &sled::Config) -> Result<sled::Db, sled::Error> {
    let started = std::time::Instant::now();
    loop {
        match config.open() {
            Err(sled::Error::Io(error))
                if error.to_string().contains("could not acquire lock")
                    && started.elapsed() < LOCK_WAIT =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            opened => return opened,
        }
    }
}

#[cfg(test)]
mod sled_fork_tests;
