//! Storage faults (I/O, corruption) and the expected refusals of a commit.

use thiserror::Error;

use crate::model::{PlanRefusal, Refusal};

/// A fault of the store itself: never the client's doing, always worth logging. It names no
/// backend: each store classifies its own faults ([`Fault`]) and boxes their source.
#[derive(Debug, Error)]
pub enum StorageError {
    /// The store's backend failed (I/O, a corruption it detected, the database out of reach or
    /// refusing a statement), as the store classified it.
    #[error("{context}{source}")]
    Backend {
        /// What kind of fault it is.
        fault: Fault,
        /// What the store was doing, when it says (ending in `": "`), or empty.
        context: String,
        /// The backend's own error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The file system failed outside the backend.
    #[error("file system: {0}")]
    Io(#[from] std::io::Error),
    /// A stored record could not be decoded.
    #[error("corrupt record: {0}")]
    Corrupt(String),
    /// The data directory was written by a newer build, in a format this one cannot read.
    #[error("the data directory has format version {found}, newer than this build's {supported}; run a newer trestle-server on it (nothing was read or changed)")]
    UnsupportedFormat { found: u32, supported: u32 },
    /// The PostgreSQL store's database holds a newer schema than this build's.
    #[error("the database has Trestle schema version {found}, newer than this build's {supported}; run a newer trestle-server on it (nothing was changed)")]
    UnsupportedSchema { found: u32, supported: u32 },
    /// A stored entity has more entries than an index keeps (written before the index was
    /// declared): the index cannot be built.
    #[error("{0}")]
    Unindexable(String),
    /// The index a build step or state change names was dropped (the build stops).
    #[error("the index was dropped")]
    IndexGone,
    /// Free space on the data directory's disk is below the reserve: writes are refused before
    /// they start, so sled never meets a full disk mid-write.
    #[error("the data directory's disk has {free_mib} MiB free, below the {reserve_mib} MiB reserve; writes resume once space is freed")]
    DiskFull { free_mib: u64, reserve_mib: u64 },
}

/// What kind of fault a store's backend met, as the store classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Out of reach (the database down, restarting, the connection broken): the request did
    /// nothing, and may succeed once it is back.
    Unavailable,
    /// No space left on the device.
    DiskFull,
    /// Any other failure: I/O, a corruption, a refused statement.
    Failed,
}

/// The errno of a full disk (ENOSPC).
const ENOSPC: i32 = 28;

impl StorageError {
    /// A backend fault of kind `fault`, from its own error `source`.
    pub fn backend(
        fault: Fault,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StorageError {
        StorageError::Backend {
            fault,
            context: String::new(),
            source: Box::new(source),
        }
    }

    /// The same fault, saying what the store was doing (`what`).
    pub fn during(self, what: impl std::fmt::Display) -> StorageError {
        match self {
            StorageError::Backend {
                fault,
                context,
                source,
            } => StorageError::Backend {
                fault,
                context: format!("{what}: {context}"),
                source,
            },
            other => other,
        }
    }

    /// The backend's own error, when it is a `T`.
    pub fn backend_source<T: std::error::Error + 'static>(&self) -> Option<&T> {
        match self {
            StorageError::Backend { source, .. } => source.downcast_ref::<T>(),
            _ => None,
        }
    }

    /// Whether the fault is a full disk: the reserve refused the write, or the file system
    /// reported no space left (ENOSPC).
    pub fn is_disk_full(&self) -> bool {
        match self {
            StorageError::DiskFull { .. }
            | StorageError::Backend {
                fault: Fault::DiskFull,
                ..
            } => true,
            StorageError::Io(io) => io.raw_os_error() == Some(ENOSPC),
            _ => false,
        }
    }

    /// Whether the fault is the database being out of reach (down, restarting, the connection
    /// broken): the request did nothing, and may succeed once it is back.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            StorageError::Backend {
                fault: Fault::Unavailable,
                ..
            }
        )
    }
}

/// Whether an I/O error is a full disk.
pub fn io_is_disk_full(error: &std::io::Error) -> bool {
    error.raw_os_error() == Some(ENOSPC)
}

/// Why a commit refused an operation (an expected outcome, not a fault).
#[derive(Debug, Clone, PartialEq)]
pub enum RejectReason {
    /// The operation's precondition or limits do not hold for its row.
    Refused {
        /// The operation's row.
        row_key: String,
        /// What does not hold.
        refusal: Refusal,
    },
    /// The table was deleted while the request was in flight.
    TableGone,
}

/// A refused commit: the 0-based index of the operation that failed, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// Index of the failing operation.
    pub index: usize,
    /// Why it failed.
    pub reason: RejectReason,
}

impl From<PlanRefusal> for Rejection {
    fn from(refused: PlanRefusal) -> Rejection {
        Rejection {
            index: refused.index,
            reason: RejectReason::Refused {
                row_key: refused.row_key,
                refusal: refused.refusal,
            },
        }
    }
}

impl From<crate::model::encoding::Corrupt> for StorageError {
    fn from(corrupt: crate::model::encoding::Corrupt) -> StorageError {
        StorageError::Corrupt(corrupt.0)
    }
}
