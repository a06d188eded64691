//! What `serve` serves and how: the services (the table service, health, reflection) and the
//! transport they run on (HTTP/2 limits, keepalive, TLS).

use tonic::service::interceptor::InterceptedService;
use tonic::service::Routes;
use tonic::transport::Server;

use crate::config::Config;
use crate::executor::Executor;
use crate::grpc;
use crate::grpc::service::table_service_server::TableServiceServer;
use crate::startup::ServeError;

/// The services over the engine `executor` runs: `trestle.v1.TableService`, gRPC health
/// (reporting it serving) and server reflection (v1 and v1alpha), the last two behind a
/// credential if configured so.
pub(crate) async fn routes(executor: Executor, config: &Config) -> Result<Routes, ServeError> {
    let api = grpc::TableApi::new(executor, config.authenticator.clone(), &config.limits);
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
    let mut routes = Routes::builder();
    routes
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
        ));
    Ok(routes.routes())
}

/// The HTTP/2 transport: calls per connection, keepalive pings, and TLS (its handshake timed).
pub(crate) fn transport(config: &Config) -> Result<Server, ServeError> {
    let limits = &config.limits;
    let server = Server::builder()
        .max_concurrent_streams(Some(limits.max_concurrent_streams))
        .http2_keepalive_interval(Some(limits.keepalive_interval))
        .http2_keepalive_timeout(Some(limits.keepalive_timeout));
    let Some(identity) = &config.tls else {
        return Ok(server);
    };
    let identity = tonic::transport::Identity::from_pem(&identity.cert_pem, &identity.key_pem);
    Ok(server.tls_config(
        tonic::transport::ServerTlsConfig::new()
            .identity(identity)
            .timeout(limits.handshake_timeout),
    )?)
}
