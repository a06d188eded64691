//! The planner of index queries: from a filter, the range of an index's sort keys to read.
//!
//! Only the filter's top-level `and` terms count: equality on the index's leading properties
//! (and, for a `PARTITION` index, on PartitionKey) narrows a prefix, then bounds (`gt`, `ge`,
//! `lt`, `le`) on the next property narrow a range within it. A bound or equality selects values
//! of its literal's EDM type only (indexes order by type first): an entity whose indexed property
//! has another type is outside the range, even where the filter alone would compare it. The
//! filter is still evaluated on every entity read: the plan only decides what is read.

use super::filter::{CompareOp, Expr, Property};
use crate::model::{
    put_escaped, put_value, successor_of_prefix, type_tag, IndexDefinition, IndexRange, IndexScope,
    Value,
};

/// The sort keys of `index` that hold every entity `filter` can match, within `partition_key`
/// when the request gives one.
pub fn index_range(
    index: &IndexDefinition,
    filter: Option<&Expr>,
    partition_key: Option<&str>,
) -> IndexRange {
    let mut terms = Vec::new();
    if let Some(filter) = filter {
        conjuncts(filter, &mut terms);
    }
    let mut prefix = Vec::new();
    if index.scope == IndexScope::Partition {
        let equal_partition = terms.iter().find_map(|term| match term {
            (Property::PartitionKey, CompareOp::Eq, Value::String(pk)) => Some(pk.as_str()),
            _ => None,
        });
        match partition_key.or(equal_partition) {
            Some(pk) => put_escaped(&mut prefix, pk.as_bytes()),
            None => return IndexRange::all(),
        }
    }
    for property in &index.properties {
        let is_this = |p: &Property| matches!(p, Property::Custom(name) if name == property);
        let equal = terms
            .iter()
            .find(|(p, op, _)| is_this(p) && *op == CompareOp::Eq);
        if let Some((_, _, value)) = equal {
            put_value(&mut prefix, value.borrowed());
            continue;
        }
        let mut range = IndexRange::prefixed(&prefix);
        for (_, op, value) in terms.iter().filter(|(p, _, _)| is_this(p)) {
            range = range.intersect(&bound(&prefix, *op, value));
        }
        return range;
    }
    IndexRange::prefixed(&prefix)
}

/// The sort keys after `prefix` whose next value `op` `value` holds for (of `value`'s type).
fn bound(prefix: &[u8], op: CompareOp, value: &Value) -> IndexRange {
    let typed = IndexRange::prefixed(&[prefix, &[type_tag(value.borrowed())]].concat());
    let mut at = prefix.to_vec();
    put_value(&mut at, value.borrowed());
    let past = successor_of_prefix(&at);
    match op {
        CompareOp::Eq => IndexRange::prefixed(&at),
        CompareOp::Gt => IndexRange {
            start: past.unwrap_or_default(),
            end: typed.end,
        },
        CompareOp::Ge => IndexRange {
            start: at,
            end: typed.end,
        },
        CompareOp::Lt => IndexRange {
            start: typed.start,
            end: Some(at),
        },
        CompareOp::Le => IndexRange {
            start: typed.start,
            end: past,
        },
        CompareOp::Ne => IndexRange::prefixed(prefix),
    }
}

/// The comparisons `expr`'s top-level `and` joins.
fn conjuncts<'e>(expr: &'e Expr, out: &mut Vec<(Property, CompareOp, &'e Value)>) {
    match expr {
        Expr::And(a, b) => {
            conjuncts(a, out);
            conjuncts(b, out);
        }
        Expr::Compare {
            property,
            op,
            literal,
        } => out.push((property.clone(), *op, literal)),
        Expr::Or(..) | Expr::Not(..) | Expr::Constant(_) | Expr::Lambda { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Properties, Ticks};

    fn definition(scope: IndexScope, properties: &[&str]) -> IndexDefinition {
        IndexDefinition::new(
            "Ix".into(),
            properties.iter().map(|p| p.to_string()).collect(),
            scope,
            false,
        )
        .unwrap()
    }

    fn sort_key(index: &IndexDefinition, pk: &str, properties: &[(&str, Value)]) -> Vec<u8> {
        let properties: Properties = properties
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect();
        index
            .sort_key(pk, "r", |n| properties.get(n).map(Value::borrowed))
            .unwrap()
    }

    fn range(index: &IndexDefinition, filter: &str) -> IndexRange {
        index_range(index, Some(&Expr::parse(filter).unwrap()), None)
    }

    #[test]
    fn equality_then_bounds_narrow_the_range() {
        let index = definition(IndexScope::Table, &["Last", "Age"]);
        let key = |last: &str, age: i32| {
            sort_key(
                &index,
                "p",
                &[
                    ("Last", Value::String(last.into())),
                    ("Age", Value::Int32(age)),
                ],
            )
        };
        let r = range(
            &index,
            "Last eq 'Ng' and Age ge 30 and Age lt 40 and Other eq 1",
        );
        assert!(r.contains(&key("Ng", 30)) && r.contains(&key("Ng", 39)));
        assert!(!r.contains(&key("Ng", 40)) && !r.contains(&key("Ng", 29)));
        assert!(!r.contains(&key("Nga", 35)) && !r.contains(&key("N", 35)));
        let r = range(&index, "Last gt 'Ng'");
        assert!(r.contains(&key("Nga", 1)) && !r.contains(&key("Ng", 99)));
        let r = range(&index, "Last le 'Ng'");
        assert!(
            r.contains(&key("Ng", 99)) && r.contains(&key("A", 1)) && !r.contains(&key("Nga", 1))
        );
        // Other types are out of a typed bound's range.
        let typed = sort_key(
            &index,
            "p",
            &[("Last", Value::Int32(1)), ("Age", Value::Int32(1))],
        );
        assert!(!range(&index, "Last lt 'Z'").contains(&typed));
        // `or` and `not` do not narrow.
        assert_eq!(
            range(&index, "Last eq 'a' or Last eq 'b'"),
            IndexRange::all()
        );
    }

    #[test]
    fn partition_indexes_need_the_partition_to_narrow() {
        let index = definition(IndexScope::Partition, &["When"]);
        let key = |pk: &str, t: i64| sort_key(&index, pk, &[("When", Value::Int64(t))]);
        let r = range(&index, "PartitionKey eq 'a' and When ge 2024L");
        assert!(r.contains(&key("a", 2024)) && !r.contains(&key("a", 2023)));
        assert!(!r.contains(&key("b", 2024)));
        let dated = sort_key(&index, "a", &[("When", Value::DateTime(Ticks(2024)))]);
        assert!(!r.contains(&dated), "another type is out of the range");
        let field = index_range(&index, None, Some("b"));
        assert!(field.contains(&key("b", 5)) && !field.contains(&key("a", 5)));
        assert_eq!(range(&index, "When ge 2024L"), IndexRange::all());
    }
}
