//! A change-feed processor: the workers of one named group share a table's feed, each change's
//! effect applied exactly once, through workers joining, leaving and dying.
//!
//! The feed is split into `ranges` (ReadChanges' segments: a hash of the PartitionKey), each
//! with a *lease*: an entity of the group's lease table (partition = the group, row = the range)
//! naming its owner, when the lease ends, and the cursor the group has processed the range to. A
//! worker renews its leases every third of the lease time; a lease not renewed in time is free,
//! and another worker takes it from its cursor. Every worker aims at a fair share
//! (`ceil(ranges / live workers)`): it takes free leases first, then one a round from the worker
//! holding the most. Every change of a lease (taken, renewed, checkpointed) is conditioned on
//! the ETag its holder last saw, so a worker whose lease was taken (it paused past its lease
//! time, or another took it to balance) cannot write it again: its next renewal or checkpoint
//! fails, and it drops the lease (fencing by the lease's ETag).
//!
//! **Exactly once:** the handler is given each batch of a range's changes and a
//! [`CrossTransaction`] to put its writes in; the processor adds the lease's checkpoint (the
//! batch's cursor, conditioned on the lease's ETag) to the same transaction, so the writes and
//! the checkpoint commit together or not at all. A worker that dies mid-batch committed nothing
//! of it, and whoever takes the lease processes the batch again; a worker whose lease moved
//! cannot commit. A handler that writes nothing gets at-least-once (the checkpoint still commits
//! after it). Workers' clocks decide when a lease ends: keep them in step (NTP), and the lease
//! time well above the skew.
//!
//! Bounded by: each read is one `ReadChanges` response (the server's stream framing: at most 500
//! records and its byte bound), handled in chunks of the batch size (50 unless said), each
//! chunk's transaction a `TransactWrite`'s 100 operations (the handler's at most 99, the
//! checkpoint the last); an idle worker reads each range it holds every 100 ms.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use trestle_proto::pb;

use crate::across::CrossTransaction;
use crate::changes::{change_from_pb, Change};
use crate::entity::{ETag, IfMatch};
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
}

/// A lease this worker holds: the ETag it last wrote and what it wrote.
#[derive(Debug, Clone)]
struct Held {
    etag: ETag,
    lease: Lease,
}

/// One batch of a range's changes, in feed order.
#[derive(Debug, Clone)]
pub struct ChangeBatch<T> {
    /// The range (segment) they are from.
    pub range: u32,
    /// The changes.
    pub changes: Vec<Change<T>>,
}

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
    /// same): at most that many workers share the work.
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

    /// The most changes one call of the handler gets (1 to 500; 50 unless said): a batch read
    /// is split into chunks of it, each committed with its own checkpoint. The handler may add
    /// at most 99 operations to a chunk's transaction (the checkpoint is the 100th), so one that
    /// writes once per change needs a size under 100, one that sums per entity fewer entities.
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

impl FeedProcessorBuilder {
    /// The batch handler: called with each batch of a range a worker holds, its entities read
    /// as `T`, and a transaction for its writes, which the worker commits with the batch's
    /// checkpoint (this module's doc).
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
        let mut next_balance = tokio::time::Instant::now();
        loop {
            if *stopped.borrow() {
                return self.hand_back().await;
            }
            if tokio::time::Instant::now() >= next_balance {
                self.balance().await?;
                next_balance = tokio::time::Instant::now() + balance_every;
            }
            let mut worked = false;
            let ranges: Vec<u32> = self.held.keys().copied().collect();
            for range in ranges {
                worked |= self.process(range, handler.as_ref(), next_balance).await?;
                if tokio::time::Instant::now() >= next_balance || *stopped.borrow() {
                    break;
                }
            }
            if !worked {
                let idle = tokio::time::sleep_until(
                    next_balance.min(tokio::time::Instant::now() + Duration::from_millis(100)),
                );
                tokio::select! {
                    () = idle => {}
                    _ = stopped.changed() => {}
                }
            }
        }
    }

    /// The lease entity of `range`.
    fn key(&self, range: u32) -> EntityKey {
        EntityKey::new(self.config.group.clone(), format!("{range:04}"))
    }

    /// Makes the lease table and the group's leases where missing.
    async fn make_leases(&self) -> Result<()> {
        self.config.leases.create_if_not_exists().await?;
        let existing = self.read_leases().await?;
        let unowned = Lease::default();
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

    /// The group's leases, by range, with their ETags.
    async fn read_leases(&self) -> Result<HashMap<u32, (ETag, Lease)>> {
        let rows = (self.config.leases.query::<Lease>())
            .partition(self.config.group.clone())
            .all()
            .await?;
        let mut leases = HashMap::new();
        for row in rows {
            if let Ok(range) = row.key.row_key.parse::<u32>() {
                leases.insert(range, (row.etag, row.value));
            }
        }
        Ok(leases)
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

    /// Renews the leases held, drops those another took, and takes free or others' leases
    /// toward a fair share.
    async fn balance(&mut self) -> Result<()> {
        let leases = self.read_leases().await?;
        let expires_ms = now_ms() + self.config.lease_time.as_millis() as i64;
        let held: Vec<u32> = self.held.keys().copied().collect();
        for range in held {
            let mut lease = self.held[&range].lease.clone();
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
        let mut owners: HashSet<&str> = (leases.values())
            .filter(|(_, lease)| live(lease))
            .map(|(_, lease)| lease.owner.as_str())
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
        if self.held.len() < share {
            // One a round from the worker holding the most, if it holds more than its share.
            let mut counts: HashMap<&str, Vec<u32>> = HashMap::new();
            for (range, (_, lease)) in &leases {
                if live(lease) && lease.owner != me {
                    counts.entry(lease.owner.as_str()).or_default().push(*range);
                }
            }
            let busiest = counts.into_values().max_by_key(|ranges| ranges.len());
            if let Some(ranges) = busiest.filter(|ranges| ranges.len() > share) {
                let range = ranges.into_iter().min().unwrap_or_default();
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
        };
        if let Some(etag) = self.write_lease(range, etag, &taken).await? {
            self.held.insert(range, Held { etag, lease: taken });
        }
        Ok(())
    }

    /// Reads range `range`'s changes after its cursor, batch by batch until the read ends (caught
    /// up) or `until` passes, committing the handler's writes with each chunk's checkpoint:
    /// whether there was any. A lease another worker took is dropped. The read is followed to
    /// its end, not dropped after a batch: a client resetting streams by the hundred a second is
    /// told by the server's HTTP/2 to calm down, and loses its connection.
    async fn process<T, H, F>(
        &mut self,
        range: u32,
        handler: &H,
        until: tokio::time::Instant,
    ) -> Result<bool>
    where
        T: DeserializeOwned,
        H: Fn(ChangeBatch<T>, CrossTransaction) -> F,
        F: Future<Output = Result<CrossTransaction>>,
    {
        let Some(held) = self.held.get(&range).cloned() else {
            return Ok(false);
        };
        let request = pb::ReadChangesRequest {
            table: self.config.table.name().to_owned(),
            cursor: held.lease.cursor.clone(),
            segment: range,
            total_segments: self.config.ranges,
            ..Default::default()
        };
        let client = self.config.table.client.clone();
        let mut responses = client
            .read(request, |mut c, r| async move { c.read_changes(r).await })
            .await?;
        let mut worked = false;
        while let Some(batch) = responses.message().await.map_err(Error::from_status)? {
            if !self.handle_batch(range, batch, handler).await? {
                return Ok(worked);
            }
            worked = true;
            if tokio::time::Instant::now() >= until {
                return Ok(worked);
            }
        }
        if !worked {
            self.set_lag(range, Some(Duration::ZERO));
        }
        Ok(worked)
    }

    /// Handles one batch of range `range`'s read in chunks of the batch size, each checkpointed
    /// after its last change (the last chunk at the batch's cursor, which may lie past other
    /// ranges' records): whether the lease is still held.
    async fn handle_batch<T, H, F>(
        &mut self,
        range: u32,
        batch: pb::ReadChangesResponse,
        handler: &H,
    ) -> Result<bool>
    where
        T: DeserializeOwned,
        H: Fn(ChangeBatch<T>, CrossTransaction) -> F,
        F: Future<Output = Result<CrossTransaction>>,
    {
        let mut changes = (batch.changes.into_iter())
            .map(change_from_pb)
            .collect::<Result<Vec<Change<T>>>>()?;
        let size = self.config.batch_size as usize;
        loop {
            let rest = changes.split_off(changes.len().min(size));
            let chunk = std::mem::replace(&mut changes, rest);
            let cursor = match (changes.is_empty(), chunk.last()) {
                (false, Some(last)) => last.cursor.to_string(),
                _ => batch.cursor.clone(),
            };
            if !self.commit_chunk(range, chunk, cursor, handler).await? {
                return Ok(false);
            }
            if changes.is_empty() {
                return Ok(true);
            }
        }
    }

    /// Commits the handler's writes for `changes` of range `range` with the range's checkpoint
    /// at `cursor`: whether the lease is still held (else it is dropped, nothing written).
    async fn commit_chunk<T, H, F>(
        &mut self,
        range: u32,
        changes: Vec<Change<T>>,
        cursor: String,
        handler: &H,
    ) -> Result<bool>
    where
        H: Fn(ChangeBatch<T>, CrossTransaction) -> F,
        F: Future<Output = Result<CrossTransaction>>,
    {
        let Some(held) = self.held.get(&range).cloned() else {
            return Ok(false);
        };
        let written = (changes.iter().rev())
            .find_map(|change| change.entity.as_ref().or(change.before.as_ref()))
            .map(|entity| entity.timestamp);
        let lease = Lease {
            cursor,
            ..held.lease.clone()
        };
        let client = &self.config.table.client;
        let mut tx = match changes.is_empty() {
            // Only other ranges' records: the cursor moves on, nothing to handle.
            true => client.transaction(),
            false => handler(ChangeBatch { range, changes }, client.transaction()).await?,
        };
        let at = tx.len();
        let leases = self.config.leases.name().to_owned();
        tx.update(
            &leases,
            self.key(range),
            &lease,
            IfMatch::Tag(held.etag.clone()),
        )?;
        match tx.commit().await {
            Ok(etags) => {
                if let Some(Some(etag)) = etags.into_iter().nth(at) {
                    self.held.insert(range, Held { etag, lease });
                }
                if let Some(written) = written {
                    let now = crate::DateTime::now().ticks();
                    let behind = u64::try_from(now - written.ticks()).unwrap_or(0);
                    self.set_lag(range, Some(Duration::from_nanos(behind * 100)));
                }
                Ok(true)
            }
            Err(error) if error.operation_index() == Some(at) && error.is_precondition_failed() => {
                self.drop_lease(range);
                Ok(false)
            }
            Err(error) => Err(error),
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

    /// Hands every lease held back (free at once, its cursor kept).
    async fn hand_back(&mut self) -> Result<()> {
        for range in self.held.keys().copied().collect::<Vec<_>>() {
            self.set_lag(range, None);
        }
        for (range, held) in std::mem::take(&mut self.held) {
            let free = Lease {
                owner: String::new(),
                expires_ms: 0,
                ..held.lease
            };
            self.write_lease(range, &held.etag, &free).await?;
        }
        Ok(())
    }
}
