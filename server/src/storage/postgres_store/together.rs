//! Calls of one kind that wait for the database go to it together: much of what a small call
//! costs the database is the call's own (a statement's round, a transaction's commit), so while
//! calls of a kind are on their way the next ones wait, and go in one call of the kind's, each
//! with its own answer. With none on its way a call goes at once; at most the kind's
//! [`Together::IN_FLIGHT`] are on their way at a time, each taking the waiting ones that fit
//! together (at most [`Together::MOST`]). A call runs in a task of its own, so the callers sent
//! with one whose caller gave up still get their answers. Each goes after it was asked, so it
//! sees every write acknowledged before its caller asked.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::FutureExt;
use tokio::sync::oneshot;

use super::awaited_pool::AwaitedPool;
use crate::storage::{Fault, StorageError};

/// A kind of call that goes to the database together with others of its kind.
pub(super) trait Together: Send + Sync + 'static {
    /// What one caller asks.
    type Job: Send + 'static;
    /// What it is answered.
    type Answer: Send + 'static;
    /// How many calls may be on their way at once.
    const IN_FLIGHT: usize;
    /// The most jobs one call carries.
    const MOST: usize;
    /// Whether `job` may go in one call with the jobs `taken` so far (at least one).
    fn fits(&self, taken: &[Self::Job], job: &Self::Job) -> bool;
    /// Sends `jobs` in one call: each one's answer, in their order.
    fn send(
        &self,
        pool: &AwaitedPool,
        jobs: Vec<Self::Job>,
    ) -> impl Future<Output = Vec<Self::Answer>> + Send;
}

/// The calls of one kind waiting, and how many are on their way.
pub(super) struct Waiting<T: Together> {
    kind: Arc<T>,
    queue: Arc<Mutex<Queue<T>>>,
}

struct Queue<T: Together> {
    in_flight: usize,
    waiting: VecDeque<(T::Job, oneshot::Sender<T::Answer>)>,
}

impl<T: Together> Waiting<T> {
    /// None waiting yet, of the kind `kind`.
    pub(super) fn new(kind: T) -> Waiting<T> {
        Waiting {
            kind: Arc::new(kind),
            queue: Arc::new(Mutex::new(Queue {
                in_flight: 0,
                waiting: VecDeque::new(),
            })),
        }
    }

    /// Sends `job` with the others waiting, over `pool`: its answer.
    pub(super) async fn send(
        &self,
        pool: &Arc<AwaitedPool>,
        job: T::Job,
    ) -> Result<T::Answer, StorageError> {
        let (answer, answered) = oneshot::channel();
        let start = {
            let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            queue.waiting.push_back((job, answer));
            let start = queue.in_flight < T::IN_FLIGHT;
            queue.in_flight += usize::from(start);
            start
        };
        if start {
            let (kind, queue) = (self.kind.clone(), self.queue.clone());
            tokio::spawn(send_waiting(kind, queue, pool.clone()));
        }
        answered
            .await
            .map_err(|_| SharedFault::lost("the call ended without an answer").error())
    }
}

impl<T: Together> std::fmt::Debug for Waiting<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Waiting")
    }
}

/// Sends the jobs waiting in `queue`, a call at a time, until none is left.
async fn send_waiting<T: Together>(
    kind: Arc<T>,
    queue: Arc<Mutex<Queue<T>>>,
    pool: Arc<AwaitedPool>,
) {
    loop {
        let (jobs, answers) = {
            let mut queue = queue.lock().unwrap_or_else(PoisonError::into_inner);
            let taken = take(&*kind, &mut queue.waiting);
            if taken.0.is_empty() {
                queue.in_flight -= 1;
                return;
            }
            taken
        };
        // A call that panics answers none of its jobs (their callers are told so), and the
        // task goes on with the others.
        let Ok(answered) = AssertUnwindSafe(kind.send(&pool, jobs))
            .catch_unwind()
            .await
        else {
            continue;
        };
        for (answer, to) in answered.into_iter().zip(answers) {
            let _ = to.send(answer);
        }
    }
}

/// The first waiting jobs that fit in one call, with where their answers go; the others keep
/// their places.
#[allow(clippy::type_complexity)]
fn take<T: Together>(
    kind: &T,
    waiting: &mut VecDeque<(T::Job, oneshot::Sender<T::Answer>)>,
) -> (Vec<T::Job>, Vec<oneshot::Sender<T::Answer>>) {
    let (mut jobs, mut answers) = (Vec::new(), Vec::new());
    let mut left = VecDeque::new();
    for (job, answer) in waiting.drain(..) {
        if jobs.is_empty() || (jobs.len() < T::MOST && kind.fits(&jobs, &job)) {
            jobs.push(job);
            answers.push(answer);
        } else {
            left.push_back((job, answer));
        }
    }
    *waiting = left;
    (jobs, answers)
}

/// A fault of a call, told to each job it carried.
pub(super) struct SharedFault {
    fault: Fault,
    text: String,
}

impl SharedFault {
    /// `error`, to tell each job.
    pub(super) fn of(error: &StorageError) -> SharedFault {
        let fault = match error {
            StorageError::Backend { fault, .. } => *fault,
            _ if error.is_disk_full() => Fault::DiskFull,
            _ => Fault::Failed,
        };
        SharedFault {
            fault,
            text: error.to_string(),
        }
    }

    fn lost(text: &str) -> SharedFault {
        SharedFault {
            fault: Fault::Failed,
            text: text.to_owned(),
        }
    }

    /// The fault, for one job.
    pub(super) fn error(&self) -> StorageError {
        StorageError::backend(self.fault, Told(self.text.clone()))
    }
}

/// A fault told to every job of a call.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Told(String);
