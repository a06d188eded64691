//! Typed property values: the eight Azure Table (EDM) types, and documents nesting them.

use uuid::Uuid;

use super::document::{Document, DocumentRef};
use super::Ticks;

/// One property value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Edm.String.
    String(String),
    /// Edm.Int32.
    Int32(i32),
    /// Edm.Int64.
    Int64(i64),
    /// Edm.Double.
    Double(f64),
    /// Edm.Boolean.
    Bool(bool),
    /// Edm.DateTime, in 100 ns ticks.
    DateTime(Ticks),
    /// Edm.Guid.
    Guid(Uuid),
    /// Edm.Binary.
    Binary(Vec<u8>),
    /// Null: only inside a document (a property that is null is left out instead).
    Null,
    /// An object or array nesting values: Trestle's own.
    Document(Document),
}

impl Value {
    /// The value's EDM type, as Azure names it (`Int32`, `String`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::String(_) => "String",
            Value::Int32(_) => "Int32",
            Value::Int64(_) => "Int64",
            Value::Double(_) => "Double",
            Value::Bool(_) => "Boolean",
            Value::DateTime(_) => "DateTime",
            Value::Guid(_) => "Guid",
            Value::Binary(_) => "Binary",
            Value::Null => "Null",
            Value::Document(_) => "Document",
        }
    }

    /// The value, borrowed.
    pub fn borrowed(&self) -> ValueRef<'_> {
        match self {
            Value::String(s) => ValueRef::String(s),
            Value::Int32(v) => ValueRef::Int32(*v),
            Value::Int64(v) => ValueRef::Int64(*v),
            Value::Double(v) => ValueRef::Double(*v),
            Value::Bool(v) => ValueRef::Bool(*v),
            Value::DateTime(t) => ValueRef::DateTime(*t),
            Value::Guid(g) => ValueRef::Guid(*g),
            Value::Binary(b) => ValueRef::Binary(b),
            Value::Null => ValueRef::Null,
            Value::Document(document) => ValueRef::Document(document.as_ref()),
        }
    }

    /// The bytes that count against the 64 KiB value limit: strings as UTF-16, binaries as is;
    /// `None` for fixed-size types.
    pub fn limited_size(&self) -> Option<usize> {
        match self {
            Value::String(s) => Some(utf16_bytes(s)),
            Value::Binary(b) => Some(b.len()),
            _ => None,
        }
    }

    /// The value's size in Azure's published entity-size formula ([`ValueRef::billed_size`]).
    pub fn billed_size(&self) -> usize {
        self.borrowed().billed_size()
    }
}

/// A property value borrowed from where it is stored, read without copying.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    /// Edm.String.
    String(&'a str),
    /// Edm.Int32.
    Int32(i32),
    /// Edm.Int64.
    Int64(i64),
    /// Edm.Double.
    Double(f64),
    /// Edm.Boolean.
    Bool(bool),
    /// Edm.DateTime, in 100 ns ticks.
    DateTime(Ticks),
    /// Edm.Guid.
    Guid(Uuid),
    /// Edm.Binary.
    Binary(&'a [u8]),
    /// Null, inside a document.
    Null,
    /// A document.
    Document(DocumentRef<'a>),
}

impl ValueRef<'_> {
    /// The value's size in Azure's published entity-size formula; a document's is its header
    /// and, for each member or element, its name and value counted the same way.
    pub fn billed_size(&self) -> usize {
        match self {
            ValueRef::String(s) => utf16_bytes(s) + 4,
            ValueRef::Binary(b) => b.len() + 4,
            ValueRef::Int32(_) => 4,
            ValueRef::Int64(_) | ValueRef::Double(_) | ValueRef::DateTime(_) => 8,
            ValueRef::Bool(_) | ValueRef::Null => 1,
            ValueRef::Guid(_) => 16,
            ValueRef::Document(document) => document.billed_size(),
        }
    }

    /// The owned value.
    pub fn to_value(self) -> Value {
        match self {
            ValueRef::String(s) => Value::String(s.to_owned()),
            ValueRef::Int32(v) => Value::Int32(v),
            ValueRef::Int64(v) => Value::Int64(v),
            ValueRef::Double(v) => Value::Double(v),
            ValueRef::Bool(v) => Value::Bool(v),
            ValueRef::DateTime(t) => Value::DateTime(t),
            ValueRef::Guid(g) => Value::Guid(g),
            ValueRef::Binary(b) => Value::Binary(b.to_vec()),
            ValueRef::Null => Value::Null,
            ValueRef::Document(document) => Value::Document(document.to_document()),
        }
    }
}

/// The size of a string in UTF-16, in bytes: how Azure measures strings.
pub fn utf16_bytes(s: &str) -> usize {
    s.encode_utf16().count() * 2
}
