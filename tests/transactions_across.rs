//! Transactions across partitions and tables (`TransactWrite`) and consistent reads of several
//! entities (`GetEntities`), end to end on either store: all or nothing, every refusal naming its
//! operation and changing nothing, unique values moving between partitions, no deadlock between
//! transactions over overlapping partitions taken in opposite orders, and a bank whose balances
//! and snapshots stay whole under 32 clients and 4 readers.

mod common;

use std::time::{Duration, Instant};

use common::bank;
use common::{
    assert_error, entity, int32, int64, operation_index, string, tx_check, tx_delete, tx_insert,
    tx_merge, tx_update, RawClient, TestServer,
};
use tonic::Code;
use trestle_proto::pb;

fn op(table: &str, pk: &str, operation: pb::TransactionOperation) -> pb::TableOperation {
    pb::TableOperation {
        table: table.into(),
        partition_key: pk.into(),
        operation: Some(operation),
    }
}

fn key(table: &str, pk: &str, rk: &str) -> pb::EntityRef {
    pb::EntityRef {
        table: table.into(),
        partition_key: pk.into(),
        row_key: rk.into(),
    }
}

fn transact(operations: Vec<pb::TableOperation>) -> pb::TransactWriteRequest {
    pb::TransactWriteRequest {
        operations,
        idempotency_key: String::new(),
    }
}

async fn get_many(client: &mut RawClient, keys: Vec<pb::EntityRef>) -> Vec<Option<pb::Entity>> {
    let response = client
        .get_entities(pb::GetEntitiesRequest {
            keys,
            select: vec![],
        })
        .await
        .expect("GetEntities");
    response
        .into_inner()
        .entities
        .into_iter()
        .map(|f| f.entity)
        .collect()
}

async fn two_tables(server: &TestServer) -> RawClient {
    let mut client = server.client_with_table("People").await;
    client
        .create_table(pb::CreateTableRequest {
            table: "Teams".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    client
}

fn count(entity: &pb::Entity) -> i32 {
    match entity.properties["Count"].kind {
        Some(pb::value::Kind::Int32Value(n)) => n,
        ref other => panic!("Count is {other:?}"),
    }
}

#[tokio::test]
async fn a_transaction_across_tables_and_partitions_applies_every_operation() {
    let server = TestServer::start().await;
    let mut client = two_tables(&server).await;
    let setup = transact(vec![
        op(
            "People",
            "a",
            tx_insert(entity("a", "ada", &[("Team", string("x"))])),
        ),
        op(
            "Teams",
            "x",
            tx_insert(entity("x", "info", &[("Count", int32(1))])),
        ),
        op(
            "Teams",
            "y",
            tx_insert(entity("y", "info", &[("Count", int32(0))])),
        ),
    ]);
    let results = client
        .transact_write(setup)
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(results.len(), 3);
    assert!(results
        .iter()
        .all(|r| !r.etag.is_empty() && r.timestamp.is_some()));

    // Move Ada to team y: her row changes partition, both counts change, all at once.
    let team_x = &results[1].etag;
    let moved = transact(vec![
        op("People", "a", tx_delete("ada", "*")),
        op(
            "People",
            "b",
            tx_insert(entity("b", "ada", &[("Team", string("y"))])),
        ),
        op(
            "Teams",
            "x",
            tx_merge(entity("x", "info", &[("Count", int32(0))]), team_x),
        ),
        op(
            "Teams",
            "y",
            tx_update(entity("y", "info", &[("Count", int32(1))]), "*"),
        ),
        op("Teams", "z", tx_check("info", "", true)),
    ]);
    let results = client
        .transact_write(moved)
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(
        results
            .iter()
            .map(|r| r.etag.is_empty())
            .collect::<Vec<_>>(),
        [true, false, false, false, true]
    );
    let read = get_many(
        &mut client,
        vec![
            key("People", "a", "ada"),
            key("people", "b", "ada"),
            key("Teams", "x", "info"),
            key("Teams", "y", "info"),
        ],
    )
    .await;
    assert!(read[0].is_none());
    assert_eq!(read[1].as_ref().unwrap().etag, results[1].etag);
    assert_eq!(count(read[2].as_ref().unwrap()), 0);
    assert_eq!(count(read[3].as_ref().unwrap()), 1);
}

#[tokio::test]
async fn a_refused_operation_is_named_and_changes_nothing() {
    let server = TestServer::start().await;
    let mut client = two_tables(&server).await;
    client
        .transact_write(transact(vec![
            op(
                "Teams",
                "x",
                tx_insert(entity("x", "info", &[("Count", int32(1))])),
            ),
            op("People", "a", tx_insert(entity("a", "ada", &[]))),
        ]))
        .await
        .unwrap();
    let before = get_many(
        &mut client,
        vec![key("Teams", "x", "info"), key("People", "a", "ada")],
    )
    .await;
    let inserts = |n: usize| {
        (0..n)
            .map(|i| {
                op(
                    "People",
                    &format!("p{i}"),
                    tx_insert(entity(&format!("p{i}"), "r", &[])),
                )
            })
            .collect::<Vec<_>>()
    };
    let cases: Vec<(Vec<pb::TableOperation>, Code, &str, Option<usize>)> = vec![
        (vec![], Code::InvalidArgument, "InvalidInput", None),
        (
            inserts(101),
            Code::InvalidArgument,
            "InvalidInput",
            Some(100),
        ),
        (
            vec![
                op(
                    "Teams",
                    "x",
                    tx_merge(entity("x", "info", &[("Count", int32(2))]), "*"),
                ),
                op("People", "a", tx_insert(entity("a", "ada", &[]))),
            ],
            Code::AlreadyExists,
            "EntityAlreadyExists",
            Some(1),
        ),
        (
            vec![
                op(
                    "Teams",
                    "x",
                    tx_merge(entity("x", "info", &[("Count", int32(2))]), "*"),
                ),
                op("People", "b", tx_insert(entity("b", "bob", &[]))),
                op(
                    "People",
                    "a",
                    tx_check("ada", "W/\"datetime'2000-01-01T00%3A00%3A00Z'\"", false),
                ),
            ],
            Code::FailedPrecondition,
            "UpdateConditionNotSatisfied",
            Some(2),
        ),
        (
            vec![
                op("People", "b", tx_insert(entity("b", "bob", &[]))),
                op("Nowhere", "b", tx_insert(entity("b", "bob", &[]))),
            ],
            Code::NotFound,
            "TableNotFound",
            Some(1),
        ),
        (
            vec![
                op("People", "b", tx_insert(entity("b", "bob", &[]))),
                op("Teams", "x", tx_delete("info", "*")),
                op("people", "b", tx_delete("bob", "*")),
            ],
            Code::InvalidArgument,
            "InvalidDuplicateRow",
            Some(2),
        ),
        (
            vec![
                op("People", "b", tx_insert(entity("b", "bob", &[]))),
                op("People", "c", tx_insert(entity("d", "dan", &[]))),
            ],
            Code::InvalidArgument,
            "CommandsInBatchActOnDifferentPartitions",
            Some(1),
        ),
        (
            vec![
                op("People", "b", tx_insert(entity("b", "bob", &[]))),
                op("Teams", "x", tx_delete("gone", "*")),
            ],
            Code::NotFound,
            "ResourceNotFound",
            Some(1),
        ),
    ];
    for (operations, code, reason, index) in cases {
        let status = assert_error(
            client.transact_write(transact(operations)).await,
            code,
            reason,
        );
        assert_eq!(operation_index(&status), index, "{status:?}");
    }
    let after = get_many(
        &mut client,
        vec![key("Teams", "x", "info"), key("People", "a", "ada")],
    )
    .await;
    assert_eq!(before, after, "a refused transaction changed something");
    let bob = get_many(&mut client, vec![key("People", "b", "bob")]).await;
    assert_eq!(bob, [None]);
}

#[tokio::test]
async fn get_entities_reads_what_exists_and_refuses_bad_keys() {
    let server = TestServer::start().await;
    let mut client = two_tables(&server).await;
    client
        .insert_entity(common::insert_request(
            "People",
            entity(
                "a",
                "ada",
                &[("Age", int32(36)), ("Email", string("ada@x"))],
            ),
        ))
        .await
        .unwrap();
    let read = client
        .get_entities(pb::GetEntitiesRequest {
            keys: vec![key("People", "a", "ada"), key("Teams", "a", "ada")],
            select: vec!["Age".into()],
        })
        .await
        .unwrap()
        .into_inner()
        .entities;
    let ada = read[0].entity.as_ref().unwrap();
    assert_eq!(ada.properties.keys().collect::<Vec<_>>(), ["Age"]);
    assert!(read[1].entity.is_none());

    let many: Vec<pb::EntityRef> = (0..101)
        .map(|i| key("People", "a", &format!("{i}")))
        .collect();
    let cases = [
        (vec![], Code::InvalidArgument, "InvalidInput", None),
        (many, Code::InvalidArgument, "InvalidInput", Some(100)),
        (
            vec![key("People", "a", "ada"), key("PEOPLE", "a", "ada")],
            Code::InvalidArgument,
            "InvalidDuplicateRow",
            Some(1),
        ),
        (
            vec![key("People", "a", "ada"), key("Nowhere", "a", "ada")],
            Code::NotFound,
            "TableNotFound",
            Some(1),
        ),
        (
            vec![key("People", "a", "ada"), key("People", "a", "bad/key")],
            Code::InvalidArgument,
            "InvalidInput",
            Some(1),
        ),
    ];
    for (keys, code, reason, index) in cases {
        let request = pb::GetEntitiesRequest {
            keys,
            select: vec![],
        };
        let status = assert_error(client.get_entities(request).await, code, reason);
        assert_eq!(operation_index(&status), index, "{status:?}");
    }
}

#[tokio::test]
async fn a_unique_value_moves_between_partitions_in_one_transaction() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    client
        .create_table(pb::CreateTableRequest {
            table: "Users".into(),
            indexes: vec![pb::IndexDefinition {
                name: "ByEmail".into(),
                properties: vec!["Email".into()],
                unique: true,
                scope: pb::IndexScope::Table as i32,
            }],
            ..Default::default()
        })
        .await
        .unwrap();
    let user = |pk: &str, email: &str| entity(pk, "u", &[("Email", string(email))]);
    client
        .transact_write(transact(vec![
            op("Users", "a", tx_insert(user("a", "one@x"))),
            op("Users", "b", tx_insert(user("b", "two@x"))),
        ]))
        .await
        .unwrap();
    // Two partitions taking one value in one transaction: the second is refused.
    let status = assert_error(
        client
            .transact_write(transact(vec![
                op("Users", "c", tx_insert(user("c", "three@x"))),
                op("Users", "d", tx_insert(user("d", "three@x"))),
            ]))
            .await,
        Code::AlreadyExists,
        "IndexValueAlreadyExists",
    );
    assert_eq!(operation_index(&status), Some(1));
    // One partition's value taken by another's entity, which gives its own up: allowed.
    client
        .transact_write(transact(vec![
            op("Users", "b", tx_update(user("b", "one@x"), "*")),
            op("Users", "a", tx_update(user("a", "four@x"), "*")),
        ]))
        .await
        .unwrap();
    // The index holds exactly the new values.
    let by_email = |email: &str| pb::QueryEntitiesRequest {
        table: "Users".into(),
        index: "ByEmail".into(),
        filter: format!("Email eq '{email}'"),
        ..Default::default()
    };
    for (email, holder) in [("one@x", Some("b")), ("four@x", Some("a")), ("two@x", None)] {
        let found = client
            .query_entities(by_email(email))
            .await
            .unwrap()
            .into_inner()
            .entities;
        let partitions: Vec<&str> = found.iter().map(|e| e.partition_key.as_str()).collect();
        assert_eq!(
            partitions,
            holder.into_iter().collect::<Vec<_>>(),
            "{email}"
        );
    }
    // And still refuses a value it holds for another entity.
    assert_error(
        client
            .transact_write(transact(vec![
                op("Users", "c", tx_insert(user("c", "one@x"))),
                op("Users", "d", tx_insert(user("d", "five@x"))),
            ]))
            .await,
        Code::AlreadyExists,
        "IndexValueAlreadyExists",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_over_overlapping_partitions_in_opposite_orders_all_finish() {
    let server = TestServer::start().await;
    let mut client = two_tables(&server).await;
    let partitions = ["a", "b", "c", "d"];
    for pk in partitions {
        client
            .insert_entity(common::insert_request(
                "Teams",
                entity(pk, "n", &[("N", int64(0))]),
            ))
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    for task in 0..8usize {
        let endpoint = server.endpoint();
        tasks.push(tokio::spawn(async move {
            let mut client = bank::connect(&endpoint).await;
            for round in 0..25usize {
                // Each task walks the partitions in its own order, forwards or backwards.
                let mut order: Vec<&str> = partitions.to_vec();
                order.rotate_left((task + round) % 4);
                if task % 2 == 1 {
                    order.reverse();
                }
                let operations = order
                    .iter()
                    .take(2 + (task + round) % 3)
                    .map(|pk| {
                        let patch = pb::PatchOperation {
                            row_key: "n".into(),
                            operations: vec![increment("N", 1)],
                            ..Default::default()
                        };
                        op("Teams", pk, patch_op(patch))
                    })
                    .collect();
                client.transact_write(transact(operations)).await.unwrap();
            }
        }));
    }
    let finished = tokio::time::timeout(Duration::from_secs(120), async {
        for task in tasks {
            task.await.unwrap();
        }
    })
    .await;
    assert!(
        finished.is_ok(),
        "transactions over overlapping partitions deadlocked"
    );
    let keys = partitions.iter().map(|pk| key("Teams", pk, "n")).collect();
    let total: i64 = get_many(&mut client, keys)
        .await
        .iter()
        .map(|e| match e.as_ref().unwrap().properties["N"].kind {
            Some(pb::value::Kind::Int64Value(n)) => n,
            ref other => panic!("N is {other:?}"),
        })
        .sum();
    let expected: usize = (0..8usize)
        .flat_map(|task| (0..25usize).map(move |round| 2 + (task + round) % 3))
        .sum();
    assert_eq!(total, expected as i64);
}

fn increment(name: &str, by: i64) -> pb::PatchStep {
    pb::PatchStep {
        step: Some(pb::patch_step::Step::Increment(pb::IncrementStep {
            property: name.into(),
            by: Some(int64(by)),
        })),
    }
}

fn patch_op(patch: pb::PatchOperation) -> pb::TransactionOperation {
    pb::TransactionOperation {
        operation: Some(pb::transaction_operation::Operation::Patch(patch)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_clients_moving_money_never_show_a_reader_half_a_transfer() {
    let server = TestServer::start().await;
    let mut client = bank::connect(&server.endpoint()).await;
    bank::open(&mut client).await;
    let stop = Instant::now() + Duration::from_secs(30);
    let transfers: Vec<_> = (0..32)
        .map(|n| {
            tokio::spawn(bank::transfer_until(
                server.endpoint(),
                n,
                stop,
                bank::Unavailable::Stop,
            ))
        })
        .collect();
    let readers: Vec<_> = (0..4)
        .map(|n| tokio::spawn(bank::snapshot_until(server.endpoint(), n, stop)))
        .collect();
    let mut acknowledged = Vec::new();
    for transfer in transfers {
        let (done, failure) = transfer.await.unwrap();
        assert!(failure.is_none(), "a transfer failed: {failure:?}");
        acknowledged.extend(done);
    }
    for reader in readers {
        assert!(
            reader.await.unwrap() > 10,
            "a reader took too few snapshots"
        );
    }
    assert!(acknowledged.len() > 100, "{} transfers", acknowledged.len());
    bank::check(&mut client, &acknowledged).await;
}
