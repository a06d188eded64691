//! The executor as the gRPC service uses it: the protocol-neutral [`crate::executor`] with each
//! failure mapped to its status, and the streaming mode ([`Executor::chunk_reader`]): one chunk
//! of a `ScanEntities` stream at a time (on the blocking pool, or awaited where the store serves
//! it so), the reader awaited without a thread in between ([`super::stream`]).

use tonic::Status;

use super::status;
use super::stream::{ChunkFuture, STREAM_BATCH_BYTES};
use super::wire::EntityEncoder;
use crate::across::{CrossCommit, TableEntityKey};
use crate::engine::{Engine, MatchSink, PageInfo, Pending, ScanCursor};
use crate::error::TableError;
use crate::executor::{self, WorkError};
use crate::model::{EntityKey, Operation, StoredEntity};
use crate::query::QuerySpec;
use crate::storage::{EntityView, StorageError};

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

    /// A point read ([`executor::Executor::get`]).
    pub(crate) async fn get<R, F>(
        &self,
        table: String,
        key: EntityKey,
        select: Vec<String>,
        read: F,
    ) -> Result<R, Status>
    where
        R: Send + 'static,
        F: FnOnce(&EntityView<'_>) -> Result<R, StorageError> + Send + 'static,
    {
        let read = self.0.get(table, key, select, read);
        read.await.map_err(to_status)
    }

    /// A read of many keys at one instant ([`executor::Executor::get_many`]).
    pub(crate) async fn get_many<R, F>(
        &self,
        keys: Vec<TableEntityKey>,
        select: Vec<String>,
        read: F,
    ) -> Result<Vec<Option<R>>, Status>
    where
        R: Send + 'static,
        F: Fn(&EntityView<'_>) -> Result<R, StorageError> + Send + Sync + Clone + 'static,
    {
        let read = self.0.get_many(keys, select, read);
        read.await.map_err(to_status)
    }

    /// A page of a query ([`executor::Executor::query`]).
    pub(crate) async fn query<S>(
        &self,
        table: String,
        spec: QuerySpec,
        continuation: String,
        sink: S,
    ) -> Result<(PageInfo, S), Status>
    where
        S: MatchSink + Send + 'static,
    {
        let page = self.0.query(table, spec, continuation, sink);
        page.await.map_err(to_status)
    }

    /// A streamed query planned ([`executor::Executor::open_scan`]).
    pub(crate) async fn open_scan(
        &self,
        table: String,
        spec: QuerySpec,
        continuation: String,
    ) -> Result<ScanCursor, Status> {
        let cursor = self.0.open_scan(table, spec, continuation);
        cursor.await.map_err(to_status)
    }

    /// A count of a query's matches ([`executor::Executor::count`]).
    pub(crate) async fn count(
        &self,
        table: String,
        spec: QuerySpec,
        continuation: String,
    ) -> Result<u64, Status> {
        let count = self.0.count(table, spec, continuation);
        count.await.map_err(to_status)
    }

    /// One write ([`executor::Executor::write`]).
    pub(crate) async fn write(
        &self,
        table: String,
        operation: Operation,
    ) -> Result<Pending<Option<StoredEntity>>, Status> {
        self.0.write(table, operation).await.map_err(to_status)
    }

    /// A transaction across partitions ([`executor::Executor::transact_across`]).
    pub(crate) async fn transact_across(
        &self,
        commit: CrossCommit,
    ) -> Result<Pending<Vec<Option<StoredEntity>>>, Status> {
        self.0.transact_across(commit).await.map_err(to_status)
    }

    /// A transaction on one partition ([`executor::Executor::transact`]).
    pub(crate) async fn transact(
        &self,
        table: String,
        partition_key: String,
        operations: Vec<Operation>,
        request_bytes: usize,
    ) -> Result<Pending<Vec<Option<StoredEntity>>>, Status> {
        let commit = self
            .0
            .transact(table, partition_key, operations, request_bytes);
        commit.await.map_err(to_status)
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

    /// Streaming mode: what reads a stream's next chunk ([`executor::Executor::read_chunk`],
    /// finished as any other work).
    pub(crate) fn chunk_reader(
        &self,
    ) -> impl Fn(ScanCursor, EntityEncoder) -> ChunkFuture + Send + 'static {
        let executor = self.clone();
        move |cursor: ScanCursor, encoder: EntityEncoder| {
            let executor = executor.clone();
            Box::pin(async move {
                let chunk = executor.0.read_chunk(cursor, encoder, STREAM_BATCH_BYTES);
                chunk.await.map_err(to_status)
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
