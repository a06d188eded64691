//! The free-space reserve: while the data directory's disk has less free space than the reserve,
//! writes are refused before they start and reads go on. sled cannot take back a write that met a
//! full disk (it fails every later operation until restarted), so it must never meet one.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::StorageError;

/// How long a good reading of the free space is trusted before the disk is asked again.
const RECHECK_AFTER: Duration = Duration::from_millis(50);
const MIB: u64 = 1024 * 1024;

/// Refuses writes while free space is below `reserve_bytes`.
#[derive(Debug)]
pub(crate) struct SpaceReserve {
    path: PathBuf,
    reserve_bytes: u64,
    /// When free space was last seen above the reserve.
    last_good: Mutex<Option<Instant>>,
}

impl SpaceReserve {
    pub(crate) fn new(path: &Path, reserve_bytes: u64) -> SpaceReserve {
        SpaceReserve {
            path: path.to_owned(),
            reserve_bytes,
            last_good: Mutex::new(None),
        }
    }

    /// `Ok` when a write may start.
    pub(crate) fn check(&self) -> Result<(), StorageError> {
        if self.reserve_bytes == 0 {
            return Ok(());
        }
        let mut last_good = self
            .last_good
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last_good.is_some_and(|at| at.elapsed() < RECHECK_AFTER) {
            return Ok(());
        }
        let stats = rustix::fs::statvfs(&self.path).map_err(std::io::Error::from)?;
        let free = stats.f_bavail.saturating_mul(stats.f_frsize);
        if free < self.reserve_bytes {
            *last_good = None;
            return Err(StorageError::DiskFull {
                free_mib: free / MIB,
                reserve_mib: self.reserve_bytes / MIB,
            });
        }
        *last_good = Some(Instant::now());
        Ok(())
    }
}
