//! From typed properties back to `T: Deserialize`.

use std::collections::{btree_map, BTreeMap};

use serde::de::value::{BorrowedStrDeserializer, SeqDeserializer, StringDeserializer};
use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};
use serde::forward_to_deserialize_any;
use uuid::Uuid;

use super::{MappingError, DATETIME_TOKEN, GUID_TOKEN};
use crate::value::{DateTime, Value};

/// Deserializes properties into a `T` (a struct, a map, or [`Properties`](crate::Properties)).
pub fn from_properties<T: DeserializeOwned>(
    properties: BTreeMap<String, Value>,
) -> Result<T, MappingError> {
    T::deserialize(EntityDeserializer(properties))
}

struct EntityDeserializer(BTreeMap<String, Value>);

impl<'de> de::Deserializer<'de> for EntityDeserializer {
    type Error = MappingError;

    fn is_human_readable(&self) -> bool {
        false
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        visitor.visit_map(PropertyMap {
            entries: self.0.into_iter(),
            value: None,
        })
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

struct PropertyMap {
    entries: btree_map::IntoIter<String, Value>,
    value: Option<Value>,
}

impl<'de> de::MapAccess<'de> for PropertyMap {
    type Error = MappingError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, MappingError> {
        match self.entries.next() {
            Some((name, value)) => {
                self.value = Some(value);
                seed.deserialize(StringDeserializer::new(name)).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, MappingError> {
        let value = self
            .value
            .take()
            .ok_or_else(|| MappingError("a value without a property".into()))?;
        seed.deserialize(ValueDeserializer(value))
    }
}

/// A one-entry map `{token: inner}` that carries a DateTime or Guid into a type-agnostic visitor.
struct Tagged {
    token: Option<&'static str>,
    inner: Option<Value>,
}

impl<'de> de::MapAccess<'de> for Tagged {
    type Error = MappingError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, MappingError> {
        match self.token.take() {
            Some(token) => seed
                .deserialize(BorrowedStrDeserializer::new(token))
                .map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, MappingError> {
        seed.deserialize(ValueDeserializer(
            self.inner.take().expect("value after key"),
        ))
    }
}

struct ValueDeserializer(Value);

impl<'de> de::Deserializer<'de> for ValueDeserializer {
    type Error = MappingError;

    fn is_human_readable(&self) -> bool {
        false
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        match self.0 {
            Value::String(s) => visitor.visit_string(s),
            Value::Int32(v) => visitor.visit_i32(v),
            Value::Int64(v) => visitor.visit_i64(v),
            Value::Double(v) => visitor.visit_f64(v),
            Value::Bool(v) => visitor.visit_bool(v),
            Value::Binary(v) => visitor.visit_byte_buf(v),
            Value::DateTime(t) => visitor.visit_map(Tagged {
                token: Some(DATETIME_TOKEN),
                inner: Some(Value::Int64(t.ticks())),
            }),
            Value::Guid(g) => visitor.visit_map(Tagged {
                token: Some(GUID_TOKEN),
                inner: Some(Value::String(g.hyphenated().to_string())),
            }),
            Value::Null => visitor.visit_unit(),
            Value::Object(members) => visitor.visit_map(PropertyMap {
                entries: members.into_iter(),
                value: None,
            }),
            Value::Array(values) => visitor.visit_seq(Elements(values.into_iter())),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        match self.0 {
            Value::Guid(g) => visitor.visit_string(g.hyphenated().to_string()),
            other => ValueDeserializer(other).deserialize_any(visitor),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        match self.0 {
            Value::Guid(g) => visitor.visit_bytes(g.as_bytes()),
            other => ValueDeserializer(other).deserialize_any(visitor),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        match self.0 {
            Value::Binary(bytes) => visitor.visit_seq(SeqDeserializer::new(bytes.into_iter())),
            Value::Array(values) => visitor.visit_seq(Elements(values.into_iter())),
            other => ValueDeserializer(other).deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            value => visitor.visit_some(ValueDeserializer(value)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, MappingError> {
        match (name, self.0) {
            (DATETIME_TOKEN, Value::DateTime(t)) => {
                visitor.visit_newtype_struct(ValueDeserializer(Value::Int64(t.ticks())))
            }
            (_, value) => visitor.visit_newtype_struct(ValueDeserializer(value)),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, MappingError> {
        match self.0 {
            Value::String(variant) => visitor.visit_enum(variant.into_deserializer()),
            other => Err(MappingError(format!(
                "an enum is stored as a String, found {other:?}"
            ))),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char unit unit_struct tuple tuple_struct
        map struct identifier ignored_any
    }
}

/// A document's array, element by element.
struct Elements(std::vec::IntoIter<Value>);

impl<'de> de::SeqAccess<'de> for Elements {
    type Error = MappingError;

    fn next_element_seed<T: de::DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, MappingError> {
        self.0
            .next()
            .map(|value| seed.deserialize(ValueDeserializer(value)))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

/// Rebuilds a [`Value`] with its Azure type from what [`ValueDeserializer`] presents.
pub(super) struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a property value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i32<E: de::Error>(self, v: i32) -> Result<Value, E> {
        Ok(Value::Int32(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int64(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Double(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Value, E> {
        Ok(Value::Binary(v.to_vec()))
    }
    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Value, E> {
        Ok(Value::Binary(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, inner: D) -> Result<Value, D::Error> {
        inner.deserialize_any(ValueVisitor)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut values = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(value) = seq.next_element()? {
            values.push(value);
        }
        Ok(Value::Array(values))
    }
    /// A DateTime or Guid (a one-member map named by its marker), or a document's object.
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = BTreeMap::new();
        let Some(first) = map.next_key::<String>()? else {
            return Ok(Value::Object(members));
        };
        match first.as_str() {
            DATETIME_TOKEN => return Ok(Value::DateTime(DateTime::from_ticks(map.next_value()?))),
            GUID_TOKEN => {
                let text: String = map.next_value()?;
                return Uuid::parse_str(&text)
                    .map(Value::Guid)
                    .map_err(de::Error::custom);
            }
            _ => {}
        }
        members.insert(first, map.next_value()?);
        while let Some((name, value)) = map.next_entry()? {
            members.insert(name, value);
        }
        Ok(Value::Object(members))
    }
}
