//! The EDM type the serde mapping gives a struct's field, found without a value: `T` deserializes
//! from a probe that answers each field with a default of the type the field asks for, and
//! records that type. Typed filters ([`crate::Filter::field`]) use it to write literals of the
//! field's own type (`10L` for an `i64` field, `10` for an `i32` one).

use std::cell::RefCell;
use std::collections::HashMap;

use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};
use serde::forward_to_deserialize_any;

use super::MappingError;

/// The numeric EDM types a literal may need converting to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NumericType {
    Int32,
    Int64,
    Double,
}

/// The numeric type of each field of `T` that has one (by its serialized name).
pub(crate) fn numeric_fields<T: DeserializeOwned>() -> HashMap<&'static str, NumericType> {
    let found = RefCell::new(HashMap::new());
    // The value is only a vehicle: dropped, whatever it holds.
    let _ = T::deserialize(StructProbe { found: &found });
    found.into_inner()
}

/// Answers `deserialize_struct` with each of the struct's fields.
struct StructProbe<'a> {
    found: &'a RefCell<HashMap<&'static str, NumericType>>,
}

impl<'de> de::Deserializer<'de> for StructProbe<'_> {
    type Error = MappingError;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, MappingError> {
        Err(MappingError("not a struct".into()))
    }

    #[rustfmt::skip]
    fn deserialize_struct<V: Visitor<'de>>(self, _: &'static str, fields: &'static [&'static str], visitor: V) -> Result<V::Value, MappingError> {
        let found = self.found;
        visitor.visit_map(MapDeserializer::new(fields.iter().map(|field| {
            let probe = FieldProbe {
                found,
                field,
                inside: None,
            };
            (*field, probe)
        })))
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// Answers one field: records a numeric type and gives a zero of it, and gives other fields an
/// empty value of their kind; a kind it cannot make (an enum) ends the probe, keeping the fields
/// seen so far. Inside a DateTime or Guid (newtypes of the mapping's own) it records nothing.
struct FieldProbe<'a> {
    found: &'a RefCell<HashMap<&'static str, NumericType>>,
    field: &'static str,
    /// The marker of the mapping's own newtype (DateTime, Guid) being read, if any.
    inside: Option<&'static str>,
}

impl<'de, 'a> IntoDeserializer<'de, MappingError> for FieldProbe<'a> {
    type Deserializer = FieldProbe<'a>;

    fn into_deserializer(self) -> FieldProbe<'a> {
        self
    }
}

impl FieldProbe<'_> {
    fn record(&self, numeric: NumericType) {
        if self.inside.is_none() {
            self.found.borrow_mut().insert(self.field, numeric);
        }
    }
}

macro_rules! numeric {
    ($($method:ident => $numeric:ident, $visit:ident($zero:expr);)*) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
            self.record(NumericType::$numeric);
            visitor.$visit($zero)
        })*
    };
}

impl<'de> de::Deserializer<'de> for FieldProbe<'_> {
    type Error = MappingError;

    numeric! {
        deserialize_i8 => Int32, visit_i8(0);
        deserialize_i16 => Int32, visit_i16(0);
        deserialize_i32 => Int32, visit_i32(0);
        deserialize_u8 => Int32, visit_u8(0);
        deserialize_u16 => Int32, visit_u16(0);
        deserialize_u32 => Int64, visit_u32(0);
        deserialize_i64 => Int64, visit_i64(0);
        deserialize_u64 => Int64, visit_u64(0);
        deserialize_f32 => Double, visit_f32(0.0);
        deserialize_f64 => Double, visit_f64(0.0);
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, MappingError> {
        let own = [super::DATETIME_TOKEN, super::GUID_TOKEN].contains(&name);
        visitor.visit_newtype_struct(FieldProbe {
            inside: self.inside.or(own.then_some(name)),
            ..self
        })
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        visitor.visit_bool(false)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        // A Guid reads its text: the nil GUID parses.
        visitor.visit_str("00000000-0000-0000-0000-000000000000")
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        visitor.visit_char(' ')
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        visitor.visit_bytes(&[])
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        visitor.visit_bytes(&[])
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        visitor.visit_seq(SeqDeserializer::new(std::iter::empty::<u8>()))
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        visitor.visit_map(MapDeserializer::new(std::iter::empty::<(u8, u8)>()))
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        visitor.visit_unit()
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, MappingError> {
        visitor.visit_unit()
    }

    /// `Option<T>` fields are probed as `T`.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        visitor.visit_some(self)
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, MappingError> {
        match self.inside {
            // What the mapping's DateTime and Guid read inside their marker newtypes.
            Some(super::DATETIME_TOKEN) => visitor.visit_i64(0),
            Some(_) => self.deserialize_str(visitor),
            None => Err(MappingError(format!(
                "the probe cannot make {}",
                self.field
            ))),
        }
    }

    forward_to_deserialize_any! {
        i128 u128 unit_struct tuple tuple_struct struct enum identifier
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Post {
        title: String,
        published: crate::DateTime,
        id: uuid::Uuid,
        tags: Vec<u8>,
        likes: i64,
        #[serde(rename = "Views")]
        views: Option<u32>,
        rank: i32,
        score: f64,
    }

    #[test]
    fn numeric_fields_are_found_by_their_serialized_names() {
        let fields = numeric_fields::<Post>();
        assert_eq!(fields.get("likes"), Some(&NumericType::Int64));
        assert_eq!(fields.get("Views"), Some(&NumericType::Int64));
        assert_eq!(fields.get("rank"), Some(&NumericType::Int32));
        assert_eq!(fields.get("score"), Some(&NumericType::Double));
        assert_eq!(fields.get("title"), None);
        assert_eq!(fields.get("published"), None);
        assert_eq!(fields.get("id"), None);
    }
}
