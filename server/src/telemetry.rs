//! The server's metrics, named in one place: what both protocols and the query layer record
//! through the `metrics` facade. Nothing is kept unless `--metrics-listen` installs the Prometheus
//! recorder (then served as text at `/metrics`); docs/operations.md lists them with alerts.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder};

use crate::error::ErrorCode;

/// Requests answered: labels `protocol` (`grpc`, `rest`), `operation`, `code` (the gRPC code's
/// name, or the HTTP status).
const REQUESTS: &str = "trestle_requests_total";
/// Seconds from a request's arrival to its answer's head: labels `protocol`, `operation`.
const LATENCY: &str = "trestle_request_duration_seconds";
/// Requests begun and not yet answered: label `protocol`.
const IN_FLIGHT: &str = "trestle_requests_in_flight";
/// Refusals by Azure's error code (both protocols): label `reason`.
const REFUSALS: &str = "trestle_refusals_total";
/// Entities queries examined, and of those, returned.
const EXAMINED: &str = "trestle_entities_examined_total";
const RETURNED: &str = "trestle_entities_returned_total";

/// Latency buckets, in seconds: 100 µs to 10 s.
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Whether a recorder is installed: until then nothing is recorded, so that a server without
/// `--metrics-listen` builds no label (no allocation on the request path).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Installs the Prometheus recorder and serves `/metrics` on `addr` (on the current runtime).
pub fn serve(addr: SocketAddr) -> Result<(), BuildError> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(Matcher::Full(LATENCY.to_owned()), BUCKETS)?
        .install()?;
    ENABLED.store(true, Ordering::Relaxed);
    Ok(())
}

/// Whether metrics are kept: callers skip naming a request's operation otherwise.
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A request of `protocol` begins.
pub(crate) fn begun(protocol: &'static str) {
    if enabled() {
        metrics::gauge!(IN_FLIGHT, "protocol" => protocol).increment(1.0);
    }
}

/// A request of `protocol` that [`begun`] was answered with `code` after `elapsed`; `operation`
/// and `code` are only built when [`enabled`].
pub(crate) fn answered(
    protocol: &'static str,
    operation: impl FnOnce() -> String,
    code: impl FnOnce() -> String,
    elapsed: Duration,
) {
    if !enabled() {
        return;
    }
    let (operation, code) = (operation(), code());
    metrics::gauge!(IN_FLIGHT, "protocol" => protocol).decrement(1.0);
    metrics::histogram!(LATENCY, "protocol" => protocol, "operation" => operation.clone())
        .record(elapsed.as_secs_f64());
    metrics::counter!(REQUESTS, "protocol" => protocol, "operation" => operation, "code" => code)
        .increment(1);
}

/// A request was refused with Azure's `code`.
pub(crate) fn refused(code: ErrorCode) {
    if !enabled() {
        return;
    }
    metrics::counter!(REFUSALS, "reason" => code.as_str()).increment(1);
}

/// A chunk of a query examined `examined` entities and returned `returned`.
pub(crate) fn scanned(examined: usize, returned: usize) {
    if !enabled() {
        return;
    }
    metrics::counter!(EXAMINED).increment(examined as u64);
    metrics::counter!(RETURNED).increment(returned as u64);
}
