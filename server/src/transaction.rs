//! The rules of an entity group transaction, checked before anything is read: 1 to 100 operations,
//! one partition (checked here only, for both protocols: every operation names its entity), each
//! row at most once, the request at most 4 MiB.

use std::collections::HashSet;

use crate::error::TableError;
use crate::model::{
    validate_key, KeyKind, Operation, MAX_TRANSACTION_BYTES, MAX_TRANSACTION_OPERATIONS,
};

/// Checks a transaction's shape. Errors about one operation carry its index.
pub fn validate(
    partition_key: &str,
    operations: &[Operation],
    request_bytes: usize,
) -> Result<(), TableError> {
    if request_bytes > MAX_TRANSACTION_BYTES {
        return Err(TableError::RequestTooLarge {
            bytes: request_bytes,
            max: MAX_TRANSACTION_BYTES,
        });
    }
    if operations.is_empty() {
        return Err(TableError::EmptyTransaction);
    }
    if operations.len() > MAX_TRANSACTION_OPERATIONS {
        return Err(TableError::TooManyOperations {
            count: operations.len(),
        }
        .at_operation(MAX_TRANSACTION_OPERATIONS));
    }
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
