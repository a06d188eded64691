//! Patch steps: changes applied in order to a stored entity's properties inside its commit, so
//! that a counter, a flag, a running maximum or a document's member or array changes without a
//! read-modify-write round trip and never fails for a concurrent change; and the condition a
//! patch may require of the entity. Every step names a path: a property, or a value inside a
//! document property (`Address/City`, `Comments/0/Text`).

use std::cmp::Ordering;
use std::sync::Arc;

use super::document::{check_leaf, Document};
use super::entity::{validate_property, Properties};
use super::paths::{self, Path};
use super::{StoredEntity, ValidationError, Value};

/// What a patch requires of the entity before its steps apply, tested inside the entity's commit
/// (a `$filter` such as `Temp lt 45.0`). The filter language lives above the model, so the
/// condition is held as its text and a test of a stored entity.
#[derive(Clone)]
pub struct PatchCondition {
    text: String,
    test: Arc<dyn Fn(&StoredEntity) -> bool + Send + Sync>,
}

impl PatchCondition {
    /// The condition `text`, true of an entity when `test` says so.
    pub fn new(
        text: String,
        test: impl Fn(&StoredEntity) -> bool + Send + Sync + 'static,
    ) -> PatchCondition {
        PatchCondition {
            text,
            test: Arc::new(test),
        }
    }

    /// The condition as the client wrote it.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether `entity` meets it.
    pub fn holds(&self, entity: &StoredEntity) -> bool {
        (self.test)(entity)
    }
}

impl std::fmt::Debug for PatchCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PatchCondition").field(&self.text).finish()
    }
}

impl PartialEq for PatchCondition {
    fn eq(&self, other: &PatchCondition) -> bool {
        self.text == other.text
    }
}

/// One change to an entity's properties. `property` is a path: a property, or a value inside a
/// document property, whose missing objects on the way are created.
#[derive(Debug, Clone, PartialEq)]
pub enum PatchStep {
    /// Adds `by` (Int32, Int64 or Double) to the value; a missing one starts at zero of `by`'s
    /// type.
    Increment { property: String, by: Value },
    /// Sets the value.
    Set { property: String, value: Value },
    /// Removes the value (nothing if it is absent); inside an array, the element.
    Remove { property: String },
    /// Sets the value if it is absent.
    SetIfAbsent { property: String, value: Value },
    /// Keeps the larger of the value and `value` (Int32, Int64, Double or DateTime, the
    /// value of the same type); a missing one takes `value`.
    Max { property: String, value: Value },
    /// Keeps the smaller of the value and `value`, as [`PatchStep::Max`].
    Min { property: String, value: Value },
    /// Appends `value` to the array (created when missing), then keeps only its last
    /// `keep_last` elements unless that is zero: a post's most recent comments.
    Append {
        property: String,
        value: Value,
        keep_last: u32,
    },
    /// Appends `value` to the array (created when missing) unless an element equals it.
    AddToSet { property: String, value: Value },
    /// Removes every element equal to `value` from the array.
    RemoveValue { property: String, value: Value },
}

impl PatchStep {
    /// The path the step changes.
    pub fn property(&self) -> &str {
        match self {
            PatchStep::Increment { property, .. }
            | PatchStep::Set { property, .. }
            | PatchStep::Remove { property }
            | PatchStep::SetIfAbsent { property, .. }
            | PatchStep::Max { property, .. }
            | PatchStep::Min { property, .. }
            | PatchStep::Append { property, .. }
            | PatchStep::AddToSet { property, .. }
            | PatchStep::RemoveValue { property, .. } => property,
        }
    }

    /// Checks the step's path, its value's limits, and that an increment is numeric.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let path = Path::parse(self.property())?;
        match self {
            PatchStep::Increment { property, by } => {
                check_value(path, by, false)?;
                if !matches!(by, Value::Int32(_) | Value::Int64(_) | Value::Double(_)) {
                    return Err(ValidationError::Argument(format!(
                        "increment of {} is by {}; it must be Int32, Int64 or Double",
                        super::quoted(property),
                        by.type_name()
                    )));
                }
                Ok(())
            }
            PatchStep::Set { value, .. } | PatchStep::SetIfAbsent { value, .. } => {
                check_value(path, value, false)
            }
            PatchStep::Append { value, .. }
            | PatchStep::AddToSet { value, .. }
            | PatchStep::RemoveValue { value, .. } => check_value(path, value, true),
            PatchStep::Max { property, value } | PatchStep::Min { property, value } => {
                check_value(path, value, false)?;
                match value {
                    Value::Int32(_) | Value::Int64(_) | Value::DateTime(_) => Ok(()),
                    Value::Double(v) if !v.is_nan() => Ok(()),
                    _ => Err(ValidationError::Argument(format!(
                        "max and min of {} take an Int32, Int64, Double (not NaN) or DateTime, \
                         not {}",
                        super::quoted(property),
                        by_kind(value)
                    ))),
                }
            }
            PatchStep::Remove { .. } => Ok(()),
        }
    }

    /// The value at the step's path once the step applies to `current` (`None`: removed).
    fn change(&self, current: Option<Value>) -> Result<Option<Value>, ValidationError> {
        let path = self.property();
        Ok(match self {
            PatchStep::Increment { by, .. } => Some(add(path, current.as_ref(), by)?),
            PatchStep::Set { value, .. } => Some(value.clone()),
            PatchStep::Remove { .. } => None,
            PatchStep::SetIfAbsent { value, .. } => Some(current.unwrap_or_else(|| value.clone())),
            PatchStep::Max { value, .. } | PatchStep::Min { value, .. } => {
                let wins = match self {
                    PatchStep::Max { .. } => Ordering::Greater,
                    _ => Ordering::Less,
                };
                match extreme(path, current.as_ref(), value, wins)? {
                    true => Some(value.clone()),
                    false => current,
                }
            }
            PatchStep::Append {
                value, keep_last, ..
            } => {
                let mut elements = elements(path, current)?;
                elements.push(value.clone());
                let keep = *keep_last as usize;
                if keep > 0 && elements.len() > keep {
                    elements.drain(..elements.len() - keep);
                }
                Some(array(path, elements)?)
            }
            PatchStep::AddToSet { value, .. } => {
                let mut elements = elements(path, current)?;
                if !elements.contains(value) {
                    elements.push(value.clone());
                }
                Some(array(path, elements)?)
            }
            PatchStep::RemoveValue { value, .. } => match current {
                None => None,
                current => {
                    let mut elements = elements(path, current)?;
                    elements.retain(|element| element != value);
                    Some(array(path, elements)?)
                }
            },
        })
    }
}

/// A step's value: as a property's when it replaces one (`path` is a property and the value is
/// not an element), otherwise as a value inside a document (where null is allowed).
fn check_value(path: Path<'_>, value: &Value, element: bool) -> Result<(), ValidationError> {
    if path.is_property() && !element {
        return validate_property(path.as_str(), value);
    }
    check_leaf(value).map_err(|error| error.within(path.as_str()))
}

/// The elements of the array at `path` (none when missing).
fn elements(path: &str, current: Option<Value>) -> Result<Vec<Value>, ValidationError> {
    match current {
        None => Ok(Vec::new()),
        Some(Value::Document(document)) if document.as_ref().is_array() => Ok(document
            .as_ref()
            .elements()
            .map(|element| element.to_value())
            .collect()),
        Some(other) => Err(ValidationError::Argument(format!(
            "{} is {}; append, add_to_set and remove_value need an array",
            super::quoted(path),
            other.type_name()
        ))),
    }
}

fn array(path: &str, elements: Vec<Value>) -> Result<Value, ValidationError> {
    Document::array(elements)
        .map(Value::Document)
        .map_err(|error| error.within(path))
}

/// Applies `steps` in order to `properties`: a step that does not apply (an increment of another
/// type, an overflow, a path through a scalar) fails the whole patch, changing nothing.
pub(super) fn apply(
    steps: &[PatchStep],
    mut properties: Properties,
) -> Result<Properties, ValidationError> {
    for step in steps {
        let path = Path::parse(step.property())?;
        let current = properties.remove(path.property());
        if let Some(value) = paths::edit(current, path, &mut |current| step.change(current))? {
            properties.insert(path.property().to_owned(), value);
        }
    }
    Ok(properties)
}

/// A value's type as a refusal names it (NaN apart from other doubles).
fn by_kind(value: &Value) -> &'static str {
    match value {
        Value::Double(v) if v.is_nan() => "NaN",
        other => other.type_name(),
    }
}

/// Whether `value` replaces `current` for a max (`wins` = `Greater`) or a min (`Less`): when the
/// property is missing or `value` compares `wins` against it. Both must be of one type.
fn extreme(
    property: &str,
    current: Option<&Value>,
    value: &Value,
    wins: Ordering,
) -> Result<bool, ValidationError> {
    let ordering = match (current, value) {
        (None, _) => return Ok(true),
        (Some(Value::Int32(a)), Value::Int32(b)) => b.cmp(a),
        (Some(Value::Int64(a)), Value::Int64(b)) => b.cmp(a),
        (Some(Value::DateTime(a)), Value::DateTime(b)) => b.cmp(a),
        // A stored NaN is beaten by any number.
        (Some(Value::Double(a)), Value::Double(b)) => b.partial_cmp(a).unwrap_or(wins),
        (Some(current), value) => {
            return Err(ValidationError::Argument(format!(
                "property {} is {}; a max or min with {} cannot apply to it",
                super::quoted(property),
                current.type_name(),
                value.type_name()
            )))
        }
    };
    Ok(ordering == wins)
}

/// `current + by`, both of `by`'s type (a missing `current` is zero).
fn add(property: &str, current: Option<&Value>, by: &Value) -> Result<Value, ValidationError> {
    let overflow = || ValidationError::Overflow {
        name: property.to_owned(),
        type_name: by.type_name(),
    };
    match (current, by) {
        (None, by) => Ok(by.clone()),
        (Some(Value::Int32(a)), Value::Int32(b)) => {
            a.checked_add(*b).map(Value::Int32).ok_or_else(overflow)
        }
        (Some(Value::Int64(a)), Value::Int64(b)) => {
            a.checked_add(*b).map(Value::Int64).ok_or_else(overflow)
        }
        (Some(Value::Double(a)), Value::Double(b)) => {
            let sum = a + b;
            if sum.is_finite() || !a.is_finite() || !b.is_finite() {
                Ok(Value::Double(sum))
            } else {
                Err(overflow())
            }
        }
        (Some(current), by) => Err(ValidationError::Argument(format!(
            "property {} is {}; an increment by {} cannot apply to it",
            super::quoted(property),
            current.type_name(),
            by.type_name()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn increment(by: Value) -> PatchStep {
        PatchStep::Increment {
            property: "N".into(),
            by,
        }
    }

    #[test]
    fn steps_apply_in_order() {
        let steps = [
            increment(Value::Int64(5)),
            increment(Value::Int64(-2)),
            PatchStep::SetIfAbsent {
                property: "S".into(),
                value: Value::String("first".into()),
            },
            PatchStep::SetIfAbsent {
                property: "S".into(),
                value: Value::String("second".into()),
            },
            PatchStep::Set {
                property: "B".into(),
                value: Value::Bool(true),
            },
            PatchStep::Remove {
                property: "B".into(),
            },
        ];
        let patched = apply(&steps, Properties::new()).unwrap();
        assert_eq!(patched.get("N"), Some(&Value::Int64(3)));
        assert_eq!(patched.get("S"), Some(&Value::String("first".into())));
        assert_eq!(patched.get("B"), None);
    }

    #[test]
    fn max_and_min_keep_the_extreme_of_one_type() {
        let step = |max: bool, value: Value| {
            let property = "T".to_owned();
            if max {
                PatchStep::Max { property, value }
            } else {
                PatchStep::Min { property, value }
            }
        };
        let steps = [
            step(true, Value::Double(40.0)),
            step(true, Value::Double(45.5)),
            step(true, Value::Double(42.0)),
        ];
        let patched = apply(&steps, Properties::new()).unwrap();
        assert_eq!(patched.get("T"), Some(&Value::Double(45.5)));
        let steps = [step(false, Value::Int64(9)), step(false, Value::Int64(3))];
        let patched = apply(&steps, patched.clone()).unwrap_err();
        assert!(patched.to_string().contains("is Double"), "{patched}");
        let lows = apply(
            &[step(false, Value::Int64(9)), step(false, Value::Int64(3))],
            Properties::new(),
        )
        .unwrap();
        assert_eq!(lows.get("T"), Some(&Value::Int64(3)));
        let when = |ticks| Value::DateTime(crate::model::Ticks(ticks));
        let latest = apply(
            &[step(true, when(5)), step(true, when(2))],
            Properties::new(),
        )
        .unwrap();
        assert_eq!(latest.get("T"), Some(&when(5)));
        assert!(step(true, Value::String("x".into())).validate().is_err());
        assert!(step(true, Value::Double(f64::NAN)).validate().is_err());
        assert!(step(false, Value::Bool(true)).validate().is_err());
    }

    #[test]
    fn increments_refuse_other_types_and_overflow() {
        let mut properties = Properties::new();
        properties.insert("N".into(), Value::Int32(i32::MAX));
        assert!(matches!(
            apply(&[increment(Value::Int32(1))], properties.clone()),
            Err(ValidationError::Overflow { .. })
        ));
        assert!(matches!(
            apply(&[increment(Value::Int64(1))], properties.clone()),
            Err(ValidationError::Argument(_))
        ));
        properties.insert("N".into(), Value::String("x".into()));
        assert!(apply(&[increment(Value::Int32(1))], properties).is_err());
        assert!(increment(Value::String("1".into())).validate().is_err());
        let mut doubles = Properties::new();
        doubles.insert("N".into(), Value::Double(f64::MAX));
        assert!(apply(&[increment(Value::Double(f64::MAX))], doubles).is_err());
    }

    fn at(properties: &Properties, path: &str) -> Option<Value> {
        let (name, rest) = path.split_once('/').unwrap_or((path, ""));
        let value = properties.get(name)?;
        match value {
            Value::Document(document) if !rest.is_empty() => {
                document.as_ref().at(rest.split('/')).map(|v| v.to_value())
            }
            _ if rest.is_empty() => Some(value.clone()),
            _ => None,
        }
    }

    fn set(property: &str, value: Value) -> PatchStep {
        PatchStep::Set {
            property: property.into(),
            value,
        }
    }

    #[test]
    fn steps_at_paths_create_objects_and_change_one_value() {
        let steps = [
            set("Address/City", Value::String("Seattle".into())),
            set("Address/Geo/Lat", Value::Double(47.6)),
            PatchStep::Increment {
                property: "Stats/Views".into(),
                by: Value::Int64(2),
            },
            PatchStep::Increment {
                property: "Stats/Views".into(),
                by: Value::Int64(3),
            },
            set("Address/Note", Value::Null),
            PatchStep::SetIfAbsent {
                property: "Address/City".into(),
                value: Value::String("Paris".into()),
            },
            PatchStep::Remove {
                property: "Missing/Deeper".into(),
            },
        ];
        let patched = apply(&steps, Properties::new()).unwrap();
        assert_eq!(
            at(&patched, "Address/City"),
            Some(Value::String("Seattle".into()))
        );
        assert_eq!(at(&patched, "Address/Geo/Lat"), Some(Value::Double(47.6)));
        assert_eq!(at(&patched, "Stats/Views"), Some(Value::Int64(5)));
        assert_eq!(at(&patched, "Address/Note"), Some(Value::Null));
        assert!(
            !patched.contains_key("Missing"),
            "a removal creates nothing"
        );
        let removed = apply(
            &[PatchStep::Remove {
                property: "Address/Geo".into(),
            }],
            patched,
        )
        .unwrap();
        assert_eq!(at(&removed, "Address/Geo/Lat"), None);
        assert_eq!(
            at(&removed, "Address/City"),
            Some(Value::String("Seattle".into()))
        );
    }

    #[test]
    fn arrays_append_with_a_bound_add_to_sets_and_remove_values() {
        let append = |value: i32, keep_last| PatchStep::Append {
            property: "Recent".into(),
            value: Value::Int32(value),
            keep_last,
        };
        let steps: Vec<PatchStep> = (1..=5).map(|n| append(n, 3)).collect();
        let patched = apply(&steps, Properties::new()).unwrap();
        let elements = |properties: &Properties, name: &str| match properties.get(name) {
            Some(Value::Document(document)) => document
                .as_ref()
                .elements()
                .map(|v| v.to_value())
                .collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            elements(&patched, "Recent"),
            [3, 4, 5].map(Value::Int32).to_vec()
        );
        let tag = |step: fn(String, Value) -> PatchStep, value: &str| {
            step("Tags".into(), Value::String(value.into()))
        };
        let add = |property, value| PatchStep::AddToSet { property, value };
        let drop = |property, value| PatchStep::RemoveValue { property, value };
        let steps = [
            tag(add, "a"),
            tag(add, "b"),
            tag(add, "a"),
            tag(drop, "b"),
            tag(drop, "zz"),
        ];
        let tagged = apply(&steps, Properties::new()).unwrap();
        assert_eq!(elements(&tagged, "Tags"), vec![Value::String("a".into())]);
        let second = apply(&[set("Recent/1", Value::Bool(true))], patched.clone()).unwrap();
        assert_eq!(at(&second, "Recent/1"), Some(Value::Bool(true)));
        let shorter = apply(
            &[PatchStep::Remove {
                property: "Recent/0".into(),
            }],
            patched,
        )
        .unwrap();
        assert_eq!(
            elements(&shorter, "Recent"),
            [4, 5].map(Value::Int32).to_vec()
        );
    }

    #[test]
    fn refusals_at_paths_name_the_path_and_change_nothing() {
        let start = apply(
            &[
                set("Name", Value::String("x".into())),
                PatchStep::Append {
                    property: "List".into(),
                    value: Value::Int32(1),
                    keep_last: 0,
                },
            ],
            Properties::new(),
        )
        .unwrap();
        let refused = |step: PatchStep| apply(&[step], start.clone()).unwrap_err().to_string();
        let through = refused(set("Name/First", Value::Int32(1)));
        assert!(
            through.contains("runs through 'Name', which is String"),
            "{through}"
        );
        let out_of_range = refused(set("List/3", Value::Int32(1)));
        assert!(
            out_of_range.contains("array of 1 elements, and '3'"),
            "{out_of_range}"
        );
        let not_an_index = refused(set("List/x", Value::Int32(1)));
        assert!(
            not_an_index.contains("'x' is not an index"),
            "{not_an_index}"
        );
        let mismatch = refused(PatchStep::Increment {
            property: "List/0".into(),
            by: Value::Int64(1),
        });
        assert!(mismatch.contains("'List/0' is Int32"), "{mismatch}");
        let not_array = refused(PatchStep::AddToSet {
            property: "Name".into(),
            value: Value::Int32(1),
        });
        assert!(not_array.contains("need an array"), "{not_array}");
        let mut deep = Value::Int32(1);
        for _ in 0..32 {
            deep = Value::Document(Document::object([("a".to_owned(), deep)]).unwrap());
        }
        let too_deep = refused(set("Doc/b", deep));
        assert!(too_deep.contains("nest at most 32"), "{too_deep}");
        assert!(set("A//B", Value::Null).validate().is_err());
        assert!(
            set("A", Value::Null).validate().is_err(),
            "a property is never null"
        );
        assert!(
            set("A/B", Value::Null).validate().is_ok(),
            "a member may be"
        );
    }
}
