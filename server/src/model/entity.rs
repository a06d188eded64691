//! Entities and the validation of their properties against Azure's limits.

use std::collections::BTreeMap;

use super::{
    names::EntityKey, value::utf16_bytes, Ticks, ValidationError, Value, MAX_ENTITY_BYTES,
    MAX_PROPERTIES, MAX_PROPERTY_NAME_CHARS, MAX_VALUE_BYTES,
};

/// Names that are system properties and so cannot be custom ones.
const RESERVED_PROPERTY_NAMES: &[&str] = &["PartitionKey", "RowKey", "Timestamp"];

/// Custom properties by name, in name order.
pub type Properties = BTreeMap<String, Value>;

/// An entity as a client sends it: keys and custom properties, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEntity {
    /// The entity's keys.
    pub key: EntityKey,
    /// Its custom properties.
    pub properties: Properties,
}

impl NewEntity {
    /// Checks every property name and value and the entity's total size.
    pub fn new(key: EntityKey, properties: Properties) -> Result<NewEntity, ValidationError> {
        for (name, value) in &properties {
            validate_property(name, value)?;
        }
        validate_shape(&key, &properties)?;
        Ok(NewEntity { key, properties })
    }
}

/// Checks one property: its name, a DateTime's range (every protocol's values pass here), and
/// its value's size.
pub(crate) fn validate_property(name: &str, value: &Value) -> Result<(), ValidationError> {
    validate_property_name(name)?;
    if let Value::Null = value {
        return Err(ValidationError::PropertyValueMissing {
            name: name.to_owned(),
        });
    }
    if let Value::DateTime(ticks) = value {
        if !(Ticks::MIN..=Ticks::MAX).contains(ticks) {
            return Err(ValidationError::DateTimeOutOfRange {
                name: name.to_owned(),
            });
        }
    }
    match value.limited_size().filter(|b| *b > MAX_VALUE_BYTES) {
        Some(bytes) => Err(ValidationError::PropertyValueTooLarge {
            name: name.to_owned(),
            bytes,
        }),
        None => Ok(()),
    }
}

/// Checks the limits that a merge can break too: property count and entity size.
pub fn validate_shape(key: &EntityKey, properties: &Properties) -> Result<(), ValidationError> {
    if properties.len() > MAX_PROPERTIES {
        return Err(ValidationError::TooManyProperties {
            count: properties.len(),
        });
    }
    let bytes = billed_size(key, properties);
    if bytes > MAX_ENTITY_BYTES {
        return Err(ValidationError::EntityTooLarge { bytes });
    }
    Ok(())
}

/// An entity's size in the formula the Azure storage team published:
/// `4 + len(PK + RK) * 2 + Σ (8 + len(name) * 2 + sizeof(value))`, lengths in UTF-16 units.
pub fn billed_size(key: &EntityKey, properties: &Properties) -> usize {
    let keys = utf16_bytes(&key.partition_key) + utf16_bytes(&key.row_key);
    let props: usize = properties
        .iter()
        .map(|(name, value)| 8 + utf16_bytes(name) + value.billed_size())
        .sum();
    4 + keys + props
}

/// A property name must be a C# identifier of at most 255 characters and not a system name.
pub(crate) fn validate_property_name(name: &str) -> Result<(), ValidationError> {
    let invalid = |why| ValidationError::PropertyNameInvalid {
        name: name.to_owned(),
        why,
    };
    let chars = name.chars().count();
    if chars > MAX_PROPERTY_NAME_CHARS {
        return Err(ValidationError::PropertyNameTooLong {
            name: name.to_owned(),
            chars,
        });
    }
    let mut rest = name.chars();
    match rest.next() {
        None => return Err(invalid("it is empty")),
        Some(first) if !(first == '_' || first.is_alphabetic()) => {
            return Err(invalid("it must start with a letter or '_'"))
        }
        Some(_) => {}
    }
    if !rest.all(|c| c == '_' || c.is_alphanumeric()) {
        return Err(invalid("it may contain only letters, digits and '_'"));
    }
    if RESERVED_PROPERTY_NAMES.contains(&name) {
        return Err(invalid("it is a system property"));
    }
    Ok(())
}

/// A property name a query may select: a system property's, or a valid custom property's (which
/// the entities need not have, as in Azure), or a path into a document property (`Address/City`).
pub fn validate_selected_name(name: &str) -> Result<(), ValidationError> {
    if RESERVED_PROPERTY_NAMES.contains(&name) {
        return Ok(());
    }
    super::Path::parse(name).map(drop)
}

/// An entity as stored: its custom properties and the server-set timestamp its ETag derives from.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEntity {
    /// The entity's keys.
    pub key: EntityKey,
    /// Its custom properties.
    pub properties: Properties,
    /// When it was last written.
    pub timestamp: Ticks,
}

impl StoredEntity {
    /// The entity's current ETag.
    pub fn etag(&self) -> super::ETag {
        super::ETag::for_timestamp(self.timestamp)
    }

    /// Keeps only the selected properties and paths (all of them when `select` is empty).
    pub fn project(mut self, select: &[String]) -> StoredEntity {
        if select.is_empty() {
            return self;
        }
        let properties = std::mem::take(&mut self.properties);
        self.properties = properties
            .into_iter()
            .filter_map(|(name, value)| match super::selected(select, &name) {
                super::Selected::Nothing => None,
                super::Selected::Whole => Some((name, value)),
                super::Selected::Paths(paths) => {
                    super::prune(value.borrowed(), &paths).map(|value| (name, value))
                }
            })
            .collect();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> EntityKey {
        EntityKey::new("p".into(), "r".into()).unwrap()
    }

    #[test]
    fn property_names_are_csharp_identifiers() {
        for good in ["Name", "_x", "a1", "Größe", &"n".repeat(255)] {
            assert!(validate_property_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "1a",
            "a-b",
            "a b",
            "PartitionKey",
            "RowKey",
            "Timestamp",
        ] {
            assert!(
                matches!(
                    validate_property_name(bad),
                    Err(ValidationError::PropertyNameInvalid { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            validate_property_name(&"n".repeat(256)),
            Err(ValidationError::PropertyNameTooLong { .. })
        ));
    }

    #[test]
    fn billed_size_follows_the_published_formula() {
        let props = Properties::from([("Ab".to_owned(), Value::String("xyz".into()))]);
        assert_eq!(billed_size(&key(), &props), 4 + 4 + (8 + 4 + 6 + 4));
    }

    #[test]
    fn string_values_are_counted_as_utf16() {
        let at_limit = Value::String("é".repeat(MAX_VALUE_BYTES / 2));
        let over = Value::String("é".repeat(MAX_VALUE_BYTES / 2 + 1));
        assert!(NewEntity::new(key(), Properties::from([("s".into(), at_limit)])).is_ok());
        assert!(matches!(
            NewEntity::new(key(), Properties::from([("s".into(), over)])),
            Err(ValidationError::PropertyValueTooLarge { .. })
        ));
    }
}
