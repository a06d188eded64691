//! From `T: Serialize` to typed properties.

use std::collections::BTreeMap;

use serde::ser::{self, Impossible, Serialize};
use uuid::Uuid;

use super::{MappingError, DATETIME_TOKEN, GUID_TOKEN};
use crate::value::{DateTime, Value};

/// Serializes a struct (or a map with string keys) into properties.
pub fn to_properties<T: Serialize + ?Sized>(
    value: &T,
) -> Result<BTreeMap<String, Value>, MappingError> {
    value.serialize(EntitySerializer)
}

fn unsupported(what: &str) -> MappingError {
    MappingError(format!("{what} cannot be stored as an entity property"))
}

/// The top level: a struct or a map, one property per field.
struct EntitySerializer;

/// Fields collected so far.
struct Fields {
    properties: BTreeMap<String, Value>,
    next_key: Option<String>,
}

impl Fields {
    fn add<T: Serialize + ?Sized>(&mut self, name: String, value: &T) -> Result<(), MappingError> {
        // `uuid::Uuid` serializes as 16 plain bytes; the field's type is the only thing that tells
        // it apart from a byte buffer, so a Uuid field is serialized in Guid mode.
        let guid = std::any::type_name::<T>().contains("uuid::Uuid");
        match value.serialize(ValueSerializer { guid }) {
            Ok(Some(value)) => {
                self.properties.insert(name, value);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(MappingError(why)) => Err(MappingError(format!("field `{name}`: {why}"))),
        }
    }
}

macro_rules! refuse_top_level {
    ($($method:ident($($arg:ty),*)),* $(,)?) => {
        $(fn $method(self, $(_: $arg),*) -> Result<Self::Ok, MappingError> {
            Err(MappingError("an entity must serialize as a struct or a map with string keys".into()))
        })*
    };
}

impl ser::Serializer for EntitySerializer {
    type Ok = BTreeMap<String, Value>;
    type Error = MappingError;
    type SerializeSeq = Impossible<Self::Ok, MappingError>;
    type SerializeTuple = Impossible<Self::Ok, MappingError>;
    type SerializeTupleStruct = Impossible<Self::Ok, MappingError>;
    type SerializeTupleVariant = Impossible<Self::Ok, MappingError>;
    type SerializeMap = Fields;
    type SerializeStruct = Fields;
    type SerializeStructVariant = Impossible<Self::Ok, MappingError>;

    fn is_human_readable(&self) -> bool {
        false
    }

    refuse_top_level!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_none(),
        serialize_unit(),
        serialize_unit_struct(&'static str),
        serialize_unit_variant(&'static str, u32, &'static str)
    );

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Self::Ok, MappingError> {
        value.serialize(self)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<Self::Ok, MappingError> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Self::Ok, MappingError> {
        Err(unsupported("an enum variant with data"))
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, MappingError> {
        Err(MappingError(
            "an entity must serialize as a struct or a map, not a sequence".into(),
        ))
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, MappingError> {
        Err(MappingError(
            "an entity must serialize as a struct or a map, not a tuple".into(),
        ))
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, MappingError> {
        Err(MappingError(
            "an entity must serialize as a struct or a map, not a tuple struct".into(),
        ))
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, MappingError> {
        Err(unsupported("an enum variant with data"))
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Fields, MappingError> {
        Ok(Fields {
            properties: BTreeMap::new(),
            next_key: None,
        })
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Fields, MappingError> {
        Ok(Fields {
            properties: BTreeMap::new(),
            next_key: None,
        })
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, MappingError> {
        Err(unsupported("an enum variant with data"))
    }
}

impl ser::SerializeStruct for Fields {
    type Ok = BTreeMap<String, Value>;
    type Error = MappingError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), MappingError> {
        self.add(key.to_owned(), value)
    }

    fn end(self) -> Result<Self::Ok, MappingError> {
        Ok(self.properties)
    }
}

impl ser::SerializeMap for Fields {
    type Ok = BTreeMap<String, Value>;
    type Error = MappingError;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), MappingError> {
        match key.serialize(ValueSerializer { guid: false })? {
            Some(Value::String(name)) => {
                self.next_key = Some(name);
                Ok(())
            }
            _ => Err(MappingError("property names must be strings".into())),
        }
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), MappingError> {
        let name = self
            .next_key
            .take()
            .ok_or_else(|| MappingError("a map value without a key".into()))?;
        self.add(name, value)
    }

    fn end(self) -> Result<Self::Ok, MappingError> {
        Ok(self.properties)
    }
}

/// One property value; `None` means the property is absent.
struct ValueSerializer {
    /// The field is a `uuid::Uuid`: 16 bytes are a Guid, not a Binary.
    guid: bool,
}

impl ser::Serializer for ValueSerializer {
    type Ok = Option<Value>;
    type Error = MappingError;
    type SerializeSeq = Bytes;
    type SerializeTuple = Impossible<Self::Ok, MappingError>;
    type SerializeTupleStruct = Impossible<Self::Ok, MappingError>;
    type SerializeTupleVariant = Impossible<Self::Ok, MappingError>;
    type SerializeMap = Impossible<Self::Ok, MappingError>;
    type SerializeStruct = Impossible<Self::Ok, MappingError>;
    type SerializeStructVariant = Impossible<Self::Ok, MappingError>;

    fn is_human_readable(&self) -> bool {
        false
    }

    fn serialize_bool(self, v: bool) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::Bool(v)))
    }
    fn serialize_i8(self, v: i8) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::Int32(v.into())))
    }
    fn serialize_i16(self, v: i16) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::Int32(v.into())))
    }
    fn serialize_i32(self, v: i32) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::Int32(v)))
    }
    fn serialize_i64(self, v: i64) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::Int64(v)))
    }
    fn serialize_u8(self, v: u8) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::Int32(v.into())))
    }
    fn serialize_u16(self, v: u16) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::Int32(v.into())))
    }
    fn serialize_u32(self, v: u32) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::Int64(v.into())))
    }
    fn serialize_u64(self, v: u64) -> Result<Self::Ok, MappingError> {
        i64::try_from(v)
            .map(|v| Some(Value::Int64(v)))
            .map_err(|_| MappingError(format!("{v} is beyond the Int64 range")))
    }
    fn serialize_f32(self, v: f32) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::Double(v.into())))
    }
    fn serialize_f64(self, v: f64) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::Double(v)))
    }
    fn serialize_char(self, v: char) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::String(v.to_string())))
    }
    fn serialize_str(self, v: &str) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::String(v.to_owned())))
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<Self::Ok, MappingError> {
        if self.guid {
            let guid = Uuid::from_slice(v).map_err(|e| MappingError(format!("not a GUID: {e}")))?;
            return Ok(Some(Value::Guid(guid)));
        }
        Ok(Some(Value::Binary(v.to_vec())))
    }
    fn serialize_none(self) -> Result<Self::Ok, MappingError> {
        Ok(None)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Self::Ok, MappingError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Self::Ok, MappingError> {
        Err(unsupported("the unit value ()"))
    }
    fn serialize_unit_struct(self, name: &'static str) -> Result<Self::Ok, MappingError> {
        Err(unsupported(&format!("the unit struct {name}")))
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::String(variant.to_owned())))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<Self::Ok, MappingError> {
        let inner = value.serialize(ValueSerializer { guid: false })?;
        match (name, inner) {
            (DATETIME_TOKEN, Some(Value::Int64(ticks))) => {
                Ok(Some(Value::DateTime(DateTime::from_ticks(ticks))))
            }
            (GUID_TOKEN, Some(Value::String(text))) => Uuid::parse_str(&text)
                .map(|g| Some(Value::Guid(g)))
                .map_err(|e| MappingError(format!("not a GUID: {e}"))),
            (_, inner) => Ok(inner),
        }
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: &T,
    ) -> Result<Self::Ok, MappingError> {
        Err(unsupported(&format!(
            "the enum variant {variant} with data"
        )))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Bytes, MappingError> {
        Ok(Bytes(Vec::new()))
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, MappingError> {
        Err(unsupported("a tuple"))
    }
    fn serialize_tuple_struct(
        self,
        name: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, MappingError> {
        Err(unsupported(&format!("the tuple struct {name}")))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, MappingError> {
        Err(unsupported(&format!(
            "the enum variant {variant} with data"
        )))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, MappingError> {
        Err(unsupported("a nested map"))
    }
    fn serialize_struct(
        self,
        name: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStruct, MappingError> {
        Err(unsupported(&format!("the nested struct {name}")))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, MappingError> {
        Err(unsupported(&format!(
            "the enum variant {variant} with data"
        )))
    }
}

/// A sequence, accepted only when every element is a byte (`Vec<u8>` → Binary).
struct Bytes(Vec<u8>);

impl ser::SerializeSeq for Bytes {
    type Ok = Option<Value>;
    type Error = MappingError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), MappingError> {
        match value.serialize(ValueSerializer { guid: false })? {
            Some(Value::Int32(b)) if matches!(std::any::type_name::<T>(), "u8" | "&u8") => {
                self.0.push(b as u8);
                Ok(())
            }
            _ => Err(unsupported("a sequence of anything but bytes")),
        }
    }

    fn end(self) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::Binary(self.0)))
    }
}
