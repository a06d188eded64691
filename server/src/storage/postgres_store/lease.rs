//! The housekeeping lease: over one database, one server at a time tends the tables (trims the
//! change feeds, removes expired entities): the one holding a session-level advisory lock on a
//! connection of its own. The lock lives as long as that connection, so a server that stops,
//! dies or loses the database lets it go, and another server takes it at its next pass (each
//! tries every second). Without it every server swept every table whose entities expire and
//! trimmed every feed, the same work once per server.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use postgres::Client;

use super::pool::Pool;
use crate::storage::StorageError;

/// Takes the lease if no session holds it: its keys are a class of their own (beside the
/// tables', `table_lock_class!`) and 0.
const TAKE_LEASE: &str = "SELECT pg_try_advisory_lock(29811, 0)";

/// How long a check that the lease's connection is still open may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// This server's connection for the lease, once opened, and whether it holds the lease.
#[derive(Default)]
pub(super) struct Lease {
    connection: Mutex<Option<(Client, bool)>>,
}

impl Lease {
    /// Whether this server holds the lease now, taken if no server holds it.
    pub(super) fn held(&self, pool: &Pool) -> Result<bool, StorageError> {
        let mut connection = self
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((client, holding)) = connection.as_mut() {
            match client.is_valid(CHECK_TIMEOUT) {
                Ok(()) if *holding => return Ok(true),
                Ok(()) => {}
                // The session, and the lock with it, is gone.
                Err(_) => *connection = None,
            }
        }
        let (client, holding) = match connection.as_mut() {
            Some(open) => open,
            None => connection.insert((pool.open_client()?, false)),
        };
        *holding = client.query_one(TAKE_LEASE, &[])?.get(0);
        Ok(*holding)
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lease")
    }
}
