//! OpenTelemetry traces, named in one place: when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, the
//! binary exports three spans per request over OTLP/gRPC ([`otlp_layer`]): the request's, named
//! by its operation (made by the protocol edge, continuing the caller's W3C `traceparent` from
//! gRPC metadata or the REST headers), `engine` (the executor's job for it: its operation and
//! table) and `store` (the store's work, inline, on the blocking pool or awaited). Their
//! attributes come from closed sets and table names: never a key or a value. Without the
//! variable no layer takes these spans, so none is made ([`tracing`]'s per-callsite interest).
//! It names nothing of the crate, so that every layer may open a span (it sits at the bottom,
//! beside `telemetry`).

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The target of every exported span: the log's filter turns it off, the exporter's on.
pub const TARGET: &str = "trestle::otel";
/// The variable that turns export on.
pub const ENDPOINT_VARIABLE: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// The span of one request of `protocol` (`grpc`, `rest`) doing `operation` (a name of the
/// metrics' closed set), a child of the caller's span if `headers` carry a valid `traceparent`.
pub fn request_span(
    protocol: &'static str,
    operation: &'static str,
    headers: &http::HeaderMap,
) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "request",
        otel.name = operation,
        otel.kind = "server",
        rpc.system = protocol,
        operation,
    );
    if !span.is_disabled() && headers.contains_key("traceparent") {
        let parent = TraceContextPropagator::new().extract(&Headers(headers));
        let _ = span.set_parent(parent);
    }
    span
}

/// Whether spans are exported: callers skip naming what only a span would use otherwise.
pub fn enabled() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::INFO)
}

/// The span of the executor's job `operation` on `table` (empty when it names none).
pub fn engine_span(operation: &'static str, table: &str) -> Span {
    tracing::info_span!(target: TARGET, "engine", operation, table)
}

/// The span of the store's work for the current job, run `mode` (`inline`, `blocking`,
/// `awaited`).
pub fn store_span(mode: &'static str) -> Span {
    tracing::info_span!(target: TARGET, "store", mode)
}

/// A request's headers, read by the W3C trace-context propagator.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// What exports the spans: shut it down at exit, so that the last batch is sent.
#[derive(Debug)]
pub struct Exporting {
    provider: SdkTracerProvider,
}

impl Exporting {
    /// Sends what is still batched and stops.
    pub fn shutdown(self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "the trace exporter did not shut down cleanly");
        }
    }
}

/// The layer exporting [`TARGET`]'s spans over OTLP/gRPC to `OTEL_EXPORTER_OTLP_ENDPOINT`
/// (batched; the exporter's other `OTEL_*` variables apply), if the variable is set. Call it on
/// the runtime that will serve.
pub fn otlp_layer<S>() -> Result<Option<(impl Layer<S>, Exporting)>, String>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    if std::env::var_os(ENDPOINT_VARIABLE).is_none_or(|endpoint| endpoint.is_empty()) {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()
        .map_err(|error| format!("cannot build the OTLP exporter: {error}"))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("trestle")
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("trestle");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(Targets::new().with_target(TARGET, tracing::Level::INFO));
    Ok(Some((layer, Exporting { provider })))
}
