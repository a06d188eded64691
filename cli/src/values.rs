//! Property values as the command line writes them (`Age:int32=42`) and as JSON lines hold them
//! (`{"Int32": 42}`), both keeping every EDM type exactly; and as a table cell shows them.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::{json, Map, Number, Value as Json};
use trestle_client::{DateTime, Entity, EntityKey, Properties, Value};

use crate::CliError;

/// A property from `Name=value` (a String) or `Name:type=value`.
pub(crate) fn parse_property(text: &str) -> Result<(String, Value), CliError> {
    let usage = |why: &str| CliError::Usage(format!("property {text:?}: {why}"));
    let (left, raw) = text
        .split_once('=')
        .ok_or_else(|| usage("write Name=value or Name:type=value"))?;
    let (name, kind) = left.split_once(':').unwrap_or((left, "string"));
    let bad = |e: &dyn std::fmt::Display| usage(&format!("not a {kind}: {e}"));
    let value = match kind.to_ascii_lowercase().as_str() {
        "string" => Value::String(raw.to_owned()),
        "int32" => Value::Int32(raw.parse().map_err(|e| bad(&e))?),
        "int64" => Value::Int64(raw.parse().map_err(|e| bad(&e))?),
        "double" => Value::Double(raw.parse().map_err(|e| bad(&e))?),
        "bool" | "boolean" => Value::Bool(raw.parse().map_err(|e| bad(&e))?),
        "datetime" => Value::DateTime(raw.parse::<DateTime>().map_err(|e| bad(&e))?),
        "guid" => Value::Guid(raw.parse().map_err(|e| bad(&e))?),
        "binary" => Value::Binary(STANDARD.decode(raw).map_err(|e| bad(&e))?),
        "json" => plain(&serde_json::from_str(raw).map_err(|e| bad(&e))?),
        _ => return Err(usage(
            "the type is one of string, int32, int64, double, bool, datetime, guid, binary, json",
        )),
    };
    Ok((name.to_owned(), value))
}

/// A value from plain JSON (`json` properties): objects and arrays are documents, integers
/// Int64, other numbers Double.
fn plain(json: &Json) -> Value {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int64(i),
            None => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::String(s.clone()),
        Json::Array(items) => Value::Array(items.iter().map(plain).collect()),
        Json::Object(members) => Value::Object(
            members
                .iter()
                .map(|(name, value)| (name.clone(), plain(value)))
                .collect(),
        ),
    }
}

/// A value as typed JSON: `{"<EDM type>": value}`, Int64 as a decimal string, Binary in
/// base64, a Double that JSON cannot write as `"NaN"`, `"Infinity"` or `"-Infinity"`.
pub(crate) fn typed(value: &Value) -> Json {
    match value {
        Value::String(s) => json!({ "String": s }),
        Value::Int32(v) => json!({ "Int32": v }),
        Value::Int64(v) => json!({ "Int64": v.to_string() }),
        Value::Double(v) => json!({ "Double": double(*v) }),
        Value::Bool(v) => json!({ "Boolean": v }),
        Value::DateTime(t) => json!({ "DateTime": t.to_rfc3339() }),
        Value::Guid(g) => json!({ "Guid": g.hyphenated().to_string() }),
        Value::Binary(b) => json!({ "Binary": STANDARD.encode(b) }),
        Value::Null => json!({ "Null": null }),
        Value::Object(members) => {
            let members: Map<String, Json> =
                members.iter().map(|(n, v)| (n.clone(), typed(v))).collect();
            json!({ "Object": members })
        }
        Value::Array(values) => json!({ "Array": values.iter().map(typed).collect::<Vec<_>>() }),
    }
}

fn double(v: f64) -> Json {
    match Number::from_f64(v) {
        Some(n) => Json::Number(n),
        None if v.is_nan() => json!("NaN"),
        None if v > 0.0 => json!("Infinity"),
        None => json!("-Infinity"),
    }
}

/// A value from typed JSON (what [`typed`] writes).
pub(crate) fn from_typed(json: &Json) -> Result<Value, String> {
    let Some((kind, inner)) = json.as_object().and_then(|o| o.iter().next()) else {
        return Err(format!("{json} is not {{\"<type>\": value}}"));
    };
    leaf(kind, inner)
}

/// A value of the type named `kind` (`Int64`, `Object`, ...) from its JSON form: Int64 as a
/// decimal string, a Double as a number or `"NaN"`, `"Infinity"`, `"-Infinity"`, Binary in
/// base64, members and elements of documents typed in turn.
pub(crate) fn leaf(kind: &str, inner: &Json) -> Result<Value, String> {
    let text = || {
        inner
            .as_str()
            .ok_or_else(|| format!("{kind} {inner} is not text"))
    };
    let bad = |e: &dyn std::fmt::Display| format!("{kind} {inner}: {e}");
    Ok(match kind {
        "String" => Value::String(text()?.to_owned()),
        "Int32" => Value::Int32(
            inner
                .as_i64()
                .and_then(|v| i32::try_from(v).ok())
                .ok_or_else(|| bad(&"not an Int32"))?,
        ),
        "Int64" => Value::Int64(text()?.parse().map_err(|e| bad(&e))?),
        "Double" => Value::Double(match inner {
            Json::Number(n) => n.as_f64().unwrap_or(f64::NAN),
            _ => text()?.parse().map_err(|e| bad(&e))?,
        }),
        "Boolean" => Value::Bool(inner.as_bool().ok_or_else(|| bad(&"not a Boolean"))?),
        "DateTime" => Value::DateTime(text()?.parse::<DateTime>().map_err(|e| bad(&e))?),
        "Guid" => Value::Guid(text()?.parse().map_err(|e| bad(&e))?),
        "Binary" => Value::Binary(STANDARD.decode(text()?).map_err(|e| bad(&e))?),
        "Null" => Value::Null,
        "Object" => Value::Object(
            inner
                .as_object()
                .ok_or_else(|| bad(&"not an object"))?
                .iter()
                .map(|(name, value)| Ok((name.clone(), from_typed(value)?)))
                .collect::<Result<BTreeMap<_, _>, String>>()?,
        ),
        "Array" => Value::Array(
            inner
                .as_array()
                .ok_or_else(|| bad(&"not an array"))?
                .iter()
                .map(from_typed)
                .collect::<Result<_, _>>()?,
        ),
        other => return Err(format!("unknown type {other:?}")),
    })
}

/// One entity as a JSON line: keys, Timestamp, ETag and typed properties.
pub(crate) fn entity_line(entity: &Entity<Properties>) -> String {
    let properties: Map<String, Json> = entity
        .value
        .0
        .iter()
        .map(|(name, value)| (name.clone(), typed(value)))
        .collect();
    json!({
        "PartitionKey": entity.key.partition_key,
        "RowKey": entity.key.row_key,
        "Timestamp": entity.timestamp.to_rfc3339(),
        "ETag": entity.etag.as_str(),
        "Properties": properties,
    })
    .to_string()
}

/// The keys of an entity in JSON: its `PartitionKey` and `RowKey` members.
pub(crate) fn entity_key(json: &Map<String, Json>) -> Result<EntityKey, String> {
    let key = |name: &str| match json.get(name) {
        Some(Json::String(key)) => Ok(key.clone()),
        Some(other) => Err(format!("{name} must be a string, not {other}")),
        None => Err(format!("no {name}")),
    };
    Ok(EntityKey::new(key("PartitionKey")?, key("RowKey")?))
}

/// The members of an entity's JSON line ([`entity_line`]).
const LINE_MEMBERS: [&str; 5] = ["PartitionKey", "RowKey", "Timestamp", "ETag", "Properties"];

/// The keys and properties of a JSON line (its Timestamp and ETag are ignored). A member the
/// format does not have is refused, not dropped: a property written beside the keys instead of
/// inside `Properties` would otherwise be lost without a word.
pub(crate) fn parse_entity_line(line: &str) -> Result<(EntityKey, Properties), String> {
    let json: Json = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let object = json
        .as_object()
        .ok_or_else(|| "not a JSON object".to_owned())?;
    if let Some(unknown) = object
        .keys()
        .find(|name| !LINE_MEMBERS.contains(&name.as_str()))
    {
        return Err(format!(
            "unknown member {unknown:?}: a line has PartitionKey, RowKey and Properties \
             (typed values, as `trestle export` writes them), Timestamp and ETag"
        ));
    }
    let key = entity_key(object)?;
    let mut properties = Properties::new();
    match object.get("Properties") {
        None => {}
        Some(Json::Object(members)) => {
            for (name, value) in members {
                properties.set(
                    name.clone(),
                    from_typed(value).map_err(|e| format!("{name}: {e}"))?,
                );
            }
        }
        Some(other) => return Err(format!("Properties must be an object, not {other}")),
    }
    Ok((key, properties))
}

/// A value as a table or CSV cell shows it: its text (a document as plain JSON).
pub(crate) fn cell(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Int32(v) => v.to_string(),
        Value::Int64(v) => v.to_string(),
        Value::Double(v) => v.to_string(),
        Value::Bool(v) => v.to_string(),
        Value::DateTime(t) => t.to_rfc3339(),
        Value::Guid(g) => g.hyphenated().to_string(),
        Value::Binary(b) => STANDARD.encode(b),
        Value::Null => "null".to_owned(),
        document => untyped(document).to_string(),
    }
}

/// A value as plain JSON (types left implicit), for showing a document in a cell.
fn untyped(value: &Value) -> Json {
    match value {
        Value::Object(members) => Json::Object(
            members
                .iter()
                .map(|(n, v)| (n.clone(), untyped(v)))
                .collect(),
        ),
        Value::Array(values) => Json::Array(values.iter().map(untyped).collect()),
        Value::Int32(v) => json!(v),
        Value::Double(v) => double(*v),
        Value::Bool(v) => json!(v),
        Value::Null => Json::Null,
        leaf => Json::String(cell(leaf)),
    }
}
