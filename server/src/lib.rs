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
//! - [`grpc`]: the tonic service, converting requests and mapping errors to `tonic::Status`.

pub mod auth;
pub mod config;
mod connections;
pub mod engine;
pub mod error;
pub mod grpc;
pub mod model;
pub mod query;
pub mod scan;
pub mod storage;
pub mod transaction;

use std::future::Future;
use std::sync::Arc;

pub use config::{Args, Config};
pub use engine::Engine;
use tokio_stream::StreamExt;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::TcpIncoming;
use trestle_proto::pb::table_service_server::TableServiceServer;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The store could not be opened or flushed.
    #[error("store: {0}")]
    Store(#[from] error::TableError),
    /// Reflection could not load the descriptor sets.
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The transport failed.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The listener is unusable.
    #[error("listener: {0}")]
    Listener(#[from] std::io::Error),
    /// A startup task failed.
    #[error("startup: {0}")]
    Startup(#[from] tokio::task::JoinError),
    /// Open mode (no key file) on an address others can reach.
    #[error("refusing to serve without a key file on {0}, which is not a loopback address: pass --key-file (or --insecure-open to accept that anyone reaching it can do anything)")]
    OpenModeExposed(std::net::SocketAddr),
}

/// Refuses open mode (no keys) on an address other hosts can reach, unless `insecure_open`.
pub fn check_exposure(addr: std::net::SocketAddr, config: &Config) -> Result<(), ServeError> {
    if config.authenticator.is_open() && !addr.ip().is_loopback() && !config.insecure_open {
        return Err(ServeError::OpenModeExposed(addr));
    }
    Ok(())
}

/// Serves `trestle.v1.TableService`, gRPC health and server reflection (v1 and v1alpha) on
/// `listener` until `shutdown` completes; then finishes in-flight requests (for at most
/// `config.shutdown_grace`, after which it closes the connections still open), flushes, and
/// returns once no connection is left.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let addr = listener.local_addr()?;
    check_exposure(addr, &config)?;
    if config.authenticator.is_open() {
        tracing::warn!(%addr, "OPEN MODE: no key file, every request has full access; fine for local development only");
    }
    let engine = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || Engine::open(&config.data_dir, config.store)).await??
    };
    let engine = Arc::new(engine);
    let api = grpc::TableApi::new(engine.clone(), config.authenticator.clone(), &config.limits);
    let table_service =
        TableServiceServer::new(api).max_decoding_message_size(config.limits.max_message_bytes);
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<TableServiceServer<grpc::TableApi>>()
        .await;
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(trestle_proto::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let introspection = grpc::introspection_guard(
        config
            .protect_introspection
            .then(|| config.authenticator.clone()),
    );
    let limits = &config.limits;
    let mut server = tonic::transport::Server::builder()
        .max_concurrent_streams(Some(limits.max_concurrent_streams))
        .http2_keepalive_interval(Some(limits.keepalive_interval))
        .http2_keepalive_timeout(Some(limits.keepalive_timeout));
    if let Some(identity) = &config.tls {
        let identity = tonic::transport::Identity::from_pem(&identity.cert_pem, &identity.key_pem);
        server = server.tls_config(
            tonic::transport::ServerTlsConfig::new()
                .identity(identity)
                .timeout(limits.handshake_timeout),
        )?;
    }
    let mut server = server.layer(grpc::EdgeLayer);
    tracing::info!(%addr, data_dir = %config.data_dir.display(), tls = config.tls.is_some(), "serving");
    // After `shutdown`, open calls get `shutdown_grace` to finish; a call that would outlast it (a
    // stream whose reader stopped reading, say) must not keep the process from exiting.
    let (shutdown_begun, grace_started) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        shutdown.await;
        let _ = shutdown_begun.send(());
    };
    let grace = config.shutdown_grace;
    let grace_over = async move {
        if grace_started.await.is_ok() {
            tokio::time::sleep(grace).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let timeouts = connections::ConnectionTimeouts {
        // With TLS, tonic times the TLS handshake and sees the HTTP/2 preface inside it.
        handshake: config.tls.is_none().then_some(limits.handshake_timeout),
        idle: limits.idle_timeout,
    };
    let connections = connections::Connections::new(limits.max_connections, timeouts);
    let incoming = TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .filter_map(|accepted| match accepted {
            Ok(connection) => {
                let remote = connection.peer_addr().ok();
                connections.track(connection, remote).map(Ok)
            }
            Err(error) => Some(Err(error)),
        });
    let serving = server
        .add_service(table_service)
        .add_service(InterceptedService::new(
            health_service,
            introspection.clone(),
        ))
        .add_service(InterceptedService::new(
            reflection().build_v1()?,
            introspection.clone(),
        ))
        .add_service(InterceptedService::new(
            reflection().build_v1alpha()?,
            introspection,
        ))
        .serve_with_incoming_shutdown(incoming, shutdown);
    let served = tokio::select! {
        served = serving => served,
        () = grace_over => {
            tracing::warn!(grace_secs = grace.as_secs_f64(), "calls still open after the shutdown grace period; closing their connections");
            Ok(())
        }
    };
    // Also when the transport failed: no connection outlives `serve`.
    connections.close_all().await;
    served?;
    tracing::info!("stopped accepting; flushing");
    tokio::task::spawn_blocking(move || engine.flush()).await??;
    Ok(())
}
