//! HTTP probes for orchestrators (Kubernetes' `livenessProbe` and `readinessProbe`), on a listener
//! of their own (`--health-listen`): `GET /healthz` answers `200 ok` while the process serves;
//! `GET /readyz` answers `200 ready` while the store answers (one short read of the service's
//! settings, within [`READY_WITHIN`]) and the server is not shutting down, else `503` saying which.
//! Neither needs a credential nor reveals anything of the data. The listener keeps at most
//! [`MAX_PROBE_CONNECTIONS`] open, each closed after [`PROBE_IDLE_TIMEOUT`] without a request
//! ([`crate::connections::http`]): a client holding connections open can delay a probe by no
//! more than that.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::connections::http::HttpServer;
use crate::connections::{ConnectionTimeouts, Connections};
use crate::executor::Executor;

/// How long the store has to answer a readiness probe.
const READY_WITHIN: Duration = Duration::from_secs(2);
/// Connections the probes' listener keeps open at once (a kubelet opens one per probe).
pub(crate) const MAX_PROBE_CONNECTIONS: usize = 64;
/// How long a probe connection is kept without a request.
pub(crate) const PROBE_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the probes look at.
#[derive(Clone)]
struct Probed {
    executor: Executor,
    shutting_down: Arc<AtomicBool>,
}

/// Serves the probes on `listener` until stopped; `shutting_down` turns readiness off.
pub(crate) fn serve(
    listener: std::net::TcpListener,
    executor: Executor,
    shutting_down: Arc<AtomicBool>,
) -> std::io::Result<HttpServer> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    tracing::info!(health_endpoint = %listener.local_addr()?, "serving /healthz and /readyz");
    let app = axum::Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(Probed {
            executor,
            shutting_down,
        });
    let connections = Connections::new(
        MAX_PROBE_CONNECTIONS,
        ConnectionTimeouts {
            handshake: None,
            idle: PROBE_IDLE_TIMEOUT,
        },
    );
    Ok(HttpServer::start(
        "probes",
        listener,
        connections,
        None,
        app,
    ))
}

/// `/readyz`: whether the server takes requests now.
async fn ready(State(probed): State<Probed>) -> (StatusCode, &'static str) {
    if probed.shutting_down.load(Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n");
    }
    let read = probed
        .executor
        .blocking(|engine| engine.service_properties());
    match tokio::time::timeout(READY_WITHIN, read).await {
        Ok(Ok(_)) => (StatusCode::OK, "ready\n"),
        Ok(Err(_)) | Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the store does not answer\n",
        ),
    }
}
