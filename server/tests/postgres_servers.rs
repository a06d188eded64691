//! Three `trestle-server` processes over one PostgreSQL database are one service: conditional
//! increments spread over all of them count every acknowledged one; concurrent transactions on
//! one partition are never seen in part by readers of any server; a server killed mid-load loses
//! nothing acknowledged and leaves nothing partial; a token and a continuation move between
//! servers; and PostgreSQL itself crashing and coming back makes the servers answer
//! `Unavailable` meanwhile, then recover by themselves, with every acknowledged write kept; and
//! one server at a time removes expired entities, another taking over when it dies, and none
//! writes its claim to that work while there is nothing to tend.
//! Each test starts its own throwaway cluster (skipped where PostgreSQL is not installed, unless
//! `TRESTLE_REQUIRE_POSTGRES` is set).

#[path = "../../tests/common/postgres.rs"]
mod postgres_cluster;
mod support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres_cluster::Postgres;
use support::{create_table, entity, free_port, insert_op, sample, scrape, Client, ServerProcess};
use tonic::Code;
use trestle_proto::pb;

/// A cluster with a fresh database, and `servers` servers over it (with `extra` flags). (Its
/// programs and the admin connection block: off the runtime's turn.)
fn cluster_with_servers(
    servers: usize,
    extra: &[&str],
) -> Option<(Postgres, String, Vec<ServerProcess>, tempfile::TempDir)> {
    tokio::task::block_in_place(|| start_cluster_with_servers(servers, extra))
}

fn start_cluster_with_servers(
    servers: usize,
    extra: &[&str],
) -> Option<(Postgres, String, Vec<ServerProcess>, tempfile::TempDir)> {
    let cluster = Postgres::start()?;
    let url = cluster.database("shared");
    let dir = tempfile::tempdir().unwrap();
    let processes = (0..servers)
        .map(|n| server_over(&url, &dir.path().join(format!("unused-{n}")), extra))
        .collect();
    Some((cluster, url, processes, dir))
}

fn server_over(url: &str, data_dir: &std::path::Path, extra: &[&str]) -> ServerProcess {
    let mut args = vec!["--store", url];
    args.extend_from_slice(extra);
    ServerProcess::start_with(data_dir, &args)
}

fn int64_of(entity: &pb::Entity, name: &str) -> i64 {
    match entity.properties[name].kind {
        Some(pb::value::Kind::Int64Value(v)) => v,
        ref other => panic!("{name} is {other:?}"),
    }
}

/// The counter entity, as stored now.
async fn read_counter(client: &mut Client) -> pb::Entity {
    client
        .get_entity(pb::GetEntityRequest {
            table: "Counters".into(),
            partition_key: "c".into(),
            row_key: "counter".into(),
            select: vec![],
        })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_incrementing_one_counter_on_three_servers_count_every_increment() {
    let Some((_cluster, _url, servers, _dir)) = cluster_with_servers(3, &[]) else {
        return;
    };
    let mut first = servers[0].client().await;
    create_table(&mut first, "Counters").await;
    first
        .insert_entity(pb::InsertEntityRequest {
            table: "Counters".into(),
            entity: Some(entity("c", "counter", &[("N", 0)])),
            ..Default::default()
        })
        .await
        .unwrap();

    const INCREMENTS_EACH: usize = 3;
    let acknowledged = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for n in 0..64 {
        let mut client = servers[n % 3].client().await;
        let acknowledged = acknowledged.clone();
        clients.push(tokio::spawn(async move {
            let mut done = 0;
            while done < INCREMENTS_EACH {
                let current = read_counter(&mut client).await;
                let next = entity("c", "counter", &[("N", int64_of(&current, "N") + 1)]);
                let update = client
                    .update_entity(pb::UpdateEntityRequest {
                        table: "Counters".into(),
                        entity: Some(next),
                        if_match: current.etag,
                        ..Default::default()
                    })
                    .await;
                match update {
                    Ok(_) => {
                        acknowledged.fetch_add(1, Ordering::SeqCst);
                        done += 1;
                    }
                    Err(status) => {
                        assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}")
                    }
                }
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    let last = read_counter(&mut servers[2].client().await).await;
    assert_eq!(
        acknowledged.load(Ordering::SeqCst),
        64 * INCREMENTS_EACH as u64
    );
    assert_eq!(int64_of(&last, "N"), 64 * INCREMENTS_EACH as i64);
}

/// A transaction replacing rows 000..099 of partition `p`, each with `Generation`.
fn generation(generation: i64) -> pb::SubmitTransactionRequest {
    pb::SubmitTransactionRequest {
        idempotency_key: String::new(),
        table: "Rows".into(),
        partition_key: "p".into(),
        operations: (0..100)
            .map(|row| pb::TransactionOperation {
                operation: Some(pb::transaction_operation::Operation::Upsert(
                    pb::UpsertOperation {
                        entity: Some(entity(
                            "p",
                            &format!("{row:03}"),
                            &[("Generation", generation)],
                        )),
                        mode: pb::UpsertMode::Replace as i32,
                    },
                )),
            })
            .collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_on_one_partition_from_three_servers_are_never_seen_in_part() {
    let Some((_cluster, _url, servers, _dir)) = cluster_with_servers(3, &[]) else {
        return;
    };
    let mut first = servers[0].client().await;
    create_table(&mut first, "Rows").await;
    first.submit_transaction(generation(0)).await.unwrap();

    let writing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mut writers = Vec::new();
    for (n, server) in servers.iter().enumerate() {
        let mut client = server.client().await;
        writers.push(tokio::spawn(async move {
            for round in 1..=15 {
                let generation_number = (round * 3 + n) as i64;
                client
                    .submit_transaction(generation(generation_number))
                    .await
                    .unwrap();
            }
        }));
    }
    let mut readers = Vec::new();
    for (n, server) in servers.iter().enumerate() {
        let mut client = server.client().await;
        let writing = writing.clone();
        readers.push(tokio::spawn(async move {
            let mut reads = 0;
            while writing.load(Ordering::SeqCst) || reads == 0 {
                let request = pb::QueryEntitiesRequest {
                    table: "Rows".into(),
                    filter: "PartitionKey eq 'p'".into(),
                    ..Default::default()
                };
                // Pages on some readers, streams on others: each sees the partition at once.
                let rows: Vec<pb::Entity> = if n % 2 == 0 {
                    client
                        .query_entities(request)
                        .await
                        .unwrap()
                        .into_inner()
                        .entities
                } else {
                    let mut stream = client.scan_entities(request).await.unwrap().into_inner();
                    let mut rows = Vec::new();
                    while let Some(batch) = tokio_stream::StreamExt::next(&mut stream).await {
                        rows.extend(batch.unwrap().entities);
                    }
                    rows
                };
                assert_eq!(rows.len(), 100);
                let generations: BTreeSet<i64> =
                    rows.iter().map(|row| int64_of(row, "Generation")).collect();
                assert_eq!(generations.len(), 1, "a read saw parts of {generations:?}");
                reads += 1;
            }
            reads
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    writing.store(false, Ordering::SeqCst);
    for reader in readers {
        assert!(reader.await.unwrap() > 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_load_loses_nothing_acknowledged_and_leaves_nothing_partial() {
    let Some((_cluster, _url, mut servers, _dir)) = cluster_with_servers(3, &[]) else {
        return;
    };
    let mut first = servers[0].client().await;
    create_table(&mut first, "Orders").await;

    // Writers on every server: transactions of 10 rows, each in a partition of its own.
    let acknowledged = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let next = Arc::new(AtomicU64::new(0));
    let stop_at = Instant::now() + Duration::from_secs(3);
    let mut writers = Vec::new();
    for n in 0..12 {
        let mut client = servers[n % 3].client().await;
        let (acknowledged, next) = (acknowledged.clone(), next.clone());
        writers.push(tokio::spawn(async move {
            while Instant::now() < stop_at {
                let partition = format!("order-{:06}", next.fetch_add(1, Ordering::SeqCst));
                let operations = (0..10)
                    .map(|row| insert_op(entity(&partition, &format!("{row}"), &[("Line", row)])))
                    .collect();
                let request = pb::SubmitTransactionRequest {
                    idempotency_key: String::new(),
                    table: "Orders".into(),
                    partition_key: partition.clone(),
                    operations,
                };
                match client.submit_transaction(request).await {
                    Ok(_) => acknowledged.lock().unwrap().push(partition),
                    // Only the killed server's clients fail, and they stop.
                    Err(_) if n % 3 == 0 => return,
                    Err(status) => panic!("{status:?}"),
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    servers.remove(0).kill_9();
    for writer in writers {
        writer.await.unwrap();
    }

    let mut reader = servers[1].client().await;
    let stored = support::all_entities(&mut reader, "Orders").await;
    let mut rows_per_partition = std::collections::BTreeMap::<String, usize>::new();
    for (partition, _) in stored.keys() {
        *rows_per_partition.entry(partition.clone()).or_default() += 1;
    }
    for (partition, rows) in &rows_per_partition {
        assert_eq!(*rows, 10, "{partition} is partial");
    }
    let acknowledged = acknowledged.lock().unwrap();
    assert!(
        acknowledged.len() > 30,
        "{} acknowledged",
        acknowledged.len()
    );
    for partition in acknowledged.iter() {
        assert!(
            rows_per_partition.contains_key(partition),
            "{partition} was lost"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_and_a_continuation_move_between_servers() {
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("trestle.keys");
    let key_path = key_file.to_str().unwrap();
    let (status, _, stderr) = support::run_tool(&["keygen", "--out", key_path]);
    assert!(status.success(), "{stderr}");
    let Some((_cluster, _url, servers, _dir)) = cluster_with_servers(3, &["--key-file", key_path])
    else {
        return;
    };
    let (status, token, stderr) =
        support::run_tool(&["token", "--key-file", key_path, "--permissions", "raudlc"]);
    assert!(status.success(), "{stderr}");
    let mut on = Vec::new();
    for server in &servers {
        on.push(server.client_as(token.trim()).await);
    }
    on[0]
        .create_table(pb::CreateTableRequest {
            table: "Pages".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let operations = (0..30)
        .map(|row| insert_op(entity("p", &format!("{row:02}"), &[])))
        .collect();
    on[1]
        .submit_transaction(pb::SubmitTransactionRequest {
            idempotency_key: String::new(),
            table: "Pages".into(),
            partition_key: "p".into(),
            operations,
        })
        .await
        .unwrap();
    let mut request = pb::QueryEntitiesRequest {
        table: "Pages".into(),
        page_size: 10,
        ..Default::default()
    };
    let mut seen = Vec::new();
    for server in &mut on {
        let page = server
            .query_entities(request.clone())
            .await
            .unwrap()
            .into_inner();
        seen.extend(page.entities.into_iter().map(|e| e.row_key));
        request.continuation_token = page.continuation_token;
    }
    let expected: Vec<String> = (0..30).map(|row| format!("{row:02}")).collect();
    assert_eq!(seen, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_crashing_makes_servers_unavailable_then_they_recover_with_every_write_kept() {
    let Some((cluster, _url, servers, _dir)) = cluster_with_servers(1, &[]) else {
        return;
    };
    let mut client = servers[0].client().await;
    create_table(&mut client, "Kept").await;
    let insert = |row: usize| pb::InsertEntityRequest {
        table: "Kept".into(),
        entity: Some(entity("p", &format!("{row:05}"), &[])),
        ..Default::default()
    };

    // Writes go on while the database stops at once and starts again.
    let acknowledged = Arc::new(std::sync::Mutex::new(Vec::new()));
    let writer = {
        let mut client = servers[0].client().await;
        let acknowledged = acknowledged.clone();
        tokio::spawn(async move {
            let mut unavailable = 0;
            for row in 0..100_000 {
                match client.insert_entity(insert(row)).await {
                    Ok(_) => {
                        acknowledged.lock().unwrap().push(row);
                        if unavailable > 0 && acknowledged.lock().unwrap().len() > 200 {
                            return unavailable;
                        }
                    }
                    Err(status) => {
                        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                        unavailable += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            unavailable
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.kill();
        std::thread::sleep(Duration::from_secs(1));
        cluster.restart();
        cluster
    })
    .await
    .unwrap();
    let unavailable = tokio::time::timeout(Duration::from_secs(60), writer)
        .await
        .expect("the server did not recover within 60 s")
        .unwrap();
    assert!(unavailable > 0, "no request saw the database down");
    let acknowledged = acknowledged.lock().unwrap().clone();
    let stored = support::all_entities(&mut client, "Kept").await;
    for row in acknowledged {
        assert!(
            stored.contains_key(&("p".to_owned(), format!("{row:05}"))),
            "acknowledged row {row} was lost"
        );
    }
    drop(cluster);
}

/// Creates `table` again once its name is free: once the deleted table's rows are purged.
async fn create_again(client: &mut Client, table: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let create = pb::CreateTableRequest {
            table: table.into(),
            ..Default::default()
        };
        match client.create_table(create).await {
            Ok(_) => return,
            Err(status) if status.code() == Code::AlreadyExists && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(status) => panic!("{status:?}"),
        }
    }
}

/// Reads on one server (a point read, a page of a query, a read of many keys) see the table as
/// another server left it, at once: a time to live set there (the entity now expired reads as
/// missing), the table deleted there, and created again there (its new entities, never the
/// deleted table's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_see_the_table_as_another_server_just_left_it() {
    let Some((_cluster, _url, servers, _dir)) = cluster_with_servers(2, &[]) else {
        return;
    };
    let (mut a, mut b) = (servers[0].client().await, servers[1].client().await);
    create_table(&mut a, "Sessions").await;
    let insert = |row_key: &str| pb::InsertEntityRequest {
        table: "Sessions".into(),
        entity: Some(entity("s", row_key, &[])),
        ..Default::default()
    };
    a.insert_entity(insert("1")).await.unwrap();
    let read = || pb::GetEntityRequest {
        table: "Sessions".into(),
        partition_key: "s".into(),
        row_key: "1".into(),
        select: vec![],
    };
    let query = || pb::QueryEntitiesRequest {
        table: "Sessions".into(),
        partition_key: Some("s".into()),
        ..Default::default()
    };
    let read_many = || pb::GetEntitiesRequest {
        keys: vec![pb::EntityRef {
            table: "Sessions".into(),
            partition_key: "s".into(),
            row_key: "1".into(),
        }],
        select: vec![],
    };
    let row_keys = |page: pb::QueryEntitiesResponse| -> Vec<String> {
        page.entities.into_iter().map(|e| e.row_key).collect()
    };
    b.get_entity(read()).await.unwrap();
    let page = b.query_entities(query()).await.unwrap().into_inner();
    assert_eq!(row_keys(page), ["1"]);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    a.set_time_to_live(pb::SetTimeToLiveRequest {
        table: "Sessions".into(),
        enabled: true,
        default_seconds: 1,
    })
    .await
    .unwrap();
    let expired = b.get_entity(read()).await.unwrap_err();
    assert_eq!(expired.code(), Code::NotFound, "{expired:?}");
    assert!(expired.message().contains("PartitionKey"), "{expired:?}");
    let page = b.query_entities(query()).await.unwrap().into_inner();
    assert!(page.entities.is_empty(), "{page:?}");
    let many = b.get_entities(read_many()).await.unwrap().into_inner();
    assert!(many.entities[0].entity.is_none(), "{many:?}");
    a.delete_table(pb::DeleteTableRequest {
        table: "Sessions".into(),
    })
    .await
    .unwrap();
    let gone = b.get_entity(read()).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
    assert!(gone.message().contains("table"), "{gone:?}");
    let gone = b.query_entities(query()).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
    let gone = b.get_entities(read_many()).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
    create_again(&mut a, "SESSIONS").await;
    a.insert_entity(insert("2")).await.unwrap();
    let page = b.query_entities(query()).await.unwrap().into_inner();
    assert_eq!(row_keys(page), ["2"]);
    let many = b.get_entities(read_many()).await.unwrap().into_inner();
    assert!(many.entities[0].entity.is_none(), "{many:?}");
}

/// A write on one server goes to the table as another server just left it: refused once the
/// table is deleted there, into the new table once it is created again there (never through the
/// deleted table's id, which the server had written to).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_goes_to_the_table_as_another_server_just_left_it() {
    let Some((_cluster, _url, servers, _dir)) = cluster_with_servers(2, &[]) else {
        return;
    };
    let (mut a, mut b) = (servers[0].client().await, servers[1].client().await);
    let insert = |row_key: &str| pb::InsertEntityRequest {
        table: "Orders".into(),
        entity: Some(entity("o", row_key, &[])),
        ..Default::default()
    };
    let read = |row_key: &str| pb::GetEntityRequest {
        table: "Orders".into(),
        partition_key: "o".into(),
        row_key: row_key.into(),
        select: vec![],
    };
    let delete_table = || pb::DeleteTableRequest {
        table: "Orders".into(),
    };
    // Across two partitions: both rows inserted in one transaction.
    let across = |row_key: &str| pb::TransactWriteRequest {
        idempotency_key: String::new(),
        operations: ["o", "q"]
            .map(|pk| pb::TableOperation {
                table: "Orders".into(),
                partition_key: pk.into(),
                operation: Some(insert_op(entity(pk, row_key, &[]))),
            })
            .to_vec(),
    };
    let merge = |row_key: &str| pb::MergeEntityRequest {
        table: "Orders".into(),
        entity: Some(entity("o", row_key, &[("Merged", 1)])),
        if_match: "*".into(),
        ..Default::default()
    };
    create_table(&mut a, "Orders").await;
    b.insert_entity(insert("1")).await.unwrap();
    // B commits to the table every way it can, and so knows it.
    b.merge_entity(merge("1")).await.unwrap();
    b.transact_write(across("x")).await.unwrap();
    a.delete_table(delete_table()).await.unwrap();
    create_again(&mut a, "Orders").await;
    // B's first commits after the change: across partitions, a merge, an insert.
    b.transact_write(across("y")).await.unwrap();
    a.get_entity(read("y"))
        .await
        .expect("the transaction is in the new table");
    b.merge_entity(merge("y")).await.unwrap();
    let merged = a.get_entity(read("y")).await.unwrap().into_inner();
    assert!(merged.properties.contains_key("Merged"), "{merged:?}");
    b.insert_entity(insert("2")).await.unwrap();
    a.get_entity(read("2"))
        .await
        .expect("the write is in the new table");
    let old = a.get_entity(read("1")).await.unwrap_err();
    assert_eq!(old.code(), Code::NotFound, "the new table is new: {old:?}");
    a.delete_table(delete_table()).await.unwrap();
    let gone = b.insert_entity(insert("3")).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
    assert!(gone.message().contains("table"), "{gone:?}");
}

/// Server B inserts (in one round trip, the table having no index), server A then declares a
/// unique index: B's next inserts and merges find the catalog changed and go the full way,
/// keeping the index (its entries and its uniqueness).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_keeps_the_index_another_server_just_declared() {
    let Some((_cluster, _url, servers, _dir)) = cluster_with_servers(2, &[]) else {
        return;
    };
    let (mut a, mut b) = (servers[0].client().await, servers[1].client().await);
    let insert = |row_key: &str, rank: i64| pb::InsertEntityRequest {
        table: "Orders".into(),
        entity: Some(entity("o", row_key, &[("Rank", rank)])),
        ..Default::default()
    };
    create_table(&mut a, "Orders").await;
    b.insert_entity(insert("1", 1)).await.unwrap();
    let index = pb::IndexDefinition {
        name: "ByRank".into(),
        properties: vec!["Rank".into()],
        scope: pb::IndexScope::Table as i32,
        unique: true,
    };
    let create = pb::CreateIndexRequest {
        table: "Orders".into(),
        index: Some(index),
    };
    a.create_index(create).await.unwrap();
    let by_rank = pb::QueryEntitiesRequest {
        table: "Orders".into(),
        index: "ByRank".into(),
        ..Default::default()
    };
    // The lease runs out 10 s after its holder's last renewal.
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(status) = a.query_entities(by_rank.clone()).await {
        assert!(
            Instant::now() < deadline,
            "the index is never ready: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A transaction across partitions and a merge through B, which read the catalog before the
    // index: their entries are written and moved.
    let across = pb::TransactWriteRequest {
        idempotency_key: String::new(),
        operations: [("o", "a7", 7), ("q", "b8", 8)]
            .map(|(pk, rk, rank)| pb::TableOperation {
                table: "Orders".into(),
                partition_key: pk.into(),
                operation: Some(insert_op(entity(pk, rk, &[("Rank", rank)]))),
            })
            .to_vec(),
    };
    b.transact_write(across).await.unwrap();
    let merge = pb::MergeEntityRequest {
        table: "Orders".into(),
        entity: Some(entity("o", "1", &[("Rank", 5)])),
        if_match: "*".into(),
        ..Default::default()
    };
    b.merge_entity(merge).await.unwrap();
    b.insert_entity(insert("2", 2)).await.unwrap();
    let found = a.query_entities(by_rank).await.unwrap().into_inner();
    let row_keys: Vec<&str> = found.entities.iter().map(|e| e.row_key.as_str()).collect();
    assert_eq!(
        row_keys,
        ["2", "1", "a7", "b8"],
        "the commits through B have their index entries"
    );
    let taken = b.insert_entity(insert("3", 2)).await.unwrap_err();
    assert_eq!(taken.code(), Code::AlreadyExists, "{taken:?}");
    let missing = pb::GetEntityRequest {
        table: "Orders".into(),
        partition_key: "o".into(),
        row_key: "3".into(),
        select: vec![],
    };
    assert_eq!(
        a.get_entity(missing).await.unwrap_err().code(),
        Code::NotFound
    );
}

/// Server B inserts into a table without a feed (in one round trip), server A then starts the
/// feed: B's next insert finds the catalog changed and writes its record, and B's inserts after
/// it (one round trip again, the feed now in the catalog B read) write theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_writes_the_record_of_a_feed_another_server_just_started() {
    let Some((_cluster, _url, servers, _dir)) = cluster_with_servers(2, &[]) else {
        return;
    };
    let (mut a, mut b) = (servers[0].client().await, servers[1].client().await);
    let insert = |row_key: &str| pb::InsertEntityRequest {
        table: "Events".into(),
        entity: Some(entity("e", row_key, &[])),
        ..Default::default()
    };
    create_table(&mut a, "Events").await;
    b.insert_entity(insert("before")).await.unwrap();
    let start = pb::SetChangeFeedRequest {
        table: "Events".into(),
        enabled: true,
        ..Default::default()
    };
    a.set_change_feed(start).await.unwrap();
    for row_key in ["1", "2", "3"] {
        b.insert_entity(insert(row_key)).await.unwrap();
    }
    let (recorded, _) = feed_after(&mut a, "Events", "").await;
    assert_eq!(recorded, ["1", "2", "3"]);
}

/// Every row key of `table`'s feed after `cursor` read through `client`, and the last cursor.
async fn feed_after(client: &mut Client, table: &str, cursor: &str) -> (Vec<String>, String) {
    let (records, last) = records_after(client, table, cursor).await;
    (records.into_iter().map(|c| c.row_key).collect(), last)
}

/// Every record of `table`'s feed after `cursor` read through `client`, and the last cursor.
async fn records_after(
    client: &mut Client,
    table: &str,
    cursor: &str,
) -> (Vec<pb::Change>, String) {
    let request = pb::ReadChangesRequest {
        table: table.into(),
        cursor: cursor.into(),
        follow: false,
        ..Default::default()
    };
    let mut stream = client.read_changes(request).await.unwrap().into_inner();
    let (mut records, mut last) = (Vec::new(), cursor.to_owned());
    while let Some(batch) = stream.message().await.unwrap() {
        records.extend(batch.changes);
        last = batch.cursor;
    }
    (records, last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_feed_written_by_two_servers_resumes_on_either() {
    let Some((_cluster, _url, servers, _dir)) = cluster_with_servers(2, &[]) else {
        return;
    };
    let (mut a, mut b) = (servers[0].client().await, servers[1].client().await);
    a.create_table(pb::CreateTableRequest {
        table: "Feed".into(),
        change_feed: true,
        ..Default::default()
    })
    .await
    .unwrap();
    // Both servers write at once; each record appears once, whoever reads.
    let write = |mut client: Client, server: usize| async move {
        for n in 0..50 {
            let row = format!("s{server}-{n:02}");
            let request = pb::InsertEntityRequest {
                table: "Feed".into(),
                entity: Some(entity(&format!("p{}", n % 4), &row, &[("N", n)])),
                ..Default::default()
            };
            client.insert_entity(request).await.unwrap();
        }
    };
    let writers = [
        tokio::spawn(write(a.clone(), 0)),
        tokio::spawn(write(b.clone(), 1)),
    ];
    let (first, cursor) = feed_after(&mut a, "Feed", "").await;
    for writer in writers {
        writer.await.unwrap();
    }
    let (rest, _) = feed_after(&mut b, "Feed", &cursor).await;
    let mut all: Vec<String> = first.into_iter().chain(rest).collect();
    assert_eq!(all.len(), 100, "{all:?}");
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 100, "no record twice");
    let (whole, _) = feed_after(&mut b, "Feed", "").await;
    assert_eq!(whole.len(), 100);
}

/// The housekeeping passes a server (its metrics at `metrics`) counted as removing expired
/// entities.
async fn expiring_passes(metrics: &str) -> f64 {
    let scraped = scrape(metrics).await;
    sample(
        &scraped,
        "trestle_background_jobs_total",
        &["work=\"expire\""],
    )
}

/// Inserts an entity into `Expiring` every 50 ms for `seconds`, each expiring a second later.
async fn insert_expiring(client: &mut Client, prefix: &str, seconds: u64) {
    for n in 0..seconds * 20 {
        let request = pb::InsertEntityRequest {
            table: "Expiring".into(),
            entity: Some(entity("p", &format!("{prefix}{n:04}"), &[("N", 1)])),
            ..Default::default()
        };
        client.insert_entity(request).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_at_a_time_removes_expired_entities_and_another_takes_over_when_it_dies() {
    let started = tokio::task::block_in_place(|| {
        let cluster = Postgres::start()?;
        let url = cluster.database("shared");
        Some((cluster, url))
    });
    let Some((_cluster, url)) = started else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let metrics = [free_port(), free_port()];
    let mut servers: Vec<Option<ServerProcess>> = metrics
        .iter()
        .enumerate()
        .map(|(n, listen)| {
            let data_dir = dir.path().join(format!("unused-{n}"));
            Some(server_over(&url, &data_dir, &["--metrics-listen", listen]))
        })
        .collect();
    let mut client = servers[0].as_ref().unwrap().client().await;
    client
        .create_table(pb::CreateTableRequest {
            table: "Expiring".into(),
            time_to_live: true,
            default_time_to_live_seconds: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    // Entities expire all along, so that every server's passes (one a second) would find some.
    insert_expiring(&mut client, "a", 5).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let passes = [
        expiring_passes(&metrics[0]).await,
        expiring_passes(&metrics[1]).await,
    ];
    let tending = match passes {
        [tended, 0.0] if tended > 0.0 => 0,
        [0.0, tended] if tended > 0.0 => 1,
        _ => panic!("expiring passes of the two servers: {passes:?}"),
    };

    servers[tending].take().unwrap().kill_9();
    let other = 1 - tending;
    let mut client = servers[other].as_ref().unwrap().client().await;
    insert_expiring(&mut client, "b", 1).await;
    // The lease runs out 10 s after its holder's last renewal.
    let deadline = Instant::now() + Duration::from_secs(30);
    while expiring_passes(&metrics[other]).await == 0.0 {
        assert!(
            Instant::now() < deadline,
            "no server took the housekeeping over"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The count `sql` (with `params`) answers in the database at `url`, asked off the runtime's
/// turn.
fn count_in(url: &str, sql: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> i64 {
    tokio::task::block_in_place(|| {
        let mut admin = postgres::Client::connect(url, postgres::NoTls).unwrap();
        admin.query_one(sql, params).unwrap().get(0)
    })
}

/// Whether the database at `url` holds a housekeeping lease.
fn lease_written(url: &str) -> bool {
    let lease = "SELECT count(*) FROM trestle_meta WHERE key = 'housekeeping_lease'";
    count_in(url, lease, &[]) > 0
}

/// Servers whose tables keep no feed and let nothing expire write no lease (a database written
/// each second by every idle store otherwise); the first table that needs tending makes one of
/// them take it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_server_claims_the_housekeeping_while_there_is_nothing_to_tend() {
    let Some((_cluster, url, servers, _dir)) = cluster_with_servers(2, &[]) else {
        return;
    };
    let mut client = servers[0].client().await;
    create_table(&mut client, "Plain").await;
    client
        .insert_entity(pb::InsertEntityRequest {
            table: "Plain".into(),
            entity: Some(entity("p", "r", &[("N", 1)])),
            ..Default::default()
        })
        .await
        .unwrap();
    // The housekeeping passes once a second.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!lease_written(&url));
    client
        .create_table(pb::CreateTableRequest {
            table: "Expiring".into(),
            time_to_live: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !lease_written(&url) {
        assert!(Instant::now() < deadline, "no server took the housekeeping");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A deleted table's rows are all purged, and its name freed, when another purger deletes part
/// of them meanwhile: here a transaction of the test's own deletes the first two batches' worth
/// and holds them while the server purges, as a second server's purger would (before, the server
/// took the others' batch being gone for the table being empty, forgot the table and left the
/// rest of its rows in the database for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_purged_by_two_purgers_at_once_leaves_no_row_behind() {
    let Some((_cluster, url, servers, _dir)) = cluster_with_servers(1, &[]) else {
        return;
    };
    let mut client = servers[0].client().await;
    create_table(&mut client, "Big").await;
    let (other_purger, id) = tokio::task::block_in_place(|| {
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let id: i64 = admin
            .query_one(
                "SELECT id FROM trestle_tables WHERE folded = 'big' AND live",
                &[],
            )
            .unwrap()
            .get(0);
        // Three purge batches of rows, keyed in the order a batch takes them.
        admin
            .execute(
                "INSERT INTO trestle_entities SELECT $1, convert_to(lpad(g::text, 6, '0'), 'UTF8'),
                 '\\x72'::bytea, '\\x00'::bytea FROM generate_series(1, 6000) g",
                &[&id],
            )
            .unwrap();
        let (deleted, commit) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let other = std::thread::spawn(move || {
            let mut transaction = admin.transaction().unwrap();
            let rows = transaction
                .execute(
                    "DELETE FROM trestle_entities WHERE table_id = $1 AND pk <= '\\x303034303030'",
                    &[&id],
                )
                .unwrap();
            deleted.0.send(rows).unwrap();
            commit.1.recv().unwrap();
            transaction.commit().unwrap();
        });
        assert_eq!(deleted.1.recv().unwrap(), 4000);
        ((other, commit.0), id)
    });
    client
        .delete_table(pb::DeleteTableRequest {
            table: "Big".into(),
        })
        .await
        .unwrap();
    // The server's purger meets the rows the other one holds.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (other, commit) = other_purger;
    commit.send(()).unwrap();
    other.join().unwrap();
    let count = |sql: &str| count_in(&url, sql, &[&id]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while count("SELECT count(*) FROM trestle_tables WHERE id = $1") > 0 {
        assert!(
            Instant::now() < deadline,
            "the deleted table is never forgotten"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        count("SELECT count(*) FROM trestle_entities WHERE table_id = $1"),
        0,
        "rows of a forgotten table are left in the database"
    );
    create_table(&mut client, "Big").await;
}

/// `trestle_entities` locked in a mode by a transaction of the test's own, until released.
struct EntitiesLocked {
    release: std::sync::mpsc::Sender<()>,
    holder: std::thread::JoinHandle<()>,
}

impl EntitiesLocked {
    /// Locks `trestle_entities` of the database at `url` in `mode` (`SHARE` holds back writes,
    /// `ACCESS EXCLUSIVE` reads too), once the lock is held.
    fn hold(url: &str, mode: &str) -> EntitiesLocked {
        let (url, lock) = (
            url.to_owned(),
            format!("LOCK TABLE trestle_entities IN {mode} MODE"),
        );
        let (locked, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let holder = std::thread::spawn(move || {
            let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            let mut transaction = admin.transaction().unwrap();
            transaction.batch_execute(&lock).unwrap();
            locked.0.send(()).unwrap();
            release.1.recv().unwrap();
            transaction.commit().unwrap();
        });
        locked.1.recv().unwrap();
        EntitiesLocked {
            release: release.0,
            holder,
        }
    }

    fn release(self) {
        self.release.send(()).unwrap();
        self.holder.join().unwrap();
    }
}

/// Single-entity inserts that wait for the database go to it together (`insert_batches.rs`):
/// here the test holds every insert into `trestle_entities` back while 40 wait, then lets them
/// go. Each entity is inserted once: of two inserts of one entity waiting together one commits
/// and the other is refused, inserts of an entity already stored are refused, and the others
/// commit with them; the feed holds one record per entity inserted, and records of inserts
/// committed together share their transaction's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inserts_waiting_together_commit_each_entity_once_and_refuse_only_their_own() {
    let Some((_cluster, url, servers, _dir)) = cluster_with_servers(1, &[]) else {
        return;
    };
    let mut client = servers[0].client().await;
    client
        .create_table(pb::CreateTableRequest {
            table: "Batched".into(),
            change_feed: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let insert = |row_key: String| pb::InsertEntityRequest {
        table: "Batched".into(),
        entity: Some(entity(&format!("p{}", row_key.len() % 3), &row_key, &[])),
        ..Default::default()
    };
    client.insert_entity(insert("taken".into())).await.unwrap();
    let (_, cursor) = feed_after(&mut client, "Batched", "").await;
    let held = EntitiesLocked::hold(&url, "SHARE");
    // 30 entities, five of them inserted twice, and five inserts of the one stored.
    let row_keys = (0..30)
        .map(|n| format!("r{n:02}"))
        .chain((0..5).map(|n| format!("r{n:02}")))
        .chain((0..5).map(|_| "taken".to_owned()));
    let inserts: Vec<_> = row_keys
        .map(|row_key| {
            let mut client = client.clone();
            let request = insert(row_key.clone());
            tokio::spawn(async move { (row_key, client.insert_entity(request).await) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    held.release();
    let mut committed = BTreeSet::new();
    let mut refused = Vec::new();
    for insert in inserts {
        match insert.await.unwrap() {
            (row_key, Ok(_)) => assert!(committed.insert(row_key), "an entity inserted twice"),
            (row_key, Err(status)) => {
                assert_eq!(status.code(), Code::AlreadyExists, "{status:?}");
                refused.push(row_key);
            }
        }
    }
    let expected: BTreeSet<String> = (0..30).map(|n| format!("r{n:02}")).collect();
    assert_eq!(committed, expected);
    refused.sort();
    let mut expected_refused: Vec<String> = (0..5).map(|n| format!("r{n:02}")).collect();
    expected_refused.extend((0..5).map(|_| "taken".to_owned()));
    assert_eq!(refused, expected_refused);
    let (records, _) = records_after(&mut client, "Batched", &cursor).await;
    let recorded: BTreeSet<String> = records.iter().map(|r| r.row_key.clone()).collect();
    assert_eq!((records.len(), recorded), (30, expected));
    let transactions: BTreeSet<u64> = records.iter().map(|r| r.transaction_id).collect();
    assert!(
        transactions.len() < records.len(),
        "no two inserts went together"
    );
}

/// Point reads that wait for the database go to it together (`point_reads.rs`): here the test
/// holds every read of `trestle_entities` back while 40 wait, then lets them go, and each is
/// answered with its own entity, its own absence or its own missing table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_reads_waiting_together_each_get_their_own_answer() {
    let Some((_cluster, url, servers, _dir)) = cluster_with_servers(1, &[]) else {
        return;
    };
    let mut client = servers[0].client().await;
    create_table(&mut client, "Reads").await;
    for n in 0..30 {
        let request = pb::InsertEntityRequest {
            table: "Reads".into(),
            entity: Some(entity(
                &format!("p{}", n % 3),
                &format!("r{n}"),
                &[("N", n)],
            )),
            ..Default::default()
        };
        client.insert_entity(request).await.unwrap();
    }
    let held = EntitiesLocked::hold(&url, "ACCESS EXCLUSIVE");
    // 27 stored entities, 8 missing ones and 5 of a table that does not exist, interleaved.
    let reads: Vec<_> = (0..40i64)
        .map(|n| {
            let mut client = client.clone();
            let table = if n % 8 == 7 { "NoSuchTable" } else { "Reads" };
            let request = pb::GetEntityRequest {
                table: table.into(),
                partition_key: format!("p{}", n % 3),
                row_key: format!("r{n}"),
                select: vec![],
            };
            tokio::spawn(async move { (n, client.get_entity(request).await) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    held.release();
    let reason = |status: &tonic::Status| {
        use tonic_types::StatusExt;
        let details = status.get_error_details();
        details.error_info().map(|info| info.reason.clone())
    };
    for read in reads {
        let (n, answer) = read.await.unwrap();
        match answer {
            Ok(found) => {
                let found = found.into_inner();
                assert!(n < 30 && n % 8 != 7, "{n} found");
                assert_eq!(
                    (found.row_key.clone(), int64_of(&found, "N")),
                    (format!("r{n}"), n)
                );
            }
            Err(status) if n % 8 == 7 => {
                assert_eq!(reason(&status).as_deref(), Some("TableNotFound"), "{n}")
            }
            Err(status) => {
                assert!(n >= 30, "{n} not found");
                assert_eq!(reason(&status).as_deref(), Some("ResourceNotFound"), "{n}");
            }
        }
    }
}
