//! Documents: nested values of objects and arrays whose leaves are EDM scalars or null, the
//! Cosmos DB data model inside one property. A document is kept in its canonical encoding
//! ([`super::encoding`]), which the stores hold as is and reads walk in place.

use super::encoding::{
    decode_unchecked, encode_owned, is_document_tag, skip_value, utf8, Corrupt, Reader, TAG_ARRAY,
    TAG_OBJECT,
};
use super::{utf16_bytes, Ticks, ValidationError, Value, ValueRef, MAX_VALUE_BYTES};

/// Deepest nesting: a document inside 31 others.
pub const MAX_DOCUMENT_DEPTH: usize = 32;
/// Most values in one document, every nested object, array and leaf counted.
pub const MAX_DOCUMENT_VALUES: usize = 10_000;
/// Longest member name, in characters.
pub const MAX_MEMBER_NAME_CHARS: usize = 255;

/// An object or array, validated and encoded.
#[derive(Clone, PartialEq)]
pub struct Document {
    bytes: Vec<u8>,
    shape: Shape,
}

/// How deep a document nests and how many values it holds (itself included).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Shape {
    depth: usize,
    values: usize,
}

impl Document {
    /// Bytes before a document's body: its tag, body length and count.
    pub(crate) const HEADER_BYTES: usize = 9;

    /// An object of the given members, in name order; a refusal names the path at fault,
    /// relative to this object (see [`ValidationError::within`]).
    pub fn object(
        members: impl IntoIterator<Item = (String, Value)>,
    ) -> Result<Document, ValidationError> {
        let mut members: Vec<(String, Value)> = members.into_iter().collect();
        members.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(pair) = members.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(invalid(&pair[0].0, "the member appears twice"));
        }
        let mut builder = Builder::new(TAG_OBJECT);
        for (name, value) in &members {
            check_member_name(name)?;
            builder
                .out
                .extend_from_slice(&(name.len() as u16).to_le_bytes());
            builder.out.extend_from_slice(name.as_bytes());
            builder.add(value).map_err(|error| error.within(name))?;
        }
        builder.finish(members.len())
    }

    /// An array of the given elements.
    pub fn array(elements: impl IntoIterator<Item = Value>) -> Result<Document, ValidationError> {
        let mut builder = Builder::new(TAG_ARRAY);
        let mut count = 0;
        for element in elements {
            builder
                .add(&element)
                .map_err(|error| error.within(&count.to_string()))?;
            count += 1;
        }
        builder.finish(count)
    }

    /// The document, borrowed.
    pub fn as_ref(&self) -> DocumentRef<'_> {
        DocumentRef::trusted(&self.bytes)
    }
}

impl std::fmt::Debug for Document {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_ref().fmt(f)
    }
}

/// Encodes a document's values as they are added, then its header.
struct Builder {
    out: Vec<u8>,
    shape: Shape,
}

impl Builder {
    fn new(tag: u8) -> Builder {
        let mut out = Vec::with_capacity(64);
        out.push(tag);
        out.extend_from_slice(&[0; Document::HEADER_BYTES - 1]);
        Builder {
            out,
            shape: Shape {
                depth: 1,
                values: 1,
            },
        }
    }

    /// Appends one member's or element's value; a refusal's path is relative to the value.
    fn add(&mut self, value: &Value) -> Result<(), ValidationError> {
        match value {
            Value::Document(document) => {
                self.shape.depth = self.shape.depth.max(document.shape.depth + 1);
                self.shape.values += document.shape.values;
            }
            leaf => {
                check_leaf(leaf)?;
                self.shape.values += 1;
            }
        }
        if self.shape.depth > MAX_DOCUMENT_DEPTH {
            return Err(invalid("", "documents nest at most 32 deep"));
        }
        if self.shape.values > MAX_DOCUMENT_VALUES {
            return Err(invalid(
                "",
                "a document holds at most 10000 values, nested ones included",
            ));
        }
        encode_owned(value, &mut self.out);
        Ok(())
    }

    fn finish(mut self, count: usize) -> Result<Document, ValidationError> {
        let body = self.out.len() - Document::HEADER_BYTES;
        let body = u32::try_from(body).map_err(|_| invalid("", "the document is too large"))?;
        self.out[1..5].copy_from_slice(&body.to_le_bytes());
        self.out[5..9].copy_from_slice(&(count as u32).to_le_bytes());
        Ok(Document {
            bytes: self.out,
            shape: self.shape,
        })
    }
}

/// A leaf's own limits (the DateTime range, the 64 KiB of a string or binary); documents were
/// checked when built. A refusal's path is relative to the value.
pub(super) fn check_leaf(value: &Value) -> Result<(), ValidationError> {
    if let Value::DateTime(ticks) = value {
        if !(Ticks::MIN..=Ticks::MAX).contains(ticks) {
            return Err(ValidationError::DateTimeOutOfRange {
                name: String::new(),
            });
        }
    }
    match value
        .limited_size()
        .filter(|bytes| *bytes > MAX_VALUE_BYTES)
    {
        Some(bytes) => Err(ValidationError::PropertyValueTooLarge {
            name: String::new(),
            bytes,
        }),
        None => Ok(()),
    }
}

/// A member name: 1 to 255 characters, no `/` (it separates a path's steps) and no control
/// characters.
pub(super) fn check_member_name(name: &str) -> Result<(), ValidationError> {
    let why = if name.is_empty() {
        "a member name may not be empty"
    } else if name.chars().count() > MAX_MEMBER_NAME_CHARS {
        "a member name is at most 255 characters"
    } else if name.chars().any(|c| c == '/' || c.is_control()) {
        "a member name may not contain '/' or control characters"
    } else {
        return Ok(());
    };
    Err(invalid(name, why))
}

fn invalid(path: &str, why: &'static str) -> ValidationError {
    ValidationError::DocumentInvalid {
        path: path.to_owned(),
        why,
    }
}

impl ValidationError {
    /// The same refusal with its path one step deeper: `step` (a property, member or element
    /// index) put in front of the path it names.
    pub fn within(self, step: &str) -> ValidationError {
        let prefix = |path: String| match path.is_empty() {
            true => step.to_owned(),
            false => format!("{step}/{path}"),
        };
        match self {
            ValidationError::DocumentInvalid { path, why } => ValidationError::DocumentInvalid {
                path: prefix(path),
                why,
            },
            ValidationError::DateTimeOutOfRange { name } => {
                ValidationError::DateTimeOutOfRange { name: prefix(name) }
            }
            ValidationError::PropertyValueTooLarge { name, bytes } => {
                ValidationError::PropertyValueTooLarge {
                    name: prefix(name),
                    bytes,
                }
            }
            ValidationError::GuidInvalid { name, value } => ValidationError::GuidInvalid {
                name: prefix(name),
                value,
            },
            ValidationError::PropertyValueMissing { name } => {
                ValidationError::PropertyValueMissing { name: prefix(name) }
            }
            other => other,
        }
    }
}

/// A document read in place.
#[derive(Clone, Copy, PartialEq)]
pub struct DocumentRef<'a> {
    bytes: &'a [u8],
}

impl<'a> DocumentRef<'a> {
    /// Bytes known to hold a well-formed document (built or checked before).
    pub(crate) fn trusted(bytes: &'a [u8]) -> DocumentRef<'a> {
        DocumentRef { bytes }
    }

    /// Checks that `bytes` hold one well-formed document, so that walking it cannot fail.
    pub(crate) fn check(bytes: &'a [u8]) -> Result<DocumentRef<'a>, Corrupt> {
        let mut reader = Reader::new(bytes, "document");
        check_node(&mut reader, 1)?;
        if !reader.is_empty() {
            return Err(Corrupt("a document's length is wrong".into()));
        }
        Ok(DocumentRef { bytes })
    }

    /// Its encoding.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Whether it is an array (otherwise an object).
    pub fn is_array(&self) -> bool {
        self.bytes[0] == TAG_ARRAY
    }

    /// How many members or elements it has.
    pub fn len(&self) -> usize {
        u32::from_le_bytes([self.bytes[5], self.bytes[6], self.bytes[7], self.bytes[8]]) as usize
    }

    /// Whether it has no members or elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An object's members in name order (none for an array).
    pub fn members(&self) -> Entries<'a> {
        self.entries(!self.is_array())
    }

    /// An array's elements in order, each with no name (none for an object).
    pub fn elements(&self) -> impl Iterator<Item = ValueRef<'a>> {
        self.entries(self.is_array()).map(|(_, value)| value)
    }

    /// An object's member called `name`.
    pub fn member(&self, name: &str) -> Option<ValueRef<'a>> {
        self.members()
            .find(|(member, _)| *member == name)
            .map(|(_, value)| value)
    }

    /// An array's element at `index`.
    pub fn element(&self, index: usize) -> Option<ValueRef<'a>> {
        self.elements().nth(index)
    }

    /// The value at the end of `path` (steps are member names, or element indexes in arrays).
    pub fn at<'p>(&self, path: impl IntoIterator<Item = &'p str>) -> Option<ValueRef<'a>> {
        let mut value = ValueRef::Document(*self);
        for step in path {
            let ValueRef::Document(document) = value else {
                return None;
            };
            value = match document.is_array() {
                true => document.element(step.parse().ok()?)?,
                false => document.member(step)?,
            };
        }
        Some(value)
    }

    /// Its size as an entity's size counts it: its header, then per member its name (UTF-16 and
    /// a length) and per member or element its value's size.
    pub fn billed_size(&self) -> usize {
        let entries = self.entries(true).map(|(name, value)| {
            let name = if name.is_empty() {
                0
            } else {
                utf16_bytes(name) + 2
            };
            name + value.billed_size()
        });
        Document::HEADER_BYTES + entries.sum::<usize>()
    }

    /// An owned copy.
    pub fn to_document(self) -> Document {
        let shape = check_node(&mut Reader::new(self.bytes, "document"), 1).unwrap_or_default();
        Document {
            bytes: self.bytes.to_vec(),
            shape,
        }
    }

    /// Its members, or its elements with empty names, when `wanted` (none otherwise).
    pub(crate) fn entries(&self, wanted: bool) -> Entries<'a> {
        let mut reader = Reader::new(self.bytes, "document");
        let _ = reader.slice(Document::HEADER_BYTES);
        Entries {
            reader,
            remaining: if wanted { self.len() } else { 0 },
            named: !self.is_array(),
        }
    }
}

impl std::fmt::Debug for DocumentRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_array() {
            f.debug_list().entries(self.elements()).finish()
        } else {
            f.debug_map().entries(self.members()).finish()
        }
    }
}

/// A document's members (name and value) or elements (an empty name and the value).
#[derive(Debug, Clone)]
pub struct Entries<'a> {
    reader: Reader<'a>,
    remaining: usize,
    named: bool,
}

impl<'a> Iterator for Entries<'a> {
    type Item = (&'a str, ValueRef<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let name = match self.named {
            true => utf8(self.reader.name().ok()?).ok()?,
            false => "",
        };
        Some((name, decode_unchecked(&mut self.reader).ok()?))
    }
}

/// Checks one document node at `depth`; its shape.
fn check_node(reader: &mut Reader<'_>, depth: usize) -> Result<Shape, Corrupt> {
    if depth > MAX_DOCUMENT_DEPTH {
        return Err(Corrupt("a document nests too deep".into()));
    }
    let tag = reader.take::<1>()?[0];
    let body = reader.length()?;
    let count = reader.length()?;
    let mut body = Reader::new(reader.slice(body)?, "document");
    let mut shape = Shape { depth, values: 1 };
    let mut previous: Option<&[u8]> = None;
    for _ in 0..count {
        if tag == TAG_OBJECT {
            let name = body.name()?;
            utf8(name)?;
            if previous.is_some_and(|previous| previous >= name) {
                return Err(Corrupt("a document's members are out of order".into()));
            }
            previous = Some(name);
        }
        // A leaf's bytes are skipped, not decoded: its text is checked as UTF-8 when it is read
        // (a walk stops at text that is not), so only the structure needs checking here.
        if is_document_tag(body.peek()?) {
            let inner = check_node(&mut body, depth + 1)?;
            shape.depth = shape.depth.max(inner.depth);
            shape.values += inner.values;
        } else {
            skip_value(&mut body)?;
            shape.values += 1;
        }
    }
    if !body.is_empty() {
        return Err(Corrupt("a document's length is wrong".into()));
    }
    Ok(shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(members: Vec<(&str, Value)>) -> Result<Document, ValidationError> {
        Document::object(members.into_iter().map(|(n, v)| (n.to_owned(), v)))
    }

    #[test]
    fn members_are_kept_in_name_order_and_read_by_path() {
        let address = object(vec![
            ("Zip", Value::String("98101".into())),
            ("City", Value::String("Seattle".into())),
        ])
        .unwrap();
        let person = object(vec![(
            "Addresses",
            Value::Document(Document::array([Value::Document(address)]).unwrap()),
        )])
        .unwrap();
        let person = person.as_ref();
        let addresses = person.member("Addresses").unwrap();
        let ValueRef::Document(addresses) = addresses else {
            panic!("an array");
        };
        assert!(addresses.is_array());
        assert_eq!(addresses.len(), 1);
        let ValueRef::Document(first) = addresses.element(0).unwrap() else {
            panic!("an object");
        };
        let names: Vec<&str> = first.members().map(|(name, _)| name).collect();
        assert_eq!(names, ["City", "Zip"]);
        assert_eq!(
            person.at(["Addresses", "0", "City"]),
            Some(ValueRef::String("Seattle"))
        );
        assert_eq!(
            person.to_document(),
            person.to_document().as_ref().to_document()
        );
    }

    #[test]
    fn nesting_deeper_than_32_is_refused_with_its_path() {
        let mut value = Value::Int32(1);
        for depth in 1..=MAX_DOCUMENT_DEPTH {
            value = Value::Document(object(vec![("a", value)]).unwrap());
            assert!(depth <= MAX_DOCUMENT_DEPTH);
        }
        let refused = object(vec![("top", value)]).unwrap_err();
        assert_eq!(
            refused,
            ValidationError::DocumentInvalid {
                path: "top".into(),
                why: "documents nest at most 32 deep"
            }
        );
        assert_eq!(
            refused.within("P").to_string(),
            "document value at 'P/top' is invalid: documents nest at most 32 deep"
        );
    }

    #[test]
    fn values_are_bounded_nested_ones_included() {
        let half = Document::array(vec![Value::Bool(true); MAX_DOCUMENT_VALUES / 2]).unwrap();
        let refused =
            Document::array([Value::Document(half.clone()), Value::Document(half.clone())])
                .unwrap_err();
        assert!(matches!(refused, ValidationError::DocumentInvalid { .. }));
        let fits = Document::array(vec![Value::Bool(true); MAX_DOCUMENT_VALUES - 1]);
        assert!(fits.is_ok());
    }

    #[test]
    fn leaves_keep_their_limits_and_refusals_name_the_path() {
        let long = Value::String("x".repeat(MAX_VALUE_BYTES / 2 + 1));
        let zip = object(vec![("Zip", long)])
            .unwrap_err()
            .within("0")
            .within("Addresses");
        assert_eq!(
            zip,
            ValidationError::PropertyValueTooLarge {
                name: "Addresses/0/Zip".into(),
                bytes: MAX_VALUE_BYTES + 2
            }
        );
        let early = Value::DateTime(Ticks(Ticks::MIN.0 - 1));
        let refused = Document::array([Value::Null, early])
            .unwrap_err()
            .within("When");
        assert_eq!(
            refused,
            ValidationError::DateTimeOutOfRange {
                name: "When/1".into()
            }
        );
    }

    #[test]
    fn member_names_are_checked() {
        for (name, why) in [
            ("", "a member name may not be empty"),
            (
                "a/b",
                "a member name may not contain '/' or control characters",
            ),
            (
                "a\u{1}",
                "a member name may not contain '/' or control characters",
            ),
        ] {
            assert_eq!(
                object(vec![(name, Value::Null)]).unwrap_err(),
                ValidationError::DocumentInvalid {
                    path: name.into(),
                    why
                }
            );
        }
        let long = "n".repeat(MAX_MEMBER_NAME_CHARS + 1);
        assert!(object(vec![(&long, Value::Null)]).is_err());
        assert!(object(vec![("any name: spaces, ünïcode", Value::Null)]).is_ok());
        assert!(object(vec![("a", Value::Null), ("a", Value::Null)]).is_err());
    }

    #[test]
    fn corrupt_documents_are_refused_by_check() {
        let good = object(vec![("a", Value::Int32(1)), ("b", Value::Null)]).unwrap();
        let bytes = good.as_ref().bytes().to_vec();
        assert!(DocumentRef::check(&bytes).is_ok());
        for len in 0..bytes.len() {
            assert!(DocumentRef::check(&bytes[..len]).is_err());
        }
        let mut swapped = bytes.clone();
        // The members' names "a" and "b" swapped: out of order.
        let a = swapped.iter().position(|b| *b == b'a').unwrap();
        let b = swapped.iter().position(|c| *c == b'b').unwrap();
        swapped.swap(a, b);
        assert!(DocumentRef::check(&swapped).is_err());
    }
}
