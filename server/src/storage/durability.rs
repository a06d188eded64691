//! Group commit: a write is acknowledged once a flush that started after it finishes, and one
//! flush serves every write that arrived while the previous flush ran.

use std::sync::{Condvar, Mutex, PoisonError};

use super::StorageError;

/// When writes become durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Acknowledge a write only after it is flushed to disk (the default).
    Sync,
    /// Acknowledge at once and flush every `flush_every_ms` milliseconds: a crash loses at most
    /// that window of acknowledged writes.
    Periodic {
        /// The flush interval.
        flush_every_ms: u64,
    },
}

#[derive(Debug, Default)]
struct Progress {
    /// Writes applied so far (tickets handed out).
    written: u64,
    /// Every write with a ticket at or below this is on disk.
    durable: u64,
    /// A flush is running.
    flushing: bool,
}

/// Coordinates flushes between concurrent writers.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    db: sled::Db,
    mode: Durability,
    progress: Mutex<Progress>,
    flushed: Condvar,
}

impl GroupCommit {
    pub(crate) fn new(db: sled::Db, mode: Durability) -> GroupCommit {
        GroupCommit {
            db,
            mode,
            progress: Mutex::default(),
            flushed: Condvar::new(),
        }
    }

    /// Records a write that sled has applied; returns the ticket to wait for.
    pub(crate) fn record_write(&self) -> u64 {
        let mut progress = self.progress();
        progress.written += 1;
        progress.written
    }

    /// Blocks until the write with `ticket` is on disk (at once in periodic mode).
    ///
    /// The first waiter to find no flush running becomes the leader: it flushes everything written
    /// so far while the others wait, and a failed flush leaves the next waiter to try again.
    pub(crate) fn wait_durable(&self, ticket: u64) -> Result<(), StorageError> {
        if let Durability::Periodic { .. } = self.mode {
            return Ok(());
        }
        let mut progress = self.progress();
        loop {
            if progress.durable >= ticket {
                return Ok(());
            }
            if progress.flushing {
                progress = self
                    .flushed
                    .wait(progress)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            progress.flushing = true;
            let target = progress.written;
            drop(progress);
            let flushed = self.db.flush();
            progress = self.progress();
            progress.flushing = false;
            if flushed.is_ok() {
                progress.durable = progress.durable.max(target);
            }
            self.flushed.notify_all();
            flushed?;
        }
    }

    fn progress(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
