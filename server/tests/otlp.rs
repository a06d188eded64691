//! OpenTelemetry traces of the built binary: with `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at an
//! OTLP/gRPC receiver this test starts, a gRPC call and a REST request that carry a W3C
//! `traceparent` are exported as a request span (named by its operation) continuing the caller's trace, an `engine`
//! span under it (operation and table) and a `store` span under that; no span carries a key or
//! a value. The server is stopped with SIGTERM, which sends the last batch.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use support::{free_port, http, ServerProcess};
use trestle_proto::pb;

/// Keeps every span it is sent.
#[derive(Default, Clone)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The value of `span`'s attribute `key`, as text.
fn attribute(span: &Span, key: &str) -> Option<String> {
    let value = span
        .attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?;
    match value.value.as_ref()? {
        AnyValue::StringValue(text) => Some(text.clone()),
        AnyValue::IntValue(n) => Some(n.to_string()),
        AnyValue::BoolValue(b) => Some(b.to_string()),
        other => Some(format!("{other:?}")),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
const REST_TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const REST_CALLER_SPAN: &str = "b7ad6b7169203331";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_exported_as_spans_continuing_the_callers_trace() {
    let receiver = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector = listener.local_addr().unwrap();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let serving = tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(receiver.clone()))
        .serve_with_incoming(incoming);
    tokio::spawn(serving);

    let data_dir = tempfile::tempdir().unwrap();
    let rest = free_port();
    let endpoint = format!("http://{collector}");
    let mut server = ServerProcess::start_with_env(
        data_dir.path(),
        &["--rest-listen", &rest],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let mut client = server.client().await;
    client
        .create_table(pb::CreateTableRequest {
            table: "Traced".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut insert = tonic::Request::new(pb::InsertEntityRequest {
        table: "Traced".into(),
        entity: Some(support::entity(
            "secret-pk",
            "secret-rk",
            &[("Secret", 4242)],
        )),
        ..Default::default()
    });
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    insert
        .metadata_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    client.insert_entity(insert).await.unwrap();
    let answer = http(
        &rest,
        &format!(
            "GET /devstoreaccount1/Traced(PartitionKey='secret-pk',RowKey='secret-rk') HTTP/1.1\r\n\
             Host: x\r\nx-ms-version: 2019-02-02\r\nAccept: application/json\r\n\
             traceparent: 00-{REST_TRACE_ID}-{REST_CALLER_SPAN}-01\r\nConnection: close\r\n\r\n"
        ),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // SIGTERM: the server stops cleanly and sends what it still holds.
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let exit = tokio::task::block_in_place(|| server.child.wait()).unwrap();
    assert!(exit.success(), "{exit:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let spans = loop {
        let spans = receiver.spans.lock().unwrap().clone();
        let requests = spans
            .iter()
            .filter(|s| attribute(s, "rpc.system").is_some());
        let done = requests.count() >= 3;
        if done || std::time::Instant::now() > deadline {
            break spans;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // The gRPC call: its request span continues the caller's trace.
    // A request span is named by its operation.
    let request = spans
        .iter()
        .find(|s| s.name == "InsertEntity")
        .unwrap_or_else(|| panic!("no InsertEntity request span in {spans:#?}"));
    assert_eq!(
        attribute(request, "operation").as_deref(),
        Some("InsertEntity")
    );
    assert_eq!(hex(&request.trace_id), TRACE_ID);
    assert_eq!(hex(&request.parent_span_id), CALLER_SPAN);
    assert_eq!(attribute(request, "rpc.system").as_deref(), Some("grpc"));
    let children_of = |parent: &Span, name: &str| -> Vec<Span> {
        spans
            .iter()
            .filter(|s| s.name == name && s.parent_span_id == parent.span_id)
            .cloned()
            .collect()
    };
    let engine = children_of(request, "engine");
    assert_eq!(engine.len(), 1, "{spans:#?}");
    assert_eq!(attribute(&engine[0], "operation").as_deref(), Some("write"));
    assert_eq!(attribute(&engine[0], "table").as_deref(), Some("Traced"));
    let store = children_of(&engine[0], "store");
    assert!(
        !store.is_empty(),
        "no store span under the engine's: {spans:#?}"
    );
    assert!(attribute(&store[0], "mode").is_some());

    // The REST request: its own trace, the same shape.
    let rest_request = spans
        .iter()
        .find(|s| hex(&s.trace_id) == REST_TRACE_ID && s.name == "GET Entity")
        .unwrap_or_else(|| panic!("no REST request span in {spans:#?}"));
    assert_eq!(hex(&rest_request.parent_span_id), REST_CALLER_SPAN);
    assert_eq!(
        attribute(rest_request, "rpc.system").as_deref(),
        Some("rest")
    );
    assert_eq!(
        attribute(rest_request, "operation").as_deref(),
        Some("GET Entity")
    );
    let rest_engine = children_of(rest_request, "engine");
    assert_eq!(
        attribute(&rest_engine[0], "operation").as_deref(),
        Some("get")
    );
    assert!(!children_of(&rest_engine[0], "store").is_empty());

    // Tables and operations only: no key or value of an entity in any span.
    for span in &spans {
        for kv in &span.attributes {
            let shown = format!("{:?}", kv.value);
            assert!(
                !shown.contains("secret") && !shown.contains("4242"),
                "span {} carries {}={shown}",
                span.name,
                kv.key
            );
        }
    }
}
