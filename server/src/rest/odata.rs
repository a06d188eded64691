//! Entities in Azure's OData JSON: typed properties with `@odata.type` annotations in, and out at
//! the metadata level the client asked for (`nometadata`, `minimalmetadata`, `fullmetadata`).

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt::Write as _;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::de::{DeserializeSeed, MapAccess, Visitor};

use serde_json::{Number, Value as Json};
use uuid::Uuid;

use super::ACCOUNT;
use crate::model::{
    quoted, DocumentRef, ETag, EntityKey, NewEntity, Properties, StoredEntity, Ticks,
    ValidationError, Value, ValueRef, MAX_PROPERTIES,
};
use crate::storage::{EntityView, Shown, StorageError};

/// How much metadata a response carries (`Accept: application/json;odata=...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Metadata {
    /// No annotations: types other than JSON's own are lost, as on Azure.
    None,
    /// Annotations where JSON cannot tell the type (Int64, Double, DateTime, Guid, Binary).
    Minimal,
    /// Every annotation, and the entity's id and type.
    Full,
}

impl Metadata {
    /// The level an `Accept` header asks for (minimal when it names none).
    pub(crate) fn from_accept(accept: Option<&str>) -> Metadata {
        match accept {
            Some(a) if a.contains("odata=nometadata") => Metadata::None,
            Some(a) if a.contains("odata=fullmetadata") => Metadata::Full,
            _ => Metadata::Minimal,
        }
    }

    /// The `Content-Type` of a response at this level.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Metadata::None => "application/json;odata=nometadata;streaming=true;charset=utf-8",
            Metadata::Minimal => {
                "application/json;odata=minimalmetadata;streaming=true;charset=utf-8"
            }
            Metadata::Full => "application/json;odata=fullmetadata;streaming=true;charset=utf-8",
        }
    }
}

/// An entity from a request body: its keys and typed properties. One pass over the body's
/// members (annotations found by name, not searched for), refused as soon as it holds more
/// properties than an entity may.
pub(crate) fn entity_from_json(
    body: &[u8],
    keys: Option<&EntityKey>,
) -> Result<NewEntity, ValidationError> {
    let invalid = |why: String| ValidationError::Argument(why);
    let Members(members) = members_of(body)?;
    let mut annotations: HashMap<String, String> = HashMap::new();
    let mut system: [Option<Json>; 3] = [None, None, None];
    let mut custom = Vec::with_capacity(members.len());
    for (name, value) in members {
        if let Some(property) = name.strip_suffix("@odata.type") {
            let Json::String(annotation) = value else {
                return Err(invalid(format!("{} must be a string", quoted(&name))));
            };
            if annotations
                .insert(property.to_owned(), annotation)
                .is_some()
            {
                return Err(invalid(format!("{} appears twice", quoted(&name))));
            }
            continue;
        }
        let slot = match name.as_str() {
            "PartitionKey" => 0,
            "RowKey" => 1,
            "Timestamp" => 2,
            _ if name.contains('@') || name.starts_with("odata.") => continue,
            // Azure's leniency: a null property is simply absent.
            _ if value.is_null() => continue,
            _ => {
                custom.push((name, value));
                continue;
            }
        };
        if system[slot].replace(value).is_some() {
            return Err(invalid(format!("{name} appears twice")));
        }
    }
    let [partition_key, row_key, _] = system;
    let key_text = |name: &str, value: Option<Json>| match value {
        Some(Json::String(text)) => Ok(Some(text)),
        None => Ok(None),
        Some(_) => Err(invalid(format!("{name} must be a string"))),
    };
    let (partition_key, row_key) = (
        key_text("PartitionKey", partition_key)?,
        key_text("RowKey", row_key)?,
    );
    let key = entity_key(keys, partition_key, row_key)?;
    let mut properties = Properties::new();
    for (name, value) in custom {
        let annotation = annotations.get(&name).map(String::as_str);
        let value = match (annotation, value) {
            (None | Some("Edm.String"), Json::String(text)) => Value::String(text),
            (annotation, value) => typed(&name, &value, annotation)?,
        };
        if properties.contains_key(&name) {
            return Err(invalid(format!("property {} appears twice", quoted(&name))));
        }
        properties.insert(name, value);
    }
    NewEntity::new(key, properties)
}

/// The key of an entity whose body holds `partition_key` and `row_key`: the URL's `keys` if it
/// names them (a body naming others is refused), else the body's, both required.
fn entity_key(
    keys: Option<&EntityKey>,
    partition_key: Option<String>,
    row_key: Option<String>,
) -> Result<EntityKey, ValidationError> {
    let invalid = |why: String| ValidationError::Argument(why);
    let Some(keys) = keys else {
        return EntityKey::new(
            partition_key.ok_or_else(|| invalid("the entity has no PartitionKey".into()))?,
            row_key.ok_or_else(|| invalid("the entity has no RowKey".into()))?,
        );
    };
    // The URL names the entity; a body naming another would write where it does not say.
    for (name, given, named) in [
        ("PartitionKey", &partition_key, &keys.partition_key),
        ("RowKey", &row_key, &keys.row_key),
    ] {
        if let Some(given) = given.as_ref().filter(|given| *given != named) {
            return Err(invalid(format!(
                "the body's {name} {} is not the URL's {}: an entity's keys cannot change",
                quoted(given),
                quoted(named)
            )));
        }
    }
    Ok(keys.clone())
}

/// Members an entity's JSON may hold: each custom property with its annotation, the three system
/// properties with theirs, and a few `odata.` members. A body with more is refused while it is
/// being read, before the rest of it is parsed.
const MAX_MEMBERS: usize = 2 * (MAX_PROPERTIES + 3) + 8;

/// A JSON request body without the UTF-8 byte order mark some clients (Windows PowerShell's
/// UTF-8) write first, which Azure reads past and JSON parsers refuse.
pub(super) fn without_bom(body: &[u8]) -> &[u8] {
    body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body)
}

/// The members of the JSON object `body`, at most [`MAX_MEMBERS`] of them.
fn members_of(body: &[u8]) -> Result<Members, ValidationError> {
    let overflowed = Cell::new(false);
    let mut reader = serde_json::Deserializer::from_slice(without_bom(body));
    let members = MembersSeed {
        overflowed: &overflowed,
    }
    .deserialize(&mut reader)
    .and_then(|members| reader.end().map(|()| members));
    match members {
        Ok(members) => Ok(members),
        Err(_) if overflowed.get() => Err(ValidationError::TooManyProperties {
            count: MAX_MEMBERS / 2,
        }),
        Err(error) => Err(ValidationError::Argument(format!(
            "the body is not a JSON object: {error}"
        ))),
    }
}

/// A JSON object's members as written, in order: read without building a map of them.
struct Members(Vec<(String, Json)>);

/// Reads [`Members`], stopping (and saying so in `overflowed`) past [`MAX_MEMBERS`].
struct MembersSeed<'a> {
    overflowed: &'a Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for MembersSeed<'_> {
    type Value = Members;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Members, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MembersSeed<'_> {
    type Value = Members;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8).min(MAX_MEMBERS));
        while let Some(member) = map.next_entry::<String, Json>()? {
            if members.len() == MAX_MEMBERS {
                self.overflowed.set(true);
                return Err(serde::de::Error::custom("too many members"));
            }
            members.push(member);
        }
        Ok(Members(members))
    }
}

/// One property's value from its JSON and its `@odata.type`.
fn typed(name: &str, value: &Json, annotation: Option<&str>) -> Result<Value, ValidationError> {
    let wrong = |expected: &str| {
        let given = match value {
            Json::String(text) => quoted(text).to_string(),
            Json::Array(_) => "an array".to_owned(),
            Json::Object(_) => "an object".to_owned(),
            other => other.to_string(),
        };
        ValidationError::Argument(format!(
            "property {} is not a valid {expected}: {given}",
            quoted(name)
        ))
    };
    let text = || value.as_str().ok_or_else(|| wrong("string"));
    Ok(match (annotation, value) {
        (None | Some("Edm.String"), Json::String(s)) => Value::String(s.clone()),
        (None | Some("Edm.Boolean"), Json::Bool(b)) => Value::Bool(*b),
        (None, Json::Number(n)) => match n.as_i64() {
            Some(i) => match i32::try_from(i) {
                Ok(v) => Value::Int32(v),
                Err(_) => Value::Int64(i),
            },
            None => Value::Double(n.as_f64().ok_or_else(|| wrong("number"))?),
        },
        // Azure's leniency: a Boolean or an Int32 given as a string of its value.
        (Some("Edm.Boolean"), Json::String(s)) => Value::Bool(match s.as_str() {
            b if b.eq_ignore_ascii_case("true") => true,
            b if b.eq_ignore_ascii_case("false") => false,
            _ => return Err(wrong("Edm.Boolean")),
        }),
        (Some("Edm.Int32"), Json::Number(n)) => Value::Int32(
            n.as_i64()
                .and_then(|i| i32::try_from(i).ok())
                .ok_or_else(|| wrong("Edm.Int32"))?,
        ),
        (Some("Edm.Int32"), Json::String(s)) => {
            Value::Int32(s.trim().parse().map_err(|_| wrong("Edm.Int32"))?)
        }
        (Some("Edm.Int64"), _) => Value::Int64(
            match value {
                Json::Number(n) => n.as_i64(),
                _ => text()?.parse().ok(),
            }
            .ok_or_else(|| wrong("Edm.Int64"))?,
        ),
        (Some("Edm.Double"), Json::Number(n)) => {
            Value::Double(n.as_f64().ok_or_else(|| wrong("Edm.Double"))?)
        }
        (Some("Edm.Double"), Json::String(s)) => Value::Double(match s.as_str() {
            "NaN" => f64::NAN,
            "Infinity" | "INF" => f64::INFINITY,
            "-Infinity" | "-INF" => f64::NEG_INFINITY,
            other => other.parse().map_err(|_| wrong("Edm.Double"))?,
        }),
        (Some("Edm.DateTime"), _) => Value::DateTime(Ticks(
            parse_datetime(text()?).ok_or_else(|| wrong("Edm.DateTime"))?,
        )),
        (Some("Edm.Guid"), _) => {
            Value::Guid(Uuid::parse_str(text()?).map_err(|_| wrong("Edm.Guid"))?)
        }
        (Some("Edm.Binary"), _) => {
            Value::Binary(STANDARD.decode(text()?).map_err(|_| wrong("Edm.Binary"))?)
        }
        (Some(known @ ("Edm.String" | "Edm.Boolean" | "Edm.Int32" | "Edm.Double")), _) => {
            return Err(wrong(known))
        }
        (Some(other), _) => {
            return Err(ValidationError::Argument(format!(
                "property {} has the unknown type {}",
                quoted(name),
                quoted(other)
            )))
        }
        (None, _) => return Err(wrong("value (null, arrays and objects are not)")),
    })
}

/// A DateTime as SDKs write it: ISO 8601 UTC, up to 7 fractional digits (more are cut), `Z` or
/// `+00:00`.
fn parse_datetime(text: &str) -> Option<i64> {
    let text = text
        .strip_suffix("+00:00")
        .map_or(text.to_owned(), |t| format!("{t}Z"));
    let (body, fraction) = match text.split_once('.') {
        Some((body, fraction)) => {
            let digits: String = fraction.trim_end_matches('Z').chars().take(7).collect();
            (body.to_owned(), format!(".{digits}Z"))
        }
        None => (text.trim_end_matches('Z').to_owned(), "Z".to_owned()),
    };
    trestle_proto::datetime::parse(&format!("{body}{fraction}"))
}

/// Which of an entity's properties an answer shows: as Azure, a `$select` shows what it names
/// only, `PartitionKey`, `RowKey` and `Timestamp` included; without one (or with `*`), all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Projection {
    pub(crate) partition_key: bool,
    pub(crate) row_key: bool,
    pub(crate) timestamp: bool,
    /// The custom properties (those `$select` names, read as such, or all of them).
    pub(crate) custom: bool,
}

impl Projection {
    /// Every property.
    pub(crate) const ALL: Projection = Projection {
        partition_key: true,
        row_key: true,
        timestamp: true,
        custom: true,
    };

    /// What a `$select` of `select` shows.
    pub(crate) fn of_select(select: Option<&str>) -> Projection {
        let Some(select) = select else {
            return Projection::ALL;
        };
        let names: Vec<&str> = select
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect();
        if names.is_empty() || names.contains(&"*") {
            return Projection::ALL;
        }
        let system = ["PartitionKey", "RowKey", "Timestamp"];
        Projection {
            partition_key: names.contains(&"PartitionKey"),
            row_key: names.contains(&"RowKey"),
            timestamp: names.contains(&"Timestamp"),
            custom: names.iter().any(|name| !system.contains(name)),
        }
    }
}

/// Where an entity's JSON goes, and what names it: `base` (the account's URL) and `table` name
/// it in full metadata; `context`, when given, leads it as `odata.metadata` (a response of one
/// entity rather than an element of `value`); `shown`, which properties it holds.
pub(crate) struct EntityJson<'a> {
    pub(crate) shown: Projection,
    pub(crate) metadata: Metadata,
    pub(crate) base: &'a str,
    pub(crate) table: &'a str,
    pub(crate) context: Option<String>,
}

impl<'a> EntityJson<'a> {
    /// The writer of a response of one entity of `table`: `odata.metadata` leads it unless
    /// `metadata` is none.
    pub(crate) fn element(metadata: Metadata, base: &'a str, table: &'a str) -> EntityJson<'a> {
        let context =
            (metadata != Metadata::None).then(|| format!("{base}/$metadata#{table}/@Element"));
        EntityJson {
            shown: Projection::ALL,
            metadata,
            base,
            table,
            context,
        }
    }

    /// The same writer, showing only `shown`.
    pub(crate) fn showing(self, shown: Projection) -> EntityJson<'a> {
        EntityJson { shown, ..self }
    }

    /// Writes the JSON object of an entity read in place to `out`.
    pub(crate) fn write_view(
        &self,
        out: &mut String,
        entity: &EntityView<'_>,
    ) -> Result<(), StorageError> {
        let keys = (entity.partition_key, entity.row_key, entity.timestamp);
        self.write(out, keys, entity.shown_properties())
    }

    /// The JSON object of an entity as a write stored it.
    pub(crate) fn stored(&self, entity: &StoredEntity) -> String {
        let keys = (
            entity.key.partition_key.as_str(),
            entity.key.row_key.as_str(),
            entity.timestamp,
        );
        let properties = entity
            .properties
            .iter()
            .map(|(name, value)| Ok((name.as_str(), Shown::Stored(value.borrowed()))));
        let mut out = String::new();
        self.write(&mut out, keys, properties)
            .expect("owned properties read without fault");
        out
    }

    /// Writes the object straight from the entity's values: no JSON tree in between.
    fn write<'v>(
        &self,
        out: &mut String,
        (partition_key, row_key, timestamp): (&str, &str, Ticks),
        properties: impl Iterator<Item = Result<(&'v str, Shown<'v>), StorageError>>,
    ) -> Result<(), StorageError> {
        let mut object = JsonObject::open(out);
        if let Some(context) = &self.context {
            object.string("odata.metadata", context);
        }
        if self.metadata == Metadata::Full {
            // As Azure writes them: the type `<account>.<table>`, the absolute id, and the
            // edit link relative to the account.
            let link = format!(
                "{}(PartitionKey='{}',RowKey='{}')",
                self.table,
                quote_key(partition_key),
                quote_key(row_key)
            );
            object.string("odata.type", &format!("{ACCOUNT}.{}", self.table));
            object.string("odata.id", &format!("{}/{link}", self.base));
            object.string("odata.editLink", &link);
        }
        if self.metadata != Metadata::None {
            object.string("odata.etag", ETag::for_timestamp(timestamp).as_str());
        }
        if self.shown.partition_key {
            object.string("PartitionKey", partition_key);
        }
        if self.shown.row_key {
            object.string("RowKey", row_key);
        }
        if self.shown.timestamp {
            if self.metadata == Metadata::Full {
                // Minimal metadata leaves the system property's type out, as Azure does: the
                // model says what it is.
                object.string("Timestamp@odata.type", "Edm.DateTime");
            }
            object.key("Timestamp", "");
            write_value(object.out, ValueRef::DateTime(timestamp));
        }
        for property in properties {
            let (name, shown) = property?;
            if !self.shown.custom {
                continue;
            }
            object.property(name, shown.value(), self.metadata);
        }
        object.out.push('}');
        Ok(())
    }
}

/// A JSON object of `members`, each annotated with its EDM type as an entity's properties are
/// at `metadata` (a row of `$apply`'s answer).
pub(crate) fn write_row<'v>(
    out: &mut String,
    metadata: Metadata,
    members: impl Iterator<Item = (&'v str, ValueRef<'v>)>,
) {
    let mut object = JsonObject::open(out);
    for (name, value) in members {
        object.property(name, value, metadata);
    }
    object.out.push('}');
}

/// A JSON object being written: its members, comma-separated.
struct JsonObject<'o> {
    out: &'o mut String,
    first: bool,
}

impl<'o> JsonObject<'o> {
    fn open(out: &'o mut String) -> JsonObject<'o> {
        out.push('{');
        JsonObject { out, first: true }
    }

    /// Starts the member named `name` followed by `suffix` (both already free of quotes).
    fn key(&mut self, name: &str, suffix: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        push_json_string(self.out, name);
        if !suffix.is_empty() {
            self.out.pop();
            self.out.push_str(suffix);
            self.out.push('"');
        }
        self.out.push(':');
    }

    fn string(&mut self, name: &str, value: &str) {
        self.key(name, "");
        push_json_string(self.out, value);
    }

    /// The member `name` holding `value`, after its `@odata.type` where `metadata` asks for it.
    fn property(&mut self, name: &str, value: ValueRef<'_>, metadata: Metadata) {
        let annotation = edm_type(value);
        let annotate = match metadata {
            Metadata::None => false,
            // A double is annotated too: JavaScript reads `1.0` as a whole number, Int32.
            Metadata::Minimal => !matches!(annotation, "Edm.String" | "Edm.Boolean" | "Edm.Int32"),
            Metadata::Full => true,
        };
        if annotate && !matches!(value, ValueRef::Null) {
            self.key(name, "@odata.type");
            push_json_string(self.out, annotation);
        }
        self.key(name, "");
        write_value(self.out, value);
    }
}

/// `text` as a JSON string.
fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    let mut clean_from = 0;
    for (at, byte) in text.bytes().enumerate() {
        let escaped = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&text[clean_from..at]);
        if escaped.is_empty() {
            let _ = write!(out, "\\u{byte:04x}");
        } else {
            out.push_str(escaped);
        }
        clean_from = at + 1;
    }
    out.push_str(&text[clean_from..]);
    out.push('"');
}

/// A value's EDM type.
fn edm_type(value: ValueRef<'_>) -> &'static str {
    match value {
        ValueRef::String(_) => "Edm.String",
        ValueRef::Bool(_) => "Edm.Boolean",
        ValueRef::Int32(_) => "Edm.Int32",
        ValueRef::Int64(_) => "Edm.Int64",
        ValueRef::Double(_) => "Edm.Double",
        ValueRef::DateTime(_) => "Edm.DateTime",
        ValueRef::Guid(_) => "Edm.Guid",
        ValueRef::Binary(_) => "Edm.Binary",
        // A document is its JSON text (see `write_value`); null occurs only inside one.
        ValueRef::Document(_) | ValueRef::Null => "Edm.String",
    }
}

/// A value's JSON: Int64 as a string (JSON numbers lose integers past 2^53), doubles that JSON
/// cannot write as Azure's names for them. A document is an Edm.String holding its JSON text, so
/// that every Azure SDK reads it unchanged (see docs/semantics.md).
fn write_value(out: &mut String, value: ValueRef<'_>) {
    match value {
        ValueRef::Document(document) => {
            let mut text = String::new();
            write_document(&mut text, document);
            push_json_string(out, &text);
        }
        ValueRef::Null => out.push_str("null"),
        ValueRef::String(s) => push_json_string(out, s),
        ValueRef::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        ValueRef::Int32(v) => {
            let _ = write!(out, "{v}");
        }
        ValueRef::Int64(v) => {
            let _ = write!(out, "\"{v}\"");
        }
        ValueRef::Double(v) => match Number::from_f64(v) {
            Some(n) => {
                let _ = write!(out, "{n}");
            }
            None if v.is_nan() => out.push_str("\"NaN\""),
            None if v > 0.0 => out.push_str("\"Infinity\""),
            None => out.push_str("\"-Infinity\""),
        },
        ValueRef::DateTime(t) => {
            out.push('"');
            trestle_proto::datetime::format_into(t.0, ":", out);
            out.push('"');
        }
        ValueRef::Guid(g) => {
            let mut buffer = Uuid::encode_buffer();
            push_json_string(out, g.hyphenated().encode_lower(&mut buffer));
        }
        ValueRef::Binary(b) => {
            out.push('"');
            STANDARD.encode_string(b, out);
            out.push('"');
        }
    }
}

/// A document as JSON: objects and arrays as JSON's, leaves as [`write_value`] writes a property.
fn write_document(out: &mut String, document: DocumentRef<'_>) {
    let nested = |out: &mut String, value| match value {
        ValueRef::Document(inner) => write_document(out, inner),
        leaf => write_value(out, leaf),
    };
    if document.is_array() {
        out.push('[');
        for (at, value) in document.elements().enumerate() {
            if at > 0 {
                out.push(',');
            }
            nested(out, value);
        }
        out.push(']');
    } else {
        out.push('{');
        for (at, (name, value)) in document.members().enumerate() {
            if at > 0 {
                out.push(',');
            }
            push_json_string(out, name);
            out.push(':');
            nested(out, value);
        }
        out.push('}');
    }
}

/// A key as it appears quoted in a URL: `'` doubled.
pub(crate) fn quote_key(key: &str) -> String {
    key.replace('\'', "''")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NewEntity;

    #[test]
    fn azures_leniencies_typed_strings_and_null_properties() {
        let entity = entity_from_json(
            br#"{"PartitionKey":"p","RowKey":"r","B":"false","B@odata.type":"Edm.Boolean",
                "I":"32","I@odata.type":"Edm.Int32","N":null,"S":"x"}"#,
            None,
        )
        .unwrap();
        assert_eq!(entity.properties["B"], Value::Bool(false));
        assert_eq!(entity.properties["I"], Value::Int32(32));
        assert!(!entity.properties.contains_key("N"));
        let refused = |body: &str| {
            entity_from_json(body.as_bytes(), None)
                .unwrap_err()
                .to_string()
        };
        let not_bool = refused(
            r#"{"PartitionKey":"p","RowKey":"r","B":"maybe","B@odata.type":"Edm.Boolean"}"#,
        );
        assert!(not_bool.contains("not a valid Edm.Boolean"), "{not_bool}");
        let not_int =
            refused(r#"{"PartitionKey":"p","RowKey":"r","I":[1],"I@odata.type":"Edm.Int32"}"#);
        assert!(not_int.contains("not a valid Edm.Int32"), "{not_int}");
        assert!(refused(
            r#"{"PartitionKey":"p","RowKey":"r","I":"1x","I@odata.type":"Edm.Int32"}"#
        )
        .contains("Edm.Int32"));
    }

    #[test]
    fn bodies_that_are_not_one_entity_are_refused_with_the_reason() {
        let refused = |body: &str| {
            entity_from_json(body.as_bytes(), None)
                .unwrap_err()
                .to_string()
        };
        assert!(refused("[1]").contains("not a JSON object"));
        assert!(refused(r#"{"PartitionKey":"p","RowKey":"r","A":1,"A":2}"#).contains("twice"));
        assert!(refused(r#"{"PartitionKey":"p"}"#).contains("no RowKey"));
        assert!(
            refused(r#"{"PartitionKey":"p","RowKey":"r","A":1,"A@odata.type":7}"#)
                .contains("must be a string")
        );
        assert!(refused(r#"{"PartitionKey":"p","RowKey":"r","A":[1]}"#).contains("'A'"));
        let ok = entity_from_json(br#"{"PartitionKey":"p","RowKey":"r","A":"x"}"#, None).unwrap();
        assert_eq!(ok.properties["A"], Value::String("x".into()));
    }

    #[test]
    fn entities_are_written_as_json_that_reads_back_with_their_types() {
        let mut properties = Properties::new();
        properties.insert("Text".into(), Value::String("a \"q\"\\\n\u{1}é".into()));
        properties.insert("Big".into(), Value::Int64(i64::MIN));
        properties.insert("Half".into(), Value::Double(0.5));
        properties.insert("One".into(), Value::Double(1.0));
        properties.insert("Inf".into(), Value::Double(f64::INFINITY));
        properties.insert("Small".into(), Value::Int32(-7));
        properties.insert("Yes".into(), Value::Bool(true));
        properties.insert("Bytes".into(), Value::Binary(vec![0, 255]));
        properties.insert("Id".into(), Value::Guid(Uuid::from_u128(1)));
        let key = EntityKey::new("p\"".into(), "r'".into()).unwrap();
        let entity = NewEntity::new(key, properties).unwrap();
        let stored = StoredEntity {
            key: entity.key.clone(),
            properties: entity.properties.clone(),
            timestamp: Ticks(1),
        };
        for metadata in [Metadata::None, Metadata::Minimal, Metadata::Full] {
            let writer = EntityJson {
                shown: Projection::ALL,
                metadata,
                base: "http://h/a",
                table: "T",
                context: Some("http://h/a/$metadata#T/@Element".into()),
            };
            let json: Json = serde_json::from_str(&writer.stored(&stored)).unwrap();
            let body = serde_json::to_vec(&json).unwrap();
            let back = entity_from_json(&body, None).unwrap();
            assert_eq!(back.key, entity.key);
            assert_eq!(json["Text"], "a \"q\"\\\n\u{1}é");
            assert_eq!(json["Timestamp"], "1970-01-01T00:00:00.0000001Z");
            if metadata == Metadata::None {
                continue;
            }
            assert_eq!(back.properties, entity.properties, "{metadata:?}");
            assert_eq!(json["odata.metadata"], "http://h/a/$metadata#T/@Element");
            assert_eq!(
                json["Small@odata.type"].is_string(),
                metadata == Metadata::Full
            );
        }
    }
}
