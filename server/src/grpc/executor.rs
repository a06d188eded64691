//! How a request's storage work runs: one executor with three modes and one way to finish.
//!
//! - **Short** (a point read, a write, a transaction of at most 100 operations on one
//!   partition): on the calling runtime worker when the store is local and the work need not wait
//!   for a lock, sparing two thread hand-offs that cost more than the work; when it would wait (a
//!   commit or scan holds the partition), or the store is remote, it is handed to the blocking
//!   pool instead. A runtime worker is never parked behind a lock.
//! - **Blocking** (queries, counts, table creation and deletion, which may take long or wait for
//!   a flush): on the blocking pool; the task runs to completion even if the client goes away.
//! - **Streaming** (`ScanEntities`): one chunk at a time on the blocking pool, the reader awaited
//!   without a thread in between ([`super::stream`]).
//!
//! Every mode finishes the same way ([`finish`]): a failure is logged once (faults as errors,
//! refusals of bad input at debug level) and mapped to its status; a panic is an `InternalError`
//! that takes nothing else down.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use tonic::Status;

use super::status;
use super::stream::{ChunkFuture, STREAM_BATCH_BYTES};
use super::wire::EntityEncoder;
use crate::engine::{Engine, MatchSink, ScanCursor};
use crate::error::{ErrorCode, TableError};
use crate::storage::{Attempt, Waiting};

/// Runs storage work for the service.
#[derive(Debug, Clone)]
pub(crate) struct Executor {
    engine: Arc<Engine>,
}

impl Executor {
    /// An executor over `engine`.
    pub(crate) fn new(engine: Arc<Engine>) -> Executor {
        Executor { engine }
    }

    /// Short mode: `op` on `input`, first inline and not allowed to wait (if the store is
    /// local), then on the blocking pool with the input it gave back, if it would have waited.
    pub(crate) async fn short<T, I, F>(&self, input: I, op: F) -> Result<T, Status>
    where
        T: Send + 'static,
        I: Send + 'static,
        F: Fn(&Engine, I, Waiting) -> Result<Attempt<T, I>, TableError> + Send + 'static,
    {
        let input = if self.engine.calls_are_local() {
            let inline = std::panic::catch_unwind(AssertUnwindSafe(|| {
                op(&self.engine, input, Waiting::NotAllowed)
            }));
            match finish(inline.map_err(drop))? {
                Attempt::Done(value) => return Ok(value),
                Attempt::WouldWait(input) => input,
            }
        } else {
            input
        };
        self.blocking(move |engine| op(engine, input, Waiting::Allowed).map(Attempt::ran))
            .await
    }

    /// Blocking mode: `op` on the blocking pool.
    pub(crate) async fn blocking<T, F>(&self, op: F) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnOnce(&Engine) -> Result<T, TableError> + Send + 'static,
    {
        let engine = self.engine.clone();
        let outcome = tokio::task::spawn_blocking(move || op(&engine)).await;
        finish(outcome.map_err(drop))
    }

    /// Streaming mode: what reads a stream's next chunk (on the blocking pool, finished as any
    /// other work).
    pub(crate) fn chunk_reader(
        &self,
    ) -> impl Fn(ScanCursor, EntityEncoder) -> ChunkFuture + Send + 'static {
        let executor = self.clone();
        move |mut cursor: ScanCursor, mut encoder: EntityEncoder| {
            let executor = executor.clone();
            Box::pin(async move {
                executor
                    .blocking(move |_| {
                        let more = cursor
                            .read_chunk(STREAM_BATCH_BYTES, &mut |entity| encoder.take(entity))?;
                        Ok((cursor, encoder, more))
                    })
                    .await
            }) as ChunkFuture
        }
    }
}

/// The one way work finishes: its value, or its failure logged once and mapped to a status
/// (`outcome` is `Err` if the work panicked).
fn finish<T>(outcome: Result<Result<T, TableError>, ()>) -> Result<T, Status> {
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => {
            if error.code() == ErrorCode::InternalError {
                tracing::error!(%error, "request failed");
            } else {
                tracing::debug!(%error, reason = error.code().as_str(), "request refused");
            }
            Err(status::to_status(&error))
        }
        Err(()) => {
            tracing::error!("a request panicked");
            Err(status::internal())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StoreOptions;

    #[tokio::test]
    async fn a_panic_in_any_mode_is_an_internal_error_and_the_service_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(Engine::open(dir.path(), StoreOptions::default()).unwrap());
        let executor = Executor::new(engine);
        let failed = executor
            .blocking(|_| -> Result<(), TableError> { panic!("a bug in a handler") })
            .await
            .unwrap_err();
        assert_eq!(failed.code(), tonic::Code::Internal);
        assert!(!failed.message().contains("a bug"), "panic text leaked");
        let failed_short = executor
            .short((), |_, (), _| -> Result<Attempt<(), ()>, TableError> {
                panic!("a bug in a short handler")
            })
            .await
            .unwrap_err();
        assert_eq!(failed_short.code(), tonic::Code::Internal);
        let created = executor
            .blocking(|engine| engine.create_table("After"))
            .await;
        assert!(created.is_ok());
    }

    #[tokio::test]
    async fn short_work_that_would_wait_is_handed_to_the_blocking_pool() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(Engine::open(dir.path(), StoreOptions::default()).unwrap());
        let executor = Executor::new(engine);
        let modes = std::sync::Mutex::new(Vec::new());
        let modes = Arc::new(modes);
        let seen = modes.clone();
        let value = executor
            .short(7, move |_, input, waiting| {
                seen.lock().unwrap().push(waiting);
                Ok(match waiting {
                    Waiting::NotAllowed => Attempt::WouldWait(input),
                    Waiting::Allowed => Attempt::Done(input * 6),
                })
            })
            .await
            .unwrap();
        assert_eq!(value, 42);
        assert_eq!(
            *modes.lock().unwrap(),
            [Waiting::NotAllowed, Waiting::Allowed]
        );
    }
}
