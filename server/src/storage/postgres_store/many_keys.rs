//! A read of many keys across tables in one statement ([`GET_MANY`]): the keys as its
//! parameters and its rows, shared by the awaited read of many keys and the point reads sent
//! together (`point_reads.rs`).

use postgres::types::ToSql;
use postgres::Row;

use crate::storage::{StorageError, TableKey};

/// One statement reads every key (so all at one instant), a row for each: its position, its live
/// table's catalog (`NULL`: no live table of that name) and its entity's record (`NULL`: none).
pub(super) const GET_MANY: &str = "SELECT k.i, t.indexes, e.record
    FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::int4[]) AS k(folded, pk, rk, i)
    LEFT JOIN trestle_tables t ON t.folded = k.folded AND t.live
    LEFT JOIN trestle_entities e ON e.table_id = t.id AND e.pk = k.pk AND e.rk = k.rk";

/// [`GET_MANY`]'s parameters for some keys.
pub(super) struct ManyKeys<'a> {
    folded: Vec<&'a str>,
    pks: Vec<&'a [u8]>,
    rks: Vec<&'a [u8]>,
    positions: Vec<i32>,
}

impl<'a> ManyKeys<'a> {
    pub(super) fn of(keys: &'a [TableKey]) -> ManyKeys<'a> {
        ManyKeys {
            folded: keys.iter().map(|key| key.table.folded()).collect(),
            pks: keys
                .iter()
                .map(|k| k.key.partition_key.as_bytes())
                .collect(),
            rks: keys.iter().map(|k| k.key.row_key.as_bytes()).collect(),
            positions: (0..keys.len() as i32).collect(),
        }
    }

    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 4] {
        [&self.folded, &self.pks, &self.rks, &self.positions]
    }
}

/// A row of [`GET_MANY`].
pub(super) struct ManyRow<'r> {
    /// The key's position among those asked.
    pub(super) position: usize,
    /// Its live table's stored catalog; `None` if there is no live table of that name.
    pub(super) catalog: Option<&'r [u8]>,
    /// Its entity's record; `None` if there is none.
    pub(super) record: Option<&'r [u8]>,
}

impl<'r> ManyRow<'r> {
    /// `row`, of a read of `asked` keys.
    pub(super) fn of(row: &'r Row, asked: usize) -> Result<ManyRow<'r>, StorageError> {
        let position = usize::try_from(row.get::<_, i32>(0))
            .ok()
            .filter(|&position| position < asked)
            .ok_or_else(|| StorageError::Corrupt("a read returned an unasked key".into()))?;
        let (catalog, record) = ManyRow::found(row);
        Ok(ManyRow {
            position,
            catalog,
            record,
        })
    }

    /// The catalog and the record of `row`, whose position was checked before (when the rows
    /// were shared out to their askers).
    pub(super) fn found(row: &'r Row) -> (Option<&'r [u8]>, Option<&'r [u8]>) {
        (row.get(1), row.get(2))
    }
}
