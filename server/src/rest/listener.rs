//! Starting and stopping the endpoint: its listener, the connections it keeps within the limits,
//! and the app every request goes to ([`super::serve::handle`]).

use super::body::{self, BodyLimits};
use super::reply::header_value;
use super::serve::handle;
use super::shared_key::AccountKeys;
use super::RestApi;
use crate::auth::Authenticator;
use crate::config::{Limits, TlsIdentity};
use crate::connections::http::HttpServer;
use crate::connections::{ConnectionTimeouts, Connections};
use crate::executor::Executor;

/// Starts serving the REST endpoint on `listener`, if there is one, within `limits` (open
/// connections, idle time, request size).
pub(crate) fn start(
    listener: Option<std::net::TcpListener>,
    executor: Executor,
    authenticator: Authenticator,
    limits: &Limits,
    tls: Option<&TlsIdentity>,
) -> Result<Option<HttpServer>, std::io::Error> {
    let Some(listener) = listener else {
        return Ok(None);
    };
    let acceptor = tls.map(super::tls::acceptor).transpose()?;
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    tracing::info!(rest_endpoint = %listener.local_addr()?, tls = acceptor.is_some(), "serving the Azure Table REST endpoint");
    let app = app(executor, authenticator, limits, acceptor.is_some());
    let connections = Connections::new(
        limits.max_connections,
        ConnectionTimeouts {
            handshake: None,
            idle: limits.idle_timeout,
        },
    );
    let tls = acceptor.map(|acceptor| (acceptor, limits.handshake_timeout));
    let server = HttpServer::start("rest", listener, connections, tls, app);
    Ok(Some(server))
}

/// The endpoint's app: every request through [`handle`], within `limits`' body bounds; `secure`
/// when its answers' links are `https`. The console serves the same app under `/api`.
pub(crate) fn app(
    executor: Executor,
    authenticator: Authenticator,
    limits: &Limits,
    secure: bool,
) -> axum::Router {
    let keys = AccountKeys::of(&authenticator);
    axum::Router::new().fallback(handle).with_state(RestApi {
        executor,
        authenticator,
        keys,
        bodies: BodyLimits::new(
            limits.max_message_bytes.min(body::AZURE_MAX_BODY_BYTES),
            limits.rest_body_buffer_bytes,
            limits.body_timeout,
        ),
        max_clock_skew: limits.max_clock_skew,
        scheme: if secure { "https" } else { "http" },
        keep_alive: header_value(&format!("timeout={}", limits.idle_timeout.as_secs())),
    })
}
