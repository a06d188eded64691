//! The executor as the gRPC service uses it: the protocol-neutral [`crate::executor`] with each
//! failure mapped to its status, and the streaming mode ([`Executor::chunk_reader`]): one chunk
//! of a `ScanEntities` stream at a time on the blocking pool, the reader awaited without a thread
//! in between ([`super::stream`]).

use std::future::Future;
use std::sync::Arc;

use tonic::Status;

use super::status;
use super::stream::{ChunkFuture, STREAM_BATCH_BYTES};
use super::wire::EntityEncoder;
use crate::engine::{Attempt, Waiting};
use crate::engine::{Engine, MatchSink, Pending, ScanCursor};
use crate::error::TableError;
use crate::executor::{self, WorkError};

/// Runs storage work for the service.
#[derive(Debug, Clone)]
pub(crate) struct Executor(executor::Executor);

impl Executor {
    /// The service's view of the shared executor.
    pub(crate) fn new(shared: executor::Executor) -> Executor {
        Executor(shared)
    }

    /// A request's in-flight permit ([`executor::Executor::admit`]), or `ServerBusy`.
    pub(crate) fn admit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Status> {
        self.0.admit().map_err(to_status)
    }

    /// Short mode ([`executor::Executor::short`]).
    pub(crate) async fn short<T, I, F>(&self, input: I, op: F) -> Result<T, Status>
    where
        T: Send + 'static,
        I: Send + 'static,
        F: Fn(&Engine, I, Waiting) -> Result<Attempt<T, I>, TableError> + Send + 'static,
    {
        self.0.short(input, op).await.map_err(to_status)
    }

    /// Short mode, awaited first where the store serves the call so
    /// ([`executor::Executor::awaited_or_short`]).
    pub(crate) async fn awaited_or_short<T, I, A, Fut, F>(
        &self,
        input: I,
        awaited: A,
        op: F,
    ) -> Result<T, Status>
    where
        T: Send + 'static,
        I: Send + 'static,
        A: FnOnce(Arc<Engine>, I) -> Fut,
        Fut: Future<Output = Result<Attempt<T, I>, TableError>>,
        F: Fn(&Engine, I, Waiting) -> Result<Attempt<T, I>, TableError> + Send + 'static,
    {
        self.0
            .awaited_or_short(input, awaited, op)
            .await
            .map_err(to_status)
    }

    /// Blocking mode ([`executor::Executor::blocking`]).
    pub(crate) async fn blocking<T, F>(&self, op: F) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnOnce(&Engine) -> Result<T, TableError> + Send + 'static,
    {
        self.0.blocking(op).await.map_err(to_status)
    }

    /// The value of `pending` once durable ([`executor::Executor::durable`]).
    pub(crate) async fn durable<T>(&self, pending: Pending<T>) -> Result<T, Status> {
        self.0.durable(pending).await.map_err(to_status)
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

/// The status of work that gave no value.
fn to_status(error: WorkError) -> Status {
    match error {
        WorkError::Table(error) => status::to_status(&error),
        WorkError::Panicked => status::internal(),
        WorkError::ShuttingDown => Status::unavailable("the server is shutting down"),
        WorkError::Busy { max_in_flight } => status::server_busy(max_in_flight),
    }
}
