//! Azure Table semantics over the store: the operations the service offers, on validated model
//! types. Writes are async, through the store's one commit ([`Store::commit`], which decides where
//! its work runs); reads are synchronous (the executor runs them inline, awaited or on the
//! blocking pool).

use std::sync::Arc;

use crate::error::TableError;
use crate::idempotency::IdempotencyClaim;
use crate::model::{
    default_ttl, quoted, ChangeFeed, EntityKey, Index, IndexDefinition, Operation, Refusal,
    StoredEntity, TableName, Ticks, TimeToLive, ValidationError, WorkBudget, MAX_INDEXES_PER_TABLE,
};
use crate::query::{self, CarryingToken, QuerySpec, ResumeAt, TablesToken, TokenSeal};
use crate::scan::{Chunk, Scan};
use crate::storage::{
    self, build_in_background, AwaitedCalls, Commit, CommitOutcome, Committed, CreateRefusal,
    DurableListener, EntityView, FeedBatch, FeedEnd, FeedPosition, IndexRefusal, RejectReason,
    Rejection, SettingsChange, SnapshotSink, StorageError, Store, StoreConfig, StoredChange,
    StoredRow, Table, TableListing, TableSnapshot, TendedTable, Ticket,
};

/// Stop filling a query page (or a streamed batch) after this many bytes of encoded entities, so
/// that a page of large entities stays well under gRPC's default 4 MiB message limit.
pub const PAGE_BYTE_BUDGET: usize = 2 * 1024 * 1024;

/// One page of tables.
#[derive(Debug)]
pub struct TablePage {
    /// Tables in folded-name order.
    pub tables: Vec<TableName>,
    /// Token of the next page, if any.
    pub next_page_token: Option<String>,
}

/// What reading one page of entities found, besides the entities themselves.
#[derive(Debug)]
pub struct PageInfo {
    /// Token of the next page, if any.
    pub continuation_token: Option<String>,
    /// The plan the query ran with (`point`, `partition`, ..., `index:<name>`).
    pub plan: String,
    /// Entities read to fill the page (matches and non-matches).
    pub examined: usize,
}

/// Receives the matches of a query, read in place: one page's, or a streamed query's a batch at
/// a time.
pub trait MatchSink {
    /// Takes one match (showing only the selected properties) and says how many bytes it added to
    /// the page (counted against [`PAGE_BYTE_BUDGET`]). An error (a corrupt record) ends the query
    /// with it.
    fn take(&mut self, entity: &EntityView<'_>) -> Result<usize, StorageError>;

    /// Ends a batch of a streamed query; `false` when the reader went away.
    fn end_batch(&mut self) -> bool {
        true
    }

    /// Whether a streamed query's reader is still there; asked after a chunk without matches, so
    /// that a selective scan nobody reads any more stops within a chunk, not at the table's end.
    fn reader_waiting(&self) -> bool {
        true
    }

    /// Whether the sink wants nothing more (a reader of the whole query may stop early).
    fn finished(&self) -> bool {
        false
    }
}

/// A streamed query between chunks: its plan, and where the next chunk starts.
#[derive(Debug)]
pub struct ScanCursor {
    scan: Scan,
    /// Entities examined by the chunks read so far.
    examined: u64,
    /// Where the next chunk starts, once a chunk was read (`None` before, or at the end).
    resume_at: Option<ResumeAt>,
}

impl ScanCursor {
    fn at_start(scan: Scan) -> ScanCursor {
        ScanCursor {
            scan,
            examined: 0,
            resume_at: None,
        }
    }

    /// Reads the next chunk (at most `page_size` matches, `byte_budget` bytes of output as
    /// `on_match` counts them, and the scan's bounds on work and time), passing each match to
    /// `on_match`; says whether the query has more to read.
    pub fn read_chunk(
        &mut self,
        byte_budget: usize,
        on_match: &mut dyn FnMut(&EntityView<'_>) -> Result<usize, StorageError>,
    ) -> Result<bool, TableError> {
        let chunk = self.scan.read(byte_budget, on_match)?;
        Ok(self.advance(chunk))
    }

    /// Lifts the bound on matches per chunk, for a reader that only counts them: a chunk then
    /// ends only at the scan's bounds on work and time.
    pub fn unbounded_chunks(&mut self) {
        self.scan.spec.page_size = u32::MAX;
    }

    /// Bounds the next chunks to `entities` examined (fewer than the scan's own bound).
    pub fn examine_at_most(&mut self, entities: u64) {
        self.scan
            .examine_at_most(usize::try_from(entities).unwrap_or(usize::MAX));
    }

    /// The query's plan (for its stats): as [`crate::query::PlanKind`] names it, or `index:<name>`.
    pub fn plan_name(&self) -> String {
        self.scan.plan_name()
    }

    /// The entities the chunks read so far examined, matching or not.
    pub fn examined(&self) -> u64 {
        self.examined
    }

    /// The query as requested.
    pub fn spec(&self) -> &QuerySpec {
        &self.scan.spec
    }

    /// Where a sorted query's `continuation` resumes: after this sort key (`None`: at the start).
    pub fn sorted_resume(&self, continuation: &str) -> Result<Option<Vec<u8>>, TableError> {
        self.scan.sorted_resume(continuation)
    }

    /// The token that resumes a sorted query after the match with sort key `last`.
    pub fn sorted_token(&self, last: Vec<u8>) -> String {
        self.scan.token(ResumeAt::Sort(last))
    }

    /// Moves past `chunk`; whether the query has more to read.
    fn advance(&mut self, chunk: Chunk) -> bool {
        self.examined += chunk.examined as u64;
        self.resume_at = chunk.resume_at.clone();
        match chunk.resume_at {
            Some(key) => {
                self.scan.resume_at(key);
                true
            }
            None => false,
        }
    }

    /// The token that resumes the query where the chunks read so far stopped (`None`: none read,
    /// or the query is complete).
    pub fn continuation_token(&self) -> Option<String> {
        (self.resume_at.clone()).map(|position| self.scan.token(position))
    }

    /// [`ScanCursor::continuation_token`] carrying `carried` (what the chunks computed) with it,
    /// sealed together ([`CarryingToken`]).
    pub fn carrying_token(&self, carried: Vec<u8>) -> Option<String> {
        let scan = self.continuation_token()?;
        Some(self.scan.seal_carrying(CarryingToken { scan, carried }))
    }
}

/// The result of a write, to acknowledge only once its ticket is durable ([`Engine::wait`], or
/// asynchronously with [`Engine::on_durable`]).
#[derive(Debug)]
#[must_use = "a write is acknowledged only once it is durable"]
pub struct Pending<T> {
    /// What the write produced.
    pub value: T,
    /// Durable once the engine's durable ticket reaches it; `None` if nothing was written.
    pub ticket: Option<Ticket>,
}

impl<T> Pending<T> {
    /// Maps the value, keeping the ticket.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Pending<U> {
        Pending {
            value: f(self.value),
            ticket: self.ticket,
        }
    }
}

/// Whether a point read or a commit may wait for its partition (held by another commit or a
/// scan).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// It may (on the blocking pool).
    Allowed,
    /// It may not (on a runtime worker): it gives its input back instead.
    NotAllowed,
}

/// What a call did: its result, or, not allowed to wait, its input given back untouched.
#[derive(Debug)]
pub enum Attempt<T, I> {
    /// The call ran.
    Done(T),
    /// The call would have waited; nothing was read or written.
    WouldWait(I),
}

impl<T, I> Attempt<T, I> {
    /// The result of a call that was allowed to wait, and so always ran.
    ///
    /// # Panics
    /// If the call gave its input back, which only a call not allowed to wait does.
    pub fn ran(self) -> T {
        match self {
            Attempt::Done(value) => value,
            Attempt::WouldWait(_) => panic!("a call allowed to wait gave its input back"),
        }
    }

    /// The input given back mapped, the result kept.
    pub fn map_input<J>(self, f: impl FnOnce(I) -> J) -> Attempt<T, J> {
        match self {
            Attempt::Done(value) => Attempt::Done(value),
            Attempt::WouldWait(input) => Attempt::WouldWait(f(input)),
        }
    }
}

/// The table service's semantics.
#[derive(Debug)]
pub struct Engine {
    store: Arc<dyn Store>,
    /// Seals the continuation tokens the engine issues, with the store's secret.
    seal: TokenSeal,
    /// Each request's work budget (`crate::model::WorkBudget`).
    work_budget: WorkBudget,
    /// About the most entities one aggregate call examines (`crate::query::aggregate`).
    aggregate_examined_per_call: u64,
    /// How long an idempotency key's record answers retries, in seconds
    /// ([`crate::idempotency`]).
    pub(crate) idempotency_window_seconds: u64,
}

impl Engine {
    /// Opens the store `config` names.
    pub fn open(config: &StoreConfig) -> Result<Engine, TableError> {
        Ok(Engine::over(storage::open(config)?))
    }

    /// The engine over `store`.
    pub fn over(store: Arc<dyn Store>) -> Engine {
        Engine {
            seal: TokenSeal::new(store.secret().bytes()),
            store,
            work_budget: WorkBudget::default(),
            aggregate_examined_per_call: query::aggregate::DEFAULT_EXAMINED_PER_CALL,
            idempotency_window_seconds: crate::idempotency::DEFAULT_WINDOW_SECONDS,
        }
    }

    /// The engine, an idempotency key's record answering retries for `seconds` (at least 1).
    pub fn with_idempotency_window(mut self, seconds: u64) -> Engine {
        self.idempotency_window_seconds = seconds.max(1);
        self
    }

    /// The engine, each request's work within `budget`.
    pub fn with_work_budget(mut self, budget: WorkBudget) -> Engine {
        self.work_budget = budget;
        self
    }

    /// Each request's work budget.
    pub fn work_budget(&self) -> WorkBudget {
        self.work_budget
    }

    /// The engine, each aggregate call examining about `entities` at most.
    pub fn with_aggregate_examined_per_call(mut self, entities: u64) -> Engine {
        self.aggregate_examined_per_call = entities.max(1);
        self
    }

    /// About the most entities one aggregate call examines.
    pub fn aggregate_examined_per_call(&self) -> u64 {
        self.aggregate_examined_per_call
    }

    /// Whether the store's calls are local and short (see [`Store::calls_are_local`]).
    pub fn calls_are_local(&self) -> bool {
        self.store.calls_are_local()
    }

    /// Creates a table.
    pub fn create_table(&self, name: &str) -> Result<TableName, TableError> {
        self.create_table_with(name, Vec::new(), SettingsChange::default())
    }

    /// Creates a table with declared indexes, ready at once, and `settings` (its feed and
    /// expiry): its first commit sees all of them.
    pub fn create_table_with(
        &self,
        name: &str,
        indexes: Vec<IndexDefinition>,
        settings: SettingsChange,
    ) -> Result<TableName, TableError> {
        let name = TableName::parse(name)?;
        if indexes.len() > MAX_INDEXES_PER_TABLE {
            return Err(TableError::TooManyIndexes {
                table: name.to_string(),
            });
        }
        for (at, index) in indexes.iter().enumerate() {
            let name_taken = indexes[..at]
                .iter()
                .any(|other| other.name.eq_ignore_ascii_case(&index.name));
            if name_taken {
                return Err(TableError::IndexAlreadyExists {
                    table: name.to_string(),
                    index: index.name.clone(),
                });
            }
        }
        match self.store.create_table(&name, &indexes, settings)? {
            Ok(table) => Ok(table.name().clone()),
            Err(CreateRefusal::AlreadyExists) => {
                Err(TableError::TableAlreadyExists(name.to_string()))
            }
            Err(CreateRefusal::BeingDeleted) => {
                Err(TableError::TableBeingDeleted(name.to_string()))
            }
        }
    }

    /// Deletes a table; its data is reclaimed in the background.
    pub fn delete_table(&self, name: &str) -> Result<(), TableError> {
        let id = self.table_id(name)?;
        let name = lookup_name(name)?;
        if !self.store.delete_table(&name)? {
            return Err(TableError::TableNotFound(name.to_string()));
        }
        // A failure here leaves only a record no table names (a new table gets a new id).
        if let Err(error) = self.forget_access_policies(id) {
            tracing::warn!(table = %name, %error, "a deleted table's access policies stay stored");
        }
        Ok(())
    }

    /// The table `name` as created, and its indexes with their states.
    pub fn get_table(&self, name: &str) -> Result<(TableName, Vec<Index>), TableError> {
        let table = self.table(name)?;
        Ok((table.name().clone(), table.indexes()?.indexes))
    }

    /// Declares an index on a table: writes keep it from now on, and a background build adds the
    /// entities already there (its state is `Building` until then).
    pub fn create_index(
        &self,
        table: &str,
        definition: IndexDefinition,
    ) -> Result<Index, TableError> {
        let table = self.table(table)?;
        let name = definition.name.clone();
        match table.create_index(definition)? {
            Ok(index) => {
                build_in_background(table, index.id);
                Ok(index)
            }
            Err(IndexRefusal::AlreadyExists) => Err(TableError::IndexAlreadyExists {
                table: table.name().to_string(),
                index: name,
            }),
            Err(IndexRefusal::TooMany) => Err(TableError::TooManyIndexes {
                table: table.name().to_string(),
            }),
            Err(IndexRefusal::TableGone) => {
                Err(TableError::TableNotFound(table.name().to_string()))
            }
        }
    }

    /// Drops an index at once; its entries are reclaimed in the background.
    pub fn drop_index(&self, table: &str, index: &str) -> Result<(), TableError> {
        let table = self.table(table)?;
        if table.drop_index(index)? {
            Ok(())
        } else {
            Err(TableError::IndexNotFound {
                table: table.name().to_string(),
                index: index.to_owned(),
            })
        }
    }

    /// Lists tables whose name starts with `prefix` (ignoring case).
    pub fn list_tables(
        &self,
        prefix: &str,
        page_size: u32,
        page_token: &str,
    ) -> Result<TablePage, TableError> {
        let limit = query::page_size(page_size)? as usize;
        let folded_prefix = prefix.to_ascii_lowercase();
        let after = match page_token {
            "" => None,
            token => Some(TablesToken::decode(token, &self.seal)?.after),
        };
        let (mut tables, more) = self.store.list_tables(TableListing {
            folded_prefix: &folded_prefix,
            after: after.as_deref(),
            limit,
        })?;
        let next_page_token = match tables.last() {
            Some(last) if more => Some(
                TablesToken {
                    after: last.folded().to_owned(),
                }
                .encode(&self.seal),
            ),
            _ => None,
        };
        // The server's own tables are never shown (the token above still moves past them).
        tables.retain(|table| !table.is_hidden());
        Ok(TablePage {
            tables,
            next_page_token,
        })
    }

    /// Applies one write outside a transaction; acknowledge it once its ticket is durable.
    pub async fn write(
        &self,
        table: &str,
        operation: Operation,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<Pending<Option<StoredEntity>>, TableError> {
        let partition_key = operation.partition_key().to_owned();
        let committed = self
            .commit(table, &partition_key, vec![operation], false, claim)
            .await?;
        Ok(committed.map(|mut stored| stored.pop().flatten()))
    }

    /// Applies a transaction: all operations or none. Errors name the failing operation's index.
    pub async fn transact(
        &self,
        table: &str,
        partition_key: &str,
        operations: Vec<Operation>,
        request_bytes: usize,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<Pending<Vec<Option<StoredEntity>>>, TableError> {
        crate::transaction::validate(partition_key, &operations, request_bytes)?;
        self.commit(table, partition_key, operations, true, claim)
            .await
    }

    /// Commits `operations` on one partition through the store's one commit
    /// ([`Store::commit`]); errors name the operation when `in_transaction`.
    async fn commit(
        &self,
        table_name: &str,
        partition_key: &str,
        operations: Vec<Operation>,
        in_transaction: bool,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<Pending<Vec<Option<StoredEntity>>>, TableError> {
        let name = lookup_name(table_name).map_err(|error| match in_transaction {
            true => error.at_operation(0),
            false => error,
        })?;
        let commit = Commit::on_partition(name, partition_key.to_owned(), operations);
        let committed = self.commit_once(commit, claim).await?;
        settled(
            committed,
            refusal_error(table_name, partition_key, in_transaction),
        )
    }

    /// Whether the store serves some reads awaited ([`Store::awaited`]).
    pub fn serves_awaited(&self) -> bool {
        self.store.awaited().is_some()
    }

    /// Runs `work` (the engine's own commits, for work that runs on the blocking pool: bulk
    /// deletes, the housekeeping) to its end on this blocking-pool thread.
    pub(crate) fn run_here<F: std::future::Future>(&self, work: F) -> F::Output {
        tokio::runtime::Handle::current().block_on(work)
    }

    /// Reads one entity in place, showing only the `select`ed properties (all when empty), and
    /// passes it to `read`. Not allowed to wait, it gives `read` back rather than wait for a
    /// commit in progress on the partition.
    pub fn get<R, F>(
        &self,
        table: &str,
        key: &EntityKey,
        select: &[String],
        read: F,
        waiting: Waiting,
    ) -> Result<Attempt<R, F>, TableError>
    where
        F: FnOnce(&EntityView<'_>) -> Result<R, StorageError>,
    {
        let mut point = PointRead::new(select, read)?;
        let found = match waiting {
            Waiting::Allowed => {
                let name = lookup_name(table)?;
                let found = self
                    .store
                    .get_named(&name, key, &mut |ttl, entity| point.visit(ttl, entity))?;
                Some(found.ok_or_else(|| TableError::TableNotFound(name.to_string()))?)
            }
            Waiting::NotAllowed => {
                let table = self.table(table)?;
                let ttl = table.time_to_live();
                table.try_get(key, &mut |entity| point.visit(ttl, entity))?
            }
        };
        point.finish(found, key)
    }

    /// [`Engine::get`], awaited where the store serves point reads so ([`Store::awaited`]);
    /// elsewhere `read` is given back.
    pub async fn get_awaited<R, F>(
        &self,
        table: &str,
        key: &EntityKey,
        select: &[String],
        read: F,
    ) -> Result<Attempt<R, F>, TableError>
    where
        F: FnOnce(&EntityView<'_>) -> Result<R, StorageError> + Send,
        R: Send,
    {
        let Some(awaited) = self.store.awaited() else {
            return Ok(Attempt::WouldWait(read));
        };
        let mut point = PointRead::new(select, read)?;
        let name = lookup_name(table)?;
        let found = awaited
            .get_named(&name, key, &mut |ttl, entity| point.visit(ttl, entity))
            .await?;
        let found = found.ok_or_else(|| TableError::TableNotFound(name.to_string()))?;
        point.finish(Some(found), key)
    }

    /// `spec` validated, planned on `table` and positioned at `continuation`.
    fn prepare(
        &self,
        table: &str,
        spec: QuerySpec,
        continuation: &str,
    ) -> Result<Scan, TableError> {
        Scan::prepare(
            self.table(table)?,
            spec.validate(self.work_budget)?,
            continuation,
            &self.seal,
        )
    }

    /// The scan token and the carried state of a token that [`ScanCursor::carrying_token`]
    /// issued; refused if its seal does not hold or it is of another kind.
    pub fn open_carrying_token(&self, text: &str) -> Result<CarryingToken, TableError> {
        Ok(CarryingToken::decode(text, &self.seal)?)
    }

    /// Reads one page of a query, passing each match to `sink`.
    pub fn query(
        &self,
        table: &str,
        spec: QuerySpec,
        continuation: &str,
        sink: &mut dyn MatchSink,
    ) -> Result<PageInfo, TableError> {
        let scan = self.prepare(table, spec, continuation)?;
        let chunk = scan.read(PAGE_BYTE_BUDGET, &mut |entity| sink.take(entity))?;
        Ok(PageInfo {
            continuation_token: chunk.resume_at.map(|key| scan.token(key)),
            plan: scan.plan_name(),
            examined: chunk.examined,
        })
    }

    /// [`Engine::query`], awaited where the store serves pages of queries by key so
    /// ([`crate::storage::Store::awaited`]); elsewhere, and for a query through an index, `spec`
    /// is given back (`sink` has taken nothing).
    pub async fn query_awaited(
        &self,
        table: &str,
        spec: QuerySpec,
        continuation: &str,
        sink: &mut (dyn MatchSink + Send),
    ) -> Result<Attempt<PageInfo, QuerySpec>, TableError> {
        let awaited = match self.store.awaited() {
            Some(awaited) if spec.index.is_empty() => awaited,
            _ => return Ok(Attempt::WouldWait(spec)),
        };
        let query = spec.validate(self.work_budget)?;
        let (table, mut snapshot) = read_snapshot(awaited, table).await?;
        let page = async {
            let scan = Scan::prepare(table, query, continuation, &self.seal)?;
            let Some(ranges) = scan.key_ranges() else {
                return Ok(Attempt::WouldWait(scan.into_spec()));
            };
            let mut on_match = |entity: &EntityView<'_>| sink.take(entity);
            let chunk =
                scan.read_awaited(ranges, snapshot.as_mut(), PAGE_BYTE_BUDGET, &mut on_match);
            let chunk = chunk.await?;
            Ok(Attempt::Done(PageInfo {
                continuation_token: chunk.resume_at.map(|key| scan.token(key)),
                plan: scan.plan_name(),
                examined: chunk.examined,
            }))
        };
        let page: Result<_, TableError> = page.await;
        let ended = snapshot.end().await;
        let page = page?;
        ended?;
        Ok(page)
    }

    /// [`Engine::open_scan`], the table looked up awaited where the store serves queries so
    /// ([`crate::storage::Store::awaited`]); elsewhere `spec` is given back.
    pub async fn open_scan_awaited(
        &self,
        table: &str,
        spec: QuerySpec,
        continuation: &str,
    ) -> Result<Attempt<ScanCursor, QuerySpec>, TableError> {
        let Some(awaited) = self.store.awaited() else {
            return Ok(Attempt::WouldWait(spec));
        };
        let query = spec.validate(self.work_budget)?;
        let (table, mut snapshot) = read_snapshot(awaited, table).await?;
        snapshot.end().await?;
        let scan = Scan::prepare(table, query, continuation, &self.seal)?;
        Ok(Attempt::Done(ScanCursor::at_start(scan)))
    }

    /// [`ScanCursor::read_chunk`] in a snapshot begun for it, awaited, where the store serves
    /// queries so and the scan reads by key; else `None` (nothing read).
    pub async fn read_chunk_awaited(
        &self,
        cursor: &mut ScanCursor,
        byte_budget: usize,
        on_match: &mut (dyn FnMut(&EntityView<'_>) -> Result<usize, StorageError> + Send),
    ) -> Result<Option<bool>, TableError> {
        let (Some(awaited), Some(ranges)) = (self.store.awaited(), cursor.scan.key_ranges()) else {
            return Ok(None);
        };
        let mut snapshot = awaited.begin_snapshot().await?;
        let chunk = (cursor.scan)
            .read_awaited(ranges, snapshot.as_mut(), byte_budget, on_match)
            .await;
        let ended = snapshot.end().await;
        let chunk = chunk?;
        ended?;
        Ok(Some(cursor.advance(chunk)))
    }

    /// Plans a streamed query and positions it at `continuation`, ready to be read a chunk at a
    /// time with [`ScanCursor::read_chunk`]: the caller decides, between chunks, where the reader
    /// is and whether to go on, holding no thread and no lock while it waits.
    pub fn open_scan(
        &self,
        table: &str,
        spec: QuerySpec,
        continuation: &str,
    ) -> Result<ScanCursor, TableError> {
        let scan = self.prepare(table, spec, continuation)?;
        Ok(ScanCursor::at_start(scan))
    }

    /// Streams every match of a query in order to `sink`, ending a batch after at most
    /// `page_size` matches or [`PAGE_BYTE_BUDGET`] bytes, until the sink says the reader
    /// went away or the query is complete. No lock is held while the sink ends a batch, so a slow
    /// reader holds up no writer. (The gRPC service drives a [`ScanCursor`] itself, so that a
    /// slow reader holds no thread either.)
    pub fn stream(
        &self,
        table: &str,
        spec: QuerySpec,
        continuation: &str,
        sink: &mut dyn MatchSink,
    ) -> Result<(), TableError> {
        let mut cursor = self.open_scan(table, spec, continuation)?;
        loop {
            let mut matched = false;
            let more = cursor.read_chunk(PAGE_BYTE_BUDGET, &mut |entity| {
                matched = true;
                sink.take(entity)
            })?;
            if matched {
                self.settle_read()?;
            }
            let reader_left = if matched {
                !sink.end_batch()
            } else {
                !sink.reader_waiting()
            };
            if reader_left || !more {
                return Ok(());
            }
        }
    }

    /// Blocks until `pending` is durable, then returns its value.
    pub fn wait<T>(&self, pending: Pending<T>) -> Result<T, TableError> {
        if let Some(ticket) = pending.ticket {
            self.store.wait_for(ticket)?;
        }
        Ok(pending.value)
    }

    /// The highest durable ticket.
    pub fn durable(&self) -> Ticket {
        self.store.durable()
    }

    /// The ticket a read that has just read `partitions` (`None`: anything) waits to see durable
    /// before it answers ([`Store::read_fence`]): no one is shown a write a crash could lose.
    pub fn read_fence(&self, partitions: Option<&[&str]>) -> Ticket {
        self.store.read_fence(partitions)
    }

    /// Blocks until every write a read that has just read may have seen is durable.
    fn settle_read(&self) -> Result<(), TableError> {
        Ok(self.store.wait_for(self.store.read_fence(None))?)
    }

    /// Registers the listener called with each new durable ticket.
    pub fn on_durable(&self, listener: DurableListener) {
        self.store.on_durable(listener);
    }

    /// Starts keeping table `name`'s change feed as `feed` says, or stops (`None`): every commit
    /// after this returns writes a record of each entity it changes (or none).
    pub fn set_change_feed(&self, name: &str, feed: Option<ChangeFeed>) -> Result<(), TableError> {
        let change = SettingsChange {
            change_feed: Some(feed),
            ..SettingsChange::default()
        };
        self.set_settings(name, change)
    }

    /// Makes `change` to table `name`'s feed and expiry at once: every read and commit after this
    /// returns sees all of it.
    pub fn set_settings(&self, name: &str, change: SettingsChange) -> Result<(), TableError> {
        let table = self.table(name)?;
        if table.set_settings(change)? {
            Ok(())
        } else {
            Err(TableError::TableNotFound(table.name().to_string()))
        }
    }

    /// Lets table `name`'s entities expire (`enabled`), an entity without its own `TimeToLive`
    /// after `default_seconds` (0: never), or stops it.
    pub fn set_time_to_live(
        &self,
        name: &str,
        enabled: bool,
        default_seconds: u64,
    ) -> Result<(), TableError> {
        let change = SettingsChange {
            time_to_live: Some(time_to_live(enabled, default_seconds)?),
            ..SettingsChange::default()
        };
        self.set_settings(name, change)
    }

    /// The records of table `name`'s change feed after `after` (from the oldest kept when
    /// `None`), in order, within `limit`; a table that keeps no feed is refused.
    pub fn read_changes(
        &self,
        name: &str,
        after: Option<FeedPosition>,
        limit: FeedBatch,
    ) -> Result<Vec<StoredChange>, TableError> {
        let read = self
            .store
            .read_changes_named(&lookup_name(name)?, after, limit)?
            .ok_or_else(|| TableError::TableNotFound(name.to_owned()))?;
        if read.catalog.change_feed.is_none() {
            return Err(TableError::Invalid(ValidationError::Argument(format!(
                "table {} keeps no change feed: create it with change_feed, or turn the feed on \
                 with SetChangeFeed",
                quoted(read.name.as_str())
            ))));
        }
        if let (Some(after), Some(trimmed)) = (after, read.trimmed_to) {
            if after < trimmed {
                return Err(TableError::FeedCursorExpired(read.name.to_string()));
            }
        }
        Ok(read.changes)
    }

    /// Where table `name`'s feed ends now ([`crate::storage::Table::feed_end`]).
    pub fn feed_end(&self, name: &str) -> Result<FeedEnd, TableError> {
        Ok(self.table(name)?.feed_end()?)
    }

    /// Gives every table, then each one's entities as they were at one instant, to `sink`,
    /// while reads and writes go on (a backup); `NotImplemented` on a store that cannot.
    pub fn snapshot(&self, sink: &mut SnapshotSink<'_>) -> Result<(), TableError> {
        if self.store.snapshot(sink)? {
            Ok(())
        } else {
            Err(TableError::NotSupported(
                "this store keeps no snapshots: back the PostgreSQL store up with the database's \
                 own tools (docs/operations.md)",
            ))
        }
    }

    /// Writes `rows` of a backup into table `name` as they are (their Timestamps and ETags
    /// kept), each record checked first: a restore. The table holds none of them yet.
    pub fn load(&self, name: &str, rows: &[StoredRow]) -> Result<(), TableError> {
        let table = self.table(name)?;
        for row in rows {
            EntityView::parse(&row.key.partition_key, &row.key.row_key, &row.record)?;
        }
        if self.store.load(table.name(), rows)? {
            Ok(())
        } else {
            Err(TableError::NotSupported(
                "this store does not load backups: restore the PostgreSQL store with the \
                 database's own tools (docs/operations.md)",
            ))
        }
    }

    /// Flushes everything to disk (for shutdown).
    pub fn flush(&self) -> Result<(), TableError> {
        Ok(self.store.flush()?)
    }

    /// The store, for the engine's other modules (settings).
    pub(crate) fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    /// The store, shared ([`Store::commit`] takes it so).
    pub(crate) fn store_arc(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// The id of the incarnation of table `name`.
    pub(crate) fn table_id(&self, name: &str) -> Result<u64, TableError> {
        Ok(self.table(name)?.id())
    }

    /// The live table `name`, or [`TableError::TableNotFound`].
    /// Every live table the housekeeping tends ([`crate::storage::Store::tables_to_tend`]).
    pub(crate) fn tables_to_tend(&self) -> Result<Vec<TendedTable>, TableError> {
        Ok(self.store.tables_to_tend()?)
    }

    pub(crate) fn table(&self, name: &str) -> Result<Arc<dyn Table>, TableError> {
        let name = lookup_name(name)?;
        self.store
            .table(&name)?
            .ok_or_else(|| TableError::TableNotFound(name.to_string()))
    }
}

/// A snapshot begun by `awaited` and the live table `name` in it, or [`TableError::TableNotFound`].
async fn read_snapshot<'a>(
    awaited: &'a dyn AwaitedCalls,
    name: &str,
) -> Result<TableSnapshot<'a>, TableError> {
    let name = lookup_name(name)?;
    let found = awaited.read_snapshot(&name).await?;
    found.ok_or_else(|| TableError::TableNotFound(name.to_string()))
}

/// A point read's look at the entity the store finds: an expired entity reads as missing (until
/// the server removes it), and `read` is shown only the `select`ed properties.
struct PointRead<'s, F, R> {
    select: &'s [String],
    now: Ticks,
    read: Option<F>,
    value: Option<R>,
}

impl<'s, F, R> PointRead<'s, F, R>
where
    F: FnOnce(&EntityView<'_>) -> Result<R, StorageError>,
{
    fn new(select: &'s [String], read: F) -> Result<Self, TableError> {
        query::validate_selection(select)?;
        Ok(PointRead {
            select,
            now: Ticks::now(),
            read: Some(read),
            value: None,
        })
    }

    /// Reads `entity`, of a table whose entities expire after `ttl`.
    fn visit(
        &mut self,
        ttl: Option<TimeToLive>,
        entity: EntityView<'_>,
    ) -> Result<(), StorageError> {
        if entity.expired(ttl, self.now)? {
            return Ok(());
        }
        if let Some(read) = self.read.take() {
            self.value = Some(read(&entity.selecting(self.select))?);
        }
        Ok(())
    }

    /// The value read, given whether the store found the entity at `key` (`None`: it would have
    /// waited, and `read` is given back).
    fn finish(self, found: Option<bool>, key: &EntityKey) -> Result<Attempt<R, F>, TableError> {
        match (found, self.value) {
            (Some(true), Some(value)) => Ok(Attempt::Done(value)),
            (None, _) => Ok(Attempt::WouldWait(self.read.expect("not read"))),
            _ => Err(TableError::EntityNotFound {
                partition_key: key.partition_key.clone(),
                row_key: key.row_key.clone(),
            }),
        }
    }
}

/// A table name used to look a table up: one that could never have been created does not exist.
pub(crate) fn lookup_name(name: &str) -> Result<TableName, TableError> {
    TableName::parse(name).map_err(|_| TableError::TableNotFound(name.to_owned()))
}

/// What a commit's `outcome` answers: what it stored, acknowledged once durable, or its refusal
/// as the error `refused` makes of it.
pub(crate) fn settled(
    outcome: CommitOutcome,
    refused: impl FnOnce(Rejection) -> TableError,
) -> Result<Pending<Vec<Option<StoredEntity>>>, TableError> {
    match outcome {
        Ok(Committed { stored, ticket }) => Ok(Pending {
            value: stored,
            ticket,
        }),
        Err(rejection) => Err(refused(rejection)),
    }
}

/// The error a refusal of a commit on one partition is, naming the refused operation if
/// `in_transaction`.
fn refusal_error<'a>(
    table_name: &'a str,
    partition_key: &'a str,
    in_transaction: bool,
) -> impl FnOnce(Rejection) -> TableError + 'a {
    move |Rejection { index, reason }| {
        let error = rejection_error(table_name, partition_key, reason);
        if in_transaction {
            error.at_operation(index)
        } else {
            error
        }
    }
}

/// The error of a commit refused for `reason`, on `partition_key` of `table`.
pub(crate) fn rejection_error(
    table: &str,
    partition_key: &str,
    reason: RejectReason,
) -> TableError {
    let (row_key, refusal) = match reason {
        RejectReason::TableGone => return TableError::TableNotFound(table.to_owned()),
        RejectReason::Refused { row_key, refusal } => (row_key, refusal),
    };
    let partition_key = partition_key.to_owned();
    match refusal {
        Refusal::NotFound => TableError::EntityNotFound {
            partition_key,
            row_key,
        },
        Refusal::AlreadyExists => TableError::EntityAlreadyExists {
            partition_key,
            row_key,
        },
        Refusal::ConditionNotSatisfied => TableError::ConditionNotSatisfied {
            partition_key,
            row_key,
        },
        Refusal::PatchConditionFalse { condition } => TableError::PatchConditionFalse {
            partition_key,
            row_key,
            condition,
        },
        Refusal::Invalid(invalid) => TableError::Invalid(invalid),
        Refusal::IndexValueTaken { index, .. } => TableError::IndexValueTaken { index },
    }
}

/// A change of a table's feed and expiry as a request asks it, checked (so that a bad value
/// changes nothing): `feed` on (`Some(true, ...)`) kept `retention_seconds` (0: a day), with before
/// images if asked, or off; `ttl` on (`Some(true, ...)`) with its default, or off; `None` leaves
/// either as it is.
pub fn settings_change(
    feed: Option<(bool, u64, bool)>,
    ttl: Option<(bool, u64)>,
) -> Result<SettingsChange, TableError> {
    let change_feed = match feed {
        Some((true, retention_seconds, before_images)) => Some(Some(
            ChangeFeed::new(retention_seconds, before_images).map_err(TableError::Invalid)?,
        )),
        Some((false, _, _)) => Some(None),
        None => None,
    };
    let time_to_live = match ttl {
        Some((enabled, default_seconds)) => Some(time_to_live(enabled, default_seconds)?),
        None => None,
    };
    Ok(SettingsChange {
        change_feed,
        time_to_live,
    })
}

/// A table's expiry as its settings ask: off unless `enabled`, an entity without its own
/// `TimeToLive` living `default_seconds` (0: until it says).
pub fn time_to_live(enabled: bool, default_seconds: u64) -> Result<Option<TimeToLive>, TableError> {
    Ok(match enabled {
        true => Some(TimeToLive {
            default_seconds: default_ttl(default_seconds)?,
        }),
        false => None,
    })
}
