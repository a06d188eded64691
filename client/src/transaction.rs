//! [`Transaction`]: a partition-scoped batch of up to 100 operations, committed all or nothing.

use std::collections::HashSet;

use serde::Serialize;
use trestle_proto::pb;
use trestle_proto::pb::transaction_operation::Operation;

use crate::client::Client;
use crate::convert::{patch_condition, patch_if_match, patch_steps, upsert_mode, wire};
use crate::entity::{ETag, EntityKey, IfMatch, UpsertMode};
use crate::error::{Error, ErrorCode, ErrorKind, Result};
use crate::patch::Patch;

/// Most operations in one transaction.
pub const MAX_OPERATIONS: usize = 100;

/// A transaction on one partition of one table. Add operations, then [`Transaction::commit`].
///
/// It refuses at once what the server would refuse: a key in another partition, a second
/// operation on one row, a 101st operation.
#[derive(Debug)]
#[must_use]
pub struct Transaction {
    client: Client,
    table: String,
    partition_key: String,
    operations: Vec<pb::TransactionOperation>,
    rows: HashSet<String>,
}

/// The row an operation of a transaction acts on: its RowKey alone (in the transaction's
/// partition: `tx.insert("comment-1", &c)`), or a full key, which must name the transaction's
/// partition.
pub trait TransactionRow {
    /// The row's full key in `partition_key`'s transaction.
    fn into_key(self, partition_key: &str) -> EntityKey;
}

impl TransactionRow for &str {
    fn into_key(self, partition_key: &str) -> EntityKey {
        EntityKey::new(partition_key, self)
    }
}

impl TransactionRow for String {
    fn into_key(self, partition_key: &str) -> EntityKey {
        EntityKey::new(partition_key, self)
    }
}

impl TransactionRow for &String {
    fn into_key(self, partition_key: &str) -> EntityKey {
        EntityKey::new(partition_key, self.as_str())
    }
}

impl TransactionRow for EntityKey {
    fn into_key(self, _: &str) -> EntityKey {
        self
    }
}

impl<P: Into<String>, R: Into<String>> TransactionRow for (P, R) {
    fn into_key(self, _: &str) -> EntityKey {
        EntityKey::from(self)
    }
}

fn refused(code: ErrorCode, message: String, index: usize) -> Error {
    Error::invalid(message).with_code(code).at_operation(index)
}

impl Transaction {
    pub(crate) fn new(client: Client, table: String, partition_key: String) -> Transaction {
        Transaction {
            client,
            table,
            partition_key,
            operations: Vec::new(),
            rows: HashSet::new(),
        }
    }

    /// The partition the transaction acts on.
    pub fn partition_key(&self) -> &str {
        &self.partition_key
    }

    /// Operations added so far.
    pub fn len(&self) -> usize {
        self.operations.len()
    }

    /// Whether no operation was added.
    pub fn is_empty(&self) -> bool {
        self.operations.is_empty()
    }

    /// Checks the row may join the transaction and returns its key.
    fn admit(&mut self, key: EntityKey) -> Result<EntityKey> {
        let index = self.operations.len();
        if index >= MAX_OPERATIONS {
            return Err(refused(
                ErrorCode::InvalidInput,
                format!("a transaction holds at most {MAX_OPERATIONS} operations"),
                index,
            ));
        }
        if key.partition_key != self.partition_key {
            let message = format!(
                "PartitionKey '{}' differs from the transaction's '{}'",
                key.partition_key, self.partition_key
            );
            return Err(refused(
                ErrorCode::CommandsInBatchActOnDifferentPartitions,
                message,
                index,
            ));
        }
        if !self.rows.insert(key.row_key.clone()) {
            return Err(refused(
                ErrorCode::InvalidDuplicateRow,
                format!("RowKey '{}' is already in the transaction", key.row_key),
                index,
            ));
        }
        Ok(key)
    }

    /// Admits the row and serializes its entity.
    fn admit_entity<T: Serialize + ?Sized>(
        &mut self,
        key: EntityKey,
        value: &T,
    ) -> Result<Option<pb::Entity>> {
        let key = self.admit(key)?;
        Ok(Some(wire(&key, value)?))
    }

    fn push(&mut self, operation: Operation) -> &mut Self {
        self.operations.push(pb::TransactionOperation {
            operation: Some(operation),
        });
        self
    }

    /// Inserts an entity that must not exist.
    pub fn insert<T: Serialize + ?Sized>(
        &mut self,
        row: impl TransactionRow,
        value: &T,
    ) -> Result<&mut Self> {
        let entity = self.admit_entity(row.into_key(&self.partition_key), value)?;
        Ok(self.push(Operation::Insert(pb::InsertOperation { entity })))
    }

    /// Replaces an existing entity.
    pub fn update<T: Serialize + ?Sized>(
        &mut self,
        row: impl TransactionRow,
        value: &T,
        if_match: impl Into<IfMatch>,
    ) -> Result<&mut Self> {
        let entity = self.admit_entity(row.into_key(&self.partition_key), value)?;
        Ok(self.push(Operation::Update(pb::UpdateOperation {
            entity,
            if_match: if_match.into().to_wire(),
        })))
    }

    /// Merges properties into an existing entity.
    pub fn merge<T: Serialize + ?Sized>(
        &mut self,
        row: impl TransactionRow,
        value: &T,
        if_match: impl Into<IfMatch>,
    ) -> Result<&mut Self> {
        let entity = self.admit_entity(row.into_key(&self.partition_key), value)?;
        Ok(self.push(Operation::Merge(pb::MergeOperation {
            entity,
            if_match: if_match.into().to_wire(),
        })))
    }

    /// Inserts, or replaces / merges an existing entity.
    pub fn upsert<T: Serialize + ?Sized>(
        &mut self,
        row: impl TransactionRow,
        value: &T,
        mode: UpsertMode,
    ) -> Result<&mut Self> {
        let entity = self.admit_entity(row.into_key(&self.partition_key), value)?;
        Ok(self.push(Operation::Upsert(pb::UpsertOperation {
            entity,
            mode: upsert_mode(mode) as i32,
        })))
    }

    /// Patches a row (see [`Patch`]), in order with the rest.
    pub fn patch(&mut self, row: impl TransactionRow, patch: &Patch) -> Result<&mut Self> {
        let key = self.admit(row.into_key(&self.partition_key))?;
        Ok(self.push(Operation::Patch(pb::PatchOperation {
            row_key: key.row_key,
            operations: patch_steps(patch),
            if_match: patch_if_match(patch),
            upsert: patch.upsert,
            condition: patch_condition(patch),
        })))
    }

    /// Deletes an existing entity.
    pub fn delete(
        &mut self,
        row: impl TransactionRow,
        if_match: impl Into<IfMatch>,
    ) -> Result<&mut Self> {
        let key = self.admit(row.into_key(&self.partition_key))?;
        Ok(self.push(Operation::Delete(pb::DeleteOperation {
            row_key: key.row_key,
            if_match: if_match.into().to_wire(),
        })))
    }

    /// Requires the row to exist (with this ETag, unless `IfMatch::Any`), without writing it.
    pub fn check_exists(
        &mut self,
        row: impl TransactionRow,
        if_match: impl Into<IfMatch>,
    ) -> Result<&mut Self> {
        let key = self.admit(row.into_key(&self.partition_key))?;
        let check = pb::CheckOperation {
            row_key: key.row_key,
            if_match: if_match.into().to_wire(),
            must_not_exist: false,
        };
        Ok(self.push(Operation::Check(check)))
    }

    /// Requires the row not to exist, without writing it.
    pub fn check_absent(&mut self, row: impl TransactionRow) -> Result<&mut Self> {
        let key = self.admit(row.into_key(&self.partition_key))?;
        let check = pb::CheckOperation {
            row_key: key.row_key,
            if_match: String::new(),
            must_not_exist: true,
        };
        Ok(self.push(Operation::Check(check)))
    }

    /// Commits every operation or none. Returns each operation's new ETag (`None` for deletes and
    /// checks), in order.
    ///
    /// # Errors
    /// The failing operation's index is in [`Error::operation_index`], with that operation's own
    /// kind and code (e.g. `is_precondition_failed()` for a stale ETag).
    pub async fn commit(self) -> Result<Vec<Option<ETag>>> {
        if self.operations.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "a transaction needs at least one operation",
            ));
        }
        let request = pb::SubmitTransactionRequest {
            table: self.table,
            partition_key: self.partition_key,
            operations: self.operations,
        };
        let response = self
            .client
            .write(
                request,
                |mut c, r| async move { c.submit_transaction(r).await },
            )
            .await?;
        Ok(response
            .results
            .into_iter()
            .map(|r| Some(r.etag).filter(|t| !t.is_empty()).map(ETag::new))
            .collect())
    }
}
