//! The connections of the HTTP/1.1 servers (the REST endpoint, the probes), accepted through
//! [`Connections`] as gRPC's are: a cap on open connections (counted for each server on its own)
//! and the idle timeout, a request counting as a call (a connection is idle only between
//! requests), and every connection closed at shutdown, so none outlives `serve`; over TLS when
//! the server has a certificate.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::Response;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::{Closable, ConnectionState, Connections};

/// An HTTP/1.1 server on tracked connections, until [`HttpServer::stop`].
#[derive(Debug)]
pub(crate) struct HttpServer {
    task: tokio::task::JoinHandle<()>,
    connections: Arc<Connections>,
}

impl HttpServer {
    /// Serves `app` on `listener` within `connections`' cap and idle timeout, over TLS if `tls`
    /// gives an acceptor (and how long a handshake may take); each request is a call on its
    /// connection. `name` is what the log calls the server should it fail.
    pub(crate) fn start(
        name: &'static str,
        listener: TcpListener,
        connections: Connections,
        tls: Option<(TlsAcceptor, Duration)>,
        app: axum::Router,
    ) -> HttpServer {
        let connections = Arc::new(connections);
        let accepted = Accepted {
            listener,
            connections: connections.clone(),
            tls,
            secured: mpsc::channel(64),
        };
        let app = app
            .layer(axum::middleware::from_fn(a_request_is_a_call))
            .into_make_service_with_connect_info::<Peer>();
        let task = tokio::spawn(async move {
            if let Err(error) = axum::serve(accepted, app).await {
                tracing::error!(%error, server = name, "an HTTP server stopped");
            }
        });
        HttpServer { task, connections }
    }

    /// Stops accepting, then closes every connection still open and waits until each is gone.
    pub(crate) async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
        if let Some(connections) = Arc::into_inner(self.connections) {
            connections.close_all().await;
        }
    }
}

/// Marks a request open on its connection (which is then not idle) until its answer is made.
async fn a_request_is_a_call(
    ConnectInfo(peer): ConnectInfo<Peer>,
    request: Request,
    next: Next,
) -> Response {
    let _open = peer.state.begin_call();
    next.run(request).await
}

/// The listener `axum::serve` takes: each accepted connection tracked, or closed at once when
/// the cap is reached; over TLS, each handshake run by a task of its own within the handshake
/// timeout, so that a slow one never holds up the next accept, and the connection handed over
/// once it is done.
struct Accepted {
    listener: TcpListener,
    connections: Arc<Connections>,
    /// The TLS acceptor and how long a handshake may take, if the server serves TLS.
    tls: Option<(TlsAcceptor, Duration)>,
    /// Connections whose handshake is done.
    secured: (mpsc::Sender<Secured>, mpsc::Receiver<Secured>),
}

/// A connection whose TLS handshake is done, and its peer.
type Secured = (HttpIo, SocketAddr);

impl Listener for Accepted {
    type Io = HttpIo;
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
                        return (HttpIo::Plain(connection), remote);
                    };
                    let (acceptor, within) = (acceptor.clone(), *within);
                    let secured = self.secured.0.clone();
                    tokio::spawn(async move {
                        match tokio::time::timeout(within, acceptor.accept(connection)).await {
                            Ok(Ok(stream)) => {
                                let _ = secured.send((HttpIo::Tls(Box::new(stream)), remote)).await;
                            }
                            Ok(Err(error)) => {
                                tracing::debug!(%error, %remote, "a TLS handshake failed");
                            }
                            Err(_) => tracing::debug!(%remote, "a TLS handshake timed out"),
                        }
                    });
                }
                Err(error) => {
                    // Out of descriptors, say: wait a little rather than spin.
                    tracing::debug!(%error, "an HTTP connection could not be accepted");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// A connection of the server: plain, or over TLS.
enum HttpIo {
    Plain(Closable<TcpStream>),
    Tls(Box<TlsStream<Closable<TcpStream>>>),
}

impl HttpIo {
    /// The tracked connection underneath.
    fn tracked(&self) -> &Closable<TcpStream> {
        match self {
            HttpIo::Plain(connection) => connection,
            HttpIo::Tls(stream) => stream.get_ref().0,
        }
    }
}

impl AsyncRead for HttpIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            HttpIo::Plain(connection) => Pin::new(connection).poll_read(cx, buf),
            HttpIo::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for HttpIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            HttpIo::Plain(connection) => Pin::new(connection).poll_write(cx, buf),
            HttpIo::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            HttpIo::Plain(connection) => Pin::new(connection).poll_flush(cx),
            HttpIo::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            HttpIo::Plain(connection) => Pin::new(connection).poll_shutdown(cx),
            HttpIo::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The connection a request came on: its peer, and its state (for the idle timeout).
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub(crate) address: SocketAddr,
    state: Arc<ConnectionState>,
}

impl Connected<IncomingStream<'_, Accepted>> for Peer {
    fn connect_info(stream: IncomingStream<'_, Accepted>) -> Peer {
        Peer {
            address: *stream.remote_addr(),
            state: stream.io().tracked().info().state.clone(),
        }
    }
}
