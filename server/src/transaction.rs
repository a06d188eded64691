//! The rules of a transaction, checked before anything is read: 1 to 100 operations, each entity
//! at most once, the request at most 4 MiB; an entity group transaction acts on one partition
//! (checked here only, for both protocols: every operation names its entity), a transaction
//! across partitions on valid keys of any tables.

use std::collections::HashSet;

use crate::error::TableError;
use crate::model::{
    validate_key, KeyKind, Operation, TableName, MAX_TRANSACTION_BYTES, MAX_TRANSACTION_OPERATIONS,
};

/// One operation of a transaction across partitions: the table it acts on, and the operation.
#[derive(Debug, Clone)]
pub struct TableOperation {
    /// The table (case-insensitive).
    pub table: String,
    /// The operation, naming its entity.
    pub operation: Operation,
}

/// Checks an entity group transaction's shape. Errors about one operation carry its index.
pub fn validate(
    partition_key: &str,
    operations: &[Operation],
    request_bytes: usize,
) -> Result<(), TableError> {
    validate_size(operations.len(), request_bytes)?;
    validate_key(KeyKind::Partition, partition_key)?;
    let mut rows = HashSet::with_capacity(operations.len());
    for (index, operation) in operations.iter().enumerate() {
        if operation.partition_key() != partition_key {
            return Err(TableError::DifferentPartitions {
                expected: partition_key.to_owned(),
                found: operation.partition_key().to_owned(),
            }
            .at_operation(index));
        }
        if !rows.insert(operation.row_key()) {
            return Err(TableError::DuplicateRow {
                row_key: operation.row_key().to_owned(),
            }
            .at_operation(index));
        }
    }
    Ok(())
}

/// Checks a transaction across partitions, and gives each operation's table name: a name no
/// table could have is a table that does not exist. Errors about one operation carry its index.
pub fn validate_across(
    operations: &[TableOperation],
    request_bytes: usize,
) -> Result<Vec<TableName>, TableError> {
    validate_size(operations.len(), request_bytes)?;
    let mut entities = HashSet::with_capacity(operations.len());
    let mut tables = Vec::with_capacity(operations.len());
    for (index, TableOperation { table, operation }) in operations.iter().enumerate() {
        let at = |error: TableError| error.at_operation(index);
        let name =
            TableName::parse(table).map_err(|_| at(TableError::TableNotFound(table.clone())))?;
        validate_key(KeyKind::Partition, operation.partition_key()).map_err(|e| at(e.into()))?;
        let entity = (
            name.folded().to_owned(),
            operation.partition_key(),
            operation.row_key(),
        );
        if !entities.insert(entity) {
            return Err(at(TableError::DuplicateEntity {
                table: table.clone(),
                partition_key: operation.partition_key().to_owned(),
                row_key: operation.row_key().to_owned(),
            }));
        }
        tables.push(name);
    }
    Ok(tables)
}

/// 1 to 100 operations, the request at most 4 MiB.
fn validate_size(operations: usize, request_bytes: usize) -> Result<(), TableError> {
    if request_bytes > MAX_TRANSACTION_BYTES {
        return Err(TableError::RequestTooLarge {
            bytes: request_bytes,
            max: MAX_TRANSACTION_BYTES,
        });
    }
    if operations == 0 {
        return Err(TableError::EmptyTransaction);
    }
    if operations > MAX_TRANSACTION_OPERATIONS {
        return Err(TableError::TooManyOperations { count: operations }
            .at_operation(MAX_TRANSACTION_OPERATIONS));
    }
    Ok(())
}
