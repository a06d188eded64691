//! What every call passes through before and after its service: it is counted open on its
//! connection until its response body is done (an idle connection is one with no call open), and
//! tonic's own refusals of a malformed request, made before any handler runs, become Trestle's
//! statuses: bad input is `INVALID_ARGUMENT` `InvalidInput`, a message over the size limit
//! `RESOURCE_EXHAUSTED` `RequestBodyTooLarge`, each with its `ErrorInfo`, as every other error.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::codegen::{Bytes, Service};
use tonic::{Code, Status};

use super::status;
use crate::connections::{ConnectionInfo, OpenCall};
use crate::error::ErrorCode;
use crate::{telemetry, traces};
use tracing::Instrument;

/// The layer that wraps every service of the server in [`Edge`].
#[derive(Debug, Clone, Copy, Default)]
pub struct EdgeLayer;

impl<S> tower_layer::Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Edge<S> {
        Edge { inner }
    }
}

/// A service with calls counted on their connection and tonic's refusals mapped.
#[derive(Debug, Clone)]
pub struct Edge<S> {
    inner: S,
}

impl<S> Service<Request<Body>> for Edge<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let call = ConnectionInfo::of(request.extensions()).map(|info| info.state.begin_call());
        let path = request.uri().path();
        let streams = answers_with_a_stream(path);
        let operation = operation_label(path);
        let started = std::time::Instant::now();
        telemetry::begun("grpc");
        let span = traces::request_span("grpc", operation, request.headers());
        let response = span.in_scope(|| self.inner.call(request));
        let answered = async move {
            let response = map_refusal(response.await?);
            // A refusal comes as a head alone, with its status; an answer's status follows its
            // body (`OK` unless a stream fails later).
            let code = || {
                let code = response
                    .headers()
                    .get("grpc-status")
                    .and_then(|code| code.to_str().ok())
                    .and_then(|code| code.parse::<i32>().ok())
                    .map_or(Code::Ok, Code::from);
                format!("{code:?}")
            };
            telemetry::answered("grpc", operation, code, started.elapsed());
            // A unary answer's body is whole once its head is: its call ends here. A stream's
            // call lasts as long as its body.
            Ok(response.map(|body| match call {
                Some(call) if streams => Body::new(CountedBody {
                    inner: body,
                    _call: call,
                }),
                _ => body,
            }))
        };
        Box::pin(answered.instrument(span))
    }
}

/// The methods the server serves, as the metrics name them: a closed set, so that a client
/// calling a method of its own invention (answered `UNIMPLEMENTED`) adds no label.
const METHODS: &[&str] = &[
    "CreateTable",
    "DeleteTable",
    "ListTables",
    "GetTable",
    "CreateIndex",
    "DropIndex",
    "SetTableAccessPolicies",
    "SetChangeFeed",
    "SetTimeToLive",
    "SetTableSettings",
    "ReadChanges",
    "ListConsumers",
    "InsertEntity",
    "UpdateEntity",
    "MergeEntity",
    "UpsertEntity",
    "PatchEntity",
    "DeleteEntity",
    "GetEntity",
    "QueryEntities",
    "ScanEntities",
    "DeleteEntities",
    "CountEntities",
    "AggregateEntities",
    "SubmitTransaction",
    "TransactWrite",
    "GetEntities",
    "Backup",
];

/// The metrics' name of the method at `path`: a `TableService` method's name, `Health/Check`
/// and `Health/Watch`, `ServerReflectionInfo`, or [`telemetry::OTHER`] for any other path.
fn operation_label(path: &str) -> &'static str {
    let named = |service: &str, methods: &[&'static str]| {
        let method = path
            .strip_prefix('/')?
            .strip_prefix(service)?
            .strip_prefix('/')?;
        methods.iter().copied().find(|known| *known == method)
    };
    named("trestle.v1.TableService", METHODS)
        .or_else(|| {
            let health = named("grpc.health.v1.Health", &["Check", "Watch"]);
            health.map(|method| match method {
                "Check" => "Health/Check",
                _ => "Health/Watch",
            })
        })
        .or_else(|| {
            path.starts_with("/grpc.reflection.")
                .then_some("ServerReflectionInfo")
        })
        .unwrap_or(telemetry::OTHER)
}

/// Whether the method at `path` answers with a stream: `ScanEntities`, `ReadChanges`, `Backup`,
/// health's `Watch`, and reflection's (bidirectional) calls.
fn answers_with_a_stream(path: &str) -> bool {
    path.ends_with("/ScanEntities")
        || path.ends_with("/ReadChanges")
        || path.ends_with("/Backup")
        || path == "/grpc.health.v1.Health/Watch"
        || path.starts_with("/grpc.reflection.")
}

/// A response body that keeps its call counted open until it is dropped.
struct CountedBody {
    inner: Body,
    _call: OpenCall,
}

impl tonic::codegen::Body for CountedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Status>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The first words of the statuses tonic answers a malformed request with before any handler
/// runs (`tonic::codec::decode`, `tonic::server::grpc`), with what each is in Trestle's terms.
const TONIC_REFUSALS: &[(Code, &str, ErrorCode)] = &[
    (
        Code::OutOfRange,
        "Error, decoded message length too large",
        ErrorCode::RequestBodyTooLarge,
    ),
    (
        Code::Internal,
        "protocol error: received message with invalid compression flag",
        ErrorCode::InvalidInput,
    ),
    (
        Code::Internal,
        "Unexpected EOF decoding stream",
        ErrorCode::InvalidInput,
    ),
    (
        Code::Internal,
        "Missing request message",
        ErrorCode::InvalidInput,
    ),
];

/// `response`, or Trestle's status in its place when it is one of tonic's refusals.
fn map_refusal(response: Response<Body>) -> Response<Body> {
    let Some(refusal) = Status::from_header_map(response.headers()) else {
        return response;
    };
    let mapped = TONIC_REFUSALS
        .iter()
        .find(|(code, prefix, _)| refusal.code() == *code && refusal.message().starts_with(prefix));
    match mapped {
        Some((_, _, reason)) => {
            let message = format!("the request is malformed: {}", refusal.message());
            status::of(*reason, message).into_http()
        }
        None => response,
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn every_table_service_method_has_its_label_and_nothing_else_does() {
        let set = prost_types::FileDescriptorSet::decode(trestle_proto::pb::FILE_DESCRIPTOR_SET)
            .expect("the descriptor set");
        let served: Vec<String> = set
            .file
            .iter()
            .flat_map(|file| &file.service)
            .filter(|service| service.name() == "TableService")
            .flat_map(|service| &service.method)
            .map(|method| method.name().to_owned())
            .collect();
        assert_eq!(served.len(), METHODS.len(), "{served:?}");
        for method in &served {
            let path = format!("/trestle.v1.TableService/{method}");
            assert_eq!(operation_label(&path), method);
        }
        assert_eq!(
            operation_label("/grpc.health.v1.Health/Check"),
            "Health/Check"
        );
        for unknown in [
            "/trestle.v1.TableService/".to_owned(),
            format!("/trestle.v1.TableService/{}", "x".repeat(2000)),
            "/trestle.v1.TableServiceX/GetEntity".to_owned(),
            "/other.Service/GetEntity".to_owned(),
            "/grpc.health.v1.Health/Nope".to_owned(),
        ] {
            assert_eq!(operation_label(&unknown), telemetry::OTHER, "{unknown}");
        }
    }
}
