//! The storage contract, and the stores that keep it.
//!
//! A store keeps tables of entities and speaks only model terms: table names and ids, entity keys,
//! [`KeyRange`]s of (PartitionKey, RowKey) positions, a direction, a bound on work the caller's
//! visitor sets, a resume position ([`KeyPosition`]), a partition batch of [`Operation`]s with
//! their preconditions, and durability tickets. Nothing above this module sees how a store lays
//! its keys out: the sled store ([`SledStore`], the embedded default) encodes keys into bytes of
//! its own, and a SQL store would turn the same ranges into `WHERE` bounds.
//!
//! Two traits: [`Store`], the catalog, durability and the one way entities are written
//! ([`Store::commit`]), and [`Table`], one table's reads. Entities are read in place as
//! [`EntityView`]s (the stored record format of `storage/codec.rs`, which every store may keep as
//! it is).
//!
//! **Writes: one async commit.** Every write (a single entity, a partition transaction, a
//! transaction across partitions and tables, an expiry) is one [`Commit`] given to
//! [`Store::commit`]; each store has one apply behind it, whose fast paths are strategies it
//! picks, each held to the same rules (indexes, feed records and their visibility order, TTL).
//! The store decides how the work runs: inline on the caller's runtime worker when it is short
//! and need not wait (sled), awaited over its connections (PostgreSQL), or on the blocking pool
//! ([`on_blocking_pool`]).
//!
//! **Reads: synchronously, on the blocking pool.** A read hands each entity to a callback that
//! borrows the store's own buffers (no copy of what a filter rejects), which an async trait could
//! not do without boxing every entity; sled is synchronous; and the service already runs long
//! work on the blocking pool. A store whose calls go over the network (a PostgreSQL store) blocks
//! the pool thread while it waits, bounded by the pool's size and the store's own connection
//! pool, and says so through [`Store::calls_are_local`]: only a local store's short reads are run
//! inline on a runtime worker. Such a store may serve the reads most requests are made of awaited
//! as well ([`Store::awaited`], [`AwaitedCalls`]): a request waiting for them holds no thread, and
//! whatever they cannot serve goes the blocking way.

pub(crate) mod changes;
mod codec;
mod config;
mod error;
mod indexes;
mod postgres_store;
mod secret;
mod sled_store;

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use changes::{FeedBatch, FeedEnd, FeedPosition, StoredChange};
pub(crate) use codec::decode_selected;
pub use codec::{EntityView, PropertyBytes, Shown, StoredProperties, StoredValue};
pub use config::{open, StoreConfig, DEFAULT_STORE_POOL_SIZE};
pub use error::{io_is_disk_full, Fault, RejectReason, Rejection, StorageError};
pub use indexes::{
    build_in_background, entity_sort_keys, BuildStep, IndexCatalog, IndexRefusal, SettingsChange,
};
pub use postgres_store::{
    PostgresOptions, PostgresStore, PostgresTable, PURGE_BATCH, SCHEMA_VERSION,
};
pub use secret::{StoreSecret, SECRET_BYTES};
pub use sled_store::{
    Durability, SledStore, SledTable, StoreOptions, CURRENT_FORMAT, DEFAULT_CACHE_MIB, FORMAT_KEY,
};

use crate::model::{
    ChangeFeed, EntityKey, Index, IndexDefinition, IndexRange, IndexState, Operation, StoredEntity,
    TableName, Ticks, TimeToLive,
};
pub use crate::model::{KeyPosition, KeyRange};

/// A durability ticket: a write is durable once the store's durable ticket reaches its own.
pub type Ticket = u64;

/// Called with each new durable ticket.
pub type DurableListener = Box<dyn Fn(Ticket) + Send + Sync>;

/// What a commit stored, and the ticket to wait for before acknowledging it.
#[derive(Debug)]
pub struct Committed {
    /// The entity each operation stored (`None` for deletes and checks).
    pub stored: Vec<Option<StoredEntity>>,
    /// Durable once the store's durable ticket reaches it; `None` if nothing was written.
    pub ticket: Option<Ticket>,
}

/// A visitor's answer for the entity it was shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    /// Go on to the next entity.
    Next,
    /// Stop before this entity: the scan resumes here next time.
    Stop,
    /// Go on past the rest of this entity's partition: none of its rows is wanted. A hint: a
    /// store may show them all the same (the visitor then says this again for each); a scan by
    /// key seeks past them ([`Table::visit`]).
    SkipPartition,
}

/// Sees each entity of a scan, read in place, and says whether to go on.
pub type Visitor<'a> = dyn FnMut(&EntityView<'_>) -> Result<Visit, StorageError> + 'a;

/// What a scan by key reads ([`Table::visit`]): ranges of keys, and in which direction.
#[derive(Debug, Clone, Copy)]
pub struct KeyScan<'a> {
    /// The ranges, ascending and disjoint.
    pub ranges: &'a [KeyRange],
    /// Whether the keys are read in descending order.
    pub reverse: bool,
    /// How many rows the visitor is expected to see before it stops, where the caller knows (a
    /// page without a filter stops on the row past its last match): a store that reads rows in
    /// batches asks for no more than that. A hint only: the visitor may stop sooner or later.
    pub expected_rows: Option<usize>,
}

impl<'a> KeyScan<'a> {
    /// `ranges` in ascending key order, however many rows the visitor takes.
    pub fn forward(ranges: &'a [KeyRange]) -> KeyScan<'a> {
        KeyScan {
            ranges,
            reverse: false,
            expected_rows: None,
        }
    }

    /// The ranges in the order the scan reads them: descending if `reverse`.
    pub fn ranges_in_order(&self) -> Box<dyn Iterator<Item = &'a KeyRange> + 'a> {
        if self.reverse {
            Box::new(self.ranges.iter().rev())
        } else {
            Box::new(self.ranges.iter())
        }
    }
}

/// What a scan through an index reads ([`Indexed::visit_index`]): a range of the index's sort
/// keys, and in which direction.
#[derive(Debug, Clone, Copy)]
pub struct IndexScan<'a> {
    /// The index, as the table's catalog declares it.
    pub index: &'a Index,
    /// The sort keys to read.
    pub range: &'a IndexRange,
    /// Whether the sort keys are read in descending order.
    pub reverse: bool,
    /// How many entries the visitor is expected to see before it stops, where the caller knows:
    /// a hint, as [`KeyScan::expected_rows`].
    pub expected_rows: Option<usize>,
}

/// What a commit does: what it stored, or the operation refused and why (nothing written).
pub type CommitOutcome = Result<Committed, Rejection>;

/// One partition's part of a [`Commit`]: its table, its partition, its operations in order, and
/// each one's position in the whole commit.
#[derive(Debug, Clone)]
pub struct PartitionBatch {
    /// The table, by name (ignoring case).
    pub table: TableName,
    /// The partition every operation acts on.
    pub partition_key: String,
    /// The operations, each on a different row, in transaction order.
    pub operations: Vec<Operation>,
    /// Each operation's position in the transaction: where its result goes, and the index a
    /// refusal names.
    pub positions: Vec<usize>,
    /// The batch is the commit's idempotency record (one insert): the store seals the commit's
    /// outcome into it once every batch is planned ([`seal_record`]).
    pub seals_outcome: bool,
}

/// Seals a commit's outcome into its idempotency record (the batch that
/// [`PartitionBatch::seals_outcome`]) once every batch is planned (`planned`, each batch with its
/// plan) and before anything is written: each store's apply calls it between the two, whatever
/// its strategy, so that the record and the outcome it names commit together. Gives the record's
/// place in `planned`, whose row the store encodes again; `None` if the commit has no record.
pub fn seal_record(
    planned: &mut [(&PartitionBatch, &mut crate::model::CommitPlan)],
    operations: usize,
) -> Option<usize> {
    let at = planned.iter().position(|(batch, _)| batch.seals_outcome)?;
    let mut record = planned[at].1.results.first_mut()?.take()?;
    let others = planned
        .iter()
        .map(|(batch, plan)| (batch.positions.as_slice(), plan.results.as_slice()));
    crate::model::seal_outcome(&mut record, others, operations);
    planned[at].1.results[0] = Some(record);
    Some(at)
}

/// A commit, the one way entities are written ([`Store::commit`]): one or more partition
/// batches, of one or more tables, applied all together or not at all. A single-entity write is
/// the smallest (one batch of one operation).
#[derive(Debug, Clone)]
pub struct Commit {
    /// One batch per partition, each of a different table and partition; their positions are
    /// together `0..operations`, ascending within each batch.
    pub batches: Vec<PartitionBatch>,
    /// How many operations the batches hold together.
    pub operations: usize,
}

impl Commit {
    /// A commit of `operations` (each on a different row) on one partition of `table`.
    pub fn on_partition(
        table: TableName,
        partition_key: String,
        operations: Vec<Operation>,
    ) -> Commit {
        let count = operations.len();
        Commit {
            batches: vec![PartitionBatch {
                table,
                partition_key,
                operations,
                positions: (0..count).collect(),
                seals_outcome: false,
            }],
            operations: count,
        }
    }

    /// The one batch of a commit on one partition, if it is one.
    pub fn single_partition(&self) -> Option<&PartitionBatch> {
        match self.batches.as_slice() {
            [batch] => Some(batch),
            _ => None,
        }
    }
}

/// Runs `work` on the runtime's blocking pool, in the store's `blocking` span: how a store runs
/// what must wait (for a lock, or for its database) when its caller must not. A panic in `work`
/// goes on unwinding in the caller, as if it had run there.
pub async fn on_blocking_pool<T, F>(work: F) -> Result<T, StorageError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StorageError> + Send + 'static,
{
    let span = crate::traces::store_span("blocking");
    match tokio::task::spawn_blocking(move || span.in_scope(work)).await {
        Ok(outcome) => outcome,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(StorageError::backend(Fault::Unavailable, error)),
    }
}

/// Which of the live tables' names to list ([`Store::list_tables`]).
#[derive(Debug, Clone, Copy)]
pub struct TableListing<'a> {
    /// Only names whose folded form starts with this.
    pub folded_prefix: &'a str,
    /// Only names whose folded form comes after this one.
    pub after: Option<&'a str>,
    /// At most this many names.
    pub limit: usize,
}

/// One key of a read across partitions ([`Store::get_many`]).
#[derive(Debug, Clone)]
pub struct TableKey {
    /// The table, by name (ignoring case).
    pub table: TableName,
    /// The entity's keys.
    pub key: EntityKey,
}

/// Sees each entity a read across partitions finds: its position among the keys asked, and the
/// entity read in place.
pub type FoundVisitor<'a> = dyn FnMut(usize, EntityView<'_>) -> Result<(), StorageError> + 'a;

/// One table of a snapshot ([`Store::snapshot`]): its name and the definitions of its indexes
/// (those not failed), which a restore declares anew.
#[derive(Debug, Clone)]
pub struct SnapshotTable {
    /// The table's id in the store (what its settings, such as access policies, are kept by).
    pub id: u64,
    /// The table's name as created.
    pub name: TableName,
    /// Its indexes' definitions, in declaration order.
    pub indexes: Vec<IndexDefinition>,
    /// Its change feed, if it keeps one (a restore turns it on; the records are not copied).
    pub change_feed: Option<ChangeFeed>,
    /// When its entities expire, if they do.
    pub time_to_live: Option<TimeToLive>,
}

/// What a snapshot gives, in order: the tables once, then their entity rows.
#[derive(Debug)]
pub enum SnapshotItem<'a> {
    /// Every live table at the snapshot's instant.
    Tables(&'a [SnapshotTable]),
    /// An entity row of the `table`th table, as stored (`storage/codec.rs`'s record).
    Row {
        table: usize,
        partition_key: &'a str,
        row_key: &'a str,
        record: &'a [u8],
    },
}

/// Takes what a snapshot gives.
pub type SnapshotSink<'a> = dyn FnMut(SnapshotItem<'_>) -> Result<(), StorageError> + 'a;

/// An entity row as stored, for [`Store::load`].
#[derive(Debug, Clone)]
pub struct StoredRow {
    /// The entity's keys.
    pub key: EntityKey,
    /// Its record (`storage/codec.rs`), Timestamp included.
    pub record: Vec<u8>,
}

/// Why a table cannot be created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateRefusal {
    /// A table of that name (ignoring case) exists.
    AlreadyExists,
    /// A table of that name is still being reclaimed.
    BeingDeleted,
}

/// Reads a point read's entity, told the table's time to live as it stands
/// ([`Store::get_named`]).
pub type NamedGetVisitor<'a> =
    dyn FnMut(Option<TimeToLive>, EntityView<'_>) -> Result<(), StorageError> + 'a;

/// A read of a table's change feed by the table's name ([`Store::read_changes_named`]).
#[derive(Debug)]
pub struct FeedRead {
    /// The table's name as created.
    pub name: TableName,
    /// The table's catalog (whether it keeps a feed).
    pub catalog: IndexCatalog,
    /// The records read, in feed order (none if the table keeps no feed).
    pub changes: Vec<StoredChange>,
    /// The position the feed was trimmed to, if it was.
    pub trimmed_to: Option<FeedPosition>,
}

/// A table the housekeeping tends, with its catalog as read ([`Store::tables_to_tend`]).
pub type TendedTable = (Arc<dyn Table>, IndexCatalog);

/// The catalog of tables and the durability of writes.
pub trait Store: Send + Sync + Debug {
    /// The live table called `name` (ignoring case), if any.
    fn table(&self, name: &TableName) -> Result<Option<Arc<dyn Table>>, StorageError>;

    /// Creates a table with `indexes` (checked: distinct names, at most
    /// [`crate::model::MAX_INDEXES_PER_TABLE`]), ready at once, and `settings` (its feed and
    /// expiry), durably: its first commit sees all of them.
    fn create_table(
        &self,
        name: &TableName,
        indexes: &[IndexDefinition],
        settings: SettingsChange,
    ) -> Result<Result<Arc<dyn Table>, CreateRefusal>, StorageError>;

    /// Deletes a table: it disappears at once, durably, and its rows are reclaimed in the
    /// background. `Ok(false)` if there is no such table.
    fn delete_table(&self, name: &TableName) -> Result<bool, StorageError>;

    /// The names of the live tables the page asks for, in folded-name order, and whether more
    /// follow.
    fn list_tables(&self, page: TableListing<'_>) -> Result<(Vec<TableName>, bool), StorageError>;

    /// A point read by the table's name: `None` if there is no live table called `name`, else
    /// whether the entity at `key` is there (`read` is called with it and the table's time to
    /// live). By default [`Store::table`] then [`Table::get`]; a remote store does both in one
    /// statement, so that the table's lookup costs no round trip of its own and is never stale.
    fn get_named(
        &self,
        name: &TableName,
        key: &EntityKey,
        read: &mut NamedGetVisitor<'_>,
    ) -> Result<Option<bool>, StorageError> {
        let Some(table) = self.table(name)? else {
            return Ok(None);
        };
        let ttl = table.time_to_live();
        table.get(key, &mut |entity| read(ttl, entity)).map(Some)
    }

    /// The records of the change feed of the table called `name` after `after`, within `limit`, with
    /// the table's name and catalog and where its feed was trimmed to, all as of one instant:
    /// `None` if there is no live table of that name. By default [`Store::table`], then
    /// [`Table::read_changes`] and [`Table::feed_trimmed_to`] (after the read: trimming notes its
    /// position before it removes a record); a remote store reads all of it in one statement, so
    /// that a follower polling the feed costs one round trip.
    fn read_changes_named(
        &self,
        name: &TableName,
        after: Option<FeedPosition>,
        limit: FeedBatch,
    ) -> Result<Option<FeedRead>, StorageError> {
        let Some(table) = self.table(name)? else {
            return Ok(None);
        };
        let catalog = table.indexes()?;
        let changes = match catalog.change_feed {
            Some(_) => table.read_changes(after, limit)?,
            None => Vec::new(),
        };
        Ok(Some(FeedRead {
            name: table.name().clone(),
            catalog,
            changes,
            trimmed_to: table.feed_trimmed_to()?,
        }))
    }

    /// Every live table that keeps a change feed or lets its entities expire (what the server's
    /// housekeeping tends each second), with its catalog. By default from [`Store::list_tables`]
    /// and each table's catalog; a remote store reads them in one statement.
    fn tables_to_tend(&self) -> Result<Vec<TendedTable>, StorageError> {
        let mut tended = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let (names, more) = self.list_tables(TableListing {
                folded_prefix: "",
                after: after.as_deref(),
                limit: 1_000,
            })?;
            for name in &names {
                if let Some(table) = self.table(name)? {
                    let catalog = table.indexes()?;
                    if catalog.needs_upkeep() {
                        tended.push((table, catalog));
                    }
                }
            }
            match (more, names.last()) {
                (true, Some(last)) => after = Some(last.folded().to_owned()),
                _ => return Ok(tended),
            }
        }
    }

    /// The store's setting `name`, if set: a small record the engine encodes and the store keeps
    /// as it is (the service's properties, a table's stored access policies).
    fn setting(&self, name: &str) -> Result<Option<Vec<u8>>, StorageError>;

    /// Sets setting `name` to `value` (`None` removes it), durably; the last write wins.
    fn put_setting(&self, name: &str, value: Option<&[u8]>) -> Result<(), StorageError>;

    /// Applies `commit` atomically, the one way the store writes entities: every precondition
    /// is checked against the current rows, then every effect is written (the entities, their
    /// index entries, their change records in the feed's visibility order, as the tables'
    /// catalogs stand at the commit), or nothing is. The partitions are held in one fixed order
    /// (table id, then partition key) from the first read to the last write, so the commit is
    /// serializable with every other commit and read of those partitions and never deadlocks;
    /// partitions it does not touch never wait for it. Returns what each operation stored, by
    /// position, and the ticket to wait for; or the refused operation (by position): of the
    /// operations that cannot apply to the current rows, the earliest; then a unique index value
    /// taken. A table that does not exist is [`RejectReason::TableGone`] at its first operation.
    ///
    /// The store decides how the work runs (inline when it is short and need not wait, awaited,
    /// or [`on_blocking_pool`]); called within a tokio runtime. Dropped before it is ready, the
    /// commit may or may not apply.
    fn commit(self: Arc<Self>, commit: Commit) -> StoreFuture<'static, CommitOutcome>;

    /// Reads `keys` (of any tables; each at most once) at one instant: the read sees all or none
    /// of every commit, across partitions too. Passes each entity found to `found`
    /// with its position; a key without an entity, or of a table that does not exist, is skipped.
    fn get_many(&self, keys: &[TableKey], found: &mut FoundVisitor<'_>)
        -> Result<(), StorageError>;

    /// [`Store::get_many`] if no commit holds or waits for a partition it reads; `false`, having
    /// read nothing, if it would wait. A store whose calls are local
    /// ([`Store::calls_are_local`]) offers it, so that the read can run on a runtime worker; by
    /// default nothing is tried.
    fn try_get_many(
        &self,
        _keys: &[TableKey],
        _found: &mut FoundVisitor<'_>,
    ) -> Result<bool, StorageError> {
        Ok(false)
    }

    // Durability. The defaults suit a store whose commits are durable when they return (and so
    // hand out no tickets).

    /// Blocks until the write with `ticket` is durable.
    fn wait_for(&self, _ticket: Ticket) -> Result<(), StorageError> {
        Ok(())
    }

    /// The highest durable ticket.
    fn durable(&self) -> Ticket {
        0
    }

    /// The ticket a read that has just read `partitions` (their keys; `None`: anything) must see
    /// durable before it answers: the store may show a write before it is durable, and a crash
    /// must not lose a write someone was shown. `0` for a store that shows a commit only once it
    /// is durable.
    fn read_fence(&self, _partitions: Option<&[&str]>) -> Ticket {
        0
    }

    /// Registers the listener called with each new durable ticket, so that async callers can
    /// wait for durability without holding a thread.
    fn on_durable(&self, _listener: DurableListener) {}

    /// Makes everything written so far durable (at shutdown).
    fn flush(&self) -> Result<(), StorageError> {
        Ok(())
    }

    /// The store's own secret, the same at every open (and on every server sharing the store).
    fn secret(&self) -> &StoreSecret;

    // Backups. The defaults suit a store backed up by its database's own tools.

    /// Gives every live table and then each one's entity rows, as they were at one instant, to
    /// `sink`, while reads and writes go on: `false` (nothing given) if the store cannot.
    fn snapshot(&self, _sink: &mut SnapshotSink<'_>) -> Result<bool, StorageError> {
        Ok(false)
    }

    /// Writes `rows` as they are (their Timestamps, and so their ETags, kept) into table `name`,
    /// which holds none of them yet (a restore), and makes them durable: `false` (nothing
    /// written) if the store cannot.
    fn load(&self, _name: &TableName, _rows: &[StoredRow]) -> Result<bool, StorageError> {
        Ok(false)
    }

    /// Whether every call is local and short (no network, no waiting on other processes), so
    /// the engine may try point reads on a runtime worker ([`Table::try_get`],
    /// [`Store::try_get_many`]) rather than hand them to the blocking pool. Not, unless a store
    /// says so.
    fn calls_are_local(&self) -> bool {
        false
    }

    /// The reads this store serves awaited, holding no thread while its database answers, if it
    /// serves any ([`AwaitedCalls`]). None, unless a store says so.
    fn awaited(&self) -> Option<&dyn AwaitedCalls> {
        None
    }
}

/// What an awaited store call gives.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StorageError>> + Send + 'a>>;

/// Reads an awaited point read's entity, told the table's time to live as it stands.
pub type AwaitedGetVisitor<'a> =
    dyn FnMut(Option<TimeToLive>, EntityView<'_>) -> Result<(), StorageError> + Send + 'a;

/// Sees each entity an awaited read across partitions finds ([`AwaitedCalls::get_many_named`]):
/// its position among the keys asked, its table's time to live as it stands, and the entity.
pub type AwaitedFoundVisitor<'a> =
    dyn FnMut(usize, Option<TimeToLive>, EntityView<'_>) -> Result<(), StorageError> + Send + 'a;

/// A [`Visitor`] an awaited call holds across its awaits.
pub type SendVisitor<'a> = dyn FnMut(&EntityView<'_>) -> Result<Visit, StorageError> + Send + 'a;

/// The store at one instant, read awaited ([`AwaitedCalls::read_snapshot`],
/// [`AwaitedCalls::begin_snapshot`]). End it with [`AwaitedSnapshot::end`]; one dropped without
/// it may cost the store a connection.
pub trait AwaitedSnapshot: Send {
    /// [`Table::visit`] of the table `table_id` in the snapshot, awaited.
    fn visit<'a>(
        &'a mut self,
        table_id: u64,
        scan: KeyScan<'a>,
        visitor: &'a mut SendVisitor<'_>,
    ) -> StoreFuture<'a, Option<KeyPosition>>;

    /// Ends the snapshot.
    fn end(&mut self) -> StoreFuture<'_, ()>;
}

/// A snapshot, and a table looked up in it ([`AwaitedCalls::read_snapshot`]).
pub type TableSnapshot<'a> = (Arc<dyn Table>, Box<dyn AwaitedSnapshot + 'a>);

/// The reads a store over the network serves awaited ([`Store::awaited`]): those most requests
/// are made of, point reads, reads of many keys and query pages. While the database answers, the
/// request holds no thread (the blocking pool's threads are for the rest).
pub trait AwaitedCalls: Send + Sync {
    /// [`Store::get_named`], awaited.
    fn get_named<'a>(
        &'a self,
        name: &'a TableName,
        key: &'a EntityKey,
        read: &'a mut AwaitedGetVisitor<'_>,
    ) -> StoreFuture<'a, Option<bool>>;

    /// [`Store::get_many`] of `keys`, awaited, the tables looked up by name at the same instant
    /// as the entities: `Some` position of the first key whose table does not exist (then
    /// `found` is shown nothing), else `None` once `found` has seen every entity there is.
    fn get_many_named<'a>(
        &'a self,
        keys: &'a [TableKey],
        found: &'a mut AwaitedFoundVisitor<'_>,
    ) -> StoreFuture<'a, Option<usize>>;

    /// A snapshot begun awaited and the live table called `name` as it is in it (`None`, the
    /// snapshot ended, if there is none): a page of a query is read in it by key
    /// ([`AwaitedSnapshot::visit`]).
    fn read_snapshot<'s: 'a, 'a>(
        &'s self,
        name: &'a TableName,
    ) -> StoreFuture<'a, Option<TableSnapshot<'s>>>;

    /// A snapshot begun awaited, for a table already looked up (a chunk of a streamed query).
    fn begin_snapshot(&self) -> StoreFuture<'_, Box<dyn AwaitedSnapshot + '_>>;
}

/// A table's declared indexes: part of the [`Table`] contract. Every commit keeps every index
/// that is not `Failed` in the same atomic write as its entities (`model::EntryChanges`), and
/// refuses a value a unique index holds for another entity (`Refusal::IndexValueTaken`). Sort
/// keys are the model's order-preserving encoding of the indexed values (`model::IndexDefinition::
/// sort_key`), the same for every store.
pub trait Indexed {
    /// The table's indexes, as of the handle's lookup or later.
    fn indexes(&self) -> Result<IndexCatalog, StorageError>;

    /// Declares an index, durably, `Building`: commits keep it from now on, and
    /// [`build_in_background`] adds the entities already there.
    fn create_index(
        &self,
        definition: IndexDefinition,
    ) -> Result<Result<Index, IndexRefusal>, StorageError>;

    /// Drops the index called `name` (ignoring case) at once, durably; its entries are reclaimed
    /// in the background. `Ok(false)` if there is no such index.
    fn drop_index(&self, name: &str) -> Result<bool, StorageError>;

    /// Adds the entries of one bounded run of entities, from `from` (the start if `None`), of one
    /// partition, holding that partition against commits meanwhile. [`StorageError::IndexGone`]
    /// once the index is dropped.
    fn build_index(
        &self,
        index_id: u64,
        from: Option<KeyPosition>,
    ) -> Result<BuildStep, StorageError>;

    /// When the table's entities expire, if it lets them (cheap: every read asks).
    fn time_to_live(&self) -> Option<TimeToLive>;

    /// Records the end of an index's build. [`StorageError::IndexGone`] if it was dropped.
    fn set_index_state(&self, index_id: u64, state: IndexState) -> Result<(), StorageError>;

    /// Makes `change` to the table's feed and expiry in one change of its catalog: every read and
    /// commit after this returns sees all of it (a commit then writes a change record with every
    /// change of an entity as the feed says, or none; entities expire as the expiry says).
    /// `false` if the table is gone.
    fn set_settings(&self, change: SettingsChange) -> Result<bool, StorageError>;

    /// Visits the entities the scan's index holds in its range, in the index's order (descending
    /// if `reverse`), until the visitor says [`Visit::Stop`]; returns the sort key it stopped at
    /// (to resume from, inclusive), or `None` when the range is exhausted. Only entities whose
    /// current values are the entry's are visited.
    fn visit_index(
        &self,
        scan: IndexScan<'_>,
        visitor: &mut Visitor<'_>,
    ) -> Result<Option<Vec<u8>>, StorageError>;
}

/// One live table: point reads, scans, its change feed and its indexes ([`Indexed`]); it is
/// written through [`Store::commit`].
pub trait Table: Indexed + Send + Sync + Debug {
    /// The table's name as created.
    fn name(&self) -> &TableName;

    /// A number that identifies this incarnation of the table (a re-created table gets another).
    fn id(&self) -> u64;

    /// Reads one entity in place, passing it to `read`; `false` if it does not exist or the
    /// table is gone. A reader who saw one row of a commit never finds another of its rows
    /// unwritten.
    fn get(
        &self,
        key: &EntityKey,
        read: &mut dyn FnMut(EntityView<'_>) -> Result<(), StorageError>,
    ) -> Result<bool, StorageError>;

    /// [`Table::get`] if it need not wait for a commit in progress; `None`, having read nothing,
    /// if it would. A store whose calls are local ([`Store::calls_are_local`]) offers it, so that
    /// a point read can run on a runtime worker; by default nothing is tried.
    fn try_get(
        &self,
        _key: &EntityKey,
        _read: &mut dyn FnMut(EntityView<'_>) -> Result<(), StorageError>,
    ) -> Result<Option<bool>, StorageError> {
        Ok(None)
    }

    /// Visits the entities of the scan's ranges in key order, descending if `reverse`, until the
    /// visitor says [`Visit::Stop`]; returns the position it stopped at (to resume from,
    /// inclusive), or `None` when every range is exhausted. Each partition's part of a scan sees
    /// the partition at one instant, never half a commit.
    fn visit(
        &self,
        scan: KeyScan<'_>,
        visitor: &mut Visitor<'_>,
    ) -> Result<Option<KeyPosition>, StorageError>;

    /// The records of the table's change feed after `after` (from its start when `None`), in
    /// position order, within `limit` ([`FeedBatch::admits`]): only those of transactions that
    /// every earlier one has finished before, and durable (so that a later read from the last one
    /// misses nothing).
    fn read_changes(
        &self,
        after: Option<FeedPosition>,
        limit: FeedBatch,
    ) -> Result<Vec<StoredChange>, StorageError>;

    /// Removes up to `limit` of the feed's readable records of commits before `before`, after
    /// noting the last one's position ([`Table::feed_trimmed_to`]); how many it removed.
    fn trim_changes(&self, before: Ticks, limit: usize) -> Result<usize, StorageError>;

    /// The position of the last record trimming removed, if any: a reader whose cursor is before
    /// it may have missed records.
    fn feed_trimmed_to(&self) -> Result<Option<FeedPosition>, StorageError>;

    /// Where the feed ends now: a reader starting at its `readable` end sees what commits from
    /// now on; one reading until it has passed its `committed` end has seen every change
    /// committed before now.
    fn feed_end(&self) -> Result<FeedEnd, StorageError>;
}

/// An entity as the sled store keeps it, for tests of code that reads [`EntityView`]s.
#[cfg(test)]
#[derive(Debug, Clone)]
pub(crate) struct StoredRecord {
    key: EntityKey,
    /// The stored bytes (tests may damage them).
    pub(crate) value: Vec<u8>,
}

#[cfg(test)]
impl StoredRecord {
    /// `entity` as stored.
    pub(crate) fn of(entity: &StoredEntity) -> StoredRecord {
        StoredRecord {
            key: entity.key.clone(),
            value: codec::encode(entity.timestamp, &entity.properties),
        }
    }

    /// The record read in place.
    pub(crate) fn view(&self) -> Result<EntityView<'_>, StorageError> {
        EntityView::parse(&self.key.partition_key, &self.key.row_key, &self.value)
    }
}

/// `rejection` of an operation of a partition's batch, named by its position in the whole
/// transaction (`positions`, the batch's).
pub(crate) fn at_position(positions: &[usize], rejection: Rejection) -> Rejection {
    Rejection {
        index: positions[rejection.index],
        reason: rejection.reason,
    }
}

/// Of a commit's refusals so far and another, the one of the earlier operation: a commit across
/// partitions names the first operation, by position, that cannot apply.
pub(crate) fn first_by_position(earlier: Option<Rejection>, rejection: Rejection) -> Rejection {
    match earlier {
        Some(earlier) if earlier.index < rejection.index => earlier,
        _ => rejection,
    }
}

/// Reads one entity of `table` in place with `read`: `None` if it does not exist.
pub fn read_entity<R>(
    table: &dyn Table,
    key: &EntityKey,
    read: impl FnOnce(EntityView<'_>) -> Result<R, StorageError>,
) -> Result<Option<R>, StorageError> {
    let mut read = Some(read);
    let mut value = None;
    table.get(key, &mut |entity| {
        if let Some(read) = read.take() {
            value = Some(read(entity)?);
        }
        Ok(())
    })?;
    Ok(value)
}
