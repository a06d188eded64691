//! Idempotency keys through SIGKILL: the SDK with its default settings, 8 tasks counting while the
//! server is killed and restarted by a supervisor three times, sees no error and counts each call
//! once. And 8 raw clients count on counters of their own with keyed
//! increments while the server is killed; each then sends its unanswered call again, with the
//! same key, to the restarted server (sled) or to the other server over the same database
//! (PostgreSQL), and every counter is exactly the number of calls its client made: the
//! unanswered one applied once, whether or not it had committed before the kill. A retry of an
//! acknowledged call answers its first ETag and counts nothing.

#[path = "../../tests/common/postgres.rs"]
mod postgres_cluster;
mod support;

use std::time::{Duration, Instant};

use support::{Client, ServerProcess};
use trestle_proto::pb;

const TABLE: &str = "Counters";
const CLIENTS: usize = 8;

fn increment(client_no: usize, call: usize) -> pb::PatchEntityRequest {
    pb::PatchEntityRequest {
        table: TABLE.into(),
        partition_key: "counters".into(),
        row_key: format!("c{client_no}"),
        operations: vec![pb::PatchStep {
            step: Some(pb::patch_step::Step::Increment(pb::IncrementStep {
                property: "N".into(),
                by: Some(pb::Value {
                    kind: Some(pb::value::Kind::Int64Value(1)),
                }),
            })),
        }],
        upsert: true,
        idempotency_key: format!("client-{client_no}-call-{call}"),
        ..Default::default()
    }
}

/// The count of counter `row_key`, read through `client`.
async fn counter(client: &mut Client, row_key: String) -> i64 {
    let counted = client
        .get_entity(pb::GetEntityRequest {
            table: TABLE.into(),
            partition_key: "counters".into(),
            row_key,
            ..Default::default()
        })
        .await
        .expect("a counter")
        .into_inner();
    support::int64(&counted, "N")
}

/// What one client saw: the ETag of each answered call, and its unanswered call, if any.
struct Calls {
    answered: Vec<String>,
    unanswered: Option<usize>,
}

/// Counts until a call goes unanswered (the server killed).
async fn count_until_unanswered(mut client: Client, client_no: usize) -> Calls {
    let mut answered = Vec::new();
    loop {
        let call = answered.len();
        match client.patch_entity(increment(client_no, call)).await {
            Ok(reply) => answered.push(reply.into_inner().etag),
            Err(_) => {
                return Calls {
                    answered,
                    unanswered: Some(call),
                }
            }
        }
        if answered.len() == 100_000 {
            return Calls {
                answered,
                unanswered: None,
            };
        }
    }
}

/// Runs the clients on `victim` until it is killed, then retries each unanswered call on
/// `survivor` (which `restart` gives) and checks every counter.
async fn count_through_a_kill(victim: ServerProcess, restart: impl FnOnce() -> ServerProcess) {
    let mut setup = victim.client().await;
    support::create_table(&mut setup, TABLE).await;
    let mut tasks = Vec::new();
    for client_no in 0..CLIENTS {
        let client = victim.client().await;
        tasks.push(tokio::spawn(count_until_unanswered(client, client_no)));
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    victim.kill_9();
    let mut seen = Vec::new();
    for task in tasks {
        seen.push(task.await.unwrap());
    }
    let survivor = restart();
    let mut client = survivor.client().await;
    for (client_no, calls) in seen.iter().enumerate() {
        assert!(calls.answered.len() > 5, "client {client_no} barely ran");
        let mut made = calls.answered.len();
        if let Some(call) = calls.unanswered {
            client
                .patch_entity(increment(client_no, call))
                .await
                .expect("the unanswered call, sent again");
            made += 1;
        }
        let last = calls.answered.len() - 1;
        let again = client
            .patch_entity(increment(client_no, last))
            .await
            .expect("an answered call, sent again");
        assert_eq!(again.into_inner().etag, calls.answered[last]);
        let counted = counter(&mut client, format!("c{client_no}")).await;
        assert_eq!(counted, made as i64, "client {client_no}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_increments_through_a_kill_of_the_sled_server_count_each_call_once() {
    let dir = tempfile::tempdir().unwrap();
    let victim = ServerProcess::start(dir.path());
    let data_dir = dir.path().to_owned();
    count_through_a_kill(victim, move || ServerProcess::start(&data_dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_increments_through_a_kill_of_one_of_two_postgres_servers_count_each_call_once() {
    // (The cluster's programs and its admin connection block: off the runtime's turn.)
    let Some((_cluster, url)) = tokio::task::block_in_place(|| {
        let cluster = postgres_cluster::Postgres::start()?;
        let url = cluster.database("counters");
        Some((cluster, url))
    }) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let start = |n: usize| {
        let data_dir = dir.path().join(format!("unused-{n}"));
        ServerProcess::start_with(&data_dir, &["--store", &url])
    };
    let (victim, survivor) = (start(0), start(1));
    count_through_a_kill(victim, move || survivor).await;
}

/// The SDK with its default policy: each of `CLIENTS` tasks increments its own counter until
/// `stop`; how many calls each made. Any error reaches the application and fails the test.
async fn sdk_increments(endpoint: String, stop: Instant) -> Vec<usize> {
    let client = trestle_client::Client::connect(endpoint).await.unwrap();
    let table = client.table(TABLE);
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|client_no| {
            let table = table.clone();
            tokio::spawn(async move {
                let patch = trestle_client::Patch::new().increment("N", 1i64).upsert();
                let mut calls = 0;
                while Instant::now() < stop {
                    let (call, row) = (calls, ("counters", format!("sdk-{client_no}")));
                    let done: Result<trestle_client::Entity<serde_json::Value>, _> =
                        table.patch(row, &patch).await;
                    if let Err(error) = done {
                        panic!(
                            "call {call} of client {client_no} reached the application: {error}"
                        );
                    }
                    calls += 1;
                }
                calls
            })
        })
        .collect();
    let mut made = Vec::new();
    for task in tasks {
        made.push(task.await.unwrap());
    }
    made
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_s_writes_go_through_a_killed_and_restarted_server_with_no_error_and_once_each() {
    let dir = tempfile::tempdir().unwrap();
    let listen = support::free_port();
    let args = ["--listen", listen.as_str()];
    let server = ServerProcess::start_with(dir.path(), &args);
    support::create_table(&mut server.client().await, TABLE).await;
    let endpoint = format!("http://{listen}");
    let stop = Instant::now() + Duration::from_secs(5);
    let load = tokio::spawn(sdk_increments(endpoint, stop));
    // The supervisor: SIGKILL mid-load, a new process on the same port a moment later; three
    // times, so that some call's commit is durable when its answer is lost.
    let mut server = server;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        server.kill_9();
        tokio::time::sleep(Duration::from_millis(300)).await;
        server = ServerProcess::start_with(dir.path(), &args);
    }
    let restarted = server;
    let made = load.await.expect("no error reached the application");
    let mut client = restarted.client().await;
    for (client_no, made) in made.into_iter().enumerate() {
        let counted = counter(&mut client, format!("sdk-{client_no}")).await;
        assert!(made > 10, "client {client_no} made {made} calls");
        assert_eq!(counted, made as i64, "client {client_no}");
    }
}
