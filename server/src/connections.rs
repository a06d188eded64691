//! The connections `serve` accepts, which it can close itself: once the shutdown grace period is
//! over, every read and write of a connection still open fails, so hyper ends the connection's
//! task and drops the service (and with it the engine) that the task holds. Without this, a
//! connection outlives `serve` for as long as its client keeps it open, and so does the store's
//! lock on its data directory.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::transport::server::Connected;

/// Wraps the connections `serve` accepts, and closes them all at once.
#[derive(Debug)]
pub(crate) struct Connections {
    closed: CancellationToken,
    /// Each connection holds a clone; the channel closes when the last is dropped.
    alive: mpsc::Sender<()>,
    all_dropped: mpsc::Receiver<()>,
}

impl Connections {
    pub(crate) fn new() -> Connections {
        let (alive, all_dropped) = mpsc::channel(1);
        Connections {
            closed: CancellationToken::new(),
            alive,
            all_dropped,
        }
    }

    /// `connection`, made closable by [`Connections::close_all`].
    pub(crate) fn track<S>(&self, connection: S) -> Closable<S> {
        Closable {
            inner: connection,
            closed: Box::pin(self.closed.clone().cancelled_owned()),
            _alive: self.alive.clone(),
        }
    }

    /// Fails every read and write of the connections still open, and waits until hyper has
    /// dropped them all.
    pub(crate) async fn close_all(self) {
        let Connections {
            closed,
            alive,
            mut all_dropped,
        } = self;
        closed.cancel();
        drop(alive);
        while all_dropped.recv().await.is_some() {}
    }
}

/// A connection whose reads and writes fail with `ConnectionAborted` once its [`Connections`]
/// closes them all; until then it is the connection itself.
#[derive(Debug)]
pub(crate) struct Closable<S> {
    inner: S,
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
    _alive: mpsc::Sender<()>,
}

impl<S> Closable<S> {
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
}

impl<S: AsyncRead + Unpin> AsyncRead for Closable<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(error) = this.closed_error(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
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
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}
