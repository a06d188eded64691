//! A change feed across SIGKILL (the built binary, the embedded store): writers insert while a
//! follower reads and keeps its cursor; the server is killed; after a restart, reading on from the
//! follower's cursor gives every acknowledged write exactly once across both reads, and every
//! record names an entity the table holds (no record of a change that did not happen).

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{all_entities, entity, insert_op, Client, ServerProcess};
use trestle_proto::pb;

const TABLE: &str = "Events";

/// Inserts rows `w<writer>-<n>` (singly, and every fifth time three in one transaction) until
/// the server dies; every acknowledged row key goes to `acknowledged`.
async fn write_until_killed(
    mut client: Client,
    writer: u32,
    acknowledged: Arc<Mutex<Vec<String>>>,
) {
    for n in 0.. {
        let row = |i: u32| format!("w{writer}-{n:06}-{i}");
        let written = if n % 5 == 0 {
            let operations = (0..3)
                .map(|i| insert_op(entity("tx", &row(i), &[("N", i64::from(n))])))
                .collect();
            let request = pb::SubmitTransactionRequest {
                idempotency_key: String::new(),
                table: TABLE.into(),
                partition_key: "tx".into(),
                operations,
            };
            client
                .submit_transaction(request)
                .await
                .map(|_| (0..3).map(row).collect())
        } else {
            let request = pb::InsertEntityRequest {
                table: TABLE.into(),
                entity: Some(entity(
                    &format!("p{writer}"),
                    &row(0),
                    &[("N", i64::from(n))],
                )),
                ..Default::default()
            };
            client.insert_entity(request).await.map(|_| vec![row(0)])
        };
        match written {
            Ok(rows) => acknowledged.lock().unwrap().extend(rows),
            Err(_) => return,
        }
    }
}

/// Follows the feed until the server dies: every row key seen, and the last cursor.
async fn follow_until_killed(mut client: Client) -> (Vec<String>, String) {
    let request = pb::ReadChangesRequest {
        table: TABLE.into(),
        follow: true,
        ..Default::default()
    };
    let mut stream = client.read_changes(request).await.unwrap().into_inner();
    let (mut seen, mut cursor) = (Vec::new(), String::new());
    while let Ok(Some(batch)) = stream.message().await {
        seen.extend(batch.changes.into_iter().map(|c| c.row_key));
        cursor = batch.cursor;
    }
    (seen, cursor)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_resumes_after_sigkill_with_no_gap_and_no_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path());
    let mut client = server.client().await;
    client
        .create_table(pb::CreateTableRequest {
            table: TABLE.into(),
            change_feed: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let follower = tokio::spawn(follow_until_killed(server.client().await));
    let writers: Vec<_> = (0..3)
        .map(|writer| {
            tokio::spawn(write_until_killed(
                client.clone(),
                writer,
                acknowledged.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.kill_9();
    for writer in writers {
        writer.await.unwrap();
    }
    let (before, cursor) = follower.await.unwrap();
    assert!(
        !before.is_empty() && !cursor.is_empty(),
        "the follower read before the kill"
    );

    let server = ServerProcess::start(dir.path());
    let mut client = server.client().await;
    let request = pb::ReadChangesRequest {
        table: TABLE.into(),
        cursor,
        follow: false,
        ..Default::default()
    };
    let mut stream = client.read_changes(request).await.unwrap().into_inner();
    let mut after = Vec::new();
    while let Some(batch) = stream.message().await.unwrap() {
        after.extend(batch.changes.into_iter().map(|c| c.row_key));
    }
    let mut recorded = BTreeSet::new();
    for row in before.iter().chain(&after) {
        assert!(recorded.insert(row.clone()), "{row} recorded twice");
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    for row in &acknowledged {
        assert!(recorded.contains(row), "acknowledged {row} has no record");
    }
    let stored: BTreeSet<String> = all_entities(&mut client, TABLE)
        .await
        .into_keys()
        .map(|(_, row)| row)
        .collect();
    assert_eq!(
        recorded, stored,
        "a record for each entity, and an entity for each record"
    );
    eprintln!(
        "{} acknowledged, {} read before the kill, {} after",
        acknowledged.len(),
        before.len(),
        after.len()
    );
    server.terminate();
}
