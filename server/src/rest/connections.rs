//! The REST endpoint's connections, accepted through [`crate::connections`] as gRPC's are: the
//! same cap on open connections (`--max-connections`, counted for this endpoint on its own) and
//! the same idle timeout, a request counting as a call (a connection is idle only between
//! requests), and every connection closed at shutdown, so none outlives `serve`.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::net::{TcpListener, TcpStream};

use crate::connections::{Closable, ConnectionState, Connections, OpenCall};

/// The listener `axum::serve` takes: each accepted connection tracked, or closed at once when
/// the cap is reached.
pub(super) struct Accepted {
    pub(super) listener: TcpListener,
    pub(super) connections: Arc<Connections>,
}

impl Listener for Accepted {
    type Io = Closable<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.listener.accept().await {
                Ok((stream, remote)) => {
                    let _ = stream.set_nodelay(true);
                    if let Some(connection) = self.connections.track(stream, Some(remote)) {
                        return (connection, remote);
                    }
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
            state: stream.io().info().state.clone(),
        }
    }
}
