//! Per-partition write locks: one commit at a time per (table, PartitionKey), and reads that never
//! observe half of a commit (a commit writes its rows one by one while it holds the lock). Different
//! partitions never wait for each other.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

type PartitionId = (u64, Vec<u8>);

/// Whether point reads of a locked partition wait until its holder is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PointReads {
    /// The holder writes at most one row (atomic by itself) or only reads.
    Proceed,
    /// The holder writes several rows one after another.
    Wait,
}

/// The partitions currently locked.
#[derive(Debug, Default)]
pub(crate) struct PartitionLocks {
    held: Mutex<HashMap<PartitionId, PointReads>>,
    released: Condvar,
}

impl PartitionLocks {
    /// Blocks until the partition is free, then holds it until the guard drops.
    pub(crate) fn lock(
        &self,
        table_id: u64,
        partition_key: &[u8],
        point_reads: PointReads,
    ) -> PartitionGuard<'_> {
        let id = (table_id, partition_key.to_vec());
        let mut held = self.wait_for(|held| held.contains_key(&id));
        held.insert(id.clone(), point_reads);
        PartitionGuard { locks: self, id }
    }

    /// Blocks while a holder that writes several rows has the partition: a point read then sees
    /// none or all of a commit.
    pub(crate) fn wait_for_writer(&self, table_id: u64, partition_key: &[u8]) {
        let id = (table_id, partition_key.to_vec());
        drop(self.wait_for(|held| held.get(&id) == Some(&PointReads::Wait)));
    }

    /// Waits while `busy` says so, and returns the held set locked.
    fn wait_for(
        &self,
        busy: impl Fn(&HashMap<PartitionId, PointReads>) -> bool,
    ) -> MutexGuard<'_, HashMap<PartitionId, PointReads>> {
        let mut held = self.held_set();
        while busy(&held) {
            held = self
                .released
                .wait(held)
                .unwrap_or_else(PoisonError::into_inner);
        }
        held
    }

    fn held_set(&self) -> MutexGuard<'_, HashMap<PartitionId, PointReads>> {
        // The set stays consistent even if a holder panicked: guards remove themselves on unwind.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Holds one partition's lock.
#[derive(Debug)]
pub(crate) struct PartitionGuard<'a> {
    locks: &'a PartitionLocks,
    id: PartitionId,
}

impl Drop for PartitionGuard<'_> {
    fn drop(&mut self) {
        self.locks.held_set().remove(&self.id);
        self.locks.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_that_panics_releases_the_partition() {
        let locks = PartitionLocks::default();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _guard = locks.lock(1, b"p", PointReads::Wait);
            panic!("a handler fails while holding the partition");
        }));
        assert!(panicked.is_err());
        // Neither the partition nor the lock set is left poisoned or held.
        let _again = locks.lock(1, b"p", PointReads::Proceed);
        let _other = locks.lock(1, b"q", PointReads::Proceed);
        locks.wait_for_writer(1, b"p");
    }
}
