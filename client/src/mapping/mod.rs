//! Typed entities through serde: a dedicated serializer from any `T: Serialize` to typed
//! properties, and a deserializer back, keeping Azure's types (no detour through JSON).
//!
//! Mapping: `String`/`&str`/`char` → String; `i8`/`i16`/`i32`/`u8`/`u16` → Int32; `i64`/`u32` →
//! Int64 (`u64` too when it fits); `f32`/`f64` → Double; `bool` → Boolean; [`DateTime`] →
//! DateTime; `uuid::Uuid` → Guid; `Vec<u8>` and byte buffers → Binary; `Option::None` → the property
//! is absent; unit enum variants → String (their name). Nested structs and maps with string keys
//! → a document's object (a `None` member left out); sequences and tuples of other than bytes → a
//! document's array (a `None` element is null); `()` and [`Value::Null`] → null. Data-carrying enum variants cannot be mapped and are
//! refused with an error.
//!
//! [`DateTime`]: crate::DateTime

mod de;
pub(crate) mod probe;
mod ser;

use std::collections::BTreeMap;

pub use de::from_properties;
pub use ser::{to_properties, to_value};

use crate::value::{DateTime, Properties, Value};

/// Newtype name that marks a [`DateTime`] (ticks) on the way through serde.
pub(crate) const DATETIME_TOKEN: &str = "$trestle::DateTime";
/// Newtype name that marks a Guid (canonical text) on the way through serde.
pub(crate) const GUID_TOKEN: &str = "$trestle::Guid";

/// Why a value could not be mapped to or from properties.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MappingError(pub(crate) String);

impl ::serde::ser::Error for MappingError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        MappingError(msg.to_string())
    }
}

impl ::serde::de::Error for MappingError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        MappingError(msg.to_string())
    }
}

/// In human-readable formats (JSON, YAML, TOML) a DateTime is RFC 3339 text, as Azure writes it;
/// elsewhere (Trestle's own mapping, binary formats) its 100 ns ticks.
impl ::serde::Serialize for DateTime {
    fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.serialize_str(&self.to_rfc3339())
        } else {
            serializer.serialize_newtype_struct(DATETIME_TOKEN, &self.ticks())
        }
    }
}

/// Reads RFC 3339 text or ticks, whichever the format holds.
impl<'de> ::serde::Deserialize<'de> for DateTime {
    fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Accepts RFC 3339 text, the ticks directly, inside the marker newtype, or as the
        /// `{marker: ticks}` map that buffering deserializers (internally tagged enums) turn the
        /// newtype into.
        struct Instant;
        impl<'de> ::serde::de::Visitor<'de> for Instant {
            type Value = DateTime;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a DateTime (RFC 3339 UTC text, or 100 ns ticks)")
            }
            fn visit_newtype_struct<D: ::serde::Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<DateTime, D::Error> {
                d.deserialize_any(Instant)
            }
            fn visit_i64<E: ::serde::de::Error>(self, ticks: i64) -> Result<DateTime, E> {
                Ok(DateTime::from_ticks(ticks))
            }
            fn visit_u64<E: ::serde::de::Error>(self, ticks: u64) -> Result<DateTime, E> {
                i64::try_from(ticks)
                    .map(DateTime::from_ticks)
                    .map_err(|_| E::custom(format!("{ticks} ticks is beyond a DateTime")))
            }
            fn visit_str<E: ::serde::de::Error>(self, text: &str) -> Result<DateTime, E> {
                text.parse().map_err(E::custom)
            }
            fn visit_map<A: ::serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<DateTime, A::Error> {
                match map.next_key::<String>()? {
                    Some(key) if key == DATETIME_TOKEN => {
                        Ok(DateTime::from_ticks(map.next_value()?))
                    }
                    _ => Err(::serde::de::Error::custom("expected a DateTime")),
                }
            }
        }
        // Formats without newtypes (JSON) pass straight through to the text or the number.
        deserializer.deserialize_newtype_struct(DATETIME_TOKEN, Instant)
    }
}

impl ::serde::Serialize for Value {
    fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::String(s) => serializer.serialize_str(s),
            Value::Int32(v) => serializer.serialize_i32(*v),
            Value::Int64(v) => serializer.serialize_i64(*v),
            Value::Double(v) => serializer.serialize_f64(*v),
            Value::Bool(v) => serializer.serialize_bool(*v),
            Value::DateTime(v) => ::serde::Serialize::serialize(v, serializer),
            Value::Guid(v) => {
                serializer.serialize_newtype_struct(GUID_TOKEN, &v.hyphenated().to_string())
            }
            Value::Binary(v) => serializer.serialize_bytes(v),
            Value::Null => serializer.serialize_unit(),
            Value::Object(members) => ::serde::Serialize::serialize(members, serializer),
            Value::Array(values) => ::serde::Serialize::serialize(values, serializer),
        }
    }
}

impl<'de> ::serde::Deserialize<'de> for Value {
    fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(de::ValueVisitor)
    }
}

impl ::serde::Serialize for Properties {
    fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ::serde::Serialize::serialize(&self.0, serializer)
    }
}

impl<'de> ::serde::Deserialize<'de> for Properties {
    fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <BTreeMap<String, Value> as ::serde::Deserialize>::deserialize(deserializer).map(Properties)
    }
}
