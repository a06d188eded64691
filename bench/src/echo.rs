//! The in-run gRPC ceiling: a bare tonic echo server (unary and streaming) on loopback, served by
//! `trestle-bench --serve-echo` in a process of its own.

use std::net::SocketAddr;
use std::pin::Pin;

use crate::bench_pb::echo_server::{Echo, EchoServer};
use crate::bench_pb::{EchoMessage, EchoStreamRequest};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

#[derive(Debug, Default)]
struct EchoService;

#[tonic::async_trait]
impl Echo for EchoService {
    async fn unary(&self, request: Request<EchoMessage>) -> Result<Response<EchoMessage>, Status> {
        Ok(Response::new(request.into_inner()))
    }

    type StreamStream = Pin<Box<dyn Stream<Item = Result<EchoMessage, Status>> + Send>>;

    async fn stream(
        &self,
        request: Request<EchoStreamRequest>,
    ) -> Result<Response<Self::StreamStream>, Status> {
        let EchoStreamRequest { message, count } = request.into_inner();
        let message = message.unwrap_or_default();
        let stream = tokio_stream::iter((0..count).map(move |_| Ok(message.clone())));
        Ok(Response::new(Box::pin(stream)))
    }
}

/// Starts the echo server on an ephemeral loopback port; it runs until the process exits.
pub(crate) async fn start() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind echo");
    let addr = listener.local_addr().expect("echo addr");
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(EchoServer::new(EchoService))
            .serve_with_incoming(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            )
            .await
            .expect("echo server");
    });
    addr
}
