//! Point reads served awaited, sent together (`together.rs`): while point reads are on their way
//! to the database the next ones wait, and go in one statement ([`GET_MANY`], each key's table
//! looked up by name with its entity), as a read of many keys does. Each read still sees the
//! database as it is after its caller asked.

use tokio_postgres::Row;

use super::awaited_pool::AwaitedPool;
use super::many_keys::{ManyKeys, ManyRow, GET_MANY};
use super::together::{SharedFault, Together, Waiting};
use crate::storage::{StorageError, TableKey};

/// The store's point reads waiting, sent together.
pub(super) type WaitingReads = Waiting<PointReads>;

/// Point reads, as one statement of [`GET_MANY`].
pub(super) struct PointReads;

impl Together for PointReads {
    type Job = TableKey;
    /// The key's row of [`GET_MANY`].
    type Answer = Result<Row, StorageError>;
    const IN_FLIGHT: usize = 4;
    const MOST: usize = 100;

    fn fits(&self, _taken: &[TableKey], _key: &TableKey) -> bool {
        true
    }

    async fn send(&self, pool: &AwaitedPool, keys: Vec<TableKey>) -> Vec<Self::Answer> {
        let asked = ManyKeys::of(&keys);
        let rows = match pool.query(GET_MANY, &asked.params()).await {
            Ok(rows) => rows,
            Err(error) => {
                let fault = SharedFault::of(&error);
                return keys.iter().map(|_| Err(fault.error())).collect();
            }
        };
        let mut answers: Vec<Option<Row>> = keys.iter().map(|_| None).collect();
        for row in rows {
            match ManyRow::of(&row, keys.len()).map(|row| row.position) {
                Ok(position) => answers[position] = Some(row),
                Err(error) => {
                    let fault = SharedFault::of(&error);
                    return keys.iter().map(|_| Err(fault.error())).collect();
                }
            }
        }
        answers
            .into_iter()
            .map(|row| row.ok_or_else(|| StorageError::Corrupt("a read left a key out".into())))
            .collect()
    }
}
