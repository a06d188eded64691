//! Validated table names and keys.

use super::{KeyKind, ValidationError, MAX_KEY_BYTES};

/// Table names that cannot be created.
const RESERVED_TABLE_NAMES: &[&str] = &["tables"];

/// A valid table name (`^[A-Za-z][A-Za-z0-9]{2,62}$`, not reserved), compared ignoring case.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName {
    display: String,
    folded: String,
}

impl TableName {
    /// Checks Azure's rules and keeps the case given.
    pub fn parse(name: &str) -> Result<TableName, ValidationError> {
        let mut chars = name.chars();
        let starts_with_letter = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
        if !starts_with_letter
            || !chars.all(|c| c.is_ascii_alphanumeric())
            || !(3..=63).contains(&name.len())
        {
            return Err(ValidationError::TableNameInvalid {
                name: name.to_owned(),
            });
        }
        let folded = name.to_ascii_lowercase();
        if RESERVED_TABLE_NAMES.contains(&folded.as_str()) {
            return Err(ValidationError::TableNameReserved {
                name: name.to_owned(),
            });
        }
        Ok(TableName {
            display: name.to_owned(),
            folded,
        })
    }

    /// A table of the server's own: `name` starts with `$`, which no name a client gives can, so
    /// no client can name, list or delete it; the store keeps it as any other table.
    pub(crate) fn hidden(name: &str) -> TableName {
        debug_assert!(name.starts_with('$'));
        TableName {
            display: name.to_owned(),
            folded: name.to_ascii_lowercase(),
        }
    }

    /// A name as a store kept it: a client's ([`TableName::parse`]) or the server's own.
    pub fn stored(name: &str) -> Result<TableName, ValidationError> {
        match name.starts_with('$') {
            true => Ok(TableName::hidden(name)),
            false => TableName::parse(name),
        }
    }

    /// Whether this is a table of the server's own ([`TableName::hidden`]).
    pub fn is_hidden(&self) -> bool {
        self.folded.starts_with('$')
    }

    /// The name in the case it was given.
    pub fn as_str(&self) -> &str {
        &self.display
    }

    /// The lower-case form that identifies the table.
    pub fn folded(&self) -> &str {
        &self.folded
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display)
    }
}

/// Checks one key: at most 1 KiB of UTF-8 and none of `/ \ # ?` or control characters.
///
/// Because control characters are refused, keys never contain `\0`, which the storage key encoding
/// relies on as its separator.
pub fn validate_key(kind: KeyKind, key: &str) -> Result<(), ValidationError> {
    if key.len() > MAX_KEY_BYTES {
        return Err(ValidationError::KeyTooLarge {
            kind,
            bytes: key.len(),
        });
    }
    let forbidden = |c: char| matches!(c, '/' | '\\' | '#' | '?') || c.is_control();
    match key.chars().find(|c| forbidden(*c)) {
        Some(character) => Err(ValidationError::KeyCharacterInvalid {
            kind,
            key: key.to_owned(),
            character,
        }),
        None => Ok(()),
    }
}

/// The full key of an entity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntityKey {
    /// The PartitionKey.
    pub partition_key: String,
    /// The RowKey.
    pub row_key: String,
}

impl EntityKey {
    /// Validates both keys.
    pub fn new(partition_key: String, row_key: String) -> Result<EntityKey, ValidationError> {
        validate_key(KeyKind::Partition, &partition_key)?;
        validate_key(KeyKind::Row, &row_key)?;
        Ok(EntityKey {
            partition_key,
            row_key,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_follow_azure_rules() {
        for good in ["abc", "Customers2024", &format!("a{}", "b".repeat(62))] {
            assert!(TableName::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "ab",
            "1abc",
            "my_table",
            "tab-le",
            "",
            &format!("a{}", "b".repeat(63)),
        ] {
            assert!(
                matches!(
                    TableName::parse(bad),
                    Err(ValidationError::TableNameInvalid { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            TableName::parse("Tables"),
            Err(ValidationError::TableNameReserved { .. })
        ));
        assert_eq!(TableName::parse("MyTable").unwrap().folded(), "mytable");
    }

    #[test]
    fn keys_refuse_forbidden_characters_and_length() {
        assert!(validate_key(KeyKind::Row, "").is_ok());
        assert!(validate_key(KeyKind::Row, &"k".repeat(MAX_KEY_BYTES)).is_ok());
        assert!(validate_key(KeyKind::Row, &"k".repeat(MAX_KEY_BYTES + 1)).is_err());
        for bad in [
            "a/b", "a\\b", "a#b", "a?b", "a\tb", "a\u{0}b", "a\u{7f}b", "a\u{9f}b",
        ] {
            assert!(validate_key(KeyKind::Partition, bad).is_err(), "{bad:?}");
        }
    }
}
