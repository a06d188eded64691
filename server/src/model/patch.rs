//! Patch steps: changes applied in order to a stored entity's properties inside its commit, so
//! that a counter, a flag or a running maximum changes without a read-modify-write round trip and
//! never fails for a concurrent change; and the condition a patch may require of the entity.

use std::cmp::Ordering;
use std::sync::Arc;

use super::entity::{validate_property, Properties};
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

/// One change to an entity's properties.
#[derive(Debug, Clone, PartialEq)]
pub enum PatchStep {
    /// Adds `by` (Int32, Int64 or Double) to the property; a missing property starts at zero of
    /// `by`'s type.
    Increment { property: String, by: Value },
    /// Sets the property.
    Set { property: String, value: Value },
    /// Removes the property (nothing if it is absent).
    Remove { property: String },
    /// Sets the property if the entity lacks it.
    SetIfAbsent { property: String, value: Value },
    /// Keeps the larger of the property and `value` (Int32, Int64, Double or DateTime, the
    /// property of the same type); a missing property takes `value`.
    Max { property: String, value: Value },
    /// Keeps the smaller of the property and `value`, as [`PatchStep::Max`].
    Min { property: String, value: Value },
}

impl PatchStep {
    /// Checks the step's property name, its value's limits, and that an increment is numeric.
    pub fn validate(&self) -> Result<(), ValidationError> {
        match self {
            PatchStep::Increment { property, by } => {
                validate_property(property, by)?;
                if !matches!(by, Value::Int32(_) | Value::Int64(_) | Value::Double(_)) {
                    return Err(ValidationError::Argument(format!(
                        "increment of {} is by {}; it must be Int32, Int64 or Double",
                        super::quoted(property),
                        by.type_name()
                    )));
                }
                Ok(())
            }
            PatchStep::Set { property, value } | PatchStep::SetIfAbsent { property, value } => {
                validate_property(property, value)
            }
            PatchStep::Max { property, value } | PatchStep::Min { property, value } => {
                validate_property(property, value)?;
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
            PatchStep::Remove { property } => validate_property(property, &Value::Bool(false)),
        }
    }
}

/// Applies `steps` in order to `properties`: a step that does not apply (an increment of another
/// type, an overflow) fails the whole patch, changing nothing.
pub(super) fn apply(
    steps: &[PatchStep],
    mut properties: Properties,
) -> Result<Properties, ValidationError> {
    for step in steps {
        match step {
            PatchStep::Increment { property, by } => {
                let sum = add(property, properties.get(property), by)?;
                properties.insert(property.clone(), sum);
            }
            PatchStep::Set { property, value } => {
                properties.insert(property.clone(), value.clone());
            }
            PatchStep::Remove { property } => {
                properties.remove(property);
            }
            PatchStep::SetIfAbsent { property, value } => {
                properties
                    .entry(property.clone())
                    .or_insert_with(|| value.clone());
            }
            PatchStep::Max { property, value } => {
                if extreme(property, properties.get(property), value, Ordering::Greater)? {
                    properties.insert(property.clone(), value.clone());
                }
            }
            PatchStep::Min { property, value } => {
                if extreme(property, properties.get(property), value, Ordering::Less)? {
                    properties.insert(property.clone(), value.clone());
                }
            }
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
}
