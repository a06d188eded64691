//! Calls whose answers keep their entities framed: the workloads that move many entities (page
//! and stream scans, index ranges) count what the server sent without decoding each entity's
//! properties, and the followers of change feeds read only each record's row key. The benchmark
//! client shares the cores of the server (and of the database) it measures; decoding every entity into maps cost it about as much CPU as the server spent reading
//! and encoding them, so those rows measured the client as much as the server. pgbench, the
//! PostgreSQL store's yardstick, does not convert the rows it fetches either.

use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::Bytes;
use tonic::transport::{Channel, Endpoint};
use tonic_prost::ProstCodec;
use trestle_proto::pb;

use crate::workloads::Client;

/// The largest answer either client takes: a page of large entities.
const MAX_ANSWER: usize = 16 << 20;

/// A page of `QueryEntities` (or a batch of `ScanEntities`, whose fields are a subset), each
/// entity left as its encoded bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct FramedPage {
    #[prost(bytes = "bytes", repeated, tag = "1")]
    pub(crate) entities: Vec<Bytes>,
    #[prost(string, tag = "2")]
    pub(crate) continuation_token: String,
    #[prost(message, optional, tag = "3")]
    pub(crate) stats: Option<pb::QueryStats>,
}

/// A batch of `ReadChanges`: of each record only its row key (the other fields are skipped).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct FramedChanges {
    #[prost(message, repeated, tag = "1")]
    pub(crate) changes: Vec<FramedChange>,
}

/// A `Change` of which only the row key is read.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct FramedChange {
    #[prost(string, tag = "3")]
    pub(crate) row_key: String,
}

/// Calls `QueryEntities`, `ScanEntities` and `ReadChanges`, answers framed.
#[derive(Debug, Clone)]
pub(crate) struct Framed {
    channel: Channel,
}

/// Connects to `endpoint`: the generated client and a framed one over the same channel.
pub(crate) async fn connect(endpoint: String) -> (Client, Framed) {
    let channel = Endpoint::from_shared(endpoint)
        .expect("a valid endpoint")
        .connect()
        .await
        .expect("connect to trestle");
    let client = Client::new(channel.clone()).max_decoding_message_size(MAX_ANSWER);
    (client, Framed { channel })
}

impl Framed {
    /// One page of `request`.
    pub(crate) async fn query(&self, request: pb::QueryEntitiesRequest) -> FramedPage {
        let path = PathAndQuery::from_static("/trestle.v1.TableService/QueryEntities");
        self.grpc()
            .await
            .unary(tonic::Request::new(request), path, ProstCodec::default())
            .await
            .expect("a page")
            .into_inner()
    }

    /// The stream of batches of `request`.
    pub(crate) async fn scan(
        &self,
        request: pb::QueryEntitiesRequest,
    ) -> tonic::Streaming<FramedPage> {
        let path = PathAndQuery::from_static("/trestle.v1.TableService/ScanEntities");
        self.grpc()
            .await
            .server_streaming(tonic::Request::new(request), path, ProstCodec::default())
            .await
            .expect("a scan")
            .into_inner()
    }

    /// The stream of batches of `request`, or the status that refused it.
    pub(crate) async fn changes(
        &self,
        request: pb::ReadChangesRequest,
    ) -> Result<tonic::Streaming<FramedChanges>, tonic::Status> {
        let path = PathAndQuery::from_static("/trestle.v1.TableService/ReadChanges");
        let stream = self
            .grpc()
            .await
            .server_streaming(tonic::Request::new(request), path, ProstCodec::default())
            .await?;
        Ok(stream.into_inner())
    }

    async fn grpc(&self) -> tonic::client::Grpc<Channel> {
        let mut grpc =
            tonic::client::Grpc::new(self.channel.clone()).max_decoding_message_size(MAX_ANSWER);
        grpc.ready().await.expect("the channel is ready");
        grpc
    }
}
