//! Every limit at its edge: exactly at the limit succeeds, one past fails with Azure's reason and
//! changes nothing.

mod common;

use common::*;
use prost::Message;
use prost_types::Timestamp;
use tonic::Code;
use trestle_proto::pb;

const T: &str = "Limits";

async fn insert(client: &mut RawClient, entity: pb::Entity) -> Result<pb::Entity, tonic::Status> {
    client
        .insert_entity(insert_request(T, entity))
        .await
        .map(|r| r.into_inner())
}

async fn assert_absent(client: &mut RawClient, pk: &str, rk: &str) {
    assert_error(
        client.get_entity(get_request(T, pk, rk)).await,
        Code::NotFound,
        "ResourceNotFound",
    );
}

#[tokio::test]
async fn keys_are_at_most_1_kib() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let at_limit = "k".repeat(1024);
    let over = "k".repeat(1025);
    insert(&mut client, entity(&at_limit, &at_limit, &[]))
        .await
        .unwrap();
    let status = assert_error(
        insert(&mut client, entity(&over, "r", &[])).await,
        Code::InvalidArgument,
        "KeyValueTooLarge",
    );
    assert!(
        status.message().contains("PartitionKey is 1025 bytes"),
        "{}",
        status.message()
    );
    assert_error(
        insert(&mut client, entity("p", &over, &[])).await,
        Code::InvalidArgument,
        "KeyValueTooLarge",
    );
    // Multi-byte characters count as their UTF-8 bytes.
    insert(&mut client, entity("p", &"é".repeat(512), &[]))
        .await
        .unwrap();
    assert_error(
        insert(
            &mut client,
            entity("p", &format!("{}a", "é".repeat(512)), &[]),
        )
        .await,
        Code::InvalidArgument,
        "KeyValueTooLarge",
    );
    let all = pb::QueryEntitiesRequest {
        table: T.into(),
        ..Default::default()
    };
    assert_eq!(
        client
            .query_entities(all)
            .await
            .unwrap()
            .into_inner()
            .entities
            .len(),
        2
    );
}

#[tokio::test]
async fn keys_refuse_forbidden_characters() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    for bad in [
        "a/b",
        "a\\b",
        "a#b",
        "a?b",
        "tab\t",
        "nl\n",
        "nul\u{0}",
        "del\u{7f}",
        "c1\u{85}",
    ] {
        let status = assert_error(
            insert(&mut client, entity("p", bad, &[])).await,
            Code::InvalidArgument,
            "InvalidInput",
        );
        assert!(status.message().contains("RowKey"), "{}", status.message());
        assert_error(
            insert(&mut client, entity(bad, "r", &[])).await,
            Code::InvalidArgument,
            "InvalidInput",
        );
    }
    insert(
        &mut client,
        entity("spaces and 'quotes' %", "ünïcödé ✓", &[]),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn at_most_252_properties() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let props = |n: usize| {
        (0..n)
            .map(|i| (format!("P{i}"), int32(i as i32)))
            .collect::<Vec<_>>()
    };
    let with = |n: usize, rk: &str| {
        let props = props(n);
        let refs: Vec<(&str, pb::Value)> =
            props.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        entity("p", rk, &refs)
    };
    insert(&mut client, with(252, "ok")).await.unwrap();
    assert_error(
        insert(&mut client, with(253, "over")).await,
        Code::InvalidArgument,
        "TooManyProperties",
    );
    assert_absent(&mut client, "p", "over").await;
    // A merge that would push the entity past the limit is refused too.
    let merge = pb::MergeEntityRequest {
        table: T.into(),
        entity: Some(with(1, "ok")),
        if_match: "*".into(),
        ..Default::default()
    };
    client.merge_entity(merge).await.unwrap();
    let mut extra = with(0, "ok");
    extra.properties.insert("Extra".into(), int32(1));
    let merge = pb::MergeEntityRequest {
        table: T.into(),
        entity: Some(extra),
        if_match: "*".into(),
        ..Default::default()
    };
    assert_error(
        client.merge_entity(merge).await,
        Code::InvalidArgument,
        "TooManyProperties",
    );
}

#[tokio::test]
async fn property_names_are_csharp_identifiers_of_at_most_255_characters() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let longest = "N".repeat(255);
    insert(
        &mut client,
        entity(
            "p",
            "ok",
            &[
                (&longest, int32(1)),
                ("_under", int32(1)),
                ("Größe", int32(1)),
            ],
        ),
    )
    .await
    .unwrap();
    let too_long = "N".repeat(256);
    assert_error(
        insert(&mut client, entity("p", "r", &[(&too_long, int32(1))])).await,
        Code::InvalidArgument,
        "PropertyNameTooLong",
    );
    for bad in [
        "",
        "1st",
        "with-dash",
        "with space",
        "dot.ted",
        "PartitionKey",
        "RowKey",
        "Timestamp",
    ] {
        let status = assert_error(
            insert(&mut client, entity("p", "r", &[(bad, int32(1))])).await,
            Code::InvalidArgument,
            "PropertyNameInvalid",
        );
        assert!(
            status.message().contains(&format!("'{bad}'")),
            "{}",
            status.message()
        );
    }
    assert_absent(&mut client, "p", "r").await;
}

#[tokio::test]
async fn strings_and_binaries_are_at_most_64_kib() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    // Strings count as UTF-16: 32,768 code units.
    insert(
        &mut client,
        entity("p", "s", &[("S", string(&"x".repeat(32_768)))]),
    )
    .await
    .unwrap();
    insert(
        &mut client,
        entity("p", "s2", &[("S", string(&"😀".repeat(16_384)))]),
    )
    .await
    .unwrap();
    let status = assert_error(
        insert(
            &mut client,
            entity("p", "r", &[("S", string(&"x".repeat(32_769)))]),
        )
        .await,
        Code::InvalidArgument,
        "PropertyValueTooLarge",
    );
    assert!(status.message().contains("'S'"), "{}", status.message());
    insert(
        &mut client,
        entity("p", "b", &[("B", binary(vec![7; 65_536]))]),
    )
    .await
    .unwrap();
    assert_error(
        insert(
            &mut client,
            entity("p", "r", &[("B", binary(vec![7; 65_537]))]),
        )
        .await,
        Code::InvalidArgument,
        "PropertyValueTooLarge",
    );
    assert_absent(&mut client, "p", "r").await;
}

/// An entity of exactly `bytes` in Azure's size formula, made of binary properties.
fn entity_of_size(rk: &str, bytes: usize) -> pb::Entity {
    // 4 + (len("p") + len(rk)) * 2, then per property 8 + len(name) * 2 + (len + 4).
    let mut remaining = bytes - 4 - 2 * (1 + rk.len());
    let mut props = Vec::new();
    let mut i = 0;
    while remaining > 0 {
        let overhead = 8 + 2 * 3 + 4;
        let len = (remaining - overhead).min(65_536);
        props.push((format!("b{i:02}"), binary(vec![1; len])));
        remaining -= overhead + len;
        i += 1;
    }
    let refs: Vec<(&str, pb::Value)> = props.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    entity("p", rk, &refs)
}

#[tokio::test]
async fn entities_are_at_most_1_mib() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    insert(&mut client, entity_of_size("ok", 1 << 20))
        .await
        .unwrap();
    let status = assert_error(
        insert(&mut client, entity_of_size("no", (1 << 20) + 1)).await,
        Code::ResourceExhausted,
        "EntityTooLarge",
    );
    assert!(status.message().contains("1048577"), "{}", status.message());
    assert_absent(&mut client, "p", "no").await;
}

#[tokio::test]
async fn datetimes_are_within_1601_and_9999() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let at = |seconds: i64, nanos: i32| pb::Value {
        kind: Some(pb::value::Kind::DatetimeValue(Timestamp { seconds, nanos })),
    };
    let min = -11_644_473_600;
    let max = 253_402_300_799;
    insert(&mut client, entity("p", "min", &[("D", at(min, 0))]))
        .await
        .unwrap();
    insert(
        &mut client,
        entity("p", "max", &[("D", at(max, 999_999_999))]),
    )
    .await
    .unwrap();
    assert_error(
        insert(
            &mut client,
            entity("p", "r", &[("D", at(min - 1, 999_999_999))]),
        )
        .await,
        Code::InvalidArgument,
        "OutOfRangeInput",
    );
    assert_error(
        insert(&mut client, entity("p", "r", &[("D", at(max + 1, 0))])).await,
        Code::InvalidArgument,
        "OutOfRangeInput",
    );
    assert_absent(&mut client, "p", "r").await;
}

#[tokio::test]
async fn transactions_hold_at_most_100_operations() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let ops = |n: usize, tag: &str| {
        (0..n)
            .map(|i| tx_insert(entity("p", &format!("{tag}{i:03}"), &[])))
            .collect()
    };
    let results = client
        .submit_transaction(transaction(T, "p", ops(100, "a")))
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(results.len(), 100);
    let status = assert_error(
        client
            .submit_transaction(transaction(T, "p", ops(101, "b")))
            .await,
        Code::InvalidArgument,
        "InvalidInput",
    );
    assert_eq!(operation_index(&status), Some(100));
    assert!(status.message().contains("101"), "{}", status.message());
    assert_absent(&mut client, "p", "b000").await;
    assert_error(
        client.submit_transaction(transaction(T, "p", vec![])).await,
        Code::InvalidArgument,
        "InvalidInput",
    );
}

/// A transaction of binary-carrying inserts whose encoded request is exactly `bytes` long.
fn transaction_of_size(tag: &str, bytes: usize) -> pb::SubmitTransactionRequest {
    let mut request = transaction(
        T,
        "p",
        (0..70)
            .map(|i| {
                tx_insert(entity(
                    "p",
                    &format!("{tag}{i:02}"),
                    &[("B", binary(vec![0; 60_000]))],
                ))
            })
            .collect(),
    );
    for _ in 0..10 {
        let delta = bytes as i64 - request.encoded_len() as i64;
        if delta == 0 {
            break;
        }
        let last = request.operations.last_mut().unwrap();
        let Some(pb::transaction_operation::Operation::Insert(insert)) = &mut last.operation else {
            unreachable!()
        };
        let Some(pb::value::Kind::BinaryValue(blob)) = &mut insert
            .entity
            .as_mut()
            .unwrap()
            .properties
            .get_mut("B")
            .unwrap()
            .kind
        else {
            unreachable!()
        };
        blob.resize((blob.len() as i64 + delta) as usize, 0);
    }
    assert_eq!(request.encoded_len(), bytes);
    request
}

#[tokio::test]
async fn transaction_requests_are_at_most_4_mib() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    client
        .submit_transaction(transaction_of_size("a", 4 << 20))
        .await
        .unwrap();
    let status = assert_error(
        client
            .submit_transaction(transaction_of_size("b", (4 << 20) + 1))
            .await,
        Code::ResourceExhausted,
        "RequestBodyTooLarge",
    );
    assert!(status.message().contains("4194305"), "{}", status.message());
    assert_absent(&mut client, "p", "b00").await;
}

#[tokio::test]
async fn pages_hold_at_most_1000_entities() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    for chunk in 0..11 {
        let ops = (0..100)
            .map(|i| tx_insert(entity("p", &format!("{chunk:02}{i:02}"), &[])))
            .collect();
        client
            .submit_transaction(transaction(T, "p", ops))
            .await
            .unwrap();
    }
    let query = |page_size| pb::QueryEntitiesRequest {
        table: T.into(),
        page_size,
        ..Default::default()
    };
    let page = client
        .query_entities(query(1000))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.entities.len(), 1000);
    assert!(!page.continuation_token.is_empty());
    let page = client.query_entities(query(0)).await.unwrap().into_inner();
    assert_eq!(page.entities.len(), 1000, "0 means the maximum");
    assert_error(
        client.query_entities(query(1001)).await,
        Code::InvalidArgument,
        "OutOfRangeInput",
    );
}
