//! Per-partition write locks: one commit at a time per (table, PartitionKey), and reads that never
//! observe half of a commit (a commit writes its rows one by one while it holds the lock). Different
//! partitions never wait for each other.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

type PartitionId = (u64, Vec<u8>);

/// What a holder is doing with its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holding {
    /// Reading, checking preconditions, or writing one row (atomic by itself): point reads go on.
    Checking,
    /// Writing several rows one after another: point reads wait until it is done.
    WritingRows,
}

/// The partitions currently locked.
#[derive(Debug, Default)]
pub(crate) struct PartitionLocks {
    held: Mutex<HashMap<PartitionId, Holding>>,
    released: Condvar,
    /// How many holders are writing rows: while none is, a point read passes without the mutex.
    writing_rows: AtomicUsize,
}

impl PartitionLocks {
    /// Blocks until the partition is free, then holds it until the guard drops.
    pub(crate) fn lock(&self, table_id: u64, partition_key: &[u8]) -> PartitionGuard<'_> {
        let id = (table_id, partition_key.to_vec());
        let mut held = self.wait_for(|held| held.contains_key(&id));
        held.insert(id.clone(), Holding::Checking);
        PartitionGuard { locks: self, id }
    }

    /// Blocks while the partition's holder is writing several rows
    /// ([`PartitionGuard::writing_rows`]): a point read then sees none or all of a commit.
    pub(crate) fn wait_for_writer(&self, table_id: u64, partition_key: &[u8]) {
        // A writer counts itself before its first row, so a reader who has seen one of its rows
        // finds it counted (or done) at its next read.
        if self.writing_rows.load(Ordering::SeqCst) == 0 {
            return;
        }
        let id = (table_id, partition_key.to_vec());
        drop(self.wait_for(|held| held.get(&id) == Some(&Holding::WritingRows)));
    }

    /// Waits while `busy` says so, and returns the held set locked.
    fn wait_for(
        &self,
        busy: impl Fn(&HashMap<PartitionId, Holding>) -> bool,
    ) -> MutexGuard<'_, HashMap<PartitionId, Holding>> {
        let mut held = self.held_set();
        while busy(&held) {
            held = self
                .released
                .wait(held)
                .unwrap_or_else(PoisonError::into_inner);
        }
        held
    }

    fn held_set(&self) -> MutexGuard<'_, HashMap<PartitionId, Holding>> {
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

impl PartitionGuard<'_> {
    /// Says the holder now writes several rows one by one: point reads of the partition wait
    /// until the guard drops.
    pub(crate) fn writing_rows(&self) {
        let mut held = self.locks.held_set();
        if held.insert(self.id.clone(), Holding::WritingRows) != Some(Holding::WritingRows) {
            self.locks.writing_rows.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Drop for PartitionGuard<'_> {
    fn drop(&mut self) {
        let mut held = self.locks.held_set();
        if held.remove(&self.id) == Some(Holding::WritingRows) {
            self.locks.writing_rows.fetch_sub(1, Ordering::SeqCst);
        }
        drop(held);
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
            let guard = locks.lock(1, b"p");
            guard.writing_rows();
            panic!("a handler fails while holding the partition");
        }));
        assert!(panicked.is_err());
        // Neither the partition nor the lock set is left poisoned or held.
        let _again = locks.lock(1, b"p");
        let _other = locks.lock(1, b"q");
        locks.wait_for_writer(1, b"p");
        assert_eq!(locks.writing_rows.load(Ordering::SeqCst), 0);
    }
}
