//! The server's housekeeping, a task that every [`EVERY`] looks at each table: it removes from a
//! change feed the records older than the feed's retention, and from a table whose entities expire
//! the expired ones (at most [`SWEEP_EXAMINED`] examined a table a pass, resuming where the last
//! pass stopped, so its cost per second is bounded), each removal a commit of its own kind
//! (`Operation::Expire`, an `EXPIRE` record in the feed) that leaves an entity rewritten
//! meanwhile alone. A table of the server's own whose entities all live as long (the
//! idempotency records) is examined again only once its soonest expiry comes ([`Sweep`]). Work
//! runs on the blocking pool. Over PostgreSQL one server at a time does it
//! (the store names the tables to tend only to the server holding its housekeeping lease).

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::Engine;
use crate::error::TableError;
use crate::model::{
    ETag, EntityKey, IfMatch, KeyPosition, KeyRange, Operation, Ticks, TICKS_PER_SECOND,
    TTL_PROPERTY,
};
use crate::storage::{Commit, KeyScan, Table, Visit};

/// How often the housekeeping runs.
const EVERY: Duration = Duration::from_secs(1);
/// Records one trimming step removes at most.
const TRIM_BATCH: usize = 1_000;
/// Entities one pass examines in a table whose entities expire, at most.
const SWEEP_EXAMINED: usize = 50_000;
/// Expired entities one commit removes (of one partition), at most.
const EXPIRE_BATCH: usize = 100;

/// Where each table's sweep for expired entities stands (by table id).
type SweepPositions = HashMap<u64, Sweep>;

/// A table's sweep between passes.
#[derive(Debug, Clone)]
pub(crate) enum Sweep {
    /// Midway through the table: the next pass resumes at this key; the soonest expiry of the
    /// entities examined so far that had not expired.
    ResumeAt(KeyPosition, Option<Ticks>),
    /// A table of the server's own, whose entities all live as long and so expire in the order
    /// they were written (the idempotency records): swept whole, nothing in it expires before
    /// this, so no pass examines it until then.
    IdleUntil(Ticks),
}

/// Runs the housekeeping of `engine` every [`EVERY`] until the task is aborted.
pub(crate) fn run_in_background(engine: Arc<Engine>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut positions = SweepPositions::new();
        loop {
            ticks.tick().await;
            let engine = engine.clone();
            let ran = tokio::task::spawn_blocking(move || {
                let done = pass(&engine, Ticks::now(), &mut positions);
                (done, positions)
            })
            .await;
            positions = match ran {
                Ok((done, kept)) => {
                    match done {
                        Ok(done) => done.count(),
                        Err(error) => tracing::warn!(%error, "housekeeping failed; trying again"),
                    }
                    kept
                }
                Err(error) => {
                    tracing::error!(%error, "housekeeping panicked");
                    SweepPositions::new()
                }
            };
        }
    })
}

/// What a pass removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Done {
    /// Change records past their feed's retention.
    pub(crate) trimmed: usize,
    /// Expired entities.
    pub(crate) expired: usize,
}

impl Done {
    /// Counts the pass among the background jobs, by what it did.
    fn count(self) {
        if self.trimmed > 0 {
            crate::telemetry::background_done("feed_trim");
        }
        if self.expired > 0 {
            crate::telemetry::background_done("expire");
        }
    }
}

/// One pass over every table at `now`.
pub(crate) fn pass(
    engine: &Engine,
    now: Ticks,
    positions: &mut SweepPositions,
) -> Result<Done, TableError> {
    let mut done = Done::default();
    for (table, catalog) in engine.tables_to_tend()? {
        if let Some(feed) = catalog.change_feed {
            let retention = ticks_of(feed.retention_seconds);
            done.trimmed += trim(table.as_ref(), Ticks(now.0.saturating_sub(retention)))?;
        }
        if catalog.time_to_live.is_some() {
            done.expired += sweep(engine, table.as_ref(), now, positions)?;
        }
    }
    Ok(done)
}

fn ticks_of(seconds: u64) -> i64 {
    i64::try_from(seconds)
        .unwrap_or(i64::MAX)
        .saturating_mul(TICKS_PER_SECOND)
}

/// Removes the feed's records of commits before `before`: how many.
fn trim(table: &dyn Table, before: Ticks) -> Result<usize, TableError> {
    let mut removed = 0;
    loop {
        let step = table.trim_changes(before, TRIM_BATCH)?;
        removed += step;
        if step < TRIM_BATCH {
            return Ok(removed);
        }
    }
}

/// Examines up to [`SWEEP_EXAMINED`] entities of `table` from where its last sweep stopped and
/// removes those expired at `now`: how many.
fn sweep(
    engine: &Engine,
    table: &dyn Table,
    now: Ticks,
    positions: &mut SweepPositions,
) -> Result<usize, TableError> {
    let ttl = table.time_to_live();
    let (start, mut soonest) = match positions.remove(&table.id()) {
        Some(Sweep::IdleUntil(until)) if until > now => {
            positions.insert(table.id(), Sweep::IdleUntil(until));
            return Ok(0);
        }
        Some(Sweep::ResumeAt(position, soonest)) => (Bound::Included(position), soonest),
        Some(Sweep::IdleUntil(_)) | None => (Bound::Unbounded, None),
    };
    let range = KeyRange {
        start,
        end: Bound::Unbounded,
    };
    let mut expired: Vec<(EntityKey, ETag)> = Vec::new();
    let mut examined = 0;
    let stopped_at = table.visit(KeyScan::forward(&[range]), &mut |entity| {
        if examined == SWEEP_EXAMINED {
            return Ok(Visit::Stop);
        }
        examined += 1;
        let own = entity.property(TTL_PROPERTY)?;
        match ttl.and_then(|ttl| ttl.expiry(entity.timestamp, own)) {
            Some(expiry) if expiry <= now => {
                let key = EntityKey {
                    partition_key: entity.partition_key.to_owned(),
                    row_key: entity.row_key.to_owned(),
                };
                expired.push((key, ETag::for_timestamp(entity.timestamp)));
            }
            Some(expiry) => soonest = Some(soonest.map_or(expiry, |s| s.min(expiry))),
            None => {}
        }
        Ok(Visit::Next)
    })?;
    match (stopped_at, soonest) {
        (Some(position), _) => {
            positions.insert(table.id(), Sweep::ResumeAt(position, soonest));
        }
        (None, Some(soonest)) if table.name().is_hidden() => {
            positions.insert(table.id(), Sweep::IdleUntil(soonest));
        }
        (None, _) => {}
    }
    let mut removed = 0;
    for batch in by_partition(expired) {
        let (partition_key, count) = (batch[0].0.partition_key.clone(), batch.len());
        let operations = batch
            .into_iter()
            .map(|(key, etag)| Operation::Expire {
                key,
                if_match: IfMatch::Tag(etag),
            })
            .collect();
        // An expiry is never refused (one of a row rewritten meanwhile, or of a table created
        // again under the name, does nothing: its ETag is another); nobody waits for its
        // durability.
        let commit = Commit::on_partition(table.name().clone(), partition_key, operations);
        if engine.run_here(engine.store_arc().commit(commit))?.is_ok() {
            removed += count;
        }
    }
    Ok(removed)
}

/// `expired` (in key order) in batches of one partition, of at most [`EXPIRE_BATCH`].
fn by_partition(expired: Vec<(EntityKey, ETag)>) -> Vec<Vec<(EntityKey, ETag)>> {
    let mut batches: Vec<Vec<(EntityKey, ETag)>> = Vec::new();
    for entry in expired {
        match batches.last_mut() {
            Some(batch)
                if batch.len() < EXPIRE_BATCH
                    && batch[0].0.partition_key == entry.0.partition_key =>
            {
                batch.push(entry)
            }
            _ => batches.push(vec![entry]),
        }
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::IdempotencyClaim;
    use crate::model::{NewEntity, Properties};
    use crate::storage::StoreConfig;

    fn seconds(n: i64) -> Ticks {
        Ticks(Ticks::now().0 + n * TICKS_PER_SECOND)
    }

    async fn keyed_insert(engine: &Engine, row_key: &str) {
        let key = EntityKey::new("p".into(), row_key.into()).unwrap();
        let insert = Operation::Insert(NewEntity::new(key, Properties::new()).unwrap());
        let claim = IdempotencyClaim::parse("account".into(), row_key).unwrap();
        let written = engine
            .write("Orders", insert, claim.as_ref())
            .await
            .unwrap();
        assert!(written.value.is_some());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idempotency_records_are_swept_once_expired_and_not_examined_before() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(&StoreConfig::embedded(dir.path()))
            .unwrap()
            .with_idempotency_window(2);
        engine.create_table("Orders").unwrap();
        keyed_insert(&engine, "first").await;
        let engine = Arc::new(engine);
        let passes = |at: Ticks, positions: SweepPositions| {
            let engine = engine.clone();
            tokio::task::spawn_blocking(move || {
                let mut positions = positions;
                let done = pass(&engine, at, &mut positions).unwrap();
                (done.expired, positions)
            })
        };
        // Not expired yet: examined once, then left alone until its expiry.
        let (expired, positions) = passes(Ticks::now(), SweepPositions::new()).await.unwrap();
        assert_eq!(expired, 0);
        assert!(
            positions
                .values()
                .any(|sweep| matches!(sweep, Sweep::IdleUntil(_))),
            "{positions:?}"
        );
        keyed_insert(&engine, "second").await;
        let (expired, positions) = passes(seconds(1), positions).await.unwrap();
        assert_eq!(expired, 0, "not examined before the soonest expiry");
        let idle = positions.values().find_map(|sweep| match sweep {
            Sweep::IdleUntil(until) => Some(*until),
            Sweep::ResumeAt(..) => None,
        });
        assert!(
            idle.is_some_and(|until| until > seconds(1)),
            "{positions:?}"
        );
        let (expired, positions) = passes(seconds(3), positions).await.unwrap();
        assert_eq!(
            expired, 2,
            "both records, the second written while it idled"
        );
        let (expired, _) = passes(seconds(4), positions).await.unwrap();
        assert_eq!(expired, 0);
    }
}
