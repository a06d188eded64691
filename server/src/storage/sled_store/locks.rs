//! Per-partition locks: one commit at a time per (table, PartitionKey), scans that read a partition
//! together but never while a commit holds it, and point reads that never observe half of a commit
//! (a commit writes its rows one by one while it holds the lock). Different partitions never wait
//! for each other.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

type PartitionId = (u64, Vec<u8>);

/// What the commit holding a partition is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holding {
    /// Reading, checking preconditions, or writing one row (atomic by itself): point reads go on.
    Checking,
    /// Writing several rows one after another: point reads wait until it is done.
    WritingRows,
}

/// Who holds one partition, and who waits for it.
#[derive(Debug, Default)]
struct PartitionState {
    /// The commit holding the partition, if any: then no scan does.
    commit: Option<Holding>,
    /// How many scans are reading the partition: then no commit holds it.
    scans: usize,
    /// Commits waiting for the partition. Scans arriving meanwhile wait behind them, so that scans
    /// following one another never starve a commit.
    commits_waiting: usize,
    /// Everyone waiting for the partition (commits, scans, point reads), and the condition they
    /// wait on: a release wakes only the waiters of its own partition.
    waiters: usize,
    released: Arc<Condvar>,
}

impl PartitionState {
    fn free_for_commit(&self) -> bool {
        self.commit.is_none() && self.scans == 0
    }

    fn free_for_scan(&self) -> bool {
        self.commit.is_none() && self.commits_waiting == 0
    }

    fn unused(&self) -> bool {
        self.free_for_commit() && self.commits_waiting == 0 && self.waiters == 0
    }
}

/// Which side of a partition's lock a guard holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Commit,
    Scan,
}

/// The partitions currently locked or waited for.
#[derive(Debug, Default)]
pub(crate) struct PartitionLocks {
    held: Mutex<HashMap<PartitionId, PartitionState>>,
    /// How many commits are writing rows: while none is, a point read passes without the mutex.
    writing_rows: AtomicUsize,
}

impl PartitionLocks {
    /// Blocks until no commit and no scan holds the partition, then holds it alone (for a commit)
    /// until the guard drops.
    pub(crate) fn lock(&self, table_id: u64, partition_key: &[u8]) -> PartitionGuard<'_> {
        let id = (table_id, partition_key.to_vec());
        let mut held = self.held_set();
        let state = held.entry(id.clone()).or_default();
        if state.free_for_commit() {
            state.commit = Some(Holding::Checking);
        } else {
            state.commits_waiting += 1;
            held = self.wait_while(held, &id, |state| !state.free_for_commit());
            let state = held
                .get_mut(&id)
                .expect("a waited-for partition stays listed");
            state.commits_waiting -= 1;
            state.commit = Some(Holding::Checking);
        }
        PartitionGuard {
            locks: self,
            id,
            side: Side::Commit,
        }
    }

    /// Holds the partition alone (for a commit) if no commit and no scan holds it now; `None`
    /// otherwise, without waiting.
    pub(crate) fn try_lock(
        &self,
        table_id: u64,
        partition_key: &[u8],
    ) -> Option<PartitionGuard<'_>> {
        let id = (table_id, partition_key.to_vec());
        let mut held = self.held_set();
        let state = held.entry(id.clone()).or_default();
        if !state.free_for_commit() {
            return None;
        }
        state.commit = Some(Holding::Checking);
        Some(PartitionGuard {
            locks: self,
            id,
            side: Side::Commit,
        })
    }

    /// Blocks while a commit holds the partition or waits for it, then holds it for reading, beside
    /// any other scans, until the guard drops: no commit changes it meanwhile.
    pub(crate) fn lock_for_scan(&self, table_id: u64, partition_key: &[u8]) -> PartitionGuard<'_> {
        self.scan_lock(table_id, partition_key, true)
            .expect("a scan allowed to wait gets the partition")
    }

    /// Holds the partition for reading, as [`PartitionLocks::lock_for_scan`], if no commit holds
    /// or waits for it now; `None` otherwise, without waiting.
    pub(crate) fn try_lock_for_scan(
        &self,
        table_id: u64,
        partition_key: &[u8],
    ) -> Option<PartitionGuard<'_>> {
        self.scan_lock(table_id, partition_key, false)
    }

    fn scan_lock(
        &self,
        table_id: u64,
        partition_key: &[u8],
        wait: bool,
    ) -> Option<PartitionGuard<'_>> {
        let id = (table_id, partition_key.to_vec());
        let mut held = self.held_set();
        if held.get(&id).is_some_and(|state| !state.free_for_scan()) {
            if !wait {
                return None;
            }
            held = self.wait_while(held, &id, |state| !state.free_for_scan());
        }
        held.entry(id.clone()).or_default().scans += 1;
        Some(PartitionGuard {
            locks: self,
            id,
            side: Side::Scan,
        })
    }

    /// Blocks while the partition's commit is writing several rows
    /// ([`PartitionGuard::writing_rows`]): a point read then sees none or all of a commit.
    pub(crate) fn wait_for_writer(&self, table_id: u64, partition_key: &[u8]) {
        // A writer counts itself before its first row, so a reader who has seen one of its rows
        // finds it counted (or done) at its next read.
        if self.writing_rows.load(Ordering::SeqCst) == 0 {
            return;
        }
        let id = (table_id, partition_key.to_vec());
        let held = self.held_set();
        let writing = |state: &PartitionState| state.commit == Some(Holding::WritingRows);
        if held.get(&id).is_some_and(writing) {
            drop(self.wait_while(held, &id, writing));
        }
    }

    /// Whether a point read of the partition would wait now ([`PartitionLocks::wait_for_writer`]).
    pub(crate) fn writer_busy(&self, table_id: u64, partition_key: &[u8]) -> bool {
        if self.writing_rows.load(Ordering::SeqCst) == 0 {
            return false;
        }
        let id = (table_id, partition_key.to_vec());
        self.held_set()
            .get(&id)
            .is_some_and(|state| state.commit == Some(Holding::WritingRows))
    }

    /// Waits while `busy` says so of partition `id`'s state, woken only by releases of that
    /// partition, and returns the held set locked.
    fn wait_while<'a>(
        &'a self,
        mut held: MutexGuard<'a, HashMap<PartitionId, PartitionState>>,
        id: &PartitionId,
        busy: impl Fn(&PartitionState) -> bool,
    ) -> MutexGuard<'a, HashMap<PartitionId, PartitionState>> {
        let state = held.entry(id.clone()).or_default();
        state.waiters += 1;
        let released = state.released.clone();
        while held.get(id).is_some_and(&busy) {
            held = released.wait(held).unwrap_or_else(PoisonError::into_inner);
        }
        let state = held
            .get_mut(id)
            .expect("a waiter keeps its partition listed");
        state.waiters -= 1;
        if state.unused() {
            held.remove(id);
        }
        held
    }

    fn held_set(&self) -> MutexGuard<'_, HashMap<PartitionId, PartitionState>> {
        // The set stays consistent even if a holder panicked: guards remove themselves on unwind.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Holds one partition's lock: alone for a commit ([`PartitionLocks::lock`]) or beside other scans
/// ([`PartitionLocks::lock_for_scan`]).
#[derive(Debug)]
pub(crate) struct PartitionGuard<'a> {
    locks: &'a PartitionLocks,
    id: PartitionId,
    side: Side,
}

impl PartitionGuard<'_> {
    /// Says the commit now writes several rows one by one: point reads of the partition wait
    /// until the guard drops.
    pub(crate) fn writing_rows(&self) {
        assert_eq!(self.side, Side::Commit, "only a commit writes rows");
        let mut held = self.locks.held_set();
        let state = held.get_mut(&self.id).expect("a held partition is listed");
        if state.commit.replace(Holding::WritingRows) != Some(Holding::WritingRows) {
            self.locks.writing_rows.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Drop for PartitionGuard<'_> {
    fn drop(&mut self) {
        let mut held = self.locks.held_set();
        let Some(state) = held.get_mut(&self.id) else {
            return;
        };
        let freed = match self.side {
            Side::Commit => {
                if state.commit.take() == Some(Holding::WritingRows) {
                    self.locks.writing_rows.fetch_sub(1, Ordering::SeqCst);
                }
                true
            }
            Side::Scan => {
                state.scans -= 1;
                state.scans == 0
            }
        };
        // Only the last scan leaving frees the partition for anyone waiting.
        let wake = (freed && state.waiters > 0).then(|| state.released.clone());
        if state.unused() {
            held.remove(&self.id);
        }
        drop(held);
        if let Some(released) = wake {
            released.notify_all();
        }
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

    /// Runs `f` on a thread of its own; its result arrives on the returned channel.
    fn on_thread<T: Send + 'static>(
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::sync::mpsc::Receiver<T> {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || sender.send(f()));
        receiver
    }

    /// Waits until a commit is queued for partition `p` of table 1.
    fn until_a_commit_waits(locks: &PartitionLocks) {
        let id = (1, b"p".to_vec());
        while locks.held_set().get(&id).map_or(0, |s| s.commits_waiting) == 0 {
            std::thread::yield_now();
        }
    }

    const PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

    #[test]
    fn scans_read_a_partition_together_and_a_commit_waits_for_them_all() {
        let locks: &'static PartitionLocks = Box::leak(Box::default());
        let first = locks.lock_for_scan(1, b"p");
        // A second scan of the same partition gets in while the first still reads it.
        let second = on_thread(|| drop(locks.lock_for_scan(1, b"p")));
        second.recv_timeout(PATIENCE).expect("a second scan got in");
        let also_reading = locks.lock_for_scan(1, b"p");

        let commit = on_thread(|| drop(locks.lock(1, b"p")));
        until_a_commit_waits(locks);
        drop(first);
        assert!(commit.try_recv().is_err(), "a commit got in beside a scan");
        drop(also_reading);
        commit.recv_timeout(PATIENCE).expect("the commit got in");
        assert!(locks.held_set().is_empty(), "nothing is left listed");
    }

    #[test]
    fn a_waiting_commit_goes_before_scans_that_arrive_after_it() {
        let locks: &'static PartitionLocks = Box::leak(Box::default());
        let order: &'static Mutex<Vec<&str>> = Box::leak(Box::default());
        let scan = locks.lock_for_scan(1, b"p");
        let commit = on_thread(|| {
            let _partition = locks.lock(1, b"p");
            order.lock().unwrap().push("commit");
        });
        until_a_commit_waits(locks);
        let later_scan = on_thread(|| {
            let _partition = locks.lock_for_scan(1, b"p");
            order.lock().unwrap().push("later scan");
        });
        // Time for the later scan to reach the lock: it must queue behind the commit.
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(scan);
        commit.recv_timeout(PATIENCE).expect("the commit got in");
        later_scan
            .recv_timeout(PATIENCE)
            .expect("the later scan got in");
        assert_eq!(*order.lock().unwrap(), ["commit", "later scan"]);
    }

    #[test]
    fn point_reads_wait_only_for_a_commit_writing_rows() {
        let locks: &'static PartitionLocks = Box::leak(Box::default());
        let scan = locks.lock_for_scan(1, b"p");
        locks.wait_for_writer(1, b"p");
        drop(scan);
        let commit = locks.lock(1, b"p");
        locks.wait_for_writer(1, b"p");
        commit.writing_rows();
        let read = on_thread(|| locks.wait_for_writer(1, b"p"));
        assert!(read
            .recv_timeout(std::time::Duration::from_millis(50))
            .is_err());
        drop(commit);
        read.recv_timeout(PATIENCE).expect("the read went on");
    }
}
