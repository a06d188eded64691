//! Conversions between the wire types (`pb`) and the model, validating on the way in.

use prost_types::Timestamp;
use trestle_proto::pb;
use uuid::Uuid;

use crate::consumers::{Consumers, RangeLease};
use crate::model::{
    quoted, AccessPolicy, CheckCondition, Document, EntityKey, IfMatch, Index, IndexDefinition,
    IndexScope, IndexState, NewEntity, Operation, PatchCondition, PatchStep, Properties, Spend,
    StoredEntity, Ticks, UpsertMode, ValidationError, Value, ValueRef, MAX_PROPERTIES,
};
use crate::query::aggregate::{AggregateSpec, Aggregation, Function, Group};

/// A request's entity, validated.
pub(crate) fn new_entity(entity: Option<pb::Entity>) -> Result<NewEntity, ValidationError> {
    let entity = entity.ok_or(ValidationError::EntityMissing)?;
    let key = EntityKey::new(entity.partition_key, entity.row_key)?;
    // Inserted one by one: the names come in order, so each goes at the end of the map, without
    // the vector, sort and rebuild that collecting into a map costs.
    let mut properties = Properties::new();
    for (name, value) in entity.properties {
        let value = value_from_pb(&name, value.kind)?;
        properties.insert(name, value);
    }
    NewEntity::new(key, properties)
}

/// A property's value; a refusal names the property, and the path inside a document.
fn value_from_pb(name: &str, kind: Option<pb::value::Kind>) -> Result<Value, ValidationError> {
    value_at(kind).map_err(|error| error.within(name))
}

/// A value whose refusals name paths relative to it (empty for the value itself).
fn value_at(kind: Option<pb::value::Kind>) -> Result<Value, ValidationError> {
    use pb::value::Kind;
    let kind = kind.ok_or(ValidationError::PropertyValueMissing {
        name: String::new(),
    })?;
    Ok(match kind {
        Kind::StringValue(s) => Value::String(s),
        Kind::Int32Value(v) => Value::Int32(v),
        Kind::Int64Value(v) => Value::Int64(v),
        Kind::DoubleValue(v) => Value::Double(v),
        Kind::BoolValue(v) => Value::Bool(v),
        Kind::DatetimeValue(t) => Value::DateTime(Ticks::from_unix(t.seconds, t.nanos).ok_or(
            ValidationError::DateTimeOutOfRange {
                name: String::new(),
            },
        )?),
        Kind::GuidValue(text) => Value::Guid(parse_guid("", &text)?),
        Kind::BinaryValue(bytes) => Value::Binary(bytes),
        Kind::NullValue(_) => Value::Null,
        Kind::ObjectValue(object) => {
            let members = object
                .members
                .into_iter()
                .map(|(name, value)| match value_at(value.kind) {
                    Ok(value) => Ok((name, value)),
                    Err(error) => Err(error.within(&name)),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Value::Document(Document::object(members)?)
        }
        Kind::ArrayValue(array) => {
            let values = array
                .values
                .into_iter()
                .enumerate()
                .map(|(at, value)| value_at(value.kind).map_err(|e| e.within(&at.to_string())))
                .collect::<Result<Vec<_>, _>>()?;
            Value::Document(Document::array(values)?)
        }
    })
}

fn parse_guid(name: &str, text: &str) -> Result<Uuid, ValidationError> {
    let canonical = text.len() == 36
        && text.char_indices().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    canonical
        .then(|| Uuid::try_parse(text).ok())
        .flatten()
        .ok_or_else(|| ValidationError::GuidInvalid {
            name: name.to_owned(),
            value: text.to_owned(),
        })
}

/// An entity's keys from a request, validated.
pub(crate) fn entity_key(
    partition_key: String,
    row_key: String,
) -> Result<EntityKey, ValidationError> {
    EntityKey::new(partition_key, row_key)
}

/// An upsert mode from its wire number.
pub(crate) fn upsert_mode(mode: i32) -> Result<UpsertMode, ValidationError> {
    match pb::UpsertMode::try_from(mode) {
        Ok(pb::UpsertMode::Replace) => Ok(UpsertMode::Replace),
        Ok(pb::UpsertMode::Merge) => Ok(UpsertMode::Merge),
        Err(_) => Err(ValidationError::Argument(format!(
            "upsert mode {mode} is unknown: use REPLACE or MERGE"
        ))),
    }
}

/// One transaction operation, validated on its own (the transaction's rules come later), its
/// condition's work charged to the request's `spend`.
pub(crate) fn operation(
    operation: pb::TransactionOperation,
    partition_key: &str,
    spend: &mut Spend,
) -> Result<Operation, ValidationError> {
    use pb::transaction_operation::Operation as Op;
    let operation = operation.operation.ok_or_else(|| {
        ValidationError::Argument(
            "the operation has no kind: set one of insert, update, merge, upsert, delete, check, patch"
                .into(),
        )
    })?;
    Ok(match operation {
        Op::Insert(op) => Operation::Insert(new_entity(op.entity)?),
        Op::Update(op) => Operation::Update(new_entity(op.entity)?, IfMatch::parse(&op.if_match)?),
        Op::Merge(op) => Operation::Merge(new_entity(op.entity)?, IfMatch::parse(&op.if_match)?),
        Op::Upsert(op) => Operation::Upsert(new_entity(op.entity)?, upsert_mode(op.mode)?),
        Op::Delete(op) => Operation::Delete {
            if_match: IfMatch::parse(&op.if_match)?,
            key: EntityKey::new(partition_key.to_owned(), op.row_key)?,
        },
        Op::Patch(op) => patch(
            EntityKey::new(partition_key.to_owned(), op.row_key)?,
            op.operations,
            &op.if_match,
            op.upsert,
            op.condition,
            spend,
        )?,
        Op::Check(op) => {
            let key = EntityKey::new(partition_key.to_owned(), op.row_key)?;
            let condition = match (op.if_match.as_str(), op.must_not_exist) {
                ("", true) => CheckCondition::NotExists,
                ("", false) => CheckCondition::Exists(IfMatch::Any),
                (tag, false) => CheckCondition::Exists(IfMatch::parse(tag)?),
                (_, true) => {
                    return Err(ValidationError::Argument(
                        "a check takes if_match or must_not_exist, not both".into(),
                    ))
                }
            };
            Operation::Check { key, condition }
        }
    })
}

/// A patch of the entity `key`, validated: 1 to 252 steps; `if_match` empty for no condition,
/// and no condition with `upsert`; `condition` empty or a filter the entity must meet, its work
/// charged to the request's `spend`.
pub(crate) fn patch(
    key: EntityKey,
    steps: Vec<pb::PatchStep>,
    if_match: &str,
    upsert: bool,
    condition: String,
    spend: &mut Spend,
) -> Result<Operation, ValidationError> {
    if steps.is_empty() || steps.len() > MAX_PROPERTIES {
        return Err(ValidationError::Argument(format!(
            "a patch has {} steps; it takes 1 to {MAX_PROPERTIES}",
            steps.len()
        )));
    }
    let if_match = match if_match {
        "" => IfMatch::Any,
        tag if upsert => {
            return Err(ValidationError::Argument(format!(
                "a patch with upsert takes no if_match (it has {})",
                crate::model::quoted(tag)
            )))
        }
        tag => IfMatch::parse(tag)?,
    };
    let steps = steps
        .into_iter()
        .map(patch_step)
        .collect::<Result<Vec<_>, _>>()?;
    let condition = match condition.trim() {
        "" => None,
        _ => {
            let filter = crate::query::parse_filter(&condition, spend)?;
            Some(PatchCondition::new(condition, move |entity| {
                filter.matches(entity)
            }))
        }
    };
    Ok(Operation::Patch {
        key,
        steps,
        if_match,
        upsert,
        condition,
    })
}

fn patch_step(step: pb::PatchStep) -> Result<PatchStep, ValidationError> {
    use pb::patch_step::Step;
    // Refusals inside the value name the step's path.
    let value = |path: &str, value: Option<pb::Value>| {
        value_at(value.and_then(|value| value.kind)).map_err(|error| error.within(path))
    };
    let step = match step.step {
        Some(Step::Increment(step)) => PatchStep::Increment {
            by: value(&step.property, step.by)?,
            property: step.property,
        },
        Some(Step::Set(step)) => PatchStep::Set {
            value: value(&step.property, step.value)?,
            property: step.property,
        },
        Some(Step::SetIfAbsent(step)) => PatchStep::SetIfAbsent {
            value: value(&step.property, step.value)?,
            property: step.property,
        },
        Some(Step::Remove(step)) => PatchStep::Remove {
            property: step.property,
        },
        Some(Step::Max(step)) => PatchStep::Max {
            value: value(&step.property, step.value)?,
            property: step.property,
        },
        Some(Step::Min(step)) => PatchStep::Min {
            value: value(&step.property, step.value)?,
            property: step.property,
        },
        Some(Step::Append(step)) => PatchStep::Append {
            value: value(&step.property, step.value)?,
            property: step.property,
            keep_last: step.keep_last,
        },
        Some(Step::AddToSet(step)) => PatchStep::AddToSet {
            value: value(&step.property, step.value)?,
            property: step.property,
        },
        Some(Step::RemoveValue(step)) => PatchStep::RemoveValue {
            value: value(&step.property, step.value)?,
            property: step.property,
        },
        None => {
            return Err(ValidationError::Argument(
                "a patch step has no kind: set one of increment, set, remove, set_if_absent, \
                 max, min, append, add_to_set, remove_value"
                    .into(),
            ))
        }
    };
    step.validate()?;
    Ok(step)
}

/// An index definition from the wire, checked.
pub(crate) fn index_definition(
    definition: Option<pb::IndexDefinition>,
) -> Result<IndexDefinition, ValidationError> {
    let definition = definition
        .ok_or_else(|| ValidationError::Argument("the request has no index definition".into()))?;
    let scope = match pb::IndexScope::try_from(definition.scope) {
        // A definition that names no scope gets the documented default.
        Ok(pb::IndexScope::Partition | pb::IndexScope::Unspecified) => IndexScope::Partition,
        Ok(pb::IndexScope::Table) => IndexScope::Table,
        Err(_) => {
            return Err(ValidationError::Argument(format!(
                "index scope {} is not one of PARTITION (1) and TABLE (2)",
                definition.scope
            )))
        }
    };
    IndexDefinition::new(
        definition.name,
        definition.properties,
        scope,
        definition.unique,
    )
}

/// A table's description, for the wire.
pub(crate) fn table_to_pb(described: crate::settings::TableDescription) -> pb::Table {
    pb::Table {
        name: described.name.to_string(),
        indexes: described.indexes.into_iter().map(index_to_pb).collect(),
        access_policies: described
            .access_policies
            .into_iter()
            .map(policy_to_pb)
            .collect(),
        change_feed: described.change_feed.is_some(),
        change_feed_retention_seconds: described
            .change_feed
            .map_or(0, |feed| feed.retention_seconds),
        change_feed_before_images: described.change_feed.is_some_and(|feed| feed.before_images),
        time_to_live: described.time_to_live.is_some(),
        default_time_to_live_seconds: described
            .time_to_live
            .and_then(|ttl| ttl.default_seconds)
            .unwrap_or(0),
    }
}

/// An index and its state, for the wire.
pub(crate) fn index_to_pb(index: Index) -> pb::Index {
    let (state, failure) = match index.state {
        IndexState::Building => (pb::IndexState::Building, String::new()),
        IndexState::Ready => (pb::IndexState::Ready, String::new()),
        IndexState::Failed(why) => (pb::IndexState::Failed, why),
    };
    pb::Index {
        definition: Some(index_definition_to_pb(index.definition)),
        state: state as i32,
        failure,
    }
}

/// An index definition, for the wire.
pub(crate) fn index_definition_to_pb(definition: IndexDefinition) -> pb::IndexDefinition {
    pb::IndexDefinition {
        name: definition.name,
        properties: definition.properties,
        scope: match definition.scope {
            IndexScope::Partition => pb::IndexScope::Partition,
            IndexScope::Table => pb::IndexScope::Table,
        } as i32,
        unique: definition.unique,
    }
}

pub(crate) fn entity_to_pb(entity: StoredEntity) -> pb::Entity {
    let etag = entity.etag().into_string();
    pb::Entity {
        partition_key: entity.key.partition_key,
        row_key: entity.key.row_key,
        properties: entity
            .properties
            .into_iter()
            .map(|(name, value)| (name, value_into_pb(value)))
            .collect(),
        timestamp: Some(timestamp(entity.timestamp)),
        etag,
    }
}

/// An owned value on the wire: strings and binaries move, the rest convert as [`value_to_pb`].
fn value_into_pb(value: Value) -> pb::Value {
    use pb::value::Kind;
    let kind = match value {
        Value::String(s) => Kind::StringValue(s),
        Value::Binary(b) => Kind::BinaryValue(b),
        other => return value_to_pb(other.borrowed()),
    };
    pb::Value { kind: Some(kind) }
}

fn value_to_pb(value: ValueRef<'_>) -> pb::Value {
    use pb::value::Kind;
    let kind = match value {
        ValueRef::String(s) => Kind::StringValue(s.to_owned()),
        ValueRef::Int32(v) => Kind::Int32Value(v),
        ValueRef::Int64(v) => Kind::Int64Value(v),
        ValueRef::Double(v) => Kind::DoubleValue(v),
        ValueRef::Bool(v) => Kind::BoolValue(v),
        ValueRef::DateTime(t) => Kind::DatetimeValue(timestamp(t)),
        ValueRef::Guid(g) => Kind::GuidValue(g.hyphenated().to_string()),
        ValueRef::Binary(b) => Kind::BinaryValue(b.to_vec()),
        ValueRef::Null => Kind::NullValue(prost_types::NullValue::NullValue as i32),
        ValueRef::Document(document) if document.is_array() => Kind::ArrayValue(pb::ArrayValue {
            values: document.elements().map(value_to_pb).collect(),
        }),
        ValueRef::Document(document) => Kind::ObjectValue(pb::ObjectValue {
            members: document
                .members()
                .map(|(name, value)| (name.to_owned(), value_to_pb(value)))
                .collect(),
        }),
    };
    pb::Value { kind: Some(kind) }
}

/// A transaction result on the wire: the stored entity's new version.
pub(crate) fn operation_result(stored: Option<StoredEntity>) -> pb::OperationResult {
    match stored {
        Some(entity) => pb::OperationResult {
            etag: entity.etag().into_string(),
            timestamp: Some(timestamp(entity.timestamp)),
        },
        None => pb::OperationResult::default(),
    }
}

/// A stored access policy for the wire.
pub(crate) fn policy_to_pb(policy: AccessPolicy) -> pb::AccessPolicy {
    pb::AccessPolicy {
        id: policy.id,
        start: policy.start.map(timestamp),
        expiry: policy.expiry.map(timestamp),
        permissions: policy.permissions,
    }
}

/// A stored access policy from the wire (checked with the table's others by the engine).
pub(crate) fn policy(policy: pb::AccessPolicy) -> Result<AccessPolicy, ValidationError> {
    let time = |at: Option<Timestamp>, what: &str| {
        at.map(|at| {
            Ticks::from_unix(at.seconds, at.nanos).ok_or_else(|| {
                ValidationError::Argument(format!(
                    "the stored access policy {}'s {what} is out of range",
                    quoted(&policy.id)
                ))
            })
        })
        .transpose()
    };
    Ok(AccessPolicy {
        start: time(policy.start, "start")?,
        expiry: time(policy.expiry, "expiry")?,
        id: policy.id,
        permissions: policy.permissions,
    })
}

/// `ListConsumers`' answer; a lease is held `now` if it has an owner and has not ended.
pub(crate) fn consumers_to_pb(consumers: Consumers, now: Ticks) -> pb::ListConsumersResponse {
    let (seconds, nanos) = now.to_unix();
    let now_ms = seconds * 1000 + i64::from(nanos / 1_000_000);
    let lease_to_pb = |lease: RangeLease| pb::ConsumerLease {
        range: lease.range,
        held: !lease.owner.is_empty() && lease.expires_ms > now_ms,
        owner: lease.owner,
        expires_at: (lease.expires_ms > 0).then(|| Timestamp {
            seconds: lease.expires_ms.div_euclid(1000),
            nanos: (lease.expires_ms.rem_euclid(1000) * 1_000_000) as i32,
        }),
        cursor: lease
            .cursor
            .map(|cursor| cursor.to_string())
            .unwrap_or_default(),
        pending: lease.pending,
        oldest_pending_at: lease.oldest_pending.map(timestamp),
    };
    let groups = (consumers.groups.into_iter())
        .map(|group| pb::ConsumerGroup {
            name: group.name,
            leases: group.ranges.into_iter().map(lease_to_pb).collect(),
        })
        .collect();
    pb::ListConsumersResponse {
        groups,
        pending_complete: consumers.pending_complete,
    }
}

fn timestamp(ticks: Ticks) -> Timestamp {
    let (seconds, nanos) = ticks.to_unix();
    Timestamp { seconds, nanos }
}

/// An `AggregateEntities` request's aggregations and groups, checked.
pub(crate) fn aggregate_spec(
    aggregations: Vec<pb::Aggregation>,
    group_by: Vec<String>,
) -> Result<AggregateSpec, ValidationError> {
    let aggregations = aggregations
        .into_iter()
        .map(|aggregation| {
            let function = match pb::AggregateFunction::try_from(aggregation.function) {
                Ok(pb::AggregateFunction::Count) => Function::Count,
                Ok(pb::AggregateFunction::Sum) => Function::Sum,
                Ok(pb::AggregateFunction::Avg) => Function::Avg,
                Ok(pb::AggregateFunction::Min) => Function::Min,
                Ok(pb::AggregateFunction::Max) => Function::Max,
                _ => {
                    return Err(ValidationError::Argument(format!(
                        "aggregation function {} is not COUNT, SUM, AVG, MIN or MAX",
                        aggregation.function
                    )))
                }
            };
            let path = (!aggregation.path.is_empty()).then_some(aggregation.path);
            Ok(Aggregation { function, path })
        })
        .collect::<Result<_, _>>()?;
    AggregateSpec::new(aggregations, group_by)
}

/// An aggregate's group on the wire.
pub(crate) fn group_to_pb(group: Group) -> pb::AggregateGroup {
    pb::AggregateGroup {
        keys: group.keys.into_iter().map(value_into_pb).collect(),
        values: group.values.into_iter().map(value_into_pb).collect(),
        entities: group.entities,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guids_must_be_canonical() {
        assert!(parse_guid("g", "a455c695-df98-5678-aaaa-81d3367e5a34").is_ok());
        assert!(parse_guid("g", "A455C695-DF98-5678-AAAA-81D3367E5A34").is_ok());
        for bad in [
            "a455c695df985678aaaa81d3367e5a34",
            "{a455c695-df98-5678-aaaa-81d3367e5a34}",
            "x",
            "",
        ] {
            assert!(parse_guid("g", bad).is_err(), "{bad}");
        }
    }
}
