//! The change records a commit writes in its own database transaction, numbered in it: one row
//! of `trestle_changes` each, keyed by the table, the transaction's id (`xid8`, the column's
//! default) and the record's place. Every write path writes them through here or through the
//! schema's functions, which take the same table lock first (`changes.rs` says why readers
//! depend on it).

use postgres::Client;

use super::pool::Prepared;
use crate::model::CommitPlan;
use crate::storage::{changes, StorageError};

pub(super) const WRITE_RECORDS: &str = "INSERT INTO trestle_changes (table_id, record, at, change)
    SELECT $1, record, $4, change FROM unnest($2::int4[], $3::bytea[]) AS r(record, change)";

/// Writes the change records of `plan` (partition `partition_key` of table `table_id`), numbered
/// from `first` in the current transaction; how many.
pub(super) fn write_records(
    client: &mut Client,
    prepared: &mut Prepared<'_>,
    table_id: i64,
    plan: &CommitPlan,
    partition_key: &str,
    first: i32,
) -> Result<i32, StorageError> {
    let (numbers, records) = numbered_records(plan, partition_key, first);
    if records.is_empty() {
        return Ok(0);
    }
    let count = records.len() as i32;
    let statement = prepared.get(client, WRITE_RECORDS)?;
    let at = plan.stamped.0;
    client.execute(&statement, &[&table_id, &numbers, &records, &at])?;
    Ok(count)
}

/// The change records of `plan` (partition `partition_key`), each with its number in the
/// transaction, numbered from `first`: [`WRITE_RECORDS`]'s second and third parameters.
pub(super) fn numbered_records(
    plan: &CommitPlan,
    partition_key: &str,
    first: i32,
) -> (Vec<i32>, Vec<Vec<u8>>) {
    let records = changes::records_of(plan, partition_key);
    let numbers = (first..).take(records.len()).collect();
    (numbers, records)
}
