//! The versioned binary encoding of stored entities (the sled value; the key holds the keys).
//!
//! Layout, little-endian: `[format u8][timestamp i64][count u16]`, then per property
//! `[name length u16][name][value]`, each value in the model's encoding ([`crate::model::encoding`]).
//! Format 1 holds only the eight EDM types; format 2, written only for an entity holding a
//! document, may hold documents too (so that a server that predates documents refuses such a
//! record by its format rather than misreading it). Both are read.

use super::StorageError;
use crate::model::encoding::{
    checked_utf8, decode_value, encode_owned, skip_value, utf8, Reader, TAG_STRING,
};
use crate::model::{
    prune, selected, selects, EntityKey, Operation, Properties, Selected, StoredEntity, Ticks,
    TimeToLive, Value, ValueRef, TTL_PROPERTY,
};

const FORMAT_V1: u8 = 1;
const FORMAT_V2: u8 = 2;

/// Encodes an entity's timestamp and properties.
pub(crate) fn encode(timestamp: Ticks, properties: &Properties) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + properties.len() * 24);
    let documents = properties
        .values()
        .any(|value| matches!(value, Value::Document(_)));
    out.push(if documents { FORMAT_V2 } else { FORMAT_V1 });
    out.extend_from_slice(&timestamp.0.to_le_bytes());
    out.extend_from_slice(&(properties.len() as u16).to_le_bytes());
    for (name, value) in properties {
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        encode_owned(value, &mut out);
    }
    out
}

/// The entity each of `operations` finds, from the stored bytes `record_of` gives for it: with
/// its properties where the operation (a merge, a patch) or an index (`indexed`) needs them, its
/// key and timestamp only otherwise. What a commit plans over ([`crate::model::plan_commit`]).
pub(crate) fn current_entities<'r>(
    operations: &[Operation],
    record_of: impl Fn(usize, &Operation) -> Option<&'r [u8]>,
    indexed: bool,
) -> Result<Vec<Option<StoredEntity>>, StorageError> {
    operations
        .iter()
        .enumerate()
        .map(|(at, operation)| {
            let keep: Option<&[String]> =
                (!indexed && !operation.reads_current_properties()).then_some(&[]);
            record_of(at, operation)
                .map(|bytes| decode_selected(operation.key().clone(), bytes, keep))
                .transpose()
        })
        .collect()
}

/// Decodes only the properties named in `keep` (all when `None`); the others are skipped over
/// without being materialised.
pub(crate) fn decode_selected(
    key: EntityKey,
    bytes: &[u8],
    keep: Option<&[String]>,
) -> Result<StoredEntity, StorageError> {
    let (timestamp, stored) = StoredProperties::read(bytes, keep)?;
    let properties = stored
        .map(|property| property.map(|(name, value)| (name.to_owned(), value.to_value())))
        .collect::<Result<Properties, StorageError>>()?;
    Ok(StoredEntity {
        key,
        properties,
        timestamp,
    })
}

/// A stored entity read in place: keys, timestamp and properties borrowed from the store's bytes, so
/// that a query can send it on without building an owned entity first.
#[derive(Debug, Clone, Copy)]
pub struct EntityView<'a> {
    /// The PartitionKey.
    pub partition_key: &'a str,
    /// The RowKey.
    pub row_key: &'a str,
    /// When the entity was last written.
    pub timestamp: Ticks,
    /// The stored bytes' length, header included.
    stored_len: usize,
    /// The stored properties, after the header.
    body: &'a [u8],
    /// How many properties are stored.
    count: u16,
    /// The properties shown (all when empty).
    select: &'a [String],
    /// The stored bytes, whole.
    record: &'a [u8],
}

impl<'a> EntityView<'a> {
    /// Reads an entity from its keys and stored bytes, checking only the header: the properties
    /// are checked as [`EntityView::properties`] reads them.
    pub fn parse(
        partition_key: &'a str,
        row_key: &'a str,
        value: &'a [u8],
    ) -> Result<EntityView<'a>, StorageError> {
        let (timestamp, stored) = StoredProperties::read(value, None)?;
        Ok(EntityView {
            partition_key,
            row_key,
            timestamp,
            stored_len: value.len(),
            body: stored.reader.rest(),
            count: stored.remaining,
            select: &[],
            record: value,
        })
    }

    /// The stored bytes, whole (whatever the selection shows): [`EntityView::parse`] reads
    /// them again.
    pub fn record(&self) -> &'a [u8] {
        self.record
    }

    /// Whether the entity has expired at `now` under the table's time to live `ttl` (never
    /// without one).
    pub fn expired(&self, ttl: Option<TimeToLive>, now: Ticks) -> Result<bool, StorageError> {
        let Some(ttl) = ttl else {
            return Ok(false);
        };
        Ok(ttl.expired(self.timestamp, self.property(TTL_PROPERTY)?, now))
    }

    /// How many bytes its properties take stored: a size hint for encoding them elsewhere.
    pub fn stored_len(&self) -> usize {
        self.stored_len
    }

    /// Whether every property is shown whole (no selection).
    pub fn shows_every_property(&self) -> bool {
        self.select.is_empty()
    }

    /// The same entity showing only the properties named in `select` (all when empty).
    pub fn selecting(self, select: &'a [String]) -> EntityView<'a> {
        EntityView { select, ..self }
    }

    /// The named property, if the entity has it (and shows some of it), found without decoding
    /// the others; as stored, even if the selection shows only paths into it.
    pub fn property(&self, name: &str) -> Result<Option<ValueRef<'a>>, StorageError> {
        if !selects(self.select, name.as_bytes()) {
            return Ok(None);
        }
        let mut properties = self.properties();
        properties.keep = None;
        properties.find(name)
    }

    /// The shown properties as the selection shows them, in stored (name) order: a property
    /// selected by paths into it (`Address/City`) holds only those parts.
    pub fn shown_properties(
        &self,
    ) -> impl Iterator<Item = Result<(&'a str, Shown<'a>), StorageError>> {
        let select = self.select;
        self.properties().filter_map(move |property| {
            let (name, value) = match property {
                Ok(property) => property,
                Err(error) => return Some(Err(error)),
            };
            match selected(select, name) {
                Selected::Whole => Some(Ok((name, Shown::Stored(value)))),
                Selected::Paths(paths) => {
                    prune(value, &paths).map(|v| Ok((name, Shown::Pruned(v))))
                }
                Selected::Nothing => None,
            }
        })
    }

    /// The shown properties, in stored (name) order, each whole.
    pub fn properties(&self) -> StoredProperties<'a> {
        StoredProperties {
            reader: Reader::new(self.body, "entity"),
            remaining: self.count,
            keep: (!self.select.is_empty()).then_some(self.select),
        }
    }

    /// Every stored property, whatever the selection, with its name and a string value as bytes
    /// checked to be UTF-8 rather than as `&str`s: the cheapest walk of an entity, for a writer
    /// that copies text out as bytes (a wire encoder, for entities shown whole).
    pub fn property_bytes(&self) -> PropertyBytes<'a> {
        PropertyBytes {
            reader: Reader::new(self.body, "entity"),
            remaining: self.count,
        }
    }
}

/// A stored value as [`EntityView::property_bytes`] reads it.
#[derive(Debug, Clone, Copy)]
pub enum StoredValue<'a> {
    /// A string's bytes, checked to be UTF-8.
    Text(&'a [u8]),
    /// Any other value, decoded.
    Decoded(ValueRef<'a>),
}

/// The properties of a stored entity as names and values in bytes ([`EntityView::property_bytes`]).
#[derive(Debug, Clone)]
pub struct PropertyBytes<'a> {
    reader: Reader<'a>,
    remaining: u16,
}

impl<'a> PropertyBytes<'a> {
    fn next_property(&mut self) -> Result<(&'a [u8], StoredValue<'a>), StorageError> {
        self.remaining -= 1;
        let name = checked_utf8(self.reader.name()?)?;
        let value = match self.reader.peek()? {
            TAG_STRING => {
                self.reader.slice(1)?;
                StoredValue::Text(checked_utf8(self.reader.prefixed()?)?)
            }
            _ => StoredValue::Decoded(decode_value(&mut self.reader)?),
        };
        Ok((name, value))
    }
}

impl<'a> Iterator for PropertyBytes<'a> {
    type Item = Result<(&'a [u8], StoredValue<'a>), StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        let property = self.next_property();
        if property.is_err() {
            // A corrupt record ends the iteration after its error.
            self.remaining = 0;
        }
        Some(property)
    }
}

/// A property's value as a selection shows it: as stored, or only the parts at the selected paths.
#[derive(Debug, Clone)]
pub enum Shown<'a> {
    /// As stored, read in place.
    Stored(ValueRef<'a>),
    /// The selected parts of a document.
    Pruned(Value),
}

impl Shown<'_> {
    /// The value shown.
    pub fn value(&self) -> ValueRef<'_> {
        match self {
            Shown::Stored(value) => *value,
            Shown::Pruned(value) => value.borrowed(),
        }
    }
}

/// The properties of a stored entity, read one at a time without copying; unselected ones are
/// skipped over without being decoded.
#[derive(Debug, Clone)]
pub struct StoredProperties<'a> {
    reader: Reader<'a>,
    remaining: u16,
    keep: Option<&'a [String]>,
}

impl<'a> StoredProperties<'a> {
    /// Reads the header of a stored entity: its timestamp, then its properties.
    fn read(
        bytes: &'a [u8],
        keep: Option<&'a [String]>,
    ) -> Result<(Ticks, StoredProperties<'a>), StorageError> {
        let mut reader = Reader::new(bytes, "entity");
        let format = reader.take::<1>()?[0];
        if format != FORMAT_V1 && format != FORMAT_V2 {
            return Err(StorageError::Corrupt(format!(
                "unknown entity format {format}"
            )));
        }
        let timestamp = Ticks(i64::from_le_bytes(reader.take()?));
        let remaining = u16::from_le_bytes(reader.take()?);
        Ok((
            timestamp,
            StoredProperties {
                reader,
                remaining,
                keep,
            },
        ))
    }

    /// Walks to the property called `name` and decodes only its value.
    fn find(mut self, name: &str) -> Result<Option<ValueRef<'a>>, StorageError> {
        while self.remaining > 0 {
            self.remaining -= 1;
            if self.reader.name()? == name.as_bytes() {
                return Ok(Some(decode_value(&mut self.reader)?));
            }
            skip_value(&mut self.reader)?;
        }
        Ok(None)
    }

    fn next_property(&mut self) -> Result<Option<(&'a str, ValueRef<'a>)>, StorageError> {
        while self.remaining > 0 {
            self.remaining -= 1;
            let name = self.reader.name()?;
            let wanted = self.keep.is_none_or(|keep| selects(keep, name));
            if wanted {
                return Ok(Some((utf8(name)?, decode_value(&mut self.reader)?)));
            }
            skip_value(&mut self.reader)?;
        }
        Ok(None)
    }
}

impl<'a> Iterator for StoredProperties<'a> {
    type Item = Result<(&'a str, ValueRef<'a>), StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_property() {
            Ok(property) => property.map(Ok),
            Err(error) => {
                // A corrupt record ends the iteration after its error.
                self.remaining = 0;
                Some(Err(error))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Document;
    use proptest::prelude::*;
    use uuid::Uuid;

    fn every_type() -> Properties {
        Properties::from([
            ("s".to_owned(), Value::String("héllo".into())),
            ("i".to_owned(), Value::Int32(-7)),
            ("l".to_owned(), Value::Int64(i64::MIN)),
            ("d".to_owned(), Value::Double(f64::NEG_INFINITY)),
            ("b".to_owned(), Value::Bool(true)),
            ("t".to_owned(), Value::DateTime(Ticks::MIN)),
            ("g".to_owned(), Value::Guid(Uuid::from_u128(42))),
            ("x".to_owned(), Value::Binary(vec![0, 255, 7])),
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// A corrupt record yields an error (or some entity), never a panic.
        #[test]
        fn truncated_and_flipped_records_never_panic(
            cut in any::<prop::sample::Index>(),
            flip in any::<prop::sample::Index>(),
            mask in 1u8..=255,
        ) {
            let record = encode(Ticks(9), &every_type());
            let key = EntityKey::new("p".into(), "r".into()).unwrap();
            let truncated = &record[..cut.index(record.len())];
            prop_assert!(decode_selected(key.clone(), truncated, None).is_err());
            let mut flipped = record.clone();
            let at = flip.index(flipped.len());
            flipped[at] ^= mask;
            let _ = decode_selected(key.clone(), &flipped, None);
            let _ = decode_selected(key, &flipped, Some(&["s".to_owned()]));
            if let Ok(view) = EntityView::parse("p", "r", &flipped) {
                view.properties().for_each(drop);
            }
        }

        /// The walk in bytes reads what the typed walk reads, and fails where it fails, on whole,
        /// cut and damaged records alike.
        #[test]
        fn property_bytes_read_what_properties_read(
            cut in any::<prop::sample::Index>(),
            flip in any::<prop::sample::Index>(),
            mask in 0u8..=255,
        ) {
            let mut record = encode(Ticks(9), &every_type());
            let at = flip.index(record.len());
            record[at] ^= mask;
            record.truncate(cut.index(record.len() + 1).max(11));
            if let Ok(view) = EntityView::parse("p", "r", &record) {
                let typed: Vec<_> = view
                    .properties()
                    .map(|p| p.map(|(name, value)| format!("{name} {:?}", value.to_value())))
                    .collect();
                let in_bytes: Vec<_> = view
                    .property_bytes()
                    .map(|p| p.map(|(name, value)| {
                        let value = match value {
                            StoredValue::Text(text) => Value::String(utf8(text).unwrap().into()),
                            StoredValue::Decoded(value) => value.to_value(),
                        };
                        format!("{} {value:?}", utf8(name).unwrap())
                    }))
                    .collect();
                prop_assert_eq!(typed.len(), in_bytes.len());
                for (typed, in_bytes) in typed.iter().zip(&in_bytes) {
                    prop_assert_eq!(typed.as_ref().ok(), in_bytes.as_ref().ok());
                }
            }
        }
    }

    #[test]
    fn text_that_is_not_utf8_is_corrupt_in_either_walk() {
        let properties =
            |value: &str| Properties::from([("s".to_owned(), Value::String(value.into()))]);
        let mut record = encode(Ticks(1), &properties("h\u{e9}llo"));
        let valid = EntityView::parse("p", "r", &record).unwrap();
        let read: Vec<_> = valid.property_bytes().map(Result::unwrap).collect();
        assert!(
            matches!(read[..], [(b"s", StoredValue::Text(text))] if text == "h\u{e9}llo".as_bytes())
        );
        // The two bytes of "\u{e9}" become a byte no UTF-8 text holds.
        let at = record.len() - 5;
        record[at..at + 2].copy_from_slice(&[0xFF, b'x']);
        let damaged = EntityView::parse("p", "r", &record).unwrap();
        assert!(matches!(
            damaged.property_bytes().next(),
            Some(Err(StorageError::Corrupt(_)))
        ));
        assert!(matches!(
            damaged.properties().next(),
            Some(Err(StorageError::Corrupt(_)))
        ));
    }

    /// A document holding every leaf type, nested objects and arrays, and nulls.
    fn nested() -> Value {
        let leaves = every_type()
            .into_iter()
            .chain([("n".to_owned(), Value::Null)]);
        let inner = Document::object(leaves).unwrap();
        let list = Document::array([
            Value::Document(inner.clone()),
            Value::Null,
            Value::Int64(1 << 60),
        ])
        .unwrap();
        Value::Document(Document::object([("list".to_owned(), Value::Document(list))]).unwrap())
    }

    #[test]
    fn documents_round_trip_in_format_2_and_flat_entities_stay_in_format_1() {
        let key = EntityKey::new("p".into(), "r".into()).unwrap();
        let flat = encode(Ticks(5), &every_type());
        assert_eq!(
            flat[0], 1,
            "an entity without documents is written as before"
        );
        let mut properties = every_type();
        properties.insert("doc".to_owned(), nested());
        let bytes = encode(Ticks(5), &properties);
        assert_eq!(bytes[0], 2);
        let entity = decode_selected(key.clone(), &bytes, None).unwrap();
        assert_eq!(entity.properties, properties);
        let view = EntityView::parse("p", "r", &bytes).unwrap();
        let Some(ValueRef::Document(document)) = view.property("doc").unwrap() else {
            panic!("the document reads in place");
        };
        assert_eq!(
            document.at(["list", "0", "l"]),
            Some(ValueRef::Int64(i64::MIN))
        );
        assert_eq!(document.at(["list", "1"]), Some(ValueRef::Null));
        assert_eq!(document.at(["list", "0", "missing"]), None);
        assert_eq!(document.at(["list", "9"]), None);
        assert_eq!(document.at(["list", "2", "deeper"]), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// A damaged record holding a document yields an error or some entity, never a panic,
        /// and whatever it yields can be walked.
        #[test]
        fn damaged_documents_never_panic(
            flip in any::<prop::sample::Index>(),
            mask in 1u8..=255,
        ) {
            let record = encode(Ticks(9), &Properties::from([("d".to_owned(), nested())]));
            let mut flipped = record.clone();
            let at = flip.index(flipped.len());
            flipped[at] ^= mask;
            let key = EntityKey::new("p".into(), "r".into()).unwrap();
            if let Ok(entity) = decode_selected(key, &flipped, None) {
                if let Some(Value::Document(document)) = entity.properties.get("d") {
                    let _ = format!("{document:?}");
                }
            }
        }
    }

    #[test]
    fn every_type_round_trips() {
        let properties = every_type();
        let key = EntityKey::new("p".into(), "r".into()).unwrap();
        let bytes = encode(Ticks(123), &properties);
        let entity = decode_selected(key.clone(), &bytes, None).unwrap();
        assert_eq!(
            entity,
            StoredEntity {
                key,
                properties,
                timestamp: Ticks(123)
            }
        );
    }

    #[test]
    fn selected_decoding_skips_other_properties() {
        let properties = Properties::from([
            ("a".to_owned(), Value::String("x".into())),
            ("b".to_owned(), Value::Binary(vec![1; 10])),
            ("c".to_owned(), Value::Int64(3)),
        ]);
        let key = EntityKey::new("p".into(), "r".into()).unwrap();
        let bytes = encode(Ticks(1), &properties);
        let keep = ["c".to_owned(), "zz".to_owned()];
        let entity = decode_selected(key, &bytes, Some(&keep)).unwrap();
        assert_eq!(
            entity.properties,
            Properties::from([("c".to_owned(), Value::Int64(3))])
        );
    }

    #[test]
    fn truncated_records_are_corrupt_not_panics() {
        let bytes = encode(
            Ticks(1),
            &Properties::from([("s".to_owned(), Value::String("abc".into()))]),
        );
        let key = EntityKey::new("p".into(), "r".into()).unwrap();
        for len in 0..bytes.len() {
            assert!(decode_selected(key.clone(), &bytes[..len], None).is_err());
        }
    }
}
