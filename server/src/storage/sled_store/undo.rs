//! Crash atomicity for a commit of several rows, written one row at a time.
//!
//! Before such a commit writes its rows, it records each row's current bytes (its *before image*,
//! or that there is no row) in the `undo` tree under the partition's key, and it removes that
//! record once the last row is written. sled recovers a prefix of its log, so after a crash either
//! the removal survived, and with it every row written before it, or the record survived, and
//! [`UndoLog::roll_back`] puts the rows it names back as they were when the store opens again. A
//! commit is acknowledged only after a flush that covers the removal.
//!
//! sled's own batches give the same atomicity, but sled applies a batch under a process-wide
//! exclusive lock that must first wait for any flush in progress, and while a batch waits for it
//! every read and write of every table waits too. Undo records need no such lock: different
//! partitions commit at once, and flushes overlap commits.
//!
//! The partition's lock is held from the record to its removal, so a partition has at most one
//! record, and no reader sees a partition while a commit is half written ([`super::locks`]).
//!
//! Record layout: `[version u8 = 1]`, then per row `[key length u32 LE][key][0 = no row | 1 =
//! row][length u32 LE][bytes]` (length and bytes only for a row).

use std::collections::HashMap;

use super::StorageError;
use crate::model::encoding::Reader;

const UNDO_TREE: &str = "undo";
const RECORD_V1: u8 = 1;
const RECORD_V2: u8 = 2;

/// A commit larger than this records no undo and goes through a sled batch instead: at most 100
/// rows of up to 1 MiB each could make an undo record of 100 MiB, written beside the new rows.
pub(crate) const MAX_UNDO_RECORD_BYTES: usize = 4 * 1024 * 1024;

/// One row a commit writes: its key, its new bytes (`None` removes it) and its current bytes.
#[derive(Debug)]
pub(crate) struct RowChange {
    pub(crate) key: Vec<u8>,
    pub(crate) after: Option<Vec<u8>>,
    pub(crate) before: Option<sled::IVec>,
}

impl RowChange {
    /// Writes the row's new bytes to `tree` (removes the row for `None`).
    pub(crate) fn write(&self, tree: &sled::Tree) -> Result<(), StorageError> {
        set(tree, &self.key, self.after.as_deref())
    }
}

/// Stores `bytes` under `key`, or removes `key` when `None`.
fn set(tree: &sled::Tree, key: &[u8], bytes: Option<&[u8]>) -> Result<(), StorageError> {
    match bytes {
        Some(bytes) => tree.insert(key, bytes)?,
        None => tree.remove(key)?,
    };
    Ok(())
}

/// The rows a commit changes in one table's tree.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TreeRows<'a> {
    pub(crate) tree: &'a sled::Tree,
    pub(crate) table_id: u64,
    pub(crate) changes: &'a [RowChange],
}

/// The size of the undo record `changes` would need.
pub(crate) fn record_len(changes: &[RowChange]) -> usize {
    1 + rows_len(changes)
}

fn rows_len(changes: &[RowChange]) -> usize {
    changes
        .iter()
        .map(|change| 5 + change.key.len() + change.before.as_ref().map_or(0, |b| 4 + b.len()))
        .sum::<usize>()
}

fn encode_rows(changes: &[RowChange], out: &mut Vec<u8>) {
    for change in changes {
        out.extend_from_slice(&(change.key.len() as u32).to_le_bytes());
        out.extend_from_slice(&change.key);
        match &change.before {
            None => out.push(0),
            Some(bytes) => {
                out.push(1);
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(bytes);
            }
        }
    }
}

/// A record of one table's rows (version 1, the table named by the record's key).
fn encode(changes: &[RowChange]) -> Vec<u8> {
    let mut out = Vec::with_capacity(record_len(changes));
    out.push(RECORD_V1);
    encode_rows(changes, &mut out);
    out
}

/// A record of rows of several tables (version 2): per table, `[table id u64 BE][rows u32 LE]`
/// and its rows as in version 1.
fn encode_across(groups: &[TreeRows<'_>]) -> Vec<u8> {
    let len = 1 + groups
        .iter()
        .map(|group| 12 + rows_len(group.changes))
        .sum::<usize>();
    let mut out = Vec::with_capacity(len);
    out.push(RECORD_V2);
    for group in groups {
        out.extend_from_slice(&group.table_id.to_be_bytes());
        out.extend_from_slice(&(group.changes.len() as u32).to_le_bytes());
        encode_rows(group.changes, &mut out);
    }
    out
}

/// A row's table, its key and the bytes it had before the interrupted commit (`None`: no row).
type BeforeImage<'a> = (u64, &'a [u8], Option<&'a [u8]>);

fn decode_row<'a>(reader: &mut Reader<'a>) -> Result<(&'a [u8], Option<&'a [u8]>), StorageError> {
    let key = reader.prefixed()?;
    let before = match reader.take()? {
        [0] => None,
        [1] => Some(reader.prefixed()?),
        [flag] => return Err(StorageError::Corrupt(format!("undo row flag {flag}"))),
    };
    Ok((key, before))
}

/// The rows of `record`, kept under a key naming table `table_id`.
fn decode(table_id: u64, record: &[u8]) -> Result<Vec<BeforeImage<'_>>, StorageError> {
    let mut reader = Reader::new(record, "undo record");
    let mut rows = Vec::new();
    match reader.take()? {
        [RECORD_V1] => {
            while !reader.is_empty() {
                let (key, before) = decode_row(&mut reader)?;
                rows.push((table_id, key, before));
            }
        }
        [RECORD_V2] => {
            while !reader.is_empty() {
                let id: [u8; 8] = reader.take()?;
                let count: [u8; 4] = reader.take()?;
                for _ in 0..u32::from_le_bytes(count) {
                    let (key, before) = decode_row(&mut reader)?;
                    rows.push((u64::from_be_bytes(id), key, before));
                }
            }
        }
        [version] => {
            return Err(StorageError::Corrupt(format!(
                "an undo record has version {version}, expected {RECORD_V1} or {RECORD_V2}"
            )))
        }
    }
    Ok(rows)
}

fn record_key(table_id: u64, partition_key: &[u8]) -> Vec<u8> {
    [&table_id.to_be_bytes()[..], partition_key].concat()
}

/// The store's undo records, one per partition with a multi-row commit in progress (a commit
/// across partitions keeps its record under its first partition).
#[derive(Debug)]
pub(crate) struct UndoLog {
    tree: sled::Tree,
}

impl UndoLog {
    pub(crate) fn open(db: &sled::Db) -> Result<UndoLog, StorageError> {
        Ok(UndoLog {
            tree: db.open_tree(UNDO_TREE)?,
        })
    }

    /// Whether no commit is in progress (nor was interrupted).
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// Records `changes` for undo and writes none of them: where a crash right after the record
    /// leaves a commit.
    #[cfg(test)]
    pub(crate) fn record_only(&self, table_id: u64, partition_key: &[u8], changes: &[RowChange]) {
        self.tree
            .insert(record_key(table_id, partition_key), encode(changes))
            .unwrap();
    }

    /// Records rows of several tables for undo and writes none of them (see `record_only`).
    #[cfg(test)]
    pub(crate) fn record_only_across(
        &self,
        table_id: u64,
        partition_key: &[u8],
        groups: &[TreeRows<'_>],
    ) {
        self.tree
            .insert(record_key(table_id, partition_key), encode_across(groups))
            .unwrap();
    }

    /// Writes `changes` (rows of one partition of table `table_id`, each once) to `tree` so that
    /// a crash leaves all of them or none. The caller holds the partition's lock.
    pub(crate) fn write_atomically(
        &self,
        tree: &sled::Tree,
        table_id: u64,
        partition_key: &[u8],
        changes: &[RowChange],
    ) -> Result<(), StorageError> {
        let rows = TreeRows {
            tree,
            table_id,
            changes,
        };
        self.write_record(
            record_key(table_id, partition_key),
            encode(changes),
            &[rows],
        )
    }

    /// Writes the rows of `groups` (of several partitions and tables, each row once) so that a
    /// crash leaves all of them or none, under a record kept at the first partition
    /// (`table_id`, `partition_key`). The caller holds every partition's lock.
    pub(crate) fn write_atomically_across(
        &self,
        table_id: u64,
        partition_key: &[u8],
        groups: &[TreeRows<'_>],
    ) -> Result<(), StorageError> {
        let key = record_key(table_id, partition_key);
        self.write_record(key, encode_across(groups), groups)
    }

    /// Stores `record` at `key`, writes every row, and removes the record.
    ///
    /// If a write fails, the rows are put back before the error is returned. If even that fails
    /// (sled's log has failed, and with it every later write), the record stays, and the next
    /// open puts them back.
    fn write_record(
        &self,
        key: Vec<u8>,
        record: Vec<u8>,
        groups: &[TreeRows<'_>],
    ) -> Result<(), StorageError> {
        self.tree.insert(&key, record)?;
        let written = groups.iter().try_for_each(|group| {
            group
                .changes
                .iter()
                .try_for_each(|change| change.write(group.tree))
        });
        if let Err(error) = written {
            let restored = groups.iter().try_for_each(|group| {
                group
                    .changes
                    .iter()
                    .try_for_each(|change| set(group.tree, &change.key, change.before.as_deref()))
            });
            if restored.is_ok() {
                self.tree.remove(&key)?;
            }
            return Err(error);
        }
        self.tree.remove(&key)?;
        Ok(())
    }

    /// Puts back the rows of every commit a crash interrupted, in the trees `tables` gives by
    /// table id, and forgets the records; rows of tables not in `tables` (deleted ones) are
    /// skipped. Returns how many commits were rolled back. Call before any commit starts.
    pub(crate) fn roll_back(
        &self,
        tables: &HashMap<u64, sled::Tree>,
    ) -> Result<usize, StorageError> {
        let mut rolled_back = 0;
        for item in self.tree.iter() {
            let (key, record) = item?;
            let table_id = key
                .get(..8)
                .map(|id| u64::from_be_bytes(id.try_into().expect("8 bytes")))
                .ok_or_else(|| StorageError::Corrupt("an undo record's key is short".into()))?;
            let mut restored_any = false;
            for (table_id, row, before) in decode(table_id, &record)? {
                if let Some(tree) = tables.get(&table_id) {
                    set(tree, row, before)?;
                    restored_any = true;
                }
            }
            rolled_back += usize::from(restored_any);
            self.tree.remove(&key)?;
        }
        Ok(rolled_back)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(key: &str, after: Option<&str>, before: Option<&str>) -> RowChange {
        RowChange {
            key: key.as_bytes().to_vec(),
            after: after.map(|a| a.as_bytes().to_vec()),
            before: before.map(|b| sled::IVec::from(b.as_bytes())),
        }
    }

    #[test]
    fn a_record_decodes_to_the_before_images_it_was_written_with() {
        let changes = [
            change("k1", Some("new"), None),
            change("k2", None, Some("old")),
            change("", Some(""), Some("")),
        ];
        let record = encode(&changes);
        assert_eq!(record.len(), record_len(&changes));
        let rows = decode(7, &record).unwrap();
        assert_eq!(
            rows,
            [
                (7, &b"k1"[..], None),
                (7, &b"k2"[..], Some(&b"old"[..])),
                (7, &b""[..], Some(&b""[..]))
            ]
        );
        for cut in 1..record.len() {
            // Only a cut at a row boundary is a shorter valid record.
            if let Ok(rows) = decode(7, &record[..cut]) {
                assert!(rows.len() < 3, "a cut at {cut} decoded every row");
            }
        }
        assert!(decode(7, &[3]).is_err(), "an unknown version is refused");
    }

    #[test]
    fn a_record_across_tables_names_each_row_s_table() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree("rows").unwrap();
        let (first, second) = (
            [change("a", Some("new"), Some("old"))],
            [change("b", None, None), change("c", Some("x"), Some("y"))],
        );
        let groups = [
            TreeRows {
                tree: &tree,
                table_id: 7,
                changes: &first,
            },
            TreeRows {
                tree: &tree,
                table_id: 9,
                changes: &second,
            },
        ];
        let record = encode_across(&groups);
        assert_eq!(
            decode(1, &record).unwrap(),
            [
                (7, &b"a"[..], Some(&b"old"[..])),
                (9, &b"b"[..], None),
                (9, &b"c"[..], Some(&b"y"[..]))
            ]
        );
        assert!(decode(1, &record[..record.len() - 1]).is_err());
    }

    #[test]
    fn an_interrupted_commit_across_tables_is_rolled_back_in_each() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let undo = UndoLog::open(&db).unwrap();
        let (one, two) = (db.open_tree("one").unwrap(), db.open_tree("two").unwrap());
        one.insert("a", "old").unwrap();
        let (first, second) = (
            [change("a", Some("new"), Some("old"))],
            [change("b", Some("new"), None)],
        );
        let groups = [
            TreeRows {
                tree: &one,
                table_id: 1,
                changes: &first,
            },
            TreeRows {
                tree: &two,
                table_id: 2,
                changes: &second,
            },
        ];
        undo.record_only_across(1, b"p", &groups);
        first[0].write(&one).unwrap();
        second[0].write(&two).unwrap();
        let tables = HashMap::from([(1, one.clone()), (2, two.clone())]);
        assert_eq!(undo.roll_back(&tables).unwrap(), 1);
        assert_eq!(one.get("a").unwrap().unwrap(), "old");
        assert_eq!(two.get("b").unwrap(), None);

        undo.write_atomically_across(1, b"p", &groups).unwrap();
        assert!(undo.is_empty());
        assert_eq!(one.get("a").unwrap().unwrap(), "new");
        assert_eq!(two.get("b").unwrap().unwrap(), "new");
    }

    #[test]
    fn an_interrupted_commit_is_rolled_back_and_a_finished_one_leaves_no_record() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let undo = UndoLog::open(&db).unwrap();
        let rows = db.open_tree("rows").unwrap();
        rows.insert("kept", "old").unwrap();
        rows.insert("removed", "old").unwrap();
        let changes = [
            change("kept", Some("new"), Some("old")),
            change("removed", None, Some("old")),
            change("added", Some("new"), None),
        ];

        undo.write_atomically(&rows, 7, b"p", &changes).unwrap();
        assert!(undo.tree.is_empty(), "a finished commit removes its record");
        assert_eq!(rows.get("kept").unwrap().unwrap(), "new");
        assert_eq!(rows.get("removed").unwrap(), None);

        // A crash after the record and some of the rows: the record and two rows are written.
        let undo_again = [
            change("kept", Some("newer"), Some("new")),
            change("removed", Some("back"), None),
            change("added", None, Some("new")),
        ];
        undo.tree
            .insert(record_key(7, b"p"), encode(&undo_again))
            .unwrap();
        for written in &undo_again[..2] {
            written.write(&rows).unwrap();
        }
        // A record of a table that is gone is forgotten, not applied.
        undo.tree
            .insert(record_key(8, b"p"), encode(&undo_again))
            .unwrap();

        let tables = HashMap::from([(7, rows.clone())]);
        assert_eq!(undo.roll_back(&tables).unwrap(), 1);
        assert!(undo.tree.is_empty());
        assert_eq!(rows.get("kept").unwrap().unwrap(), "new");
        assert_eq!(rows.get("removed").unwrap(), None);
        assert_eq!(rows.get("added").unwrap().unwrap(), "new");
    }
}
