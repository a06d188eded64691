//! Transactions and reads across partitions and tables: DynamoDB's `TransactWriteItems` and
//! `TransactGetItems` over the store's one [`Store::commit`] and [`Store::get_many`].
//!
//! A transaction across partitions takes 1 to 100 operations on any entities of any tables and
//! applies all of them or none, serializable with every other write to the entities it touches;
//! the store picks its strategy (one that touches a single partition takes the partition's). A
//! read of several entities sees them at one instant: all or none of every transaction.
//!
//! [`Store::commit`]: crate::storage::Store::commit
//! [`Store::get_many`]: crate::storage::Store::get_many

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::engine::{lookup_name, rejection_error, settled, Attempt, Engine, Pending, Waiting};
use crate::error::TableError;
use crate::idempotency::IdempotencyClaim;
use crate::model::{
    validate_key, EntityKey, KeyKind, StoredEntity, TableName, Ticks, TimeToLive, MAX_READ_KEYS,
};
use crate::query;
use crate::storage::{Commit, EntityView, PartitionBatch, Rejection, StorageError, TableKey};
use crate::transaction::{validate_across, TableOperation};

/// The error a refusal of a commit across partitions is, naming the refused operation (`names`
/// has each one's table and partition).
fn refusal_across(names: &[(String, String)]) -> impl FnOnce(Rejection) -> TableError + '_ {
    |Rejection { index, reason }| {
        let (table, partition_key) = &names[index];
        rejection_error(table, partition_key, reason).at_operation(index)
    }
}

/// One key of a read across partitions: the table (case-insensitive) and the entity's keys.
#[derive(Debug, Clone)]
pub struct TableEntityKey {
    /// The table (case-insensitive).
    pub table: String,
    /// The entity's keys.
    pub key: EntityKey,
}

/// A transaction across partitions, checked and grouped by partition, ready to commit
/// ([`CrossCommit::prepare`], then [`Engine::commit_across`]).
#[derive(Debug)]
pub struct CrossCommit {
    /// One batch per partition, in the order of the partitions' first operations.
    batches: Vec<PartitionBatch>,
    /// Each operation's table (as named) and partition, for a refusal's error.
    names: Vec<(String, String)>,
}

impl CrossCommit {
    /// Checks a transaction across partitions and tables (1 to 100 operations, each entity once,
    /// at most 4 MiB) and groups it by partition. Reads nothing.
    pub fn prepare(
        operations: Vec<TableOperation>,
        request_bytes: usize,
    ) -> Result<CrossCommit, TableError> {
        let tables = validate_across(&operations, request_bytes)?;
        let names = operations
            .iter()
            .map(|op| (op.table.clone(), op.operation.partition_key().to_owned()))
            .collect();
        let mut batches: Vec<PartitionBatch> = Vec::new();
        let mut batch_of: HashMap<(String, String), usize> = HashMap::new();
        for (position, (TableOperation { operation, .. }, table)) in
            operations.into_iter().zip(tables).enumerate()
        {
            let partition_key = operation.partition_key().to_owned();
            let at = *batch_of
                .entry((table.folded().to_owned(), partition_key.clone()))
                .or_insert_with(|| {
                    batches.push(PartitionBatch {
                        table,
                        partition_key,
                        operations: Vec::new(),
                        positions: Vec::new(),
                        seals_outcome: false,
                    });
                    batches.len() - 1
                });
            batches[at].operations.push(operation);
            batches[at].positions.push(position);
        }
        Ok(CrossCommit { batches, names })
    }
}

impl Engine {
    /// Commits a prepared transaction through the store's one commit
    /// ([`crate::storage::Store::commit`]): all operations or none; errors name the failing
    /// operation's index. Acknowledge it once its ticket is durable.
    pub async fn commit_across(
        &self,
        commit: CrossCommit,
        claim: Option<&IdempotencyClaim>,
    ) -> Result<Pending<Vec<Option<StoredEntity>>>, TableError> {
        let CrossCommit { batches, names } = commit;
        let commit = Commit {
            batches,
            operations: names.len(),
        };
        let committed = self.commit_once(commit, claim).await?;
        settled(committed, refusal_across(&names))
    }

    /// Reads 1 to 100 entities of any partitions and tables at one instant, showing only the
    /// `select`ed properties (all when empty): for each key in order, what `read` made of its
    /// entity, or `None` where there is none. Errors about one key carry its index. Not allowed
    /// to wait, it gives the keys back rather than wait for a commit in progress.
    pub fn get_many<R>(
        &self,
        keys: Vec<TableEntityKey>,
        select: &[String],
        read: impl Fn(&EntityView<'_>) -> Result<R, StorageError>,
        waiting: Waiting,
    ) -> Result<Attempt<Vec<Option<R>>, Vec<TableEntityKey>>, TableError> {
        query::validate_selection(select)?;
        // Each distinct table looked up once: its name as created, and its time to live.
        let mut rules: BTreeMap<String, (TableName, Option<TimeToLive>)> = BTreeMap::new();
        let keys = checked_keys(&keys, |table| {
            let folded = table.to_ascii_lowercase();
            if let Some((name, _)) = rules.get(&folded) {
                return Ok(name.clone());
            }
            let found = self.table(table)?;
            let name = found.name().clone();
            rules.insert(folded, (name.clone(), found.time_to_live()));
            Ok(name)
        })?;
        let ttls: Vec<Option<TimeToLive>> =
            keys.iter().map(|key| rules[key.table.folded()].1).collect();
        let mut many = ManyRead::new(keys.len(), select, read);
        let mut found =
            |position: usize, entity: EntityView<'_>| many.take(position, ttls[position], entity);
        let read_all = match waiting {
            Waiting::Allowed => {
                self.store().get_many(&keys, &mut found)?;
                true
            }
            Waiting::NotAllowed => self.store().try_get_many(&keys, &mut found)?,
        };
        if !read_all {
            let given_back = keys
                .into_iter()
                .map(|TableKey { table, key }| TableEntityKey {
                    table: table.as_str().to_owned(),
                    key,
                })
                .collect();
            return Ok(Attempt::WouldWait(given_back));
        }
        Ok(Attempt::Done(many.values))
    }

    /// [`Engine::get_many`], awaited where the store serves such reads so
    /// ([`crate::storage::Store::awaited`]), the tables looked up with the entities; elsewhere,
    /// or if a key is invalid (the blocking way names the first fault in key order), the keys
    /// are given back.
    pub async fn get_many_awaited<R: Send>(
        &self,
        keys: Vec<TableEntityKey>,
        select: &[String],
        read: impl Fn(&EntityView<'_>) -> Result<R, StorageError> + Send,
    ) -> Result<Attempt<Vec<Option<R>>, Vec<TableEntityKey>>, TableError> {
        let Some(awaited) = self.store().awaited() else {
            return Ok(Attempt::WouldWait(keys));
        };
        query::validate_selection(select)?;
        let Ok(checked) = checked_keys(&keys, lookup_name) else {
            return Ok(Attempt::WouldWait(keys));
        };
        let mut many = ManyRead::new(checked.len(), select, read);
        let mut found = |position: usize, ttl: Option<TimeToLive>, entity: EntityView<'_>| {
            many.take(position, ttl, entity)
        };
        match awaited.get_many_named(&checked, &mut found).await? {
            None => Ok(Attempt::Done(many.values)),
            Some(missing) => {
                let table = keys[missing].table.clone();
                Err(TableError::TableNotFound(table).at_operation(missing))
            }
        }
    }
}

/// `keys` checked, in order: 1 to 100, valid, each entity once, of the tables `table` names
/// (an error of its is the key's).
fn checked_keys(
    keys: &[TableEntityKey],
    mut table: impl FnMut(&str) -> Result<TableName, TableError>,
) -> Result<Vec<TableKey>, TableError> {
    if keys.is_empty() {
        return Err(TableError::NoKeys);
    }
    if keys.len() > MAX_READ_KEYS {
        return Err(TableError::TooManyKeys { count: keys.len() }.at_operation(MAX_READ_KEYS));
    }
    let mut seen = HashSet::with_capacity(keys.len());
    let mut checked = Vec::with_capacity(keys.len());
    for (index, TableEntityKey { table: named, key }) in keys.iter().enumerate() {
        let at = |error: TableError| error.at_operation(index);
        validate_key(KeyKind::Partition, &key.partition_key).map_err(|e| at(e.into()))?;
        validate_key(KeyKind::Row, &key.row_key).map_err(|e| at(e.into()))?;
        let name = table(named).map_err(at)?;
        if !seen.insert((name.folded().to_owned(), key.clone())) {
            return Err(at(TableError::DuplicateEntity {
                table: named.clone(),
                partition_key: key.partition_key.clone(),
                row_key: key.row_key.clone(),
            }));
        }
        checked.push(TableKey {
            table: name,
            key: key.clone(),
        });
    }
    Ok(checked)
}

/// What a read of many keys made of the entities found, by position: an expired entity reads
/// as missing (until the server removes it), and `read` is shown only the `select`ed properties.
struct ManyRead<'s, F, R> {
    values: Vec<Option<R>>,
    select: &'s [String],
    read: F,
    now: Ticks,
}

impl<'s, F, R> ManyRead<'s, F, R>
where
    F: Fn(&EntityView<'_>) -> Result<R, StorageError>,
{
    fn new(keys: usize, select: &'s [String], read: F) -> Self {
        ManyRead {
            values: (0..keys).map(|_| None).collect(),
            select,
            read,
            now: Ticks::now(),
        }
    }

    fn take(
        &mut self,
        position: usize,
        ttl: Option<TimeToLive>,
        entity: EntityView<'_>,
    ) -> Result<(), StorageError> {
        if !entity.expired(ttl, self.now)? {
            self.values[position] = Some((self.read)(&entity.selecting(self.select))?);
        }
        Ok(())
    }
}
