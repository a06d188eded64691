//! Query results and point reads written straight from stored bytes into protobuf wire form: each
//! entity becomes an encoded `trestle.v1.Entity` without an owned entity or a `pb::Entity` built in
//! between.
//! Decoded, the bytes are exactly what [`super::convert::entity_to_pb`] would have sent. Change
//! records go the same way into `ReadChangesResponse`s.

use prost::encoding::{encoded_len_varint, key_len, WireType};

use super::pages::EncodedEntities;
use crate::engine::MatchSink;
use crate::model::{DocumentRef, ETagText, Ticks, ValueRef};
use crate::storage::{EntityView, StorageError, StoredChange, StoredValue};

// Field numbers of `trestle.v1.Entity`, of its map entries, of `Value` (and of the documents it
// nests) and of `Timestamp`.
pub(super) const ENTITY_PARTITION_KEY: u32 = 1;
pub(super) const ENTITY_ROW_KEY: u32 = 2;
pub(super) const ENTITY_PROPERTIES: u32 = 3;
pub(super) const ENTITY_TIMESTAMP: u32 = 4;
pub(super) const ENTITY_ETAG: u32 = 5;
pub(super) const ENTRY_KEY: u32 = 1;
pub(super) const ENTRY_VALUE: u32 = 2;
pub(super) const VALUE_STRING: u32 = 1;
pub(super) const VALUE_INT32: u32 = 2;
pub(super) const VALUE_INT64: u32 = 3;
pub(super) const VALUE_DOUBLE: u32 = 4;
pub(super) const VALUE_BOOL: u32 = 5;
pub(super) const VALUE_DATETIME: u32 = 6;
pub(super) const VALUE_GUID: u32 = 7;
pub(super) const VALUE_BINARY: u32 = 8;
pub(super) const VALUE_NULL: u32 = 9;
pub(super) const VALUE_OBJECT: u32 = 10;
pub(super) const VALUE_ARRAY: u32 = 11;
pub(super) const OBJECT_MEMBERS: u32 = 1;
pub(super) const ARRAY_VALUES: u32 = 1;
pub(super) const TIMESTAMP_SECONDS: u32 = 1;
pub(super) const TIMESTAMP_NANOS: u32 = 2;
// Field numbers of `trestle.v1.Change` and of `ReadChangesResponse`.
pub(super) const CHANGE_KIND: u32 = 1;
pub(super) const CHANGE_PARTITION_KEY: u32 = 2;
pub(super) const CHANGE_ROW_KEY: u32 = 3;
pub(super) const CHANGE_ENTITY: u32 = 4;
pub(super) const CHANGE_TRANSACTION_ID: u32 = 5;
pub(super) const CHANGE_CURSOR: u32 = 6;
pub(super) const CHANGE_BEFORE: u32 = 7;
pub(super) const CHANGE_MATCHED: u32 = 8;
pub(super) const CHANGES_CHANGES: u32 = 1;
pub(super) const CHANGES_CURSOR: u32 = 2;

/// Collects matches as encoded entities, reusing one scratch buffer (and the ETag's text) for all
/// of them.
#[derive(Debug, Default)]
pub(crate) struct EntityEncoder {
    /// The entities encoded so far.
    pub(crate) encoded: EncodedEntities,
    scratch: Vec<u8>,
    etag: ETagText,
}

impl EntityEncoder {
    /// Takes the entities encoded so far, leaving the encoder empty, with room for as many bytes
    /// (batches of a scan are alike: growing each one from nothing copied it several times).
    pub(crate) fn take_encoded(&mut self) -> EncodedEntities {
        let room = self.encoded.encoded_len();
        std::mem::replace(&mut self.encoded, EncodedEntities::with_capacity(room))
    }
}

impl MatchSink for EntityEncoder {
    fn take(&mut self, entity: &EntityView<'_>) -> Result<usize, StorageError> {
        let before = self.encoded.encoded_len();
        self.scratch.clear();
        write_entity(entity, &mut self.etag, &mut self.scratch)?;
        let body = &self.scratch;
        self.encoded
            .push(body.len(), |fields| fields.extend_from_slice(body));
        Ok(self.encoded.encoded_len() - before)
    }
}

/// One entity as the bytes of a `trestle.v1.Entity` message (the answer to `GetEntity`).
pub(crate) fn entity_message(entity: &EntityView<'_>) -> Result<Vec<u8>, StorageError> {
    // Each property takes a few bytes more on the wire than stored; the ETag about 40.
    let keys = entity.partition_key.len() + entity.row_key.len();
    let mut out = Vec::with_capacity(64 + keys + entity.stored_len() * 5 / 4);
    write_entity(entity, &mut ETagText::default(), &mut out)?;
    Ok(out)
}

/// Appends `change` to `out` as a `changes` field of `ReadChangesResponse`: a `Change` whose kind
/// is `kind` (the enum's number) and whose cursor is `cursor`, its entities written from their
/// stored bytes.
pub(crate) fn put_change(
    change: &StoredChange,
    kind: i32,
    cursor: &str,
    matched: i32,
    out: &mut Vec<u8>,
) -> Result<(), StorageError> {
    let mut message = Vec::with_capacity(64);
    if kind != 0 {
        put_varint(CHANGE_KIND, kind as u64, &mut message);
    }
    put_text(
        CHANGE_PARTITION_KEY,
        &change.key.partition_key,
        &mut message,
    );
    put_text(CHANGE_ROW_KEY, &change.key.row_key, &mut message);
    if let Some(after) = change.after()? {
        put_bytes(CHANGE_ENTITY, &entity_message(&after)?, &mut message);
    }
    if change.position.transaction != 0 {
        put_varint(
            CHANGE_TRANSACTION_ID,
            change.position.transaction,
            &mut message,
        );
    }
    put_text(CHANGE_CURSOR, cursor, &mut message);
    if let Some(before) = change.before()? {
        put_bytes(CHANGE_BEFORE, &entity_message(&before)?, &mut message);
    }
    if matched != 0 {
        put_varint(CHANGE_MATCHED, matched as u64, &mut message);
    }
    put_len_prefix(CHANGES_CHANGES, message.len(), out);
    out.extend_from_slice(&message);
    Ok(())
}

/// Appends `entity`'s `Entity` message to `out`, its ETag's text from `etag`.
fn write_entity(
    entity: &EntityView<'_>,
    etag: &mut ETagText,
    out: &mut Vec<u8>,
) -> Result<(), StorageError> {
    put_text(ENTITY_PARTITION_KEY, entity.partition_key, out);
    put_text(ENTITY_ROW_KEY, entity.row_key, out);
    if entity.shows_every_property() {
        // Each property from its stored bytes, text copied as it is stored: most reads select
        // nothing, and scans send millions of these.
        for property in entity.property_bytes() {
            match property? {
                (name, StoredValue::Text(text)) => {
                    put_text_entry(ENTITY_PROPERTIES, name, text, out)
                }
                (name, StoredValue::Decoded(value)) => {
                    put_entry(ENTITY_PROPERTIES, name, value, out)
                }
            }
        }
    } else {
        for property in entity.shown_properties() {
            let (name, shown) = property?;
            put_entry(ENTITY_PROPERTIES, name.as_bytes(), shown.value(), out);
        }
    }
    put_len_prefix(ENTITY_TIMESTAMP, timestamp_len(entity.timestamp), out);
    put_timestamp(entity.timestamp, out);
    put_text(ENTITY_ETAG, etag.for_timestamp(entity.timestamp), out);
    Ok(())
}

/// Appends a map entry `name` (UTF-8) → `value` as field `field`.
fn put_entry(field: u32, name: &[u8], value: ValueRef<'_>, out: &mut Vec<u8>) {
    let value_len = value_len(value);
    put_len_prefix(field, entry_len(name, value_len), out);
    put_bytes(ENTRY_KEY, name, out);
    put_len_prefix(ENTRY_VALUE, value_len, out);
    put_value(value, out);
}

/// Appends a map entry `name` → a string `Value` holding `text` (both UTF-8) as field `field`:
/// [`put_entry`] of a `ValueRef::String`, from bytes.
fn put_text_entry(field: u32, name: &[u8], text: &[u8], out: &mut Vec<u8>) {
    let value_len = nested_len(VALUE_STRING, text.len());
    put_len_prefix(field, entry_len(name, value_len), out);
    put_bytes(ENTRY_KEY, name, out);
    put_len_prefix(ENTRY_VALUE, value_len, out);
    put_len_prefix(VALUE_STRING, text.len(), out);
    out.extend_from_slice(text);
}

fn entry_len(name: &[u8], value_len: usize) -> usize {
    bytes_len(ENTRY_KEY, name) + nested_len(ENTRY_VALUE, value_len)
}

fn put_len_prefix(field: u32, len: usize, out: &mut Vec<u8>) {
    put_key(field, WireType::LengthDelimited, out);
    put_raw_varint(len as u64, out);
}

fn put_key(field: u32, wire_type: WireType, out: &mut Vec<u8>) {
    put_raw_varint(u64::from(field << 3 | wire_type as u32), out);
}

/// A varint pushed straight onto the vector: prost's `encode_varint` goes through `BufMut` a byte
/// at a time, out of line, and was 5.7% of the server's time streaming a scan.
fn put_raw_varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A string or bytes field; empty ones are left out, as proto3 does.
fn put_bytes(field: u32, bytes: &[u8], out: &mut Vec<u8>) {
    if !bytes.is_empty() {
        put_len_prefix(field, bytes.len(), out);
        out.extend_from_slice(bytes);
    }
}

fn put_text(field: u32, text: &str, out: &mut Vec<u8>) {
    put_bytes(field, text.as_bytes(), out);
}

/// The length of a string or bytes field; empty ones are left out, as proto3 does.
fn bytes_len(field: u32, bytes: &[u8]) -> usize {
    if bytes.is_empty() {
        0
    } else {
        nested_len(field, bytes.len())
    }
}

/// The length of a length-delimited field holding `len` bytes.
fn nested_len(field: u32, len: usize) -> usize {
    key_len(field) + encoded_len_varint(len as u64) + len
}

fn varint_len(field: u32, value: u64) -> usize {
    key_len(field) + encoded_len_varint(value)
}

fn put_varint(field: u32, value: u64, out: &mut Vec<u8>) {
    put_key(field, WireType::Varint, out);
    put_raw_varint(value, out);
}

/// `google.protobuf.Timestamp` parts of a tick count; zero parts are left out.
fn timestamp_parts(ticks: Ticks) -> (u64, u64) {
    let (seconds, nanos) = ticks.to_unix();
    // Protobuf's int64 and int32 are varints of the two's complement, sign-extended to 64 bits.
    (seconds as u64, i64::from(nanos) as u64)
}

fn timestamp_len(ticks: Ticks) -> usize {
    let (seconds, nanos) = timestamp_parts(ticks);
    let part = |field, value| {
        if value == 0 {
            0
        } else {
            varint_len(field, value)
        }
    };
    part(TIMESTAMP_SECONDS, seconds) + part(TIMESTAMP_NANOS, nanos)
}

fn put_timestamp(ticks: Ticks, out: &mut Vec<u8>) {
    let (seconds, nanos) = timestamp_parts(ticks);
    if seconds != 0 {
        put_varint(TIMESTAMP_SECONDS, seconds, out);
    }
    if nanos != 0 {
        put_varint(TIMESTAMP_NANOS, nanos, out);
    }
}

/// A GUID as the wire carries it: canonical, lower-case, hyphenated.
const GUID_TEXT_LEN: usize = uuid::fmt::Hyphenated::LENGTH;

/// The length of a `Value` message. A oneof member is sent even when it holds its default.
fn value_len(value: ValueRef<'_>) -> usize {
    match value {
        ValueRef::String(s) => nested_len(VALUE_STRING, s.len()),
        ValueRef::Binary(b) => nested_len(VALUE_BINARY, b.len()),
        ValueRef::Guid(_) => nested_len(VALUE_GUID, GUID_TEXT_LEN),
        ValueRef::Int32(v) => varint_len(VALUE_INT32, i64::from(v) as u64),
        ValueRef::Int64(v) => varint_len(VALUE_INT64, v as u64),
        ValueRef::Double(_) => key_len(VALUE_DOUBLE) + 8,
        ValueRef::Bool(_) => varint_len(VALUE_BOOL, 0),
        ValueRef::DateTime(t) => nested_len(VALUE_DATETIME, timestamp_len(t)),
        ValueRef::Null => varint_len(VALUE_NULL, 0),
        ValueRef::Document(document) => nested_len(document_field(document), body_len(document)),
    }
}

/// The `Value` field a document goes in.
fn document_field(document: DocumentRef<'_>) -> u32 {
    match document.is_array() {
        true => VALUE_ARRAY,
        false => VALUE_OBJECT,
    }
}

/// The length of an `ArrayValue` or `ObjectValue` message.
fn body_len(document: DocumentRef<'_>) -> usize {
    match document.is_array() {
        true => document
            .elements()
            .map(|value| nested_len(ARRAY_VALUES, value_len(value)))
            .sum(),
        false => document
            .members()
            .map(|(name, value)| {
                nested_len(OBJECT_MEMBERS, entry_len(name.as_bytes(), value_len(value)))
            })
            .sum(),
    }
}

fn put_value(value: ValueRef<'_>, out: &mut Vec<u8>) {
    match value {
        ValueRef::String(s) => {
            put_len_prefix(VALUE_STRING, s.len(), out);
            out.extend_from_slice(s.as_bytes());
        }
        ValueRef::Binary(b) => {
            put_len_prefix(VALUE_BINARY, b.len(), out);
            out.extend_from_slice(b);
        }
        ValueRef::Guid(g) => {
            put_len_prefix(VALUE_GUID, GUID_TEXT_LEN, out);
            let mut text = [0u8; GUID_TEXT_LEN];
            out.extend_from_slice(g.hyphenated().encode_lower(&mut text).as_bytes());
        }
        ValueRef::Int32(v) => put_varint(VALUE_INT32, i64::from(v) as u64, out),
        ValueRef::Int64(v) => put_varint(VALUE_INT64, v as u64, out),
        ValueRef::Double(v) => {
            put_key(VALUE_DOUBLE, WireType::SixtyFourBit, out);
            out.extend_from_slice(&v.to_le_bytes());
        }
        ValueRef::Bool(v) => put_varint(VALUE_BOOL, u64::from(v), out),
        ValueRef::DateTime(t) => {
            put_len_prefix(VALUE_DATETIME, timestamp_len(t), out);
            put_timestamp(t, out);
        }
        ValueRef::Null => put_varint(VALUE_NULL, 0, out),
        ValueRef::Document(document) => {
            put_len_prefix(document_field(document), body_len(document), out);
            if document.is_array() {
                for value in document.elements() {
                    put_len_prefix(ARRAY_VALUES, value_len(value), out);
                    put_value(value, out);
                }
            } else {
                for (name, value) in document.members() {
                    put_entry(OBJECT_MEMBERS, name.as_bytes(), value, out);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use trestle_proto::codec::EncodeReply;
    use trestle_proto::pb;
    use uuid::Uuid;

    use super::*;
    use crate::model::{Document, EntityKey, Properties, StoredEntity, Value};
    use crate::storage::StoredRecord;

    fn encoded_then_decoded(entity: &StoredEntity, select: &[String]) -> pb::Entity {
        let record = StoredRecord::of(entity);
        let mut encoder = EntityEncoder::default();
        let view = record.view().unwrap().selecting(select);
        encoder.take(&view).unwrap();
        let page = super::super::pages::ScanEntitiesResponse {
            entities: Vec::new(),
            encoded_entities: encoder.take_encoded(),
        };
        let mut decoded =
            pb::ScanEntitiesResponse::decode(&page.encode_reply_to_vec()[..]).unwrap();
        assert_eq!(decoded.entities.len(), 1);
        let decoded = decoded.entities.pop().unwrap();
        // GetEntity answers with the same view encoded on its own: both must agree.
        let message = entity_message(&view).unwrap();
        assert_eq!(pb::Entity::decode(&message[..]).unwrap(), decoded);
        decoded
    }

    fn every_type(timestamp: Ticks, partition_key: &str) -> StoredEntity {
        StoredEntity {
            key: EntityKey::new(partition_key.into(), "r-1 ü".into()).unwrap(),
            properties: Properties::from([
                ("s".to_owned(), Value::String("héllo".into())),
                ("empty".to_owned(), Value::String(String::new())),
                ("i".to_owned(), Value::Int32(-7)),
                ("zero".to_owned(), Value::Int32(0)),
                ("l".to_owned(), Value::Int64(i64::MIN)),
                ("d".to_owned(), Value::Double(f64::NEG_INFINITY)),
                ("b".to_owned(), Value::Bool(false)),
                ("t".to_owned(), Value::DateTime(Ticks::MIN)),
                ("epoch".to_owned(), Value::DateTime(Ticks(0))),
                ("g".to_owned(), Value::Guid(Uuid::from_u128(42))),
                ("x".to_owned(), Value::Binary(vec![0, 255, 7])),
                ("nothing".to_owned(), Value::Binary(Vec::new())),
                ("doc".to_owned(), document()),
            ]),
            timestamp,
        }
    }

    /// A document nesting every leaf type (zero and empty values included), nulls and arrays.
    fn document() -> Value {
        let leaves = [
            ("s", Value::String("x".into())),
            ("e", Value::String(String::new())),
            ("i", Value::Int32(0)),
            ("l", Value::Int64(1 << 60)),
            ("d", Value::Double(1.0)),
            ("b", Value::Bool(false)),
            ("t", Value::DateTime(Ticks(1))),
            ("g", Value::Guid(Uuid::from_u128(7))),
            ("x", Value::Binary(Vec::new())),
            ("n", Value::Null),
        ];
        let leaves = Document::object(leaves.map(|(n, v)| (n.to_owned(), v))).unwrap();
        let empty = Document::array([]).unwrap();
        let list = Document::array([Value::Document(leaves), Value::Null, Value::Document(empty)])
            .unwrap();
        Value::Document(Document::object([("list".to_owned(), Value::Document(list))]).unwrap())
    }

    #[test]
    fn encoding_from_storage_equals_converting_the_decoded_entity() {
        for (timestamp, partition_key) in [
            (Ticks(638_000_000_001_234_567), "p"),
            (Ticks(0), ""),
            (Ticks::MIN, "q"),
        ] {
            let entity = every_type(timestamp, partition_key);
            assert_eq!(
                encoded_then_decoded(&entity, &[]),
                super::super::convert::entity_to_pb(entity.clone())
            );
        }
    }

    #[test]
    fn only_selected_properties_are_encoded() {
        let entity = every_type(Ticks(5), "p");
        let select = ["g".to_owned(), "missing".to_owned()];
        let expected = super::super::convert::entity_to_pb(entity.clone().project(&select));
        assert_eq!(encoded_then_decoded(&entity, &select), expected);
        assert_eq!(expected.properties.len(), 1);
        // Paths into a document: only those parts, through the array's objects.
        let paths = [
            "doc/list/s".to_owned(),
            "doc/list/n".to_owned(),
            "doc/none".to_owned(),
        ];
        let expected = super::super::convert::entity_to_pb(entity.clone().project(&paths));
        assert_eq!(encoded_then_decoded(&entity, &paths), expected);
        let Some(pb::value::Kind::ObjectValue(doc)) = &expected.properties["doc"].kind else {
            panic!("{expected:?}");
        };
        let Some(pb::value::Kind::ArrayValue(list)) = &doc.members["list"].kind else {
            panic!("{doc:?}");
        };
        assert_eq!(
            list.values.len(),
            1,
            "only the object element has the paths"
        );
        let Some(pb::value::Kind::ObjectValue(first)) = &list.values[0].kind else {
            panic!("{list:?}");
        };
        assert_eq!(first.members.keys().collect::<Vec<_>>(), ["n", "s"]);
    }
}
