//! Prometheus metrics: a server started with `--metrics-listen` (and the REST endpoint), known
//! traffic over both protocols, then `/metrics` scraped: each counter moved by exactly what was
//! sent; then background work and streams, and over PostgreSQL the pool's use and the purge.
//! Without the flag nothing is served (tests/… never pass it).

#[path = "../../tests/common/postgres.rs"]
mod postgres_cluster;
mod support;

use support::{entity, free_port, http, sample, scrape, ServerProcess};
use trestle_proto::pb;

#[tokio::test]
async fn counters_move_by_the_traffic_sent_over_both_protocols() {
    let data_dir = tempfile::tempdir().unwrap();
    let (metrics, rest) = (free_port(), free_port());
    let server = ServerProcess::start_with(
        data_dir.path(),
        &["--metrics-listen", &metrics, "--rest-listen", &rest],
    );
    let mut client = server.client().await;
    client
        .create_table(pb::CreateTableRequest {
            table: "Metered".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    for n in 0..5 {
        let request = pb::InsertEntityRequest {
            table: "Metered".into(),
            entity: Some(entity("p", &format!("r{n}"), &[("N", n)])),
            ..Default::default()
        };
        client.insert_entity(request).await.unwrap();
    }
    let get = |row: &str| pb::GetEntityRequest {
        table: "Metered".into(),
        partition_key: "p".into(),
        row_key: row.into(),
        select: vec![],
    };
    for row in ["r0", "r1", "r2"] {
        client.get_entity(get(row)).await.unwrap();
    }
    client.get_entity(get("missing")).await.unwrap_err();
    let query = pb::QueryEntitiesRequest {
        table: "Metered".into(),
        filter: "N ge 3L".into(),
        ..Default::default()
    };
    let found = client.query_entities(query).await.unwrap().into_inner();
    assert_eq!(found.entities.len(), 2);
    let answer = http(
        &rest,
        "GET /devstoreaccount1/Metered(PartitionKey='p',RowKey='r4') HTTP/1.1\r\nHost: x\r\n\
         x-ms-version: 2019-02-02\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let scraped = http(
        &metrics,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(scraped.starts_with("HTTP/1.1 200"), "{scraped}");
    let requests = |labels: &[&str]| sample(&scraped, "trestle_requests_total", labels);
    let grpc = r#"protocol="grpc""#;
    assert_eq!(
        requests(&[grpc, r#"operation="InsertEntity""#, r#"code="Ok""#]),
        5.0
    );
    assert_eq!(
        requests(&[grpc, r#"operation="GetEntity""#, r#"code="Ok""#]),
        3.0
    );
    assert_eq!(
        requests(&[grpc, r#"operation="GetEntity""#, r#"code="NotFound""#]),
        1.0
    );
    assert_eq!(
        requests(&[
            r#"protocol="rest""#,
            r#"operation="GET Entity""#,
            r#"code="200""#
        ]),
        1.0
    );
    let refused = sample(
        &scraped,
        "trestle_refusals_total",
        &[r#"reason="ResourceNotFound""#],
    );
    assert_eq!(refused, 1.0);
    let inserts = [grpc, r#"operation="InsertEntity""#];
    let timed = sample(&scraped, "trestle_request_duration_seconds_count", &inserts);
    assert_eq!(timed, 5.0, "{scraped}");
    assert_eq!(
        sample(&scraped, "trestle_entities_examined_total", &[]),
        5.0
    );
    assert_eq!(
        sample(&scraped, "trestle_entities_returned_total", &[]),
        2.0
    );
    assert_eq!(sample(&scraped, "trestle_requests_in_flight", &[grpc]), 0.0);
    // Every acknowledged insert was made durable by some flush (group commit).
    let grouped = sample(&scraped, "trestle_commit_group_writes_sum", &[]);
    let flushes = sample(&scraped, "trestle_commit_group_writes_count", &[]);
    assert!(
        grouped >= 5.0 && flushes >= 1.0 && flushes <= grouped,
        "{scraped}"
    );
    let flush_seconds = sample(&scraped, "trestle_flush_duration_seconds_count", &[]);
    assert_eq!(flush_seconds, flushes);

    background_work_and_open_streams(&mut client, &metrics).await;
    server.terminate();
}

/// Methods and verbs a client invents add no label: thousands of calls to long made-up gRPC
/// methods (`UNIMPLEMENTED`) and HTTP verbs (501), without a credential, leave `/metrics` as small
/// as it was, counted under `operation="other"`.
#[tokio::test]
async fn names_a_client_invents_add_no_metric_label() {
    let data_dir = tempfile::tempdir().unwrap();
    let (metrics, rest) = (free_port(), free_port());
    let server = ServerProcess::start_with(
        data_dir.path(),
        &["--metrics-listen", &metrics, "--rest-listen", &rest],
    );
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    const CALLS: usize = 200;
    for n in 0..CALLS {
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready().await.unwrap();
        let path = format!("/trestle.v1.TableService/Made{n:04}{}", "x".repeat(2_000));
        let path = http::uri::PathAndQuery::try_from(path).unwrap();
        let codec = trestle_proto::codec::ReplyCodec::<pb::GetTableRequest, pb::Table>::default();
        let answer = grpc
            .unary(
                tonic::Request::new(pb::GetTableRequest::default()),
                path,
                codec,
            )
            .await;
        assert_eq!(answer.unwrap_err().code(), tonic::Code::Unimplemented);
    }
    for n in 0..CALLS {
        let verb = format!("VERB{n:04}{}", "Y".repeat(2_000));
        let answer = http(
            &rest,
            &format!(
                "{verb} /devstoreaccount1/Tables HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            ),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    }
    let scraped = scrape(&metrics).await;
    assert!(
        !scraped.contains("Made0") && !scraped.contains("VERB0"),
        "{scraped}"
    );
    assert!(scraped.len() < 64 * 1024, "{} bytes", scraped.len());
    let others = |protocol: &str| {
        let protocol = format!("protocol=\"{protocol}\"");
        let labels = [protocol.as_str(), r#"operation="other""#];
        sample(&scraped, "trestle_requests_total", &labels)
    };
    assert_eq!(others("grpc"), CALLS as f64, "{scraped}");
    assert_eq!(others("rest"), CALLS as f64, "{scraped}");
    server.terminate();
}

/// The metrics listener keeps what every HTTP listener of the server keeps: 64 idle connections
/// held open by a client leave the 65th closed at once (no socket or task past the cap), a
/// request on one of the 64 is still answered, and once one is let go a new scrape is answered.
#[tokio::test]
async fn the_metrics_listener_caps_its_connections() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let data_dir = tempfile::tempdir().unwrap();
    let metrics = free_port();
    let _server = ServerProcess::start_with(data_dir.path(), &["--metrics-listen", &metrics]);
    assert!(scrape(&metrics).await.starts_with("HTTP/1.1 200"));
    let mut held = Vec::new();
    for _ in 0..64 {
        held.push(tokio::net::TcpStream::connect(&metrics).await.unwrap());
    }
    // The 65th is accepted and closed without an answer.
    let mut over = tokio::net::TcpStream::connect(&metrics).await.unwrap();
    let _ = over
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        over.read_to_end(&mut answer),
    )
    .await
    .expect("the connection over the cap is closed");
    assert!(
        answer.is_empty(),
        "{read:?} {}",
        String::from_utf8_lossy(&answer)
    );
    // One of those held is served.
    let mut first = held.remove(0);
    first
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    first.read_to_end(&mut answer).await.unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200"));
    drop(first);
    // With one let go, a new scrape gets in (the server may take a moment to count it gone).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut socket = tokio::net::TcpStream::connect(&metrics).await.unwrap();
        let _ = socket
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await;
        let mut answer = Vec::new();
        let _ = socket.read_to_end(&mut answer).await;
        if answer.starts_with(b"HTTP/1.1 200") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no scrape let in");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Scrapes until the sample of `name` with `labels` is `value` (background work ends when it
/// ends), for at most 20 s.
async fn until(addr: &str, name: &str, labels: &[&str], value: f64) {
    for _ in 0..200 {
        if sample(&scrape(addr).await, name, labels) == value {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let last = sample(&scrape(addr).await, name, labels);
    panic!("{name}{labels:?} never became {value}: {last}");
}

async fn background_work_and_open_streams(client: &mut support::Client, metrics: &str) {
    let builds = [r#"work="index_build""#];
    assert_eq!(
        sample(
            &scrape(metrics).await,
            "trestle_background_jobs_total",
            &builds
        ),
        0.0
    );
    client
        .create_index(pb::CreateIndexRequest {
            table: "Metered".into(),
            index: Some(pb::IndexDefinition {
                name: "ByN".into(),
                properties: vec!["N".into()],
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    until(metrics, "trestle_background_jobs_total", &builds, 1.0).await;

    // A stream counts while it is open: 3,000 entities are more than one batch.
    let mut tx = Vec::new();
    for n in 0..3_000 {
        let padded = entity(
            "big",
            &format!("r{n:05}"),
            &[("N", n), ("Pad", n * 1_000_003)],
        );
        tx.push(pb::InsertEntityRequest {
            table: "Metered".into(),
            entity: Some(padded),
            ..Default::default()
        });
    }
    for request in tx {
        client.insert_entity(request).await.unwrap();
    }
    let mut scan = client
        .scan_entities(pb::QueryEntitiesRequest {
            table: "Metered".into(),
            partition_key: Some("big".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(scan.message().await.unwrap().is_some());
    until(metrics, "trestle_open_streams", &[], 1.0).await;
    drop(scan);
    until(metrics, "trestle_open_streams", &[], 0.0).await;

    client
        .delete_table(pb::DeleteTableRequest {
            table: "Metered".into(),
        })
        .await
        .unwrap();
    until(
        metrics,
        "trestle_background_jobs_total",
        &[r#"work="table_reclaim""#],
        1.0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgresql_stores_pool_and_purge_are_counted() {
    let Some(cluster) = tokio::task::block_in_place(postgres_cluster::Postgres::start) else {
        return;
    };
    let url = tokio::task::block_in_place(|| cluster.database("metered"));
    let data_dir = tempfile::tempdir().unwrap();
    let metrics = free_port();
    let server = ServerProcess::start_with(
        data_dir.path(),
        &[
            "--store",
            &url,
            "--store-pool-size",
            "1",
            "--metrics-listen",
            &metrics,
        ],
    );
    let mut client = server.client().await;
    client
        .create_table(pb::CreateTableRequest {
            table: "Pooled".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    // 32 inserts at once over one connection: some wait for it.
    let inserts = (0..32).map(|n| {
        let mut client = client.clone();
        tokio::spawn(async move {
            let request = pb::InsertEntityRequest {
                table: "Pooled".into(),
                entity: Some(entity("p", &format!("r{n}"), &[("N", n)])),
                ..Default::default()
            };
            client.insert_entity(request).await.unwrap();
        })
    });
    for insert in inserts.collect::<Vec<_>>() {
        insert.await.unwrap();
    }
    let scraped = scrape(&metrics).await;
    assert!(
        sample(&scraped, "trestle_store_connection_waits_total", &[]) >= 1.0,
        "{scraped}"
    );
    until(&metrics, "trestle_store_connections_busy", &[], 0.0).await;
    client
        .delete_table(pb::DeleteTableRequest {
            table: "Pooled".into(),
        })
        .await
        .unwrap();
    let purges = [r#"work="purge_batch""#];
    for _ in 0..200 {
        if sample(
            &scrape(&metrics).await,
            "trestle_background_jobs_total",
            &purges,
        ) >= 1.0
        {
            server.terminate();
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("no purge batch was counted");
}
