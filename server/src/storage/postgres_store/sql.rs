//! What the PostgreSQL store's tables and indexes share below both: the advisory locks' keys
//! (a table's and a partition's), read snapshots, scans through a portal, and the hex text the
//! catalog is read back in.

use postgres::{IsolationLevel, Transaction};

use super::scan_batches::{BatchTally, TableBatches};
use crate::storage::{EntityView, StorageError, Visit, Visitor};

/// The table's lock: shared by its commits (they run side by side), taken exclusively by its
/// deletion, which so waits for the commits under way, and after which commits find the table
/// gone. Advisory locks live in the lock manager: unlike `FOR SHARE` on the catalog row, they
/// write nothing, however many commits hold them at once. (The two-key space is apart from the
/// partitions' one-key space.) The schema's `trestle_insert_rows` and `trestle_insert_each` take
/// the same lock in SQL, and its `trestle_feed_horizon` finds the lock's holders by it: all take
/// its class from `table_lock_class!`.
pub(super) fn table_lock(table_id: i64) -> String {
    format!(
        concat!(table_lock_class!(), ", {}"),
        table_id % i64::from(i32::MAX)
    )
}

/// The exclusive form of the table's lock, for its deletion.
pub(super) const LOCK_TABLE: &str = concat!(
    "SELECT pg_advisory_xact_lock(",
    table_lock_class!(),
    ", ($1::bigint % 2147483647)::int4)"
);

/// The advisory-lock key of a partition: 64 bits of FNV-1a over the table id and the key.
pub(super) fn partition_lock(table_id: i64, partition_key: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in table_id
        .to_be_bytes()
        .iter()
        .chain(partition_key.as_bytes())
    {
        hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash as i64
}

/// A read-only `REPEATABLE READ` transaction: one snapshot for a whole scan call.
///
/// Its statements read rows in the order of an index, never by sorting: a scan is read through
/// a portal a batch at a time and is often stopped early (a page is full), which the planner,
/// costing every row of the range, ignores: it chose to sort every row from the start of the
/// range to its end before the first batch, so paging through a partition cost the square of
/// its size.
pub(super) fn read_snapshot(
    client: &mut postgres::Client,
) -> Result<Transaction<'_>, postgres::Error> {
    let mut snapshot = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()?;
    snapshot.batch_execute("SET LOCAL enable_sort = off")?;
    Ok(snapshot)
}

/// Where a visitor stopped: the entity's keys, and the row it came in.
pub(super) struct StoppedAt {
    pub(super) partition_key: String,
    pub(super) row_key: String,
    pub(super) row: postgres::Row,
}

/// Shows the visitor the entity of each `(pk, rk, record, ...)` row of `portal`, fetched as many
/// rows at a time as `batches` says and each shown as it arrives (a fetch is never collected
/// first: a page of large entities holds the rows it uses, not its batch), until it stops (where,
/// then) or the rows run out.
pub(super) fn visit_portal(
    snapshot: &mut Transaction<'_>,
    portal: &postgres::Portal,
    batches: &mut TableBatches<'_>,
    visitor: &mut Visitor<'_>,
) -> Result<Option<StoppedAt>, StorageError> {
    use postgres::fallible_iterator::FallibleIterator;
    loop {
        let asked = batches.rows();
        let mut rows = snapshot.query_portal_raw(portal, asked)?;
        let mut tally = BatchTally::default();
        while let Some(row) = rows.next()? {
            let (partition_key, row_key, visit) = show_row(&row, visitor, &mut tally)?;
            if visit == Visit::Stop {
                batches.observe(&tally);
                let (partition_key, row_key) = (partition_key.to_owned(), row_key.to_owned());
                return Ok(Some(StoppedAt {
                    partition_key,
                    row_key,
                    row,
                }));
            }
        }
        batches.observe(&tally);
        if tally.rows < asked as usize {
            return Ok(None);
        }
    }
}

/// Shows the visitor the entity of a `(pk, rk, record, ...)` row and counts the row in `tally`:
/// the row's keys, and what the visitor said.
pub(super) fn show_row<'r>(
    row: &'r postgres::Row,
    visitor: &mut Visitor<'_>,
    tally: &mut BatchTally,
) -> Result<(&'r str, &'r str, Visit), StorageError> {
    let (partition_key, row_key) = row_keys(row)?;
    let record: &[u8] = row.get(2);
    tally.count(record.len());
    let visit = visitor(&EntityView::parse(partition_key, row_key, record)?)?;
    Ok((partition_key, row_key, visit))
}

/// The keys of a `(pk, rk, ...)` row.
pub(super) fn row_keys(row: &postgres::Row) -> Result<(&str, &str), StorageError> {
    let corrupt = || StorageError::Corrupt("a stored key is not UTF-8".into());
    let pk = std::str::from_utf8(row.get(0)).map_err(|_| corrupt())?;
    let rk = std::str::from_utf8(row.get(1)).map_err(|_| corrupt())?;
    Ok((pk, rk))
}

/// Decodes the hex text PostgreSQL's `encode(..., 'hex')` writes.
pub(super) fn from_hex(text: &str) -> Result<Vec<u8>, StorageError> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err(StorageError::Corrupt("an index catalog is not hex".into())),
    };
    text.as_bytes()
        .chunks(2)
        .map(|pair| match pair {
            [high, low] => Ok(digit(*high)? << 4 | digit(*low)?),
            _ => Err(StorageError::Corrupt("an index catalog is not hex".into())),
        })
        .collect()
}
