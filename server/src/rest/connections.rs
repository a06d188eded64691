//! The REST endpoint's connections, accepted through [`crate::connections`] as gRPC's are: the
//! same cap on open connections (`--max-connections`, counted for this endpoint on its own) and
//! the same idle timeout, a request counting as a call (a connection is idle only between
//! requests), and every connection closed at shutdown, so none outlives `serve`; over TLS when
//! the endpoint has a certificate (`tls.rs`).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::connections::{Closable, ConnectionState, Connections, OpenCall};

/// The listener `axum::serve` takes: each accepted connection tracked, or closed at once when
/// the cap is reached; over TLS, each handshake run by a task of its own within the handshake
/// timeout, so that a slow one never holds up the next accept, and the connection handed over
/// once it is done.
pub(super) struct Accepted {
    pub(super) listener: TcpListener,
    pub(super) connections: Arc<Connections>,
    /// The TLS acceptor and how long a handshake may take, if the endpoint serves TLS.
    pub(super) tls: Option<(TlsAcceptor, Duration)>,
    /// Connections whose handshake is done.
    pub(super) secured: (mpsc::Sender<Secured>, mpsc::Receiver<Secured>),
}

/// A connection whose TLS handshake is done, and its peer.
pub(super) type Secured = (RestIo, SocketAddr);

impl Listener for Accepted {
    type Io = RestIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let accepted = tokio::select! {
                accepted = self.listener.accept() => accepted,
                Some(secured) = self.secured.1.recv() => return secured,
            };
            match accepted {
                Ok((stream, remote)) => {
                    let _ = stream.set_nodelay(true);
                    let Some(connection) = self.connections.track(stream, Some(remote)) else {
                        continue;
                    };
                    let Some((acceptor, within)) = &self.tls else {
                        return (RestIo::Plain(connection), remote);
                    };
                    let (acceptor, within) = (acceptor.clone(), *within);
                    let secured = self.secured.0.clone();
                    tokio::spawn(async move {
                        match tokio::time::timeout(within, acceptor.accept(connection)).await {
                            Ok(Ok(stream)) => {
                                let _ = secured.send((RestIo::Tls(Box::new(stream)), remote)).await;
                            }
                            Ok(Err(error)) => {
                                tracing::debug!(%error, %remote, "a REST TLS handshake failed");
                            }
                            Err(_) => tracing::debug!(%remote, "a REST TLS handshake timed out"),
                        }
                    });
                }
                Err(error) => {
                    // Out of descriptors, say: wait a little rather than spin.
                    tracing::debug!(%error, "a REST connection could not be accepted");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// A connection of the endpoint: plain, or over TLS.
pub(super) enum RestIo {
    Plain(Closable<TcpStream>),
    Tls(Box<TlsStream<Closable<TcpStream>>>),
}

impl RestIo {
    /// The tracked connection underneath.
    fn tracked(&self) -> &Closable<TcpStream> {
        match self {
            RestIo::Plain(connection) => connection,
            RestIo::Tls(stream) => stream.get_ref().0,
        }
    }
}

impl AsyncRead for RestIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            RestIo::Plain(connection) => Pin::new(connection).poll_read(cx, buf),
            RestIo::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for RestIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            RestIo::Plain(connection) => Pin::new(connection).poll_write(cx, buf),
            RestIo::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            RestIo::Plain(connection) => Pin::new(connection).poll_flush(cx),
            RestIo::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            RestIo::Plain(connection) => Pin::new(connection).poll_shutdown(cx),
            RestIo::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The connection a request came on: its peer, and its state (for the idle timeout).
#[derive(Debug, Clone)]
pub(super) struct Peer {
    pub(super) address: SocketAddr,
    state: Arc<ConnectionState>,
}

impl Peer {
    /// Marks a request open on the connection until the guard drops.
    pub(super) fn begin_request(&self) -> OpenCall {
        self.state.begin_call()
    }
}

impl Connected<IncomingStream<'_, Accepted>> for Peer {
    fn connect_info(stream: IncomingStream<'_, Accepted>) -> Peer {
        Peer {
            address: *stream.remote_addr(),
            state: stream.io().tracked().info().state.clone(),
        }
    }
}
