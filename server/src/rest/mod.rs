//! The Azure Table REST endpoint: the same engine served over Azure's HTTP protocol (path-style
//! URLs as the emulators use them, OData JSON), so that the Azure SDKs and tools work against
//! Trestle by changing their connection string. A second protocol layer beside `grpc`, above the
//! engine.
//!
//! Served: tables (create, list with continuation, get one, delete); entities (insert, update,
//! merge, insert-or-replace, insert-or-merge, delete, get, query with `$filter`, `$select`, `$top`
//! and continuation); `If-Match`; `Prefer: return-content|return-no-content`; the three JSON
//! metadata levels; Azure's error body and `x-ms-error-code`; `x-ms-request-id`, `x-ms-version` and
//! the client's request id echoed, `Keep-Alive`; service properties with CORS rules (preflights and
//! the answers' `Access-Control-*` headers), service statistics, and tables' stored access
//! policies. Auth: SharedKey and SharedKeyLite (the development key in open mode, the key file's
//! keys otherwise), service and account shared access signatures (mapped onto Trestle's scoped
//! grants, a stored access policy's fields included), and Trestle's own `Bearer` credentials.
//! Other requests answer `NotImplemented`.
//!
//! This module routes: `serve` takes each request through its life (authenticated from its line
//! and headers by `request`, admitted, its body read within bounds by `body`, its answer given
//! the headers every answer carries), and [`dispatch`] sends it to `tables`, `entities`, `batch`
//! or `settings`; a failure is answered by `failure` with the same client text gRPC sends.

mod apply;
mod batch;
mod body;
mod cors;
mod entities;
pub(crate) mod failure;
mod listener;
pub(crate) mod odata;
mod paths;
mod reply;
mod request;
mod sas;
mod serve;
mod settings;
mod shared_key;
mod tables;
mod tls;
mod version;
mod xml;

pub(crate) use self::listener::{app, start};

use axum::response::Response;
use http::Method;

use self::body::BodyLimits;
use self::failure::Failure;
use self::paths::Resource;
use self::request::Request;
use self::shared_key::AccountKeys;
use crate::auth::{Access, Authenticator};
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

/// What every request's handling shares: the engine's executor, the credentials it checks, and
/// the endpoint's limits.
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
    /// `https` when the endpoint serves TLS, else `http`: what its answers' links start with.
    scheme: &'static str,
}

/// One request being answered: what the endpoint shares, the request, what its credentials may
/// do, and the base URL (`http://host/account`) its answers' links start from.
struct Call<'a> {
    api: &'a RestApi,
    request: &'a Request,
    access: &'a Access,
    base: String,
}

/// What a handler gives: the response, or the failure to answer with.
type Answer = Result<Response, Failure>;

/// Answers an authenticated, admitted request whose body has been read.
async fn dispatch(
    api: &RestApi,
    request: &Request,
    access: &Access,
    account: &str,
    resource: Resource,
) -> Answer {
    let call = &Call {
        api,
        request,
        access,
        base: format!(
            "{}://{}/{account}",
            api.scheme,
            request.header("host").unwrap_or("localhost")
        ),
    };
    if let Some(setting) = request.param("comp") {
        return settings::serve(call, resource, &setting).await;
    }
    request.accepts_json()?;
    match (&request.method, resource) {
        (&Method::POST, Resource::Tables) => tables::create(call).await,
        (&Method::GET, Resource::Tables) => tables::list(call).await,
        (&Method::GET, Resource::Table(table)) => tables::get(call, table).await,
        (&Method::DELETE, Resource::Table(table)) => tables::delete(call, table).await,
        (&Method::POST, Resource::Entities(table)) => entities::insert(call, table).await,
        (&Method::GET, Resource::Entities(table)) => entities::query(call, table).await,
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
                "GET" => entities::get(call, table, key).await,
                "DELETE" => entities::delete(call, table, key).await,
                "PUT" | "PATCH" | "MERGE" => entities::write(call, table, key).await,
                _ => Err(request.not_served("")),
            }
        }
        (&Method::POST, Resource::Batch) => batch::submit_batch(call).await,
        _ => Err(request.not_served("")),
    }
}
