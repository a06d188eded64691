//! The binary encoding of one value, shared by the stores' entity records and by documents (whose
//! members and elements are values in the same encoding).
//!
//! A value is a type tag byte and its payload, little-endian: strings and binaries carry a `u32`
//! length; Int32 4 bytes, Int64, Double and DateTime 8, Boolean 1, Guid 16, null none. Arrays and
//! objects (documents) carry `[u32 body length][u32 count]`, then their elements, or per member
//! `[u16 name length][name][value]` in strictly ascending name order.

use uuid::Uuid;

use super::document::{Document, DocumentRef};
use super::{Ticks, Value, ValueRef};

pub(crate) const TAG_STRING: u8 = 1;
pub(crate) const TAG_INT32: u8 = 2;
pub(crate) const TAG_INT64: u8 = 3;
pub(crate) const TAG_DOUBLE: u8 = 4;
pub(crate) const TAG_BOOL: u8 = 5;
pub(crate) const TAG_DATETIME: u8 = 6;
pub(crate) const TAG_GUID: u8 = 7;
pub(crate) const TAG_BINARY: u8 = 8;
pub(crate) const TAG_NULL: u8 = 9;
pub(crate) const TAG_ARRAY: u8 = 10;
pub(crate) const TAG_OBJECT: u8 = 11;

/// Bytes that do not hold what they should: a stored record or document damaged or cut short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Corrupt(pub String);

/// Whether a value starting with `tag` is a document.
pub(crate) fn is_document_tag(tag: u8) -> bool {
    tag == TAG_ARRAY || tag == TAG_OBJECT
}

/// Appends `value`'s encoding.
pub(crate) fn encode_value(value: ValueRef<'_>, out: &mut Vec<u8>) {
    match value {
        ValueRef::String(s) => put_bytes(out, TAG_STRING, s.as_bytes()),
        ValueRef::Binary(b) => put_bytes(out, TAG_BINARY, b),
        ValueRef::Int32(v) => put_fixed(out, TAG_INT32, &v.to_le_bytes()),
        ValueRef::Int64(v) => put_fixed(out, TAG_INT64, &v.to_le_bytes()),
        ValueRef::Double(v) => put_fixed(out, TAG_DOUBLE, &v.to_le_bytes()),
        ValueRef::Bool(v) => put_fixed(out, TAG_BOOL, &[u8::from(v)]),
        ValueRef::DateTime(t) => put_fixed(out, TAG_DATETIME, &t.0.to_le_bytes()),
        ValueRef::Guid(g) => put_fixed(out, TAG_GUID, g.as_bytes()),
        ValueRef::Null => out.push(TAG_NULL),
        ValueRef::Document(document) => out.extend_from_slice(document.bytes()),
    }
}

/// Appends an owned value's encoding.
pub(crate) fn encode_owned(value: &Value, out: &mut Vec<u8>) {
    encode_value(value.borrowed(), out)
}

fn put_fixed(out: &mut Vec<u8>, tag: u8, payload: &[u8]) {
    out.push(tag);
    out.extend_from_slice(payload);
}

fn put_bytes(out: &mut Vec<u8>, tag: u8, payload: &[u8]) {
    out.push(tag);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Reads one value, checking a document's whole structure (so that walking it later cannot fail).
pub(crate) fn decode_value<'a>(reader: &mut Reader<'a>) -> Result<ValueRef<'a>, Corrupt> {
    let tag = reader.peek()?;
    if is_document_tag(tag) {
        return Ok(ValueRef::Document(DocumentRef::check(document_bytes(
            reader,
        )?)?));
    }
    decode_scalar(tag, reader)
}

/// Reads one value whose bytes were checked before (inside a checked document): a nested
/// document is taken as it is.
pub(crate) fn decode_unchecked<'a>(reader: &mut Reader<'a>) -> Result<ValueRef<'a>, Corrupt> {
    let tag = reader.peek()?;
    if is_document_tag(tag) {
        return Ok(ValueRef::Document(DocumentRef::trusted(document_bytes(
            reader,
        )?)));
    }
    decode_scalar(tag, reader)
}

/// Reads a value other than a document, whose tag `tag` is the reader's next byte.
#[inline]
fn decode_scalar<'a>(tag: u8, reader: &mut Reader<'a>) -> Result<ValueRef<'a>, Corrupt> {
    reader.slice(1)?;
    Ok(match tag {
        TAG_STRING => ValueRef::String(utf8(reader.prefixed()?)?),
        TAG_BINARY => ValueRef::Binary(reader.prefixed()?),
        TAG_INT32 => ValueRef::Int32(i32::from_le_bytes(reader.take()?)),
        TAG_INT64 => ValueRef::Int64(i64::from_le_bytes(reader.take()?)),
        TAG_DOUBLE => ValueRef::Double(f64::from_le_bytes(reader.take()?)),
        TAG_BOOL => ValueRef::Bool(reader.take::<1>()?[0] != 0),
        TAG_DATETIME => ValueRef::DateTime(Ticks(i64::from_le_bytes(reader.take()?))),
        TAG_GUID => ValueRef::Guid(Uuid::from_bytes(reader.take()?)),
        TAG_NULL => ValueRef::Null,
        other => return Err(Corrupt(format!("unknown value tag {other}"))),
    })
}

/// Skips one value without decoding it.
pub(crate) fn skip_value(reader: &mut Reader<'_>) -> Result<(), Corrupt> {
    let tag = reader.peek()?;
    if is_document_tag(tag) {
        return document_bytes(reader).map(drop);
    }
    reader.slice(1)?;
    let len = match tag {
        TAG_STRING | TAG_BINARY => reader.length()?,
        TAG_INT32 => 4,
        TAG_INT64 | TAG_DOUBLE | TAG_DATETIME => 8,
        TAG_BOOL => 1,
        TAG_GUID => 16,
        TAG_NULL => 0,
        other => return Err(Corrupt(format!("unknown value tag {other}"))),
    };
    reader.slice(len).map(drop)
}

/// The whole encoding of the document at the reader (tag, header and body), taken from it.
fn document_bytes<'a>(reader: &mut Reader<'a>) -> Result<&'a [u8], Corrupt> {
    let mut header = reader.clone();
    header.slice(1)?;
    let body = header.length()?;
    reader.slice(Document::HEADER_BYTES + body)
}

/// Stored text as UTF-8, or [`Corrupt`].
pub(crate) fn utf8(bytes: &[u8]) -> Result<&str, Corrupt> {
    std::str::from_utf8(bytes).map_err(|_| not_utf8())
}

/// `bytes`, checked to be UTF-8 without making a `&str` of them: ASCII (most names and strings)
/// is checked inline, a word at a time, anything else by the standard check.
#[inline]
pub(crate) fn checked_utf8(bytes: &[u8]) -> Result<&[u8], Corrupt> {
    match bytes.is_ascii() || std::str::from_utf8(bytes).is_ok() {
        true => Ok(bytes),
        false => Err(not_utf8()),
    }
}

#[cold]
fn not_utf8() -> Corrupt {
    Corrupt("stored text is not UTF-8".into())
}

/// Reads encoded bytes front to back; running short is [`Corrupt`], naming `what`.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader of `bytes`, which hold a `what` (named in errors).
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { bytes, what }
    }

    /// Whether everything was read.
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.bytes
    }

    /// The next `len` bytes.
    pub(crate) fn slice(&mut self, len: usize) -> Result<&'a [u8], Corrupt> {
        let Some((head, rest)) = self.bytes.split_at_checked(len) else {
            return Err(self.truncated());
        };
        self.bytes = rest;
        Ok(head)
    }

    #[cold]
    fn truncated(&self) -> Corrupt {
        Corrupt(format!("truncated {}", self.what))
    }

    /// The next `N` bytes as an array.
    pub(crate) fn take<const N: usize>(&mut self) -> Result<[u8; N], Corrupt> {
        let mut out = [0; N];
        out.copy_from_slice(self.slice(N)?);
        Ok(out)
    }

    /// A `u32` length.
    pub(crate) fn length(&mut self) -> Result<usize, Corrupt> {
        Ok(u32::from_le_bytes(self.take()?) as usize)
    }

    /// Bytes after their `u32` length (a string's or a binary's payload, an undo row's key).
    pub(crate) fn prefixed(&mut self) -> Result<&'a [u8], Corrupt> {
        let len = self.length()?;
        self.slice(len)
    }

    /// A name after its `u16` length (a property's, a document member's).
    pub(crate) fn name(&mut self) -> Result<&'a [u8], Corrupt> {
        let len = u16::from_le_bytes(self.take()?);
        self.slice(usize::from(len))
    }

    /// The next byte, left unread.
    pub(crate) fn peek(&self) -> Result<u8, Corrupt> {
        self.bytes.first().copied().ok_or_else(|| self.truncated())
    }
}
