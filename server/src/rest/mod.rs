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
mod odata;
mod paths;
mod reply;
mod request;
mod sas;
mod settings;
mod shared_key;
mod tables;
mod xml;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::response::Response;
use http::{HeaderMap, Method, Uri};

use self::body::BodyLimits;
use self::connections::{Accepted, Peer};
use self::failure::{error_response, not_implemented, Failure};
use self::paths::Resource;
use self::reply::{header_value, request_id};
use self::request::{authenticate, Request};
use self::shared_key::AccountKeys;
use crate::auth::{Access, Authenticator};
use crate::config::Limits;
pub use crate::config::RestListener;
use crate::connections::{ConnectionTimeouts, Connections};
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

/// What the secondary location's account name adds to the primary's.
const SECONDARY_SUFFIX: &str = "-secondary";

/// The service version the endpoint speaks.
const VERSION: &str = "2019-02-02";

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
            limits.max_message_bytes.min(body::AZURE_MAX_BODY_BYTES),
            limits.rest_body_buffer_bytes,
            limits.body_timeout,
        ),
        max_clock_skew: limits.max_clock_skew,
        keep_alive: header_value(&format!("timeout={}", limits.idle_timeout.as_secs())),
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
    let version = request_version(&request);
    let served = match &version {
        Err(failure) => Err(Failure::of(ErrorCode::InvalidHeaderValue, failure.clone())),
        Ok(_) if request.method == Method::OPTIONS => cors::preflight(&api, &request).await,
        Ok(_) => serve_request(&api, &mut request, body).await,
    };
    let mut response = match served {
        Ok(response) => response,
        Err(failure) => error_response(&request, failure),
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
        header_value(version.as_deref().unwrap_or(VERSION)),
    );
    if let Some(client_id) = request.headers.get("x-ms-client-request-id") {
        out.insert("x-ms-client-request-id", client_id.clone());
    }
    // Last, so that the headers a page may read are all there.
    if let (Some(origin), false) = (request.header("origin"), request.method == Method::OPTIONS) {
        cors::allow(&api, origin, request.method.as_str(), &mut response).await;
    }
    response
}

/// The first service version, Azure's `2009-09-19`.
const FIRST_VERSION: &str = "2009-09-19";

/// The service version a request asks for (`x-ms-version`), answered back as the version served:
/// `None` when it names none; refused when it is not a version (`YYYY-MM-DD`), or one before the
/// first or after today. (Azure also refuses a well-formed date that is no version of its own;
/// the endpoint does not keep Azure's list, and serves those as its own version.)
fn request_version(request: &Request) -> Result<Option<String>, String> {
    let Some(version) = request.header("x-ms-version") else {
        return Ok(None);
    };
    let well_formed = version.len() == 10
        && version.char_indices().all(|(at, c)| match at {
            4 | 7 => c == '-',
            _ => c.is_ascii_digit(),
        });
    let today = crate::model::Ticks::now().to_rfc3339();
    if well_formed && version >= FIRST_VERSION && version <= &today[..10] {
        Ok(Some(version.to_owned()))
    } else {
        Err(format!(
            "x-ms-version {} is not a version of the service (this endpoint serves {VERSION})",
            crate::model::quoted(version)
        ))
    }
}

/// Serves one request: authenticated from its line and headers, admitted, and only then its
/// body read (within [`BodyLimits`]) and the request dispatched.
async fn serve_request(
    api: &RestApi,
    request: &mut Request,
    body: Body,
) -> Result<Response, Failure> {
    to_primary_location(request)?;
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

/// Turns a request to the secondary location (`/<account>-secondary/<account>/...`, where the
/// SDKs send what Azure serves only there: statistics) into the same request to the primary: the
/// endpoint is both locations of its one account, and the SDKs sign the primary's URL.
fn to_primary_location(request: &mut Request) -> Result<(), Failure> {
    let secondary = format!("/{ACCOUNT}{SECONDARY_SUFFIX}");
    let Some(rest) = request.uri.path().strip_prefix(&secondary) else {
        return Ok(());
    };
    if request.param("comp").as_deref() != Some("stats") {
        return Err(Failure::of(
            ErrorCode::InvalidUri,
            "the secondary location serves the service's statistics only",
        ));
    }
    let primary = format!("/{ACCOUNT}");
    let path = match rest.strip_prefix(&primary) {
        Some(_) => rest.to_owned(),
        None => format!("{primary}{rest}"),
    };
    let query = request
        .uri
        .query()
        .map_or(String::new(), |q| format!("?{q}"));
    request.uri = format!("{path}{query}")
        .parse()
        .map_err(|_| Failure::of(ErrorCode::InvalidUri, "the request's URL is not valid"))?;
    Ok(())
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
                _ => Err(not_implemented(request, "")),
            }
        }
        (&Method::POST, Resource::Batch) => batch::submit_batch(api, request, access, &base).await,
        _ => Err(not_implemented(request, "")),
    }
}
