//! The server's metrics, named in one place: what both protocols, the query layer and the stores
//! record through the `metrics` facade. Nothing is kept unless `--metrics-listen` (or the
//! console) installs the Prometheus recorder; `crate::scrape` serves them as text at `/metrics`;
//! docs/operations.md lists them with alerts. It names nothing of the crate, so that every layer may record (it sits at the bottom).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

use trestle_proto::ErrorCode;

/// Requests answered: labels `protocol` (`grpc`, `rest`), `operation`, `code` (the gRPC code's
/// name, or the HTTP status). Every label value comes from a closed set the server names (see
/// [`answered`]): nothing a client sends becomes a label.
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

/// Writes one flush of the embedded store made durable (its group commit), and the flush's
/// seconds.
const GROUP_WRITES: &str = "trestle_commit_group_writes";
const FLUSH_LATENCY: &str = "trestle_flush_duration_seconds";
/// Background jobs finished: label `work` (`index_build`, `table_reclaim`, `purge_batch`,
/// `feed_trim`).
const BACKGROUND: &str = "trestle_background_jobs_total";
/// Server streams open (`ScanEntities`, `Backup`).
const OPEN_STREAMS: &str = "trestle_open_streams";
/// The PostgreSQL store's connections lent to a call now, and calls that waited for one.
const STORE_CONNECTIONS_BUSY: &str = "trestle_store_connections_busy";
const STORE_CONNECTION_WAITS: &str = "trestle_store_connection_waits_total";

/// Group sizes: 1 to 4,096 writes.
const GROUP_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0,
];

/// Latency buckets, in seconds: 100 µs to 10 s.
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Whether a recorder is installed: until then nothing is recorded, so that a server without
/// `--metrics-listen` builds no label (no allocation on the request path).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// The recorder's handle, once [`install`]ed: what `/metrics` renders.
static RECORDER: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder (once; later calls do nothing): from then on metrics are
/// kept, and [`render`] gives them. Serving them is the caller's (`crate::scrape`).
pub fn install() -> Result<(), BuildError> {
    // Two servers of one process (tests) may start at once: one installs, the other finds it.
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _installing = INSTALLING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if RECORDER.get().is_some() {
        return Ok(());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(LATENCY.to_owned()), BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(FLUSH_LATENCY.to_owned()), BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(GROUP_WRITES.to_owned()), GROUP_BUCKETS)?
        .install_recorder()?;
    if RECORDER.set(handle).is_ok() {
        ENABLED.store(true, Ordering::Relaxed);
    }
    Ok(())
}

/// The metrics in Prometheus' text format, if a recorder is installed.
pub fn render() -> Option<String> {
    RECORDER.get().map(PrometheusHandle::render)
}

/// Folds the histograms' recent samples into their buckets, which keeps the recorder's memory
/// bounded: to be called every few seconds while a recorder is installed.
pub fn run_upkeep() {
    if let Some(handle) = RECORDER.get() {
        handle.run_upkeep();
    }
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

/// The label of what a client named that the server does not know (an unknown method or verb).
pub(crate) const OTHER: &str = "other";

/// A request of `protocol` that [`begun`] was answered with `code` after `elapsed`. The
/// operation is a `&'static str`: each protocol maps what a request names onto its own closed set
/// (an unknown name is [`OTHER`]), so that no client can grow the metrics by what it sends; the
/// code is the server's own answer (a gRPC code's name, an HTTP status), built only when
/// [`enabled`].
pub(crate) fn answered(
    protocol: &'static str,
    operation: &'static str,
    code: impl FnOnce() -> String,
    elapsed: Duration,
) {
    if !enabled() {
        return;
    }
    let code = code();
    metrics::gauge!(IN_FLIGHT, "protocol" => protocol).decrement(1.0);
    metrics::histogram!(LATENCY, "protocol" => protocol, "operation" => operation)
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

/// A flush of the embedded store made `writes` writes durable in `elapsed`.
pub(crate) fn flushed(writes: u64, elapsed: Duration) {
    if !enabled() {
        return;
    }
    metrics::histogram!(GROUP_WRITES).record(writes as f64);
    metrics::histogram!(FLUSH_LATENCY).record(elapsed.as_secs_f64());
}

/// A background job of kind `work` finished (`index_build`, `table_reclaim`, `purge_batch`).
pub(crate) fn background_done(work: &'static str) {
    if enabled() {
        metrics::counter!(BACKGROUND, "work" => work).increment(1);
    }
}

/// Counts an open server stream while it lives.
#[derive(Debug)]
pub(crate) struct OpenStream(());

impl OpenStream {
    pub(crate) fn opened() -> OpenStream {
        if enabled() {
            metrics::gauge!(OPEN_STREAMS).increment(1.0);
        }
        OpenStream(())
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        if enabled() {
            metrics::gauge!(OPEN_STREAMS).decrement(1.0);
        }
    }
}

/// The PostgreSQL store lent a connection (`waited`: after waiting for one to be returned).
pub(crate) fn connection_lent(waited: bool) {
    if !enabled() {
        return;
    }
    metrics::gauge!(STORE_CONNECTIONS_BUSY).increment(1.0);
    if waited {
        metrics::counter!(STORE_CONNECTION_WAITS).increment(1);
    }
}

/// The PostgreSQL store got a connection back.
pub(crate) fn connection_returned() {
    if enabled() {
        metrics::gauge!(STORE_CONNECTIONS_BUSY).decrement(1.0);
    }
}
