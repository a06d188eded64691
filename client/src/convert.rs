//! Private conversions between the SDK's types and the wire types: the only SDK file that names
//! `pb` message internals.

use std::collections::BTreeMap;

use trestle_proto::pb;
use uuid::Uuid;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::entity::{ETag, Entity, EntityKey, UpsertMode};
use crate::error::{Error, ErrorKind, Result};
use crate::mapping::{from_properties, to_properties};
use crate::value::{DateTime, Value};

pub(crate) fn value_to_pb(value: Value) -> pb::Value {
    use pb::value::Kind;
    let kind = match value {
        Value::String(s) => Kind::StringValue(s),
        Value::Int32(v) => Kind::Int32Value(v),
        Value::Int64(v) => Kind::Int64Value(v),
        Value::Double(v) => Kind::DoubleValue(v),
        Value::Bool(v) => Kind::BoolValue(v),
        Value::DateTime(t) => Kind::DatetimeValue(timestamp_to_pb(t)),
        Value::Guid(g) => Kind::GuidValue(g.hyphenated().to_string()),
        Value::Binary(b) => Kind::BinaryValue(b),
        Value::Null => Kind::NullValue(prost_types::NullValue::NullValue as i32),
        Value::Object(members) => Kind::ObjectValue(pb::ObjectValue {
            members: members
                .into_iter()
                .map(|(name, value)| (name, value_to_pb(value)))
                .collect(),
        }),
        Value::Array(values) => Kind::ArrayValue(pb::ArrayValue {
            values: values.into_iter().map(value_to_pb).collect(),
        }),
    };
    pb::Value { kind: Some(kind) }
}

pub(crate) fn value_from_pb(name: &str, value: pb::Value) -> Result<Value> {
    use pb::value::Kind;
    let kind = value
        .kind
        .ok_or_else(|| Error::new(ErrorKind::Mapping, format!("property {name} has no value")))?;
    Ok(match kind {
        Kind::StringValue(s) => Value::String(s),
        Kind::Int32Value(v) => Value::Int32(v),
        Kind::Int64Value(v) => Value::Int64(v),
        Kind::DoubleValue(v) => Value::Double(v),
        Kind::BoolValue(v) => Value::Bool(v),
        Kind::DatetimeValue(t) => Value::DateTime(timestamp_from_pb(t)),
        Kind::GuidValue(g) => Value::Guid(
            Uuid::parse_str(&g)
                .map_err(|e| Error::new(ErrorKind::Mapping, format!("property {name}: {e}")))?,
        ),
        Kind::BinaryValue(b) => Value::Binary(b),
        Kind::NullValue(_) => Value::Null,
        Kind::ObjectValue(object) => Value::Object(
            object
                .members
                .into_iter()
                .map(|(member, value)| Ok((member, value_from_pb(name, value)?)))
                .collect::<Result<_>>()?,
        ),
        Kind::ArrayValue(array) => Value::Array(
            array
                .values
                .into_iter()
                .map(|value| value_from_pb(name, value))
                .collect::<Result<_>>()?,
        ),
    })
}

pub(crate) fn timestamp_to_pb(t: DateTime) -> prost_types::Timestamp {
    let (seconds, nanos) = t.to_unix();
    prost_types::Timestamp {
        seconds,
        nanos: nanos as i32,
    }
}

pub(crate) fn timestamp_from_pb(t: prost_types::Timestamp) -> DateTime {
    DateTime::from_unix(t.seconds, t.nanos.max(0) as u32)
}

/// A wire entity from keys and properties.
pub(crate) fn entity_to_pb(key: &EntityKey, properties: BTreeMap<String, Value>) -> pb::Entity {
    pb::Entity {
        partition_key: key.partition_key.clone(),
        row_key: key.row_key.clone(),
        properties: properties
            .into_iter()
            .map(|(n, v)| (n, value_to_pb(v)))
            .collect(),
        ..Default::default()
    }
}

/// Keys, version and properties of a wire entity.
pub(crate) fn entity_from_pb(
    entity: pb::Entity,
) -> Result<(EntityKey, ETag, DateTime, BTreeMap<String, Value>)> {
    // The wire map iterates in name order, so each property goes at the end of the new map,
    // without the vector, sort and rebuild that collecting through `Result` costs.
    let mut properties = BTreeMap::new();
    for (name, value) in entity.properties {
        let value = value_from_pb(&name, value)?;
        properties.insert(name, value);
    }
    Ok((
        EntityKey::new(entity.partition_key, entity.row_key),
        ETag::new(entity.etag),
        entity
            .timestamp
            .map(timestamp_from_pb)
            .unwrap_or(DateTime::from_ticks(0)),
        properties,
    ))
}

/// The wire entity for a key and a serializable value; a mapping error names the field and the
/// entity's keys.
pub(crate) fn wire<T: Serialize + ?Sized>(key: &EntityKey, value: &T) -> Result<pb::Entity> {
    let properties = to_properties(value).map_err(|error| {
        Error::new(
            ErrorKind::Mapping,
            format!(
                "entity (PartitionKey '{}', RowKey '{}') cannot be stored from {}: {}",
                key.partition_key,
                key.row_key,
                std::any::type_name::<T>(),
                error.0
            ),
        )
    })?;
    Ok(entity_to_pb(key, properties))
}

pub(crate) fn upsert_mode(mode: UpsertMode) -> pb::UpsertMode {
    match mode {
        UpsertMode::Replace => pb::UpsertMode::Replace,
        UpsertMode::Merge => pb::UpsertMode::Merge,
    }
}

/// A wire entity as an `Entity<T>`; a mapping error names the entity's keys.
pub(crate) fn typed<T: DeserializeOwned>(entity: pb::Entity) -> Result<Entity<T>> {
    let (key, etag, timestamp, properties) = entity_from_pb(entity)?;
    let value = from_properties(properties).map_err(|error| {
        Error::new(
            ErrorKind::Mapping,
            format!(
                "entity (PartitionKey '{}', RowKey '{}') does not decode as {}: {}",
                key.partition_key,
                key.row_key,
                std::any::type_name::<T>(),
                error.0
            ),
        )
    })?;
    Ok(Entity {
        key,
        etag,
        timestamp,
        value,
    })
}

/// A patch's steps on the wire.
pub(crate) fn patch_steps(patch: &crate::patch::Patch) -> Result<Vec<pb::PatchStep>> {
    use crate::patch::Step;
    if let Some(why) = &patch.unmappable {
        return Err(Error::new(ErrorKind::Mapping, why.clone()));
    }
    use pb::patch_step::Step as Wire;
    let set = |property: &String, value: &Value| pb::SetStep {
        property: property.clone(),
        value: Some(value_to_pb(value.clone())),
    };
    Ok(patch
        .steps
        .iter()
        .map(|step| pb::PatchStep {
            step: Some(match step {
                Step::Increment(property, by) => Wire::Increment(pb::IncrementStep {
                    property: property.clone(),
                    by: Some(value_to_pb(by.clone())),
                }),
                Step::Set(property, value) => Wire::Set(set(property, value)),
                Step::Remove(property) => Wire::Remove(pb::RemoveStep {
                    property: property.clone(),
                }),
                Step::SetIfAbsent(property, value) => Wire::SetIfAbsent(set(property, value)),
                Step::Max(property, value) => Wire::Max(set(property, value)),
                Step::Min(property, value) => Wire::Min(set(property, value)),
                Step::Append(property, value, keep_last) => Wire::Append(pb::AppendStep {
                    property: property.clone(),
                    value: Some(value_to_pb(value.clone())),
                    keep_last: *keep_last,
                }),
                Step::AddToSet(property, value) => Wire::AddToSet(set(property, value)),
                Step::RemoveValue(property, value) => Wire::RemoveValue(set(property, value)),
            }),
        })
        .collect())
}

/// A patch's condition on the wire: empty for none.
pub(crate) fn patch_if_match(patch: &crate::patch::Patch) -> String {
    patch
        .if_match
        .as_ref()
        .map(|if_match| if_match.to_wire())
        .unwrap_or_default()
}

/// A patch's condition on the wire (empty for none).
pub(crate) fn patch_condition(patch: &crate::patch::Patch) -> String {
    patch
        .condition
        .as_ref()
        .map(|filter| filter.as_str().to_owned())
        .unwrap_or_default()
}
