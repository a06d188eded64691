//! The housekeeping lease: over one database, one server at a time tends the tables (trims the
//! change feeds, removes expired entities): the one holding the lease, a row of `trestle_meta`
//! naming its holder and when the lease runs out by the database's clock. The holder renews it at
//! each pass (every second) that finds a table to tend; when it stops, dies, loses the database
//! or has nothing to tend, the lease runs out ([`LEASE_MILLIS`]) and the next server to try takes
//! it. No session state is kept, so the lease works through a transaction-mode pooler too.
//! Without it every server swept every table whose entities expire and trimmed every feed, the
//! same work once per server.

use super::pool::Pool;
use crate::storage::secret::random_bytes;
use crate::storage::StorageError;

/// How long a lease lasts past its last renewal, in milliseconds.
const LEASE_MILLIS: i64 = 10_000;

/// Takes the lease for holder `$1` until `$2` ms from now if it is free, run out or already
/// `$1`'s; a row if `$1` holds it. The row's value is `<holder> <end in ms since the epoch>`.
const TAKE_LEASE: &str = "INSERT INTO trestle_meta AS lease (key, value)
    VALUES ('housekeeping_lease', convert_to($1 || ' '
        || (extract(epoch FROM clock_timestamp()) * 1000)::int8 + $2, 'UTF8'))
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value
    WHERE split_part(convert_from(lease.value, 'UTF8'), ' ', 1) = $1
        OR split_part(convert_from(lease.value, 'UTF8'), ' ', 2)::int8
            < (extract(epoch FROM clock_timestamp()) * 1000)::int8
    RETURNING 1";

/// This server's claim on the lease: a random name of its own.
#[derive(Debug)]
pub(super) struct Lease {
    holder: String,
}

impl Lease {
    /// A name no other server has.
    pub(super) fn new() -> Result<Lease, StorageError> {
        let name: [u8; 16] = random_bytes()?;
        let holder = name.iter().map(|byte| format!("{byte:02x}")).collect();
        Ok(Lease { holder })
    }

    /// Whether this server holds the lease now (taken or renewed).
    pub(super) fn held(&self, pool: &Pool) -> Result<bool, StorageError> {
        let taken = pool.query(TAKE_LEASE, &[&self.holder, &LEASE_MILLIS])?;
        Ok(!taken.is_empty())
    }
}
