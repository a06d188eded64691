//! Followers of a change feed wait for a notification, not a poll each: one watcher per followed
//! table looks for a record after the last one it has seen (an index probe over PostgreSQL: the
//! feed's horizon is computed only when a record is there) as soon as this server acknowledges a
//! write, and otherwise every [`LOOK_AT_LEAST_EVERY`] (for other servers' commits), and wakes
//! every follower of the table when it finds one. So 1,000 caught-up followers of an idle feed
//! cost one look per table now and then, not 1,000 polls; the watcher ends when the table's last
//! follower goes away.
//!
//! Whatever adds a waiter on new commits subscribes here ([`FeedWatch::subscribe`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use crate::executor::Executor;
use crate::storage::{FeedBatch, FeedPosition};

/// The shortest time between two looks of one watcher (however busy the table).
pub(crate) const LOOK_EVERY: Duration = Duration::from_millis(5);
/// The longest: a watcher looks again once a write is acknowledged by this server
/// ([`Executor::commits`]), and at least this often for what it is not told of (commits by other
/// servers over the same PostgreSQL database, the expiry sweep's records).
pub(crate) const LOOK_AT_LEAST_EVERY: Duration = Duration::from_millis(25);

/// What a follower is woken by: the last record the watcher has found readable (`None` before it
/// found one; a failed look wakes followers too, for their reads to meet the failure). A follower
/// whose read, woken, does not reach that record yet (over PostgreSQL the feed's horizon may dip
/// for a moment as unrelated transactions end) reads again shortly ([`LOOK_EVERY`]) instead of
/// waiting for a record after it, which may never come.
pub(crate) type FeedChanges = watch::Receiver<Option<FeedPosition>>;

/// The watchers of the tables that have followers.
#[derive(Debug, Clone)]
pub(crate) struct FeedWatch {
    executor: Executor,
    /// Each followed table's watcher, by the table's name folded to lower case.
    watched: Arc<Mutex<HashMap<String, watch::Sender<Option<FeedPosition>>>>>,
}

impl FeedWatch {
    /// Watchers whose looks run on `executor`.
    pub(crate) fn new(executor: Executor) -> FeedWatch {
        FeedWatch {
            executor,
            watched: Arc::default(),
        }
    }

    /// Subscribes to table `table`'s new commits, starting its watcher if it has none.
    pub(crate) fn subscribe(&self, table: &str) -> FeedChanges {
        let folded = table.to_ascii_lowercase();
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(watcher) = watched.get(&folded) {
            return watcher.subscribe();
        }
        let (watcher, changes) = watch::channel(None);
        watched.insert(folded.clone(), watcher.clone());
        tokio::spawn(watch_table(self.clone(), folded, table.to_owned(), watcher));
        changes
    }
}

/// Looks at `table`'s feed end until no follower is left.
async fn watch_table(
    watch: FeedWatch,
    folded: String,
    table: String,
    watcher: watch::Sender<Option<FeedPosition>>,
) {
    let name = table.clone();
    let start = watch
        .executor
        .blocking(move |engine| engine.feed_end(&name));
    let mut seen = start.await.ok().map(|end| end.readable);
    let mut commits = watch.executor.commits();
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        tokio::select! {
            _ = commits.changed() => {}
            () = tokio::time::sleep(LOOK_AT_LEAST_EVERY) => {}
        }
        {
            // Under the lock that subscribing takes: no follower joins a watcher that is ending.
            let mut watched = watch.watched.lock().unwrap_or_else(PoisonError::into_inner);
            if watcher.receiver_count() == 0 {
                watched.remove(&folded);
                return;
            }
        }
        let name = table.clone();
        let look = watch.executor.blocking(move |engine| {
            let next = engine.read_changes(&name, seen, FeedBatch::records(1))?;
            match next.first() {
                // Past everything readable now, so that the next look finds only what is new.
                Some(found) => {
                    let past = found.position.max(engine.feed_end(&name)?.readable);
                    Ok(Some((found.position, past)))
                }
                None => Ok(None),
            }
        });
        match look.await {
            Ok(None) => {}
            Ok(Some((found, position))) => {
                seen = Some(position);
                watcher.send_replace(Some(found));
            }
            // The followers' next reads meet the failure (the table deleted, the store down).
            Err(_) => {
                watcher.send_modify(|_| {});
            }
        }
    }
}
