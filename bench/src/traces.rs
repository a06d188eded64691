//! `--tracing-cost`'s receiver: an OTLP/gRPC trace collector served in this process, which
//! counts the spans a server exports to it and keeps none.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

/// Counts the spans it is sent.
#[derive(Default, Clone)]
struct Counter {
    spans: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl TraceService for Counter {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans: usize = (request.into_inner().resource_spans.iter())
            .flat_map(|resource| &resource.scope_spans)
            .map(|scope| scope.spans.len())
            .sum();
        self.spans.fetch_add(spans as u64, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A collector serving on loopback.
pub(crate) struct Collector {
    /// `http://` and the address it listens on, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub(crate) endpoint: String,
    spans: Arc<AtomicU64>,
}

impl Collector {
    /// Serves a collector on a free loopback port, for as long as the runtime runs.
    pub(crate) async fn serve() -> Collector {
        let counter = Counter::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the collector");
        let endpoint = format!("http://{}", listener.local_addr().expect("its address"));
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let serving = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(counter.clone()))
            .serve_with_incoming(incoming);
        tokio::spawn(serving);
        Collector {
            endpoint,
            spans: counter.spans,
        }
    }

    /// The spans received so far.
    pub(crate) fn spans(&self) -> u64 {
        self.spans.load(Ordering::Relaxed)
    }
}
