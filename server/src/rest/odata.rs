//! Entities in Azure's OData JSON: typed properties with `@odata.type` annotations in, and out at
//! the metadata level the client asked for (`nometadata`, `minimalmetadata`, `fullmetadata`).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::{Map, Number, Value as Json};
use uuid::Uuid;

use crate::model::{
    ETag, EntityKey, NewEntity, Properties, StoredEntity, Ticks, ValidationError, Value, ValueRef,
};
use crate::storage::{EntityView, StorageError};

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

/// An entity from a request body: its keys and typed properties.
pub(crate) fn entity_from_json(
    body: &[u8],
    keys: Option<&EntityKey>,
) -> Result<NewEntity, ValidationError> {
    let invalid = |why: String| ValidationError::Argument(why);
    let json: Json =
        serde_json::from_slice(body).map_err(|e| invalid(format!("the body is not JSON: {e}")))?;
    let Json::Object(object) = json else {
        return Err(invalid("the body is not a JSON object".into()));
    };
    let text = |name: &str| match object.get(name) {
        Some(Json::String(s)) => Ok(Some(s.clone())),
        None => Ok(None),
        Some(_) => Err(invalid(format!("{name} must be a string"))),
    };
    let key = match keys {
        Some(keys) => keys.clone(),
        None => EntityKey::new(
            text("PartitionKey")?
                .ok_or_else(|| invalid("the entity has no PartitionKey".into()))?,
            text("RowKey")?.ok_or_else(|| invalid("the entity has no RowKey".into()))?,
        )?,
    };
    let mut properties = Properties::new();
    for (name, value) in &object {
        if name.contains('@')
            || name.starts_with("odata.")
            || matches!(name.as_str(), "PartitionKey" | "RowKey" | "Timestamp")
        {
            continue;
        }
        let annotation = match object.get(&format!("{name}@odata.type")) {
            Some(Json::String(t)) => Some(t.as_str()),
            Some(_) => return Err(invalid(format!("{name}@odata.type must be a string"))),
            None => None,
        };
        properties.insert(name.clone(), typed(name, value, annotation)?);
    }
    NewEntity::new(key, properties)
}

/// One property's value from its JSON and its `@odata.type`.
fn typed(name: &str, value: &Json, annotation: Option<&str>) -> Result<Value, ValidationError> {
    let wrong = |expected: &str| {
        ValidationError::Argument(format!(
            "property {name:?} is not a valid {expected}: {value}"
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
        (Some("Edm.Int32"), Json::Number(n)) => Value::Int32(
            n.as_i64()
                .and_then(|i| i32::try_from(i).ok())
                .ok_or_else(|| wrong("Edm.Int32"))?,
        ),
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
        (Some(other), _) => {
            return Err(ValidationError::Argument(format!(
                "property {name:?} has the unknown type {other:?}"
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

/// The JSON of an entity read in place, at `metadata`; `table` and `base` (the account's URL)
/// name it in full metadata.
pub(crate) fn entity_to_json(
    entity: &EntityView<'_>,
    metadata: Metadata,
    base: &str,
    table: &str,
) -> Result<Map<String, Json>, StorageError> {
    let keys = (entity.partition_key, entity.row_key, entity.timestamp);
    to_json(keys, entity.properties(), metadata, base, table)
}

/// The JSON of an entity as a write stored it.
pub(crate) fn stored_to_json(
    entity: &StoredEntity,
    metadata: Metadata,
    base: &str,
    table: &str,
) -> Map<String, Json> {
    let keys = (
        entity.key.partition_key.as_str(),
        entity.key.row_key.as_str(),
        entity.timestamp,
    );
    let properties = entity
        .properties
        .iter()
        .map(|(name, value)| Ok((name.as_str(), value.borrowed())));
    to_json(keys, properties, metadata, base, table).expect("owned properties read without fault")
}

fn to_json<'a>(
    (partition_key, row_key, timestamp): (&str, &str, Ticks),
    properties: impl Iterator<Item = Result<(&'a str, ValueRef<'a>), StorageError>>,
    metadata: Metadata,
    base: &str,
    table: &str,
) -> Result<Map<String, Json>, StorageError> {
    let mut out = Map::new();
    let etag = ETag::for_timestamp(timestamp);
    if metadata != Metadata::None {
        if metadata == Metadata::Full {
            let id = format!(
                "{base}/{table}(PartitionKey='{}',RowKey='{}')",
                quote_key(partition_key),
                quote_key(row_key)
            );
            out.insert(
                "odata.type".into(),
                Json::String(format!("account.{table}")),
            );
            out.insert("odata.id".into(), Json::String(id.clone()));
            out.insert("odata.editLink".into(), Json::String(id));
        }
        out.insert("odata.etag".into(), Json::String(etag.into_string()));
    }
    out.insert("PartitionKey".into(), partition_key.into());
    out.insert("RowKey".into(), row_key.into());
    if metadata != Metadata::None {
        out.insert("Timestamp@odata.type".into(), "Edm.DateTime".into());
    }
    out.insert(
        "Timestamp".into(),
        trestle_proto::datetime::format(timestamp.0).into(),
    );
    for property in properties {
        let (name, value) = property?;
        let (json, annotation) = value_to_json(value);
        let annotate = match metadata {
            Metadata::None => false,
            // A double is annotated too: JavaScript reads `1.0` as a whole number, Int32.
            Metadata::Minimal => !matches!(annotation, "Edm.String" | "Edm.Boolean" | "Edm.Int32"),
            Metadata::Full => true,
        };
        if annotate {
            out.insert(format!("{name}@odata.type"), annotation.into());
        }
        out.insert(name.to_owned(), json);
    }
    Ok(out)
}

/// A value's JSON and its EDM type.
fn value_to_json(value: ValueRef<'_>) -> (Json, &'static str) {
    match value {
        ValueRef::String(s) => (Json::String(s.to_owned()), "Edm.String"),
        ValueRef::Bool(b) => (Json::Bool(b), "Edm.Boolean"),
        ValueRef::Int32(v) => (Json::Number(v.into()), "Edm.Int32"),
        ValueRef::Int64(v) => (Json::String(v.to_string()), "Edm.Int64"),
        ValueRef::Double(v) => match Number::from_f64(v) {
            Some(n) => (Json::Number(n), "Edm.Double"),
            None if v.is_nan() => (Json::String("NaN".into()), "Edm.Double"),
            None if v > 0.0 => (Json::String("Infinity".into()), "Edm.Double"),
            None => (Json::String("-Infinity".into()), "Edm.Double"),
        },
        ValueRef::DateTime(t) => (
            Json::String(trestle_proto::datetime::format(t.0)),
            "Edm.DateTime",
        ),
        ValueRef::Guid(g) => (Json::String(g.hyphenated().to_string()), "Edm.Guid"),
        ValueRef::Binary(b) => (Json::String(STANDARD.encode(b)), "Edm.Binary"),
    }
}

/// A key as it appears quoted in a URL: `'` doubled.
pub(crate) fn quote_key(key: &str) -> String {
    key.replace('\'', "''")
}
