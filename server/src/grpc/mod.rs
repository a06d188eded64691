//! The gRPC edge, and the only module that names tonic or `pb`: each handler converts its request,
//! runs the engine (inline or on the blocking pool), and converts the answer or the error.

mod convert;
mod deadline;
mod edge;
mod status;
mod stream;
mod wire;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use prost::Message;
use tonic::{Request, Response, Status};
use tracing::instrument;
use trestle_proto::access::Permissions;
use trestle_proto::pb;
use trestle_proto::reply::EntityReply;

pub use edge::{Edge, EdgeLayer};
pub use status::{ERROR_DOMAIN, OPERATION_INDEX_KEY};
pub use stream::ScanStream;

use crate::auth::{needed_for, Access, Authenticator};
use crate::config::Limits;
use crate::connections::ConnectionInfo;
use crate::engine::{Engine, MatchSink, Pending, ScanCursor};
use crate::error::{ErrorCode, TableError};
use crate::model::{IfMatch, Operation};
use crate::query::QuerySpec;
use crate::storage::Ticket;
use stream::{Holds, ScanSlot, StreamLimits};

/// The `trestle.v1.TableService` implementation.
#[derive(Debug, Clone)]
pub struct TableApi {
    engine: Arc<Engine>,
    /// The highest durable ticket, published by the store's flusher.
    durable: tokio::sync::watch::Receiver<Ticket>,
    authenticator: Authenticator,
    /// One permit per request in flight (a stream holds its permit until it ends).
    in_flight: Arc<tokio::sync::Semaphore>,
    max_in_flight: usize,
    /// What streamed scans may hold.
    streams: StreamLimits,
}

/// A request let in: what its credential grants, its deadline, and its in-flight permit.
struct Admitted {
    access: Access,
    deadline: Option<Instant>,
    permit: tokio::sync::OwnedSemaphorePermit,
}

impl TableApi {
    /// Serves `engine`, letting in what `authenticator` accepts, within `limits` (requests in
    /// flight, and what streamed scans may hold).
    pub fn new(engine: Arc<Engine>, authenticator: Authenticator, limits: &Limits) -> TableApi {
        let max_in_flight = limits.max_in_flight;
        let (publish, durable) = tokio::sync::watch::channel(engine.durable());
        engine.on_durable(Box::new(move |ticket| {
            publish.send_replace(ticket);
        }));
        TableApi {
            engine,
            durable,
            authenticator,
            in_flight: Arc::new(tokio::sync::Semaphore::new(max_in_flight)),
            max_in_flight,
            streams: StreamLimits::new(
                limits.stream_stall,
                limits.max_streams_per_connection,
                limits.stream_buffer_bytes,
            ),
        }
    }

    /// Lets a request in: a free in-flight slot (else `ServerBusy`), then a valid credential.
    fn admit<T>(&self, request: &Request<T>) -> Result<Admitted, Status> {
        let permit = self
            .in_flight
            .clone()
            .try_acquire_owned()
            .map_err(|_| status::server_busy(self.max_in_flight))?;
        let metadata = request.metadata();
        let authorization = metadata
            .get("authorization")
            .and_then(|value| value.to_str().ok());
        let access = self
            .authenticator
            .authenticate(authorization)
            .map_err(|error| {
                tracing::debug!(%error, "unauthenticated request");
                status::auth_status(&error, None)
            })?;
        Ok(Admitted {
            access,
            deadline: deadline::from_metadata(metadata, Instant::now()),
            permit,
        })
    }

    /// Acknowledges a write once the group commit has made it durable, waiting without holding a
    /// thread.
    async fn durable<T>(&self, pending: Pending<T>) -> Result<T, Status> {
        if let Some(ticket) = pending.ticket {
            let mut durable = self.durable.clone();
            durable
                .wait_for(|durable| *durable >= ticket)
                .await
                .map_err(|_| Status::unavailable("the server is shutting down"))?;
        }
        Ok(pending.value)
    }

    /// Runs `op` on the blocking pool: for work that may take long (queries, table creation and
    /// deletion, which wait for a flush). The task runs to completion even if the client goes away.
    async fn run<T, F>(&self, op: F) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnOnce(&Engine) -> Result<T, TableError> + Send + 'static,
    {
        let engine = self.engine.clone();
        let outcome = tokio::task::spawn_blocking(move || op(&engine)).await;
        answer(outcome.map_err(|_| ()))
    }

    /// Runs a short storage operation (an entity read, a write, a transaction of at most 100
    /// operations on one partition) on the calling runtime thread, sparing the hand-off to the
    /// blocking pool and back: two thread wake-ups cost more than the operation, and fewer
    /// threads keep fewer allocator heaps. Being synchronous, it cannot be cut in half by a
    /// cancelled RPC; a panic is an `InternalError`, as on the blocking pool.
    fn run_inline<T>(
        &self,
        op: impl FnOnce(&Engine) -> Result<T, TableError>,
    ) -> Result<T, Status> {
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| op(&self.engine)));
        answer(outcome.map_err(drop))
    }

    async fn write_entity(
        &self,
        admitted: Admitted,
        table: String,
        operation: Operation,
        return_no_content: bool,
    ) -> Result<Response<EntityReply>, Status> {
        let partition_key = operation.partition_key().unwrap_or_default();
        admitted.access.entity(
            &table,
            needed_for(&operation),
            partition_key,
            operation.row_key(),
        )?;
        let pending = self.run_inline(|engine| engine.write(&table, operation))?;
        let stored = self.durable(pending).await?;
        let mut stored = stored.ok_or_else(|| Status::internal("write stored no entity"))?;
        if return_no_content {
            // Azure's `Prefer: return-no-content`: the caller wants the new ETag, not its entity.
            stored.properties.clear();
        }
        Ok(Response::new(convert::entity_to_pb(stored).into()))
    }
}

/// The interceptor of health and reflection: lets every call in, or with `Some(authenticator)`
/// only calls with a valid credential.
pub fn introspection_guard(
    authenticator: Option<Authenticator>,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |request: Request<()>| {
        if let Some(authenticator) = &authenticator {
            let authorization = request
                .metadata()
                .get("authorization")
                .and_then(|value| value.to_str().ok());
            authenticator.authenticate(authorization)?;
        }
        Ok(request)
    }
}

/// The query a `QueryEntitiesRequest` describes: table, spec and continuation token.
fn query_spec(req: pb::QueryEntitiesRequest) -> (String, QuerySpec, String) {
    let spec = QuerySpec {
        partition_key: req.partition_key,
        row_key_start: req.row_key_start,
        row_key_end: req.row_key_end,
        row_key_prefix: req.row_key_prefix,
        reverse: req.reverse,
        select: req.select,
        page_size: req.page_size,
        filter: req.filter,
        filter_expr: None,
        scope: None,
        deadline: None,
    };
    (req.table, spec, req.continuation_token)
}

/// The answer to a request whose storage work returned `outcome` (`Err` if it panicked).
fn answer<T>(outcome: Result<Result<T, TableError>, ()>) -> Result<T, Status> {
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => {
            log_failure(&error);
            Err(status::to_status(&error))
        }
        Err(()) => {
            tracing::error!("a request panicked");
            Err(status::internal())
        }
    }
}

/// Logs a failed request once: faults as errors, refusals of bad input at debug level.
fn log_failure(error: &TableError) {
    if error.code() == ErrorCode::InternalError {
        tracing::error!(%error, "request failed");
    } else {
        tracing::debug!(%error, reason = error.code().as_str(), "request refused");
    }
}

fn invalid(error: crate::model::ValidationError) -> Status {
    status::to_status(&TableError::Invalid(error))
}

/// Narrows a query to what `admitted` may read and gives it the caller's deadline.
fn scoped_query(
    admitted: &Admitted,
    request: pb::QueryEntitiesRequest,
) -> Result<(String, QuerySpec, String), Status> {
    let (table, mut spec, continuation) = query_spec(request);
    admitted.access.query(&table, &mut spec)?;
    spec.deadline = admitted.deadline;
    Ok((table, spec, continuation))
}

#[tonic::async_trait]
impl pb::table_service_server::TableService for TableApi {
    #[instrument(level = "debug", skip_all, fields(table = %request.get_ref().table))]
    async fn create_table(
        &self,
        request: Request<pb::CreateTableRequest>,
    ) -> Result<Response<pb::Table>, Status> {
        let admitted = self.admit(&request)?;
        let table = request.into_inner().table;
        admitted.access.manage_table(&table)?;
        let name = self.run(move |engine| engine.create_table(&table)).await?;
        tracing::info!(table = %name, "created table");
        Ok(Response::new(pb::Table {
            name: name.to_string(),
        }))
    }

    #[instrument(level = "debug", skip_all, fields(table = %request.get_ref().table))]
    async fn delete_table(
        &self,
        request: Request<pb::DeleteTableRequest>,
    ) -> Result<Response<pb::DeleteTableResponse>, Status> {
        let admitted = self.admit(&request)?;
        let table = request.into_inner().table;
        admitted.access.manage_table(&table)?;
        let deleted = table.clone();
        self.run(move |engine| engine.delete_table(&table)).await?;
        tracing::info!(table = %deleted, "deleted table");
        Ok(Response::new(pb::DeleteTableResponse {}))
    }

    #[instrument(level = "debug", skip_all, fields(prefix = %request.get_ref().prefix))]
    async fn list_tables(
        &self,
        request: Request<pb::ListTablesRequest>,
    ) -> Result<Response<pb::ListTablesResponse>, Status> {
        let admitted = self.admit(&request)?;
        admitted.access.list_tables()?;
        let req = request.into_inner();
        let page = self
            .run(move |engine| engine.list_tables(&req.prefix, req.page_size, &req.page_token))
            .await?;
        Ok(Response::new(pb::ListTablesResponse {
            tables: page
                .tables
                .into_iter()
                .map(|name| pb::Table {
                    name: name.to_string(),
                })
                .collect(),
            next_page_token: page.next_page_token.unwrap_or_default(),
        }))
    }

    #[instrument(level = "debug", skip_all, fields(table = %request.get_ref().table))]
    async fn insert_entity(
        &self,
        request: Request<pb::InsertEntityRequest>,
    ) -> Result<Response<EntityReply>, Status> {
        let admitted = self.admit(&request)?;
        let req = request.into_inner();
        let entity = convert::new_entity(req.entity).map_err(invalid)?;
        self.write_entity(
            admitted,
            req.table,
            Operation::Insert(entity),
            req.return_no_content,
        )
        .await
    }

    #[instrument(level = "debug", skip_all, fields(table = %request.get_ref().table))]
    async fn update_entity(
        &self,
        request: Request<pb::UpdateEntityRequest>,
    ) -> Result<Response<EntityReply>, Status> {
        let admitted = self.admit(&request)?;
        let req = request.into_inner();
        let entity = convert::new_entity(req.entity).map_err(invalid)?;
        let if_match = IfMatch::parse(&req.if_match).map_err(invalid)?;
        self.write_entity(
            admitted,
            req.table,
            Operation::Update(entity, if_match),
            req.return_no_content,
        )
        .await
    }

    #[instrument(level = "debug", skip_all, fields(table = %request.get_ref().table))]
    async fn merge_entity(
        &self,
        request: Request<pb::MergeEntityRequest>,
    ) -> Result<Response<EntityReply>, Status> {
        let admitted = self.admit(&request)?;
        let req = request.into_inner();
        let entity = convert::new_entity(req.entity).map_err(invalid)?;
        let if_match = IfMatch::parse(&req.if_match).map_err(invalid)?;
        self.write_entity(
            admitted,
            req.table,
            Operation::Merge(entity, if_match),
            req.return_no_content,
        )
        .await
    }

    #[instrument(level = "debug", skip_all, fields(table = %request.get_ref().table))]
    async fn upsert_entity(
        &self,
        request: Request<pb::UpsertEntityRequest>,
    ) -> Result<Response<EntityReply>, Status> {
        let admitted = self.admit(&request)?;
        let req = request.into_inner();
        let entity = convert::new_entity(req.entity).map_err(invalid)?;
        let mode = convert::upsert_mode(req.mode).map_err(invalid)?;
        self.write_entity(
            admitted,
            req.table,
            Operation::Upsert(entity, mode),
            req.return_no_content,
        )
        .await
    }

    #[instrument(level = "debug", skip_all, fields(table = %request.get_ref().table, pk = %request.get_ref().partition_key, rk = %request.get_ref().row_key))]
    async fn delete_entity(
        &self,
        request: Request<pb::DeleteEntityRequest>,
    ) -> Result<Response<pb::DeleteEntityResponse>, Status> {
        let admitted = self.admit(&request)?;
        let req = request.into_inner();
        let key = convert::entity_key(req.partition_key, req.row_key).map_err(invalid)?;
        let if_match = IfMatch::parse(&req.if_match).map_err(invalid)?;
        admitted.access.entity(
            &req.table,
            Permissions::DELETE,
            &key.partition_key,
            &key.row_key,
        )?;
        let pending = self.run_inline(|engine| engine.delete(&req.table, key, if_match))?;
        self.durable(pending).await?;
        Ok(Response::new(pb::DeleteEntityResponse {}))
    }

    #[instrument(level = "debug", skip_all, fields(table = %request.get_ref().table, pk = %request.get_ref().partition_key, rk = %request.get_ref().row_key))]
    async fn get_entity(
        &self,
        request: Request<pb::GetEntityRequest>,
    ) -> Result<Response<EntityReply>, Status> {
        let admitted = self.admit(&request)?;
        let req = request.into_inner();
        let key = convert::entity_key(req.partition_key, req.row_key).map_err(invalid)?;
        admitted.access.entity(
            &req.table,
            Permissions::READ,
            &key.partition_key,
            &key.row_key,
        )?;
        let entity = self
            .run_inline(|engine| engine.get(&req.table, key, req.select, wire::entity_message))?;
        Ok(Response::new(EntityReply::Encoded(entity)))
    }

    #[instrument(level = "debug", skip_all, fields(table = %request.get_ref().table, pk = ?request.get_ref().partition_key))]
    async fn query_entities(
        &self,
        request: Request<pb::QueryEntitiesRequest>,
    ) -> Result<Response<pb::QueryEntitiesResponse>, Status> {
        let admitted = self.admit(&request)?;
        let (table, spec, continuation) = scoped_query(&admitted, request.into_inner())?;
        let (page, encoder) = self
            .run(move |engine| {
                let mut encoder = wire::EntityEncoder::default();
                let page = engine.query(&table, spec, &continuation, &mut encoder)?;
                Ok((page, encoder))
            })
            .await?;
        tracing::debug!(
            plan = page.plan.as_str(),
            examined = page.examined,
            returned = encoder.encoded.len(),
            "query page"
        );
        Ok(Response::new(pb::QueryEntitiesResponse {
            entities: Vec::new(),
            encoded_entities: encoder.encoded,
            continuation_token: page.continuation_token.unwrap_or_default(),
            stats: Some(pb::QueryStats {
                plan: page.plan.as_str().to_owned(),
                entities_examined: page.examined as u64,
            }),
        }))
    }

    type ScanEntitiesStream = ScanStream;

    #[instrument(level = "debug", skip_all, fields(table = %request.get_ref().table, pk = ?request.get_ref().partition_key))]
    async fn scan_entities(
        &self,
        request: Request<pb::QueryEntitiesRequest>,
    ) -> Result<Response<Self::ScanEntitiesStream>, Status> {
        let admitted = self.admit(&request)?;
        let slot = match ConnectionInfo::of(request.extensions()) {
            Some(connection) => Some(
                ScanSlot::claim(&connection.state.open_scans, self.streams.per_connection)
                    .ok_or_else(|| status::connection_scans_busy(self.streams.per_connection))?,
            ),
            None => None,
        };
        let (table, spec, continuation) = scoped_query(&admitted, request.into_inner())?;
        let cursor = self.run_inline(|engine| engine.open_scan(&table, spec, &continuation))?;
        let holds = Holds {
            _in_flight: admitted.permit,
            _slot: slot,
        };
        let api = self.clone();
        // Each chunk runs on the blocking pool as any long request does: a failure or a panic
        // ends the stream with its status, never as if the scan were complete.
        let read_chunk = move |mut cursor: ScanCursor, mut encoder: wire::EntityEncoder| {
            let api = api.clone();
            Box::pin(async move {
                api.run(move |_| {
                    let more = cursor.read_chunk(stream::STREAM_BATCH_BYTES, &mut |entity| {
                        encoder.take(entity)
                    })?;
                    Ok((cursor, encoder, more))
                })
                .await
            }) as stream::ChunkFuture
        };
        Ok(Response::new(stream::start(
            cursor,
            holds,
            admitted.deadline,
            self.streams.clone(),
            read_chunk,
        )))
    }

    #[instrument(level = "debug", skip_all, fields(table = %request.get_ref().table, pk = ?request.get_ref().partition_key))]
    async fn count_entities(
        &self,
        request: Request<pb::QueryEntitiesRequest>,
    ) -> Result<Response<pb::CountEntitiesResponse>, Status> {
        let admitted = self.admit(&request)?;
        let (table, spec, continuation) = scoped_query(&admitted, request.into_inner())?;
        let count = self
            .run(move |engine| engine.count(&table, spec, &continuation))
            .await?;
        Ok(Response::new(pb::CountEntitiesResponse { count }))
    }

    #[instrument(level = "debug", skip_all, fields(table = %request.get_ref().table, pk = %request.get_ref().partition_key, ops = request.get_ref().operations.len()))]
    async fn submit_transaction(
        &self,
        request: Request<pb::SubmitTransactionRequest>,
    ) -> Result<Response<pb::SubmitTransactionResponse>, Status> {
        let admitted = self.admit(&request)?;
        let req = request.into_inner();
        let request_bytes = req.encoded_len();
        let operations = req
            .operations
            .into_iter()
            .enumerate()
            .map(|(index, op)| {
                convert::operation(op).map_err(|e| TableError::Invalid(e).at_operation(index))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| status::to_status(&error))?;
        let (table, partition_key) = (req.table, req.partition_key);
        admitted
            .access
            .transaction(&table, &partition_key, &operations)
            .map_err(|(index, error)| status::auth_status(&error, Some(index)))?;
        let pending = self.run_inline(|engine| {
            engine.transact(&table, &partition_key, operations, request_bytes)
        })?;
        let results = self.durable(pending).await?;
        Ok(Response::new(pb::SubmitTransactionResponse {
            results: results.into_iter().map(convert::operation_result).collect(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StoreOptions;

    #[tokio::test]
    async fn a_panicking_request_is_an_internal_error_and_the_service_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(Engine::open(dir.path(), StoreOptions::default()).unwrap());
        let limits = Limits {
            max_in_flight: 8,
            ..Limits::default()
        };
        let api = TableApi::new(engine, Authenticator::open(), &limits);
        let failed = api
            .run(|_| -> Result<(), TableError> { panic!("a bug in a handler") })
            .await
            .unwrap_err();
        assert_eq!(failed.code(), tonic::Code::Internal);
        assert!(!failed.message().contains("a bug"), "panic text leaked");
        let failed_inline = api
            .run_inline(|_| -> Result<(), TableError> { panic!("a bug in a short handler") })
            .unwrap_err();
        assert_eq!(failed_inline.code(), tonic::Code::Internal);
        let created = api.run(|engine| engine.create_table("After")).await;
        assert!(created.is_ok());
        assert_eq!(api.in_flight.available_permits(), 8);
    }
}
