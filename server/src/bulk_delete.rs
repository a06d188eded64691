//! Deleting a partition's entities in bulk: a key range of one partition (and, optionally, those
//! of it a filter matches), read a chunk at a time and deleted in commits of at most 100, each
//! conditioned on the ETag read, so that an entity changed in between is read again rather than
//! deleted on a stale match. A call does a bounded amount of work and answers with a continuation.

use crate::engine::{Engine, MatchSink};
use crate::error::TableError;
use crate::model::{EntityKey, IfMatch, Operation, ValidationError, MAX_TRANSACTION_OPERATIONS};
use crate::query::QuerySpec;
use crate::storage::{EntityView, StorageError};

/// Entities one call deletes at most before answering with a continuation.
pub const MAX_DELETES_PER_CALL: u64 = 1000;
/// Chunks one call reads at most (a filter may match few of what it reads).
const MAX_CHUNKS_PER_CALL: usize = 50;
/// Times in a row a chunk is read again after a concurrent change to one of its entities, before
/// the call gives up with the conflict (`UpdateConditionNotSatisfied`; calling again goes on).
const MAX_REREADS: usize = 32;

/// What a bulk delete did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deleted {
    /// Entities deleted by this call.
    pub count: u64,
    /// Where the next call resumes; `None` when the range is done.
    pub continuation: Option<String>,
}

/// A chunk's matches: each row and the ETag it was read at.
struct Rows(Vec<Operation>);

impl MatchSink for Rows {
    fn take(&mut self, entity: &EntityView<'_>) -> Result<usize, StorageError> {
        self.0.push(Operation::Delete {
            key: EntityKey {
                partition_key: entity.partition_key.to_owned(),
                row_key: entity.row_key.to_owned(),
            },
            if_match: IfMatch::Tag(crate::model::ETag::for_timestamp(entity.timestamp)),
        });
        Ok(entity.row_key.len())
    }
}

impl Engine {
    /// Deletes the entities `spec` matches in its one partition (`spec.partition_key`), from
    /// `continuation` on, in commits of at most 100, each durable before the next is read.
    pub fn delete_matching(
        &self,
        table: &str,
        mut spec: QuerySpec,
        continuation: &str,
    ) -> Result<Deleted, TableError> {
        let partition_key = spec.partition_key.clone().ok_or_else(|| {
            ValidationError::Argument("a bulk delete needs the partition to delete from".into())
        })?;
        if !spec.index.is_empty() || spec.reverse || !spec.select.is_empty() {
            return Err(ValidationError::Argument(
                "a bulk delete reads in key order: it takes no index, reverse or select".into(),
            )
            .into());
        }
        spec.page_size = MAX_TRANSACTION_OPERATIONS as u32;
        let mut count = 0;
        let mut token = continuation.to_owned();
        let mut rereads = 0;
        for _ in 0..MAX_CHUNKS_PER_CALL {
            let mut rows = Rows(Vec::new());
            let page = self.query(table, spec.clone(), &token, &mut rows)?;
            let chunk = rows.0.len() as u64;
            if chunk > 0 {
                match self.delete_chunk(table, &partition_key, rows.0) {
                    Ok(()) => {
                        count += chunk;
                        rereads = 0;
                    }
                    Err(error) if changed_meanwhile(&error) && rereads < MAX_REREADS => {
                        rereads += 1;
                        continue;
                    }
                    Err(error) => return Err(error),
                }
            }
            match page.continuation_token {
                None => {
                    return Ok(Deleted {
                        count,
                        continuation: None,
                    })
                }
                Some(next) => token = next,
            }
            if count >= MAX_DELETES_PER_CALL {
                break;
            }
        }
        Ok(Deleted {
            count,
            continuation: Some(token),
        })
    }

    /// Deletes one chunk in one commit and waits until it is durable.
    fn delete_chunk(
        &self,
        table: &str,
        partition_key: &str,
        deletes: Vec<Operation>,
    ) -> Result<(), TableError> {
        let pending = self.run_here(self.transact(table, partition_key, deletes, 0, None))?;
        self.wait(pending).map(drop)
    }
}

/// Whether a chunk's commit failed because one of its entities changed or went since it was read.
fn changed_meanwhile(error: &TableError) -> bool {
    match error {
        TableError::Operation { source, .. } => matches!(
            **source,
            TableError::ConditionNotSatisfied { .. } | TableError::EntityNotFound { .. }
        ),
        _ => false,
    }
}
