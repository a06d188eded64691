//! Group commit: one flusher thread flushes everything applied so far, again and again while
//! writes keep arriving, so one `fsync` serves every write that arrived during the previous one.
//! A write is acknowledged once a flush that started after it has finished.
//!
//! Writers get a [`Ticket`] when their batch is applied. They can block until it is durable
//! ([`GroupCommit::wait_durable`]), or register a listener ([`GroupCommit::on_durable`]) that the
//! flusher calls with each new durable ticket, so async callers wait without holding a thread.
//!
//! Readers see a write as soon as sled has applied it, before it is durable; so a read's answer
//! waits for [`GroupCommit::read_fence`], the ticket by which every write it may have seen is
//! durable, lest a crash lose a write someone was shown. A write announces itself before its
//! first change ([`GroupCommit::applying`]), so that the fence covers writes still being applied.
//! A read of known partitions looks only at the writes of their stripes ([`STRIPES`]): a point
//! read waits only when a write of its partition (or one sharing its stripe) is not durable yet.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Writes being applied, without their ticket yet ([`Applying`]).
    applying: u64,
    /// The flusher is waiting on `pending`: only then does a write need to wake it (a wake-up is
    /// a system call, and while a flush runs the flusher looks for new writes by itself).
    flusher_waiting: bool,
    stopping: bool,
}

/// How many stripes partitions are spread over for [`GroupCommit::read_fence`]: two partitions
/// sharing one only make a read of one wait for a write of the other.
const STRIPES: usize = 1024;

/// The writes of the partitions of one stripe.
#[derive(Default)]
struct Stripe {
    /// Writes being applied here, without their ticket yet.
    applying: AtomicU64,
    /// The highest ticket of a write applied here.
    last: AtomicU64,
}

struct Inner {
    db: sled::Db,
    stripes: Box<[Stripe]>,
    /// Spreads partition keys over the stripes (random keys: no client picks the collisions).
    spread: std::collections::hash_map::RandomState,
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

    fn stripe_of(&self, partition_key: &[u8]) -> usize {
        let mut hasher = self.spread.build_hasher();
        hasher.write(partition_key);
        (hasher.finish() % STRIPES as u64) as usize
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
            stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
            spread: Default::default(),
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

    /// Announces a write about to be applied to `partitions` (none for a write outside them, a
    /// catalog or a setting): take it before the write's first change reaches sled, and give it
    /// its ticket once the last has ([`Applying::written`]).
    pub(crate) fn applying<'p>(
        &self,
        partitions: impl IntoIterator<Item = &'p [u8]>,
    ) -> Applying<'_> {
        let mut stripes = Vec::new();
        if self.mode == Durability::Sync {
            stripes.extend(partitions.into_iter().map(|key| self.inner.stripe_of(key)));
            stripes.sort_unstable();
            stripes.dedup();
            for &stripe in &stripes {
                self.inner.stripes[stripe]
                    .applying
                    .fetch_add(1, Ordering::SeqCst);
            }
            self.inner.progress().applying += 1;
        }
        Applying {
            commit: self,
            stripes,
            recorded: false,
        }
    }

    /// The ticket a read that has just read `partitions` (`None`: anything) waits for before it
    /// answers: once it is durable, so is every write the read may have seen. `0` (nothing to
    /// wait for) in periodic mode.
    ///
    /// Over everything: writes with a ticket have one at most `written`; those being applied take
    /// theirs after now, each higher than `written` is now, so the flush that makes `written +
    /// applying` durable starts after this call and covers every write applied before it. Over
    /// partitions: a stripe with no write being applied has had every write the read saw
    /// recorded in its `last` (a write counts itself out only after that).
    pub(crate) fn read_fence(&self, partitions: Option<&[&[u8]]>) -> Ticket {
        if self.mode != Durability::Sync {
            return 0;
        }
        if let Some(partitions) = partitions {
            let mut fence = 0;
            for key in partitions {
                let stripe = &self.inner.stripes[self.inner.stripe_of(key)];
                if stripe.applying.load(Ordering::SeqCst) > 0 {
                    return self.read_fence(None);
                }
                fence = fence.max(stripe.last.load(Ordering::SeqCst));
            }
            return fence;
        }
        let progress = self.inner.progress();
        progress.written + progress.applying
    }

    /// Records an announced write to `stripes` that sled has applied: its ticket, or `None` in
    /// periodic mode.
    fn record_write(&self, stripes: &[usize]) -> Option<Ticket> {
        if self.mode != Durability::Sync {
            return None;
        }
        let ticket = {
            let mut progress = self.inner.progress();
            progress.written += 1;
            progress.applying -= 1;
            if progress.flusher_waiting {
                self.inner.pending.notify_one();
            }
            progress.written
        };
        for &stripe in stripes {
            let stripe = &self.inner.stripes[stripe];
            stripe.last.fetch_max(ticket, Ordering::SeqCst);
            stripe.applying.fetch_sub(1, Ordering::SeqCst);
        }
        Some(ticket)
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

/// A write being applied ([`GroupCommit::applying`]). Dropped without [`Applying::written`]
/// (a write that failed midway, or wrote and took back a change), it takes a ticket all the
/// same: whatever it changed is flushed with the next group.
#[must_use = "a write's ticket says when it is durable"]
pub(crate) struct Applying<'a> {
    commit: &'a GroupCommit,
    /// The stripes of the write's partitions, each once.
    stripes: Vec<usize>,
    recorded: bool,
}

impl Applying<'_> {
    /// The write is applied: its ticket to wait for, or `None` in periodic mode.
    pub(crate) fn written(mut self) -> Option<Ticket> {
        self.recorded = true;
        self.commit.record_write(&self.stripes)
    }

    /// The write is applied: blocks until it is durable.
    pub(crate) fn wait_durable(self) -> Result<(), StorageError> {
        let commit = self.commit;
        match self.written() {
            Some(ticket) => commit.wait_durable(ticket),
            None => Ok(()),
        }
    }
}

impl Drop for Applying<'_> {
    fn drop(&mut self) {
        if !self.recorded {
            self.commit.record_write(&self.stripes);
        }
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
                    let applying = commit.applying([&b"p"[..]]);
                    db.insert([writer.to_be_bytes(), i.to_be_bytes()].concat(), &[])
                        .unwrap();
                    let ticket = applying.written().expect("sync mode hands out tickets");
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

    #[test]
    fn a_read_waits_for_the_writes_it_may_have_seen_even_those_still_being_applied() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let commit = GroupCommit::new(db.clone(), Durability::Sync);
        assert_eq!(
            commit.read_fence(None),
            commit.durable(),
            "nothing to wait for"
        );

        let applied = commit.applying([&b"p1"[..]]);
        db.insert(b"seen", &b"before its ticket"[..]).unwrap();
        let still_applying = commit.applying([]);
        // A read of anything now may have seen both writes: its fence is past every ticket.
        let fence = commit.read_fence(None);
        assert_eq!(fence, 2);
        // A read of p1 may have seen the first, still without its ticket: the same fence.
        assert_eq!(commit.read_fence(Some(&[b"p1"])), fence);
        let first = applied.written().unwrap();
        assert_eq!(
            commit.read_fence(Some(&[b"p1"])),
            first,
            "its ticket, recorded"
        );
        let elsewhere = (0..)
            .map(|n: u32| format!("q{n}").into_bytes())
            .find(|key| commit.inner.stripe_of(key) != commit.inner.stripe_of(b"p1"))
            .unwrap();
        assert_eq!(commit.read_fence(Some(&[&elsewhere])), 0, "no write there");
        drop(still_applying); // a write that failed midway takes a ticket all the same
        assert!(first <= fence);
        commit.wait_durable(fence).unwrap();
        assert_eq!(commit.read_fence(None), fence, "every write is durable");

        let periodic = GroupCommit::new(db, Durability::Periodic { flush_every_ms: 10 });
        let applying = periodic.applying([&b"p1"[..]]);
        assert_eq!(
            periodic.read_fence(None),
            0,
            "periodic mode shows writes at once"
        );
        assert_eq!(applying.written(), None);
    }
}
