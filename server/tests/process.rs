//! The built `trestle-server` binary as a child process: acknowledged writes survive SIGKILL with
//! no transaction partly applied, and SIGTERM shuts down cleanly with exit code 0, within its grace
//! period even when a reader stopped reading.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{entity, insert_op, int64, Client, ServerProcess};
use trestle_proto::pb;

const TABLE: &str = "Durable";
const TX_ROWS: usize = 5;

/// What the load acknowledged: single inserts (pk, rk, value) and committed transactions.
#[derive(Default)]
struct Acknowledged {
    inserts: Vec<(String, String, i64)>,
    transactions: Vec<(String, u64)>,
}

async fn create_table(client: &mut Client) {
    let request = pb::CreateTableRequest {
        table: TABLE.into(),
        ..Default::default()
    };
    client.create_table(request).await.unwrap();
}

/// Inserts and transactions from `writer` until the server dies, recording each acknowledgement.
async fn load(mut client: Client, cycle: u32, writer: u32, acked: Arc<Mutex<Acknowledged>>) {
    for n in 0u64.. {
        let pk = format!("c{cycle}-w{writer}");
        let result = if n % 2 == 0 {
            let request = pb::InsertEntityRequest {
                table: TABLE.into(),
                entity: Some(entity(
                    &pk,
                    &format!("single-{n:06}"),
                    &[("Value", n as i64 * 7)],
                )),
                ..Default::default()
            };
            client.insert_entity(request).await.map(|_| {
                acked.lock().unwrap().inserts.push((
                    pk.clone(),
                    format!("single-{n:06}"),
                    n as i64 * 7,
                ));
            })
        } else {
            let operations = (0..TX_ROWS)
                .map(|i| {
                    insert_op(entity(
                        &pk,
                        &format!("tx-{n:06}-{i}"),
                        &[("Tx", n as i64), ("Part", i as i64)],
                    ))
                })
                .collect();
            let request = pb::SubmitTransactionRequest {
                idempotency_key: String::new(),
                table: TABLE.into(),
                partition_key: pk.clone(),
                operations,
            };
            client.submit_transaction(request).await.map(|_| {
                acked.lock().unwrap().transactions.push((pk.clone(), n));
            })
        };
        if result.is_err() {
            return;
        }
    }
}

async fn all_entities(client: &mut Client) -> BTreeMap<(String, String), pb::Entity> {
    support::all_entities(client, TABLE).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill_and_no_transaction_is_partial() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data_dir.path());
    create_table(&mut server.client().await).await;
    let acked = Arc::new(Mutex::new(Acknowledged::default()));
    let mut server = Some(server);

    for cycle in 0..3 {
        let running = server.take().expect("running server");
        let mut writers = Vec::new();
        for writer in 0..8 {
            writers.push(tokio::spawn(load(
                running.client().await,
                cycle,
                writer,
                acked.clone(),
            )));
        }
        tokio::time::sleep(Duration::from_millis(400 + 200 * u64::from(cycle))).await;
        running.kill_9();
        for writer in writers {
            writer.await.unwrap();
        }

        let restarted = ServerProcess::start(data_dir.path());
        let stored = all_entities(&mut restarted.client().await).await;
        let acked = acked.lock().unwrap();
        assert!(
            acked.inserts.len() > 10 && acked.transactions.len() > 10,
            "the load made progress"
        );
        for (pk, rk, value) in &acked.inserts {
            let entity = stored
                .get(&(pk.clone(), rk.clone()))
                .unwrap_or_else(|| panic!("lost acknowledged {pk}/{rk}"));
            assert_eq!(entity.properties.len(), 1);
            assert_eq!(int64(entity, "Value"), *value);
        }
        for (pk, n) in &acked.transactions {
            for i in 0..TX_ROWS {
                let entity = stored
                    .get(&(pk.clone(), format!("tx-{n:06}-{i}")))
                    .expect("lost acknowledged transaction row");
                assert_eq!(
                    (int64(entity, "Tx"), int64(entity, "Part")),
                    (*n as i64, i as i64)
                );
            }
        }
        // Transactions in flight at the kill are all there or not at all.
        let mut rows_per_tx: BTreeMap<(String, i64), usize> = BTreeMap::new();
        for ((pk, rk), entity) in &stored {
            if rk.starts_with("tx-") {
                *rows_per_tx
                    .entry((pk.clone(), int64(entity, "Tx")))
                    .or_default() += 1;
            }
        }
        for (tx, rows) in rows_per_tx {
            assert_eq!(rows, TX_ROWS, "transaction {tx:?} is partly applied");
        }
        server = Some(restarted);
    }
    server.unwrap().kill_9();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_flushes_and_exits_zero() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data_dir.path());
    let mut client = server.client().await;
    create_table(&mut client).await;
    let request = pb::InsertEntityRequest {
        table: TABLE.into(),
        entity: Some(entity("p", "r", &[("V", 1)])),
        ..Default::default()
    };
    client.insert_entity(request).await.unwrap();
    let exit = server.terminate();
    assert_eq!(exit.code(), Some(0), "exit status {exit:?}");

    let restarted = ServerProcess::start(data_dir.path());
    let got = restarted
        .client()
        .await
        .get_entity(pb::GetEntityRequest {
            table: TABLE.into(),
            partition_key: "p".into(),
            row_key: "r".into(),
            select: vec![],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(int64(&got, "V"), 1);
    restarted.kill_9();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_reader_that_stopped_exits_after_the_grace_period() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start_with(data_dir.path(), &["--shutdown-grace-secs", "1"]);
    let mut client = server.client().await;
    create_table(&mut client).await;
    let stream = support::stalled_scan(&mut client, TABLE).await;
    // The stream stays open and unread: without a bound, a graceful shutdown waits for it forever.

    let started = std::time::Instant::now();
    let exit = tokio::task::spawn_blocking(move || server.terminate())
        .await
        .unwrap();
    assert_eq!(exit.code(), Some(0), "exit status {exit:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?} to stop",
        started.elapsed()
    );
    drop(stream);

    // What was acknowledged before the shutdown is there.
    let restarted = ServerProcess::start(data_dir.path());
    let rows = support::all_entities(&mut restarted.client().await, TABLE).await;
    assert_eq!(rows.len(), 4000);
    restarted.kill_9();
}

/// An array of `n` Int64 values, none of them -1.
fn numbers(n: i64) -> pb::Value {
    let values = (0..n)
        .map(|v| pb::Value {
            kind: Some(pb::value::Kind::Int64Value(v)),
        })
        .collect();
    pb::Value {
        kind: Some(pb::value::Kind::ArrayValue(pb::ArrayValue { values })),
    }
}

/// SIGTERM while the server is busy (queries whose lambdas visit a million elements each,
/// writers, change-feed followers and a scan whose reader stopped) stops it with exit code 0
/// within its grace period, and every write it acknowledged is there after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_exits_within_the_grace_period_keeping_what_it_acknowledged() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start_with(data_dir.path(), &["--shutdown-grace-secs", "2"]);
    let mut client = server.client().await;
    let request = pb::CreateTableRequest {
        table: TABLE.into(),
        change_feed: true,
        ..Default::default()
    };
    client.create_table(request).await.unwrap();
    for chunk in 0..10 {
        let operations = (0..100)
            .map(|i| {
                let mut row = entity("wide", &format!("{chunk}-{i:03}"), &[]);
                row.properties.insert("A".into(), numbers(1_000));
                insert_op(row)
            })
            .collect();
        let request = pb::SubmitTransactionRequest {
            idempotency_key: String::new(),
            table: TABLE.into(),
            partition_key: "wide".into(),
            operations,
        };
        client.submit_transaction(request).await.unwrap();
    }
    let stalled = support::stalled_scan(&mut client, TABLE).await;

    let acked = Arc::new(Mutex::new(Vec::new()));
    let mut load = Vec::new();
    for writer in 0..4 {
        let (mut client, acked) = (server.client().await, acked.clone());
        load.push(tokio::spawn(async move {
            for n in 0u64.. {
                let row = entity(&format!("w{writer}"), &format!("{n:06}"), &[("V", 1)]);
                let request = pb::InsertEntityRequest {
                    table: TABLE.into(),
                    entity: Some(row),
                    ..Default::default()
                };
                match client.insert_entity(request).await {
                    Ok(_) => acked.lock().unwrap().push((format!("w{writer}"), n)),
                    Err(_) => return,
                }
            }
        }));
    }
    for _ in 0..4 {
        let mut client = server.client().await;
        load.push(tokio::spawn(async move {
            let request = pb::QueryEntitiesRequest {
                table: TABLE.into(),
                partition_key: Some("wide".into()),
                filter: "A/any(x: x eq -1)".into(),
                ..Default::default()
            };
            while client.query_entities(request.clone()).await.is_ok() {}
        }));
    }
    for _ in 0..4 {
        let mut client = server.client().await;
        load.push(tokio::spawn(async move {
            let request = pb::ReadChangesRequest {
                table: TABLE.into(),
                follow: true,
                ..Default::default()
            };
            let Ok(stream) = client.read_changes(request).await else {
                return;
            };
            let mut stream = stream.into_inner();
            while let Ok(Some(_)) = stream.message().await {}
        }));
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        acked.lock().unwrap().len() > 10,
        "the writers wrote nothing"
    );

    let started = std::time::Instant::now();
    let exit = tokio::task::spawn_blocking(move || server.terminate())
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(exit.code(), Some(0), "exit status {exit:?}");
    // The grace period, and then the time to close the store.
    assert!(took < Duration::from_secs(12), "took {took:?} to stop");
    for task in load {
        task.await.unwrap();
    }
    drop(stalled);

    let restarted = ServerProcess::start(data_dir.path());
    let mut client = restarted.client().await;
    let acked = acked.lock().unwrap().clone();
    for (partition_key, n) in acked {
        let request = pb::GetEntityRequest {
            table: TABLE.into(),
            partition_key,
            row_key: format!("{n:06}"),
            select: vec![],
        };
        let found = client.get_entity(request).await;
        assert!(
            found.is_ok(),
            "an acknowledged insert is missing: {found:?}"
        );
    }
    restarted.kill_9();
}
