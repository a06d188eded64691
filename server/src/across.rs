//! Transactions and reads across partitions and tables: DynamoDB's `TransactWriteItems` and
//! `TransactGetItems` over the store's [`Store::commit_across`] and [`Store::get_many`].
//!
//! A transaction across partitions takes 1 to 100 operations on any entities of any tables and
//! applies all of them or none, serializable with every other write to the entities it touches;
//! one that happens to touch a single partition takes the single-partition path. A read of several
//! entities sees them at one instant: all or none of every transaction.
//!
//! [`Store::commit_across`]: crate::storage::Store::commit_across
//! [`Store::get_many`]: crate::storage::Store::get_many

use std::collections::{BTreeMap, HashSet};

use crate::engine::{rejection_error, Engine, Pending, Waiting};
use crate::error::TableError;
use crate::model::{validate_key, EntityKey, KeyKind, StoredEntity, TableName, MAX_READ_KEYS};
use crate::query;
use crate::storage::{Committed, EntityView, PartitionBatch, Rejection, StorageError, TableKey};
use crate::transaction::{validate_across, TableOperation};

/// One key of a read across partitions: the table (case-insensitive) and the entity's keys.
#[derive(Debug, Clone)]
pub struct TableEntityKey {
    /// The table (case-insensitive).
    pub table: String,
    /// The entity's keys.
    pub key: EntityKey,
}

impl Engine {
    /// Applies a transaction across partitions and tables: all operations or none. Errors name
    /// the failing operation's index; acknowledge it once its ticket is durable.
    pub fn transact_across(
        &self,
        operations: Vec<TableOperation>,
        request_bytes: usize,
    ) -> Result<Pending<Vec<Option<StoredEntity>>>, TableError> {
        let tables = validate_across(&operations, request_bytes)?;
        let count = operations.len();
        let names: Vec<(String, String)> = operations
            .iter()
            .map(|op| (op.table.clone(), op.operation.partition_key().to_owned()))
            .collect();
        let mut batches: BTreeMap<(String, String), PartitionBatch> = BTreeMap::new();
        for (position, (TableOperation { operation, .. }, table)) in
            operations.into_iter().zip(tables).enumerate()
        {
            let partition_key = operation.partition_key().to_owned();
            let batch = batches
                .entry((table.folded().to_owned(), partition_key.clone()))
                .or_insert_with(|| PartitionBatch {
                    table,
                    partition_key,
                    operations: Vec::new(),
                    positions: Vec::new(),
                });
            batch.operations.push(operation);
            batch.positions.push(position);
        }
        if batches.len() == 1 {
            let batch = batches.into_values().next().expect("one batch");
            return self.transact_one_partition(batch);
        }
        let batches: Vec<PartitionBatch> = batches.into_values().collect();
        match self.store().commit_across(batches, count)? {
            Ok(Committed { stored, ticket }) => Ok(Pending {
                value: stored,
                ticket,
            }),
            Err(Rejection { index, reason }) => {
                let (table, partition_key) = &names[index];
                Err(rejection_error(table, partition_key, reason).at_operation(index))
            }
        }
    }

    /// A transaction whose operations all act on one partition, on the single-partition path.
    fn transact_one_partition(
        &self,
        batch: PartitionBatch,
    ) -> Result<Pending<Vec<Option<StoredEntity>>>, TableError> {
        let PartitionBatch {
            table,
            partition_key,
            operations,
            ..
        } = batch;
        let committed = self.commit(
            table.as_str(),
            &partition_key,
            operations,
            true,
            Waiting::Allowed,
        );
        committed
            .map(|attempt| attempt.ran())
            .map_err(|error| match error {
                TableError::TableNotFound(_) => error.at_operation(0),
                other => other,
            })
    }

    /// Reads 1 to 100 entities of any partitions and tables at one instant, showing only the
    /// `select`ed properties (all when empty): for each key in order, what `read` made of its
    /// entity, or `None` where there is none. Errors about one key carry its index.
    pub fn get_many<R>(
        &self,
        keys: Vec<TableEntityKey>,
        select: &[String],
        mut read: impl FnMut(&EntityView<'_>) -> Result<R, StorageError>,
    ) -> Result<Vec<Option<R>>, TableError> {
        query::validate_selection(select)?;
        let keys = self.checked_keys(keys)?;
        let mut values: Vec<Option<R>> = keys.iter().map(|_| None).collect();
        self.store().get_many(&keys, &mut |position, entity| {
            values[position] = Some(read(&entity.selecting(select))?);
            Ok(())
        })?;
        Ok(values)
    }

    /// `keys` checked: 1 to 100, valid, each entity once, of tables that exist.
    fn checked_keys(&self, keys: Vec<TableEntityKey>) -> Result<Vec<TableKey>, TableError> {
        if keys.is_empty() {
            return Err(TableError::NoKeys);
        }
        if keys.len() > MAX_READ_KEYS {
            return Err(TableError::TooManyKeys { count: keys.len() }.at_operation(MAX_READ_KEYS));
        }
        let mut tables: BTreeMap<String, TableName> = BTreeMap::new();
        let mut seen = HashSet::with_capacity(keys.len());
        let mut checked = Vec::with_capacity(keys.len());
        for (index, TableEntityKey { table, key }) in keys.into_iter().enumerate() {
            let at = |error: TableError| error.at_operation(index);
            validate_key(KeyKind::Partition, &key.partition_key).map_err(|e| at(e.into()))?;
            validate_key(KeyKind::Row, &key.row_key).map_err(|e| at(e.into()))?;
            let folded = table.to_ascii_lowercase();
            let name = match tables.get(&folded) {
                Some(name) => name.clone(),
                None => {
                    let name = self.table(&table).map_err(at)?.name().clone();
                    tables.entry(folded).or_insert(name).clone()
                }
            };
            if !seen.insert((name.folded().to_owned(), key.clone())) {
                return Err(at(TableError::DuplicateEntity {
                    table,
                    partition_key: key.partition_key,
                    row_key: key.row_key,
                }));
            }
            checked.push(TableKey { table: name, key });
        }
        Ok(checked)
    }
}
