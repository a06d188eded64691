//! The service's error type, [`TableError`], and the Azure error codes it maps to (one enum,
//! [`ErrorCode`], shared with the SDK through `trestle-proto`).
//!
//! Nothing here knows gRPC: `grpc::status` turns a `TableError` into a status for the wire.

use thiserror::Error;

use crate::model::{quoted, ValidationError};
use crate::storage::StorageError;
pub use trestle_proto::ErrorCode;

/// Everything a table operation can fail with.
#[derive(Debug, Error)]
pub enum TableError {
    /// Bad input.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// No such table.
    #[error("table {} does not exist", quoted(.0))]
    TableNotFound(String),
    /// The table exists.
    #[error("table {} already exists", quoted(.0))]
    TableAlreadyExists(String),
    /// The table of that name is being deleted.
    #[error("table {} is being deleted; try again once its data is reclaimed", quoted(.0))]
    TableBeingDeleted(String),
    /// No such entity.
    #[error(
        "entity (PartitionKey {}, RowKey {}) does not exist",
        quoted(partition_key),
        quoted(row_key)
    )]
    EntityNotFound {
        partition_key: String,
        row_key: String,
    },
    /// The entity exists.
    #[error(
        "entity (PartitionKey {}, RowKey {}) already exists",
        quoted(partition_key),
        quoted(row_key)
    )]
    EntityAlreadyExists {
        partition_key: String,
        row_key: String,
    },
    /// The entity's ETag is not the one required.
    #[error("the update condition was not satisfied: entity (PartitionKey {}, RowKey {}) has changed since the given ETag", quoted(partition_key), quoted(row_key))]
    ConditionNotSatisfied {
        partition_key: String,
        row_key: String,
    },
    /// A patch's condition is false of the entity.
    #[error(
        "the patch's condition {} is false for entity (PartitionKey {}, RowKey {})",
        quoted(condition),
        quoted(partition_key),
        quoted(row_key)
    )]
    PatchConditionFalse {
        partition_key: String,
        row_key: String,
        condition: String,
    },
    /// The table has no such index.
    #[error("table {} has no index {}", quoted(table), quoted(index))]
    IndexNotFound { table: String, index: String },
    /// The table has an index of that name.
    #[error(
        "table {} already has an index {} (index names ignore case)",
        quoted(table),
        quoted(index)
    )]
    IndexAlreadyExists { table: String, index: String },
    /// The table has as many indexes as it may.
    #[error("table {} has {max} indexes, as many as a table may; drop one first", quoted(table), max = crate::model::MAX_INDEXES_PER_TABLE)]
    TooManyIndexes { table: String },
    /// The index cannot answer queries (yet).
    #[error("index {} cannot answer queries: {why}", quoted(index))]
    IndexNotReady { index: String, why: String },
    /// A unique index holds the values for another entity. The message never names that entity:
    /// the caller's grant need not cover it.
    #[error(
        "unique index {} already holds these values for another entity",
        quoted(index)
    )]
    IndexValueTaken { index: String },
    /// A transaction with no operations.
    #[error("a transaction needs at least one operation")]
    EmptyTransaction,
    /// A transaction with more than 100 operations.
    #[error("the transaction has {count} operations; the limit is {max}", max = crate::model::MAX_TRANSACTION_OPERATIONS)]
    TooManyOperations { count: usize },
    /// An operation on another partition than the transaction's.
    #[error("PartitionKey {} differs from the transaction's {}: all operations of a transaction must act on one partition", quoted(found), quoted(expected))]
    DifferentPartitions { expected: String, found: String },
    /// Two operations on one row.
    #[error(
        "RowKey {} appears more than once; an entity can appear only once in a transaction",
        quoted(row_key)
    )]
    DuplicateRow { row_key: String },
    /// Two operations (or keys of a read) on one entity of one table.
    #[error(
        "the entity ({}, {}, {}) appears more than once; an entity can appear only once in a request",
        quoted(table),
        quoted(partition_key),
        quoted(row_key)
    )]
    DuplicateEntity {
        table: String,
        partition_key: String,
        row_key: String,
    },
    /// A read of several entities naming none.
    #[error("a read of several entities needs at least one key")]
    NoKeys,
    /// A read of several entities naming more than 100.
    #[error("the read names {count} keys; the limit is {max}", max = crate::model::MAX_READ_KEYS)]
    TooManyKeys { count: usize },
    /// A request over its size limit.
    #[error("the request is {bytes} bytes; the limit is {max} bytes")]
    RequestTooLarge { bytes: usize, max: usize },
    /// An operation of a transaction failed; `source` says why.
    #[error("operation {index} failed: {source}")]
    Operation {
        index: usize,
        source: Box<TableError>,
    },
    /// The request's deadline passed; the work stopped.
    #[error("the request's deadline passed before it finished")]
    DeadlineExceeded,
    /// Records of table's change feed after the cursor were removed by its retention.
    #[error("records of table {}'s change feed after this cursor were removed by the feed's retention; read the feed from its start again", quoted(.0))]
    FeedCursorExpired(String),
    /// The idempotency key came with another request within the window.
    #[error("idempotency key {} was sent with another request in the last {window_seconds} s; a key names one logical call: send a new key for a new call", quoted(key))]
    IdempotentParameterMismatch { key: String, window_seconds: u64 },
    /// The store cannot do this (why, and what to do instead).
    #[error("{0}")]
    NotSupported(&'static str),
    /// A storage fault (never shown to clients, except a full disk).
    #[error("storage fault: {0}")]
    Storage(#[from] StorageError),
}

impl TableError {
    /// The Azure error code.
    pub fn code(&self) -> ErrorCode {
        match self {
            TableError::Invalid(invalid) => validation_code(invalid),
            TableError::TableNotFound(_) => ErrorCode::TableNotFound,
            TableError::TableAlreadyExists(_) => ErrorCode::TableAlreadyExists,
            TableError::TableBeingDeleted(_) => ErrorCode::TableBeingDeleted,
            TableError::EntityNotFound { .. } => ErrorCode::ResourceNotFound,
            TableError::EntityAlreadyExists { .. } => ErrorCode::EntityAlreadyExists,
            TableError::ConditionNotSatisfied { .. } | TableError::PatchConditionFalse { .. } => {
                ErrorCode::UpdateConditionNotSatisfied
            }
            TableError::IndexNotFound { .. } => ErrorCode::IndexNotFound,
            TableError::IndexAlreadyExists { .. } => ErrorCode::IndexAlreadyExists,
            TableError::TooManyIndexes { .. } => ErrorCode::TooManyIndexes,
            TableError::IndexNotReady { .. } => ErrorCode::IndexNotReady,
            TableError::IndexValueTaken { .. } => ErrorCode::IndexValueAlreadyExists,
            TableError::EmptyTransaction
            | TableError::TooManyOperations { .. }
            | TableError::NoKeys
            | TableError::TooManyKeys { .. } => ErrorCode::InvalidInput,
            TableError::DifferentPartitions { .. } => {
                ErrorCode::CommandsInBatchActOnDifferentPartitions
            }
            TableError::DuplicateRow { .. } | TableError::DuplicateEntity { .. } => {
                ErrorCode::InvalidDuplicateRow
            }
            TableError::RequestTooLarge { .. } => ErrorCode::RequestBodyTooLarge,
            TableError::Operation { source, .. } => source.code(),
            TableError::DeadlineExceeded => ErrorCode::OperationTimedOut,
            TableError::NotSupported(_) => ErrorCode::NotImplemented,
            TableError::FeedCursorExpired(_) => ErrorCode::ChangeFeedCursorExpired,
            TableError::IdempotentParameterMismatch { .. } => {
                ErrorCode::IdempotentParameterMismatch
            }
            TableError::Storage(fault) if fault.is_disk_full() => ErrorCode::InsufficientStorage,
            TableError::Storage(fault) if fault.is_unavailable() => ErrorCode::ServiceUnavailable,
            TableError::Storage(_) => ErrorCode::InternalError,
        }
    }

    /// The failing operation's index, for errors inside a transaction.
    pub fn operation_index(&self) -> Option<usize> {
        match self {
            TableError::Operation { index, .. } => Some(*index),
            _ => None,
        }
    }

    /// What a client is told: the error's own words, capped at [`MAX_MESSAGE_BYTES`], except for
    /// internal faults and an unreachable database, whose detail stays in the server log. Both
    /// protocols answer with this text.
    pub fn client_message(&self) -> String {
        match self.code() {
            ErrorCode::InternalError => "internal error; the server log has the details".to_owned(),
            ErrorCode::ServiceUnavailable => "the store's database cannot be reached; retry with \
                                              backoff (the server log has the details)"
                .to_owned(),
            _ => bounded_message(self.to_string()),
        }
    }

    /// Attributes the error to operation `index` of a transaction.
    pub fn at_operation(self, index: usize) -> TableError {
        TableError::Operation {
            index,
            source: Box::new(self),
        }
    }
}

/// The longest error message either protocol sends. Inputs are already quoted in bounded form
/// ([`crate::model::quoted`]); this is the backstop that keeps any message, however built, well
/// under the metadata limits of gRPC clients (8 KiB for grpc-core) and small on REST.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// `message`, cut at a character boundary to at most [`MAX_MESSAGE_BYTES`].
pub fn bounded_message(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let mut cut = MAX_MESSAGE_BYTES - '…'.len_utf8();
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    message
}

fn validation_code(invalid: &ValidationError) -> ErrorCode {
    match invalid {
        ValidationError::TableNameInvalid { .. }
        | ValidationError::TableNameReserved { .. }
        | ValidationError::DateTimeOutOfRange { .. }
        | ValidationError::OutOfRange { .. }
        | ValidationError::Overflow { .. } => ErrorCode::OutOfRangeInput,
        ValidationError::KeyTooLarge { .. } => ErrorCode::KeyValueTooLarge,
        ValidationError::PropertyNameInvalid { .. } => ErrorCode::PropertyNameInvalid,
        ValidationError::PropertyNameTooLong { .. } => ErrorCode::PropertyNameTooLong,
        ValidationError::TooManyProperties { .. } => ErrorCode::TooManyProperties,
        ValidationError::PropertyValueTooLarge { .. } => ErrorCode::PropertyValueTooLarge,
        ValidationError::EntityTooLarge { .. } => ErrorCode::EntityTooLarge,
        ValidationError::PropertyValueMissing { .. } => ErrorCode::PropertiesNeedValue,
        ValidationError::KeyCharacterInvalid { .. }
        | ValidationError::GuidInvalid { .. }
        | ValidationError::DocumentInvalid { .. }
        | ValidationError::ETagInvalid { .. }
        | ValidationError::IfMatchMissing
        | ValidationError::EntityMissing
        | ValidationError::Filter { .. }
        | ValidationError::Argument(_) => ErrorCode::InvalidInput,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_bounded_at_a_character_boundary() {
        let long = bounded_message("é".repeat(100_000));
        assert!(long.len() <= MAX_MESSAGE_BYTES, "{}", long.len());
        assert!(long.ends_with('…'));
        assert_eq!(bounded_message("short".into()), "short");
    }
}
