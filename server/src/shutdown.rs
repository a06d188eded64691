//! The end of `serve`: after the shutdown signal, open calls get a grace period to finish; a call
//! that would outlast it (a stream whose reader stopped reading, say) must not keep the process
//! from exiting.

use std::future::Future;
use std::time::Duration;

/// The signal to hand the transport (it completes when `shutdown` does), and a future that
/// completes `grace` later: then the connections still open are to be closed.
pub(crate) fn with_grace(
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> (impl Future<Output = ()>, impl Future<Output = ()>) {
    let (shutdown_begun, grace_started) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        shutdown.await;
        let _ = shutdown_begun.send(());
    };
    let grace_over = async move {
        if grace_started.await.is_ok() {
            tokio::time::sleep(grace).await;
            tracing::warn!(
                grace_secs = grace.as_secs_f64(),
                "calls still open after the shutdown grace period; closing their connections"
            );
        } else {
            std::future::pending::<()>().await;
        }
    };
    (signal, grace_over)
}
