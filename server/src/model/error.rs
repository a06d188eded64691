//! What can be wrong with a request's input, found before anything is read or written.

use thiserror::Error;

use super::quoted;

/// Which of the two keys a key error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// The PartitionKey.
    Partition,
    /// The RowKey.
    Row,
}

impl std::fmt::Display for KeyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KeyKind::Partition => "PartitionKey",
            KeyKind::Row => "RowKey",
        })
    }
}

/// Bad input: each variant names the value at fault, and its message says what the rule is.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ValidationError {
    /// The table name breaks Azure's naming rule.
    #[error(
        "table name {} is invalid: it must be 3 to 63 letters and digits starting with a letter",
        quoted(name)
    )]
    TableNameInvalid { name: String },
    /// The table name is reserved.
    #[error("table name {} is reserved", quoted(name))]
    TableNameReserved { name: String },
    /// A key is longer than 1 KiB.
    #[error("{kind} is {bytes} bytes long; keys are limited to {max} bytes of UTF-8", max = super::MAX_KEY_BYTES)]
    KeyTooLarge { kind: KeyKind, bytes: usize },
    /// A key contains a character Azure forbids in keys.
    #[error("{kind} {} contains the character {character:?}, which keys may not contain ('/', '\\', '#', '?' and control characters)", quoted(key))]
    KeyCharacterInvalid {
        kind: KeyKind,
        key: String,
        character: char,
    },
    /// A property name is not a C# identifier, or is reserved.
    #[error("property name {} is invalid: {why}", quoted(name))]
    PropertyNameInvalid { name: String, why: &'static str },
    /// A property name is longer than 255 characters.
    #[error("property name {} is {chars} characters long; the limit is {max}", quoted(name), max = super::MAX_PROPERTY_NAME_CHARS)]
    PropertyNameTooLong { name: String, chars: usize },
    /// More than 252 custom properties.
    #[error("the entity has {count} properties; the limit is {max} custom properties", max = super::MAX_PROPERTIES)]
    TooManyProperties { count: usize },
    /// A string or binary value over 64 KiB.
    #[error("property {} is {bytes} bytes (strings counted as UTF-16); values are limited to {max} bytes", quoted(name), max = super::MAX_VALUE_BYTES)]
    PropertyValueTooLarge { name: String, bytes: usize },
    /// The entity is over 1 MiB as Azure counts it.
    #[error("the entity is {bytes} bytes as Azure counts it; the limit is {max} bytes", max = super::MAX_ENTITY_BYTES)]
    EntityTooLarge { bytes: usize },
    /// A property was sent without a value.
    #[error(
        "property {} has no value; every property needs one of the typed values",
        quoted(name)
    )]
    PropertyValueMissing { name: String },
    /// A DateTime outside 1601-01-01..9999-12-31, or with nanos outside 0..1e9.
    #[error(
        "property {} holds a DateTime outside 1601-01-01T00:00:00Z..9999-12-31T23:59:59.9999999Z",
        quoted(name)
    )]
    DateTimeOutOfRange { name: String },
    /// A document breaks a rule of documents, at `path` (`Addresses/0/Zip`).
    #[error("document value at {} is invalid: {why}", quoted(path))]
    DocumentInvalid { path: String, why: &'static str },
    /// A Guid that is not in canonical form.
    #[error("property {} holds {}, which is not a GUID in canonical form (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", quoted(name), quoted(value))]
    GuidInvalid { name: String, value: String },
    /// An `if_match` that is neither `*` nor a well-formed ETag.
    #[error(
        "the etag value {} is not valid: pass an ETag returned by the server, or '*'",
        quoted(value)
    )]
    ETagInvalid { value: String },
    /// An update, merge or delete without `if_match`.
    #[error("if_match is required: pass the entity's ETag, or '*' to match any version")]
    IfMatchMissing,
    /// A request that needs an entity has none.
    #[error("the request has no entity")]
    EntityMissing,
    /// A filter that does not parse.
    #[error("filter {} is invalid at byte {offset}: {message}", quoted(filter))]
    Filter {
        filter: String,
        offset: usize,
        message: String,
    },
    /// Any other malformed argument, described in full.
    #[error("{0}")]
    Argument(String),
    /// An increment would leave its type's range.
    #[error(
        "incrementing {} overflows {type_name}; nothing was changed",
        quoted(name)
    )]
    Overflow {
        name: String,
        type_name: &'static str,
    },
    /// A numeric argument outside its range.
    #[error("{name} is {value}; it must be between {min} and {max}")]
    OutOfRange {
        name: &'static str,
        value: i64,
        min: i64,
        max: i64,
    },
}
