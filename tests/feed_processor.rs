//! The SDK's change-feed processor on either store: workers of one group sum a table's inserts
//! into a totals entity with each batch's checkpoint in the same transaction, while one worker
//! process is SIGKILLed mid-flight (nothing handed back) and another joins: the totals come
//! out exact (each change's effect once), the newcomer gets its share within two lease times,
//! and a worker that paused past its lease time cannot commit once its lease moved; several
//! workers in one process, batches in chunks of the batch size, each range's lag, and the
//! server's view of the group (`ListConsumers`).

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TestServer;
use trestle_client::{
    ChangeBatch, ChangeKind, Client, CrossTransaction, FeedProcessor, Patch, Properties,
};
use trestle_proto::pb;

const SALES: &str = "Sales";
const TOTALS: &str = "Totals";
const LEASE_TIME: Duration = Duration::from_secs(2);

/// How a worker process is told its endpoint, name and first-batch pause (in milliseconds).
const WORKER_ENV: &str = "TRESTLE_FEED_WORKER";

/// A worker in a process of its own (this test binary running [`worker_process`]), until told
/// to stop (its stdin closed: it stops gracefully) or killed (SIGKILL).
struct Worker {
    name: String,
    process: Option<Child>,
}

impl Worker {
    /// Starts worker `name` of the group against the server at `endpoint`; its handler sleeps
    /// `pause` in its first batch.
    fn start(endpoint: String, name: &str, pause: Duration) -> Worker {
        let process = Command::new(std::env::current_exe().unwrap())
            .args(["worker_process", "--exact", "--ignored", "--nocapture"])
            .args(["--test-threads=1", "--quiet"])
            .env(
                WORKER_ENV,
                format!("{endpoint} {name} {}", pause.as_millis()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Worker {
            name: name.to_owned(),
            process: Some(process),
        }
    }

    /// Kills the worker's process (`die`: SIGKILL, nothing handed back) or stops it, which must
    /// then end well.
    fn end(&mut self, die: bool) {
        let Some(mut process) = self.process.take() else {
            return;
        };
        if die {
            process.kill().unwrap();
        }
        drop(process.stdin.take());
        let ended = process.wait().unwrap();
        assert!(die || ended.success(), "worker {} ended {ended}", self.name);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }
}

/// A worker process's body ([`Worker::start`] runs this test binary for it): a worker of the
/// group until its stdin closes, then stopped gracefully. Started any other way, it does nothing.
#[test]
#[ignore = "the body of a worker process, which Worker::start runs"]
fn worker_process() {
    let Ok(told) = std::env::var(WORKER_ENV) else {
        return;
    };
    let [endpoint, name, pause]: [&str; 3] =
        told.split(' ').collect::<Vec<_>>().try_into().unwrap();
    let pause = Duration::from_millis(pause.parse().unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let client = Client::connect(endpoint.to_owned()).await.unwrap();
        let paused = Arc::new(AtomicBool::new(pause.is_zero()));
        let handler = move |batch: ChangeBatch<Properties>, tx: CrossTransaction| {
            let paused = paused.clone();
            async move { sum(batch, tx, &paused, pause).await }
        };
        let processor = FeedProcessor::builder(&client.table(SALES), "totals")
            .ranges(8)
            .lease_time(LEASE_TIME)
            .worker_name(name)
            .handler(handler)
            .start()
            .unwrap();
        let closed = tokio::task::spawn_blocking(|| {
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new())
        });
        let _ = closed.await;
        processor.stop().await.unwrap();
    });
}

/// The handler: each insert's `Amount` added to the total, and counted, in the batch's
/// transaction (after `pause`, the first time, if not `paused` yet).
async fn sum(
    batch: ChangeBatch<Properties>,
    mut tx: CrossTransaction,
    paused: &AtomicBool,
    pause: Duration,
) -> trestle_client::Result<CrossTransaction> {
    if !paused.swap(true, Ordering::SeqCst) {
        tokio::time::sleep(pause).await;
    }
    let (mut total, mut count) = (0i64, 0i64);
    for change in &batch.changes {
        if change.kind == ChangeKind::Insert {
            let amount = change.entity.as_ref().unwrap().value.get("Amount").cloned();
            total += match amount {
                Some(trestle_client::Value::Int64(n)) => n,
                other => panic!("Amount is {other:?}"),
            };
            count += 1;
        }
    }
    let patch = Patch::new()
        .increment("Sum", total)
        .increment("Count", count)
        .upsert();
    tx.patch(TOTALS, ("t", "all"), &patch)?;
    Ok(tx)
}

async fn setup(server: &TestServer) -> Client {
    let sdk = server.sdk().await;
    let mut client = server.client().await;
    let sales = pb::CreateTableRequest {
        table: SALES.into(),
        change_feed: true,
        ..Default::default()
    };
    client.create_table(sales).await.unwrap();
    sdk.table(TOTALS).create().await.unwrap();
    sdk
}

/// Inserts sales `from..to`, each `Amount` its number modulo 97 plus 1: their amounts' sum.
async fn sell(sdk: &Client, from: i64, to: i64) -> i64 {
    let sales = sdk.table(SALES);
    let mut total = 0;
    for n in from..to {
        let amount = n % 97 + 1;
        let sale = Properties::new().with("Amount", trestle_client::Value::Int64(amount));
        sales
            .insert((format!("p{}", n % 30), format!("s{n:05}")), &sale)
            .await
            .unwrap();
        total += amount;
    }
    total
}

/// The totals once `count` inserts are counted (or the deadline passes): (sum, count).
async fn totals_once(sdk: &Client, count: i64, within: Duration) -> (i64, i64) {
    let deadline = Instant::now() + within;
    loop {
        let read = sdk
            .table(TOTALS)
            .get_if_exists::<Properties>(("t", "all"))
            .await
            .unwrap();
        let totals = read.map_or((0, 0), |entity| {
            let number = |name: &str| match entity.value.get(name) {
                Some(trestle_client::Value::Int64(n)) => *n,
                _ => 0,
            };
            (number("Sum"), number("Count"))
        });
        if totals.1 >= count || Instant::now() > deadline {
            return totals;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many leases of the group `worker` holds now (the rows numbered by range; beside them,
/// each worker's row saying it is a member).
async fn leases_of(sdk: &Client, worker: &str) -> usize {
    let leases = (sdk.table("SalesLeases").query::<Properties>())
        .partition("totals")
        .all()
        .await
        .unwrap();
    let owner = trestle_client::Value::String(worker.to_owned());
    leases
        .iter()
        .filter(|lease| lease.key.row_key.parse::<u32>().is_ok())
        .filter(|lease| lease.value.get("Owner") == Some(&owner))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_sums_every_change_once_through_a_dead_worker_and_a_new_one() {
    let server = TestServer::start().await;
    let sdk = setup(&server).await;
    let mut workers: Vec<Worker> = ["a", "b", "c"]
        .iter()
        .map(|name| Worker::start(server.endpoint(), name, Duration::ZERO))
        .collect();
    let mut expected = sell(&sdk, 0, 150).await;
    // Worker b is killed mid-flight: its leases wait out their time, then the others take them.
    workers[1].end(true);
    expected += sell(&sdk, 150, 300).await;
    let (sum, count) = totals_once(&sdk, 300, Duration::from_secs(60)).await;
    assert_eq!((sum, count), (expected, 300), "each change summed once");

    // A new worker gets a share within two lease times, and the sums stay exact.
    workers.push(Worker::start(server.endpoint(), "d", Duration::ZERO));
    let joined = Instant::now();
    while leases_of(&sdk, "d").await == 0 {
        assert!(
            joined.elapsed() < LEASE_TIME * 2 + Duration::from_secs(1),
            "d got no lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    expected += sell(&sdk, 300, 400).await;
    assert_eq!(
        totals_once(&sdk, 400, Duration::from_secs(60)).await,
        (expected, 400)
    );
    // Stopped, a worker hands its leases back at once.
    let d = workers.pop().unwrap();
    let name = d.name.clone();
    let mut d = d;
    d.end(false);
    assert_eq!(leases_of(&sdk, &name).await, 0);
    for worker in &mut workers {
        worker.end(false);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_paused_past_its_lease_cannot_commit_once_the_lease_moved() {
    let server = TestServer::start().await;
    let sdk = setup(&server).await;
    let expected = sell(&sdk, 0, 100).await;
    // p takes every range and pauses in its first batch, past its lease time; q then takes the
    // leases and sums everything; p's batch, committed after, is refused by its lease's ETag.
    let mut p = Worker::start(server.endpoint(), "p", LEASE_TIME * 3);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut q = Worker::start(server.endpoint(), "q", Duration::ZERO);
    assert_eq!(
        totals_once(&sdk, 100, Duration::from_secs(60)).await,
        (expected, 100)
    );
    tokio::time::sleep(LEASE_TIME * 3).await;
    assert_eq!(
        totals_once(&sdk, 100, Duration::ZERO).await,
        (expected, 100),
        "the paused worker's batch was not applied again"
    );
    p.end(false);
    q.end(false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_runs_several_workers_in_chunks_and_tells_each_ranges_lag() {
    let server = TestServer::start().await;
    let sdk = setup(&server).await;
    let expected = sell(&sdk, 0, 120).await;
    let handler = |batch: ChangeBatch<Properties>, tx: CrossTransaction| async move {
        assert!(
            batch.changes.len() <= 7,
            "a chunk of {}",
            batch.changes.len()
        );
        sum(batch, tx, &AtomicBool::new(true), Duration::ZERO).await
    };
    let group = || {
        FeedProcessor::builder(&sdk.table(SALES), "totals")
            .ranges(8)
            .lease_time(LEASE_TIME)
    };
    let refused = group().workers(0).handler(handler).start().unwrap_err();
    assert!(
        refused.to_string().contains("at least one worker"),
        "{refused}"
    );
    let refused = group().ranges(0).handler(handler).start().unwrap_err();
    assert!(
        refused.to_string().contains("1 to 1,024 ranges"),
        "{refused}"
    );
    let refused = group()
        .batch_size(501)
        .handler(handler)
        .start()
        .unwrap_err();
    assert!(
        refused.to_string().contains("1 to 500 changes"),
        "{refused}"
    );
    let processor = group()
        .worker_name("local")
        .workers(2)
        .batch_size(7)
        .handler(handler)
        .start()
        .unwrap();
    assert_eq!(
        totals_once(&sdk, 120, Duration::from_secs(60)).await,
        (expected, 120)
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let lag = processor.lag();
        if lag.len() == 8 && lag.values().all(Duration::is_zero) {
            break;
        }
        assert!(Instant::now() < deadline, "ranges' lag: {lag:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held = leases_of(&sdk, "local-0").await + leases_of(&sdk, "local-1").await;
    assert_eq!(held, 8);
    // The server's view of the group: every range held by one of the two, nothing pending.
    let consumers = sdk.table(SALES).consumers().await.unwrap();
    assert!(consumers.pending_complete);
    let [totals] = &consumers.groups[..] else {
        panic!("groups: {consumers:?}")
    };
    assert_eq!(totals.name, "totals");
    assert_eq!(
        (totals.ranges.iter().map(|range| range.range)).collect::<Vec<_>>(),
        (0..8).collect::<Vec<_>>()
    );
    for range in &totals.ranges {
        let holder = range.holder.as_deref();
        assert!(matches!(holder, Some("local-0" | "local-1")), "{range:?}");
        assert!(
            range.expires_at.is_some() && range.cursor.is_some(),
            "{range:?}"
        );
        assert_eq!(
            (range.pending, range.lag()),
            (0, Duration::ZERO),
            "{range:?}"
        );
    }
    processor.stop().await.unwrap();
    assert_eq!(
        leases_of(&sdk, "local-0").await + leases_of(&sdk, "local-1").await,
        0
    );
    // Stopped, the group holds nothing, and what is sold meanwhile waits in its ranges.
    sell(&sdk, 120, 150).await;
    let consumers = sdk.table(SALES).consumers_in("", "totals").await.unwrap();
    let ranges = &consumers.groups[0].ranges;
    assert!(
        ranges.iter().all(|range| range.holder.is_none()),
        "{ranges:?}"
    );
    assert_eq!(ranges.iter().map(|range| range.pending).sum::<u64>(), 30);
    for range in ranges {
        assert_eq!(
            range.pending > 0,
            range.oldest_pending_at.is_some(),
            "{range:?}"
        );
    }
    // A worker splitting the group's feed otherwise ends at once, having changed nothing.
    let other_count = group().ranges(16).handler(handler).start().unwrap();
    let refused = other_count.stop().await.unwrap_err();
    assert!(refused.to_string().contains(".ranges(8)"), "{refused}");
    // Split while no worker runs, each new range from its old range's checkpoint: a group of
    // 16 then counts what waits, and nothing twice.
    let refused = group().ranges(12).split_ranges().await.unwrap_err();
    assert!(refused.to_string().contains("not 12"), "{refused}");
    group().ranges(16).split_ranges().await.unwrap();
    let split = sdk.table(SALES).consumers_in("", "totals").await.unwrap();
    let ranges = &split.groups[0].ranges;
    assert_eq!(ranges.len(), 16);
    assert_eq!(ranges.iter().map(|range| range.pending).sum::<u64>(), 30);
    let split_group = group()
        .ranges(16)
        .worker_name("split")
        .batch_size(7)
        .handler(handler)
        .start()
        .unwrap();
    let sold = expected + (120..150).map(|n| n % 97 + 1).sum::<i64>();
    assert_eq!(
        totals_once(&sdk, 150, Duration::from_secs(60)).await,
        (sold, 150)
    );
    let running = group().ranges(32).split_ranges().await.unwrap_err();
    assert!(running.to_string().contains("holds a lease"), "{running}");
    split_group.stop().await.unwrap();
    let other = sdk.table(SALES).consumers_in("", "nobody").await.unwrap();
    assert!(other.groups.is_empty(), "{other:?}");
    for group in ["", "nobody"] {
        // Refused up front, whether or not the lease table holds the group.
        let refused = sdk.table(TOTALS).consumers_in("SalesLeases", group).await;
        let refused = refused.unwrap_err().to_string();
        assert!(refused.contains("keeps no change feed"), "{refused}");
    }
}
