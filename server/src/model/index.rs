//! Declared secondary indexes: their definitions and states, and the entries they keep.
//!
//! An index entry maps a *sort key* to the entity it stands for. Sort keys are bytes whose order
//! is the index's order: for a `TABLE` index the indexed values, then PartitionKey and RowKey; for
//! a `PARTITION` index the PartitionKey, then the values, then the RowKey. A unique index leaves
//! the keys after the values out, so that two entities with the same values would need the same
//! entry, which a store refuses. Each value is a type tag and an order-preserving encoding, so
//! values order by EDM type first and, within a type, as Azure's filters compare them. An entity
//! lacking an indexed property has no entry (indexes are sparse).
//!
//! An index orders by paths: a property (`City`), or a value inside a document property
//! (`Address/City`). A path may expand one array with `*` (`Books/*`, `Addresses/*/City`): the
//! index is then *multi-valued*, with one entry per distinct value the path reaches.

use super::{quoted, Properties, ValidationError, ValueRef};

/// Most indexes one table declares.
pub const MAX_INDEXES_PER_TABLE: usize = 8;
/// Most properties one index orders by.
pub const MAX_INDEX_PROPERTIES: usize = 4;
/// Longest index name, in characters.
pub(crate) const MAX_INDEX_NAME_CHARS: usize = 63;
/// Most entries one entity may have in one index (the distinct values a multi-valued index's
/// array holds): the bound on the index maintenance one write does.
/// A write that would need more is refused before anything is written; an index build that meets
/// such an entity (written before the index was declared) ends `FAILED`, saying which.
pub const MAX_INDEX_ENTRIES_PER_ENTITY: usize = 1_000;

/// An entity that would have more than [`MAX_INDEX_ENTRIES_PER_ENTITY`] entries in an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooManyEntries {
    /// The index.
    pub index: String,
    /// How many the entity's values would make (at least).
    pub entries: usize,
}

impl std::fmt::Display for TooManyEntries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the entity would have {} entries in index {}, and an entity has at most \
             {MAX_INDEX_ENTRIES_PER_ENTITY} in one index (each distinct value a multi-valued path \
             reaches is one)",
            self.entries,
            quoted(&self.index)
        )
    }
}

impl From<TooManyEntries> for ValidationError {
    fn from(error: TooManyEntries) -> ValidationError {
        ValidationError::Argument(error.to_string())
    }
}

/// What an index orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexScope {
    /// Each partition's entities, by the properties (a local index).
    Partition,
    /// The whole table's entities, by the properties (a global index).
    Table,
}

/// An index as declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDefinition {
    /// Its name: unique in its table, ignoring case.
    pub name: String,
    /// The paths it orders by, in order: properties, or values inside documents (at most one
    /// `*` step, expanding an array, in the whole index).
    pub properties: Vec<String>,
    /// What it orders.
    pub scope: IndexScope,
    /// Whether two entities (of one partition, for a `PARTITION` index) may share its values.
    pub unique: bool,
}

/// Whether an index answers queries yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexState {
    /// Being built over the entities that existed when it was declared; writes keep it already.
    Building,
    /// Covers every entity.
    Ready,
    /// The build stopped: why (a unique index found two entities with the same values).
    Failed(String),
}

/// An index of a table: its store-wide id, definition and state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    /// Unique in the store; a re-declared index gets another.
    pub id: u64,
    /// As declared.
    pub definition: IndexDefinition,
    /// Whether it answers queries.
    pub state: IndexState,
}

/// One entry of an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    /// The index.
    pub index_id: u64,
    /// Where the entry sorts in the index.
    pub sort_key: Vec<u8>,
    /// Whether the index is unique (the sort key then says nothing of the entity's keys).
    pub unique: bool,
}

impl IndexDefinition {
    /// A definition, checked: a name of 1 to 63 letters and digits starting with a letter, 1 to
    /// [`MAX_INDEX_PROPERTIES`] distinct custom property names.
    pub fn new(
        name: String,
        properties: Vec<String>,
        scope: IndexScope,
        unique: bool,
    ) -> Result<IndexDefinition, ValidationError> {
        let name_ok = name.chars().count() <= MAX_INDEX_NAME_CHARS
            && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && name.chars().all(|c| c.is_ascii_alphanumeric());
        if !name_ok {
            return Err(ValidationError::Argument(format!(
                "index name {} is invalid: it must be 1 to {MAX_INDEX_NAME_CHARS} letters and digits starting with a letter",
                quoted(&name)
            )));
        }
        if properties.is_empty() || properties.len() > MAX_INDEX_PROPERTIES {
            return Err(ValidationError::Argument(format!(
                "index {} has {} properties; an index orders by 1 to {MAX_INDEX_PROPERTIES}",
                quoted(&name),
                properties.len()
            )));
        }
        for (at, property) in properties.iter().enumerate() {
            let mut steps = property.split('/');
            super::entity::validate_property_name(steps.next().unwrap_or_default())?;
            for step in steps.filter(|step| *step != "*") {
                super::document::check_member_name(step).map_err(|_| {
                    ValidationError::Argument(format!(
                        "index {} has path {}, with an empty or invalid step",
                        quoted(&name),
                        quoted(property)
                    ))
                })?;
            }
            if properties[..at].contains(property) {
                return Err(ValidationError::Argument(format!(
                    "index {} names property {} twice",
                    quoted(&name),
                    quoted(property)
                )));
            }
        }
        let expanded = properties
            .iter()
            .flat_map(|path| path.split('/'))
            .filter(|step| *step == "*")
            .count();
        if expanded > 1 {
            return Err(ValidationError::Argument(format!(
                "index {} expands {expanded} arrays; an index expands at most one ('*')",
                quoted(&name)
            )));
        }
        if unique && expanded == 1 {
            return Err(ValidationError::Argument(format!(
                "index {} is unique and multi-valued; a unique index takes one value per entity, \
                 so it cannot expand an array ('*')",
                quoted(&name)
            )));
        }
        Ok(IndexDefinition {
            name,
            properties,
            scope,
            unique,
        })
    }

    /// Whether a path expands an array (`*`): one entry per distinct value.
    pub fn is_multi_valued(&self) -> bool {
        self.properties
            .iter()
            .any(|path| path.split('/').any(|step| step == "*"))
    }

    /// The sort keys of the entries of the entity with these keys and properties (`value` looks
    /// a property up by name), in order and distinct: none if a path reaches no value, several
    /// for a multi-valued index; refused past [`MAX_INDEX_ENTRIES_PER_ENTITY`], counted before
    /// any key is made.
    pub fn sort_keys<'a>(
        &self,
        partition_key: &str,
        row_key: &str,
        value: impl Fn(&str) -> Option<ValueRef<'a>>,
    ) -> Result<Vec<Vec<u8>>, TooManyEntries> {
        let mut keys = vec![Vec::with_capacity(64)];
        if self.scope == IndexScope::Partition {
            put_escaped(&mut keys[0], partition_key.as_bytes());
        }
        for path in &self.properties {
            let values = path_values(path, &value);
            keys = match values.as_slice() {
                [] => return Ok(Vec::new()),
                [one] => {
                    keys.iter_mut().for_each(|key| put_value(key, *one));
                    keys
                }
                many => {
                    // Each distinct value once (at most a document's 10,000), counted before the
                    // product is made.
                    let mut encoded: Vec<Vec<u8>> = many
                        .iter()
                        .map(|value| {
                            let mut bytes = Vec::new();
                            put_value(&mut bytes, *value);
                            bytes
                        })
                        .collect();
                    encoded.sort_unstable();
                    encoded.dedup();
                    let entries = keys.len().saturating_mul(encoded.len());
                    if entries > MAX_INDEX_ENTRIES_PER_ENTITY {
                        return Err(TooManyEntries {
                            index: self.name.clone(),
                            entries,
                        });
                    }
                    keys.iter()
                        .flat_map(|key| {
                            encoded
                                .iter()
                                .map(move |value| [key.as_slice(), value].concat())
                        })
                        .collect()
                }
            };
        }
        keys.sort_unstable();
        keys.dedup();
        if !self.unique {
            for key in &mut keys {
                if self.scope == IndexScope::Table {
                    put_escaped(key, partition_key.as_bytes());
                }
                put_escaped(key, row_key.as_bytes());
            }
        }
        Ok(keys)
    }
}

/// The values `path` reaches from the entity's properties (`value` looks one up by name):
/// members of objects by name, every element of an array at a `*`, one element at a position.
fn path_values<'a>(path: &str, value: &impl Fn(&str) -> Option<ValueRef<'a>>) -> Vec<ValueRef<'a>> {
    let mut steps = path.split('/');
    let Some(first) = value(steps.next().unwrap_or_default()) else {
        return Vec::new();
    };
    let mut values = vec![first];
    for step in steps {
        values = values
            .into_iter()
            .flat_map(|value| -> Box<dyn Iterator<Item = ValueRef<'a>>> {
                match value {
                    ValueRef::Document(array) if step == "*" && array.is_array() => {
                        Box::new(array.elements())
                    }
                    ValueRef::Document(object) if step != "*" && !object.is_array() => {
                        Box::new(object.member(step).into_iter())
                    }
                    // A position, as filters and patches read it.
                    ValueRef::Document(array) if step != "*" => {
                        Box::new(step.parse().ok().and_then(|n| array.element(n)).into_iter())
                    }
                    _ => Box::new(std::iter::empty()),
                }
            })
            .collect();
    }
    values
}

impl Index {
    /// Whether writes keep the index (every state but `Failed`).
    pub fn is_kept(&self) -> bool {
        !matches!(self.state, IndexState::Failed(_))
    }

    /// The entries of an entity with these properties, in sort-key order (none if it lacks an
    /// indexed value), within [`MAX_INDEX_ENTRIES_PER_ENTITY`].
    pub fn entries(
        &self,
        partition_key: &str,
        row_key: &str,
        properties: &Properties,
    ) -> Result<Vec<IndexEntry>, TooManyEntries> {
        let sort_keys = self.definition.sort_keys(partition_key, row_key, |name| {
            properties.get(name).map(|v| v.borrowed())
        })?;
        Ok(sort_keys
            .into_iter()
            .map(|sort_key| IndexEntry {
                index_id: self.id,
                sort_key,
                unique: self.definition.unique,
            })
            .collect())
    }
}

/// A range of sort keys of one index: `start` inclusive, `end` exclusive (`None`: to the end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexRange {
    /// The first sort key in the range (inclusive).
    pub start: Vec<u8>,
    /// The first sort key past the range, if any.
    pub end: Option<Vec<u8>>,
}

impl IndexRange {
    /// Every sort key.
    pub fn all() -> IndexRange {
        IndexRange {
            start: Vec::new(),
            end: None,
        }
    }

    /// The sort keys starting with `prefix`.
    pub fn prefixed(prefix: &[u8]) -> IndexRange {
        IndexRange {
            start: prefix.to_vec(),
            end: successor_of_prefix(prefix),
        }
    }

    /// Whether the range holds no sort key.
    pub fn is_empty(&self) -> bool {
        self.end.as_ref().is_some_and(|end| *end <= self.start)
    }

    /// Whether `sort_key` is in the range.
    pub fn contains(&self, sort_key: &[u8]) -> bool {
        sort_key >= self.start.as_slice()
            && self
                .end
                .as_ref()
                .is_none_or(|end| sort_key < end.as_slice())
    }

    /// The part that a scan resuming at `sort_key` (inclusive) in its direction still reads.
    pub fn from(&self, sort_key: &[u8], reverse: bool) -> IndexRange {
        let mut range = self.clone();
        if reverse {
            // The smallest key past `sort_key` is `sort_key` followed by a zero byte.
            let past = [sort_key, &[0]].concat();
            if range.end.as_ref().is_none_or(|end| past < *end) {
                range.end = Some(past);
            }
        } else if sort_key > range.start.as_slice() {
            range.start = sort_key.to_vec();
        }
        range
    }

    /// The intersection with `other`.
    pub fn intersect(&self, other: &IndexRange) -> IndexRange {
        let start = self.start.clone().max(other.start.clone());
        let end = match (&self.end, &other.end) {
            (Some(a), Some(b)) => Some(a.clone().min(b.clone())),
            (Some(a), None) | (None, Some(a)) => Some(a.clone()),
            (None, None) => None,
        };
        IndexRange { start, end }
    }
}

/// The first byte string after every string starting with `prefix`; `None` if there is none.
pub fn successor_of_prefix(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut next = prefix.to_vec();
    while let Some(last) = next.pop() {
        if last < u8::MAX {
            next.push(last + 1);
            return Some(next);
        }
    }
    None
}

/// Type tags, in the order types sort in an index (by EDM name; null first, documents last).
const TAG_NULL: u8 = 0x08;
const TAG_BINARY: u8 = 0x10;
const TAG_BOOLEAN: u8 = 0x20;
const TAG_DATETIME: u8 = 0x30;
const TAG_DOUBLE: u8 = 0x40;
const TAG_GUID: u8 = 0x50;
const TAG_INT32: u8 = 0x60;
const TAG_INT64: u8 = 0x70;
const TAG_STRING: u8 = 0x80;
const TAG_DOCUMENT: u8 = 0x90;

/// The type tag a value's encoding starts with: values of one type share a prefix.
pub fn type_tag(value: ValueRef<'_>) -> u8 {
    match value {
        ValueRef::Binary(_) => TAG_BINARY,
        ValueRef::Bool(_) => TAG_BOOLEAN,
        ValueRef::DateTime(_) => TAG_DATETIME,
        ValueRef::Double(_) => TAG_DOUBLE,
        ValueRef::Guid(_) => TAG_GUID,
        ValueRef::Int32(_) => TAG_INT32,
        ValueRef::Int64(_) => TAG_INT64,
        ValueRef::String(_) => TAG_STRING,
        ValueRef::Null => TAG_NULL,
        ValueRef::Document(_) => TAG_DOCUMENT,
    }
}

/// Appends `value`'s tag and order-preserving encoding: integers with the sign bit flipped, big
/// endian; doubles so that their bytes order as the numbers (`-0.0` as `0.0`); GUIDs as their
/// 16 bytes (the order of their canonical text); strings and binaries escaped and terminated; a
/// whole document as its canonical encoding, escaped (equal documents meet, no useful order).
pub fn put_value(out: &mut Vec<u8>, value: ValueRef<'_>) {
    out.push(type_tag(value));
    match value {
        ValueRef::Null => {}
        ValueRef::Document(document) => put_escaped(out, document.bytes()),
        ValueRef::Binary(bytes) => put_escaped(out, bytes),
        ValueRef::String(text) => put_escaped(out, text.as_bytes()),
        ValueRef::Bool(b) => out.push(u8::from(b)),
        ValueRef::DateTime(ticks) => out.extend_from_slice(&flip_i64(ticks.0)),
        ValueRef::Int64(v) => out.extend_from_slice(&flip_i64(v)),
        ValueRef::Int32(v) => out.extend_from_slice(&((v as u32) ^ (1 << 31)).to_be_bytes()),
        ValueRef::Guid(guid) => out.extend_from_slice(guid.as_bytes()),
        ValueRef::Double(v) => {
            let bits = if v == 0.0 { 0 } else { v.to_bits() };
            let ordered = if bits >> 63 == 1 {
                !bits
            } else {
                bits | (1 << 63)
            };
            out.extend_from_slice(&ordered.to_be_bytes());
        }
    }
}

fn flip_i64(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

/// Appends `bytes` so that the result orders as `bytes` do and is prefix-free: each zero byte as
/// `00 FF`, then the terminator `00 01`.
pub fn put_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    for &byte in bytes {
        out.push(byte);
        if byte == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 1]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Ticks, Value};

    fn encoded(value: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        put_value(&mut out, value.borrowed());
        out
    }

    #[test]
    fn encodings_order_as_values_compare() {
        let ordered = [
            vec![
                Value::Int32(i32::MIN),
                Value::Int32(-1),
                Value::Int32(0),
                Value::Int32(7),
                Value::Int32(i32::MAX),
            ],
            vec![
                Value::Int64(i64::MIN),
                Value::Int64(-5),
                Value::Int64(1 << 40),
            ],
            vec![
                Value::Double(f64::NEG_INFINITY),
                Value::Double(-2.5),
                Value::Double(-0.0),
                Value::Double(1e-300),
                Value::Double(2.0),
                Value::Double(f64::INFINITY),
            ],
            vec![
                Value::String(String::new()),
                Value::String("a".into()),
                Value::String("a\0".into()),
                Value::String("a\0b".into()),
                Value::String("ab".into()),
                Value::String("é".into()),
            ],
            vec![
                Value::Binary(vec![]),
                Value::Binary(vec![0]),
                Value::Binary(vec![0, 0]),
                Value::Binary(vec![1]),
            ],
            vec![Value::Bool(false), Value::Bool(true)],
            vec![Value::DateTime(Ticks(0)), Value::DateTime(Ticks(1))],
        ];
        for values in ordered {
            for pair in values.windows(2) {
                assert!(encoded(&pair[0]) < encoded(&pair[1]), "{pair:?}");
            }
        }
        assert_eq!(encoded(&Value::Double(-0.0)), encoded(&Value::Double(0.0)));
    }

    #[test]
    fn composite_keys_order_by_each_part_in_turn() {
        let definition = |scope, unique| {
            IndexDefinition::new(
                "ByName".into(),
                vec!["Last".into(), "First".into()],
                scope,
                unique,
            )
            .unwrap()
        };
        let key = |d: &IndexDefinition, pk: &str, last: &str, first: &str| {
            let props = Properties::from([
                ("Last".to_owned(), Value::String(last.into())),
                ("First".to_owned(), Value::String(first.into())),
            ]);
            let mut keys = d
                .sort_keys(pk, "r", |n| props.get(n).map(Value::borrowed))
                .unwrap();
            assert_eq!(keys.len(), 1);
            keys.remove(0)
        };
        let table = definition(IndexScope::Table, false);
        assert!(key(&table, "z", "Ab", "z") < key(&table, "a", "Abc", "a"));
        assert!(key(&table, "z", "Ab", "a") < key(&table, "a", "Ab", "b"));
        let partition = definition(IndexScope::Partition, false);
        assert!(key(&partition, "a", "Z", "z") < key(&partition, "b", "A", "a"));
        let unique = definition(IndexScope::Table, true);
        assert_eq!(key(&unique, "a", "X", "Y"), key(&unique, "b", "X", "Y"));
        let props = Properties::from([("Last".to_owned(), Value::String("X".into()))]);
        assert!(table
            .sort_keys("p", "r", |n| props.get(n).map(Value::borrowed))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn an_entity_has_at_most_its_bound_of_entries_in_one_index() {
        let array = |n: usize| {
            let values = (0..n)
                .map(|i| Value::Int32(i as i32 % 2_000))
                .collect::<Vec<_>>();
            Value::Document(crate::model::Document::array(values).unwrap())
        };
        let books = IndexDefinition::new(
            "ByBook".into(),
            vec!["Books/*".into()],
            IndexScope::Table,
            false,
        )
        .unwrap();
        let of = |n: usize| {
            let props = Properties::from([("Books".to_owned(), array(n))]);
            books.sort_keys("p", "r", |name| props.get(name).map(Value::borrowed))
        };
        assert_eq!(
            of(MAX_INDEX_ENTRIES_PER_ENTITY).unwrap().len(),
            MAX_INDEX_ENTRIES_PER_ENTITY
        );
        // Duplicates count once: 4,000 values, 2,000 distinct.
        let refused = of(4_000).unwrap_err();
        assert_eq!(refused.entries, 2_000);
        assert!(refused.to_string().contains("at most 1000"), "{refused}");
    }

    #[test]
    fn multi_valued_definitions_expand_one_array_and_are_never_unique() {
        let define = |properties: &[&str], unique| {
            IndexDefinition::new(
                "Ix".into(),
                properties.iter().map(|p| p.to_string()).collect(),
                IndexScope::Table,
                unique,
            )
        };
        assert!(define(&["Books/*"], false).unwrap().is_multi_valued());
        assert!(!define(&["Address/City"], true).unwrap().is_multi_valued());
        let unique = define(&["Books/*"], true).unwrap_err().to_string();
        assert!(unique.contains("unique and multi-valued"), "{unique}");
        let two = define(&["A/*", "B/*"], false).unwrap_err().to_string();
        assert!(two.contains("expands 2 arrays"), "{two}");
        assert!(
            define(&["*/A"], false).is_err(),
            "a path starts at a property"
        );
        assert!(define(&["A//B"], false).is_err());
    }

    #[test]
    fn definitions_are_checked() {
        let define = |name: &str, properties: &[&str]| {
            IndexDefinition::new(
                name.into(),
                properties.iter().map(|p| p.to_string()).collect(),
                IndexScope::Table,
                false,
            )
        };
        assert!(define("ByEmail", &["Email"]).is_ok());
        for (name, properties) in [
            ("", &["Email"][..]),
            ("1x", &["Email"]),
            ("By-Email", &["Email"]),
            ("ByNothing", &[]),
            ("ByMany", &["A", "B", "C", "D", "E"]),
            ("Twice", &["A", "A"]),
            ("ByKey", &["PartitionKey"]),
            ("BadProperty", &["has space"]),
        ] {
            assert!(define(name, properties).is_err(), "{name}");
        }
    }

    #[test]
    fn ranges_resume_in_either_direction() {
        let range = IndexRange::prefixed(b"ab");
        assert!(range.contains(b"ab") && range.contains(b"ab\xff") && !range.contains(b"ac"));
        let forward = range.from(b"abc", false);
        assert!(!forward.contains(b"abb") && forward.contains(b"abc"));
        let backward = range.from(b"abc", true);
        assert!(backward.contains(b"abc") && !backward.contains(b"abc\0"));
        assert!(IndexRange::prefixed(b"b")
            .intersect(&IndexRange::prefixed(b"c"))
            .is_empty());
        assert_eq!(successor_of_prefix(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(successor_of_prefix(b"\xff"), None);
    }
}
