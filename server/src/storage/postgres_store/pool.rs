//! The PostgreSQL store's connections: a fixed number, each lent to one call at a time, each
//! with its statements prepared once, lent in the order calls asked for them (a connection given
//! back goes straight to the longest waiter, so no call, a change feed's follower among many
//! writers say, waits behind later ones); a connection the database dropped (a restart, a
//! failover) is replaced by a new one at its next use, so the store recovers by itself.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use postgres::config::SslMode;
use postgres::types::ToSql;
use postgres::{Client, Config, NoTls, Row, Statement};

use super::tls::Rustls;

use crate::storage::{Fault, StorageError};

/// How long connecting may take, unless the URL says (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection and the statements prepared on it.
pub(super) struct Connection {
    pub(super) client: Client,
    statements: HashMap<String, Statement>,
}

impl Connection {
    fn open(config: &Config, tls: Option<&Rustls>) -> Result<Connection, postgres::Error> {
        let client = match tls {
            Some(tls) => config.connect(tls.clone())?,
            None => config.connect(NoTls)?,
        };
        Ok(Connection {
            client,
            statements: HashMap::new(),
        })
    }

    /// Splits the connection into its client and its statement cache, so that statements can be
    /// prepared inside a transaction the client is lent to.
    pub(super) fn parts(&mut self) -> (&mut Client, Prepared<'_>) {
        (&mut self.client, Prepared(&mut self.statements))
    }
}

/// A connection's prepared statements, by their SQL.
pub(super) struct Prepared<'a>(&'a mut HashMap<String, Statement>);

impl Prepared<'_> {
    /// The statement of `sql`, prepared through `client` the first time.
    pub(super) fn get(
        &mut self,
        client: &mut impl postgres::GenericClient,
        sql: &str,
    ) -> Result<Statement, postgres::Error> {
        if let Some(statement) = self.0.get(sql) {
            return Ok(statement.clone());
        }
        let statement = client.prepare(sql)?;
        self.0.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

/// A connection slot: `None` if it has no connection (never connected, or dropped by the
/// database), in which case it connects when it is next lent.
type Slot = Option<Connection>;

/// A fixed set of connection slots, lent first come, first served.
pub(super) struct Pool {
    config: Config,
    /// Set when the URL says `sslmode=require`.
    tls: Option<Rustls>,
    slots: Mutex<Slots>,
}

/// The slots not lent, and the calls waiting for one, oldest first.
struct Slots {
    free: Vec<Slot>,
    waiting: VecDeque<Arc<Handoff>>,
}

/// Where a slot given back is handed to a waiting call.
#[derive(Default)]
struct Handoff {
    slot: Mutex<Option<Slot>>,
    handed: Condvar,
}

impl Handoff {
    /// Waits until a slot is handed over.
    fn wait(&self) -> Slot {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match slot.take() {
                Some(handed) => return handed,
                None => {
                    slot = self
                        .handed
                        .wait(slot)
                        .unwrap_or_else(PoisonError::into_inner)
                }
            }
        }
    }
}

impl Pool {
    /// Connects `size` times to the database of `config` (so that a server that cannot reach it,
    /// or is refused, says so at start), over TLS with `tls` if the URL requires it.
    pub(super) fn connect(
        mut config: Config,
        size: usize,
        tls: Rustls,
    ) -> Result<Pool, postgres::Error> {
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let tls = (config.get_ssl_mode() == SslMode::Require).then_some(tls);
        let slots = (0..size.max(1))
            .map(|_| Connection::open(&config, tls.as_ref()).map(Some))
            .collect::<Result<_, _>>()?;
        Ok(Pool {
            config,
            tls,
            slots: Mutex::new(Slots {
                free: slots,
                waiting: VecDeque::new(),
            }),
        })
    }

    /// Runs `f` with a connection, waiting for a slot to be free.
    pub(super) fn with<R>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<R, StorageError>,
    ) -> Result<R, StorageError> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let free = slots.free.pop();
        let waited = free.is_none();
        let slot = match free {
            Some(slot) => {
                drop(slots);
                slot
            }
            None => {
                let handoff = Arc::new(Handoff::default());
                slots.waiting.push_back(handoff.clone());
                drop(slots);
                handoff.wait()
            }
        };
        crate::telemetry::connection_lent(waited);
        let mut lent = Lent {
            pool: self,
            slot: slot.filter(|connection| !connection.client.is_closed()),
        };
        if lent.slot.is_none() {
            lent.slot = Some(Connection::open(&self.config, self.tls.as_ref())?);
        }
        f(lent.slot.as_mut().expect("a connection was lent or opened"))
    }

    /// Runs the one statement `sql` (prepared on the connection lent) and returns its rows.
    pub(super) fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StorageError> {
        self.with(|connection| {
            let (client, mut prepared) = connection.parts();
            let statement = prepared.get(client, sql)?;
            Ok(client.query(&statement, params)?)
        })
    }

    /// Runs the one statement `sql`, which returns at most one row.
    pub(super) fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, StorageError> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// Hands `slot` to the longest waiting call, or keeps it free.
    fn give_back(&self, slot: Slot) {
        crate::telemetry::connection_returned();
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        match slots.waiting.pop_front() {
            Some(handoff) => {
                drop(slots);
                *handoff.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(slot);
                handoff.handed.notify_one();
            }
            None => slots.free.push(slot),
        }
    }
}

/// A slot lent to a call, given back when the call ends, however it ends: with its connection if
/// that is still open, empty if the call panicked (the connection may be inside a transaction
/// the call left half done: dropping it ends that on the database's side).
struct Lent<'a> {
    pool: &'a Pool,
    slot: Slot,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        let slot = self
            .slot
            .take()
            .filter(|connection| !connection.client.is_closed() && !std::thread::panicking());
        self.pool.give_back(slot);
    }
}

impl Drop for Pool {
    /// Closes the connections on a thread of its own: closing blocks, which a runtime worker
    /// (where the last handle on the store may go) must not.
    fn drop(&mut self) {
        let slots = std::mem::take(
            &mut self
                .slots
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .free,
        );
        std::thread::spawn(move || drop(slots));
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pool")
    }
}

/// Whether `error` says the database is out of reach (down, restarting, refusing connections,
/// or the connection broke) rather than that a statement failed: worth retrying later.
pub(super) fn is_unreachable(error: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    if error.is_closed() {
        return true;
    }
    if let Some(code) = error.code() {
        return code.code().starts_with("08")
            || [
                SqlState::ADMIN_SHUTDOWN,
                SqlState::CRASH_SHUTDOWN,
                SqlState::CANNOT_CONNECT_NOW,
            ]
            .contains(code);
    }
    // No SQL state: the connection itself failed (refused, reset, timed out).
    std::error::Error::source(error).is_some_and(|source| source.is::<std::io::Error>())
}

/// How often a commit is run again after a serialization failure or a deadlock before the
/// failure is reported.
const COMMIT_ATTEMPTS: u32 = 10;

/// Runs `commit` (one database transaction) again after a serialization failure or a deadlock,
/// which engines without advisory locks may raise, up to [`COMMIT_ATTEMPTS`] times.
pub(super) fn retrying<R>(
    mut commit: impl FnMut() -> Result<R, StorageError>,
) -> Result<R, StorageError> {
    let mut attempt = 1;
    loop {
        match commit() {
            Err(error)
                if database_error(&error).is_some_and(is_retryable)
                    && attempt < COMMIT_ATTEMPTS =>
            {
                tracing::debug!(%error, attempt, "commit conflicted in the database; again");
                std::thread::sleep(std::time::Duration::from_millis(u64::from(attempt)));
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

/// Whether `error` is a serialization failure or a deadlock: the transaction did nothing and
/// may be run again.
pub(super) fn is_retryable(error: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    error.code().is_some_and(|code| {
        [
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
        ]
        .contains(code)
    })
}

/// What `error` says in full: the database's own message and code for a statement it refused
/// (the driver's display says only "db error"), else the driver's error and its cause.
pub(super) fn explain(error: &postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    match std::error::Error::source(error) {
        Some(cause) => format!("{error}: {cause}"),
        None => error.to_string(),
    }
}

/// Whether `error` is a unique violation: a row a commit of inserts meant to add exists.
pub(super) fn is_unique_violation(error: &StorageError) -> bool {
    database_error(error)
        .is_some_and(|error| error.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION))
}

/// The database's own error behind a storage fault, if it came from the database.
pub(super) fn database_error(error: &StorageError) -> Option<&postgres::Error> {
    error
        .backend_source::<DatabaseError>()
        .map(|error| &error.0)
}

/// A database error, displayed with what the server said (the driver's display says only "db
/// error").
#[derive(Debug)]
pub(crate) struct DatabaseError(pub(crate) postgres::Error);

impl std::fmt::Display for DatabaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&explain(&self.0))
    }
}

impl std::error::Error for DatabaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// The database's faults, classified for the storage contract: out of reach, a full disk, or a
/// failure.
impl From<postgres::Error> for StorageError {
    fn from(error: postgres::Error) -> StorageError {
        let fault = if is_unreachable(&error) {
            Fault::Unavailable
        } else if error.code() == Some(&postgres::error::SqlState::DISK_FULL) {
            Fault::DiskFull
        } else {
            Fault::Failed
        };
        StorageError::backend(fault, DatabaseError(error)).during("postgres")
    }
}
