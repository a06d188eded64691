//! How a request's storage work runs, whichever protocol it came in by (gRPC or REST): one
//! executor with its modes, one way to finish, and one way to wait for durability.
//!
//! - **Commits** (a write, a transaction on one partition or across several): the store's one
//!   commit ([`crate::storage::Store::commit`]), which decides where its work runs: inline on the
//!   calling runtime worker while it need not wait for a lock (sled), awaited over its
//!   connections (PostgreSQL), else on the blocking pool.
//! - **Short** (a point read, a read of many keys): on the calling runtime worker when the store
//!   is local and the read need not wait for a lock, sparing two thread hand-offs that cost more
//!   than the work; when it would wait (a commit holds the partition), or the store is remote, it
//!   is handed to the blocking pool instead. A runtime worker is never parked behind a lock. A
//!   remote store may serve these reads awaited instead ([`Executor::get`],
//!   [`Executor::get_many`]), holding no thread while its database answers.
//! - **Blocking** (queries, counts, table creation and deletion, which may take long or wait for
//!   a flush): on the blocking pool; the task runs to completion even if the client goes away. A
//!   remote store may serve queries by key awaited ([`Executor::query`], [`Executor::open_scan`],
//!   [`Executor::read_chunk`], [`Executor::count`]), also to their end.
//!
//! Every request, of either protocol, first takes one of `--max-in-flight` permits
//! ([`Executor::admit`]); past them it is turned away as busy. A long-lived call then holds a
//! permit of its own class instead ([`Executor::admit_stream`], [`crate::admission`]).
//!
//! Every mode finishes the same way (`finish`): a failure is logged once (faults as errors,
//! refusals of bad input at debug level); a panic is [`WorkError::Panicked`] and takes nothing
//! else down. A write is acknowledged once the group commit has made it durable
//! ([`Executor::durable`]), awaited without holding a thread; and a read answers only once
//! every write it may have seen is durable ([`Executor::settled`]), so that a crash never takes
//! back what someone was shown.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use tracing::Instrument;

use crate::across::{CrossCommit, TableEntityKey};
use crate::admission::{Credential, StreamPermit, StreamRefusal, Streams};
use crate::engine::{
    Attempt, Engine, MatchSink, PageInfo, Pending, ScanCursor, Waiting, PAGE_BYTE_BUDGET,
};
use crate::error::{ErrorCode, TableError};
use crate::idempotency::IdempotencyClaim;
use crate::model::{EntityKey, Operation, StoredEntity, ValidationError, ValueRef};
use crate::query::aggregate::{AggregateSpec, Aggregator, Group};
use crate::query::order::{OrderBy, TopK, MAX_SORTED_MATCHES};
use crate::query::QuerySpec;
use crate::storage::{EntityView, StorageError, Ticket};
use crate::traces;

/// Why storage work gave no value.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    /// The engine refused it or failed (already logged).
    #[error(transparent)]
    Table(#[from] TableError),
    /// The work panicked (logged; the message says nothing of it).
    #[error("internal error; the server log has the details")]
    Panicked,
    /// The server is shutting down: durability will not be announced any more.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// `max_in_flight` requests are running already.
    #[error(
        "the server is at its limit of {max_in_flight} requests in flight; retry with backoff"
    )]
    Busy { max_in_flight: usize },
    /// The long-lived calls' class is full, for everyone or for this credential.
    #[error(transparent)]
    StreamsBusy(#[from] StreamRefusal),
}

/// Runs storage work for every protocol.
#[derive(Debug, Clone)]
pub struct Executor {
    engine: Arc<Engine>,
    /// The highest durable ticket, published by the store's flusher.
    durable: tokio::sync::watch::Receiver<Ticket>,
    /// One permit per request in flight, whichever its protocol.
    in_flight: Arc<tokio::sync::Semaphore>,
    max_in_flight: usize,
    /// The long-lived calls' own class.
    streams: Arc<Streams>,
    /// Counts the writes acknowledged here, for what waits on new commits ([`Executor::commits`]).
    acknowledged: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Executor {
    /// An executor over `engine` admitting `max_in_flight` requests at once; it takes the
    /// engine's durability announcements, so make one per engine and share it.
    pub fn new(engine: Arc<Engine>, max_in_flight: usize) -> Executor {
        let (publish, durable) = tokio::sync::watch::channel(engine.durable());
        engine.on_durable(Box::new(move |ticket| {
            publish.send_replace(ticket);
        }));
        Executor {
            engine,
            durable,
            in_flight: Arc::new(tokio::sync::Semaphore::new(max_in_flight)),
            max_in_flight,
            streams: Streams::new(
                crate::config::DEFAULT_MAX_OPEN_STREAMS,
                crate::config::DEFAULT_MAX_STREAMS_PER_CREDENTIAL,
            ),
            acknowledged: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }

    /// Each request's work budget (`crate::model::WorkBudget`), the engine's.
    pub fn work_budget(&self) -> crate::model::WorkBudget {
        self.engine.work_budget()
    }

    /// Changes each time a write is acknowledged here ([`Executor::durable`]): what waits for new
    /// commits (the feed's watchers) looks again then, rather than on a short timer.
    pub fn commits(&self) -> tokio::sync::watch::Receiver<u64> {
        self.acknowledged.subscribe()
    }

    /// The same executor, with `max_open` long-lived calls at once, at most `per_credential` of
    /// them of one credential.
    pub fn with_streams(mut self, max_open: usize, per_credential: usize) -> Executor {
        self.streams = Streams::new(max_open, per_credential);
        self
    }

    /// Lets one more long-lived call of `credential` in, from its own class: a permit to hold
    /// until it ends (in place of its short permit), or [`WorkError::StreamsBusy`].
    pub fn admit_stream(&self, credential: Credential) -> Result<StreamPermit, WorkError> {
        Ok(self.streams.admit(credential)?)
    }

    /// Lets one more request in: a permit to hold until it ends, or [`WorkError::Busy`].
    pub fn admit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, WorkError> {
        self.in_flight
            .clone()
            .try_acquire_owned()
            .map_err(|_| WorkError::Busy {
                max_in_flight: self.max_in_flight,
            })
    }

    /// Short mode: `op` on `input`, first inline and not allowed to wait (if the store is
    /// local), then on the blocking pool with the input it gave back, if it would have waited.
    pub async fn short<T, I, F>(&self, input: I, op: F) -> Result<T, WorkError>
    where
        T: Send + 'static,
        I: Send + 'static,
        F: Fn(&Engine, I, Waiting) -> Result<Attempt<T, I>, TableError> + Send + 'static,
    {
        let mut input = input;
        if self.engine.calls_are_local() {
            let inline = std::panic::catch_unwind(AssertUnwindSafe(|| {
                let store = traces::store_span("inline");
                store.in_scope(|| op(&self.engine, input, Waiting::NotAllowed))
            }));
            match finish(inline.map_err(drop))? {
                Attempt::Done(value) => return Ok(value),
                Attempt::WouldWait(back) => input = back,
            }
        }
        self.blocking(move |engine| op(engine, input, Waiting::Allowed).map(Attempt::ran))
            .await
    }

    /// Reads one entity ([`Engine::get`]): awaited where the store serves point reads so, else in
    /// short mode.
    pub async fn get<R, F>(
        &self,
        table: String,
        key: EntityKey,
        select: Vec<String>,
        read: F,
    ) -> Result<R, WorkError>
    where
        R: Send + 'static,
        F: FnOnce(&EntityView<'_>) -> Result<R, StorageError> + Send + 'static,
    {
        let span = traces::engine_span("get", &table);
        async move {
            let awaited = (table.clone(), key.clone(), select.clone());
            let partition = [key.partition_key.clone()];
            let read = self.awaited_or_short(
                read,
                move |engine, read| async move {
                    let (table, key, select) = awaited;
                    engine.get_awaited(&table, &key, &select, read).await
                },
                move |engine, read, waiting| engine.get(&table, &key, &select, read, waiting),
            );
            self.settled(read.await?, Some(&partition)).await
        }
        .instrument(span)
        .await
    }

    /// Reads many keys at one instant ([`Engine::get_many`]): awaited where the store serves such
    /// reads so, else in short mode.
    pub async fn get_many<R, F>(
        &self,
        keys: Vec<TableEntityKey>,
        select: Vec<String>,
        read: F,
    ) -> Result<Vec<Option<R>>, WorkError>
    where
        R: Send + 'static,
        F: Fn(&EntityView<'_>) -> Result<R, StorageError> + Send + Sync + Clone + 'static,
    {
        let span = traces::engine_span("get_many", "");
        async move {
            let (awaited_select, awaited_read) = (select.clone(), read.clone());
            let partitions: Vec<String> =
                keys.iter().map(|k| k.key.partition_key.clone()).collect();
            let read = self.awaited_or_short(
                keys,
                move |engine, keys| async move {
                    engine
                        .get_many_awaited(keys, &awaited_select, awaited_read)
                        .await
                },
                move |engine, keys, waiting| engine.get_many(keys, &select, &read, waiting),
            );
            self.settled(read.await?, Some(&partitions)).await
        }
        .instrument(span)
        .await
    }

    /// Reads one page of a query into `sink` ([`Engine::query`]): awaited where the store serves
    /// such pages so, else in blocking mode.
    pub async fn query<S>(
        &self,
        table: String,
        spec: QuerySpec,
        continuation: String,
        sink: S,
    ) -> Result<(PageInfo, S), WorkError>
    where
        S: MatchSink + Send + 'static,
    {
        let span = traces::engine_span("query", &table);
        async move {
            match spec.order_by.is_empty() {
                true => self.query_in_order(table, spec, continuation, sink).await,
                false => {
                    let sorted = self.query_sorted(table, spec, continuation, sink);
                    sorted.await
                }
            }
        }
        .instrument(span)
        .await
    }

    /// A page of a query in key or index order: awaited where the store serves such pages so,
    /// else in blocking mode.
    async fn query_in_order<S>(
        &self,
        table: String,
        spec: QuerySpec,
        continuation: String,
        sink: S,
    ) -> Result<(PageInfo, S), WorkError>
    where
        S: MatchSink + Send + 'static,
    {
        let awaited = (table.clone(), continuation.clone());
        // A page of one partition's rows read in key order has read nothing else.
        let partition: Option<[String; 1]> = match (&spec.partition_key, spec.index.is_empty()) {
            (Some(partition), true) => Some([partition.clone()]),
            _ => None,
        };
        let read = self.awaited_or_blocking(
            (spec, sink),
            |engine, (spec, mut sink)| async move {
                let (table, continuation) = awaited;
                let page = engine.query_awaited(&table, spec, &continuation, &mut sink);
                Ok(match page.await? {
                    Attempt::Done(page) => Attempt::Done((page, sink)),
                    Attempt::WouldWait(spec) => Attempt::WouldWait((spec, sink)),
                })
            },
            move |engine, (spec, mut sink)| {
                let page = engine.query(&table, spec, &continuation, &mut sink)?;
                Ok((page, sink))
            },
        );
        self.settled(read.await?, partition.as_ref().map(|p| p.as_slice()))
            .await
    }

    /// A page of a sorted query ([`crate::query::order`]): its scan read to the end a chunk at a
    /// time, as counts are, keeping the best `page_size` matches after the continuation's
    /// position within the page's byte budget ([`TopK`]); they go to `sink` in order, each
    /// showing only what the query selects. Past [`MAX_SORTED_MATCHES`] matches it is refused.
    /// A query through an index whose order is the ordering is no sort: it is paged in index
    /// order ([`crate::query::order::OrderBy::served_by`]).
    async fn query_sorted<S>(
        &self,
        table: String,
        spec: QuerySpec,
        continuation: String,
        sink: S,
    ) -> Result<(PageInfo, S), WorkError>
    where
        S: MatchSink + Send + 'static,
    {
        (self.sorted_pass(table, spec, continuation, sink, PAGE_BYTE_BUDGET)).await
    }

    /// [`Executor::query_sorted`] keeping at most `byte_budget` bytes of matches: a sorted
    /// page, or one batch of a sorted stream (`grpc/stream.rs`, within the stream framing's
    /// batch bytes).
    pub async fn sorted_pass<S>(
        &self,
        table: String,
        mut spec: QuerySpec,
        continuation: String,
        mut sink: S,
        byte_budget: usize,
    ) -> Result<(PageInfo, S), WorkError>
    where
        S: MatchSink + Send + 'static,
    {
        let asked = (!spec.index.is_empty()).then(|| (table.clone(), spec.clone()));
        // The sort keys read any property: the selection applies to the page only.
        let select = std::mem::take(&mut spec.select);
        let order = spec.order_by.clone();
        let cursor = self.open_scan(table, spec, String::new()).await?;
        if let (true, Some((table, spec))) = (cursor.spec().order_by.is_empty(), asked) {
            return self.query_in_order(table, spec, continuation, sink).await;
        }
        let after = cursor.sorted_resume(&continuation)?;
        let limit = cursor.spec().page_size as usize;
        let sorting = Sorting {
            order,
            top: TopK::new(after, limit, byte_budget),
            matched: 0,
            refused: None,
        };
        let (cursor, sorting) = self.read_cursor_to_end(cursor, sorting).await?;
        if let Some(refused) = sorting.refused {
            return Err(TableError::Invalid(refused).into());
        }
        let (page, more) = sorting.top.finish();
        let mut last = None;
        for (sort_key, row) in page {
            let view = EntityView::parse(&row.partition_key, &row.row_key, &row.record)
                .map_err(TableError::from)?;
            sink.take(&view.selecting(&select))
                .map_err(TableError::from)?;
            last = Some(sort_key);
        }
        let continuation_token = match (more, last) {
            (true, Some(last)) => Some(cursor.sorted_token(last)),
            _ => None,
        };
        let page = PageInfo {
            continuation_token,
            plan: cursor.plan_name(),
            examined: cursor.examined() as usize,
        };
        Ok((page, sink))
    }

    /// Plans a streamed query ([`Engine::open_scan`]): the table looked up awaited where the
    /// store serves queries so, else in blocking mode.
    pub async fn open_scan(
        &self,
        table: String,
        spec: QuerySpec,
        continuation: String,
    ) -> Result<ScanCursor, WorkError> {
        let span = traces::engine_span("open_scan", &table);
        async move {
            let awaited = (table.clone(), continuation.clone());
            self.awaited_or_blocking(
                spec,
                |engine, spec| async move {
                    let (table, continuation) = awaited;
                    engine.open_scan_awaited(&table, spec, &continuation).await
                },
                move |engine, spec| engine.open_scan(&table, spec, &continuation),
            )
            .await
        }
        .instrument(span)
        .await
    }

    /// Counts the matches of a query: its scan, without properties, opened
    /// ([`Executor::open_scan`]) and read to the end a chunk at a time ([`Executor::read_chunk`]),
    /// so that no thread is held between chunks.
    pub async fn count(
        &self,
        table: String,
        mut spec: QuerySpec,
        continuation: String,
    ) -> Result<u64, WorkError> {
        let span = traces::engine_span("count", &table);
        async move {
            spec.select.clear();
            let (_, counter) = self
                .read_to_end(table, spec, continuation, Counter(0))
                .await?;
            Ok(counter.0)
        }
        .instrument(span)
        .await
    }

    /// Aggregates the matches of a query ([`Aggregator`]) as [`Executor::count`] counts them: its
    /// scan, showing only the properties the aggregation reads, read a chunk at a time. Its
    /// memory is bounded by the aggregator's bounds on groups; a refusal (a bound passed, an
    /// overflow) stops the scan after the chunk it happened in. A call stops after the chunk
    /// that passes [`Engine::aggregate_examined_per_call`] entities examined (a chunk examining
    /// no more than what is left of it), answering a token that carries
    /// the groups so far ([`ScanCursor::carrying_token`]); `continuation` (such a token, or
    /// empty) goes on from there.
    pub async fn aggregate(
        &self,
        table: String,
        mut spec: QuerySpec,
        continuation: String,
        aggregate: AggregateSpec,
    ) -> Result<Aggregated, WorkError> {
        let span = traces::engine_span("aggregate", &table);
        async move {
            spec.select = aggregate.properties();
            let (scan_token, aggregator) = match continuation.as_str() {
                "" => (String::new(), Aggregator::new(aggregate)),
                token => {
                    let token = self.engine.open_carrying_token(token)?;
                    let aggregator = Aggregator::resume(aggregate, &token.carried);
                    (token.scan, aggregator.map_err(TableError::Invalid)?)
                }
            };
            let sink = Aggregating {
                aggregator,
                refused: None,
            };
            let cursor = self.open_scan(table, spec, scan_token).await?;
            let bound = self.engine.aggregate_examined_per_call();
            let read = self.read_cursor_until(cursor, sink, bound);
            let (cursor, sink, more) = read.await?;
            if let Some(refused) = sink.refused {
                return Err(TableError::Invalid(refused).into());
            }
            let (groups, continuation_token) = match more {
                true => (Vec::new(), cursor.carrying_token(sink.aggregator.carried())),
                false => (sink.aggregator.finish(), None),
            };
            Ok(Aggregated {
                groups,
                continuation_token,
                plan: cursor.plan_name(),
                examined: cursor.examined(),
            })
        }
        .instrument(span)
        .await
    }

    /// Reads a query's scan to its end into `sink` a chunk at a time ([`Executor::read_chunk`]),
    /// so that no thread is held between chunks; stops early once the sink is
    /// [`MatchSink::finished`]. The cursor (its plan, what it examined) and the sink.
    async fn read_to_end<S>(
        &self,
        table: String,
        spec: QuerySpec,
        continuation: String,
        sink: S,
    ) -> Result<(ScanCursor, S), WorkError>
    where
        S: MatchSink + Send + 'static,
    {
        let cursor = self.open_scan(table, spec, continuation).await?;
        self.read_cursor_to_end(cursor, sink).await
    }

    /// [`Executor::read_to_end`] of a scan opened already.
    async fn read_cursor_to_end<S>(
        &self,
        cursor: ScanCursor,
        sink: S,
    ) -> Result<(ScanCursor, S), WorkError>
    where
        S: MatchSink + Send + 'static,
    {
        let (cursor, sink, _) = self.read_cursor_until(cursor, sink, u64::MAX).await?;
        Ok((cursor, sink))
    }

    /// [`Executor::read_cursor_to_end`], stopping after the chunk in which the scan has examined
    /// `examined` entities: whether the query has more to read then.
    async fn read_cursor_until<S>(
        &self,
        mut cursor: ScanCursor,
        mut sink: S,
        examined: u64,
    ) -> Result<(ScanCursor, S, bool), WorkError>
    where
        S: MatchSink + Send + 'static,
    {
        cursor.unbounded_chunks();
        loop {
            cursor.examine_at_most(examined.saturating_sub(cursor.examined()));
            let more;
            (cursor, sink, more) = self.read_chunk(cursor, sink, usize::MAX).await?;
            if !more || sink.finished() {
                return Ok((cursor, sink, false));
            }
            if cursor.examined() >= examined {
                return Ok((cursor, sink, true));
            }
        }
    }

    /// Reads the next chunk of a streamed query into `sink` ([`ScanCursor::read_chunk`], at most
    /// `byte_budget` bytes): awaited where the store serves it so, else in blocking mode. The
    /// cursor and the sink back, and whether the query has more.
    pub async fn read_chunk<S>(
        &self,
        cursor: ScanCursor,
        sink: S,
        byte_budget: usize,
    ) -> Result<(ScanCursor, S, bool), WorkError>
    where
        S: MatchSink + Send + 'static,
    {
        let span = traces::engine_span("read_chunk", "");
        async move {
            let read = self.awaited_or_blocking(
                (cursor, sink),
                move |engine, (mut cursor, mut sink)| async move {
                    let mut on_match = |entity: &EntityView<'_>| sink.take(entity);
                    let read = engine.read_chunk_awaited(&mut cursor, byte_budget, &mut on_match);
                    Ok(match read.await? {
                        Some(more) => Attempt::Done((cursor, sink, more)),
                        None => Attempt::WouldWait((cursor, sink)),
                    })
                },
                move |_, (mut cursor, mut sink)| {
                    let more = cursor.read_chunk(byte_budget, &mut |entity| sink.take(entity))?;
                    Ok((cursor, sink, more))
                },
            );
            self.settled(read.await?, None).await
        }
        .instrument(span)
        .await
    }

    /// Applies one write ([`Engine::write`]). Acknowledge it once durable
    /// ([`Executor::durable`]).
    pub async fn write(
        &self,
        table: String,
        operation: Operation,
        claim: Option<IdempotencyClaim>,
    ) -> Result<Pending<Option<StoredEntity>>, WorkError> {
        let span = traces::engine_span("write", &table);
        let write = self.engine.write(&table, operation, claim.as_ref());
        committing(write.instrument(span)).await
    }

    /// Applies a transaction on one partition ([`Engine::transact`]). Acknowledge it once
    /// durable.
    pub async fn transact(
        &self,
        table: String,
        partition_key: String,
        operations: Vec<Operation>,
        request_bytes: usize,
        claim: Option<IdempotencyClaim>,
    ) -> Result<Pending<Vec<Option<StoredEntity>>>, WorkError> {
        let span = traces::engine_span("transact", &table);
        let commit = (self.engine).transact(
            &table,
            &partition_key,
            operations,
            request_bytes,
            claim.as_ref(),
        );
        committing(commit.instrument(span)).await
    }

    /// Applies a transaction across partitions ([`Engine::commit_across`]). Acknowledge it once
    /// durable.
    pub async fn transact_across(
        &self,
        commit: CrossCommit,
        claim: Option<IdempotencyClaim>,
    ) -> Result<Pending<Vec<Option<StoredEntity>>>, WorkError> {
        let span = traces::engine_span("transact_across", "");
        let commit = self.engine.commit_across(commit, claim.as_ref());
        committing(commit.instrument(span)).await
    }

    /// Short work that a store over the network may serve awaited
    /// ([`crate::storage::Store::awaited`]): `awaited` first, holding no thread while the database
    /// answers; if it gives its input back (the store serves that call only the blocking way),
    /// `op` in short mode with it.
    async fn awaited_or_short<T, I, A, Fut, F>(
        &self,
        input: I,
        awaited: A,
        op: F,
    ) -> Result<T, WorkError>
    where
        T: Send + 'static,
        I: Send + 'static,
        A: FnOnce(Arc<Engine>, I) -> Fut,
        Fut: Future<Output = Result<Attempt<T, I>, TableError>>,
        F: Fn(&Engine, I, Waiting) -> Result<Attempt<T, I>, TableError> + Send + 'static,
    {
        match self.awaited_first(input, awaited).await? {
            Attempt::Done(value) => Ok(value),
            Attempt::WouldWait(input) => self.short(input, op).await,
        }
    }

    /// `awaited` on `input` where the store serves work awaited; else `input` given back.
    async fn awaited_first<T, I, A, Fut>(
        &self,
        input: I,
        awaited: A,
    ) -> Result<Attempt<T, I>, WorkError>
    where
        A: FnOnce(Arc<Engine>, I) -> Fut,
        Fut: Future<Output = Result<Attempt<T, I>, TableError>>,
    {
        if !self.engine.serves_awaited() {
            return Ok(Attempt::WouldWait(input));
        }
        let store = traces::store_span("awaited");
        let attempt = AssertUnwindSafe(awaited(self.engine.clone(), input).instrument(store))
            .catch_unwind()
            .await;
        finish(attempt.map_err(drop))
    }

    /// Work a remote store may serve awaited ([`crate::storage::Store::awaited`]): `awaited` as a
    /// task of its own, so that it runs to its end even if the client goes away (it may hold a
    /// transaction open on a connection until then); if it gives its input back (the store
    /// serves that work only the blocking way), or the store serves nothing awaited, `op` in
    /// blocking mode with it.
    async fn awaited_or_blocking<T, I, A, Fut, F>(
        &self,
        input: I,
        awaited: A,
        op: F,
    ) -> Result<T, WorkError>
    where
        T: Send + 'static,
        I: Send + 'static,
        A: FnOnce(Arc<Engine>, I) -> Fut,
        Fut: Future<Output = Result<Attempt<T, I>, TableError>> + Send + 'static,
        F: FnOnce(&Engine, I) -> Result<T, TableError> + Send + 'static,
    {
        let input = if self.engine.serves_awaited() {
            let store = traces::store_span("awaited");
            let task = tokio::spawn(awaited(self.engine.clone(), input).instrument(store));
            match finish(task.await.map_err(drop))? {
                Attempt::Done(value) => return Ok(value),
                Attempt::WouldWait(input) => input,
            }
        } else {
            input
        };
        self.blocking(move |engine| op(engine, input)).await
    }

    /// Blocking mode: `op` on the blocking pool.
    pub async fn blocking<T, F>(&self, op: F) -> Result<T, WorkError>
    where
        T: Send + 'static,
        F: FnOnce(&Engine) -> Result<T, TableError> + Send + 'static,
    {
        let engine = self.engine.clone();
        let store = traces::store_span("blocking");
        let outcome = tokio::task::spawn_blocking(move || store.in_scope(|| op(&engine))).await;
        finish(outcome.map_err(drop))
    }

    /// The value of `pending` once the group commit has made it durable, waiting without holding
    /// a thread.
    pub async fn durable<T>(&self, pending: Pending<T>) -> Result<T, WorkError> {
        if let Some(ticket) = pending.ticket {
            self.durable_at(ticket).await?;
        }
        if self.acknowledged.receiver_count() > 0 {
            self.acknowledged.send_modify(|count| *count += 1);
        }
        Ok(pending.value)
    }

    /// The answer of a read that has just read `partitions` (their keys; `None`: anything), once
    /// every write it may have seen is durable ([`Engine::read_fence`]); at once when no write
    /// it may have seen waits for a flush. Every read of entities answers through here: point
    /// reads, reads of many keys, query pages and the chunks of streamed queries, counts and
    /// aggregates.
    async fn settled<T>(&self, answer: T, partitions: Option<&[String]>) -> Result<T, WorkError> {
        let keys: Option<Vec<&str>> =
            partitions.map(|keys| keys.iter().map(String::as_str).collect());
        let fence = self.engine.read_fence(keys.as_deref());
        self.durable_at(fence).await?;
        Ok(answer)
    }

    /// Waits, holding no thread, until `ticket` is durable.
    async fn durable_at(&self, ticket: Ticket) -> Result<(), WorkError> {
        let mut durable = self.durable.clone();
        durable
            .wait_for(|durable| *durable >= ticket)
            .await
            .map_err(|_| WorkError::ShuttingDown)?;
        Ok(())
    }
}

/// A commit's work: the store runs it where it decides ([`crate::storage::Store::commit`]), and it
/// finishes as every mode does (a panic is [`WorkError::Panicked`]).
async fn committing<T>(work: impl Future<Output = Result<T, TableError>>) -> Result<T, WorkError> {
    finish(AssertUnwindSafe(work).catch_unwind().await.map_err(drop))
}

/// The one way work finishes: its value, or its failure logged once (`outcome` is `Err` if the
/// work panicked).
fn finish<T>(outcome: Result<Result<T, TableError>, ()>) -> Result<T, WorkError> {
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => {
            if error.code() == ErrorCode::InternalError {
                tracing::error!(%error, "request failed");
            } else {
                tracing::debug!(%error, reason = error.code().as_str(), "request refused");
            }
            Err(WorkError::Table(error))
        }
        Err(()) => {
            tracing::error!("a request panicked");
            Err(WorkError::Panicked)
        }
    }
}

/// What `read` makes of `entity`, given a look-up of its properties by name; the first corrupt
/// property the look-up meets fails it instead.
fn reading_properties<'a, T>(
    entity: &EntityView<'a>,
    read: impl FnOnce(&dyn Fn(&str) -> Option<ValueRef<'a>>) -> T,
) -> Result<T, StorageError> {
    let corrupt = std::cell::Cell::new(None);
    let property = |name: &str| {
        entity.property(name).unwrap_or_else(|error| {
            corrupt.set(Some(error));
            None
        })
    };
    let value = read(&property);
    match corrupt.into_inner() {
        Some(error) => Err(error),
        None => Ok(value),
    }
}

/// A [`MatchSink`] that only counts the matches it is given.
struct Counter(u64);

/// A match a sorted page keeps: its keys and stored bytes.
struct SortedRow {
    partition_key: String,
    row_key: String,
    record: Vec<u8>,
}

/// The matches of a sorted query's scan, offered to its [`TopK`]; past [`MAX_SORTED_MATCHES`]
/// the refusal is kept and ends the scan.
struct Sorting {
    order: OrderBy,
    top: TopK<SortedRow>,
    matched: u64,
    refused: Option<ValidationError>,
}

impl MatchSink for Sorting {
    fn take(&mut self, entity: &EntityView<'_>) -> Result<usize, StorageError> {
        if self.refused.is_some() {
            return Ok(0);
        }
        self.matched += 1;
        if self.matched > MAX_SORTED_MATCHES {
            self.refused = Some(self.order.too_many_matches());
            return Ok(0);
        }
        let order = &self.order;
        let sort_key = reading_properties(entity, |property| {
            order.sort_key(
                entity.partition_key,
                entity.row_key,
                entity.timestamp,
                property,
            )
        })?;
        let record = entity.record();
        self.top.offer(sort_key, record.len(), || SortedRow {
            partition_key: entity.partition_key.to_owned(),
            row_key: entity.row_key.to_owned(),
            record: record.to_vec(),
        });
        Ok(0)
    }

    fn finished(&self) -> bool {
        self.refused.is_some()
    }
}

/// What [`Executor::aggregate`] answers: the groups, and the plan and entities examined.
#[derive(Debug)]
pub struct Aggregated {
    /// The groups; none while `continuation_token` is set.
    pub groups: Vec<Group>,
    /// The token that goes on with the aggregate, carrying its groups so far, when this call
    /// stopped at its bound of entities examined ([`Engine::aggregate_examined_per_call`]).
    pub continuation_token: Option<String>,
    pub plan: String,
    pub examined: u64,
}

/// The matches of an aggregate's scan, added to its aggregator; the first refusal is kept and
/// ends the scan.
struct Aggregating {
    aggregator: Aggregator,
    refused: Option<ValidationError>,
}

impl MatchSink for Aggregating {
    fn take(&mut self, entity: &EntityView<'_>) -> Result<usize, StorageError> {
        if self.refused.is_some() {
            return Ok(0);
        }
        let aggregator = &mut self.aggregator;
        let added = reading_properties(entity, |property| aggregator.add(property))?;
        if let Err(refused) = added {
            self.refused = Some(refused);
        }
        Ok(0)
    }

    fn finished(&self) -> bool {
        self.refused.is_some()
    }
}

impl MatchSink for Counter {
    fn take(&mut self, _: &EntityView<'_>) -> Result<usize, StorageError> {
        self.0 += 1;
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StoreConfig;

    #[tokio::test]
    async fn a_panic_in_any_mode_is_an_internal_error_and_the_service_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(Engine::open(&StoreConfig::embedded(dir.path())).unwrap());
        let executor = Executor::new(engine, 8);
        let failed = executor
            .blocking(|_| -> Result<(), TableError> { panic!("a bug in a handler") })
            .await
            .unwrap_err();
        assert!(matches!(failed, WorkError::Panicked));
        assert!(!failed.to_string().contains("a bug"), "panic text leaked");
        let failed_short = executor
            .short((), |_, (), _| -> Result<Attempt<(), ()>, TableError> {
                panic!("a bug in a short handler")
            })
            .await
            .unwrap_err();
        assert!(matches!(failed_short, WorkError::Panicked));
        let created = executor
            .blocking(|engine| engine.create_table("After"))
            .await;
        assert!(created.is_ok());
    }

    #[test]
    fn a_sort_past_its_bound_of_matches_is_refused_naming_the_index_to_declare() {
        use crate::model::{EntityKey, Properties, StoredEntity, Ticks, Value};
        use crate::query::order::OrderTerm;
        let mut properties = Properties::new();
        properties.insert("Age".into(), Value::Int32(7));
        let record = crate::storage::StoredRecord::of(&StoredEntity {
            key: EntityKey::new("p".into(), "r".into()).unwrap(),
            properties,
            timestamp: Ticks(1),
        });
        let view = record.view().unwrap();
        let order = OrderBy::new(vec![OrderTerm {
            path: "Age".into(),
            descending: false,
        }])
        .unwrap();
        let mut sorting = Sorting {
            order,
            top: TopK::new(None, 10, PAGE_BYTE_BUDGET),
            matched: 0,
            refused: None,
        };
        for _ in 0..MAX_SORTED_MATCHES {
            sorting.take(&view).unwrap();
        }
        assert!(!sorting.finished(), "the bound itself is sorted");
        sorting.take(&view).unwrap();
        assert!(sorting.finished());
        let refused = sorting.refused.unwrap().to_string();
        assert!(refused.contains("at most 1000000 matches"), "{refused}");
        assert!(refused.contains("index on [Age]"), "{refused}");
    }

    #[tokio::test]
    async fn short_work_that_would_wait_is_handed_to_the_blocking_pool() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(Engine::open(&StoreConfig::embedded(dir.path())).unwrap());
        let executor = Executor::new(engine, 8);
        let modes = std::sync::Mutex::new(Vec::new());
        let modes = Arc::new(modes);
        let seen = modes.clone();
        let value = executor
            .short(7, move |_, input, waiting| {
                seen.lock().unwrap().push(waiting);
                Ok(match waiting {
                    Waiting::NotAllowed => Attempt::WouldWait(input),
                    Waiting::Allowed => Attempt::Done(input * 6),
                })
            })
            .await
            .unwrap();
        assert_eq!(value, 42);
        assert_eq!(
            *modes.lock().unwrap(),
            [Waiting::NotAllowed, Waiting::Allowed]
        );
    }
}
