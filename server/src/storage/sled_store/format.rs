//! The data directory's format version: written at creation, checked at every open, so a build
//! never misreads a directory written by a newer one.
//!
//! The version lives in sled's default tree under [`FORMAT_KEY`] as a big-endian `u32`. Directories
//! written before the marker existed hold format 1 and are marked on first open.
//!
//! - Format 1: the catalog, one tree per table, entities in [`super::codec`]'s layout.
//! - Format 2: also the `undo` tree ([`super::undo`]): after a crash it may hold records of
//!   interrupted commits, which a format-1 build would not roll back. A format-1 directory is
//!   format 2 as it is (its `undo` tree is empty), so opening one re-marks it.

use super::StorageError;

/// The key of the format version in sled's default tree.
pub const FORMAT_KEY: &[u8] = b"trestle.format";
/// The format this build reads and writes.
pub const CURRENT_FORMAT: u32 = 2;

/// Checks the directory's format, marking a new or older directory as current.
pub(crate) fn check_or_mark(db: &sled::Db) -> Result<(), StorageError> {
    let mark = || -> Result<(), StorageError> {
        db.insert(FORMAT_KEY, &CURRENT_FORMAT.to_be_bytes())?;
        db.flush()?;
        Ok(())
    };
    match db.get(FORMAT_KEY)? {
        None => mark(),
        Some(bytes) => {
            let found = <[u8; 4]>::try_from(bytes.as_ref())
                .map(u32::from_be_bytes)
                .map_err(|_| {
                    StorageError::Corrupt(format!(
                        "the format marker is {} bytes, expected 4",
                        bytes.len()
                    ))
                })?;
            if found > CURRENT_FORMAT {
                return Err(StorageError::UnsupportedFormat {
                    found,
                    supported: CURRENT_FORMAT,
                });
            }
            if found < CURRENT_FORMAT {
                mark()?;
            }
            Ok(())
        }
    }
}
