//! The planner of index queries: from a filter, the range of an index's sort keys to read.
//!
//! Only the filter's top-level `and` terms count: equality on the index's leading properties
//! (and, for a `PARTITION` index, on PartitionKey) narrows a prefix, then bounds (`gt`, `ge`,
//! `lt`, `le`) on the next property narrow a range within it. A bound or equality selects values
//! of its literal's EDM type only (indexes order by type first): an entity whose indexed property
//! has another type is outside the range, even where the filter alone would compare it. The
//! filter is still evaluated on every entity read: the plan only decides what is read.
//!
//! A path term is a comparison on that path (`Address/City eq 'Seattle'`); inside an `any` over an
//! array, a comparison on the element (`Books/any(b: b eq 'b1')`) is a term on the index path
//! `Books/*`. A multi-valued index holds an entity once per distinct value of its `*` path, so a
//! query through it must fix that path (and every path before it) with `eq`: then each entity is
//! read once. Any other query through it is refused.

use super::filter::{CompareOp, Expr, Property, Quantifier};
use crate::model::{
    put_escaped, put_value, quoted, successor_of_prefix, type_tag, IndexDefinition, IndexRange,
    IndexScope, ValidationError, Value,
};

/// The index path a term on the PartitionKey is listed under (no custom property has the name).
const PARTITION_KEY: &str = "PartitionKey";

/// The sort keys of `index` that hold every entity `filter` can match, within `partition_key`
/// when the request gives one; refused for a multi-valued index whose `*` path the filter does
/// not fix.
pub fn index_range(
    index: &IndexDefinition,
    filter: Option<&Expr>,
    partition_key: Option<&str>,
) -> Result<IndexRange, ValidationError> {
    let mut terms = Vec::new();
    if let Some(filter) = filter {
        conjuncts(filter, None, &mut terms);
    }
    let pinned = |path: &str| {
        terms
            .iter()
            .find(|(p, op, _)| p == path && *op == CompareOp::Eq)
            .map(|(_, _, value)| *value)
    };
    let unpinned = || {
        ValidationError::Argument(format!(
            "index {} is multi-valued: a query through it must fix {} with 'eq' (for example \
             Books/any(b: b eq 'b1')), and PartitionKey too for a PARTITION index",
            quoted(&index.name),
            index
                .properties
                .iter()
                .take_while(|path| !path.contains('*'))
                .chain(index.properties.iter().find(|path| path.contains('*')))
                .map(|path| quoted(path).to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    };
    let mut prefix = Vec::new();
    if index.scope == IndexScope::Partition {
        let equal_partition = match pinned(PARTITION_KEY) {
            Some(Value::String(pk)) => Some(pk.as_str()),
            _ => None,
        };
        match partition_key.or(equal_partition) {
            Some(pk) => put_escaped(&mut prefix, pk.as_bytes()),
            None if index.is_multi_valued() => return Err(unpinned()),
            None => return Ok(IndexRange::all()),
        }
    }
    let expanded_at = index.properties.iter().position(|path| path.contains('*'));
    for (at, path) in index.properties.iter().enumerate() {
        if let Some(value) = pinned(path) {
            put_value(&mut prefix, value.borrowed());
            continue;
        }
        if expanded_at.is_some_and(|expanded| expanded >= at) {
            return Err(unpinned());
        }
        let mut range = IndexRange::prefixed(&prefix);
        for (_, op, value) in terms.iter().filter(|(p, _, _)| p == path) {
            range = range.intersect(&bound(&prefix, *op, value));
        }
        return Ok(range);
    }
    Ok(IndexRange::prefixed(&prefix))
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

/// The comparisons `expr`'s top-level `and` joins, each with the index path it is on; inside an
/// `any`, the comparisons its body's top-level `and` joins, on `element` (`Books/*`).
fn conjuncts<'e>(
    expr: &'e Expr,
    element: Option<&str>,
    out: &mut Vec<(String, CompareOp, &'e Value)>,
) {
    match expr {
        Expr::And(a, b) => {
            conjuncts(a, element, out);
            conjuncts(b, element, out);
        }
        Expr::Compare {
            property,
            op,
            literal,
        } => out.extend(index_path(property, element).map(|path| (path, *op, literal))),
        Expr::Lambda {
            quantifier: Quantifier::Any,
            collection,
            body: Some(body),
        } if element.is_none() => {
            if let Some(collection) = index_path(collection, None) {
                conjuncts(body, Some(&format!("{collection}/*")), out);
            }
        }
        Expr::Or(..) | Expr::Not(..) | Expr::Constant(_) | Expr::Lambda { .. } => {}
    }
}

/// The index path a comparison's property is (`element` is an enclosing `any`'s array, as
/// `Books/*`), if an index can order by it.
fn index_path(property: &Property, element: Option<&str>) -> Option<String> {
    match property {
        Property::PartitionKey => Some(PARTITION_KEY.to_owned()),
        Property::Custom(name) => Some(name.clone()),
        Property::Path(name, steps) => Some(format!("{name}/{}", steps.join("/"))),
        Property::Variable { up: 0, path } => {
            let element = element?;
            Some(match path.is_empty() {
                true => element.to_owned(),
                false => format!("{element}/{}", path.join("/")),
            })
        }
        Property::Variable { .. } | Property::RowKey | Property::Timestamp => None,
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
        let mut keys = index
            .sort_keys(pk, "r", |n| properties.get(n).map(Value::borrowed))
            .unwrap();
        assert_eq!(keys.len(), 1);
        keys.remove(0)
    }

    fn range(index: &IndexDefinition, filter: &str) -> IndexRange {
        index_range(index, Some(&Expr::parse(filter).unwrap()), None).unwrap()
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
        let field = index_range(&index, None, Some("b")).unwrap();
        assert!(field.contains(&key("b", 5)) && !field.contains(&key("a", 5)));
        assert_eq!(range(&index, "When ge 2024L"), IndexRange::all());
    }

    fn document(json_like: &[(&str, Value)]) -> Value {
        let members = json_like.iter().map(|(n, v)| (n.to_string(), v.clone()));
        Value::Document(crate::model::Document::object(members).unwrap())
    }

    fn array(values: Vec<Value>) -> Value {
        Value::Document(crate::model::Document::array(values).unwrap())
    }

    #[test]
    fn paths_and_array_elements_plan_like_properties() {
        let books = definition(IndexScope::Table, &["Books/*"]);
        assert!(books.is_multi_valued());
        let entity = Properties::from([(
            "Books".to_owned(),
            array(vec![
                Value::String("b2".into()),
                Value::String("b1".into()),
                Value::String("b2".into()),
            ]),
        )]);
        let keys = books
            .sort_keys("p", "r", |n| entity.get(n).map(Value::borrowed))
            .unwrap();
        assert_eq!(keys.len(), 2, "one entry per distinct element");
        let b1 = range(&books, "Books/any(b: b eq 'b1')");
        assert!(b1.contains(&keys[0]) && !b1.contains(&keys[1]));
        for unpinned in [
            "Books/any(b: b ge 'b1')",
            "Books/all(b: b eq 'b1')",
            "X eq 1",
        ] {
            let refused = index_range(&books, Some(&Expr::parse(unpinned).unwrap()), None);
            assert!(refused.is_err(), "{unpinned}");
        }
        assert!(index_range(&books, None, None).is_err());

        let cities = definition(IndexScope::Table, &["Addresses/*/City", "Since"]);
        let person = Properties::from([
            (
                "Addresses".to_owned(),
                array(vec![
                    document(&[("City", Value::String("Seattle".into()))]),
                    document(&[("Zip", Value::String("1".into()))]),
                ]),
            ),
            ("Since".to_owned(), Value::Int32(2020)),
        ]);
        let keys = cities
            .sort_keys("p", "r", |n| person.get(n).map(Value::borrowed))
            .unwrap();
        assert_eq!(keys.len(), 1, "an element without the member has no entry");
        let seattle = range(
            &cities,
            "Addresses/any(a: a/City eq 'Seattle') and Since gt 2019",
        );
        assert!(seattle.contains(&keys[0]));
        let later = range(
            &cities,
            "Addresses/any(a: a/City eq 'Seattle') and Since gt 2020",
        );
        assert!(!later.contains(&keys[0]));

        let city = definition(IndexScope::Table, &["Address/City"]);
        let at = |name: &str| {
            let p = Properties::from([(
                "Address".to_owned(),
                document(&[("City", Value::String(name.into()))]),
            )]);
            let mut keys = city
                .sort_keys("p", "r", |n| p.get(n).map(Value::borrowed))
                .unwrap();
            keys.remove(0)
        };
        let after_m = range(&city, "Address/City gt 'M'");
        assert!(after_m.contains(&at("Seattle")) && !after_m.contains(&at("Berlin")));
    }
}
