//! The connections of the PostgreSQL store's awaited calls, which the server's runtime drives
//! (tokio-postgres), so that a request waiting for the database holds no thread. Each call
//! borrows a connection for itself (a slow statement delays no other call), in the order calls
//! asked for one; connections are opened when first needed, at most the pool's size, and one the
//! database dropped (a restart, a failover) is replaced at its next use.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::join_all;
use futures_util::FutureExt;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, NoTls, Row, RowStream, Statement};

use super::tls::Rustls;
use crate::storage::StorageError;

/// A connection of the awaited pool and the statements prepared on it, by their SQL.
struct Connection {
    client: Client,
    statements: HashMap<String, Statement>,
}

/// The awaited calls' connections.
pub(super) struct AwaitedPool {
    config: Config,
    tls: Option<Rustls>,
    /// One permit per connection: a call holds one while it borrows a connection.
    permits: Semaphore,
    /// Half as many (at least one): a query's snapshot holds one too
    /// ([`AwaitedPool::borrow_for_query`]), so that queries never hold every connection that
    /// point reads and commits wait for.
    queries: Semaphore,
    free: Mutex<Vec<Connection>>,
}

impl AwaitedPool {
    /// A pool of at most `size` connections to the database of `config` (with `tls` if given),
    /// none opened yet.
    pub(super) fn new(mut config: Config, size: usize, tls: Option<Rustls>) -> AwaitedPool {
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        AwaitedPool {
            config,
            tls,
            permits: Semaphore::new(size.max(1)),
            queries: Semaphore::new((size / 2).max(1)),
            free: Mutex::default(),
        }
    }

    /// Runs the statement `sql` (prepared on the connection borrowed, the first time) with
    /// `params`: its rows.
    pub(super) async fn query(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StorageError> {
        self.borrow().await?.query(sql, params).await
    }

    /// A connection for one call, opened if none is free, once one of the pool's permits is.
    pub(super) async fn borrow(&self) -> Result<Borrowed<'_>, StorageError> {
        let waited = self.permits.available_permits() == 0;
        let permit = self.permits.acquire().await.expect("never closed");
        crate::telemetry::connection_lent(waited);
        let mut borrowed = Borrowed {
            pool: self,
            connection: None,
            in_transaction: false,
            _permit: permit,
        };
        borrowed.connection = Some(match self.take_free() {
            Some(connection) => connection,
            None => self.connect().await?,
        });
        Ok(borrowed)
    }

    /// A connection for a query's snapshot, once one of the queries' permits is free (held
    /// with the connection), then one of the pool's.
    pub(super) async fn borrow_for_query(
        &self,
    ) -> Result<(SemaphorePermit<'_>, Borrowed<'_>), StorageError> {
        let query = self.queries.acquire().await.expect("never closed");
        Ok((query, self.borrow().await?))
    }

    /// A free connection still open, if there is one.
    fn take_free(&self) -> Option<Connection> {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        std::iter::from_fn(|| free.pop()).find(|connection| !connection.client.is_closed())
    }

    /// Opens a connection, driven by a task of its own on the runtime.
    async fn connect(&self) -> Result<Connection, StorageError> {
        let client = match &self.tls {
            Some(tls) => {
                let (client, connection) = self.config.connect(tls.clone()).await?;
                tokio::spawn(connection);
                client
            }
            None => {
                let (client, connection) = self.config.connect(NoTls).await?;
                tokio::spawn(connection);
                client
            }
        };
        Ok(Connection {
            client,
            statements: HashMap::new(),
        })
    }
}

/// A connection borrowed by a call, given back when the call ends however it ends (its future
/// may be dropped mid-statement: the connection reads the answer and stays usable), if it is
/// still open and not inside a transaction: one left inside (the call was dropped between its
/// round trips, or failed) is closed instead, and the database rolls the transaction back.
pub(super) struct Borrowed<'a> {
    pool: &'a AwaitedPool,
    connection: Option<Connection>,
    /// Set while a transaction the call began may be open.
    pub(super) in_transaction: bool,
    _permit: SemaphorePermit<'a>,
}

/// A statement of a pipeline and its parameters.
pub(super) type Pipelined<'a> = (&'static str, Vec<&'a (dyn ToSql + Sync)>);

impl Borrowed<'_> {
    /// The connection's client.
    fn client(&self) -> &Client {
        &self
            .connection
            .as_ref()
            .expect("lent with a connection")
            .client
    }

    /// The statement `sql`, prepared on the connection the first time.
    async fn prepared(&mut self, sql: &str) -> Result<Statement, StorageError> {
        let connection = self.connection.as_mut().expect("lent with a connection");
        if let Some(statement) = connection.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = connection.client.prepare(sql).await?;
        connection
            .statements
            .insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Runs the statement `sql` (prepared the first time) with `params`: its rows.
    pub(super) async fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StorageError> {
        let statement = self.prepared(sql).await?;
        Ok(self.client().query(&statement, params).await?)
    }

    /// Runs the statement `sql` (prepared the first time) with `params`: its rows as they arrive,
    /// so that the first are read while the database is still sending the rest. A stream dropped
    /// before its end leaves the connection usable (it reads the rest and drops them).
    pub(super) async fn query_rows(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<RowStream, StorageError> {
        let statement = self.prepared(sql).await?;
        let params = params.iter().map(|param| *param as &dyn ToSql);
        Ok(self.client().query_raw(&statement, params).await?)
    }

    /// Ends the transaction the call began with `sql` (`COMMIT` or `ROLLBACK`): the connection
    /// may then be lent again.
    pub(super) async fn end(&mut self, sql: &'static str) -> Result<(), StorageError> {
        let answers = self.pipeline(&[(sql, Vec::new())]).await?;
        answers
            .into_iter()
            .try_for_each(|answer| answer.map(drop))?;
        self.in_transaction = false;
        Ok(())
    }

    /// Ends a read-only transaction with `sql` without waiting for the answer, which can tell
    /// its caller nothing: what it read was read. The request is sent at once (tokio-postgres
    /// sends it when its future is first polled; the connection drops the answer), and whatever
    /// the connection's next borrower sends runs after it, the protocol keeping the order; a
    /// connection lost meanwhile is found closed and not lent again. A page's answer leaves a
    /// round trip sooner.
    pub(super) fn end_unanswered(&mut self, sql: &'static str) {
        // Polled once: sent. Its outcome, if it came at once, says no more than the answer would.
        let _sent = self.client().batch_execute(sql).now_or_never();
        self.in_transaction = false;
    }

    /// Runs `statements` in order in one round trip (a pipeline: tokio-postgres sends a request
    /// when its future is first polled, and `join_all` polls them in order), each prepared the
    /// first time it runs on the connection: each one's rows, or its error (after an error in a
    /// transaction, the statements after it fail too, and its `COMMIT` rolls back).
    pub(super) async fn pipeline(
        &mut self,
        statements: &[Pipelined<'_>],
    ) -> Result<Vec<Result<Vec<Row>, StorageError>>, StorageError> {
        let mut prepared = Vec::with_capacity(statements.len());
        for (sql, _) in statements {
            prepared.push(self.prepared(sql).await?);
        }
        let client = self.client();
        let sent = prepared
            .iter()
            .zip(statements)
            .map(|(statement, (_, params))| client.query(statement, params));
        let answers = join_all(sent).await;
        Ok(answers
            .into_iter()
            .map(|answer| answer.map_err(StorageError::from))
            .collect())
    }
}

impl Drop for Borrowed<'_> {
    fn drop(&mut self) {
        crate::telemetry::connection_returned();
        if let Some(connection) = self.connection.take() {
            let usable = !connection.client.is_closed() && !self.in_transaction;
            if usable && !std::thread::panicking() {
                let mut free = self
                    .pool
                    .free
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                free.push(connection);
            }
        }
    }
}

impl std::fmt::Debug for AwaitedPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AwaitedPool")
    }
}
