//! A REST request's life: its `x-ms-version` checked, a CORS preflight answered, else the request
//! authenticated from its line and headers, admitted, its body read within the
//! [`super::body::BodyLimits`] and only then dispatched; and every answer, a failure's too, given
//! the headers Azure's carry (`x-ms-request-id`, `x-ms-version`, the client's request id,
//! `Keep-Alive`, CORS) and counted in the metrics.

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::response::Response;
use http::{HeaderMap, Method, Uri};

use super::connections::Peer;
use super::failure::{error_response, Failure};
use super::reply::{header_value, request_id};
use super::request::{authenticate, Request};
use super::{cors, dispatch, paths, version, RestApi};
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
