//! Caught-up change-feed followers wait for a notification, not a poll each (both stores): in a
//! test binary of its own, so that the process's CPU time is the server's and this test's alone.

mod common;

use std::time::{Duration, Instant};

use common::{int32, TestServer};
use trestle_proto::pb;

/// CPU seconds this process (the test and its in-process server) has used.
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // The fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// Caught-up followers wait for a notification, not a poll each: 200 of them on an idle feed
/// cost the server next to nothing, and each is woken by the next commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_followers_cost_next_to_nothing_and_wake_on_a_commit() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    client
        .create_table(pb::CreateTableRequest {
            table: "Idle".into(),
            change_feed: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let insert =
        |row: &str| common::insert_request("Idle", common::entity("p", row, &[("N", int32(1))]));
    client.insert_entity(insert("first")).await.unwrap();
    let idle_cores = || async {
        let (started, cpu) = (Instant::now(), process_cpu_seconds());
        tokio::time::sleep(Duration::from_secs(2)).await;
        (process_cpu_seconds() - cpu) / started.elapsed().as_secs_f64()
    };
    let without = idle_cores().await;
    let mut followers = Vec::new();
    for _ in 0..5 {
        let mut connection = server.client().await;
        for _ in 0..40 {
            let request = pb::ReadChangesRequest {
                table: "Idle".into(),
                follow: true,
                ..Default::default()
            };
            let mut stream = connection.read_changes(request).await.unwrap().into_inner();
            let first = stream.message().await.unwrap().unwrap();
            assert_eq!(first.changes.len(), 1);
            followers.push(stream);
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let with = idle_cores().await;
    eprintln!("idle: {without:.3} cores without followers, {with:.3} with 200");
    assert!(
        with - without < 0.1,
        "200 idle followers took {with:.2} cores, {without:.2} without them"
    );

    client.insert_entity(insert("second")).await.unwrap();
    for stream in &mut followers {
        let woken = tokio::time::timeout(Duration::from_secs(5), stream.message()).await;
        let batch = woken.expect("woken by the commit").unwrap().unwrap();
        assert_eq!(batch.changes[0].row_key, "second");
    }
}
