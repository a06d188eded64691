//! Retry-safe writes end to end, on either store: a write sent again with its idempotency key
//! applies once and answers the first outcome (the same ETag and Timestamp, the same results),
//! whether an insert, an increment, a delete, a partition transaction or a transaction across
//! tables; the same key with another request is `IdempotentParameterMismatch` and changes
//! nothing; one credential's keys never answer another's; a key outlives its window only as long
//! as the window; a malformed key is refused; the hidden records table is never listed.

mod common;

use common::{
    assert_error, entity, fill_partition, get_request, insert_request, int32, int64, transaction,
    tx_insert, tx_merge, RawClient, TestServer,
};
use tonic::Code;
use trestle_proto::access::{mint, Grant, KeyRing, Permissions};
use trestle_proto::pb;
use trestle_server::auth::Authenticator;

const T: &str = "Orders";

fn keyed_insert(entity: pb::Entity, key: &str) -> pb::InsertEntityRequest {
    pb::InsertEntityRequest {
        idempotency_key: key.into(),
        ..insert_request(T, entity)
    }
}

fn increment(row_key: &str, key: &str) -> pb::PatchEntityRequest {
    pb::PatchEntityRequest {
        table: T.into(),
        partition_key: "p".into(),
        row_key: row_key.into(),
        operations: vec![pb::PatchStep {
            step: Some(pb::patch_step::Step::Increment(pb::IncrementStep {
                property: "N".into(),
                by: Some(int64(1)),
            })),
        }],
        upsert: true,
        idempotency_key: key.into(),
        ..Default::default()
    }
}

/// A delete of entity (`p`, `row_key`) of any version, with the idempotency key `key`.
fn delete_any(row_key: &str, key: &str) -> pb::DeleteEntityRequest {
    pb::DeleteEntityRequest {
        table: T.into(),
        partition_key: "p".into(),
        row_key: row_key.into(),
        if_match: "*".into(),
        idempotency_key: key.into(),
    }
}

async fn counter(client: &mut RawClient, row_key: &str) -> i64 {
    let found = client
        .get_entity(get_request(T, "p", row_key))
        .await
        .expect("get")
        .into_inner();
    match found.properties["N"].kind {
        Some(pb::value::Kind::Int64Value(n)) => n,
        ref other => panic!("N is {other:?}"),
    }
}

#[tokio::test]
async fn a_retried_insert_answers_its_first_etag_and_applies_once() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let sent = keyed_insert(entity("p", "r", &[("N", int32(1))]), "insert-1");
    let first = client
        .insert_entity(sent.clone())
        .await
        .unwrap()
        .into_inner();
    // Without its key the retry would be EntityAlreadyExists.
    for _ in 0..3 {
        let again = client
            .insert_entity(sent.clone())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(again.etag, first.etag);
        assert_eq!(again.timestamp, first.timestamp);
        assert_eq!(again.properties, first.properties);
    }
    let stored = client.get_entity(get_request(T, "p", "r")).await.unwrap();
    assert_eq!(stored.into_inner().etag, first.etag);
    let unkeyed = client
        .insert_entity(insert_request(T, sent.entity.unwrap()))
        .await;
    assert_error(unkeyed, Code::AlreadyExists, "EntityAlreadyExists");
}

#[tokio::test]
async fn a_retried_increment_counts_once_and_a_new_key_counts_again() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let first = client.patch_entity(increment("c", "inc-1")).await.unwrap();
    let first = first.into_inner();
    for _ in 0..3 {
        let again = client.patch_entity(increment("c", "inc-1")).await.unwrap();
        let again = again.into_inner();
        assert_eq!(again.etag, first.etag);
        assert_eq!(
            again.properties, first.properties,
            "the stored entity, unchanged since"
        );
    }
    assert_eq!(counter(&mut client, "c").await, 1);
    client.patch_entity(increment("c", "inc-2")).await.unwrap();
    assert_eq!(counter(&mut client, "c").await, 2);
    // Changed since: the replay still names the first version, by its ETag and Timestamp.
    let late = client.patch_entity(increment("c", "inc-1")).await.unwrap();
    let late = late.into_inner();
    assert_eq!((late.etag, late.timestamp), (first.etag, first.timestamp));
    assert_eq!(counter(&mut client, "c").await, 2);
}

#[tokio::test]
async fn retried_transactions_apply_once_and_answer_the_same_results() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    client
        .create_table(pb::CreateTableRequest {
            table: "Ledger".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut batch = transaction(
        T,
        "p",
        vec![
            tx_insert(entity("p", "a", &[("N", int32(1))])),
            tx_insert(entity("p", "b", &[("N", int32(2))])),
        ],
    );
    batch.idempotency_key = "batch-1".into();
    let first = client.submit_transaction(batch.clone()).await.unwrap();
    let again = client.submit_transaction(batch).await.unwrap();
    assert_eq!(first.into_inner(), again.into_inner());

    let op = |table: &str, operation| pb::TableOperation {
        table: table.into(),
        partition_key: "p".into(),
        operation: Some(operation),
    };
    let across = pb::TransactWriteRequest {
        operations: vec![
            op(T, tx_merge(entity("p", "a", &[("M", int32(7))]), "*")),
            op(
                "Ledger",
                tx_insert(entity("p", "entry-1", &[("N", int32(1))])),
            ),
        ],
        idempotency_key: "across-1".into(),
    };
    let first = client.transact_write(across.clone()).await.unwrap();
    let again = client.transact_write(across).await.unwrap();
    assert_eq!(first.into_inner(), again.into_inner());
}

#[tokio::test]
async fn a_retried_delete_answers_success_once_the_entity_is_gone() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    client
        .insert_entity(insert_request(T, entity("p", "r", &[])))
        .await
        .unwrap();
    let delete = delete_any("r", "delete-1");
    client.delete_entity(delete.clone()).await.unwrap();
    client.delete_entity(delete.clone()).await.unwrap();
    let unkeyed = pb::DeleteEntityRequest {
        idempotency_key: String::new(),
        ..delete
    };
    assert_error(
        client.delete_entity(unkeyed).await,
        Code::NotFound,
        "ResourceNotFound",
    );
}

#[tokio::test]
async fn the_same_key_on_another_request_is_refused_and_changes_nothing() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let first = keyed_insert(entity("p", "a", &[]), "k");
    client.insert_entity(first).await.unwrap();
    let other = keyed_insert(entity("p", "b", &[]), "k");
    let refused = client.insert_entity(other).await;
    assert_error(
        refused,
        Code::InvalidArgument,
        "IdempotentParameterMismatch",
    );
    let missing = client.get_entity(get_request(T, "p", "b")).await;
    assert_error(missing, Code::NotFound, "ResourceNotFound");
    // The key stays the first request's.
    let transaction = pb::SubmitTransactionRequest {
        idempotency_key: "k".into(),
        ..transaction(T, "p", vec![tx_insert(entity("p", "c", &[]))])
    };
    let refused = client.submit_transaction(transaction).await;
    assert_error(
        refused,
        Code::InvalidArgument,
        "IdempotentParameterMismatch",
    );
}

#[tokio::test]
async fn malformed_keys_are_refused_before_anything_is_written() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    for bad in ["a key", "a/b", &"k".repeat(129)] {
        let refused = client
            .insert_entity(keyed_insert(entity("p", "r", &[]), bad))
            .await;
        assert_error(refused, Code::InvalidArgument, "InvalidInput");
    }
    let missing = client.get_entity(get_request(T, "p", "r")).await;
    assert_error(missing, Code::NotFound, "ResourceNotFound");
}

#[tokio::test]
async fn a_key_answers_retries_for_its_window_only() {
    let server =
        TestServer::start_with(|config| config.limits.idempotency_window_seconds = 1).await;
    let mut client = server.client_with_table(T).await;
    let sent = keyed_insert(entity("p", "r", &[]), "short-lived");
    client.insert_entity(sent.clone()).await.unwrap();
    client.insert_entity(sent.clone()).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
    // The record expired: the retry is a new call, and the row is there.
    let late = client.insert_entity(sent).await;
    assert_error(late, Code::AlreadyExists, "EntityAlreadyExists");
}

#[tokio::test]
async fn one_credential_s_keys_never_answer_another_s_and_the_records_stay_hidden() {
    let keys = KeyRing::generate().unwrap();
    let authenticator = Authenticator::with_keys(keys.clone());
    let server = TestServer::start_with(|config| config.authenticator = authenticator).await;
    let mut admin = server.client_as(&keys.signing_key().secret_text()).await;
    admin
        .create_table(pb::CreateTableRequest {
            table: T.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let token = mint(
        keys.signing_key(),
        &Grant::new(Permissions::parse("raud").unwrap(), 600),
    );
    let mut scoped = server.client_as(&token).await;
    admin
        .insert_entity(keyed_insert(entity("p", "a", &[]), "shared"))
        .await
        .unwrap();
    // The same key from another credential is its own: a new call, not a mismatch.
    scoped
        .insert_entity(keyed_insert(entity("p", "b", &[]), "shared"))
        .await
        .unwrap();
    // Listed a table a page, the hidden table's page is empty and its token goes on.
    let mut names = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = admin
            .list_tables(pb::ListTablesRequest {
                prefix: String::new(),
                page_size: 1,
                page_token,
            })
            .await
            .unwrap()
            .into_inner();
        names.extend(page.tables.into_iter().map(|table| table.name));
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    assert_eq!(names, vec![T.to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_of_one_call_sent_at_once_apply_once_and_all_answer_it() {
    let server = TestServer::start().await;
    let client = server.client_with_table(T).await;
    let copies: Vec<_> = (0..16)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move { client.patch_entity(increment("c", "at-once")).await })
        })
        .collect();
    let mut etags = Vec::new();
    for copy in copies {
        etags.push(
            copy.await
                .unwrap()
                .expect("every copy answers")
                .into_inner()
                .etag,
        );
    }
    etags.dedup();
    assert_eq!(etags.len(), 1, "one outcome: {etags:?}");
    assert_eq!(counter(&mut client.clone(), "c").await, 1);
}

/// The `ETag` header of a REST answer's `head`.
fn etag_of(head: &str) -> String {
    let line = head
        .lines()
        .find(|line| line.to_ascii_lowercase().starts_with("etag:"))
        .unwrap_or_else(|| panic!("no ETag in {head}"));
    line[5..].trim().to_owned()
}

#[tokio::test]
async fn over_rest_the_idempotency_key_header_makes_a_retried_insert_apply_once() {
    let (_server, rest) = common::rest::server(|_| {}).await;
    let mut socket = tokio::net::TcpStream::connect(rest).await.unwrap();
    let created = common::rest::exchange(
        &mut socket,
        "POST",
        "/devstoreaccount1/Tables",
        br#"{"TableName":"Orders"}"#,
    )
    .await;
    assert_eq!(created.0, 201, "{}", created.1);
    let insert = |key: &'static str, body: &'static [u8]| {
        let header = format!("Idempotency-Key: {key}\r\n");
        async move {
            let mut socket = tokio::net::TcpStream::connect(rest).await.unwrap();
            let path = "/devstoreaccount1/Orders";
            common::rest::exchange_with(&mut socket, "POST", path, &header, body).await
        }
    };
    let body = br#"{"PartitionKey":"p","RowKey":"r","N":1}"#;
    let first = insert("rest-1", body).await;
    assert_eq!(first.0, 201, "{}", first.1);
    let again = insert("rest-1", body).await;
    assert_eq!(again.0, 201, "{}", again.1);
    assert_eq!(etag_of(&again.1), etag_of(&first.1));
    let other = insert("rest-1", br#"{"PartitionKey":"p","RowKey":"s"}"#).await;
    common::rest::assert_refused(&other, 422, "IdempotentParameterMismatch");
    let malformed = insert("a/b", br#"{"PartitionKey":"p","RowKey":"t"}"#).await;
    common::rest::assert_refused(&malformed, 400, "InvalidInput");
    let unkeyed =
        common::rest::exchange(&mut socket, "POST", "/devstoreaccount1/Orders", body).await;
    common::rest::assert_refused(&unkeyed, 409, "EntityAlreadyExists");
}

#[tokio::test]
async fn a_retried_refusal_answers_the_same_refusal_even_once_the_write_would_apply() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    client
        .insert_entity(insert_request(T, entity("p", "r", &[])))
        .await
        .unwrap();
    let sent = keyed_insert(entity("p", "r", &[("N", int32(1))]), "refused-1");
    let refused = client.insert_entity(sent.clone()).await;
    assert_error(refused, Code::AlreadyExists, "EntityAlreadyExists");
    client.delete_entity(delete_any("r", "")).await.unwrap();
    // The first answer, not a new evaluation: nothing is inserted.
    let again = client.insert_entity(sent).await;
    assert_error(again, Code::AlreadyExists, "EntityAlreadyExists");
    let missing = client.get_entity(get_request(T, "p", "r")).await;
    assert_error(missing, Code::NotFound, "ResourceNotFound");
    // A transaction's refusal keeps its operation's index.
    let mut batch = transaction(
        T,
        "p",
        vec![
            tx_insert(entity("p", "a", &[])),
            tx_merge(entity("p", "absent", &[]), "*"),
        ],
    );
    batch.idempotency_key = "refused-2".into();
    for _ in 0..2 {
        let refused = client.submit_transaction(batch.clone()).await;
        let status = refused.unwrap_err();
        assert_eq!(common::reason(&status), "ResourceNotFound");
        assert_eq!(common::operation_index(&status), Some(1));
    }
}

/// Every record of `table`'s feed from its start, without following.
async fn feed_of(client: &mut RawClient, table: &str) -> Vec<pb::Change> {
    let request = pb::ReadChangesRequest {
        table: table.into(),
        ..Default::default()
    };
    let mut stream = client.read_changes(request).await.unwrap().into_inner();
    let mut changes = Vec::new();
    while let Some(batch) = stream.message().await.unwrap() {
        changes.extend(batch.changes);
    }
    changes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_inserts_sent_at_once_each_apply_whole_once_or_are_refused_and_recorded() {
    const LEDGER: &str = "Ledger";
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let create = pb::CreateTableRequest {
        table: LEDGER.into(),
        change_feed: true,
        ..Default::default()
    };
    client.create_table(create).await.unwrap();
    let insert = |pk: &str, rk: &str, key: &str| pb::InsertEntityRequest {
        idempotency_key: key.into(),
        ..insert_request(LEDGER, entity(pk, rk, &[("N", int32(1))]))
    };
    let taken = insert("p", "taken", "warm-up");
    client.insert_entity(taken).await.unwrap();
    // Two copies of each new entity's insert, and inserts of the one taken, all at once (on
    // PostgreSQL they go together: `keyed_inserts.rs`).
    let mut calls = Vec::new();
    for i in 0..16 {
        for _copy in 0..2 {
            calls.push(insert(
                &format!("p{}", i % 4),
                &format!("n{i}"),
                &format!("new-{i}"),
            ));
        }
    }
    let refused: Vec<_> = (0..8)
        .map(|j| insert("p", "taken", &format!("taken-{j}")))
        .collect();
    calls.extend(refused.iter().cloned());
    let sent: Vec<_> = calls
        .iter()
        .map(|call| {
            let (mut client, call) = (client.clone(), call.clone());
            tokio::spawn(async move { client.insert_entity(call).await })
        })
        .collect();
    let mut answers = Vec::new();
    for call in sent {
        answers.push(call.await.unwrap());
    }
    for (i, pair) in answers[..32].chunks(2).enumerate() {
        let etags: Vec<_> = pair
            .iter()
            .map(|answer| {
                answer
                    .as_ref()
                    .expect("a new entity's insert")
                    .get_ref()
                    .etag
                    .clone()
            })
            .collect();
        assert_eq!(
            etags[0], etags[1],
            "both copies of insert {i} answer its one outcome"
        );
    }
    for answer in answers.drain(32..) {
        assert_error(answer, Code::AlreadyExists, "EntityAlreadyExists");
    }
    // The refusals were recorded: sent again once the insert would apply, each answers them.
    let delete = pb::DeleteEntityRequest {
        table: LEDGER.into(),
        partition_key: "p".into(),
        row_key: "taken".into(),
        if_match: "*".into(),
        ..Default::default()
    };
    client.delete_entity(delete).await.unwrap();
    for call in refused {
        let again = client.insert_entity(call).await;
        assert_error(again, Code::AlreadyExists, "EntityAlreadyExists");
    }
    let missing = client.get_entity(get_request(LEDGER, "p", "taken")).await;
    assert_error(missing, Code::NotFound, "ResourceNotFound");
    let mut inserted: Vec<String> = feed_of(&mut client, LEDGER)
        .await
        .iter()
        .filter(|change| change.kind == pb::ChangeKind::Insert as i32)
        .map(|change| change.row_key.clone())
        .collect();
    inserted.sort();
    let mut expected: Vec<String> = (0..16).map(|i| format!("n{i}")).collect();
    expected.push("taken".into());
    expected.sort();
    assert_eq!(inserted, expected, "each insert's change recorded once");
}

#[tokio::test]
async fn a_retried_bulk_delete_answers_its_first_count_and_continuation_and_deletes_nothing() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    fill_partition(&mut client, T, "p", 1200).await;
    let bulk = |key: &str, filter: &str| pb::DeleteEntitiesRequest {
        table: T.into(),
        partition_key: Some("p".into()),
        filter: filter.into(),
        idempotency_key: key.into(),
        ..Default::default()
    };
    let first = client.delete_entities(bulk("bulk-1", "")).await.unwrap();
    let first = first.into_inner();
    assert_eq!(first.deleted, 1000);
    // Entities that match again: the retry answers the first call and deletes none of them.
    fill_partition(&mut client, T, "p", 3).await;
    for _ in 0..2 {
        let again = client.delete_entities(bulk("bulk-1", "")).await.unwrap();
        let again = again.into_inner();
        assert_eq!(again, first);
    }
    let kept = client.get_entity(get_request(T, "p", "000000")).await;
    assert!(kept.is_ok(), "{kept:?}");
    // The same key on another call, or on a write, is refused and deletes nothing.
    let other = client.delete_entities(bulk("bulk-1", "V ge 0")).await;
    assert_error(other, Code::InvalidArgument, "IdempotentParameterMismatch");
    let written = keyed_insert(entity("p", "x", &[]), "inserted-1");
    client.insert_entity(written).await.unwrap();
    let other = client.delete_entities(bulk("inserted-1", "")).await;
    assert_error(other, Code::InvalidArgument, "IdempotentParameterMismatch");
    let as_insert = keyed_insert(entity("p", "y", &[]), "bulk-1");
    let other = client.insert_entity(as_insert).await;
    assert_error(other, Code::InvalidArgument, "IdempotentParameterMismatch");
    // A new key is a new call: it goes on where the first left off (the 200 left and `x`).
    let mut next = bulk("bulk-2", "");
    next.continuation_token = first.continuation_token;
    let next = client.delete_entities(next).await.unwrap().into_inner();
    assert_eq!((next.deleted, next.continuation_token.as_str()), (201, ""));
}
