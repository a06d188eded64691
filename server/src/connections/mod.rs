//! The connections `serve` accepts, and what no client can make them hold:
//! - a connection that has not sent the HTTP/2 preface and its SETTINGS within the handshake
//!   timeout, or that has had no call open for the idle timeout, is closed (its next read fails, so
//!   hyper ends the connection);
//! - past the cap on open connections, a new connection is closed as soon as it is accepted;
//! - once the shutdown grace period is over, every connection still open is closed, so hyper ends
//!   its task and drops the service (and with it the engine) that the task holds. Without this, a
//!   connection outlives `serve` for as long as its client keeps it open, and so does the store's
//!   lock on its data directory.
//!
//! Each connection's [`ConnectionInfo`] reaches every request's extensions (tonic's
//! [`Connected`]): the service counts open calls on it, and caps streamed scans per connection.
//! The HTTP/1.1 servers (the REST endpoint, the probes) accept theirs through [`http`].

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::transport::server::Connected;

pub(crate) mod http;

/// The HTTP/2 client preface every connection starts with.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Bytes of an HTTP/2 frame header.
const FRAME_HEADER: usize = 9;

/// How long connections may take to start and may stay idle.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionTimeouts {
    /// To send the preface and SETTINGS (`None` when TLS, whose handshake tonic times, wraps
    /// what the connection sends).
    pub(crate) handshake: Option<Duration>,
    /// With no call open.
    pub(crate) idle: Duration,
}

/// What the server knows of an open connection.
#[derive(Debug)]
pub(crate) struct ConnectionState {
    /// Calls open on the connection.
    calls: AtomicUsize,
    /// When the last call ended (or the connection started, if none has), in milliseconds since
    /// [`epoch`]: an atomic, so that ending a call costs no lock.
    quiet_since_ms: AtomicU64,
    /// Streamed scans open on the connection.
    pub(crate) open_scans: Arc<AtomicUsize>,
}

impl ConnectionState {
    fn new() -> ConnectionState {
        ConnectionState {
            calls: AtomicUsize::new(0),
            quiet_since_ms: AtomicU64::new(millis_since_epoch(Instant::now())),
            open_scans: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Counts a call open until the returned guard drops.
    pub(crate) fn begin_call(self: &Arc<Self>) -> OpenCall {
        self.calls.fetch_add(1, Ordering::AcqRel);
        OpenCall {
            state: self.clone(),
        }
    }

    /// Since when the connection has had no call open, if it has none.
    fn quiet_since(&self) -> Option<Instant> {
        let quiet_since =
            epoch() + Duration::from_millis(self.quiet_since_ms.load(Ordering::Acquire));
        (self.calls.load(Ordering::Acquire) == 0).then_some(quiet_since)
    }

    fn mark_quiet_now(&self) {
        self.quiet_since_ms
            .store(millis_since_epoch(Instant::now()), Ordering::Release);
    }
}

/// The instant connection times are counted from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn millis_since_epoch(instant: Instant) -> u64 {
    instant.saturating_duration_since(epoch()).as_millis() as u64
}

/// A call open on a connection; its end starts the connection's idle time.
#[derive(Debug)]
pub(crate) struct OpenCall {
    state: Arc<ConnectionState>,
}

impl Drop for OpenCall {
    fn drop(&mut self) {
        self.state.mark_quiet_now();
        self.state.calls.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection as requests see it (in their extensions).
#[derive(Debug, Clone)]
pub(crate) struct ConnectionInfo {
    /// The peer's address.
    pub(crate) remote: Option<SocketAddr>,
    pub(crate) state: Arc<ConnectionState>,
}

impl ConnectionInfo {
    /// The connection a request came on, with or without TLS.
    pub(crate) fn of(extensions: &tonic::Extensions) -> Option<&ConnectionInfo> {
        extensions.get::<ConnectionInfo>().or_else(|| {
            extensions
                .get::<tonic::transport::server::TlsConnectInfo<ConnectionInfo>>()
                .map(|tls| tls.get_ref())
        })
    }
}

/// Wraps the connections `serve` accepts, and closes them all at once.
#[derive(Debug)]
pub(crate) struct Connections {
    closed: CancellationToken,
    /// Each connection holds a clone; the channel closes when the last is dropped.
    alive: mpsc::Sender<()>,
    all_dropped: mpsc::Receiver<()>,
    /// Connections open now.
    open: Arc<AtomicUsize>,
    max_open: usize,
    timeouts: ConnectionTimeouts,
}

impl Connections {
    /// Connections within `limits`; with `tls`, tonic times the TLS handshake, and sees the
    /// HTTP/2 preface inside it.
    pub(crate) fn for_limits(limits: &crate::config::Limits, tls: bool) -> Connections {
        let timeouts = ConnectionTimeouts {
            handshake: (!tls).then_some(limits.handshake_timeout),
            idle: limits.idle_timeout,
        };
        Connections::new(limits.max_connections, timeouts)
    }

    /// The connections `listener` accepts, tracked (those over the cap closed at once).
    pub(crate) fn accept(
        &self,
        listener: tokio::net::TcpListener,
    ) -> impl tokio_stream::Stream<Item = io::Result<Closable<tokio::net::TcpStream>>> + '_ {
        use tokio_stream::StreamExt;
        tonic::transport::server::TcpIncoming::from(listener)
            .with_nodelay(Some(true))
            .filter_map(|accepted| match accepted {
                Ok(connection) => {
                    let remote = connection.peer_addr().ok();
                    self.track(connection, remote).map(Ok)
                }
                Err(error) => Some(Err(error)),
            })
    }

    pub(crate) fn new(max_open: usize, timeouts: ConnectionTimeouts) -> Connections {
        let (alive, all_dropped) = mpsc::channel(1);
        Connections {
            closed: CancellationToken::new(),
            alive,
            all_dropped,
            open: Arc::new(AtomicUsize::new(0)),
            max_open,
            timeouts,
        }
    }

    /// `connection` from `remote`, made closable by [`Connections::close_all`] and by its
    /// timeouts; `None` (and the connection closed) when the cap of open connections is reached.
    pub(crate) fn track<S>(
        &self,
        connection: S,
        remote: Option<SocketAddr>,
    ) -> Option<Closable<S>> {
        let admitted = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < self.max_open).then_some(open + 1)
            })
            .is_ok();
        if !admitted {
            tracing::debug!(
                ?remote,
                max = self.max_open,
                "refused a connection over the cap"
            );
            return None;
        }
        let now = Instant::now();
        let first_deadline = now + self.timeouts.handshake.unwrap_or(self.timeouts.idle);
        Some(Closable {
            inner: connection,
            closed: Box::pin(self.closed.clone().cancelled_owned()),
            _alive: self.alive.clone(),
            _open: OpenConnection(self.open.clone()),
            info: ConnectionInfo {
                remote,
                state: Arc::new(ConnectionState::new()),
            },
            timer: Box::pin(tokio::time::sleep_until(first_deadline)),
            idle: self.timeouts.idle,
            handshake: self.timeouts.handshake.map(|_| Handshake::default()),
        })
    }

    /// Fails every read and write of the connections still open, and waits until hyper has
    /// dropped them all.
    pub(crate) async fn close_all(self) {
        let Connections {
            closed,
            alive,
            mut all_dropped,
            ..
        } = self;
        closed.cancel();
        drop(alive);
        while all_dropped.recv().await.is_some() {}
    }
}

/// Counts one open connection until it drops.
#[derive(Debug)]
struct OpenConnection(Arc<AtomicUsize>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How much of the HTTP/2 preface and first SETTINGS frame a connection has sent.
#[derive(Debug, Default)]
struct Handshake {
    /// The first bytes received: the preface and the SETTINGS frame header.
    head: Vec<u8>,
    /// Bytes received in all.
    received: usize,
}

impl Handshake {
    /// Takes `bytes` received; says whether the preface and the whole first frame are in.
    fn receive(&mut self, bytes: &[u8]) -> bool {
        let wanted = PREFACE.len() + FRAME_HEADER;
        let missing = wanted.saturating_sub(self.head.len());
        self.head
            .extend_from_slice(&bytes[..missing.min(bytes.len())]);
        self.received += bytes.len();
        if self.head.len() < wanted {
            return false;
        }
        let header = &self.head[PREFACE.len()..];
        let payload = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
        self.received >= wanted + payload
    }
}

/// A connection that closes itself (its reads and writes fail) when its [`Connections`] closes
/// them all, when it does not complete its handshake in time, or when it stays idle too long;
/// until then it is the connection itself.
#[derive(Debug)]
pub(crate) struct Closable<S> {
    inner: S,
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
    _alive: mpsc::Sender<()>,
    _open: OpenConnection,
    info: ConnectionInfo,
    /// Fires at the handshake deadline, then whenever the connection may have become idle.
    timer: Pin<Box<Sleep>>,
    idle: Duration,
    /// The handshake still awaited, if any.
    handshake: Option<Handshake>,
}

impl<S> Closable<S> {
    /// What requests on this connection see of it.
    pub(crate) fn info(&self) -> &ConnectionInfo {
        &self.info
    }

    /// The error every read and write returns once the connection is closed; until then `None`,
    /// and `cx` is woken when it is closed.
    fn closed_error(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        self.closed.as_mut().poll(cx).is_ready().then(|| {
            io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the server closed the connection at the end of its shutdown grace period",
            )
        })
    }

    /// The error that closes the connection once its handshake or idle time is over; until then
    /// `None`, with the timer set to wake `cx` when it may be over.
    fn timed_out(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        while self.timer.as_mut().poll(cx).is_ready() {
            if self.handshake.is_some() {
                tracing::debug!(remote = ?self.info.remote, "closed a connection that did not complete its handshake in time");
                return Some(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the HTTP/2 handshake was not completed in time",
                ));
            }
            let now = Instant::now();
            let next = match self.info.state.quiet_since() {
                Some(quiet_since) if now >= quiet_since + self.idle => {
                    tracing::debug!(remote = ?self.info.remote, "closed an idle connection");
                    return Some(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the connection was idle too long",
                    ));
                }
                Some(quiet_since) => quiet_since + self.idle,
                None => now + self.idle,
            };
            self.timer.as_mut().reset(next);
        }
        None
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Closable<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(error) = this.closed_error(cx).or_else(|| this.timed_out(cx)) {
            return Poll::Ready(Err(error));
        }
        let filled = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some(handshake)) = (&read, &mut this.handshake) {
            if handshake.receive(&buf.filled()[filled..]) {
                this.handshake = None;
                this.info.state.mark_quiet_now();
                let next = Instant::now() + this.idle;
                this.timer.as_mut().reset(next);
            }
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Closable<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(error) = this.closed_error(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(error) = this.closed_error(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(error) = this.closed_error(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: Connected> Connected for Closable<S> {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.info.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handshake_is_complete_with_the_preface_and_the_whole_settings_frame() {
        let mut bytes = PREFACE.to_vec();
        // A SETTINGS frame of two settings (12 bytes of payload).
        bytes.extend_from_slice(&[0, 0, 12, 4, 0, 0, 0, 0, 0]);
        bytes.extend_from_slice(&[0; 12]);
        for split in 0..bytes.len() {
            let mut handshake = Handshake::default();
            assert!(!handshake.receive(&bytes[..split]), "complete at {split}");
            assert!(
                handshake.receive(&bytes[split..]),
                "incomplete after {split}"
            );
        }
        let mut byte_by_byte = Handshake::default();
        let completed_at = bytes
            .iter()
            .position(|byte| byte_by_byte.receive(std::slice::from_ref(byte)));
        assert_eq!(completed_at, Some(bytes.len() - 1));
    }
}
