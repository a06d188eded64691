//! The metrics endpoint (`--metrics-listen`): `GET /metrics` answers what
//! [`crate::telemetry`] keeps, in Prometheus' text format, on a listener of its own within the
//! limits every HTTP server of Trestle keeps ([`crate::connections::http`]): at most
//! [`MAX_SCRAPE_CONNECTIONS`] open, each closed after [`SCRAPE_IDLE_TIMEOUT`] without a request,
//! so a client holding connections open cannot grow the server's sockets or tasks. The label
//! sets it renders are closed ([`crate::telemetry`]): nothing a client sends becomes a series.

use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::connections::http::HttpServer;
use crate::connections::{ConnectionTimeouts, Connections};

/// Connections the metrics listener keeps open at once (a scraper opens one or two).
pub(crate) const MAX_SCRAPE_CONNECTIONS: usize = 64;
/// How long a scrape connection is kept without a request.
pub(crate) const SCRAPE_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the histograms' samples are folded into their buckets.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The metrics endpoint, until [`Scrape::stop`].
pub(crate) struct Scrape {
    server: HttpServer,
    upkeep: tokio::task::JoinHandle<()>,
}

impl Scrape {
    /// Installs the recorder and serves `/metrics` on `listener`.
    pub(crate) fn serve(listener: std::net::TcpListener) -> std::io::Result<Scrape> {
        crate::telemetry::install().map_err(std::io::Error::other)?;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        tracing::info!(metrics_endpoint = %listener.local_addr()?, "serving /metrics");
        let app = axum::Router::new().route("/metrics", get(metrics));
        let connections = Connections::new(
            MAX_SCRAPE_CONNECTIONS,
            ConnectionTimeouts {
                handshake: None,
                idle: SCRAPE_IDLE_TIMEOUT,
            },
        );
        let server = HttpServer::start("metrics", listener, connections, None, app);
        let upkeep = tokio::spawn(async {
            let mut every = tokio::time::interval(UPKEEP_EVERY);
            loop {
                every.tick().await;
                crate::telemetry::run_upkeep();
            }
        });
        Ok(Scrape { server, upkeep })
    }

    /// Stops serving and closes the endpoint's connections.
    pub(crate) async fn stop(self) {
        self.upkeep.abort();
        self.server.stop().await;
    }
}

/// `GET /metrics`.
async fn metrics() -> axum::response::Response {
    match crate::telemetry::render() {
        Some(text) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "metrics are not kept\n").into_response(),
    }
}
