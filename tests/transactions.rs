//! Entity group transactions: every operation kind, all-or-nothing, and every error with the
//! failing operation's index.

mod common;

use common::*;
use tonic::Code;
use trestle_proto::pb;

const T: &str = "Orders";

async fn get(client: &mut RawClient, rk: &str) -> Result<pb::Entity, tonic::Status> {
    client
        .get_entity(get_request(T, "p", rk))
        .await
        .map(|r| r.into_inner())
}

async fn seed(client: &mut RawClient, rk: &str, v: i32) -> pb::Entity {
    client
        .insert_entity(insert_request(T, entity("p", rk, &[("V", int32(v))])))
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn every_operation_kind_commits_in_order() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let updated = seed(&mut client, "update", 1).await;
    seed(&mut client, "merge", 1).await;
    let deleted = seed(&mut client, "delete", 1).await;
    seed(&mut client, "check", 1).await;
    let ops = vec![
        tx_insert(entity("p", "insert", &[("V", int32(2))])),
        tx_update(entity("p", "update", &[("W", int32(2))]), &updated.etag),
        tx_merge(entity("p", "merge", &[("W", int32(2))]), "*"),
        tx_upsert(
            entity("p", "upsert", &[("V", int32(2))]),
            pb::UpsertMode::Merge,
        ),
        tx_delete("delete", &deleted.etag),
        tx_check("check", "*", false),
        tx_check("absent", "", true),
    ];
    let results = client
        .submit_transaction(transaction(T, "p", ops))
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(results.len(), 7);
    for (i, rk) in [(0, "insert"), (1, "update"), (2, "merge"), (3, "upsert")] {
        let stored = get(&mut client, rk).await.unwrap();
        assert_eq!(results[i].etag, stored.etag, "{rk}");
        assert_eq!(results[i].timestamp, stored.timestamp, "{rk}");
    }
    assert!(results[4].etag.is_empty() && results[5].etag.is_empty() && results[6].etag.is_empty());
    assert_eq!(
        get(&mut client, "update")
            .await
            .unwrap()
            .properties
            .keys()
            .collect::<Vec<_>>(),
        ["W"]
    );
    assert_eq!(
        get(&mut client, "merge")
            .await
            .unwrap()
            .properties
            .keys()
            .collect::<Vec<_>>(),
        ["V", "W"]
    );
    assert_error(
        get(&mut client, "delete").await,
        Code::NotFound,
        "ResourceNotFound",
    );
}

/// Submits `ops` after seeding rows `a` and `b`, expects failure at `index` with `code`/`reason`,
/// and checks that nothing changed.
async fn assert_rolled_back(
    ops: impl FnOnce(&pb::Entity) -> Vec<pb::TransactionOperation>,
    index: usize,
    code: Code,
    expected: &str,
) {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let a = seed(&mut client, "a", 1).await;
    seed(&mut client, "b", 1).await;
    let status = assert_error(
        client
            .submit_transaction(transaction(T, "p", ops(&a)))
            .await,
        code,
        expected,
    );
    assert_eq!(operation_index(&status), Some(index), "{status:?}");
    assert!(
        status
            .message()
            .starts_with(&format!("operation {index} failed")),
        "{}",
        status.message()
    );
    let after = get(&mut client, "a").await.unwrap();
    assert_eq!(
        (after.etag, after.properties["V"].clone()),
        (a.etag.clone(), int32(1))
    );
    assert_eq!(
        get(&mut client, "b").await.unwrap().properties["V"],
        int32(1)
    );
    assert_error(
        get(&mut client, "new").await,
        Code::NotFound,
        "ResourceNotFound",
    );
}

#[tokio::test]
async fn a_failing_insert_rolls_back_everything() {
    assert_rolled_back(
        |_| {
            vec![
                tx_insert(entity("p", "new", &[])),
                tx_merge(entity("p", "a", &[("V", int32(5))]), "*"),
                tx_insert(entity("p", "b", &[])),
            ]
        },
        2,
        Code::AlreadyExists,
        "EntityAlreadyExists",
    )
    .await;
}

#[tokio::test]
async fn a_stale_etag_rolls_back_everything() {
    assert_rolled_back(
        |_| {
            let stale = "W/\"datetime'2000-01-01T00%3A00%3A00.0000000Z'\"";
            vec![
                tx_insert(entity("p", "new", &[])),
                tx_update(entity("p", "b", &[]), stale),
            ]
        },
        1,
        Code::FailedPrecondition,
        "UpdateConditionNotSatisfied",
    )
    .await;
}

#[tokio::test]
async fn a_missing_row_rolls_back_everything() {
    assert_rolled_back(
        |_| vec![tx_insert(entity("p", "new", &[])), tx_delete("nobody", "*")],
        1,
        Code::NotFound,
        "ResourceNotFound",
    )
    .await;
}

#[tokio::test]
async fn failed_checks_roll_back_everything() {
    assert_rolled_back(
        |_| vec![tx_insert(entity("p", "new", &[])), tx_check("a", "", true)],
        1,
        Code::AlreadyExists,
        "EntityAlreadyExists",
    )
    .await;
    assert_rolled_back(
        |_| {
            vec![
                tx_insert(entity("p", "new", &[])),
                tx_check("nobody", "", false),
            ]
        },
        1,
        Code::NotFound,
        "ResourceNotFound",
    )
    .await;
    assert_rolled_back(
        |a| {
            let moved_on = a.etag.replace("Z'", "1Z'");
            vec![
                tx_insert(entity("p", "new", &[])),
                tx_check("a", &moved_on, false),
            ]
        },
        1,
        Code::FailedPrecondition,
        "UpdateConditionNotSatisfied",
    )
    .await;
}

#[tokio::test]
async fn a_check_passes_with_the_current_etag() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let a = seed(&mut client, "a", 1).await;
    let ops = vec![
        tx_check("a", &a.etag, false),
        tx_insert(entity("p", "new", &[])),
    ];
    client
        .submit_transaction(transaction(T, "p", ops))
        .await
        .unwrap();
    get(&mut client, "new").await.unwrap();
}

#[tokio::test]
async fn malformed_transactions_are_refused_with_the_operation_index() {
    let status_of = |ops| async move {
        let server = TestServer::start().await;
        let mut client = server.client_with_table(T).await;
        let result = client.submit_transaction(transaction(T, "p", ops)).await;
        let status = result.expect_err("expected an error");
        let rows = client
            .query_entities(pb::QueryEntitiesRequest {
                table: T.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(rows.into_inner().entities.is_empty(), "nothing may change");
        status
    };
    let status = status_of(vec![
        tx_insert(entity("p", "a", &[])),
        tx_insert(entity("q", "b", &[])),
    ])
    .await;
    assert_eq!(
        (
            status.code(),
            reason(&status).as_str(),
            operation_index(&status)
        ),
        (
            Code::InvalidArgument,
            "CommandsInBatchActOnDifferentPartitions",
            Some(1)
        )
    );
    assert!(status.message().contains("'q'"), "{}", status.message());

    let status = status_of(vec![
        tx_insert(entity("p", "a", &[])),
        tx_insert(entity("p", "b", &[])),
        tx_delete("a", "*"),
    ])
    .await;
    assert_eq!(
        (
            status.code(),
            reason(&status).as_str(),
            operation_index(&status)
        ),
        (Code::InvalidArgument, "InvalidDuplicateRow", Some(2))
    );
    assert!(status.message().contains("'a'"), "{}", status.message());

    let status = status_of(vec![
        tx_insert(entity("p", "a", &[])),
        tx_insert(entity("p", "b", &[("bad-name", int32(1))])),
    ])
    .await;
    assert_eq!(
        (reason(&status).as_str(), operation_index(&status)),
        ("PropertyNameInvalid", Some(1))
    );

    let status = status_of(vec![tx_insert(entity("p", "a", &[])), tx_delete("b", "")]).await;
    assert_eq!(
        (reason(&status).as_str(), operation_index(&status)),
        ("InvalidInput", Some(1))
    );

    let status = status_of(vec![tx_check("a", "*", true)]).await;
    assert_eq!(
        (reason(&status).as_str(), operation_index(&status)),
        ("InvalidInput", Some(0))
    );

    let status = status_of(vec![pb::TransactionOperation { operation: None }]).await;
    assert_eq!(
        (reason(&status).as_str(), operation_index(&status)),
        ("InvalidInput", Some(0))
    );
}

#[tokio::test]
async fn a_transaction_on_a_missing_table_fails_at_operation_0() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let status = assert_error(
        client
            .submit_transaction(transaction(
                "Nope",
                "p",
                vec![tx_insert(entity("p", "a", &[]))],
            ))
            .await,
        Code::NotFound,
        "TableNotFound",
    );
    assert_eq!(operation_index(&status), Some(0));
}
