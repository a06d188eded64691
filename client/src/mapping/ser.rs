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

/// Serializes one value (a struct becomes a document's object, a sequence an array); `None` and
/// unit are null.
pub fn to_value<T: Serialize + ?Sized>(value: &T) -> Result<Value, MappingError> {
    value
        .serialize(ValueSerializer::of::<T>())
        .map(|value| value.unwrap_or(Value::Null))
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
        match value.serialize(ValueSerializer::of::<T>()) {
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
        match key.serialize(ValueSerializer::PLAIN)? {
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
    /// The value is a `uuid::Uuid`: 16 bytes are a Guid, not a Binary.
    guid: bool,
    /// The value is a sequence of bytes (`Vec<u8>`, `&[u8]`): a Binary even when empty, where an
    /// empty sequence of anything else is an empty array.
    bytes: bool,
}

impl ValueSerializer {
    /// For a value whose type says nothing.
    const PLAIN: ValueSerializer = ValueSerializer {
        guid: false,
        bytes: false,
    };

    /// For a value of type `T`. A `uuid::Uuid` serializes as 16 plain bytes and an empty `Vec<u8>`
    /// as an empty sequence: the type's name is the only thing that tells them apart from a byte
    /// buffer and from an empty array.
    fn of<T: ?Sized>() -> ValueSerializer {
        let name = std::any::type_name::<T>();
        ValueSerializer {
            guid: name.contains("uuid::Uuid"),
            bytes: name.contains("u8>") || name.contains("[u8"),
        }
    }
}

/// Serializer methods for the Rust types that widen losslessly into one EDM type.
macro_rules! serialize_widening {
    ($($method:ident($rust:ty) => $edm:ident;)*) => {
        $(fn $method(self, v: $rust) -> Result<Self::Ok, MappingError> {
            Ok(Some(Value::$edm(v.into())))
        })*
    };
}

impl ser::Serializer for ValueSerializer {
    type Ok = Option<Value>;
    type Error = MappingError;
    type SerializeSeq = Sequence;
    type SerializeTuple = Sequence;
    type SerializeTupleStruct = Impossible<Self::Ok, MappingError>;
    type SerializeTupleVariant = Impossible<Self::Ok, MappingError>;
    type SerializeMap = Object;
    type SerializeStruct = Object;
    type SerializeStructVariant = Impossible<Self::Ok, MappingError>;

    fn is_human_readable(&self) -> bool {
        false
    }

    serialize_widening! {
        serialize_bool(bool) => Bool;
        serialize_i8(i8) => Int32;
        serialize_i16(i16) => Int32;
        serialize_i32(i32) => Int32;
        serialize_i64(i64) => Int64;
        serialize_u8(u8) => Int32;
        serialize_u16(u16) => Int32;
        serialize_u32(u32) => Int64;
        serialize_f32(f32) => Double;
        serialize_f64(f64) => Double;
    }
    fn serialize_u64(self, v: u64) -> Result<Self::Ok, MappingError> {
        i64::try_from(v)
            .map(|v| Some(Value::Int64(v)))
            .map_err(|_| MappingError(format!("{v} is beyond the Int64 range")))
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
    /// Null (inside a document; a property is never null).
    fn serialize_unit(self) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::Null))
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
        let inner = value.serialize(ValueSerializer::PLAIN)?;
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
    fn serialize_seq(self, len: Option<usize>) -> Result<Sequence, MappingError> {
        Ok(Sequence {
            values: Vec::with_capacity(len.unwrap_or(0)),
            only_bytes: self.bytes,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Sequence, MappingError> {
        self.serialize_seq(Some(len))
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
    fn serialize_map(self, _: Option<usize>) -> Result<Object, MappingError> {
        Ok(Object(Fields {
            properties: BTreeMap::new(),
            next_key: None,
        }))
    }
    fn serialize_struct(self, _: &'static str, len: usize) -> Result<Object, MappingError> {
        self.serialize_map(Some(len))
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

/// A sequence: a Binary when every element is a `u8`, otherwise a document's array.
struct Sequence {
    values: Vec<Value>,
    only_bytes: bool,
}

impl ser::SerializeSeq for Sequence {
    type Ok = Option<Value>;
    type Error = MappingError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), MappingError> {
        let at = self.values.len();
        let element = value
            .serialize(ValueSerializer::of::<T>())
            .map_err(|MappingError(why)| MappingError(format!("element {at}: {why}")))?;
        self.only_bytes &= matches!(std::any::type_name::<T>(), "u8" | "&u8");
        self.values.push(element.unwrap_or(Value::Null));
        Ok(())
    }

    fn end(self) -> Result<Self::Ok, MappingError> {
        if !self.only_bytes {
            return Ok(Some(Value::Array(self.values)));
        }
        let bytes = self.values.into_iter().filter_map(|value| match value {
            Value::Int32(byte) => Some(byte as u8),
            _ => None,
        });
        Ok(Some(Value::Binary(bytes.collect())))
    }
}

impl ser::SerializeTuple for Sequence {
    type Ok = Option<Value>;
    type Error = MappingError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), MappingError> {
        ser::SerializeSeq::serialize_element(self, value)
    }

    fn end(self) -> Result<Self::Ok, MappingError> {
        ser::SerializeSeq::end(self)
    }
}

/// A nested struct or map: a document's object, members as an entity's fields (a `None` left out).
struct Object(Fields);

impl ser::SerializeStruct for Object {
    type Ok = Option<Value>;
    type Error = MappingError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), MappingError> {
        self.0.add(key.to_owned(), value)
    }

    fn end(self) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::Object(self.0.properties)))
    }
}

impl ser::SerializeMap for Object {
    type Ok = Option<Value>;
    type Error = MappingError;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), MappingError> {
        ser::SerializeMap::serialize_key(&mut self.0, key)
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), MappingError> {
        ser::SerializeMap::serialize_value(&mut self.0, value)
    }

    fn end(self) -> Result<Self::Ok, MappingError> {
        Ok(Some(Value::Object(self.0.properties)))
    }
}
