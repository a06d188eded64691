//! The order-preserving encoding of (PartitionKey, RowKey) into sled keys.
//!
//! A key is `partition_key ++ 0x00 ++ row_key` in UTF-8. Keys cannot contain control characters,
//! so `0x00` never occurs inside either part: the encoding is prefix-free, decodes unambiguously,
//! and byte order equals (PartitionKey, RowKey) order with each part in UTF-8 byte order (which is
//! Unicode code point order). A partition is the tight range `[pk ++ 0x00, pk ++ 0x01)`.

use std::cmp::Ordering;
use std::ops::Bound;

use super::StorageError;

const SEPARATOR: u8 = 0x00;
const PARTITION_END: u8 = 0x01;

/// Encodes an entity's keys.
pub fn encode(partition_key: &str, row_key: &str) -> Vec<u8> {
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

/// The raw PartitionKey bytes of an encoded key.
pub(crate) fn partition_of(key: &[u8]) -> &[u8] {
    let split = key
        .iter()
        .position(|b| *b == SEPARATOR)
        .unwrap_or(key.len());
    &key[..split]
}

/// The first possible key of a partition (inclusive).
pub fn partition_start(partition_key: impl AsRef<[u8]>) -> Vec<u8> {
    [partition_key.as_ref(), &[SEPARATOR]].concat()
}

/// The bound just past a partition (exclusive).
pub fn partition_end(partition_key: impl AsRef<[u8]>) -> Vec<u8> {
    [partition_key.as_ref(), &[PARTITION_END]].concat()
}

/// A range of encoded keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    /// Lower bound.
    pub start: Bound<Vec<u8>>,
    /// Upper bound.
    pub end: Bound<Vec<u8>>,
}

impl KeyRange {
    /// Every key of the table.
    pub fn all() -> KeyRange {
        KeyRange {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
        }
    }

    /// Row keys in `[row_start, row_end)` of one partition; an empty bound is unbounded.
    pub fn rows(partition_key: &str, row_start: &str, row_end: &str) -> KeyRange {
        let pk = partition_key.as_bytes();
        let end = if row_end.is_empty() {
            Bound::Excluded(partition_end(pk))
        } else {
            Bound::Excluded(encode(partition_key, row_end))
        };
        KeyRange {
            start: Bound::Included(encode(partition_key, row_start)),
            end,
        }
    }

    /// Row keys starting with `prefix` in one partition.
    pub fn row_prefix(partition_key: &str, prefix: &str) -> KeyRange {
        let start = encode(partition_key, prefix);
        let end = match prefix_successor(&start) {
            Some(end) => Bound::Excluded(end),
            None => Bound::Excluded(partition_end(partition_key.as_bytes())),
        };
        KeyRange {
            start: Bound::Included(start),
            end,
        }
    }

    /// The part of this range inside one partition.
    pub(crate) fn within_partition(&self, partition_key: &[u8]) -> KeyRange {
        KeyRange {
            start: tighter(
                &self.start,
                &Bound::Included(partition_start(partition_key)),
                Ordering::Greater,
            ),
            end: tighter(
                &self.end,
                &Bound::Excluded(partition_end(partition_key)),
                Ordering::Less,
            ),
        }
    }

    /// The keys in both ranges.
    pub fn intersect(&self, other: &KeyRange) -> KeyRange {
        KeyRange {
            start: tighter(&self.start, &other.start, Ordering::Greater),
            end: tighter(&self.end, &other.end, Ordering::Less),
        }
    }

    /// Whether `next`, which starts no earlier than `self`, overlaps `self` or continues it with no
    /// key in between.
    pub fn overlaps_or_touches(&self, next: &KeyRange) -> bool {
        match (&self.end, &next.start) {
            (Bound::Unbounded, _) | (_, Bound::Unbounded) => true,
            (Bound::Excluded(end), Bound::Excluded(start)) => start < end,
            (
                Bound::Included(end) | Bound::Excluded(end),
                Bound::Included(start) | Bound::Excluded(start),
            ) => start <= end,
        }
    }

    /// The looser of this range's end and `other`.
    pub fn wider_end(&self, other: &Bound<Vec<u8>>) -> Bound<Vec<u8>> {
        let tight = tighter(&self.end, other, Ordering::Less);
        match (&self.end, other) {
            (Bound::Unbounded, _) | (_, Bound::Unbounded) => Bound::Unbounded,
            _ if tight == self.end => other.clone(),
            _ => self.end.clone(),
        }
    }

    /// The PartitionKey (raw bytes) of the one partition this range lies in, if it lies in one.
    pub fn single_partition(&self) -> Option<&[u8]> {
        let start = match &self.start {
            Bound::Included(key) | Bound::Excluded(key) => key,
            Bound::Unbounded => return None,
        };
        let partition = partition_of(start);
        if partition.len() == start.len() {
            return None;
        }
        let limit = partition_end(partition);
        let inside = match &self.end {
            Bound::Excluded(end) => *end <= limit,
            Bound::Included(end) => *end < limit,
            Bound::Unbounded => false,
        };
        inside.then_some(partition)
    }

    /// Whether the range holds exactly one key.
    pub fn is_single_key(&self) -> bool {
        matches!((&self.start, &self.end), (Bound::Included(a), Bound::Included(b)) if a == b)
    }

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        let above_start = match &self.start {
            Bound::Included(start) => key >= start.as_slice(),
            Bound::Excluded(start) => key > start.as_slice(),
            Bound::Unbounded => true,
        };
        let below_end = match &self.end {
            Bound::Included(end) => key <= end.as_slice(),
            Bound::Excluded(end) => key < end.as_slice(),
            Bound::Unbounded => true,
        };
        above_start && below_end
    }

    /// Whether no key can lie in the range (its bounds are crossed).
    pub fn is_empty(&self) -> bool {
        match (&self.start, &self.end) {
            (Bound::Included(a), Bound::Included(b)) => a > b,
            (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
            | (Bound::Excluded(a), Bound::Included(b)) => a >= b,
            _ => false,
        }
    }

    pub(crate) fn bounds(&self) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        (self.start.clone(), self.end.clone())
    }
}

/// The smallest byte string greater than every string starting with `prefix`, if any.
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The tighter of two bounds: the greater lower bound (`prefer` Greater) or the lesser upper bound
/// (`prefer` Less); at equal keys an exclusive bound is tighter.
fn tighter(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>, prefer: Ordering) -> Bound<Vec<u8>> {
    match (a, b) {
        (Bound::Unbounded, other) | (other, Bound::Unbounded) => other.clone(),
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => {
            match x.cmp(y) {
                Ordering::Equal if matches!(a, Bound::Excluded(_)) => a.clone(),
                Ordering::Equal => b.clone(),
                ordering if ordering == prefer => a.clone(),
                _ => b.clone(),
            }
        }
    }
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
            assert_eq!(partition_of(e), p.as_bytes());
        }
    }

    #[test]
    fn partition_ranges_are_tight() {
        let range = KeyRange::rows("a", "", "");
        assert!(range.contains(&encode("a", "")));
        assert!(range.contains(&encode("a", "\u{10FFFF}")));
        assert!(!range.contains(&encode("ab", "")));
        assert!(!range.contains(&encode("", "a")));
    }

    #[test]
    fn prefix_ranges_cover_exactly_the_prefix() {
        let range = KeyRange::row_prefix("p", "log-");
        assert!(range.contains(&encode("p", "log-")));
        assert!(range.contains(&encode("p", "log-zzz")));
        assert!(!range.contains(&encode("p", "log.")));
        assert!(!range.contains(&encode("p", "lof")));
        let everything = KeyRange::row_prefix("p", "");
        assert!(everything.contains(&encode("p", "x")));
        assert!(!everything.contains(&encode("q", "")));
    }
}
