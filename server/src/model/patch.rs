//! Patch steps: changes applied in order to a stored entity's properties inside its commit, so
//! that a counter or a flag changes without a read-modify-write round trip and never fails for a
//! concurrent change.

use super::entity::{validate_property, Properties};
use super::{ValidationError, Value};

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
        }
    }
    Ok(properties)
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
