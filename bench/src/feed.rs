//! `change_feed`: the `insert` workload on a table that keeps a change feed, with one follower
//! reading it (`ReadChanges` with `follow`): the inserts' rate beside `insert`'s, and the delay
//! from each insert's answer to the follower receiving its record. `ttl_expire`: a table's
//! entities all expiring at once while point reads run on the main table, and how long the server
//! takes to remove them (counted by their `EXPIRE` records).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use trestle_proto::pb;

use crate::framed::Framed;
use crate::measure::Measurement;
use crate::workloads::{insert_into, load, point_read, Client, Plan};

const TABLE: &str = "FeedBench";

/// The inserts' measurement, and each record's delivery delay in microseconds (0 where the
/// follower had it before the writer had its answer).
pub(crate) async fn change_feed(
    client: &Client,
    framed: &Framed,
    plan: &Plan,
) -> (Measurement, Vec<u32>) {
    let answered: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let create = pb::CreateTableRequest {
        table: TABLE.into(),
        change_feed: true,
        ..Default::default()
    };
    let stop = Arc::new(tokio::sync::Notify::new());
    let follower = {
        let (framed, answered, stop) = (framed.clone(), answered.clone(), stop.clone());
        tokio::spawn(async move {
            // Until the table exists (the inserts create it).
            let mut stream = loop {
                let request = pb::ReadChangesRequest {
                    table: TABLE.into(),
                    follow: true,
                    ..Default::default()
                };
                match framed.changes(request).await {
                    Ok(stream) => break stream,
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            };
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
    let record = {
        let answered = answered.clone();
        move |row_key: String| {
            answered
                .lock()
                .expect("answers")
                .insert(row_key, Instant::now());
        }
    };
    let measurement = insert_into(client, plan, create, record).await;
    // Let the follower drain, then stop it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.notify_one();
    let delays = follower.await.expect("the follower");
    (measurement, delays)
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
