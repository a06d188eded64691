//! The store's own secret: 32 random bytes made at the store's first open and kept in it, with
//! which the server seals the continuation tokens it issues. Kept in the store, not in the
//! process, so a token still verifies after a restart (and, with a shared store, on any server).
//! Each store keeps it its own way; the secret itself is this.

use super::StorageError;

/// Length of the secret.
pub const SECRET_BYTES: usize = 32;

/// The store's secret; its `Debug` output never shows it.
#[derive(Clone)]
pub struct StoreSecret([u8; SECRET_BYTES]);

impl StoreSecret {
    /// A new secret from the system's random source.
    pub(crate) fn generate() -> Result<StoreSecret, StorageError> {
        random_bytes().map(StoreSecret)
    }

    /// A secret read back from a store: exactly [`SECRET_BYTES`] bytes.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<StoreSecret, StorageError> {
        <[u8; SECRET_BYTES]>::try_from(bytes)
            .map(StoreSecret)
            .map_err(|_| {
                StorageError::Corrupt(format!(
                    "the token secret is {} bytes, expected {SECRET_BYTES}",
                    bytes.len()
                ))
            })
    }

    /// The secret's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// `N` bytes from the system's random source (a store's secret, a server's name for its lease).
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], StorageError> {
    let mut bytes = [0u8; N];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| std::io::Error::other("the system's random source failed"))?;
    Ok(bytes)
}

impl std::fmt::Debug for StoreSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreSecret(<redacted>)")
    }
}
