//! The rows a commit writes, as the PostgreSQL store stores them: each entity's record (the
//! storage codec's bytes) beside its row key, and the row keys it removes. Below every write
//! path, which all send a plan's rows this way.

use crate::model::CommitPlan;
use crate::storage::codec;

/// The rows a plan writes and removes.
pub(super) struct PlannedRows<'a> {
    /// The row keys written, each with its record at the same place in `records`.
    pub(super) written: Vec<&'a [u8]>,
    pub(super) records: Vec<Vec<u8>>,
    /// The row keys removed.
    pub(super) deleted: Vec<&'a [u8]>,
}

/// The rows `plan` writes (with their records) and removes.
pub(super) fn planned_rows(plan: &CommitPlan) -> PlannedRows<'_> {
    let mut rows = PlannedRows {
        written: Vec::new(),
        records: Vec::new(),
        deleted: Vec::new(),
    };
    for change in &plan.changes {
        match &plan.results[change.operation] {
            Some(entity) if change.writes => {
                rows.records
                    .push(codec::encode(entity.timestamp, &entity.properties));
                rows.written.push(change.row_key.as_bytes());
            }
            _ => rows.deleted.push(change.row_key.as_bytes()),
        }
    }
    rows
}
