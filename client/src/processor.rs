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
//! Bounded by: each batch is one `ReadChanges` response (the server's stream framing: at most
//! 500 records and its byte bound), and its transaction a `TransactWrite`'s 100 operations (the
//! handler's at most 99, the checkpoint the last); an idle worker reads each range it holds every
//! 100 ms.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
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

/// Builds a [`FeedProcessor`]'s worker ([`FeedProcessor::builder`]).
#[derive(Debug, Clone)]
#[must_use = "a processor does nothing until started"]
pub struct FeedProcessorBuilder {
    table: TableClient,
    group: String,
    leases: TableClient,
    ranges: u32,
    lease_time: Duration,
    worker: String,
}

/// A worker of a change-feed processor group, running ([`FeedProcessorBuilder::start`]).
#[derive(Debug)]
pub struct FeedProcessor {
    stop: watch::Sender<bool>,
    running: JoinHandle<Result<()>>,
}

impl FeedProcessor {
    /// A worker of group `group` on `table`'s feed (the table must keep one). Its leases are in
    /// the table named after it with `Leases` appended, made if missing, unless
    /// [`FeedProcessorBuilder::leases`] names another; the feed is split into 16 ranges, leases
    /// last 10 seconds.
    pub fn builder(table: &TableClient, group: impl Into<String>) -> FeedProcessorBuilder {
        let leases = table.client.table(format!("{}Leases", table.name()));
        FeedProcessorBuilder {
            table: table.clone(),
            group: group.into(),
            leases,
            ranges: 16,
            lease_time: Duration::from_secs(10),
            worker: uuid::Uuid::now_v7().to_string(),
        }
    }

    /// Stops the worker gracefully: it finishes the batch it is on and hands its leases back, so
    /// that the others take them at once. Its error, if it ended with one.
    pub async fn stop(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.running
            .await
            .map_err(|error| Error::invalid(format!("the processor's task failed: {error}")))?
    }

    /// Whether the worker has ended (with an error, or stopped).
    pub fn is_finished(&self) -> bool {
        self.running.is_finished()
    }
}

impl FeedProcessorBuilder {
    /// The table the group's leases are kept in (one partition per group).
    pub fn leases(mut self, leases: TableClient) -> Self {
        self.leases = leases;
        self
    }

    /// How many ranges the feed is split into (1 to 1,024; every worker of a group must say the
    /// same): at most that many workers share the work.
    pub fn ranges(mut self, ranges: u32) -> Self {
        self.ranges = ranges;
        self
    }

    /// How long a lease lasts unless renewed (renewed every third of it): how long a dead
    /// worker's ranges wait for another.
    pub fn lease_time(mut self, lease_time: Duration) -> Self {
        self.lease_time = lease_time;
        self
    }

    /// The worker's name in its leases (a new UUID unless given; each worker needs its own).
    pub fn worker_name(mut self, name: impl Into<String>) -> Self {
        self.worker = name.into();
        self
    }

    /// Starts the worker on a task of its own: it calls `handler` with each batch of a range it
    /// holds and a transaction for its writes, which it commits with the batch's checkpoint
    /// (this module's doc). An error of the handler, or one the SDK's retries could not get past,
    /// ends the worker with it ([`FeedProcessor::stop`] gives it).
    ///
    /// # Errors
    /// `InvalidInput` for ranges outside 1 to 1,024 or a lease time under a second.
    pub fn start<T, H, F>(self, handler: H) -> Result<FeedProcessor>
    where
        T: DeserializeOwned + Send + 'static,
        H: Fn(ChangeBatch<T>, CrossTransaction) -> F + Send + Sync + 'static,
        F: Future<Output = Result<CrossTransaction>> + Send + 'static,
    {
        if !(1..=1024).contains(&self.ranges) {
            return Err(Error::invalid(format!(
                "a feed processor splits the feed into 1 to 1,024 ranges, not {}",
                self.ranges
            )));
        }
        if self.lease_time < Duration::from_secs(1) {
            return Err(Error::invalid("a lease lasts at least a second"));
        }
        let (stop, stopped) = watch::channel(false);
        let worker = Worker {
            config: self,
            held: BTreeMap::new(),
        };
        let running = tokio::spawn(worker.run(handler, stopped));
        Ok(FeedProcessor { stop, running })
    }
}

/// A running worker and the leases it holds.
struct Worker {
    config: FeedProcessorBuilder,
    held: BTreeMap<u32, Held>,
}

fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

impl Worker {
    async fn run<T, H, F>(mut self, handler: H, mut stopped: watch::Receiver<bool>) -> Result<()>
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
                worked |= self.process(range, &handler).await?;
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
                None => {
                    self.held.remove(&range);
                }
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

    /// Reads the next batch of range `range` and commits the handler's writes with its
    /// checkpoint: whether there was one. A lease another worker took is dropped.
    async fn process<T, H, F>(&mut self, range: u32, handler: &H) -> Result<bool>
    where
        T: DeserializeOwned,
        H: Fn(ChangeBatch<T>, CrossTransaction) -> F,
        F: Future<Output = Result<CrossTransaction>>,
    {
        let held = self.held[&range].clone();
        let request = pb::ReadChangesRequest {
            table: self.config.table.name().to_owned(),
            cursor: held.lease.cursor.clone(),
            segment: range,
            total_segments: self.config.ranges,
            ..Default::default()
        };
        let client = &self.config.table.client;
        let mut responses = client
            .read(request, |mut c, r| async move { c.read_changes(r).await })
            .await?;
        let Some(batch) = responses.message().await.map_err(Error::from_status)? else {
            return Ok(false);
        };
        drop(responses);
        if batch.cursor == held.lease.cursor {
            return Ok(false);
        }
        let changes = (batch.changes.into_iter())
            .map(change_from_pb)
            .collect::<Result<Vec<Change<T>>>>()?;
        let lease = Lease {
            cursor: batch.cursor,
            ..held.lease.clone()
        };
        let tx = match changes.is_empty() {
            // Only other ranges' records: the cursor moves on, nothing to handle.
            true => client.transaction(),
            false => handler(ChangeBatch { range, changes }, client.transaction()).await?,
        };
        let mut tx = tx;
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
                Ok(true)
            }
            Err(error) if error.operation_index() == Some(at) && error.is_precondition_failed() => {
                self.held.remove(&range);
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    /// Hands every lease held back (free at once, its cursor kept).
    async fn hand_back(&mut self) -> Result<()> {
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
