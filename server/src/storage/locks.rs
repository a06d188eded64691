//! Per-partition write locks: one commit at a time per (table, PartitionKey), and partition scans
//! that never observe half of a commit. Different partitions never wait for each other.

use std::collections::HashSet;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

type PartitionId = (u64, Vec<u8>);

/// The set of partitions currently locked.
#[derive(Debug, Default)]
pub(crate) struct PartitionLocks {
    held: Mutex<HashSet<PartitionId>>,
    released: Condvar,
}

impl PartitionLocks {
    /// Blocks until the partition is free, then holds it until the guard drops.
    pub(crate) fn lock(&self, table_id: u64, partition_key: &[u8]) -> PartitionGuard<'_> {
        let id = (table_id, partition_key.to_vec());
        let mut held = self.held_set();
        while held.contains(&id) {
            held = self
                .released
                .wait(held)
                .unwrap_or_else(PoisonError::into_inner);
        }
        held.insert(id.clone());
        PartitionGuard { locks: self, id }
    }

    fn held_set(&self) -> MutexGuard<'_, HashSet<PartitionId>> {
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
            let _guard = locks.lock(1, b"p");
            panic!("a handler fails while holding the partition");
        }));
        assert!(panicked.is_err());
        // Neither the partition nor the lock set is left poisoned or held.
        let _again = locks.lock(1, b"p");
        let _other = locks.lock(1, b"q");
    }
}
