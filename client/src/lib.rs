//! Rust SDK for Trestle, the partitioned entity store with Azure Table semantics.
//!
//! For now this crate offers a connected gRPC client over the wire contract; the typed SDK
//! (entities through serde, query streams, transaction builders) builds on it.

pub use trestle_proto::pb;

/// The generated `trestle.v1.TableService` client over a tonic channel.
pub type RawClient = pb::table_service_client::TableServiceClient<tonic::transport::Channel>;

/// Connects to a Trestle server, e.g. `http://127.0.0.1:50051`.
pub async fn connect(endpoint: impl Into<String>) -> Result<RawClient, tonic::transport::Error> {
    RawClient::connect(endpoint.into()).await
}
