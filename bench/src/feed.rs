//! `change_feed`: the `insert` workload on a table that keeps a change feed, with one follower
//! reading it (`ReadChanges` with `follow`), against the same inserts into a table without one,
//! measured in turns (without, with, with, without: a store that grows as it is written slows
//! every later run a little, which the turns cancel); and the delay from each insert's answer to
//! the follower receiving its record. `ttl_expire`: a table's entities all expiring at once while
//! point reads run on the main table, and how long the server takes to remove them (counted by
//! their `EXPIRE` records). `feed_followers_idle`: point reads with and without 1,000 caught-up
//! followers of an idle feed open, and the server's cores while only the followers are open.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use trestle_proto::pb;

use crate::framed::Framed;
use crate::measure::{Measurement, ProcessSample};
use crate::workloads::{create_table, insert_rows, load, point_read, Client, Plan};

const TABLE: &str = "FeedBench";
/// The table the same inserts go to without a feed.
const PLAIN_TABLE: &str = "FeedlessBench";

/// What `change_feed` measured.
pub(crate) struct FeedRun {
    /// The inserts into the table with a feed and a follower.
    pub(crate) with_feed: Measurement,
    /// The same inserts into a table without a feed, in the turns between.
    pub(crate) without_feed: Measurement,
    /// Each record's delivery delay in microseconds (0 where the follower had it before the
    /// writer had its answer).
    pub(crate) delays_us: Vec<u32>,
}

/// Inserts with and without a feed, in turns of half the plan's duration each, while one follower
/// reads the feed table.
pub(crate) async fn change_feed(client: &Client, framed: &Framed, plan: &Plan) -> FeedRun {
    let answered: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    create_table(client, TABLE, true).await;
    create_table(client, PLAIN_TABLE, false).await;
    let stop = Arc::new(tokio::sync::Notify::new());
    let follower = {
        let (framed, answered, stop) = (framed.clone(), answered.clone(), stop.clone());
        tokio::spawn(async move {
            let request = pb::ReadChangesRequest {
                table: TABLE.into(),
                follow: true,
                ..Default::default()
            };
            let mut stream = framed.changes(request).await.expect("follow the feed");
            let mut delays = Vec::new();
            loop {
                let batch = tokio::select! {
                    message = stream.message() => match message {
                        Ok(Some(batch)) => batch,
                        _ => break,
                    },
                    () = stop.notified() => break,
                };
                let received = Instant::now();
                let mut answered = answered.lock().expect("answers");
                for change in batch.changes {
                    let delay = answered
                        .remove(&change.row_key)
                        .map_or(Duration::ZERO, |at| received.saturating_duration_since(at));
                    delays.push(delay.as_micros().min(u128::from(u32::MAX)) as u32);
                }
            }
            delays
        })
    };
    // Both tables' writers keep the same book of answers, so that they cost the client alike.
    let record = move |row_key: String| {
        answered
            .lock()
            .expect("answers")
            .insert(row_key, Instant::now());
    };
    let (warmup, turn) = (plan.warmup, plan.duration / 2);
    let mut turns = Vec::new();
    for (table, prefix) in [
        (PLAIN_TABLE, "a"),
        (TABLE, "b"),
        (TABLE, "c"),
        (PLAIN_TABLE, "d"),
    ] {
        let run = insert_rows(client, table, prefix, warmup, turn, record.clone()).await;
        turns.push(run);
    }
    // Let the follower drain, then stop it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.notify_one();
    let delays_us = follower.await.expect("the follower");
    let [first, with_1, with_2, last] = <[Measurement; 4]>::try_from(turns).expect("four turns");
    FeedRun {
        with_feed: with_1.merged(with_2),
        without_feed: first.merged(last),
        delays_us,
    }
}

/// The caught-up followers `feed_followers_idle` opens.
pub(crate) const IDLE_FOLLOWERS: usize = 1_000;
/// The table they follow.
const IDLE_TABLE: &str = "IdleFeedBench";

/// What `feed_followers_idle` measured.
pub(crate) struct IdleRun {
    /// Point reads of the main table beside the followers.
    pub(crate) with: Measurement,
    /// The same before they were opened.
    pub(crate) without: Measurement,
    /// The server's cores over three seconds with only the followers open (unknown for a server
    /// this benchmark did not start).
    pub(crate) idle_cores: Option<f64>,
}

/// Point reads, then [`IDLE_FOLLOWERS`] followers of a table whose feed stays idle opened over 16
/// connections of their own (a connection holds at most 64 streams), the server's cores with only
/// them open, and point reads again beside them.
pub(crate) async fn followers_idle(
    client: &Client,
    endpoint: &str,
    plan: &Plan,
    sample: impl Fn() -> Option<ProcessSample>,
) -> IdleRun {
    create_table(client, IDLE_TABLE, true).await;
    let record = pb::InsertEntityRequest {
        idempotency_key: String::new(),
        table: IDLE_TABLE.into(),
        entity: Some(pb::Entity {
            partition_key: "p".into(),
            row_key: "r".into(),
            ..Default::default()
        }),
        return_no_content: true,
    };
    client
        .clone()
        .insert_entity(record)
        .await
        .expect("a record");
    let without = point_read(client, plan).await;
    let mut followers = Vec::with_capacity(IDLE_FOLLOWERS);
    for connection in 0..16 {
        let mut own = Client::connect(endpoint.to_owned()).await.expect("connect");
        let share = IDLE_FOLLOWERS / 16 + usize::from(connection < IDLE_FOLLOWERS % 16);
        for _ in 0..share {
            let request = pb::ReadChangesRequest {
                table: IDLE_TABLE.into(),
                follow: true,
                ..Default::default()
            };
            let mut stream = own
                .read_changes(request)
                .await
                .expect("follow")
                .into_inner();
            stream.message().await.expect("the first batch");
            followers.push(stream);
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = sample();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle_cores = before.zip(sample()).map(|(a, b)| b.cores_since(&a));
    let with = point_read(client, plan).await;
    drop(followers);
    IdleRun {
        with,
        without,
        idle_cores,
    }
}

/// The table whose entities expire together.
const EXPIRING: &str = "ExpireBench";

/// Point reads of the main table (loaded already) while every entity of a table as large expires
/// at once; and how long after the expiry began the last one was removed (`None` if not within
/// two minutes).
pub(crate) async fn ttl_expire(
    client: &Client,
    framed: &Framed,
    plan: &Plan,
) -> (Measurement, Option<Duration>) {
    load(client, EXPIRING, plan.partitions, plan.rows_per_partition).await;
    let mut c = client.clone();
    // The feed from now on holds only the removals; then every entity (written over a second
    // ago) expires at once.
    c.set_change_feed(pb::SetChangeFeedRequest {
        table: EXPIRING.into(),
        enabled: true,
        retention_seconds: 3600,
        ..Default::default()
    })
    .await
    .expect("feed");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    c.set_time_to_live(pb::SetTimeToLiveRequest {
        table: EXPIRING.into(),
        enabled: true,
        default_seconds: 1,
    })
    .await
    .expect("time to live");
    let expiring_since = Instant::now();
    let total = plan.entities() as usize;
    let counting = {
        let framed = framed.clone();
        tokio::spawn(async move {
            let request = pb::ReadChangesRequest {
                table: EXPIRING.into(),
                follow: true,
                ..Default::default()
            };
            let mut stream = framed.changes(request).await.ok()?;
            let mut removed = 0;
            while removed < total {
                let batch = tokio::time::timeout(Duration::from_secs(120), stream.message())
                    .await
                    .ok()?
                    .ok()??;
                removed += batch.changes.len();
            }
            Some(expiring_since.elapsed())
        })
    };
    let measurement = point_read(client, plan).await;
    let gone = counting.await.ok().flatten();
    (measurement, gone)
}

/// The table `feed_group_4` writes and its group reads.
const GROUP_TABLE: &str = "FeedGroupBench";

/// What `feed_group_4` measured.
pub(crate) struct GroupRun {
    /// The inserts (16 clients).
    pub(crate) inserts: Measurement,
    /// Changes the group handled a second while the inserts were measured.
    pub(crate) consumed_per_s: f64,
    /// Each measured insert's delay from its answer to its handling, in microseconds.
    pub(crate) delays_us: Vec<u32>,
}

/// `feed_group_4`: 16 clients insert into a table with a feed while 4 workers of one group of
/// the SDK's feed processor (leases, a checkpoint committed per batch) consume it: the rate they
/// handle changes at beside the insert rate, and each insert's delay from its answer to its
/// handling.
pub(crate) async fn feed_group(endpoint: &str, client: &Client, plan: &Plan) -> GroupRun {
    use trestle_client::{ChangeBatch, CrossTransaction, FeedProcessor, Properties};
    create_table(client, GROUP_TABLE, true).await;
    let sdk = trestle_client::Client::connect(endpoint.to_owned())
        .await
        .expect("connect the group");
    let answered: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let handled: Arc<Mutex<Vec<(Instant, u32)>>> = Arc::default();
    let handler = {
        let (answered, handled) = (answered.clone(), handled.clone());
        move |batch: ChangeBatch<Properties>, tx: CrossTransaction| {
            let now = Instant::now();
            let mut answered = answered.lock().expect("answers");
            let mut handled = handled.lock().expect("handled");
            for change in &batch.changes {
                let delay = (answered.remove(&change.key.row_key))
                    .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
                handled.push((now, delay.as_micros().min(u128::from(u32::MAX)) as u32));
            }
            async move { Ok(tx) }
        }
    };
    let processor = FeedProcessor::builder(&sdk.table(GROUP_TABLE), "bench")
        .workers(4)
        .batch_size(500)
        .handler(handler)
        .start()
        .expect("start the group");
    // Measured once the group has shared its ranges out (each worker its 4).
    wait_until_shared(&sdk, 4, 16).await;
    let record = move |row_key: String| {
        let mut answered = answered.lock().expect("answers");
        answered.insert(row_key, Instant::now());
    };
    let measured_from = Instant::now() + plan.warmup;
    let times = (plan.warmup, plan.duration);
    let inserts = crate::workloads::insert_rows_by(client, GROUP_TABLE, 16, times, record).await;
    let measured_to = Instant::now();
    // Let the group catch up, then stop it.
    let total = inserts.ops as usize;
    let deadline = Instant::now() + Duration::from_secs(30);
    while handled.lock().expect("handled").len() < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    processor.stop().await.expect("the group stops");
    let handled = std::mem::take(&mut *handled.lock().expect("handled"));
    let in_window = |at: &Instant| *at >= measured_from && *at <= measured_to;
    let consumed = handled.iter().filter(|(at, _)| in_window(at)).count();
    let seconds = measured_to
        .saturating_duration_since(measured_from)
        .as_secs_f64();
    GroupRun {
        inserts,
        consumed_per_s: consumed as f64 / seconds.max(f64::EPSILON),
        delays_us: handled
            .iter()
            .filter(|(at, _)| in_window(at))
            .map(|(_, us)| *us)
            .collect(),
    }
}

/// Waits (up to 30 s) until `workers` workers each hold `ranges / workers` of the group's
/// ranges on the server's view (`ListConsumers`).
async fn wait_until_shared(sdk: &trestle_client::Client, workers: usize, ranges: usize) {
    let balanced_by = Instant::now() + Duration::from_secs(30);
    while Instant::now() < balanced_by {
        let groups = match sdk.table(GROUP_TABLE).consumers().await {
            Err(error) if error.is_not_found() => Vec::new(),
            read => read.expect("the group").groups,
        };
        let mut held: HashMap<String, usize> = HashMap::new();
        for range in groups.iter().flat_map(|group| &group.ranges) {
            let holder = range.holder.clone().unwrap_or_default();
            *held.entry(holder).or_default() += 1;
        }
        let share = ranges / workers;
        if held.len() == workers && !held.contains_key("") && held.values().all(|n| *n == share) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
