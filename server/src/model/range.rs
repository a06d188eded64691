//! Ranges of entity keys in model terms: positions in (PartitionKey, RowKey) order, with each key
//! compared by its UTF-8 bytes (Unicode code point order), as Azure orders them. The planner emits
//! these ranges; only a store turns them into its own form (sled's byte-encoded keys, SQL bounds).

use std::cmp::Ordering;
use std::ops::Bound;

use trestle_proto::key_order::prefix_end;

/// Where a position lies within its partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RowPosition {
    /// At this RowKey.
    Row(String),
    /// After every row of the partition (and before the next partition).
    AfterRows,
}

/// A position in key order: at an entity key, or just after a whole partition. Ordered by
/// PartitionKey, then RowKey, with [`RowPosition::AfterRows`] after every RowKey.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyPosition {
    /// The partition.
    pub partition_key: String,
    /// Where in the partition.
    pub row: RowPosition,
}

impl KeyPosition {
    /// The position of the entity (`partition_key`, `row_key`).
    pub fn row(partition_key: impl Into<String>, row_key: impl Into<String>) -> KeyPosition {
        KeyPosition {
            partition_key: partition_key.into(),
            row: RowPosition::Row(row_key.into()),
        }
    }

    /// The position just after every row of `partition_key`.
    pub fn after_rows(partition_key: impl Into<String>) -> KeyPosition {
        KeyPosition {
            partition_key: partition_key.into(),
            row: RowPosition::AfterRows,
        }
    }

    /// The entity's keys, if the position is at one.
    pub fn entity_key(&self) -> Option<(&str, &str)> {
        match &self.row {
            RowPosition::Row(row_key) => Some((&self.partition_key, row_key)),
            RowPosition::AfterRows => None,
        }
    }
}

/// The first position of a partition (inclusive).
pub fn partition_start(partition_key: &str) -> Bound<KeyPosition> {
    Bound::Included(KeyPosition::row(partition_key, ""))
}

/// The bound just past a partition (exclusive).
pub fn partition_end(partition_key: &str) -> Bound<KeyPosition> {
    Bound::Excluded(KeyPosition::after_rows(partition_key))
}

/// A range of key positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    /// Lower bound.
    pub start: Bound<KeyPosition>,
    /// Upper bound.
    pub end: Bound<KeyPosition>,
}

impl KeyRange {
    /// Every key of the table.
    pub fn all() -> KeyRange {
        KeyRange {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
        }
    }

    /// Every key of one partition.
    pub fn partition(partition_key: &str) -> KeyRange {
        KeyRange {
            start: partition_start(partition_key),
            end: partition_end(partition_key),
        }
    }

    /// Row keys in `[row_start, row_end)` of one partition; an empty bound is unbounded.
    pub fn rows(partition_key: &str, row_start: &str, row_end: &str) -> KeyRange {
        let end = if row_end.is_empty() {
            partition_end(partition_key)
        } else {
            Bound::Excluded(KeyPosition::row(partition_key, row_end))
        };
        KeyRange {
            start: Bound::Included(KeyPosition::row(partition_key, row_start)),
            end,
        }
    }

    /// Row keys starting with `prefix` in one partition.
    pub fn row_prefix(partition_key: &str, prefix: &str) -> KeyRange {
        let end = match prefix_end(prefix) {
            Some(end) => Bound::Excluded(KeyPosition::row(partition_key, end)),
            None => partition_end(partition_key),
        };
        KeyRange {
            start: Bound::Included(KeyPosition::row(partition_key, prefix)),
            end,
        }
    }

    /// The part of this range inside one partition.
    pub fn within_partition(&self, partition_key: &str) -> KeyRange {
        self.intersect(&KeyRange::partition(partition_key))
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
    pub fn wider_end(&self, other: &Bound<KeyPosition>) -> Bound<KeyPosition> {
        let tight = tighter(&self.end, other, Ordering::Less);
        match (&self.end, other) {
            (Bound::Unbounded, _) | (_, Bound::Unbounded) => Bound::Unbounded,
            _ if tight == self.end => other.clone(),
            _ => self.end.clone(),
        }
    }

    /// The PartitionKey of the one partition this range lies in, if it lies in one.
    pub fn single_partition(&self) -> Option<&str> {
        let start = match &self.start {
            Bound::Included(start) | Bound::Excluded(start) => start,
            Bound::Unbounded => return None,
        };
        if start.row == RowPosition::AfterRows {
            return None;
        }
        let limit = KeyPosition::after_rows(start.partition_key.as_str());
        let inside = match &self.end {
            Bound::Excluded(end) => *end <= limit,
            Bound::Included(end) => *end < limit,
            Bound::Unbounded => false,
        };
        inside.then_some(start.partition_key.as_str())
    }

    /// Whether the range holds exactly one key.
    pub fn is_single_key(&self) -> bool {
        matches!((&self.start, &self.end), (Bound::Included(a), Bound::Included(b)) if a == b)
    }

    /// Whether `position` lies in the range.
    pub fn contains(&self, position: &KeyPosition) -> bool {
        let above_start = match &self.start {
            Bound::Included(start) => position >= start,
            Bound::Excluded(start) => position > start,
            Bound::Unbounded => true,
        };
        let below_end = match &self.end {
            Bound::Included(end) => position <= end,
            Bound::Excluded(end) => position < end,
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

    /// The rest of the range from `position` on (inclusive) in the direction of a scan: the
    /// positions at or after it, or at or before it when `reverse`.
    pub fn from(&self, position: &KeyPosition, reverse: bool) -> KeyRange {
        self.onward(Bound::Included(position.clone()), reverse)
    }

    /// The rest of the range past `position` (exclusive) in the direction of a scan.
    pub fn past(&self, position: &KeyPosition, reverse: bool) -> KeyRange {
        self.onward(Bound::Excluded(position.clone()), reverse)
    }

    /// The range cut to begin at `bound` in the direction of a scan.
    fn onward(&self, bound: Bound<KeyPosition>, reverse: bool) -> KeyRange {
        let rest = if reverse {
            KeyRange {
                start: Bound::Unbounded,
                end: bound,
            }
        } else {
            KeyRange {
                start: bound,
                end: Bound::Unbounded,
            }
        };
        self.intersect(&rest)
    }
}

/// The tighter of two bounds: the greater lower bound (`prefer` Greater) or the lesser upper bound
/// (`prefer` Less); at equal values an exclusive bound is tighter.
pub fn tighter<T: Ord + Clone>(a: &Bound<T>, b: &Bound<T>, prefer: Ordering) -> Bound<T> {
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

    fn at(partition_key: &str, row_key: &str) -> KeyPosition {
        KeyPosition::row(partition_key, row_key)
    }

    #[test]
    fn positions_order_by_partition_then_row_with_partition_ends_between() {
        let ordered = [
            at("a", ""),
            at("a", "z"),
            at("a", "zz"),
            KeyPosition::after_rows("a"),
            at("ab", ""),
            at("ab", "a"),
            at("b", ""),
            at("é", "x"),
        ];
        let mut sorted = ordered.clone();
        sorted.sort();
        assert_eq!(sorted, ordered);
    }

    #[test]
    fn partition_ranges_are_tight() {
        let range = KeyRange::rows("a", "", "");
        assert!(range.contains(&at("a", "")));
        assert!(range.contains(&at("a", "\u{10FFFF}")));
        assert!(!range.contains(&at("ab", "")));
        assert!(!range.contains(&at("", "a")));
        assert_eq!(range.single_partition(), Some("a"));
    }

    #[test]
    fn prefix_ranges_cover_exactly_the_prefix() {
        let range = KeyRange::row_prefix("p", "log-");
        assert!(range.contains(&at("p", "log-")));
        assert!(range.contains(&at("p", "log-zzz")));
        assert!(!range.contains(&at("p", "log.")));
        assert!(!range.contains(&at("p", "lof")));
        let everything = KeyRange::row_prefix("p", "");
        assert!(everything.contains(&at("p", "x")));
        assert!(!everything.contains(&at("q", "")));
        let top = KeyRange::row_prefix("p", "a\u{10FFFF}");
        assert!(top.contains(&at("p", "a\u{10FFFF}\u{10FFFF}")));
        assert!(!top.contains(&at("p", "b")));
        assert_eq!(prefix_end("a\u{D7FF}").as_deref(), Some("a\u{E000}"));
    }
}
