//! Storage faults (I/O, corruption) and the expected refusals of a commit.

use thiserror::Error;

use crate::model::{PlanRefusal, Refusal};

/// A fault of the store itself: never the client's doing, always worth logging.
#[derive(Debug, Error)]
pub enum StorageError {
    /// sled failed (I/O, or a corruption it detected).
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    /// The PostgreSQL store's database failed (unreachable, refused, or a statement failed).
    #[error("postgres: {}", super::postgres_store::explain(.0))]
    Postgres(#[from] postgres::Error),
    /// The PostgreSQL store's database could not be opened: `what` says which and why.
    #[error("{what}: {}", super::postgres_store::explain(.error))]
    Database {
        what: String,
        #[source]
        error: postgres::Error,
    },
    /// The file system failed outside sled.
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
    /// The index a build step or state change names was dropped (the build stops).
    #[error("the index was dropped")]
    IndexGone,
    /// Free space on the data directory's disk is below the reserve: writes are refused before
    /// they start, so sled never meets a full disk mid-write.
    #[error("the data directory's disk has {free_mib} MiB free, below the {reserve_mib} MiB reserve; writes resume once space is freed")]
    DiskFull { free_mib: u64, reserve_mib: u64 },
}

impl StorageError {
    /// Whether the fault is a full disk: the reserve refused the write, or the file system
    /// reported no space left (ENOSPC).
    pub fn is_disk_full(&self) -> bool {
        const ENOSPC: i32 = 28;
        match self {
            StorageError::DiskFull { .. } => true,
            StorageError::Io(io) | StorageError::Sled(sled::Error::Io(io)) => {
                io.raw_os_error() == Some(ENOSPC)
            }
            _ => false,
        }
    }
}

impl StorageError {
    /// Whether the fault is the database being out of reach (down, restarting, the connection
    /// broken): the request did nothing, and may succeed once it is back.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StorageError::Postgres(error) | StorageError::Database { error, .. } => {
                super::postgres_store::is_unreachable(error)
            }
            _ => false,
        }
    }
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
