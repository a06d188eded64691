//! The order-preserving encoding of (PartitionKey, RowKey) into sled keys.
//!
//! A key is `partition_key ++ 0x00 ++ row_key` in UTF-8. Keys cannot contain control characters,
//! so `0x00` never occurs inside either part: the encoding is prefix-free, decodes unambiguously,
//! and byte order equals (PartitionKey, RowKey) order with each part in UTF-8 byte order (which is
//! Unicode code point order). A partition is the tight range `[pk ++ 0x00, pk ++ 0x01)`.
//!
//! A table's tree also holds its change records and indexes, past every entity key (no UTF-8 byte
//! is `0xFD`, `0xFE` or `0xFF`): change records under `0xFD` ([`feed_record`]), the index catalog
//! under `0xFE`, and each index entry under `0xFF ++ index id (u64 BE) ++ sort key`, whose value is
//! the entity's encoded key.

use std::ops::Bound;

use super::StorageError;
use crate::model::{KeyPosition, KeyRange, RowPosition};
use crate::storage::FeedPosition;

const SEPARATOR: u8 = 0x00;
const PARTITION_END: u8 = 0x01;

/// Where a table's change records start (`feed`): past every entity key (no UTF-8 byte is `0xFD`).
const FEED: u8 = 0xFD;
/// The first key past every entity key of a table's tree.
pub(super) const ENTITIES_END: &[u8] = &[FEED];

/// The key of the change record at `position`.
pub(super) fn feed_record(position: FeedPosition) -> Vec<u8> {
    let mut key = Vec::with_capacity(13);
    key.push(FEED);
    key.extend_from_slice(&position.transaction.to_be_bytes());
    key.extend_from_slice(&position.record.to_be_bytes());
    key
}

/// The keys of a table's change records.
pub(super) fn feed_records() -> std::ops::Range<Vec<u8>> {
    feed_record(FeedPosition::default())..vec![FEED + 1]
}

/// The key of the position of the last change record trimming removed (before every record).
pub(super) const FEED_TRIMMED: &[u8] = &[FEED];

/// The position a change record's key names (the same layout holds the trimmed position).
pub(super) fn feed_position(key: &[u8]) -> Result<FeedPosition, StorageError> {
    match key {
        [FEED, transaction @ .., r0, r1, r2, r3] if transaction.len() == 8 => Ok(FeedPosition {
            transaction: u64::from_be_bytes(transaction.try_into().expect("8 bytes")),
            record: u32::from_be_bytes([*r0, *r1, *r2, *r3]),
        }),
        _ => Err(StorageError::Corrupt(
            "a change record's key is malformed".into(),
        )),
    }
}

/// The key of a table's index catalog (`storage::IndexCatalog`).
pub(super) const INDEX_CATALOG: &[u8] = &[0xFE];
const INDEX_ENTRY: u8 = 0xFF;

/// The key of an entry of index `index_id`.
pub(super) fn index_entry(index_id: u64, sort_key: &[u8]) -> Vec<u8> {
    let mut key = index_prefix(index_id);
    key.extend_from_slice(sort_key);
    key
}

/// The prefix every entry of index `index_id` starts with.
pub(super) fn index_prefix(index_id: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(9 + 64);
    key.push(INDEX_ENTRY);
    key.extend_from_slice(&index_id.to_be_bytes());
    key
}

/// Encodes an entity's keys.
pub(super) fn encode(partition_key: &str, row_key: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(partition_key.len() + 1 + row_key.len());
    key.extend_from_slice(partition_key.as_bytes());
    key.push(SEPARATOR);
    key.extend_from_slice(row_key.as_bytes());
    key
}

/// Splits an encoded key into (PartitionKey, RowKey), borrowed.
pub(crate) fn split(key: &[u8]) -> Result<(&str, &str), StorageError> {
    let at = key
        .iter()
        .position(|b| *b == SEPARATOR)
        .ok_or_else(|| StorageError::Corrupt("entity key without separator".into()))?;
    let text = |bytes| {
        std::str::from_utf8(bytes)
            .map_err(|_| StorageError::Corrupt("entity key is not UTF-8".into()))
    };
    Ok((text(&key[..at])?, text(&key[at + 1..])?))
}

/// The bound just past a partition (exclusive).
fn partition_end(partition_key: &str) -> Vec<u8> {
    [partition_key.as_bytes(), &[PARTITION_END]].concat()
}

/// The sled key of a position: an entity's encoded key, or the bound just past a partition.
fn encode_position(position: &KeyPosition) -> Vec<u8> {
    match &position.row {
        RowPosition::Row(row_key) => encode(&position.partition_key, row_key),
        RowPosition::AfterRows => partition_end(&position.partition_key),
    }
}

/// The bounds of sled keys a range of positions covers: encoding preserves the order of
/// positions, so the bounds map one to one.
pub(crate) fn bounds(range: &KeyRange) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let encode = |bound: &Bound<KeyPosition>| match bound {
        Bound::Included(position) => Bound::Included(encode_position(position)),
        Bound::Excluded(position) => Bound::Excluded(encode_position(position)),
        Bound::Unbounded => Bound::Unbounded,
    };
    let end = match &range.end {
        // Entities end where the change records start.
        Bound::Unbounded => Bound::Excluded(ENTITIES_END.to_vec()),
        bound => encode(bound),
    };
    (encode(&range.start), end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_orders_by_partition_then_row() {
        let keys = [
            ("a", "z"),
            ("a", "zz"),
            ("ab", ""),
            ("ab", "a"),
            ("b", ""),
            ("é", "x"),
        ];
        let encoded: Vec<_> = keys.iter().map(|(p, r)| encode(p, r)).collect();
        let mut sorted = encoded.clone();
        sorted.sort();
        assert_eq!(encoded, sorted);
        for ((p, r), e) in keys.iter().zip(&encoded) {
            assert_eq!(split(e).unwrap(), (*p, *r));
        }
    }

    #[test]
    fn positions_encode_in_their_own_order() {
        let positions = [
            KeyPosition::row("a", ""),
            KeyPosition::row("a", "zz"),
            KeyPosition::after_rows("a"),
            KeyPosition::row("a b", ""),
            KeyPosition::row("ab", ""),
            KeyPosition::after_rows("ab"),
            KeyPosition::row("é", "x"),
        ];
        let encoded: Vec<_> = positions.iter().map(encode_position).collect();
        let mut sorted = encoded.clone();
        sorted.sort();
        assert_eq!(encoded, sorted);
        let partition = bounds(&KeyRange::partition("a"));
        assert_eq!(partition.0, Bound::Included(encode("a", "")));
        assert_eq!(partition.1, Bound::Excluded(b"a\x01".to_vec()));
    }
}
