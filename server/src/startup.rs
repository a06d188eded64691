//! What can stop the server from starting (or end it with an error), and the one check made
//! before anything is bound: open mode only on loopback.

use crate::config::Config;
use crate::error;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The store could not be opened or flushed.
    #[error("store: {0}")]
    Store(#[from] error::TableError),
    /// Reflection could not load the descriptor sets.
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The transport failed.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The listener is unusable.
    #[error("listener: {0}")]
    Listener(#[from] std::io::Error),
    /// A startup task failed.
    #[error("startup: {0}")]
    Startup(#[from] tokio::task::JoinError),
    /// The OAuth provider's key set could not be loaded.
    #[error("--oauth-jwks: {0}")]
    Oauth(#[from] crate::oidc::JwksError),
    /// Open mode (no key file) on an address others can reach.
    #[error("refusing to serve without a key file on {0}, which is not a loopback address: pass --key-file (or --insecure-open to accept that anyone reaching it can do anything)")]
    OpenModeExposed(std::net::SocketAddr),
}

/// Refuses open mode (no keys) on an address other hosts can reach, unless `insecure_open`.
pub fn check_exposure(addr: std::net::SocketAddr, config: &Config) -> Result<(), ServeError> {
    if config.authenticator.is_open() && !addr.ip().is_loopback() && !config.insecure_open {
        return Err(ServeError::OpenModeExposed(addr));
    }
    Ok(())
}
