//! Trestle's server: a durable partitioned entity store with the data model and guarantees of
//! Azure Table Storage, served over gRPC.
//!
//! Layers, each importing only those below it:
//! - [`model`]: tables, keys, entities, values, ETags and operations, with Azure's rules (pure);
//! - [`storage`]: sled, the single commit path, partition locks, group commit, reclamation;
//! - [`query`], [`transaction`]: query and transaction rules;
//! - [`engine`]: Azure Table semantics over the store (queries run by `scan`), with
//!   [`error::TableError`];
//! - [`auth`]: account keys and scoped tokens checked against what a request touches;
//! - [`executor`]: how every protocol runs storage work (inline or on the blocking pool) and
//!   waits for a write to be durable;
//! - [`grpc`]: the tonic service, converting requests and mapping errors to `tonic::Status`;
//! - [`rest`]: the Azure Table REST endpoint (axum), a second protocol over the same engine.

pub mod across;
pub mod admission;
pub mod auth;
pub mod backup;
pub mod bulk_delete;
pub mod config;
mod connections;
mod console;
pub mod consumers;
pub mod engine;
pub mod error;
pub mod executor;
mod feed_filter;
mod feed_watch;
pub mod grpc;
mod housekeeping;
pub mod idempotency;
pub mod model;
pub mod oidc;
mod probes;
pub mod query;
pub mod rest;
mod routes;
pub mod scan;
mod scrape;
mod settings;
mod shutdown;
mod startup;
pub mod storage;
pub mod telemetry;
pub mod traces;
pub mod transaction;

use std::future::Future;
use std::sync::Arc;

pub use config::{Args, Config};
pub use engine::Engine;
pub use startup::{check_exposure, ServeError};

/// What [`serve`] listens on: the gRPC service's listener and, to serve Azure's REST protocol
/// too, the REST endpoint's (bound before serving, by `--rest-listen` or by a test that needs
/// its address first).
#[derive(Debug)]
pub struct Listeners {
    /// Where `trestle.v1.TableService`, health and reflection are served.
    pub grpc: tokio::net::TcpListener,
    /// Where the Azure Table REST endpoint is served, if it is.
    pub rest: Option<std::net::TcpListener>,
}

impl From<tokio::net::TcpListener> for Listeners {
    /// The gRPC service alone.
    fn from(grpc: tokio::net::TcpListener) -> Listeners {
        Listeners { grpc, rest: None }
    }
}

/// Serves `trestle.v1.TableService`, gRPC health and server reflection (v1 and v1alpha), and
/// the REST endpoint if it has a listener, until `shutdown` completes; then finishes in-flight
/// requests (for at most `config.shutdown_grace`, after which it closes the connections still
/// open), flushes, and returns once no connection is left.
pub async fn serve(
    listeners: impl Into<Listeners>,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let Listeners {
        grpc: listener,
        rest: rest_listener,
    } = listeners.into();
    let addr = listener.local_addr()?;
    check_exposure(addr, &config)?;
    config.authenticator.start().await?;
    if config.authenticator.is_open() {
        tracing::warn!(%addr, "OPEN MODE: no key file, every request has full access; fine for local development only");
    }
    // Before the store opens, so that every use of it is counted (a connection lent before
    // would be returned uncounted).
    if config.metrics_listen.is_some() || config.console_listen.is_some() {
        telemetry::install().map_err(std::io::Error::other)?;
    }
    let engine = {
        let store = config.store.clone();
        tokio::task::spawn_blocking(move || Engine::open(&store)).await??
    }
    .with_work_budget(model::WorkBudget::new(config.limits.work_budget))
    .with_aggregate_examined_per_call(config.limits.aggregate_examined_per_call)
    .with_idempotency_window(config.limits.idempotency_window_seconds);
    let engine = Arc::new(engine);
    let housekeeping = housekeeping::run_in_background(engine.clone());
    let executor = executor::Executor::new(engine.clone(), config.limits.max_in_flight)
        .with_streams(
            config.limits.max_open_streams,
            config.limits.max_streams_per_credential,
        );
    let rest = rest::start(
        rest_listener,
        executor.clone(),
        config.authenticator.clone(),
        &config.limits,
        config.rest_tls.as_ref(),
    )?;
    let shutting_down = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probes = match config
        .health_listen
        .as_ref()
        .map(|listener| listener.try_clone())
    {
        Some(listener) => Some(probes::serve(
            listener?,
            executor.clone(),
            shutting_down.clone(),
        )?),
        None => None,
    };
    let scrape = match config.metrics_listen.as_ref().map(|l| l.try_clone()) {
        Some(listener) => Some(scrape::Scrape::serve(listener?)?),
        None => None,
    };
    let console = match config.console_listen.as_ref().map(|l| l.try_clone()) {
        Some(listener) => Some(console::serve(
            listener?,
            executor.clone(),
            config.authenticator.clone(),
            &config.limits,
        )?),
        None => None,
    };
    let routes = routes::routes(executor, &config).await?;
    let connections = connections::Connections::for_limits(&config.limits, config.tls.is_some());
    let incoming = connections.accept(listener);
    let store = config.store.describe();
    tracing::info!(%addr, %store, tls = config.tls.is_some(), "serving");
    let shutdown = async move {
        shutdown.await;
        shutting_down.store(true, std::sync::atomic::Ordering::Release);
    };
    let (shutdown, grace_over) = shutdown::with_grace(shutdown, config.shutdown_grace);
    let serving = routes::transport(&config)?
        .layer(grpc::EdgeLayer)
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, shutdown);
    let served = tokio::select! {
        served = serving => served,
        () = grace_over => Ok(()),
    };
    // Also when the transport failed: no connection outlives `serve`.
    connections.close_all().await;
    if let Some(rest) = rest {
        rest.stop().await;
    }
    housekeeping.abort();
    if let Some(probes) = probes {
        probes.stop().await;
    }
    if let Some(scrape) = scrape {
        scrape.stop().await;
    }
    if let Some(console) = console {
        console.stop().await;
    }
    served?;
    tracing::info!("stopped accepting; flushing");
    tokio::task::spawn_blocking(move || engine.flush()).await??;
    Ok(())
}
