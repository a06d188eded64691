//! Trestle over a highly available PostgreSQL (`tests/ha/cluster`: one etcd member and three
//! PostgreSQL 15 nodes under Patroni, synchronous replication), two Trestle servers sharing it
//! under mixed load: single inserts, 100-insert transactions, patch increments counted by markers
//! written in the same transaction, bank transfers across partitions and tables, and readers.
//!
//! The primary's machine dies (its Patroni and PostgreSQL get SIGKILL); then, once the dead node is
//! back as a standby, a planned switchover. Throughout, every request answers at once or within
//! its deadline, and every failure is `ServiceUnavailable`; afterwards not one acknowledged write
//! is missing, no transaction is there in part, and every counter equals its markers. The time
//! from the kill until writes succeed again is printed. And the SDK with its default settings,
//! given both servers, through the primary's death and a Trestle server's SIGKILL: no error
//! reaches the application, and each call applies once.

#[path = "../../tests/common/bank.rs"]
mod bank;
mod support;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{all_entities, create_table, entity, insert_op, int64, Client, ServerProcess};
use tonic::{Code, Status};
use trestle_proto::pb;

/// Longer than any request may take, failover or not: a request still unanswered then hangs.
const DEADLINE: Duration = Duration::from_secs(10);
/// How long a writer waits after `ServiceUnavailable` before its next request.
const PAUSE: Duration = Duration::from_millis(50);
/// Writers of each kind, spread over the two servers.
const WRITERS: usize = 4;

/// The cluster of `tests/ha/cluster`, stopped when dropped.
struct Cluster {
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts the cluster, or `None` where Patroni or etcd is not installed (said on stderr)
    /// unless `TRESTLE_REQUIRE_HA` is set.
    fn start() -> Option<Cluster> {
        let installed = ["patroni", "patronictl", "etcd"].iter().all(|program| {
            Command::new("sh")
                .args(["-c", &format!("command -v {program}")])
                .output()
                .is_ok_and(|output| output.status.success())
        });
        if !installed {
            assert!(
                std::env::var_os("TRESTLE_REQUIRE_HA").is_none(),
                "TRESTLE_REQUIRE_HA is set but patroni or etcd is not installed"
            );
            eprintln!(
                "SKIPPED a failover test: Debian's patroni and etcd-server are not installed"
            );
            return None;
        }
        let cluster = Cluster {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        cluster.run(&["start"]);
        Some(cluster)
    }

    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/ha/cluster")
    }

    /// Runs the script's `command` on this cluster: what it printed.
    fn run(&self, command: &[&str]) -> String {
        let output = Command::new(Cluster::script())
            .arg(command[0])
            .arg(self.dir.path())
            .args(&command[1..])
            .output()
            .expect("run tests/ha/cluster");
        assert!(
            output.status.success(),
            "tests/ha/cluster {command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout)
            .expect("UTF-8")
            .trim()
            .to_owned()
    }

    fn url(&self) -> String {
        self.run(&["url"])
    }

    fn leader(&self) -> String {
        self.run(&["leader"])
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(Cluster::script())
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}

/// Two Trestle servers over the database `url` (their unused data directories in `dir`), and
/// their endpoints.
fn two_servers(url: &str, dir: &Path) -> (Vec<ServerProcess>, Vec<String>) {
    let servers: Vec<ServerProcess> = (0..2)
        .map(|n| {
            let data_dir = dir.join(format!("unused-{n}"));
            ServerProcess::start_with(&data_dir, &["--store", url])
        })
        .collect();
    let endpoints = servers
        .iter()
        .map(|s| format!("http://{}", s.addr))
        .collect();
    (servers, endpoints)
}

/// One request a worker made: when, and whether it failed.
struct Attempt {
    started: Instant,
    finished: Instant,
    failed: bool,
}

/// What a worker saw: the items of its acknowledged requests, and every request.
struct Log<T> {
    acknowledged: Vec<T>,
    attempts: Vec<Attempt>,
}

/// Runs `request(n)` for n = 1, 2, … until `stop`: every request must answer within
/// [`DEADLINE`], and every failure must be `ServiceUnavailable` (then the worker pauses and goes
/// on; the failed request may or may not have committed).
async fn drive<T, F, Fut>(stop: Instant, mut request: F) -> Log<T>
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let mut log = Log {
        acknowledged: Vec::new(),
        attempts: Vec::new(),
    };
    let mut n = 0;
    while Instant::now() < stop {
        n += 1;
        let started = Instant::now();
        let outcome = tokio::time::timeout(DEADLINE, request(n))
            .await
            .unwrap_or_else(|_| panic!("a request hung past {DEADLINE:?}"));
        let failed = match outcome {
            Ok(item) => {
                log.acknowledged.push(item);
                false
            }
            Err(status) => {
                assert_eq!(
                    status.code(),
                    Code::Unavailable,
                    "a failure other than ServiceUnavailable: {status:?}"
                );
                true
            }
        };
        log.attempts.push(Attempt {
            started,
            finished: Instant::now(),
            failed,
        });
        if failed {
            tokio::time::sleep(PAUSE).await;
        }
    }
    log
}

fn int64_value(n: i64) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::Int64Value(n)),
    }
}

/// Writer `w` inserts single entities into `Writes`, partition `w<w>`: their row keys.
async fn single_writes(client: Client, w: usize, run: Run) -> Log<String> {
    drive(run.stop, move |n| {
        let row_key = format!("{}{n:08}", run.phase);
        let request = pb::InsertEntityRequest {
            table: "Writes".into(),
            entity: Some(entity(&format!("w{w}"), &row_key, &[("N", n as i64)])),
            ..Default::default()
        };
        let mut client = client.clone();
        async move { client.insert_entity(request).await.map(|_| row_key) }
    })
    .await
}

/// Writer `w` inserts 100 entities at a time, each batch a partition of `Batches` of its own:
/// the batches' partition keys.
async fn batch_writes(client: Client, w: usize, run: Run) -> Log<String> {
    drive(run.stop, move |n| {
        let partition_key = format!("b{w}-{}{n:06}", run.phase);
        let operations = (0..100)
            .map(|row| insert_op(entity(&partition_key, &format!("{row:03}"), &[("N", row)])))
            .collect();
        let request = pb::SubmitTransactionRequest {
            idempotency_key: String::new(),
            table: "Batches".into(),
            partition_key: partition_key.clone(),
            operations,
        };
        let mut client = client.clone();
        async move {
            client
                .submit_transaction(request)
                .await
                .map(|_| partition_key)
        }
    })
    .await
}

/// Writer `w` adds 1 to `Count` of row `total` of partition `c<w>` of `Counters` with a patch,
/// and inserts a marker row in the same transaction: the markers' row keys.
async fn increments(client: Client, w: usize, run: Run) -> Log<String> {
    use pb::transaction_operation::Operation;
    drive(run.stop, move |n| {
        let marker = format!("m{}{n:08}", run.phase);
        let increment = pb::PatchStep {
            step: Some(pb::patch_step::Step::Increment(pb::IncrementStep {
                property: "Count".into(),
                by: Some(int64_value(1)),
            })),
        };
        let patch = pb::TransactionOperation {
            operation: Some(Operation::Patch(pb::PatchOperation {
                row_key: "total".into(),
                operations: vec![increment],
                upsert: true,
                ..Default::default()
            })),
        };
        let partition_key = format!("c{w}");
        let request = pb::SubmitTransactionRequest {
            idempotency_key: String::new(),
            table: "Counters".into(),
            partition_key: partition_key.clone(),
            operations: vec![patch, insert_op(entity(&partition_key, &marker, &[]))],
        };
        let mut client = client.clone();
        async move { client.submit_transaction(request).await.map(|_| marker) }
    })
    .await
}

/// Reader `w` reads counter `c<w>` again and again: it never goes back.
async fn counter_reads(client: Client, w: usize, run: Run) -> Log<i64> {
    let highest = Arc::new(AtomicI64::new(0));
    drive(run.stop, move |_| {
        let request = pb::GetEntityRequest {
            table: "Counters".into(),
            partition_key: format!("c{w}"),
            row_key: "total".into(),
            select: vec![],
        };
        let (mut client, highest) = (client.clone(), highest.clone());
        async move {
            let count = match client.get_entity(request).await {
                Ok(found) => int64(&found.into_inner(), "Count"),
                Err(status) if status.code() == Code::NotFound => 0,
                Err(status) => return Err(status),
            };
            let seen = highest.fetch_max(count, Ordering::SeqCst);
            assert!(
                count >= seen,
                "counter c{w} went back from {seen} to {count}"
            );
            Ok(count)
        }
    })
    .await
}

/// One phase of load: a letter that keeps its keys apart from other phases', and its end.
#[derive(Debug, Clone, Copy)]
struct Run {
    phase: char,
    stop: Instant,
}

/// Everything the workers of one phase saw.
#[derive(Default)]
struct Seen {
    writes: Vec<(String, String)>,
    batches: Vec<String>,
    markers: Vec<(String, String)>,
    transfers: Vec<bank::Transfer>,
    attempts: Vec<Attempt>,
    failed: usize,
}

/// Runs every kind of worker on `endpoints` for `run`, and `disrupt` meanwhile: what the workers
/// saw, and the instant `disrupt` gave (when the disruption was done).
async fn load_during(
    clients: &[Client],
    endpoints: &[String],
    run: Run,
    disrupt: impl Future<Output = Instant>,
) -> (Seen, Instant) {
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let client = clients[w % clients.len()].clone();
        tasks.push(tokio::spawn(async move {
            tokio::join!(
                single_writes(client.clone(), w, run),
                batch_writes(client.clone(), w, run),
                increments(client.clone(), w, run),
                counter_reads(client, w, run),
            )
        }));
    }
    let transfers: Vec<_> = (0..WRITERS)
        .map(|n| {
            let endpoint = endpoints[n % endpoints.len()].clone();
            // (Each phase's transfer records apart: clients numbered on from the last phase's.)
            let client_no = n + WRITERS * usize::from(run.phase as u8 - b'a');
            tokio::spawn(bank::transfer_until(
                endpoint,
                client_no,
                run.stop,
                bank::Unavailable::RideThrough,
            ))
        })
        .collect();
    let disrupted = disrupt.await;
    let mut seen = Seen::default();
    for (w, task) in tasks.into_iter().enumerate() {
        let (writes, batches, markers, reads) = task.await.expect("a worker failed");
        let partition = |prefix: &str, row_key: String| (format!("{prefix}{w}"), row_key);
        seen.writes
            .extend(writes.acknowledged.into_iter().map(|rk| partition("w", rk)));
        seen.batches.extend(batches.acknowledged);
        seen.markers.extend(
            markers
                .acknowledged
                .into_iter()
                .map(|rk| partition("c", rk)),
        );
        for attempts in [writes.attempts, batches.attempts, markers.attempts] {
            seen.attempts.extend(attempts);
        }
        seen.failed += reads.attempts.iter().filter(|a| a.failed).count();
    }
    for task in transfers {
        let (done, failure) = task.await.expect("a bank client failed");
        assert!(failure.is_none(), "a transfer failed: {failure:?}");
        seen.transfers.extend(done);
    }
    seen.failed += seen.attempts.iter().filter(|a| a.failed).count();
    (seen, disrupted)
}

/// How long after `at` writes succeeded again: the first acknowledged write begun after it.
fn writes_back_after(seen: &Seen, at: Instant) -> Duration {
    seen.attempts
        .iter()
        .filter(|a| !a.failed && a.started >= at)
        .map(|a| a.finished - at)
        .min()
        .expect("writes succeeded again after the disruption")
}

/// The longest time between two acknowledged writes.
fn longest_pause_in_writes(seen: &Seen) -> Duration {
    let mut acknowledged: Vec<Instant> = seen
        .attempts
        .iter()
        .filter(|a| !a.failed)
        .map(|a| a.finished)
        .collect();
    acknowledged.sort();
    acknowledged
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .max()
        .unwrap_or_default()
}

/// Checks the store against everything acknowledged in `phases`.
async fn check(client: &mut Client, phases: &[Seen]) {
    let writes = all_entities(client, "Writes").await;
    let batches = all_entities(client, "Batches").await;
    let counters = all_entities(client, "Counters").await;
    for seen in phases {
        for key in &seen.writes {
            assert!(writes.contains_key(key), "acknowledged insert {key:?} lost");
        }
        for key in &seen.markers {
            assert!(
                counters.contains_key(key),
                "acknowledged increment {key:?} lost"
            );
        }
        for partition_key in &seen.batches {
            assert!(
                batches.keys().any(|(pk, _)| pk == partition_key),
                "acknowledged batch {partition_key} lost"
            );
        }
    }
    let mut batch_sizes = BTreeMap::<&str, usize>::new();
    for (pk, _) in batches.keys() {
        *batch_sizes.entry(pk).or_default() += 1;
    }
    for (pk, rows) in batch_sizes {
        assert_eq!(rows, 100, "batch {pk} is there in part");
    }
    for w in 0..WRITERS {
        let pk = format!("c{w}");
        let markers = counters
            .keys()
            .filter(|(p, rk)| *p == pk && rk.starts_with('m'))
            .count() as i64;
        let count = counters
            .get(&(pk.clone(), "total".to_owned()))
            .map_or(0, |total| int64(total, "Count"));
        assert_eq!(count, markers, "counter {pk} differs from its markers");
    }
    let transfers: Vec<bank::Transfer> = phases
        .iter()
        .flat_map(|seen| seen.transfers.clone())
        .collect();
    bank::check(client, &transfers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_dies_then_a_switchover_and_nothing_acknowledged_is_lost() {
    let Some(cluster) = tokio::task::block_in_place(Cluster::start) else {
        return;
    };
    let url = cluster.url();
    let dir = tempfile::tempdir().unwrap();
    let (servers, endpoints) = two_servers(&url, dir.path());
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(server.client().await);
    }
    for table in ["Writes", "Batches", "Counters"] {
        create_table(&mut clients[0], table).await;
    }
    bank::open(&mut bank::connect(&endpoints[1]).await).await;

    // The primary's machine dies 3 s into the load.
    let dead = cluster.leader();
    let start = Instant::now();
    let failover = Run {
        phase: 'a',
        stop: start + Duration::from_secs(28),
    };
    let (failover, killed_at) = load_during(&clients, &endpoints, failover, async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        tokio::task::block_in_place(|| cluster.run(&["kill", &dead]));
        Instant::now()
    })
    .await;
    let recovered = writes_back_after(&failover, killed_at);
    eprintln!(
        "failover: writes succeeded again {:.1} s after the primary's SIGKILL ({} requests \
         answered ServiceUnavailable meanwhile; {} writes acknowledged)",
        recovered.as_secs_f64(),
        failover.failed,
        failover.attempts.len() - failover.failed,
    );
    assert_ne!(cluster.leader(), dead, "a standby took over");
    assert!(
        recovered < Duration::from_secs(20),
        "writes were refused for {recovered:?} after the kill"
    );

    // The dead node comes back and rejoins as a standby; then a planned switchover.
    tokio::task::block_in_place(|| {
        cluster.run(&["revive", &dead]);
        cluster.run(&["ready", "90"]);
    });
    assert_ne!(
        cluster.leader(),
        dead,
        "the revived node rejoined as a standby"
    );
    let switchover = Run {
        phase: 'b',
        stop: Instant::now() + Duration::from_secs(15),
    };
    let (switchover, _) = load_during(&clients, &endpoints, switchover, async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        tokio::task::block_in_place(|| cluster.run(&["switchover"]));
        Instant::now()
    })
    .await;
    eprintln!(
        "switchover: no write was acknowledged for {:.1} s ({} requests answered \
         ServiceUnavailable meanwhile)",
        longest_pause_in_writes(&switchover).as_secs_f64(),
        switchover.failed,
    );

    let mut client = clients[1].clone();
    check(&mut client, &[failover, switchover]).await;
}

/// Tasks of the SDK's failover test, each doing every kind of call in turn.
const SDK_TASKS: usize = 16;
/// Appends one list entity takes before the next begins.
const LIST_LENGTH: usize = 50;

/// What one task's calls acknowledged.
#[derive(Debug, Default)]
struct SdkCalls {
    increments: i64,
    appends: Vec<i64>,
    transfers: i64,
}

/// One task of the SDK with its default settings until `stop`: increments of its counter,
/// appends to its lists, and transfers (two increments, -1 and +1, in one `TransactWrite` across
/// tables). Any error reaches the application: the task panics.
async fn sdk_calls(client: trestle_client::Client, task: usize, stop: Instant) -> SdkCalls {
    let mut calls = SdkCalls::default();
    let by = |n: i64| trestle_client::Patch::new().increment("N", n).upsert();
    let (counters, lists) = (client.table("Counters"), client.table("Lists"));
    let one = by(1);
    let mut call = 0i64;
    while Instant::now() < stop {
        let done = match call % 3 {
            0 => {
                let key = ("counters", format!("c{task}"));
                let done = counters.patch::<serde_json::Value>(key, &one).await;
                done.map(|_| calls.increments += 1)
            }
            1 => {
                let n = calls.appends.len();
                let key = ("lists", format!("l{task}-{:04}", n / LIST_LENGTH));
                let append = trestle_client::Patch::new().append("L", &call).upsert();
                let done = lists.patch::<serde_json::Value>(key, &append).await;
                done.map(|_| calls.appends.push(call))
            }
            _ => {
                let mut transfer = client.transaction();
                transfer
                    .patch("Accounts", ("from", format!("a{task}")), &by(-1))
                    .and_then(|tx| tx.patch("Ledger", ("to", format!("a{task}")), &by(1)))
                    .expect("a valid transaction");
                transfer.commit().await.map(|_| calls.transfers += 1)
            }
        };
        if let Err(error) = done {
            panic!("call {call} of task {task} reached the application: {error}");
        }
        call += 1;
    }
    calls
}

/// The `N` of `table`'s entity `(pk, rk)`, 0 if it is absent.
async fn n_of(client: &mut Client, table: &str, pk: &str, rk: &str) -> i64 {
    let found = client
        .get_entity(pb::GetEntityRequest {
            table: table.into(),
            partition_key: pk.into(),
            row_key: rk.into(),
            ..Default::default()
        })
        .await;
    match found {
        Ok(entity) => int64(&entity.into_inner(), "N"),
        Err(status) if status.code() == Code::NotFound => 0,
        Err(status) => panic!("reading {table}: {status:?}"),
    }
}

/// The SDK with its default settings against both servers (`ClientBuilder::endpoints`), 16 tasks
/// of increments, appends and transfers, while the primary's machine dies and then one Trestle
/// server is SIGKILLed: no error reaches the application, every counter equals its acknowledged
/// calls, every list holds each acknowledged append once and in order, and every transfer's two
/// sides match.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_rides_through_a_primary_failover_and_a_killed_server_with_no_error() {
    let Some(cluster) = tokio::task::block_in_place(Cluster::start) else {
        return;
    };
    let url = cluster.url();
    let dir = tempfile::tempdir().unwrap();
    let (mut servers, endpoints) = two_servers(&url, dir.path());
    let mut setup = servers[1].client().await;
    for table in ["Counters", "Lists", "Accounts", "Ledger"] {
        create_table(&mut setup, table).await;
    }
    let sdk = trestle_client::Client::builder()
        .endpoints(endpoints)
        .connect()
        .await
        .unwrap();
    let stop = Instant::now() + Duration::from_secs(30);
    let tasks: Vec<_> = (0..SDK_TASKS)
        .map(|task| tokio::spawn(sdk_calls(sdk.clone(), task, stop)))
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let dead = cluster.leader();
    tokio::task::block_in_place(|| cluster.run(&["kill", &dead]));
    tokio::time::sleep(Duration::from_secs(10)).await;
    servers.remove(0).kill_9();
    let mut client = servers[0].client().await;
    for (task, calls) in tasks.into_iter().enumerate() {
        let calls = calls.await.expect("no error reached the application");
        assert!(
            calls.increments > 0 && calls.transfers > 0,
            "task {task}: {calls:?}"
        );
        let counted = n_of(&mut client, "Counters", "counters", &format!("c{task}")).await;
        assert_eq!(counted, calls.increments, "task {task}'s counter");
        let from = n_of(&mut client, "Accounts", "from", &format!("a{task}")).await;
        let to = n_of(&mut client, "Ledger", "to", &format!("a{task}")).await;
        assert_eq!(
            (from, to),
            (-calls.transfers, calls.transfers),
            "task {task}'s transfers"
        );
        let mut appended = Vec::new();
        for list in 0..calls.appends.len().div_ceil(LIST_LENGTH) {
            let entity = client
                .get_entity(pb::GetEntityRequest {
                    table: "Lists".into(),
                    partition_key: "lists".into(),
                    row_key: format!("l{task}-{list:04}"),
                    ..Default::default()
                })
                .await
                .expect("an acknowledged list")
                .into_inner();
            let Some(pb::value::Kind::ArrayValue(array)) = &entity.properties["L"].kind else {
                panic!("L is not an array");
            };
            appended.extend(array.values.iter().map(|value| match value.kind {
                Some(pb::value::Kind::Int64Value(n)) => n,
                ref other => panic!("an element is {other:?}"),
            }));
        }
        assert_eq!(
            appended, calls.appends,
            "task {task}'s appends, each once, in order"
        );
    }
}
