//! The single-entity write requests (insert, update, merge, upsert, patch) as one shape: the
//! table, the operation asked for, and whether the reply leaves the entity out, so that one
//! handler serves them all.

use trestle_proto::pb;

use super::convert::{entity_key, new_entity, patch, upsert_mode};
use crate::model::{IfMatch, Operation, ValidationError, WorkBudget};

/// A single-entity write, validated.
pub(super) struct Write {
    /// The table written.
    pub(super) table: String,
    /// What is written.
    pub(super) operation: Operation,
    /// Azure's `Prefer: return-no-content`: the reply carries the new ETag, not the entity.
    pub(super) return_no_content: bool,
    /// The idempotency key sent (empty: none).
    pub(super) idempotency_key: String,
}

/// A request for a single-entity write.
pub(super) trait WriteRequest {
    /// The write it asks for, validated, its work within `budget`.
    fn into_write(self, budget: WorkBudget) -> Result<Write, ValidationError>;
}

impl Write {
    fn of(
        table: String,
        operation: Operation,
        return_no_content: bool,
        idempotency_key: String,
    ) -> Write {
        Write {
            table,
            operation,
            return_no_content,
            idempotency_key,
        }
    }
}

impl WriteRequest for pb::InsertEntityRequest {
    fn into_write(self, _budget: WorkBudget) -> Result<Write, ValidationError> {
        let operation = Operation::Insert(new_entity(self.entity)?);
        Ok(Write::of(
            self.table,
            operation,
            self.return_no_content,
            self.idempotency_key,
        ))
    }
}

impl WriteRequest for pb::UpdateEntityRequest {
    fn into_write(self, _budget: WorkBudget) -> Result<Write, ValidationError> {
        let if_match = IfMatch::parse(&self.if_match)?;
        let operation = Operation::Update(new_entity(self.entity)?, if_match);
        Ok(Write::of(
            self.table,
            operation,
            self.return_no_content,
            self.idempotency_key,
        ))
    }
}

impl WriteRequest for pb::MergeEntityRequest {
    fn into_write(self, _budget: WorkBudget) -> Result<Write, ValidationError> {
        let if_match = IfMatch::parse(&self.if_match)?;
        let operation = Operation::Merge(new_entity(self.entity)?, if_match);
        Ok(Write::of(
            self.table,
            operation,
            self.return_no_content,
            self.idempotency_key,
        ))
    }
}

impl WriteRequest for pb::UpsertEntityRequest {
    fn into_write(self, _budget: WorkBudget) -> Result<Write, ValidationError> {
        let mode = upsert_mode(self.mode)?;
        let operation = Operation::Upsert(new_entity(self.entity)?, mode);
        Ok(Write::of(
            self.table,
            operation,
            self.return_no_content,
            self.idempotency_key,
        ))
    }
}

impl WriteRequest for pb::PatchEntityRequest {
    fn into_write(self, budget: WorkBudget) -> Result<Write, ValidationError> {
        let key = entity_key(self.partition_key, self.row_key)?;
        let operation = patch(
            key,
            self.operations,
            &self.if_match,
            self.upsert,
            self.condition,
            &mut budget.spend(),
        )?;
        Ok(Write::of(
            self.table,
            operation,
            self.return_no_content,
            self.idempotency_key,
        ))
    }
}
