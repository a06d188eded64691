//! Request bodies, read only once a request is authenticated and admitted, and never past three
//! bounds: the message limit per request (`--max-message-mib`), the bytes all REST requests may
//! hold buffered at once (`--rest-body-buffer-mib`), and the time a body may take to arrive
//! (`--body-timeout-secs`). What would pass a bound is refused with Azure's code, not buffered,
//! and its connection is closed; before the refusal goes out, what keeps arriving of the body is
//! read and dropped, within a bound of bytes and time, so that a client that writes its whole
//! body before it reads (the JS SDK) reads the refusal rather than a broken pipe.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use http::{HeaderMap, StatusCode};
use tokio::sync::Semaphore;
use tokio_stream::StreamExt as _;

use super::failure::Failure;
use crate::error::ErrorCode;

/// Azure's limit on a REST request's body (an entity, a batch): 4 MiB.
pub(super) const AZURE_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The most buffer allocated for a body before its bytes arrive.
const FIRST_BUFFER_BYTES: usize = 64 * 1024;

/// The most of a refused body read (and dropped) before the refusal is sent.
const DRAIN_AT_MOST_BYTES: usize = 2 * AZURE_MAX_BODY_BYTES;
/// How long a refused body is read for at most, and how long its next bytes are waited for.
const DRAIN_FOR: Duration = Duration::from_secs(5);
const DRAIN_LINGER: Duration = Duration::from_millis(250);

/// The bounds every body is read within, shared by all of the endpoint's connections.
#[derive(Debug, Clone)]
pub(super) struct BodyLimits {
    /// The largest body of one request.
    max_bytes: usize,
    /// Bytes that requests may still buffer, all together.
    budget: Arc<Semaphore>,
    /// The budget's size, for messages.
    budget_bytes: usize,
    /// How long a body may take to arrive.
    timeout: Duration,
}

impl BodyLimits {
    /// Bodies of at most `max_bytes` each, `budget_bytes` at once in all, each within `timeout`.
    pub(super) fn new(max_bytes: usize, budget_bytes: usize, timeout: Duration) -> BodyLimits {
        BodyLimits {
            max_bytes,
            budget: Arc::new(Semaphore::new(budget_bytes.min(Semaphore::MAX_PERMITS))),
            budget_bytes,
            timeout,
        }
    }

    /// Reads `body` whole (its length announced in `headers`, or chunked), within the bounds: an
    /// announced length over the limit is refused before a byte is read.
    /// The bytes stay counted against the shared budget until the returned body is dropped.
    pub(super) async fn read(&self, headers: &HeaderMap, body: Body) -> Result<ReadBody, Failure> {
        let announced = match headers.get(http::header::CONTENT_LENGTH) {
            Some(value) => Some(
                value
                    .to_str()
                    .ok()
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .ok_or_else(|| {
                        closing(Failure::new(
                            StatusCode::BAD_REQUEST,
                            ErrorCode::InvalidInput,
                            "the Content-Length header is not a number",
                        ))
                    })?,
            ),
            None => None,
        };
        let mut reservation = Reservation {
            budget: self.budget.clone(),
            bytes: 0,
        };
        let mut stream = body.into_data_stream();
        if let Some(length) = announced {
            if let Err(refused) = self.check_size(length) {
                drain(&mut stream).await;
                return Err(refused);
            }
        }
        // Bytes are counted as they arrive, so a client that announces much and sends little
        // holds only what it sent.
        let reading = async {
            let mut buffer = Vec::with_capacity(announced.unwrap_or(0).min(FIRST_BUFFER_BYTES));
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|error| {
                    closing(Failure::new(
                        StatusCode::BAD_REQUEST,
                        ErrorCode::InvalidInput,
                        format!("the request body could not be read: {error}"),
                    ))
                })?;
                let total = buffer.len() + chunk.len();
                if let Err(refused) = self.check_size(total) {
                    drain(&mut stream).await;
                    return Err(refused);
                }
                let unreserved = total.saturating_sub(reservation.bytes);
                if unreserved > 0 {
                    self.reserve(&mut reservation, unreserved)?;
                }
                buffer.extend_from_slice(&chunk);
            }
            Ok::<_, Failure>(buffer)
        };
        let buffer = tokio::time::timeout(self.timeout, reading)
            .await
            .map_err(|_| {
                closing(Failure::new(
                    StatusCode::REQUEST_TIMEOUT,
                    ErrorCode::OperationTimedOut,
                    format!(
                        "the request body did not arrive within {} s (the server's \
                         --body-timeout-secs)",
                        self.timeout.as_secs_f64()
                    ),
                ))
            })??;
        Ok(ReadBody {
            bytes: Bytes::from(buffer),
            _reservation: reservation,
        })
    }

    fn check_size(&self, bytes: usize) -> Result<(), Failure> {
        if bytes > self.max_bytes {
            return Err(closing(Failure::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::RequestBodyTooLarge,
                format!(
                    "the request body is over {} bytes, the limit (4 MiB as on Azure, or \
                     --max-message-mib if lower)",
                    self.max_bytes
                ),
            )));
        }
        Ok(())
    }

    /// Counts `more` bytes against the shared budget, or refuses the request as busy.
    fn reserve(&self, reservation: &mut Reservation, more: usize) -> Result<(), Failure> {
        let permits = u32::try_from(more).ok();
        match permits.and_then(|n| self.budget.try_acquire_many(n).ok()) {
            Some(permit) => {
                permit.forget();
                reservation.bytes += more;
                Ok(())
            }
            None => Err(closing(Failure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::ServerBusy,
                format!(
                    "requests being received hold the REST endpoint's whole {} MiB of body \
                     buffer (--rest-body-buffer-mib); retry with backoff",
                    self.budget_bytes / (1024 * 1024)
                ),
            ))),
        }
    }
}

/// Reads and drops what arrives of a refused body: at most [`DRAIN_AT_MOST_BYTES`], for at most
/// [`DRAIN_FOR`], each next chunk within [`DRAIN_LINGER`] (a client that sends nothing more is
/// answered then).
async fn drain(stream: &mut axum::body::BodyDataStream) {
    let draining = async {
        let mut drained = 0;
        while drained < DRAIN_AT_MOST_BYTES {
            match tokio::time::timeout(DRAIN_LINGER, stream.next()).await {
                Ok(Some(Ok(chunk))) => drained += chunk.len(),
                _ => return,
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_FOR, draining).await;
}

/// A refusal after which the connection is closed: the rest of the body is not read.
fn closing(mut failure: Failure) -> Failure {
    failure.close_connection = true;
    failure
}

/// Bytes counted against the shared budget, given back when dropped.
#[derive(Debug)]
struct Reservation {
    budget: Arc<Semaphore>,
    bytes: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.add_permits(self.bytes);
    }
}

/// A body read whole, counted against the budget while it lives.
#[derive(Debug)]
pub(super) struct ReadBody {
    pub(super) bytes: Bytes,
    _reservation: Reservation,
}
