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
//! - A path into a document behaves as a property: a missing member (or a step through a value
//!   that is not an object) makes every comparison false; a document or a null compared with a
//!   literal is a type mismatch.
//! - `any`/`all` over a value that is not an array (a missing one included) is false.

use std::cmp::Ordering;

use super::{CompareOp, Expr, Property, Quantifier};
use crate::model::{StoredEntity, Ticks, Value, ValueRef};

/// How a property value relates to a literal.
enum Relation {
    Ordered(Ordering),
    Unordered,
    Mismatch,
}

/// What a filter reads of an entity: an owned entity, or one read in place from its stored bytes.
pub trait Record {
    /// The PartitionKey.
    fn partition_key(&self) -> &str;
    /// The RowKey.
    fn row_key(&self) -> &str;
    /// When the entity was last written.
    fn timestamp(&self) -> Ticks;
    /// The named custom property, if the entity has it.
    fn property(&self, name: &str) -> Option<ValueRef<'_>>;
}

impl Record for StoredEntity {
    fn partition_key(&self) -> &str {
        &self.key.partition_key
    }

    fn row_key(&self) -> &str {
        &self.key.row_key
    }

    fn timestamp(&self) -> Ticks {
        self.timestamp
    }

    fn property(&self, name: &str) -> Option<ValueRef<'_>> {
        self.properties.get(name).map(Value::borrowed)
    }
}

/// The elements the lambdas around a condition are at, innermost first.
struct Scope<'s, 'v> {
    value: ValueRef<'v>,
    outer: Option<&'s Scope<'s, 'v>>,
}

impl Expr {
    /// Whether `entity` matches.
    pub fn matches<R: Record + ?Sized>(&self, entity: &R) -> bool {
        self.holds(entity, None)
    }

    fn holds<'e, R: Record + ?Sized>(&self, entity: &'e R, scope: Option<&Scope<'_, 'e>>) -> bool {
        match self {
            Expr::And(a, b) => a.holds(entity, scope) && b.holds(entity, scope),
            Expr::Or(a, b) => a.holds(entity, scope) || b.holds(entity, scope),
            Expr::Not(inner) => !inner.holds(entity, scope),
            Expr::Constant(value) => *value,
            Expr::Compare {
                property,
                op,
                literal,
            } => {
                let relation = match property {
                    Property::PartitionKey => relate_str(entity.partition_key(), literal),
                    Property::RowKey => relate_str(entity.row_key(), literal),
                    Property::Timestamp => relate(ValueRef::DateTime(entity.timestamp()), literal),
                    other => match resolve(other, entity, scope) {
                        Some(value) => relate(value, literal),
                        None => return false,
                    },
                };
                holds(*op, relation)
            }
            Expr::Lambda {
                quantifier,
                collection,
                body,
            } => {
                let Some(ValueRef::Document(array)) = resolve(collection, entity, scope) else {
                    return false;
                };
                if !array.is_array() {
                    return false;
                }
                let mut elements = array.elements();
                let element_holds = |value| match body {
                    Some(body) => body.holds(
                        entity,
                        Some(&Scope {
                            value,
                            outer: scope,
                        }),
                    ),
                    None => true,
                };
                match quantifier {
                    Quantifier::Any => elements.any(element_holds),
                    Quantifier::All => elements.all(element_holds),
                }
            }
        }
    }
}

/// The value a custom property, a path or a lambda's variable names, if there is one.
fn resolve<'e, R: Record + ?Sized>(
    property: &Property,
    entity: &'e R,
    scope: Option<&Scope<'_, 'e>>,
) -> Option<ValueRef<'e>> {
    let (start, path) = match property {
        Property::Custom(name) => return entity.property(name),
        Property::Path(name, path) => (entity.property(name)?, path),
        Property::Variable { up, path } => {
            let mut scope = scope?;
            for _ in 0..*up {
                scope = scope.outer?;
            }
            (scope.value, path)
        }
        Property::PartitionKey | Property::RowKey | Property::Timestamp => return None,
    };
    path.iter().try_fold(start, |value, step| match value {
        ValueRef::Document(object) if !object.is_array() => object.member(step),
        // Bounded as a member lookup is: an array holds at most MAX_DOCUMENT_VALUES elements.
        ValueRef::Document(array) => array.element(step.parse().ok()?),
        _ => None,
    })
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

fn relate(property: ValueRef<'_>, literal: &Value) -> Relation {
    use Value as V;
    use ValueRef as P;
    let doubles = |a: f64, b: f64| {
        a.partial_cmp(&b)
            .map_or(Relation::Unordered, Relation::Ordered)
    };
    match (property, literal) {
        (P::String(a), V::String(b)) => Relation::Ordered(a.as_bytes().cmp(b.as_bytes())),
        (P::Int32(a), V::Int32(b)) => Relation::Ordered(a.cmp(b)),
        (P::Int64(a), V::Int32(b)) => Relation::Ordered(a.cmp(&i64::from(*b))),
        (P::Int64(a), V::Int64(b)) => Relation::Ordered(a.cmp(b)),
        (P::Double(a), V::Int32(b)) => doubles(a, f64::from(*b)),
        (P::Double(a), V::Int64(b)) => doubles(a, *b as f64),
        (P::Double(a), V::Double(b)) => doubles(a, *b),
        (P::Bool(a), V::Bool(b)) => Relation::Ordered(a.cmp(b)),
        (P::DateTime(a), V::DateTime(b)) => Relation::Ordered(a.cmp(b)),
        (P::Guid(a), V::Guid(b)) => Relation::Ordered(a.as_bytes().cmp(b.as_bytes())),
        (P::Binary(a), V::Binary(b)) => Relation::Ordered(a.cmp(b.as_slice())),
        _ => Relation::Mismatch,
    }
}
