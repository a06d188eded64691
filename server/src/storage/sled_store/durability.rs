//! Group commit: one flusher thread flushes everything applied so far, again and again while
//! writes keep arriving, so one `fsync` serves every write that arrived during the previous one.
//! A write is acknowledged once a flush that started after it has finished.
//!
//! Writers get a [`Ticket`] when their batch is applied. They can block until it is durable
//! ([`GroupCommit::wait_durable`]), or register a listener ([`GroupCommit::on_durable`]) that the
//! flusher calls with each new durable ticket, so async callers wait without holding a thread.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{DurableListener, StorageError, Ticket};

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

#[derive(Default)]
struct Progress {
    /// Tickets handed out so far.
    written: Ticket,
    /// Every ticket at or below this is on disk.
    durable: Ticket,
    /// The flusher is waiting on `pending`: only then does a write need to wake it (a wake-up is
    /// a system call, and while a flush runs the flusher looks for new writes by itself).
    flusher_waiting: bool,
    stopping: bool,
}

struct Inner {
    db: sled::Db,
    progress: Mutex<Progress>,
    /// Signalled when there is something to flush (or the store stops).
    pending: Condvar,
    /// Signalled after each flush.
    flushed: Condvar,
    listener: Mutex<Option<DurableListener>>,
}

/// Coordinates flushes between concurrent writers.
pub(crate) struct GroupCommit {
    inner: Arc<Inner>,
    mode: Durability,
    flusher: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn progress(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The flusher's loop: flush whatever was applied, publish it, repeat until stopped.
    fn run_flusher(&self) {
        let mut progress = self.progress();
        loop {
            while progress.written == progress.durable && !progress.stopping {
                progress.flusher_waiting = true;
                progress = self
                    .pending
                    .wait(progress)
                    .unwrap_or_else(PoisonError::into_inner);
                progress.flusher_waiting = false;
            }
            if progress.written == progress.durable {
                return;
            }
            let target = progress.written;
            let group = target - progress.durable;
            drop(progress);
            let started = std::time::Instant::now();
            if let Err(error) = self.db.flush() {
                // Nothing is acknowledged until a flush succeeds; keep trying.
                tracing::error!(%error, "flush failed; retrying");
                std::thread::sleep(Duration::from_millis(100));
                progress = self.progress();
                continue;
            }
            crate::telemetry::flushed(group, started.elapsed());
            progress = self.progress();
            progress.durable = target;
            self.flushed.notify_all();
            if let Some(listener) = &*self.listener.lock().unwrap_or_else(PoisonError::into_inner) {
                listener(target);
            }
        }
    }
}

impl GroupCommit {
    pub(crate) fn new(db: sled::Db, mode: Durability) -> GroupCommit {
        let inner = Arc::new(Inner {
            db,
            progress: Mutex::default(),
            pending: Condvar::new(),
            flushed: Condvar::new(),
            listener: Mutex::new(None),
        });
        let flusher = (mode == Durability::Sync).then(|| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("trestle-flush".into())
                .spawn(move || inner.run_flusher())
                .expect("spawning the flusher thread")
        });
        GroupCommit {
            inner,
            mode,
            flusher,
        }
    }

    /// Records a write that sled has applied; returns the ticket to wait for, or `None` in
    /// periodic mode, where writes are acknowledged at once.
    pub(crate) fn record_write(&self) -> Option<Ticket> {
        if self.mode != Durability::Sync {
            return None;
        }
        let mut progress = self.inner.progress();
        progress.written += 1;
        if progress.flusher_waiting {
            self.inner.pending.notify_one();
        }
        Some(progress.written)
    }

    /// The highest durable ticket.
    pub(crate) fn durable(&self) -> Ticket {
        self.inner.progress().durable
    }

    /// Blocks until `ticket` is durable.
    pub(crate) fn wait_durable(&self, ticket: Ticket) -> Result<(), StorageError> {
        let mut progress = self.inner.progress();
        while progress.durable < ticket {
            progress = self
                .inner
                .flushed
                .wait(progress)
                .unwrap_or_else(PoisonError::into_inner);
        }
        Ok(())
    }

    /// Registers the listener the flusher calls after each flush (replacing any earlier one).
    pub(crate) fn on_durable(&self, listener: DurableListener) {
        *self
            .inner
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(listener);
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.inner.progress().stopping = true;
        self.inner.pending.notify_one();
        if let Some(flusher) = self.flusher.take() {
            // The flusher finishes the last flush, then exits.
            let _ = flusher.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_write_becomes_durable_however_writers_and_flushes_interleave() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let commit = Arc::new(GroupCommit::new(db.clone(), Durability::Sync));
        let (done, finished) = std::sync::mpsc::channel();
        for writer in 0..8u32 {
            let (commit, db, done) = (commit.clone(), db.clone(), done.clone());
            std::thread::spawn(move || {
                for i in 0..200u32 {
                    db.insert([writer.to_be_bytes(), i.to_be_bytes()].concat(), &[])
                        .unwrap();
                    let ticket = commit.record_write().expect("sync mode hands out tickets");
                    commit.wait_durable(ticket).unwrap();
                    assert!(commit.durable() >= ticket);
                }
                done.send(()).unwrap();
            });
        }
        for _ in 0..8 {
            // A write whose wake-up the flusher missed would wait forever: fail instead.
            finished
                .recv_timeout(Duration::from_secs(30))
                .expect("every writer's writes became durable");
        }
        assert_eq!(commit.durable(), 8 * 200);
    }
}
