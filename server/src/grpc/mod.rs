//! The gRPC edge, and the only module that names tonic or `pb`: each handler converts its request,
//! runs the engine through the [`executor`], and converts the answer or the error.

mod convert;
mod deadline;
mod edge;
mod executor;
mod status;
mod stream;
mod wire;

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
use crate::engine::{Engine, Pending};
use crate::error::TableError;
use crate::model::{IfMatch, Operation};
use crate::query::QuerySpec;
use crate::storage::Ticket;
use executor::Executor;
use stream::{Holds, ScanSlot, StreamLimits};

/// The `trestle.v1.TableService` implementation.
#[derive(Debug, Clone)]
pub struct TableApi {
    executor: Executor,
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
            executor: Executor::new(engine),
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
        let pending = self
            .executor
            .short(operation, move |engine, operation, waiting| {
                engine.write(&table, operation, waiting)
            })
            .await?;
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
        let name = self
            .executor
            .blocking(move |engine| engine.create_table(&table))
            .await?;
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
        self.executor
            .blocking(move |engine| engine.delete_table(&table))
            .await?;
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
            .executor
            .blocking(move |engine| engine.list_tables(&req.prefix, req.page_size, &req.page_token))
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
        let table = req.table;
        let pending = self
            .executor
            .short((key, if_match), move |engine, (key, if_match), waiting| {
                engine.delete(&table, key, if_match, waiting)
            })
            .await?;
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
        let (table, select) = (req.table, req.select);
        let entity = self
            .executor
            .short((), move |engine, (), waiting| {
                let read = engine.get(&table, &key, &select, wire::entity_message, waiting)?;
                Ok(read.map_input(drop))
            })
            .await?;
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
            .executor
            .blocking(move |engine| {
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
        let cursor = self
            .executor
            .blocking(move |engine| engine.open_scan(&table, spec, &continuation))
            .await?;
        let holds = Holds {
            _in_flight: admitted.permit,
            _slot: slot,
        };
        // A chunk that fails or panics ends the stream with its status, never as if the scan
        // were complete.
        Ok(Response::new(stream::start(
            cursor,
            holds,
            admitted.deadline,
            self.streams.clone(),
            self.executor.chunk_reader(),
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
            .executor
            .blocking(move |engine| engine.count(&table, spec, &continuation))
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
        let pending = self
            .executor
            .short(operations, move |engine, operations, waiting| {
                engine.transact(&table, &partition_key, operations, request_bytes, waiting)
            })
            .await?;
        let results = self.durable(pending).await?;
        Ok(Response::new(pb::SubmitTransactionResponse {
            results: results.into_iter().map(convert::operation_result).collect(),
        }))
    }
}
