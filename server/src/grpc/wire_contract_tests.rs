//! The hand-encoded messages checked against the wire contract's descriptor set: every field
//! that `trestle.proto` declares for `Entity`, `Value`, the map entries, the two query responses,
//! `Change`, `ReadChangesResponse` and `google.protobuf.Timestamp` is one the hand encoders know, under the same number, so a
//! field added to the .proto cannot be silently missed; and what they write decodes with the
//! generated types.

use std::collections::BTreeMap;

use prost::Message;
use prost_types::{DescriptorProto, FileDescriptorSet};
use trestle_proto::codec::EncodeReply;
use trestle_proto::pb;

use super::convert::entity_to_pb;
use super::pages::{self, EncodedEntities, QueryEntitiesResponse, ScanEntitiesResponse};
use super::reply::{ChangesReply, EntityReply};
use super::wire;

/// The fields of message `path` (nested with `.`) of `package`, by number.
fn fields_of(set: &FileDescriptorSet, package: &str, path: &str) -> BTreeMap<i32, String> {
    let message = set
        .file
        .iter()
        .filter(|file| file.package() == package)
        .find_map(|file| find(&file.message_type, path))
        .unwrap_or_else(|| panic!("{package}.{path} is not in the descriptor set"));
    message
        .field
        .iter()
        .map(|field| (field.number(), field.name().to_owned()))
        .collect()
}

fn find<'a>(messages: &'a [DescriptorProto], path: &str) -> Option<&'a DescriptorProto> {
    let (first, rest) = path
        .split_once('.')
        .map_or((path, None), |(a, b)| (a, Some(b)));
    let message = messages.iter().find(|m| m.name() == first)?;
    match rest {
        Some(rest) => find(&message.nested_type, rest),
        None => Some(message),
    }
}

/// Asserts that `package.path` declares exactly the fields `known`.
fn expect(set: &FileDescriptorSet, package: &str, path: &str, known: &[(u32, &str)]) {
    let known: BTreeMap<i32, String> = known
        .iter()
        .map(|(number, field)| (*number as i32, (*field).to_owned()))
        .collect();
    assert_eq!(
        fields_of(set, package, path),
        known,
        "{package}.{path}: the descriptor set and the hand encoder disagree"
    );
}

fn descriptor_set() -> FileDescriptorSet {
    FileDescriptorSet::decode(pb::FILE_DESCRIPTOR_SET).expect("the descriptor set decodes")
}

/// Field numbers and names, as a hand encoder knows them.
type Fields = &'static [(u32, &'static str)];

/// Every hand-encoded message, by package and path, with the fields its encoder knows.
#[rustfmt::skip]
const HAND_ENCODED: &[(&str, &str, Fields)] = &[
    ("trestle.v1", "Entity", &[
        (wire::ENTITY_PARTITION_KEY, "partition_key"), (wire::ENTITY_ROW_KEY, "row_key"),
        (wire::ENTITY_PROPERTIES, "properties"), (wire::ENTITY_TIMESTAMP, "timestamp"),
        (wire::ENTITY_ETAG, "etag"),
    ]),
    ("trestle.v1", "Entity.PropertiesEntry", &[(wire::ENTRY_KEY, "key"), (wire::ENTRY_VALUE, "value")]),
    ("trestle.v1", "Value", &[
        (wire::VALUE_STRING, "string_value"), (wire::VALUE_INT32, "int32_value"),
        (wire::VALUE_INT64, "int64_value"), (wire::VALUE_DOUBLE, "double_value"),
        (wire::VALUE_BOOL, "bool_value"), (wire::VALUE_DATETIME, "datetime_value"),
        (wire::VALUE_GUID, "guid_value"), (wire::VALUE_BINARY, "binary_value"),
        (wire::VALUE_NULL, "null_value"), (wire::VALUE_OBJECT, "object_value"),
        (wire::VALUE_ARRAY, "array_value"),
    ]),
    ("trestle.v1", "ObjectValue", &[(wire::OBJECT_MEMBERS, "members")]),
    ("trestle.v1", "ObjectValue.MembersEntry", &[(wire::ENTRY_KEY, "key"), (wire::ENTRY_VALUE, "value")]),
    ("trestle.v1", "ArrayValue", &[(wire::ARRAY_VALUES, "values")]),
    ("trestle.v1", "QueryEntitiesResponse", &[
        (pages::ENTITIES, "entities"), (pages::CONTINUATION_TOKEN, "continuation_token"),
        (pages::STATS, "stats"),
    ]),
    ("trestle.v1", "ScanEntitiesResponse", &[(pages::ENTITIES, "entities")]),
    ("trestle.v1", "Change", &[
        (wire::CHANGE_KIND, "kind"), (wire::CHANGE_PARTITION_KEY, "partition_key"),
        (wire::CHANGE_ROW_KEY, "row_key"), (wire::CHANGE_ENTITY, "entity"),
        (wire::CHANGE_TRANSACTION_ID, "transaction_id"), (wire::CHANGE_CURSOR, "cursor"),
        (wire::CHANGE_BEFORE, "before"), (wire::CHANGE_MATCHED, "matched"),
    ]),
    ("trestle.v1", "ReadChangesResponse", &[
        (wire::CHANGES_CHANGES, "changes"), (wire::CHANGES_CURSOR, "cursor"),
    ]),
    ("google.protobuf", "Timestamp", &[(wire::TIMESTAMP_SECONDS, "seconds"), (wire::TIMESTAMP_NANOS, "nanos")]),
];

#[test]
fn the_hand_encoders_know_every_declared_field_by_its_number() {
    let set = descriptor_set();
    for (package, path, known) in HAND_ENCODED {
        expect(&set, package, path, known);
    }
}

fn entity(row_key: &str) -> pb::Entity {
    pb::Entity {
        partition_key: "p".into(),
        row_key: row_key.into(),
        properties: BTreeMap::from([(
            "N".to_owned(),
            pb::Value {
                kind: Some(pb::value::Kind::Int64Value(7)),
            },
        )]),
        timestamp: Some(prost_types::Timestamp {
            seconds: 1,
            nanos: 100,
        }),
        etag: "W/\"x\"".into(),
    }
}

#[test]
fn the_hand_encoded_responses_decode_with_the_generated_types() {
    let mut encoded = EncodedEntities::default();
    let body = entity("b").encode_to_vec();
    encoded.push(body.len(), |out| out.extend_from_slice(&body));
    let page = QueryEntitiesResponse {
        entities: vec![entity("a")],
        encoded_entities: encoded.clone(),
        continuation_token: "next".into(),
        stats: Some(pb::QueryStats {
            plan: "partition".into(),
            entities_examined: 2,
        }),
    };
    let decoded = pb::QueryEntitiesResponse::decode(&page.encode_reply_to_vec()[..]).unwrap();
    assert_eq!(
        decoded,
        pb::QueryEntitiesResponse {
            entities: vec![entity("a"), entity("b")],
            continuation_token: "next".into(),
            stats: page.stats.clone(),
        }
    );
    let batch = ScanEntitiesResponse {
        entities: Vec::new(),
        encoded_entities: encoded,
    };
    let decoded = pb::ScanEntitiesResponse::decode(&batch.encode_reply_to_vec()[..]).unwrap();
    assert_eq!(decoded.entities, vec![entity("b")]);
    let reply = EntityReply::Encoded(entity("c").encode_to_vec());
    assert_eq!(
        pb::Entity::decode(&reply.encode_reply_to_vec()[..]).unwrap(),
        entity("c")
    );
}

/// Change records written from their stored bytes decode as the generated `Change`s with the
/// entities (and before images) as `entity_to_pb` sends them.
#[test]
fn hand_encoded_changes_decode_with_the_generated_types() {
    use crate::model::{
        plan_commit, EntityKey, IfMatch, NewEntity, Operation, PlanRules, Properties, Ticks, Value,
    };
    use crate::storage::changes::{decode, records_of};
    use crate::storage::FeedPosition;

    let key = |row: &str| EntityKey::new("p".into(), row.into()).unwrap();
    let new = |row: &str, n: i64| {
        let properties = Properties::from([("N".to_owned(), Value::Int64(n))]);
        NewEntity::new(key(row), properties).unwrap()
    };
    let rules = PlanRules {
        before_images: true,
        ..PlanRules::default()
    };
    let existing = plan_commit(
        "p",
        vec![Operation::Insert(new("b", 1))],
        vec![None],
        Ticks::next_commit(),
        rules,
    )
    .unwrap()
    .results;
    let operations = vec![
        Operation::Insert(new("a", 2)),
        Operation::Update(new("b", 3), IfMatch::Any),
    ];
    let plan = plan_commit(
        "p",
        operations,
        vec![None, existing[0].clone()],
        Ticks::next_commit(),
        rules,
    )
    .unwrap();
    let mut reply = ChangesReply {
        changes: Vec::new(),
        cursor: "9-1".into(),
    };
    let mut expected = Vec::new();
    for (n, record) in records_of(&plan, "p").iter().enumerate() {
        let position = FeedPosition {
            transaction: 9,
            record: n as u32,
        };
        let change = decode(position, record).unwrap();
        let kind = [pb::ChangeKind::Insert, pb::ChangeKind::Replace][n];
        let cursor = format!("9-{n}");
        // The second as a filtered feed's record matching both images.
        let matched = [pb::ChangeMatch::Unspecified, pb::ChangeMatch::Both][n];
        wire::put_change(
            &change,
            kind as i32,
            &cursor,
            matched as i32,
            &mut reply.changes,
        )
        .unwrap();
        expected.push(pb::Change {
            kind: kind as i32,
            partition_key: "p".into(),
            row_key: ["a", "b"][n].into(),
            entity: plan.results[n].clone().map(entity_to_pb),
            transaction_id: 9,
            cursor,
            before: [None, existing[0].clone()][n].clone().map(entity_to_pb),
            matched: matched as i32,
        });
    }
    let bytes = reply.encode_reply_to_vec();
    let decoded = pb::ReadChangesResponse::decode(&bytes[..]).unwrap();
    assert_eq!(decoded.changes, expected);
    assert_eq!(decoded.cursor, "9-1");
    assert!(expected[1].before.is_some() && expected[1].entity.is_some());
}
