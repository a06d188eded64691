//! The sled store's one apply ([`crate::storage::Store::commit`]): which strategy a commit takes,
//! and where it runs.
//!
//! A commit on one partition takes the table's partition path ([`super::SledTable::commit_waiting`]: a
//! lone insert as one compare-and-swap, anything else planned and written under the partition's
//! lock); a commit across partitions or tables takes [`SledStore::commit_batches_across`]. Both
//! keep the same rules: the plan of `model::plan`, index entries and unique claims, the change
//! feed's turn (a record is readable only once every earlier transaction of the table is,
//! [`super::feed`]), group commit's tickets and the undo log. Either is tried inline on the
//! caller's runtime worker first, not allowed to wait for a lock, since it takes microseconds and
//! two thread hand-offs cost more; one that would wait runs on the blocking pool.

use std::sync::Arc;

use super::{CommitOutcome, RejectReason, Rejection, SledStore, StorageError};
use crate::storage::{on_blocking_pool, Commit};

/// How many times a commit across partitions runs inline before it waits for a busy partition
/// on the blocking pool. Its partitions are held only by work running inline on the other
/// workers, for microseconds, or by work on the blocking pool; and a thread woken from the
/// blocking pool for each commit that found one busy cost more than the commits (with 16 at once
/// over 100 partitions, more than half wait once). One partition busy with a long commit or scan
/// costs the attempts' few microseconds each. Partition commits, which contend for one partition
/// at a time, wait at once: trying again there cost a hot partition a fifth of its rate.
const ACROSS_INLINE_ATTEMPTS: usize = 64;

impl SledStore {
    /// Applies `commit`: inline while it need not wait, else on the blocking pool.
    pub(super) async fn apply(
        self: Arc<Self>,
        mut commit: Commit,
    ) -> Result<CommitOutcome, StorageError> {
        let attempts = match commit.single_partition() {
            Some(_) => 1,
            None => ACROSS_INLINE_ATTEMPTS,
        };
        let inline = crate::traces::store_span("inline");
        for attempt in 1..=attempts {
            match inline.in_scope(|| self.apply_now(commit, false))? {
                Ok(outcome) => return Ok(outcome),
                Err(back) => commit = back,
            }
            if attempt < attempts {
                tokio::task::yield_now().await;
            }
        }
        on_blocking_pool(move || match self.apply_now(commit, true)? {
            Ok(outcome) => Ok(outcome),
            Err(_) => unreachable!("a commit allowed to wait runs"),
        })
        .await
    }

    /// One attempt at `commit`; unless `wait`, it is given back untouched rather than wait for a
    /// table or a partition.
    pub(super) fn apply_now(
        &self,
        mut commit: Commit,
        wait: bool,
    ) -> Result<Result<CommitOutcome, Commit>, StorageError> {
        let operations = commit.operations;
        let [batch] = commit.batches.as_mut_slice() else {
            let committed = self.commit_batches_across(commit.batches, operations, wait)?;
            return Ok(committed.map_err(|batches| Commit {
                batches,
                operations,
            }));
        };
        let Some(table) = self.sled_table(&batch.table) else {
            return Ok(Ok(Err(Rejection {
                index: batch.positions[0],
                reason: RejectReason::TableGone,
            })));
        };
        let taken = std::mem::take(&mut batch.operations);
        match table.commit_waiting(&batch.partition_key, taken, wait)? {
            Ok(outcome) => Ok(Ok(outcome)),
            Err(given_back) => {
                batch.operations = given_back;
                Ok(Err(commit))
            }
        }
    }
}
