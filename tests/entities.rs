//! Entities: every write and read RPC, typed values, ETags and their errors.

mod common;

use common::*;
use pb::value::Kind;
use prost_types::Timestamp;
use tonic::Code;
use trestle_proto::pb;

const T: &str = "People";

fn update(entity: pb::Entity, if_match: &str) -> pb::UpdateEntityRequest {
    pb::UpdateEntityRequest {
        table: T.into(),
        entity: Some(entity),
        if_match: if_match.into(),
        ..Default::default()
    }
}

fn merge(entity: pb::Entity, if_match: &str) -> pb::MergeEntityRequest {
    pb::MergeEntityRequest {
        table: T.into(),
        entity: Some(entity),
        if_match: if_match.into(),
        ..Default::default()
    }
}

fn upsert(entity: pb::Entity, mode: pb::UpsertMode) -> pb::UpsertEntityRequest {
    pb::UpsertEntityRequest {
        table: T.into(),
        entity: Some(entity),
        mode: mode as i32,
        ..Default::default()
    }
}

fn delete(pk: &str, rk: &str, if_match: &str) -> pb::DeleteEntityRequest {
    pb::DeleteEntityRequest {
        idempotency_key: String::new(),
        table: T.into(),
        partition_key: pk.into(),
        row_key: rk.into(),
        if_match: if_match.into(),
    }
}

fn value(kind: Kind) -> pb::Value {
    pb::Value { kind: Some(kind) }
}

#[tokio::test]
async fn every_type_round_trips() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let properties = [
        ("Text", value(Kind::StringValue("O'Brien ✓".into()))),
        ("Age", value(Kind::Int32Value(-42))),
        ("Big", value(Kind::Int64Value(i64::MAX))),
        ("Ratio", value(Kind::DoubleValue(f64::NAN))),
        ("Inf", value(Kind::DoubleValue(f64::NEG_INFINITY))),
        ("Active", value(Kind::BoolValue(true))),
        (
            "Born",
            value(Kind::DatetimeValue(Timestamp {
                seconds: -11_644_473_600,
                nanos: 0,
            })),
        ),
        (
            "Id",
            value(Kind::GuidValue(
                "A455C695-DF98-5678-AAAA-81D3367E5A34".into(),
            )),
        ),
        ("Blob", value(Kind::BinaryValue(vec![0, 1, 255]))),
    ];
    let inserted = client
        .insert_entity(insert_request(T, entity("p", "r", &properties)))
        .await
        .unwrap()
        .into_inner();
    let got = client
        .get_entity(get_request(T, "p", "r"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.etag, inserted.etag);
    assert_eq!(got.timestamp, inserted.timestamp);
    assert_eq!(got.properties.len(), properties.len());
    for (name, sent) in &properties {
        let stored = &got.properties[*name];
        match (&sent.kind, &stored.kind) {
            (Some(Kind::DoubleValue(a)), Some(Kind::DoubleValue(b))) if a.is_nan() => {
                assert!(b.is_nan())
            }
            (Some(Kind::GuidValue(a)), Some(Kind::GuidValue(b))) => {
                assert_eq!(&a.to_lowercase(), b)
            }
            _ => assert_eq!(sent, stored, "{name}"),
        }
    }
}

#[tokio::test]
async fn datetimes_are_kept_to_100ns() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let born = value(Kind::DatetimeValue(Timestamp {
        seconds: 1_700_000_000,
        nanos: 123_456_789,
    }));
    client
        .insert_entity(insert_request(T, entity("p", "r", &[("Born", born)])))
        .await
        .unwrap();
    let got = client
        .get_entity(get_request(T, "p", "r"))
        .await
        .unwrap()
        .into_inner();
    let expected = value(Kind::DatetimeValue(Timestamp {
        seconds: 1_700_000_000,
        nanos: 123_456_700,
    }));
    assert_eq!(got.properties["Born"], expected);
}

#[tokio::test]
async fn insert_of_an_existing_entity_fails() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    client
        .insert_entity(insert_request(T, entity("p", "r", &[("A", int32(1))])))
        .await
        .unwrap();
    let again = client
        .insert_entity(insert_request(T, entity("p", "r", &[("A", int32(2))])))
        .await;
    let status = assert_error(again, Code::AlreadyExists, "EntityAlreadyExists");
    assert!(status.message().contains("'p'") && status.message().contains("'r'"));
    let got = client
        .get_entity(get_request(T, "p", "r"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.properties["A"], int32(1));
}

#[tokio::test]
async fn update_replaces_and_merge_keeps_absent_properties() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let v1 = client
        .insert_entity(insert_request(
            T,
            entity("p", "r", &[("A", int32(1)), ("B", int32(2))]),
        ))
        .await
        .unwrap()
        .into_inner();
    let v2 = client
        .merge_entity(merge(entity("p", "r", &[("B", int32(3))]), &v1.etag))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v2.properties.len(), 2, "merge returns the merged entity");
    assert_eq!(v2.properties["A"], int32(1));
    assert_eq!(v2.properties["B"], int32(3));
    let v3 = client
        .update_entity(update(entity("p", "r", &[("C", int32(4))]), &v2.etag))
        .await
        .unwrap()
        .into_inner();
    let got = client
        .get_entity(get_request(T, "p", "r"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.properties.keys().collect::<Vec<_>>(), ["C"]);
    assert_eq!(got.etag, v3.etag);
    let ts = |e: &pb::Entity| e.timestamp.map(|t| (t.seconds, t.nanos)).unwrap();
    assert!(ts(&v1) < ts(&v2) && ts(&v2) < ts(&v3));
}

#[tokio::test]
async fn etag_changes_on_every_write_even_with_identical_content() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let same = entity("p", "r", &[("A", int32(1))]);
    let mut tags = vec![
        client
            .insert_entity(insert_request(T, same.clone()))
            .await
            .unwrap()
            .into_inner()
            .etag,
    ];
    for _ in 0..20 {
        let written = client
            .update_entity(update(same.clone(), "*"))
            .await
            .unwrap()
            .into_inner();
        assert!(!tags.contains(&written.etag));
        tags.push(written.etag);
    }
}

#[tokio::test]
async fn stale_etags_and_missing_entities_are_refused() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let v1 = client
        .insert_entity(insert_request(T, entity("p", "r", &[("A", int32(1))])))
        .await
        .unwrap()
        .into_inner();
    let v2 = client
        .update_entity(update(entity("p", "r", &[("A", int32(2))]), &v1.etag))
        .await
        .unwrap()
        .into_inner();

    let e = || entity("p", "r", &[("A", int32(9))]);
    assert_error(
        client.update_entity(update(e(), &v1.etag)).await,
        Code::FailedPrecondition,
        "UpdateConditionNotSatisfied",
    );
    assert_error(
        client.merge_entity(merge(e(), &v1.etag)).await,
        Code::FailedPrecondition,
        "UpdateConditionNotSatisfied",
    );
    assert_error(
        client.delete_entity(delete("p", "r", &v1.etag)).await,
        Code::FailedPrecondition,
        "UpdateConditionNotSatisfied",
    );
    let got = client
        .get_entity(get_request(T, "p", "r"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (got.etag.as_str(), &got.properties["A"]),
        (v2.etag.as_str(), &int32(2))
    );

    let missing = || entity("p", "missing", &[]);
    assert_error(
        client.update_entity(update(missing(), "*")).await,
        Code::NotFound,
        "ResourceNotFound",
    );
    assert_error(
        client.merge_entity(merge(missing(), "*")).await,
        Code::NotFound,
        "ResourceNotFound",
    );
    assert_error(
        client.delete_entity(delete("p", "missing", "*")).await,
        Code::NotFound,
        "ResourceNotFound",
    );
    assert_error(
        client.get_entity(get_request(T, "p", "missing")).await,
        Code::NotFound,
        "ResourceNotFound",
    );
}

#[tokio::test]
async fn if_match_is_required_and_must_be_well_formed() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    client
        .insert_entity(insert_request(T, entity("p", "r", &[])))
        .await
        .unwrap();
    let status = assert_error(
        client
            .update_entity(update(entity("p", "r", &[]), ""))
            .await,
        Code::InvalidArgument,
        "InvalidInput",
    );
    assert!(status.message().contains("if_match is required"));
    assert_error(
        client.merge_entity(merge(entity("p", "r", &[]), "")).await,
        Code::InvalidArgument,
        "InvalidInput",
    );
    assert_error(
        client.delete_entity(delete("p", "r", "")).await,
        Code::InvalidArgument,
        "InvalidInput",
    );
    let status = assert_error(
        client.delete_entity(delete("p", "r", "\"strong\"")).await,
        Code::InvalidArgument,
        "InvalidInput",
    );
    assert!(status.message().contains("\"strong\""));
    client.get_entity(get_request(T, "p", "r")).await.unwrap();
}

#[tokio::test]
async fn upsert_inserts_replaces_or_merges() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    client
        .upsert_entity(upsert(
            entity("p", "r", &[("A", int32(1)), ("B", int32(1))]),
            pb::UpsertMode::Merge,
        ))
        .await
        .unwrap();
    let merged = client
        .upsert_entity(upsert(
            entity("p", "r", &[("B", int32(2))]),
            pb::UpsertMode::Merge,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(merged.properties.len(), 2);
    client
        .upsert_entity(upsert(
            entity("p", "r", &[("C", int32(3))]),
            pb::UpsertMode::Replace,
        ))
        .await
        .unwrap();
    let got = client
        .get_entity(get_request(T, "p", "r"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.properties.keys().collect::<Vec<_>>(), ["C"]);
    let bad_mode = pb::UpsertEntityRequest {
        table: T.into(),
        entity: Some(entity("p", "r", &[])),
        mode: 7,
        ..Default::default()
    };
    assert_error(
        client.upsert_entity(bad_mode).await,
        Code::InvalidArgument,
        "InvalidInput",
    );
}

#[tokio::test]
async fn writes_with_return_no_content_answer_with_keys_timestamp_and_etag_only() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    async fn stored(client: &mut RawClient) -> pb::Entity {
        let request = get_request(T, "p", "r");
        client.get_entity(request).await.unwrap().into_inner()
    }
    let no_content = |mut reply: pb::Entity, stored: &pb::Entity| {
        assert!(reply.properties.is_empty(), "no properties: {reply:?}");
        assert_eq!((&*reply.partition_key, &*reply.row_key), ("p", "r"));
        assert!(!reply.etag.is_empty() && reply.timestamp.is_some());
        // Apart from the properties, the reply is the stored entity: its ETag and Timestamp.
        reply.properties = stored.properties.clone();
        assert_eq!(&reply, stored);
    };
    let props = [("A", int32(1)), ("B", int32(2))];

    let mut insert = insert_request(T, entity("p", "r", &props));
    insert.return_no_content = true;
    let reply = client.insert_entity(insert).await.unwrap().into_inner();
    no_content(reply, &stored(&mut client).await);

    let mut replace = update(entity("p", "r", &[("C", int32(3))]), "*");
    replace.return_no_content = true;
    let reply = client.update_entity(replace).await.unwrap().into_inner();
    no_content(reply, &stored(&mut client).await);

    let mut merged = merge(entity("p", "r", &[("D", int32(4))]), "*");
    merged.return_no_content = true;
    let reply = client.merge_entity(merged).await.unwrap().into_inner();
    let after_merge = stored(&mut client).await;
    assert_eq!(after_merge.properties.len(), 2, "the merge itself happened");
    no_content(reply, &after_merge);

    for mode in [pb::UpsertMode::Replace, pb::UpsertMode::Merge] {
        let mut upserted = upsert(entity("p", "r", &props), mode);
        upserted.return_no_content = true;
        let reply = client.upsert_entity(upserted).await.unwrap().into_inner();
        no_content(reply, &stored(&mut client).await);
    }

    // Without it, the reply is the entity as stored.
    let reply = client
        .update_entity(update(entity("p", "r", &props), "*"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply, stored(&mut client).await);
    assert_eq!(reply.properties.len(), 2);
}

#[tokio::test]
async fn delete_removes_the_entity() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let v1 = client
        .insert_entity(insert_request(T, entity("", "", &[])))
        .await
        .unwrap()
        .into_inner();
    client
        .delete_entity(delete("", "", &v1.etag))
        .await
        .unwrap();
    assert_error(
        client.get_entity(get_request(T, "", "")).await,
        Code::NotFound,
        "ResourceNotFound",
    );
    client
        .insert_entity(insert_request(T, entity("", "", &[])))
        .await
        .unwrap();
}

#[tokio::test]
async fn get_projects_selected_properties() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    client
        .insert_entity(insert_request(
            T,
            entity("p", "r", &[("A", int32(1)), ("B", int32(2))]),
        ))
        .await
        .unwrap();
    let mut request = get_request(T, "p", "r");
    request.select = vec!["B".into(), "Missing".into()];
    let got = client
        .get_entity(request.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.properties.keys().collect::<Vec<_>>(), ["B"]);
    assert!(!got.etag.is_empty() && got.timestamp.is_some());
    request.select = vec!["B".into(), "B".into()];
    assert_error(
        client.get_entity(request).await,
        Code::InvalidArgument,
        "InvalidInput",
    );
}

#[tokio::test]
async fn malformed_values_are_refused_and_change_nothing() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let cases = [
        (pb::Value { kind: None }, "PropertiesNeedValue"),
        (value(Kind::GuidValue("not-a-guid".into())), "InvalidInput"),
        (
            value(Kind::DatetimeValue(Timestamp {
                seconds: 0,
                nanos: -1,
            })),
            "OutOfRangeInput",
        ),
    ];
    for (bad, expected) in cases {
        let request = insert_request(T, entity("p", "r", &[("Bad", bad)]));
        let status = assert_error(
            client.insert_entity(request).await,
            Code::InvalidArgument,
            expected,
        );
        assert!(status.message().contains("'Bad'"), "{}", status.message());
    }
    let no_entity = pb::InsertEntityRequest {
        table: T.into(),
        entity: None,
        ..Default::default()
    };
    assert_error(
        client.insert_entity(no_entity).await,
        Code::InvalidArgument,
        "InvalidInput",
    );
    assert_error(
        client.get_entity(get_request(T, "p", "r")).await,
        Code::NotFound,
        "ResourceNotFound",
    );
}

#[tokio::test]
async fn relaxed_durability_acknowledges_writes_at_once() {
    let server = TestServer::start_with(|config| {
        if let trestle_server::storage::StoreConfig::Embedded { options, .. } = &mut config.store {
            options.durability =
                trestle_server::storage::Durability::Periodic { flush_every_ms: 50 };
        }
    })
    .await;
    let mut client = server.client_with_table(T).await;
    let written = client
        .insert_entity(insert_request(T, entity("p", "r", &[("A", int32(1))])))
        .await
        .unwrap()
        .into_inner();
    let ops = vec![
        tx_insert(entity("p", "s", &[])),
        tx_delete("r", &written.etag),
    ];
    client
        .submit_transaction(transaction(T, "p", ops))
        .await
        .unwrap();
    assert_error(
        client.get_entity(get_request(T, "p", "r")).await,
        Code::NotFound,
        "ResourceNotFound",
    );
    client.get_entity(get_request(T, "p", "s")).await.unwrap();
}
