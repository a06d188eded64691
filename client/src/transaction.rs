//! [`Transaction`]: a partition-scoped batch of up to 100 operations, committed all or nothing.

use std::collections::HashSet;

use serde::Serialize;
use trestle_proto::pb;
use trestle_proto::pb::transaction_operation::Operation;

use crate::client::Client;
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
    /// The caller's idempotency key ([`Transaction::idempotency_key`]); empty: a new one.
    idempotency_key: String,
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
            idempotency_key: String::new(),
        }
    }

    /// The transaction committing with `key` as its idempotency key, in place of the new one the
    /// SDK makes: for a caller who retries it itself, across restarts too
    /// ([`crate::TableClient::idempotency_key`]).
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Transaction {
        self.idempotency_key = key.into();
        self
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

    /// Admits the row and adds the operation `build` makes for its key.
    fn add(
        &mut self,
        row: impl TransactionRow,
        build: impl FnOnce(EntityKey) -> Result<Operation>,
    ) -> Result<&mut Self> {
        let key = self.admit(row.into_key(&self.partition_key))?;
        self.operations.push(pb::TransactionOperation {
            operation: Some(build(key)?),
        });
        Ok(self)
    }

    /// Inserts an entity that must not exist.
    pub fn insert<T: Serialize + ?Sized>(
        &mut self,
        row: impl TransactionRow,
        value: &T,
    ) -> Result<&mut Self> {
        self.add(row, |key| operation::insert(&key, value))
    }

    /// Replaces an existing entity.
    pub fn update<T: Serialize + ?Sized>(
        &mut self,
        row: impl TransactionRow,
        value: &T,
        if_match: impl Into<IfMatch>,
    ) -> Result<&mut Self> {
        let if_match = if_match.into();
        self.add(row, |key| operation::update(&key, value, if_match))
    }

    /// Merges properties into an existing entity.
    pub fn merge<T: Serialize + ?Sized>(
        &mut self,
        row: impl TransactionRow,
        properties: &T,
        if_match: impl Into<IfMatch>,
    ) -> Result<&mut Self> {
        let if_match = if_match.into();
        self.add(row, |key| operation::merge(&key, properties, if_match))
    }

    /// Inserts, or replaces / merges an existing entity.
    pub fn upsert<T: Serialize + ?Sized>(
        &mut self,
        row: impl TransactionRow,
        value: &T,
        mode: UpsertMode,
    ) -> Result<&mut Self> {
        self.add(row, |key| operation::upsert(&key, value, mode))
    }

    /// Patches a row (see [`Patch`]), in order with the rest.
    pub fn patch(&mut self, row: impl TransactionRow, patch: &Patch) -> Result<&mut Self> {
        self.add(row, |key| operation::patch(key, patch))
    }

    /// Deletes an existing entity.
    pub fn delete(
        &mut self,
        row: impl TransactionRow,
        if_match: impl Into<IfMatch>,
    ) -> Result<&mut Self> {
        let if_match = if_match.into();
        self.add(row, |key| Ok(operation::delete(key, if_match)))
    }

    /// Requires the row to exist (with this ETag, unless `IfMatch::Any`), without writing it.
    pub fn check_exists(
        &mut self,
        row: impl TransactionRow,
        if_match: impl Into<IfMatch>,
    ) -> Result<&mut Self> {
        let if_match = Some(if_match.into());
        self.add(row, |key| Ok(operation::check(key, if_match)))
    }

    /// Requires the row not to exist, without writing it.
    pub fn check_absent(&mut self, row: impl TransactionRow) -> Result<&mut Self> {
        self.add(row, |key| Ok(operation::check(key, None)))
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
            idempotency_key: self.idempotency_key,
            table: self.table,
            partition_key: self.partition_key,
            operations: self.operations,
        };
        let response = self
            .client
            .write_once(
                request,
                |mut c, r| async move { c.submit_transaction(r).await },
            )
            .await?;
        Ok(etags(response.results))
    }
}

/// Each operation's new ETag (`None` for deletes and checks), in order.
pub(crate) fn etags(results: Vec<pb::OperationResult>) -> Vec<Option<ETag>> {
    results
        .into_iter()
        .map(|r| Some(r.etag).filter(|t| !t.is_empty()).map(ETag::new))
        .collect()
}

/// The wire form of each kind of operation, for both transaction builders.
pub(crate) mod operation {
    use serde::Serialize;
    use trestle_proto::pb;
    use trestle_proto::pb::transaction_operation::Operation;

    use crate::convert::{patch_condition, patch_if_match, patch_steps, upsert_mode, wire};
    use crate::entity::{EntityKey, IfMatch, UpsertMode};
    use crate::error::Result;
    use crate::patch::Patch;

    /// Inserts `value` at `key`, which must not exist.
    pub(crate) fn insert<T: Serialize + ?Sized>(key: &EntityKey, value: &T) -> Result<Operation> {
        let entity = Some(wire(key, value)?);
        Ok(Operation::Insert(pb::InsertOperation { entity }))
    }

    /// Replaces the entity at `key` with `value`.
    pub(crate) fn update<T: Serialize + ?Sized>(
        key: &EntityKey,
        value: &T,
        if_match: IfMatch,
    ) -> Result<Operation> {
        let (entity, if_match) = (Some(wire(key, value)?), if_match.to_wire());
        Ok(Operation::Update(pb::UpdateOperation { entity, if_match }))
    }

    /// Merges `value` into the entity at `key`.
    pub(crate) fn merge<T: Serialize + ?Sized>(
        key: &EntityKey,
        value: &T,
        if_match: IfMatch,
    ) -> Result<Operation> {
        let (entity, if_match) = (Some(wire(key, value)?), if_match.to_wire());
        Ok(Operation::Merge(pb::MergeOperation { entity, if_match }))
    }

    /// Inserts `value` at `key`, or replaces / merges the entity there.
    pub(crate) fn upsert<T: Serialize + ?Sized>(
        key: &EntityKey,
        value: &T,
        mode: UpsertMode,
    ) -> Result<Operation> {
        let (entity, mode) = (Some(wire(key, value)?), upsert_mode(mode) as i32);
        Ok(Operation::Upsert(pb::UpsertOperation { entity, mode }))
    }

    /// Patches the entity at `key`.
    pub(crate) fn patch(key: EntityKey, patch: &Patch) -> Result<Operation> {
        Ok(Operation::Patch(pb::PatchOperation {
            row_key: key.row_key,
            operations: patch_steps(patch)?,
            if_match: patch_if_match(patch),
            upsert: patch.upsert,
            condition: patch_condition(patch),
        }))
    }

    /// Deletes the entity at `key`.
    pub(crate) fn delete(key: EntityKey, if_match: IfMatch) -> Operation {
        let if_match = if_match.to_wire();
        Operation::Delete(pb::DeleteOperation {
            row_key: key.row_key,
            if_match,
        })
    }

    /// Requires the entity at `key` to exist (matching `if_match`), or with `None` to be absent.
    pub(crate) fn check(key: EntityKey, exists: Option<IfMatch>) -> Operation {
        Operation::Check(pb::CheckOperation {
            row_key: key.row_key,
            must_not_exist: exists.is_none(),
            if_match: exists.as_ref().map(IfMatch::to_wire).unwrap_or_default(),
        })
    }
}
