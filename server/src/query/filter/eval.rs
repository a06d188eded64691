//! Evaluation of a filter on an entity, with Azure's type semantics.
//!
//! - A property the entity lacks makes every comparison false, `ne` included.
//! - Same types compare naturally; strings ordinally by UTF-8 bytes (= code point order), binaries
//!   by bytes, GUIDs by their canonical text, `false` < `true`.
//! - An Int32 literal widens to an Int64 or Double property, an Int64 literal to a Double property;
//!   never the other way round.
//! - Any other type mismatch: `eq` false, `ne` true, `lt`/`le` true, `gt`/`ge` false (the mismatch
//!   compares as less-than, as observed on Azure).
//! - NaN is unordered: only `ne` holds.

use std::cmp::Ordering;

use super::{CompareOp, Expr, Property};
use crate::model::{StoredEntity, Value};

/// How a property value relates to a literal.
enum Relation {
    Ordered(Ordering),
    Unordered,
    Mismatch,
}

impl Expr {
    /// Whether `entity` matches.
    pub fn matches(&self, entity: &StoredEntity) -> bool {
        match self {
            Expr::And(a, b) => a.matches(entity) && b.matches(entity),
            Expr::Or(a, b) => a.matches(entity) || b.matches(entity),
            Expr::Not(inner) => !inner.matches(entity),
            Expr::Compare {
                property,
                op,
                literal,
            } => {
                let relation = match property {
                    Property::PartitionKey => relate_str(&entity.key.partition_key, literal),
                    Property::RowKey => relate_str(&entity.key.row_key, literal),
                    Property::Timestamp => relate(&Value::DateTime(entity.timestamp), literal),
                    Property::Custom(name) => match entity.properties.get(name) {
                        Some(value) => relate(value, literal),
                        None => return false,
                    },
                };
                holds(*op, relation)
            }
        }
    }
}

fn holds(op: CompareOp, relation: Relation) -> bool {
    match relation {
        Relation::Ordered(ordering) => match op {
            CompareOp::Eq => ordering == Ordering::Equal,
            CompareOp::Ne => ordering != Ordering::Equal,
            CompareOp::Gt => ordering == Ordering::Greater,
            CompareOp::Ge => ordering != Ordering::Less,
            CompareOp::Lt => ordering == Ordering::Less,
            CompareOp::Le => ordering != Ordering::Greater,
        },
        Relation::Unordered => op == CompareOp::Ne,
        Relation::Mismatch => matches!(op, CompareOp::Ne | CompareOp::Lt | CompareOp::Le),
    }
}

fn relate_str(property: &str, literal: &Value) -> Relation {
    match literal {
        Value::String(s) => Relation::Ordered(property.as_bytes().cmp(s.as_bytes())),
        _ => Relation::Mismatch,
    }
}

fn relate(property: &Value, literal: &Value) -> Relation {
    use Value as V;
    let doubles = |a: f64, b: f64| {
        a.partial_cmp(&b)
            .map_or(Relation::Unordered, Relation::Ordered)
    };
    match (property, literal) {
        (V::String(a), V::String(b)) => Relation::Ordered(a.as_bytes().cmp(b.as_bytes())),
        (V::Int32(a), V::Int32(b)) => Relation::Ordered(a.cmp(b)),
        (V::Int64(a), V::Int32(b)) => Relation::Ordered(a.cmp(&i64::from(*b))),
        (V::Int64(a), V::Int64(b)) => Relation::Ordered(a.cmp(b)),
        (V::Double(a), V::Int32(b)) => doubles(*a, f64::from(*b)),
        (V::Double(a), V::Int64(b)) => doubles(*a, *b as f64),
        (V::Double(a), V::Double(b)) => doubles(*a, *b),
        (V::Bool(a), V::Bool(b)) => Relation::Ordered(a.cmp(b)),
        (V::DateTime(a), V::DateTime(b)) => Relation::Ordered(a.cmp(b)),
        (V::Guid(a), V::Guid(b)) => Relation::Ordered(a.as_bytes().cmp(b.as_bytes())),
        (V::Binary(a), V::Binary(b)) => Relation::Ordered(a.cmp(b)),
        _ => Relation::Mismatch,
    }
}
