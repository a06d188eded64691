//! Optimistic concurrency and transaction isolation under concurrent load.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use trestle_proto::pb;

const T: &str = "Concurrent";

fn count_of(entity: &pb::Entity, name: &str) -> i64 {
    match entity.properties.get(name).and_then(|v| v.kind.clone()) {
        Some(pb::value::Kind::Int64Value(v)) => v,
        other => panic!("{name} is {other:?}"),
    }
}

async fn increment_with_retry(client: &mut RawClient) -> usize {
    let mut conflicts = 0;
    loop {
        let current = client
            .get_entity(get_request(T, "counters", "c"))
            .await
            .unwrap()
            .into_inner();
        let next = entity(
            "counters",
            "c",
            &[("Count", int64(count_of(&current, "Count") + 1))],
        );
        let update = pb::UpdateEntityRequest {
            table: T.into(),
            entity: Some(next),
            if_match: current.etag,
            ..Default::default()
        };
        match client.update_entity(update).await {
            Ok(_) => return conflicts,
            Err(status) if reason(&status) == "UpdateConditionNotSatisfied" => conflicts += 1,
            Err(status) => panic!("unexpected {status:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_tasks_incrementing_one_counter_lose_no_update() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    client
        .insert_entity(insert_request(
            T,
            entity("counters", "c", &[("Count", int64(0))]),
        ))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let mut client = server.client().await;
        tasks.push(tokio::spawn(async move {
            let mut conflicts = 0;
            for _ in 0..100 {
                conflicts += increment_with_retry(&mut client).await;
            }
            conflicts
        }));
    }
    let mut conflicts = 0;
    for task in tasks {
        conflicts += task.await.unwrap();
    }
    let counter = client
        .get_entity(get_request(T, "counters", "c"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(count_of(&counter, "Count"), 1600);
    assert!(conflicts > 0, "16 writers on one row must have conflicted");
}

const DEPT: &str = "dept-eng";

/// Hires or fires one employee together with the department's count, retrying on conflicts.
async fn change_headcount(client: &mut RawClient, employee: &str, hire: bool) {
    loop {
        let department = client
            .get_entity(get_request(T, DEPT, "department"))
            .await
            .unwrap()
            .into_inner();
        let count = count_of(&department, "EmployeeCount");
        let new_count = entity(
            DEPT,
            "department",
            &[("EmployeeCount", int64(count + if hire { 1 } else { -1 }))],
        );
        let change = if hire {
            tx_insert(entity(DEPT, employee, &[("Name", string(employee))]))
        } else {
            tx_delete(employee, "*")
        };
        let ops = vec![tx_merge(new_count, &department.etag), change];
        match client.submit_transaction(transaction(T, DEPT, ops)).await {
            Ok(_) => return,
            Err(status) if reason(&status) == "UpdateConditionNotSatisfied" => continue,
            Err(status) => panic!("unexpected {status:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_never_see_a_count_that_disagrees_with_the_employee_rows() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    client
        .insert_entity(insert_request(
            T,
            entity(DEPT, "department", &[("EmployeeCount", int64(0))]),
        ))
        .await
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));

    let mut writers = Vec::new();
    for writer in 0..4 {
        let mut client = server.client().await;
        writers.push(tokio::spawn(async move {
            for round in 0..40 {
                let employee = format!("emp-{writer}-{round:03}");
                change_headcount(&mut client, &employee, true).await;
                if round % 3 == 0 {
                    change_headcount(&mut client, &employee, false).await;
                }
            }
        }));
    }
    let mut readers = Vec::new();
    for _ in 0..3 {
        let mut client = server.client().await;
        let done = done.clone();
        readers.push(tokio::spawn(async move {
            let mut checks = 0;
            while !done.load(Ordering::Relaxed) || checks == 0 {
                let scan = pb::QueryEntitiesRequest {
                    table: T.into(),
                    partition_key: Some(DEPT.into()),
                    ..Default::default()
                };
                let page = client.query_entities(scan).await.unwrap().into_inner();
                let department = page
                    .entities
                    .iter()
                    .find(|e| e.row_key == "department")
                    .expect("department row");
                let employees = page
                    .entities
                    .iter()
                    .filter(|e| e.row_key.starts_with("emp-"))
                    .count() as i64;
                assert_eq!(
                    count_of(department, "EmployeeCount"),
                    employees,
                    "a scan saw half a transaction"
                );
                checks += 1;
            }
            checks
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    for reader in readers {
        assert!(reader.await.unwrap() > 0);
    }
    let department = client
        .get_entity(get_request(T, DEPT, "department"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(count_of(&department, "EmployeeCount"), 4 * (40 - 14));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_inserts_of_one_key_admit_exactly_one() {
    let server = TestServer::start().await;
    let client = server.client_with_table(T).await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let mut client = client.clone();
        tasks.push(tokio::spawn(async move {
            client
                .insert_entity(insert_request(
                    T,
                    entity("p", "contested", &[("Writer", int32(i))]),
                ))
                .await
                .is_ok()
        }));
    }
    let mut winners = 0;
    for task in tasks {
        winners += usize::from(task.await.unwrap());
    }
    assert_eq!(winners, 1);
}

/// Sets `V` = `n` on rows `r000..r099` of partition `pk`, in that order.
fn overwrite_rows(pk: &str, n: i64) -> pb::SubmitTransactionRequest {
    let operations = (0..100)
        .map(|i| {
            let row = entity(pk, &format!("r{i:03}"), &[("V", int64(n))]);
            tx_upsert(row, pb::UpsertMode::Replace)
        })
        .collect();
    transaction(T, pk, operations)
}

async fn v_of(client: &mut RawClient, pk: &str, row: &str) -> i64 {
    let entity = client
        .get_entity(get_request(T, pk, row))
        .await
        .unwrap()
        .into_inner();
    count_of(&entity, "V")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_point_read_after_one_row_of_a_transaction_finds_its_other_rows_written() {
    const PK: &str = "overwritten";
    const TRANSACTIONS: i64 = 300;
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    client
        .submit_transaction(overwrite_rows(PK, 0))
        .await
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..3 {
        let mut client = server.client().await;
        let done = done.clone();
        readers.push(tokio::spawn(async move {
            let mut pairs = 0;
            while !done.load(Ordering::Relaxed) {
                // The transaction writes r000 first and r099 last.
                let first = v_of(&mut client, PK, "r000").await;
                let last = v_of(&mut client, PK, "r099").await;
                assert!(
                    last >= first,
                    "r000 showed transaction {first}, then r099 still {last}"
                );
                pairs += 1;
            }
            pairs
        }));
    }
    for n in 1..=TRANSACTIONS {
        client
            .submit_transaction(overwrite_rows(PK, n))
            .await
            .unwrap();
    }
    done.store(true, Ordering::Relaxed);
    for reader in readers {
        assert!(reader.await.unwrap() > 0);
    }
}
