//! The Azure Table REST endpoint: the same engine served over Azure's HTTP protocol (path-style
//! URLs as the emulators use them, OData JSON), so that the Azure SDKs and tools work against
//! Trestle by changing their connection string. A second protocol layer beside `grpc`, above the
//! engine.
//!
//! Served: tables (create, list with continuation, delete); entities (insert, update, merge,
//! insert-or-replace, insert-or-merge, delete, get, query with `$filter`, `$select`, `$top` and
//! continuation); `If-Match`; `Prefer: return-content|return-no-content`; the three JSON metadata
//! levels; Azure's error body and `x-ms-error-code`; `x-ms-request-id`, `x-ms-version` and the
//! client's request id echoed, `Keep-Alive`; service properties with CORS rules (preflights and
//! the answers' `Access-Control-*` headers), service statistics, and tables' stored access
//! policies. Auth: SharedKey and SharedKeyLite (the development key in open mode,
//! the key file's keys otherwise), service and account shared access signatures (mapped onto
//! Trestle's scoped grants, a stored access policy's fields included), and Trestle's own `Bearer`
//! credentials. Other requests answer
//! `NotImplemented`.
//!
//! This module accepts connections and dispatches: a request is authenticated from its line and
//! headers (`request`), admitted, its body read within bounds (`body`), then routed to `tables`,
//! `entities`, `batch` or `settings`; a failure is answered by `failure` with the same client
//! text gRPC sends.

mod batch;
mod body;
mod connections;
mod cors;
mod entities;
mod failure;
mod listener;
mod odata;
mod paths;
mod reply;
mod request;
mod sas;
mod settings;
mod shared_key;
mod tables;
mod version;
mod xml;

pub(crate) use self::listener::start;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::response::Response;
use http::{HeaderMap, Method, Uri};

use self::body::BodyLimits;
use self::connections::Peer;
use self::failure::{error_response, Failure};
use self::paths::Resource;
use self::reply::{header_value, request_id};
use self::request::{authenticate, Request};
use self::shared_key::AccountKeys;
use crate::auth::{Access, Authenticator};
use crate::error::ErrorCode;
use crate::executor::Executor;
use crate::model::EntityKey;

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

#[derive(Debug, Clone)]
struct RestApi {
    executor: Executor,
    authenticator: Authenticator,
    keys: AccountKeys,
    bodies: BodyLimits,
    /// How far a SharedKey request's date may be from the server's clock.
    max_clock_skew: std::time::Duration,
    /// `Keep-Alive: timeout=<idle seconds>`: how long an idle connection stays open.
    keep_alive: http::HeaderValue,
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
    let started = std::time::Instant::now();
    // Named only when metrics are kept: no path parsed twice otherwise.
    let operation = crate::telemetry::enabled().then(|| operation_name(&method, uri.path()));
    crate::telemetry::begun("rest");
    let mut request = Request {
        peer: peer.address.ip(),
        method,
        uri,
        headers,
        body: Bytes::new(),
    };
    let version = version::requested(&request);
    let served = match &version {
        Err(failure) => Err(Failure::of(ErrorCode::InvalidHeaderValue, failure.clone())),
        Ok(_) if request.method == Method::OPTIONS => cors::preflight(&api, &request).await,
        Ok(_) => serve_request(&api, &mut request, body).await,
    };
    let mut response = match served {
        Ok(response) => response,
        Err(failure) => error_response(request.metadata(), failure),
    };
    let out = response.headers_mut();
    if !out.contains_key(http::header::CONNECTION) {
        out.insert("keep-alive", api.keep_alive.clone());
    }
    let request_id = request_id();
    out.insert("x-ms-request-id", header_value(&request_id));
    let version = version.ok().flatten();
    out.insert(
        "x-ms-version",
        header_value(version.as_deref().unwrap_or(version::SERVED)),
    );
    if let Some(client_id) = request.headers.get("x-ms-client-request-id") {
        out.insert("x-ms-client-request-id", client_id.clone());
    }
    // Last, so that the headers a page may read are all there.
    if let (Some(origin), false) = (request.header("origin"), request.method == Method::OPTIONS) {
        cors::allow(&api, origin, request.method.as_str(), &mut response).await;
    }
    let code = || response.status().as_u16().to_string();
    let operation = || operation.unwrap_or_default();
    crate::telemetry::answered("rest", operation, code, started.elapsed());
    response
}

/// What a request asks, as the metrics name it: its method and the kind of resource it names
/// (`GET Entity`, `POST Batch`); `Unknown` for a path that names none.
fn operation_name(method: &Method, path: &str) -> String {
    let resource = match paths::parse(path) {
        Some((_, paths::Resource::Service)) => "Service",
        Some((_, paths::Resource::Tables)) => "Tables",
        Some((_, paths::Resource::Batch)) => "Batch",
        Some((_, paths::Resource::Table(_))) => "Table",
        Some((_, paths::Resource::Entities(_))) => "Entities",
        Some((_, paths::Resource::Entity { .. })) => "Entity",
        None => "Unknown",
    };
    format!("{method} {resource}")
}

/// Serves one request: authenticated from its line and headers, admitted, and only then its
/// body read (within [`BodyLimits`]) and the request dispatched.
async fn serve_request(
    api: &RestApi,
    request: &mut Request,
    body: Body,
) -> Result<Response, Failure> {
    request.address_primary_location()?;
    let Some((account, resource)) = paths::parse(request.uri.path()) else {
        return Err(Failure::of(
            ErrorCode::InvalidUri,
            format!("{} names no table resource", request.uri.path()),
        ));
    };
    let access = authenticate(api, request, &account).await?;
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
        (&Method::POST, Resource::Tables) => tables::create(api, request, access, &base).await,
        (&Method::GET, Resource::Tables) => tables::list(api, request, access, &base).await,
        (&Method::DELETE, Resource::Table(table)) => tables::delete(api, access, table).await,
        (&Method::POST, Resource::Entities(table)) => {
            entities::insert(api, request, access, &base, table).await
        }
        (&Method::GET, Resource::Entities(table)) => {
            entities::query(api, request, access, table, &base).await
        }
        (
            method,
            Resource::Entity {
                table,
                partition_key,
                row_key,
            },
        ) => {
            let key = EntityKey::new(partition_key, row_key).map_err(Failure::invalid)?;
            match method.as_str() {
                "GET" => entities::get(api, request, access, table, key, &base).await,
                "DELETE" => entities::delete(api, request, access, table, key).await,
                "PUT" | "PATCH" | "MERGE" => {
                    entities::write(api, request, access, table, key).await
                }
                _ => Err(request.not_served("")),
            }
        }
        (&Method::POST, Resource::Batch) => batch::submit_batch(api, request, access, &base).await,
        _ => Err(request.not_served("")),
    }
}
