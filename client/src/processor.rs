//! A change-feed processor: the workers of one named group share a table's feed, each change's
//! effect applied exactly once, through workers joining, leaving and dying.
//!
//! The feed is split into `ranges` (ReadChanges' segments: a hash of the PartitionKey), each
//! with a *lease*: an entity of the group's lease table (partition = the group, row = the range)
//! naming its owner, when the lease ends, and the cursor the group has processed the range to. A
//! worker renews its leases every third of the lease time; a lease not renewed in time is free,
//! and another worker takes it from its cursor. Every worker aims at a fair share
//! (`ceil(ranges / live workers)`): it takes free leases first, then the excess of each worker
//! holding more than its share. Every change of a lease (taken, renewed, checkpointed) is conditioned on
//! the ETag its holder last saw, so a worker whose lease was taken (it paused past its lease
//! time, or another took it to balance) cannot write it again: its next renewal or checkpoint
//! fails, and it drops the lease (fencing by the lease's ETag).
//!
//! **Exactly once:** the handler is given each batch of changes (of at most
//! [`MAX_BATCH_RANGES`] ranges) and a [`CrossTransaction`] to put its writes in; the processor
//! adds each of the batch's ranges' checkpoints (conditioned on the lease's ETag) to the same
//! transaction, so the writes and the checkpoints commit together or not at all. A worker that dies mid-batch committed nothing
//! of it, and whoever takes the lease processes the batch again; a worker whose lease moved
//! cannot commit. A handler that writes nothing gets at-least-once (the checkpoint still commits
//! after it). Workers' clocks decide when a lease ends: keep them in step (NTP), and the lease
//! time well above the skew.
//!
//! **Splitting:** a range is the segment hash's high bits, so range `i` of `m` is exactly ranges
//! `i·k` to `i·k + k − 1` of `k·m`; [`FeedProcessorBuilder::split_ranges`] splits a stopped
//! group's leases so, each new range from its old range's checkpoint. A worker saying another
//! count than the group's leases ends at once.
//!
//! **Reading:** a worker follows one `ReadChanges` stream of all the ranges it holds, each after
//! its own checkpoint (`segment_cursors`, with `follow`: the server wakes it on each commit, and
//! reads the feed once for all of them), opened again when the ranges it holds change. Its
//! renewals move the checkpoint of a range without changes to where the stream has read.
//!
//! Bounded by: each response of the stream is the server's stream framing (at most 500 records
//! and its byte bound); responses already received are taken together up to 500 changes (one
//! response past it at most), handled in batches of the batch size (50 unless said) and at most
//! [`MAX_BATCH_RANGES`] ranges, each batch's transaction a `TransactWrite`'s 100 operations (the
//! handler's at most 96, a checkpoint a range after them); one stream a worker (one of the
//! server's open streams).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::FutureExt;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use trestle_proto::{pb, segment};

use crate::across::CrossTransaction;
use crate::changes::{change_from_pb, Change};
use crate::entity::{ETag, IfMatch, UpsertMode};
use crate::{EntityKey, Error, Result, TableClient};

/// A lease as its entity holds it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
struct Lease {
    /// The worker holding it; empty: none.
    owner: String,
    /// When it ends unless renewed, in milliseconds since the Unix epoch.
    expires_ms: i64,
    /// Where the group has processed the range to; empty: the feed's start.
    cursor: String,
    /// How many ranges the group splits the feed into (0 on a member's row).
    #[serde(default)]
    ranges: u32,
}

/// A lease this worker holds: the ETag it last wrote and what it wrote.
#[derive(Debug, Clone)]
struct Held {
    etag: ETag,
    lease: Lease,
}

/// One batch of changes of at most [`MAX_BATCH_RANGES`] ranges, each range's in feed order.
#[derive(Debug, Clone)]
pub struct ChangeBatch<T> {
    /// The ranges (feed segments) they are from, in order.
    pub ranges: Vec<u32>,
    /// The changes.
    pub changes: Vec<Change<T>>,
}

/// The most ranges one batch holds changes of: its transaction carries a checkpoint for each,
/// so the handler may add at most 100 minus 4 operations.
pub const MAX_BATCH_RANGES: usize = 4;

/// What a group's worker is configured with.
#[derive(Debug, Clone)]
struct Config {
    table: TableClient,
    group: String,
    leases: TableClient,
    ranges: u32,
    lease_time: Duration,
    worker: String,
    workers: u32,
    batch_size: u32,
}

/// Builds the workers of a [`FeedProcessor`] ([`FeedProcessor::builder`]), then, given a
/// handler ([`FeedProcessorBuilder::handler`]), starts them.
#[derive(Debug, Clone)]
#[must_use = "a processor does nothing until started"]
pub struct FeedProcessorBuilder<H = ()> {
    config: Config,
    handler: H,
}

/// A batch handler and the type it reads the changes' entities as.
pub struct Handler<T, H> {
    handle: Arc<H>,
    _reads: PhantomData<fn() -> T>,
}

impl<T, H> std::fmt::Debug for Handler<T, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handler")
    }
}

/// This process's workers of a change-feed processor group, running
/// ([`FeedProcessorBuilder::start`]).
#[derive(Debug)]
pub struct FeedProcessor {
    stop: watch::Sender<bool>,
    running: Vec<JoinHandle<Result<()>>>,
    lag: Arc<Mutex<BTreeMap<u32, Duration>>>,
}

impl FeedProcessor {
    /// A group `group` of workers on `table`'s feed (the table must keep one). Its leases are in
    /// the table named after it with `Leases` appended, made if missing, unless
    /// [`FeedProcessorBuilder::leases`] names another; the feed is split into 16 ranges, leases
    /// last 10 seconds, and this process runs one worker.
    ///
    /// ```no_run
    /// # async fn example(client: trestle_client::Client) -> trestle_client::Result<()> {
    /// use trestle_client::{FeedProcessor, Patch, Properties, Value};
    /// // Each order's amount added to its seller's total, exactly once.
    /// let processor = FeedProcessor::builder(&client.table("Orders"), "totals")
    ///     .handler(|batch: trestle_client::ChangeBatch<Properties>, mut tx| async move {
    ///         // One write per seller of the batch (at most 50 changes: the batch size).
    ///         let mut totals = std::collections::BTreeMap::new();
    ///         for order in batch.changes.iter().filter_map(|change| change.entity.as_ref()) {
    ///             if let Some(Value::Int64(amount)) = order.value.get("Amount") {
    ///                 *totals.entry(order.key.partition_key.clone()).or_insert(0) += amount;
    ///             }
    ///         }
    ///         for (seller, amount) in totals {
    ///             let add = Patch::new().increment("Total", amount).upsert();
    ///             tx.patch("Totals", (seller, "total".to_owned()), &add)?;
    ///         }
    ///         Ok(tx)
    ///     })
    ///     .workers(2)
    ///     .start()?;
    /// // ... until the service stops:
    /// processor.stop().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder(table: &TableClient, group: impl Into<String>) -> FeedProcessorBuilder {
        let leases = table.client.table(format!("{}Leases", table.name()));
        let config = Config {
            table: table.clone(),
            group: group.into(),
            leases,
            ranges: 16,
            lease_time: Duration::from_secs(10),
            worker: uuid::Uuid::now_v7().to_string(),
            workers: 1,
            batch_size: 50,
        };
        FeedProcessorBuilder {
            config,
            handler: (),
        }
    }

    /// Stops the workers gracefully: each finishes the batch it is on and hands its leases
    /// back, so that the group's other workers take them at once. The first error a worker
    /// ended with, if any.
    pub async fn stop(self) -> Result<()> {
        let _ = self.stop.send(true);
        let mut ended = Ok(());
        for running in self.running {
            let result = running
                .await
                .map_err(|error| Error::invalid(format!("a worker's task failed: {error}")))?;
            ended = ended.and(result);
        }
        ended
    }

    /// Whether every worker has ended (with an error, or stopped).
    pub fn is_finished(&self) -> bool {
        self.running.iter().all(JoinHandle::is_finished)
    }

    /// How far behind the feed each range this process's workers hold is: the time since the
    /// last change of the last batch handled was written, or zero once a read found nothing
    /// more. A range leaves the map when its lease moves to another process.
    pub fn lag(&self) -> BTreeMap<u32, Duration> {
        self.lag
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl<H> FeedProcessorBuilder<H> {
    /// The table the group's leases are kept in (one partition per group).
    pub fn leases(mut self, leases: TableClient) -> Self {
        self.config.leases = leases;
        self
    }

    /// How many ranges the feed is split into (1 to 1,024; every worker of a group must say the
    /// same, and a worker saying otherwise than the group's leases ends with `InvalidInput`): at
    /// most that many workers share the work.
    pub fn ranges(mut self, ranges: u32) -> Self {
        self.config.ranges = ranges;
        self
    }

    /// How long a lease lasts unless renewed (renewed every third of it): how long a dead
    /// worker's ranges wait for another.
    pub fn lease_time(mut self, lease_time: Duration) -> Self {
        self.config.lease_time = lease_time;
        self
    }

    /// The workers' name in their leases (a new UUID unless given; each process needs its own),
    /// numbered after a `-` when this process runs several.
    pub fn worker_name(mut self, name: impl Into<String>) -> Self {
        self.config.worker = name.into();
        self
    }

    /// The most changes one call of the handler gets (1 to 500; 50 unless said): what the
    /// stream reads is split into batches of it (and of at most [`MAX_BATCH_RANGES`] ranges),
    /// each committed with its ranges' checkpoints. The handler may add at most 96 operations to
    /// a batch's transaction (the checkpoints come after), so one that writes once per change
    /// needs a size under 97, one that sums per entity fewer entities.
    pub fn batch_size(mut self, batch_size: u32) -> Self {
        self.config.batch_size = batch_size;
        self
    }

    /// How many workers this process runs (1 unless said), each a member of the group.
    pub fn workers(mut self, workers: u32) -> Self {
        self.config.workers = workers;
        self
    }
}

impl<H> FeedProcessorBuilder<H> {
    /// Splits the group's ranges into this builder's `.ranges(n)`, a multiple of the group's
    /// count `m`: range `i` becomes ranges `i * n/m` up to `(i + 1) * n/m - 1`, each from range
    /// `i`'s checkpoint (a range is the segment hash's high bits, so each partition of range
    /// `i` lies in one of them and nothing is handled twice or skipped), all in one
    /// transaction. Run it while no worker of the group runs, then start them with
    /// `.ranges(n)`.
    ///
    /// # Errors
    /// `InvalidInput` if `n` is not a multiple of the group's count or is over 100 (one
    /// transaction), or while a worker holds a lease; `is_precondition_failed()` if a lease
    /// changed meanwhile (nothing is split).
    pub async fn split_ranges(&self) -> Result<()> {
        let worker = Worker {
            config: self.config.clone(),
            held: BTreeMap::new(),
            lag: Arc::default(),
        };
        let (leases, _) = worker.read_leases().await?;
        let (from, to) = (leases.len() as u32, self.config.ranges);
        if from == 0 || to % from != 0 || to > 100 {
            return Err(Error::invalid(format!(
                "the group's {from} ranges split into a multiple of them up to 100, not {to}"
            )));
        }
        let now = now_ms();
        let held = |lease: &&Lease| !lease.owner.is_empty() && lease.expires_ms > now;
        if let Some(lease) = leases.values().map(|(_, lease)| lease).find(held) {
            return Err(Error::invalid(format!(
                "worker {} holds a lease of the group: stop its workers before splitting",
                lease.owner
            )));
        }
        if !(0..from).all(|range| leases.contains_key(&range)) {
            return Err(Error::invalid("the group's leases are not numbered from 0"));
        }
        let mut tx = self.config.table.client.transaction();
        let table = self.config.leases.name().to_owned();
        for range in 0..to {
            let lease = Lease {
                cursor: leases[&(range / (to / from))].1.cursor.clone(),
                ranges: to,
                ..Lease::default()
            };
            match leases.get(&range) {
                Some((etag, _)) => tx.update(&table, worker.key(range), &lease, etag.clone())?,
                None => tx.insert(&table, worker.key(range), &lease)?,
            };
        }
        tx.commit().await?;
        Ok(())
    }
}

impl FeedProcessorBuilder {
    /// The batch handler: called with each batch of changes of the ranges a worker holds, its
    /// entities read as `T`, and a transaction for its writes, which the worker commits with the
    /// batch's checkpoints (this module's doc). A batch refused because another worker took one
    /// of its ranges is handled again without that range's changes: the handler must not act
    /// outside the transaction it is given, or make those effects idempotent.
    pub fn handler<T, H, F>(self, handler: H) -> FeedProcessorBuilder<Handler<T, H>>
    where
        T: DeserializeOwned + Send + 'static,
        H: Fn(ChangeBatch<T>, CrossTransaction) -> F + Send + Sync + 'static,
        F: Future<Output = Result<CrossTransaction>> + Send + 'static,
    {
        FeedProcessorBuilder {
            config: self.config,
            handler: Handler {
                handle: Arc::new(handler),
                _reads: PhantomData,
            },
        }
    }
}

impl<T, H, F> FeedProcessorBuilder<Handler<T, H>>
where
    T: DeserializeOwned + Send + 'static,
    H: Fn(ChangeBatch<T>, CrossTransaction) -> F + Send + Sync + 'static,
    F: Future<Output = Result<CrossTransaction>> + Send + 'static,
{
    /// Starts the workers, each on a task of its own. An error of the handler, or one the SDK's
    /// retries could not get past, ends its worker with it ([`FeedProcessor::stop`] gives it).
    ///
    /// # Errors
    /// `InvalidInput` for ranges outside 1 to 1,024, a lease time under a second, or no worker.
    pub fn start(self) -> Result<FeedProcessor> {
        let config = self.config;
        if !(1..=1024).contains(&config.ranges) {
            return Err(Error::invalid(format!(
                "a feed processor splits the feed into 1 to 1,024 ranges, not {}",
                config.ranges
            )));
        }
        if config.lease_time < Duration::from_secs(1) {
            return Err(Error::invalid("a lease lasts at least a second"));
        }
        if !(1..=500).contains(&config.batch_size) {
            return Err(Error::invalid(format!(
                "a feed processor's batch size is 1 to 500 changes, not {}",
                config.batch_size
            )));
        }
        if config.workers == 0 {
            return Err(Error::invalid("a feed processor runs at least one worker"));
        }
        let (stop, stopped) = watch::channel(false);
        let lag = Arc::new(Mutex::new(BTreeMap::new()));
        let running = (0..config.workers)
            .map(|n| {
                let mut config = config.clone();
                if config.workers > 1 {
                    config.worker = format!("{}-{n}", config.worker);
                }
                let worker = Worker {
                    config,
                    held: BTreeMap::new(),
                    lag: lag.clone(),
                };
                let handler = self.handler.handle.clone();
                tokio::spawn(worker.run(handler, stopped.clone()))
            })
            .collect();
        Ok(FeedProcessor { stop, running, lag })
    }
}

/// A running worker and the leases it holds.
struct Worker {
    config: Config,
    held: BTreeMap<u32, Held>,
    /// Each held range's lag, shared with the [`FeedProcessor`].
    lag: Arc<Mutex<BTreeMap<u32, Duration>>>,
}

fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// The stream a worker follows: the records of the ranges it held when it opened it, each after
/// that range's cursor (`ReadChanges` with `segment_cursors` and `follow`: woken by the
/// server's notification of each commit, not by polling).
struct Following {
    /// The ranges it reads.
    ranges: Vec<u32>,
    responses: tonic::Streaming<pb::ReadChangesResponse>,
    /// The cursor of the last response handled: every record of `ranges` up to it is handled.
    seen: Option<String>,
    /// Whether a response came since the last balancing round.
    active: bool,
}

impl Following {
    /// `batch` with the responses already received after it appended (up to
    /// [`COALESCE_CHANGES`] changes), so that a worker behind the server commits in batches
    /// of what has arrived rather than a transaction per small response; and how the stream
    /// ended, if it did meanwhile.
    fn coalesce(
        &mut self,
        mut batch: pb::ReadChangesResponse,
    ) -> (pb::ReadChangesResponse, Option<Result<(), tonic::Status>>) {
        while batch.changes.len() < COALESCE_CHANGES {
            match self.responses.message().now_or_never() {
                None => break,
                Some(Ok(Some(next))) => {
                    batch.changes.extend(next.changes);
                    batch.cursor = next.cursor;
                }
                Some(Ok(None)) => return (batch, Some(Ok(()))),
                Some(Err(status)) => return (batch, Some(Err(status))),
            }
        }
        (batch, None)
    }

    /// What the stream's ranges are known to be handled to, for a lease's checkpoint.
    fn handled_to(&self) -> Option<(&[u32], &str)> {
        let seen = self.seen.as_deref()?;
        Some((&self.ranges, seen))
    }
}

/// The position a cursor names (`<transaction>-<record>`), to tell which of two is later.
fn position(cursor: &str) -> Option<(u64, u32)> {
    let (transaction, record) = cursor.split_once('-')?;
    Some((transaction.parse().ok()?, record.parse().ok()?))
}

/// Whether cursor `seen` lies after `cursor` (empty: the feed's start).
fn is_after(seen: &str, cursor: &str) -> bool {
    match (position(seen), position(cursor)) {
        (Some(seen), Some(cursor)) => seen > cursor,
        (Some(_), None) => cursor.is_empty(),
        _ => false,
    }
}

/// The row key prefix of the entities saying which workers are members of a group (beside its
/// leases, whose row keys are numbers).
const MEMBER_PREFIX: &str = "worker-";

/// The most changes a worker takes together from responses already received (past it, what
/// one response adds: at most 500 more).
const COALESCE_CHANGES: usize = 500;

/// How long a worker waits before following again after its stream broke.
const FOLLOW_AGAIN_AFTER: Duration = Duration::from_millis(100);

/// `lease` with its checkpoint moved to `handled`'s cursor if the stream reading `handled`'s
/// ranges read range `range` past it (every record of the range up to there is handled).
fn carried(range: u32, mut lease: Lease, handled: Option<(&[u32], &str)>) -> Lease {
    if let Some((ranges, seen)) = handled {
        if ranges.contains(&range) && is_after(seen, &lease.cursor) {
            lease.cursor = seen.to_owned();
        }
    }
    lease
}

/// Whether a worker follows again after `error` (the server went away, or is busy) rather
/// than ending with it.
fn retried_later(error: &Error) -> bool {
    use crate::ErrorKind;
    matches!(
        error.kind(),
        ErrorKind::Unavailable | ErrorKind::Timeout | ErrorKind::Busy
    )
}

impl Worker {
    async fn run<T, H, F>(
        mut self,
        handler: Arc<H>,
        mut stopped: watch::Receiver<bool>,
    ) -> Result<()>
    where
        T: DeserializeOwned + Send + 'static,
        H: Fn(ChangeBatch<T>, CrossTransaction) -> F + Send + Sync + 'static,
        F: Future<Output = Result<CrossTransaction>> + Send + 'static,
    {
        self.make_leases().await?;
        let balance_every = self.config.lease_time / 3;
        // The first round after a moment, so that the workers starting together each count
        // the others before taking a share (as Kafka's initial rebalance delay).
        self.announce().await?;
        tokio::time::sleep(self.config.lease_time / 10).await;
        let mut next_balance = tokio::time::Instant::now();
        let mut following: Option<Following> = None;
        loop {
            if *stopped.borrow() {
                let handled = following.as_ref().and_then(Following::handled_to);
                let handled = handled.map(|(ranges, seen)| (ranges.to_vec(), seen.to_owned()));
                drop(following);
                return self.hand_back(handled).await;
            }
            if tokio::time::Instant::now() >= next_balance {
                self.balance(following.as_ref().and_then(Following::handled_to))
                    .await?;
                if let Some(idle) = following.as_mut().filter(|f| !f.active) {
                    // Nothing came for a round: the stream is caught up.
                    for range in &idle.ranges {
                        if self.held.contains_key(range) {
                            self.set_lag(*range, Some(Duration::ZERO));
                        }
                    }
                }
                if let Some(following) = following.as_mut() {
                    following.active = false;
                }
                next_balance = tokio::time::Instant::now() + balance_every;
            }
            let ranges: Vec<u32> = self.held.keys().copied().collect();
            if following.as_ref().map(|f| &f.ranges) != Some(&ranges) {
                following = None;
                if !ranges.is_empty() {
                    match self.follow(ranges).await {
                        Ok(opened) => following = Some(opened),
                        Err(error) if retried_later(&error) => {
                            tokio::time::sleep(FOLLOW_AGAIN_AFTER).await;
                            continue;
                        }
                        Err(error) => return Err(error),
                    }
                }
            }
            let Some(stream) = following.as_mut() else {
                tokio::select! {
                    () = tokio::time::sleep_until(next_balance) => {}
                    _ = stopped.changed() => {}
                }
                continue;
            };
            tokio::select! {
                message = stream.responses.message() => {
                    let ended = match message {
                        Ok(Some(batch)) => {
                            let (batch, ended) = stream.coalesce(batch);
                            stream.active = true;
                            let cursor = batch.cursor.clone();
                            self.handle_batch(batch, handler.as_ref()).await?;
                            stream.seen = Some(cursor).filter(|cursor| !cursor.is_empty());
                            ended
                        }
                        Ok(None) => Some(Ok(())),
                        Err(status) => Some(Err(status)),
                    };
                    match ended {
                        None => {}
                        Some(Ok(())) => following = None,
                        Some(Err(status)) => {
                            let error = Error::from_status(status);
                            if !retried_later(&error) {
                                return Err(error);
                            }
                            following = None;
                            tokio::time::sleep(FOLLOW_AGAIN_AFTER).await;
                        }
                    }
                }
                () = tokio::time::sleep_until(next_balance) => {}
                _ = stopped.changed() => {}
            }
        }
    }

    /// Opens the stream of `ranges`' records, each after its lease's cursor.
    async fn follow(&self, ranges: Vec<u32>) -> Result<Following> {
        let segment_cursors = (ranges.iter())
            .map(|range| pb::SegmentCursor {
                segment: *range,
                cursor: self.held[range].lease.cursor.clone(),
            })
            .collect();
        let request = pb::ReadChangesRequest {
            table: self.config.table.name().to_owned(),
            follow: true,
            segment_cursors,
            total_segments: self.config.ranges,
            ..Default::default()
        };
        let client = self.config.table.client.clone();
        let responses = client
            .read(request, |mut c, r| async move { c.read_changes(r).await })
            .await?;
        Ok(Following {
            ranges,
            responses,
            seen: None,
            active: false,
        })
    }

    /// The lease entity of `range`.
    fn key(&self, range: u32) -> EntityKey {
        EntityKey::new(self.config.group.clone(), format!("{range:04}"))
    }

    /// Makes the lease table and the group's leases where missing.
    async fn make_leases(&self) -> Result<()> {
        self.config.leases.create_if_not_exists().await?;
        let (existing, _) = self.read_leases().await?;
        let ranges = self.config.ranges;
        if let Some((_, lease)) = existing.values().find(|(_, lease)| lease.ranges != ranges) {
            // Another count splits the feed otherwise: each range's cursor would mean other
            // records, and changes would be handled twice or never.
            return Err(Error::invalid(format!(
                "group {:?} splits the feed into {} ranges: its workers must say .ranges({}), \
                 not {ranges}",
                self.config.group, lease.ranges, lease.ranges
            )));
        }
        let unowned = Lease {
            ranges,
            ..Lease::default()
        };
        for range in 0..self.config.ranges {
            if existing.contains_key(&range) {
                continue;
            }
            match self.config.leases.insert(self.key(range), &unowned).await {
                Err(error) if error.is_conflict() => {}
                other => drop(other?),
            }
        }
        Ok(())
    }

    /// The group's leases, by range, with their ETags; and the workers that said they are
    /// members, with when that ends.
    async fn read_leases(&self) -> Result<(HashMap<u32, (ETag, Lease)>, Vec<Lease>)> {
        let rows = (self.config.leases.query::<Lease>())
            .partition(self.config.group.clone())
            .all()
            .await?;
        let (mut leases, mut members) = (HashMap::new(), Vec::new());
        for row in rows {
            if let Ok(range) = row.key.row_key.parse::<u32>() {
                leases.insert(range, (row.etag, row.value));
            } else if row.key.row_key.starts_with(MEMBER_PREFIX) {
                members.push(row.value);
            }
        }
        Ok((leases, members))
    }

    /// Says this worker is a member of the group until a lease time from now (then).
    async fn announce(&self) -> Result<i64> {
        let expires_ms = now_ms() + self.config.lease_time.as_millis() as i64;
        let member = Lease {
            owner: self.config.worker.clone(),
            expires_ms,
            ..Lease::default()
        };
        (self.config.leases)
            .upsert(self.member_key(), &member, UpsertMode::Replace)
            .await?;
        Ok(expires_ms)
    }

    /// The entity saying this worker is a member of the group.
    fn member_key(&self) -> EntityKey {
        let row = format!("{MEMBER_PREFIX}{}", self.config.worker);
        EntityKey::new(self.config.group.clone(), row)
    }

    /// Writes `lease` as range `range`'s if its ETag is still `etag`: the new ETag, or `None` if
    /// another worker changed it.
    async fn write_lease(&self, range: u32, etag: &ETag, lease: &Lease) -> Result<Option<ETag>> {
        let written = self
            .config
            .leases
            .update(self.key(range), lease, IfMatch::Tag(etag.clone()));
        match written.await {
            Ok(etag) => Ok(Some(etag)),
            Err(error) if error.is_precondition_failed() || error.is_not_found() => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Renews the leases held (each checkpoint moved to what the followed stream is known to
    /// have handled: `handled`'s ranges up to its cursor), drops those another took, and takes
    /// free or others' leases toward a fair share.
    async fn balance(&mut self, handled: Option<(&[u32], &str)>) -> Result<()> {
        let expires_ms = self.announce().await?;
        let (leases, members) = self.read_leases().await?;
        let held: Vec<u32> = self.held.keys().copied().collect();
        for range in held {
            let mut lease = carried(range, self.held[&range].lease.clone(), handled);
            lease.expires_ms = expires_ms;
            let etag = self.held[&range].etag.clone();
            match self.write_lease(range, &etag, &lease).await? {
                Some(etag) => {
                    self.held.insert(range, Held { etag, lease });
                }
                None => self.drop_lease(range),
            }
        }
        let now = now_ms();
        let me = self.config.worker.clone();
        let live = |lease: &Lease| !lease.owner.is_empty() && lease.expires_ms > now;
        let mut owners: HashSet<&str> = (leases.values().map(|(_, lease)| lease))
            .chain(&members)
            .filter(|lease| live(lease))
            .map(|lease| lease.owner.as_str())
            .collect();
        owners.insert(&me);
        let ranges = self.config.ranges as usize;
        let share = ranges.div_ceil(owners.len());
        let mut free: Vec<u32> = (leases.iter())
            .filter(|(range, (_, lease))| !self.held.contains_key(range) && !live(lease))
            .map(|(range, _)| *range)
            .collect();
        free.sort_unstable();
        for range in free {
            if self.held.len() >= share {
                return Ok(());
            }
            let (etag, lease) = &leases[&range];
            self.take(range, etag, lease, expires_ms).await?;
        }
        // Then from each worker holding more than its share, its excess, until this one has
        // its share: a group balances within a round of a worker's joining.
        let mut counts: HashMap<&str, Vec<u32>> = HashMap::new();
        for (range, (_, lease)) in &leases {
            if live(lease) && lease.owner != me {
                counts.entry(lease.owner.as_str()).or_default().push(*range);
            }
        }
        let mut others: Vec<Vec<u32>> = counts.into_values().collect();
        others.sort_by_key(|ranges| std::cmp::Reverse(ranges.len()));
        for mut ranges in others {
            ranges.sort_unstable();
            let excess = ranges.len().saturating_sub(share);
            for range in ranges.into_iter().take(excess) {
                if self.held.len() >= share {
                    return Ok(());
                }
                let (etag, lease) = &leases[&range];
                self.take(range, etag, lease, expires_ms).await?;
            }
        }
        Ok(())
    }

    /// Takes range `range`'s lease (as read: `etag`, `lease`) from its cursor.
    async fn take(
        &mut self,
        range: u32,
        etag: &ETag,
        lease: &Lease,
        expires_ms: i64,
    ) -> Result<()> {
        let taken = Lease {
            owner: self.config.worker.clone(),
            expires_ms,
            cursor: lease.cursor.clone(),
            ranges: self.config.ranges,
        };
        if let Some(etag) = self.write_lease(range, etag, &taken).await? {
            self.held.insert(range, Held { etag, lease: taken });
        }
        Ok(())
    }

    /// Handles one response of the followed stream: its changes in batches of at most the
    /// batch size and [`MAX_BATCH_RANGES`] ranges, in feed order within each range, each batch
    /// committed with the checkpoints of its ranges (a range's after its last change in the
    /// batch, or at the response's cursor, which may lie past other ranges' records, once the
    /// range has no more changes in the response).
    async fn handle_batch<T, H, F>(
        &mut self,
        batch: pb::ReadChangesResponse,
        handler: &H,
    ) -> Result<()>
    where
        T: DeserializeOwned,
        H: Fn(ChangeBatch<T>, CrossTransaction) -> F,
        F: Future<Output = Result<CrossTransaction>>,
    {
        let total = self.config.ranges;
        let mut changes: Vec<(u32, pb::Change)> = (batch.changes.into_iter())
            .map(|change| (segment::index_of(&change.partition_key, total), change))
            .collect();
        let mut ranges: Vec<u32> = changes.iter().map(|(range, _)| *range).collect();
        ranges.sort_unstable();
        ranges.dedup();
        let size = self.config.batch_size as usize;
        for group in ranges.chunks(MAX_BATCH_RANGES) {
            let (mut mine, others) = (changes.into_iter()).partition(|(r, _)| group.contains(r));
            changes = others;
            while !mine.is_empty() {
                let rest = mine.split_off(mine.len().min(size));
                let chunk = std::mem::replace(&mut mine, rest);
                let mut checkpoints: BTreeMap<u32, String> = BTreeMap::new();
                for (range, change) in &chunk {
                    checkpoints.insert(*range, change.cursor.clone());
                }
                for (range, cursor) in &mut checkpoints {
                    if !mine.iter().any(|(later, _)| later == range) {
                        cursor.clone_from(&batch.cursor);
                    }
                }
                self.commit_chunk(chunk, checkpoints, handler).await?;
            }
        }
        Ok(())
    }

    /// Commits the handler's writes for `changes` with each of their ranges' checkpoints (at
    /// `checkpoints`' cursors), all in one transaction. A range whose lease another worker took
    /// refuses the transaction: it is dropped, and the rest handled again without it.
    async fn commit_chunk<T, H, F>(
        &mut self,
        mut changes: Vec<(u32, pb::Change)>,
        mut checkpoints: BTreeMap<u32, String>,
        handler: &H,
    ) -> Result<()>
    where
        T: DeserializeOwned,
        H: Fn(ChangeBatch<T>, CrossTransaction) -> F,
        F: Future<Output = Result<CrossTransaction>>,
    {
        loop {
            checkpoints.retain(|range, _| self.held.contains_key(range));
            changes.retain(|(range, _)| checkpoints.contains_key(range));
            if checkpoints.is_empty() {
                return Ok(());
            }
            let ranges: Vec<u32> = checkpoints.keys().copied().collect();
            let mut written = BTreeMap::new();
            let mut typed = Vec::with_capacity(changes.len());
            for (range, change) in &changes {
                let change = change_from_pb::<T>(change.clone())?;
                if let Some(entity) = change.entity.as_ref().or(change.before.as_ref()) {
                    written.insert(*range, entity.timestamp);
                }
                typed.push(change);
            }
            let client = &self.config.table.client;
            let batch = ChangeBatch {
                ranges: ranges.clone(),
                changes: typed,
            };
            let mut tx = handler(batch, client.transaction()).await?;
            let at = tx.len();
            let leases = self.config.leases.name().to_owned();
            let mut moved = Vec::with_capacity(ranges.len());
            for (range, cursor) in &checkpoints {
                let held = &self.held[range];
                let lease = Lease {
                    cursor: cursor.clone(),
                    ..held.lease.clone()
                };
                let fence = IfMatch::Tag(held.etag.clone());
                tx.update(&leases, self.key(*range), &lease, fence)?;
                moved.push((*range, lease));
            }
            match tx.commit().await {
                Ok(etags) => {
                    let etags = etags.into_iter().skip(at);
                    for ((range, lease), etag) in moved.into_iter().zip(etags) {
                        if let Some(etag) = etag {
                            self.held.insert(range, Held { etag, lease });
                        }
                    }
                    let now = crate::DateTime::now().ticks();
                    for (range, written) in written {
                        let behind = u64::try_from(now - written.ticks()).unwrap_or(0);
                        self.set_lag(range, Some(Duration::from_nanos(behind * 100)));
                    }
                    return Ok(());
                }
                Err(error) if error.is_precondition_failed() => {
                    let fenced = (error.operation_index())
                        .and_then(|index| index.checked_sub(at))
                        .and_then(|nth| ranges.get(nth));
                    match fenced {
                        Some(range) => self.drop_lease(*range),
                        None => return Err(error),
                    }
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Forgets range `range`'s lease, another worker's now.
    fn drop_lease(&mut self, range: u32) {
        self.held.remove(&range);
        self.set_lag(range, None);
    }

    /// Notes how far behind range `range` is (`None`: no longer held here).
    fn set_lag(&self, range: u32, lag: Option<Duration>) {
        let mut lags = self.lag.lock().unwrap_or_else(PoisonError::into_inner);
        match lag {
            Some(lag) => lags.insert(range, lag),
            None => lags.remove(&range),
        };
    }

    /// Hands every lease held back (free at once, its checkpoint moved to what the followed
    /// stream handled: `handled`).
    async fn hand_back(&mut self, handled: Option<(Vec<u32>, String)>) -> Result<()> {
        for range in self.held.keys().copied().collect::<Vec<_>>() {
            self.set_lag(range, None);
        }
        let handled = (handled.as_ref()).map(|(ranges, seen)| (ranges.as_slice(), seen.as_str()));
        for (range, held) in std::mem::take(&mut self.held) {
            let free = Lease {
                owner: String::new(),
                expires_ms: 0,
                ..carried(range, held.lease, handled)
            };
            self.write_lease(range, &held.etag, &free).await?;
        }
        let left = self.config.leases.delete(self.member_key(), IfMatch::Any);
        match left.await {
            Err(error) if !error.is_not_found() => Err(error),
            _ => Ok(()),
        }
    }
}
