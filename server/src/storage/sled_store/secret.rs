//! The store's secret ([`StoreSecret`]) as the sled store keeps it: under one key of sled's
//! default tree, made and flushed at the first open.

use crate::storage::{StorageError, StoreSecret};

/// The key of the secret in sled's default tree.
const SECRET_KEY: &[u8] = b"trestle.token_secret";

/// The store's secret, made (durably) if the store has none yet.
pub(crate) fn load_or_create(db: &sled::Db) -> Result<StoreSecret, StorageError> {
    if let Some(bytes) = db.get(SECRET_KEY)? {
        return StoreSecret::from_bytes(&bytes);
    }
    let secret = StoreSecret::generate()?;
    db.insert(SECRET_KEY, secret.bytes())?;
    db.flush()?;
    Ok(secret)
}
