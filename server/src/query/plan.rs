//! The planner: from a filter and the request's key fields, the tightest set of key ranges to scan.
//!
//! Each sub-expression yields a set of boxes (a PartitionKey interval × a RowKey interval) that
//! covers every entity it can match: key comparisons against strings bound a dimension, anything
//! else leaves it open. `and` intersects box sets, `or` unites them, `not` is pushed down to the
//! comparisons (exact for key comparisons, which always have a string on both sides). Boxes then
//! become ranges of key positions, intersected with the request's key fields, sorted and merged.
//! The filter is still evaluated on every entity scanned: the plan only decides what is read.

use std::ops::Bound;

use super::filter::{CompareOp, Expr, Property};
use crate::model::{partition_end, partition_start, tighter, KeyPosition, KeyRange, Value};

/// Past this many boxes the planner stops splitting and keeps their bounding box.
const MAX_BOXES: usize = 64;

/// What a query will read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanPlan {
    /// Disjoint ranges in ascending key order.
    pub ranges: Vec<KeyRange>,
    /// The kind of plan, for clients and tests.
    pub kind: PlanKind,
}

/// The efficiency class of a plan, after Azure's query design guide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanKind {
    /// Nothing can match: no read at all.
    Empty,
    /// One entity by its keys.
    Point,
    /// Ranges inside one partition.
    Partition,
    /// Ranges inside several named partitions.
    PartitionUnion,
    /// A range of partitions.
    PartitionRange,
    /// The whole table.
    TableScan,
    /// A range of a declared index.
    Index,
}

impl PlanKind {
    /// The name shown in query stats.
    pub fn as_str(self) -> &'static str {
        match self {
            PlanKind::Empty => "empty",
            PlanKind::Point => "point",
            PlanKind::Partition => "partition",
            PlanKind::PartitionUnion => "partition_union",
            PlanKind::PartitionRange => "partition_range",
            PlanKind::TableScan => "table_scan",
            PlanKind::Index => "index",
        }
    }
}

/// An interval of strings.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Interval {
    lo: Bound<String>,
    hi: Bound<String>,
}

impl Interval {
    const FULL: Interval = Interval {
        lo: Bound::Unbounded,
        hi: Bound::Unbounded,
    };

    fn from_comparison(op: CompareOp, value: &str) -> Interval {
        let v = || value.to_owned();
        match op {
            CompareOp::Eq => Interval {
                lo: Bound::Included(v()),
                hi: Bound::Included(v()),
            },
            CompareOp::Gt => Interval {
                lo: Bound::Excluded(v()),
                hi: Bound::Unbounded,
            },
            CompareOp::Ge => Interval {
                lo: Bound::Included(v()),
                hi: Bound::Unbounded,
            },
            CompareOp::Lt => Interval {
                lo: Bound::Unbounded,
                hi: Bound::Excluded(v()),
            },
            CompareOp::Le => Interval {
                lo: Bound::Unbounded,
                hi: Bound::Included(v()),
            },
            CompareOp::Ne => Interval::FULL,
        }
    }

    fn point(&self) -> Option<&str> {
        match (&self.lo, &self.hi) {
            (Bound::Included(a), Bound::Included(b)) if a == b => Some(a),
            _ => None,
        }
    }

    fn intersect(&self, other: &Interval) -> Option<Interval> {
        let lo = tighter(&self.lo, &other.lo, std::cmp::Ordering::Greater);
        let hi = tighter(&self.hi, &other.hi, std::cmp::Ordering::Less);
        let empty = match (&lo, &hi) {
            (Bound::Included(a), Bound::Included(b)) => a > b,
            (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
            | (Bound::Excluded(a), Bound::Included(b)) => a >= b,
            _ => false,
        };
        (!empty).then_some(Interval { lo, hi })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyBox {
    pk: Interval,
    rk: Interval,
}

impl KeyBox {
    const FULL: KeyBox = KeyBox {
        pk: Interval::FULL,
        rk: Interval::FULL,
    };

    fn intersect(&self, other: &KeyBox) -> Option<KeyBox> {
        Some(KeyBox {
            pk: self.pk.intersect(&other.pk)?,
            rk: self.rk.intersect(&other.rk)?,
        })
    }

    /// The key positions the box covers (RowKey bounds apply only inside a single partition).
    fn key_range(&self) -> KeyRange {
        if let Some(pk) = self.pk.point() {
            let start = match &self.rk.lo {
                Bound::Unbounded => partition_start(pk),
                Bound::Included(rk) => Bound::Included(KeyPosition::row(pk, rk.as_str())),
                Bound::Excluded(rk) => Bound::Excluded(KeyPosition::row(pk, rk.as_str())),
            };
            let end = match &self.rk.hi {
                Bound::Unbounded => partition_end(pk),
                Bound::Included(rk) => Bound::Included(KeyPosition::row(pk, rk.as_str())),
                Bound::Excluded(rk) => Bound::Excluded(KeyPosition::row(pk, rk.as_str())),
            };
            return KeyRange { start, end };
        }
        let start = match &self.pk.lo {
            Bound::Unbounded => Bound::Unbounded,
            Bound::Included(pk) => partition_start(pk),
            Bound::Excluded(pk) => Bound::Included(KeyPosition::after_rows(pk.as_str())),
        };
        let end = match &self.pk.hi {
            Bound::Unbounded => Bound::Unbounded,
            Bound::Included(pk) => partition_end(pk),
            Bound::Excluded(pk) => Bound::Excluded(KeyPosition::row(pk.as_str(), "")),
        };
        KeyRange { start, end }
    }
}

/// Boxes covering every entity `expr` (negated if `negate`) can match.
fn boxes(expr: &Expr, negate: bool) -> Vec<KeyBox> {
    match (expr, negate) {
        (Expr::Not(inner), _) => boxes(inner, !negate),
        (Expr::Constant(value), _) if *value != negate => vec![KeyBox::FULL],
        (Expr::Constant(_), _) => Vec::new(),
        (Expr::And(a, b), false) | (Expr::Or(a, b), true) => {
            intersect_all(&boxes(a, negate), &boxes(b, negate))
        }
        (Expr::Or(a, b), false) | (Expr::And(a, b), true) => {
            let mut union = boxes(a, negate);
            union.extend(boxes(b, negate));
            bounded(union)
        }
        (
            Expr::Compare {
                property,
                op,
                literal: Value::String(value),
            },
            _,
        ) => {
            let op = if negate { op.negated() } else { *op };
            let interval = Interval::from_comparison(op, value);
            match property {
                Property::PartitionKey => vec![KeyBox {
                    pk: interval,
                    rk: Interval::FULL,
                }],
                Property::RowKey => vec![KeyBox {
                    pk: Interval::FULL,
                    rk: interval,
                }],
                Property::Timestamp
                | Property::Custom(_)
                | Property::Path(..)
                | Property::Variable { .. } => vec![KeyBox::FULL],
            }
        }
        (Expr::Compare { .. } | Expr::Lambda { .. }, _) => vec![KeyBox::FULL],
    }
}

fn intersect_all(a: &[KeyBox], b: &[KeyBox]) -> Vec<KeyBox> {
    bounded(
        a.iter()
            .flat_map(|x| b.iter().filter_map(move |y| x.intersect(y)))
            .collect(),
    )
}

/// Keeps a box set small: past [`MAX_BOXES`], one box that covers the whole table.
fn bounded(boxes: Vec<KeyBox>) -> Vec<KeyBox> {
    if boxes.len() > MAX_BOXES {
        vec![KeyBox::FULL]
    } else {
        boxes
    }
}

/// Plans a query: the ranges `filter` can match inside `key_fields` (the request's own key range).
pub fn plan(filter: Option<&Expr>, key_fields: &KeyRange) -> ScanPlan {
    let filter_boxes = filter.map_or_else(|| vec![KeyBox::FULL], |expr| boxes(expr, false));
    let mut ranges: Vec<KeyRange> = filter_boxes
        .iter()
        .map(|b| b.key_range().intersect(key_fields))
        .filter(|r| !r.is_empty())
        .collect();
    ranges.sort_by(|a, b| compare_starts(&a.start, &b.start));
    let ranges = merge(ranges);
    let kind = classify(&ranges);
    ScanPlan { ranges, kind }
}

fn compare_starts(a: &Bound<KeyPosition>, b: &Bound<KeyPosition>) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => Ordering::Equal,
        (Bound::Unbounded, _) => Ordering::Less,
        (_, Bound::Unbounded) => Ordering::Greater,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => x
            .cmp(y)
            .then_with(|| matches!(a, Bound::Excluded(_)).cmp(&matches!(b, Bound::Excluded(_)))),
    }
}

/// Merges overlapping or touching ranges of a start-sorted list, so no key is scanned twice.
fn merge(sorted: Vec<KeyRange>) -> Vec<KeyRange> {
    let mut merged: Vec<KeyRange> = Vec::with_capacity(sorted.len());
    for range in sorted {
        match merged.last_mut() {
            Some(last) if last.overlaps_or_touches(&range) => last.end = last.wider_end(&range.end),
            _ => merged.push(range),
        }
    }
    merged
}

fn classify(ranges: &[KeyRange]) -> PlanKind {
    if ranges.is_empty() {
        return PlanKind::Empty;
    }
    if ranges
        .iter()
        .any(|r| r.start == Bound::Unbounded && r.end == Bound::Unbounded)
    {
        return PlanKind::TableScan;
    }
    let partitions: Option<Vec<&str>> = ranges.iter().map(KeyRange::single_partition).collect();
    match partitions {
        Some(mut partitions) => {
            partitions.dedup();
            match (partitions.len(), ranges) {
                (1, [only]) if only.is_single_key() => PlanKind::Point,
                (1, _) => PlanKind::Partition,
                _ => PlanKind::PartitionUnion,
            }
        }
        None => PlanKind::PartitionRange,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(partition_key: &str, row_key: &str) -> KeyPosition {
        KeyPosition::row(partition_key, row_key)
    }

    fn plan_of(filter: &str) -> ScanPlan {
        plan(Some(&Expr::parse(filter).unwrap()), &KeyRange::all())
    }

    fn kind(filter: &str) -> PlanKind {
        plan_of(filter).kind
    }

    #[test]
    fn constant_filters_read_everything_or_nothing() {
        assert_eq!(kind("true"), PlanKind::TableScan);
        assert_eq!(kind("false"), PlanKind::Empty);
        assert_eq!(kind("not true"), PlanKind::Empty);
        assert_eq!(kind("PartitionKey eq 'a' and true"), PlanKind::Partition);
        assert_eq!(kind("PartitionKey eq 'a' or false"), PlanKind::Partition);
        assert_eq!(kind("PartitionKey eq 'a' or true"), PlanKind::TableScan);
    }

    #[test]
    fn point_reads_for_both_keys_equal() {
        assert_eq!(
            kind("PartitionKey eq 'a' and RowKey eq 'b'"),
            PlanKind::Point
        );
        assert_eq!(
            kind("RowKey eq 'b' and 'a' eq PartitionKey and Age gt 3"),
            PlanKind::Point
        );
        let plan = plan_of("PartitionKey eq 'a' and RowKey eq 'b'");
        assert!(plan.ranges[0].contains(&at("a", "b")));
        assert!(!plan.ranges[0].contains(&at("a", "bb")));
    }

    #[test]
    fn one_partition_with_row_bounds() {
        assert_eq!(kind("PartitionKey eq 'a'"), PlanKind::Partition);
        assert_eq!(
            kind("PartitionKey eq 'a' and Age gt 3"),
            PlanKind::Partition
        );
        let plan = plan_of("PartitionKey eq 'a' and RowKey ge 'log-' and RowKey lt 'log.'");
        assert_eq!(plan.kind, PlanKind::Partition);
        assert!(plan.ranges[0].contains(&at("a", "log-17")));
        assert!(!plan.ranges[0].contains(&at("a", "log.")));
        assert!(!plan.ranges[0].contains(&at("a", "lof")));
        let or_rows = plan_of("PartitionKey eq 'a' and (RowKey eq '1' or RowKey eq '2')");
        assert_eq!(
            (or_rows.kind, or_rows.ranges.len()),
            (PlanKind::Partition, 2)
        );
    }

    #[test]
    fn unions_of_partitions_are_not_table_scans() {
        let plan = plan_of("PartitionKey eq 'a' or PartitionKey eq 'c' or PartitionKey eq 'b'");
        assert_eq!(
            (plan.kind, plan.ranges.len()),
            (PlanKind::PartitionUnion, 3)
        );
        assert!(plan.ranges[0].contains(&at("a", "x")) && plan.ranges[2].contains(&at("c", "")));
        let overlapping = plan_of("PartitionKey eq 'a' or (PartitionKey eq 'a' and RowKey gt 'm')");
        assert_eq!(
            (overlapping.kind, overlapping.ranges.len()),
            (PlanKind::Partition, 1)
        );
    }

    #[test]
    fn partition_key_bounds_give_a_partition_range() {
        let plan = plan_of("PartitionKey ge 'b' and PartitionKey lt 'd'");
        assert_eq!(plan.kind, PlanKind::PartitionRange);
        assert!(plan.ranges[0].contains(&at("b", "")));
        assert!(plan.ranges[0].contains(&at("cz", "z")));
        assert!(!plan.ranges[0].contains(&at("d", "")));
        assert!(!plan.ranges[0].contains(&at("a", "z")));
        let exclusive = plan_of("PartitionKey gt 'b' and PartitionKey le 'd'");
        assert!(!exclusive.ranges[0].contains(&at("b", "x")));
        assert!(exclusive.ranges[0].contains(&at("ba", "x")));
        assert!(exclusive.ranges[0].contains(&at("d", "x")));
        assert!(!exclusive.ranges[0].contains(&at("da", "x")));
    }

    #[test]
    fn table_scans_only_when_nothing_bounds_the_keys() {
        for filter in [
            "Age gt 3",
            "RowKey eq 'x'",
            "PartitionKey eq 'a' or Age gt 3",
            "PartitionKey ne 'a'",
            "not (Age gt 3)",
            "PartitionKey eq 1",
        ] {
            assert_eq!(kind(filter), PlanKind::TableScan, "{filter}");
        }
    }

    #[test]
    fn negation_is_pushed_down_exactly_for_key_comparisons() {
        assert_eq!(kind("not (PartitionKey ne 'a')"), PlanKind::Partition);
        assert_eq!(
            kind("not (PartitionKey ne 'a' or Age gt 3)"),
            PlanKind::Partition
        );
        let plan = plan_of("not (PartitionKey lt 'b' or PartitionKey ge 'c')");
        assert_eq!(plan.kind, PlanKind::PartitionRange);
        assert!(plan.ranges[0].contains(&at("b", "")) && !plan.ranges[0].contains(&at("c", "")));
    }

    #[test]
    fn contradictions_read_nothing() {
        assert_eq!(
            kind("PartitionKey eq 'a' and PartitionKey eq 'b'"),
            PlanKind::Empty
        );
        assert_eq!(kind("RowKey gt 'm' and RowKey lt 'c'"), PlanKind::Empty);
    }

    #[test]
    fn key_fields_intersect_the_filter() {
        let key_fields = KeyRange::row_prefix("a", "exp1");
        let expr = Expr::parse("PartitionKey eq 'a' or PartitionKey eq 'b'").unwrap();
        let plan = plan(Some(&expr), &key_fields);
        assert_eq!((plan.kind, plan.ranges.len()), (PlanKind::Partition, 1));
        assert!(
            plan.ranges[0].contains(&at("a", "exp1_2"))
                && !plan.ranges[0].contains(&at("a", "exp2"))
        );
        let disjoint = Expr::parse("PartitionKey eq 'b'").unwrap();
        assert_eq!(
            super::plan(Some(&disjoint), &key_fields).kind,
            PlanKind::Empty
        );
        assert_eq!(
            super::plan(None, &KeyRange::all()).kind,
            PlanKind::TableScan
        );
    }
}
