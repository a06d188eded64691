//! A REST request's life: its `x-ms-version` checked, a CORS preflight answered, else the request
//! authenticated from its line and headers, admitted, its body read within the
//! [`super::body::BodyLimits`] and only then dispatched; and every answer, a failure's too, given
//! the headers Azure's carry (`x-ms-request-id`, `x-ms-version`, the client's request id,
//! `Keep-Alive`, CORS) and counted in the metrics.

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::response::Response;
use http::{HeaderMap, Method, Uri};
use tracing::Instrument;

use super::failure::{error_response, Failure};
use super::reply::{header_value, request_id};
use super::request::{authenticate, Request};
use super::{cors, dispatch, paths, version, RestApi};
use crate::connections::http::Peer;
use crate::error::ErrorCode;

/// The app's one handler: a request from its line and headers to its answer.
pub(super) async fn handle(
    State(api): State<RestApi>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // Named only when metrics are kept or spans exported: no path parsed twice otherwise.
    let operation = match crate::telemetry::enabled() || crate::traces::enabled() {
        true => operation_name(&method, uri.path()),
        false => crate::telemetry::OTHER,
    };
    let span = crate::traces::request_span("rest", operation, &headers);
    let answer = answer(api, peer, operation, method, uri, headers, body);
    answer.instrument(span).await
}

/// [`handle`]'s answer to the request it named `operation`.
async fn answer(
    api: RestApi,
    peer: Peer,
    operation: &'static str,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = std::time::Instant::now();
    crate::telemetry::begun("rest");
    let mut request = Request {
        peer: peer.address.ip(),
        method,
        uri,
        headers,
        body: Bytes::new(),
        secondary_path: None,
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
    crate::telemetry::answered("rest", operation, code, started.elapsed());
    response
}

/// What a request asks, as the metrics name it: its method and the kind of resource it names
/// (`GET Entity`, `POST Batch`), from a closed set: a method the endpoint does not serve, or a
/// path that names no resource, is [`crate::telemetry::OTHER`] (no client can add a label).
fn operation_name(method: &Method, path: &str) -> &'static str {
    let Some((_, resource)) = paths::parse(path) else {
        return crate::telemetry::OTHER;
    };
    let resource = match resource {
        paths::Resource::Service => 0,
        paths::Resource::Tables => 1,
        paths::Resource::Batch => 2,
        paths::Resource::Table(_) => 3,
        paths::Resource::Entities(_) => 4,
        paths::Resource::Entity { .. } => 5,
    };
    const NAMES: [[&str; 6]; 8] = [
        [
            "GET Service",
            "GET Tables",
            "GET Batch",
            "GET Table",
            "GET Entities",
            "GET Entity",
        ],
        [
            "PUT Service",
            "PUT Tables",
            "PUT Batch",
            "PUT Table",
            "PUT Entities",
            "PUT Entity",
        ],
        [
            "POST Service",
            "POST Tables",
            "POST Batch",
            "POST Table",
            "POST Entities",
            "POST Entity",
        ],
        [
            "DELETE Service",
            "DELETE Tables",
            "DELETE Batch",
            "DELETE Table",
            "DELETE Entities",
            "DELETE Entity",
        ],
        [
            "MERGE Service",
            "MERGE Tables",
            "MERGE Batch",
            "MERGE Table",
            "MERGE Entities",
            "MERGE Entity",
        ],
        [
            "PATCH Service",
            "PATCH Tables",
            "PATCH Batch",
            "PATCH Table",
            "PATCH Entities",
            "PATCH Entity",
        ],
        [
            "HEAD Service",
            "HEAD Tables",
            "HEAD Batch",
            "HEAD Table",
            "HEAD Entities",
            "HEAD Entity",
        ],
        [
            "OPTIONS Service",
            "OPTIONS Tables",
            "OPTIONS Batch",
            "OPTIONS Table",
            "OPTIONS Entities",
            "OPTIONS Entity",
        ],
    ];
    let verb = match method.as_str() {
        "GET" => 0,
        "PUT" => 1,
        "POST" => 2,
        "DELETE" => 3,
        "MERGE" => 4,
        "PATCH" => 5,
        "HEAD" => 6,
        "OPTIONS" => 7,
        _ => return crate::telemetry::OTHER,
    };
    NAMES[verb][resource]
}

/// Serves one request: authenticated from its line and headers, admitted, and only then its
/// body read (within [`super::body::BodyLimits`]) and the request dispatched.
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
