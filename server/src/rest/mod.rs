//! The Azure Table REST endpoint: the same engine served over Azure's HTTP protocol (path-style
//! URLs as the emulators use them, OData JSON), so that the Azure SDKs and tools work against
//! Trestle by changing their connection string. A second protocol layer beside `grpc`, above the
//! engine.
//!
//! Served: tables (create, list with continuation, delete); entities (insert, update, merge,
//! insert-or-replace, insert-or-merge, delete, get, query with `$filter`, `$select`, `$top` and
//! continuation); `If-Match`; `Prefer: return-content|return-no-content`; the three JSON metadata
//! levels; Azure's error body and `x-ms-error-code`; `x-ms-request-id`, `x-ms-version` and the
//! client's request id echoed; the table-ACL and service-properties calls answer as Azure does for
//! an account with none set. Auth: SharedKey and SharedKeyLite (the development key in open mode,
//! the key file's keys otherwise), service and account shared access signatures (mapped onto
//! Trestle's scoped grants), and Trestle's own `Bearer` credentials. Other requests answer
//! `NotImplemented`.

mod batch;
mod body;
mod connections;
mod odata;
mod paths;
mod sas;
mod settings;
mod shared_key;

use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use serde_json::{json, Map, Value as Json};
use trestle_proto::access::Permissions;

use self::body::BodyLimits;
use self::connections::{Accepted, Peer};
use self::odata::Metadata;
use self::paths::Resource;
use self::shared_key::AccountKeys;
use crate::auth::{Access, AuthError, Authenticator};
use crate::config::Limits;
use crate::connections::{ConnectionTimeouts, Connections};
use crate::engine::MatchSink;
use crate::error::{bounded_message, ErrorCode, TableError};
use crate::executor::{Executor, WorkError};
use crate::model::{
    EntityKey, IfMatch, Operation, StoredEntity, Ticks, UpsertMode, ValidationError, ValueRef,
};
use crate::query::{self, QuerySpec, Record};
use crate::storage::{EntityView, StorageError};

/// The one account the endpoint serves, named as the emulators name theirs.
pub const ACCOUNT: &str = "devstoreaccount1";

/// The Azure connection string of the endpoint at `endpoint` (`http://host:port`) for the account
/// key `account_key` (standard base64).
pub fn connection_string(endpoint: &str, account_key: &str) -> String {
    let endpoint = endpoint.trim_end_matches('/');
    format!(
        "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={account_key};\
         TableEndpoint={endpoint}/{ACCOUNT};"
    )
}

/// The service version the endpoint speaks.
const VERSION: &str = "2019-02-02";

/// The REST endpoint's listener, bound before serving (by `--rest-listen`, or by a test that
/// needs its address first). Cloning shares it: the server takes it once.
#[derive(Debug, Clone, Default)]
pub struct RestListener(Arc<Mutex<Option<std::net::TcpListener>>>);

impl RestListener {
    /// A listener to serve the REST endpoint on.
    pub fn new(listener: std::net::TcpListener) -> RestListener {
        RestListener(Arc::new(Mutex::new(Some(listener))))
    }

    fn take(&self) -> Option<std::net::TcpListener> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

#[derive(Debug, Clone)]
struct RestApi {
    executor: Executor,
    authenticator: Authenticator,
    keys: AccountKeys,
    bodies: BodyLimits,
    /// How far a SharedKey request's date may be from the server's clock.
    max_clock_skew: std::time::Duration,
}

/// The REST endpoint being served.
#[derive(Debug)]
pub(crate) struct RestServer {
    task: tokio::task::JoinHandle<()>,
    connections: Arc<Connections>,
}

impl RestServer {
    /// Stops accepting, then closes every connection still open and waits until each is gone.
    pub(crate) async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
        if let Some(connections) = Arc::into_inner(self.connections) {
            connections.close_all().await;
        }
    }
}

/// Starts serving the REST endpoint on `listener`, if there is one, within `limits` (open
/// connections, idle time, request size).
pub(crate) fn start(
    listener: &RestListener,
    executor: Executor,
    authenticator: Authenticator,
    limits: &Limits,
) -> Result<Option<RestServer>, std::io::Error> {
    let Some(listener) = listener.take() else {
        return Ok(None);
    };
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    tracing::info!(rest_endpoint = %listener.local_addr()?, "serving the Azure Table REST endpoint");
    let keys = AccountKeys::of(&authenticator);
    let app = axum::Router::new().fallback(handle).with_state(RestApi {
        executor,
        authenticator,
        keys,
        bodies: BodyLimits::new(
            limits.max_message_bytes,
            limits.rest_body_buffer_bytes,
            limits.body_timeout,
        ),
        max_clock_skew: limits.max_clock_skew,
    });
    let connections = Arc::new(Connections::new(
        limits.max_connections,
        ConnectionTimeouts {
            handshake: None,
            idle: limits.idle_timeout,
        },
    ));
    let accepted = Accepted {
        listener,
        connections: connections.clone(),
    };
    let app = app.into_make_service_with_connect_info::<Peer>();
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(accepted, app).await {
            tracing::error!(%error, "the REST endpoint stopped");
        }
    });
    Ok(Some(RestServer { task, connections }))
}

/// What a request failed with: Azure's code, an HTTP status and a message (capped as gRPC's are),
/// and whether the connection closes after the answer (a body left unread).
#[derive(Debug)]
struct Failure {
    status: StatusCode,
    code: &'static str,
    message: String,
    close_connection: bool,
}

impl Failure {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            status,
            code,
            message: bounded_message(message.into()),
            close_connection: false,
        }
    }

    fn invalid(error: ValidationError) -> Failure {
        Failure::from(TableError::Invalid(error))
    }
}

impl From<TableError> for Failure {
    fn from(error: TableError) -> Failure {
        let code = error.code();
        if matches!(
            code,
            ErrorCode::InternalError | ErrorCode::ServiceUnavailable
        ) {
            tracing::error!(%error, "a REST request failed");
        }
        Failure::new(status_of(code), code.as_str(), error.client_message())
    }
}

impl From<AuthError> for Failure {
    fn from(error: AuthError) -> Failure {
        let code = error.code();
        Failure::new(status_of(code), code.as_str(), error.to_string())
    }
}

impl From<WorkError> for Failure {
    fn from(error: WorkError) -> Failure {
        match error {
            WorkError::Table(error) => Failure::from(error),
            WorkError::Panicked => Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                error.to_string(),
            ),
            WorkError::ShuttingDown => Failure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::ServiceUnavailable.as_str(),
                error.to_string(),
            ),
            WorkError::Busy { .. } => Failure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::ServerBusy.as_str(),
                error.to_string(),
            ),
        }
    }
}

impl From<StorageError> for Failure {
    fn from(error: StorageError) -> Failure {
        Failure::from(TableError::Storage(error))
    }
}

/// The HTTP status Azure answers a code with.
fn status_of(code: ErrorCode) -> StatusCode {
    use ErrorCode as C;
    match code {
        C::TableNotFound | C::ResourceNotFound | C::IndexNotFound => StatusCode::NOT_FOUND,
        C::TableAlreadyExists
        | C::TableBeingDeleted
        | C::EntityAlreadyExists
        | C::IndexAlreadyExists
        | C::IndexValueAlreadyExists => StatusCode::CONFLICT,
        C::UpdateConditionNotSatisfied | C::IndexNotReady => StatusCode::PRECONDITION_FAILED,
        C::RequestBodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        C::AuthenticationFailed
        | C::AuthorizationPermissionMismatch
        | C::AuthorizationResourceTypeMismatch
        | C::AuthorizationFailure => StatusCode::FORBIDDEN,
        C::ServerBusy | C::ServiceUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        C::OperationTimedOut => StatusCode::GATEWAY_TIMEOUT,
        C::InsufficientStorage => StatusCode::INSUFFICIENT_STORAGE,
        C::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
        C::TooManyIndexes
        | C::EntityTooLarge
        | C::InvalidInput
        | C::OutOfRangeInput
        | C::PropertiesNeedValue
        | C::PropertyValueTooLarge
        | C::TooManyProperties
        | C::PropertyNameInvalid
        | C::PropertyNameTooLong
        | C::KeyValueTooLarge
        | C::InvalidDuplicateRow
        | C::CommandsInBatchActOnDifferentPartitions => StatusCode::BAD_REQUEST,
    }
}

/// One request, parsed enough to dispatch.
struct Request {
    peer: IpAddr,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A query parameter, percent-decoded (`+` stays a plus, as Azure reads it).
    fn param(&self, name: &str) -> Option<String> {
        self.uri.query()?.split('&').find_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (paths::percent_decode(key)? == name).then(|| paths::percent_decode(value))?
        })
    }

    /// `$top` (0, the server's page size, when absent).
    fn top(&self) -> Result<u32, Failure> {
        match self.param("$top") {
            Some(top) => top.parse::<u32>().map_err(|_| {
                Failure::invalid(ValidationError::Argument(format!(
                    "$top {top:?} is not a number"
                )))
            }),
            None => Ok(0),
        }
    }

    fn metadata(&self) -> Metadata {
        Metadata::from_accept(self.header("accept"))
    }

    /// Whether the client asked for the written entity back (`Prefer`), with `default`.
    fn return_content(&self, default: bool) -> bool {
        match self.header("prefer") {
            Some(p) if p.contains("return-no-content") => false,
            Some(p) if p.contains("return-content") => true,
            _ => default,
        }
    }

    fn if_match(&self) -> Result<Option<IfMatch>, Failure> {
        self.header("if-match")
            .map(|v| IfMatch::parse(v).map_err(Failure::invalid))
            .transpose()
    }
}

async fn handle(
    State(api): State<RestApi>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let _open = peer.begin_request();
    let mut request = Request {
        peer: peer.address.ip(),
        method,
        uri,
        headers,
        body: Bytes::new(),
    };
    let mut response = match serve_request(&api, &mut request, body).await {
        Ok(response) => response,
        Err(failure) => error_response(&request, failure),
    };
    let out = response.headers_mut();
    let request_id = request_id();
    out.insert("x-ms-request-id", header_value(&request_id));
    out.insert("x-ms-version", HeaderValue::from_static(VERSION));
    if let Some(client_id) = request.headers.get("x-ms-client-request-id") {
        out.insert("x-ms-client-request-id", client_id.clone());
    }
    response
}

/// A random GUID naming the request (`x-ms-request-id`).
fn request_id() -> String {
    let mut bytes = [0u8; 16];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn error_response(request: &Request, failure: Failure) -> Response {
    let body = json!({
        "odata.error": {
            "code": failure.code,
            "message": {"lang": "en-US", "value": failure.message},
        }
    });
    let mut response = (failure.status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert("x-ms-error-code", HeaderValue::from_static(failure.code));
    if failure.close_connection {
        headers.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(request.metadata().content_type()),
    );
    response
}

/// Who is asking: a shared access signature (`sig` among the query parameters), a SharedKey or
/// SharedKeyLite signature under one of the account's keys, or the `Bearer` credentials
/// Trestle's gRPC service takes (none needed in open mode).
fn authenticate(api: &RestApi, request: &Request, account: &str) -> Result<Access, Failure> {
    let failed = |why: String| Failure::new(StatusCode::FORBIDDEN, "AuthenticationFailed", why);
    let served_account = || {
        if account == ACCOUNT {
            Ok(())
        } else {
            Err(failed(format!(
                "this server's account is {:?}, not {account:?}",
                ACCOUNT
            )))
        }
    };
    if request.param("sig").is_some() {
        served_account()?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let presented = sas::Presented {
            account,
            peer: request.peer,
            now,
        };
        let grant =
            sas::grant(|name| request.param(name), &api.keys, &presented).map_err(|refusal| {
                Failure::new(StatusCode::FORBIDDEN, refusal.code, refusal.message)
            })?;
        return Ok(Access::Scoped(grant));
    }
    match request.header("authorization") {
        Some(a) if a.starts_with("SharedKey") => {
            served_account()?;
            let signed = shared_key::Signed {
                method: request.method.as_str(),
                raw_path: request.uri.path(),
                query: request.uri.query(),
                headers: &request.headers,
            };
            let clock = shared_key::Clock {
                now: SystemTime::now(),
                max_skew: api.max_clock_skew,
            };
            shared_key::verify(a, account, &api.keys, &signed, &clock).map_err(failed)?;
            Ok(Access::Full)
        }
        authorization => Ok(api.authenticator.authenticate(authorization)?),
    }
}

/// Serves one request: authenticated from its line and headers, admitted, and only then its
/// body read (within [`BodyLimits`]) and the request dispatched.
async fn serve_request(
    api: &RestApi,
    request: &mut Request,
    body: Body,
) -> Result<Response, Failure> {
    let Some((account, resource)) = paths::parse(request.uri.path()) else {
        return Err(Failure::new(
            StatusCode::BAD_REQUEST,
            "InvalidUri",
            format!("{} names no table resource", request.uri.path()),
        ));
    };
    let access = authenticate(api, request, &account)?;
    let _in_flight = api.executor.admit().map_err(Failure::from)?;
    let read = api.bodies.read(&request.headers, body).await?;
    request.body = read.bytes.clone();
    let served = dispatch(api, request, &access, &account, resource).await;
    drop(read);
    served
}

/// Answers an authenticated, admitted request whose body has been read.
async fn dispatch(
    api: &RestApi,
    request: &Request,
    access: &Access,
    account: &str,
    resource: Resource,
) -> Result<Response, Failure> {
    let base = format!(
        "http://{}/{account}",
        request.header("host").unwrap_or("localhost")
    );
    if let Some(setting) = request.param("comp") {
        return settings::serve(api, request, access, resource, &setting).await;
    }
    match (&request.method, resource) {
        (&Method::POST, Resource::Tables) => create_table(api, request, access, &base).await,
        (&Method::GET, Resource::Tables) => list_tables(api, request, access, &base).await,
        (&Method::DELETE, Resource::Table(table)) => {
            access.manage_table(&table)?;
            api.executor
                .blocking(move |engine| engine.delete_table(&table))
                .await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (&Method::POST, Resource::Entities(table)) => {
            insert(api, request, access, &base, table).await
        }
        (
            method,
            Resource::Entity {
                table,
                partition_key,
                row_key,
            },
        ) if method == Method::PUT || method == Method::PATCH || method.as_str() == "MERGE" => {
            let key = EntityKey::new(partition_key, row_key).map_err(Failure::invalid)?;
            let merge = method != Method::PUT;
            write(api, request, access, table, key, merge).await
        }
        (
            &Method::DELETE,
            Resource::Entity {
                table,
                partition_key,
                row_key,
            },
        ) => {
            let if_match = request
                .if_match()?
                .ok_or_else(|| Failure::invalid(ValidationError::IfMatchMissing))?;
            access.entity(&table, Permissions::DELETE, &partition_key, &row_key)?;
            let key = EntityKey::new(partition_key, row_key).map_err(Failure::invalid)?;
            let pending = api
                .executor
                .short((key, if_match), move |engine, (key, if_match), waiting| {
                    engine.delete(&table, key, if_match, waiting)
                })
                .await?;
            api.executor.durable(pending).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (
            &Method::GET,
            Resource::Entity {
                table,
                partition_key,
                row_key,
            },
        ) => {
            access.entity(&table, Permissions::READ, &partition_key, &row_key)?;
            get(api, request, table, partition_key, row_key, &base).await
        }
        (&Method::GET, Resource::Entities(table)) => {
            query(api, request, access, table, &base).await
        }
        (&Method::POST, Resource::Batch) => submit_batch(api, request, access).await,
        _ => Err(not_implemented(request, "")),
    }
}

/// `NotImplemented` for a request the endpoint does not serve, and why (`because`, if known).
fn not_implemented(request: &Request, because: &str) -> Failure {
    let mut message = format!(
        "{} {} is not served by Trestle's REST endpoint",
        request.method,
        request.uri.path()
    );
    if !because.is_empty() {
        message = format!("{message}: {because}");
    }
    Failure::new(StatusCode::NOT_IMPLEMENTED, "NotImplemented", message)
}

fn json_response(status: StatusCode, metadata: Metadata, body: &Json) -> Response {
    json_text_response(status, metadata, body.to_string())
}

fn json_text_response(status: StatusCode, metadata: Metadata, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(metadata.content_type()),
    );
    response
}

fn no_content(return_content_asked: bool) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    if return_content_asked {
        response.headers_mut().insert(
            "preference-applied",
            HeaderValue::from_static("return-no-content"),
        );
    }
    response
}

async fn create_table(
    api: &RestApi,
    request: &Request,
    access: &Access,
    base: &str,
) -> Result<Response, Failure> {
    let body: Json = serde_json::from_slice(&request.body).map_err(|e| {
        Failure::invalid(ValidationError::Argument(format!(
            "the body is not JSON: {e}"
        )))
    })?;
    let Some(table) = body
        .get("TableName")
        .and_then(Json::as_str)
        .map(str::to_owned)
    else {
        return Err(Failure::invalid(ValidationError::Argument(
            "the body has no TableName".into(),
        )));
    };
    access.manage_table(&table)?;
    let name = api
        .executor
        .blocking(move |engine| engine.create_table(&table))
        .await?;
    if !request.return_content(true) {
        return Ok(no_content(request.header("prefer").is_some()));
    }
    let metadata = request.metadata();
    let mut out = Map::new();
    if metadata != Metadata::None {
        out.insert(
            "odata.metadata".into(),
            format!("{base}/$metadata#Tables/@Element").into(),
        );
    }
    out.insert("TableName".into(), name.to_string().into());
    let mut response = json_response(StatusCode::CREATED, metadata, &Json::Object(out));
    if request.header("prefer").is_some() {
        response.headers_mut().insert(
            "preference-applied",
            HeaderValue::from_static("return-content"),
        );
    }
    Ok(response)
}

async fn list_tables(
    api: &RestApi,
    request: &Request,
    access: &Access,
    base: &str,
) -> Result<Response, Failure> {
    access.list_tables()?;
    let top = request.top()?;
    let after = request.param("NextTableName").unwrap_or_default();
    // `$filter` reads the one property a table has, `TableName`; a page holds the matches among
    // the `$top` tables it examined (possibly none, with a continuation to follow).
    let filter = match request.param("$filter") {
        Some(text) if !text.trim().is_empty() => {
            Some(query::parse_filter(&text).map_err(Failure::invalid)?)
        }
        _ => None,
    };
    let page = api
        .executor
        .blocking(move |engine| engine.list_tables("", top, &after))
        .await?;
    let metadata = request.metadata();
    let tables: Vec<Json> = page
        .tables
        .iter()
        .map(ToString::to_string)
        .filter(|name| {
            filter
                .as_ref()
                .is_none_or(|f| f.matches(&TableRecord(name)))
        })
        .map(|name| json!({ "TableName": name }))
        .collect();
    let mut out = Map::new();
    if metadata != Metadata::None {
        out.insert(
            "odata.metadata".into(),
            format!("{base}/$metadata#Tables").into(),
        );
    }
    out.insert("value".into(), Json::Array(tables));
    let mut response = json_response(StatusCode::OK, metadata, &Json::Object(out));
    if let Some(next) = page.next_page_token {
        response
            .headers_mut()
            .insert("x-ms-continuation-nexttablename", header_value(&next));
    }
    Ok(response)
}

/// A table as a `$filter` of Query Tables sees it: one string property, `TableName`.
struct TableRecord<'a>(&'a str);

impl Record for TableRecord<'_> {
    fn partition_key(&self) -> &str {
        ""
    }

    fn row_key(&self) -> &str {
        ""
    }

    fn timestamp(&self) -> Ticks {
        Ticks(0)
    }

    fn property(&self, name: &str) -> Option<ValueRef<'_>> {
        (name == "TableName").then_some(ValueRef::String(self.0))
    }
}

async fn insert(
    api: &RestApi,
    request: &Request,
    access: &Access,
    base: &str,
    table: String,
) -> Result<Response, Failure> {
    access.on_table(&table, Permissions::ADD)?;
    let entity = parse_body(&request.body, |body| {
        odata::entity_from_json(body, None).map_err(Failure::invalid)
    })
    .await?;
    let operation = Operation::Insert(entity);
    let needed = crate::auth::needed_for(&operation);
    access.entity(
        &table,
        needed,
        operation.partition_key().unwrap_or(""),
        operation.row_key(),
    )?;
    let content = request.return_content(true);
    let metadata = request.metadata();
    let stored = write_durably(api, &table, operation).await?;
    let mut response = if content {
        let json = odata::EntityJson::element(metadata, base, &table).stored(&stored);
        json_text_response(StatusCode::CREATED, metadata, json)
    } else {
        no_content(true)
    };
    response
        .headers_mut()
        .insert(http::header::ETAG, header_value(stored.etag().as_str()));
    Ok(response)
}

/// Bodies up to this size are parsed on the runtime's thread; larger ones on the blocking pool, so
/// that parsing megabytes never holds up other clients' requests.
const INLINE_PARSE_BYTES: usize = 64 * 1024;

/// `parse` of `body`, off the runtime's worker threads when the body is large.
async fn parse_body<T: Send + 'static>(
    body: &Bytes,
    parse: impl FnOnce(&[u8]) -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    if body.len() <= INLINE_PARSE_BYTES {
        return parse(body);
    }
    let body = body.clone();
    tokio::task::spawn_blocking(move || parse(&body))
        .await
        .map_err(|_| Failure::from(WorkError::Panicked))?
}

/// Applies one write and answers once it is durable: the entity as stored.
async fn write_durably(
    api: &RestApi,
    table: &str,
    operation: Operation,
) -> Result<StoredEntity, Failure> {
    let table = table.to_owned();
    let pending = api
        .executor
        .short(operation, move |engine, operation, waiting| {
            engine.write(&table, operation, waiting)
        })
        .await?;
    api.executor.durable(pending).await?.ok_or_else(|| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "the write stored no entity",
        )
    })
}

async fn write(
    api: &RestApi,
    request: &Request,
    access: &Access,
    table: String,
    key: EntityKey,
    merge: bool,
) -> Result<Response, Failure> {
    // Checked before the body is parsed: what is needed follows from If-Match alone (an update
    // or merge with it, an upsert without), as `auth::needed_for` says of the operation.
    let if_match = request.if_match()?;
    let needed = if if_match.is_some() {
        Permissions::UPDATE
    } else {
        Permissions::ADD.union(Permissions::UPDATE)
    };
    access.entity(&table, needed, &key.partition_key, &key.row_key)?;
    let keys = key.clone();
    let entity = parse_body(&request.body, move |body| {
        odata::entity_from_json(body, Some(&keys)).map_err(Failure::invalid)
    })
    .await?;
    let operation = match (if_match, merge) {
        (Some(if_match), false) => Operation::Update(entity, if_match),
        (Some(if_match), true) => Operation::Merge(entity, if_match),
        (None, false) => Operation::Upsert(entity, UpsertMode::Replace),
        (None, true) => Operation::Upsert(entity, UpsertMode::Merge),
    };
    let etag = write_durably(api, &table, operation).await?.etag();
    let mut response = StatusCode::NO_CONTENT.into_response();
    response
        .headers_mut()
        .insert(http::header::ETAG, header_value(etag.as_str()));
    Ok(response)
}

/// `$select` as property names (empty: all).
fn selection(request: &Request) -> Vec<String> {
    request
        .param("$select")
        .map(|s| {
            s.split(',')
                .map(|p| p.trim().to_owned())
                .filter(|p| {
                    !p.is_empty() && !matches!(p.as_str(), "PartitionKey" | "RowKey" | "Timestamp")
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn get(
    api: &RestApi,
    request: &Request,
    table: String,
    partition_key: String,
    row_key: String,
    base: &str,
) -> Result<Response, Failure> {
    let key = EntityKey::new(partition_key, row_key).map_err(Failure::invalid)?;
    let metadata = request.metadata();
    let select = selection(request);
    let (base, name) = (base.to_owned(), table.clone());
    let read = move |entity: &EntityView<'_>| {
        let mut json = String::new();
        odata::EntityJson::element(metadata, &base, &name).write_view(&mut json, entity)?;
        Ok((json, crate::model::ETag::for_timestamp(entity.timestamp)))
    };
    let (json, etag) = api
        .executor
        .short(read, move |engine, read, waiting| {
            engine.get(&table, &key, &select, read, waiting)
        })
        .await?;
    let mut response = json_text_response(StatusCode::OK, metadata, json);
    response
        .headers_mut()
        .insert(http::header::ETAG, header_value(etag.as_str()));
    Ok(response)
}

/// Writes a page's entities into the response body as they are read: `{..."value":[` first,
/// then each entity's object.
struct JsonPage {
    metadata: Metadata,
    base: String,
    table: String,
    body: String,
    empty: bool,
}

impl MatchSink for JsonPage {
    fn take(&mut self, entity: &EntityView<'_>) -> Result<usize, StorageError> {
        if !std::mem::take(&mut self.empty) {
            self.body.push(',');
        }
        let writer = odata::EntityJson {
            metadata: self.metadata,
            base: &self.base,
            table: &self.table,
            context: None,
        };
        writer.write_view(&mut self.body, entity)?;
        Ok(entity.stored_len())
    }
}

async fn query(
    api: &RestApi,
    request: &Request,
    access: &Access,
    table: String,
    base: &str,
) -> Result<Response, Failure> {
    let top = request.top()?;
    let mut spec = QuerySpec {
        filter: request.param("$filter").unwrap_or_default(),
        select: selection(request),
        page_size: top,
        ..QuerySpec::default()
    };
    access.query(&table, &mut spec)?;
    // The continuation is Trestle's own token, carried in NextPartitionKey.
    let continuation = request.param("NextPartitionKey").unwrap_or_default();
    let metadata = request.metadata();
    let mut body = String::from("{");
    if metadata != Metadata::None {
        body.push_str("\"odata.metadata\":");
        body.push_str(&Json::String(format!("{base}/$metadata#{table}")).to_string());
        body.push(',');
    }
    body.push_str("\"value\":[");
    let mut page = JsonPage {
        metadata,
        base: base.to_owned(),
        table: table.clone(),
        body,
        empty: true,
    };
    let (page, info) = api
        .executor
        .blocking(move |engine| {
            let info = engine.query(&table, spec, &continuation, &mut page)?;
            Ok((page, info))
        })
        .await?;
    let mut body = page.body;
    body.push_str("]}");
    let mut response = json_text_response(StatusCode::OK, metadata, body);
    if let Some(token) = info.continuation_token {
        let headers = response.headers_mut();
        headers.insert("x-ms-continuation-nextpartitionkey", header_value(&token));
        headers.insert(
            "x-ms-continuation-nextrowkey",
            HeaderValue::from_static("next"),
        );
    }
    Ok(response)
}

/// `$batch`: one changeset, all of it or none, answered `202 Accepted` with each operation's
/// response (or the failing one's, its index first in the message).
async fn submit_batch(
    api: &RestApi,
    request: &Request,
    access: &Access,
) -> Result<Response, Failure> {
    let content_type = request.header("content-type").unwrap_or("").to_owned();
    let parsed = parse_body(&request.body, move |body| {
        batch::parse(&content_type, body).map_err(|error| match error {
            batch::BatchError::Invalid(invalid) => Failure::invalid(invalid),
            batch::BatchError::NotServed(what) => Failure::new(
                StatusCode::NOT_IMPLEMENTED,
                "NotImplemented",
                format!("{what} is not served by Trestle's REST endpoint"),
            ),
        })
    })
    .await?;
    let (table, partition_key) = (parsed[0].table.clone(), parsed[0].partition_key.clone());
    let boundary = request_id();
    let respond = |body: String| {
        let mut response = (StatusCode::ACCEPTED, body).into_response();
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            header_value(&format!(
                "multipart/mixed; boundary=batchresponse_{boundary}"
            )),
        );
        response
    };
    let refuse = |index: usize, failure: Failure| {
        respond(batch::failure(
            &boundary,
            failure.status,
            failure.code,
            index,
            &failure.message,
        ))
    };
    let mut operations = Vec::with_capacity(parsed.len());
    for (index, operation) in parsed.into_iter().enumerate() {
        if operation.table != table {
            let why = format!(
                "a batch acts on one table; operation {index} names {:?}",
                operation.table
            );
            return Ok(refuse(
                index,
                Failure::invalid(ValidationError::Argument(why)),
            ));
        }
        if operation.partition_key != partition_key {
            let error = TableError::DifferentPartitions {
                expected: partition_key.clone(),
                found: operation.partition_key,
            };
            return Ok(refuse(index, Failure::from(error)));
        }
        operations.push(operation.operation);
    }
    if let Err((index, error)) = access.transaction(&table, &partition_key, &operations) {
        return Ok(refuse(index, Failure::from(error)));
    }
    let request_bytes = request.body.len();
    let committed = api
        .executor
        .short(operations, move |engine, operations, waiting| {
            engine.transact(&table, &partition_key, operations, request_bytes, waiting)
        })
        .await;
    let outcome = match committed {
        Ok(pending) => api.executor.durable(pending).await,
        Err(error) => Err(error),
    };
    match outcome {
        Ok(stored) => {
            let etags: Vec<Option<String>> = stored
                .iter()
                .map(|entity| entity.as_ref().map(|e| e.etag().into_string()))
                .collect();
            Ok(respond(batch::success(&boundary, &etags)))
        }
        Err(WorkError::Table(error)) => {
            let index = error.operation_index().unwrap_or(0);
            let failure = match error {
                TableError::Operation { source, .. } => Failure::from(*source),
                other => Failure::from(other),
            };
            Ok(refuse(index, failure))
        }
        Err(other) => Ok(refuse(0, Failure::from(other))),
    }
}
