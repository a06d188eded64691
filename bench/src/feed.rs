//! `change_feed`: the `insert` workload on a table that keeps a change feed, with one follower
//! reading it (`ReadChanges` with `follow`): the inserts' rate beside `insert`'s, and the delay
//! from each insert's answer to the follower receiving its record.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use trestle_proto::pb;

use crate::measure::Measurement;
use crate::workloads::{insert_into, Client, Plan};

const TABLE: &str = "FeedBench";

/// The inserts' measurement, and each record's delivery delay in microseconds (0 where the
/// follower had it before the writer had its answer).
pub(crate) async fn change_feed(client: &Client, plan: &Plan) -> (Measurement, Vec<u32>) {
    let answered: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let create = pb::CreateTableRequest {
        table: TABLE.into(),
        change_feed: true,
        ..Default::default()
    };
    let stop = Arc::new(tokio::sync::Notify::new());
    let follower = {
        let (mut client, answered, stop) = (client.clone(), answered.clone(), stop.clone());
        tokio::spawn(async move {
            // Until the table exists (the inserts create it).
            let mut stream = loop {
                let request = pb::ReadChangesRequest {
                    table: TABLE.into(),
                    follow: true,
                    ..Default::default()
                };
                match client.read_changes(request).await {
                    Ok(stream) => break stream.into_inner(),
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
